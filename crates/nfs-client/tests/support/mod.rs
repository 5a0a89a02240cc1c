//! What the RPC-over-RDMA mount tests share: the project's NFSv3 server
//! exporting a directory, served over one device and mounted as root from
//! another.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use nfs_client::{IoOptions, Mount, MountClient, Nfs3Client};
use oncrpc::msg::AuthSys;
use rnic::Device;
use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaListener, RdmaServerConfig};

/// The NFS server exporting `dir` served over `sdev` at `listen` with
/// `server_cfg`, and a client of `cdev` with `client_cfg` that mounts it
/// as root with `io`. MOUNT is a TCP-only program (RFC 8267 §6), but this
/// service table answers it on any transport, which keeps the tests
/// self-contained.
pub(crate) async fn rdma_mount<D: Device>(
    (sdev, listen, server_cfg): (&D, &D::Addr, RdmaServerConfig),
    (cdev, client_cfg): (&D, RdmaClientConfig),
    dir: &Path,
    io: IoOptions,
) -> Mount<RdmaClient<D>> {
    let fs = Arc::new(nfs_server::LocalFs::new(dir, false).unwrap());
    let export = Bytes::copy_from_slice(dir.to_str().unwrap().as_bytes());
    let server = nfs_server::rpc_server(
        fs,
        vec![export],
        Arc::new(Mutex::new(Vec::new())),
        IpAddr::V4(Ipv4Addr::LOCALHOST),
    );
    let listener = RdmaListener::bind(sdev, listen, Arc::new(server), server_cfg)
        .await
        .unwrap();
    let addr = listener.local_addr();
    listener.spawn();
    let rpc = RdmaClient::connect(cdev, &addr, client_cfg).await.unwrap();
    let cred = AuthSys {
        uid: 0,
        gid: 0,
        ..AuthSys::default()
    }
    .to_opaque_auth();
    let root = MountClient::new(rpc.clone(), cred.clone())
        .mnt(dir.to_str().unwrap())
        .await
        .unwrap()
        .fhandle;
    Mount::new(Nfs3Client::new(rpc, cred), root, io)
        .await
        .unwrap()
}
