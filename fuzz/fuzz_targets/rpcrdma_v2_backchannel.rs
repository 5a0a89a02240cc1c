//! The RPC-over-RDMA version 2 responder with a backchannel
//! (`rpcrdma::transport::RdmaListener`, `backchannel_credits` 2, over the
//! rnic loopback device) while its reverse-direction calls are in flight:
//! a raw client announces GENL in RDMA2_CONNPROP, the server sends an
//! inline and a chunked reverse ECHO call (Position-Zero Read chunk and
//! reply chunk), and arbitrary Sends from the client then go through the
//! reverse-reply path (inline replies, replies in the reply chunk,
//! RDMA2_ERROR, foreign XIDs) as well as the forward call path. Nothing
//! may panic, and every Send the server makes must decode as a version 1
//! or version 2 transport header.
//!
//! Input: records `[len: u16 BE][len bytes]`, each posted as one Send.
//! The server's reverse XIDs start at 0x8000_0000. Time is virtual
//! (paused tokio clock).
#![no_main]

mod rdma_peer;

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use oncrpc::echo::{EchoClient, EchoService};
use oncrpc::Server;
use rnic::loopback::LoopbackNetwork;
use rnic::{Device, QueuePair, RecvWr};
use rpcrdma::transport::{RdmaListener, RdmaServerConfig};
use rpcrdma::wire::v2::{Flags, Header, Properties, RvReqSup};

async fn run(data: &[u8]) {
    let net = LoopbackNetwork::new(0);
    let sdev = net.device();
    let cdev = net.device();
    let mut server = Server::new();
    server.register(EchoService::default());
    let cfg = RdmaServerConfig {
        credits: 8,
        max_read_bytes: 64 * 1024,
        backchannel_credits: 2,
        ..RdmaServerConfig::default()
    };
    let Ok(listener) = RdmaListener::bind(&sdev, &String::new(), Arc::new(server), cfg).await
    else {
        panic!("loopback listen failed");
    };
    let addr = listener.local_addr();
    let backchannels = listener.backchannels();
    listener.spawn();
    let pd = cdev.alloc_pd();
    let _mr = rdma_peer::pattern_region(&pd);
    let Ok(conn) = cdev.connect(&pd, &addr, rdma_peer::qp_config(16)).await else {
        panic!("loopback connect failed");
    };
    let qp = conn.qp;
    let props = Properties {
        receive_buffer_size: 1024,
        reverse_request_support: RvReqSup::RDMA2_RVREQSUP_GENL,
    };
    let connprop = xdr::to_bytes(&Header {
        xid: 1,
        credits: 8,
        flags: Flags::default(),
        body: rpcrdma::wire::v2::Body::ConnProp(props.to_propset()),
    });
    if rdma_peer::post(&qp, 999, connprop).is_err() {
        return;
    }
    // The server's answer to the CONNPROP.
    let _ = tokio::time::timeout(Duration::from_secs(1), qp.recv_cq().next()).await;
    let _ = qp.post_recv(RecvWr {
        wr_id: 99,
        buf: BytesMut::with_capacity(8192),
    });
    let calls = backchannels.conn_ids().first().and_then(|&id| {
        let cb = EchoClient::new(backchannels.get(id)?);
        Some(tokio::spawn(async move {
            let _ = tokio::join!(
                cb.echo(Bytes::from_static(b"inline")),
                cb.echo(Bytes::from(vec![3u8; 3000]))
            );
        }))
    });
    rdma_peer::post_records(&qp, data);
    rdma_peer::drain_checked(&qp, "server").await;
    qp.disconnect();
    if let Some(c) = calls {
        c.abort();
    }
}

fuzz_target!(|data: &[u8]| rdma_peer::block_on_paused(run(data)));
