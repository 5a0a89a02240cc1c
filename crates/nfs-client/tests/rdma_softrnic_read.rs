//! NFSv3 READ over RPC-over-RDMA on the software iWARP device (real TCP,
//! softrnic's receive path placing the server's RDMA Writes): the data of
//! every READ is byte-exact whatever the socket reads happen to cut, with
//! many READs in flight, with and without the MPA CRC, short at the end
//! of the file, and still intact while the caller holds it across later
//! calls (the Write chunk's buffer is the reply's, RFC 8166 §3.4.6).

use std::net::SocketAddr;

use nfs_client::{IoOptions, Mount};
use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaServerConfig};
use softrnic::{SoftConfig, SoftDevice};
use testkit::TempDir;

mod support;

async fn soft_mount(dir: &std::path::Path, crc: bool, seed: u64) -> Mount<RdmaClient<SoftDevice>> {
    let cfg = SoftConfig {
        crc,
        ..SoftConfig::default()
    };
    let (sdev, cdev) = (SoftDevice::new(cfg, seed), SoftDevice::new(cfg, seed + 1));
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let io = IoOptions {
        in_flight: 32,
        block_size: Some(256 * 1024),
        ..IoOptions::default()
    };
    let server = (&sdev, &any, RdmaServerConfig::default());
    support::rdma_mount(server, (&cdev, RdmaClientConfig::default()), dir, io).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_over_softrnic_are_byte_exact_in_flight_short_at_eof_and_held() {
    const LEN: usize = (5 << 20) + 12_345;
    for (crc, seed) in [(false, 60), (true, 70)] {
        let dir = TempDir::new("soft-read");
        let data: Vec<u8> = (0..LEN).map(|i| (i * 31 % 253) as u8).collect();
        std::fs::write(dir.path().join("f.bin"), &data).unwrap();
        let m = soft_mount(dir.path(), crc, seed).await;
        let fh = m.resolve("f.bin").await.unwrap().fh;

        // 32 READs of assorted sizes in flight at once, some crossing the
        // end of the file (short, eof) or starting past it (empty, eof).
        let mut calls = Vec::new();
        for i in 0..32u64 {
            let (off, count) = match i % 4 {
                0 => (i * 131_072, 1 << 20),
                1 => (i * 4_099, 262_144),
                2 => (LEN as u64 - 70_000 + i, 65_537),
                _ => (LEN as u64 + i, 4_096),
            };
            let c = m.client().clone();
            let fh = fh.clone();
            calls.push(tokio::spawn(async move {
                (off, count, c.read(&fh, off, count).await.unwrap())
            }));
        }
        let mut held = Vec::new();
        for c in calls {
            let (off, count, r) = c.await.unwrap();
            let start = (off as usize).min(LEN);
            let end = (start + count as usize).min(LEN);
            assert_eq!(r.count as usize, end - start, "crc {crc}: {off} {count}");
            assert_eq!(r.eof, end == LEN, "crc {crc}: {off} {count}");
            assert!(r.data.0[..] == data[start..end], "crc {crc}: {off} {count}");
            held.push((start, r.data.0));
        }
        // The whole file through the pipelined reader (256 KiB x 32).
        let back = m.read_file(&fh).await.unwrap();
        assert!(back == data, "crc {crc}: read_file differs");
        // What the caller held is still what was read.
        for (start, d) in &held {
            assert!(
                d[..] == data[*start..start + d.len()],
                "crc {crc}: held {start}"
            );
        }
        let s = m.client().transport().stats();
        assert!(s.write_chunk_replies >= 40, "crc {crc}: {s:?}");
    }
}
