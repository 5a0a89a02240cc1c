//! Replays what the Linux NFS/RDMA client (xprtrdma over siw) sent to knfsd,
//! byte for byte from a kpeer capture, into a softrnic listener: the kernel's
//! MPA Request is accepted with its RFC 8797 private data visible, and every
//! RPC call it sent as an RDMAP Send lands intact in a posted receive buffer
//! (siw's non-zero pad bytes included).

#[path = "../../iwarp/tests/support/mod.rs"]
#[allow(dead_code, unreachable_pub)]
mod support;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use iwarp::negotiation::FrameReader;
use iwarp::wire::{ddp, fpdu};
use rnic::{
    CompletionQueue, ConnectRequest, Device, Listener, QpConfig, QueuePair, RecvWr, WcOpcode,
    WcStatus,
};
use softrnic::{SoftConfig, SoftDevice};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The client's MPA Request and the Send messages that follow it, up to the
/// first FPDU that is not an untagged Send (a Read Response needs knfsd's
/// state), as (FPDU bytes, message payloads).
fn kernel_sends(c2s: &[u8]) -> (Vec<u8>, Vec<u8>, Vec<Vec<u8>>) {
    let mut reader = FrameReader::new();
    let (used, frame) = reader.feed(c2s).expect("MPA request");
    let request = frame.expect("whole MPA request");
    let mut rest = &c2s[used..];
    let mut fpdus = Vec::new();
    let mut messages = Vec::new();
    let mut current = Vec::new();
    while rest.len() >= 3 {
        let ulpdu = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        let len = fpdu::fpdu_len(ulpdu);
        let (control, opcode) = (rest[2], rest[3] & 0x0f);
        let is_send = control & 0x80 == 0 && (3..=6).contains(&opcode);
        if !is_send || rest.len() < len {
            break;
        }
        let payload = &rest[fpdu::LEN_FIELD + ddp::UNTAGGED_HEADER_LEN..fpdu::LEN_FIELD + ulpdu];
        current.extend_from_slice(payload);
        if control & 0x40 != 0 {
            messages.push(std::mem::take(&mut current));
        }
        fpdus.extend_from_slice(&rest[..len]);
        rest = &rest[len..];
    }
    (request, fpdus, messages)
}

/// Replays the first connection of `file` and returns how many calls landed.
async fn replay(file: &str) -> usize {
    let path = format!("{}/../iwarp/testdata/{file}", env!("CARGO_MANIFEST_DIR"));
    let pcap = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let conns = support::tcp_conns(&pcap, 20049);
    let conn = conns
        .iter()
        .find(|c| !c.c2s.is_empty())
        .expect("a connection");
    let (request, fpdus, messages) = kernel_sends(&conn.c2s);
    assert!(!messages.is_empty(), "the capture holds RPC calls");

    let dev = SoftDevice::new(SoftConfig::default(), 9);
    let pd = dev.alloc_pd();
    let mut l = dev
        .listen(&SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = l.local_addr();
    let kernel = async {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&request).await.unwrap();
        let mut reply_head = [0u8; 20];
        s.read_exact(&mut reply_head).await.unwrap();
        assert_eq!(&reply_head[..16], b"MPA ID Rep Frame");
        let pd_len = usize::from(u16::from_be_bytes([reply_head[18], reply_head[19]]));
        let mut pd_bytes = vec![0u8; pd_len];
        s.read_exact(&mut pd_bytes).await.unwrap();
        s.write_all(&fpdus).await.unwrap();
        s
    };
    let server = async {
        let req = l.accept_request().await.unwrap();
        // RFC 8797 private data: format identifier 0xf6ab0e18, version 1.
        assert_eq!(
            req.private_data().get(..5),
            Some(&[0xf6, 0xab, 0x0e, 0x18, 0x01][..])
        );
        let mut cfg = QpConfig::new(CompletionQueue::new(256));
        cfg.initial_recvs = (0..64)
            .map(|i| RecvWr {
                wr_id: i,
                buf: BytesMut::with_capacity(8192),
            })
            .collect();
        req.accept(&pd, cfg).await.unwrap()
    };
    let (_stream, qp) = tokio::join!(kernel, server);
    for (i, msg) in messages.iter().enumerate() {
        let wc = tokio::time::timeout(Duration::from_secs(10), qp.recv_cq().next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (wc.opcode, wc.status, wc.wr_id),
            (WcOpcode::Recv, WcStatus::Success, i as u64)
        );
        assert_eq!(wc.buf.as_deref(), Some(&msg[..]), "call {i}");
    }
    assert_eq!(qp.close_reason(), None);
    messages.len()
}

/// NFSv3 over xprtrdma to knfsd: the first 16 calls of the session, before
/// knfsd's first RDMA Read.
#[tokio::test]
async fn kernel_nfsv3_client_calls_arrive_intact() {
    assert_eq!(replay("nfsrdma-v3.pcap").await, 16);
}

/// NFSv4.1 over xprtrdma, captured against the iwarp crate's own responder:
/// the NULL call and EXCHANGE_ID.
#[tokio::test]
async fn kernel_nfsv41_client_calls_arrive_intact() {
    assert_eq!(replay("kernel-client-to-iwarp-responder.pcap").await, 2);
}
