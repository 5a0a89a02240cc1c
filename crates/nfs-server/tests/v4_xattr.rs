//! NFSv4.2 extended attributes (RFC 8276) over TCP with a scripted
//! client: GETXATTR, SETXATTR (create/replace), LISTXATTRS paging,
//! REMOVEXATTR, the ACCESS4_XA* rights, `xattr_support`, and the bounds on
//! names and values. The attributes are the local files' `user.` ones.

mod v4_common;

use std::sync::atomic::Ordering;

use bytes::Bytes;
use nfs::v4::attr::{Bitmap4, FileAttrs, FATTR4_CHANGE, FATTR4_XATTR_SUPPORT};
use nfs::v4::*;
use nfs_server::v4::SessionLimits;
use oncrpc::limits::trips;
use v4_common::*;
use xdr::Bounded;

/// A minor version 2 COMPOUND on `me`'s session: SEQUENCE, PUTROOTFH,
/// LOOKUP `file`, then `ops`.
async fn on(me: &C4, minor: u32, file: &'static str, ops: Vec<NfsArgop4>) -> Compound4Res {
    let id = me.seq.fetch_add(1, Ordering::SeqCst) + 1;
    let mut all = vec![me.sequence(0, id, false), NfsArgop4::Putrootfh(())];
    if !file.is_empty() {
        all.push(NfsArgop4::Lookup(Lookup4Args {
            objname: name(file),
        }));
    }
    all.extend(ops);
    me.compound(&Compound4Args {
        tag: Bytes::new(),
        minorversion: minor,
        argarray: all,
    })
    .await
}

fn set(option: SetxattrOption4, key: &str, value: &[u8]) -> NfsArgop4 {
    NfsArgop4::Setxattr(Setxattr4Args {
        option,
        key: Component4(Bytes::from(key.to_string())),
        value: Bounded(Bytes::copy_from_slice(value)),
    })
}

fn get(key: &str) -> NfsArgop4 {
    NfsArgop4::Getxattr(Xattrkey4Args {
        name: Component4(Bytes::from(key.to_string())),
    })
}

fn remove(key: &str) -> NfsArgop4 {
    NfsArgop4::Removexattr(Xattrkey4Args {
        name: Component4(Bytes::from(key.to_string())),
    })
}

fn list(cookie: u64, maxcount: u32) -> NfsArgop4 {
    NfsArgop4::Listxattrs(Listxattrs4Args { cookie, maxcount })
}

/// The local value of `user.<key>` of `path`, if any.
fn local(path: &std::path::Path, key: &str) -> Option<Vec<u8>> {
    let mut buf = Vec::with_capacity(1 << 16);
    let n = format!("user.{key}");
    rustix::fs::getxattr(path, n.as_str(), rustix::buffer::spare_capacity(&mut buf)).ok()?;
    Some(buf)
}

fn last(r: &Compound4Res) -> &NfsResop4 {
    r.resarray.last().unwrap()
}

/// RFC 8276 §8.4.2, §8.4.1, §8.4.4: SETXATTR with each option, GETXATTR
/// and REMOVEXATTR, with the file's change attribute moving and the local
/// file holding exactly what the client set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_get_replace_and_remove() {
    let srv = serve("xattr-rw", SessionLimits::default()).await;
    let f = srv.dir.path().join("f");
    std::fs::write(&f, b"data").unwrap();
    let mut me = C4::connect(&srv).await;
    me.establish("xattr-rw").await;
    use SetxattrOption4 as O;
    let r = on(&me, 2, "f", vec![set(O::SETXATTR4_CREATE, "k", b"v1")]).await;
    let NfsResop4::Setxattr(Res4::Ok(c)) = last(&r) else {
        panic!("{r:?}")
    };
    assert!(c.cinfo.after > c.cinfo.before, "change moves: {c:?}");
    assert_eq!(local(&f, "k").as_deref(), Some(&b"v1"[..]));
    // Create-only on an existing attribute; replace-only on a missing one.
    let r = on(&me, 2, "f", vec![set(O::SETXATTR4_CREATE, "k", b"v2")]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_EXIST, "{r:?}");
    let r = on(&me, 2, "f", vec![set(O::SETXATTR4_REPLACE, "gone", b"x")]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NOXATTR, "{r:?}");
    assert_eq!(local(&f, "gone"), None);
    let r = on(&me, 2, "f", vec![set(O::SETXATTR4_REPLACE, "k", b"v2")]).await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    let r = on(&me, 2, "f", vec![set(O::SETXATTR4_EITHER, "e", b"")]).await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    assert_eq!(local(&f, "e").as_deref(), Some(&b""[..]));
    // GETXATTR reads what is there, set by the client or locally.
    let r = on(&me, 2, "f", vec![get("k")]).await;
    let NfsResop4::Getxattr(Res4::Ok(g)) = last(&r) else {
        panic!("{r:?}")
    };
    assert_eq!(&g.value.0[..], b"v2");
    rustix::fs::setxattr(&f, "user.local", b"here", rustix::fs::XattrFlags::empty()).unwrap();
    let r = on(&me, 2, "f", vec![get("local")]).await;
    assert!(matches!(last(&r), NfsResop4::Getxattr(Res4::Ok(g)) if &g.value.0[..] == b"here"));
    let r = on(&me, 2, "f", vec![get("missing")]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NOXATTR);
    // REMOVEXATTR, then again.
    let before = getattr_change(&me, "f").await;
    let r = on(&me, 2, "f", vec![remove("k")]).await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    assert_eq!(local(&f, "k"), None);
    assert!(getattr_change(&me, "f").await > before);
    let r = on(&me, 2, "f", vec![remove("k")]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NOXATTR);
    // Directories carry them too.
    std::fs::create_dir(srv.dir.path().join("d")).unwrap();
    let r = on(&me, 2, "d", vec![set(O::SETXATTR4_EITHER, "dk", b"dv")]).await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    assert_eq!(
        local(&srv.dir.path().join("d"), "dk").as_deref(),
        Some(&b"dv"[..])
    );
    // Not in minor version 1 (RFC 8276 §8: a 4.2 extension).
    let r = on(&me, 1, "f", vec![get("e")]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_OP_ILLEGAL);
}

async fn getattr_change(me: &C4, file: &'static str) -> u64 {
    let r = on(
        me,
        2,
        file,
        vec![NfsArgop4::Getattr(Getattr4Args {
            attr_request: Bitmap4::from_bits(&[FATTR4_CHANGE, FATTR4_XATTR_SUPPORT]),
        })],
    )
    .await;
    let NfsResop4::Getattr(Res4::Ok(g)) = last(&r) else {
        panic!("{r:?}")
    };
    let a = FileAttrs::from_fattr4(&g.obj_attributes).unwrap();
    assert_eq!(a.xattr_support, Some(true), "xattr_support (RFC 8276 §8.2)");
    a.change.unwrap()
}

/// RFC 8276 §8.4.3: LISTXATTRS lists only the user namespace, without its
/// prefix, in pages that fit `lxa_maxcount`, resumed by the cookie;
/// NFS4ERR_TOOSMALL when no name fits, NFS4ERR_BAD_COOKIE past the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listxattrs_pages_by_cookie_and_maxcount() {
    let srv = serve("xattr-list", SessionLimits::default()).await;
    let f = srv.dir.path().join("f");
    std::fs::write(&f, b"data").unwrap();
    let mut want: Vec<String> = (0..20).map(|i| format!("name{i:02}")).collect();
    for n in &want {
        let k = format!("user.{n}");
        rustix::fs::setxattr(&f, k.as_str(), b"v", rustix::fs::XattrFlags::empty()).unwrap();
    }
    // Root may set a trusted attribute: it must not be listed.
    let _ = rustix::fs::setxattr(&f, "trusted.hidden", b"v", rustix::fs::XattrFlags::empty());
    let mut me = C4::connect(&srv).await;
    me.establish("xattr-list").await;
    // Each name is 4 + 8 bytes; the frame 16: three names a page.
    let maxcount = 16 + 3 * 12;
    let (mut cookie, mut got, mut pages) = (0, Vec::new(), 0);
    loop {
        let r = on(&me, 2, "f", vec![list(cookie, maxcount)]).await;
        let NfsResop4::Listxattrs(Res4::Ok(p)) = last(&r) else {
            panic!("{r:?}")
        };
        assert!(p.names.0.len() <= 3);
        got.extend(
            p.names
                .0
                .iter()
                .map(|c| String::from_utf8(c.0.to_vec()).unwrap()),
        );
        cookie = p.cookie;
        pages += 1;
        if p.eof {
            break;
        }
        assert!(pages < 20, "no end");
    }
    assert_eq!(pages, 7);
    got.sort();
    want.sort();
    assert_eq!(got, want);
    let r = on(&me, 2, "f", vec![list(0, 16 + 11)]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_TOOSMALL);
    let r = on(&me, 2, "f", vec![list(21, 4096)]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_BAD_COOKIE);
    // A file without any: an empty last page.
    std::fs::write(srv.dir.path().join("bare"), b"").unwrap();
    let r = on(&me, 2, "bare", vec![list(0, 4096)]).await;
    let NfsResop4::Listxattrs(Res4::Ok(p)) = last(&r) else {
        panic!("{r:?}")
    };
    assert!(p.names.0.is_empty() && p.eof);
}

/// Bounds (RFC 8276 §8.4.2.3): a value above 64 KiB is NFS4ERR_XATTR2BIG
/// and a name past 250 bytes NFS4ERR_NAMETOOLONG, each counted, nothing
/// stored; a hostile client cannot grow what one attribute holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_names_and_values_are_refused() {
    let srv = serve("xattr-big", SessionLimits::default()).await;
    let f = srv.dir.path().join("f");
    std::fs::write(&f, b"data").unwrap();
    let mut me = C4::connect(&srv).await;
    me.establish("xattr-big").await;
    let before = trips("nfs4.xattr_value_size");
    let big = vec![7u8; XATTR_SIZE_MAX + 1];
    let r = on(
        &me,
        2,
        "f",
        vec![set(SetxattrOption4::SETXATTR4_EITHER, "big", &big)],
    )
    .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_XATTR2BIG, "{r:?}");
    assert_eq!(local(&f, "big"), None);
    assert_eq!(trips("nfs4.xattr_value_size"), before + 1);
    let before = trips("nfs4.xattr_name_len");
    let long = "n".repeat(251);
    let r = on(
        &me,
        2,
        "f",
        vec![set(SetxattrOption4::SETXATTR4_EITHER, &long, b"v")],
    )
    .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NAMETOOLONG, "{r:?}");
    let r = on(&me, 2, "f", vec![get(&long)]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NAMETOOLONG, "{r:?}");
    assert_eq!(trips("nfs4.xattr_name_len"), before + 2);
    // The longest name allowed works.
    let ok = "n".repeat(250);
    let r = on(
        &me,
        2,
        "f",
        vec![set(SetxattrOption4::SETXATTR4_EITHER, &ok, b"v")],
    )
    .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    // An unknown option.
    let r = on(&me, 2, "f", vec![set(SetxattrOption4(9), "k", b"v")]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_INVAL, "{r:?}");
}

/// RFC 8276 §8.3: ACCESS4_XAREAD/XALIST follow read permission and
/// XAWRITE write permission; another user may read a 0644 file's
/// attributes but not change them (NFS4ERR_ACCESS).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_rights_follow_the_mode() {
    let srv = serve("xattr-access", SessionLimits::default()).await;
    let f = srv.dir.path().join("f");
    std::fs::write(&f, b"data").unwrap();
    std::os::unix::fs::chown(&f, Some(srv.uid), Some(srv.uid)).ok();
    std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    rustix::fs::setxattr(&f, "user.k", b"v", rustix::fs::XattrFlags::empty()).unwrap();
    let xa = ACCESS4_XAREAD | ACCESS4_XAWRITE | ACCESS4_XALIST;
    let access = || vec![NfsArgop4::Access(Access4Args { access: xa })];
    let mut me = C4::connect(&srv).await;
    me.establish("xattr-owner").await;
    let r = on(&me, 2, "f", access()).await;
    let NfsResop4::Access(Res4::Ok(a)) = last(&r) else {
        panic!("{r:?}")
    };
    assert_eq!((a.supported, a.access), (xa, xa));
    let mut other = C4::connect(&srv).await;
    other.cred = sys_cred(srv.uid.wrapping_add(4242));
    other.establish("xattr-other").await;
    let r = on(&other, 2, "f", access()).await;
    let NfsResop4::Access(Res4::Ok(a)) = last(&r) else {
        panic!("{r:?}")
    };
    assert_eq!(a.access, ACCESS4_XAREAD | ACCESS4_XALIST);
    let r = on(&other, 2, "f", vec![get("k")]).await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    let r = on(
        &other,
        2,
        "f",
        vec![set(SetxattrOption4::SETXATTR4_EITHER, "k", b"w")],
    )
    .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_ACCESS, "{r:?}");
    let r = on(&other, 2, "f", vec![remove("k")]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_ACCESS, "{r:?}");
    assert_eq!(local(&f, "k").as_deref(), Some(&b"v"[..]));
}
