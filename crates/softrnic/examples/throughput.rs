//! RDMA Write and RDMA Read throughput of softrnic over 127.0.0.1, both sides
//! in this process, against plain TCP moving the same bytes; prints MB/s,
//! process CPU time per MiB, and the placement counters.
//!
//! `cargo run --release -p softrnic --example throughput [MiB] [MULPDU]`

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rnic::{
    Access, CompletionQueue, ConnectRequest, Device, Listener, QpConfig, QueuePair, ReadWr, WriteWr,
};
use softrnic::{SoftConfig, SoftDevice};
use testkit::conformance::join;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CHUNK: usize = 1 << 20;
const DEPTH: u64 = 8;

/// User + system CPU time of this process (Linux `/proc/self/stat`, 100 Hz).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = after
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // Fields 14 and 15 of the file are the 12th and 13th after the name.
    let ticks = f.get(10).copied().unwrap_or(0) + f.get(11).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn report(name: &str, bytes: u64, wall: Duration, cpu: Duration) -> f64 {
    let mb = bytes as f64 / 1e6;
    let rate = mb / wall.as_secs_f64();
    let cpu_per_mib = cpu.as_secs_f64() * 1e3 / (bytes as f64 / CHUNK as f64);
    println!("{name:<12} {rate:>9.1} MB/s   {cpu_per_mib:>6.2} ms CPU per MiB");
    rate
}

async fn tcp_baseline(total: u64) -> (Duration, Duration) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (c0, t0) = (cpu_time(), Instant::now());
    let sender = tokio::spawn(async move {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let buf = vec![7u8; CHUNK];
        for _ in 0..total / CHUNK as u64 {
            s.write_all(&buf).await.unwrap();
        }
    });
    let (mut r, _) = l.accept().await.unwrap();
    let mut sink = vec![0u8; CHUNK];
    let mut got = 0u64;
    while got < total {
        let n = r.read(&mut sink).await.unwrap();
        if n == 0 {
            break;
        }
        got += n as u64;
    }
    sender.await.unwrap();
    (t0.elapsed(), cpu_time() - c0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mib: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(512);
    let total = mib * CHUNK as u64;
    let mut cfg = SoftConfig::default();
    if let Some(m) = std::env::args().nth(2).and_then(|a| a.parse().ok()) {
        cfg.mulpdu = m;
        cfg.large_mulpdu = m;
    }
    let (client, server) = (SoftDevice::new(cfg, 1), SoftDevice::new(cfg, 2));
    let (cpd, spd) = (client.alloc_pd(), server.alloc_pd());
    let mut l = server
        .listen(&SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = l.local_addr();
    let (c, s) = join(
        client.connect(&cpd, &addr, QpConfig::new(CompletionQueue::new(256))),
        async {
            l.accept_request()
                .await
                .unwrap()
                .accept(&spd, QpConfig::new(CompletionQueue::new(256)))
                .await
        },
    )
    .await;
    let (cqp, _sqp) = (c.unwrap().qp, s.unwrap());
    let target = spd
        .register(
            BytesMut::zeroed(CHUNK),
            Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let sink = cpd
        .register(BytesMut::zeroed(CHUNK), Access::LOCAL_WRITE)
        .unwrap();
    let data = Bytes::from(vec![0x5au8; CHUNK]);
    let n = total / CHUNK as u64;

    let (c0, t0) = (cpu_time(), Instant::now());
    let mut posted = 0;
    for done in 0..n {
        while posted < n && posted < done + DEPTH {
            let wr = WriteWr {
                wr_id: posted,
                data: vec![data.clone()],
                remote_stag: target.stag(),
                remote_to: 0,
            };
            cqp.post_write(wr).unwrap();
            posted += 1;
        }
        assert!(cqp.send_cq().next().await.unwrap().status.is_success());
    }
    // A Read after the Writes returns only once every Write was placed.
    let rd = ReadWr {
        wr_id: 0,
        local_stag: sink.stag(),
        local_to: 0,
        len: 1,
        remote_stag: target.stag(),
        remote_to: 0,
    };
    cqp.post_read(rd).unwrap();
    assert!(cqp.send_cq().next().await.unwrap().status.is_success());
    let write = (t0.elapsed(), cpu_time() - c0);

    let (c0, t0) = (cpu_time(), Instant::now());
    let mut posted = 0;
    for done in 0..n {
        while posted < n && posted < done + DEPTH {
            let rd = ReadWr {
                wr_id: posted,
                local_stag: sink.stag(),
                local_to: 0,
                len: CHUNK as u32,
                remote_stag: target.stag(),
                remote_to: 0,
            };
            cqp.post_read(rd).unwrap();
            posted += 1;
        }
        assert!(cqp.send_cq().next().await.unwrap().status.is_success());
    }
    let read = (t0.elapsed(), cpu_time() - c0);
    let tcp = tcp_baseline(total).await;

    println!(
        "{mib} MiB in 1 MiB operations, {DEPTH} outstanding, MULPDU {}, CRC off",
        cfg.mulpdu
    );
    let w = report("RDMA Write", total, write.0, write.1);
    let r = report("RDMA Read", total, read.0, read.1);
    let t = report("plain TCP", total, tcp.0, tcp.1);
    println!("ratio vs TCP: write {:.2}, read {:.2}", w / t, r / t);
    let (ss, cs) = (server.mr_table().stats(), client.mr_table().stats());
    println!(
        "placed directly: {} B (server) + {} B (client); staging copies: {} B",
        ss.bytes_placed_direct,
        cs.bytes_placed_direct,
        ss.bytes_copied_staging + cs.bytes_copied_staging
    );
}
