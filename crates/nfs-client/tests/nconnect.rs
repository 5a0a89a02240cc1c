//! `nconnect=N` (docs/client.md): a mount over TCP opens N NFS
//! connections to the server and spreads its calls over them, seen from
//! between the two by a counting relay: N connections arrive, each
//! carries its share of the calls, and the data read is byte-exact. A
//! count outside 1..=16 is refused, as Linux's mount refuses it.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use nfs_client::{connect_tcp, Error, IoOptions, TcpOptions, TcpTarget};
use testkit::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn server(dir: &Path) -> nfs_server::RunningServer {
    let mut cfg = nfs_server::ServerConfig::new(dir);
    cfg.set_squash(nfs_server::exports::Squash::None);
    cfg.nfs_addr = "127.0.0.1:0".parse().unwrap();
    cfg.mount_addr = None;
    nfs_server::start(cfg).await.unwrap()
}

/// Bytes each relayed connection carried from the client to the server
/// (its calls), in the order the connections came.
type Sent = Arc<Mutex<Vec<Arc<AtomicU64>>>>;

/// A relay on 127.0.0.1 to `to`, counting what every client connection
/// sends.
async fn relay(to: SocketAddr) -> (SocketAddr, Sent) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let sent: Sent = Arc::default();
    let conns = Arc::clone(&sent);
    tokio::spawn(async move {
        while let Ok((client, _)) = l.accept().await {
            let n = Arc::new(AtomicU64::new(0));
            conns.lock().unwrap().push(Arc::clone(&n));
            let upstream = TcpStream::connect(to).await.unwrap();
            let (mut cr, mut cw) = client.into_split();
            let (mut ur, mut uw) = upstream.into_split();
            tokio::spawn(async move {
                let mut b = vec![0u8; 64 << 10];
                while let Ok(k) = cr.read(&mut b).await {
                    if k == 0 || uw.write_all(&b[..k]).await.is_err() {
                        break;
                    }
                    n.fetch_add(k as u64, Ordering::Relaxed);
                }
            });
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut ur, &mut cw).await;
            });
        }
    });
    (addr, sent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nconnect_opens_n_connections_and_spreads_the_calls_over_them() {
    const N: usize = 4;
    let dir = TempDir::new("nconnect");
    let data: Vec<u8> = (0..(4u32 << 20))
        .map(|i| (i * 7 + i / 4099) as u8)
        .collect();
    std::fs::write(dir.path().join("file"), &data).unwrap();
    let srv = server(dir.path()).await;
    let (relayed, sent) = relay(srv.nfs_addr()).await;
    // NFS through the relay; MOUNT straight to the server.
    let target = TcpTarget {
        host: "127.0.0.1".into(),
        nfs_port: Some(relayed.port()),
        mount_port: Some(srv.nfs_addr().port()),
        path: dir.path().to_str().unwrap().into(),
    };
    let opts = TcpOptions {
        io: IoOptions {
            rsize: Some(64 << 10),
            in_flight: 16,
            ..IoOptions::default()
        },
        nconnect: N,
        ..TcpOptions::default()
    };
    let m = connect_tcp(&target, &opts).await.unwrap();
    assert_eq!(m.mount.client().transport().connections().len(), N);
    let fh = m.mount.resolve("file").await.unwrap().fh;
    let before: Vec<u64> = snapshot(&sent);
    // 64 READs of 64 KiB, 16 in flight.
    assert!(m.mount.read_file(&fh).await.unwrap() == data);
    let after = snapshot(&sent);
    assert_eq!(after.len(), N, "connections made through the relay");
    let reads: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let total: u64 = reads.iter().sum();
    // Round-robin: every connection carried a quarter of the READ calls
    // (equal-sized), give or take one call.
    for (i, r) in reads.iter().enumerate() {
        assert!(
            r.abs_diff(total / N as u64) <= total / 64,
            "connection {i} carried {r} of {total} bytes of calls: {reads:?}"
        );
    }
    // The server holds the N connections (MOUNT's has gone).
    let open = srv.conn_limiter().open();
    assert!((N..=N + 1).contains(&open), "{open} connections open");
}

fn snapshot(sent: &Sent) -> Vec<u64> {
    sent.lock()
        .unwrap()
        .iter()
        .map(|n| n.load(Ordering::Relaxed))
        .collect()
}

#[tokio::test]
async fn nconnect_outside_1_to_16_is_refused() {
    let dir = TempDir::new("nconnect-bad");
    let srv = server(dir.path()).await;
    let target = TcpTarget {
        host: "127.0.0.1".into(),
        nfs_port: Some(srv.nfs_addr().port()),
        mount_port: None,
        path: dir.path().to_str().unwrap().into(),
    };
    for n in [0, 17] {
        let opts = TcpOptions {
            nconnect: n,
            ..TcpOptions::default()
        };
        let e = connect_tcp(&target, &opts).await.unwrap_err();
        assert!(matches!(e, Error::Options(_)), "{n}: {e}");
    }
    // 16 is served.
    let opts = TcpOptions {
        nconnect: 16,
        ..TcpOptions::default()
    };
    let m = connect_tcp(&target, &opts).await.unwrap();
    assert_eq!(m.mount.client().transport().connections().len(), 16);
    assert!(m.mount.resolve("/").await.is_ok());
}
