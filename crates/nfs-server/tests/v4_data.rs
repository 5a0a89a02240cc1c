//! NFSv4.2 data operations over TCP with a scripted client: READ_PLUS
//! with holes (RFC 7862 §15.10), COPY (§15.2) and CLONE (§15.13).

mod v4_common;

use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use nfs::v4::*;
use nfs_server::v4::SessionLimits;
use oncrpc::limits::trips;
use v4_common::*;

/// A COMPOUND in minor version `minor` on `me`'s session: SEQUENCE,
/// PUTROOTFH, then `ops`.
async fn v42(me: &C4, minor: u32, ops: Vec<NfsArgop4>) -> Compound4Res {
    let id = me.seq.fetch_add(1, Ordering::SeqCst) + 1;
    let mut all = vec![me.sequence(0, id, false), NfsArgop4::Putrootfh(())];
    all.extend(ops);
    me.compound(&Compound4Args {
        tag: Bytes::new(),
        minorversion: minor,
        argarray: all,
    })
    .await
}

fn lookup(n: &'static str) -> NfsArgop4 {
    NfsArgop4::Lookup(Lookup4Args { objname: name(n) })
}

fn read_plus(offset: u64, count: u32) -> NfsArgop4 {
    NfsArgop4::ReadPlus(ReadPlus4Args {
        stateid: Stateid4::ANONYMOUS,
        offset,
        count,
    })
}

fn plus_ok(r: &Compound4Res) -> &ReadPlus4ResOk {
    match r.resarray.last() {
        Some(NfsResop4::ReadPlus(Res4::Ok(p))) => p,
        _ => panic!("{r:?}"),
    }
}

/// The bytes the segments stand for, from `start`.
fn flatten(p: &ReadPlus4ResOk, start: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for c in &p.contents.0 {
        let (at, bytes) = match c {
            ReadPlusContent4::Data { offset, data } => (*offset, data.0.to_vec()),
            ReadPlusContent4::Hole { offset, length } => (*offset, vec![0; *length as usize]),
        };
        assert_eq!(at, start + out.len() as u64, "segments are contiguous");
        out.extend(bytes);
    }
    out
}

/// RFC 7862 §15.10.3: READ_PLUS returns data runs as data and holes as
/// extents, in file order, within READ's size limit; `rpr_eof` at the
/// end; nothing at or past it; OP_ILLEGAL in minor version 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_plus_returns_data_and_holes() {
    let srv = serve("readplus", SessionLimits::default()).await;
    let path = srv.dir.path().join("sparse");
    let f = std::fs::File::create(&path).unwrap();
    let mib = 1u64 << 20;
    f.write_all_at(&[0xaa; 4096], 0).unwrap();
    f.write_all_at(&[0xbb; 4096], 2 * mib).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let whole = std::fs::read(&path).unwrap();
    let mut me = C4::connect(&srv).await;
    me.establish("readplus").await;
    // The first 512 KiB: 4 KiB of data, then a hole to the end of the range.
    let half = 512 << 10;
    let r = v42(&me, 2, vec![lookup("sparse"), read_plus(0, half)]).await;
    let p = plus_ok(&r);
    assert!(!p.eof);
    assert!(
        flatten(p, 0) == whole[..half as usize],
        "same bytes as the file"
    );
    assert_eq!(p.contents.0.len(), 2, "data, hole");
    assert!(matches!(&p.contents.0[0],
        ReadPlusContent4::Data { offset: 0, data } if data.0.len() == 4096));
    assert!(
        matches!(p.contents.0[1],
            ReadPlusContent4::Hole { offset: 4096, length } if length == u64::from(half) - 4096),
        "the hole is an extent, not zeros"
    );
    // Across the end of the hole into the last data: eof.
    let from = 2 * mib - 100;
    let r = v42(&me, 2, vec![lookup("sparse"), read_plus(from, half)]).await;
    let p = plus_ok(&r);
    assert!(p.eof);
    assert!(flatten(p, from) == whole[from as usize..]);
    assert!(matches!(
        p.contents.0[0],
        ReadPlusContent4::Hole { length: 100, .. }
    ));
    assert!(matches!(p.contents.0.last(),
        Some(ReadPlusContent4::Data { offset, data }) if *offset == 2 * mib && data.0.len() == 4096));
    // At the end: nothing, eof.
    let r = v42(
        &me,
        2,
        vec![lookup("sparse"), read_plus(2 * mib + 4096, 10)],
    )
    .await;
    let p = plus_ok(&r);
    assert!(p.eof && p.contents.0.is_empty());
    // A file without holes is one data segment.
    std::fs::write(srv.dir.path().join("dense"), b"hello").unwrap();
    let r = v42(&me, 2, vec![lookup("dense"), read_plus(1, 100)]).await;
    let p = plus_ok(&r);
    assert!(p.eof);
    assert_eq!(p.contents.0.len(), 1);
    assert_eq!(flatten(p, 1), b"ello");
    // Not in 4.1; not on a directory.
    let r = v42(&me, 1, vec![lookup("dense"), read_plus(0, 1)]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_OP_ILLEGAL);
    let r = v42(&me, 2, vec![read_plus(0, 1)]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_ISDIR);
}

fn copy(src_offset: u64, dst_offset: u64, count: u64) -> NfsArgop4 {
    NfsArgop4::Copy(Copy4Args {
        src_stateid: Stateid4::ANONYMOUS,
        dst_stateid: Stateid4::ANONYMOUS,
        src_offset,
        dst_offset,
        count,
        consecutive: false,
        synchronous: false,
        source_server: xdr::Bounded(vec![]),
    })
}

/// SAVEFH on `src`, the current file `dst`, then `op`.
fn between(src: &'static str, dst: &'static str, op: NfsArgop4) -> Vec<NfsArgop4> {
    let mut ops = vec![lookup(src), NfsArgop4::Savefh(()), NfsArgop4::Putrootfh(())];
    if !dst.is_empty() {
        ops.push(lookup(dst));
    }
    ops.push(op);
    ops
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

/// RFC 7862 §15.2.3: COPY from the saved file to the current one within
/// the export, done synchronously even when asked for an asynchronous copy
/// (no callback id, `cr_synchronous`), FILE_SYNC4; `ca_count` 0 copies to
/// the end; ranges past the end and overlaps in one file are INVAL; a
/// directory is WRONG_TYPE; another server's source NOTSUPP; a caller who
/// may not write the destination ACCESS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_within_the_export() {
    let srv = serve("copy", SessionLimits::default()).await;
    let src = pattern(100_000);
    std::fs::write(srv.dir.path().join("src"), &src).unwrap();
    std::fs::write(srv.dir.path().join("dst"), b"").unwrap();
    let mut me = C4::connect(&srv).await;
    me.establish("copy").await;
    let r = v42(&me, 2, between("src", "dst", copy(0, 0, 0))).await;
    let Some(NfsResop4::Copy(Res4::Ok(c))) = r.resarray.last() else {
        panic!("{:?}", r.status)
    };
    assert_eq!(c.response.count, 100_000);
    assert_eq!(c.response.committed, StableHow4::FILE_SYNC4);
    assert!(c.response.callback_id.0.is_empty());
    assert!(c.requirements.synchronous);
    assert!(std::fs::read(srv.dir.path().join("dst")).unwrap() == src);
    let r = v42(&me, 2, between("src", "dst", copy(1000, 50, 10))).await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK);
    let dst = std::fs::read(srv.dir.path().join("dst")).unwrap();
    assert_eq!(dst[50..60], src[1000..1010]);
    assert_eq!(dst[..50], src[..50]);
    // Past the source's end; an overlap within one file.
    let r = v42(&me, 2, between("src", "dst", copy(99_999, 0, 2))).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_INVAL);
    let r = v42(&me, 2, between("src", "src", copy(0, 10, 100))).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_INVAL);
    // A directory; another server.
    let r = v42(&me, 2, between("src", "", copy(0, 0, 0))).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_WRONG_TYPE);
    let NfsArgop4::Copy(mut a) = copy(0, 0, 0) else {
        unreachable!()
    };
    a.source_server = xdr::Bounded(vec![Netloc4::Name(xdr::Bounded(Bytes::from_static(
        b"elsewhere",
    )))]);
    let r = v42(&me, 2, between("src", "dst", NfsArgop4::Copy(a))).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NOTSUPP);
    // Another user may read the source but not write the destination.
    let mut other = C4::connect(&srv).await;
    other.cred = sys_cred(srv.uid.wrapping_add(4242));
    other.establish("copy-other").await;
    std::fs::set_permissions(
        srv.dir.path().join("dst"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let r = v42(&other, 2, between("src", "dst", copy(0, 0, 10))).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_ACCESS);
    // Not in 4.1.
    let r = v42(&me, 1, between("src", "dst", copy(0, 0, 0))).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_OP_ILLEGAL);
}

/// RFC 7862 §15.13.3: CLONE of a whole file where the file system shares
/// extents (the destination then reads as the source), else NOTSUPP; a
/// partial range is NOTSUPP; a range past the end INVAL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clone_whole_files_or_notsupp() {
    let srv = serve("clone", SessionLimits::default()).await;
    let src = pattern(8192);
    std::fs::write(srv.dir.path().join("src"), &src).unwrap();
    std::fs::write(srv.dir.path().join("dst"), b"").unwrap();
    let mut me = C4::connect(&srv).await;
    me.establish("clone").await;
    let clone = |src_offset, count| {
        NfsArgop4::Clone(Clone4Args {
            src_stateid: Stateid4::ANONYMOUS,
            dst_stateid: Stateid4::ANONYMOUS,
            src_offset,
            dst_offset: 0,
            count,
        })
    };
    let r = v42(&me, 2, between("src", "dst", clone(0, 0))).await;
    match r.status {
        Nfsstat4::NFS4_OK => {
            assert!(std::fs::read(srv.dir.path().join("dst")).unwrap() == src);
        }
        Nfsstat4::NFS4ERR_NOTSUPP => {
            assert!(std::fs::read(srv.dir.path().join("dst"))
                .unwrap()
                .is_empty());
        }
        s => panic!("CLONE: {s:?}"),
    }
    let r = v42(&me, 2, between("src", "dst", clone(4096, 0))).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NOTSUPP);
    let r = v42(&me, 2, between("src", "dst", clone(0, 9000))).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_INVAL);
}

/// The bound on one COPY (64 MiB, limit `nfs4.copy_bytes`): a longer copy
/// is answered short, counted, and the client goes on from there (RFC
/// 7862 §15.2.3: `wr_count` may be less than `ca_count`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_copy_is_answered_short() {
    let srv = serve("copy-long", SessionLimits::default()).await;
    let max = 64u64 << 20;
    let f = std::fs::File::create(srv.dir.path().join("src")).unwrap();
    f.set_len(max + 8192).unwrap();
    drop(f);
    std::fs::write(srv.dir.path().join("dst"), b"").unwrap();
    let mut me = C4::connect(&srv).await;
    me.establish("copy-long").await;
    let before = trips("nfs4.copy_bytes");
    let r = v42(&me, 2, between("src", "dst", copy(0, 0, max + 8192))).await;
    let Some(NfsResop4::Copy(Res4::Ok(c))) = r.resarray.last() else {
        panic!("{:?}", r.status)
    };
    assert_eq!(c.response.count, max);
    assert_eq!(trips("nfs4.copy_bytes"), before + 1);
    let r = v42(&me, 2, between("src", "dst", copy(max, max, 0))).await;
    let Some(NfsResop4::Copy(Res4::Ok(c))) = r.resarray.last() else {
        panic!("{:?}", r.status)
    };
    assert_eq!(c.response.count, 8192);
    let len = std::fs::metadata(srv.dir.path().join("dst")).unwrap().len();
    assert_eq!(len, max + 8192);
}

fn read(offset: u64, count: u32) -> NfsArgop4 {
    NfsArgop4::Read(Read4Args {
        stateid: Stateid4::ANONYMOUS,
        offset,
        count,
    })
}

fn write(offset: u64, stable: StableHow4, data: &'static [u8]) -> NfsArgop4 {
    NfsArgop4::Write(Write4Args {
        stateid: Stateid4::ANONYMOUS,
        offset,
        stable,
        data: xdr::DdpOpaque(Bytes::from_static(data)),
    })
}

/// READ and WRITE (RFC 8881 §18.22, §18.32) with the anonymous stateid,
/// checked in the storage's one pass: the bytes and eof, FILE_SYNC
/// committed and on disk, and the refusals by file type (ISDIR,
/// SYMLINK) and permission (ACCESS for another user without rights).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_and_write_check_type_and_permission_in_one_pass() {
    let srv = serve("rw1pass", SessionLimits::default()).await;
    let dir = srv.dir.path();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.join("f"), &data).unwrap();
    std::os::unix::fs::symlink("f", dir.join("link")).unwrap();
    std::fs::create_dir(dir.join("d")).unwrap();
    let mut me = C4::connect(&srv).await;
    me.establish("rw1pass").await;
    let read_ok = |r: &Compound4Res| match r.resarray.last() {
        Some(NfsResop4::Read(Res4::Ok(ok))) => (ok.eof, ok.data.0.clone()),
        _ => panic!("{r:?}"),
    };
    let r = v42(&me, 1, vec![lookup("f"), read(1000, 200_000)]).await;
    let (eof, got) = read_ok(&r);
    assert!(!eof);
    assert!(got[..] == data[1000..201_000]);
    let r = v42(&me, 1, vec![lookup("f"), read(250_000, 200_000)]).await;
    let (eof, got) = read_ok(&r);
    assert!(eof);
    assert!(got[..] == data[250_000..]);
    let r = v42(
        &me,
        1,
        vec![lookup("f"), write(10, StableHow4::FILE_SYNC4, b"one pass")],
    )
    .await;
    match r.resarray.last() {
        Some(NfsResop4::Write(Res4::Ok(w))) => {
            assert_eq!((w.count, w.committed), (8, StableHow4::FILE_SYNC4));
        }
        _ => panic!("{r:?}"),
    }
    assert_eq!(&std::fs::read(dir.join("f")).unwrap()[10..18], b"one pass");
    for (file, want) in [
        ("d", Nfsstat4::NFS4ERR_ISDIR),
        ("link", Nfsstat4::NFS4ERR_SYMLINK),
    ] {
        let r = v42(&me, 1, vec![lookup(file), read(0, 10)]).await;
        assert_eq!(r.status, want, "READ {file}");
        let r = v42(
            &me,
            1,
            vec![lookup(file), write(0, StableHow4::UNSTABLE4, b"x")],
        )
        .await;
        assert_eq!(r.status, want, "WRITE {file}");
    }
    // Another user: no read or write permission on a 0600 file.
    std::fs::set_permissions(
        dir.join("f"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let mut other = C4::connect(&srv).await;
    other.cred = sys_cred(srv.uid.wrapping_add(4242));
    other.establish("rw1pass-other").await;
    let r = v42(&other, 1, vec![lookup("f"), read(0, 10)]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_ACCESS);
    let r = v42(
        &other,
        1,
        vec![lookup("f"), write(0, StableHow4::UNSTABLE4, b"x")],
    )
    .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_ACCESS);
    assert_eq!(&std::fs::read(dir.join("f")).unwrap()[..1], &data[..1]);
}
