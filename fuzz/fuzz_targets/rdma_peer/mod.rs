//! The raw RDMA peer shared by the RPC-over-RDMA transport targets
//! (`rpcrdma_server`, `rpcrdma_v2_client`, `rpcrdma_v2_backchannel`): a
//! queue pair on the rnic loopback device that posts the fuzzer's input
//! as Sends and checks every Send the transport under test makes.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rnic::{
    Access, CompletionQueue, MemoryRegion, PostError, ProtectionDomain, QpConfig, QueuePair,
    RecvWr, SendWr, WcOpcode,
};
use rpcrdma::wire::Limits;

/// Size of each receive buffer the peer posts.
const RECV_BYTES: usize = 8192;

/// One region of 4096 patterned bytes, remote read and write. Its STag
/// is the same in every run (fresh loopback network with seed 0), so
/// chunks in the input can name it.
pub fn pattern_region(pd: &ProtectionDomain) -> MemoryRegion {
    let pattern: BytesMut = (0..4096u32).map(|i| (i % 251) as u8).collect();
    pd.register(pattern, Access::REMOTE_READ | Access::REMOTE_WRITE)
        .expect("one region")
}

/// A queue-pair configuration with `recvs` receive buffers posted.
pub fn qp_config(recvs: u64) -> QpConfig {
    let mut cfg = QpConfig::new(CompletionQueue::new(256));
    cfg.initial_recvs = (0..recvs).map(recv_wr).collect();
    cfg
}

fn recv_wr(wr_id: u64) -> RecvWr {
    RecvWr {
        wr_id,
        buf: BytesMut::with_capacity(RECV_BYTES),
    }
}

/// Posts `data` as Sends: records `[len: u16 BE][len bytes]`, a short
/// tail sent as it is. Stops at the first refused post.
pub fn post_records<Q: QueuePair + ?Sized>(qp: &Q, data: &[u8]) {
    let mut rest = data;
    let mut id = 1000;
    while !rest.is_empty() {
        let (msg, next) = match rest {
            [a, b, more @ ..] => {
                let n = usize::from(u16::from_be_bytes([*a, *b])).min(more.len());
                more.split_at(n)
            }
            _ => (rest, &[][..]),
        };
        rest = next;
        id += 1;
        if post(qp, id, Bytes::copy_from_slice(msg)).is_err() {
            break;
        }
    }
}

/// Posts one Send of `b`.
pub fn post<Q: QueuePair + ?Sized>(qp: &Q, wr_id: u64, b: Bytes) -> Result<(), PostError> {
    qp.post_send(SendWr {
        wr_id,
        data: vec![b],
        solicited: false,
        invalidate: None,
    })
}

/// Receives until nothing arrives for 5 (virtual) seconds, asserting that
/// every Send `who` made decodes as a version 1 or version 2 transport
/// header, and reposting each receive buffer.
pub async fn drain_checked<Q: QueuePair + ?Sized>(qp: &Q, who: &str) {
    let limits = Limits::default();
    loop {
        let wc = match tokio::time::timeout(Duration::from_secs(5), qp.recv_cq().next()).await {
            Ok(Ok(wc)) => wc,
            _ => break,
        };
        if wc.opcode != WcOpcode::Recv || wc.status != rnic::WcStatus::Success {
            continue;
        }
        let mut b = wc.buf.unwrap_or_default();
        b.truncate(wc.byte_len as usize);
        let v1 = rpcrdma::wire::v1::Header::parse(&b, &limits).is_ok();
        let v2 = rpcrdma::wire::v2::Header::parse(&b, &limits).is_ok();
        assert!(v1 || v2, "{who} sent an undecodable header: {b:02x?}");
        let _ = qp.post_recv(recv_wr(wc.wr_id));
    }
}

/// Runs `f` on a current-thread runtime whose clock is paused, so the run
/// ends as soon as nothing more can happen.
pub fn block_on_paused<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime")
        .block_on(f)
}
