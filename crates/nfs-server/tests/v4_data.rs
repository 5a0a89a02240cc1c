//! NFSv4.2 data operations over TCP with a scripted client: READ_PLUS
//! with holes (RFC 7862 §15.10).

mod v4_common;

use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use nfs::v4::*;
use nfs_server::v4::SessionLimits;
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
