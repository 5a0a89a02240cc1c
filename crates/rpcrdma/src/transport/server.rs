//! The responder: [`RdmaListener`].

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use oncrpc::client::{ClientConfig, ClientCore, RetransmitPolicy};
use oncrpc::limits::{ConnLimiter, ConnSlot, Limit, Refused, Waiters};
use oncrpc::server::{PeerInfo, Server, TransportKind};
use oncrpc::{ClientTransport, RpcCall, RpcError};
use rnic::{
    ChainWr, CmError, ConnectRequest, Device, Listener, ProtectionDomain, QpConfig, QueuePair,
    RecvWr, SendWr, Stag, WcOpcode, WcStatus, WorkCompletion, WriteFileWr, WriteWr,
};
use tokio::sync::{oneshot, Notify, SemaphorePermit};
use tokio::task::JoinHandle;

use super::bounds::{self, ReadBudget, ReplySlots};
use super::order::{Ticket, Turns};
use super::pool::PullPool;
use super::pull::{self, ReadWaiters};
use super::recv_pool::{RecvPool, RECV_KEEP};
use super::stats::ConnCounters;
use crate::credits::RequesterCredits;
use crate::endpoint::message::Rpc;
use crate::endpoint::responder::{Answer, Call, Received, Responder, Settings};
use crate::plan::{Version, WriteData, WritePlan};
use crate::wire::cm::CmPrivateData;
use crate::wire::v2::RvReqSup;
use crate::wire::Limits;

/// Server settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaServerConfig {
    /// Receive buffers posted per connection, hence the largest credit
    /// grant (knfsd grants 64, kpeer README).
    pub credits: u32,
    /// Inline send and receive size advertised in the private data.
    pub inline_size: u32,
    /// Reply with Send With Invalidate when the client allows it
    /// (RFC 8797 §4) and the call carried chunks.
    pub send_with_invalidate: bool,
    /// Decode limits for incoming headers.
    pub limits: Limits,
    /// Most bytes one call may ask the server to pull by RDMA Read (the
    /// sum of its read segment lengths, which come from the peer); more is
    /// answered with ERR_CHUNK before anything is allocated (limit
    /// `rdma.max_read_bytes`). Default 17 MiB: a 16 MiB WRITE and its
    /// headers.
    pub max_read_bytes: u64,
    /// Most bytes the calls of one connection may be pulling by RDMA Read
    /// at once (the buffers the reads fill, allocated to each call's actual
    /// chunk lengths only once its share is granted). A call beyond it
    /// waits for earlier calls to finish (limit `rdma.read_bytes_per_conn`).
    /// Default 64 MiB; `max_read_bytes` is capped at it.
    pub read_bytes_per_conn: u64,
    /// How long the RDMA Reads of one call may take. A peer that leaves
    /// them unanswered has its connection closed (limit
    /// `rdma.read_timeout`), which frees their buffers. Default 30 s.
    pub read_timeout: Duration,
    /// Highest protocol version served: 1, or 2 to accept version 2
    /// headers too (v2 draft §7.1). A higher version is answered with
    /// ERR_VERS in version 1 format.
    pub max_version: u32,
    /// Reverse-direction calls this server may have outstanding on each
    /// connection (RFC 8167), zero for no backchannel. That many extra
    /// receive buffers are posted for their replies
    /// (draft-ietf-nfsv4-rpcrdma-bidirection-01 §2.2.2).
    pub backchannel_credits: u32,
    /// How long a reverse-direction call ([`Backchannel`], an NFSv4.1
    /// callback) waits for its reply, its wait for a credit included;
    /// then it fails with [`RpcError::TimedOut`] and trips the
    /// `rdma.backchannel_reply_wait` limit (its credit stays held until a
    /// late reply, see [`Backchannel`]). Default 30 s
    /// ([`DEFAULT_BACKCHANNEL_REPLY_WAIT`]), above the NFSv4.1 server's
    /// own 5 s callback bound, as `TcpConfig::reverse_reply_wait`.
    pub backchannel_reply_wait: Duration,
    /// Most bytes of idle buffers kept for reuse by calls with read
    /// chunks, shared by the listener's connections ([`super::pool`]): a
    /// buffer freed beyond it trips `rdma.pull_pool_bytes`. 0 gives every
    /// call a fresh, zero-filled buffer. Default 16 MiB.
    pub pull_pool_bytes: u64,
}

impl Default for RdmaServerConfig {
    fn default() -> Self {
        Self {
            credits: 64,
            inline_size: 4096,
            send_with_invalidate: true,
            limits: Limits::default(),
            max_read_bytes: 17 * 1024 * 1024,
            read_bytes_per_conn: 64 * 1024 * 1024,
            read_timeout: Duration::from_secs(30),
            max_version: 2,
            backchannel_credits: 0,
            backchannel_reply_wait: DEFAULT_BACKCHANNEL_REPLY_WAIT,
            pull_pool_bytes: 16 * 1024 * 1024,
        }
    }
}

/// Reverse-direction calls that may wait, per connection, for a credit
/// while all the client granted are in use ([`Backchannel`]); one more
/// fails at once with [`RpcError::TooManyInFlight`] (limit
/// `rdma.backchannel_waiters`). As `oncrpc::tcp::MAX_REVERSE_WAITERS`.
pub const MAX_BACKCHANNEL_WAITERS: usize = 256;

/// How long a reverse-direction call waits for its reply by default
/// ([`RdmaServerConfig::backchannel_reply_wait`]).
pub const DEFAULT_BACKCHANNEL_REPLY_WAIT: Duration = Duration::from_secs(30);

static BC_WAITERS: Limit = Limit::new("rdma.backchannel_waiters");
static BC_REPLY_WAIT: Limit = Limit::new("rdma.backchannel_reply_wait");
/// A reverse-direction REPLY (RFC 8167 §4) whose xid no call of the
/// server's waits for or abandoned: one never sent, or a second reply to
/// one already answered. Dropped; the connection keeps serving. As
/// `tcp.unexpected_reply` on TCP.
static UNEXPECTED_REPLY: Limit = Limit::new("rdma.unexpected_reply");

/// The connection ended (or a work request could not be posted).
#[derive(Debug)]
struct Closed;

/// Decides from the connector's address whether a connection request is
/// accepted (an NFS server's export list); a refused request is rejected
/// before any queue pair exists.
pub type AcceptFilter = Arc<dyn Fn(Option<std::net::SocketAddr>) -> bool + Send + Sync>;

/// An RPC-over-RDMA version 1 listener serving an [`oncrpc::Server`].
///
/// Each connection posts `credits` receive buffers and grants at most that
/// many credits. One task reaps the connection's completions; every call
/// runs on its own task (RDMA Reads of its read chunks, the service, RDMA
/// Writes of its write/reply chunks, the reply Send), so replies may leave
/// out of order; calls reach the RPC server in the order they arrived,
/// however long their chunks take to pull ([`super::order`]).
pub struct RdmaListener<D: Device> {
    listener: D::Listener,
    filter: Option<AcceptFilter>,
    pd: ProtectionDomain,
    server: Arc<Server>,
    config: RdmaServerConfig,
    backchannels: Backchannels<D::Qp>,
    conns: Option<Arc<ConnLimiter>>,
    pool: PullPool,
}

static CONNS_TOTAL: Limit = Limit::new("rdma.connections");
static CONNS_PER_CLIENT: Limit = Limit::new("rdma.connections_per_client");

impl<D: Device> std::fmt::Debug for RdmaListener<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaListener")
            .field("addr", &self.listener.local_addr())
            .finish()
    }
}

impl<D: Device> RdmaListener<D> {
    /// Listens at `addr` on `device`.
    pub async fn bind(
        device: &D,
        addr: &D::Addr,
        server: Arc<Server>,
        config: RdmaServerConfig,
    ) -> Result<Self, CmError> {
        let listener = device.listen(addr).await?;
        Ok(Self {
            listener,
            filter: None,
            pd: device.alloc_pd(),
            server,
            config,
            backchannels: Backchannels {
                map: Arc::new(Mutex::new(HashMap::new())),
            },
            conns: None,
            pool: PullPool::new(config.pull_pool_bytes),
        })
    }

    /// Admits connections within `conns` (by the connector's address; a
    /// request over a cap is rejected before anything is allocated for
    /// it). Share the TCP listeners' limiter to cap all transports
    /// together. Without one, connections are not counted.
    pub fn with_conn_limiter(mut self, conns: Arc<ConnLimiter>) -> Self {
        self.conns = Some(conns);
        self
    }

    /// The reverse-direction clients of the live connections, by
    /// [`PeerInfo::conn_id`] (empty unless `backchannel_credits` > 0).
    pub fn backchannels(&self) -> Backchannels<D::Qp> {
        self.backchannels.clone()
    }

    /// Rejects connection requests whose peer address `filter` refuses.
    pub fn with_accept_filter(
        mut self,
        filter: impl Fn(Option<std::net::SocketAddr>) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.filter = Some(Arc::new(filter));
        self
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> D::Addr {
        self.listener.local_addr()
    }

    /// Accepts connections forever, serving each on its own task.
    pub async fn serve(mut self) -> Result<(), CmError> {
        loop {
            let req = self.listener.accept_request().await?;
            if self.filter.as_ref().is_some_and(|f| !f(req.peer_addr())) {
                tokio::spawn(async move {
                    let _ = req.reject(&[]).await;
                });
                continue;
            }
            let Ok(slot) = self.admit(&req) else {
                continue;
            };
            let pd = self.pd.clone();
            let server = Arc::clone(&self.server);
            let config = self.config;
            let registry = self.backchannels.clone();
            let pool = self.pool.clone();
            tokio::spawn(async move {
                let _ = accept(req, (pd, pool), server, config, registry).await;
                drop(slot);
            });
        }
    }

    /// Counts `req` against the connection caps; over one, `req` is
    /// rejected (when the caller drops it) and the limit trips.
    fn admit<R: ConnectRequest>(&self, req: &R) -> Result<Option<ConnSlot>, ()> {
        let (Some(conns), Some(addr)) = (&self.conns, req.peer_addr()) else {
            return Ok(None);
        };
        match conns.admit(addr.ip()) {
            Ok(slot) => Ok(Some(slot)),
            Err(refused) => {
                let limit = match refused {
                    Refused::Total { .. } => &CONNS_TOTAL,
                    Refused::PerClient { .. } => &CONNS_PER_CLIENT,
                };
                limit.trip(format_args!("rejected a connection from {addr}: {refused}"));
                Err(())
            }
        }
    }

    /// Runs [`RdmaListener::serve`] on a new task.
    pub fn spawn(self) -> JoinHandle<Result<(), CmError>> {
        tokio::spawn(self.serve())
    }
}

fn recv_wr(id: u64, size: u32) -> RecvWr {
    RecvWr {
        wr_id: id,
        buf: BytesMut::with_capacity(size as usize),
    }
}

async fn accept<R: ConnectRequest>(
    req: R,
    (pd, pool): (ProtectionDomain, PullPool),
    server: Arc<Server>,
    config: RdmaServerConfig,
    registry: Backchannels<R::Qp>,
) -> Result<(), CmError> {
    let local = super::private_data(config.inline_size, false);
    let peer = CmPrivateData::from_peer(Some(req.private_data()));
    let thresholds = super::thresholds(&local, req.private_data());
    // The duplicate-request cache keys clients on this address, so a
    // call retransmitted on a new connection finds its cached reply.
    let peer_addr = req.peer_addr();
    let cq = rnic::CompletionQueue::new(8 * config.credits as usize + 64);
    let mut qp_cfg = QpConfig::new(cq);
    let posted = config.credits + config.backchannel_credits;
    qp_cfg.max_recv_wr = posted;
    qp_cfg.max_send_wr = 8 * posted;
    qp_cfg.initial_recvs = (0..posted)
        .map(|i| recv_wr(u64::from(i), config.inline_size))
        .collect();
    qp_cfg.private_data = local.to_bytes().to_vec();
    let qp = req.accept(&pd, qp_cfg).await?;
    let budget = ReadBudget::new(config.read_bytes_per_conn);
    let settings = Settings {
        credits: config.credits,
        inline_size: config.inline_size,
        send_with_invalidate: config.send_with_invalidate,
        limits: config.limits,
        max_version: config.max_version,
        max_read_bytes: config.max_read_bytes.min(budget.max()),
        backchannel_credits: config.backchannel_credits,
    };
    let peer_send_inv = peer.flags.send_with_invalidate_ok();
    let endpoint = Responder::new(settings, thresholds.send, peer_send_inv, posted);
    let conn_id = oncrpc::server::next_conn_id();
    let stats = ConnCounters::register(
        conn_id,
        peer_addr.map_or_else(|| "?".to_owned(), |a| a.to_string()),
    );
    let reverse = (config.backchannel_credits > 0).then(|| Reverse {
        state: Mutex::new(ReverseState {
            core: ClientCore::new(
                0x8000_0000,
                ClientConfig {
                    max_in_flight: config.backchannel_credits as usize,
                    retransmit: RetransmitPolicy::default(),
                },
            ),
            credits: RequesterCredits::new(config.backchannel_credits),
            closed: false,
            regions: HashMap::new(),
            abandoned: HashSet::new(),
        }),
        wait: Notify::new(),
        waiting: Waiters::new(),
    });
    let conn = Arc::new(Conn {
        qp,
        pd,
        pool,
        server,
        config,
        endpoint: Mutex::new(endpoint),
        replies: ReplySlots::new(config.credits),
        budget,
        reads: ReadWaiters::default(),
        pull_order: Arc::default(),
        dispatch_order: Arc::default(),
        next_wr: AtomicU64::new(u64::from(posted)),
        recv_pool: RecvPool::new(config.inline_size, RECV_KEEP.min(posted as usize)),
        reverse,
        peer: PeerInfo {
            conn_id,
            addr: peer_addr,
            transport: TransportKind::Rdma,
            security: oncrpc::TransportSecurity::None,
        },
        stats,
    });
    if conn.reverse.is_some() {
        registry.lock().insert(
            conn_id,
            Backchannel {
                conn: Arc::clone(&conn),
            },
        );
    }
    handle_on_device(&conn);
    let _ = reap(&conn).await;
    conn.qp.recv_cq().clear_handler();
    // No call is handed over once the connection is gone.
    conn.dispatch_order.close();
    conn.pull_order.close();
    conn.qp.disconnect();
    registry.lock().remove(&conn_id);
    // Calls waiting for RDMA Reads see their senders dropped and stop;
    // those waiting for a share of the read budget too.
    conn.reads.clear();
    conn.budget.close();
    conn.replies.close();
    if let Some(rev) = &conn.reverse {
        let mut st = rev.lock();
        st.closed = true;
        st.abandoned.clear();
        for (_, r) in st.regions.drain() {
            r.finish(None);
        }
        for (tx, e) in st.core.fail_all(RpcError::ConnectionClosed) {
            let _ = tx.send(Err(e));
        }
        drop(st);
        rev.wait.notify_waiters();
    }
    Ok(())
}

/// Reverse-direction requester state of one connection.
struct Reverse {
    state: Mutex<ReverseState>,
    wait: Notify,
    /// Calls waiting for a credit (at most [`MAX_BACKCHANNEL_WAITERS`]).
    waiting: Waiters,
}

type ReplyTx = oneshot::Sender<Result<Bytes, RpcError>>;

struct ReverseState {
    core: ClientCore<ReplyTx>,
    credits: RequesterCredits,
    closed: bool,
    /// Registered memory of reverse calls sent with chunks (GENL).
    regions: HashMap<u32, super::v2_reverse::Regions>,
    /// Xids of calls sent and given up (timed out, or their caller
    /// stopped waiting) whose credit is still held: at most the credits.
    abandoned: HashSet<u32>,
}

/// A call on the wire: if it ends without its reply (timed out, or its
/// future dropped), it is forgotten and listed as abandoned, its credit
/// still held ([`Backchannel`]).
struct Sent<'a> {
    rev: &'a Reverse,
    xid: u32,
}

impl Drop for Sent<'_> {
    fn drop(&mut self) {
        let mut st = self.rev.lock();
        if st.core.cancel(self.xid).is_some() && !st.closed {
            st.abandoned.insert(self.xid);
        }
    }
}

impl Reverse {
    fn lock(&self) -> MutexGuard<'_, ReverseState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The server's side of the backchannel of one connection: an
/// [`oncrpc::ClientTransport`] sending reverse-direction calls inline
/// (RFC 8167; draft-ietf-nfsv4-rpcrdma-bidirection-01 §2.4, §2.5), never
/// more at once than the client granted (§2.1.2).
///
/// A client that never answers holds the server's calls: while every
/// credit is in use at most [`MAX_BACKCHANNEL_WAITERS`] calls wait for one
/// (one more fails at once with [`RpcError::TooManyInFlight`], limit
/// `rdma.backchannel_waiters`), and each call, its wait included, ends
/// after [`RdmaServerConfig::backchannel_reply_wait`]
/// ([`RpcError::TimedOut`], limit `rdma.backchannel_reply_wait`).
///
/// Credits of abandoned calls (RFC 8166 §3.3.1; RFC 8167 §3.1: credits
/// work in the reverse direction as in the forward one, counted apart): a
/// credit stands for a receive buffer the client posted, which the call's
/// Send consumed; only the client's reply says it is free again. So a call
/// given up after it went out (timed out, or its caller stopped waiting)
/// is forgotten but keeps its credit: sending another in its place could
/// find no receive posted and break the connection. A late reply to it
/// returns the credit, updates the grant from its rdma_credit, releases
/// the call's registered memory and is otherwise dropped; a second reply
/// to the same xid, or one to an xid never sent, changes nothing. With no
/// reply the credit is freed only with the connection. A client that
/// answers nothing thus ends with all its credits held by abandoned calls:
/// later calls wait and time out, never overrunning its receive queue. A
/// call given up before it went out frees its credit at once.
pub struct Backchannel<Q> {
    conn: Arc<Conn<Q>>,
}

impl<Q> Clone for Backchannel<Q> {
    fn clone(&self) -> Self {
        Self {
            conn: Arc::clone(&self.conn),
        }
    }
}

impl<Q> std::fmt::Debug for Backchannel<Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backchannel")
            .field("conn_id", &self.conn.peer.conn_id)
            .finish()
    }
}

impl<Q: QueuePair> Backchannel<Q> {
    /// The connection's id, as services see it in [`PeerInfo::conn_id`].
    pub fn conn_id(&self) -> u64 {
        self.conn.peer.conn_id
    }

    /// Calls sent whose replies have not arrived, abandoned ones included
    /// (each holds a credit).
    pub fn outstanding(&self) -> u32 {
        self.conn
            .reverse
            .as_ref()
            .map_or(0, |rev| rev.lock().credits.outstanding())
    }

    /// Calls waiting for a credit.
    pub fn waiting(&self) -> usize {
        self.conn
            .reverse
            .as_ref()
            .map_or(0, |rev| rev.waiting.count())
    }

    async fn call_inner(&self, call: RpcCall) -> Result<Bytes, RpcError> {
        let Some(rev) = &self.conn.reverse else {
            return Err(RpcError::Transport("no backchannel"));
        };
        let wait = self.conn.config.backchannel_reply_wait;
        match tokio::time::timeout(wait, self.call_unbounded(rev, call)).await {
            Ok(r) => r,
            Err(_) => {
                BC_REPLY_WAIT.trip(format_args!(
                    "RPC-over-RDMA peer {}: a backchannel call got no reply within {wait:?}",
                    PeerName(&self.conn.peer)
                ));
                Err(RpcError::TimedOut)
            }
        }
    }

    /// Takes a credit, waiting while all are in use unless
    /// [`MAX_BACKCHANNEL_WAITERS`] wait already.
    async fn credit(&self, rev: &Reverse) -> Result<(), RpcError> {
        let mut counted = None;
        loop {
            let notified = rev.wait.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = rev.lock();
                if st.closed {
                    return Err(RpcError::ConnectionClosed);
                }
                if st.credits.try_send().is_ok() {
                    return Ok(());
                }
            }
            if counted.is_none() {
                let Some(waiting) = rev.waiting.enter(MAX_BACKCHANNEL_WAITERS) else {
                    BC_WAITERS.trip(format_args!(
                        "RPC-over-RDMA peer {}: every backchannel credit in use and \
                         {MAX_BACKCHANNEL_WAITERS} calls waiting; one more refused",
                        PeerName(&self.conn.peer)
                    ));
                    return Err(RpcError::TooManyInFlight);
                };
                counted = Some(waiting);
            }
            notified.await;
        }
    }

    async fn call_unbounded(&self, rev: &Reverse, call: RpcCall) -> Result<Bytes, RpcError> {
        self.credit(rev).await?;
        let (rx, _sent) = {
            let mut st = rev.lock();
            let (tx, rx) = oneshot::channel();
            let (xid, msg) = match st.core.start_call(&call, tx, std::time::Instant::now()) {
                Ok(x) => x,
                Err((_, e)) => {
                    st.credits.on_abandon();
                    return Err(e);
                }
            };
            let (version, level, threshold) = {
                let ep = self.conn.lock_endpoint();
                (ep.peer_version(), ep.peer_rvreqsup(), ep.send_threshold())
            };
            let header = super::v2::reverse_header(version, xid, st.credits.requested(), false);
            let body = msg.to_bytes();
            let fail = |st: &mut ReverseState, e| {
                st.core.cancel(xid);
                st.credits.on_abandon();
                e
            };
            let own = self.conn.config.inline_size as usize;
            let reply_max = call.reply_hint.max_reply_len;
            // v2 draft §4.2.2: chunks only to a GENL client.
            let (header, body) = if version == Version::V2
                && level == RvReqSup::RDMA2_RVREQSUP_GENL
                && super::v2::reverse_needs_chunks(
                    header.len() + body.len(),
                    threshold,
                    reply_max,
                    own,
                ) {
                let requested = st.credits.requested();
                let pd = &self.conn.pd;
                match super::v2_reverse::prepare_call(
                    pd, xid, requested, body, reply_max, threshold, own,
                ) {
                    Ok(p) => {
                        st.regions.insert(xid, p.regions);
                        (p.header, p.inline)
                    }
                    Err(e) => return Err(fail(&mut st, e)),
                }
            } else {
                (header, body)
            };
            let chunks = st.regions.contains_key(&xid);
            if !super::v2::reverse_allowed(level, chunks, header.len() + body.len(), threshold) {
                let why = if level == RvReqSup::RDMA2_RVREQSUP_NONE {
                    "client's Reverse Request Support is NONE"
                } else {
                    "backchannel call exceeds the inline threshold"
                };
                return Err(fail(&mut st, RpcError::Transport(why)));
            }
            if self.conn.send(header, body, None).is_err() {
                if let Some(r) = st.regions.remove(&xid) {
                    r.finish(None);
                }
                return Err(fail(&mut st, RpcError::ConnectionClosed));
            }
            (rx, Sent { rev, xid })
        };
        rx.await.unwrap_or(Err(RpcError::ConnectionClosed))
    }
}

impl<Q: QueuePair> ClientTransport for Backchannel<Q> {
    fn call(
        &self,
        call: RpcCall,
    ) -> impl std::future::Future<Output = Result<Bytes, RpcError>> + Send {
        self.call_inner(call)
    }
}

/// The backchannels of a listener's live connections.
pub struct Backchannels<Q> {
    map: Arc<Mutex<HashMap<u64, Backchannel<Q>>>>,
}

impl<Q> Clone for Backchannels<Q> {
    fn clone(&self) -> Self {
        Self {
            map: Arc::clone(&self.map),
        }
    }
}

impl<Q> std::fmt::Debug for Backchannels<Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backchannels").finish()
    }
}

impl<Q> Backchannels<Q> {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Backchannel<Q>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The backchannel of connection `conn_id`, while it is up.
    pub fn get(&self, conn_id: u64) -> Option<Backchannel<Q>> {
        self.lock().get(&conn_id).cloned()
    }

    /// Ids of the connections with a backchannel.
    pub fn conn_ids(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.lock().keys().copied().collect();
        v.sort_unstable();
        v
    }
}

struct Conn<Q> {
    qp: Q,
    pd: ProtectionDomain,
    /// Buffers for pulled calls, shared with the listener's other
    /// connections.
    pool: PullPool,
    server: Arc<Server>,
    config: RdmaServerConfig,
    /// The protocol state: credits, calls outstanding, what the peer
    /// said of itself (the sans-IO [`Responder`]).
    endpoint: Mutex<Responder>,
    /// Replies posted and not yet sent: at most the credits granted.
    replies: ReplySlots,
    /// Bytes the calls may be pulling by RDMA Read at once.
    budget: ReadBudget,
    /// RDMA Reads in flight: completion status to the call that posted it.
    reads: ReadWaiters,
    /// Calls take their share of the read budget in arrival order.
    pull_order: Arc<Turns>,
    /// Calls are handed to the RPC server in arrival order.
    dispatch_order: Arc<Turns>,
    next_wr: AtomicU64,
    /// Receive buffers of answered calls, posted again
    /// ([`super::recv_pool`]).
    recv_pool: RecvPool,
    reverse: Option<Reverse>,
    peer: PeerInfo,
    /// What moved on the connection, inline and by chunk ([`super::stats`]).
    stats: ConnCounters,
}

/// One completion of the connection, on whichever task took it: the
/// device's own ([`handle_on_device`]) or the completion loop ([`reap`]).
/// `Some` is a received message to answer ([`serve`], [`start`]); `Err`
/// ends the connection.
fn on_completion<Q: QueuePair>(
    conn: &Arc<Conn<Q>>,
    wc: WorkCompletion,
) -> Result<Option<Work>, Closed> {
    match (wc.opcode, wc.status) {
        (WcOpcode::Recv, WcStatus::Success) => {
            conn.stats.received(u64::from(wc.byte_len));
            let invalidated = wc.invalidated;
            let msg = conn.on_receive(wc)?;
            // The one decode of the message and what it asks for.
            let received = conn.lock_endpoint().on_receive(&msg);
            let work = match received {
                Received::Call(call) => {
                    conn.stats.call_started();
                    Work::Call(
                        call,
                        Order {
                            pull: conn.pull_order.issue(),
                            dispatch: conn.dispatch_order.issue(),
                        },
                    )
                }
                Received::Answer(header) => Work::Answer(header),
                Received::TooLarge { answer, total, max } => {
                    bounds::CALL_TOO_LARGE.trip(format_args!(
                        "RPC-over-RDMA peer {} asked the server to pull {total} bytes \
                         (at most {max}); answered ERR_CHUNK",
                        PeerName(&conn.peer)
                    ));
                    Work::Answer(answer)
                }
                Received::ReverseReply {
                    xid,
                    credits,
                    len,
                    reply,
                } => {
                    conn.on_reverse_reply(&msg, xid, credits, len, reply, invalidated);
                    return Ok(None);
                }
                Received::Nothing => return Ok(None),
                Received::OverCredit => {
                    // RFC 8166 §3.3.1: a requester never has more
                    // calls outstanding than it was granted credits;
                    // the Linux server likewise drops a connection
                    // whose peer overruns its receive queue.
                    bounds::CREDITS_EXCEEDED.trip(format_args!(
                        "RPC-over-RDMA peer {} sent more than {} calls at once; \
                         closing the connection",
                        PeerName(&conn.peer),
                        conn.config.credits
                    ));
                    conn.stats.failed();
                    return Err(Closed);
                }
            };
            Ok(Some(work))
        }
        (WcOpcode::RdmaRead, status) => {
            if status == WcStatus::Success {
                conn.stats.read_done();
            }
            conn.reads.complete(wc.wr_id, status);
            if status != WcStatus::Success {
                if status != WcStatus::FlushError {
                    conn.stats.failed();
                }
                return Err(Closed);
            }
            Ok(None)
        }
        (WcOpcode::Send, WcStatus::Success) if wc.wr_id & bounds::REPLY_TAG != 0 => {
            conn.replies.sent();
            Ok(None)
        }
        (_, WcStatus::Success) => Ok(None),
        (_, status) => {
            // Flushed requests are how a disconnect shows.
            if status != WcStatus::FlushError {
                conn.stats.failed();
            }
            Err(Closed)
        }
    }
}

/// Has the connection's successful completions handled where the device
/// produces them ([`rnic::CompletionQueue::set_handler`]): a received call
/// is decoded by the [`Responder`] and started ([`start`]) on the device's
/// receive task, with no hop through the completion loop, and a reply's
/// Send completion frees its slot where the device sent it. Errors and
/// flushes are given back to [`reap`], which also takes everything on a
/// device without handlers; a message that ends the connection (credits
/// overrun) disconnects it, and the flushes that follow end [`reap`]. The
/// handler holds the connection weakly: the connection owns the queue pair
/// that owns the queue that owns the handler.
fn handle_on_device<Q: QueuePair>(conn: &Arc<Conn<Q>>) {
    let weak = Arc::downgrade(conn);
    conn.qp.recv_cq().set_handler(move |wc| {
        if !wc.status.is_success() {
            return Some(wc);
        }
        let Some(conn) = weak.upgrade() else {
            return Some(wc);
        };
        match on_completion(&conn, wc) {
            Ok(None) => {}
            Ok(Some(work)) => start(&conn, work),
            Err(Closed) => conn.qp.disconnect(),
        }
        None
    });
}

/// The completion loop of one connection: what the device's handler gave
/// back (errors, flushes) or, on a device without handlers, everything.
async fn reap<Q: QueuePair>(conn: &Arc<Conn<Q>>) -> Result<(), Closed> {
    loop {
        let wc = conn.qp.recv_cq().next().await.map_err(|_| Closed)?;
        if let Some(work) = on_completion(conn, wc)? {
            serve(conn, work).await;
        }
    }
}

/// What a received message needs before its answer.
enum Work {
    /// Nothing: the answer is this header.
    Answer(Bytes),
    /// Pull and run the call, in its turn.
    Call(Call, Order),
}

/// Answers one message: runs its call (if it is one) and posts the
/// answer. Started here, up to its first wait: an inline call whose turn
/// it is reaches the RPC server before the next completion is reaped,
/// with no task hop; the rest runs on its own task.
async fn serve<Q: QueuePair>(conn: &Arc<Conn<Q>>, work: Work) {
    let mut task = answer(conn, work);
    let first =
        std::future::poll_fn(|cx| Poll::Ready(std::future::Future::poll(task.as_mut(), cx))).await;
    if first.is_pending() {
        tokio::spawn(task);
    }
}

/// [`serve`] from a completion handler, which cannot wait: the answer is
/// polled once here, with a waker that does nothing, and if it has to wait
/// it goes on its own task, whose first poll registers the real waker (so
/// nothing that became ready in between is missed).
fn start<Q: QueuePair>(conn: &Arc<Conn<Q>>, work: Work) {
    let mut task = answer(conn, work);
    let mut cx = Context::from_waker(Waker::noop());
    if task.as_mut().poll(&mut cx).is_pending() {
        tokio::spawn(task);
    }
}

/// The answer to one message, as a task.
fn answer<Q: QueuePair>(
    conn: &Arc<Conn<Q>>,
    work: Work,
) -> Pin<Box<impl Future<Output = ()> + Send + 'static>> {
    let c = Arc::clone(conn);
    let is_call = matches!(work, Work::Call(..));
    Box::pin(async move {
        let answer = match work {
            Work::Call(call, order) => c.on_call(call, order).await,
            Work::Answer(header) => Ok(Some(Answer::header(header))),
        };
        // A reply waits for a slot while its call still counts as in
        // flight; the call ends just before its reply is posted, so a
        // requester that sends its next call on receiving the reply
        // always finds the call slot free.
        let ready = match answer {
            Ok(Some(a)) => c.replies.take(&PeerName(&c.peer)).await.then_some(a),
            _ => None,
        };
        c.lock_endpoint().on_answered();
        if is_call {
            c.stats.call_ended();
        }
        if let Some(a) = ready {
            if c.post_answer(a).is_err() {
                c.replies.sent();
            }
        }
    })
}

impl<Q: QueuePair> Conn<Q> {
    fn lock_endpoint(&self) -> MutexGuard<'_, Responder> {
        self.endpoint.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wr_id(&self) -> u64 {
        self.next_wr.fetch_add(1, Ordering::Relaxed)
    }

    /// A reply to one of our reverse-direction calls completes that call.
    fn on_reverse_reply(
        &self,
        msg: &Bytes,
        xid: u32,
        credits: u32,
        len: usize,
        reply: Result<Rpc, crate::wire::v2::ErrorBody>,
        invalidated: Option<Stag>,
    ) {
        let Some(rev) = &self.reverse else {
            return;
        };
        let mut st = rev.lock();
        let regions = st.regions.remove(&xid).unwrap_or_default();
        let resolved = super::v2_reverse::resolve_reply(msg, len, reply, regions, invalidated);
        let done = match resolved {
            Ok(bytes) => st
                .core
                .handle_reply(&bytes)
                .map(|(_, tx, reply)| (tx, reply)),
            Err(e) => st.core.cancel(xid).map(|tx| (tx, Err(e))),
        };
        if let Some((tx, reply)) = done {
            // draft-ietf-nfsv4-rpcrdma-bidirection-01 §2.1.2: the grant in
            // a reverse reply is the client's backchannel credit.
            st.credits.on_reply(credits);
            let _ = tx.send(reply);
        } else if st.abandoned.remove(&xid) {
            // A late reply to an abandoned call returns the credit it
            // held ([`Backchannel`]); the reply itself has no taker.
            st.credits.on_reply(credits);
        } else {
            // No call of ours has this xid: it changes neither the
            // credits nor the grant.
            UNEXPECTED_REPLY.trip(format_args!(
                "RPC-over-RDMA peer {}: dropped a reverse-direction REPLY \
                 (xid {xid:#x}) no call waits for",
                PeerName(&self.peer)
            ));
        }
        drop(st);
        rev.wait.notify_waiters();
    }

    /// A message arrived: take its bytes and repost a receive at once, so
    /// the grant in every reply is backed by posted receives
    /// (RFC 8166 §3.3.1), in the buffer of an earlier message nothing
    /// refers to any more when there is one ([`RecvPool`]).
    fn on_receive(&self, wc: WorkCompletion) -> Result<Bytes, Closed> {
        let mut buf = wc.buf.unwrap_or_default();
        buf.truncate(wc.byte_len as usize);
        let msg = buf.freeze();
        let wr = RecvWr {
            wr_id: self.wr_id(),
            buf: self.recv_pool.recycle(&msg),
        };
        self.qp.post_recv(wr).map_err(|_| Closed)?;
        Ok(msg)
    }

    fn send(&self, header: Bytes, inline: Bytes, invalidate: Option<Stag>) -> Result<(), Closed> {
        self.stats
            .sent(&header, inline.len() as u64, invalidate.is_some());
        let wr = SendWr {
            wr_id: self.wr_id(),
            data: vec![header, inline],
            solicited: false,
            invalidate,
        };
        self.qp.post_send(wr).map_err(|_| Closed)
    }

    /// Posts an answer: its RDMA Writes and its Send as one chain, so a
    /// device writes them together (one socket write for a small reply on
    /// the software device).
    fn post_answer(&self, a: Answer) -> Result<(), Closed> {
        let mut chain: Vec<ChainWr> = a
            .writes
            .into_iter()
            .map(|w| write_wr(self.wr_id(), w))
            .collect();
        self.stats
            .sent(&a.header, a.inline.len() as u64, a.invalidate.is_some());
        let mut data = Vec::with_capacity(1 + a.inline.0.len());
        data.push(a.header);
        data.extend(a.inline.0);
        chain.push(ChainWr::Send(SendWr {
            wr_id: self.wr_id() | bounds::REPLY_TAG,
            data,
            solicited: false,
            invalidate: a.invalidate.map(Stag),
        }));
        self.qp.post_chain(chain).map_err(|_| Closed)
    }

    /// Serves one call; `None` when it gets no answer (the RPC server
    /// drops it). Its read chunks are pulled while earlier calls' may
    /// still be, but it is handed to the RPC server only after every
    /// earlier call of the connection ([`super::order`]).
    async fn on_call(&self, call: Call, order: Order) -> Result<Option<Answer>, Closed> {
        let pulled = self.pull(&call, order.pull).await;
        let Some((record, share)) = pulled.inspect_err(|_| self.dispatch_order.close())? else {
            return Ok(Some(Answer::header(self.lock_endpoint().bad(&call))));
        };
        order.dispatch.wait().await.map_err(|_| Closed)?;
        let reply = self.hand_over(record, order.dispatch).await;
        // The call's buffer is the service's now: its share of the read
        // budget returns.
        drop(share);
        let Some(mut reply) = reply else {
            return Ok(None);
        };
        if reply.has_files() {
            // What goes by write chunk stays in the file when the device
            // sends from files; the rest is read in now.
            let loaded = if self.qp.sends_files() {
                let by_chunk = crate::plan::files_by_chunk(&reply, &call.lists);
                reply.load_files_where(|f| !by_chunk.contains(&f.position))
            } else {
                reply.load_files()
            };
            if loaded.is_err() {
                reply = system_err(call.xid);
            }
        }
        if call.reads.is_some() {
            self.stats.pulled(u64::from(call.read_bytes));
        }
        let answer = self.lock_endpoint().answer(&call, &reply);
        let reply_chunk = call
            .lists
            .reply
            .as_ref()
            .map_or(&[][..], |c| &c.segments[..]);
        for w in &answer.writes {
            let into_reply = reply_chunk.iter().any(|s| s.handle == w.target.handle);
            self.stats.wrote(w.data.len() as u64, into_reply);
        }
        Ok(Some(answer))
    }

    /// Runs the RPC server on `record`; the turn passes to the next call
    /// once the server has started on this one (its first poll, which
    /// runs up to the service's first wait), so a service sees the
    /// connection's calls begin in arrival order.
    async fn hand_over(&self, record: Bytes, turn: Ticket) -> Option<xdr::XdrBuf> {
        let mut call = std::pin::pin!(self.server.handle_call(record, &self.peer));
        let first =
            std::future::poll_fn(|cx| Poll::Ready(std::future::Future::poll(call.as_mut(), cx)))
                .await;
        drop(turn);
        match first {
            Poll::Ready(reply) => reply,
            Poll::Pending => call.await,
        }
    }

    /// Rebuilds the call (RFC 8166 §3.5) in one contiguous buffer: the
    /// inline parts are copied into place and every read segment is pulled
    /// by RDMA Read straight to its offset in the same buffer (segments
    /// with one position are concatenated, RFC 8166 §3.4.5), so chunk data
    /// is never copied. `None` when the chunks cannot be pulled or do not
    /// fit the inline stream (ERR_CHUNK).
    ///
    /// The segment lengths come from the peer: their sum is checked against
    /// `max_read_bytes` before anything is allocated, and the buffer (sized
    /// to the call's actual chunks, reused from the listener's
    /// [`PullPool`]) is taken only once the call holds
    /// that many bytes of the connection's read budget, returned with the
    /// record. Reads unanswered after `read_timeout` close the connection.
    async fn pull(
        &self,
        call: &Call,
        turn: Ticket,
    ) -> Result<Option<(Bytes, Option<SemaphorePermit<'_>>)>, Closed> {
        let Some(plan) = &call.reads else {
            return Ok(Some((call.inline.clone(), None)));
        };
        let total = call.read_bytes;
        // In arrival order: a call waiting for its share never waits for
        // bytes held by later calls, which wait for its hand-over.
        turn.wait().await.map_err(|_| Closed)?;
        let share = self.budget.acquire(total).await.map_err(|_| Closed)?;
        drop(turn);
        let started = pull::start(
            &self.qp,
            &self.pd,
            &self.pool,
            &self.reads,
            || self.wr_id(),
            &call.inline,
            plan,
        );
        let pulling = match started {
            Ok(p) => p,
            Err(pull::Refused::Unusable) => return Ok(None),
            Err(pull::Refused::Closed) => return Err(Closed),
        };
        match bounds::within(self.config.read_timeout, pulling.finish()).await {
            Some(Some(record)) => Ok(Some((record, Some(share)))),
            Some(None) => Err(Closed),
            None => {
                bounds::READ_TIMEOUT.trip(format_args!(
                    "RPC-over-RDMA peer {} left RDMA Reads of {total} bytes \
                     unanswered for {:?}; closing the connection",
                    PeerName(&self.peer),
                    self.config.read_timeout
                ));
                self.stats.failed();
                self.qp.disconnect();
                Err(Closed)
            }
        }
    }
}

/// An RDMA Write of a reply (RFC 8166 §3.4.6): from memory, or from a
/// file range the device sends from the file ([`rnic::WriteFileWr`]).
pub(super) fn write_wr(wr_id: u64, w: WritePlan) -> ChainWr {
    let (remote_stag, remote_to) = (Stag(w.target.handle), w.target.offset);
    match w.data {
        WriteData::Bytes(data) => ChainWr::Write(WriteWr {
            wr_id,
            data: vec![data],
            remote_stag,
            remote_to,
        }),
        WriteData::File { file, offset, len } => ChainWr::WriteFile(WriteFileWr {
            wr_id,
            file: Arc::new(ReplyFile(file)),
            offset,
            len,
            remote_stag,
            remote_to,
        }),
    }
}

/// A reply's open file, as a device's file source.
#[derive(Debug)]
struct ReplyFile(Arc<dyn xdr::FileSource>);

impl rnic::FileData for ReplyFile {
    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.fd()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.0.read_at(buf, offset)
    }
}

/// MSG_ACCEPTED / SYSTEM_ERR (RFC 5531 §9) for call `xid`: the service
/// answered, but its reply's data could not be read.
fn system_err(xid: u32) -> xdr::XdrBuf {
    use oncrpc::msg::{AcceptStat, Accepted, ReplyHeader};
    xdr::to_xdr_buf(&ReplyHeader::accepted(
        xid,
        Accepted::Other(AcceptStat::SYSTEM_ERR),
    ))
}

/// A call's tickets: for its share of the read budget and its hand-over.
struct Order {
    pull: Ticket,
    dispatch: Ticket,
}

/// The peer's address for a log line.
/// The peer's address for a log line, formatted only when written (a
/// `String` per reply cost 1,700 instructions of a 4 KiB READ's ~48,000).
struct PeerName<'a>(&'a PeerInfo);

impl std::fmt::Display for PeerName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.addr {
            Some(a) => a.fmt(f),
            None => f.write_str("?"),
        }
    }
}
