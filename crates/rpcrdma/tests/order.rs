//! Calls of one RPC-over-RDMA connection reach the RPC server in the order
//! they arrived, however long their read chunks take to pull (issue 19: a
//! DELEGRETURN sent after WRITEs of the delegated file was served while
//! their chunks were still being pulled). Raw version 1 requesters over
//! softrnic (real iWARP on 127.0.0.1).
#![cfg(feature = "transport")]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use oncrpc::echo::{ECHO_PROGRAM, ECHO_VERSION, PROC_ECHO};
use oncrpc::server::{CallContext, RpcService, ServiceError};
use oncrpc::Server;
use rnic::{
    Access, CompletionQueue, Device, MemoryRegion, ProtectionDomain, QpConfig, QpState, QueuePair,
    RecvWr, SendWr, WcOpcode,
};
use rpcrdma::transport::{RdmaListener, RdmaServerConfig};
use rpcrdma::wire::{v1, ChunkLists, Limits, RdmaSegment, ReadSegment};
use softrnic::{SoftConfig, SoftDevice, SoftQp};
use xdr::XdrBuf;

fn soft(seed: u64, max_ird: u16) -> SoftDevice {
    let cfg = SoftConfig {
        max_ird,
        first_send_delay: Duration::ZERO,
        ..SoftConfig::default()
    };
    SoftDevice::new(cfg, seed)
}

/// Records the xid of every call as the service starts it; answers void.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<u32>>>);

impl Recorder {
    fn seen(&self) -> Vec<u32> {
        self.0.lock().unwrap().clone()
    }
}

impl RpcService for Recorder {
    fn program(&self) -> u32 {
        ECHO_PROGRAM
    }

    fn versions(&self) -> std::ops::RangeInclusive<u32> {
        ECHO_VERSION..=ECHO_VERSION
    }

    async fn call(&self, ctx: CallContext, _args: Bytes) -> Result<XdrBuf, ServiceError> {
        self.0.lock().unwrap().push(ctx.xid);
        Ok(XdrBuf::new())
    }
}

async fn serve(seed: u64, config: RdmaServerConfig) -> (SocketAddr, Recorder) {
    let rec = Recorder::default();
    let mut server = Server::new();
    server.register(rec.clone());
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let listener = RdmaListener::bind(&soft(seed, 16), &any, Arc::new(server), config)
        .await
        .unwrap();
    let addr = listener.local_addr();
    listener.spawn();
    (addr, rec)
}

/// An echo call of `n` bytes, AUTH_NONE, as the RPC message.
fn echo_call(xid: u32, n: usize) -> Bytes {
    let mut v = Vec::new();
    for w in [xid, 0, 2, ECHO_PROGRAM, ECHO_VERSION, PROC_ECHO, 0, 0, 0, 0] {
        v.extend_from_slice(&u32::to_be_bytes(w));
    }
    v.extend_from_slice(&(n as u32).to_be_bytes());
    v.resize(v.len() + n.next_multiple_of(4), 7);
    v.into()
}

struct Raw {
    qp: SoftQp,
    pd: ProtectionDomain,
    regions: Vec<MemoryRegion>,
}

impl Raw {
    /// A requester offering `max_ird` inbound RDMA Reads (0: the server's
    /// reads of its chunks never run).
    async fn connect(seed: u64, max_ird: u16, addr: SocketAddr) -> Self {
        let dev = soft(seed, max_ird);
        let pd = dev.alloc_pd();
        let mut cfg = QpConfig::new(CompletionQueue::new(64));
        cfg.initial_recvs = (0..8)
            .map(|i| RecvWr {
                wr_id: i,
                buf: BytesMut::with_capacity(4096),
            })
            .collect();
        let qp = dev.connect(&pd, &addr, cfg).await.unwrap().qp;
        Self {
            qp,
            pd,
            regions: Vec::new(),
        }
    }

    fn send(&self, xid: u32, body: v1::Body, inline: Bytes) {
        let header = xdr::to_bytes(&v1::Header {
            xid,
            credits: 8,
            body,
        });
        self.qp
            .post_send(SendWr {
                wr_id: u64::from(xid),
                data: vec![header, inline],
                ..Default::default()
            })
            .unwrap();
    }

    /// RDMA_NOMSG: an echo of `n` bytes in a Position-Zero Read chunk.
    fn chunked(&mut self, xid: u32, n: usize) {
        let msg = echo_call(xid, n);
        let len = msg.len() as u32;
        let mr = self
            .pd
            .register(BytesMut::from(&msg[..]), Access::REMOTE_READ)
            .unwrap();
        let reads = vec![ReadSegment {
            position: 0,
            target: RdmaSegment {
                handle: mr.stag().0,
                length: len,
                offset: mr.base_to(),
            },
        }];
        self.regions.push(mr);
        let lists = ChunkLists {
            reads,
            ..ChunkLists::default()
        };
        self.send(xid, v1::Body::NoMsg(lists), Bytes::new());
    }

    /// RDMA_MSG: a small echo inline.
    fn inline(&self, xid: u32) {
        let lists = ChunkLists::default();
        self.send(xid, v1::Body::Msg(lists), echo_call(xid, 8));
    }

    /// The xid of the next answer, `None` if none comes within `limit`.
    async fn answer(&self, limit: Duration) -> Option<u32> {
        let end = Instant::now() + limit;
        loop {
            let left = end.checked_duration_since(Instant::now())?;
            let wc = tokio::time::timeout(left, self.qp.recv_cq().next())
                .await
                .ok()?
                .ok()?;
            if wc.opcode == WcOpcode::Recv {
                let mut b = wc.buf?;
                b.truncate(wc.byte_len as usize);
                return Some(v1::Header::parse(&b, &Limits::default()).ok()?.0.xid);
            }
        }
    }

    async fn closed_within(&self, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if self.qp.state() != QpState::Rts {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_after_a_large_read_chunk_reaches_the_server_second() {
    let (addr, rec) = serve(60, RdmaServerConfig::default()).await;
    let mut raw = Raw::connect(61, 16, addr).await;
    // 4 MiB to pull for the first call; the second is inline, ready at
    // once.
    raw.chunked(1, 4 << 20);
    raw.inline(2);
    let mut answered = Vec::new();
    for _ in 0..2 {
        answered.push(raw.answer(Duration::from_secs(10)).await.expect("answered"));
    }
    answered.sort_unstable();
    assert_eq!(answered, [1, 2]);
    assert_eq!(rec.seen(), [1, 2], "the server saw the calls out of order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waits_while_an_earlier_calls_chunks_are_not_pulled() {
    // The peer never answers RDMA Reads: the first call is never handed
    // over, so neither is the second; the read timeout closes the
    // connection.
    let config = RdmaServerConfig {
        read_timeout: Duration::from_millis(800),
        ..RdmaServerConfig::default()
    };
    let (addr, rec) = serve(70, config).await;
    let mut raw = Raw::connect(71, 0, addr).await;
    raw.chunked(1, 1000);
    raw.inline(2);
    assert_eq!(raw.answer(Duration::from_millis(400)).await, None);
    assert!(rec.seen().is_empty(), "handed over: {:?}", rec.seen());
    assert!(raw.closed_within(Duration::from_secs(5)).await);
    assert!(rec.seen().is_empty(), "handed over: {:?}", rec.seen());
}
