//! The NFSv4.1 back channel (RFC 8881 §2.10.3.1, §20) and the
//! delegation operations of the service (RFC 8881 §10.2, §10.4).
//!
//! - Back channel: CREATE_SESSION with `CREATE_SESSION4_FLAG_CONN_BACK_CHAN`
//!   or BIND_CONN_TO_SESSION for the back direction names the connection
//!   (its [`oncrpc::PeerInfo::conn_id`]) callbacks go on; a
//!   [`BackchannelSource`] turns that id into a reverse-direction
//!   transport (over RPC-over-RDMA: the client's own connection,
//!   draft-ietf-nfsv4-rpcrdma-bidirection-01 §1.4.2). The path is probed
//!   with CB_NULL before the first delegation; a path that fails is
//!   reported with SEQ4_STATUS_CB_PATH_DOWN in SEQUENCE results.
//! - Callbacks are serialised per client (callback slot 0 of its
//!   session, RFC 8881 §20.9.3), never server-wide: a dead back channel
//!   stalls only its own client's callbacks, each bounded by
//!   [`CB_TIMEOUT`], and the conflicting operations of other clients are
//!   answered NFS4ERR_DELAY at once rather than waiting on it.
//! - A recall that finds no connection waits for the client to bind a
//!   new one (BIND_CONN_TO_SESSION or a new session), at most a lease
//!   period; the delegation is revoked a lease after the recall
//!   ([`super::deleg`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use nfs::v3::NfsFh3;
use nfs::v4::cb::*;
use nfs::v4::Stateid4;
use nfs::v4::{
    NfsFh4, NfsResop4, Nfsace4, Nfsstat4, OpenDelegation4, Opnum4, Res4, SpaceLimit4,
    WND4_NOT_WANTED,
};
use oncrpc::client::{ReplyHint, RpcCall};
use oncrpc::{ClientTransport, PeerInfo, RpcError};
use xdr::{Bounded, FixedOpaque, XdrBuf};

use super::deleg::{CbPath, PathStatus, Recall, OPEN4_SHARE_ACCESS_WANT_NO_DELEG, OP_DELEGRETURN};
use super::fileops::{cur, key, resolve_sid};
use super::state::StateTable;
use super::{Cx, Nfs4Service};

/// How long one callback may take before the path counts as down.
pub(crate) const CB_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a recall without a connection looks for one.
const CB_RETRY: Duration = Duration::from_millis(50);

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A reverse-direction RPC transport in object-safe form; every
/// [`oncrpc::ClientTransport`] is one.
pub trait CbTransport: Send + Sync {
    /// Performs one callback.
    fn call_boxed(&self, call: RpcCall) -> BoxFuture<'_, Result<Bytes, RpcError>>;
}

impl<T: ClientTransport + 'static> CbTransport for T {
    fn call_boxed(&self, call: RpcCall) -> BoxFuture<'_, Result<Bytes, RpcError>> {
        Box::pin(self.call(call))
    }
}

/// Where the server finds the back channel of a connection (RFC 8881
/// §2.10.3.1): over RPC-over-RDMA, the reverse direction of the client's
/// own connection (RFC 8167).
pub trait BackchannelSource: Send + Sync + 'static {
    /// The reverse-direction transport of the connection `peer` names
    /// (its [`PeerInfo::conn_id`] and transport kind) while it is up.
    fn backchannel(&self, peer: &PeerInfo) -> Option<Box<dyn CbTransport>>;
}

struct FnSource<F>(F);

impl<F, T> BackchannelSource for FnSource<F>
where
    F: Fn(&PeerInfo) -> Option<T> + Send + Sync + 'static,
    T: ClientTransport + 'static,
{
    fn backchannel(&self, peer: &PeerInfo) -> Option<Box<dyn CbTransport>> {
        (self.0)(peer).map(|t| Box::new(t) as Box<dyn CbTransport>)
    }
}

/// A [`BackchannelSource`] from a lookup function, e.g. over rpcrdma's
/// `Backchannels`:
/// `backchannel_fn(move |p| (p.transport == TransportKind::Rdma).then(|| bcs.get(p.conn_id)).flatten())`
/// (connection ids are numbered per transport).
pub fn backchannel_fn<F, T>(f: F) -> Arc<dyn BackchannelSource>
where
    F: Fn(&PeerInfo) -> Option<T> + Send + Sync + 'static,
    T: ClientTransport + 'static,
{
    Arc::new(FnSource(f))
}

/// A shared place for the [`BackchannelSource`], filled once the
/// transport that offers back channels is listening. Empty: no back
/// channel, so no delegations.
#[derive(Clone, Default)]
pub struct BackchannelSlot(Arc<RwLock<Option<Arc<dyn BackchannelSource>>>>);

impl core::fmt::Debug for BackchannelSlot {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BackchannelSlot")
            .field("set", &self.0.read().map(|s| s.is_some()).unwrap_or(false))
            .finish()
    }
}

impl BackchannelSlot {
    /// An empty slot.
    pub fn new() -> Self {
        Self::default()
    }

    /// Installs (or replaces) the source.
    pub fn set(&self, source: Arc<dyn BackchannelSource>) {
        if let Ok(mut s) = self.0.write() {
            *s = Some(source);
        }
    }

    fn is_set(&self) -> bool {
        self.0.read().map(|s| s.is_some()).unwrap_or(false)
    }

    fn get(&self, peer: &PeerInfo) -> Option<Box<dyn CbTransport>> {
        let src = self.0.read().ok()?.clone()?;
        src.backchannel(peer)
    }
}

/// The callback side of the service: the source of back channels. One
/// callback at a time per client (callback slot 0, RFC 8881 §20.9.3; the
/// lock is the client's [`CbPath::busy`]).
#[derive(Clone, Default)]
pub(crate) struct Callbacks {
    pub(crate) slot: BackchannelSlot,
}

fn cb_call(p: &CbPath, proc_: u32, args: XdrBuf) -> RpcCall {
    RpcCall {
        prog: p.program,
        vers: NFS4_CALLBACK_VERSION,
        proc_,
        cred: p.cred.clone(),
        args,
        reply_hint: ReplyHint::default(),
    }
}

impl Callbacks {
    /// Probes the back channel of `clientid` with CB_NULL (RFC 8881
    /// §20.1) unless already known good; `true` when it works.
    pub(crate) async fn usable(&self, state: &Mutex<StateTable>, clientid: u64) -> bool {
        let path = match state.lock() {
            Ok(st) => st.delegs.path(clientid),
            Err(_) => None,
        };
        let Some(p) = path else { return false };
        if !self.slot.is_set() {
            // No transport offers back channels: nothing to probe, and
            // nothing to report as down.
            return false;
        }
        match p.status {
            PathStatus::Up => {
                if self.slot.get(&p.conn).is_some() {
                    return true;
                }
                set_status(state, clientid, p.conn, PathStatus::Down);
                return false;
            }
            PathStatus::Down | PathStatus::Absent => return false,
            PathStatus::Unprobed => {}
        }
        let transport = self.slot.get(&p.conn);
        if transport.is_none() && p.told == Some(p.conn.conn_id) {
            set_status(state, clientid, p.conn, PathStatus::Absent);
            return false;
        }
        let ok = match transport {
            // CB_NULL (RFC 8881 §20.1) proves the path before any
            // delegation depends on it.
            Some(t) => {
                let _one = p.busy.lock().await;
                let call = t.call_boxed(cb_call(&p, CB_NULL, XdrBuf::new()));
                matches!(tokio::time::timeout(CB_TIMEOUT, call).await, Ok(Ok(_)))
            }
            None => false,
        };
        tracing::info!(
            clientid,
            conn = p.conn.conn_id,
            ok,
            "CB_NULL probe of the back channel"
        );
        let status = if ok { PathStatus::Up } else { PathStatus::Down };
        set_status(state, clientid, p.conn, status);
        if !ok {
            if let Ok(mut st) = state.lock() {
                st.delegs.set_told(clientid, p.conn.conn_id);
            }
        }
        ok
    }

    /// Starts CB_RECALL of each delegation in `recalls`.
    pub(crate) fn recall(&self, state: &Arc<Mutex<StateTable>>, recalls: Vec<Recall>) {
        if recalls.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let lease = state
            .lock()
            .map(|s| s.lease())
            .unwrap_or(Duration::from_secs(90));
        for r in recalls {
            let cbs = self.clone();
            let state = Arc::clone(state);
            rt.spawn(async move { cbs.recall_one(&state, r, lease).await });
        }
    }

    /// CB_COMPOUND { CB_SEQUENCE, CB_RECALL } (RFC 8881 §20.9, §20.2) on
    /// the holder's back channel; without a connection it waits for one
    /// (at most `lease`), as after a failed attempt.
    async fn recall_one(&self, state: &Mutex<StateTable>, r: Recall, lease: Duration) {
        let deadline = tokio::time::Instant::now() + lease;
        loop {
            let path = match state.lock() {
                Ok(st) if st.delegs.holds(&r.stateid.other.0) => st.delegs.path(r.clientid),
                _ => return,
            };
            let transport = path.as_ref().and_then(|p| self.slot.get(&p.conn));
            if let (Some(p), None) = (&path, &transport) {
                // The connection went away: report the path down so the
                // client binds a new one (RFC 8881 §18.46.3).
                set_status(state, r.clientid, p.conn, PathStatus::Down);
            }
            if let (Some(p), Some(t)) = (path, transport) {
                let _one = p.busy.lock().await;
                let seq = match state.lock() {
                    Ok(st) => st.delegs.path(r.clientid).map_or(p.seq, |x| x.seq),
                    Err(_) => return,
                };
                let args = CbCompound4Args {
                    tag: Bytes::new(),
                    minorversion: 1,
                    callback_ident: 0,
                    argarray: vec![
                        NfsCbArgop4::Sequence(CbSequence4Args {
                            sessionid: FixedOpaque(p.sessionid),
                            sequenceid: seq.wrapping_add(1),
                            slotid: 0,
                            highest_slotid: 0,
                            cachethis: false,
                            referring_call_lists: Bounded(Vec::new()),
                        }),
                        NfsCbArgop4::Recall(CbRecall4Args {
                            stateid: r.stateid,
                            truncate: false,
                            fh: NfsFh4(r.fh.clone()),
                        }),
                    ],
                };
                let call = cb_call(&p, CB_COMPOUND, xdr::to_xdr_buf(&args));
                match tokio::time::timeout(CB_TIMEOUT, t.call_boxed(call)).await {
                    Ok(Ok(reply)) => {
                        let res = xdr::from_slice::<CbCompound4Res>(&reply);
                        let seq_ok = matches!(
                            res.as_ref().ok().and_then(|x| x.resarray.0.first()),
                            Some(NfsCbResop4::Sequence(Res4::Ok(_)))
                        );
                        if let Ok(mut st) = state.lock() {
                            // After a misordered sequence id the next
                            // attempt starts the slot anew.
                            let next = seq_ok.then(|| seq.wrapping_add(1));
                            st.delegs.callback_done(r.clientid, &p.sessionid, next);
                        }
                        match res {
                            Ok(x) if x.status.is_ok() => {
                                tracing::info!(
                                    clientid = r.clientid,
                                    conn = p.conn.conn_id,
                                    cb_seq = seq.wrapping_add(1),
                                    "CB_RECALL answered NFS4_OK"
                                );
                                return;
                            }
                            Ok(x) => tracing::info!(status = ?x.status, "CB_RECALL refused"),
                            Err(e) => tracing::info!(error = %e, "CB_COMPOUND reply undecodable"),
                        }
                    }
                    Ok(Err(e)) => {
                        tracing::info!(clientid = r.clientid, error = %e, "CB_RECALL failed");
                        set_status(state, r.clientid, p.conn, PathStatus::Down);
                    }
                    Err(_) => {
                        tracing::info!(clientid = r.clientid, "CB_RECALL timed out");
                        set_status(state, r.clientid, p.conn, PathStatus::Down);
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::info!(
                    clientid = r.clientid,
                    "CB_RECALL: no back channel within the lease"
                );
                return;
            }
            tokio::time::sleep(CB_RETRY).await;
        }
    }
}

impl<S: crate::storage::Storage> Nfs4Service<S> {
    /// DELEGRETURN (RFC 8881 §18.6.3) of the current file.
    pub(super) fn delegreturn(&self, sid: &Stateid4, cx: &mut Cx) -> NfsResop4 {
        let r = (|| {
            let fh = cur(cx)?;
            let sid = resolve_sid(cx, sid)?;
            let c = cx
                .sess
                .map(|s| s.clientid)
                .ok_or(Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION)?;
            let mut st = self.state()?;
            match st.delegs.delegreturn(&sid, c, &key(&fh)) {
                s if s.is_ok() => Ok(()),
                e => Err(e),
            }
        })();
        NfsResop4::Other(Opnum4(OP_DELEGRETURN), r.err().unwrap_or(Nfsstat4::NFS4_OK))
    }

    /// Checks that `sid` is a delegation of `clientid` on `fh` (OPEN with
    /// CLAIM_DELEGATE_CUR or CLAIM_DELEG_CUR_FH, RFC 8881 §18.16.3).
    pub(super) fn own_delegation(
        &self,
        sid: &Stateid4,
        clientid: u64,
        fh: &NfsFh3,
    ) -> Result<(), Nfsstat4> {
        let st = self.state()?;
        if st.delegs.io_allowed(sid, clientid, &key(fh), false) {
            Ok(())
        } else if st.delegs.knows(sid) == Some(Nfsstat4::NFS4ERR_DELEG_REVOKED) {
            Err(Nfsstat4::NFS4ERR_DELEG_REVOKED)
        } else {
            Err(Nfsstat4::NFS4ERR_BAD_STATEID)
        }
    }

    /// Recalls other clients' delegations on `fh` that an access by this
    /// COMPOUND's client conflicts with (RFC 8881 §10.4.1, §20.2):
    /// NFS4ERR_DELAY while any is outstanding.
    pub(super) fn deleg_conflict(&self, fh: &NfsFh3, cx: &Cx, write: bool) -> Result<(), Nfsstat4> {
        let clientid = cx.sess.map(|s| s.clientid).unwrap_or(0);
        if self.delegations().recall(&key(fh), clientid, write) {
            Err(Nfsstat4::NFS4ERR_DELAY)
        } else {
            Ok(())
        }
    }

    /// The delegation for an OPEN just made (RFC 8881 §18.16.3): granted
    /// only over a back channel that answers CB_NULL; a client that asked
    /// for none (OPEN4_SHARE_ACCESS_WANT_NO_DELEG) is told why there is
    /// none: OPEN_DELEGATE_NONE_EXT with WND4_NOT_WANTED.
    pub(super) async fn open_delegation(
        &self,
        clientid: u64,
        fh: &NfsFh3,
        access: u32,
        want: u32,
    ) -> OpenDelegation4 {
        if want == OPEN4_SHARE_ACCESS_WANT_NO_DELEG {
            return OpenDelegation4::NoneExt(WND4_NOT_WANTED, None);
        }
        if !self.cbs.usable(&self.state, clientid).await {
            return OpenDelegation4::None;
        }
        let Ok(mut st) = self.state() else {
            return OpenDelegation4::None;
        };
        let perms = Nfsace4 {
            acetype: 0,
            flag: 0,
            access_mask: 0,
            who: Default::default(),
        };
        let k = key(fh);
        let offered = st.offer_delegation(clientid, &k, access, want);
        drop(st);
        // A delegation only on a file whose local changes are seen
        // (super::watch); otherwise none.
        let watched = offered.is_some()
            && self
                .open_fd(fh, false)
                .is_ok_and(|f| self.watch.watch(&k, &f, &self.delegations()));
        let offered = match (offered, watched) {
            (Some(o), true) => Some(o),
            (Some((sid, _)), false) => {
                if let Ok(mut st) = self.state() {
                    st.delegs.delegreturn(&sid, clientid, &k);
                }
                None
            }
            (None, _) => None,
        };
        if let Some((_, write)) = &offered {
            tracing::info!(clientid, write, "delegation granted");
        }
        match offered {
            Some((sid, false)) => OpenDelegation4::Read(sid, false, perms),
            Some((sid, true)) => {
                OpenDelegation4::Write(sid, false, SpaceLimit4::Size(u64::MAX), perms)
            }
            None => OpenDelegation4::None,
        }
    }
}

fn set_status(state: &Mutex<StateTable>, clientid: u64, conn: PeerInfo, status: PathStatus) {
    if let Ok(mut st) = state.lock() {
        st.delegs.set_status(clientid, conn, status);
    }
}
