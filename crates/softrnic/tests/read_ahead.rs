//! RDMA Read Responses read ahead into the Read's sink (`ahead.rs`): many
//! Reads in flight, with the peer's Sends between their responses (heads
//! that differ from the prediction), land byte-exact and each byte is
//! placed once; without CRC most of them go straight into the sink.

use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use iwarp::negotiation::{Initiator, InitiatorConfig, ReplyOutcome};
use iwarp::wire::ddp::{self, Buffer, Repr as DdpRepr};
use iwarp::wire::fpdu;
use iwarp::wire::rdmap::{Opcode, ReadRequestPacket, READ_REQUEST_LEN};
use rnic::{
    Access, CompletionQueue, ConnectRequest, Device, Listener, QpConfig, QueuePair, ReadWr, SendWr,
    WcOpcode, WcStatus,
};
use softrnic::SoftDevice;
use testkit::conformance::{connect_pair, placed_bytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod common;
use common::{next, Tcp};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u8)
                .wrapping_mul(29)
                .wrapping_add(seed ^ (i >> 16) as u8)
        })
        .collect()
}

/// Eight Reads of odd lengths (the last segment of each shorter than the
/// others) posted at once into one sink region, while the peer sends 32
/// small messages that arrive between the Read Responses.
async fn reads_with_sends_between(crc: bool) {
    let p = connect_pair(&Tcp::quick_crc(crc), 64, 0).await;
    const READ: usize = 512 * 1024 + 3;
    const READS: usize = 8;
    const SENDS: usize = 32;
    let src = Bytes::from(pattern(READS * READ + 100, 5));
    let source = p
        .server_pd
        .register(BytesMut::from(&src[..]), Access::REMOTE_READ)
        .unwrap();
    // The sink region has a guard band before and after the Reads' sinks.
    let sink = p
        .client_pd
        .register(
            BytesMut::from(&[0xa5u8; READS * READ + 64][..]),
            Access::LOCAL_WRITE,
        )
        .unwrap();
    for i in 0..READS {
        p.cqp
            .post_read(ReadWr {
                wr_id: i as u64,
                local_stag: sink.stag(),
                local_to: 32 + (i * READ) as u64,
                len: READ as u32,
                remote_stag: source.stag(),
                remote_to: 50 + (i * READ) as u64,
            })
            .unwrap();
    }
    for j in 0..SENDS {
        p.sqp
            .post_send(SendWr {
                wr_id: 100 + j as u64,
                data: vec![Bytes::from(format!("message {j}"))],
                ..Default::default()
            })
            .unwrap();
        tokio::task::yield_now().await;
    }
    // One completion queue takes the Reads' and the receives' completions.
    let mut done = [false; READS];
    let mut received = 0;
    for _ in 0..READS + SENDS {
        let wc = next(p.cqp.send_cq()).await;
        assert_eq!(wc.status, WcStatus::Success);
        if wc.opcode == WcOpcode::RdmaRead {
            assert_eq!(wc.byte_len, READ as u32);
            done[wc.wr_id as usize] = true;
        } else {
            assert_eq!(wc.opcode, WcOpcode::Recv);
            let buf = wc.buf.expect("the receive buffer");
            assert_eq!(&buf[..], format!("message {received}").as_bytes());
            received += 1;
        }
    }
    assert!(done.iter().all(|d| *d));
    assert_eq!(received, SENDS);
    for _ in 0..SENDS {
        assert_eq!(next(p.sqp.send_cq()).await.status, WcStatus::Success);
    }
    let stats = p.client.mr_table().stats();
    assert_eq!(placed_bytes(stats), (READS * READ) as u64, "{stats:?}");
    if !crc {
        assert!(
            stats.bytes_placed_direct > (READS * READ / 2) as u64,
            "{stats:?}"
        );
    }
    let got = sink.invalidate().buf;
    assert_eq!(&got[..32], &[0xa5u8; 32]);
    assert_eq!(&got[32..32 + READS * READ], &src[50..50 + READS * READ]);
    assert_eq!(&got[32 + READS * READ..], &[0xa5u8; 32]);
}

#[tokio::test]
async fn read_responses_land_byte_exact_without_crc() {
    reads_with_sends_between(false).await;
}

#[tokio::test]
async fn read_responses_land_byte_exact_with_crc() {
    reads_with_sends_between(true).await;
}

/// The receive task reads Read Responses ahead into the sink without the
/// queue pair's lock, so the Read's issuer posts meanwhile: Reads of 1 MiB
/// in flight while it sends 24 messages to the peer from another worker
/// thread. Every Send arrives once and in order, and every Read lands
/// byte-exact, most of it straight into the sink.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_posted_while_responses_are_read_ahead_arrive_in_order() {
    let p = connect_pair(&Tcp::quick_crc(false), 0, 32).await;
    const READ: usize = 1024 * 1024;
    const READS: usize = 6;
    // Within the send queue's 32 entries (with the Reads) and the peer's
    // 32 posted receives.
    const SENDS: usize = 24;
    let src = Bytes::from(pattern(READS * READ, 9));
    let source = p
        .server_pd
        .register(BytesMut::from(&src[..]), Access::REMOTE_READ)
        .unwrap();
    let sink = p
        .client_pd
        .register(
            BytesMut::from(&vec![0xa5u8; READS * READ][..]),
            Access::LOCAL_WRITE,
        )
        .unwrap();
    let cqp = std::sync::Arc::new(p.cqp);
    let sender = {
        let cqp = std::sync::Arc::clone(&cqp);
        tokio::spawn(async move {
            for j in 0..SENDS {
                cqp.post_send(SendWr {
                    wr_id: 100 + j as u64,
                    data: vec![Bytes::from(format!("call {j}"))],
                    ..Default::default()
                })
                .unwrap();
                tokio::task::yield_now().await;
            }
        })
    };
    for i in 0..READS {
        cqp.post_read(ReadWr {
            wr_id: i as u64,
            local_stag: sink.stag(),
            local_to: (i * READ) as u64,
            len: READ as u32,
            remote_stag: source.stag(),
            remote_to: (i * READ) as u64,
        })
        .unwrap();
    }
    sender.await.unwrap();
    let mut done = [false; READS];
    let mut sent = 0;
    while sent < SENDS || !done.iter().all(|d| *d) {
        let wc = next(cqp.send_cq()).await;
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        if wc.opcode == WcOpcode::RdmaRead {
            assert_eq!(wc.byte_len, READ as u32);
            done[wc.wr_id as usize] = true;
        } else {
            assert_eq!(wc.wr_id, 100 + sent as u64);
            sent += 1;
        }
    }
    for j in 0..SENDS {
        let wc = next(p.sqp.recv_cq()).await;
        assert_eq!(wc.status, WcStatus::Success);
        let buf = wc.buf.expect("the receive buffer");
        assert_eq!(&buf[..wc.byte_len as usize], format!("call {j}").as_bytes());
    }
    let stats = p.client.mr_table().stats();
    assert_eq!(placed_bytes(stats), (READS * READ) as u64, "{stats:?}");
    assert!(
        stats.bytes_placed_direct > (READS * READ / 2) as u64,
        "{stats:?}"
    );
    let got = sink.invalidate().buf;
    assert!(got[..] == src[..], "the Reads landed byte-exact");
}

/// A raw peer (MPA without CRC) that answers a Read Request with segments
/// of 3,000 bytes, then one with segments of uneven lengths: after the
/// first Read the receive side
/// predicts 3,000-byte segments, reads the second Read's first two
/// straight into the sink, meets the 5,000-byte one and hands the rest to
/// the engine as a stream. Both Reads land byte-exact, each byte once.
#[tokio::test]
async fn read_responses_of_uneven_segments_land_byte_exact() {
    let dev = SoftDevice::new(Tcp::quick_crc(false).0, 9);
    let mut l = dev
        .listen(&SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = l.local_addr();
    let pd = dev.alloc_pd();
    let (mut raw, qp) = tokio::join!(raw_connect(addr), async {
        let req = l.accept_request().await.unwrap();
        req.accept(&pd, QpConfig::new(CompletionQueue::new(16)))
            .await
            .unwrap()
    });
    const LEN: usize = 60_000;
    let src = pattern(2 * LEN, 11);
    let sink = pd
        .register(BytesMut::zeroed(2 * LEN), Access::LOCAL_WRITE)
        .unwrap();
    for round in 0..2u64 {
        let off = round * LEN as u64;
        qp.post_read(ReadWr {
            wr_id: round,
            local_stag: sink.stag(),
            local_to: off,
            len: LEN as u32,
            remote_stag: rnic::Stag(0x0102_0304),
            remote_to: off,
        })
        .unwrap();
        // The Read Request: length field, untagged DDP header, body, pad, CRC.
        let mut len = [0u8; 2];
        raw.read_exact(&mut len).await.unwrap();
        let ulpdu = usize::from(u16::from_be_bytes(len));
        let mut rest = vec![0u8; ulpdu + fpdu::pad_len(ulpdu) + fpdu::CRC_LEN];
        raw.read_exact(&mut rest).await.unwrap();
        let body = &rest[ddp::UNTAGGED_HEADER_LEN..ddp::UNTAGGED_HEADER_LEN + READ_REQUEST_LEN];
        let req = ReadRequestPacket::new_checked(body).unwrap();
        assert_eq!((req.size() as usize, req.source_to()), (LEN, off));
        let mut wire = Vec::new();
        let mut at = 0;
        // The first Read in even segments, the second uneven after two.
        let uneven = [3000, 3000, 5000, 1000, 7000];
        for seg in uneven
            .into_iter()
            .cycle()
            .map(|n| if round == 0 { 3000 } else { n })
        {
            let n = seg.min(LEN - at);
            let h = DdpRepr {
                last: at + n == LEN,
                opcode: Opcode::ReadResponse,
                buffer: Buffer::Tagged {
                    stag: req.sink_stag(),
                    to: req.sink_to() + at as u64,
                },
            };
            let ulpdu = ddp::TAGGED_HEADER_LEN + n;
            wire.extend_from_slice(&(ulpdu as u16).to_be_bytes());
            wire.extend_from_slice(&h.to_vec());
            let from = off as usize + at;
            wire.extend_from_slice(&src[from..from + n]);
            wire.resize(wire.len() + fpdu::pad_len(ulpdu) + fpdu::CRC_LEN, 0);
            at += n;
            if at == LEN {
                break;
            }
        }
        raw.write_all(&wire).await.unwrap();
        let wc = next(qp.send_cq()).await;
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.status, wc.byte_len),
            (round, WcOpcode::RdmaRead, WcStatus::Success, LEN as u32)
        );
    }
    let stats = dev.mr_table().stats();
    assert_eq!(placed_bytes(stats), 2 * LEN as u64, "{stats:?}");
    assert!(stats.bytes_placed_direct > 0, "{stats:?}");
    assert_eq!(&sink.invalidate().buf[..], &src[..]);
}

/// MPA Request without CRC or RTR, and its Reply.
async fn raw_connect(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let cfg = InitiatorConfig {
        crc: false,
        ird: 4,
        ord: 4,
        rtr_offer: vec![],
        private_data: b"raw".to_vec(),
        large_fpdu: false,
    };
    let (awaiting, req) = Initiator::start(cfg).unwrap();
    s.write_all(&req).await.unwrap();
    // Header and the RFC 6581 IRD/ORD words; the acceptor sends no private data.
    let mut reply = vec![0u8; 20 + 4];
    s.read_exact(&mut reply).await.unwrap();
    assert!(matches!(
        awaiting.handle_reply(&reply).unwrap(),
        ReplyOutcome::Accepted(_)
    ));
    s
}
