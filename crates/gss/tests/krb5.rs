//! RPCSEC_GSS with real Kerberos: a throw-away MIT KDC on loopback
//! (`testkit::krb5::TestKdc`), our client and server over TCP in the three
//! services byte-exact, the caller's principal seen by the server, and the
//! refusals: no ticket, a ticket for another service, a replayed and a
//! tampered message. One test: the Kerberos library reads its
//! configuration and credential cache from the process environment.

mod support;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use gss::Krb5Initiator;
use oncrpc::client::{ClientConfig, RpcError};
use oncrpc::echo::{EchoClient, ECHO_PROGRAM, ECHO_VERSION};
use oncrpc::gss::server::{header_len_through_cred, protect_body};
use oncrpc::gss::{
    GssClient, GssCred, GssInitArg, GssInitRes, GssOutcome, GssProc, GssServer, GssService,
    Initiator,
};
use oncrpc::msg::{AuthFlavor, AuthStat, CallHeader, OpaqueAuth, Rejected, ReplyBody, ReplyHeader};
use oncrpc::tcp::{TcpClient, TcpConfig, TcpServer};
use oncrpc::{PeerInfo, TransportKind};
use support::{krb5_server, whoami};
use testkit::krb5::{TestKdc, REALM};
use xdr::{Decoder, Encoder, XdrBuf};

fn pattern(n: usize, seed: u8) -> Bytes {
    Bytes::from(
        (0..n)
            .map(|i| (i as u8).wrapping_mul(13) ^ seed)
            .collect::<Vec<u8>>(),
    )
}

async fn connect(addr: std::net::SocketAddr) -> TcpClient {
    TcpClient::connect(addr, 0x99, ClientConfig::default(), TcpConfig::default())
        .await
        .unwrap()
}

async fn establish(
    addr: std::net::SocketAddr,
    target: &str,
    service: GssService,
) -> Result<GssClient<TcpClient>, RpcError> {
    let init = Krb5Initiator::from_ccache().map_err(|e| {
        eprintln!("initiator: {e}");
        RpcError::Gss {
            major: e.major,
            minor: e.minor,
        }
    })?;
    GssClient::establish(
        connect(addr).await,
        &init,
        target,
        ECHO_PROGRAM,
        ECHO_VERSION,
        service,
    )
    .await
}

#[test]
fn kerberos_rpcsec_gss_over_tcp() {
    let Some(kdc) = TestKdc::start("gss") else {
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
        let (gss, server) = krb5_server();
        let srv = TcpServer::bind("127.0.0.1:0", Arc::new(server), TcpConfig::default())
            .await
            .unwrap();
        let addr = srv.local_addr().unwrap();
        srv.spawn();

        three_services_byte_exact(addr).await;
        refusals(&kdc, addr).await;
        kdc.use_in_process(&alice);
        replay_and_tamper(&gss);
    });
}

async fn three_services_byte_exact(addr: std::net::SocketAddr) {
    for service in [GssService::NONE, GssService::INTEGRITY, GssService::PRIVACY] {
        let client = establish(addr, "nfs@localhost", service).await.unwrap();
        assert_eq!(whoami(&client).await, format!("alice@{REALM}"));
        let echo = EchoClient::new(&client);
        for (i, len) in [0usize, 1, 4095, 1 << 20, 3 << 20].into_iter().enumerate() {
            let data = pattern(len, i as u8);
            assert_eq!(echo.echo(data.clone()).await.unwrap(), data, "{len} bytes");
        }
        client.destroy().await.unwrap();
    }
}

async fn refusals(kdc: &TestKdc, addr: std::net::SocketAddr) {
    // No ticket: no initiator credentials, nothing sent.
    std::env::set_var("KRB5CCNAME", kdc.empty_ccache());
    assert!(Krb5Initiator::from_ccache().is_err());
    // A ticket, but for a service whose keys the server does not hold.
    let bob = kdc.user_ccache("bob");
    kdc.admin(&["addprinc", "-randkey", "host/localhost"]);
    std::env::set_var("KRB5CCNAME", &bob);
    let err = establish(addr, "host@localhost", GssService::PRIVACY)
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Gss { .. }), "{err:?}");
    // Bob with a ticket for the right service gets in as bob.
    let client = establish(addr, "nfs@localhost", GssService::INTEGRITY)
        .await
        .unwrap();
    assert_eq!(whoami(&client).await, format!("bob@{REALM}"));
}

fn peer() -> PeerInfo {
    PeerInfo {
        conn_id: 1,
        addr: Some(([127, 0, 0, 1], 900).into()),
        transport: TransportKind::Tcp,
        security: oncrpc::TransportSecurity::None,
    }
}

/// A call record with `cred`, the verifier made from the header.
fn record(
    cred: &GssCred,
    verf: impl FnOnce(&[u8]) -> OpaqueAuth,
    args: &[u8],
) -> (CallHeader, Bytes, usize) {
    let mut hdr = CallHeader {
        xid: 7,
        prog: ECHO_PROGRAM,
        vers: ECHO_VERSION,
        proc_: 1,
        cred: OpaqueAuth {
            flavor: AuthFlavor::RPCSEC_GSS,
            body: xdr::to_bytes(cred),
        },
        verf: OpaqueAuth::NONE,
    };
    let head = xdr::to_bytes(&hdr);
    hdr.verf = verf(&head[..header_len_through_cred(&hdr.cred)]);
    let mut rec = xdr::to_bytes(&hdr).to_vec();
    let at = rec.len();
    rec.extend_from_slice(args);
    (hdr, Bytes::from(rec), at)
}

fn auth_error(o: GssOutcome) -> Option<AuthStat> {
    let GssOutcome::Reply(r) = o else { return None };
    let b = r.to_bytes();
    match ReplyHeader::decode(&mut Decoder::from_bytes(&b)).ok()?.body {
        ReplyBody::Denied(Rejected::AuthError(s)) => Some(s),
        _ => None,
    }
}

/// Against the server core with real Kerberos messages: a replayed DATA
/// call is dropped, a tampered header or body is refused.
fn replay_and_tamper(gss: &GssServer) {
    let init = Krb5Initiator::from_ccache().unwrap();
    let mut ctx = init.new_context("nfs@localhost").unwrap();
    let tok = ctx.step(&[]).unwrap().token;
    let cred = GssCred {
        proc_: GssProc::RPCSEC_GSS_INIT,
        seq_num: 0,
        service: GssService::INTEGRITY,
        handle: Bytes::new(),
    };
    let args = xdr::to_bytes(&GssInitArg {
        gss_token: Bytes::from(tok),
    });
    let (hdr, rec, at) = record(&cred, |_| OpaqueAuth::NONE, &args);
    let GssOutcome::Reply(r) = gss.handle(&hdr, &rec, at, &peer(), Instant::now()) else {
        panic!("no INIT reply")
    };
    let r = r.to_bytes();
    let mut dec = Decoder::from_bytes(&r);
    ReplyHeader::decode(&mut dec).unwrap();
    let res = GssInitRes::decode(&mut dec).unwrap();
    assert_eq!(res.gss_major, 0);
    assert!(ctx.step(&res.gss_token).unwrap().complete);
    let mut args = XdrBuf::new();
    args.put_opaque(b"payload");
    let body = protect_body(&mut *ctx, GssService::INTEGRITY, 1, &args)
        .unwrap()
        .to_bytes();
    let cred = GssCred {
        proc_: GssProc::RPCSEC_GSS_DATA,
        seq_num: 1,
        service: GssService::INTEGRITY,
        handle: res.handle.clone(),
    };
    let (hdr, rec, at) = record(
        &cred,
        |h| OpaqueAuth {
            flavor: AuthFlavor::RPCSEC_GSS,
            body: Bytes::from(ctx.get_mic(h).unwrap()),
        },
        &body,
    );
    let GssOutcome::Data { args, .. } = gss.handle(&hdr, &rec, at, &peer(), Instant::now()) else {
        panic!("a good call refused")
    };
    assert_eq!(&args[4..11], b"payload");
    // Replayed: dropped, no reply at all.
    assert!(matches!(
        gss.handle(&hdr, &rec, at, &peer(), Instant::now()),
        GssOutcome::Drop
    ));
    // A different procedure under the same verifier: the MIC fails.
    let mut h2 = hdr.clone();
    h2.proc_ = 0;
    let mut bad = rec.to_vec();
    bad[23] = 0;
    assert_eq!(
        auth_error(gss.handle(&h2, &Bytes::from(bad), at, &peer(), Instant::now())),
        Some(AuthStat::RPCSEC_GSS_CREDPROBLEM)
    );
    // A body byte flipped under a fresh sequence number: GARBAGE_ARGS.
    let body = protect_body(&mut *ctx, GssService::INTEGRITY, 2, &args_buf())
        .unwrap()
        .to_bytes();
    let cred = GssCred { seq_num: 2, ..cred };
    let (hdr, rec, at) = record(
        &cred,
        |h| OpaqueAuth {
            flavor: AuthFlavor::RPCSEC_GSS,
            body: Bytes::from(ctx.get_mic(h).unwrap()),
        },
        &body,
    );
    let mut bad = rec.to_vec();
    bad[at + 10] ^= 1;
    let GssOutcome::Reply(r) = gss.handle(&hdr, &Bytes::from(bad), at, &peer(), Instant::now())
    else {
        panic!("tampered body not answered")
    };
    let r = r.to_bytes();
    let h = ReplyHeader::decode(&mut Decoder::from_bytes(&r)).unwrap();
    assert!(
        matches!(
            h.body,
            ReplyBody::Accepted {
                stat: oncrpc::msg::Accepted::Other(oncrpc::msg::AcceptStat::GARBAGE_ARGS),
                ..
            }
        ),
        "{h:?}"
    );
}

fn args_buf() -> XdrBuf {
    let mut a = XdrBuf::new();
    a.put_opaque(b"payload");
    a
}
