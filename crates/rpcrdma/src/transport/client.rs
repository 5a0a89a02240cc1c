//! The requester: [`RdmaClient`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use oncrpc::client::{decode_reply, ClientConfig, ClientCore, RetransmitPolicy};
use oncrpc::server::{PeerInfo, Server, TransportKind};
use oncrpc::{ClientTransport, RpcCall, RpcError};
use rnic::{
    Access, CmError, Device, MemoryRegion, ProtectionDomain, QpConfig, QueuePair, ReadOnlyRegion,
    RecvWr, SendWr, WcOpcode, WcStatus, WorkCompletion,
};
use tokio::sync::{oneshot, Notify};

use super::hdr::{self, Inbound};
use crate::credits::RequesterCredits;
use crate::layout::plan_layout;
use crate::plan::{chunk_contents, plan_call, reassemble, InlineThresholds, Version};
use crate::ulb::ReplyHint;
use crate::wire::v1::{self, Proc};
use crate::wire::v2::{Properties, RvReqSup};
use crate::wire::{ChunkLists, Limits, RdmaSegment, WriteChunk};

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
    /// Reverse-direction calls answered (RFC 8167).
    pub backchannel_calls: u64,
}

/// Registered memory of one call, fenced when its reply arrives.
struct Resources {
    reads: Vec<ReadOnlyRegion>,
    /// The write chunk's region and the room before the advertised
    /// segment.
    write: Option<(MemoryRegion, usize)>,
    reply: Option<MemoryRegion>,
    ddp_position: Option<usize>,
    /// The version the call was last sent with.
    sent: Version,
    /// What to send again after a version fallback.
    resend: Resend,
}

struct Resend {
    nomsg: bool,
    lists: ChunkLists,
    inline: Bytes,
}

struct State {
    core: ClientCore<oneshot::Sender<Result<Bytes, RpcError>>>,
    credits: RequesterCredits,
    resources: HashMap<u32, Resources>,
    stats: ClientStats,
    closed: bool,
    version: Version,
    thresholds: InlineThresholds,
    send_with_invalidate_ok: bool,
}

struct Inner<Q> {
    qp: Q,
    pd: ProtectionDomain,
    inline_size: u32,
    /// The service answering reverse-direction calls, and its credits.
    backchannel: Option<(Arc<Server>, u32)>,
    state: Mutex<State>,
    credit_wait: Notify,
    next_wr: AtomicU64,
}

impl<Q> Inner<Q> {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
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
    inner: Arc<Inner<D::Qp>>,
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
        Self::connect_inner(device, addr, config, None).await
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
        Self::connect_inner(device, addr, config, Some(bc)).await
    }

    async fn connect_inner(
        device: &D,
        addr: &D::Addr,
        config: RdmaClientConfig,
        backchannel: Option<(Arc<Server>, u32)>,
    ) -> Result<Self, CmError> {
        let pd = device.alloc_pd();
        let posted = config.max_requests + backchannel.as_ref().map_or(0, |b| b.1);
        let local = super::private_data(config.inline_size, config.send_with_invalidate_ok);
        let cq = rnic::CompletionQueue::new(4 * config.max_requests as usize + 64);
        let mut qp_cfg = QpConfig::new(cq);
        qp_cfg.max_recv_wr = posted;
        qp_cfg.max_send_wr = 2 * posted;
        qp_cfg.initial_recvs = (0..posted)
            .map(|i| recv_wr(u64::from(i), config.inline_size))
            .collect();
        qp_cfg.private_data = local.to_bytes().to_vec();
        let connected = device.connect(&pd, addr, qp_cfg).await?;
        let thresholds = super::thresholds(&local, &connected.private_data);
        let core_cfg = ClientConfig {
            max_in_flight: config.max_requests as usize,
            retransmit: RetransmitPolicy::default(),
        };
        let inner = Arc::new(Inner {
            qp: connected.qp,
            pd,
            inline_size: config.inline_size,
            backchannel,
            state: Mutex::new(State {
                core: ClientCore::new(config.xid_seed, core_cfg),
                credits: RequesterCredits::new(config.max_requests),
                resources: HashMap::new(),
                stats: ClientStats::default(),
                closed: false,
                version: config.version,
                thresholds,
                send_with_invalidate_ok: config.send_with_invalidate_ok,
            }),
            credit_wait: Notify::new(),
            next_wr: AtomicU64::new(u64::from(posted)),
        });
        tokio::spawn(reap(Arc::clone(&inner)));
        if config.version == Version::V2 {
            // v2 draft §5.3.4: properties first; a version 1 server
            // answers ERR_VERS and the connection falls back.
            let props = Properties {
                receive_buffer_size: config.inline_size,
                reverse_request_support: RvReqSup::RDMA2_RVREQSUP_NONE,
            };
            let h = hdr::encode_connprop(0, config.max_requests, false, &props);
            let wr = SendWr {
                wr_id: inner.next_wr.fetch_add(1, Ordering::Relaxed),
                data: vec![h],
                solicited: false,
                invalidate: None,
            };
            inner
                .qp
                .post_send(wr)
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
        self.inner.lock().stats
    }

    /// Credits granted by the server and calls outstanding.
    pub fn credits(&self) -> (u32, u32) {
        let st = self.inner.lock();
        (st.credits.granted(), st.credits.outstanding())
    }

    /// Disconnects; calls in flight fail with `ConnectionClosed`.
    pub fn close(&self) {
        self.inner.qp.disconnect();
    }

    async fn call_inner(&self, call: RpcCall) -> Result<Bytes, RpcError> {
        let inner = &self.inner;
        // RFC 8166 §3.3.1: never more calls outstanding than granted.
        loop {
            let notified = inner.credit_wait.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = inner.lock();
                if st.closed {
                    return Err(RpcError::ConnectionClosed);
                }
                if st.credits.try_send().is_ok() {
                    break;
                }
            }
            notified.await;
        }
        let rx = match self.send_call(&call) {
            Ok(rx) => rx,
            Err(e) => {
                inner.lock().credits.on_abandon();
                inner.credit_wait.notify_waiters();
                return Err(e);
            }
        };
        rx.await.unwrap_or(Err(RpcError::ConnectionClosed))
    }

    fn send_call(
        &self,
        call: &RpcCall,
    ) -> Result<oneshot::Receiver<Result<Bytes, RpcError>>, RpcError> {
        let inner = &self.inner;
        let (tx, rx) = oneshot::channel();
        let mut st = inner.lock();
        if st.closed {
            return Err(RpcError::ConnectionClosed);
        }
        let (xid, msg) = st
            .core
            .start_call(call, tx, Instant::now())
            .map_err(|(_, e)| e)?;
        let ddp = call.reply_hint.ddp;
        let hint = ReplyHint::from(call.reply_hint);
        let fail = |st: &mut State, e: RpcError| {
            st.core.cancel(xid);
            e
        };
        let version = st.version;
        let plan = match plan_call(&msg, st.thresholds, hint, version) {
            Ok(p) => p,
            Err(_) => {
                return Err(fail(
                    &mut st,
                    RpcError::Transport("call cannot be conveyed"),
                ))
            }
        };
        let register = |data: BytesMut, access| -> Result<(MemoryRegion, RdmaSegment), RpcError> {
            let len = data.len() as u32;
            let mr = inner
                .pd
                .register(data, access)
                .map_err(|_| RpcError::Transport("memory registration failed"))?;
            let seg = RdmaSegment {
                handle: mr.stag().0,
                length: len,
                offset: mr.base_to(),
            };
            Ok((mr, seg))
        };
        let mut reads = Vec::new();
        let mut write = None;
        let mut reply = None;
        let mut read_segs = Vec::new();
        let mut write_segs = Vec::new();
        let mut reply_seg = None;
        let registered = (|| {
            // RFC 8166 §3.4.5: the responder only reads these bytes, so
            // the caller's buffer is registered read-only, without a copy.
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
            // The write chunk is advertised inside a buffer with room for
            // the reply's inline parts around it, so the reply is rebuilt
            // in place around the placed data (see `place_reply`).
            for &n in &plan.write_chunk_lens {
                let room = WRITE_PREFIX_SLACK + ddp.map_or(0, |d| d.position);
                let total = room + n as usize + 3 + inner.inline_size as usize;
                let mr = inner
                    .pd
                    .register(BytesMut::zeroed(total), Access::REMOTE_WRITE)
                    .map_err(|_| RpcError::Transport("memory registration failed"))?;
                write_segs.push(RdmaSegment {
                    handle: mr.stag().0,
                    length: n,
                    offset: mr.base_to() + room as u64,
                });
                write = Some((mr, room));
            }
            if let Some(n) = plan.reply_chunk_len {
                let (mr, seg) = register(BytesMut::zeroed(n as usize), Access::REMOTE_WRITE)?;
                reply = Some(mr);
                reply_seg = Some(seg);
            }
            Ok::<(), RpcError>(())
        })();
        if let Err(e) = registered {
            return Err(fail(&mut st, e));
        }
        let lists = plan
            .chunk_lists(&read_segs, &write_segs, reply_seg)
            .map_err(|_| RpcError::Transport("plan mismatch"))?;
        let nomsg = plan.proc_ == Proc::RDMA_NOMSG;
        if nomsg {
            st.stats.position_zero_calls += 1;
        } else if plan.read_chunks.is_empty() {
            st.stats.inline_calls += 1;
        } else {
            st.stats.read_chunk_calls += 1;
        }
        // v2 draft §3.3: name one STag the responder may invalidate.
        let inv_handle = match (version, st.send_with_invalidate_ok) {
            (Version::V2, true) => reply
                .iter()
                .chain(write.iter().map(|w| &w.0))
                .map(|mr| mr.stag().0)
                .chain(reads.iter().map(|mr| mr.stag().0))
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
        let res = Resources {
            reads,
            write,
            reply,
            ddp_position: ddp.map(|d| d.position),
            sent: version,
            resend: Resend {
                nomsg,
                lists,
                inline: plan.inline.clone(),
            },
        };
        st.resources.insert(xid, res);
        let wr = SendWr {
            wr_id: inner.next_wr.fetch_add(1, Ordering::Relaxed),
            data: vec![header, plan.inline],
            solicited: false,
            invalidate: None,
        };
        if inner.qp.post_send(wr).is_err() {
            st.resources.remove(&xid);
            return Err(fail(&mut st, RpcError::ConnectionClosed));
        }
        Ok(rx)
    }
}

impl<D: Device> ClientTransport for RdmaClient<D> {
    fn call(
        &self,
        call: RpcCall,
    ) -> impl std::future::Future<Output = Result<Bytes, RpcError>> + Send {
        self.call_inner(call)
    }
}

/// The completion task: replies, flushes and errors.
async fn reap<Q: QueuePair>(inner: Arc<Inner<Q>>) {
    loop {
        let wc = match inner.qp.recv_cq().next().await {
            Ok(wc) => wc,
            Err(_) => break,
        };
        match (wc.opcode, wc.status) {
            (WcOpcode::Recv, WcStatus::Success) => on_reply(&inner, wc),
            (_, WcStatus::Success) => {}
            _ => break,
        }
    }
    let mut st = inner.lock();
    st.closed = true;
    for (tx, e) in st.core.fail_all(RpcError::ConnectionClosed) {
        let _ = tx.send(Err(e));
    }
    st.resources.clear();
    drop(st);
    inner.credit_wait.notify_waiters();
}

/// Bytes of a fenced region named by an echoed segment.
fn region_bytes(buf: &Bytes, base_to: u64, seg: &RdmaSegment) -> Option<Bytes> {
    let start = usize::try_from(seg.offset.checked_sub(base_to)?).ok()?;
    buf.get(start..).map(|_| buf.slice(start..))
}

/// Local invalidation of a region whose contents are not needed.
fn fence(mr: Option<MemoryRegion>) {
    if let Some(mr) = mr {
        drop(mr.invalidate());
    }
}

fn chunk_bytes(echo: &WriteChunk, mr: Option<MemoryRegion>) -> Option<Bytes> {
    let mr = mr?;
    let base = mr.base_to();
    let buf = mr.invalidate().buf.freeze();
    chunk_contents(echo, |s| region_bytes(&buf, base, s))
}

/// How a write chunk's data reached the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placed {
    /// The chunk was empty.
    Nothing,
    /// Copied out of the region.
    Copied,
    /// Left where the server's RDMA Write put it.
    InPlace,
}

/// Room before a write chunk's segment for the reply's RPC header (24
/// bytes with an AUTH_NONE verifier) beyond the DDP item's position.
const WRITE_PREFIX_SLACK: usize = 128;

/// Rebuilds a reply whose DDP item arrived in the write chunk
/// (RFC 8166 §3.5) in the write chunk's own buffer: the server placed the
/// data after `room` bytes, so the inline prefix is copied in just before
/// it and the inline suffix just after its padding, and the result is one
/// contiguous slice with no copy of the data. When the echoed segment is
/// not the one advertised, or the prefix does not fit the room, the data
/// is copied instead. Returns the reply and how the data was placed.
fn place_reply(
    base: &Bytes,
    echo: &WriteChunk,
    mr: MemoryRegion,
    room: usize,
    off: usize,
) -> (Option<Bytes>, Placed) {
    let (stag, base_to, region_len) = (mr.stag(), mr.base_to(), mr.len());
    let mut buf = mr.invalidate().buf;
    let data_len: usize = echo.segments.iter().map(|s| s.length as usize).sum();
    if data_len == 0 {
        return (Some(base.clone()), Placed::Nothing);
    }
    let Ok((_, Ok(results))) = decode_reply(base) else {
        return (Some(base.clone()), Placed::Copied);
    };
    let pos = base.len() - results.len() + off;
    let mut used = echo.segments.iter().filter(|s| s.length > 0);
    let one = match (used.next(), used.next()) {
        (Some(s), None) => {
            s.handle == stag.0
                && s.offset == base_to + room as u64
                && u64::from(s.length) + room as u64 <= region_len
        }
        _ => false,
    };
    if one && pos <= room {
        let Ok(layout) = plan_layout(base, &[(pos as u32, data_len)]) else {
            return (None, Placed::Copied);
        };
        let start = room - pos;
        if let Some(dst) = buf.get_mut(start..start + layout.len) {
            if layout.copy_inline(base, dst) {
                let pad_end = (pos + data_len).next_multiple_of(4).min(dst.len());
                if let Some(p) = dst.get_mut(pos + data_len..pad_end) {
                    p.fill(0);
                }
                return (
                    Some(buf.freeze().slice(start..start + layout.len)),
                    Placed::InPlace,
                );
            }
        }
    }
    let frozen = buf.freeze();
    let data = chunk_contents(echo, |s| region_bytes(&frozen, base_to, s));
    let full = data.and_then(|d| {
        reassemble(base.clone(), &[(pos as u32, d)])
            .map(|f| f.to_bytes())
            .ok()
    });
    (full, Placed::Copied)
}

/// A reverse-direction call (RFC 8167): answered by the backchannel
/// service on its own task, inline (draft-ietf-nfsv4-rpcrdma-bidirection-01
/// §2.6); without a service, or when the reply would not fit inline, no
/// reply is sent.
fn on_reverse_call<Q: QueuePair>(inner: &Arc<Inner<Q>>, xid: u32, rpc: Bytes) {
    let Some((service, credits)) = inner.backchannel.clone() else {
        return;
    };
    inner.lock().stats.backchannel_calls += 1;
    let inner = Arc::clone(inner);
    tokio::spawn(async move {
        let peer = PeerInfo {
            conn_id: 0,
            addr: None,
            transport: TransportKind::Rdma,
        };
        let Some(reply) = service.handle_call(rpc, &peer).await else {
            return;
        };
        let header = xdr::to_bytes(&v1::Header {
            xid,
            credits,
            body: v1::Body::Msg(ChunkLists::default()),
        });
        let body = reply.to_bytes();
        if header.len() + body.len() > inner.lock().thresholds.send {
            return;
        }
        let wr = SendWr {
            wr_id: inner.next_wr.fetch_add(1, Ordering::Relaxed),
            data: vec![header, body],
            solicited: false,
            invalidate: None,
        };
        let _ = inner.qp.post_send(wr);
    });
}

fn on_reply<Q: QueuePair>(inner: &Arc<Inner<Q>>, wc: WorkCompletion) {
    let invalidated = wc.invalidated;
    let mut buf = wc.buf.unwrap_or_default();
    buf.truncate(wc.byte_len as usize);
    let msg = buf.freeze();
    let id = inner.next_wr.fetch_add(1, Ordering::Relaxed);
    let _ = inner.qp.post_recv(recv_wr(id, inner.inline_size));
    if let Some((h, len, 0)) = super::server::inline_msg_type(&msg, &Limits::default()) {
        // msg_type CALL: the server calls us (RFC 8167).
        on_reverse_call(inner, h.xid, msg.slice(len..));
        return;
    }
    let Ok(rx) = hdr::decode(&msg, &Limits::default(), 2) else {
        return;
    };
    let mut st = inner.lock();
    if let Inbound::ConnProp(Ok(p)) = &rx.inbound {
        // v2 draft §4.2.1: never send more than the peer's receive buffers.
        st.thresholds.send = st.thresholds.send.min(p.receive_buffer_size as usize);
        return;
    }
    let refused = matches!(
        rx.inbound,
        Inbound::ErrorV1(v1::ErrorBody::Vers { low, .. })
            | Inbound::ErrorV2(crate::wire::v2::ErrorBody::Vers { low, .. })
            if low <= v1::VERSION
    );
    if refused && st.version == Version::V2 {
        st.version = Version::V1;
    }
    let Some(mut res) = st.resources.remove(&rx.xid) else {
        return;
    };
    st.credits.on_reply(rx.credits);
    inner.credit_wait.notify_waiters();
    if refused && res.sent == Version::V2 {
        // v2 draft §7.2: the server speaks only version 1; send the call
        // again as version 1 with the same XID and chunks.
        if st.credits.try_send().is_ok() {
            let header = hdr::encode_rpc(
                Version::V1,
                rx.xid,
                st.credits.requested(),
                false,
                res.resend.nomsg,
                res.resend.lists.clone(),
                0,
            );
            let wr = SendWr {
                wr_id: inner.next_wr.fetch_add(1, Ordering::Relaxed),
                data: vec![header, res.resend.inline.clone()],
                solicited: false,
                invalidate: None,
            };
            if inner.qp.post_send(wr).is_ok() {
                res.sent = Version::V1;
                st.stats.version_fallbacks += 1;
                st.resources.insert(rx.xid, res);
                return;
            }
            st.credits.on_abandon();
        }
    }
    // Remote invalidation (draft-cel-nfsv4-reminv-design §4.2): the STag
    // must be one of this call's; every region is still invalidated
    // locally below, which for the remotely invalidated one only hands
    // the buffer back.
    let mut foreign = false;
    if let Some(stag) = invalidated {
        let ours = res.reads.iter().any(|mr| mr.stag() == stag)
            || res
                .write
                .iter()
                .map(|w| &w.0)
                .chain(res.reply.iter())
                .any(|mr| mr.stag() == stag);
        if ours {
            st.stats.remote_invalidations += 1;
        } else {
            st.stats.foreign_invalidations += 1;
            foreign = true;
        }
    }
    // Fence: every region goes back to its owner before the call completes
    // (RFC 8166 §3.4.3).
    for mr in res.reads {
        drop(mr.invalidate());
    }
    let result = match &rx.inbound {
        Inbound::Rpc { nomsg, lists, .. } => {
            let base = if *nomsg {
                lists
                    .reply
                    .as_ref()
                    .and_then(|echo| chunk_bytes(echo, res.reply))
            } else {
                fence(res.reply);
                msg.get(rx.len..).map(|_| msg.slice(rx.len..))
            };
            if *nomsg {
                st.stats.reply_chunk_replies += 1;
            }
            match (base, lists.writes.first(), res.write, res.ddp_position) {
                (Some(base), Some(echo), Some((mr, room)), Some(off)) => {
                    let (full, placed) = place_reply(&base, echo, mr, room, off);
                    if placed != Placed::Nothing {
                        st.stats.write_chunk_replies += 1;
                    }
                    if placed == Placed::InPlace {
                        st.stats.in_place_replies += 1;
                    }
                    full
                }
                (base, _, write, _) => {
                    fence(write.map(|w| w.0));
                    base
                }
            }
        }
        _ => {
            st.stats.error_replies += 1;
            fence(res.write.map(|w| w.0));
            fence(res.reply);
            None
        }
    };
    let result = result.filter(|_| !foreign);
    let reason = match &rx.inbound {
        Inbound::ErrorV1(v1::ErrorBody::Chunk) => "RDMA_ERROR ERR_CHUNK",
        Inbound::ErrorV1(v1::ErrorBody::Vers { .. }) => "RDMA_ERROR ERR_VERS",
        Inbound::ErrorV2(e) => e.code().name().unwrap_or("RDMA2_ERROR"),
        _ if foreign => "Send With Invalidate of a foreign STag",
        _ => "reply could not be reassembled",
    };
    match result.and_then(|full| st.core.handle_reply(&full)) {
        Some((_, tx, r)) => {
            let _ = tx.send(r);
        }
        None => {
            if let Some(tx) = st.core.cancel(rx.xid) {
                let _ = tx.send(Err(RpcError::Transport(reason)));
            }
        }
    }
}
