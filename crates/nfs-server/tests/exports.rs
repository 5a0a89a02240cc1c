//! Exports and access over TCP, in process: root squashing by default,
//! `no_root_squash`, `all_squash` with `anonuid`/`anongid`, read-only
//! grants, clients an export does not list, flavors it does not accept,
//! and several exports with their own handles.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use bytes::Bytes;
use common::{fh_of, Client, TempDir};
use nfs::mount::{MountList, Mountres3, Mountstat3, MOUNT_PROGRAM, MOUNT_V3};
use nfs::v3::*;
use nfs_server::exports::{self, ClientRule, ExportEntry, ExportOptions, Squash};

fn as_user(c: &mut Client, uid: u32, gid: u32) {
    c.cred = oncrpc::msg::AuthSys {
        stamp: 3,
        machinename: Bytes::from_static(b"exports-test"),
        uid,
        gid,
        gids: vec![],
    }
    .to_opaque_auth();
}

/// A server for `entries` (one per export) on 127.0.0.1.
async fn start(entries: Vec<ExportEntry>) -> nfs_server::RunningServer {
    let mut cfg = nfs_server::ServerConfig::new(&entries[0].path);
    cfg.exports = entries;
    cfg.nfs_addr = "127.0.0.1:0".parse().unwrap();
    cfg.mount_addr = None;
    nfs_server::start(cfg).await.unwrap()
}

fn entry(dir: &Path, line_opts: &str) -> ExportEntry {
    let text = format!("\"{}\" {line_opts}", dir.display());
    exports::parse(&text).unwrap().entries.remove(0)
}

/// An export directory anyone may write, holding `secret` (0600, owned
/// by uid 1234).
fn export_dir(tag: &str) -> TempDir {
    let t = TempDir::new(tag);
    std::fs::set_permissions(t.path(), PermissionsExt::from_mode(0o777)).unwrap();
    std::fs::write(t.path().join("secret"), b"top secret").unwrap();
    std::fs::set_permissions(t.path().join("secret"), PermissionsExt::from_mode(0o600)).unwrap();
    rustix_chown(&t.path().join("secret"), 1234, 1234);
    t
}

fn rustix_chown(p: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(gid)).unwrap();
}

fn setattr(s: Sattr3, fh: &NfsFh3) -> Setattr3Args {
    Setattr3Args {
        object: fh.clone(),
        new_attributes: s,
        guard: None,
    }
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

#[tokio::test]
async fn root_is_squashed_by_default() {
    if !running_as_root() {
        return; // chown of the fixture needs root
    }
    let t = export_dir("squash");
    // `serve DIR`'s defaults: loopback, rw, root_squash.
    let mut cfg = nfs_server::ServerConfig::new(t.path());
    cfg.nfs_addr = "127.0.0.1:0".parse().unwrap();
    cfg.mount_addr = None;
    let srv = nfs_server::start(cfg).await.unwrap();
    let c = Client::connect(srv.nfs_addr()).await; // AUTH_SYS uid 0
    let root = c.root(t.path()).await;
    let secret = c.lookup(&root, "secret").await.ok().unwrap().object;
    assert_eq!(
        c.read(&secret, 0, 100).await.status(),
        Nfsstat3::NFS3ERR_ACCES
    );
    let chmod: Setattr3Res = c
        .nfs(
            Nfsproc3::SETATTR,
            &setattr(
                Sattr3 {
                    mode: Some(0o666),
                    ..Sattr3::default()
                },
                &secret,
            ),
        )
        .await;
    assert_eq!(chmod.status(), Nfsstat3::NFS3ERR_PERM);
    let chown: Setattr3Res = c
        .nfs(
            Nfsproc3::SETATTR,
            &setattr(
                Sattr3 {
                    uid: Some(0),
                    ..Sattr3::default()
                },
                &secret,
            ),
        )
        .await;
    assert_eq!(chown.status(), Nfsstat3::NFS3ERR_PERM);
    let m = std::fs::metadata(t.path().join("secret")).unwrap();
    assert_eq!(
        (m.uid(), m.mode() & 0o777),
        (1234, 0o600),
        "nothing changed on disk"
    );
    // What "root" creates belongs to the anonymous user.
    fh_of(c.create(&root, "made-by-root").await);
    let m = std::fs::metadata(t.path().join("made-by-root")).unwrap();
    assert_eq!((m.uid(), m.gid()), (65534, 65534));
    // ACCESS tells the client the same.
    let acc: Access3Res = c
        .nfs(
            Nfsproc3::ACCESS,
            &Access3Args {
                object: secret,
                access: ACCESS3_READ,
            },
        )
        .await;
    assert_eq!(acc.ok().map(|a| a.access), Some(0));
}

#[tokio::test]
async fn no_root_squash_restores_root() {
    if !running_as_root() {
        return;
    }
    let t = export_dir("nosquash");
    let srv = start(vec![entry(t.path(), "127.0.0.1(rw,no_root_squash)")]).await;
    let c = Client::connect(srv.nfs_addr()).await;
    let root = c.root(t.path()).await;
    let secret = c.lookup(&root, "secret").await.ok().unwrap().object;
    assert_eq!(
        c.read(&secret, 0, 100).await.ok().map(|r| r.count),
        Some(10)
    );
    let chown: Setattr3Res = c
        .nfs(
            Nfsproc3::SETATTR,
            &setattr(
                Sattr3 {
                    uid: Some(0),
                    ..Sattr3::default()
                },
                &secret,
            ),
        )
        .await;
    assert_eq!(chown.status(), Nfsstat3::NFS3_OK);
    assert_eq!(std::fs::metadata(t.path().join("secret")).unwrap().uid(), 0);
    fh_of(c.create(&root, "made-by-root").await);
    assert_eq!(
        std::fs::metadata(t.path().join("made-by-root"))
            .unwrap()
            .uid(),
        0
    );
}

#[tokio::test]
async fn all_squash_maps_everyone_to_anonuid() {
    if !running_as_root() {
        return;
    }
    let t = export_dir("allsquash");
    let srv = start(vec![entry(
        t.path(),
        "127.0.0.0/8(rw,all_squash,anonuid=4321,anongid=4322)",
    )])
    .await;
    let mut c = Client::connect(srv.nfs_addr()).await;
    as_user(&mut c, 1000, 1000);
    let root = c.root(t.path()).await;
    fh_of(c.create(&root, "by-1000").await);
    let m = std::fs::metadata(t.path().join("by-1000")).unwrap();
    assert_eq!((m.uid(), m.gid()), (4321, 4322));
    // uid 1234 owns `secret`, but the squashed caller is 4321.
    as_user(&mut c, 1234, 1234);
    let secret = c.lookup(&root, "secret").await.ok().unwrap().object;
    assert_eq!(
        c.read(&secret, 0, 100).await.status(),
        Nfsstat3::NFS3ERR_ACCES
    );
}

#[tokio::test]
async fn read_only_grant_refuses_changes_with_rofs() {
    let t = TempDir::new("ro");
    std::fs::write(t.path().join("f"), b"data").unwrap();
    let srv = start(vec![entry(t.path(), "127.0.0.1(ro,no_root_squash)")]).await;
    let c = Client::connect(srv.nfs_addr()).await;
    let root = c.root(t.path()).await;
    assert_eq!(
        c.create(&root, "new").await.status(),
        Nfsstat3::NFS3ERR_ROFS
    );
    let f = c.lookup(&root, "f").await.ok().unwrap().object;
    assert_eq!(
        c.write(&f, 0, b"x", StableHow::FILE_SYNC).await.status(),
        Nfsstat3::NFS3ERR_ROFS
    );
    assert_eq!(c.read(&f, 0, 10).await.ok().map(|r| r.count), Some(4));
    let acc: Access3Res = c
        .nfs(
            Nfsproc3::ACCESS,
            &Access3Args {
                object: f,
                access: ACCESS3_READ | ACCESS3_MODIFY,
            },
        )
        .await;
    assert_eq!(acc.ok().map(|a| a.access), Some(ACCESS3_READ));
    assert!(!t.path().join("new").exists());
    assert_eq!(std::fs::read(t.path().join("f")).unwrap(), b"data");
}

#[tokio::test]
async fn unlisted_client_and_wrong_flavor_are_refused() {
    let t = TempDir::new("unlisted");
    std::fs::write(t.path().join("f"), b"data").unwrap();
    let srv = start(vec![entry(t.path(), "10.0.0.0/8(rw,no_root_squash)")]).await;
    let c = Client::connect(srv.nfs_addr()).await; // from 127.0.0.1
    let path = std::fs::canonicalize(t.path()).unwrap();
    assert!(matches!(
        c.mnt(&path).await,
        Mountres3::Err(Mountstat3::MNT3ERR_ACCES)
    ));
    // A handle obtained some other way is no use either.
    let root = srv.root_handle();
    assert_eq!(c.getattr(&root).await.status(), Nfsstat3::NFS3ERR_ACCES);
    assert_eq!(c.lookup(&root, "f").await.status(), Nfsstat3::NFS3ERR_ACCES);
    assert_eq!(c.create(&root, "g").await.status(), Nfsstat3::NFS3ERR_ACCES);
    assert!(!t.path().join("g").exists());

    // sec=sys only: AUTH_NONE is refused; with sec=sys:none it is the
    // anonymous user.
    let t2 = TempDir::new("flavor");
    let srv2 = start(vec![entry(t2.path(), "127.0.0.1(rw)")]).await;
    let mut c2 = Client::connect(srv2.nfs_addr()).await;
    let root2 = c2.root(t2.path()).await;
    c2.cred = oncrpc::msg::OpaqueAuth::NONE;
    assert_eq!(c2.getattr(&root2).await.status(), Nfsstat3::NFS3ERR_ACCES);
    let t3 = TempDir::new("flavor-none");
    std::fs::set_permissions(t3.path(), PermissionsExt::from_mode(0o777)).unwrap();
    let srv3 = start(vec![entry(t3.path(), "127.0.0.1(rw,sec=sys:none)")]).await;
    let mut c3 = Client::connect(srv3.nfs_addr()).await;
    let root3 = c3.root(t3.path()).await;
    c3.cred = oncrpc::msg::OpaqueAuth::NONE;
    fh_of(c3.create(&root3, "anon").await);
    if running_as_root() {
        assert_eq!(
            std::fs::metadata(t3.path().join("anon")).unwrap().uid(),
            65534
        );
    }
}

#[tokio::test]
async fn several_exports_each_with_their_own_handles_and_clients() {
    let a = TempDir::new("multi-a");
    let b = TempDir::new("multi-b");
    std::fs::write(a.path().join("in-a"), b"a").unwrap();
    std::fs::write(b.path().join("in-b"), b"b").unwrap();
    let srv = start(vec![
        entry(a.path(), "*(rw,no_root_squash)"),
        entry(b.path(), "127.0.0.1(rw,no_root_squash)"),
    ])
    .await;
    let c = Client::connect(srv.nfs_addr()).await;
    let ra = c.root(a.path()).await;
    let rb = c.root(b.path()).await;
    assert_ne!(ra, rb);
    assert!(c.lookup(&ra, "in-a").await.ok().is_some());
    assert!(c.lookup(&rb, "in-b").await.ok().is_some());
    assert_eq!(
        c.lookup(&rb, "in-a").await.status(),
        Nfsstat3::NFS3ERR_NOENT
    );
    // RENAME across exports is XDEV.
    let mv: Rename3Res = c
        .nfs(
            Nfsproc3::RENAME,
            &Rename3Args {
                from: Diropargs3 {
                    dir: ra.clone(),
                    name: Filename3::from_static("in-a"),
                },
                to: Diropargs3 {
                    dir: rb.clone(),
                    name: Filename3::from_static("moved"),
                },
            },
        )
        .await;
    assert_eq!(mv.status(), Nfsstat3::NFS3ERR_XDEV);
    assert!(a.path().join("in-a").exists());
    // DUMP lists both mounts by canonical path.
    let dump: MountList = c.call(MOUNT_PROGRAM, MOUNT_V3, 2, &()).await.unwrap();
    assert_eq!(dump.0.len(), 2);

    // A second server where only the first export lists 127.0.0.1.
    let srv2 = start(vec![
        entry(a.path(), "127.0.0.1(rw,no_root_squash)"),
        entry(b.path(), "10.0.0.0/8(rw)"),
    ])
    .await;
    let c2 = Client::connect(srv2.nfs_addr()).await;
    let path_b = std::fs::canonicalize(b.path()).unwrap();
    assert!(matches!(
        c2.mnt(&path_b).await,
        Mountres3::Err(Mountstat3::MNT3ERR_ACCES)
    ));
    let rb2 = nfs_server::Storage::root(&**srv2.exports().exports()[1].fs());
    assert_eq!(c2.getattr(&rb2).await.status(), Nfsstat3::NFS3ERR_ACCES);
    assert!(c2.getattr(&c2.root(a.path()).await).await.ok().is_some());
}

#[test]
fn client_rule_defaults_are_exports5() {
    let o = ExportOptions::default();
    assert!(o.read_only);
    assert_eq!(o.squash, Squash::Root);
    let r = ClientRule {
        spec: exports::ClientSpec::Any,
        options: ExportOptions::read_write(),
    };
    assert!(!r.options.read_only);
}
