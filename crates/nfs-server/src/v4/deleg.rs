//! The NFSv4.1 backchannel and delegations (RFC 8881 §2.10.3.1, §10.2,
//! §10.4, §20).
//!
//! - Back channel: CREATE_SESSION with `CREATE_SESSION4_FLAG_CONN_BACK_CHAN`
//!   or BIND_CONN_TO_SESSION for the back direction names the connection
//!   (its [`oncrpc::PeerInfo::conn_id`]) callbacks go on; a
//!   [`BackchannelSource`] turns that id into a reverse-direction
//!   transport (over RPC-over-RDMA: the client's own connection,
//!   draft-ietf-nfsv4-rpcrdma-bidirection-01 §1.4.2). The path is probed
//!   with CB_NULL before the first delegation; a path that fails is
//!   reported with SEQ4_STATUS_CB_PATH_DOWN in SEQUENCE results.
//! - Delegations: OPEN grants a read delegation (read-only open, no
//!   writer on the file) or a write delegation (the only open of the file)
//!   while the client's back channel works. A conflicting OPEN, WRITE,
//!   SETATTR, REMOVE or RENAME from another client starts CB_RECALL
//!   (after CB_SEQUENCE on callback slot 0, program `csa_cb_program`) and
//!   is answered NFS4ERR_DELAY until DELEGRETURN; a holder that has not
//!   returned the delegation a lease period after the recall loses it
//!   (revoked, SEQ4_STATUS_RECALLABLE_STATE_REVOKED until FREE_STATEID)
//!   and the conflicting operation proceeds.
//! - A recall that finds no connection waits for the client to bind a
//!   new one (BIND_CONN_TO_SESSION or a new session), at most a lease
//!   period.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use nfs::v4::cb::*;
use nfs::v4::session::CallbackSecParms4;
use nfs::v4::session::SEQ4_STATUS_CB_PATH_DOWN;
use nfs::v4::{NfsFh4, Nfsstat4, Res4, Stateid4};
use oncrpc::client::{ReplyHint, RpcCall};
use oncrpc::msg::{AuthSys, OpaqueAuth};
use oncrpc::{ClientTransport, PeerInfo, RpcError};
use xdr::{Bounded, FixedOpaque, XdrBuf};

use nfs::v3::NfsFh3;
use nfs::v4::{NfsResop4, Nfsace4, OpenDelegation4, Opnum4, SpaceLimit4};

use super::fileops::{cur, key, resolve_sid};
use super::state::StateTable;
use super::{Cx, Nfs4Service};

/// SEQ4_STATUS_RECALLABLE_STATE_REVOKED (RFC 8881 §18.46.3).
pub(crate) const SEQ4_STATUS_RECALLABLE_STATE_REVOKED: u32 = 0x0000_0040;
/// OPEN4_SHARE_ACCESS_WANT_NO_DELEG (RFC 8881 §18.16.3).
const OPEN4_SHARE_ACCESS_WANT_NO_DELEG: u32 = 0x0400;
/// OP_DELEGRETURN (RFC 8881 §18.6): decoded by the COMPOUND loop, as
/// [`nfs::v4::NfsArgop4`] does not model it.
pub(crate) const OP_DELEGRETURN: u32 = 8;
/// Most delegations held at once; beyond it none are granted.
pub(crate) const MAX_DELEGS: usize = 1 << 16;
/// Most revoked delegations remembered for their holders.
const MAX_REVOKED: usize = 1 << 12;
/// How long one callback may take before the path counts as down.
const CB_TIMEOUT: Duration = Duration::from_secs(5);
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

/// What the server knows of a client's back channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PathStatus {
    Unprobed,
    Up,
    /// Failed, or lost: SEQ4_STATUS_CB_PATH_DOWN until the client binds
    /// a connection again.
    Down,
    /// The transport offers no back channel on this connection (ONC RPC
    /// over TCP here), and the client was told once and bound it again:
    /// no delegations, and no more CB_PATH_DOWN, which would only make
    /// the client repeat BIND_CONN_TO_SESSION.
    Absent,
}

/// The back channel of one client: the session and connection callbacks
/// use, and callback slot 0 of that session (RFC 8881 §20.9.3).
#[derive(Debug, Clone)]
struct CbPath {
    sessionid: [u8; 16],
    conn: PeerInfo,
    program: u32,
    /// The credential callbacks carry (`csa_sec_parms`).
    cred: OpaqueAuth,
    /// The connection already reported down for having no back channel.
    told: Option<u64>,
    seq: u32,
    status: PathStatus,
}

/// The credential for callbacks from CREATE_SESSION's `csa_sec_parms`
/// (RFC 8881 §18.36.3: the server uses one of the client's choices):
/// AUTH_SYS when offered (Linux accepts AUTH_NONE only for CB_NULL), else
/// AUTH_NONE. RPCSEC_GSS is not supported.
pub(crate) fn cb_cred(parms: &[CallbackSecParms4]) -> OpaqueAuth {
    parms
        .iter()
        .find_map(|p| match p {
            CallbackSecParms4::Sys(a) => Some(
                AuthSys {
                    stamp: a.stamp,
                    machinename: a.machinename.0.clone(),
                    uid: a.uid,
                    gid: a.gid,
                    gids: a.gids.0.clone(),
                }
                .to_opaque_auth(),
            ),
            _ => None,
        })
        .unwrap_or(OpaqueAuth::NONE)
}

/// One delegation (RFC 8881 §10.2).
#[derive(Debug, Clone)]
struct Deleg {
    clientid: u64,
    fh: Bytes,
    write: bool,
    /// When CB_RECALL was started (clock time).
    recalled: Option<Duration>,
}

/// A CB_RECALL to send.
#[derive(Debug, Clone)]
pub(crate) struct Recall {
    clientid: u64,
    stateid: Stateid4,
    fh: Bytes,
}

/// Delegations and back-channel paths of a server instance (part of
/// [`StateTable`], under its lock).
#[derive(Debug, Default)]
pub(crate) struct DelegTable {
    paths: HashMap<u64, CbPath>,
    delegs: HashMap<[u8; 12], Deleg>,
    revoked: HashMap<[u8; 12], u64>,
    next: u32,
}

impl DelegTable {
    /// Records the back channel of `clientid` (CREATE_SESSION with
    /// CONN_BACK_CHAN, RFC 8881 §18.36.3; BIND_CONN_TO_SESSION, §18.34.3).
    /// `cred` is the callback credential of a new session; a connection
    /// bound to an existing session keeps the session's.
    pub(crate) fn bind(
        &mut self,
        clientid: u64,
        sessionid: [u8; 16],
        conn: PeerInfo,
        program: u32,
        cred: Option<OpaqueAuth>,
    ) {
        let e = self.paths.entry(clientid).or_insert_with(|| CbPath {
            sessionid,
            conn,
            program,
            cred: OpaqueAuth::NONE,
            told: None,
            seq: 0,
            status: PathStatus::Unprobed,
        });
        if e.sessionid != sessionid {
            e.seq = 0;
            e.program = program;
        }
        if let Some(c) = cred {
            e.cred = c;
        }
        e.sessionid = sessionid;
        e.conn = conn;
        e.status = PathStatus::Unprobed;
    }

    /// Forgets everything of a client whose lease ended.
    pub(crate) fn purge(&mut self, clientid: u64) {
        self.paths.remove(&clientid);
        self.delegs.retain(|_, d| d.clientid != clientid);
        self.revoked.retain(|_, c| *c != clientid);
    }

    /// Forgets the path of a destroyed session.
    pub(crate) fn session_gone(&mut self, sessionid: &[u8; 16]) {
        self.paths.retain(|_, p| p.sessionid != *sessionid);
    }

    /// The SEQUENCE status flags of `clientid` (RFC 8881 §18.46.3).
    pub(crate) fn status_flags(&self, clientid: u64) -> u32 {
        let mut f = 0;
        if self
            .paths
            .get(&clientid)
            .is_some_and(|p| p.status == PathStatus::Down)
        {
            f |= SEQ4_STATUS_CB_PATH_DOWN;
        }
        if self.revoked.values().any(|c| *c == clientid) {
            f |= SEQ4_STATUS_RECALLABLE_STATE_REVOKED;
        }
        f
    }

    /// Delegations of other clients on `fh` that an access (`write` or
    /// not) by `clientid` conflicts with (RFC 8881 §10.4.1): a read
    /// delegation conflicts with writing, a write delegation with any
    /// access. Those not yet recalled are marked and returned for
    /// CB_RECALL; those recalled at least `lease` ago are revoked. `true`
    /// when some are still outstanding (the caller answers NFS4ERR_DELAY).
    pub(crate) fn conflicts(
        &mut self,
        fh: &Bytes,
        clientid: u64,
        write: bool,
        now: Duration,
        lease: Duration,
    ) -> (bool, Vec<Recall>) {
        let mut pending = false;
        let mut recalls = Vec::new();
        let mut revoke = Vec::new();
        for (k, d) in self.delegs.iter_mut() {
            if d.fh != *fh || d.clientid == clientid || !(d.write || write) {
                continue;
            }
            match d.recalled {
                Some(t) if now >= t + lease => revoke.push((*k, d.clientid)),
                Some(_) => pending = true,
                None => {
                    d.recalled = Some(now);
                    pending = true;
                    recalls.push(Recall {
                        clientid: d.clientid,
                        stateid: Stateid4 {
                            seqid: 1,
                            other: FixedOpaque(*k),
                        },
                        fh: d.fh.clone(),
                    });
                }
            }
        }
        for (k, c) in revoke {
            self.delegs.remove(&k);
            if self.revoked.len() < MAX_REVOKED {
                self.revoked.insert(k, c);
            }
            tracing::info!(
                clientid = c,
                "delegation revoked: not returned within the lease"
            );
        }
        (pending, recalls)
    }

    /// Whether `clientid` may be given a delegation on `fh` now: its back
    /// channel was probed good, it holds none on the file, nobody else
    /// holds one, and the table has room.
    fn may_grant(&self, clientid: u64, fh: &Bytes) -> bool {
        self.paths
            .get(&clientid)
            .is_some_and(|p| p.status == PathStatus::Up)
            && self.delegs.len() < MAX_DELEGS
            && !self.delegs.values().any(|d| d.fh == *fh)
    }

    fn grant(&mut self, clientid: u64, fh: &Bytes, write: bool) -> Stateid4 {
        // Delegation stateids have the top bit of the counter set, apart
        // from open and lock stateids (RFC 8881 §8.2.2).
        self.next = self.next.wrapping_add(1) & 0x7fff_ffff;
        let mut o = [0u8; 12];
        o[..8].copy_from_slice(&clientid.to_be_bytes());
        o[8..].copy_from_slice(&(self.next | 0x8000_0000).to_be_bytes());
        self.delegs.insert(
            o,
            Deleg {
                clientid,
                fh: fh.clone(),
                write,
                recalled: None,
            },
        );
        Stateid4 {
            seqid: 1,
            other: FixedOpaque(o),
        }
    }

    /// DELEGRETURN (RFC 8881 §18.6.3).
    pub(crate) fn delegreturn(&mut self, sid: &Stateid4, clientid: u64, fh: &Bytes) -> Nfsstat4 {
        if let Some(c) = self.revoked.get(&sid.other.0) {
            return if *c == clientid {
                Nfsstat4::NFS4ERR_DELEG_REVOKED
            } else {
                Nfsstat4::NFS4ERR_BAD_STATEID
            };
        }
        match self.delegs.get(&sid.other.0) {
            Some(d) if d.clientid == clientid && d.fh == *fh => {
                if sid.seqid > 1 {
                    return Nfsstat4::NFS4ERR_BAD_STATEID;
                }
                self.delegs.remove(&sid.other.0);
                Nfsstat4::NFS4_OK
            }
            _ => Nfsstat4::NFS4ERR_BAD_STATEID,
        }
    }

    /// FREE_STATEID of a revoked delegation (RFC 8881 §18.38.3).
    pub(crate) fn free_revoked(&mut self, sid: &Stateid4, clientid: u64) -> Option<Nfsstat4> {
        match self.revoked.get(&sid.other.0) {
            Some(c) if *c == clientid => {
                self.revoked.remove(&sid.other.0);
                Some(Nfsstat4::NFS4_OK)
            }
            _ => None,
        }
    }

    /// Whether `sid` is a delegation of `clientid` on `fh` allowing the
    /// access (RFC 8881 §10.2: READ/WRITE with a delegation stateid).
    pub(crate) fn io_allowed(
        &self,
        sid: &Stateid4,
        clientid: u64,
        fh: &Bytes,
        write: bool,
    ) -> bool {
        self.delegs
            .get(&sid.other.0)
            .is_some_and(|d| d.clientid == clientid && d.fh == *fh && (d.write || !write))
    }

    /// Whether `sid` names a delegation (held or revoked).
    pub(crate) fn knows(&self, sid: &Stateid4) -> Option<Nfsstat4> {
        if self.revoked.contains_key(&sid.other.0) {
            Some(Nfsstat4::NFS4ERR_DELEG_REVOKED)
        } else if self.delegs.contains_key(&sid.other.0) {
            Some(Nfsstat4::NFS4_OK)
        } else {
            None
        }
    }

    /// Delegations held (for tests and statistics).
    pub(crate) fn held(&self) -> usize {
        self.delegs.len()
    }
}

/// The callback side of the service: the source of back channels and one
/// callback at a time per server (callback slot 0, RFC 8881 §20.9.3).
#[derive(Clone, Default)]
pub(crate) struct Callbacks {
    pub(crate) slot: BackchannelSlot,
    busy: Arc<tokio::sync::Mutex<()>>,
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
            Ok(st) => st.delegs.paths.get(&clientid).cloned(),
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
                let _one = self.busy.lock().await;
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
                if let Some(x) = st.delegs.paths.get_mut(&clientid) {
                    x.told = Some(p.conn.conn_id);
                }
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
            .map(|s| s.limits.lease)
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
                Ok(st) if st.delegs.delegs.contains_key(&r.stateid.other.0) => {
                    st.delegs.paths.get(&r.clientid).cloned()
                }
                _ => return,
            };
            let transport = path.as_ref().and_then(|p| self.slot.get(&p.conn));
            if let (Some(p), None) = (&path, &transport) {
                // The connection went away: report the path down so the
                // client binds a new one (RFC 8881 §18.46.3).
                set_status(state, r.clientid, p.conn, PathStatus::Down);
            }
            if let (Some(p), Some(t)) = (path, transport) {
                let _one = self.busy.lock().await;
                let seq = match state.lock() {
                    Ok(st) => st.delegs.paths.get(&r.clientid).map_or(p.seq, |x| x.seq),
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
                            if let Some(x) = st.delegs.paths.get_mut(&r.clientid) {
                                if x.sessionid == p.sessionid && seq_ok {
                                    x.seq = seq.wrapping_add(1);
                                }
                                x.status = PathStatus::Up;
                            }
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
                        if !seq_ok {
                            // Resynchronise the slot after a misordered
                            // sequence id: the next attempt starts anew.
                            if let Ok(mut st) = state.lock() {
                                if let Some(x) = st.delegs.paths.get_mut(&r.clientid) {
                                    x.seq = 0;
                                }
                            }
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

impl Nfs4Service {
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
        let now = self.clock.now();
        let (pending, recalls) = {
            let mut st = self.state()?;
            let lease = st.limits.lease;
            st.delegs.conflicts(&key(fh), clientid, write, now, lease)
        };
        self.cbs.recall(&self.state, recalls);
        if pending {
            Err(Nfsstat4::NFS4ERR_DELAY)
        } else {
            Ok(())
        }
    }

    /// The delegation for an OPEN just made (RFC 8881 §18.16.3): granted
    /// only over a back channel that answers CB_NULL.
    pub(super) async fn open_delegation(
        &self,
        clientid: u64,
        fh: &NfsFh3,
        access: u32,
        want: u32,
    ) -> OpenDelegation4 {
        if want == OPEN4_SHARE_ACCESS_WANT_NO_DELEG {
            return OpenDelegation4::None;
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
        let offered = st.offer_delegation(clientid, &key(fh), access, want);
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
        if let Some(p) = st.delegs.paths.get_mut(&clientid) {
            if p.conn == conn {
                p.status = status;
            }
        }
    }
}

impl StateTable {
    /// The delegation OPEN grants (RFC 8881 §10.4, §18.16.3): a write
    /// delegation when `clientid`'s open is the only one of the file, a
    /// read delegation for a read-only open when nobody has the file open
    /// for writing; none if the client asked for none.
    pub(crate) fn offer_delegation(
        &mut self,
        clientid: u64,
        fh: &Bytes,
        access: u32,
        want: u32,
    ) -> Option<(Stateid4, bool)> {
        use nfs::v4::OPEN4_SHARE_ACCESS_WRITE;
        if want == OPEN4_SHARE_ACCESS_WANT_NO_DELEG || !self.delegs.may_grant(clientid, fh) {
            return None;
        }
        let mut opens = self.opens_of(fh);
        let others = opens.iter().any(|(c, _)| *c != clientid);
        let writers = opens
            .iter_mut()
            .any(|(_, a)| *a & OPEN4_SHARE_ACCESS_WRITE != 0);
        let write = access & OPEN4_SHARE_ACCESS_WRITE != 0;
        if write && !others && opens.len() == 1 {
            Some((self.delegs.grant(clientid, fh, true), true))
        } else if !write && !writers {
            Some((self.delegs.grant(clientid, fh, false), false))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fh() -> Bytes {
        Bytes::from_static(b"file")
    }

    fn peer(conn_id: u64) -> PeerInfo {
        PeerInfo {
            conn_id,
            addr: None,
            transport: oncrpc::TransportKind::Rdma,
        }
    }

    #[test]
    fn read_delegation_conflicts_only_with_writers_and_is_revoked_after_a_lease() {
        let mut t = DelegTable::default();
        t.bind(1, [1; 16], peer(10), 0x4000_0000, None);
        t.paths.get_mut(&1).unwrap().status = PathStatus::Up;
        assert!(t.may_grant(1, &fh()));
        let sid = t.grant(1, &fh(), false);
        assert!(!t.may_grant(2, &fh()));
        let lease = Duration::from_secs(90);
        assert!(!t.conflicts(&fh(), 2, false, Duration::ZERO, lease).0);
        let (pending, recalls) = t.conflicts(&fh(), 2, true, Duration::ZERO, lease);
        assert!(pending);
        assert_eq!(recalls.len(), 1);
        assert_eq!(recalls[0].stateid, sid);
        // Recalled once only.
        let (pending, recalls) = t.conflicts(&fh(), 2, true, Duration::from_secs(1), lease);
        assert!(pending && recalls.is_empty());
        let (pending, _) = t.conflicts(&fh(), 2, true, lease, lease);
        assert!(!pending);
        assert_eq!(t.held(), 0);
        assert_eq!(t.status_flags(1), SEQ4_STATUS_RECALLABLE_STATE_REVOKED);
        assert_eq!(
            t.delegreturn(&sid, 1, &fh()),
            Nfsstat4::NFS4ERR_DELEG_REVOKED
        );
        assert_eq!(t.free_revoked(&sid, 1), Some(Nfsstat4::NFS4_OK));
        assert_eq!(t.status_flags(1), 0);
    }

    #[test]
    fn delegreturn_checks_owner_file_and_seqid() {
        let mut t = DelegTable::default();
        let sid = t.grant(1, &fh(), true);
        assert_eq!(t.delegreturn(&sid, 2, &fh()), Nfsstat4::NFS4ERR_BAD_STATEID);
        assert_eq!(
            t.delegreturn(&sid, 1, &Bytes::from_static(b"other")),
            Nfsstat4::NFS4ERR_BAD_STATEID
        );
        let newer = Stateid4 { seqid: 2, ..sid };
        assert_eq!(
            t.delegreturn(&newer, 1, &fh()),
            Nfsstat4::NFS4ERR_BAD_STATEID
        );
        assert!(t.io_allowed(&sid, 1, &fh(), true));
        assert_eq!(t.delegreturn(&sid, 1, &fh()), Nfsstat4::NFS4_OK);
        assert_eq!(t.delegreturn(&sid, 1, &fh()), Nfsstat4::NFS4ERR_BAD_STATEID);
    }

    #[test]
    fn a_down_path_is_reported_and_grants_nothing() {
        let mut t = DelegTable::default();
        t.bind(1, [1; 16], peer(10), 1, None);
        assert!(!t.may_grant(1, &fh()), "unprobed");
        t.paths.get_mut(&1).unwrap().status = PathStatus::Down;
        assert_eq!(t.status_flags(1), SEQ4_STATUS_CB_PATH_DOWN);
        assert!(!t.may_grant(1, &fh()));
        t.bind(1, [1; 16], peer(11), 1, None);
        assert_eq!(t.status_flags(1), 0, "a new connection is probed afresh");
    }
}
