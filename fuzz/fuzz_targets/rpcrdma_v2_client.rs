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

mod rdma_peer;

use std::sync::Arc;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use oncrpc::echo::{EchoClient, EchoService};
use oncrpc::Server;
use rnic::loopback::LoopbackNetwork;
use rnic::{ConnectRequest, Device, Listener};
use rpcrdma::plan::Version;
use rpcrdma::transport::{RdmaClient, RdmaClientConfig};

async fn run(data: &[u8]) {
    let net = LoopbackNetwork::new(0);
    let sdev = net.device();
    let cdev = net.device();
    let Ok(mut listener) = sdev.listen(&String::new()).await else {
        panic!("loopback listen failed");
    };
    let addr = listener.local_addr();
    let pd = sdev.alloc_pd();
    let _mr = rdma_peer::pattern_region(&pd);
    let accept = async {
        let req = listener.accept_request().await.expect("request");
        let mut cfg = rdma_peer::qp_config(16);
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
    rdma_peer::post_records(&qp, data);
    rdma_peer::drain_checked(&qp, "client").await;
    client.close();
    calls.abort();
}

fuzz_target!(|data: &[u8]| rdma_peer::block_on_paused(run(data)));
