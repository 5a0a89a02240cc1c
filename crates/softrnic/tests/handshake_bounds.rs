//! The listener's MPA handshake bounds against silent connections: a cap
//! per client address and a short timeout keep a real client connecting.

use std::net::SocketAddr;
use std::time::Duration;

use limits::trips;
use rnic::{CompletionQueue, ConnectRequest, Device, Listener, QpConfig};
use softrnic::{SoftConfig, SoftDevice};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};

/// A TCP connection from `from` (any 127/8 address works on loopback).
async fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::from((from, 0))).unwrap();
    s.connect(to).await.unwrap()
}

async fn closed_within(s: &mut TcpStream, t: Duration) -> bool {
    let mut b = [0u8; 1];
    matches!(
        tokio::time::timeout(t, s.read(&mut b)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// A device with `cfg` listening on 127.0.0.1: its address, and a task
/// accepting the one real client.
async fn listen(
    cfg: SoftConfig,
    seed: u64,
) -> (SocketAddr, tokio::task::JoinHandle<softrnic::SoftQp>) {
    let server = SoftDevice::new(cfg, seed);
    let mut listener = server
        .listen(&"127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = listener.local_addr();
    let spd = server.alloc_pd();
    let acceptor = tokio::spawn(async move {
        let req = listener.accept_request().await.unwrap();
        req.accept(&spd, QpConfig::new(CompletionQueue::new(16)))
            .await
            .unwrap()
    });
    (addr, acceptor)
}

/// A real client from 127.0.0.1 connecting to `addr` (20 s is only a
/// bound on a hang, never a measure): whether it did.
async fn real_client_connects(seed: u64, addr: SocketAddr) -> Option<bool> {
    let client = SoftDevice::new(SoftConfig::default(), seed);
    let pd = client.alloc_pd();
    let qp = tokio::time::timeout(
        Duration::from_secs(20),
        client.connect(&pd, &addr, QpConfig::new(CompletionQueue::new(16))),
    )
    .await
    .ok()?;
    Some(qp.is_ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_from_one_address_leave_room_for_others() {
    let timeouts = trips("mpa.handshake_timeout");
    let cfg = SoftConfig {
        max_handshakes_per_client: 4,
        handshake_timeout: Duration::from_millis(500),
        ..SoftConfig::default()
    };
    let (addr, acceptor) = listen(cfg, 1).await;

    // 200 silent connections from 127.0.0.2: 4 hold handshake slots, the
    // rest are closed at once.
    let mut silent = Vec::new();
    for _ in 0..200 {
        silent.push(connect_from([127, 0, 0, 2], addr).await);
    }
    let mut closed = 0;
    for s in silent.iter_mut().skip(4) {
        closed += usize::from(closed_within(s, Duration::from_millis(200)).await);
    }
    assert!(closed >= 190, "only {closed} of 196 over the cap closed");

    // A real client from 127.0.0.1 still connects (its address has all
    // its places; 20 s is only a bound on a hang: a loaded machine took
    // over the second this once asked for).
    assert_eq!(real_client_connects(2, addr).await, Some(true));
    acceptor.await.unwrap();

    // The silent four are dropped after the handshake timeout, each
    // counted.
    for s in silent.iter_mut().take(4) {
        assert!(closed_within(s, Duration::from_secs(2)).await);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(trips("mpa.handshake_timeout") >= timeouts + 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_from_many_addresses_make_way_for_a_real_client() {
    // Handshakes time out after 60 s here: a real client that had to
    // wait for silent ones to time out would not connect within 20 s,
    // however loaded the machine.
    let cfg = SoftConfig {
        max_handshakes: 16,
        max_handshakes_per_client: 8,
        handshake_timeout: Duration::from_secs(60),
        ..SoftConfig::default()
    };
    let (addr, acceptor) = listen(cfg, 3).await;
    // 8 silent connections from each of 4 addresses: 32 for 16 places,
    // every one within its address's cap.
    let mut silent = Vec::new();
    for a in 2..6u8 {
        for _ in 0..8 {
            silent.push(connect_from([127, 0, 0, a], addr).await);
        }
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        real_client_connects(4, addr).await,
        Some(true),
        "connected before any silent handshake timed out (None: it did not), \
         the oldest silent handshake making room"
    );
    acceptor.await.unwrap();
    // The oldest silent ones were closed to make room.
    assert!(closed_within(&mut silent[0], Duration::from_millis(200)).await);
}
