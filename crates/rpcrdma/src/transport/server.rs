//! The responder: [`RdmaListener`].

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use oncrpc::server::{PeerInfo, Server, TransportKind};
use rnic::{
    Access, CmError, ConnectRequest, Device, Listener, ProtectionDomain, QpConfig, QueuePair,
    ReadWr, RecvWr, SendWr, Stag, WcOpcode, WcStatus, WorkCompletion, WriteWr,
};
use tokio::task::JoinHandle;

use crate::credits::ResponderCredits;
use crate::plan::{plan_reply, reassemble_call, InlineThresholds, Version};
use crate::wire::cm::CmPrivateData;
use crate::wire::v1::{error_body_for, Body, ErrorBody, Header, Proc};
use crate::wire::{ChunkLists, Limits, Prefix};

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
    /// sum of its read segment lengths); more is answered with ERR_CHUNK
    /// before anything is allocated.
    pub max_read_bytes: u64,
}

impl Default for RdmaServerConfig {
    fn default() -> Self {
        Self {
            credits: 64,
            inline_size: 4096,
            send_with_invalidate: true,
            limits: Limits::default(),
            max_read_bytes: 17 * 1024 * 1024,
        }
    }
}

/// Why a connection ended.
#[derive(Debug)]
enum ConnError {
    Closed,
}

/// An RPC-over-RDMA version 1 listener serving an [`oncrpc::Server`].
pub struct RdmaListener<D: Device> {
    listener: D::Listener,
    pd: ProtectionDomain,
    server: Arc<Server>,
    config: RdmaServerConfig,
}

impl<D: Device> std::fmt::Debug for RdmaListener<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaListener")
            .field("addr", &self.listener.local_addr())
            .finish()
    }
}

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

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
            pd: device.alloc_pd(),
            server,
            config,
        })
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> D::Addr {
        self.listener.local_addr()
    }

    /// Accepts connections forever, serving each on its own task.
    pub async fn serve(mut self) -> Result<(), CmError> {
        loop {
            let req = self.listener.accept_request().await?;
            let pd = self.pd.clone();
            let server = Arc::clone(&self.server);
            let config = self.config;
            tokio::spawn(async move {
                let _ = accept(req, pd, server, config).await;
            });
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
) -> Result<(), CmError> {
    let local = super::private_data(config.inline_size, false);
    let peer = CmPrivateData::from_peer(Some(req.private_data()));
    let thresholds = super::thresholds(&local, req.private_data());
    let cq = rnic::CompletionQueue::new(8 * config.credits as usize + 64);
    let mut qp_cfg = QpConfig::new(cq);
    qp_cfg.max_recv_wr = config.credits;
    qp_cfg.max_send_wr = 8 * config.credits;
    qp_cfg.initial_recvs = (0..config.credits)
        .map(|i| recv_wr(u64::from(i), config.inline_size))
        .collect();
    qp_cfg.private_data = local.to_bytes().to_vec();
    let qp = req.accept(&pd, qp_cfg).await?;
    let mut conn = Conn {
        qp,
        pd,
        server,
        config,
        thresholds,
        send_inv: config.send_with_invalidate && peer.flags.send_with_invalidate_ok(),
        credits: ResponderCredits::new(config.credits),
        backlog: VecDeque::new(),
        next_wr: u64::from(config.credits),
        peer: PeerInfo {
            conn_id: NEXT_CONN.fetch_add(1, Ordering::Relaxed),
            addr: None,
            transport: TransportKind::Rdma,
        },
    };
    conn.credits.on_receives_posted(config.credits);
    let _ = conn.run().await;
    conn.qp.disconnect();
    Ok(())
}

struct Conn<Q> {
    qp: Q,
    pd: ProtectionDomain,
    server: Arc<Server>,
    config: RdmaServerConfig,
    thresholds: InlineThresholds,
    send_inv: bool,
    credits: ResponderCredits,
    backlog: VecDeque<WorkCompletion>,
    next_wr: u64,
    peer: PeerInfo,
}

impl<Q: QueuePair> Conn<Q> {
    fn wr_id(&mut self) -> u64 {
        self.next_wr += 1;
        self.next_wr
    }

    async fn next_wc(&mut self) -> Result<WorkCompletion, ConnError> {
        self.qp
            .recv_cq()
            .next()
            .await
            .map_err(|_| ConnError::Closed)
    }

    async fn run(&mut self) -> Result<(), ConnError> {
        loop {
            let wc = match self.backlog.pop_front() {
                Some(wc) => wc,
                None => self.next_wc().await?,
            };
            match (wc.opcode, wc.status) {
                (WcOpcode::Recv, WcStatus::Success) => self.on_call(wc).await?,
                (_, WcStatus::Success) => {}
                _ => return Err(ConnError::Closed),
            }
        }
    }

    fn send(
        &mut self,
        header: &Header,
        inline: Bytes,
        invalidate: Option<Stag>,
    ) -> Result<(), ConnError> {
        let wr = SendWr {
            wr_id: self.wr_id(),
            data: vec![xdr::to_bytes(header), inline],
            solicited: false,
            invalidate,
        };
        self.qp.post_send(wr).map_err(|_| ConnError::Closed)
    }

    fn send_error(&mut self, xid: u32, requested: u32, body: ErrorBody) -> Result<(), ConnError> {
        let h = Header::error_reply(xid, self.credits.grant(requested), body);
        self.send(&h, Bytes::new(), None)
    }

    async fn on_call(&mut self, wc: WorkCompletion) -> Result<(), ConnError> {
        self.credits.on_receive();
        let mut buf = wc.buf.unwrap_or_default();
        buf.truncate(wc.byte_len as usize);
        let msg = buf.freeze();
        // Repost before replying, so the grant in the reply is backed by a
        // posted receive (RFC 8166 §3.3.1).
        let id = self.wr_id();
        self.qp
            .post_recv(recv_wr(id, self.config.inline_size))
            .map_err(|_| ConnError::Closed)?;
        self.credits.on_receives_posted(1);

        let (hdr, hlen) = match Header::parse(&msg, &self.config.limits) {
            Ok(x) => x,
            Err(e) => {
                // RFC 8166 §4.4: ERR_VERS or ERR_CHUNK, if there is an XID.
                if let (Some(body), Ok(pre)) = (error_body_for(&e), Prefix::peek(&msg)) {
                    self.send_error(pre.xid, pre.credits, body)?;
                }
                return Ok(());
            }
        };
        if let Err(body) = hdr.check_supported() {
            return self.send_error(hdr.xid, hdr.credits, body);
        }
        let chunks = match &hdr.body {
            Body::Msg(c) | Body::NoMsg(c) => c.clone(),
            // An RDMA_ERROR from a requester is not answered.
            _ => return Ok(()),
        };
        let inline = msg.slice(hlen..);
        let pulled = match self.pull(&chunks).await? {
            Some(p) => p,
            None => return self.send_error(hdr.xid, hdr.credits, ErrorBody::Chunk),
        };
        let record = match reassemble_call(inline, &pulled) {
            Ok(full) => full.to_bytes(),
            Err(_) => return self.send_error(hdr.xid, hdr.credits, ErrorBody::Chunk),
        };
        let Some(reply) = self.server.handle_call(record, &self.peer).await else {
            return Ok(());
        };
        let plan = match plan_reply(&reply, &chunks, self.thresholds.send, Version::V1) {
            Ok(p) => p,
            // Version 1 has no resource error codes: ERR_CHUNK, as Linux.
            Err(_) => return self.send_error(hdr.xid, hdr.credits, ErrorBody::Chunk),
        };
        for w in plan.writes {
            let wr = WriteWr {
                wr_id: self.wr_id(),
                data: vec![w.data],
                remote_stag: Stag(w.target.handle),
                remote_to: w.target.offset,
            };
            self.qp.post_write(wr).map_err(|_| ConnError::Closed)?;
        }
        let invalidate = if self.send_inv {
            chunks
                .reply
                .iter()
                .chain(chunks.writes.iter())
                .flat_map(|c| c.segments.first())
                .map(|s| s.handle)
                .chain(chunks.reads.first().map(|r| r.target.handle))
                .next()
                .map(Stag)
        } else {
            None
        };
        let body = if plan.proc_ == Proc::RDMA_NOMSG {
            Body::NoMsg(plan.chunks)
        } else {
            Body::Msg(plan.chunks)
        };
        let header = Header {
            xid: hdr.xid,
            credits: self.credits.grant(hdr.credits),
            body,
        };
        self.send(&header, plan.inline, invalidate)
    }

    /// Pulls every read segment by RDMA Read into local sink regions and
    /// returns `(position, data)` per read chunk (segments with one
    /// position concatenated). `None` when a segment cannot be pulled
    /// (ERR_CHUNK).
    async fn pull(&mut self, chunks: &ChunkLists) -> Result<Option<Vec<(u32, Bytes)>>, ConnError> {
        let total: u64 = chunks
            .reads
            .iter()
            .map(|r| u64::from(r.target.length))
            .sum();
        if total > self.config.max_read_bytes {
            return Ok(None);
        }
        let mut sinks = Vec::with_capacity(chunks.reads.len());
        let mut pending = Vec::new();
        for r in &chunks.reads {
            let Ok(mr) = self.pd.register(
                BytesMut::zeroed(r.target.length as usize),
                Access::LOCAL_WRITE,
            ) else {
                return Ok(None);
            };
            let id = self.wr_id();
            let wr = ReadWr {
                wr_id: id,
                local_stag: mr.stag(),
                local_to: mr.base_to(),
                len: r.target.length,
                remote_stag: Stag(r.target.handle),
                remote_to: r.target.offset,
            };
            self.qp.post_read(wr).map_err(|_| ConnError::Closed)?;
            pending.push(id);
            sinks.push((r.position, mr));
        }
        while !pending.is_empty() {
            let wc = self.next_wc().await?;
            match (wc.opcode, wc.status) {
                (WcOpcode::RdmaRead, WcStatus::Success) => pending.retain(|&p| p != wc.wr_id),
                (WcOpcode::Recv, WcStatus::Success) => self.backlog.push_back(wc),
                (_, WcStatus::Success) => {}
                _ => return Err(ConnError::Closed),
            }
        }
        let mut out: Vec<(u32, Bytes)> = Vec::new();
        for (pos, mr) in sinks {
            let data = mr.invalidate().buf.freeze();
            match out.last_mut() {
                Some((p, prev)) if *p == pos => {
                    let mut joined = BytesMut::from(&prev[..]);
                    joined.extend_from_slice(&data);
                    *prev = joined.freeze();
                }
                _ => out.push((pos, data)),
            }
        }
        Ok(Some(out))
    }
}
