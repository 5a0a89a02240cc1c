//! The NFSv4.1 client ([`nfs_client::v4::Session`]) against the project's
//! server, over TCP (`nfs_server::start` on an ephemeral port) and over
//! RPC-over-RDMA v1 (`nfs_server::rpc_server` behind an `RdmaListener` on
//! the rnic loopback device): session setup and teardown, mkdir, create,
//! 3 MiB written UNSTABLE + COMMIT and read back byte-exact, readdir,
//! rename, remove and NOENT.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex};
use testkit::TempDir;

use bytes::Bytes;
use nfs_client::nfs::v4::{NfsFtype4, Nfsstat4, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_DENY_NONE};
use nfs_client::v4::{OpenOptions, Session, SessionOptions};
use oncrpc::client::{ClientConfig, ClientTransport};
use oncrpc::msg::{AuthSys, OpaqueAuth};
use oncrpc::tcp::{TcpClient, TcpConfig};
use rnic::loopback::{LoopbackDevice, LoopbackNetwork};
use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaListener, RdmaServerConfig};

/// The owner of the export, so the server lets us create in it.
fn cred(dir: &Path) -> OpaqueAuth {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(dir).unwrap();
    AuthSys {
        uid: md.uid(),
        gid: md.gid(),
        gids: vec![md.gid()],
        ..AuthSys::default()
    }
    .to_opaque_auth()
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

/// Everything the task asks for, on any transport.
async fn exercise<T: ClientTransport>(s: &Session<T>, dir: &Path) {
    // The export is at its path in the server's namespace (RFC 8881
    // §7.3); "/" is the pseudo file system's root, which lists the way
    // down to it.
    let top = s.mount("/").await.unwrap();
    let first = dir
        .components()
        .nth(1)
        .unwrap()
        .as_os_str()
        .as_encoded_bytes();
    let listed: Vec<_> = s
        .readdir(&top)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(listed.iter().any(|n| n[..] == *first), "{listed:?}");
    let root = s.mount(dir.to_str().unwrap()).await.unwrap();
    assert_eq!(s.getattr(&root).await.unwrap().ftype, NfsFtype4::NF4DIR);
    let e = s.mkdir(&top, "nope", 0o755).await.unwrap_err();
    assert_eq!(e.nfs_status(), Some(Nfsstat4::NFS4ERR_ROFS));

    let d = s.mkdir(&root, "sub", 0o755).await.unwrap();
    assert!(dir.join("sub").is_dir());
    let a = s.getattr(&d).await.unwrap();
    assert_eq!(a.ftype, NfsFtype4::NF4DIR);
    assert_eq!(a.mode.map(|m| m & 0o777), Some(0o755));
    assert_eq!(s.lookup_path_at(&root, "/sub").await.unwrap(), d);
    // Deeper than one COMPOUND's operations: resolved in several.
    let deep: Vec<String> = (0..40).map(|i| format!("l{i}")).collect();
    std::fs::create_dir_all(dir.join("sub").join(deep.join("/"))).unwrap();
    let leaf = s
        .lookup_path_at(&root, &format!("sub//{}/", deep.join("/")))
        .await
        .unwrap();
    let up = s
        .lookup_path(&format!("{}/sub/{}", dir.display(), deep[..39].join("/")))
        .await
        .unwrap();
    assert_eq!(s.lookup(&up, "l39").await.unwrap(), leaf);
    assert!(s.fore_channel().maxoperations < 40);
    std::fs::remove_dir_all(dir.join("sub/l0")).unwrap();

    let create = OpenOptions {
        create_mode: Some(0o644),
        ..OpenOptions::default()
    };
    let f = s.open(&d, "data.bin", create).await.unwrap();
    let data = pattern(3 << 20);
    let t = std::time::Instant::now();
    s.write_all(&f, 0, &data).await.unwrap();
    let wrote = t.elapsed();
    s.close_file(f).await.unwrap();
    assert_eq!(std::fs::read(dir.join("sub/data.bin")).unwrap(), data);

    let ro = OpenOptions {
        share_access: OPEN4_SHARE_ACCESS_READ,
        share_deny: OPEN4_SHARE_DENY_NONE,
        create_mode: None,
    };
    let f = s.open(&d, "data.bin", ro).await.unwrap();
    let t = std::time::Instant::now();
    let back = s.read_all(&f).await.unwrap();
    eprintln!(
        "{} slots: 3 MiB written in {wrote:?}, read in {:?}",
        s.slot_count(),
        t.elapsed()
    );
    assert!(back == data, "read back {} bytes, differ", back.len());
    let buf = bytes::BytesMut::with_capacity(128 << 10);
    let (mid, eof) = s.read_into(&f, 4096, 100_000, Some(buf)).await.unwrap();
    assert!(!eof);
    assert_eq!(&mid[..], &data[4096..104_096]);
    let (tail, eof) = s.read(&f, (3 << 20) - 5, 100).await.unwrap();
    assert_eq!(&tail[..], &data[data.len() - 5..]);
    assert!(eof);
    let a = s.getattr(&f.fh).await.unwrap();
    assert_eq!(a.ftype, NfsFtype4::NF4REG);
    assert_eq!(a.size, 3 << 20);
    assert_eq!(a.mode.map(|m| m & 0o777), Some(0o644));
    assert!(a.fileid.is_some() && a.mtime.is_some() && a.ctime.is_some());
    s.close_file(f).await.unwrap();

    for i in 0..40 {
        let f = s.open(&d, &format!("n{i:02}"), create).await.unwrap();
        s.close_file(f).await.unwrap();
    }
    let mut names: Vec<Bytes> = s
        .readdir(&d)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    names.sort();
    assert_eq!(names.len(), 41);
    assert_eq!(&names[0][..], b"data.bin");
    assert_eq!(&names[40][..], b"n39");

    s.rename(&d, "data.bin", &root, "moved.bin").await.unwrap();
    assert!(dir.join("moved.bin").is_file());
    let e = s.lookup(&d, "data.bin").await.unwrap_err();
    assert!(e.is_not_found(), "{e}");
    let e = s.lookup_path_at(&root, "/sub/data.bin").await.unwrap_err();
    assert_eq!(e.nfs_status(), Some(Nfsstat4::NFS4ERR_NOENT));
    let e = s.open(&root, "absent", ro).await.unwrap_err();
    assert!(e.is_not_found(), "{e}");

    let e = s.remove(&root, "sub").await.unwrap_err();
    assert_eq!(e.nfs_status(), Some(Nfsstat4::NFS4ERR_NOTEMPTY));
    for i in 0..40 {
        s.remove(&d, &format!("n{i:02}")).await.unwrap();
    }
    s.remove(&root, "sub").await.unwrap();
    s.remove(&root, "moved.bin").await.unwrap();
    assert!(s.readdir(&root).await.unwrap().is_empty());
    let e = s.remove(&root, "moved.bin").await.unwrap_err();
    assert!(e.is_not_found(), "{e}");
}

#[tokio::test]
async fn session_file_operations_work_over_tcp() {
    let dir = TempDir::new("tcp");
    let mut config = nfs_server::ServerConfig::new(dir.path());
    // The tests run as root and act as the export's owner.
    config.set_squash(nfs_server::exports::Squash::None);
    config.nfs_addr = SocketAddr::from(([127, 0, 0, 1], 0));
    config.mount_addr = None;
    let server = nfs_server::start(config).await.unwrap();
    let rpc = TcpClient::connect(
        server.nfs_addr(),
        11,
        ClientConfig::default(),
        TcpConfig::default(),
    )
    .await
    .unwrap();
    let s = Session::establish(rpc, cred(dir.path()), &SessionOptions::default())
        .await
        .unwrap();
    assert!(s.fore_channel().maxrequests >= 1);
    exercise(&s, dir.path()).await;
    s.close().await.unwrap();
}

async fn rdma_session(dir: &Path) -> Session<RdmaClient<LoopbackDevice>> {
    let fs = Arc::new(nfs_server::LocalFs::new(dir, false).unwrap());
    let server = nfs_server::rpc_server(
        fs,
        vec![],
        Arc::new(Mutex::new(Vec::new())),
        IpAddr::V4(Ipv4Addr::LOCALHOST),
    );
    let net = LoopbackNetwork::new(11);
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
    let config = RdmaClientConfig {
        max_requests: 8,
        ..RdmaClientConfig::default()
    };
    let rpc = RdmaClient::connect(&cdev, &addr, config).await.unwrap();
    let opts = SessionOptions::for_rdma(&config);
    assert_eq!(opts.slots, 8);
    let s = Session::establish(rpc, cred(dir), &opts).await.unwrap();
    assert!(s.slot_count() as u32 <= opts.slots);
    s
}

#[tokio::test]
async fn session_file_operations_work_over_rpc_over_rdma_with_chunks() {
    let dir = TempDir::new("rdma");
    let s = rdma_session(dir.path()).await;
    exercise(&s, dir.path()).await;
    let st = s.transport().stats();
    // 3 MiB moves in WRITEs by Read chunk and READs by Write chunk.
    assert!(st.read_chunk_calls >= 3, "{st:?}");
    assert!(st.write_chunk_replies >= 3, "{st:?}");
    // Write-chunk data lands in the reply buffer in place, with no copy.
    assert!(st.in_place_replies >= 1, "{st:?}");
    assert_eq!(st.error_replies, 0, "{st:?}");
    s.close().await.unwrap();
}

#[tokio::test]
async fn session_closes_and_a_new_one_opens_on_the_same_connection() {
    let dir = TempDir::new("close");
    let s = rdma_session(dir.path()).await;
    let id = s.sessionid();
    let rpc = s.transport().clone();
    s.close().await.unwrap();
    // DESTROY_SESSION and DESTROY_CLIENTID both succeeded; a new client id
    // and session on the same connection work.
    let s2 = Session::establish(rpc, cred(dir.path()), &SessionOptions::default())
        .await
        .unwrap();
    assert_ne!(s2.sessionid(), id);
    s2.lookup_path("/").await.unwrap();
    s2.close().await.unwrap();
}

#[tokio::test]
async fn session_file_operations_work_over_softrnic_with_rpc_over_rdma_v2() {
    let dir = TempDir::new("soft");
    let mut config = nfs_server::ServerConfig::new(dir.path());
    // The tests run as root and act as the export's owner.
    config.set_squash(nfs_server::exports::Squash::None);
    config.nfs_addr = SocketAddr::from(([127, 0, 0, 1], 0));
    config.mount_addr = None;
    let server = nfs_server::start(config).await.unwrap();
    let sdev = softrnic::SoftDevice::new(softrnic::SoftConfig::default(), 5);
    let listener = RdmaListener::bind(
        &sdev,
        &SocketAddr::from(([127, 0, 0, 1], 0)),
        server.rpc(),
        RdmaServerConfig::default(),
    )
    .await
    .unwrap();
    let port = listener.local_addr().port();
    listener.spawn();
    let opts = nfs_client::RdmaOptions {
        version: rpcrdma::plan::Version::V2,
        ..nfs_client::RdmaOptions::default()
    };
    let cdev = softrnic::SoftDevice::new(softrnic::SoftConfig::default(), 6);
    let rpc = nfs_client::connect_rdma_transport(&cdev, "127.0.0.1", port, &opts)
        .await
        .unwrap();
    let s = Session::establish(
        rpc,
        cred(dir.path()),
        &SessionOptions::for_rdma(&opts.client_config()),
    )
    .await
    .unwrap();
    exercise(&s, dir.path()).await;
    let st = s.transport().stats();
    assert_eq!(s.transport().version(), rpcrdma::plan::Version::V2);
    assert!(st.read_chunk_calls >= 3, "{st:?}");
    assert!(st.write_chunk_replies >= 3, "{st:?}");
    s.close().await.unwrap();
}
