//! NFSv3 with RPCSEC_GSS and real Kerberos: a throw-away MIT KDC
//! (`testkit::krb5::TestKdc`), `nfs-server` with `sec=krb5p:krb5i:krb5`
//! and its keytab, our client with tickets in private credential caches.
//! The three services write and read files byte-exact; MOUNT lists the
//! Kerberos pseudo-flavors; `root@REALM` acts as the local root, a
//! principal with no local user as the anonymous id and reads nothing of
//! root's; AUTH_SYS and a weaker service are refused (NFS3ERR_ACCES, as
//! nfsd answers a flavor the export does not list). One test: Kerberos
//! reads its configuration and credential cache from the process
//! environment.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use gss::{Krb5Acceptor, Krb5Initiator};
use nfs_client::nfs::v3::{Nfsstat3, NFS_PROGRAM, NFS_V3};
use nfs_client::{IoOptions, Mount, MountClient, Nfs3Client};
use nfs_server::exports::{ClientRule, ExportEntry, ExportOptions, SecFlavor, Squash};
use oncrpc::client::ClientConfig;
use oncrpc::gss::{GssClient, GssConfig, GssServer, GssService};
use oncrpc::msg::{AuthSys, OpaqueAuth};
use oncrpc::tcp::{TcpClient, TcpConfig};
use testkit::krb5::TestKdc;
use testkit::TempDir;

fn entry(path: &Path, sec: Vec<SecFlavor>) -> ExportEntry {
    let mut options = ExportOptions::read_write();
    options.squash = Squash::None;
    options.sec = sec;
    ExportEntry {
        path: path.to_path_buf(),
        clients: vec![ClientRule {
            spec: nfs_server::exports::parse_client("127.0.0.1").unwrap(),
            options,
        }],
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

async fn tcp(addr: SocketAddr) -> TcpClient {
    TcpClient::connect(addr, 0x4242, ClientConfig::default(), TcpConfig::default())
        .await
        .unwrap()
}

async fn root_fh(addr: SocketAddr, path: &Path) -> (nfs_client::nfs::v3::NfsFh3, Vec<u32>) {
    let sys = AuthSys {
        machinename: Bytes::from_static(b"test"),
        ..AuthSys::default()
    };
    let m = MountClient::new(tcp(addr).await, sys.to_opaque_auth());
    let ok = m.mnt(path.to_str().unwrap()).await.unwrap();
    (ok.fhandle, ok.auth_flavors)
}

async fn mount_gss(
    addr: SocketAddr,
    path: &Path,
    service: GssService,
) -> nfs_client::Result<Mount<GssClient<TcpClient>>> {
    let init = Krb5Initiator::from_ccache().expect("a ticket in the credential cache");
    let gss = GssClient::establish(
        tcp(addr).await,
        &init,
        "nfs@localhost",
        NFS_PROGRAM,
        NFS_V3,
        service,
    )
    .await?;
    let (fh, _) = root_fh(addr, path).await;
    let io = IoOptions {
        in_flight: 8,
        block_size: Some(256 * 1024),
        ..IoOptions::default()
    };
    Mount::new(Nfs3Client::new(gss, OpaqueAuth::NONE), fh, io).await
}

#[test]
fn nfs3_with_kerberos_in_the_three_services() {
    let Some(kdc) = TestKdc::start("nfs-krb5") else {
        return;
    };
    let root = kdc.user_ccache("root");
    let stranger = kdc.user_ccache("nfsrdma-no-such-local-user");
    kdc.use_in_process(&root);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = TempDir::new("nfs-krb5");
        let all = dir.path().join("all");
        let privacy = dir.path().join("privacy");
        std::fs::create_dir(&all).unwrap();
        std::fs::create_dir(&privacy).unwrap();
        std::fs::set_permissions(&all, std::fs::Permissions::from_mode(0o755)).unwrap();
        let secret = pattern(100_000, 9);
        std::fs::write(all.join("secret.bin"), &secret).unwrap();
        std::fs::set_permissions(
            all.join("secret.bin"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();

        let mut cfg = nfs_server::ServerConfig::new(&all);
        cfg.exports = vec![
            entry(
                &all,
                vec![SecFlavor::Krb5p, SecFlavor::Krb5i, SecFlavor::Krb5],
            ),
            entry(&privacy, vec![SecFlavor::Krb5p]),
        ];
        cfg.nfs_addr = SocketAddr::from(([127, 0, 0, 1], 0));
        cfg.mount_addr = None;
        cfg.gss = Some(Arc::new(GssServer::new(
            Arc::new(Krb5Acceptor::new().expect("the service keytab")),
            GssConfig::default(),
        )));
        let srv = nfs_server::start(cfg).await.unwrap();
        let addr = srv.nfs_addr();

        // MOUNT lists the pseudo-flavors in the export's order
        // (RFC 2623 §2.7).
        assert_eq!(root_fh(addr, &all).await.1, vec![390_005, 390_004, 390_003]);

        for (i, service) in [GssService::NONE, GssService::INTEGRITY, GssService::PRIVACY]
            .into_iter()
            .enumerate()
        {
            let m = mount_gss(addr, &all, service).await.unwrap();
            let name = format!("w{i}.bin");
            let data = pattern(3 << 20, i as u32);
            let (fh, _) = m
                .write_file(&name, 0o644, Bytes::from(data.clone()))
                .await
                .unwrap();
            assert!(
                std::fs::read(all.join(&name)).unwrap() == data,
                "{name} on disk"
            );
            assert!(m.read_file(&fh).await.unwrap() == data, "{name} read back");
            // root@REALM is the local root (no_root_squash): it reads
            // root's 0600 file.
            let f = m.resolve("/secret.bin").await.unwrap();
            assert!(m.read_file(&f.fh).await.unwrap() == secret);
        }

        // A weaker service than the export lists: refused.
        let e = mount_gss(addr, &privacy, GssService::INTEGRITY)
            .await
            .unwrap_err();
        assert_eq!(e.nfs_status(), Some(Nfsstat3::NFS3ERR_ACCES), "{e}");
        mount_gss(addr, &privacy, GssService::PRIVACY)
            .await
            .unwrap();

        // AUTH_SYS claiming uid 0: refused, reads nothing.
        let (fh, _) = root_fh(addr, &all).await;
        let sys = AuthSys {
            machinename: Bytes::from_static(b"liar"),
            ..AuthSys::default()
        };
        let e = Mount::new(
            Nfs3Client::new(tcp(addr).await, sys.to_opaque_auth()),
            fh,
            IoOptions::default(),
        )
        .await
        .unwrap_err();
        assert_eq!(e.nfs_status(), Some(Nfsstat3::NFS3ERR_ACCES), "{e}");

        // A principal with no local user acts as the anonymous id: it
        // gets in, but reads nothing of root's.
        std::env::set_var("KRB5CCNAME", &stranger);
        let m = mount_gss(addr, &all, GssService::PRIVACY).await.unwrap();
        let f = m.resolve("/secret.bin").await.unwrap();
        let e = m.read_file(&f.fh).await.unwrap_err();
        assert_eq!(e.nfs_status(), Some(Nfsstat3::NFS3ERR_ACCES), "{e}");
        srv.stop();
    });
}
