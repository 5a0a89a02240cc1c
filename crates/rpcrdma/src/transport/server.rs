//! The responder: [`RdmaListener`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use oncrpc::client::{ClientConfig, ClientCore, RetransmitPolicy};
use oncrpc::limits::{ConnLimiter, ConnSlot, Limit, Refused};
use oncrpc::server::{PeerInfo, Server, TransportKind};
use oncrpc::{ClientTransport, RpcCall, RpcError};
use rnic::{
    Access, ChainWr, CmError, ConnectRequest, Device, Listener, ProtectionDomain, QpConfig,
    QueuePair, ReadWr, RecvWr, SendWr, Stag, WcOpcode, WcStatus, WorkCompletion, WriteWr,
};
use tokio::sync::{oneshot, Notify, SemaphorePermit};
use tokio::task::JoinHandle;

use super::bounds::{self, InFlight, ReadBudget, ReplySlots};
use super::hdr::{self, Inbound};
use super::order::{Ticket, Turns};
use crate::credits::{RequesterCredits, ResponderCredits};
use crate::layout::{plan_layout, Piece};
use crate::plan::{plan_reply, Version};
use crate::wire::cm::CmPrivateData;
use crate::wire::v1::Proc;
use crate::wire::v2::{Properties, RvReqSup};
use crate::wire::{ChunkLists, Limits};

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
        }
    }
}

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
            tokio::spawn(async move {
                let _ = accept(req, pd, server, config, registry).await;
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
    pd: ProtectionDomain,
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
    let mut credits = ResponderCredits::new(config.credits);
    credits.on_receives_posted(posted);
    let conn_id = oncrpc::server::next_conn_id();
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
        }),
        wait: Notify::new(),
    });
    let conn = Arc::new(Conn {
        qp,
        pd,
        server,
        config,
        send_threshold: AtomicUsize::new(thresholds.send),
        send_inv: config.send_with_invalidate && peer.flags.send_with_invalidate_ok(),
        peer_rvreqsup: AtomicU32::new(RvReqSup::RDMA2_RVREQSUP_INLINE.0),
        v2: AtomicBool::new(false),
        credits: Mutex::new(credits),
        calls: InFlight::new(config.credits),
        replies: ReplySlots::new(config.credits),
        budget: ReadBudget::new(config.read_bytes_per_conn),
        reads: Mutex::new(HashMap::new()),
        pull_order: Arc::default(),
        dispatch_order: Arc::default(),
        next_wr: AtomicU64::new(u64::from(posted)),
        reverse,
        peer: PeerInfo {
            conn_id,
            addr: peer_addr,
            transport: TransportKind::Rdma,
        },
    });
    if conn.reverse.is_some() {
        registry.lock().insert(
            conn_id,
            Backchannel {
                conn: Arc::clone(&conn),
            },
        );
    }
    let _ = reap(&conn).await;
    // No call is handed over once the connection is gone.
    conn.dispatch_order.close();
    conn.pull_order.close();
    conn.qp.disconnect();
    registry.lock().remove(&conn_id);
    // Calls waiting for RDMA Reads see their senders dropped and stop;
    // those waiting for a share of the read budget too.
    conn.lock_reads().clear();
    conn.budget.close();
    conn.replies.close();
    if let Some(rev) = &conn.reverse {
        let mut st = rev.lock();
        st.closed = true;
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
}

type ReplyTx = oneshot::Sender<Result<Bytes, RpcError>>;

struct ReverseState {
    core: ClientCore<ReplyTx>,
    credits: RequesterCredits,
    closed: bool,
    /// Registered memory of reverse calls sent with chunks (GENL).
    regions: HashMap<u32, super::v2_reverse::Regions>,
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

    async fn call_inner(&self, call: RpcCall) -> Result<Bytes, RpcError> {
        let Some(rev) = &self.conn.reverse else {
            return Err(RpcError::Transport("no backchannel"));
        };
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
                    break;
                }
            }
            notified.await;
        }
        let rx = {
            let mut st = rev.lock();
            let (tx, rx) = oneshot::channel();
            let (xid, msg) = match st.core.start_call(&call, tx, std::time::Instant::now()) {
                Ok(x) => x,
                Err((_, e)) => {
                    st.credits.on_abandon();
                    return Err(e);
                }
            };
            let version = if self.conn.v2.load(Ordering::Relaxed) {
                Version::V2
            } else {
                Version::V1
            };
            let header = super::v2::reverse_header(version, xid, st.credits.requested(), false);
            let body = msg.to_bytes();
            let fail = |st: &mut ReverseState, e| {
                st.core.cancel(xid);
                st.credits.on_abandon();
                e
            };
            let level = RvReqSup(self.conn.peer_rvreqsup.load(Ordering::Relaxed));
            let threshold = self.conn.send_threshold.load(Ordering::Relaxed);
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
            rx
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
    server: Arc<Server>,
    config: RdmaServerConfig,
    /// Inline send threshold; a version 2 peer's Receive Buffer Size may
    /// lower it (v2 draft §4.2.1).
    send_threshold: AtomicUsize,
    send_inv: bool,
    /// The client's Reverse Request Support (v2 draft §4.2.2): INLINE
    /// until an RDMA2_CONNPROP says otherwise.
    peer_rvreqsup: AtomicU32,
    /// The client speaks version 2: reverse-direction messages use
    /// version 2 headers (v2 draft §3.2).
    v2: AtomicBool,
    credits: Mutex<ResponderCredits>,
    /// Calls received and not answered: at most the credits granted.
    calls: InFlight,
    /// Replies posted and not yet sent: at most the credits granted.
    replies: ReplySlots,
    /// Bytes the calls may be pulling by RDMA Read at once.
    budget: ReadBudget,
    /// RDMA Reads in flight: completion status to the call that posted it.
    reads: Mutex<HashMap<u64, oneshot::Sender<WcStatus>>>,
    /// Calls take their share of the read budget in arrival order.
    pull_order: Arc<Turns>,
    /// Calls are handed to the RPC server in arrival order.
    dispatch_order: Arc<Turns>,
    next_wr: AtomicU64,
    reverse: Option<Reverse>,
    peer: PeerInfo,
}

/// The completion loop of one connection.
async fn reap<Q: QueuePair>(conn: &Arc<Conn<Q>>) -> Result<(), Closed> {
    loop {
        let wc = conn.qp.recv_cq().next().await.map_err(|_| Closed)?;
        match (wc.opcode, wc.status) {
            (WcOpcode::Recv, WcStatus::Success) => {
                let invalidated = wc.invalidated;
                let msg = conn.on_receive(wc)?;
                if conn.on_reverse_reply(&msg, invalidated) {
                    continue;
                }
                if conn.calls.start().is_err() {
                    // RFC 8166 §3.3.1: a requester never has more calls
                    // outstanding than it was granted credits; the Linux
                    // server likewise drops a connection whose peer
                    // overruns its receive queue.
                    bounds::CREDITS_EXCEEDED.trip(format_args!(
                        "RPC-over-RDMA peer {} sent more than {} calls at once; \
                         closing the connection",
                        peer_name(&conn.peer),
                        conn.config.credits
                    ));
                    return Err(Closed);
                }
                let order = Order {
                    pull: conn.pull_order.issue(),
                    dispatch: conn.dispatch_order.issue(),
                };
                let c = Arc::clone(conn);
                let mut call = Box::pin(async move {
                    let answer = c.on_call(msg, order).await;
                    // A reply waits for a slot while its call still counts
                    // as in flight; the call ends just before its reply is
                    // posted, so a requester that sends its next call on
                    // receiving the reply always finds the call slot free.
                    let ready = match answer {
                        Ok(Some(a)) => c.replies.take(&peer_name(&c.peer)).await.then_some(a),
                        _ => None,
                    };
                    c.calls.end();
                    if let Some(a) = ready {
                        if c.post_answer(a).is_err() {
                            c.replies.sent();
                        }
                    }
                });
                // Started here, up to its first wait: an inline call whose
                // turn it is reaches the RPC server before the next
                // completion is reaped, with no task hop; the rest runs on
                // its own task.
                let first = std::future::poll_fn(|cx| {
                    Poll::Ready(std::future::Future::poll(call.as_mut(), cx))
                });
                if first.await.is_pending() {
                    tokio::spawn(call);
                }
            }
            (WcOpcode::RdmaRead, status) => {
                if let Some(tx) = conn.lock_reads().remove(&wc.wr_id) {
                    let _ = tx.send(status);
                }
                if status != WcStatus::Success {
                    return Err(Closed);
                }
            }
            (WcOpcode::Send, WcStatus::Success) if wc.wr_id & bounds::REPLY_TAG != 0 => {
                conn.replies.sent();
            }
            (_, WcStatus::Success) => {}
            _ => return Err(Closed),
        }
    }
}

impl<Q: QueuePair> Conn<Q> {
    fn wr_id(&self) -> u64 {
        self.next_wr.fetch_add(1, Ordering::Relaxed)
    }

    /// A reply to one of our reverse-direction calls (msg_type REPLY after
    /// an inline version 1 header) completes that call; returns false for
    /// anything else.
    fn on_reverse_reply(&self, msg: &Bytes, invalidated: Option<Stag>) -> bool {
        let Some(rev) = &self.reverse else {
            return false;
        };
        let Some(r) = super::v2_reverse::reverse_reply(msg, &self.config.limits) else {
            return false;
        };
        let mut st = rev.lock();
        let (xid, credits) = (r.xid, r.credits);
        let regions = st.regions.remove(&xid).unwrap_or_default();
        let done = match r.resolve(msg, regions, invalidated) {
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
        }
        drop(st);
        rev.wait.notify_waiters();
        true
    }

    fn lock_reads(&self) -> MutexGuard<'_, HashMap<u64, oneshot::Sender<WcStatus>>> {
        self.reads.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn grant(&self, requested: u32) -> u32 {
        self.credits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .grant(requested)
    }

    /// A call arrived: take its bytes and repost a receive at once, so the
    /// grant in every reply is backed by posted receives (RFC 8166 §3.3.1).
    fn on_receive(&self, wc: WorkCompletion) -> Result<Bytes, Closed> {
        let mut buf = wc.buf.unwrap_or_default();
        buf.truncate(wc.byte_len as usize);
        let mut credits = self.credits.lock().unwrap_or_else(|e| e.into_inner());
        credits.on_receive();
        self.qp
            .post_recv(recv_wr(self.wr_id(), self.config.inline_size))
            .map_err(|_| Closed)?;
        credits.on_receives_posted(1);
        Ok(buf.freeze())
    }

    fn send(&self, header: Bytes, inline: Bytes, invalidate: Option<Stag>) -> Result<(), Closed> {
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
            .map(|w| {
                ChainWr::Write(WriteWr {
                    wr_id: self.wr_id(),
                    data: vec![w.data],
                    remote_stag: Stag(w.target.handle),
                    remote_to: w.target.offset,
                })
            })
            .collect();
        chain.push(ChainWr::Send(SendWr {
            wr_id: self.wr_id() | bounds::REPLY_TAG,
            data: vec![a.header, a.inline],
            solicited: false,
            invalidate: a.invalidate,
        }));
        self.qp.post_chain(chain).map_err(|_| Closed)
    }

    /// Serves one call; `None` when it gets no answer (an error from a
    /// requester, or a call the RPC server drops). Its read chunks are
    /// pulled while earlier calls' may still be, but it is handed to the
    /// RPC server only after every earlier call of the connection
    /// ([`super::order`]).
    async fn on_call(&self, msg: Bytes, order: Order) -> Result<Option<Answer>, Closed> {
        let max = self.config.max_version;
        let rx = match hdr::decode(&msg, &self.config.limits, max) {
            Ok(rx) => rx,
            Err(e) => {
                // RFC 8166 §4.4 / v2 draft §5.3.3: ERR_VERS, ERR_CHUNK or
                // the specific v2 code, if there is an XID to answer.
                let h = hdr::encode_decode_error(&msg, &e, |c| self.grant(c), max);
                return Ok(h.map(Answer::header));
            }
        };
        let (ver, xid, asked) = (rx.version, rx.xid, rx.credits);
        if ver == Version::V2 {
            self.v2.store(true, Ordering::Relaxed);
        }
        let bad = || Some(Answer::header(hdr::encode_bad(ver, xid, self.grant(asked))));
        // The RPC message is inline (RDMA_MSG) or in a Position-Zero Read
        // chunk (RDMA_NOMSG); reassembly handles both.
        let (chunks, inv_handle) = match rx.inbound {
            Inbound::Rpc {
                lists, inv_handle, ..
            } => (lists, inv_handle),
            Inbound::Obsolete => return Ok(bad()),
            Inbound::ConnProp(Ok(props)) => {
                // Our send threshold never exceeds the peer's receive
                // buffers (v2 draft §4.2.1); answer with our properties.
                self.send_threshold
                    .fetch_min(props.receive_buffer_size as usize, Ordering::Relaxed);
                self.peer_rvreqsup
                    .store(props.reverse_request_support.0, Ordering::Relaxed);
                let ours = Properties {
                    receive_buffer_size: self.config.inline_size,
                    reverse_request_support: super::v2::server_level(
                        self.config.backchannel_credits,
                    ),
                };
                let h = hdr::encode_connprop(xid, self.grant(asked), true, &ours);
                return Ok(Some(Answer::header(h)));
            }
            // v2 draft §4.1: an ill-typed property value is BAD_XDR.
            Inbound::ConnProp(Err(_)) => return Ok(bad()),
            // Errors from a requester are not answered.
            Inbound::ErrorV1(_) | Inbound::ErrorV2(_) => return Ok(None),
        };
        let inline = msg.slice(rx.len..);
        let pulled = self.pull(inline, &chunks, order.pull).await;
        let Some((record, share)) = pulled.inspect_err(|_| self.dispatch_order.close())? else {
            return Ok(bad());
        };
        order.dispatch.wait().await.map_err(|_| Closed)?;
        let reply = self.hand_over(record, order.dispatch).await;
        // The call's buffer is the service's now: its share of the read
        // budget returns.
        drop(share);
        let Some(reply) = reply else {
            return Ok(None);
        };
        let send = self.send_threshold.load(Ordering::Relaxed);
        let plan = match plan_reply(&reply, &chunks, send, ver) {
            Ok(p) => p,
            Err(e) => {
                let h = hdr::encode_plan_error(ver, xid, self.grant(asked), &e);
                return Ok(Some(Answer::header(h)));
            }
        };
        let invalidate = self.invalidate(ver, &chunks, inv_handle);
        let header = hdr::encode_rpc(
            ver,
            xid,
            self.grant(asked),
            true,
            plan.proc_ == Proc::RDMA_NOMSG,
            plan.chunks,
            0,
        );
        Ok(Some(Answer {
            writes: plan.writes,
            header,
            inline: plan.inline,
            invalidate,
        }))
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

    /// The STag a reply's Send With Invalidate names
    /// (draft-cel-nfsv4-reminv-design §4.2): in version 2 only the handle
    /// the requester named in rdma_inv_handle (v2 draft §3.3); in version 1
    /// one of the call's STags when the client's private data allows it
    /// (RFC 8797 §4).
    fn invalidate(&self, ver: Version, chunks: &ChunkLists, inv_handle: u32) -> Option<Stag> {
        match ver {
            _ if !self.config.send_with_invalidate => None,
            Version::V2 => (inv_handle != 0).then_some(Stag(inv_handle)),
            Version::V1 if self.send_inv => chunks
                .reply
                .iter()
                .chain(chunks.writes.iter())
                .flat_map(|c| c.segments.first())
                .map(|s| s.handle)
                .chain(chunks.reads.first().map(|r| r.target.handle))
                .next()
                .map(Stag),
            Version::V1 => None,
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
    /// to the call's actual chunks) is allocated only once the call holds
    /// that many bytes of the connection's read budget, returned with the
    /// record. Reads unanswered after `read_timeout` close the connection.
    async fn pull(
        &self,
        inline: Bytes,
        chunks: &ChunkLists,
        turn: Ticket,
    ) -> Result<Option<(Bytes, Option<SemaphorePermit<'_>>)>, Closed> {
        if chunks.reads.is_empty() {
            return Ok(Some((inline, None)));
        }
        let total: u64 = chunks
            .reads
            .iter()
            .map(|r| u64::from(r.target.length))
            .sum();
        let max = self.config.max_read_bytes.min(self.budget.max());
        let Some(total) = u32::try_from(total).ok().filter(|t| u64::from(*t) <= max) else {
            bounds::CALL_TOO_LARGE.trip(format_args!(
                "RPC-over-RDMA peer {} asked the server to pull {total} bytes \
                 (at most {max}); answered ERR_CHUNK",
                peer_name(&self.peer)
            ));
            return Ok(None);
        };
        let Some(layout) = read_layout(&inline, chunks) else {
            return Ok(None);
        };
        // In arrival order: a call waiting for its share never waits for
        // bytes held by later calls, which wait for its hand-over.
        turn.wait().await.map_err(|_| Closed)?;
        let share = self.budget.acquire(total).await.map_err(|_| Closed)?;
        drop(turn);
        let mut buf = BytesMut::zeroed(layout.0.len);
        if !layout.0.copy_inline(&inline, &mut buf) {
            return Ok(None);
        }
        let Ok(mr) = self.pd.register(buf, Access::LOCAL_WRITE) else {
            return Ok(None);
        };
        let waits = self.post_reads(&mr, chunks, &layout)?;
        let Some(waits) = waits else {
            return Ok(None);
        };
        let all = async {
            for rx in waits {
                if !matches!(rx.await, Ok(WcStatus::Success)) {
                    return false;
                }
            }
            true
        };
        match bounds::within(self.config.read_timeout, all).await {
            Some(true) => Ok(Some((mr.invalidate().buf.freeze(), Some(share)))),
            Some(false) => Err(Closed),
            None => {
                bounds::READ_TIMEOUT.trip(format_args!(
                    "RPC-over-RDMA peer {} left RDMA Reads of {total} bytes \
                     unanswered for {:?}; closing the connection",
                    peer_name(&self.peer),
                    self.config.read_timeout
                ));
                self.qp.disconnect();
                Err(Closed)
            }
        }
    }

    /// Posts one RDMA Read per read segment into `mr` at the offsets of
    /// `layout`; the receivers of their completions, or `None` when the
    /// layout does not match the chunks.
    fn post_reads(
        &self,
        mr: &rnic::MemoryRegion,
        chunks: &ChunkLists,
        (layout, items, first_seg): &ReadLayout,
    ) -> Result<Option<Vec<oneshot::Receiver<WcStatus>>>, Closed> {
        let mut waits = Vec::with_capacity(chunks.reads.len());
        for piece in &layout.pieces {
            let Piece::Chunk { index, dst, .. } = piece else {
                continue;
            };
            let (Some(&start), Some(&(pos, _))) = (first_seg.get(*index), items.get(*index)) else {
                return Ok(None);
            };
            let mut off = *dst as u64;
            for r in chunks
                .reads
                .iter()
                .skip(start)
                .take_while(|r| r.position == pos)
            {
                let id = self.wr_id();
                let (tx, rx) = oneshot::channel();
                self.lock_reads().insert(id, tx);
                let wr = ReadWr {
                    wr_id: id,
                    local_stag: mr.stag(),
                    local_to: mr.base_to() + off,
                    len: r.target.length,
                    remote_stag: Stag(r.target.handle),
                    remote_to: r.target.offset,
                };
                off += u64::from(r.target.length);
                if self.qp.post_read(wr).is_err() {
                    self.lock_reads().remove(&id);
                    return Err(Closed);
                }
                waits.push(rx);
            }
        }
        Ok(Some(waits))
    }
}

/// A call's tickets: for its share of the read budget and its hand-over.
struct Order {
    pull: Ticket,
    dispatch: Ticket,
}

/// What answers one call: RDMA Writes of its write or reply chunks, then
/// the Send of its transport header and inline part.
struct Answer {
    writes: Vec<crate::plan::WritePlan>,
    header: Bytes,
    inline: Bytes,
    invalidate: Option<Stag>,
}

impl Answer {
    /// A transport header alone (an RDMA_ERROR, an RDMA2_CONNPROP).
    fn header(header: Bytes) -> Self {
        Self {
            writes: Vec::new(),
            header,
            inline: Bytes::new(),
            invalidate: None,
        }
    }
}

/// The call's layout, its chunk items as (position, length) in segment
/// order, and the first segment of each item.
type ReadLayout = (crate::layout::Layout, Vec<(u32, usize)>, Vec<usize>);

/// Where each read chunk goes in the rebuilt call; `None` when the chunks
/// do not fit the inline stream.
fn read_layout(inline: &Bytes, chunks: &ChunkLists) -> Option<ReadLayout> {
    let mut items: Vec<(u32, usize)> = Vec::new();
    let mut first_seg: Vec<usize> = Vec::new();
    for (i, r) in chunks.reads.iter().enumerate() {
        match items.last_mut() {
            Some((p, len)) if *p == r.position => *len += r.target.length as usize,
            _ => {
                items.push((r.position, r.target.length as usize));
                first_seg.push(i);
            }
        }
    }
    let layout = plan_layout(inline, &items).ok()?;
    Some((layout, items, first_seg))
}

/// The peer's address for a log line.
fn peer_name(p: &PeerInfo) -> String {
    p.addr.map_or_else(|| "?".to_owned(), |a| a.to_string())
}
