//! The NFSv4.0/4.1/4.2 server (RFC 7530, RFC 8881, RFC 7862): the
//! COMPOUND engine as an [`oncrpc::RpcService`] for program 100003
//! version 4, over any [`Storage`] back end ([`LocalFs`] by default).
//!
//! - Minor versions 0 ([`v40`]: SETCLIENTID, per-owner seqids, no
//!   sessions), 1 and 2; any other is NFS4ERR_MINOR_VERS_MISMATCH with an
//!   empty result array (RFC 8881 §16.2.3).
//! - Sessions (RFC 8881 §2.10): EXCHANGE_ID → CREATE_SESSION → COMPOUNDs
//!   that start with SEQUENCE. A COMPOUND that does not start with
//!   SEQUENCE may hold only one of EXCHANGE_ID, CREATE_SESSION,
//!   DESTROY_SESSION, DESTROY_CLIENTID, BIND_CONN_TO_SESSION
//!   (NFS4ERR_NOT_ONLY_OP otherwise) and anything else is
//!   NFS4ERR_OP_NOT_IN_SESSION; SEQUENCE later in a COMPOUND is
//!   NFS4ERR_SEQUENCE_POS. Each slot caches its last reply when the
//!   client asks (`sa_cachethis`). Requests above `ca_maxrequestsize` get
//!   NFS4ERR_REQ_TOO_BIG, replies above `ca_maxresponsesize`
//!   NFS4ERR_REP_TOO_BIG on the operation that overflowed it.
//! - State: leases renewed by SEQUENCE and expiring on the injected
//!   [`Clock`]; open and lock stateids with seqid checks; share
//!   reservations; byte-range locks, which exclude NLM clients' locks on
//!   the same file and are excluded by them ([`nlmlink`]).
//! - Back channel and delegations ([`deleg`]): read and write delegations
//!   while the client's back channel (from a [`BackchannelSource`] put in
//!   the [`BackchannelSlot`] of [`Nfs4Service::with_backchannels`]) works;
//!   CB_RECALL on conflict.
//! - Reboot recovery ([`grace`], [`records`], [`Nfs4Service::with_recovery`]):
//!   client records in the state directory and a grace period after a
//!   restart in which the recorded clients reclaim opens, locks and
//!   delegations (RFC 8881 §8.4.2, RFC 7530 §9.6.2). Without it reclaims
//!   (CLAIM_PREVIOUS, LOCK with `reclaim`) are NFS4ERR_NO_GRACE.
//! - Operations not listed in [`nfs::v4::NfsArgop4`] are NFS4ERR_NOTSUPP,
//!   undefined ones NFS4ERR_OP_ILLEGAL (NFSv4.2 operations in a minor
//!   version 1 COMPOUND too); the COMPOUND stops at the first error.
//! - Namespace ([`Nfs4Service::with_exports`], [`namespace`],
//!   [`pseudofs`]): every export of the table at its path under
//!   PUTROOTFH, joined by read-only junction directories (RFC 8881 §7),
//!   the same for every minor version. Each operation runs under the
//!   access decision of the file system its current file handle is in,
//!   taken again whenever that changes: a client the export does not
//!   list gets NFS4ERR_ACCESS from PUTFH/PUTROOTFH/PUTPUBFH/RESTOREFH,
//!   one whose flavor it does not accept NFS4ERR_WRONGSEC (RFC 8881
//!   §2.6.3.1), also from a LOOKUP or LOOKUPP that crosses into it; the
//!   caller is squashed as that export's options say; a read-only grant
//!   (and the pseudo file system) answers changes with NFS4ERR_ROFS.
//! - Owners and groups are numeric strings ("1000"), as Linux clients
//!   send with AUTH_SYS; only AUTH_SYS is offered by SECINFO_NO_NAME.

mod asynccopy;
mod attrs;
pub mod callback;
mod cb40;
mod cbgetattr;
mod cbslots;
mod clients;
mod coherence;
mod copyops;
mod deleg;
mod fileops;
mod fsext;
mod grace;
mod grant;
mod inflight;
mod lease;
mod namespace;
mod nlmlink;
mod offload;
mod openops;
mod opstats;
mod orphans;
pub mod pnfs;
mod principal;
mod pseudofs;
mod records;
mod rw;
mod seqids;
mod state;
mod stateids;
mod v40;
mod verify;
mod watch;
mod xattrs;

use std::hash::{Hash, Hasher};
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use nfs::v3::NfsFh3;
use nfs::v4::*;
use oncrpc::{CallContext, RpcService, ServiceError};
use xdr::{Decode, Decoder, Encode, Encoder, XdrBuf};

use crate::access::{ExportTable, Refusal};
use crate::perm::Caller;
use crate::storage::{ReadData, Storage};
use crate::LocalFs;
pub use callback::{backchannel_fn, BackchannelSlot, BackchannelSource, CbTransport};
pub use clients::SessionLimits;
use clients::{SeqOutcome, SessCtx};
pub use coherence::{Delegations, RECALL_WAIT};
pub use deleg::DelegLimits;
use namespace::{Namespace, Place};
pub use nlmlink::V4Locks;
use state::StateTable;

/// A monotonic time source for leases, injected so tests can move time.
pub trait Clock: Send + Sync + 'static {
    /// Time since an arbitrary fixed origin.
    fn now(&self) -> Duration;
}

/// The process's monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock(Instant);

impl Default for SystemClock {
    fn default() -> Self {
        Self(Instant::now())
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

/// A clock that moves only when told to (for tests).
#[derive(Debug, Default)]
pub struct ManualClock(Mutex<Duration>);

impl ManualClock {
    /// A clock at time zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        if let Ok(mut t) = self.0.lock() {
            *t += d;
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        self.0.lock().map(|t| *t).unwrap_or_default()
    }
}

/// A snapshot of the NFSv4 state a server holds
/// ([`Nfs4Service::state_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateStats {
    /// Client records, confirmed or not.
    pub clients: usize,
    /// Sessions.
    pub sessions: usize,
    /// Reply cache bytes the sessions reserve (slots ×
    /// `ca_maxresponsesize_cached`), at most
    /// [`SessionLimits::reply_cache_bytes`].
    pub reply_cache_reserved: u64,
    /// Reply cache bytes held by cached replies now.
    pub reply_cache_cached: u64,
    /// Delegations held.
    pub delegations: usize,
    /// Whether the grace period after a restart still runs.
    pub in_grace: bool,
    /// Client records kept in the state directory.
    pub client_records: usize,
}

/// Reboot recovery settings ([`Nfs4Service::with_recovery`]).
#[derive(Debug, Clone)]
pub struct Recovery {
    /// The state directory the client records and the boot number live
    /// in (`v4-clients/`, `boot-epoch`).
    pub state_dir: std::path::PathBuf,
    /// Longest grace period after a start (`serve --grace-time`; 90 s by
    /// default, as Linux's nfsd). It ends earlier once every client of
    /// the previous instance has sent RECLAIM_COMPLETE.
    pub grace: Duration,
    /// Most client records kept (bound `nfs4.client_records`).
    pub max_records: usize,
}

impl Recovery {
    /// Recovery in `state_dir` with the defaults (90 s grace period,
    /// as many records as confirmed clients).
    pub fn new(state_dir: impl Into<std::path::PathBuf>) -> Self {
        Self {
            state_dir: state_dir.into(),
            grace: Duration::from_secs(90),
            max_records: clients::MAX_CLIENTS,
        }
    }
}

/// NFSv4 server settings.
#[derive(Clone)]
pub struct Nfs4Config {
    /// Session and lease limits.
    pub limits: SessionLimits,
    /// Lease clock.
    pub clock: Arc<dyn Clock>,
    /// `so_major_id` and `server_scope` of EXCHANGE_ID.
    pub server_owner: Bytes,
}

impl core::fmt::Debug for Nfs4Config {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Nfs4Config")
            .field("limits", &self.limits)
            .field("server_owner", &self.server_owner)
            .finish()
    }
}

impl Default for Nfs4Config {
    fn default() -> Self {
        Self {
            limits: SessionLimits::default(),
            clock: Arc::new(SystemClock::default()),
            server_owner: Bytes::from_static(b"nfsrdma"),
        }
    }
}

/// The NFSv4.1/4.2 program (100003 version 4) on a [`Storage`] back end.
pub struct Nfs4Service<S: Storage = LocalFs> {
    fs: Arc<Namespace<S>>,
    state: Arc<Mutex<StateTable>>,
    clock: Arc<dyn Clock>,
    owner: Bytes,
    cbs: callback::Callbacks,
    watch: Arc<watch::FileWatch>,
    /// NLM clients' locks, which NFSv4 LOCK and LOCKT respect.
    nlm: Option<crate::nlm::NlmLocks>,
    /// WRITEs in progress per file, awaited by DELEGRETURN.
    writes: Arc<inflight::Writes>,
    /// Open files whose last name RENAME or REMOVE took.
    orphans: orphans::Orphans,
    /// The pNFS metadata server role ([`pnfs`]), if this server has it.
    mds: Option<Arc<pnfs::Mds>>,
}

impl<S: Storage> core::fmt::Debug for Nfs4Service<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Nfs4Service").finish_non_exhaustive()
    }
}

/// Per-COMPOUND evaluation context (RFC 8881 §16.2.3.1).
struct Cx {
    cur: Option<NfsFh3>,
    saved: Option<NfsFh3>,
    cur_sid: Option<Stateid4>,
    saved_sid: Option<Stateid4>,
    sess: Option<SessCtx>,
    caller: Caller,
    /// Why the client may not use the export, if it may not.
    refused: Option<Refusal>,
    /// Changes are refused with NFS4ERR_ROFS.
    read_only: bool,
    /// The file system the three above were decided for.
    at: Option<Place>,
    peer: oncrpc::PeerInfo,
    /// Whether the operation running is the COMPOUND's last.
    last: bool,
    /// NFSv4.0: the client the operation running acts for.
    client40: Option<u64>,
    /// The caller's identity before any squashing: the principal a
    /// client id is bound to.
    principal: principal::Principal,
    /// Whether RPCSEC_GSS integrity or privacy protects the call (the
    /// machine credential of SP4_MACH_CRED, RFC 8881 §18.35.3).
    gss_protected: bool,
    /// The COMPOUND's minor version (callbacks to a session use its
    /// creator's, RFC 8881 §20.9.3 / §16.2.3).
    minor: u32,
    /// The transport can send a reply's data from the file it is in
    /// ([`CallContext::sends_files`]: plain TCP).
    files: bool,
    /// The data of the READ just run, left in its file for the transport
    /// to send from the page cache (its result carries no bytes); taken
    /// by [`Nfs4Service::compound`] as it encodes the reply.
    file_data: Option<ReadData>,
}

impl Cx {
    /// The client the operation acts for: its session's (4.1, 4.2) or the
    /// one it names (4.0).
    fn clientid(&self) -> Option<u64> {
        self.sess.map(|s| s.clientid).or(self.client40)
    }
}

/// Marks the slot free again if the COMPOUND is abandoned mid-way.
struct SlotGuard {
    state: Arc<Mutex<StateTable>>,
    sid: [u8; 16],
    slot: u32,
    done: bool,
}

impl SlotGuard {
    fn finish(mut self, reply: Option<XdrBuf>) {
        if let Ok(mut st) = self.state.lock() {
            st.finish_slot(&self.sid, self.slot, reply);
        }
        self.done = true;
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        if !self.done {
            if let Ok(mut st) = self.state.lock() {
                st.finish_slot(&self.sid, self.slot, None);
            }
        }
    }
}

/// Operations allowed without a preceding SEQUENCE, alone (RFC 8881
/// §18.35.3, §18.36.3, §18.37.3, §18.50.3, §18.34.3).
fn sessionless(op: &NfsArgop4) -> bool {
    matches!(
        op,
        NfsArgop4::ExchangeId(_)
            | NfsArgop4::CreateSession(_)
            | NfsArgop4::DestroySession(_)
            | NfsArgop4::DestroyClientid(_)
            | NfsArgop4::BindConnToSession(_)
    )
}

impl<S: Storage> Nfs4Service<S> {
    /// The service with default limits and the system clock.
    pub fn new(fs: Arc<S>) -> Self {
        Self::with_config(fs, Nfs4Config::default())
    }

    /// The service with explicit settings.
    pub fn with_config(fs: Arc<S>, cfg: Nfs4Config) -> Self {
        let boot = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(1);
        Self {
            state: Arc::new(Mutex::new(StateTable::new(cfg.limits, boot))),
            clock: cfg.clock,
            owner: cfg.server_owner,
            cbs: callback::Callbacks::default(),
            watch: Arc::default(),
            writes: Arc::default(),
            orphans: orphans::Orphans::default(),
            fs: Arc::new(Namespace::single(fs)),
            nlm: None,
            mds: None,
        }
    }

    /// Makes this server a pNFS metadata server over `mds`'s data servers
    /// (RFC 8881 §12, RFC 8435; [`pnfs`]).
    pub fn with_mds(mut self, mds: Arc<pnfs::Mds>) -> Self {
        self.mds = Some(mds);
        self.bind_mds();
        self
    }

    /// Reboot recovery (RFC 8881 §8.4.2, RFC 7530 §9.6.2): client records
    /// kept in `rec.state_dir`, a boot number above the last instance's
    /// (so its client ids are stale here), and a grace period for the
    /// clients the last instance recorded. Call before serving.
    pub fn with_recovery(self, rec: &Recovery) -> std::io::Result<Self> {
        let boot = records::next_boot(&rec.state_dir)?;
        let (store, prev) = records::RecordStore::open(&rec.state_dir, rec.max_records)?;
        let now = self.clock.now();
        if !prev.is_empty() {
            tracing::info!(
                clients = prev.len(),
                secs = rec.grace.as_secs(),
                "NFSv4 grace period: clients of the last instance may reclaim"
            );
        }
        if let Ok(mut st) = self.state.lock() {
            st.recover(boot, store, prev, now, rec.grace, rec.max_records);
        }
        Ok(self)
    }

    /// Grants delegations within `limits` (default [`DelegLimits::default`]).
    pub fn with_deleg_limits(mut self, limits: DelegLimits) -> Self {
        if let Ok(mut st) = self.state.lock() {
            st.delegs.set_limits(limits);
        }
        self.watch = Arc::new(watch::FileWatch::with_max(limits.max_watches));
        self
    }

    /// Serves every export of `table` at its path, through the pseudo
    /// file system ([`namespace`]), each under its access rules. Without
    /// it, the service's one storage is the root and every client is
    /// served as its credential says (no squashing).
    pub fn with_exports(mut self, table: Arc<ExportTable<S>>) -> Self {
        self.fs = Arc::new(Namespace::of_table(table));
        self
    }

    /// Takes the access decision for the file system `cx.cur` is in, if
    /// that is not the one `cx` holds the decision for; true when it did.
    fn readmit(&self, cx: &mut Cx, ctx: &CallContext) -> bool {
        let Some(place) = cx.cur.as_ref().and_then(|fh| self.fs.place(fh).ok()) else {
            return false;
        };
        if cx.at == Some(place) {
            return false;
        }
        self.decide(cx, place, ctx);
        true
    }

    fn decide(&self, cx: &mut Cx, place: Place, ctx: &CallContext) {
        (cx.caller, cx.refused, cx.read_only) =
            match self.fs.admit(place, &ctx.peer, &ctx.credential) {
                Ok(g) => (g.caller, None, g.read_only),
                Err(r) => (Caller::of(&oncrpc::msg::Credential::None), Some(r), true),
            };
        cx.at = Some(place);
    }

    /// One operation under the access decision of the file system it acts
    /// on: a change on a read-only grant is refused before it runs; an
    /// operation that puts the client in a file system that refuses it
    /// (a put, RESTOREFH, a LOOKUP or LOOKUPP across a junction) fails
    /// with NFS4ERR_ACCESS or NFS4ERR_WRONGSEC (RFC 8881 §2.6.3.1.1) and
    /// leaves no current file handle.
    async fn run(
        &self,
        op: &NfsArgop4,
        cx: &mut Cx,
        ctx: &CallContext,
        now: Duration,
    ) -> NfsResop4 {
        use NfsArgop4 as A;
        let puts = matches!(op, A::Putfh(_) | A::Putrootfh(()) | A::Putpubfh(()));
        self.readmit(cx, ctx);
        if let Some(status) = Self::refuse(op, cx) {
            return NfsResop4::error(op.opnum(), status);
        }
        let r = self.exec(op, cx, now).await;
        if !r.status().is_ok() {
            return r;
        }
        let moved = self.readmit(cx, ctx);
        let status = match cx.refused {
            _ if !(puts || moved) => return r,
            Some(Refusal::NotListed) => Nfsstat4::NFS4ERR_ACCESS,
            Some(Refusal::WrongSec | Refusal::XprtSec) => Nfsstat4::NFS4ERR_WRONGSEC,
            None => return r,
        };
        cx.cur = None;
        cx.cur_sid = None;
        NfsResop4::error(op.opnum(), status)
    }

    /// The status a change gets before it runs on a read-only grant
    /// (RFC 8881 §15.1.6.4; the pseudo file system, §7.3).
    fn refuse(op: &NfsArgop4, cx: &Cx) -> Option<Nfsstat4> {
        use NfsArgop4 as A;
        let changes = match op {
            A::Write(_)
            | A::Create(_)
            | A::Remove(_)
            | A::Rename(_)
            | A::Link(_)
            | A::Setattr(_)
            | A::Allocate(_)
            | A::Deallocate(_)
            | A::Setxattr(_)
            | A::Removexattr(_)
            | A::Copy(_)
            | A::Clone(_) => true,
            A::Open(a) => a.openhow.0.is_some() || a.share_access & OPEN4_SHARE_ACCESS_WRITE != 0,
            _ => false,
        };
        (cx.read_only && changes).then_some(Nfsstat4::NFS4ERR_ROFS)
    }

    /// Takes back channels (and so grants delegations) from `slot`, which
    /// may be filled later, once the transport is listening.
    pub fn with_backchannels(mut self, slot: BackchannelSlot) -> Self {
        self.cbs.slot = slot;
        self.bind_mds();
        self
    }

    /// How long one callback may take before the client's back channel
    /// counts as down (SEQ4_STATUS_CB_PATH_DOWN); default 5 s.
    pub fn with_callback_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.cbs.timeout = timeout;
        self.bind_mds();
        self
    }

    /// A handle breaking this server's delegations for accesses from
    /// outside NFSv4 (NFSv3, local processes), RFC 8881 §10.4.1.
    pub fn delegations(&self) -> Delegations {
        Delegations::new(
            Arc::clone(&self.state),
            self.cbs.clone(),
            Arc::clone(&self.clock),
        )
    }

    /// Delegations currently held by clients.
    pub fn delegations_held(&self) -> usize {
        self.state().map(|s| s.delegs.held()).unwrap_or(0)
    }

    /// How much NFSv4 state the server holds now.
    pub fn state_stats(&self) -> StateStats {
        let Ok(st) = self.state() else {
            return StateStats::default();
        };
        let (clients, sessions) = st.counts();
        let (reply_cache_reserved, reply_cache_cached) = st.reply_cache_bytes();
        let (in_grace, client_records) = st.grace_stats();
        StateStats {
            in_grace,
            client_records,
            clients,
            sessions,
            reply_cache_reserved,
            reply_cache_cached,
            delegations: st.delegs.held(),
        }
    }

    fn state(&self) -> Result<MutexGuard<'_, StateTable>, Nfsstat4> {
        self.state.lock().map_err(|_| Nfsstat4::NFS4ERR_SERVERFAULT)
    }

    fn lease_secs(&self) -> u32 {
        self.state()
            .map(|s| s.lease().as_secs() as u32)
            .unwrap_or(90)
    }

    /// The evaluation context a COMPOUND starts with, under the access
    /// decision of the root.
    fn new_cx(&self, ctx: &CallContext) -> Cx {
        let mut cx = Cx {
            cur: None,
            saved: None,
            cur_sid: None,
            saved_sid: None,
            sess: None,
            caller: Caller::of(&ctx.credential),
            refused: None,
            read_only: false,
            at: None,
            peer: ctx.peer,
            last: false,
            client40: None,
            principal: principal::Principal::of(&ctx.credential),
            gss_protected: principal::gss_protected(&ctx.credential),
            minor: 0,
            files: ctx.sends_files(),
            file_data: None,
        };
        if let Ok(root) = self.fs.place(&self.fs.root_for(&ctx.peer)) {
            self.decide(&mut cx, root, ctx);
        }
        cx
    }

    /// RFC 8881 §16.2: one COMPOUND.
    async fn compound(&self, ctx: &CallContext, args: &Bytes) -> Result<XdrBuf, ServiceError> {
        let mut dec = Decoder::from_bytes(args);
        let hdr = CompoundHeader::decode(&mut dec)?;
        let mut res = Compound4Res {
            status: Nfsstat4::NFS4_OK,
            tag: hdr.tag.clone(),
            resarray: Vec::new(),
        };
        if hdr.minorversion > 2 {
            res.status = Nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH;
            return Ok(xdr::to_xdr_buf(&res));
        }
        // RFC 8881 §16.2.3, §14.5: the tag is a `utf8str_cs`; one that is
        // not UTF-8 fails the whole COMPOUND, no operation run.
        if let Err(e) = utf8(&hdr.tag) {
            res.status = e;
            return Ok(xdr::to_xdr_buf(&res));
        }
        // Before the first wait: a COMPOUND handed over earlier is counted
        // before a later DELEGRETURN runs (super::inflight). The transports
        // hand a connection's calls over in arrival order up to this first
        // wait; the rest runs concurrently with later calls (storage calls
        // do not yield).
        let mut writes = self.writes.scan(args);
        tokio::task::yield_now().await;
        if hdr.minorversion == 0 {
            // Boxed: NFSv4.0's path (its own sequencing and callbacks)
            // would otherwise size every 4.1/4.2 COMPOUND's future.
            return Box::pin(self.compound_v40(ctx, &hdr, dec, res)).await;
        }
        let now = self.clock.now();
        let mut cx = self.new_cx(ctx);
        cx.minor = hdr.minorversion;
        let mut guard = None;
        let mut size = res.encoded_len();
        // READ data left in its files, by result index.
        let mut in_files: Vec<(usize, ReadData)> = Vec::new();
        for i in 0..hdr.numops {
            cx.last = i + 1 == hdr.numops;
            let started = Instant::now();
            let opnum = dec.peek_u32().unwrap_or(0);
            let op = match NfsArgop4::decode(&mut dec) {
                Ok(NfsArgop4::Illegal(_)) => None,
                Ok(op) if hdr.minorversion < 2 && is_v42_op(op.opnum().0) => None,
                Ok(op) => Some(op),
                Err(_) => {
                    let r = NfsResop4::error(Opnum4(opnum), Nfsstat4::NFS4ERR_BADXDR);
                    res.status = r.status();
                    res.resarray.push(r);
                    break;
                }
            };
            let mut r = if let Some(NfsArgop4::Delegreturn(a)) = &op {
                if i == 0 {
                    NfsResop4::Delegreturn(Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION)
                } else {
                    self.delegreturn(&a.deleg_stateid, &mut cx).await
                }
            } else {
                match op {
                    None => NfsResop4::Other(Opnum4::OP_ILLEGAL, Nfsstat4::NFS4ERR_OP_ILLEGAL),
                    // RFC 8881 §17: the NFSv4.0-only operations are "MUST
                    // NOT implement" in 4.1.
                    Some(op) if is_v40_only_op(op.opnum().0) => {
                        NfsResop4::error(op.opnum(), Nfsstat4::NFS4ERR_NOTSUPP)
                    }
                    Some(NfsArgop4::Sequence(a)) if i == 0 => {
                        let mut h = std::collections::hash_map::DefaultHasher::new();
                        args.hash(&mut h);
                        let req = args.len() + 40 + xdr::padded_len(ctx.cred.body.len());
                        let out = match self.state() {
                            Ok(mut st) => {
                                st.expire(now);
                                st.sequence(&a, ctx.peer.conn_id, hdr.numops, req, h.finish(), now)
                            }
                            Err(e) => SeqOutcome::Err(e),
                        };
                        match out {
                            SeqOutcome::New(ok, sc) => {
                                guard = Some(SlotGuard {
                                    state: Arc::clone(&self.state),
                                    sid: sc.sessionid,
                                    slot: sc.slot,
                                    done: false,
                                });
                                cx.sess = Some(sc);
                                NfsResop4::Sequence(Res4::Ok(ok))
                            }
                            SeqOutcome::Replay(b) => return Ok(b),
                            SeqOutcome::Err(e) => NfsResop4::Sequence(Res4::Err(e)),
                        }
                    }
                    Some(op) if i > 0 && matches!(op, NfsArgop4::Sequence(_)) => {
                        NfsResop4::error(op.opnum(), Nfsstat4::NFS4ERR_SEQUENCE_POS)
                    }
                    Some(op) if i == 0 && !sessionless(&op) => {
                        NfsResop4::error(op.opnum(), Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION)
                    }
                    Some(op) if i == 0 && hdr.numops > 1 => {
                        NfsResop4::error(op.opnum(), Nfsstat4::NFS4ERR_NOT_ONLY_OP)
                    }
                    Some(op) => {
                        let r = self.run(&op, &mut cx, ctx, now).await;
                        if matches!(op, NfsArgop4::Write(_)) {
                            writes.pop_front();
                        }
                        r
                    }
                }
            };
            let file = cx.file_data.take();
            let in_file = file.as_ref().map_or(0, |d| xdr::padded_len(d.len()));
            let len = r.encoded_len() + in_file;
            if let Some(sc) = &cx.sess {
                if size + len > sc.max_response as usize {
                    r = NfsResop4::error(r.opnum(), Nfsstat4::NFS4ERR_REP_TOO_BIG);
                } else if sc.cachethis && size + len > sc.max_response_cached as usize {
                    r = NfsResop4::error(r.opnum(), Nfsstat4::NFS4ERR_REP_TOO_BIG_TO_CACHE);
                }
            }
            size += r.encoded_len();
            if let (Some(d), NfsResop4::Read(Res4::Ok(_))) = (file, &r) {
                size += in_file;
                in_files.push((res.resarray.len(), d));
            }
            let status = r.status();
            opstats::record(hdr.minorversion, r.opnum(), status, started.elapsed());
            res.resarray.push(r);
            if !status.is_ok() {
                res.status = status;
                break;
            }
        }
        let buf = encode_compound(&res, in_files);
        if let Some(g) = guard {
            let cache = cx.sess.is_some_and(|s| s.cachethis);
            g.finish(cache.then(|| buf.clone()));
        }
        Ok(buf)
    }
}

impl<S: Storage> RpcService for Nfs4Service<S> {
    fn program(&self) -> u32 {
        NFS4_PROGRAM
    }

    fn versions(&self) -> RangeInclusive<u32> {
        NFS_V4..=NFS_V4
    }

    async fn call(&self, ctx: CallContext, args: Bytes) -> Result<XdrBuf, ServiceError> {
        match ctx.proc_ {
            NFSPROC4_NULL => Ok(XdrBuf::new()),
            NFSPROC4_COMPOUND => self.compound(&ctx, &args).await,
            _ => Err(ServiceError::ProcUnavail),
        }
    }

    /// A connection bound to a live session (RFC 8881 §2.10.3.1) is kept
    /// open however long its client is silent: the session's back channel
    /// may use it, and the client's lease bounds how long it is held.
    fn holds_connection(&self, conn_id: u64) -> bool {
        let now = self.clock.now();
        self.state()
            .is_ok_and(|mut st| st.conn_in_session(conn_id, now))
    }
}

/// COMPOUND4res (RFC 8881 §16.2.2) as the codec encodes it, except that
/// the data of the READ results named in `in_files` (by index; their
/// `data` is empty) goes in as file ranges the TCP sender sends from the
/// page cache (`sendfile`), as NFSv3 READ's does: READ4resok is `eof`,
/// then `data<>` (§18.22.2).
fn encode_compound(res: &Compound4Res, in_files: Vec<(usize, ReadData)>) -> XdrBuf {
    if in_files.is_empty() {
        return xdr::to_xdr_buf(res);
    }
    let mut out = XdrBuf::new();
    res.status.encode(&mut out);
    out.put_opaque(&res.tag);
    out.put_array_len(res.resarray.len());
    let mut in_files = in_files.into_iter().peekable();
    for (i, r) in res.resarray.iter().enumerate() {
        match (r, in_files.next_if(|(at, _)| *at == i)) {
            (NfsResop4::Read(Res4::Ok(ok)), Some((_, data))) => {
                Opnum4::OP_READ.encode(&mut out);
                Nfsstat4::NFS4_OK.encode(&mut out);
                ok.eof.encode(&mut out);
                data.encode_into(&mut out, true);
            }
            _ => r.encode(&mut out),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A READ between other results, its data left in a file: once the
    /// file range is read in, the reply is byte for byte what the codec
    /// encodes with the data in the result.
    #[test]
    fn a_compound_with_read_data_in_a_file_encodes_as_the_codec_does() {
        #[derive(Debug)]
        struct Mem(&'static [u8]);
        impl xdr::FileSource for Mem {
            fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
                unreachable!("read in, not sent")
            }
            fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
                let from = &self.0[offset as usize..];
                let n = from.len().min(buf.len());
                buf[..n].copy_from_slice(&from[..n]);
                Ok(n)
            }
        }
        let data = &b"0123456789abcdefg"[..];
        let res = |bytes: Bytes| Compound4Res {
            status: Nfsstat4::NFS4_OK,
            tag: Bytes::from_static(b"t"),
            resarray: vec![
                NfsResop4::Putfh(Nfsstat4::NFS4_OK),
                NfsResop4::Read(Res4::Ok(Read4ResOk {
                    eof: true,
                    data: xdr::DdpOpaque(bytes),
                })),
                NfsResop4::Restorefh(Nfsstat4::NFS4_OK),
            ],
        };
        let file = ReadData::File {
            file: Arc::new(Mem(data)),
            offset: 3,
            len: 11,
        };
        let mut ours = encode_compound(&res(Bytes::new()), vec![(1, file)]);
        assert!(ours.has_files());
        ours.load_files().unwrap();
        let codec = xdr::to_xdr_buf(&res(Bytes::from_static(&data[3..14])));
        assert_eq!(ours.to_bytes(), codec.to_bytes());
        assert_eq!(ours.len(), codec.len());
        // Nothing in files: the codec's own encoding.
        let plain = encode_compound(&res(Bytes::from_static(b"xy")), Vec::new());
        assert_eq!(
            plain.to_bytes(),
            xdr::to_xdr_buf(&res(Bytes::from_static(b"xy"))).to_bytes()
        );
    }
}
