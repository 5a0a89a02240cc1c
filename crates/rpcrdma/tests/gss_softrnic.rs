//! RPCSEC_GSS (RFC 2203) over RPC-over-RDMA on softrnic (real iWARP on
//! 127.0.0.1), with the stand-in mechanism (`oncrpc::gss::fake`): the
//! three services byte-exact both ways in versions 1 and 2, the chunk
//! rules of RFC 8166 §9.2.2 seen in the client's counters (authentication
//! only keeps direct data placement; integrity and privacy send the
//! protected body as Position-Zero Read chunks and Reply chunks), and a
//! tampered header, a tampered body and a replayed sequence number
//! refused. The Kerberos runs over RDMA are in the `gss` crate's tests.
#![cfg(feature = "transport")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use oncrpc::client::{CallSigner, RpcCall, RpcError};
use oncrpc::echo::{EchoClient, EchoService, ECHO_PROGRAM, ECHO_VERSION};
use oncrpc::gss::fake::{FakeAcceptor, FakeInitiator};
use oncrpc::gss::{GssClient, GssConfig, GssServer, GssService};
use oncrpc::limits::trips;
use oncrpc::msg::{AuthStat, OpaqueAuth};
use oncrpc::{ClientTransport, Server};
use rpcrdma::plan::Version;
use rpcrdma::transport::{ClientStats, RdmaClient, RdmaClientConfig, RdmaListener};
use softrnic::{SoftConfig, SoftDevice};
use xdr::XdrBuf;

const KEY: u64 = 0x5eed_cafe;

fn pattern(n: usize, seed: u8) -> Bytes {
    (0..n)
        .map(|i| seed.wrapping_add((i * 7 + i / 251) as u8))
        .collect::<Vec<u8>>()
        .into()
}

fn alice() -> FakeInitiator {
    FakeInitiator {
        principal: "alice@FAKE".into(),
        key: KEY,
    }
}

/// An RDMA listener whose RPC core knows RPCSEC_GSS, serving ECHO.
async fn serve(seed: u64) -> (SoftDevice, SocketAddr) {
    let sdev = SoftDevice::new(SoftConfig::default(), seed);
    let acceptor = FakeAcceptor {
        key: KEY,
        rounds: 1,
    };
    let mut server = Server::new().with_gss(Arc::new(GssServer::new(
        Arc::new(acceptor),
        GssConfig::default(),
    )));
    server.register(EchoService::default());
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let listener = RdmaListener::bind(&sdev, &any, Arc::new(server), Default::default())
        .await
        .unwrap();
    let addr = listener.local_addr();
    listener.spawn();
    (SoftDevice::new(SoftConfig::default(), seed + 1), addr)
}

async fn connect(dev: &SoftDevice, addr: SocketAddr, version: Version) -> RdmaClient<SoftDevice> {
    let cfg = RdmaClientConfig {
        version,
        ..RdmaClientConfig::default()
    };
    RdmaClient::connect(dev, &addr, cfg).await.unwrap()
}

async fn establish<T: ClientTransport>(t: T, service: GssService) -> GssClient<T> {
    GssClient::establish(
        t,
        &alice(),
        "nfs@localhost",
        ECHO_PROGRAM,
        ECHO_VERSION,
        service,
    )
    .await
    .unwrap()
}

fn delta(after: ClientStats, before: ClientStats) -> [u64; 4] {
    [
        after.read_chunk_calls - before.read_chunk_calls,
        after.write_chunk_replies - before.write_chunk_replies,
        after.position_zero_calls - before.position_zero_calls,
        after.reply_chunk_replies - before.reply_chunk_replies,
    ]
}

async fn three_services(version: Version, seed: u64) {
    let (dev, addr) = serve(seed).await;
    let rdma = connect(&dev, addr, version).await;
    for service in [GssService::NONE, GssService::INTEGRITY, GssService::PRIVACY] {
        let gss = establish(rdma.clone(), service).await;
        let echo = EchoClient::new(&gss);
        echo.null().await.unwrap();
        let before = rdma.stats();
        for (i, n) in [0usize, 1, 3990, 4097, 65_537, 1 << 20, 3 << 20]
            .into_iter()
            .enumerate()
        {
            let data = pattern(n, i as u8);
            assert_eq!(
                echo.echo(data.clone()).await.unwrap(),
                data,
                "{service:?} {n}"
            );
        }
        let [reads, writes, pos0, reply_chunks] = delta(rdma.stats(), before);
        if service == GssService::NONE {
            // Authentication only: the body is not protected, so the
            // bulk data is still placed directly (RFC 8166 §9.2.2).
            assert!(reads >= 3 && writes >= 3, "{service:?}: {:?}", rdma.stats());
        } else {
            // Integrity and privacy: no data item is moved by DDP; large
            // calls are Long Calls, large replies Long Replies.
            assert_eq!((reads, writes), (0, 0), "{service:?}: {:?}", rdma.stats());
            assert!(
                pos0 >= 3 && reply_chunks >= 3,
                "{service:?}: {:?}",
                rdma.stats()
            );
        }
        gss.destroy().await.unwrap();
        assert_eq!(
            echo.null().await.unwrap_err(),
            RpcError::Auth(AuthStat::RPCSEC_GSS_CREDPROBLEM)
        );
    }
    assert_eq!(rdma.version(), version);
    rdma.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_services_byte_exact_over_rdma_v1() {
    three_services(Version::V1, 700).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_services_byte_exact_over_rdma_v2() {
    three_services(Version::V2, 710).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_on_one_context_over_rdma() {
    let (dev, addr) = serve(720).await;
    let rdma = connect(&dev, addr, Version::V1).await;
    let gss = Arc::new(establish(rdma.clone(), GssService::PRIVACY).await);
    let tasks: Vec<_> = (0..24)
        .map(|i| {
            let g = Arc::clone(&gss);
            tokio::spawn(async move {
                let data = pattern(5_000 + i * 9_001, i as u8);
                assert_eq!(EchoClient::new(&*g).echo(data.clone()).await.unwrap(), data);
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    rdma.close();
}

/// What a man in the middle could do to a call after it was signed and
/// protected.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Attack {
    /// Flip a byte of the header (its MIC no longer matches).
    Header,
    /// Flip a byte of the protected arguments.
    Body,
    /// Send the call again after its reply, with its sequence number.
    Replay,
}

struct Tamper<T> {
    inner: T,
    attack: Attack,
}

/// Signs a header other than the one sent.
struct OtherHeader(Arc<dyn CallSigner>);

impl CallSigner for OtherHeader {
    fn verifier(&self, header: &[u8]) -> Result<OpaqueAuth, RpcError> {
        let mut h = header.to_vec();
        let last = h.len() - 1;
        h[last] ^= 0x40;
        self.0.verifier(&h)
    }
    fn check_reply(&self, verf: &OpaqueAuth) -> Result<(), RpcError> {
        self.0.check_reply(verf)
    }
}

impl<T: ClientTransport> ClientTransport for Tamper<T> {
    async fn call(&self, call: RpcCall) -> Result<Bytes, RpcError> {
        self.inner.call(call).await
    }

    async fn call_signed(
        &self,
        mut call: RpcCall,
        signer: Arc<dyn CallSigner>,
    ) -> Result<Bytes, RpcError> {
        // Context creation (the NULL procedure) goes through untouched.
        if call.proc_ == 0 {
            return self.inner.call_signed(call, signer).await;
        }
        match self.attack {
            Attack::Header => {
                let signer: Arc<dyn CallSigner> = Arc::new(OtherHeader(signer));
                self.inner.call_signed(call, signer).await
            }
            Attack::Body => {
                let mut b = BytesMut::from(&call.args.to_bytes()[..]);
                let mid = b.len() / 2;
                b[mid] ^= 1;
                call.args = XdrBuf::from(b.freeze());
                self.inner.call_signed(call, signer).await
            }
            Attack::Replay => {
                self.inner.call_signed(call.clone(), signer.clone()).await?;
                let again = self.inner.call_signed(call, signer);
                tokio::time::timeout(Duration::from_millis(500), again)
                    .await
                    .unwrap_or(Err(RpcError::TimedOut))
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_and_replayed_calls_are_refused_over_rdma() {
    let (dev, addr) = serve(730).await;
    let rdma = connect(&dev, addr, Version::V1).await;
    let data = pattern(200_000, 3);
    for service in [GssService::NONE, GssService::INTEGRITY, GssService::PRIVACY] {
        // A header whose MIC does not verify: RPCSEC_GSS_CREDPROBLEM
        // (RFC 2203 §5.3.3.3).
        let header = Tamper {
            inner: rdma.clone(),
            attack: Attack::Header,
        };
        let gss = establish(header, service).await;
        let err = EchoClient::new(&gss).echo(data.clone()).await.unwrap_err();
        assert_eq!(
            err,
            RpcError::Auth(AuthStat::RPCSEC_GSS_CREDPROBLEM),
            "{service:?}"
        );

        // The replayed sequence number gets no reply (RFC 2203 §5.3.3.1).
        let replayed = trips("gss.replayed");
        let replay = Tamper {
            inner: rdma.clone(),
            attack: Attack::Replay,
        };
        let gss = establish(replay, service).await;
        // The first call is answered; the replay is not.
        let err = EchoClient::new(&gss).echo(data.clone()).await.unwrap_err();
        assert_eq!(err, RpcError::TimedOut, "{service:?}");
        assert!(trips("gss.replayed") > replayed, "{service:?}");
    }
    // A body changed in flight: the integrity check or the unwrap fails,
    // GARBAGE_ARGS (RFC 2203 §5.3.3.4.2). With krb5 the body is not
    // protected, which is what krb5i is for.
    for service in [GssService::INTEGRITY, GssService::PRIVACY] {
        let bad_body = trips("gss.bad_body");
        let body = Tamper {
            inner: rdma.clone(),
            attack: Attack::Body,
        };
        let gss = establish(body, service).await;
        let err = EchoClient::new(&gss).echo(data.clone()).await.unwrap_err();
        assert_eq!(err, RpcError::GarbageArgs, "{service:?}");
        assert!(trips("gss.bad_body") > bad_body);
    }
    // The connection still serves an honest context.
    let gss = establish(rdma.clone(), GssService::PRIVACY).await;
    assert_eq!(
        EchoClient::new(&gss).echo(data.clone()).await.unwrap(),
        data
    );
    rdma.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_or_no_gss_get_nothing_over_rdma() {
    let (dev, addr) = serve(740).await;
    let rdma = connect(&dev, addr, Version::V2).await;
    let wrong = FakeInitiator {
        principal: "alice@FAKE".into(),
        key: KEY + 1,
    };
    let err = GssClient::establish(
        rdma.clone(),
        &wrong,
        "nfs@localhost",
        ECHO_PROGRAM,
        ECHO_VERSION,
        GssService::PRIVACY,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, RpcError::Gss { .. }), "{err:?}");
    rdma.close();
}

/// 100 MiB each way per service over RDMA (1 MiB calls, 8 in flight).
/// `cargo test -p rpcrdma --test gss_softrnic -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "100 MiB per service; slow in debug builds"]
async fn hundred_mib_each_way_per_service() {
    let (dev, addr) = serve(750).await;
    let rdma = connect(&dev, addr, Version::V1).await;
    for service in [GssService::NONE, GssService::INTEGRITY, GssService::PRIVACY] {
        let gss = Arc::new(establish(rdma.clone(), service).await);
        let t0 = std::time::Instant::now();
        let tasks: Vec<_> = (0..8)
            .map(|w| {
                let g = Arc::clone(&gss);
                tokio::spawn(async move {
                    for i in 0..100 / 8 + 1 {
                        if i * 8 + w >= 100 {
                            break;
                        }
                        let data = pattern(1 << 20, (i * 8 + w) as u8);
                        assert_eq!(EchoClient::new(&*g).echo(data.clone()).await.unwrap(), data);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let secs = t0.elapsed().as_secs_f64();
        println!(
            "{service:?}: 100 MiB each way in {secs:.2} s ({:.0} MiB/s)",
            100.0 / secs
        );
    }
    rdma.close();
}
