//! A requester that exceeds its credit grant (RFC 8166 §3.3.1). Like Linux
//! svcrdma, the server does not police the count itself: it posts one
//! receive per credit it grants, so a Send beyond the grant finds no
//! receive and the RDMA layer terminates the connection (RFC 5040 §5.3).
//! The server survives and serves other clients.
#![cfg(feature = "transport")]

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use oncrpc::echo::{EchoClient, EchoService, ECHO_PROGRAM, ECHO_VERSION};
use oncrpc::Server;
use rnic::loopback::LoopbackNetwork;
use rnic::{CloseReason, CompletionQueue, Device, QpConfig, QpState, QueuePair, RecvWr, SendWr};
use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaListener, RdmaServerConfig};

/// An RDMA_MSG carrying an inline NULL call with `xid`.
fn null_call(xid: u32) -> Bytes {
    let mut w = Vec::new();
    // RPC-over-RDMA v1 header: xid, version 1, 2 credits asked, RDMA_MSG,
    // empty read list, write list and reply chunk (RFC 8166 §4.2).
    for v in [xid, 1, 2, 0, 0, 0, 0] {
        w.extend_from_slice(&u32::to_be_bytes(v));
    }
    // RPC call (RFC 5531 §9): xid, CALL, version 2, program, version,
    // procedure 0, AUTH_NONE credential and verifier.
    for v in [xid, 0, 2, ECHO_PROGRAM, ECHO_VERSION, 0, 0, 0, 0, 0] {
        w.extend_from_slice(&u32::to_be_bytes(v));
    }
    Bytes::from(w)
}

#[tokio::test]
async fn peer_exceeding_its_credit_grant_loses_the_connection() {
    let net = LoopbackNetwork::new(77);
    let sdev = net.device();
    let cdev = net.device();
    let mut server = Server::new();
    server.register(EchoService::default());
    let cfg = RdmaServerConfig {
        credits: 2,
        ..RdmaServerConfig::default()
    };
    let listener = RdmaListener::bind(&sdev, &String::new(), Arc::new(server), cfg)
        .await
        .unwrap();
    let addr = listener.local_addr();
    listener.spawn();

    let pd = cdev.alloc_pd();
    let mut qcfg = QpConfig::new(CompletionQueue::new(64));
    // Receives for every reply, so only the server can break the rules.
    qcfg.initial_recvs = (0..32)
        .map(|i| RecvWr {
            wr_id: i,
            buf: BytesMut::with_capacity(1024),
        })
        .collect();
    let qp = cdev.connect(&pd, &addr, qcfg).await.unwrap().qp;
    // Within the grant of one credit of a new connection the call is
    // answered.
    qp.post_send(SendWr {
        wr_id: 1,
        data: vec![null_call(1)],
        solicited: false,
        invalidate: None,
    })
    .unwrap();
    let wc = loop {
        let wc = qp.recv_cq().next().await.unwrap();
        if wc.opcode == rnic::WcOpcode::Recv {
            break wc;
        }
    };
    assert!(wc.status.is_success());
    // Now eight Sends at once, with no chance for the server to repost
    // receives in between: only two find one.
    for xid in 2..10 {
        let wr = SendWr {
            wr_id: u64::from(xid),
            data: vec![null_call(xid)],
            solicited: false,
            invalidate: None,
        };
        // Posting may already fail once the connection is terminated.
        let _ = qp.post_send(wr);
    }
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_ne!(
        qp.state(),
        QpState::Rts,
        "connection survived a Send beyond the grant"
    );
    assert!(
        matches!(
            qp.close_reason(),
            Some(CloseReason::TerminateReceived(_) | CloseReason::TerminateSent(_))
        ),
        "{:?}",
        qp.close_reason()
    );

    // The server goes on serving well-behaved clients.
    let client = RdmaClient::connect(&cdev, &addr, RdmaClientConfig::default())
        .await
        .unwrap();
    EchoClient::new(client.clone()).null().await.unwrap();
    let data = Bytes::from(vec![9u8; 50_000]);
    assert_eq!(
        EchoClient::new(client).echo(data.clone()).await.unwrap(),
        data
    );
}
