//! A side-by-side measurement, not a pass/fail timing test: echo over
//! RPC-over-RDMA on softrnic (iWARP over TCP on 127.0.0.1) against ONC RPC
//! over plain TCP, both sides in this process, reporting wall-clock
//! throughput and process CPU time per MiB moved. Run with
//! `cargo test -p rpcrdma --release --test throughput -- --ignored --nocapture`.
//! `THROUGHPUT_SCALE=n` runs n times as many calls; `THROUGHPUT_MULPDU=b`
//! sets softrnic's largest FPDU payload on both ends.
#![cfg(feature = "transport")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use oncrpc::client::ClientConfig;
use oncrpc::echo::{EchoClient, EchoService};
use oncrpc::tcp::{TcpClient, TcpConfig, TcpServer};
use oncrpc::{ClientTransport, Server};
use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaListener, RdmaServerConfig};
use softrnic::{SoftConfig, SoftDevice};

/// utime + stime of this process, from /proc/self/stat (Linux).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // Fields 14 and 15 of stat(5); `after` starts at field 3.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

struct Sample {
    mib_per_s: f64,
    cpu_ms_per_mib: f64,
}

async fn measure<T: ClientTransport>(client: &EchoClient<T>, size: usize, count: usize) -> Sample {
    let data = Bytes::from(vec![0x5au8; size]);
    // Warm up.
    assert_eq!(client.echo(data.clone()).await.unwrap(), data);
    let (t0, c0) = (Instant::now(), cpu_time());
    for _ in 0..count {
        let got = client.echo(data.clone()).await.unwrap();
        assert_eq!(got.len(), size);
    }
    let (wall, cpu) = (t0.elapsed(), cpu_time() - c0);
    // Each echo moves the payload both ways.
    let mib = (2 * size * count) as f64 / (1024.0 * 1024.0);
    Sample {
        mib_per_s: mib / wall.as_secs_f64(),
        cpu_ms_per_mib: cpu.as_secs_f64() * 1000.0 / mib,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run explicitly in release"]
async fn rdma_versus_tcp_echo_throughput() {
    let mut services = Server::new();
    services.register(EchoService::default());
    let services = Arc::new(services);
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();

    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<usize>().ok());
    let scale = env("THROUGHPUT_SCALE").unwrap_or(1).max(1);
    let mut soft = SoftConfig::default();
    if let Some(m) = env("THROUGHPUT_MULPDU") {
        soft.mulpdu = m;
        soft.large_mulpdu = m;
    }
    let sdev = SoftDevice::new(soft, 1);
    let cdev = SoftDevice::new(soft, 2);
    let listener = RdmaListener::bind(
        &sdev,
        &any,
        Arc::clone(&services),
        RdmaServerConfig::default(),
    )
    .await
    .unwrap();
    let addr = listener.local_addr();
    listener.spawn();
    let rdma = EchoClient::new(
        RdmaClient::connect(&cdev, &addr, RdmaClientConfig::default())
            .await
            .unwrap(),
    );

    let tcp_server = TcpServer::bind(any, Arc::clone(&services), TcpConfig::default())
        .await
        .unwrap();
    let taddr = tcp_server.local_addr().unwrap();
    tcp_server.spawn();
    let cfg = ClientConfig {
        max_in_flight: 64,
        retransmit: Default::default(),
    };
    let tcp = EchoClient::new(
        TcpClient::connect(taddr, 1, cfg, TcpConfig::default())
            .await
            .unwrap(),
    );

    for (size, count) in [(1 << 20, 64), (64 * 1024, 512), (1024, 4000)] {
        let count = count * scale;
        let r = measure(&rdma, size, count).await;
        let t = measure(&tcp, size, count).await;
        println!(
            "echo {size:>8} B x {count:>4}: rdma {:>8.1} MiB/s {:>6.2} cpu-ms/MiB | tcp {:>8.1} MiB/s {:>6.2} cpu-ms/MiB | rdma/tcp throughput {:.2}",
            r.mib_per_s,
            r.cpu_ms_per_mib,
            t.mib_per_s,
            t.cpu_ms_per_mib,
            r.mib_per_s / t.mib_per_s
        );
    }
}
