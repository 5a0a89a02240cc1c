//! Connection loss in the middle of pipelined transfers: a proxy between
//! client and server cuts the connection once; oncrpc's TcpClient
//! reconnects and resends the calls in flight with their XIDs, and the
//! transfer completes byte-exact.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use testkit::TempDir;

use bytes::Bytes;
use nfs_client::{connect_tcp, IoOptions, TcpOptions, TcpTarget};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Default)]
struct ProxyStats {
    down_bytes: AtomicU64,
    up_bytes: AtomicU64,
    cut: AtomicBool,
    up_cut: AtomicBool,
    connections: AtomicUsize,
}

/// Forwards connections to `upstream`; the first time more than
/// `cut_after` bytes have gone server-to-client in total, and the first
/// time more than `up_cut_after` have gone client-to-server, the
/// connection carrying them is closed.
async fn proxy(
    upstream: SocketAddr,
    cut_after: u64,
    up_cut_after: u64,
) -> (SocketAddr, Arc<ProxyStats>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let stats = Arc::new(ProxyStats::default());
    let st = Arc::clone(&stats);
    tokio::spawn(async move {
        while let Ok((client, _)) = l.accept().await {
            st.connections.fetch_add(1, Ordering::SeqCst);
            let st = Arc::clone(&st);
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    return;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let up = async {
                    let mut buf = vec![0u8; 65536];
                    while let Ok(n) = cr.read(&mut buf).await {
                        if n == 0 || sw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        let total = st.up_bytes.fetch_add(n as u64, Ordering::SeqCst) + n as u64;
                        if total > up_cut_after && !st.up_cut.swap(true, Ordering::SeqCst) {
                            break;
                        }
                    }
                };
                let down = async {
                    let mut buf = vec![0u8; 65536];
                    while let Ok(n) = sr.read(&mut buf).await {
                        if n == 0 || cw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        let total = st.down_bytes.fetch_add(n as u64, Ordering::SeqCst) + n as u64;
                        if total > cut_after && !st.cut.swap(true, Ordering::SeqCst) {
                            break;
                        }
                    }
                };
                tokio::select! {
                    _ = up => {}
                    _ = down => {}
                }
            });
        }
    });
    (addr, stats)
}

#[tokio::test]
async fn pipelined_transfers_survive_a_connection_loss() {
    let dir = TempDir::new("reconnect");
    let data: Vec<u8> = (0..4 << 20).map(|i| (i * 29 % 253) as u8).collect();
    std::fs::write(dir.path().join("src.bin"), &data).unwrap();

    let mut cfg = nfs_server::ServerConfig::new(dir.path());

    // The tests run as root and act as the export's owner.

    cfg.set_squash(nfs_server::exports::Squash::None);
    cfg.nfs_addr = "127.0.0.1:0".parse().unwrap();
    cfg.mount_addr = None;
    let srv = nfs_server::start(cfg).await.unwrap();

    let (paddr, stats) = proxy(srv.nfs_addr(), 1 << 20, 2 << 20).await;
    let target = TcpTarget {
        host: "127.0.0.1".into(),
        nfs_port: Some(paddr.port()),
        mount_port: None,
        path: dir.path().to_str().unwrap().into(),
    };
    let mut opts = TcpOptions {
        io: IoOptions {
            in_flight: 8,
            block_size: Some(64 * 1024),
            ..IoOptions::default()
        },
        ..TcpOptions::default()
    };
    opts.reconnect.delay = std::time::Duration::from_millis(20);
    let m = connect_tcp(&target, &opts).await.unwrap();
    let f = m.mount.resolve("src.bin").await.unwrap();
    let back = m.mount.read_file(&f.fh).await.unwrap();
    assert!(stats.cut.load(Ordering::SeqCst), "the proxy never cut");
    assert!(back == data, "read across the reconnect differs");
    // MOUNT, the first NFS connection, and the reconnection.
    assert!(stats.connections.load(Ordering::SeqCst) >= 3);

    let (_, w) = m
        .mount
        .write_file("dst.bin", 0o644, Bytes::from(data.clone()))
        .await
        .unwrap();
    assert_eq!(w.bytes, data.len() as u64);
    assert!(
        stats.up_cut.load(Ordering::SeqCst),
        "the proxy never cut a write"
    );
    assert!(stats.connections.load(Ordering::SeqCst) >= 4);
    assert!(std::fs::read(dir.path().join("dst.bin")).unwrap() == data);
    srv.stop();
}
