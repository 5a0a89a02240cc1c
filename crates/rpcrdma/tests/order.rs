//! Calls of one RPC-over-RDMA connection reach the RPC server in the order
//! they arrived, however long their read chunks take to pull (issue 19: a
//! DELEGRETURN sent after WRITEs of the delegated file was served while
//! their chunks were still being pulled). Raw version 1 requesters over
//! softrnic (real iWARP on 127.0.0.1).
#![cfg(feature = "transport")]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use oncrpc::echo::ECHO_PROGRAM;
use oncrpc::echo::ECHO_VERSION;
use oncrpc::server::{CallContext, RpcService, ServiceError};
use rpcrdma::transport::RdmaServerConfig;
use rpcrdma::wire::{v1, ChunkLists};
use xdr::XdrBuf;

#[path = "support/raw.rs"]
mod raw;

use raw::{echo_call, Raw};

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
    (raw::serve_one(seed, config, rec.clone()).await, rec)
}

impl Raw {
    /// RDMA_NOMSG: an echo of `n` bytes in a Position-Zero Read chunk.
    fn chunked(&mut self, xid: u32, n: usize) {
        let msg = echo_call(xid, n);
        let reads = self.position_zero(&msg, msg.len() as u32);
        let lists = ChunkLists {
            reads,
            ..ChunkLists::default()
        };
        self.send(xid, 8, v1::Body::NoMsg(lists), Bytes::new());
    }

    /// RDMA_MSG: a small echo inline.
    fn inline(&self, xid: u32) {
        let lists = ChunkLists::default();
        self.send(xid, 8, v1::Body::Msg(lists), echo_call(xid, 8));
    }

    /// The xid of the next answer, `None` if none comes within `limit`.
    async fn answer(&self, limit: Duration) -> Option<u32> {
        Some(self.header_within(limit).await?.xid)
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
