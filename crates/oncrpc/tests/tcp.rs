//! The TCP shells end to end: our client against our server, and raw
//! malformed records against the server.

use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use oncrpc::client::{ClientConfig, RpcError};
use oncrpc::drc::DrcConfig;
use oncrpc::echo::{EchoClient, EchoService, ECHO_PROGRAM, ECHO_VERSION, PROC_ECHO};
use oncrpc::msg::{
    AcceptStat, Accepted, AuthStat, AuthSys, CallHeader, OpaqueAuth, Rejected, ReplyHeader,
};
use oncrpc::record::{encode_record, RecordDecoder};
use oncrpc::tcp::{TcpClient, TcpConfig, TcpServer};
use oncrpc::{CallContext, RpcService, Server, ServiceError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use xdr::{Decoder, Encode, Encoder, XdrBuf};

/// A service whose procedure 1 is non-idempotent (cached) and counts calls.
struct Counter {
    calls: Arc<AtomicU32>,
}

const COUNTER_PROG: u32 = 0x2000_0001;

impl RpcService for Counter {
    fn program(&self) -> u32 {
        COUNTER_PROG
    }
    fn versions(&self) -> RangeInclusive<u32> {
        1..=1
    }
    async fn call(&self, ctx: CallContext, args: Bytes) -> Result<XdrBuf, ServiceError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let mut out = XdrBuf::new();
        out.put_u32(n);
        out.put_opaque(&args);
        let _ = ctx;
        Ok(out)
    }
    fn is_cached(&self, _vers: u32, proc_: u32) -> bool {
        proc_ == 1
    }
}

async fn start(tcp: TcpConfig) -> (std::net::SocketAddr, Arc<AtomicU32>) {
    let calls = Arc::new(AtomicU32::new(0));
    let mut server = Server::new().with_drc(DrcConfig::default());
    server.register(EchoService::default());
    server.register(Counter {
        calls: Arc::clone(&calls),
    });
    let srv = TcpServer::bind("127.0.0.1:0", Arc::new(server), tcp)
        .await
        .unwrap();
    let addr = srv.local_addr().unwrap();
    srv.spawn();
    (addr, calls)
}

async fn client(addr: std::net::SocketAddr) -> EchoClient<TcpClient> {
    let c = TcpClient::connect(addr, 0x1000, ClientConfig::default(), TcpConfig::default())
        .await
        .unwrap();
    EchoClient::new(c)
}

#[tokio::test]
async fn null_round_trips_over_tcp() {
    let (addr, _) = start(TcpConfig::default()).await;
    let c = client(addr).await;
    c.null().await.unwrap();
    let sys = AuthSys {
        machinename: Bytes::from_static(b"box"),
        uid: 1000,
        gid: 1000,
        ..AuthSys::default()
    };
    let c = c.with_cred(sys.to_opaque_auth());
    c.null().await.unwrap();
}

#[tokio::test]
async fn echoes_one_mebibyte_byte_exact() {
    let (addr, _) = start(TcpConfig::default()).await;
    let c = client(addr).await;
    let data: Vec<u8> = (0..(1u32 << 20))
        .map(|i| (i * 31 + i / 4093) as u8)
        .collect();
    let data = Bytes::from(data);
    let back = c.echo(data.clone()).await.unwrap();
    assert_eq!(back.len(), data.len());
    assert!(back == data);
    let odd = Bytes::from_static(b"odd-length");
    assert_eq!(c.echo(odd.clone()).await.unwrap(), odd);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completes_100_concurrent_calls_on_one_connection() {
    let (addr, _) = start(TcpConfig::default()).await;
    let c = Arc::new(client(addr).await);
    let mut tasks = Vec::new();
    for i in 0..100u32 {
        let c = Arc::clone(&c);
        tasks.push(tokio::spawn(async move {
            let payload = Bytes::from(format!("call-{i}-").repeat(i as usize + 1));
            let back = c.echo(payload.clone()).await.unwrap();
            assert_eq!(back, payload);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(c.transport().in_flight(), 0);
}

#[tokio::test]
async fn maps_program_errors_to_typed_client_errors() {
    let (addr, _) = start(TcpConfig::default()).await;
    let t = TcpClient::connect(addr, 7, ClientConfig::default(), TcpConfig::default())
        .await
        .unwrap();
    use oncrpc::{ClientTransport, ReplyHint, RpcCall};
    let call = |prog, vers, proc_, args: XdrBuf| RpcCall {
        prog,
        vers,
        proc_,
        cred: OpaqueAuth::NONE,
        args,
        reply_hint: ReplyHint::default(),
    };
    assert_eq!(
        t.call(call(0x3000_0000, 1, 0, XdrBuf::new())).await,
        Err(RpcError::ProgUnavail)
    );
    assert_eq!(
        t.call(call(ECHO_PROGRAM, 9, 0, XdrBuf::new())).await,
        Err(RpcError::ProgMismatch { low: 1, high: 1 })
    );
    assert_eq!(
        t.call(call(ECHO_PROGRAM, ECHO_VERSION, 9, XdrBuf::new()))
            .await,
        Err(RpcError::ProcUnavail)
    );
    let mut bad = XdrBuf::new();
    bad.put_u32(100); // opaque length 100, no data
    assert_eq!(
        t.call(call(ECHO_PROGRAM, ECHO_VERSION, PROC_ECHO, bad))
            .await,
        Err(RpcError::GarbageArgs)
    );
}

/// A raw connection speaking record marking by hand.
struct Raw {
    s: TcpStream,
    d: RecordDecoder,
}

impl Raw {
    async fn connect(addr: std::net::SocketAddr) -> Self {
        Self {
            s: TcpStream::connect(addr).await.unwrap(),
            d: RecordDecoder::new(1 << 20),
        }
    }

    async fn send(&mut self, msg: &[u8]) {
        let rec = encode_record(&XdrBuf::from_bytes(Bytes::copy_from_slice(msg)));
        self.s.write_all(&rec).await.unwrap();
    }

    /// The next reply record, or `None` on EOF.
    async fn recv(&mut self) -> Option<Bytes> {
        loop {
            if let Some(r) = self.d.next_record().unwrap() {
                return Some(r);
            }
            let mut buf = [0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(5), self.s.read(&mut buf))
                .await
                .expect("reply within 5 s")
                .unwrap_or(0);
            if n == 0 {
                return None;
            }
            self.d.feed(&buf[..n]);
        }
    }

    async fn recv_header(&mut self) -> ReplyHeader {
        let r = self.recv().await.expect("a reply");
        ReplyHeader::decode(&mut Decoder::new(&r)).unwrap()
    }
}

fn call_bytes(xid: u32, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
    let h = CallHeader {
        xid,
        prog,
        vers,
        proc_,
        cred: OpaqueAuth::NONE,
        verf: OpaqueAuth::NONE,
    };
    let mut v = Vec::new();
    h.encode(&mut v);
    v.extend_from_slice(args);
    v
}

fn null_call(xid: u32) -> Vec<u8> {
    call_bytes(xid, ECHO_PROGRAM, ECHO_VERSION, 0, &[])
}

#[tokio::test]
async fn closes_connection_on_record_over_bound() {
    let (addr, _) = start(TcpConfig {
        max_record: 1024,
        ..TcpConfig::default()
    })
    .await;
    let mut raw = Raw::connect(addr).await;
    // Header announcing 1025 bytes; the data never needs to arrive.
    raw.s.write_all(&[0x80, 0, 0x04, 0x01]).await.unwrap();
    assert!(raw.recv().await.is_none(), "connection closed");
}

#[tokio::test]
async fn answers_truncated_header_with_garbage_args() {
    let (addr, _) = start(TcpConfig::default()).await;
    let mut raw = Raw::connect(addr).await;
    let full = null_call(0x55);
    raw.send(&full[..20]).await;
    assert_eq!(
        raw.recv_header().await,
        ReplyHeader::accepted(0x55, Accepted::Other(AcceptStat::GARBAGE_ARGS))
    );
}

#[tokio::test]
async fn drops_unknown_msg_type_and_keeps_connection() {
    let (addr, _) = start(TcpConfig::default()).await;
    let mut raw = Raw::connect(addr).await;
    let mut bad = null_call(0x66);
    bad[7] = 7; // msg_type 7
    raw.send(&bad).await;
    let mut reply = null_call(0x67);
    reply[7] = 1; // a REPLY sent to the server is dropped too
    raw.send(&reply).await;
    raw.send(&[0, 0]).await; // no xid at all: dropped
    raw.send(&null_call(0x68)).await;
    let h = raw.recv_header().await;
    assert_eq!(h, ReplyHeader::accepted(0x68, Accepted::Success));
}

#[tokio::test]
async fn answers_rpc_version_3_with_rpc_mismatch() {
    let (addr, _) = start(TcpConfig::default()).await;
    let mut raw = Raw::connect(addr).await;
    let mut v3 = null_call(0x77);
    v3[11] = 3;
    raw.send(&v3).await;
    assert_eq!(
        raw.recv_header().await,
        ReplyHeader::denied(0x77, Rejected::RpcMismatch { low: 2, high: 2 })
    );
}

#[tokio::test]
async fn answers_auth_body_over_400_bytes_with_badcred() {
    let (addr, _) = start(TcpConfig::default()).await;
    let mut raw = Raw::connect(addr).await;
    let mut msg = null_call(0x88)[..24].to_vec();
    msg.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0x01, 0x94]); // AUTH_SYS, 404 bytes
    msg.extend_from_slice(&[0u8; 404]);
    msg.extend_from_slice(&[0u8; 8]);
    raw.send(&msg).await;
    assert_eq!(
        raw.recv_header().await,
        ReplyHeader::denied(0x88, Rejected::AuthError(AuthStat::AUTH_BADCRED))
    );
    // An unsupported flavor and a non-empty verifier are refused too.
    let mut gss = null_call(0x89);
    gss[27] = 6;
    raw.send(&gss).await;
    assert_eq!(
        raw.recv_header().await,
        ReplyHeader::denied(0x89, Rejected::AuthError(AuthStat::AUTH_BADCRED))
    );
}

#[tokio::test]
async fn answers_dispatch_errors_on_raw_connection() {
    let (addr, _) = start(TcpConfig::default()).await;
    let mut raw = Raw::connect(addr).await;
    raw.send(&call_bytes(1, 0x3000_0000, 1, 0, &[])).await;
    assert_eq!(
        raw.recv_header().await,
        ReplyHeader::accepted(1, Accepted::Other(AcceptStat::PROG_UNAVAIL))
    );
    raw.send(&call_bytes(2, ECHO_PROGRAM, 5, 0, &[])).await;
    assert_eq!(
        raw.recv_header().await,
        ReplyHeader::accepted(2, Accepted::ProgMismatch { low: 1, high: 1 })
    );
    raw.send(&call_bytes(3, ECHO_PROGRAM, 1, 42, &[])).await;
    assert_eq!(
        raw.recv_header().await,
        ReplyHeader::accepted(3, Accepted::Other(AcceptStat::PROC_UNAVAIL))
    );
    // ECHO whose opaque has non-zero padding.
    raw.send(&call_bytes(
        4,
        ECHO_PROGRAM,
        1,
        PROC_ECHO,
        &[0, 0, 0, 1, 9, 9, 9, 9],
    ))
    .await;
    assert_eq!(
        raw.recv_header().await,
        ReplyHeader::accepted(4, Accepted::Other(AcceptStat::GARBAGE_ARGS))
    );
}

#[tokio::test]
async fn replays_cached_reply_for_retransmission_from_another_port() {
    let (addr, calls) = start(TcpConfig::default()).await;
    let mut a = Raw::connect(addr).await;
    let args = [0, 0, 0, 5];
    a.send(&call_bytes(0x99, COUNTER_PROG, 1, 1, &args)).await;
    let first = a.recv().await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // Same XID and args on the same connection: replayed.
    a.send(&call_bytes(0x99, COUNTER_PROG, 1, 1, &args)).await;
    assert_eq!(a.recv().await.unwrap(), first);

    // Same XID and args from a new connection (a new source port): replayed.
    let mut b = Raw::connect(addr).await;
    assert_ne!(
        a.s.local_addr().unwrap().port(),
        b.s.local_addr().unwrap().port()
    );
    b.send(&call_bytes(0x99, COUNTER_PROG, 1, 1, &args)).await;
    assert_eq!(b.recv().await.unwrap(), first);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "handler ran once");

    // Same XID, different args: executed again.
    b.send(&call_bytes(0x99, COUNTER_PROG, 1, 1, &[0, 0, 0, 6]))
        .await;
    let other = b.recv().await.unwrap();
    assert_ne!(other, first);
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    // A non-cached procedure is executed every time.
    for _ in 0..2 {
        b.send(&call_bytes(0x9a, COUNTER_PROG, 1, 2, &args)).await;
        b.recv().await.unwrap();
    }
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn reconnects_and_resends_with_the_same_xid() {
    use oncrpc::tcp::ReconnectPolicy;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let fake = tokio::spawn(async move {
        // First connection: read the call, then drop the connection.
        let (s, _) = listener.accept().await.unwrap();
        let mut first = Raw {
            s,
            d: RecordDecoder::new(1 << 20),
        };
        let call1 = first.recv().await.unwrap();
        drop(first);
        // Second connection: the same call arrives again; answer it.
        let (s, _) = listener.accept().await.unwrap();
        let mut second = Raw {
            s,
            d: RecordDecoder::new(1 << 20),
        };
        let call2 = second.recv().await.unwrap();
        assert_eq!(call1, call2, "retransmitted byte for byte, same XID");
        let h = CallHeader::decode(&mut Decoder::new(&call2)).unwrap();
        let mut reply = Vec::new();
        ReplyHeader::accepted(h.xid, Accepted::Success).encode(&mut reply);
        second.send(&reply).await;
        // Keep the connection open until the client has read the reply.
        let _ = second.recv().await;
        h.xid
    });
    let t = TcpClient::connect_with(
        addr,
        0xabc0,
        ClientConfig::default(),
        TcpConfig::default(),
        ReconnectPolicy {
            max_attempts: 3,
            delay: Duration::from_millis(20),
        },
    )
    .await
    .unwrap();
    let c = EchoClient::new(t);
    c.null().await.unwrap();
    drop(c);
    assert_eq!(fake.await.unwrap(), 0xabc0);
}

#[tokio::test]
async fn fails_pending_calls_when_connection_closes_without_reconnect() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        let mut raw = Raw {
            s,
            d: RecordDecoder::new(1 << 20),
        };
        let _ = raw.recv().await;
    });
    let c = client(addr).await;
    assert_eq!(c.null().await, Err(RpcError::ConnectionClosed));
    assert_eq!(c.null().await, Err(RpcError::ConnectionClosed));
}

#[tokio::test]
async fn retransmits_late_call_with_the_same_xid_on_timeout() {
    use oncrpc::client::RetransmitPolicy;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let fake = tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        let mut raw = Raw {
            s,
            d: RecordDecoder::new(1 << 20),
        };
        let first = raw.recv().await.unwrap(); // ignored
        let second = raw.recv().await.unwrap();
        assert_eq!(first, second);
        let h = CallHeader::decode(&mut Decoder::new(&second)).unwrap();
        let mut reply = Vec::new();
        ReplyHeader::accepted(h.xid, Accepted::Success).encode(&mut reply);
        raw.send(&reply).await;
        // A third copy must not come: the next record is the next call.
        let third = raw.recv().await.unwrap();
        let h3 = CallHeader::decode(&mut Decoder::new(&third)).unwrap();
        assert_ne!(h3.xid, h.xid);
        // Its retransmission, then nothing until the client goes away.
        assert_eq!(raw.recv().await.unwrap(), third);
        assert!(raw.recv().await.is_none());
    });
    let cfg = ClientConfig {
        max_in_flight: 8,
        retransmit: RetransmitPolicy {
            timeout: Some(Duration::from_millis(100)),
            max_retransmits: 1,
        },
    };
    let t = TcpClient::connect(addr, 5, cfg, TcpConfig::default())
        .await
        .unwrap();
    let c = EchoClient::new(t);
    c.null().await.unwrap();
    // The fake server never answers this one: one retransmission, then
    // the call times out.
    assert_eq!(c.null().await, Err(RpcError::TimedOut));
    drop(c);
    fake.await.unwrap();
}
