//! Handles of hard-linked files (docs/hardening.md, "Handles and
//! storage"): a file's handle stays good while any of its links lives,
//! over NFSv3 and NFSv4.1, when the name it was looked up by is renamed
//! over or removed (RFC 8881 §4.2.3), and is STALE once the last link is
//! gone. The other name is made by LINK, or by a local process and seen
//! by the server through READDIRPLUS.

mod common;
mod v4_common;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use common::{start, Client, TempDir};
use nfs::v3::*;
use nfs::v4::*;
use nfs_server::v4::ManualClock;
use v4_common::{Srv, C4};
use xdr::FixedOpaque;

fn dirop(dir: &NfsFh3, n: &'static str) -> Diropargs3 {
    Diropargs3 {
        dir: dir.clone(),
        name: Filename3::from_static(n),
    }
}

async fn lookup3(c: &Client, dir: &NfsFh3, n: &'static str) -> NfsFh3 {
    match c.lookup(dir, n).await {
        Res3::Ok(ok) => ok.object,
        Res3::Fail(s, _) => panic!("LOOKUP {n}: {s}"),
    }
}

async fn link3(c: &Client, file: &NfsFh3, dir: &NfsFh3, n: &'static str) {
    let args = Link3Args {
        file: file.clone(),
        link: dirop(dir, n),
    };
    let r: Link3Res = c.nfs(Nfsproc3::LINK, &args).await;
    assert_eq!(r.status(), Nfsstat3::NFS3_OK, "LINK {n}");
}

async fn rename3(c: &Client, dir: &NfsFh3, from: &'static str, to: &'static str) {
    let args = Rename3Args {
        from: dirop(dir, from),
        to: dirop(dir, to),
    };
    let r: Rename3Res = c.nfs(Nfsproc3::RENAME, &args).await;
    assert_eq!(r.status(), Nfsstat3::NFS3_OK, "RENAME {from} {to}");
}

async fn remove3(c: &Client, dir: &NfsFh3, n: &'static str) {
    let args = Remove3Args {
        object: dirop(dir, n),
    };
    let r: Remove3Res = c.nfs(Nfsproc3::REMOVE, &args).await;
    assert_eq!(r.status(), Nfsstat3::NFS3_OK, "REMOVE {n}");
}

async fn read3(c: &Client, fh: &NfsFh3) -> Result<Vec<u8>, Nfsstat3> {
    match c.read(fh, 0, 100).await {
        Res3::Ok(ok) => Ok(ok.data.0.to_vec()),
        Res3::Fail(s, _) => Err(s),
    }
}

/// One READDIRPLUS of the whole (small) directory, for the names it
/// records.
async fn readdirplus3(c: &Client, dir: &NfsFh3) {
    let args = Readdirplus3Args {
        dir: dir.clone(),
        cookie: 0,
        cookieverf: FixedOpaque([0; 8]),
        dircount: 65536,
        maxcount: 1 << 20,
    };
    let r: Readdirplus3Res = c.nfs(Nfsproc3::READDIRPLUS, &args).await;
    assert!(r.ok().unwrap().eof);
}

#[tokio::test]
async fn nfsv3_handle_lives_while_the_file_has_a_link() {
    let t = TempDir::new("hl-v3");
    for (f, data) in [("a", "linked"), ("c", "other"), ("x", "x bytes")] {
        std::fs::write(t.path().join(f), data).unwrap();
    }
    let srv = start(t.path(), false).await;
    let c = Client::connect(srv.nfs_addr()).await;
    let root = srv.root_handle();

    // LINK a → b, a's handle; a renamed over: read through b.
    let a = lookup3(&c, &root, "a").await;
    link3(&c, &a, &root, "b").await;
    assert_eq!(lookup3(&c, &root, "a").await, a);
    rename3(&c, &root, "c", "a").await;
    assert_eq!(read3(&c, &a).await.unwrap(), b"linked");
    // And again once b took the place of the recorded name.
    assert_eq!(read3(&c, &a).await.unwrap(), b"linked");
    remove3(&c, &root, "b").await;
    assert_eq!(read3(&c, &a).await, Err(Nfsstat3::NFS3ERR_STALE));

    // LINK x → y, x removed: read through y; y removed: STALE.
    let x = lookup3(&c, &root, "x").await;
    link3(&c, &x, &root, "y").await;
    assert_eq!(lookup3(&c, &root, "x").await, x);
    remove3(&c, &root, "x").await;
    assert_eq!(read3(&c, &x).await.unwrap(), b"x bytes");
    remove3(&c, &root, "y").await;
    assert_eq!(read3(&c, &x).await, Err(Nfsstat3::NFS3ERR_STALE));
}

#[tokio::test]
async fn nfsv3_a_link_made_locally_and_listed_keeps_the_handle() {
    let t = TempDir::new("hl-v3-local");
    std::fs::create_dir(t.path().join("d")).unwrap();
    std::fs::write(t.path().join("d/p"), "local link").unwrap();
    std::fs::write(t.path().join("d/other"), "other").unwrap();
    std::fs::hard_link(t.path().join("d/p"), t.path().join("d/q")).unwrap();
    let srv = start(t.path(), false).await;
    let c = Client::connect(srv.nfs_addr()).await;
    let d = lookup3(&c, &srv.root_handle(), "d").await;
    let p = lookup3(&c, &d, "p").await;
    readdirplus3(&c, &d).await;
    assert_eq!(lookup3(&c, &d, "p").await, p);
    // Renamed over by a local process, behind the server's back.
    std::fs::rename(t.path().join("d/other"), t.path().join("d/p")).unwrap();
    assert_eq!(read3(&c, &p).await.unwrap(), b"local link");
    std::fs::remove_file(t.path().join("d/q")).unwrap();
    assert_eq!(read3(&c, &p).await, Err(Nfsstat3::NFS3ERR_STALE));
}

fn v4name(s: &'static str) -> Component4 {
    Component4::from_static(s)
}

fn putfh(fh: &[u8]) -> NfsArgop4 {
    NfsArgop4::Putfh(Putfh4Args {
        object: NfsFh4(Bytes::copy_from_slice(fh)),
    })
}

fn read4() -> NfsArgop4 {
    NfsArgop4::Read(Read4Args {
        stateid: Stateid4 {
            seqid: 0,
            other: FixedOpaque([0; 12]),
        },
        offset: 0,
        count: 100,
    })
}

fn read_data(r: &[NfsResop4]) -> Vec<u8> {
    r.iter()
        .find_map(|x| match x {
            NfsResop4::Read(Res4::Ok(d)) => Some(d.data.0.to_vec()),
            _ => None,
        })
        .expect("a READ result")
}

async fn client4(addr: SocketAddr, uid: u32) -> C4 {
    let srv = Srv {
        addr,
        uid,
        clock: Arc::new(ManualClock::new()),
        dir: v4_common::TempDir::new("hl-v4-client"),
    };
    let mut c = C4::connect(&srv).await;
    c.establish("hardlinks").await;
    c
}

#[tokio::test]
async fn nfsv4_handle_lives_while_the_file_has_a_link() {
    let t = TempDir::new("hl-v4");
    for (f, data) in [("a", "linked"), ("c", "other"), ("x", "x bytes")] {
        std::fs::write(t.path().join(f), data).unwrap();
    }
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(t.path()).unwrap());
    let srv = start(t.path(), false).await;
    let root = srv.root_handle().as_bytes().to_vec();
    let c = client4(srv.nfs_addr(), uid).await;
    let lookup = |n| {
        vec![
            putfh(&root),
            NfsArgop4::Lookup(Lookup4Args { objname: v4name(n) }),
            NfsArgop4::Getfh(()),
        ]
    };
    let fh = |r: Vec<NfsResop4>| match r.last() {
        Some(NfsResop4::Getfh(Res4::Ok(f))) => f.object.as_bytes().to_vec(),
        other => panic!("GETFH: {other:?}"),
    };
    let in_root = |op| vec![putfh(&root), op];
    let link = |file: &[u8], n| {
        vec![
            putfh(file),
            NfsArgop4::Savefh(()),
            putfh(&root),
            NfsArgop4::Link(Link4Args { newname: v4name(n) }),
        ]
    };
    let rename = |from, to| {
        vec![
            putfh(&root),
            NfsArgop4::Savefh(()),
            putfh(&root),
            NfsArgop4::Rename(Rename4Args {
                oldname: v4name(from),
                newname: v4name(to),
            }),
        ]
    };
    let remove = |n| NfsArgop4::Remove(Remove4Args { target: v4name(n) });

    // LINK a → b, a's handle; a renamed over: read through b.
    let a = fh(c.ok(lookup("a")).await);
    c.ok(link(&a, "b")).await;
    assert_eq!(fh(c.ok(lookup("a")).await), a);
    c.ok(rename("c", "a")).await;
    assert_eq!(read_data(&c.ok(vec![putfh(&a), read4()]).await), b"linked");
    c.ok(in_root(remove("b"))).await;
    let r = c.seq(vec![putfh(&a), read4()]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_STALE, "{r:?}");

    // LINK x → y, x removed: read through y; y removed: STALE.
    let x = fh(c.ok(lookup("x")).await);
    c.ok(link(&x, "y")).await;
    assert_eq!(fh(c.ok(lookup("x")).await), x);
    c.ok(in_root(remove("x"))).await;
    assert_eq!(read_data(&c.ok(vec![putfh(&x), read4()]).await), b"x bytes");
    c.ok(in_root(remove("y"))).await;
    let r = c.seq(vec![putfh(&x), read4()]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_STALE, "{r:?}");
}
