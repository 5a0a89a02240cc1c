//! Interop check against a real RPC-over-RDMA server (Linux knfsd over siw
//! in the kpeer VM): NFS NULL calls through every call and reply
//! conveyance this client can produce.
//!
//! ```text
//! cargo run -p rpcrdma --example knfsd_interop -- 127.0.0.1:20049 [crc] [v2]
//! ```
//!
//! With `v2` the client opens with RDMA2_CONNPROP; a version 1 server
//! answers ERR_VERS and the client falls back (v2 draft §7.2).
//!
//! knfsd ignores the arguments of NULL, so a NULL call can carry a large
//! argument: as a DDP-eligible item it travels in a read chunk, as a plain
//! one in a Position-Zero Read chunk; knfsd pulls both by RDMA Read. A
//! reply hint larger than the inline threshold makes the client offer a
//! reply chunk, which svcrdma always uses (RDMA_NOMSG).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use oncrpc::msg::OpaqueAuth;
use oncrpc::{ClientTransport, ReplyHint, RpcCall};
use rpcrdma::transport::{RdmaClient, RdmaClientConfig};
use softrnic::{SoftConfig, SoftDevice};
use xdr::{Encoder, XdrBuf};

const NFS_PROGRAM: u32 = 100_003;

fn null(vers: u32, args: XdrBuf, max_reply_len: usize) -> RpcCall {
    RpcCall {
        prog: NFS_PROGRAM,
        vers,
        proc_: 0,
        cred: OpaqueAuth::NONE,
        args,
        reply_hint: ReplyHint {
            max_reply_len,
            ddp: None,
        },
    }
}

fn bulk(n: usize, ddp: bool) -> XdrBuf {
    let mut b = XdrBuf::new();
    b.put_bulk(Bytes::from(vec![0x42u8; n]), ddp);
    b
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:20049".into())
        .parse()
        .expect("address");
    let flags: Vec<String> = args.collect();
    let crc = flags.iter().any(|f| f == "crc");
    let version = if flags.iter().any(|f| f == "v2") {
        rpcrdma::plan::Version::V2
    } else {
        rpcrdma::plan::Version::V1
    };
    let dev = SoftDevice::new(
        SoftConfig {
            crc,
            ..SoftConfig::default()
        },
        0x5eed,
    );
    let config = RdmaClientConfig {
        version,
        ..RdmaClientConfig::default()
    };
    let client = RdmaClient::connect(&dev, &addr, config)
        .await
        .expect("connect");
    // kpeer README bug B: siw may miss an FPDU sent right after its MPA
    // Reply.
    tokio::time::sleep(Duration::from_millis(300)).await;
    println!("connected, thresholds {:?}", client.thresholds());
    let cases = [
        ("v3 NULL inline", null(3, XdrBuf::new(), 64)),
        ("v4 NULL inline", null(4, XdrBuf::new(), 64)),
        (
            "v3 NULL, reply chunk offered",
            null(3, XdrBuf::new(), 65_536),
        ),
        (
            "v3 NULL, 100 KiB read chunk",
            null(3, bulk(102_400, true), 64),
        ),
        (
            "v3 NULL, 8 KiB position-zero",
            null(3, bulk(8192, false), 64),
        ),
    ];
    let mut failed = 0;
    for (name, call) in cases {
        let r = tokio::time::timeout(Duration::from_secs(30), client.call(call)).await;
        match r {
            Ok(Ok(results)) if results.is_empty() => println!("PASS {name}"),
            Ok(Ok(results)) => {
                failed += 1;
                println!("FAIL {name}: {} result bytes", results.len())
            }
            Ok(Err(e)) => {
                failed += 1;
                println!("FAIL {name}: {e}")
            }
            Err(_) => {
                failed += 1;
                println!("FAIL {name}: timeout")
            }
        }
    }
    println!("credits (granted, outstanding) {:?}", client.credits());
    println!("version now {:?}", client.version());
    println!("stats {:?}", client.stats());
    client.close();
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
