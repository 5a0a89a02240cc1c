//! [`Session`]: the client id and session of an NFSv4.1 client, and the
//! SEQUENCE-prefixed COMPOUND call every file operation goes through.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use nfs::v4::session::{
    CallbackSecParms4, ChannelAttrs4, ClientOwner4, CreateSession4Args, CreateSession4ResOk,
    DestroyClientid4Args, DestroySession4Args, ExchangeId4Args, ReclaimComplete4Args,
    Sequence4Args, StateProtect4A, CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
};
use nfs::v4::{
    ulb, Compound4Args, Compound4Res, NfsArgop4, NfsResop4, Nfsstat4, Opnum4, Res4, Sessionid4,
    NFS4_PROGRAM, NFSPROC4_COMPOUND, NFS_V4,
};
use oncrpc::client::DdpReplyHint;
use oncrpc::msg::OpaqueAuth;
use oncrpc::{ClientTransport, ReplyHint, RpcCall};
use tokio::sync::Semaphore;
use xdr::{Bounded, Decoder, FixedOpaque};

use super::deleg::{Delegations, BACK_SLOTS, CB_PROGRAM};
use super::error::{Error, Result};
use crate::client::RPC_REPLY_HEADER_MAX;

/// What the client asks for in CREATE_SESSION (RFC 8881 §18.36.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionOptions {
    /// Fore channel `ca_maxrequestsize`: the largest COMPOUND request.
    pub max_request_size: u32,
    /// Fore channel `ca_maxresponsesize`: the largest COMPOUND reply.
    pub max_response_size: u32,
    /// Fore channel `ca_maxrequests`: slots wanted (the server may grant
    /// fewer; at least one is used).
    pub slots: u32,
    /// Most NFS4ERR_DELAY retries of one COMPOUND before the error is
    /// returned (RFC 8881 §15.1.1.3).
    pub delay_retries: u32,
    /// The minor version of every COMPOUND, from EXCHANGE_ID on: 1
    /// (RFC 8881) or 2 (RFC 7862, whose operations this client does not
    /// use; the session works the same, RFC 7862 §1.3).
    pub minor_version: u32,
}

impl SessionOptions {
    /// Channel sizes for a transport that moves `max_io` bytes of READ or
    /// WRITE data per call: the data plus 4 KiB for the other operations
    /// and attributes (RFC 8881 §18.36.3; RPC-over-RDMA moves the data by
    /// chunk, TCP inline, both within these bounds).
    pub fn for_io_size(max_io: u32) -> Self {
        let sized = max_io.saturating_add(4096);
        Self {
            max_request_size: sized,
            max_response_size: sized,
            slots: 16,
            delay_retries: 10,
            minor_version: 1,
        }
    }
}

impl SessionOptions {
    /// Fore channel for an RPC-over-RDMA connection made with `config`:
    /// one slot per credit the client asks for (RFC 8166 §3.3.1; the
    /// transport queues a call that finds no credit), at most 64, and
    /// 1 MiB of READ/WRITE data per call, which moves by chunk.
    pub fn for_rdma(config: &rpcrdma::transport::RdmaClientConfig) -> Self {
        Self {
            slots: config.max_requests.clamp(1, 64),
            ..Self::default()
        }
    }
}

impl Default for SessionOptions {
    /// 1 MiB of READ/WRITE data per call, 16 slots.
    fn default() -> Self {
        Self::for_io_size(1 << 20)
    }
}

/// Offset, in the results, of the fixed-size success result of `op`
/// (RFC 8881 §16.2.2: the operation number, the status and the `resok`
/// body), for operations whose success result has a fixed size.
fn fixed_result_len(op: &NfsArgop4) -> Option<usize> {
    match op {
        // opnum, status, sessionid, five words (RFC 8881 §18.46.2).
        NfsArgop4::Sequence(_) => Some(4 + 4 + 16 + 5 * 4),
        NfsArgop4::Putfh(_)
        | NfsArgop4::Putrootfh(_)
        | NfsArgop4::Savefh(_)
        | NfsArgop4::Restorefh(_)
        | NfsArgop4::Lookup(_) => Some(8),
        _ => None,
    }
}

/// The reply hint of a COMPOUND (ULB v2 draft §5.2.2, §5.4.1): the
/// session's `ca_maxresponsesize` bounds the reply; the first READ's data
/// is DDP-eligible, and its offset in the results is known when every
/// operation before it has a fixed-size success result (the status, the
/// echoed tag, the result count, those results, READ's opnum, status,
/// `eof` and the data's length word).
pub(crate) fn compound_hint(args: &Compound4Args, max_response: u32) -> ReplyHint {
    let size = ulb::reply_size_estimate(args, max_response);
    let tag = 4 + args.tag.len().div_ceil(4) * 4;
    let ddp = size.ddp_max.first().and_then(|&(idx, max_len)| {
        let before = args.argarray.get(..idx)?;
        if !matches!(args.argarray.get(idx), Some(NfsArgop4::Read(_))) {
            return None;
        }
        let mut position = 4 + tag + 4;
        for op in before {
            position += fixed_result_len(op)?;
        }
        Some(DdpReplyHint {
            position: position + 16,
            max_len,
        })
    });
    ReplyHint {
        max_reply_len: RPC_REPLY_HEADER_MAX.saturating_add(size.total_max),
        ddp,
    }
}

/// The slot table of the fore channel (RFC 8881 §2.10.6.1): each slot's
/// next sequence id, and which slots are free.
#[derive(Debug)]
pub(super) struct Slots {
    seqids: Vec<u32>,
    /// The slot's last request got no reply: the server may or may not
    /// have executed it under the current sequence id.
    uncertain: Vec<bool>,
    free: Vec<u32>,
}

impl Slots {
    /// Slots in the table.
    pub(super) fn len(&self) -> u32 {
        self.seqids.len() as u32
    }

    /// A fresh table of `n` slots, each at sequence id 1.
    pub(super) fn new(n: u32) -> Self {
        Self {
            seqids: vec![1; n as usize],
            uncertain: vec![false; n as usize],
            free: (0..n).rev().collect(),
        }
    }
}

/// What a reply (or its absence) does to a slot (RFC 8881 §2.10.6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotOutcome {
    /// SEQUENCE was executed: the next request takes the next id.
    Advance,
    /// SEQUENCE failed: the id is unused.
    Keep,
    /// No reply: unknown whether the id was used.
    Unknown,
}

/// The client id and session the calls use now: both change when the
/// session is recovered ([`super::recover`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Ident {
    pub(super) clientid: u64,
    pub(super) sessionid: Sessionid4,
    /// `csa_sequence` of the next CREATE_SESSION for this client id
    /// (RFC 8881 §18.36.4).
    pub(super) next_create: u32,
    /// Bumped at each recovery: a call that failed under an older
    /// generation just tries again.
    pub(super) generation: u64,
}

/// How the session was made, to make it again: the client owner
/// (RFC 8881 §2.4: the same `co_ownerid` and verifier, so that a
/// restarted server lets this client reclaim), the credential of
/// EXCHANGE_ID (its principal must match, §2.4.3), the channels asked and
/// the callback table whose back channel it is.
#[derive(Debug)]
pub(super) struct Origin {
    pub(super) owner: (Bytes, [u8; 8]),
    pub(super) cred: OpaqueAuth,
    pub(super) fore: ChannelAttrs4,
    pub(super) back: ChannelAttrs4,
    pub(super) callbacks: Option<Arc<Delegations>>,
}

/// What every view of one session shares ([`Session::with_credential`]):
/// the client id and session, the fore channel's slot table, the
/// open-owner counter, and when the last SEQUENCE succeeded (for lease
/// renewal, RFC 8881 §8.3).
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) ident: Mutex<Ident>,
    pub(super) origin: Origin,
    /// Held while the session is recovered.
    pub(super) recovering: tokio::sync::Mutex<()>,
    /// Opens to reclaim after the client id changed.
    pub(super) reclaim: Mutex<Option<Arc<dyn super::recover::Reclaim>>>,
    pub(super) slots: Mutex<Slots>,
    pub(super) slot_wait: Semaphore,
    slot_wait_total: usize,
    open_owner: AtomicU32,
    /// Milliseconds after `epoch` of the last successful SEQUENCE.
    renewed_ms: AtomicU64,
    /// `sr_status_flags` of the last successful SEQUENCE.
    last_flags: AtomicU32,
    epoch: Instant,
    /// The server granted a back channel on the session's connection
    /// (CREATE_SESSION4_FLAG_CONN_BACK_CHAN, RFC 8881 §18.36.3).
    back_channel: bool,
}

/// An NFSv4.1 session on one transport (RFC 8881 §2.10): the client id
/// from EXCHANGE_ID, the session from CREATE_SESSION, and the fore
/// channel's slot table. Calls may run concurrently, one per slot.
#[derive(Debug)]
pub struct Session<T> {
    pub(super) rpc: T,
    cred: OpaqueAuth,
    fore: ChannelAttrs4,
    pub(super) shared: Arc<Shared>,
    delay_retries: u32,
    pub(super) minor: u32,
}

/// A client owner name unique to this process and call (RFC 8881 §2.4:
/// the `co_ownerid` must be unique per client instance).
fn owner_id() -> (Bytes, [u8; 8]) {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let boot = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    let id = format!("nfsrdma-client/{}/{}/{n}", host.trim(), std::process::id());
    (Bytes::from(id), boot.to_be_bytes())
}

impl<T: ClientTransport> Session<T> {
    /// Establishes a session (RFC 8881 §18.35, §18.36, §18.51):
    /// EXCHANGE_ID with SP4_NONE, CREATE_SESSION with the fore channel of
    /// `opts` and no back channel, then RECLAIM_COMPLETE (this client
    /// has no state to reclaim). OPENs ask for no delegation.
    pub async fn establish(rpc: T, cred: OpaqueAuth, opts: &SessionOptions) -> Result<Self> {
        Self::establish_inner(rpc, cred, opts, None).await
    }

    /// Like [`Session::establish`], with the back channel on the
    /// session's own connection (CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
    /// RFC 8881 §18.36.3, §2.10.3.1; over RPC-over-RDMA the connection's
    /// reverse direction, RFC 8167) served by `callbacks`' program
    /// ([`super::CB_PROGRAM`], AUTH_NONE): the transport must answer the
    /// server's calls with [`Delegations::service`]. When the server
    /// grants the back channel, OPENs take the delegations it offers
    /// ([`Session::has_back_channel`]).
    pub async fn establish_with_callbacks(
        rpc: T,
        cred: OpaqueAuth,
        opts: &SessionOptions,
        callbacks: &Arc<Delegations>,
    ) -> Result<Self> {
        Self::establish_inner(rpc, cred, opts, Some(callbacks)).await
    }

    async fn establish_inner(
        rpc: T,
        cred: OpaqueAuth,
        opts: &SessionOptions,
        callbacks: Option<&Arc<Delegations>>,
    ) -> Result<Self> {
        let owner = owner_id();
        let minor = opts.minor_version;
        let (clientid, sequence) = exchange_id(&rpc, &cred, minor, &owner).await?;
        let fore = ChannelAttrs4 {
            headerpadsize: 0,
            maxrequestsize: opts.max_request_size,
            maxresponsesize: opts.max_response_size,
            maxresponsesize_cached: 8192,
            maxoperations: 16,
            maxrequests: opts.slots.max(1),
            rdma_ird: Bounded(vec![]),
        };
        let back = ChannelAttrs4 {
            headerpadsize: 0,
            maxrequestsize: 4096,
            maxresponsesize: 4096,
            maxresponsesize_cached: 0,
            maxoperations: 4,
            maxrequests: if callbacks.is_some() { BACK_SLOTS } else { 1 },
            rdma_ird: Bounded(vec![]),
        };
        let origin = Origin {
            owner,
            cred: cred.clone(),
            fore,
            back,
            callbacks: callbacks.cloned(),
        };
        let s = create_session(&rpc, minor, &origin, clientid, sequence).await?;
        let granted = s.fore_chan_attrs.maxrequests.clamp(1, 64);
        let back_channel =
            callbacks.is_some() && s.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0;
        if let Some(cb) = callbacks.filter(|_| back_channel) {
            cb.set_session(s.sessionid);
        }
        if s.fore_chan_attrs.maxoperations < 4 {
            return Err(Error::Protocol(
                "fore channel allows fewer than 4 operations",
            ));
        }
        let session = Self {
            rpc,
            cred,
            fore: s.fore_chan_attrs,
            shared: Arc::new(Shared {
                ident: Mutex::new(Ident {
                    clientid,
                    sessionid: s.sessionid,
                    next_create: sequence.wrapping_add(1),
                    generation: 0,
                }),
                origin,
                recovering: tokio::sync::Mutex::new(()),
                reclaim: Mutex::new(None),
                slots: Mutex::new(Slots::new(granted)),
                slot_wait: Semaphore::new(granted as usize),
                slot_wait_total: granted as usize,
                open_owner: AtomicU32::new(0),
                renewed_ms: AtomicU64::new(0),
                last_flags: AtomicU32::new(0),
                epoch: Instant::now(),
                back_channel,
            }),
            delay_retries: opts.delay_retries,
            minor,
        };
        let rc = NfsArgop4::ReclaimComplete(ReclaimComplete4Args { one_fs: false });
        match session.compound(vec![rc]).await {
            Ok(_) => {}
            Err(Error::Nfs { status, .. }) if status == Nfsstat4::NFS4ERR_COMPLETE_ALREADY => {}
            Err(e) => return Err(e),
        }
        Ok(session)
    }

    /// The client id (RFC 8881 §18.35.2) now (a recovery may change it).
    pub fn clientid(&self) -> u64 {
        self.ident().clientid
    }

    /// The session id (RFC 8881 §18.36.2) now (a recovery changes it).
    pub fn sessionid(&self) -> Sessionid4 {
        self.ident().sessionid
    }

    pub(super) fn ident(&self) -> Ident {
        *self.shared.ident.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The minor version of this session's COMPOUNDs.
    pub fn minor_version(&self) -> u32 {
        self.minor
    }

    /// Whether the server granted the back channel asked by
    /// [`Session::establish_with_callbacks`]: OPENs then take the
    /// delegations offered (else they say OPEN4_SHARE_ACCESS_WANT_NO_DELEG).
    pub fn has_back_channel(&self) -> bool {
        self.shared.back_channel
    }

    /// The fore channel the server granted (RFC 8881 §18.36.2).
    pub fn fore_channel(&self) -> &ChannelAttrs4 {
        &self.fore
    }

    /// Slots in the fore channel's table: the most calls in flight.
    pub fn slot_count(&self) -> usize {
        self.shared.slot_wait_total
    }

    /// A view of this session whose calls carry credential `cred`
    /// instead (RFC 5531 §8.2: each RPC call has its own), over the same
    /// transport, slot table and state: one session serves many users,
    /// as a multi-user mount needs (RFC 8881 §2.10.8.2 lets any principal
    /// use a session created with AUTH_SYS). Only the owning session
    /// should [`Session::close`] it.
    pub fn with_credential(&self, cred: OpaqueAuth) -> Session<&T> {
        Session {
            rpc: &self.rpc,
            cred,
            fore: self.fore.clone(),
            shared: Arc::clone(&self.shared),
            delay_retries: self.delay_retries,
            minor: self.minor,
        }
    }

    /// How long since a SEQUENCE last succeeded on this session (every
    /// successful SEQUENCE renews the client's lease, RFC 8881 §8.3).
    pub fn idle_for(&self) -> Duration {
        let now = self.shared.epoch.elapsed();
        let last = Duration::from_millis(self.shared.renewed_ms.load(Ordering::Relaxed));
        now.saturating_sub(last)
    }

    /// Renews the lease (RFC 8881 §8.3: a SEQUENCE alone, as Linux's
    /// client sends when it has nothing else to say) and returns the
    /// SEQUENCE status flags (`sr_status_flags`, §18.46.3).
    pub async fn renew(&self) -> Result<u32> {
        self.compound(vec![]).await?;
        Ok(self.shared.last_flags.load(Ordering::Relaxed))
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.rpc
    }

    /// A fresh open-owner name for this client (RFC 8881 §18.16.3).
    pub(crate) fn next_open_owner(&self) -> Bytes {
        let n = self.shared.open_owner.fetch_add(1, Ordering::Relaxed);
        Bytes::from(format!("open-owner-{n}"))
    }

    /// A free slot of the current session: the session, the slot, its
    /// sequence id, the highest slot id, and whether its last request is
    /// uncertain. The table and the session change together (under the
    /// table's lock, then the ident's).
    fn take_slot(&self) -> Result<(Ident, u32, u32, u32, bool)> {
        let mut s = self
            .shared
            .slots
            .lock()
            .map_err(|_| Error::Protocol("slot table poisoned"))?;
        let id = self.ident();
        let slot = s.free.pop().ok_or(Error::Protocol("no free slot"))?;
        let seqid = s.seqids.get(slot as usize).copied().unwrap_or(1);
        let highest = s.seqids.len().saturating_sub(1) as u32;
        let uncertain = s.uncertain.get(slot as usize).copied().unwrap_or(false);
        Ok((id, slot, seqid, highest, uncertain))
    }

    /// Returns `slot` to the table with what its request did to it,
    /// unless the session changed since it was taken (the new table has
    /// all its slots).
    fn put_slot(&self, slot: u32, outcome: SlotOutcome, generation: u64) {
        if let Ok(mut s) = self.shared.slots.lock() {
            if self.ident().generation != generation {
                return;
            }
            let i = slot as usize;
            if outcome == SlotOutcome::Advance {
                if let Some(q) = s.seqids.get_mut(i) {
                    *q = q.wrapping_add(1);
                }
            }
            if let Some(u) = s.uncertain.get_mut(i) {
                *u = outcome == SlotOutcome::Unknown;
            }
            s.free.push(slot);
        }
    }

    /// Sends SEQUENCE followed by `ops` (RFC 8881 §18.46) on a free slot
    /// and returns the results after SEQUENCE, all successful; the first
    /// failure is [`Error::Nfs`]. NFS4ERR_DELAY (for SEQUENCE or any
    /// operation) is retried after a backoff of 10 ms doubling to 1 s, at
    /// most [`SessionOptions::delay_retries`] times (RFC 8881 §15.1.1.3).
    ///
    /// A call that got no reply (an RPC error) leaves its slot uncertain:
    /// the next request on it reuses the sequence id, and if the server
    /// answers NFS4ERR_RETRY_UNCACHED_REP (it had executed the lost
    /// request, RFC 8881 §2.10.6.1.3) the slot advances and the request
    /// is sent again.
    pub async fn compound(&self, ops: Vec<NfsArgop4>) -> Result<Vec<NfsResop4>> {
        self.compound_into(ops, None).await
    }

    /// Like [`Session::compound`], with the reply built in `dst` on its
    /// first try: an RPC-over-RDMA transport registers `dst` as the Write
    /// chunk of the first READ's data (RFC 8166 §3.4.6).
    ///
    /// A SEQUENCE failing because the session or the client id is gone
    /// (NFS4ERR_BADSESSION, NFS4ERR_DEADSESSION, NFS4ERR_STALE_CLIENTID,
    /// NFS4ERR_EXPIRED: a server restart or an expired lease) recovers
    /// the session ([`super::recover`]) and sends the COMPOUND again, at
    /// most [`MAX_RECOVERIES`] times.
    pub(crate) async fn compound_into(
        &self,
        ops: Vec<NfsArgop4>,
        mut dst: Option<BytesMut>,
    ) -> Result<Vec<NfsResop4>> {
        let mut recoveries = 0;
        loop {
            let generation = self.ident().generation;
            match self.compound_retrying(ops.clone(), dst.take()).await {
                Err(Error::Nfs { op, status })
                    if op == Opnum4::OP_SEQUENCE
                        && super::recover::session_lost(status)
                        && recoveries < MAX_RECOVERIES =>
                {
                    recoveries += 1;
                    tracing::info!(?status, "NFSv4 session lost; recovering");
                    self.recover(generation).await?;
                }
                r => return r,
            }
        }
    }

    /// [`Session::compound_into`] without recovery: NFS4ERR_DELAY and a
    /// lost reply's NFS4ERR_RETRY_UNCACHED_REP only.
    pub(super) async fn compound_retrying(
        &self,
        ops: Vec<NfsArgop4>,
        mut dst: Option<BytesMut>,
    ) -> Result<Vec<NfsResop4>> {
        let mut backoff = Duration::from_millis(10);
        let mut tries = 0;
        let mut resent = false;
        loop {
            match self.compound_once(ops.clone(), dst.take()).await {
                Err(Error::Nfs { status, .. })
                    if status == Nfsstat4::NFS4ERR_DELAY && tries < self.delay_retries =>
                {
                    tries += 1;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                Err(Error::Nfs { op, status })
                    if op == Opnum4::OP_SEQUENCE
                        && status == Nfsstat4::NFS4ERR_RETRY_UNCACHED_REP
                        && !resent =>
                {
                    resent = true;
                }
                r => return r,
            }
        }
    }

    async fn compound_once(
        &self,
        ops: Vec<NfsArgop4>,
        dst: Option<BytesMut>,
    ) -> Result<Vec<NfsResop4>> {
        let permit = self
            .shared
            .slot_wait
            .acquire()
            .await
            .map_err(|_| Error::Protocol("slot table closed"))?;
        let (id, slot, seqid, highest, uncertain) = self.take_slot()?;
        let mut argarray = Vec::with_capacity(ops.len() + 1);
        argarray.push(NfsArgop4::Sequence(Sequence4Args {
            sessionid: id.sessionid,
            sequenceid: seqid,
            slotid: slot,
            highest_slotid: highest,
            cachethis: false,
        }));
        argarray.extend(ops);
        let res = self.send(argarray, dst).await;
        let outcome = match &res {
            Ok(r) => match r.resarray.first() {
                Some(NfsResop4::Sequence(Res4::Ok(_))) => SlotOutcome::Advance,
                Some(NfsResop4::Sequence(Res4::Err(e)))
                    if uncertain && *e == Nfsstat4::NFS4ERR_RETRY_UNCACHED_REP =>
                {
                    SlotOutcome::Advance
                }
                _ => SlotOutcome::Keep,
            },
            // No usable reply: the server may have executed it.
            Err(_) => SlotOutcome::Unknown,
        };
        self.put_slot(slot, outcome, id.generation);
        drop(permit);
        let mut results = check(res?)?;
        match results.first() {
            Some(NfsResop4::Sequence(Res4::Ok(ok))) if ok.slotid == slot => {
                let sh = &self.shared;
                let ms = sh.epoch.elapsed().as_millis() as u64;
                sh.renewed_ms.fetch_max(ms, Ordering::Relaxed);
                sh.last_flags.store(ok.status_flags, Ordering::Relaxed);
            }
            _ => return Err(Error::Protocol("first result is not this SEQUENCE")),
        }
        results.remove(0);
        Ok(results)
    }

    async fn send(&self, argarray: Vec<NfsArgop4>, dst: Option<BytesMut>) -> Result<Compound4Res> {
        let args = Compound4Args {
            tag: Bytes::new(),
            minorversion: self.minor,
            argarray,
        };
        let reply_hint = compound_hint(&args, self.fore.maxresponsesize);
        call(&self.rpc, &self.cred, &args, reply_hint, dst).await
    }

    /// Ends the session and the client id (RFC 8881 §18.37, §18.50):
    /// DESTROY_SESSION, then DESTROY_CLIENTID, each alone in a COMPOUND.
    pub async fn close(self) -> Result<()> {
        let id = self.ident();
        let ds = NfsArgop4::DestroySession(DestroySession4Args {
            sessionid: id.sessionid,
        });
        unsequenced(&self.rpc, &self.cred, self.minor, vec![ds]).await?;
        let dc = NfsArgop4::DestroyClientid(DestroyClientid4Args {
            clientid: id.clientid,
        });
        unsequenced(&self.rpc, &self.cred, self.minor, vec![dc]).await?;
        Ok(())
    }
}

/// Most session recoveries one COMPOUND goes through before its error is
/// returned.
pub(super) const MAX_RECOVERIES: u32 = 3;

/// EXCHANGE_ID with SP4_NONE for client owner `owner` (RFC 8881
/// §18.35): the client id and the `csa_sequence` of its first
/// CREATE_SESSION.
pub(super) async fn exchange_id<T: ClientTransport>(
    rpc: &T,
    cred: &OpaqueAuth,
    minor: u32,
    (ownerid, verifier): &(Bytes, [u8; 8]),
) -> Result<(u64, u32)> {
    let x = NfsArgop4::ExchangeId(ExchangeId4Args {
        clientowner: ClientOwner4 {
            verifier: FixedOpaque(*verifier),
            ownerid: Bounded(ownerid.clone()),
        },
        flags: 0,
        state_protect: StateProtect4A::None,
        client_impl_id: Bounded(vec![]),
    });
    let res = unsequenced(rpc, cred, minor, vec![x]).await?;
    let Some(NfsResop4::ExchangeId(Res4::Ok(xid))) = res.into_iter().next() else {
        return Err(Error::Protocol("EXCHANGE_ID result missing"));
    };
    Ok((xid.clientid, xid.sequenceid))
}

/// CREATE_SESSION (RFC 8881 §18.36) for `clientid` with the channels of
/// `origin`, its back channel on this connection when it has callbacks.
pub(super) async fn create_session<T: ClientTransport>(
    rpc: &T,
    minor: u32,
    origin: &Origin,
    clientid: u64,
    sequence: u32,
) -> Result<CreateSession4ResOk> {
    let (flags, cb_program) = match origin.callbacks {
        Some(_) => (CREATE_SESSION4_FLAG_CONN_BACK_CHAN, CB_PROGRAM),
        None => (0, 0),
    };
    let cs = NfsArgop4::CreateSession(CreateSession4Args {
        clientid,
        sequence,
        flags,
        fore_chan_attrs: origin.fore.clone(),
        back_chan_attrs: origin.back.clone(),
        cb_program,
        sec_parms: Bounded(vec![CallbackSecParms4::None]),
    });
    let res = unsequenced(rpc, &origin.cred, minor, vec![cs]).await?;
    let Some(NfsResop4::CreateSession(Res4::Ok(s))) = res.into_iter().next() else {
        return Err(Error::Protocol("CREATE_SESSION result missing"));
    };
    Ok(s)
}

/// Encodes and sends one COMPOUND (RFC 8881 §16.2) and decodes its
/// results; READ data stays a slice of the reply (zero-copy).
async fn call<T: ClientTransport>(
    rpc: &T,
    cred: &OpaqueAuth,
    args: &Compound4Args,
    reply_hint: ReplyHint,
    dst: Option<BytesMut>,
) -> Result<Compound4Res> {
    let call = RpcCall {
        prog: NFS4_PROGRAM,
        vers: NFS_V4,
        proc_: NFSPROC4_COMPOUND,
        cred: cred.clone(),
        args: xdr::to_xdr_buf(args),
        reply_hint,
    };
    let results = match dst {
        Some(dst) => rpc.call_into(call, dst).await?,
        None => rpc.call(call).await?,
    };
    let mut dec = Decoder::from_bytes(&results);
    let res: Compound4Res = dec.decode()?;
    dec.finish()?;
    if res.resarray.len() > args.argarray.len() {
        return Err(Error::Protocol("more results than operations"));
    }
    for (a, r) in args.argarray.iter().zip(&res.resarray) {
        if a.opnum() != r.opnum() {
            return Err(Error::Protocol("result for a different operation"));
        }
    }
    Ok(res)
}

/// The results when every operation succeeded (RFC 8881 §16.2.3), else
/// the first failure.
fn check(res: Compound4Res) -> Result<Vec<NfsResop4>> {
    if let Some(bad) = res.resarray.iter().find(|r| !r.status().is_ok()) {
        return Err(Error::Nfs {
            op: bad.opnum(),
            status: bad.status(),
        });
    }
    if !res.status.is_ok() {
        return Err(Error::Nfs {
            op: res
                .resarray
                .last()
                .map_or(Opnum4::OP_ILLEGAL, |r| r.opnum()),
            status: res.status,
        });
    }
    Ok(res.resarray)
}

/// A COMPOUND without SEQUENCE: EXCHANGE_ID, CREATE_SESSION,
/// DESTROY_SESSION and DESTROY_CLIENTID may each be the only operation
/// (RFC 8881 §18.35.3, §18.36.3, §18.37.3, §18.50.3).
async fn unsequenced<T: ClientTransport>(
    rpc: &T,
    cred: &OpaqueAuth,
    minor: u32,
    ops: Vec<NfsArgop4>,
) -> Result<Vec<NfsResop4>> {
    let n = ops.len();
    let args = Compound4Args {
        tag: Bytes::new(),
        minorversion: minor,
        argarray: ops,
    };
    let hint = ReplyHint {
        max_reply_len: RPC_REPLY_HEADER_MAX + 4096,
        ddp: None,
    };
    let res = check(call(rpc, cred, &args, hint, None).await?)?;
    if res.len() != n {
        return Err(Error::Protocol("fewer results than operations"));
    }
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfs::v4::session::Sequence4ResOk;
    use nfs::v4::{NfsFh4, Putfh4Args, Read4Args, Read4ResOk, Stateid4};

    fn read_args(tag: &'static [u8]) -> Compound4Args {
        Compound4Args {
            tag: Bytes::from_static(tag),
            minorversion: 1,
            argarray: vec![
                NfsArgop4::Sequence(Sequence4Args {
                    sessionid: FixedOpaque([7; 16]),
                    sequenceid: 1,
                    slotid: 0,
                    highest_slotid: 0,
                    cachethis: false,
                }),
                NfsArgop4::Putfh(Putfh4Args {
                    object: NfsFh4(Bytes::from_static(&[1; 20])),
                }),
                NfsArgop4::Read(Read4Args {
                    stateid: Stateid4::ANONYMOUS,
                    offset: 0,
                    count: 4096,
                }),
            ],
        }
    }

    #[test]
    fn read_hint_names_the_offset_of_the_data_in_the_encoded_results() {
        for tag in [&b""[..], b"abcde"] {
            let args = read_args(tag);
            let hint = compound_hint(&args, 8192);
            let res = Compound4Res {
                status: Nfsstat4::NFS4_OK,
                tag: Bytes::copy_from_slice(tag),
                resarray: vec![
                    NfsResop4::Sequence(Res4::Ok(Sequence4ResOk {
                        sessionid: FixedOpaque([7; 16]),
                        sequenceid: 1,
                        slotid: 0,
                        highest_slotid: 0,
                        target_highest_slotid: 0,
                        status_flags: 0,
                    })),
                    NfsResop4::Putfh(Nfsstat4::NFS4_OK),
                    NfsResop4::Read(Res4::Ok(Read4ResOk {
                        eof: true,
                        data: xdr::DdpOpaque(Bytes::from_static(b"\xa5\x5a\xa5\x5a")),
                    })),
                ],
            };
            let wire = xdr::to_bytes(&res);
            let ddp = hint.ddp.expect("READ is DDP-eligible");
            assert_eq!(&wire[ddp.position..ddp.position + 4], b"\xa5\x5a\xa5\x5a");
            assert_eq!(ddp.position + 4, wire.len());
            assert_eq!(ddp.max_len, 4096);
            assert_eq!(hint.max_reply_len, RPC_REPLY_HEADER_MAX + 8192);
        }
    }

    #[test]
    fn hint_has_no_ddp_item_without_a_read_or_after_a_variable_result() {
        let mut args = read_args(b"");
        args.argarray.insert(1, NfsArgop4::Getfh(()));
        assert_eq!(compound_hint(&args, 8192).ddp, None);
        args.argarray.pop();
        assert_eq!(compound_hint(&args, 8192).ddp, None);
    }

    #[test]
    fn check_reports_the_first_failing_operation() {
        let res = Compound4Res {
            status: Nfsstat4::NFS4ERR_NOENT,
            tag: Bytes::new(),
            resarray: vec![
                NfsResop4::Putfh(Nfsstat4::NFS4_OK),
                NfsResop4::Lookup(Nfsstat4::NFS4ERR_NOENT),
            ],
        };
        match check(res) {
            Err(Error::Nfs { op, status }) => {
                assert_eq!(op, Opnum4::OP_LOOKUP);
                assert_eq!(status, Nfsstat4::NFS4ERR_NOENT);
            }
            other => panic!("{other:?}"),
        }
        let empty_fail = Compound4Res {
            status: Nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH,
            tag: Bytes::new(),
            resarray: vec![],
        };
        assert_eq!(
            check(empty_fail).unwrap_err().nfs_status(),
            Some(Nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH)
        );
    }
}
