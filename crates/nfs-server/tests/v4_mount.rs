//! A mount and file session as the Linux 6.1 client runs it: the
//! COMPOUNDs are the kernel's own, cut from
//! /work/shared/kpeer/pcaps/nfsrdma-v4.1.pcap (frame numbers given), with
//! the session id, slot sequence, client id and file handles patched to
//! this server's; then create/write/read/close, rename, links, READDIR and
//! the NFSv4.2 data operations, all over TCP.

mod v4_common;

use bytes::Bytes;
use nfs::v4::attr::*;
use nfs::v4::session::SecinfoStyle4;
use nfs::v4::*;
use nfs_server::v4::SessionLimits;
use v4_common::*;
use xdr::{Decode, FixedOpaque};

fn unhex(s: &str) -> Bytes {
    Bytes::from(
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect::<Vec<u8>>(),
    )
}

/// Frame 10: EXCHANGE_ID.
const EXCHANGE_ID: &str = "0000000000000001000000010000002a18e9f762fb7887ca000000134c696e7578204e465376342e31206b70656572000000010100000000000000010000000a6b65726e656c2e6f72670000000000504c696e757820362e312e302d35362d616d64363420233120534d5020505245454d50545f44594e414d49432044656269616e20362e312e3139322d322028323032362d31312d313629207838365f3634000000000000000000000000";
/// Frame 18: CREATE_SESSION.
const CREATE_SESSION: &str = "0000000000000001000000010000002b2728016bd1f8a4c0000000010000000300000000001004140010038800001da00000000800000040000000000000000000000fe400000fe400000000000000020000001000000000400000000000000100000001fb7887ca000000056b70656572000000000000000000000000000000";
/// Frames 20, 23, 26, 28, 30, 36, 46, 48, 54: RECLAIM_COMPLETE,
/// SECINFO_NO_NAME, PUTROOTFH+GETFH+GETATTR, three fsinfo GETATTRs,
/// ACCESS+GETATTR, READDIR, OPEN (create).
const SESSION_CALLS: [&str; 9] = [
    "000000000000000100000002000000352728016bd1f8a4c00100000000000000000000010000000000000000000000000000003a00000000",
    "000000000000000100000003000000352728016bd1f8a4c0010000000000000000000002000000000000000000000000000000180000003400000000",
    "000000000000000100000004000000352728016bd1f8a4c0010000000000000000000003000000000000000000000000000000180000000a00000009000000020010011a00b0a23a",
    "000000000000000100000003000000352728016bd1f8a4c0010000000000000000000004000000000000000000000000000000160000000801000100000000000000000900000003000320650000000000000800",
    "000000000000000100000003000000352728016bd1f8a4c0010000000000000000000005000000000000000000000000000000160000000801000100000000000000000900000003c80004004008000000000002",
    "000000000000000100000003000000352728016bd1f8a4c001000000000000000000000800000000000000000000000000000016000000080100010000000000000000090000000130000000",
    "000000000000000100000004000000352728016bd1f8a4c001000000000000000000000c00000000000000000000000000000016000000080100010000000000000000030000001f00000009000000020000001800300000",
    "000000000000000100000003000000352728016bd1f8a4c001000000000000000000000d000000000000000000000000000000160000000801000100000000000000001a000000000000000000000000000000000000ffa80000ffa8000000020018091a00b0a23a",
    "000000000000000100000006000000352728016bd1f8a4c001000000000000000000000e00000000000000000000000100000016000000080100010000000000000000120000000000000002000000002728016bd1f8a4c0000000186f70656e2069643a0000002200000000000000078a38e2f800000001000000000000000200000010000000020000000c0000000000000000000001a4000000000000000e773130306b2d76342e312e62696e00000000000a000000030000003d00000009000000020010011a00b0a23a",
];

/// Points a kernel COMPOUND at this client's session (slot 0, next
/// sequence id), client id and `fh`.
fn patch(c: &mut Compound4Args, me: &C4, fh: &NfsFh4) {
    for op in &mut c.argarray {
        match op {
            NfsArgop4::Sequence(s) => {
                s.sessionid = FixedOpaque(me.session);
                s.slotid = 0;
                s.highest_slotid = 0;
                s.sequenceid = me.seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            }
            NfsArgop4::Putfh(p) => p.object = fh.clone(),
            NfsArgop4::Open(o) => o.owner.clientid = me.clientid,
            _ => {}
        }
    }
}

fn getfh(r: &[NfsResop4]) -> NfsFh4 {
    r.iter()
        .find_map(|x| match x {
            NfsResop4::Getfh(Res4::Ok(g)) => Some(g.object.clone()),
            _ => None,
        })
        .expect("a GETFH result")
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_mount_sequence_then_write_and_read_back() {
    let srv = serve("mount", SessionLimits::default()).await;
    let mut me = C4::connect(&srv).await;

    // The kernel's EXCHANGE_ID, byte for byte.
    let r: Compound4Res = xdr::from_slice(&me.raw(unhex(EXCHANGE_ID)).await).unwrap();
    let [NfsResop4::ExchangeId(Res4::Ok(x))] = &r.resarray[..] else {
        panic!("{r:?}")
    };
    assert_eq!(x.flags & session::EXCHGID4_FLAG_CONFIRMED_R, 0);
    me.clientid = x.clientid;
    // Its CREATE_SESSION, with our client id and sequence.
    let mut cs = Compound4Args::decode(&mut xdr::Decoder::new(&unhex(CREATE_SESSION))).unwrap();
    let NfsArgop4::CreateSession(a) = &mut cs.argarray[0] else {
        panic!()
    };
    a.clientid = x.clientid;
    a.sequence = x.sequenceid;
    let r = me.compound(&cs).await;
    let [NfsResop4::CreateSession(Res4::Ok(s))] = &r.resarray[..] else {
        panic!("{r:?}")
    };
    // ca_maxrequestsize and ca_maxresponsesize honoured: never above the
    // client's, and the slot count cut to the server's 64.
    assert!(s.fore_chan_attrs.maxrequestsize <= 0x0010_0414);
    assert!(s.fore_chan_attrs.maxresponsesize <= 0x0010_0388);
    assert_eq!(s.fore_chan_attrs.maxrequests, 64);
    me.session = s.sessionid.0;

    let root = NfsFh4::default();
    let mut results = Vec::new();
    let mut fh = root.clone();
    for (i, hex) in SESSION_CALLS.iter().enumerate() {
        let mut c = xdr::from_slice::<Compound4Args>(&unhex(hex)).unwrap();
        patch(&mut c, &me, &fh);
        let r = me.compound(&c).await;
        assert_eq!(r.status, Nfsstat4::NFS4_OK, "kernel call {i}: {r:?}");
        assert_eq!(r.resarray.len(), c.argarray.len());
        if i == 2 {
            fh = getfh(&r.resarray);
            let a = attrs(&r.resarray);
            assert_eq!(a.ftype, Some(NfsFtype4::NF4DIR));
            // Every attribute the kernel asked for at the root is answered.
            let NfsArgop4::Getattr(g) = &c.argarray[3] else {
                panic!()
            };
            let NfsResop4::Getattr(Res4::Ok(got)) = &r.resarray[3] else {
                panic!()
            };
            assert_eq!(got.obj_attributes.attrmask, g.attr_request);
        }
        results.push(r);
    }
    // The fsinfo GETATTR answers what the kernel needs for rsize/wsize.
    let fsinfo = attrs(&results[4].resarray);
    assert_eq!(fsinfo.lease_time, Some(90));
    assert_eq!(fsinfo.maxread, Some(1 << 20));
    // The kernel's OPEN created w100k-v4.1.bin and returned its handle.
    let file_fh = getfh(&results[8].resarray);
    let sid = open_stateid(&results[8].resarray);
    assert!(srv.dir.path().join("w100k-v4.1.bin").is_file());

    let data: Vec<u8> = (0..102_400u32).map(|i| (i * 7) as u8).collect();
    let w = me
        .ok(vec![
            NfsArgop4::Putfh(Putfh4Args {
                object: file_fh.clone(),
            }),
            NfsArgop4::Write(Write4Args {
                stateid: sid,
                offset: 0,
                stable: StableHow4::UNSTABLE4,
                data: xdr::DdpOpaque(Bytes::from(data.clone())),
            }),
            NfsArgop4::Commit(Commit4Args {
                offset: 0,
                count: 0,
            }),
            NfsArgop4::Close(Close4Args {
                seqid: 0,
                open_stateid: sid,
            }),
        ])
        .await;
    let NfsResop4::Write(Res4::Ok(wr)) = &w[2] else {
        panic!("{w:?}")
    };
    assert_eq!(wr.count, 102_400);
    assert_eq!(
        std::fs::read(srv.dir.path().join("w100k-v4.1.bin")).unwrap(),
        data
    );

    // Open existing for read (CLAIM_NULL, no create), READ, CLOSE.
    let r = me
        .ok(vec![
            NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
            NfsArgop4::Open(Open4Args {
                seqid: 0,
                share_access: OPEN4_SHARE_ACCESS_READ,
                share_deny: OPEN4_SHARE_DENY_NONE,
                owner: owner(me.clientid, "reader"),
                openhow: OpenHow4(None),
                claim: OpenClaim4::Null(name("w100k-v4.1.bin")),
            }),
            NfsArgop4::Read(Read4Args {
                stateid: Stateid4::CURRENT,
                offset: 100_000,
                count: 4096,
            }),
            NfsArgop4::Close(Close4Args {
                seqid: 0,
                open_stateid: Stateid4::CURRENT,
            }),
        ])
        .await;
    let NfsResop4::Read(Res4::Ok(rd)) = &r[3] else {
        panic!("{r:?}")
    };
    assert!(rd.eof);
    assert_eq!(&rd.data.0[..], &data[100_000..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_operations_rename_link_symlink_readdir_remove() {
    let srv = serve("ns", SessionLimits::default()).await;
    let mut me = C4::connect(&srv).await;
    me.establish("ns").await;
    let cid = me.clientid;
    let r = me
        .ok(vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Create(Create4Args {
                objtype: Createtype4::Dir,
                objname: name("d"),
                createattrs: Fattr4::default(),
            }),
            NfsArgop4::Savefh(()),
            open_create(cid, "a", OPEN4_SHARE_ACCESS_BOTH, 0),
            NfsArgop4::Close(Close4Args {
                seqid: 0,
                open_stateid: Stateid4::CURRENT,
            }),
            NfsArgop4::Restorefh(()),
            NfsArgop4::Create(Create4Args {
                objtype: Createtype4::Link(Linktext4(Bytes::from_static(b"a"))),
                objname: name("l"),
                createattrs: Fattr4::default(),
            }),
            NfsArgop4::Readlink(()),
        ])
        .await;
    let NfsResop4::Readlink(Res4::Ok(l)) = r.last().unwrap() else {
        panic!()
    };
    assert_eq!(&l.link.0[..], b"a");
    // RENAME d/a -> d/b, LINK d/b as d/c, READDIR, REMOVE.
    let r = me
        .ok(vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Lookup(Lookup4Args { objname: name("d") }),
            NfsArgop4::Savefh(()),
            NfsArgop4::Rename(Rename4Args {
                oldname: name("a"),
                newname: name("b"),
            }),
            NfsArgop4::Lookup(Lookup4Args { objname: name("b") }),
            NfsArgop4::Savefh(()),
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Lookup(Lookup4Args { objname: name("d") }),
            NfsArgop4::Link(Link4Args { newname: name("c") }),
            NfsArgop4::Readdir(Readdir4Args {
                cookie: 0,
                cookieverf: FixedOpaque([0; 8]),
                dircount: 4096,
                maxcount: 8192,
                attr_request: Bitmap4::from_bits(&[FATTR4_TYPE, FATTR4_NUMLINKS, FATTR4_FILEID]),
            }),
        ])
        .await;
    let NfsResop4::Readdir(Res4::Ok(d)) = r.last().unwrap() else {
        panic!()
    };
    assert!(d.eof);
    let mut names: Vec<_> = d.entries.iter().map(|e| e.name.0.clone()).collect();
    names.sort();
    assert_eq!(names, [&b"b"[..], b"c", b"l"]);
    let b = d.entries.iter().find(|e| &e.name.0[..] == b"b").unwrap();
    assert_eq!(FileAttrs::from_fattr4(&b.attrs).unwrap().numlinks, Some(2));
    // A READDIR reply too small for one entry.
    let r = me
        .seq(vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Lookup(Lookup4Args { objname: name("d") }),
            NfsArgop4::Readdir(Readdir4Args {
                cookie: 0,
                cookieverf: FixedOpaque([0; 8]),
                dircount: 10,
                maxcount: 20,
                attr_request: Bitmap4::new(),
            }),
        ])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_TOOSMALL);
    let r = me
        .seq(vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Remove(Remove4Args { target: name("d") }),
        ])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NOTEMPTY);
    me.ok(vec![
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Lookup(Lookup4Args { objname: name("d") }),
        NfsArgop4::Remove(Remove4Args { target: name("b") }),
        NfsArgop4::Remove(Remove4Args { target: name("c") }),
        NfsArgop4::Remove(Remove4Args { target: name("l") }),
        NfsArgop4::Lookupp(()),
        NfsArgop4::Remove(Remove4Args { target: name("d") }),
    ])
    .await;
    assert_eq!(std::fs::read_dir(srv.dir.path()).unwrap().count(), 0);
    // Names the server refuses, and errors that end the COMPOUND.
    let r = me
        .seq(vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Lookup(Lookup4Args {
                objname: name(".."),
            }),
            NfsArgop4::Getfh(()),
        ])
        .await;
    assert_eq!((r.status, r.resarray.len()), (Nfsstat4::NFS4ERR_BADNAME, 3));
    let r = me.seq(vec![NfsArgop4::Getfh(())]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NOFILEHANDLE);
    let r = me
        .seq(vec![NfsArgop4::SecinfoNoName(
            SecinfoStyle4::SECINFO_STYLE4_CURRENT_FH,
        )])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NOFILEHANDLE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seek_allocate_and_deallocate() {
    let srv = serve("v42", SessionLimits::default()).await;
    let mut me = C4::connect(&srv).await;
    me.establish("v42").await;
    let cid = me.clientid;
    let r = me
        .ok(vec![
            NfsArgop4::Putrootfh(()),
            open_create(cid, "f", OPEN4_SHARE_ACCESS_BOTH, 0),
            NfsArgop4::Write(Write4Args {
                stateid: Stateid4::CURRENT,
                offset: 0,
                stable: StableHow4::FILE_SYNC4,
                data: xdr::DdpOpaque(Bytes::from(vec![1u8; 8192])),
            }),
        ])
        .await;
    let sid = open_stateid(&r);
    let v42 = |ops: Vec<NfsArgop4>| {
        let mut all = vec![me.sequence(
            0,
            me.seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1,
            false,
        )];
        all.push(NfsArgop4::Putrootfh(()));
        all.push(NfsArgop4::Lookup(Lookup4Args { objname: name("f") }));
        all.extend(ops);
        Compound4Args {
            tag: Bytes::new(),
            minorversion: 2,
            argarray: all,
        }
    };
    // ALLOCATE extends the file; DEALLOCATE reads back as zeros.
    let r = me
        .compound(&v42(vec![
            NfsArgop4::Allocate(Allocate4Args {
                stateid: sid,
                offset: 8192,
                length: 8192,
            }),
            NfsArgop4::Deallocate(Allocate4Args {
                stateid: sid,
                offset: 0,
                length: 4096,
            }),
            NfsArgop4::Seek(Seek4Args {
                stateid: sid,
                offset: 0,
                what: DataContent4::NFS4_CONTENT_DATA,
            }),
        ]))
        .await;
    if r.status == Nfsstat4::NFS4ERR_NOTSUPP {
        // The temporary directory's file system has no fallocate.
        return;
    }
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    let NfsResop4::Seek(Res4::Ok(s)) = r.resarray.last().unwrap() else {
        panic!()
    };
    assert!(!s.eof);
    assert!(s.offset <= 4096);
    let content = std::fs::read(srv.dir.path().join("f")).unwrap();
    assert_eq!(content.len(), 16384);
    assert!(content[..4096].iter().all(|&b| b == 0));
    assert!(content[4096..8192].iter().all(|&b| b == 1));
    let r = me
        .compound(&v42(vec![NfsArgop4::Seek(Seek4Args {
            stateid: sid,
            offset: 20000,
            what: DataContent4::NFS4_CONTENT_HOLE,
        })]))
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NXIO);
    // NFSv4.2 operations are illegal in a minor version 1 COMPOUND.
    let r = me
        .seq(vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Seek(Seek4Args {
                stateid: sid,
                offset: 0,
                what: DataContent4::NFS4_CONTENT_DATA,
            }),
        ])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_OP_ILLEGAL);
    assert_eq!(r.resarray.last().unwrap().opnum(), Opnum4::OP_ILLEGAL);
}
