//! NFS WRITEs over RPC-over-RDMA on softrnic (real iWARP on 127.0.0.1):
//! the data goes out in Read chunks, which the server pulls by RDMA Read
//! while the client keeps sending calls and the server its replies. Two
//! writers to one file, 32 WRITEs in flight each, CRC off and on: the
//! file holds exactly the bytes written.

use std::net::SocketAddr;

use bytes::Bytes;
use nfs_client::{IoOptions, Mount};
use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaServerConfig};
use softrnic::{SoftConfig, SoftDevice};
use testkit::TempDir;

mod support;

async fn soft_mount(
    dir: &std::path::Path,
    crc: bool,
    io: IoOptions,
) -> Mount<RdmaClient<SoftDevice>> {
    let config = SoftConfig {
        crc,
        ..SoftConfig::default()
    };
    let (sdev, cdev) = (SoftDevice::new(config, 11), SoftDevice::new(config, 12));
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let server = (&sdev, &any, RdmaServerConfig::default());
    support::rdma_mount(server, (&cdev, RdmaClientConfig::default()), dir, io).await
}

async fn two_writers_to_one_file(crc: bool) {
    let dir = TempDir::new("rdma-writes");
    let io = IoOptions {
        in_flight: 32,
        block_size: Some(256 * 1024),
        ..IoOptions::default()
    };
    let m = soft_mount(dir.path(), crc, io).await;
    // Two halves, each ending in an odd piece (its XDR padding travels in
    // the chunk), written at once through two pipelined writers.
    const HALF: usize = (6 << 20) + 12_345;
    let data: Vec<u8> = (0..2 * HALF).map(|i| (i * 7 + i / 65_536) as u8).collect();
    let data = Bytes::from(data);
    let fh = m.create_file(m.root(), "f.bin", 0o644).await.unwrap();
    let write = |at: usize| {
        let (m, fh, part) = (&m, fh.clone(), data.slice(at..at + HALF));
        async move {
            let mut w = m.writer(&fh, at as u64);
            w.write(part).await.unwrap();
            w.finish().await.unwrap()
        }
    };
    let (a, b) = tokio::join!(write(0), write(HALF));
    assert_eq!(a.bytes + b.bytes, data.len() as u64);
    let on_disk = std::fs::read(dir.path().join("f.bin")).unwrap();
    assert_eq!(on_disk.len(), data.len());
    assert!(
        on_disk[..] == data[..],
        "the file differs from what was written"
    );
    let s = m.client().transport().stats();
    assert!(s.read_chunk_calls >= 2 * (HALF as u64 >> 18), "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_land_byte_exact_over_softrnic_without_crc() {
    two_writers_to_one_file(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_land_byte_exact_over_softrnic_with_crc() {
    two_writers_to_one_file(true).await;
}
