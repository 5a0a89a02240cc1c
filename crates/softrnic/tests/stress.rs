//! Several connections busy at once on a multi-threaded runtime: Sends both
//! ways, Writes and Reads interleaved, every request completing exactly once
//! (catches lock-order and wake-up bugs that one connection would not).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rnic::{
    Access, CompletionQueue, Device, QueuePair, ReadWr, RecvWr, SendWr, WcOpcode, WcStatus,
    WorkCompletion, WriteWr,
};
use softrnic::{SoftConfig, SoftDevice};
use testkit::conformance::{connect_pair, placed_bytes, Harness};

struct Tcp;

impl Harness for Tcp {
    type Dev = SoftDevice;
    fn pair(&self) -> (SoftDevice, SoftDevice) {
        let cfg = SoftConfig {
            mulpdu: 4096,
            large_mulpdu: 0,
            ..SoftConfig::default()
        };
        (SoftDevice::new(cfg, 11), SoftDevice::new(cfg, 12))
    }
    fn listen_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 0))
    }
}

async fn next(cq: &CompletionQueue) -> WorkCompletion {
    tokio::time::timeout(Duration::from_secs(20), cq.next())
        .await
        .expect("completion in time")
        .expect("no overflow")
}

const ROUNDS: u64 = 100;

async fn one_connection(seed: u8) {
    let p = connect_pair(&Tcp, 16, 16).await;
    let target = p
        .server_pd
        .register(
            BytesMut::zeroed(64 * 1024),
            Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let sink = p
        .client_pd
        .register(BytesMut::zeroed(64 * 1024), Access::LOCAL_WRITE)
        .unwrap();
    let block = Bytes::from(vec![seed; 64 * 1024]);
    let (mut c_recvs, mut s_recvs, mut c_sends) = (0u64, 0u64, 0u64);
    for i in 0..ROUNDS {
        p.cqp
            .post_write(WriteWr {
                wr_id: 3 * i,
                data: vec![block.clone()],
                remote_stag: target.stag(),
                remote_to: 0,
            })
            .unwrap();
        let rd = ReadWr {
            wr_id: 3 * i + 1,
            local_stag: sink.stag(),
            local_to: 0,
            len: 64 * 1024,
            remote_stag: target.stag(),
            remote_to: 0,
        };
        p.cqp.post_read(rd).unwrap();
        p.cqp
            .post_send(SendWr {
                wr_id: 3 * i + 2,
                data: vec![Bytes::from(format!("c{i}"))],
                ..Default::default()
            })
            .unwrap();
        p.sqp
            .post_send(SendWr {
                wr_id: i,
                data: vec![Bytes::from(format!("s{i}"))],
                ..Default::default()
            })
            .unwrap();
        // Reap this round: 3 client send-queue completions, 1 client receive,
        // 1 server receive and 1 server send (one CQ per side).
        while c_sends < 3 * (i + 1) || c_recvs < i + 1 {
            let wc = next(p.cqp.send_cq()).await;
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            if wc.opcode == WcOpcode::Recv {
                assert_eq!(wc.buf.as_deref(), Some(format!("s{c_recvs}").as_bytes()));
                p.cqp
                    .post_recv(RecvWr {
                        wr_id: 0,
                        buf: wc.buf.unwrap_or_default(),
                    })
                    .unwrap();
                c_recvs += 1;
            } else {
                c_sends += 1;
            }
        }
        let mut server_sends = 0;
        while s_recvs < i + 1 || server_sends < 1 {
            let wc = next(p.sqp.send_cq()).await;
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            if wc.opcode == WcOpcode::Recv {
                assert_eq!(wc.buf.as_deref(), Some(format!("c{s_recvs}").as_bytes()));
                p.sqp
                    .post_recv(RecvWr {
                        wr_id: 0,
                        buf: wc.buf.unwrap_or_default(),
                    })
                    .unwrap();
                s_recvs += 1;
            } else {
                server_sends += 1;
            }
        }
    }
    assert_eq!(&sink.invalidate().buf[..], &block[..]);
    // Every Write and Read Response byte placed exactly once, whether a
    // socket read took it straight or with the FPDUs before it.
    let moved = ROUNDS * 64 * 1024;
    assert_eq!(placed_bytes(p.server.mr_table().stats()), moved);
    assert_eq!(placed_bytes(p.client.mr_table().stats()), moved);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_busy_connections_complete_everything() {
    let tasks: Vec<_> = (1..=4u8).map(|s| tokio::spawn(one_connection(s))).collect();
    for t in tasks {
        t.await.expect("connection task");
    }
}
