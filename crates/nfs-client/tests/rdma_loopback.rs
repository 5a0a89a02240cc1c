//! The same client over RPC-over-RDMA v1 (rpcrdma's `RdmaClient` on the
//! rnic loopback device) against the project's NFSv3 service: the
//! transport plugs in through `oncrpc::ClientTransport`, READ data comes
//! back in Write chunks at the position the client's reply hint names,
//! WRITE data goes out in Read chunks.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use testkit::TempDir;

use bytes::Bytes;
use nfs_client::{IoOptions, Mount, MountClient, Nfs3Client};
use oncrpc::msg::AuthSys;
use rnic::loopback::{LoopbackDevice, LoopbackNetwork};
use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaListener, RdmaServerConfig};

async fn rdma_mount(dir: &std::path::Path, io: IoOptions) -> Mount<RdmaClient<LoopbackDevice>> {
    let fs = Arc::new(nfs_server::LocalFs::new(dir, false).unwrap());
    let export = Bytes::copy_from_slice(dir.to_str().unwrap().as_bytes());
    let server = nfs_server::rpc_server(
        fs,
        vec![export],
        Arc::new(Mutex::new(Vec::new())),
        IpAddr::V4(Ipv4Addr::LOCALHOST),
    );
    let net = LoopbackNetwork::new(7);
    let (sdev, cdev) = (net.device(), net.device());
    let listener = RdmaListener::bind(
        &sdev,
        &String::new(),
        Arc::new(server),
        RdmaServerConfig::default(),
    )
    .await
    .unwrap();
    let addr = listener.local_addr();
    listener.spawn();
    let rpc = RdmaClient::connect(&cdev, &addr, RdmaClientConfig::default())
        .await
        .unwrap();
    let cred = AuthSys {
        uid: 0,
        gid: 0,
        ..AuthSys::default()
    }
    .to_opaque_auth();
    // MOUNT is a TCP-only program (RFC 8267 §6), but this service table
    // answers it on any transport, which keeps the test self-contained.
    let root = MountClient::new(rpc.clone(), cred.clone())
        .mnt(dir.to_str().unwrap())
        .await
        .unwrap()
        .fhandle;
    Mount::new(Nfs3Client::new(rpc, cred), root, io)
        .await
        .unwrap()
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
