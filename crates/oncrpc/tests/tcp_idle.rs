//! The TCP server closes idle connections (`TcpConfig::idle_timeout`), so
//! connections a client opens and then leaves silent do not hold places of
//! the connection caps forever; a connection with a call running, one
//! that keeps calling, and one a service holds are kept.

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use oncrpc::client::ClientConfig;
use oncrpc::echo::{EchoClient, EchoService};
use oncrpc::limits::trips;
use oncrpc::limits::{ConnLimiter, ConnLimits};
use oncrpc::msg::OpaqueAuth;
use oncrpc::record::fragment_header;
use oncrpc::tcp::{TcpClient, TcpConfig, TcpServer};
use oncrpc::{CallContext, RpcService, Server, ServiceError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use xdr::XdrBuf;

const IDLE: Duration = Duration::from_millis(300);
const SLOW_PROGRAM: u32 = 0x2000_0777;

/// A program whose procedure 1 takes 900 ms (three idle periods), and
/// which says whether it holds every connection.
struct Slow {
    holds: bool,
}

impl RpcService for Slow {
    fn program(&self) -> u32 {
        SLOW_PROGRAM
    }
    fn versions(&self) -> RangeInclusive<u32> {
        1..=1
    }
    async fn call(&self, ctx: CallContext, _args: Bytes) -> Result<XdrBuf, ServiceError> {
        if ctx.proc_ == 1 {
            tokio::time::sleep(3 * IDLE).await;
        }
        Ok(XdrBuf::new())
    }
    fn holds_connection(&self, _conn_id: u64) -> bool {
        self.holds
    }
}

async fn start(holds: bool, limits: ConnLimits) -> SocketAddr {
    let mut server = Server::new();
    server.register(EchoService::new(4096));
    server.register(Slow { holds });
    let tcp = TcpConfig {
        idle_timeout: Some(IDLE),
        ..TcpConfig::default()
    };
    let srv = TcpServer::bind("127.0.0.1:0", Arc::new(server), tcp)
        .await
        .unwrap()
        .with_conn_limiter(ConnLimiter::new(limits));
    let addr = srv.local_addr().unwrap();
    srv.spawn();
    addr
}

/// Waits up to `t` for the server to close `s`: the time it took, or
/// `None` if it stayed open (replies read on the way are skipped).
async fn closed_within(s: &mut TcpStream, t: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut b = [0u8; 512];
    loop {
        let left = t.checked_sub(start.elapsed())?;
        match tokio::time::timeout(left, s.read(&mut b)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(start.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

/// One call record of `prog` version 1 procedure `proc_`, no arguments.
fn call(xid: u32, prog: u32, proc_: u32) -> Vec<u8> {
    testkit::rpc::call_record(xid, (prog, 1, proc_), OpaqueAuth::NONE, &[])
}

/// A normal client's ECHO round trip, within a second.
async fn served(addr: SocketAddr) {
    let run = async {
        let c = TcpClient::connect(addr, 7, ClientConfig::default(), TcpConfig::default())
            .await
            .unwrap();
        let data = Bytes::from_static(b"still here");
        assert_eq!(EchoClient::new(c).echo(data.clone()).await.unwrap(), data);
    };
    tokio::time::timeout(Duration::from_secs(1), run)
        .await
        .expect("a normal client is served within 1 s");
}

#[test]
fn the_default_idle_timeout_is_six_minutes() {
    assert_eq!(
        TcpConfig::default().idle_timeout,
        Some(Duration::from_secs(360))
    );
}

#[tokio::test]
async fn a_silent_connection_is_closed_and_its_place_freed() {
    // One place per client address: the silent connection holds it.
    let addr = start(
        false,
        ConnLimits {
            max_total: 100,
            max_per_client: 1,
        },
    )
    .await;
    let before = trips("tcp.idle_closed");
    let mut silent = TcpStream::connect(addr).await.unwrap();
    // Half a record: a peer that starts a call and falls silent is idle too.
    silent.write_all(&fragment_header(100, true)).await.unwrap();
    let took = closed_within(&mut silent, Duration::from_secs(3))
        .await
        .expect("the idle connection is closed");
    assert!(
        took >= IDLE - Duration::from_millis(50),
        "closed after {took:?}"
    );
    assert!(trips("tcp.idle_closed") > before);
    tokio::time::sleep(Duration::from_millis(50)).await;
    served(addr).await;
}

#[tokio::test]
async fn a_connection_with_a_call_running_is_kept_until_it_is_answered() {
    let addr = start(false, ConnLimits::default()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let start = Instant::now();
    s.write_all(&call(1, SLOW_PROGRAM, 1)).await.unwrap();
    // The reply comes after three idle periods of silence from the client.
    let mut head = [0u8; 8];
    s.read_exact(&mut head).await.unwrap();
    assert_eq!(u32::from_be_bytes([head[4], head[5], head[6], head[7]]), 1);
    assert!(start.elapsed() >= 3 * IDLE - Duration::from_millis(50));
    // Answered and silent again: now it is idle.
    let took = closed_within(&mut s, Duration::from_secs(3)).await;
    assert!(took.is_some(), "closed once idle");
}

#[tokio::test]
async fn a_connection_that_keeps_calling_is_kept() {
    let addr = start(false, ConnLimits::default()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    // A call every 100 ms for 1.2 s (four idle periods): all answered.
    for xid in 0..12u32 {
        s.write_all(&call(xid, SLOW_PROGRAM, 0)).await.unwrap();
        let mut head = [0u8; 4];
        s.read_exact(&mut head).await.unwrap();
        let len = (u32::from_be_bytes(head) & 0x7fff_ffff) as usize;
        let mut rec = vec![0u8; len];
        s.read_exact(&mut rec).await.unwrap();
        assert_eq!(rec[..4], xid.to_be_bytes());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_connection_a_service_holds_is_kept() {
    let addr = start(true, ConnLimits::default()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    assert_eq!(closed_within(&mut s, 4 * IDLE).await, None);
    s.write_all(&call(9, SLOW_PROGRAM, 0)).await.unwrap();
    let mut head = [0u8; 8];
    s.read_exact(&mut head).await.unwrap();
    assert_eq!(u32::from_be_bytes([head[4], head[5], head[6], head[7]]), 9);
}

/// A client whose idle connection the server closes reconnects when its
/// next call needs it, however many times (before, it reconnected at once,
/// counted each reconnect against its policy for good, and gave up after
/// `max_attempts` idle periods); while idle it holds no connection.
#[tokio::test]
async fn a_client_reconnects_lazily_after_idle_closes() {
    let addr = start(
        false,
        ConnLimits {
            max_total: 100,
            max_per_client: 1,
        },
    )
    .await;
    let policy = oncrpc::tcp::ReconnectPolicy {
        max_attempts: 2,
        delay: Duration::from_millis(10),
    };
    let c = TcpClient::connect_with(
        addr,
        7,
        ClientConfig::default(),
        TcpConfig::default(),
        policy,
    )
    .await
    .unwrap();
    let c = EchoClient::new(c);
    let data = Bytes::from_static(b"after a nap");
    for round in 0..4 {
        assert_eq!(c.echo(data.clone()).await.unwrap(), data, "round {round}");
        tokio::time::sleep(3 * IDLE).await;
        // Idle and closed: the client's place (one per address) is free.
        let mut other = TcpStream::connect(addr).await.unwrap();
        other.write_all(&call(1, SLOW_PROGRAM, 0)).await.unwrap();
        let mut head = [0u8; 8];
        other.read_exact(&mut head).await.unwrap();
        drop(other);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
