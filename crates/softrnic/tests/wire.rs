//! softrnic behaviour that needs real TCP: multi-segment transfers placed
//! directly, the read queue beyond ORD, and hostile or broken peers speaking
//! raw bytes.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use iwarp::negotiation::{Initiator, InitiatorConfig, ReplyOutcome};
use iwarp::wire::mpa::{FrameKind, IrdOrd, Repr as MpaRepr};
use rnic::{
    Access, CloseReason, CompletionQueue, ConnectRequest, Device, Listener, QpConfig, QueuePair,
    ReadWr, RecvWr, SendWr, TerminateCause, WcOpcode, WcStatus, WriteWr,
};
use softrnic::{SoftConfig, SoftDevice};
use testkit::conformance::{connect_pair, placed_bytes, Harness};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod common;
use common::{next, Tcp};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A 1 MiB RDMA Write and a 1 MiB RDMA Read cross many FPDUs and land
/// byte-exact, every byte placed once (straight from the socket, or copied
/// from the receive side's staging buffer when a socket read took it with
/// the FPDU before).
#[tokio::test]
async fn large_write_and_read_are_placed_directly_across_segments() {
    let h = Tcp(SoftConfig {
        crc: true,
        ..SoftConfig::default()
    });
    let p = connect_pair(&h, 0, 1).await;
    const LEN: usize = 1 << 20;
    let target = p
        .server_pd
        .register(
            BytesMut::zeroed(LEN + 8),
            Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let data = Bytes::from(pattern(LEN, 7));
    let wr = WriteWr {
        wr_id: 1,
        data: vec![data.slice(..1000), data.slice(1000..)],
        remote_stag: target.stag(),
        remote_to: 8,
    };
    p.cqp.post_write(wr).unwrap();
    assert_eq!(next(p.cqp.send_cq()).await.status, WcStatus::Success);
    // A Send after the Write proves the Write was placed (in-order stream).
    p.cqp
        .post_send(SendWr {
            wr_id: 2,
            data: vec![Bytes::from_static(b"done")],
            ..Default::default()
        })
        .unwrap();
    let got = next(p.sqp.recv_cq()).await;
    assert_eq!(got.status, WcStatus::Success);
    assert_eq!(next(p.cqp.send_cq()).await.status, WcStatus::Success);

    let sink = p
        .client_pd
        .register(BytesMut::zeroed(LEN), Access::LOCAL_WRITE)
        .unwrap();
    let rd = ReadWr {
        wr_id: 3,
        local_stag: sink.stag(),
        local_to: 0,
        len: LEN as u32,
        remote_stag: target.stag(),
        remote_to: 8,
    };
    p.cqp.post_read(rd).unwrap();
    let wc = next(p.cqp.send_cq()).await;
    assert_eq!(
        (wc.opcode, wc.status, wc.byte_len),
        (WcOpcode::RdmaRead, WcStatus::Success, LEN as u32)
    );

    let server_stats = p.server.mr_table().stats();
    let client_stats = p.client.mr_table().stats();
    assert_eq!(placed_bytes(server_stats), LEN as u64);
    assert_eq!(placed_bytes(client_stats), LEN as u64);
    let written = target.invalidate().buf;
    assert_eq!(&written[..8], &[0u8; 8]);
    assert_eq!(&written[8..], &data[..]);
    assert_eq!(&sink.invalidate().buf[..], &data[..]);
}

/// With the smallest staging buffer (`rx_stage` raised to
/// `MIN_RX_STAGE`, far below a 64 KiB FPDU) every socket read ends inside an
/// FPDU: the deframer keeps the partial FPDU, and the rest of its payload
/// goes straight into the region on the next read. A 1 MiB Write and Read
/// land byte-exact, each byte placed once, most of them directly.
#[tokio::test]
async fn a_small_staging_buffer_places_the_rest_of_each_fpdu_directly() {
    let h = Tcp(SoftConfig {
        rx_stage: 0,
        ..SoftConfig::default()
    });
    let p = connect_pair(&h, 0, 1).await;
    const LEN: usize = 1 << 20;
    let target = p
        .server_pd
        .register(
            BytesMut::zeroed(LEN),
            Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let data = Bytes::from(pattern(LEN, 3));
    p.cqp
        .post_write(WriteWr {
            wr_id: 1,
            data: vec![data.clone()],
            remote_stag: target.stag(),
            remote_to: 0,
        })
        .unwrap();
    assert_eq!(next(p.cqp.send_cq()).await.status, WcStatus::Success);
    let sink = p
        .client_pd
        .register(BytesMut::zeroed(LEN), Access::LOCAL_WRITE)
        .unwrap();
    p.cqp
        .post_read(ReadWr {
            wr_id: 2,
            local_stag: sink.stag(),
            local_to: 0,
            len: LEN as u32,
            remote_stag: target.stag(),
            remote_to: 0,
        })
        .unwrap();
    let wc = next(p.cqp.send_cq()).await;
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, LEN as u32));
    for stats in [p.server.mr_table().stats(), p.client.mr_table().stats()] {
        assert_eq!(placed_bytes(stats), LEN as u64);
        assert!(stats.bytes_placed_direct > LEN as u64 / 2, "{stats:?}");
    }
    assert_eq!(&target.invalidate().buf[..], &data[..]);
    assert_eq!(&sink.invalidate().buf[..], &data[..]);
}

/// Replies as an NFS server sends READ data (RPC-over-RDMA, RFC 8166
/// §3.4.6): 1 MiB of RDMA Writes, then a small Send, eight in a row posted
/// at once so the receiver's socket holds many FPDUs per read. The reads
/// stop just past each next FPDU header while tagged payload arrives, so
/// almost every byte goes straight from the socket into its region (the
/// whole staging buffer would have taken, and copied, whole FPDUs). Then a
/// run of small Sends (the reads take the whole staging buffer again).
/// Byte-exact, each byte placed once, CRC on and off.
#[tokio::test]
async fn writes_before_each_send_are_placed_straight_into_their_regions() {
    for crc in [false, true] {
        let p = connect_pair(&Tcp::quick_crc(crc), 0, 24).await;
        const LEN: usize = 1 << 20;
        const REPLIES: usize = 8;
        let mut regions = Vec::new();
        let mut datas = Vec::new();
        for i in 0..REPLIES {
            let target = p
                .server_pd
                .register(BytesMut::zeroed(LEN), Access::REMOTE_WRITE)
                .unwrap();
            let data = Bytes::from(pattern(LEN, i as u8));
            p.cqp
                .post_write(WriteWr {
                    wr_id: 10 + i as u64,
                    data: vec![data.clone()],
                    remote_stag: target.stag(),
                    remote_to: 0,
                })
                .unwrap();
            let reply = Bytes::from(vec![i as u8; 200]);
            p.cqp
                .post_send(SendWr {
                    wr_id: 100 + i as u64,
                    data: vec![reply],
                    ..Default::default()
                })
                .unwrap();
            regions.push(target);
            datas.push(data);
        }
        for i in 0..REPLIES {
            let wc = next(p.sqp.recv_cq()).await;
            assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 200));
            assert_eq!(wc.buf.as_deref(), Some(&[i as u8; 200][..]));
        }
        let stats = p.server.mr_table().stats();
        assert_eq!(placed_bytes(stats), (REPLIES * LEN) as u64);
        assert!(
            stats.bytes_copied_staging < (REPLIES * LEN / 10) as u64,
            "crc {crc}: {stats:?}"
        );
        for (target, data) in regions.into_iter().zip(&datas) {
            assert_eq!(&target.invalidate().buf[..], &data[..]);
        }
        for i in 0..16u8 {
            let msg = Bytes::from(vec![i; 100]);
            p.cqp
                .post_send(SendWr {
                    wr_id: 200 + u64::from(i),
                    data: vec![msg],
                    ..Default::default()
                })
                .unwrap();
        }
        for i in 0..16u8 {
            let wc = next(p.sqp.recv_cq()).await;
            assert_eq!(wc.status, WcStatus::Success);
            assert_eq!(wc.buf.as_deref(), Some(&[i; 100][..]));
        }
    }
}

/// A Send longer than the MULPDU arrives in several segments into one
/// receive buffer (RFC 5041 §5.1: MO advances, L on the last).
#[tokio::test]
async fn multi_segment_send_fills_one_receive_buffer() {
    let h = Tcp(SoftConfig {
        mulpdu: 1024,
        large_mulpdu: 0,
        ..SoftConfig::default()
    });
    let (client, server) = h.pair();
    let (cpd, spd) = (client.alloc_pd(), server.alloc_pd());
    let mut l = server.listen(&h.listen_addr()).await.unwrap();
    let addr = l.local_addr();
    let mut scfg = QpConfig::new(CompletionQueue::new(16));
    scfg.initial_recvs = vec![RecvWr {
        wr_id: 9,
        buf: BytesMut::with_capacity(20_000),
    }];
    let (c, s) = testkit::conformance::join(
        client.connect(&cpd, &addr, QpConfig::new(CompletionQueue::new(16))),
        async { l.accept_request().await.unwrap().accept(&spd, scfg).await },
    )
    .await;
    let (cqp, sqp) = (c.unwrap().qp, s.unwrap());
    let body = pattern(10_000, 3);
    cqp.post_send(SendWr {
        wr_id: 1,
        data: vec![Bytes::from(body.clone())],
        ..Default::default()
    })
    .unwrap();
    let wc = next(sqp.recv_cq()).await;
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (9, WcStatus::Success, 10_000)
    );
    assert_eq!(wc.buf.as_deref(), Some(&body[..]));
}

/// More RDMA Reads than the ORD wait in the engine and all complete, in order.
#[tokio::test]
async fn reads_beyond_ord_queue_and_complete_in_order() {
    let h = Tcp(SoftConfig {
        max_ord: 2,
        max_ird: 2,
        ..SoftConfig::default()
    });
    let p = connect_pair(&h, 0, 0).await;
    assert_eq!(p.cqp.attrs().ord, 2);
    let src = p
        .server_pd
        .register(BytesMut::from(&pattern(64, 1)[..]), Access::REMOTE_READ)
        .unwrap();
    let sink = p
        .client_pd
        .register(BytesMut::zeroed(64), Access::LOCAL_WRITE)
        .unwrap();
    for i in 0..8u64 {
        let rd = ReadWr {
            wr_id: i,
            local_stag: sink.stag(),
            local_to: i * 8,
            len: 8,
            remote_stag: src.stag(),
            remote_to: i * 8,
        };
        p.cqp.post_read(rd).unwrap();
    }
    for i in 0..8u64 {
        let wc = next(p.cqp.send_cq()).await;
        assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
    }
    assert_eq!(&sink.invalidate().buf[..], &pattern(64, 1)[..]);
}

/// Runs the initiator side of MPA by hand against a listener and returns the
/// raw stream, positioned at the first FPDU.
async fn raw_connect(addr: SocketAddr) -> TcpStream {
    raw_connect_with(addr, false).await
}

/// [`raw_connect`], saying (or not) that we take large FPDUs.
async fn raw_connect_with(addr: SocketAddr, large_fpdu: bool) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let cfg = InitiatorConfig {
        crc: false,
        ird: 4,
        ord: 4,
        rtr_offer: vec![],
        private_data: b"raw".to_vec(),
        large_fpdu,
    };
    let (awaiting, req) = Initiator::start(cfg).unwrap();
    s.write_all(&req).await.unwrap();
    // Header and the RFC 6581 IRD/ORD words; the acceptor sends no private data.
    let mut reply = vec![0u8; 20 + 4];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut reply))
        .await
        .expect("MPA reply in time")
        .unwrap();
    assert!(matches!(
        awaiting.handle_reply(&reply).unwrap(),
        ReplyOutcome::Accepted(_)
    ));
    s
}

async fn accept_one(
    dev: &SoftDevice,
    l: &mut softrnic::SoftListener,
    recvs: u64,
) -> softrnic::SoftQp {
    let pd = dev.alloc_pd();
    let req = tokio::time::timeout(Duration::from_secs(5), l.accept_request())
        .await
        .expect("request in time")
        .unwrap();
    assert_eq!(req.private_data(), b"raw");
    let mut cfg = QpConfig::new(CompletionQueue::new(16));
    cfg.initial_recvs = (0..recvs)
        .map(|i| RecvWr {
            wr_id: i,
            buf: BytesMut::with_capacity(64),
        })
        .collect();
    req.accept(&pd, cfg).await.unwrap()
}

/// The ULPDU lengths of the first FPDUs of a 200 KiB RDMA Write softrnic
/// sends to a raw peer whose MPA Request did (or did not) carry siw's
/// large-FPDU bit.
async fn write_ulpdus_to_raw_peer(large_fpdu: bool) -> Vec<usize> {
    let dev = SoftDevice::new(SoftConfig::default(), 9);
    let mut l = dev
        .listen(&SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = l.local_addr();
    let (mut raw, qp) = tokio::join!(
        raw_connect_with(addr, large_fpdu),
        accept_one(&dev, &mut l, 1)
    );
    let wr = WriteWr {
        wr_id: 1,
        data: vec![Bytes::from(pattern(200 << 10, 3))],
        remote_stag: rnic::Stag(0x0102_0304),
        remote_to: 0,
    };
    qp.post_write(wr).unwrap();
    let mut lens = Vec::new();
    for _ in 0..3 {
        let mut len = [0u8; 2];
        raw.read_exact(&mut len).await.unwrap();
        let ulpdu = usize::from(u16::from_be_bytes(len));
        // ULPDU, pad to four octets with the length field, CRC.
        let mut rest = vec![0u8; ulpdu + (4 - (ulpdu + 2) % 4) % 4 + 4];
        raw.read_exact(&mut rest).await.unwrap();
        lens.push(ulpdu);
    }
    lens
}

/// siw's own segmenting (32762-byte ULPDUs) toward a peer that did not
/// offer large FPDUs, e.g. Linux siw with `try_gso` off (the default).
#[tokio::test]
async fn ulpdus_stay_at_siws_size_toward_a_peer_that_did_not_offer_more() {
    assert_eq!(
        write_ulpdus_to_raw_peer(false).await,
        vec![softrnic::SIW_MULPDU; 3]
    );
}

/// A peer whose MPA Request carried the large-FPDU bit gets ULPDUs of
/// `LARGE_MULPDU`, half the FPDUs per byte.
#[tokio::test]
async fn ulpdus_grow_toward_a_peer_that_offered_large_fpdus() {
    assert_eq!(
        write_ulpdus_to_raw_peer(true).await,
        vec![softrnic::LARGE_MULPDU; 3]
    );
}

/// Garbage where an FPDU should be: an unknown RDMAP opcode is answered with
/// a Terminate, everything is flushed, nothing panics.
#[tokio::test]
async fn garbage_fpdu_from_peer_is_terminated_and_flushed() {
    let dev = SoftDevice::new(SoftConfig::default(), 5);
    let mut l = dev
        .listen(&SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = l.local_addr();
    let (mut raw, qp) = tokio::join!(raw_connect(addr), accept_one(&dev, &mut l, 2));
    // ULPDU of 18 bytes: untagged header with opcode 0xf (reserved), then pad
    // and a zero CRC field.
    let mut fpdu = vec![0x00, 0x12, 0x41, 0x4f];
    fpdu.extend_from_slice(&[0u8; 16]);
    fpdu.extend_from_slice(&[0u8; 4]);
    raw.write_all(&fpdu).await.unwrap();
    for _ in 0..2 {
        assert_eq!(next(qp.recv_cq()).await.status, WcStatus::FlushError);
    }
    assert!(
        matches!(
            qp.close_reason(),
            Some(CloseReason::TerminateSent(TerminateCause::Other { .. }))
        ),
        "{:?}",
        qp.close_reason()
    );
    // The peer receives the Terminate FPDU, then the close.
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut rest))
        .await
        .unwrap();
    assert!(rest.len() >= 8, "a Terminate FPDU was sent");
    assert_eq!(rest[3] & 0x0f, 0x07, "RDMAP opcode Terminate");
}

/// A peer that closes in the middle of an FPDU loses the connection; posted
/// receives are flushed.
#[tokio::test]
async fn close_inside_an_fpdu_loses_the_connection() {
    let dev = SoftDevice::new(SoftConfig::default(), 6);
    let mut l = dev
        .listen(&SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = l.local_addr();
    let (mut raw, qp) = tokio::join!(raw_connect(addr), accept_one(&dev, &mut l, 1));
    raw.write_all(&[0x00, 0x40, 0x41]).await.unwrap();
    drop(raw);
    assert_eq!(next(qp.recv_cq()).await.status, WcStatus::FlushError);
    assert_eq!(qp.close_reason(), Some(CloseReason::ConnectionLost));
}

/// An MPA Request asking for markers gets an MPA reject (R=1), as Linux siw
/// answers, and never reaches the consumer.
#[tokio::test]
async fn request_with_markers_is_rejected_on_the_wire() {
    let dev = SoftDevice::new(SoftConfig::default(), 7);
    let mut l = dev
        .listen(&SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = l.local_addr();
    let accepting =
        tokio::spawn(async move { l.accept_request().await.map(|r| r.private_data().to_vec()) });
    let mut s = TcpStream::connect(addr).await.unwrap();
    let words = IrdOrd {
        ird: 1,
        ord: 1,
        ..IrdOrd::default()
    };
    let req = MpaRepr {
        kind: FrameKind::Request,
        markers: true,
        crc: false,
        reject: false,
        enhanced: true,
        reserved: 0,
        revision: 2,
        ird_ord: Some(words),
        private_data: b"",
    }
    .to_vec()
    .unwrap();
    s.write_all(&req).await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut reply))
        .await
        .unwrap()
        .unwrap();
    let (r, _) = MpaRepr::parse_bytes(&reply).unwrap();
    assert_eq!(
        (r.kind, r.reject, r.markers),
        (FrameKind::Reply, true, false)
    );
    assert!(
        !accepting.is_finished(),
        "the consumer never saw the request"
    );
    accepting.abort();
}

/// Posting to an idle queue pair transmits at once (no task hop): a Send and
/// a Write complete before the disconnect. RDMA Reads still outstanding — on the wire, or
/// waiting for ORD — are flushed by the disconnect, each exactly once and in
/// posting order.
#[tokio::test]
async fn disconnect_flushes_reads_still_outstanding_in_order() {
    let h = Tcp(SoftConfig::default());
    let p = connect_pair(&h, 0, 4).await;
    let mr = p
        .server_pd
        .register(
            BytesMut::zeroed(64),
            Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let sink = p
        .client_pd
        .register(BytesMut::zeroed(64), Access::LOCAL_WRITE)
        .unwrap();
    p.cqp
        .post_send(SendWr {
            wr_id: 100,
            data: vec![Bytes::from_static(b"s")],
            ..Default::default()
        })
        .unwrap();
    let sent = p.cqp.send_cq().poll().unwrap().expect("sent at post");
    let wr = WriteWr {
        wr_id: 101,
        data: vec![Bytes::from_static(b"w")],
        remote_stag: mr.stag(),
        remote_to: 0,
    };
    p.cqp.post_write(wr).unwrap();
    let written = p.cqp.send_cq().poll().unwrap().expect("sent at post");
    let ord = u64::from(p.cqp.attrs().ord);
    for i in 0..ord + 4 {
        let rd = ReadWr {
            wr_id: i,
            local_stag: sink.stag(),
            local_to: 0,
            len: 8,
            remote_stag: mr.stag(),
            remote_to: 0,
        };
        p.cqp.post_read(rd).unwrap();
    }
    for (wc, id, op) in [
        (sent, 100, WcOpcode::Send),
        (written, 101, WcOpcode::RdmaWrite),
    ] {
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.status),
            (id, op, WcStatus::Success)
        );
    }
    p.cqp.disconnect();
    for i in 0..ord + 4 {
        let wc = p.cqp.send_cq().poll().unwrap().expect("flushed at once");
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.status),
            (i, WcOpcode::RdmaRead, WcStatus::FlushError)
        );
    }
    assert!(p.cqp.send_cq().poll().unwrap().is_none());
    // The server took the Send, then saw the close (or a reset, when its
    // Read Responses met the closed socket).
    assert_eq!(next(p.sqp.recv_cq()).await.status, WcStatus::Success);
    for _ in 0..3 {
        assert_eq!(next(p.sqp.recv_cq()).await.status, WcStatus::FlushError);
    }
    assert!(matches!(
        p.sqp.close_reason(),
        Some(CloseReason::PeerDisconnect | CloseReason::ConnectionLost)
    ));
}

/// A client that connects and never sends its MPA Request does not hold up
/// the next client: each Request is read by its own task.
#[tokio::test]
async fn silent_client_does_not_block_the_next_request() {
    let dev = SoftDevice::new(SoftConfig::default(), 8);
    let mut l = dev
        .listen(&SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = l.local_addr();
    let _silent = TcpStream::connect(addr).await.unwrap();
    // Well under the 10 s MPA timeout the silent client would otherwise cost.
    let both = async { tokio::join!(raw_connect(addr), accept_one(&dev, &mut l, 0)) };
    let (_raw, qp) = tokio::time::timeout(Duration::from_secs(3), both)
        .await
        .expect("second client served");
    assert_eq!(qp.state(), rnic::QpState::Rts);
}

#[tokio::test]
async fn connect_request_reports_the_connectors_tcp_address() {
    let server = softrnic::SoftDevice::new(softrnic::SoftConfig::default(), 11);
    let client = softrnic::SoftDevice::new(softrnic::SoftConfig::default(), 12);
    let mut listener = server
        .listen(&"127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = listener.local_addr();
    let pd = client.alloc_pd();
    let connect = tokio::spawn(async move {
        let cfg = QpConfig::new(CompletionQueue::new(16));
        client.connect(&pd, &addr, cfg).await.map(|_| ())
    });
    let req = listener.accept_request().await.unwrap();
    let peer = req.peer_addr().expect("softrnic knows the TCP peer");
    assert_eq!(peer.ip(), std::net::IpAddr::from([127, 0, 0, 1]));
    assert_ne!(peer.port(), addr.port());
    drop(req);
    let _ = connect.await;
}

/// Sends cut into many short FPDUs (each read whole into the receive task's
/// small buffer and copied into the posted receive) arrive intact.
#[tokio::test]
async fn short_fpdus_of_a_segmented_send_arrive_intact() {
    let h = Tcp(SoftConfig {
        mulpdu: 64,
        large_mulpdu: 0,
        ..SoftConfig::default()
    });
    let p = connect_pair(&h, 0, 0).await;
    for (i, size) in [(1u64, 1000usize), (2, 5000)] {
        p.sqp
            .post_recv(RecvWr {
                wr_id: i,
                buf: BytesMut::with_capacity(size),
            })
            .unwrap();
        let msg: Vec<u8> = (0..size).map(|b| (b % 251) as u8).collect();
        p.cqp
            .post_send(SendWr {
                wr_id: i,
                data: vec![Bytes::from(msg.clone())],
                ..Default::default()
            })
            .unwrap();
        let wc = next(p.sqp.recv_cq()).await;
        assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
        assert_eq!(wc.buf.as_deref(), Some(&msg[..]));
    }
}
