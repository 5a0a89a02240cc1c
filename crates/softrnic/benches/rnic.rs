//! The RNIC benchmark (issue 3, item 6): softrnic against a plain TCP socket
//! doing the same transfer, both over 127.0.0.1 in one run.
//!
//! The two sides run on two threads, each with its own single-threaded tokio
//! runtime (two "hosts" sharing one kernel), so the CPU time of each side is
//! that thread's run time (`/proc/self/task/<tid>/schedstat`, nanoseconds).
//!
//! - RDMA Write vs a TCP stream of the same messages (the sender finishes when
//!   the receiver has every byte: a 1-byte RDMA Read / a 1-byte TCP ack);
//! - RDMA Read vs TCP request/response (an 8-byte request, the message back);
//!   both with `DEPTH` operations outstanding;
//! - Send/Receive ping-pong vs TCP ping-pong (`TCP_NODELAY`), median round
//!   trip.
//!
//! `cargo bench -p softrnic --bench rnic -- [MiB per point] [repetitions] [ping|bulk]`

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rnic::{
    Access, CompletionQueue, ConnectRequest, Device, Listener, QpConfig, QueuePair, ReadWr, RecvWr,
    SendWr, Stag, WriteWr,
};
use softrnic::{SoftConfig, SoftDevice, SoftQp};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const SIZES: [usize; 5] = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20];
const DEPTH: u64 = 8;
const PING_SIZES: [usize; 2] = [64, 4096];
const PINGS: usize = 2000;
const GIB: f64 = (1u64 << 30) as f64;

/// The kernel's thread id of the calling thread.
fn tid() -> String {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default()
}

/// Run time of thread `tid` of this process, from the scheduler statistics.
fn thread_cpu(tid: &str) -> Duration {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).unwrap_or_default();
    let ns = s
        .split_whitespace()
        .next()
        .and_then(|x| x.parse().ok())
        .unwrap_or(0);
    Duration::from_nanos(ns)
}

/// Wall time and the CPU time of each side.
#[derive(Clone, Copy, Debug)]
struct Sample {
    wall: Duration,
    a: Duration,
    b: Duration,
}

struct Clocks {
    a: String,
    b: String,
}

impl Clocks {
    async fn measure<F: std::future::Future<Output = ()>>(&self, f: F) -> Sample {
        let (a0, b0, t0) = (thread_cpu(&self.a), thread_cpu(&self.b), Instant::now());
        f.await;
        Sample {
            wall: t0.elapsed(),
            a: thread_cpu(&self.a) - a0,
            b: thread_cpu(&self.b) - b0,
        }
    }
}

/// What the peer thread (side B) gives side A.
struct PeerInfo {
    rdma: SocketAddr,
    tcp: SocketAddr,
    tid: String,
}

/// Side B: accepts one RDMA connection (exposing a region, echoing Sends)
/// and serves TCP connections by their first byte: `w` sink, `r`
/// request/response, `p` ping-pong.
fn peer(cfg: SoftConfig, max: usize, info: mpsc::Sender<(PeerInfo, Stag)>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let dev = SoftDevice::new(cfg, 2);
        let pd = dev.alloc_pd();
        let mut l = dev
            .listen(&SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("listen");
        let tcp = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let region = pd
            .register(
                BytesMut::zeroed(max),
                Access::REMOTE_WRITE | Access::REMOTE_READ,
            )
            .expect("register");
        let p = PeerInfo {
            rdma: l.local_addr(),
            tcp: tcp.local_addr().expect("addr"),
            tid: tid(),
        };
        info.send((p, region.stag())).expect("info");
        tokio::spawn(async move {
            while let Ok((s, _)) = tcp.accept().await {
                tokio::spawn(tcp_peer(s));
            }
        });
        let (scq, rcq) = (CompletionQueue::new(1024), CompletionQueue::new(1024));
        let mut qc = QpConfig::new(scq.clone());
        qc.recv_cq = rcq.clone();
        qc.max_recv_wr = 64;
        qc.initial_recvs = (0..16)
            .map(|i| RecvWr {
                wr_id: i,
                buf: BytesMut::with_capacity(max),
            })
            .collect();
        let req = l.accept_request().await.expect("request");
        let qp = req.accept(&pd, qc).await.expect("accept");
        // Echo every Send back; stop when the receives are flushed.
        while let Ok(wc) = rcq.next().await {
            if !wc.status.is_success() {
                break;
            }
            let mut buf = wc.buf.unwrap_or_default();
            let echo = Bytes::copy_from_slice(&buf);
            if qp
                .post_send(SendWr {
                    wr_id: wc.wr_id,
                    data: vec![echo],
                    ..SendWr::default()
                })
                .is_err()
            {
                break;
            }
            buf.clear();
            let _ = qp.post_recv(RecvWr {
                wr_id: wc.wr_id,
                buf,
            });
            while let Ok(Some(_)) = scq.poll() {}
        }
        drop(region);
    });
}

async fn tcp_peer(mut s: TcpStream) {
    let _ = s.set_nodelay(true);
    let mut hdr = [0u8; 9];
    if s.read_exact(&mut hdr).await.is_err() {
        return;
    }
    let size = u64::from_be_bytes([
        hdr[1], hdr[2], hdr[3], hdr[4], hdr[5], hdr[6], hdr[7], hdr[8],
    ]) as usize;
    let mut buf = vec![0x5au8; size];
    match hdr[0] {
        b'w' => {
            let mut total = [0u8; 8];
            if s.read_exact(&mut total).await.is_err() {
                return;
            }
            let mut left = u64::from_be_bytes(total);
            while left > 0 {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => left = left.saturating_sub(n as u64),
                }
            }
            let _ = s.write_all(b"k").await;
        }
        b'r' => {
            let mut req = [0u8; 8];
            while s.read_exact(&mut req).await.is_ok() {
                if s.write_all(&buf).await.is_err() {
                    return;
                }
            }
        }
        _ => {
            while s.read_exact(&mut buf).await.is_ok() {
                if s.write_all(&buf).await.is_err() {
                    return;
                }
            }
        }
    }
}

async fn tcp_open(addr: SocketAddr, kind: u8, size: usize) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.set_nodelay(true).expect("nodelay");
    let mut hdr = vec![kind];
    hdr.extend_from_slice(&(size as u64).to_be_bytes());
    s.write_all(&hdr).await.expect("hello");
    s
}

async fn tcp_write(addr: SocketAddr, size: usize, n: u64) {
    let mut s = tcp_open(addr, b'w', size).await;
    s.write_all(&(size as u64 * n).to_be_bytes())
        .await
        .expect("total");
    let buf = vec![0x5au8; size];
    for _ in 0..n {
        s.write_all(&buf).await.expect("write");
    }
    let mut ack = [0u8; 1];
    s.read_exact(&mut ack).await.expect("ack");
}

async fn tcp_read(mut s: TcpStream, size: usize, n: u64) {
    let mut buf = vec![0u8; size];
    let mut posted = 0;
    for done in 0..n {
        while posted < n && posted < done + DEPTH {
            s.write_all(&posted.to_be_bytes()).await.expect("request");
            posted += 1;
        }
        s.read_exact(&mut buf).await.expect("response");
    }
}

async fn rdma_write(qp: &SoftQp, stag: Stag, sink: Stag, data: &Bytes, n: u64) {
    let mut posted = 0;
    for done in 0..n {
        while posted < n && posted < done + DEPTH {
            let wr = WriteWr {
                wr_id: posted,
                data: vec![data.clone()],
                remote_stag: stag,
                remote_to: 0,
            };
            qp.post_write(wr).expect("post write");
            posted += 1;
        }
        let wc = qp.send_cq().next().await.expect("cq");
        assert!(wc.status.is_success(), "{wc:?}");
    }
    // Ordered after the Writes: returns once every byte was placed.
    rdma_read(qp, stag, sink, 1, 1).await;
}

async fn rdma_read(qp: &SoftQp, stag: Stag, sink: Stag, size: usize, n: u64) {
    let mut posted = 0;
    for done in 0..n {
        while posted < n && posted < done + DEPTH {
            let rd = ReadWr {
                wr_id: posted,
                local_stag: sink,
                local_to: 0,
                len: size as u32,
                remote_stag: stag,
                remote_to: 0,
            };
            qp.post_read(rd).expect("post read");
            posted += 1;
        }
        let wc = qp.send_cq().next().await.expect("cq");
        assert!(wc.status.is_success(), "{wc:?}");
    }
}

/// Round trips of `size`-byte Sends echoed by the peer; returns each one.
async fn rdma_ping(qp: &SoftQp, size: usize, rounds: usize) -> Vec<Duration> {
    let msg = Bytes::from(vec![0x33u8; size]);
    let mut buf = BytesMut::with_capacity(size);
    let mut rtts = Vec::with_capacity(rounds);
    for i in 0..rounds {
        qp.post_recv(RecvWr { wr_id: 1, buf }).expect("post recv");
        let t0 = Instant::now();
        qp.post_send(SendWr {
            wr_id: i as u64,
            data: vec![msg.clone()],
            ..SendWr::default()
        })
        .expect("post send");
        let (mut got, mut back) = (0, None);
        while got < 2 {
            let wc = qp.send_cq().next().await.expect("cq");
            assert!(wc.status.is_success(), "{wc:?}");
            if wc.buf.is_some() {
                back = wc.buf;
            }
            got += 1;
        }
        rtts.push(t0.elapsed());
        buf = back.expect("receive");
        buf.clear();
    }
    rtts
}

async fn tcp_ping(addr: SocketAddr, size: usize, rounds: usize) -> Vec<Duration> {
    let mut s = tcp_open(addr, b'p', size).await;
    let msg = vec![0x33u8; size];
    let mut buf = vec![0u8; size];
    let mut rtts = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t0 = Instant::now();
        s.write_all(&msg).await.expect("ping");
        s.read_exact(&mut buf).await.expect("pong");
        rtts.push(t0.elapsed());
    }
    rtts
}

fn median<T: Copy + PartialOrd>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v[v.len() / 2]
}

/// Median rate (MB/s) and median CPU seconds per GiB of each side.
fn summarize(samples: &[Sample], bytes: u64) -> (f64, f64, f64) {
    let gib = bytes as f64 / GIB;
    let rate = median(
        samples
            .iter()
            .map(|s| bytes as f64 / 1e6 / s.wall.as_secs_f64())
            .collect(),
    );
    let a = median(samples.iter().map(|s| s.a.as_secs_f64() / gib).collect());
    let b = median(samples.iter().map(|s| s.b.as_secs_f64() / gib).collect());
    (rate, a, b)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    // `ping` or `bulk` runs only that part.
    let only = std::env::args()
        .skip(1)
        .find(|a| a == "ping" || a == "bulk");
    let (bulk, ping) = (
        only.as_deref() != Some("ping"),
        only.as_deref() != Some("bulk"),
    );
    let mib = args.first().copied().unwrap_or(128);
    let reps = args.get(1).copied().unwrap_or(3).max(1) as usize;
    let cfg = SoftConfig::default();
    let max = SIZES[SIZES.len() - 1];
    let (itx, irx) = mpsc::channel();
    let peer_thread = std::thread::spawn(move || peer(cfg, max, itx));
    let (info, stag) = irx.recv().expect("peer info");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let clocks = Clocks {
            a: tid(),
            b: info.tid.clone(),
        };
        let dev = SoftDevice::new(cfg, 1);
        let pd = dev.alloc_pd();
        let mut qc = QpConfig::new(CompletionQueue::new(1024));
        qc.max_send_wr = 64;
        let c = dev.connect(&pd, &info.rdma, qc).await;
        let qp = c.expect("connect").qp;
        let sink = pd
            .register(BytesMut::zeroed(max), Access::LOCAL_WRITE)
            .expect("register");
        let data = Bytes::from(vec![0x5au8; max]);
        println!(
            "softrnic vs plain TCP over 127.0.0.1, {mib} MiB per point, median of {reps}, \
             {DEPTH} outstanding, MULPDU {} ({} between softrnic peers), CRC {}; load average {}",
            cfg.mulpdu,
            cfg.large_mulpdu,
            if cfg.crc { "on" } else { "off" },
            loadavg()
        );
        println!(
            "{:<6} {:>5} | {:>8} {:>8} {:>5} | {:>6} {:>6} {:>6} {:>6}",
            "op", "size", "RDMA", "TCP", "ratio", "RDMA A", "RDMA B", "TCP A", "TCP B"
        );
        println!(
            "{:<6} {:>5} | {:>8} {:>8} {:>5} | {:>27}",
            "", "", "MB/s", "MB/s", "", "CPU s/GiB (A initiator, B peer)"
        );
        let ops: &[&str] = if bulk { &["write", "read"] } else { &[] };
        for &op in ops {
            for size in SIZES {
                let n = (mib << 20) / size as u64;
                let bytes = n * size as u64;
                let data = data.slice(..size);
                let (mut rs, mut ts) = (Vec::new(), Vec::new());
                for _ in 0..reps {
                    let r = if op == "write" {
                        clocks
                            .measure(rdma_write(&qp, stag, sink.stag(), &data, n))
                            .await
                    } else {
                        clocks
                            .measure(rdma_read(&qp, stag, sink.stag(), size, n))
                            .await
                    };
                    rs.push(r);
                    let t = if op == "write" {
                        clocks.measure(tcp_write(info.tcp, size, n)).await
                    } else {
                        let s = tcp_open(info.tcp, b'r', size).await;
                        clocks.measure(tcp_read(s, size, n)).await
                    };
                    ts.push(t);
                }
                let (r, ra, rb) = summarize(&rs, bytes);
                let (t, ta, tb) = summarize(&ts, bytes);
                println!(
                    "{op:<6} {:>4}K | {r:>8.0} {t:>8.0} {:>5.2} | {ra:>6.3} {rb:>6.3} {ta:>6.3} {tb:>6.3}",
                    size >> 10,
                    r / t
                );
            }
        }
        println!(
            "{:<6} {:>5} | {:>8} {:>8} {:>5} | median round trip, {PINGS} rounds",
            "ping", "size", "RDMA us", "TCP us", "ratio"
        );
        let pings: &[usize] = if ping { &PING_SIZES } else { &[] };
        for &size in pings {
            let (mut r, mut t) = (Vec::new(), Vec::new());
            for _ in 0..reps {
                r.push(median(rdma_ping(&qp, size, PINGS).await).as_secs_f64() * 1e6);
                t.push(median(tcp_ping(info.tcp, size, PINGS).await).as_secs_f64() * 1e6);
            }
            let (r, t) = (median(r), median(t));
            println!(
                "{:<6} {:>5} | {r:>8.1} {t:>8.1} {:>5.2} |",
                "send",
                size,
                r / t
            );
        }
        let st = dev.mr_table().stats();
        println!(
            "placed directly (initiator): {} B; staging copies: {} B; load average {}",
            st.bytes_placed_direct,
            st.bytes_copied_staging,
            loadavg()
        );
        qp.disconnect();
    });
    // The peer thread ends with the process.
    drop(peer_thread);
}
