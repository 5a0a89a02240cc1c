//! The RPC-over-RDMA responder's whole receive path
//! (`rpcrdma::transport::RdmaListener` serving `oncrpc`'s echo program over
//! the rnic loopback device): arbitrary Sends from a raw peer queue pair go
//! through header decode (v1 and v2), chunk validation, RDMA Reads of the
//! read chunks from the peer's memory, reassembly, the call, reply
//! planning, RDMA Writes into the peer's write/reply chunks and the reply
//! Send. Nothing may panic, and every Send the server makes must decode as a
//! version 1 or version 2 transport header.
//!
//! The peer registers one region (4096 bytes, remote read and write) whose
//! STag is the same in every run (fresh loopback network with seed 0), so
//! chunks can name it. Input: records `[len: u16 BE][len bytes]`, each
//! posted as one Send (a short tail is sent as it is). Time is virtual
//! (paused tokio clock): the run ends when nothing more can happen.
#![no_main]

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use oncrpc::echo::EchoService;
use oncrpc::Server;
use rnic::loopback::LoopbackNetwork;
use rnic::{Access, CompletionQueue, Device, QpConfig, QueuePair, RecvWr, SendWr, WcOpcode};
use rpcrdma::transport::{RdmaListener, RdmaServerConfig};
use rpcrdma::wire::Limits;

/// Receive buffers the peer keeps posted.
const RECVS: u64 = 16;

async fn run(data: &[u8]) {
    let net = LoopbackNetwork::new(0);
    let sdev = net.device();
    let cdev = net.device();
    let mut server = Server::new();
    server.register(EchoService::default());
    let cfg = RdmaServerConfig {
        credits: 8,
        max_read_bytes: 64 * 1024,
        ..RdmaServerConfig::default()
    };
    let Ok(listener) = RdmaListener::bind(&sdev, &String::new(), Arc::new(server), cfg).await
    else {
        panic!("loopback listen failed");
    };
    let addr = listener.local_addr();
    listener.spawn();
    let pd = cdev.alloc_pd();
    let pattern: BytesMut = (0..4096u32).map(|i| (i % 251) as u8).collect();
    let _mr = pd
        .register(pattern, Access::REMOTE_READ | Access::REMOTE_WRITE)
        .expect("one region");
    let mut qcfg = QpConfig::new(CompletionQueue::new(256));
    qcfg.initial_recvs = (0..RECVS)
        .map(|i| RecvWr {
            wr_id: i,
            buf: BytesMut::with_capacity(8192),
        })
        .collect();
    let Ok(conn) = cdev.connect(&pd, &addr, qcfg).await else {
        panic!("loopback connect failed");
    };
    let qp = conn.qp;
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
        let wr = SendWr {
            wr_id: id,
            data: vec![Bytes::copy_from_slice(msg)],
            solicited: false,
            invalidate: None,
        };
        if qp.post_send(wr).is_err() {
            break;
        }
    }
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
        assert!(v1 || v2, "server sent an undecodable header: {b:02x?}");
        let _ = qp.post_recv(RecvWr {
            wr_id: wc.wr_id,
            buf: BytesMut::with_capacity(8192),
        });
    }
}

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(run(data));
});
