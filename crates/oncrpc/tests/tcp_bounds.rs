//! The TCP server's bounds against hostile peers: connection caps (total
//! and per client address) and backpressure on a client that never reads
//! its replies. Each test checks the server still serves a normal client.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use oncrpc::client::ClientConfig;
use oncrpc::echo::{EchoClient, EchoService, ECHO_PROGRAM, ECHO_VERSION, PROC_ECHO};
use oncrpc::limits::trips;
use oncrpc::limits::{ConnLimiter, ConnLimits};
use oncrpc::msg::OpaqueAuth;
use oncrpc::record::fragment_header;
use oncrpc::tcp::{ServerReceiveBudget, ServerReplyBudget, TcpClient, TcpConfig, TcpServer};
use oncrpc::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use xdr::Encode;

async fn start(tcp: TcpConfig, limits: ConnLimits) -> SocketAddr {
    start_with_budget(tcp, limits).await.0
}

async fn start_with_budget(
    tcp: TcpConfig,
    limits: ConnLimits,
) -> (SocketAddr, Arc<ServerReplyBudget>) {
    let mut server = Server::new();
    server.register(EchoService::new(4 << 20));
    let srv = TcpServer::bind("127.0.0.1:0", Arc::new(server), tcp)
        .await
        .unwrap()
        .with_conn_limiter(ConnLimiter::new(limits));
    let addr = srv.local_addr().unwrap();
    let replies = srv.reply_budget();
    srv.spawn();
    (addr, replies)
}

/// An ECHO server whose receive reserve is `budget` bytes
/// (`TcpConfig::max_server_receive_reserve`), and that budget's account.
async fn start_with_receive_budget(budget: usize) -> (SocketAddr, Arc<ServerReceiveBudget>) {
    let tcp = TcpConfig {
        max_server_receive_reserve: budget,
        ..TcpConfig::default()
    };
    let mut server = Server::new();
    server.register(EchoService::new(4 << 20));
    let srv = TcpServer::bind("127.0.0.1:0", Arc::new(server), tcp)
        .await
        .unwrap();
    let addr = srv.local_addr().unwrap();
    let receives = srv.receive_budget();
    srv.spawn();
    (addr, receives)
}

/// A normal client's ECHO round trip, within a second.
async fn served(addr: SocketAddr) {
    let run = async {
        let c = TcpClient::connect(addr, 7, ClientConfig::default(), TcpConfig::default())
            .await
            .unwrap();
        let c = EchoClient::new(c);
        let data = Bytes::from_static(b"still here");
        assert_eq!(c.echo(data.clone()).await.unwrap(), data);
    };
    tokio::time::timeout(Duration::from_secs(1), run)
        .await
        .expect("a normal client is served within 1 s");
}

/// True if the server closed `s` (EOF or reset) within a second.
async fn closed_by_server(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_secs(1), s.read(&mut b)).await,
        Ok(Ok(0) | Err(_))
    )
}

#[tokio::test]
async fn closes_connections_over_the_per_client_cap_and_recovers() {
    let addr = start(
        TcpConfig::default(),
        ConnLimits {
            max_total: 100,
            max_per_client: 4,
        },
    )
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    // The fourth place goes to a normal client; the rest are closed.
    served(addr).await;
    held.push(TcpStream::connect(addr).await.unwrap());
    let mut extra = TcpStream::connect(addr).await.unwrap();
    assert!(closed_by_server(&mut extra).await);
    assert!(trips("tcp.connections_per_client") >= 1);
    held.pop();
    tokio::time::sleep(Duration::from_millis(50)).await;
    served(addr).await;
}

#[tokio::test]
async fn closes_connections_over_the_total_cap() {
    let addr = start(
        TcpConfig::default(),
        ConnLimits {
            max_total: 2,
            max_per_client: 100,
        },
    )
    .await;
    let _a = TcpStream::connect(addr).await.unwrap();
    let b = TcpStream::connect(addr).await.unwrap();
    let mut c = TcpStream::connect(addr).await.unwrap();
    assert!(closed_by_server(&mut c).await);
    assert!(trips("tcp.connections") >= 1);
    drop(b);
    tokio::time::sleep(Duration::from_millis(50)).await;
    served(addr).await;
}

fn echo_call(xid: u32, payload: &[u8]) -> Vec<u8> {
    let mut args = Vec::new();
    Bytes::copy_from_slice(payload).encode(&mut args);
    let echo = (ECHO_PROGRAM, ECHO_VERSION, PROC_ECHO);
    testkit::rpc::call_record(xid, echo, OpaqueAuth::NONE, &args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stops_reading_a_client_that_does_not_read_its_replies() {
    let tcp = TcpConfig {
        max_queued_reply_bytes: 1 << 20,
        reply_reserve: 256 << 10,
        ..TcpConfig::default()
    };
    let addr = start(tcp, ConnLimits::default()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let payload = vec![0x5au8; 256 << 10];
    // Without backpressure the server would take all 256 MiB; with it, the
    // writes stall once the budget and the sockets' buffers are full.
    let mut sent = 0usize;
    for xid in 0..1024u32 {
        let call = echo_call(xid, &payload);
        match tokio::time::timeout(Duration::from_millis(500), s.write_all(&call)).await {
            Ok(r) => r.unwrap(),
            Err(_) => break,
        }
        sent += call.len();
    }
    assert!(sent < 64 << 20, "server kept reading: {sent} bytes taken");
    assert!(trips("tcp.queued_reply_bytes") >= 1);
    served(addr).await;
}

/// Writes ECHO calls of `payload` on `s` until a write stalls for 500 ms
/// (the server stopped reading) or 512 calls went out.
async fn pipeline_until_stalled(mut s: TcpStream, payload: Vec<u8>) -> TcpStream {
    for xid in 0..512u32 {
        let call = echo_call(xid, &payload);
        match tokio::time::timeout(Duration::from_millis(500), s.write_all(&call)).await {
            Ok(r) => r.unwrap(),
            Err(_) => break,
        }
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections_not_reading_stay_within_the_server_budget() {
    const CONNS: usize = 8;
    const SERVER_BUDGET: usize = 512 << 10;
    let tcp = TcpConfig {
        max_queued_reply_bytes: 2 << 20,
        reply_reserve: 128 << 10,
        max_server_reply_bytes: SERVER_BUDGET,
        ..TcpConfig::default()
    };
    let (addr, replies) = start_with_budget(tcp, ConnLimits::default()).await;
    let most = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (replies, most) = (Arc::clone(&replies), Arc::clone(&most));
        tokio::spawn(async move {
            loop {
                most.fetch_max(replies.charged(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let mut floods = Vec::new();
    for _ in 0..CONNS {
        let s = TcpStream::connect(addr).await.unwrap();
        floods.push(tokio::spawn(pipeline_until_stalled(
            s,
            vec![0xa5; 64 << 10],
        )));
    }
    let mut held = Vec::new();
    for f in floods {
        held.push(f.await.unwrap());
    }
    // Per connection alone they could hold 8 × 2 MiB = 16 MiB.
    let bound = SERVER_BUDGET + CONNS * tcp.reply_reserve;
    let now = replies.charged();
    assert!(now > SERVER_BUDGET / 2, "flood held {now} bytes");
    assert!(now <= bound, "{now} bytes held, bound {bound}");
    assert!(trips("tcp.server_reply_bytes") >= 1);
    // A connection holding nothing is served although the budget is spent.
    served(addr).await;
    sampler.abort();
    let most = most.load(Ordering::Relaxed);
    assert!(most <= bound, "{most} bytes held at most, bound {bound}");
    drop(held);
}

/// A program whose every call takes 100 ms, counting how many run at once;
/// `bound` is what it tells the transport of its replies' size.
struct Busy {
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    bound: Option<usize>,
}

const BUSY_PROGRAM: u32 = 0x2000_0778;

impl oncrpc::RpcService for Busy {
    fn program(&self) -> u32 {
        BUSY_PROGRAM
    }
    fn versions(&self) -> std::ops::RangeInclusive<u32> {
        1..=1
    }
    async fn call(
        &self,
        _ctx: oncrpc::CallContext,
        _args: Bytes,
    ) -> Result<xdr::XdrBuf, oncrpc::ServiceError> {
        let n = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(n, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        Ok(xdr::XdrBuf::new())
    }
    fn reply_size_bound(&self, _vers: u32, _proc: u32, _args: &[u8]) -> Option<usize> {
        self.bound
    }
}

/// Pipelines `calls` calls to a [`Busy`] server on one connection, reads
/// every reply, and returns how many ran at once at most.
async fn most_running(tcp: TcpConfig, bound: Option<usize>, calls: u32) -> usize {
    let most = Arc::new(AtomicUsize::new(0));
    let mut server = Server::new();
    server.register(Busy {
        running: Arc::new(AtomicUsize::new(0)),
        most: Arc::clone(&most),
        bound,
    });
    let srv = TcpServer::bind("127.0.0.1:0", Arc::new(server), tcp)
        .await
        .unwrap();
    let addr = srv.local_addr().unwrap();
    srv.spawn();
    let mut s = TcpStream::connect(addr).await.unwrap();
    for xid in 0..calls {
        let rec = testkit::rpc::call_record(xid, (BUSY_PROGRAM, 1, 1), OpaqueAuth::NONE, &[]);
        s.write_all(&rec).await.unwrap();
    }
    for _ in 0..calls {
        let mut head = [0u8; 4];
        s.read_exact(&mut head).await.unwrap();
        let mut rec = vec![0u8; (u32::from_be_bytes(head) & 0x7fff_ffff) as usize];
        s.read_exact(&mut rec).await.unwrap();
    }
    most.load(Ordering::SeqCst)
}

/// `TcpConfig::max_concurrent_per_conn`: a client pipelining 24 calls on
/// one connection has at most that many running at once; all are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_running_per_connection_are_bounded() {
    let tcp = TcpConfig {
        max_concurrent_per_conn: 4,
        ..TcpConfig::default()
    };
    let before = trips("tcp.calls_per_conn");
    assert_eq!(most_running(tcp, Some(100), 24).await, 4);
    assert_eq!(TcpConfig::default().max_concurrent_per_conn, 128);
    // The bound tripped (logged and counted) for the calls that waited.
    assert!(trips("tcp.calls_per_conn") > before);
}

/// Each call running reserves its reply's bound, not the largest reply:
/// with 1 MiB of reply memory per connection and 256 KiB reserved for a
/// reply of unknown size, 4 calls run at once; replies known to be small
/// let all 24 run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_replies_reserve_little_of_the_connection_budget() {
    let tcp = TcpConfig {
        max_queued_reply_bytes: 1 << 20,
        reply_reserve: 256 << 10,
        ..TcpConfig::default()
    };
    assert_eq!(most_running(tcp, None, 24).await, 4);
    assert_eq!(most_running(tcp, Some(100), 24).await, 24);
}

/// An ECHO of `len` bytes by a normal client, within 5 s.
async fn echoed(addr: SocketAddr, len: usize) {
    let run = async {
        let c = TcpClient::connect(addr, 9, ClientConfig::default(), TcpConfig::default())
            .await
            .unwrap();
        let c = EchoClient::new(c);
        let data = Bytes::from(vec![0x3c; len]);
        assert_eq!(c.echo(data.clone()).await.unwrap(), data);
    };
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("an ECHO is served within 5 s");
}

/// `TcpConfig::max_server_receive_reserve`: peers that send the header of
/// a 2 MiB record and fall silent make the server reserve room for at
/// most the budget together; past it records are received as they arrive,
/// so a normal client's large call is still served, and the room comes
/// back when the connections end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn room_reserved_for_claimed_records_stays_within_the_server_budget() {
    const BUDGET: usize = 5 << 20;
    const CLAIM: usize = 2 << 20;
    let (addr, receives) = start_with_receive_budget(BUDGET).await;
    assert_eq!(TcpConfig::default().max_server_receive_reserve, 64 << 20);
    // Large records are served with room made ahead, which is given back.
    echoed(addr, CLAIM).await;
    assert_eq!(receives.reserved(), 0);
    let before = trips("tcp.receive_reserve_bytes");
    let mut silent = Vec::new();
    for _ in 0..6 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&fragment_header(CLAIM, true)).await.unwrap();
        s.write_all(&[0; 100]).await.unwrap();
        silent.push(s);
    }
    let wait = async {
        while trips("tcp.receive_reserve_bytes") < before + 4 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(2), wait)
        .await
        .expect("the four claims past the budget trip the limit");
    let held = receives.reserved();
    assert!(held <= BUDGET, "{held} bytes reserved, budget {BUDGET}");
    assert!(
        held >= 2 * (CLAIM - 100),
        "{held} bytes reserved for two claims"
    );
    // A normal client's 2 MiB call is received as it arrives and served.
    echoed(addr, CLAIM).await;
    drop(silent);
    let freed = async {
        while receives.reserved() != 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(2), freed)
        .await
        .expect("the room comes back when the connections end");
}

/// Spare receive buffers (kept for a connection's next large record) are
/// charged to `TcpConfig::max_server_receive_reserve`: clients that each
/// send two 2 MiB calls at once (the second record needs a new buffer
/// while the first is still being answered, which leaves a spare) and
/// then stay connected and idle make the server keep spares for at most
/// the budget together; the connections past it keep none
/// (`tcp.receive_reserve_bytes` trips), a normal client's large call is
/// still served, and the spares go when the connections end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spare_receive_buffers_of_idle_clients_stay_within_the_server_budget() {
    const BUDGET: usize = 5 << 20;
    const CALL: usize = 2 << 20;
    let (addr, receives) = start_with_receive_budget(BUDGET).await;
    let before = trips("tcp.receive_reserve_bytes");
    let data = Bytes::from(vec![0x5a; CALL]);
    let mut idle = Vec::new();
    for _ in 0..4 {
        let c = TcpClient::connect(addr, 9, ClientConfig::default(), TcpConfig::default())
            .await
            .unwrap();
        let c = EchoClient::new(c);
        let (a, b) = tokio::join!(c.echo(data.clone()), c.echo(data.clone()));
        assert_eq!((a.unwrap(), b.unwrap()), (data.clone(), data.clone()));
        idle.push(c);
    }
    let held = receives.reserved();
    assert!(held <= BUDGET, "{held} bytes held, budget {BUDGET}");
    // A second client's spare would have needed 6 MiB when it was made
    // (two spares and the room for the record then arriving).
    assert!(
        (CALL..2 * CALL).contains(&held),
        "{held} bytes held: exactly one idle client keeps its spare"
    );
    assert!(
        trips("tcp.receive_reserve_bytes") > before,
        "the clients past the budget keep no spare"
    );
    // A normal client's large call is still served.
    echoed(addr, CALL).await;
    drop(idle);
    let freed = async {
        while receives.reserved() != 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), freed)
        .await
        .expect("the spares go when the connections end");
}
