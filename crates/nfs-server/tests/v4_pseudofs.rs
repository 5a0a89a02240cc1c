//! The NFSv4 namespace over TCP (issue 14 item 1): several exports of one
//! server, each reached at its path from PUTROOTFH through read-only
//! junction directories (RFC 8881 §7.3), in minor versions 1 and 2.
//!
//! The server exports, under a temporary directory BASE:
//! - BASE/a/b to loopback, read-write, AUTH_SYS;
//! - BASE/a/c to loopback, read-only, AUTH_SYS;
//! - BASE/a/n to loopback, read-write, AUTH_NONE only;
//! - BASE/hidden/h to 10.9.9.9 only (never this test's client);
//!
//! and BASE/a/b also as `/pseudofs-alias/b`.

mod v4_common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use nfs::v4::attr::*;
use nfs::v4::session::SecinfoStyle4;
use nfs::v4::*;
use nfs_server::v4::ManualClock;
use nfs_server::{RunningServer, ServerConfig};
use oncrpc::msg::OpaqueAuth;
use v4_common::*;
use xdr::FixedOpaque;

/// The exports, relative to BASE, with their exports(5) options.
const EXPORTS: [(&str, &str); 4] = [
    ("a/b", "127.0.0.0/8(rw,no_root_squash)"),
    ("a/c", "127.0.0.0/8(ro,no_root_squash)"),
    ("a/n", "127.0.0.0/8(rw,no_root_squash,sec=none)"),
    ("hidden/h", "10.9.9.9(rw)"),
];

/// A second name of the first export (`--alias`): MOUNT and NFSv4 both
/// know it.
const ALIAS: &str = "/pseudofs-alias/b";

/// A server over the four exports, and BASE.
struct Ns {
    srv: Srv,
    base: PathBuf,
    running: RunningServer,
}

async fn start(dir: &TempDir, state: Option<PathBuf>) -> (RunningServer, PathBuf) {
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let mut text = String::new();
    for (p, opts) in EXPORTS {
        std::fs::create_dir_all(base.join(p)).unwrap();
        text.push_str(&format!("{} {opts}\n", base.join(p).display()));
    }
    let mut cfg = ServerConfig::new(&base);
    cfg.exports = nfs_server::exports::parse(&text).unwrap().entries;
    cfg.nfs_addr = "127.0.0.1:0".parse::<SocketAddr>().unwrap();
    cfg.mount_addr = None;
    cfg.state_dir = state;
    cfg.aliases = vec![ALIAS.into()];
    // A restarted instance may find the old one's handle index still
    // locked for a moment after the old one's last reference went.
    for _ in 0..100 {
        match nfs_server::start(cfg.clone()).await {
            Ok(r) => return (r, base),
            Err(e) => {
                tracing::debug!("start: {e}; retrying");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    }
    (nfs_server::start(cfg).await.unwrap(), base)
}

async fn serve_ns(tag: &str) -> Ns {
    let dir = TempDir::new(tag);
    let (running, base) = start(&dir, None).await;
    std::fs::write(base.join("a/b/hello"), b"hello").unwrap();
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(dir.path()).unwrap());
    Ns {
        srv: Srv {
            addr: running.nfs_addr(),
            uid,
            clock: Arc::new(ManualClock::new()),
            dir,
        },
        base,
        running,
    }
}

/// A LOOKUP per component of absolute `path`.
fn walk(path: &Path) -> Vec<NfsArgop4> {
    path.components()
        .filter_map(|c| match c {
            std::path::Component::Normal(n) => Some(NfsArgop4::Lookup(Lookup4Args {
                objname: Component4(Bytes::from(n.to_str().unwrap().to_string())),
            })),
            _ => None,
        })
        .collect()
}

/// PUTROOTFH, then the LOOKUPs down to `path`.
fn root_to(path: &Path) -> Vec<NfsArgop4> {
    let mut ops = vec![NfsArgop4::Putrootfh(())];
    ops.extend(walk(path));
    ops
}

fn lookup(n: &'static str) -> NfsArgop4 {
    NfsArgop4::Lookup(Lookup4Args { objname: name(n) })
}

fn putfh(fh: &NfsFh4) -> NfsArgop4 {
    NfsArgop4::Putfh(Putfh4Args { object: fh.clone() })
}

fn getattr(bits: &[u32]) -> NfsArgop4 {
    NfsArgop4::Getattr(Getattr4Args {
        attr_request: Bitmap4::from_bits(bits),
    })
}

const ATTRS: [u32; 7] = [
    FATTR4_TYPE,
    FATTR4_CHANGE,
    FATTR4_FSID,
    FATTR4_FILEID,
    FATTR4_MODE,
    FATTR4_OWNER,
    FATTR4_MOUNTED_ON_FILEID,
];

fn attrs(r: &[NfsResop4]) -> FileAttrs {
    r.iter()
        .rev()
        .find_map(|x| match x {
            NfsResop4::Getattr(Res4::Ok(g)) => {
                Some(FileAttrs::from_fattr4(&g.obj_attributes).unwrap())
            }
            _ => None,
        })
        .expect("a GETATTR result")
}

fn fh(r: &[NfsResop4]) -> NfsFh4 {
    r.iter()
        .rev()
        .find_map(|x| match x {
            NfsResop4::Getfh(Res4::Ok(g)) => Some(g.object.clone()),
            _ => None,
        })
        .expect("a GETFH result")
}

fn readdir() -> NfsArgop4 {
    NfsArgop4::Readdir(Readdir4Args {
        cookie: 0,
        cookieverf: FixedOpaque([0; 8]),
        dircount: 4096,
        maxcount: 16384,
        attr_request: Bitmap4::from_bits(&ATTRS),
    })
}

fn entries(r: &[NfsResop4]) -> Vec<(String, FileAttrs)> {
    r.iter()
        .find_map(|x| match x {
            NfsResop4::Readdir(Res4::Ok(d)) => Some(
                d.entries
                    .iter()
                    .map(|e| {
                        (
                            String::from_utf8(e.name.0.to_vec()).unwrap(),
                            FileAttrs::from_fattr4(&e.attrs).unwrap(),
                        )
                    })
                    .collect(),
            ),
            _ => None,
        })
        .expect("a READDIR result")
}

/// A COMPOUND in minor version `minor` on `me`'s session.
async fn seq_minor(me: &C4, minor: u32, ops: Vec<NfsArgop4>) -> Compound4Res {
    let id = me.seq.fetch_add(1, Ordering::SeqCst) + 1;
    let mut all = vec![me.sequence(0, id, false)];
    all.extend(ops);
    me.compound(&Compound4Args {
        tag: Bytes::new(),
        minorversion: minor,
        argarray: all,
    })
    .await
}

async fn client(ns: &Ns, name: &str) -> C4 {
    let mut me = C4::connect(&ns.srv).await;
    me.establish(name).await;
    me
}

/// RFC 8881 §7.3, §18.21: every export is at its path under PUTROOTFH,
/// in minor versions 1 and 2 alike, and the files in it are the
/// export's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_export_is_at_its_path_in_every_minor_version() {
    let ns = serve_ns("paths").await;
    let me = client(&ns, "paths").await;
    for minor in [1, 2] {
        let mut ops = root_to(&ns.base.join("a/b"));
        ops.extend([lookup("hello"), getattr(&[FATTR4_SIZE, FATTR4_TYPE])]);
        let r = seq_minor(&me, minor, ops).await;
        assert_eq!(r.status, Nfsstat4::NFS4_OK, "minor {minor}: {r:?}");
        let a = attrs(&r.resarray);
        assert_eq!((a.size, a.ftype), (Some(5), Some(NfsFtype4::NF4REG)));
        let mut ops = root_to(&ns.base.join("a/c"));
        ops.push(NfsArgop4::Getfh(()));
        let r = seq_minor(&me, minor, ops).await;
        assert_eq!(r.status, Nfsstat4::NFS4_OK, "minor {minor}: {r:?}");
    }
    // The root itself ("mount server:/") is the pseudo root: a directory
    // listing the first components of BASE and of the alias.
    let r = me.ok(vec![NfsArgop4::Putrootfh(()), readdir()]).await;
    let first = walk(&ns.base);
    let NfsArgop4::Lookup(l) = &first[0] else {
        unreachable!()
    };
    let names: Vec<String> = entries(&r).into_iter().map(|e| e.0).collect();
    let mut want = vec![
        String::from_utf8(l.objname.0.to_vec()).unwrap(),
        "pseudofs-alias".to_string(),
    ];
    want.sort();
    assert_eq!(names, want);
    // The alias leads into the same export (RFC 8881 §7.3).
    let mut ops = root_to(Path::new(ALIAS));
    ops.extend([lookup("hello"), getattr(&[FATTR4_SIZE])]);
    assert_eq!(attrs(&me.ok(ops).await).size, Some(5));
    drop(ns.running);
}

/// RFC 8881 §7.7, §5.8.1.9, §5.8.2.19: crossing from a junction into an
/// export changes `fsid`; the export root's `mounted_on_fileid` is the
/// junction's file id (the same in READDIR of the junction); each export
/// is its own file system. Junctions (§7.3) are directories, mode 0555,
/// owned by root, with a file id and change attribute that stay put.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossing_into_an_export_changes_fsid_and_mounted_on_fileid() {
    let ns = serve_ns("fsid").await;
    let me = client(&ns, "fsid").await;
    let mut ops = root_to(&ns.base.join("a"));
    ops.extend([getattr(&ATTRS), readdir()]);
    let r = me.ok(ops.clone()).await;
    let j = attrs(&r);
    assert_eq!(j.ftype, Some(NfsFtype4::NF4DIR));
    assert_eq!(j.mode, Some(0o555));
    assert_eq!(j.owner.as_ref().map(|o| &o.0[..]), Some(&b"0"[..]));
    assert_eq!(j.mounted_on_fileid, j.fileid);
    let listed = entries(&r);
    let names: Vec<&str> = listed.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(names, ["b", "c", "n"]);
    // The same answers again: a junction's identity does not move.
    let again = attrs(&me.ok(ops).await);
    assert_eq!((again.fileid, again.change), (j.fileid, j.change));

    let mut ops = root_to(&ns.base.join("a/b"));
    ops.push(getattr(&ATTRS));
    let b = attrs(&me.ok(ops).await);
    let mut ops = root_to(&ns.base.join("a/c"));
    ops.push(getattr(&ATTRS));
    let c = attrs(&me.ok(ops).await);
    assert_ne!(b.fsid, j.fsid, "crossing into an export changes fsid");
    assert_ne!(b.fsid, c.fsid, "two exports are two file systems");
    let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(ns.base.join("a/b")).unwrap());
    assert_eq!(b.fileid, Some(ino), "the export root is the real directory");
    assert_ne!(b.mounted_on_fileid, b.fileid);
    let in_dir = &listed[0].1;
    assert_eq!(in_dir.fsid, b.fsid, "READDIR shows the export's root");
    assert_eq!(in_dir.fileid, b.fileid);
    assert_eq!(in_dir.mounted_on_fileid, b.mounted_on_fileid);
}

/// RFC 8881 §18.14.3, §7.7: LOOKUPP from an export root goes back up to
/// the junction above it, and on to the root, where it is NFS4ERR_NOENT;
/// SECINFO_NO_NAME of the parent crosses the same way (§18.45.3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookupp_climbs_from_an_export_root_into_the_junctions() {
    let ns = serve_ns("lookupp").await;
    let me = client(&ns, "lookupp").await;
    let mut ops = root_to(&ns.base.join("a"));
    ops.push(NfsArgop4::Getfh(()));
    let junction = fh(&me.ok(ops).await);
    let r = me
        .ok(vec![
            putfh(&junction),
            lookup("b"),
            NfsArgop4::Getfh(()),
            NfsArgop4::Lookupp(()),
            NfsArgop4::Getfh(()),
        ])
        .await;
    assert_ne!(fh(&r[..4]), junction, "b's root is not the junction");
    assert_eq!(fh(&r), junction);
    let depth = walk(&ns.base.join("a")).len();
    let mut ops = vec![putfh(&junction)];
    ops.extend((0..depth).map(|_| NfsArgop4::Lookupp(())));
    ops.push(NfsArgop4::Getfh(()));
    let r = me.ok(ops).await;
    let root = fh(&me
        .ok(vec![NfsArgop4::Putrootfh(()), NfsArgop4::Getfh(())])
        .await);
    assert_eq!(fh(&r), root);
    let r = me
        .seq(vec![NfsArgop4::Putrootfh(()), NfsArgop4::Lookupp(())])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NOENT);
    let r = me
        .ok(vec![
            putfh(&junction),
            lookup("b"),
            NfsArgop4::SecinfoNoName(SecinfoStyle4::SECINFO_STYLE4_PARENT),
        ])
        .await;
    let NfsResop4::SecinfoNoName(Res4::Ok(f)) = &r[3] else {
        panic!("{r:?}")
    };
    // The junction offers what the exports below it accept.
    assert_eq!(f.0, [Secinfo4::Flavor(1), Secinfo4::Flavor(0)]);
}

/// RFC 8881 §7.3: the pseudo file system is read-only — every change in
/// a junction is NFS4ERR_ROFS — while the export below takes changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_in_the_pseudo_fs_are_rofs() {
    let ns = serve_ns("rofs").await;
    let me = client(&ns, "rofs").await;
    let mut ops = root_to(&ns.base.join("a"));
    ops.push(NfsArgop4::Getfh(()));
    let junction = fh(&me.ok(ops).await);
    let mode = FileAttrs {
        mode: Some(0o777),
        ..Default::default()
    }
    .to_fattr4(&Bitmap4::from_bits(&[FATTR4_MODE]));
    let mkdir = |n: &'static str| {
        NfsArgop4::Create(Create4Args {
            objtype: Createtype4::Dir,
            objname: name(n),
            createattrs: mode.clone(),
        })
    };
    let changes = vec![
        mkdir("x"),
        open_create(
            me.clientid,
            "f",
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
        ),
        NfsArgop4::Setattr(Setattr4Args {
            stateid: Stateid4::ANONYMOUS,
            obj_attributes: mode.clone(),
        }),
        NfsArgop4::Remove(Remove4Args { target: name("b") }),
    ];
    for op in changes {
        let r = me.seq(vec![putfh(&junction), op.clone()]).await;
        assert_eq!(r.status, Nfsstat4::NFS4ERR_ROFS, "{op:?}: {r:?}");
    }
    let r = me
        .seq(vec![
            putfh(&junction),
            NfsArgop4::Savefh(()),
            NfsArgop4::Rename(Rename4Args {
                oldname: name("b"),
                newname: name("z"),
            }),
        ])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_ROFS);
    assert!(ns.base.join("a/b").is_dir());
    // The export below the junction is writable.
    me.ok(vec![putfh(&junction), lookup("b"), mkdir("made")])
        .await;
    assert!(ns.base.join("a/b/made").is_dir());
    // The read-only export says so too.
    let r = me
        .seq(vec![putfh(&junction), lookup("c"), mkdir("x")])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_ROFS);
}

/// As on the Linux server: an export that does not list the client is
/// absent from its view — READDIR leaves out the junction leading only
/// to it, LOOKUP answers NFS4ERR_NOENT — and a pseudo handle cannot be
/// forged (RFC 8881 §4.2.3: NFS4ERR_BADHANDLE).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_the_client_may_not_use_is_absent() {
    let ns = serve_ns("hidden").await;
    let me = client(&ns, "hidden").await;
    let mut ops = root_to(&ns.base);
    ops.extend([NfsArgop4::Getfh(()), readdir()]);
    let r = me.ok(ops).await;
    let names: Vec<String> = entries(&r).into_iter().map(|e| e.0).collect();
    assert_eq!(names, ["a"], "hidden/h lists only 10.9.9.9");
    let base = fh(&r);
    let r = me.seq(vec![putfh(&base), lookup("hidden")]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NOENT);
    let r = me
        .seq(vec![
            putfh(&base),
            NfsArgop4::Secinfo(Lookup4Args {
                objname: name("hidden"),
            }),
        ])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NOENT);
    for i in [1, 10, 30, 40] {
        let mut forged = base.0.to_vec();
        forged[i] ^= 1;
        let r = me
            .seq(vec![
                putfh(&NfsFh4(Bytes::from(forged))),
                NfsArgop4::Getfh(()),
            ])
            .await;
        assert_eq!(r.status, Nfsstat4::NFS4ERR_BADHANDLE, "byte {i}");
    }
}

/// RFC 8881 §2.6.3.1.1, §18.29.4, §7.8: SECINFO in a junction answers
/// with the flavors of the export the name leads into; a LOOKUP into an
/// export that does not accept the caller's flavor is NFS4ERR_WRONGSEC;
/// an AUTH_NONE client walks the junctions to the export that accepts
/// it, and gets NFS4ERR_WRONGSEC at the ones that do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secinfo_and_wrongsec_across_a_junction() {
    let ns = serve_ns("secinfo").await;
    let me = client(&ns, "secinfo").await;
    let mut ops = root_to(&ns.base.join("a"));
    ops.push(NfsArgop4::Getfh(()));
    let junction = fh(&me.ok(ops).await);
    let secinfo = |n: &'static str| NfsArgop4::Secinfo(Lookup4Args { objname: name(n) });
    for (n, want) in [("n", 0), ("b", 1), ("c", 1)] {
        let r = me.ok(vec![putfh(&junction), secinfo(n)]).await;
        let NfsResop4::Secinfo(Res4::Ok(f)) = &r[2] else {
            panic!("{r:?}")
        };
        assert_eq!(f.0, [Secinfo4::Flavor(want)], "{n}");
    }
    let r = me.seq(vec![putfh(&junction), lookup("n")]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_WRONGSEC);
    assert_eq!(r.resarray.len(), 3, "the LOOKUP failed: {r:?}");

    let mut anon = C4::connect(&ns.srv).await;
    anon.cred = OpaqueAuth::NONE;
    anon.establish("secinfo-anon").await;
    let mut ops = root_to(&ns.base.join("a/n"));
    ops.push(NfsArgop4::Getfh(()));
    anon.ok(ops).await;
    let r = anon.seq(vec![putfh(&junction), lookup("b")]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_WRONGSEC);
}

/// Pseudo handles are as lasting as files' (fh.rs): after a restart with
/// the same state directory and exports, a junction's handle still
/// works, with the same file id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junction_handles_last_across_a_restart() {
    let dir = TempDir::new("restart");
    let state = TempDir::new("restart-state");
    let (first, base) = start(&dir, Some(state.path().to_path_buf())).await;
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(dir.path()).unwrap());
    let srv = |addr| Srv {
        addr,
        uid,
        clock: Arc::new(ManualClock::new()),
        dir: TempDir::new("restart-unused"),
    };
    let mut me = C4::connect(&srv(first.nfs_addr())).await;
    me.establish("restart").await;
    let mut ops = root_to(&base.join("a"));
    ops.extend([NfsArgop4::Getfh(()), getattr(&ATTRS)]);
    let r = me.ok(ops).await;
    let (junction, before) = (fh(&r), attrs(&r));
    // The old instance lets go of the state directory once its last
    // connection is gone (as in nfs3.rs's restart test).
    let old: Vec<_> = first
        .exports()
        .exports()
        .iter()
        .map(|e| Arc::downgrade(e.fs()))
        .collect();
    first.stop();
    drop(me);
    for _ in 0..200 {
        if old.iter().all(|w| w.upgrade().is_none()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let (second, _) = start(&dir, Some(state.path().to_path_buf())).await;
    let mut me = C4::connect(&srv(second.nfs_addr())).await;
    me.establish("restart").await;
    let r = me.ok(vec![putfh(&junction), getattr(&ATTRS)]).await;
    let after = attrs(&r);
    assert_eq!((after.fileid, after.change), (before.fileid, before.change));
    me.ok(vec![putfh(&junction), lookup("b")]).await;
}
