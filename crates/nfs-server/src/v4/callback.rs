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
//! - Callbacks of a client run on the slots of its session's back
//!   channel (RFC 8881 §20.9.3; at most the `ca_maxrequests` it granted,
//!   [`super::cbslots::MAX_CB_SLOTS`]), never server-wide: a dead back
//!   channel stalls only its own client's callbacks, each bounded by
//!   [`CB_TIMEOUT`], and the conflicting operations of other clients are
//!   answered NFS4ERR_DELAY at once rather than waiting on it. Callbacks
//!   waiting for a slot the client holds are bounded too: at most
//!   [`MAX_SLOT_WAITERS`] per session (limit `nfs4.cb_slot_waiters`), each
//!   for one callback bound (limit `nfs4.cb_slot_wait`); either way the
//!   callback fails [`CbFailure::Busy`] and its caller tries again later.
//! - Over ONC RPC on TCP the back channel is the reverse direction of a
//!   connection the client opened and bound to it (RFC 8881 §2.10.3.1;
//!   `oncrpc::tcp::TcpBackchannels`), over RPC-over-RDMA that of its RDMA
//!   connection (RFC 8167).
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
    NfsFh4, NfsResop4, Nfsace4, Nfsstat4, OpenDelegation4, Res4, SpaceLimit4, WND4_NOT_WANTED,
};
use oncrpc::client::{ReplyHint, RpcCall};
use oncrpc::limits::Limit;
use oncrpc::{ClientTransport, PeerInfo, RpcError};
use xdr::{Bounded, FixedOpaque, XdrBuf};

use super::cb40::{Dialer, V40Target};
use super::cbslots::{SlotOutcome, SlotWait, MAX_SLOT_WAITERS};
use super::deleg::{CbPath, PathStatus, Recall, OPEN4_SHARE_ACCESS_WANT_NO_DELEG};
use super::fileops::{cur, key, resolve_sid};
use super::state::StateTable;
use super::{Cx, Nfs4Service};

/// A client's callback service did not answer within the callback bound
/// ([`CB_TIMEOUT`]): its back channel is marked down.
static TIMED_OUT: Limit = Limit::new("nfs4.callback_timeout");

/// [`MAX_SLOT_WAITERS`] callbacks of a session already waited for a
/// back-channel slot: one more was refused.
static SLOT_WAITERS: Limit = Limit::new("nfs4.cb_slot_waiters");

/// A callback waited a callback bound for a back-channel slot and gave up.
static SLOT_WAIT: Limit = Limit::new("nfs4.cb_slot_wait");

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

/// A shared place for the [`BackchannelSource`]s, one per transport
/// that offers back channels (ONC RPC over TCP, RPC-over-RDMA), filled
/// once each is listening. Empty: no back channel, so no delegations.
#[derive(Clone, Default)]
pub struct BackchannelSlot(Arc<RwLock<Vec<Arc<dyn BackchannelSource>>>>);

impl core::fmt::Debug for BackchannelSlot {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BackchannelSlot")
            .field("sources", &self.0.read().map(|s| s.len()).unwrap_or(0))
            .finish()
    }
}

impl BackchannelSlot {
    /// An empty slot.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a source; each is asked in turn for a connection's back
    /// channel (a source answers only for its own transport's
    /// connections).
    pub fn set(&self, source: Arc<dyn BackchannelSource>) {
        if let Ok(mut s) = self.0.write() {
            s.push(source);
        }
    }

    fn is_set(&self) -> bool {
        self.0.read().map(|s| !s.is_empty()).unwrap_or(false)
    }

    fn get(&self, peer: &PeerInfo) -> Option<Box<dyn CbTransport>> {
        let sources = self.0.read().ok()?.clone();
        sources.iter().find_map(|s| s.backchannel(peer))
    }
}

/// The callback side of the service: the source of back channels and the
/// bound on each callback. Callbacks of a client run on its session's
/// back-channel slots (RFC 8881 §20.9.3, [`super::cbslots`]), several at
/// once, never server-wide.
#[derive(Clone)]
pub(crate) struct Callbacks {
    pub(crate) slot: BackchannelSlot,
    /// How long one callback may take before the path counts as down.
    pub(crate) timeout: Duration,
    /// The server's connections to NFSv4.0 clients' callback services.
    pub(crate) v40: Dialer,
}

impl Default for Callbacks {
    fn default() -> Self {
        Self {
            slot: BackchannelSlot::default(),
            timeout: CB_TIMEOUT,
            v40: Dialer::default(),
        }
    }
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

/// Why a CB_COMPOUND did not get an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CbFailure {
    /// The client has no back channel (or no connection for it now).
    NoPath,
    /// No reply within the bound, or the connection failed: the path is
    /// marked down (SEQ4_STATUS_CB_PATH_DOWN).
    Down,
    /// The reply did not decode.
    Garbage,
    /// Every back-channel slot stayed in use (the client holds them):
    /// the callback was not sent; try again later.
    Busy,
}

impl Callbacks {
    /// Probes the back channel of `clientid` with CB_NULL (RFC 8881
    /// §20.1) unless already known good; `true` when it works.
    pub(crate) async fn usable(&self, state: &Mutex<StateTable>, clientid: u64) -> bool {
        let path = |state: &Mutex<StateTable>| match state.lock() {
            Ok(st) => st.delegs.path(clientid),
            Err(_) => None,
        };
        let Some(p) = path(state) else { return false };
        if p.v40.is_none() && !self.slot.is_set() {
            // No transport offers back channels: nothing to probe, and
            // nothing to report as down.
            return false;
        }
        // One probe at a time; a probe that waited sees the first's result.
        // A 4.0 client's path is probed after SETCLIENTID_CONFIRM: an
        // OPEN meanwhile gets no delegation rather than waiting for the
        // server's connection to the client.
        let probe = Arc::clone(&p.probe);
        let _one = match (&p.v40, probe.try_lock()) {
            (_, Ok(g)) => g,
            (Some(_), Err(_)) => return false,
            (None, Err(_)) => probe.lock().await,
        };
        let Some(p) = path(state) else { return false };
        match p.status {
            // A 4.0 client's connection is made again when needed.
            PathStatus::Up if p.v40.is_some() => return true,
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
        // Boxed: the probe runs once per path, and its connection and call
        // would otherwise make every OPEN's future kilobytes larger.
        Box::pin(self.probe(state, clientid, p)).await
    }

    /// Probes an unprobed path with CB_NULL, records its status (and that
    /// the client was told, when it fails) and returns whether it works.
    async fn probe(&self, state: &Mutex<StateTable>, clientid: u64, p: CbPath) -> bool {
        let transport = match &p.v40 {
            Some(t) => self
                .v40_conn(state, clientid, t)
                .await
                .map(|c| Box::new(c) as Box<dyn CbTransport>),
            None => self.slot.get(&p.conn),
        };
        if p.v40.is_none() && transport.is_none() && p.told == Some(p.conn.conn_id) {
            set_status(state, clientid, p.conn, PathStatus::Absent);
            return false;
        }
        let ok = match transport {
            // CB_NULL (RFC 8881 §20.1) proves the path before any
            // delegation depends on it.
            Some(t) => {
                let call = t.call_boxed(cb_call(&p, CB_NULL, XdrBuf::new()));
                matches!(tokio::time::timeout(self.timeout, call).await, Ok(Ok(_)))
            }
            None => false,
        };
        tracing::info!(
            clientid,
            conn = p.conn.conn_id,
            transport = ?p.conn.transport,
            v40 = ?p.v40.map(|t| t.addr),
            ok,
            "CB_NULL probe of the back channel"
        );
        let status = if ok { PathStatus::Up } else { PathStatus::Down };
        set_status(state, clientid, p.conn, status);
        if !ok && p.v40.is_some() {
            self.v40.forget(clientid);
        }
        if !ok {
            if let Ok(mut st) = state.lock() {
                st.delegs.set_told(clientid, p.conn.conn_id);
            }
        }
        ok
    }

    /// One CB_COMPOUND { CB_SEQUENCE, `ops` } (RFC 8881 §20.2, §20.9) to
    /// `clientid` on a free slot of its session's back channel, within
    /// the callback bound. The results after CB_SEQUENCE come back when
    /// CB_SEQUENCE succeeded.
    pub(crate) async fn compound(
        &self,
        state: &Mutex<StateTable>,
        clientid: u64,
        ops: Vec<NfsCbArgop4>,
    ) -> Result<CbCompound4Res, CbFailure> {
        let path = match state.lock() {
            Ok(st) => st.delegs.path(clientid),
            Err(_) => None,
        };
        let p = path.ok_or(CbFailure::NoPath)?;
        if let Some(t) = p.v40 {
            return self.compound_v40(state, clientid, &p, t, ops).await;
        }
        let Some(t) = self.slot.get(&p.conn) else {
            // The connection went away: report the path down so the
            // client binds a new one (RFC 8881 §18.46.3).
            set_status(state, clientid, p.conn, PathStatus::Down);
            return Err(CbFailure::NoPath);
        };
        // A client that never replies holds its slots, each for a
        // callback bound; the callbacks waiting for one are bounded in
        // number and each waits one callback bound at most (its caller
        // tries again later, as after any failure).
        let mut slot = match p.slots.take(self.timeout).await {
            Ok(slot) => slot,
            Err(SlotWait::Crowded) => {
                SLOT_WAITERS.trip(format_args!(
                    "client {clientid}: {MAX_SLOT_WAITERS} callbacks already wait for a \
                     back-channel slot; one more refused"
                ));
                return Err(CbFailure::Busy);
            }
            Err(SlotWait::TimedOut) => {
                SLOT_WAIT.trip(format_args!(
                    "client {clientid}: no back-channel slot came free within {:?}",
                    self.timeout
                ));
                return Err(CbFailure::Busy);
            }
        };
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut argarray = vec![NfsCbArgop4::Sequence(CbSequence4Args {
            sessionid: FixedOpaque(p.sessionid),
            sequenceid: slot.seq,
            slotid: slot.slot,
            highest_slotid: slot.highest,
            cachethis: false,
            referring_call_lists: Bounded(Vec::new()),
        })];
        argarray.extend(ops);
        let args = CbCompound4Args {
            tag: Bytes::new(),
            minorversion: p.minor,
            callback_ident: 0,
            argarray,
        };
        let call = cb_call(&p, CB_COMPOUND, xdr::to_xdr_buf(&args));
        let reply = match tokio::time::timeout_at(deadline, t.call_boxed(call)).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => {
                tracing::info!(clientid, error = %e, "CB_COMPOUND failed");
                set_status(state, clientid, p.conn, PathStatus::Down);
                return Err(CbFailure::Down);
            }
            Err(_) => {
                TIMED_OUT.trip(format_args!(
                    "client {clientid}: CB_COMPOUND unanswered in {:?} on connection {}; \
                     back channel marked down",
                    self.timeout, p.conn.conn_id
                ));
                set_status(state, clientid, p.conn, PathStatus::Down);
                return Err(CbFailure::Down);
            }
        };
        let res = xdr::from_slice::<CbCompound4Res>(&reply).map_err(|e| {
            tracing::info!(error = %e, "CB_COMPOUND reply undecodable");
            CbFailure::Garbage
        })?;
        let sequenced = matches!(
            res.resarray.0.first(),
            Some(NfsCbResop4::Sequence(Res4::Ok(_)))
        );
        slot.finish(if sequenced {
            SlotOutcome::Sequenced
        } else {
            SlotOutcome::Refused
        });
        if let Ok(mut st) = state.lock() {
            st.delegs.callback_done(clientid, p.conn);
        }
        Ok(res)
    }

    /// The connection to NFSv4.0 client `clientid`'s callback service.
    async fn v40_conn(
        &self,
        state: &Mutex<StateTable>,
        clientid: u64,
        t: &V40Target,
    ) -> Option<oncrpc::tcp::TcpClient> {
        let live = |c: u64| state.lock().is_ok_and(|st| st.delegs.has_v40_path(c));
        self.v40.get(clientid, t.addr, self.timeout, live).await
    }

    /// CB_COMPOUND `ops` to NFSv4.0 client `clientid` (RFC 7530 §16.2.3
    /// of the callback program: minor version 0, the client's
    /// `callback_ident`, no CB_SEQUENCE) on the server's connection to
    /// its callback service, within the callback bound.
    async fn compound_v40(
        &self,
        state: &Mutex<StateTable>,
        clientid: u64,
        p: &CbPath,
        t: V40Target,
        ops: Vec<NfsCbArgop4>,
    ) -> Result<CbCompound4Res, CbFailure> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let args = CbCompound4Args {
            tag: Bytes::new(),
            minorversion: 0,
            callback_ident: t.ident,
            argarray: ops,
        };
        let call = cb_call(p, CB_COMPOUND, xdr::to_xdr_buf(&args));
        let down = |why: &str| {
            tracing::info!(clientid, addr = %t.addr, why, "NFSv4.0 CB_COMPOUND failed");
            self.v40.forget(clientid);
            set_status(state, clientid, p.conn, PathStatus::Down);
            CbFailure::Down
        };
        let reply = tokio::time::timeout_at(deadline, async {
            let conn = self.v40_conn(state, clientid, &t).await?;
            conn.call(call).await.ok()
        })
        .await;
        let reply = match reply {
            Ok(Some(r)) => r,
            Ok(None) => return Err(down("no connection or no reply")),
            Err(_) => {
                TIMED_OUT.trip(format_args!(
                    "NFSv4.0 client {clientid}: CB_COMPOUND unanswered in {:?}",
                    self.timeout
                ));
                return Err(down("timed out"));
            }
        };
        let res = xdr::from_slice::<CbCompound4Res>(&reply).map_err(|e| {
            tracing::info!(error = %e, "CB_COMPOUND reply undecodable");
            CbFailure::Garbage
        })?;
        if let Ok(mut st) = state.lock() {
            st.delegs.callback_done(clientid, p.conn);
        }
        Ok(res)
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
            match state.lock() {
                Ok(st) if st.delegs.holds(&r.stateid.other.0) => {}
                _ => return,
            }
            let recall = NfsCbArgop4::Recall(CbRecall4Args {
                stateid: r.stateid,
                truncate: false,
                fh: NfsFh4(r.fh.clone()),
            });
            match self.compound(state, r.clientid, vec![recall]).await {
                Ok(x) if x.status.is_ok() => {
                    tracing::info!(clientid = r.clientid, "CB_RECALL answered NFS4_OK");
                    return;
                }
                Ok(x) => tracing::info!(status = ?x.status, "CB_RECALL refused"),
                Err(e) => tracing::info!(clientid = r.clientid, failure = ?e, "CB_RECALL failed"),
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
    /// DELEGRETURN (RFC 8881 §18.6.3) of the current file. WRITEs of the
    /// file already in progress (the holder's flush, RFC 8881 §10.4.1,
    /// sent before the return but not yet answered) finish first, so a
    /// conflicting access the delegation held back sees their data
    /// ([`super::inflight`]).
    pub(super) async fn delegreturn(&self, sid: &Stateid4, cx: &mut Cx) -> NfsResop4 {
        if let Some(fh) = &cx.cur {
            self.await_writes(&key(fh)).await;
        }
        let r = (|| {
            let fh = cur(cx)?;
            let sid = resolve_sid(cx, sid)?;
            let c = cx.clientid().ok_or(Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION)?;
            let mut st = self.state()?;
            match st.delegs.delegreturn(&sid, c, &key(&fh)) {
                s if s.is_ok() => Ok(()),
                e => Err(e),
            }
        })();
        NfsResop4::Delegreturn(r.err().unwrap_or(Nfsstat4::NFS4_OK))
    }

    /// Waits for the WRITEs of file `k` in progress, at most
    /// [`super::SessionLimits::delegreturn_write_wait`] (limit
    /// `nfs4.delegreturn_write_wait`).
    async fn await_writes(&self, k: &Bytes) {
        use super::inflight::DRAIN_TIMEOUT;
        if self.writes.count(k) == 0 {
            return;
        }
        let wait = match self.state() {
            Ok(st) => st.delegreturn_write_wait(),
            Err(_) => return,
        };
        if self.writes.drained(k, wait).await {
            return;
        }
        DRAIN_TIMEOUT.trip(format_args!(
            "DELEGRETURN waited {wait:?} for WRITEs of its file in progress; \
             returning the delegation with some still running"
        ));
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
        let clientid = cx.clientid().unwrap_or(0);
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
        if self.nlm_locked(&k) {
            return OpenDelegation4::None;
        }
        let offered = st.offer_delegation(clientid, &k, access, want);
        drop(st);
        // A delegation only on a file whose local opens hold a kernel
        // lease (super::lease) and whose other local changes are seen
        // (super::watch); otherwise none.
        let guarded = offered
            .as_ref()
            .is_some_and(|(sid, write)| self.guard_delegation(fh, &k, sid, *write));
        let offered = match (offered, guarded) {
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
