//! The RPC-over-RDMA version 2 requester's receive path
//! (`rpcrdma::transport::RdmaClient` with a GENL backchannel serving
//! `oncrpc`'s echo program, over the rnic loopback device): arbitrary
//! Sends from a raw server peer go through the reply decode (v1 and v2,
//! the ERR_VERS heuristics, resource errors and the resend with larger
//! resources), reverse-direction call classification (inline and with
//! chunks: RDMA Reads from the peer's memory, the backchannel service,
//! the reply inline or by RDMA Write into the peer's reply chunk with
//! Send With Invalidate). Nothing may panic, and every Send the client
//! makes must decode as a version 1 or version 2 transport header.
//!
//! The peer registers one region (4096 bytes, remote read and write)
//! whose STag is the same in every run (fresh loopback network with seed
//! 0), so chunks can name it. A NULL and an ECHO call are in flight, so
//! replies can match their XIDs (the client's XIDs start at 0x1000).
//! Input: records `[len: u16 BE][len bytes]`, each posted as one Send.
//! Time is virtual (paused tokio clock).
#![no_main]

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use oncrpc::echo::{EchoClient, EchoService};
use oncrpc::Server;
use rnic::loopback::LoopbackNetwork;
use rnic::{
    Access, CompletionQueue, ConnectRequest, Device, Listener, QpConfig, QueuePair, RecvWr, SendWr,
    WcOpcode,
};
use rpcrdma::plan::Version;
use rpcrdma::transport::{RdmaClient, RdmaClientConfig};
use rpcrdma::wire::Limits;

async fn run(data: &[u8]) {
    let net = LoopbackNetwork::new(0);
    let sdev = net.device();
    let cdev = net.device();
    let Ok(mut listener) = sdev.listen(&String::new()).await else {
        panic!("loopback listen failed");
    };
    let addr = listener.local_addr();
    let pd = sdev.alloc_pd();
    let pattern: BytesMut = (0..4096u32).map(|i| (i % 251) as u8).collect();
    let _mr = pd
        .register(pattern, Access::REMOTE_READ | Access::REMOTE_WRITE)
        .expect("one region");
    let accept = async {
        let req = listener.accept_request().await.expect("request");
        let mut cfg = QpConfig::new(CompletionQueue::new(256));
        cfg.initial_recvs = (0..16)
            .map(|i| RecvWr {
                wr_id: i,
                buf: BytesMut::with_capacity(8192),
            })
            .collect();
        cfg.private_data = vec![0xf6, 0xab, 0x0e, 0x18, 1, 0, 3, 3];
        req.accept(&pd, cfg).await.expect("accept")
    };
    let mut svc = Server::new();
    svc.register(EchoService::default());
    let ccfg = RdmaClientConfig {
        version: Version::V2,
        max_requests: 8,
        ..RdmaClientConfig::default()
    };
    let connecting = RdmaClient::connect_with_backchannel(&cdev, &addr, ccfg, Arc::new(svc));
    let (qp, client) = tokio::join!(accept, connecting);
    let Ok(client) = client else {
        panic!("loopback connect failed");
    };
    let echo = EchoClient::new(client.clone());
    let calls = tokio::spawn(async move {
        let _ = tokio::join!(echo.null(), echo.echo(Bytes::from(vec![5u8; 6000])));
    });
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
        assert!(v1 || v2, "client sent an undecodable header: {b:02x?}");
        let _ = qp.post_recv(RecvWr {
            wr_id: wc.wr_id,
            buf: BytesMut::with_capacity(8192),
        });
    }
    client.close();
    calls.abort();
}

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(run(data));
});
