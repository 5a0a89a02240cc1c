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

mod rdma_peer;

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use oncrpc::echo::EchoService;
use oncrpc::Server;
use rnic::loopback::LoopbackNetwork;
use rnic::Device;
use rpcrdma::transport::{RdmaListener, RdmaServerConfig};

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
    let _mr = rdma_peer::pattern_region(&pd);
    let Ok(conn) = cdev.connect(&pd, &addr, rdma_peer::qp_config(RECVS)).await else {
        panic!("loopback connect failed");
    };
    rdma_peer::post_records(&conn.qp, data);
    rdma_peer::drain_checked(&conn.qp, "server").await;
}

fuzz_target!(|data: &[u8]| rdma_peer::block_on_paused(run(data)));
