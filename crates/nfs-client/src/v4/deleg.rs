//! Delegations an NFSv4.1 client holds (RFC 8881 §10.2, §10.4) and the
//! callback program that answers the server on the session's back
//! channel (RFC 8881 §20): CB_NULL, and CB_COMPOUND with CB_SEQUENCE
//! first (§20.9), CB_RECALL (§20.2) and CB_GETATTR (§20.1).
//!
//! A CB_RECALL is answered at once and the recall handed to the client's
//! user through a channel ([`Delegations::new`]): the user flushes what
//! it wrote under the delegation, turns opens it served locally into
//! real ones (OPEN with CLAIM_DELEG_CUR_FH, §10.4.3) and returns the
//! delegation with DELEGRETURN ([`Session::delegreturn`]), as Linux's
//! client does from its recall work queue.
//!
//! Bounds (the server is a peer too): at most [`MAX_HELD`] delegations
//! are remembered (beyond it [`Delegations::insert`] refuses, and the
//! caller returns the delegation at once; limit `nfs4c.delegations`),
//! each recalled once (a repeated CB_RECALL is answered without a second
//! recall), and the back channel's slots are what CREATE_SESSION asked.
//!
//! [`Session::delegreturn`]: super::Session::delegreturn

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use nfs::v4::attr::FileAttrs;
use nfs::v4::cb::{
    CbCompound4Args, CbCompound4Res, CbSequence4Args, CbSequence4ResOk, NfsCbArgop4, NfsCbResop4,
    CB_COMPOUND, CB_NULL, NFS4_CALLBACK_VERSION,
};
use nfs::v4::{NfsFh4, Nfsstat4, Res4, Sessionid4, Stateid4};
use oncrpc::limits::Limit;
use oncrpc::{CallContext, RpcService, ServiceError};
use tokio::sync::mpsc;
use xdr::{Bounded, XdrBuf};

/// Most delegations one client remembers at once.
pub const MAX_HELD: usize = 4096;

/// The callback program number the client names in CREATE_SESSION
/// (RFC 8881 §18.36.1 `csa_cb_program`; any number the client serves).
pub const CB_PROGRAM: u32 = 0x4000_0001;

/// Back-channel slots asked in CREATE_SESSION (`ca_maxrequests`): how
/// many callbacks the server may run at once (RFC 8881 §20.9.3).
pub const BACK_SLOTS: u32 = 4;

static HELD: Limit = Limit::new("nfs4c.delegations");

/// A delegation: its stateid and whether it is a write delegation
/// (OPEN_DELEGATE_WRITE, RFC 8881 §10.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delegation {
    /// The delegation stateid, usable for READ and WRITE (§8.2.1).
    pub stateid: Stateid4,
    /// A write delegation (else read).
    pub write: bool,
}

/// A recall the server sent (CB_RECALL, RFC 8881 §20.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recall {
    /// The delegated file.
    pub fh: NfsFh4,
    /// The delegation recalled.
    pub deleg: Delegation,
}

#[derive(Debug)]
struct Held {
    deleg: Delegation,
    recalled: bool,
    /// What CB_GETATTR reports (RFC 8881 §10.4.3): the size as this
    /// client knows it and the change attribute at grant, plus one once
    /// it wrote under the delegation.
    size: u64,
    change: u64,
    wrote: bool,
}

/// The delegations of one session, shared by the client's user and its
/// callback service.
#[derive(Debug)]
pub struct Delegations {
    held: Mutex<HashMap<Bytes, Held>>,
    recalls: mpsc::UnboundedSender<Recall>,
    session: Mutex<Option<Sessionid4>>,
    max: usize,
}

impl Delegations {
    /// An empty table holding at most [`MAX_HELD`], and the receiving end
    /// of its recalls.
    pub fn new() -> (Arc<Self>, mpsc::UnboundedReceiver<Recall>) {
        Self::with_max(MAX_HELD)
    }

    /// Like [`Delegations::new`], holding at most `max`.
    pub fn with_max(max: usize) -> (Arc<Self>, mpsc::UnboundedReceiver<Recall>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let me = Self {
            held: Mutex::new(HashMap::new()),
            recalls: tx,
            session: Mutex::new(None),
            max,
        };
        (Arc::new(me), rx)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Bytes, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Names the session whose back channel this serves: CB_SEQUENCE for
    /// another is NFS4ERR_BADSESSION (RFC 8881 §20.9.3). A recovered
    /// session replaces the lost one.
    pub(crate) fn set_session(&self, id: Sessionid4) {
        *self.session.lock().unwrap_or_else(|p| p.into_inner()) = Some(id);
    }

    /// Remembers delegation `d` of file `fh` with the file's `size` and
    /// `change` attribute at grant. `false` (and nothing remembered) when
    /// [`MAX_HELD`] are held: the caller returns it.
    pub fn insert(&self, fh: &NfsFh4, d: Delegation, size: u64, change: u64) -> bool {
        let mut held = self.lock();
        if held.len() >= self.max && !held.contains_key(fh.as_bytes()) {
            HELD.trip(format_args!(
                "a delegation granted beyond the {} held is returned at once",
                self.max
            ));
            return false;
        }
        let h = Held {
            deleg: d,
            recalled: false,
            size,
            change,
            wrote: false,
        };
        held.insert(Bytes::copy_from_slice(fh.as_bytes()), h);
        true
    }

    /// The delegation held on `fh`, unless it is being recalled.
    pub fn get(&self, fh: &NfsFh4) -> Option<Delegation> {
        let held = self.lock();
        held.get(fh.as_bytes())
            .filter(|h| !h.recalled)
            .map(|h| h.deleg)
    }

    /// Forgets the delegation of `fh` (returned or revoked).
    pub fn remove(&self, fh: &NfsFh4) -> Option<Delegation> {
        self.lock().remove(fh.as_bytes()).map(|h| h.deleg)
    }

    /// Delegations held now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every delegation held, for returning them all at the end.
    pub fn drain(&self) -> Vec<(NfsFh4, Delegation)> {
        let mut held = self.lock();
        held.drain().map(|(fh, h)| (NfsFh4(fh), h.deleg)).collect()
    }

    /// Notes a write of `fh` through `end` (or, with `truncate`, a size
    /// set to `end`) under its write delegation: what CB_GETATTR then
    /// reports (RFC 8881 §10.4.3).
    pub fn wrote(&self, fh: &NfsFh4, end: u64, truncate: bool) {
        if let Some(h) = self.lock().get_mut(fh.as_bytes()) {
            h.size = if truncate { end } else { h.size.max(end) };
            h.wrote = true;
        }
    }

    /// The callback program over this table, for the transport that
    /// carries the back channel.
    pub fn service(self: &Arc<Self>) -> CallbackService {
        CallbackService {
            table: Arc::clone(self),
        }
    }

    /// CB_RECALL (RFC 8881 §20.2.3): NFS4_OK and a recall for the user
    /// if the delegation is held; NFS4ERR_BADHANDLE if not (the stateid
    /// is not checked further: the file names the delegation).
    fn recall(&self, fh: &NfsFh4, stateid: &Stateid4) -> Nfsstat4 {
        let mut held = self.lock();
        let Some(h) = held.get_mut(fh.as_bytes()) else {
            return Nfsstat4::NFS4ERR_BADHANDLE;
        };
        if h.deleg.stateid.other != stateid.other {
            return Nfsstat4::NFS4ERR_BAD_STATEID;
        }
        if !h.recalled {
            h.recalled = true;
            let r = Recall {
                fh: fh.clone(),
                deleg: h.deleg,
            };
            let _ = self.recalls.send(r);
        }
        Nfsstat4::NFS4_OK
    }

    /// CB_GETATTR (RFC 8881 §20.1.3): the size and change of a file held
    /// under a write delegation, as this client sees them.
    fn getattr(&self, fh: &NfsFh4) -> Option<(u64, u64)> {
        let held = self.lock();
        let h = held.get(fh.as_bytes()).filter(|h| h.deleg.write)?;
        Some((h.change.wrapping_add(u64::from(h.wrote)), h.size))
    }

    /// CB_SEQUENCE (RFC 8881 §20.9.3): this session, a slot within the
    /// back channel asked for. Replies are not cached (the operations
    /// answered here are idempotent), so the ids are echoed.
    fn sequence(&self, s: &CbSequence4Args) -> Res4<CbSequence4ResOk> {
        let mine = *self.session.lock().unwrap_or_else(|p| p.into_inner());
        if mine != Some(s.sessionid) {
            return Res4::Err(Nfsstat4::NFS4ERR_BADSESSION);
        }
        if s.slotid >= BACK_SLOTS || s.highest_slotid >= BACK_SLOTS {
            return Res4::Err(Nfsstat4::NFS4ERR_BADSLOT);
        }
        Res4::Ok(CbSequence4ResOk {
            sessionid: s.sessionid,
            sequenceid: s.sequenceid,
            slotid: s.slotid,
            highest_slotid: BACK_SLOTS - 1,
            target_highest_slotid: BACK_SLOTS - 1,
        })
    }

    fn answer(&self, op: &NfsCbArgop4) -> NfsCbResop4 {
        match op {
            NfsCbArgop4::Sequence(_) => {
                NfsCbResop4::Sequence(Res4::Err(Nfsstat4::NFS4ERR_SEQUENCE_POS))
            }
            NfsCbArgop4::Recall(r) => NfsCbResop4::Recall(self.recall(&r.fh, &r.stateid)),
            NfsCbArgop4::Getattr(g) => match self.getattr(&g.fh) {
                Some((change, size)) => NfsCbResop4::Getattr(Res4::Ok(
                    FileAttrs {
                        change: Some(change),
                        size: Some(size),
                        ..FileAttrs::default()
                    }
                    .to_fattr4(&g.attr_request),
                )),
                None => NfsCbResop4::Getattr(Res4::Err(Nfsstat4::NFS4ERR_BADHANDLE)),
            },
            NfsCbArgop4::Layoutrecall(_) => {
                NfsCbResop4::Layoutrecall(Nfsstat4::NFS4ERR_NOMATCHING_LAYOUT)
            }
            NfsCbArgop4::Offload(_) => NfsCbResop4::Offload(Nfsstat4::NFS4ERR_NOTSUPP),
            NfsCbArgop4::Other(n) => NfsCbResop4::Other(*n, Nfsstat4::NFS4ERR_NOTSUPP),
        }
    }

    /// One CB_COMPOUND (RFC 8881 §20.9.3, §16.2.3 rules): CB_SEQUENCE
    /// first, then each operation until one fails.
    fn compound(&self, a: CbCompound4Args) -> CbCompound4Res {
        let mut res = Vec::with_capacity(a.argarray.len());
        let mut status = Nfsstat4::NFS4_OK;
        for (i, op) in a.argarray.iter().enumerate() {
            let r = match (i, op) {
                (0, NfsCbArgop4::Sequence(s)) => NfsCbResop4::Sequence(self.sequence(s)),
                (0, _) => cb_error(op, Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION),
                _ => self.answer(op),
            };
            status = cb_status(&r);
            res.push(r);
            if !status.is_ok() {
                break;
            }
        }
        CbCompound4Res {
            status,
            tag: Bounded(a.tag),
            resarray: Bounded(res),
        }
    }
}

/// The status of a callback result.
fn cb_status(r: &NfsCbResop4) -> Nfsstat4 {
    match r {
        NfsCbResop4::Sequence(r) => r.status(),
        NfsCbResop4::Getattr(r) => r.status(),
        NfsCbResop4::Recall(s)
        | NfsCbResop4::Layoutrecall(s)
        | NfsCbResop4::Offload(s)
        | NfsCbResop4::Other(_, s) => *s,
    }
}

/// An error result for callback operation `op`.
fn cb_error(op: &NfsCbArgop4, status: Nfsstat4) -> NfsCbResop4 {
    match op {
        NfsCbArgop4::Sequence(_) => NfsCbResop4::Sequence(Res4::Err(status)),
        NfsCbArgop4::Getattr(_) => NfsCbResop4::Getattr(Res4::Err(status)),
        NfsCbArgop4::Recall(_) => NfsCbResop4::Recall(status),
        NfsCbArgop4::Layoutrecall(_) => NfsCbResop4::Layoutrecall(status),
        NfsCbArgop4::Offload(_) => NfsCbResop4::Offload(status),
        NfsCbArgop4::Other(n) => NfsCbResop4::Other(*n, status),
    }
}

/// The NFSv4.1 callback program (RFC 8881 §20) of one client over its
/// [`Delegations`]: register it in the [`oncrpc::Server`] the transport
/// answers the server's calls with.
#[derive(Debug, Clone)]
pub struct CallbackService {
    table: Arc<Delegations>,
}

impl RpcService for CallbackService {
    fn program(&self) -> u32 {
        CB_PROGRAM
    }

    fn versions(&self) -> std::ops::RangeInclusive<u32> {
        NFS4_CALLBACK_VERSION..=NFS4_CALLBACK_VERSION
    }

    async fn call(&self, ctx: CallContext, args: Bytes) -> Result<XdrBuf, ServiceError> {
        match ctx.proc_ {
            CB_NULL => Ok(XdrBuf::new()),
            CB_COMPOUND => {
                let a: CbCompound4Args =
                    xdr::from_slice(&args).map_err(ServiceError::GarbageArgs)?;
                Ok(xdr::to_xdr_buf(&self.table.compound(a)))
            }
            _ => Err(ServiceError::ProcUnavail),
        }
    }
}

#[cfg(test)]
mod tests;
