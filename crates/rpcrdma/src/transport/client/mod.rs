//! The requester: [`RdmaClient`].

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use oncrpc::client::{CallSigner, ClientConfig, ClientCore, RetransmitPolicy};
use oncrpc::server::{PeerInfo, Server, TransportKind};
use oncrpc::tcp::ReconnectPolicy;
use oncrpc::{ClientTransport, RpcCall, RpcError};
use rnic::{
    Access, CmError, Device, MemoryRegion, ProtectionDomain, QpConfig, QueuePair, ReadOnlyRegion,
    RecvWr, SendWr, WcOpcode, WcStatus, WorkCompletion,
};
use tokio::sync::{oneshot, Notify};
use xdr::XdrBuf;

mod recv;
use recv::on_reply;

use super::hdr;
use super::pool::PullPool;
use super::recv_pool::{RecvPool, RECV_KEEP};
use super::reply::{chunk_bytes, fence, place_reply, Placed, WRITE_PREFIX_SLACK};
use crate::credits::RequesterCredits;
use crate::endpoint::message::{classify, Kind, Role, Rpc};
use crate::endpoint::requester::{self, Sent, Step};
use crate::plan::{plan_call, InlineThresholds, Version};
use crate::ulb::ReplyHint;
use crate::wire::v1::Proc;
use crate::wire::v2::Properties;
use crate::wire::{ChunkLists, Limits, RdmaSegment};

/// Client settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaClientConfig {
    /// Credits requested, and receive buffers posted for replies
    /// (Linux asks 128, kpeer README).
    pub max_requests: u32,
    /// Inline send and receive size advertised in the private data.
    pub inline_size: u32,
    /// Whether the server may reply with Send With Invalidate.
    pub send_with_invalidate_ok: bool,
    /// First XID.
    pub xid_seed: u32,
    /// Protocol version to start with. With [`Version::V2`] the client
    /// opens with RDMA2_CONNPROP and falls back to version 1 when the
    /// server answers ERR_VERS (v2 draft §7).
    pub version: Version,
    /// Reverse-direction calls the client accepts at once (RFC 8167),
    /// used by [`RdmaClient::connect_with_backchannel`]: that many extra
    /// receive buffers are posted and granted
    /// (draft-ietf-nfsv4-rpcrdma-bidirection-01 §2.1.2, §2.2.1).
    pub backchannel_credits: u32,
    /// With a backchannel on a version 2 connection, accept
    /// reverse-direction calls with chunks (advertise
    /// RDMA2_RVREQSUP_GENL rather than INLINE, v2 draft §4.2.2): the call
    /// is pulled by RDMA Read and a long reply written to its reply chunk.
    pub backchannel_chunks: bool,
}

impl Default for RdmaClientConfig {
    fn default() -> Self {
        Self {
            max_requests: 128,
            inline_size: 4096,
            send_with_invalidate_ok: true,
            xid_seed: 0x1000,
            version: Version::V1,
            backchannel_credits: 2,
            backchannel_chunks: true,
        }
    }
}

/// How the calls and replies of one client travelled (RFC 8166 §3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClientStats {
    /// Calls sent entirely inline.
    pub inline_calls: u64,
    /// Calls with DDP-eligible data in read chunks.
    pub read_chunk_calls: u64,
    /// Long calls in a Position-Zero Read chunk.
    pub position_zero_calls: u64,
    /// Replies with data in a write chunk.
    pub write_chunk_replies: u64,
    /// Write-chunk replies rebuilt around the placed data in its own
    /// buffer, with no copy of the data.
    pub in_place_replies: u64,
    /// Replies conveyed in the reply chunk (RDMA_NOMSG).
    pub reply_chunk_replies: u64,
    /// RDMA_ERROR replies.
    pub error_replies: u64,
    /// Replies that arrived by Send With Invalidate naming one of the
    /// call's STags (draft-cel-nfsv4-reminv-design §4).
    pub remote_invalidations: u64,
    /// Replies whose Send With Invalidate named an STag not belonging to
    /// the call; the reply is not trusted and the call fails.
    pub foreign_invalidations: u64,
    /// Calls sent again as version 1 after a version 2 ERR_VERS
    /// (v2 draft §7.2).
    pub version_fallbacks: u64,
    /// Version 2 calls sent again with larger reply resources after
    /// RDMA2_ERR_WRITE_RESOURCE or RDMA2_ERR_REPLY_RESOURCE
    /// (v2 draft §5.3.3).
    pub resource_resends: u64,
    /// Reverse-direction calls answered (RFC 8167).
    pub backchannel_calls: u64,
    /// Received messages handled on the device's own task (its receive
    /// task) by the client's completion handler, with no hop through the
    /// completion task; the others were polled (a device without
    /// completion handlers, or behind a completion given back).
    pub handled_on_device: u64,
    /// Receives posted in the buffer of an earlier reply its caller had
    /// dropped, rather than in a fresh one.
    pub reused_receive_buffers: u64,
    /// Connections re-established after a loss.
    pub reconnects: u64,
    /// Calls sent again, with their XIDs, on a re-established connection.
    pub retransmissions: u64,
}

/// Registered memory of one call, fenced when its reply arrives.
struct Resources {
    reads: Vec<ReadOnlyRegion>,
    /// The write chunk's region and the room before the advertised
    /// segment.
    write: Option<(MemoryRegion, usize)>,
    reply: Option<MemoryRegion>,
    ddp_position: Option<usize>,
    /// The caller's reply hint, to provision the call again on a new
    /// connection.
    hint: oncrpc::ReplyHint,
    /// The version the call was last sent with.
    sent: Version,
    /// What to send again after a version fallback.
    resend: Resend,
    /// The call, kept for version 2 calls only: sent again with larger
    /// resources after RDMA2_ERR_WRITE_RESOURCE / REPLY_RESOURCE
    /// (v2 draft §5.3.3).
    msg: Option<XdrBuf>,
    /// Times it was sent again with larger resources.
    resizes: u8,
}

impl Resources {
    /// Invalidates every region of the call (RFC 8166 §3.4.3): none stays
    /// remotely accessible once the call is done or its connection gone.
    fn fence(self) {
        for mr in self.reads {
            drop(mr.invalidate());
        }
        fence(self.write.map(|w| w.0));
        fence(self.reply);
    }
}

struct Resend {
    nomsg: bool,
    lists: ChunkLists,
    inline: Bytes,
}

/// A call waiting to be sent again on a re-established connection.
struct Backlogged {
    xid: u32,
    msg: XdrBuf,
    hint: oncrpc::ReplyHint,
}

struct State<Q> {
    /// The connection in use; `None` while reconnecting.
    qp: Option<Arc<Q>>,
    /// [`RdmaClient::close`] was called: never reconnect.
    shutdown: bool,
    /// Calls in flight when the connection was lost, in XID order, not yet
    /// sent again (they wait for credits on the new connection).
    backlog: VecDeque<Backlogged>,
    core: ClientCore<oneshot::Sender<Result<Bytes, RpcError>>>,
    credits: RequesterCredits,
    resources: HashMap<u32, Resources>,
    stats: ClientStats,
    closed: bool,
    version: Version,
    thresholds: InlineThresholds,
    send_with_invalidate_ok: bool,
}

/// Where and how to connect again after a loss.
struct Dialer<D: Device> {
    device: D,
    addr: D::Addr,
    policy: ReconnectPolicy,
}

struct Inner<D: Device> {
    pd: ProtectionDomain,
    config: RdmaClientConfig,
    /// The service answering reverse-direction calls, and its credits.
    backchannel: Option<(Arc<Server>, u32)>,
    dialer: Option<Dialer<D>>,
    state: Mutex<State<D::Qp>>,
    credit_wait: Notify,
    next_wr: AtomicU64,
    /// RDMA Reads of reverse-direction calls in flight (GENL).
    reads: super::pull::ReadWaiters,
    /// Write-chunk buffers, reused once the reply placed in them is
    /// dropped ([`REPLY_POOL_BYTES`]).
    pool: PullPool,
    /// [`ClientStats::handled_on_device`], counted without the state lock.
    on_device: AtomicU64,
    /// Receive buffers of replies the callers dropped, posted again
    /// ([`super::recv_pool`]).
    recv_pool: RecvPool,
}

/// Most bytes of idle write-chunk buffers one client keeps for reuse:
/// a 1 MiB READ otherwise zero-fills a fresh 1 MiB buffer. The server
/// writes into them but can never read them (REMOTE_WRITE only); what it
/// says it wrote is all a reply exposes, as with a fresh buffer.
const REPLY_POOL_BYTES: u64 = 8 * 1024 * 1024;

impl<D: Device> Inner<D> {
    fn lock(&self) -> MutexGuard<'_, State<D::Qp>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wr_id(&self) -> u64 {
        self.next_wr.fetch_add(1, Ordering::Relaxed)
    }

    /// Receive buffers posted per connection.
    fn posted(&self) -> u32 {
        self.config.max_requests + self.backchannel.as_ref().map_or(0, |b| b.1)
    }

    /// Opens a connection (RFC 8797 private data, a receive per credit).
    async fn dial(&self, device: &D, addr: &D::Addr) -> Result<(D::Qp, InlineThresholds), CmError> {
        let config = &self.config;
        let posted = self.posted();
        let local = super::private_data(config.inline_size, config.send_with_invalidate_ok);
        let cq = rnic::CompletionQueue::new(4 * config.max_requests as usize + 64);
        let mut qp_cfg = QpConfig::new(cq);
        qp_cfg.max_recv_wr = posted;
        qp_cfg.max_send_wr = 2 * posted;
        qp_cfg.initial_recvs = (0..posted)
            .map(|i| recv_wr(u64::from(i), config.inline_size))
            .collect();
        qp_cfg.private_data = local.to_bytes().to_vec();
        let connected = device.connect(&self.pd, addr, qp_cfg).await?;
        let thresholds = super::thresholds(&local, &connected.private_data);
        Ok((connected.qp, thresholds))
    }

    /// v2 draft §5.3.4: properties first; a version 1 server answers
    /// ERR_VERS and the connection falls back.
    fn send_connprop(&self, qp: &D::Qp) -> Result<(), rnic::PostError> {
        let props = Properties {
            receive_buffer_size: self.config.inline_size,
            reverse_request_support: super::v2::client_level(
                self.backchannel.is_some(),
                self.config.backchannel_chunks,
            ),
        };
        let h = hdr::encode_connprop(0, self.config.max_requests, false, &props);
        let h = super::v2::first_message(h)?;
        qp.post_send(SendWr {
            wr_id: self.wr_id(),
            data: vec![h],
            solicited: false,
            invalidate: None,
        })
    }
}

/// An RPC-over-RDMA requester (version 1, or 2 with fallback) over one
/// queue pair.
///
/// [`RdmaClient::connect`] sends the RFC 8797 private data, posts a receive
/// buffer per requested credit and starts a task reaping completions.
/// Each call is planned by [`plan_call`], its chunks registered, and the
/// regions invalidated when the reply arrives.
pub struct RdmaClient<D: Device> {
    inner: Arc<Inner<D>>,
}

impl<D: Device> Clone for RdmaClient<D> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<D: Device> std::fmt::Debug for RdmaClient<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaClient")
            .field("thresholds", &self.inner.lock().thresholds)
            .finish()
    }
}

fn recv_wr(id: u64, size: u32) -> RecvWr {
    RecvWr {
        wr_id: id,
        buf: BytesMut::with_capacity(size as usize),
    }
}

impl<D: Device> RdmaClient<D> {
    /// Connects to an RPC-over-RDMA listener at `addr`. Needs a tokio
    /// runtime (for the completion task).
    pub async fn connect(
        device: &D,
        addr: &D::Addr,
        config: RdmaClientConfig,
    ) -> Result<Self, CmError> {
        Self::connect_inner(device, addr, config, None, None).await
    }

    /// Like [`RdmaClient::connect`], and answers the server's
    /// reverse-direction calls (RFC 8167, e.g. NFSv4.1 callbacks) with
    /// `service`, inline only, at most `config.backchannel_credits` at once.
    pub async fn connect_with_backchannel(
        device: &D,
        addr: &D::Addr,
        config: RdmaClientConfig,
        service: Arc<Server>,
    ) -> Result<Self, CmError> {
        let bc = (service, config.backchannel_credits.max(1));
        Self::connect_inner(device, addr, config, Some(bc), None).await
    }

    /// Like [`RdmaClient::connect`], and re-establishes a lost connection
    /// under `policy`: the calls in flight are sent again on the new
    /// connection with their original XIDs, so the server's
    /// duplicate-request cache answers any it already executed
    /// (RFC 5531 §8; RFC 8166 §3.3.1: the new connection starts with one
    /// credit). Their chunk regions are invalidated when the connection is
    /// lost and registered afresh, with new STags, for the retransmission
    /// (RFC 8166 §3.4.3). Calls fail with `ConnectionClosed` only when
    /// every attempt fails or after [`RdmaClient::close`].
    pub async fn connect_with_reconnect(
        device: &D,
        addr: &D::Addr,
        config: RdmaClientConfig,
        policy: ReconnectPolicy,
    ) -> Result<Self, CmError>
    where
        D: Clone,
    {
        let dialer = Dialer {
            device: device.clone(),
            addr: addr.clone(),
            policy,
        };
        Self::connect_inner(device, addr, config, None, Some(dialer)).await
    }

    /// [`RdmaClient::connect_with_backchannel`] and
    /// [`RdmaClient::connect_with_reconnect`] together: each new
    /// connection answers the server's reverse-direction calls with
    /// `service` (an NFSv4.1 client binds its back channel to it again,
    /// RFC 8881 §2.10.3.1).
    pub async fn connect_with_backchannel_and_reconnect(
        device: &D,
        addr: &D::Addr,
        config: RdmaClientConfig,
        service: Arc<Server>,
        policy: ReconnectPolicy,
    ) -> Result<Self, CmError>
    where
        D: Clone,
    {
        let bc = (service, config.backchannel_credits.max(1));
        let dialer = Dialer {
            device: device.clone(),
            addr: addr.clone(),
            policy,
        };
        Self::connect_inner(device, addr, config, Some(bc), Some(dialer)).await
    }

    async fn connect_inner(
        device: &D,
        addr: &D::Addr,
        config: RdmaClientConfig,
        backchannel: Option<(Arc<Server>, u32)>,
        dialer: Option<Dialer<D>>,
    ) -> Result<Self, CmError> {
        let core_cfg = ClientConfig {
            max_in_flight: config.max_requests as usize,
            retransmit: RetransmitPolicy::default(),
        };
        let inner = Arc::new(Inner {
            pd: device.alloc_pd(),
            config,
            backchannel,
            dialer,
            state: Mutex::new(State {
                qp: None,
                shutdown: false,
                backlog: VecDeque::new(),
                core: ClientCore::new(config.xid_seed, core_cfg),
                credits: RequesterCredits::new(config.max_requests),
                resources: HashMap::new(),
                stats: ClientStats::default(),
                closed: false,
                version: config.version,
                thresholds: InlineThresholds {
                    send: 1024,
                    recv: 1024,
                },
                send_with_invalidate_ok: config.send_with_invalidate_ok,
            }),
            credit_wait: Notify::new(),
            next_wr: AtomicU64::new(0),
            reads: Default::default(),
            pool: PullPool::new(REPLY_POOL_BYTES),
            on_device: AtomicU64::new(0),
            recv_pool: RecvPool::new(
                config.inline_size,
                RECV_KEEP.min(config.max_requests as usize),
            ),
        });
        let (qp, thresholds) = inner.dial(device, addr).await?;
        let qp = Arc::new(qp);
        inner
            .next_wr
            .store(u64::from(inner.posted()), Ordering::Relaxed);
        {
            let mut st = inner.lock();
            st.thresholds = thresholds;
            st.qp = Some(Arc::clone(&qp));
        }
        handle_on_device(&inner, &qp);
        tokio::spawn(run(Arc::clone(&inner), Arc::clone(&qp)));
        if config.version == Version::V2 {
            inner
                .send_connprop(&qp)
                .map_err(|e| CmError::Setup(format!("RDMA2_CONNPROP: {e}")))?;
        }
        Ok(Self { inner })
    }

    /// The negotiated inline thresholds.
    pub fn thresholds(&self) -> InlineThresholds {
        self.inner.lock().thresholds
    }

    /// The protocol version calls are sent with now.
    pub fn version(&self) -> Version {
        self.inner.lock().version
    }

    /// Conveyance counters.
    pub fn stats(&self) -> ClientStats {
        let mut s = self.inner.lock().stats;
        s.handled_on_device = self.inner.on_device.load(Ordering::Relaxed);
        s.reused_receive_buffers = self.inner.recv_pool.reused();
        s
    }

    /// Credits granted by the server and calls outstanding.
    pub fn credits(&self) -> (u32, u32) {
        let st = self.inner.lock();
        (st.credits.granted(), st.credits.outstanding())
    }

    /// Disconnects for good (no reconnection); calls in flight fail with
    /// `ConnectionClosed`.
    pub fn close(&self) {
        let qp = {
            let mut st = self.inner.lock();
            st.shutdown = true;
            st.qp.clone()
        };
        if let Some(qp) = qp {
            qp.disconnect();
        }
        self.inner.credit_wait.notify_waiters();
    }

    async fn call_inner(
        &self,
        call: RpcCall,
        dst: Option<BytesMut>,
        signer: Option<Arc<dyn CallSigner>>,
    ) -> Result<Bytes, RpcError> {
        let inner = &self.inner;
        // RFC 8166 §3.3.1: never more calls outstanding than granted; calls
        // waiting to be sent again after a reconnect go first.
        let mut dst = dst;
        let (rx, qp, xid, wr) = loop {
            let notified = inner.credit_wait.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = inner.lock();
                if st.closed || st.shutdown {
                    return Err(RpcError::ConnectionClosed);
                }
                if let Some(qp) = st.qp.clone() {
                    if st.backlog.is_empty() && st.credits.try_send().is_ok() {
                        match start_call(inner, &mut st, &call, dst.take(), signer.clone()) {
                            Ok((rx, xid, wr)) => break (rx, qp, xid, wr),
                            Err(e) => {
                                st.credits.on_abandon();
                                drop(st);
                                inner.credit_wait.notify_waiters();
                                return Err(e);
                            }
                        }
                    }
                }
            }
            notified.await;
        };
        // Posted without the state lock: the device may wait for the
        // socket (a Read Response of an earlier call going out), and the
        // receive task must meanwhile be able to take the lock for the
        // replies it delivers. The call's credit, XID and regions are
        // recorded already, so its reply finds them.
        if let Err(e) = qp.post_send(wr) {
            let mut st = inner.lock();
            // When the connection was lost meanwhile, the completion task
            // has taken the call over (sent it again, or failed it).
            if st.qp.as_ref().is_some_and(|q| Arc::ptr_eq(q, &qp)) {
                match refused_post(inner, &mut st, xid, e) {
                    // With reconnection the call stays in flight: the loss
                    // of the connection is seen by the completion task,
                    // which sends it again.
                    RpcError::ConnectionClosed if inner.dialer.is_some() => {}
                    e => {
                        st.core.cancel(xid);
                        st.credits.on_abandon();
                        drop(st);
                        inner.credit_wait.notify_waiters();
                        return Err(e);
                    }
                }
            }
        }
        rx.await.unwrap_or(Err(RpcError::ConnectionClosed))
    }
}

type ReplyRx = oneshot::Receiver<Result<Bytes, RpcError>>;

/// Starts a call (XID, table entry) and prepares its Send (see
/// [`prepare`]), which the caller posts; with a `signer` (RPCSEC_GSS) its
/// verifier is computed over the header once the XID is known and the
/// reply's verifier checked.
fn start_call<D: Device>(
    inner: &Inner<D>,
    st: &mut State<D::Qp>,
    call: &RpcCall,
    dst: Option<BytesMut>,
    signer: Option<Arc<dyn CallSigner>>,
) -> Result<(ReplyRx, u32, SendWr), RpcError> {
    let (tx, rx) = oneshot::channel();
    let (xid, msg) = st
        .core
        .start_call_signed(call, signer, tx, Instant::now())
        .map_err(|(_, e)| e)?;
    match prepare(inner, st, xid, &msg, call.reply_hint, dst) {
        Ok(wr) => Ok((rx, xid, wr)),
        Err(e) => {
            st.core.cancel(xid);
            Err(e)
        }
    }
}

/// Plans call `xid`, registers its chunks and sends it on `qp` (see
/// [`prepare`]); the call must already hold a credit. On
/// `ConnectionClosed` its regions stay recorded (fenced when the loss is
/// handled); on any other error none is left registered.
fn convey<D: Device>(
    inner: &Inner<D>,
    st: &mut State<D::Qp>,
    qp: &D::Qp,
    xid: u32,
    msg: &XdrBuf,
    reply_hint: oncrpc::ReplyHint,
    dst: Option<BytesMut>,
) -> Result<(), RpcError> {
    let wr = prepare(inner, st, xid, msg, reply_hint, dst)?;
    qp.post_send(wr)
        .map_err(|e| refused_post(inner, st, xid, e))
}

/// What a Send of call `xid` the device refused leaves: when the queue
/// pair left RTS the connection is lost, and the call's regions stay
/// recorded when it will be sent again on the next connection
/// (`ConnectionClosed`); otherwise they are fenced.
fn refused_post<D: Device>(
    inner: &Inner<D>,
    st: &mut State<D::Qp>,
    xid: u32,
    e: rnic::PostError,
) -> RpcError {
    match e {
        rnic::PostError::InvalidState(_) => {
            if inner.dialer.is_none() {
                if let Some(res) = st.resources.remove(&xid) {
                    res.fence();
                }
            }
            RpcError::ConnectionClosed
        }
        // Anything else will not get better by waiting: fail the call.
        _ => {
            if let Some(res) = st.resources.remove(&xid) {
                res.fence();
            }
            RpcError::Transport("work request refused by the device")
        }
    }
}

/// Plans call `xid` (RFC 8166 §3.5), registers its chunks, records them
/// and builds its Send; the call must already hold a credit. On error
/// none is left registered.
fn prepare<D: Device>(
    inner: &Inner<D>,
    st: &mut State<D::Qp>,
    xid: u32,
    msg: &XdrBuf,
    reply_hint: oncrpc::ReplyHint,
    mut dst: Option<BytesMut>,
) -> Result<SendWr, RpcError> {
    let ddp = reply_hint.ddp;
    let hint = ReplyHint::from(reply_hint);
    let version = st.version;
    let plan = plan_call(msg, st.thresholds, hint, version)
        .map_err(|_| RpcError::Transport("call cannot be conveyed"))?;
    let mut reads = Vec::new();
    let mut write = None;
    let mut reply = None;
    let mut read_segs = Vec::new();
    let mut write_segs = Vec::new();
    let mut reply_seg = None;
    let registered = (|| {
        // RFC 8166 §3.4.5: the responder only reads these bytes, so the
        // caller's buffer is registered read-only, without a copy.
        for c in &plan.read_chunks {
            let mr = inner
                .pd
                .register_read_only(c.data.clone(), 0)
                .map_err(|_| RpcError::Transport("memory registration failed"))?;
            read_segs.push(RdmaSegment {
                handle: mr.stag().0,
                length: c.data.len() as u32,
                offset: mr.base_to(),
            });
            reads.push(mr);
        }
        // The write chunk is advertised inside a buffer with room for the
        // reply's inline parts around it, so the reply is rebuilt in place
        // around the placed data (see `place_reply`).
        for &n in &plan.write_chunk_lens {
            let room = WRITE_PREFIX_SLACK + ddp.map_or(0, |d| d.position);
            let total = room + n as usize + 3 + inner.config.inline_size as usize;
            // The caller's buffer when it gave one (`call_into`).
            let buf = match dst.take() {
                Some(mut b) => {
                    b.clear();
                    b.resize(total, 0);
                    b
                }
                None => inner.pool.take(total),
            };
            let mr = inner
                .pd
                .register(buf, Access::REMOTE_WRITE)
                .map_err(|_| RpcError::Transport("memory registration failed"))?;
            write_segs.push(RdmaSegment {
                handle: mr.stag().0,
                length: n,
                offset: mr.base_to() + room as u64,
            });
            write = Some((mr, room));
        }
        if let Some(n) = plan.reply_chunk_len {
            let mr = inner
                .pd
                .register(BytesMut::zeroed(n as usize), Access::REMOTE_WRITE)
                .map_err(|_| RpcError::Transport("memory registration failed"))?;
            reply_seg = Some(RdmaSegment {
                handle: mr.stag().0,
                length: n,
                offset: mr.base_to(),
            });
            reply = Some(mr);
        }
        Ok::<(), RpcError>(())
    })();
    let res = Resources {
        reads,
        write,
        reply,
        ddp_position: ddp.map(|d| d.position),
        hint: reply_hint,
        sent: version,
        resend: Resend {
            nomsg: plan.proc_ == Proc::RDMA_NOMSG,
            lists: ChunkLists::default(),
            inline: plan.inline.clone(),
        },
        msg: (version == Version::V2).then(|| msg.clone()),
        resizes: 0,
    };
    if let Err(e) = registered {
        res.fence();
        return Err(e);
    }
    let lists = match plan.chunk_lists(&read_segs, &write_segs, reply_seg) {
        Ok(l) => l,
        Err(_) => {
            res.fence();
            return Err(RpcError::Transport("plan mismatch"));
        }
    };
    let nomsg = res.resend.nomsg;
    if nomsg {
        st.stats.position_zero_calls += 1;
    } else if plan.read_chunks.is_empty() {
        st.stats.inline_calls += 1;
    } else {
        st.stats.read_chunk_calls += 1;
    }
    // v2 draft §3.3: name one STag the responder may invalidate.
    let inv_handle = match (version, st.send_with_invalidate_ok) {
        (Version::V2, true) => res
            .reply
            .iter()
            .chain(res.write.iter().map(|w| &w.0))
            .map(|mr| mr.stag().0)
            .chain(res.reads.iter().map(|mr| mr.stag().0))
            .next()
            .unwrap_or(0),
        _ => 0,
    };
    let header = hdr::encode_rpc(
        version,
        xid,
        st.credits.requested(),
        false,
        nomsg,
        lists.clone(),
        inv_handle,
    );
    let mut res = res;
    res.resend.lists = lists;
    if let Some(old) = st.resources.insert(xid, res) {
        old.fence();
    }
    Ok(SendWr {
        wr_id: inner.wr_id(),
        data: vec![header, plan.inline],
        solicited: false,
        invalidate: None,
    })
}

/// Sends backlogged calls while credits allow (RFC 8166 §3.3.1).
fn drain_backlog<D: Device>(inner: &Inner<D>, st: &mut State<D::Qp>, qp: &D::Qp) {
    while !st.backlog.is_empty() {
        if st.credits.try_send().is_err() {
            break;
        }
        let Some(b) = st.backlog.pop_front() else {
            break;
        };
        match convey(inner, st, qp, b.xid, &b.msg, b.hint, None) {
            Ok(()) => st.stats.retransmissions += 1,
            Err(RpcError::ConnectionClosed) => {
                // Lost again: the completion task resends it.
                st.credits.on_abandon();
                break;
            }
            Err(e) => {
                st.credits.on_abandon();
                if let Some(tx) = st.core.cancel(b.xid) {
                    let _ = tx.send(Err(e));
                }
            }
        }
    }
}

impl<D: Device> ClientTransport for RdmaClient<D> {
    fn call(
        &self,
        call: RpcCall,
    ) -> impl std::future::Future<Output = Result<Bytes, RpcError>> + Send {
        self.call_inner(call, None, None)
    }

    /// RPCSEC_GSS calls: what makes them safe on RPC-over-RDMA is in the
    /// call itself. With integrity or privacy the GSS client flattens the
    /// arguments into the protected body and asks for no DDP in the reply
    /// (RFC 8166 §9.2.2: those services cover the whole body, so no data
    /// item is moved by direct placement), so a large call goes as a
    /// Position-Zero Read chunk and a large reply in the Reply chunk, sized
    /// with the GSS overhead; with authentication only (krb5) the body is
    /// not protected and DDP is used as for AUTH_SYS.
    fn call_signed(
        &self,
        call: RpcCall,
        signer: Arc<dyn CallSigner>,
    ) -> impl std::future::Future<Output = Result<Bytes, RpcError>> + Send {
        self.call_inner(call, None, Some(signer))
    }

    /// The call's Write chunk is registered inside `dst`, so the DDP item
    /// is placed there by the server's RDMA Write and the results are a
    /// slice of `dst` (RFC 8166 §3.4.6). Without a Write chunk (no DDP
    /// hint, or a reply sent otherwise) the results are wherever the reply
    /// arrived, and `dst` is dropped; a call sent again after a reconnect
    /// uses a fresh buffer.
    fn call_into(
        &self,
        call: RpcCall,
        dst: BytesMut,
    ) -> impl std::future::Future<Output = Result<Bytes, RpcError>> + Send {
        self.call_inner(call, Some(dst), None)
    }
}

/// Has the connection's successful completions handled where the device
/// produces them ([`rnic::CompletionQueue::set_handler`]): a reply is
/// matched, fenced and handed to its caller from the device's receive task,
/// with no hop through the completion task (as the Linux client handles
/// replies in its receive completion). Errors and flushes are given back
/// to [`reap`], which also takes everything on a device without handlers.
/// The handler holds the client and the queue pair weakly: the queue pair
/// owns the queue that owns the handler.
///
/// Not a deadlock: the handler takes the client's state lock only for a
/// received message, which a device produces on its receive task, never
/// inside a `post_send` (a call's own Send is posted without that lock;
/// [`convey`] posts under it when a reply's handling sends a call again,
/// and the Send completion the handler takes without a lock).
fn handle_on_device<D: Device>(inner: &Arc<Inner<D>>, qp: &Arc<D::Qp>) {
    let weak_inner = Arc::downgrade(inner);
    let weak_qp = Arc::downgrade(qp);
    qp.recv_cq()
        .set_handler(move |wc| match (wc.opcode, wc.status) {
            (WcOpcode::Recv, WcStatus::Success) => {
                let (Some(inner), Some(qp)) = (weak_inner.upgrade(), weak_qp.upgrade()) else {
                    return Some(wc);
                };
                inner.on_device.fetch_add(1, Ordering::Relaxed);
                on_reply(&inner, &qp, wc);
                None
            }
            (WcOpcode::RdmaRead, WcStatus::Success) => {
                let Some(inner) = weak_inner.upgrade() else {
                    return Some(wc);
                };
                inner.reads.complete(wc.wr_id, wc.status);
                None
            }
            (WcOpcode::RdmaRead, _) => Some(wc),
            (_, WcStatus::Success) => None,
            _ => Some(wc),
        });
}

/// Reaps one connection's completions until it fails.
async fn reap<D: Device>(inner: &Arc<Inner<D>>, qp: &Arc<D::Qp>) {
    loop {
        let wc = match qp.recv_cq().next().await {
            Ok(wc) => wc,
            Err(_) => break,
        };
        match (wc.opcode, wc.status) {
            (WcOpcode::Recv, WcStatus::Success) => on_reply(inner, qp, wc),
            (WcOpcode::RdmaRead, status) => {
                inner.reads.complete(wc.wr_id, status);
                if status != WcStatus::Success {
                    break;
                }
            }
            (_, WcStatus::Success) => {}
            _ => break,
        }
    }
}

/// Fails every call and marks the client closed.
fn give_up<D: Device>(inner: &Inner<D>) {
    let mut st = inner.lock();
    st.closed = true;
    st.qp = None;
    st.backlog.clear();
    for (tx, e) in st.core.fail_all(RpcError::ConnectionClosed) {
        let _ = tx.send(Err(e));
    }
    for (_, res) in st.resources.drain() {
        res.fence();
    }
    drop(st);
    inner.credit_wait.notify_waiters();
}

/// The completion task: replies, flushes and errors; on a lost connection
/// it reconnects (when a [`ReconnectPolicy`] allows) and sends every call
/// in flight again with its XID.
async fn run<D: Device>(inner: Arc<Inner<D>>, mut qp: Arc<D::Qp>) {
    loop {
        reap(&inner, &qp).await;
        qp.recv_cq().clear_handler();
        qp.disconnect();
        inner.reads.clear();
        // RFC 8166 §3.4.3: the regions of calls in flight are invalidated
        // now; the retransmissions register their memory afresh.
        let mut hints: HashMap<u32, oncrpc::ReplyHint> = HashMap::new();
        {
            let mut st = inner.lock();
            st.qp = None;
            let backlog = std::mem::take(&mut st.backlog);
            hints.extend(backlog.into_iter().map(|b| (b.xid, b.hint)));
            for (xid, res) in st.resources.drain() {
                hints.insert(xid, res.hint);
                res.fence();
            }
        }
        let Some(dialer) = inner.dialer.as_ref().filter(|_| !inner.lock().shutdown) else {
            give_up(&inner);
            return;
        };
        let mut fresh = None;
        for _ in 0..dialer.policy.max_attempts {
            tokio::time::sleep(dialer.policy.delay).await;
            if inner.lock().shutdown {
                break;
            }
            if let Ok(c) = inner.dial(&dialer.device, &dialer.addr).await {
                fresh = Some(c);
                break;
            }
        }
        let Some((new_qp, thresholds)) = fresh else {
            give_up(&inner);
            return;
        };
        qp = Arc::new(new_qp);
        handle_on_device(&inner, &qp);
        let mut st = inner.lock();
        if st.shutdown {
            drop(st);
            qp.disconnect();
            give_up(&inner);
            return;
        }
        st.qp = Some(Arc::clone(&qp));
        st.thresholds = thresholds;
        // RFC 8166 §3.3.1: a new connection starts with one credit.
        st.credits = RequesterCredits::new(inner.config.max_requests);
        st.stats.reconnects += 1;
        if st.version == Version::V2 && inner.send_connprop(&qp).is_err() {
            continue;
        }
        let mut again = st.core.retransmit_all(Instant::now());
        again.sort_by_key(|(xid, _)| *xid);
        st.backlog = again
            .into_iter()
            .map(|(xid, msg)| Backlogged {
                xid,
                msg,
                hint: hints.get(&xid).copied().unwrap_or_default(),
            })
            .collect();
        drain_backlog(&inner, &mut st, &qp);
        drop(st);
        inner.credit_wait.notify_waiters();
    }
}
