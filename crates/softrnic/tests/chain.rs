//! A chain of RDMA Writes and a Send (an RPC-over-RDMA reply with its write
//! chunk) leaves in one socket write, so its framing does not depend on the
//! peer's ACK timing between the pieces (issue 19: a delayed ACK on the peer
//! held the Send of a reply ~40 ms behind its Write).

use bytes::{Bytes, BytesMut};
use rnic::{Access, ChainWr, QueuePair, SendWr, WcOpcode, WcStatus, WriteWr};
use testkit::conformance::connect_pair;

mod common;
use common::{next, Tcp};

fn reply(n: u64, target: rnic::Stag, data: &Bytes) -> Vec<ChainWr> {
    vec![
        ChainWr::Write(WriteWr {
            wr_id: n,
            data: vec![data.slice(..1000), data.slice(1000..)],
            remote_stag: target,
            remote_to: 0,
        }),
        ChainWr::Send(SendWr {
            wr_id: n + 1,
            data: vec![Bytes::from_static(b"rpc reply header"), data.slice(..100)],
            ..Default::default()
        }),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_and_its_send_posted_as_a_chain_cost_one_socket_write() {
    let p = connect_pair(&Tcp::quick(), 0, 8).await;
    let target = p
        .server_pd
        .register(BytesMut::zeroed(8192), Access::REMOTE_WRITE)
        .unwrap();
    let data: Bytes = (0..8000u32).map(|i| i as u8).collect::<Vec<u8>>().into();
    for round in 0..5u64 {
        let before = p.client.socket_writes();
        p.cqp
            .post_chain(reply(10 * round, target.stag(), &data))
            .unwrap();
        let got = next(p.sqp.recv_cq()).await;
        assert_eq!(
            (got.opcode, got.status),
            (WcOpcode::Recv, WcStatus::Success)
        );
        for _ in 0..2 {
            assert_eq!(next(p.cqp.send_cq()).await.status, WcStatus::Success);
        }
        assert_eq!(
            p.client.socket_writes() - before,
            1,
            "round {round}: the Write and the Send left in one write"
        );
    }
    assert_eq!(&target.invalidate().buf[..8000], &data[..]);
}

/// The Read Response FPDUs of one RDMA Read (RFC 5040 §5.2) leave the
/// responder in one vectored write when the socket takes them, not one
/// write per FPDU; the data arrives intact with CRC on and off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_responses_of_one_read_share_a_socket_write() {
    for crc in [false, true] {
        read_responses_share_writes(crc).await;
    }
}

async fn read_responses_share_writes(crc: bool) {
    let p = connect_pair(&Tcp::quick_crc(crc), 0, 8).await;
    // 160 KiB: three FPDUs at the 65532-byte ULPDUs softrnic peers use.
    const LEN: usize = 160 * 1024;
    const ROUNDS: u64 = 8;
    let data: Vec<u8> = (0..LEN as u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let source = p
        .server_pd
        .register(BytesMut::from(&data[..]), Access::REMOTE_READ)
        .unwrap();
    let sink = p
        .client_pd
        .register(BytesMut::zeroed(LEN), Access::LOCAL_WRITE)
        .unwrap();
    let before = p.server.socket_writes();
    for round in 0..ROUNDS {
        p.cqp
            .post_read(rnic::ReadWr {
                wr_id: round,
                local_stag: sink.stag(),
                local_to: 0,
                len: LEN as u32,
                remote_stag: source.stag(),
                remote_to: 0,
            })
            .unwrap();
        let wc = next(p.cqp.send_cq()).await;
        assert_eq!(
            (wc.opcode, wc.status),
            (WcOpcode::RdmaRead, WcStatus::Success)
        );
    }
    let writes = p.server.socket_writes() - before;
    // One write per FPDU would be 3 per Read.
    assert!(
        writes <= 2 * ROUNDS,
        "crc {crc}: {writes} socket writes for {ROUNDS} Reads of 3 FPDUs"
    );
    assert_eq!(&sink.invalidate().buf[..], &data[..]);
}
