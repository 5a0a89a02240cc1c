//! RPCSEC_GSS with real Kerberos over RPC-over-RDMA: a throw-away MIT KDC
//! on loopback (`testkit::krb5::TestKdc`), our RDMA client and server on
//! softrnic (real iWARP on 127.0.0.1), versions 1 and 2, the three
//! services byte-exact both ways, the principal seen by the server, the
//! chunk rules of RFC 8166 §9.2.2 (integrity and privacy: no direct data
//! placement), a body changed in flight refused, and a client without a
//! ticket, or with a ticket for another service, getting nothing. One
//! test: the Kerberos library reads its configuration and credential
//! cache from the process environment.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use gss::Krb5Initiator;
use oncrpc::client::{CallSigner, RpcCall, RpcError};
use oncrpc::echo::{EchoClient, ECHO_PROGRAM, ECHO_VERSION};
use oncrpc::gss::{GssClient, GssService};
use oncrpc::ClientTransport;
use rpcrdma::plan::Version;
use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaListener};
use softrnic::{SoftConfig, SoftDevice};
use support::{krb5_server, whoami};
use testkit::krb5::{TestKdc, REALM};
use xdr::XdrBuf;

fn pattern(n: usize, seed: u8) -> Bytes {
    Bytes::from(
        (0..n)
            .map(|i| (i as u8).wrapping_mul(29) ^ seed)
            .collect::<Vec<u8>>(),
    )
}

async fn establish<T: ClientTransport>(
    t: T,
    target: &str,
    service: GssService,
) -> Result<GssClient<T>, RpcError> {
    let init = Krb5Initiator::from_ccache().map_err(|e| RpcError::Gss {
        major: e.major,
        minor: e.minor,
    })?;
    GssClient::establish(t, &init, target, ECHO_PROGRAM, ECHO_VERSION, service).await
}

/// Flips a byte in the middle of a DATA call's protected arguments.
struct BodyTamper<T>(T);

impl<T: ClientTransport> ClientTransport for BodyTamper<T> {
    async fn call(&self, call: RpcCall) -> Result<Bytes, RpcError> {
        self.0.call(call).await
    }

    async fn call_signed(
        &self,
        mut call: RpcCall,
        signer: Arc<dyn CallSigner>,
    ) -> Result<Bytes, RpcError> {
        if call.proc_ != 0 {
            let mut b = BytesMut::from(&call.args.to_bytes()[..]);
            let mid = b.len() / 2;
            b[mid] ^= 0x10;
            call.args = XdrBuf::from(b.freeze());
        }
        self.0.call_signed(call, signer).await
    }
}

#[test]
fn kerberos_rpcsec_gss_over_rdma() {
    let Some(kdc) = TestKdc::start("gss-rdma") else {
        return;
    };
    let alice = kdc.user_ccache("alice");
    kdc.use_in_process(&alice);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (_, server) = krb5_server();
        let sdev = SoftDevice::new(SoftConfig::default(), 77);
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let listener = RdmaListener::bind(&sdev, &any, Arc::new(server), Default::default())
            .await
            .unwrap();
        let addr = listener.local_addr();
        listener.spawn();
        let cdev = SoftDevice::new(SoftConfig::default(), 78);
        for version in [Version::V1, Version::V2] {
            let cfg = RdmaClientConfig {
                version,
                ..RdmaClientConfig::default()
            };
            let rdma = RdmaClient::connect(&cdev, &addr, cfg).await.unwrap();
            three_services(&rdma).await;
            assert_eq!(rdma.version(), version);
            rdma.close();
        }
        let rdma = RdmaClient::connect(&cdev, &addr, RdmaClientConfig::default())
            .await
            .unwrap();
        tampered_body(&rdma).await;
        refusals(&kdc, &rdma).await;
        rdma.close();
    });
}

async fn three_services(rdma: &RdmaClient<SoftDevice>) {
    for service in [GssService::NONE, GssService::INTEGRITY, GssService::PRIVACY] {
        let client = establish(rdma.clone(), "nfs@localhost", service)
            .await
            .unwrap();
        assert_eq!(whoami(&client).await, format!("alice@{REALM}"));
        let echo = EchoClient::new(&client);
        let before = rdma.stats();
        for (i, len) in [0usize, 1, 4095, 70_001, 1 << 20, 3 << 20]
            .into_iter()
            .enumerate()
        {
            let data = pattern(len, i as u8);
            assert_eq!(
                echo.echo(data.clone()).await.unwrap(),
                data,
                "{service:?} {len}"
            );
        }
        let after = rdma.stats();
        let ddp = (after.read_chunk_calls - before.read_chunk_calls)
            + (after.write_chunk_replies - before.write_chunk_replies);
        if service == GssService::NONE {
            assert!(ddp > 0, "krb5 keeps direct placement: {after:?}");
        } else {
            // RFC 8166 §9.2.2: the protected body is sent whole.
            assert_eq!(ddp, 0, "{service:?}: {after:?}");
            assert!(after.position_zero_calls > before.position_zero_calls);
            assert!(after.reply_chunk_replies > before.reply_chunk_replies);
        }
        client.destroy().await.unwrap();
    }
}

async fn tampered_body(rdma: &RdmaClient<SoftDevice>) {
    for service in [GssService::INTEGRITY, GssService::PRIVACY] {
        let client = establish(BodyTamper(rdma.clone()), "nfs@localhost", service)
            .await
            .unwrap();
        let err = EchoClient::new(&client)
            .echo(pattern(100_000, 9))
            .await
            .unwrap_err();
        assert_eq!(err, RpcError::GarbageArgs, "{service:?}");
    }
}

async fn refusals(kdc: &TestKdc, rdma: &RdmaClient<SoftDevice>) {
    // No ticket: no initiator credentials, nothing sent, nothing read.
    std::env::set_var("KRB5CCNAME", kdc.empty_ccache());
    assert!(Krb5Initiator::from_ccache().is_err());
    // A ticket for a service whose keys the server does not hold.
    let bob = kdc.user_ccache("bob");
    kdc.admin(&["addprinc", "-randkey", "host/localhost"]);
    std::env::set_var("KRB5CCNAME", &bob);
    let err = establish(rdma.clone(), "host@localhost", GssService::PRIVACY)
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Gss { .. }), "{err:?}");
    // Bob with the right ticket gets in as bob.
    let client = establish(rdma.clone(), "nfs@localhost", GssService::PRIVACY)
        .await
        .unwrap();
    assert_eq!(whoami(&client).await, format!("bob@{REALM}"));
}
