//! RPC-over-TLS (RFC 9289) on the TCP shells, with certificates the test
//! makes: the probe, the upgrade, mutual TLS, a server without TLS, and a
//! client that stalls the handshake.

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use oncrpc::client::{ClientConfig, RpcError};
use oncrpc::echo::{EchoClient, EchoService};
use oncrpc::limits::trips as tripped;
use oncrpc::msg::{AuthStat, Rejected, ReplyBody, ReplyHeader};
use oncrpc::record::RecordDecoder;
use oncrpc::tcp::{ClientTls, ReconnectPolicy, ServerTls, TcpClient, TcpConfig, TcpServer};
use oncrpc::tls::{one_record, probe_call, STARTTLS};
use oncrpc::{
    CallContext, ClientTransport, RpcCall, RpcService, Server, ServiceError, TransportSecurity,
};
use testkit::tls::TestPki;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use xdr::{Decoder, Encoder, XdrBuf};

/// Answers with the security of the caller's connection.
struct Whoami;

const WHOAMI_PROG: u32 = 0x2000_0777;

impl RpcService for Whoami {
    fn program(&self) -> u32 {
        WHOAMI_PROG
    }
    fn versions(&self) -> RangeInclusive<u32> {
        1..=1
    }
    async fn call(&self, ctx: CallContext, _args: Bytes) -> Result<XdrBuf, ServiceError> {
        let mut out = XdrBuf::new();
        out.put_u32(match ctx.peer.security {
            TransportSecurity::None => 0,
            TransportSecurity::Tls => 1,
            TransportSecurity::MutualTls => 2,
        });
        Ok(out)
    }
}

async fn start(tls: Option<ServerTls>) -> std::net::SocketAddr {
    let mut server = Server::new();
    server.register(EchoService::default());
    server.register(Whoami);
    let srv = TcpServer::bind("127.0.0.1:0", Arc::new(server), TcpConfig::default())
        .await
        .unwrap();
    let srv = match tls {
        Some(t) => srv.with_tls(t),
        None => srv,
    };
    let addr = srv.local_addr().unwrap();
    srv.spawn();
    addr
}

fn server_tls(pki: &TestPki, mutual: bool) -> ServerTls {
    let ca = mutual.then_some(pki.ca.as_path());
    ServerTls::from_pem(&pki.server_cert, &pki.server_key, ca).unwrap()
}

async fn tls_client(addr: std::net::SocketAddr, tls: ClientTls) -> std::io::Result<TcpClient> {
    TcpClient::connect_tls(
        addr,
        0x100,
        ClientConfig::default(),
        TcpConfig::default(),
        ReconnectPolicy::default(),
        tls,
    )
    .await
}

async fn whoami<T: ClientTransport>(c: &T) -> Result<u32, RpcError> {
    let r = c
        .call(RpcCall {
            prog: WHOAMI_PROG,
            vers: 1,
            proc_: 0,
            cred: oncrpc::msg::OpaqueAuth::NONE,
            args: XdrBuf::new(),
            reply_hint: oncrpc::ReplyHint {
                max_reply_len: 64,
                ddp: None,
            },
        })
        .await?;
    Ok(Decoder::new(&r).u32().unwrap())
}

fn pattern(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[tokio::test]
async fn echo_over_tls_is_byte_exact() {
    let pki = TestPki::new("tls-echo");
    let addr = start(Some(server_tls(&pki, false))).await;
    let tls = ClientTls::from_pem(&pki.ca, None, "127.0.0.1").unwrap();
    let client = tls_client(addr, tls).await.unwrap();
    assert_eq!(whoami(&client).await.unwrap(), 1, "a TLS connection");
    let echo = EchoClient::new(client);
    // A few MiB each way, in records larger than one TLS record (16 KiB)
    // and several in flight at once.
    let sizes = [0usize, 1, 16 * 1024 + 3, 1 << 20, 3 << 20];
    let tasks: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let echo = echo.clone();
            tokio::spawn(async move {
                let data = pattern(n, i as u8);
                let back = echo.echo(data.clone()).await.unwrap();
                assert_eq!(back, data, "{n} bytes");
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn plain_clients_still_served_on_a_tls_listener() {
    let pki = TestPki::new("tls-plain");
    let addr = start(Some(server_tls(&pki, false))).await;
    let client = TcpClient::connect(addr, 7, ClientConfig::default(), TcpConfig::default())
        .await
        .unwrap();
    assert_eq!(whoami(&client).await.unwrap(), 0, "a plain connection");
    let echo = EchoClient::new(client);
    let data = pattern(70_000, 9);
    assert_eq!(echo.echo(data.clone()).await.unwrap(), data);
}

#[tokio::test]
async fn mutual_tls_tells_verified_clients_apart() {
    let pki = TestPki::new("tls-mtls");
    let addr = start(Some(server_tls(&pki, true))).await;
    let with_cert = ClientTls::from_pem(
        &pki.ca,
        Some((&pki.client_cert, &pki.client_key)),
        "localhost",
    )
    .unwrap();
    let c = tls_client(addr, with_cert).await.unwrap();
    assert_eq!(whoami(&c).await.unwrap(), 2, "mutual TLS");

    let without = ClientTls::from_pem(&pki.ca, None, "localhost").unwrap();
    let c = tls_client(addr, without).await.unwrap();
    assert_eq!(whoami(&c).await.unwrap(), 1, "TLS without a certificate");

    // A certificate from another CA: the server refuses the handshake
    // (TLS 1.3 reports it after the client's Finished, so the client may
    // see it at its first call), and no call is ever answered.
    let failed = tripped("tls.handshake_failed");
    let rogue = ClientTls::from_pem(
        &pki.ca,
        Some((&pki.rogue_cert, &pki.rogue_key)),
        "localhost",
    )
    .unwrap();
    if let Ok(c) = tls_client(addr, rogue).await {
        assert!(whoami(&c).await.is_err(), "a rogue certificate was served");
    }
    assert!(tripped("tls.handshake_failed") > failed);
}

#[tokio::test]
async fn client_checks_the_server_certificate() {
    let pki = TestPki::new("tls-name");
    let other = TestPki::new("tls-other");
    let addr = start(Some(server_tls(&pki, false))).await;
    // Signed by a CA the client does not trust.
    let wrong_ca = ClientTls::from_pem(&other.ca, None, "localhost").unwrap();
    assert!(tls_client(addr, wrong_ca).await.is_err());
    // A name the certificate does not carry.
    let wrong_name = ClientTls::from_pem(&pki.ca, None, "nfs.example").unwrap();
    assert!(tls_client(addr, wrong_name).await.is_err());
}

/// Reads one record from a raw socket.
async fn read_record(s: &mut TcpStream) -> Option<Bytes> {
    let mut d = RecordDecoder::new(1 << 16);
    loop {
        if let Some(r) = d.next_record().unwrap() {
            return Some(r);
        }
        d.read_buf().reserve(4096);
        if s.read_buf(d.read_buf()).await.ok()? == 0 {
            return None;
        }
    }
}

#[tokio::test]
async fn server_without_tls_answers_the_probe_auth_error() {
    let addr = start(None).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&one_record(&probe_call(0x55, 100_003, 3)))
        .await
        .unwrap();
    let r = read_record(&mut s).await.unwrap();
    let reply = ReplyHeader::decode(&mut Decoder::new(&r)).unwrap();
    assert_eq!(reply.xid, 0x55);
    assert_eq!(
        reply.body,
        ReplyBody::Denied(Rejected::AuthError(AuthStat::AUTH_BADCRED))
    );
    // Our client, asked for TLS, does not fall back to plain RPC.
    let pki = TestPki::new("tls-none");
    let tls = ClientTls::from_pem(&pki.ca, None, "127.0.0.1").unwrap();
    let e = tls_client(addr, tls).await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
}

#[tokio::test]
async fn tls_server_answers_starttls() {
    let pki = TestPki::new("tls-probe");
    let addr = start(Some(server_tls(&pki, false))).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&one_record(&probe_call(0x66, 0x2000_4E52, 1)))
        .await
        .unwrap();
    let r = read_record(&mut s).await.unwrap();
    let reply = ReplyHeader::decode(&mut Decoder::new(&r)).unwrap();
    assert_eq!(reply.xid, 0x66);
    let ReplyBody::Accepted { verf, .. } = reply.body else {
        panic!("denied: {:?}", reply.body);
    };
    assert_eq!(&verf.body[..], &STARTTLS[..]);
}

/// Waits (at most `limit`) for the server to close `s`.
async fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let end = Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(end.into(), s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test]
async fn stalled_handshake_is_closed_and_counted() {
    let pki = TestPki::new("tls-stall");
    let tls = server_tls(&pki, false).with_handshake_timeout(Duration::from_millis(300));
    let addr = start(Some(tls)).await;
    let before = tripped("tls.handshake_timeout");

    // Probe, read STARTTLS, then the start of a ClientHello and silence.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&one_record(&probe_call(1, 100_003, 3)))
        .await
        .unwrap();
    assert!(read_record(&mut s).await.is_some());
    s.write_all(&[0x16, 0x03, 0x01, 0x00]).await.unwrap();
    assert!(closed_within(&mut s, Duration::from_secs(5)).await);

    // Half a probe and silence: also bounded.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&one_record(&probe_call(2, 100_003, 3))[..20])
        .await
        .unwrap();
    assert!(closed_within(&mut s, Duration::from_secs(5)).await);

    assert!(tripped("tls.handshake_timeout") >= before + 2);
}

/// Process CPU time (user + system) so far, from /proc/self/stat.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<f64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after ')'.
    (f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0)) / 100.0
}

/// Echo throughput and CPU per GiB (client and server in this process),
/// plain TCP vs TLS on one listener, alternated 3 rounds of 128 MiB each
/// way (1 MiB calls, 4 in flight). Not in the default suite:
/// `cargo test -p oncrpc --test tcp_tls -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn tls_vs_plain_echo_throughput() {
    let pki = TestPki::new("tls-bench");
    let addr = start(Some(server_tls(&pki, false))).await;
    let run = |echo: EchoClient<TcpClient>| async move {
        let data = pattern(1 << 20, 1);
        let (t, c) = (Instant::now(), cpu_secs());
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let (echo, data) = (echo.clone(), data.clone());
                tokio::spawn(async move {
                    for _ in 0..32 {
                        assert_eq!(echo.echo(data.clone()).await.unwrap().len(), data.len());
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        (t.elapsed().as_secs_f64(), cpu_secs() - c)
    };
    for round in 0..3 {
        let plain = TcpClient::connect(addr, 1, ClientConfig::default(), TcpConfig::default())
            .await
            .unwrap();
        let (ps, pc) = run(EchoClient::new(plain)).await;
        let tls = ClientTls::from_pem(&pki.ca, None, "127.0.0.1").unwrap();
        let (ts, tc) = run(EchoClient::new(tls_client(addr, tls).await.unwrap())).await;
        // 128 MiB each way = 0.25 GiB moved.
        eprintln!(
            "round {round}: plain {:.0} MiB/s {:.2} CPU s/GiB; TLS {:.0} MiB/s {:.2} CPU s/GiB; TLS/plain throughput {:.2}, CPU {:.2}",
            256.0 / ps,
            pc / 0.25,
            256.0 / ts,
            tc / 0.25,
            ps / ts,
            tc / pc
        );
    }
}
