//! Calls in both directions on one TCP connection (RFC 5531 §9, §11;
//! RFC 8881 §2.10.3.1): the server calls a program the client serves on
//! the connection the client opened, replies are matched by xid, and
//! what a hostile client sends instead of replies is dropped and counted.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use limits::trips as count;
use oncrpc::client::{ClientConfig, RpcError};
use oncrpc::echo::{EchoClient, EchoService};
use oncrpc::limits;
use oncrpc::msg::{Accepted, CallHeader, OpaqueAuth, ReplyHeader};
use oncrpc::record::{encode_record, RecordDecoder};
use oncrpc::tcp::{
    TcpBackchannels, TcpClient, TcpConfig, TcpServer, MAX_REVERSE_IN_FLIGHT, MAX_REVERSE_WAITERS,
};
use oncrpc::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use xdr::{Encode, Encoder, XdrBuf};

/// An echo server over TCP and the registry of its connections' reverse
/// directions.
async fn start() -> (std::net::SocketAddr, TcpBackchannels) {
    start_with(TcpConfig::default()).await
}

async fn start_with(config: TcpConfig) -> (std::net::SocketAddr, TcpBackchannels) {
    let mut server = Server::new();
    server.register(EchoService::default());
    let srv = TcpServer::bind("127.0.0.1:0", Arc::new(server), config)
        .await
        .unwrap();
    let addr = srv.local_addr().unwrap();
    let bcs = srv.backchannels();
    srv.spawn();
    (addr, bcs)
}

/// The one open connection's id, once the server has accepted it.
async fn only_conn(bcs: &TcpBackchannels) -> u64 {
    for _ in 0..200 {
        if let [id] = bcs.conn_ids()[..] {
            return id;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("no connection: {:?}", bcs.conn_ids());
}

#[tokio::test]
async fn the_server_calls_the_client_on_its_own_connection_with_many_in_flight() {
    let (addr, bcs) = start().await;
    let mut cb = Server::new();
    cb.register(EchoService::default());
    let client = TcpClient::connect_with_backchannel(
        addr,
        1,
        ClientConfig::default(),
        TcpConfig::default(),
        Arc::new(cb),
    )
    .await
    .unwrap();
    let fore = EchoClient::new(client.clone());
    let id = only_conn(&bcs).await;
    let back = EchoClient::new(bcs.get(id).unwrap());
    // Both directions at once: 16 reverse calls and 16 forward calls.
    let mut tasks = Vec::new();
    for i in 0..16u8 {
        let (f, b) = (fore.clone(), back.clone());
        tasks.push(tokio::spawn(async move {
            let data = Bytes::from(vec![i; 100 + usize::from(i)]);
            assert_eq!(b.echo(data.clone()).await.unwrap(), data);
            assert_eq!(f.echo(data.clone()).await.unwrap(), data);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let bc = bcs.get(id).unwrap();
    assert!(bc.in_use());
    assert_eq!(bc.in_flight(), 0);
    drop(fore);
    drop(client);
    // The connection went: the reverse direction with it.
    for _ in 0..200 {
        if bcs.get(id).is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(bcs.get(id).is_none());
    assert!(matches!(back.null().await, Err(RpcError::ConnectionClosed)));
}

fn reply_record(xid: u32) -> Bytes {
    let mut r = XdrBuf::new();
    ReplyHeader::accepted(xid, Accepted::Success).encode(&mut r);
    encode_record(&r)
}

fn echo_call(xid: u32, data: &[u8]) -> Bytes {
    let mut m = XdrBuf::new();
    CallHeader {
        xid,
        prog: oncrpc::echo::ECHO_PROGRAM,
        vers: 1,
        proc_: oncrpc::echo::PROC_ECHO,
        cred: OpaqueAuth::NONE,
        verf: OpaqueAuth::NONE,
    }
    .encode(&mut m);
    m.put_opaque(data);
    encode_record(&m)
}

/// Reads records until one with msg_type REPLY and `xid` arrives.
async fn read_reply(s: &mut TcpStream, dec: &mut RecordDecoder, xid: u32) -> Bytes {
    loop {
        while let Some(rec) = dec.next_record().unwrap() {
            if rec.get(..8) == Some(&[xid.to_be_bytes(), 1u32.to_be_bytes()].concat()[..]) {
                return rec;
            }
        }
        dec.read_buf().reserve(4096);
        let n = s.read_buf(dec.read_buf()).await.unwrap();
        assert!(n > 0, "connection closed");
    }
}

#[tokio::test]
async fn unexpected_replies_and_garbage_are_dropped_and_counted_and_a_silent_client_times_out() {
    let (addr, bcs) = start().await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let id = only_conn(&bcs).await;
    let unexpected = count("tcp.unexpected_reply");
    let garbage = count("tcp.garbage_record");
    // A REPLY to nothing, and records with msg_type 7 or too short.
    s.write_all(&reply_record(0xdead_beef)).await.unwrap();
    let mut g = XdrBuf::new();
    g.put_u32(5);
    g.put_u32(7);
    s.write_all(&encode_record(&g)).await.unwrap();
    s.write_all(&encode_record(&XdrBuf::from_bytes(Bytes::from_static(&[
        1, 2,
    ]))))
    .await
    .unwrap();
    // The connection still serves calls.
    s.write_all(&echo_call(42, b"still here")).await.unwrap();
    let mut dec = RecordDecoder::new(1 << 20);
    let rec = read_reply(&mut s, &mut dec, 42).await;
    assert!(rec.ends_with(b"still here\0\0"));
    assert!(count("tcp.unexpected_reply") > unexpected);
    assert!(count("tcp.garbage_record") >= garbage + 2);
    // A reverse call the client never answers: the caller's bound ends
    // it, and its entry goes, so a late reply is unexpected too.
    let bc = bcs.get(id).unwrap();
    let back = EchoClient::new(bc.clone());
    let r = tokio::time::timeout(Duration::from_millis(100), back.null()).await;
    assert!(r.is_err(), "no reply, so the call is still waiting");
    assert_eq!(bc.in_flight(), 0);
    // The client answers a reverse call: matched by xid (the reply to
    // the abandoned call is unexpected).
    let before = count("tcp.unexpected_reply");
    let waiting = tokio::spawn(async move { back.null().await });
    let mut xids = Vec::new();
    while xids.len() < 2 {
        dec.read_buf().reserve(4096);
        s.read_buf(dec.read_buf()).await.unwrap();
        while let Some(rec) = dec.next_record().unwrap() {
            if rec.get(4..8) == Some(&0u32.to_be_bytes()[..]) {
                xids.push(u32::from_be_bytes(rec[..4].try_into().unwrap()));
            }
        }
    }
    for x in xids {
        s.write_all(&reply_record(x)).await.unwrap();
    }
    waiting.await.unwrap().unwrap();
    assert!(count("tcp.unexpected_reply") > before);
    // The client goes: calls fail at once.
    drop(s);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(matches!(
        EchoClient::new(bc).null().await,
        Err(RpcError::ConnectionClosed)
    ));
}

/// A callback program whose calls wait until the test opens the gate.
struct Gated {
    gate: Arc<tokio::sync::Semaphore>,
}

impl oncrpc::RpcService for Gated {
    fn program(&self) -> u32 {
        oncrpc::echo::ECHO_PROGRAM
    }

    fn versions(&self) -> core::ops::RangeInclusive<u32> {
        1..=1
    }

    async fn call(
        &self,
        _ctx: oncrpc::CallContext,
        _args: Bytes,
    ) -> Result<XdrBuf, oncrpc::ServiceError> {
        let _pass = self.gate.acquire().await.expect("gate open");
        Ok(XdrBuf::new())
    }
}

/// Replies (msg_type 1) read from `s` until `n` have come.
async fn read_replies(s: &mut TcpStream, dec: &mut RecordDecoder, n: usize) -> Vec<u32> {
    let mut xids = Vec::new();
    while xids.len() < n {
        while let Some(rec) = dec.next_record().unwrap() {
            if rec.get(4..8) == Some(&1u32.to_be_bytes()[..]) {
                xids.push(u32::from_be_bytes(rec[..4].try_into().unwrap()));
            }
        }
        if xids.len() >= n {
            break;
        }
        dec.read_buf().reserve(4096);
        let read = s.read_buf(dec.read_buf());
        let got = tokio::time::timeout(Duration::from_secs(5), read).await;
        assert!(
            matches!(got, Ok(Ok(k)) if k > 0),
            "replies stopped at {}",
            xids.len()
        );
    }
    xids
}

/// A hostile server floods a client's connection with callbacks that do
/// not finish: the client runs `MAX_CALLBACKS_PER_CONN` at once, drops the
/// rest and counts them in `tcp.client_callbacks`, and its connection
/// still answers once the running ones end.
#[tokio::test]
async fn a_server_flooding_callbacks_trips_the_per_connection_bound() {
    use oncrpc::tcp::MAX_CALLBACKS_PER_CONN;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let mut cb = Server::new();
    cb.register(Gated {
        gate: Arc::clone(&gate),
    });
    let connecting = TcpClient::connect_with_backchannel(
        addr,
        1,
        ClientConfig::default(),
        TcpConfig::default(),
        Arc::new(cb),
    );
    let (client, accepted) = tokio::join!(connecting, listener.accept());
    let _client = client.unwrap();
    let (mut s, _) = accepted.unwrap();
    let before = count("tcp.client_callbacks");
    let flood = MAX_CALLBACKS_PER_CONN + 36;
    for xid in 0..flood as u32 {
        s.write_all(&echo_call(1000 + xid, b"")).await.unwrap();
    }
    for _ in 0..400 {
        if count("tcp.client_callbacks") >= before + 36 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(count("tcp.client_callbacks") >= before + 36);
    // Open the gate: exactly the admitted calls are answered.
    gate.add_permits(flood);
    let mut dec = RecordDecoder::new(1 << 20);
    let answered = read_replies(&mut s, &mut dec, MAX_CALLBACKS_PER_CONN).await;
    assert_eq!(answered.len(), MAX_CALLBACKS_PER_CONN);
    // The connection still serves callbacks after the flood.
    s.write_all(&echo_call(7, b"")).await.unwrap();
    assert_eq!(read_replies(&mut s, &mut dec, 1).await, vec![7]);
}

/// A client that never answers the server's calls on its connection:
/// the calls waiting to go out behind the 64 in flight are bounded (one
/// more fails at once, `tcp.reverse_waiters`), and every call, waiting
/// included, ends after `reverse_reply_wait` (`tcp.reverse_reply_wait`)
/// though its caller set no bound; before, each waited for good.
#[tokio::test]
async fn calls_to_a_client_that_never_answers_are_bounded_in_number_and_time() {
    let wait = Duration::from_secs(20);
    let (addr, bcs) = start_with(TcpConfig {
        reverse_reply_wait: wait,
        ..TcpConfig::default()
    })
    .await;
    let _silent = TcpStream::connect(addr).await.unwrap();
    let bc = bcs.get(only_conn(&bcs).await).unwrap();
    let full = MAX_REVERSE_IN_FLIGHT + MAX_REVERSE_WAITERS;
    let mut calls = Vec::new();
    for _ in 0..full {
        let back = EchoClient::new(bc.clone());
        calls.push(tokio::spawn(async move { back.null().await }));
    }
    let t0 = std::time::Instant::now();
    while bc.in_flight() < MAX_REVERSE_IN_FLIGHT || bc.waiting() < MAX_REVERSE_WAITERS {
        assert!(t0.elapsed() < wait / 2, "calls did not queue");
        tokio::task::yield_now().await;
    }
    let crowded = count("tcp.reverse_waiters");
    let r = EchoClient::new(bc.clone()).null().await;
    assert!(matches!(r, Err(RpcError::TooManyInFlight)), "{r:?}");
    assert_eq!(count("tcp.reverse_waiters"), crowded + 1);
    assert_eq!(bc.waiting(), MAX_REVERSE_WAITERS);
    for c in calls {
        c.abort();
        let _ = c.await;
    }
    assert_eq!((bc.in_flight(), bc.waiting()), (0, 0));

    // The time bound, on a server with a short one.
    let short = Duration::from_millis(200);
    let (addr, bcs) = start_with(TcpConfig {
        reverse_reply_wait: short,
        ..TcpConfig::default()
    })
    .await;
    let _silent = TcpStream::connect(addr).await.unwrap();
    let bc = bcs.get(only_conn(&bcs).await).unwrap();
    let timed_out = count("tcp.reverse_reply_wait");
    let guard = Duration::from_secs(60);
    let r = tokio::time::timeout(guard, EchoClient::new(bc.clone()).null()).await;
    assert!(matches!(r, Ok(Err(RpcError::TimedOut))), "{r:?}");
    assert!(count("tcp.reverse_reply_wait") > timed_out);
    assert_eq!(bc.in_flight(), 0, "its entry went with it");
}
