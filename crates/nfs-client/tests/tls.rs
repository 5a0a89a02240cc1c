//! NFS over RPC-over-TLS (RFC 9289) between the project's client and
//! server, with certificates the test makes: NFSv3 and NFSv4.1 byte-exact
//! both ways, exports with `xprtsec=tls` / `xprtsec=mtls` refusing the
//! connections they do not list (NFS3ERR_ACCES, NFS4ERR_WRONGSEC, as
//! Linux's nfsd).

use std::net::SocketAddr;
use std::path::Path;

use bytes::Bytes;
use nfs_client::nfs::v3::Nfsstat3;
use nfs_client::nfs::v4::{Nfsstat4, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_DENY_NONE};
use nfs_client::v4::{OpenOptions, Session, SessionOptions};
use nfs_client::{connect_tcp, IoOptions, TcpOptions, TcpTarget};
use nfs_server::exports::XprtSec;
use oncrpc::client::ClientConfig;
use oncrpc::msg::{AuthSys, OpaqueAuth};
use oncrpc::tcp::{ClientTls, ReconnectPolicy, ServerTls, TcpClient, TcpConfig};
use testkit::tls::TestPki;
use testkit::TempDir;

const TLS_ONLY: XprtSec = XprtSec {
    none: false,
    tls: true,
    mtls: true,
};

const MTLS_ONLY: XprtSec = XprtSec {
    none: false,
    tls: false,
    mtls: true,
};

async fn server(dir: &Path, pki: &TestPki, xprtsec: XprtSec) -> nfs_server::RunningServer {
    let mut cfg = nfs_server::ServerConfig::new(dir);
    // The tests run as root and act as the export's owner.
    cfg.set_squash(nfs_server::exports::Squash::None);
    for c in &mut cfg.clients {
        c.options.xprtsec = xprtsec;
    }
    cfg.nfs_addr = SocketAddr::from(([127, 0, 0, 1], 0));
    cfg.mount_addr = None;
    let tls = ServerTls::from_pem(&pki.server_cert, &pki.server_key, Some(&pki.ca)).unwrap();
    cfg.tls = Some(tls);
    nfs_server::start(cfg).await.unwrap()
}

fn target(srv: &nfs_server::RunningServer, path: &Path) -> TcpTarget {
    TcpTarget {
        host: "127.0.0.1".into(),
        nfs_port: Some(srv.nfs_addr().port()),
        mount_port: None,
        path: path.to_str().unwrap().into(),
    }
}

fn tls(pki: &TestPki, with_cert: bool) -> ClientTls {
    let id = with_cert.then_some((pki.client_cert.as_path(), pki.client_key.as_path()));
    ClientTls::from_pem(&pki.ca, id, "127.0.0.1").unwrap()
}

fn opts(tls: Option<ClientTls>) -> TcpOptions {
    TcpOptions {
        io: IoOptions {
            in_flight: 8,
            block_size: Some(256 * 1024),
            ..IoOptions::default()
        },
        tls,
        ..TcpOptions::default()
    }
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[tokio::test]
async fn nfs3_over_tls_round_trips_a_file() {
    let pki = TestPki::new("nfs3-tls-pki");
    let dir = TempDir::new("nfs3-tls");
    let srv = server(dir.path(), &pki, TLS_ONLY).await;
    let m = connect_tcp(&target(&srv, dir.path()), &opts(Some(tls(&pki, false))))
        .await
        .unwrap();
    let data = pattern(4 << 20, 3);
    let (fh, _) = m
        .mount
        .write_file("in.bin", 0o644, Bytes::from(data.clone()))
        .await
        .unwrap();
    assert!(std::fs::read(dir.path().join("in.bin")).unwrap() == data);
    let out = pattern(3 << 20, 4);
    std::fs::write(dir.path().join("out.bin"), &out).unwrap();
    let back = m.mount.read_file(&fh).await.unwrap();
    assert!(back == data, "read back differs");
    let f = m.mount.resolve("/out.bin").await.unwrap();
    assert!(m.mount.read_file(&f.fh).await.unwrap() == out);
}

#[tokio::test]
async fn tls_export_refuses_a_plain_nfs3_client() {
    let pki = TestPki::new("nfs3-plain-pki");
    let dir = TempDir::new("nfs3-plain");
    let srv = server(dir.path(), &pki, TLS_ONLY).await;
    // MOUNT answers (as Linux's mountd, it does not look at the
    // transport), but the first NFS call on the plain connection is
    // refused.
    let e = connect_tcp(&target(&srv, dir.path()), &opts(None))
        .await
        .unwrap_err();
    assert_eq!(e.nfs_status(), Some(Nfsstat3::NFS3ERR_ACCES), "{e}");
}

#[tokio::test]
async fn mtls_export_wants_a_client_certificate() {
    let pki = TestPki::new("nfs3-mtls-pki");
    let dir = TempDir::new("nfs3-mtls");
    let srv = server(dir.path(), &pki, MTLS_ONLY).await;
    let t = target(&srv, dir.path());
    let e = connect_tcp(&t, &opts(Some(tls(&pki, false))))
        .await
        .unwrap_err();
    assert_eq!(e.nfs_status(), Some(Nfsstat3::NFS3ERR_ACCES), "{e}");
    let m = connect_tcp(&t, &opts(Some(tls(&pki, true)))).await.unwrap();
    let (fh, _) = m
        .mount
        .write_file("m.bin", 0o600, Bytes::from_static(b"mutual"))
        .await
        .unwrap();
    assert_eq!(m.mount.read_file(&fh).await.unwrap(), b"mutual");
    // A certificate from another CA never gets a connection.
    let rogue = ClientTls::from_pem(
        &pki.ca,
        Some((&pki.rogue_cert, &pki.rogue_key)),
        "127.0.0.1",
    )
    .unwrap();
    assert!(connect_tcp(&t, &opts(Some(rogue))).await.is_err());
}

/// The owner of the export, so the server lets us create in it.
fn cred(dir: &Path) -> OpaqueAuth {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(dir).unwrap();
    AuthSys {
        uid: md.uid(),
        gid: md.gid(),
        gids: vec![md.gid()],
        ..AuthSys::default()
    }
    .to_opaque_auth()
}

async fn v4_session(addr: SocketAddr, tls: Option<ClientTls>, dir: &Path) -> Session<TcpClient> {
    let (config, tcp) = (ClientConfig::default(), TcpConfig::default());
    let rpc = match tls {
        Some(t) => {
            let t = t.with_probe_program(100_003, 4);
            TcpClient::connect_tls(addr, 21, config, tcp, ReconnectPolicy::default(), t).await
        }
        None => TcpClient::connect(addr, 21, config, tcp).await,
    }
    .unwrap();
    Session::establish(rpc, cred(dir), &SessionOptions::default())
        .await
        .unwrap()
}

#[tokio::test]
async fn nfs41_over_tls_round_trips_a_file() {
    let pki = TestPki::new("nfs41-tls-pki");
    let dir = TempDir::new("nfs41-tls");
    let srv = server(dir.path(), &pki, TLS_ONLY).await;
    let s = v4_session(srv.nfs_addr(), Some(tls(&pki, false)), dir.path()).await;
    let root = s.mount(dir.path().to_str().unwrap()).await.unwrap();
    let create = OpenOptions {
        create_mode: Some(0o644),
        ..OpenOptions::default()
    };
    let f = s.open(&root, "in.bin", create).await.unwrap();
    let data = pattern(3 << 20, 5);
    s.write_all(&f, 0, &data).await.unwrap();
    s.close_file(f).await.unwrap();
    assert!(std::fs::read(dir.path().join("in.bin")).unwrap() == data);
    let out = pattern(2 << 20, 6);
    std::fs::write(dir.path().join("out.bin"), &out).unwrap();
    let ro = OpenOptions {
        share_access: OPEN4_SHARE_ACCESS_READ,
        share_deny: OPEN4_SHARE_DENY_NONE,
        create_mode: None,
    };
    for (name, want) in [("in.bin", &data), ("out.bin", &out)] {
        let f = s.open(&root, name, ro).await.unwrap();
        let back = s.read_all(&f).await.unwrap();
        assert!(back == *want, "{name} read back differs");
        s.close_file(f).await.unwrap();
    }
    s.close().await.unwrap();
}

#[tokio::test]
async fn tls_export_answers_a_plain_nfs41_client_wrongsec() {
    let pki = TestPki::new("nfs41-plain-pki");
    let dir = TempDir::new("nfs41-plain");
    let srv = server(dir.path(), &pki, TLS_ONLY).await;
    let s = v4_session(srv.nfs_addr(), None, dir.path()).await;
    let e = s.mount(dir.path().to_str().unwrap()).await.unwrap_err();
    assert_eq!(e.nfs_status(), Some(Nfsstat4::NFS4ERR_WRONGSEC), "{e}");
    s.close().await.unwrap();
}
