//! The same client over RPC-over-RDMA v1 (rpcrdma's `RdmaClient` on the
//! rnic loopback device) against the project's NFSv3 service: the
//! transport plugs in through `oncrpc::ClientTransport`, READ data comes
//! back in Write chunks at the position the client's reply hint names,
//! WRITE data goes out in Read chunks.

use testkit::TempDir;

use bytes::Bytes;
use nfs_client::{IoOptions, Mount};
use rnic::loopback::{LoopbackDevice, LoopbackNetwork};
use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaServerConfig};

mod support;

async fn rdma_mount(dir: &std::path::Path, io: IoOptions) -> Mount<RdmaClient<LoopbackDevice>> {
    rdma_mount_with(
        dir,
        io,
        RdmaServerConfig::default(),
        RdmaClientConfig::default(),
    )
    .await
}

async fn rdma_mount_with(
    dir: &std::path::Path,
    io: IoOptions,
    server_cfg: RdmaServerConfig,
    client_cfg: RdmaClientConfig,
) -> Mount<RdmaClient<LoopbackDevice>> {
    let net = LoopbackNetwork::new(7);
    let (sdev, cdev) = (net.device(), net.device());
    let server = (&sdev, &String::new(), server_cfg);
    support::rdma_mount(server, (&cdev, client_cfg), dir, io).await
}

#[tokio::test]
async fn file_round_trips_over_rpc_over_rdma_with_write_and_read_chunks() {
    let dir = TempDir::new("rdma");
    let io = IoOptions {
        in_flight: 8,
        block_size: Some(64 * 1024),
        ..IoOptions::default()
    };
    let m = rdma_mount(dir.path(), io).await;
    let data: Vec<u8> = (0..(2 << 20) + 12345)
        .map(|i| (i * 13 % 251) as u8)
        .collect();
    let (fh, stats) = m
        .write_file("f.bin", 0o644, Bytes::from(data.clone()))
        .await
        .unwrap();
    assert_eq!(stats.bytes, data.len() as u64);
    assert!(std::fs::read(dir.path().join("f.bin")).unwrap() == data);
    let back = m.read_file(&fh).await.unwrap();
    assert!(back == data, "READ over RDMA differs");
    let mut buf = vec![0u8; 100_000];
    let n = m.read_at(&fh, 1_000_000, &mut buf).await.unwrap();
    assert_eq!(n, buf.len());
    assert!(buf[..] == data[1_000_000..1_100_000]);
    let l = m
        .client()
        .symlink(m.root(), "ln", "f.bin", Default::default())
        .await
        .unwrap();
    let target = m.client().readlink(&l.obj.unwrap()).await.unwrap();
    assert_eq!(&target.data.0[..], b"f.bin");
    let s = m.client().transport().stats();
    assert!(s.write_chunk_replies >= 34, "{s:?}");
    assert!(s.read_chunk_calls >= 33, "{s:?}");
}

/// A mount's default options offer an 8 KiB inline size (RFC 8797 §4):
/// against a server that sends as much (`nfsrdma serve`'s default) a
/// 4 KiB READ's reply comes inline, with no Write chunk registered,
/// written and invalidated; against one that keeps 4 KiB (knfsd's
/// default) the same READ's data comes in a Write chunk, as before; a
/// 64 KiB READ uses a Write chunk either way.
#[tokio::test]
async fn four_kib_reads_come_inline_when_the_server_sends_8k() {
    let dir = TempDir::new("rdma-inline8k");
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 31 % 241) as u8).collect();
    std::fs::write(dir.path().join("f.bin"), &data).unwrap();
    let client_cfg = nfs_client::RdmaOptions::default().client_config();
    assert_eq!(client_cfg.inline_size, nfs_client::DEFAULT_INLINE_SIZE);
    let server_8k = RdmaServerConfig {
        inline_size: 8192,
        ..RdmaServerConfig::default()
    };
    for (server_cfg, inline) in [(server_8k, true), (RdmaServerConfig::default(), false)] {
        let m = rdma_mount_with(dir.path(), IoOptions::default(), server_cfg, client_cfg).await;
        let fh = m.client().lookup(m.root(), "f.bin").await.unwrap().object;
        let before = m.client().transport().stats();
        let r = m.client().read(&fh, 8192, 4096).await.unwrap();
        assert!(r.data.0[..] == data[8192..8192 + 4096]);
        let s = m.client().transport().stats();
        let chunked = s.write_chunk_replies - before.write_chunk_replies;
        assert_eq!(chunked, u64::from(!inline), "inline {inline}: {s:?}");
        let r = m.client().read(&fh, 65536, 65536).await.unwrap();
        assert!(r.data.0[..] == data[65536..131072]);
        let s2 = m.client().transport().stats();
        assert_eq!(s2.write_chunk_replies, s.write_chunk_replies + 1, "{s2:?}");
    }
}
