//! Call latency over RPC-over-RDMA on softrnic (iWARP over TCP on
//! 127.0.0.1), one call in flight, printed as a table of median and p99
//! microseconds:
//!
//! - GETATTR- and LOOKUP-sized calls (~100-byte arguments, 120- and
//!   250-byte replies) at version 1 with 1024-byte inline thresholds and
//!   at version 2 with 4096-byte thresholds, and a 2 KiB (READDIR-sized)
//!   reply that needs a reply chunk only under the smaller threshold;
//! - 8, 16 and 32 KiB READ-like calls whose data comes back in a write
//!   chunk, with remote invalidation (Send With Invalidate) on and off.
//!
//! Run with `cargo run -p rpcrdma --release --example latency [iterations]`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use oncrpc::client::DdpReplyHint;
use oncrpc::msg::OpaqueAuth;
use oncrpc::{ClientTransport, ReplyHint, RpcCall, Server};
use rpcrdma::plan::Version;
use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaListener, RdmaServerConfig};
use softrnic::{SoftConfig, SoftDevice};
use xdr::{Decoder, Encoder, XdrBuf};

const PROGRAM: u32 = 0x2000_0300;
/// Arguments: reply length, padding bytes. Reply: opaque of that length,
/// inline (a metadata reply such as GETATTR's attributes).
const PROC_SIZED: u32 = 1;
/// Arguments: count, padding bytes. Reply: count, then `count` bytes of
/// DDP-eligible data (READ).
const PROC_READ: u32 = 2;

struct Bench {
    file: Bytes,
}

impl oncrpc::RpcService for Bench {
    fn program(&self) -> u32 {
        PROGRAM
    }

    fn versions(&self) -> std::ops::RangeInclusive<u32> {
        1..=1
    }

    async fn call(
        &self,
        ctx: oncrpc::CallContext,
        args: Bytes,
    ) -> Result<XdrBuf, oncrpc::ServiceError> {
        let mut dec = Decoder::from_bytes(&args);
        let n = dec.u32()? as usize;
        dec.opaque(1024)?;
        dec.finish()?;
        let mut out = XdrBuf::new();
        match ctx.proc_ {
            PROC_SIZED => out.put_opaque(&vec![0x42; n.min(4096)]),
            PROC_READ => {
                let n = n.min(self.file.len());
                out.put_u32(n as u32);
                out.put_bulk(self.file.slice(..n), true);
            }
            _ => return Err(oncrpc::ServiceError::ProcUnavail),
        }
        Ok(out)
    }
}

fn call(proc_: u32, n: usize) -> RpcCall {
    let mut args = XdrBuf::new();
    args.put_u32(n as u32);
    // ~100 bytes of arguments, as a GETATTR or LOOKUP with its file handle.
    args.put_opaque(&[7u8; 92]);
    let ddp = (proc_ == PROC_READ).then_some(DdpReplyHint {
        position: 8,
        max_len: n,
    });
    RpcCall {
        prog: PROGRAM,
        vers: 1,
        proc_,
        cred: OpaqueAuth::NONE,
        args,
        reply_hint: ReplyHint {
            max_reply_len: 128 + n,
            ddp,
        },
    }
}

/// Median and 99th percentile in microseconds.
fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort_unstable();
    let at = |q: f64| {
        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
        v.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    (at(0.5), at(0.99))
}

async fn measure<T: ClientTransport>(client: &T, proc_: u32, n: usize, iters: usize) -> (f64, f64) {
    for _ in 0..iters / 10 + 1 {
        client.call(call(proc_, n)).await.expect("warm-up call");
    }
    let mut lat = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        let r = client.call(call(proc_, n)).await.expect("call");
        lat.push(t.elapsed());
        assert!(r.len() >= n, "short reply");
    }
    percentiles(lat)
}

struct Setup {
    label: &'static str,
    version: Version,
    inline: u32,
    send_with_invalidate: bool,
}

async fn connect(server: &Arc<Server>, s: &Setup, seed: u64) -> RdmaClient<SoftDevice> {
    let any: SocketAddr = "127.0.0.1:0".parse().expect("address");
    let sdev = SoftDevice::new(SoftConfig::default(), seed);
    let cdev = SoftDevice::new(SoftConfig::default(), seed + 1);
    let scfg = RdmaServerConfig {
        inline_size: s.inline,
        ..RdmaServerConfig::default()
    };
    let listener = RdmaListener::bind(&sdev, &any, Arc::clone(server), scfg)
        .await
        .expect("listen");
    let addr = listener.local_addr();
    listener.spawn();
    let ccfg = RdmaClientConfig {
        inline_size: s.inline,
        version: s.version,
        send_with_invalidate_ok: s.send_with_invalidate,
        ..RdmaClientConfig::default()
    };
    let client = RdmaClient::connect(&cdev, &addr, ccfg)
        .await
        .expect("connect");
    // Let the grant (and, in version 2, the properties exchange) settle.
    client.call(call(PROC_SIZED, 8)).await.expect("first call");
    assert_eq!(client.version(), s.version);
    client
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let iters: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let mut services = Server::new();
    services.register(Bench {
        file: Bytes::from(vec![0x5a; 32 * 1024]),
    });
    let server = Arc::new(services);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "softrnic on 127.0.0.1, one call in flight, {iters} calls per row; load average {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!();
    println!("| call | setup | median µs | p99 µs | conveyance |");
    println!("|---|---|---:|---:|---|");
    let small = [
        Setup {
            label: "v1, 1024-byte inline",
            version: Version::V1,
            inline: 1024,
            send_with_invalidate: true,
        },
        Setup {
            label: "v2, 4096-byte inline",
            version: Version::V2,
            inline: 4096,
            send_with_invalidate: true,
        },
    ];
    let mut seed = 10;
    for s in &small {
        let client = connect(&server, s, seed).await;
        seed += 2;
        for (name, reply) in [
            ("GETATTR-sized (120 B reply)", 112),
            ("LOOKUP-sized (250 B reply)", 244),
            ("READDIR-sized (2 KiB reply)", 2040),
        ] {
            let before = client.stats();
            let (p50, p99) = measure(&client, PROC_SIZED, reply, iters).await;
            let after = client.stats();
            let how = if after.reply_chunk_replies > before.reply_chunk_replies {
                "reply chunk"
            } else {
                "inline"
            };
            println!("| {name} | {} | {p50:.1} | {p99:.1} | {how} |", s.label);
        }
        client.close();
    }
    let reads = [
        Setup {
            label: "v1, 4096 inline, Send With Invalidate",
            version: Version::V1,
            inline: 4096,
            send_with_invalidate: true,
        },
        Setup {
            label: "v1, 4096 inline, no remote invalidation",
            version: Version::V1,
            inline: 4096,
            send_with_invalidate: false,
        },
        Setup {
            label: "v2, 4096 inline, Send With Invalidate",
            version: Version::V2,
            inline: 4096,
            send_with_invalidate: true,
        },
        Setup {
            label: "v2, 4096 inline, no remote invalidation",
            version: Version::V2,
            inline: 4096,
            send_with_invalidate: false,
        },
    ];
    for s in &reads {
        let client = connect(&server, s, seed).await;
        seed += 2;
        for kib in [8usize, 16, 32] {
            let before = client.stats();
            let (p50, p99) = measure(&client, PROC_READ, kib * 1024, iters).await;
            let after = client.stats();
            let inv = after.remote_invalidations - before.remote_invalidations;
            let placed = after.write_chunk_replies - before.write_chunk_replies;
            println!(
                "| READ {kib} KiB | {} | {p50:.1} | {p99:.1} | write chunk {placed}/{}, remotely invalidated {inv} |",
                s.label,
                iters + iters / 10 + 1
            );
        }
        client.close();
    }
}
