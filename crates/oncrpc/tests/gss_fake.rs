//! RPCSEC_GSS (RFC 2203) end to end over TCP with the stand-in mechanism
//! (`oncrpc::gss::fake`): our client and server in the three services,
//! byte-exact, the caller's identity seen by the service, a two-round
//! context creation, and the refusals a client without the right
//! credentials gets. The Kerberos runs are in the `gss` crate's tests.

use std::ops::RangeInclusive;
use std::sync::Arc;

use bytes::Bytes;
use oncrpc::client::{ClientConfig, ReplyHint, RpcCall, RpcError};
use oncrpc::echo::{EchoClient, EchoService, ECHO_PROGRAM, ECHO_VERSION};
use oncrpc::gss::fake::{FakeAcceptor, FakeInitiator};
use oncrpc::gss::{GssClient, GssConfig, GssServer, GssService};
use oncrpc::msg::{AuthStat, Credential, OpaqueAuth};
use oncrpc::tcp::{TcpClient, TcpConfig, TcpServer};
use oncrpc::{CallContext, ClientTransport, RpcService, Server, ServiceError};
use xdr::{Decoder, Encoder, XdrBuf};

const KEY: u64 = 0x1234_5678;
const WHOAMI_PROG: u32 = 0x2000_0077;

/// Answers with the caller's principal and service (procedure 1).
struct WhoAmI;

impl RpcService for WhoAmI {
    fn program(&self) -> u32 {
        WHOAMI_PROG
    }
    fn versions(&self) -> RangeInclusive<u32> {
        1..=1
    }
    async fn call(&self, ctx: CallContext, _args: Bytes) -> Result<XdrBuf, ServiceError> {
        let mut out = XdrBuf::new();
        match ctx.credential {
            Credential::Gss(id) => {
                out.put_opaque(id.principal.as_bytes());
                out.put_u32(id.service.0);
            }
            _ => {
                out.put_opaque(b"");
                out.put_u32(0);
            }
        }
        Ok(out)
    }
}

async fn start(gss: Option<FakeAcceptor>) -> std::net::SocketAddr {
    let mut server = Server::new();
    if let Some(a) = gss {
        server = server.with_gss(Arc::new(GssServer::new(Arc::new(a), GssConfig::default())));
    }
    server.register(EchoService::default());
    server.register(WhoAmI);
    let srv = TcpServer::bind("127.0.0.1:0", Arc::new(server), TcpConfig::default())
        .await
        .unwrap();
    let addr = srv.local_addr().unwrap();
    srv.spawn();
    addr
}

async fn tcp(addr: std::net::SocketAddr) -> TcpClient {
    TcpClient::connect(addr, 0x77, ClientConfig::default(), TcpConfig::default())
        .await
        .unwrap()
}

fn alice() -> FakeInitiator {
    FakeInitiator {
        principal: "alice@FAKE".into(),
        key: KEY,
    }
}

async fn whoami<T: ClientTransport>(t: &T) -> (String, u32) {
    let r = t
        .call(RpcCall {
            prog: WHOAMI_PROG,
            vers: 1,
            proc_: 1,
            cred: OpaqueAuth::NONE,
            args: XdrBuf::new(),
            reply_hint: ReplyHint {
                max_reply_len: 1024,
                ddp: None,
            },
        })
        .await
        .unwrap();
    let mut dec = Decoder::from_bytes(&r);
    let name = String::from_utf8(dec.opaque(1024).unwrap().to_vec()).unwrap();
    (name, dec.u32().unwrap())
}

fn pattern(n: usize, seed: u8) -> Bytes {
    Bytes::from(
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect::<Vec<u8>>(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_three_services_carry_calls_byte_exact_over_tcp() {
    let addr = start(Some(FakeAcceptor {
        key: KEY,
        rounds: 1,
    }))
    .await;
    for service in [GssService::NONE, GssService::INTEGRITY, GssService::PRIVACY] {
        let gss = GssClient::establish(
            tcp(addr).await,
            &alice(),
            "nfs@localhost",
            ECHO_PROGRAM,
            ECHO_VERSION,
            service,
        )
        .await
        .unwrap();
        assert_eq!(whoami(&gss).await, ("alice@FAKE".to_string(), service.0));
        let echo = EchoClient::new(&gss);
        echo.null().await.unwrap();
        for (n, len) in [0usize, 1, 3, 4096, 1 << 20].into_iter().enumerate() {
            let data = pattern(len, n as u8);
            assert_eq!(echo.echo(data.clone()).await.unwrap(), data, "{len} bytes");
        }
        // Several in flight on one context.
        let gss = Arc::new(gss);
        let tasks: Vec<_> = (0..16)
            .map(|i| {
                let g = Arc::clone(&gss);
                tokio::spawn(async move {
                    let data = pattern(10_000 + i, i as u8);
                    assert_eq!(EchoClient::new(&*g).echo(data.clone()).await.unwrap(), data);
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        gss.destroy().await.unwrap();
        let echo = EchoClient::new(&*gss);
        // The destroyed context is unknown to the server.
        assert_eq!(
            echo.null().await.unwrap_err(),
            RpcError::Auth(AuthStat::RPCSEC_GSS_CREDPROBLEM)
        );
    }
}

#[tokio::test]
async fn a_two_round_context_creation_uses_continue_init() {
    let addr = start(Some(FakeAcceptor {
        key: KEY,
        rounds: 2,
    }))
    .await;
    let gss = GssClient::establish(
        tcp(addr).await,
        &alice(),
        "nfs@localhost",
        ECHO_PROGRAM,
        ECHO_VERSION,
        GssService::INTEGRITY,
    )
    .await
    .unwrap();
    assert_eq!(whoami(&gss).await.0, "alice@FAKE");
}

#[tokio::test]
async fn clients_without_the_right_credentials_get_nothing() {
    let addr = start(Some(FakeAcceptor {
        key: KEY,
        rounds: 1,
    }))
    .await;
    // Credentials for another key (a ticket for another service).
    let wrong = FakeInitiator {
        principal: "alice@FAKE".into(),
        key: KEY + 1,
    };
    let err = GssClient::establish(
        tcp(addr).await,
        &wrong,
        "nfs@localhost",
        ECHO_PROGRAM,
        ECHO_VERSION,
        GssService::PRIVACY,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, RpcError::Gss { .. }), "{err:?}");
    // A server without RPCSEC_GSS refuses the flavor.
    let plain = start(None).await;
    let err = GssClient::establish(
        tcp(plain).await,
        &alice(),
        "nfs@localhost",
        ECHO_PROGRAM,
        ECHO_VERSION,
        GssService::NONE,
    )
    .await
    .unwrap_err();
    assert_eq!(err, RpcError::Auth(AuthStat::AUTH_BADCRED));
}
