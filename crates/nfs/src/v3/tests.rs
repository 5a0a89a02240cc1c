//! Round trips of every NFSv3 argument and result type. Literal vectors
//! marked "kpeer" are NFS bodies cut from
//! /work/shared/kpeer/pcaps/nfsrdma-v3.pcap (a Linux kernel NFSv3 client
//! and server over RPC-over-RDMA over siw); the frame number is given.

use bytes::Bytes;
use xdr::FixedOpaque;

use super::*;

use crate::roundtrip::{unhex, value_roundtrip, wire_roundtrip};

const ROOT_FH: &str = "000000080100010000000000";
const FILE_FH_BODY: [u8; 20] = [
    0x01, 0x00, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x68, 0xf8, 0xdd, 0xdd, 0x36, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00,
];

fn root_fh() -> NfsFh3 {
    NfsFh3::new(&[1, 0, 1, 0, 0, 0, 0, 0]).unwrap()
}

fn attrs(ftype: Ftype3) -> Fattr3 {
    Fattr3 {
        ftype,
        mode: 0o644,
        nlink: 1,
        uid: 1000,
        gid: 1000,
        size: 12345,
        used: 16384,
        rdev: Specdata3::default(),
        fsid: 0x1122_3344_5566_7788,
        fileid: 42,
        atime: Nfstime3 {
            seconds: 1,
            nseconds: 2,
        },
        mtime: Nfstime3 {
            seconds: 3,
            nseconds: 4,
        },
        ctime: Nfstime3 {
            seconds: 5,
            nseconds: 6,
        },
    }
}

fn wcc() -> WccData {
    WccData {
        before: Some(WccAttr {
            size: 1,
            mtime: Nfstime3 {
                seconds: 7,
                nseconds: 8,
            },
            ctime: Nfstime3 {
                seconds: 9,
                nseconds: 10,
            },
        }),
        after: Some(attrs(Ftype3::NF3DIR)),
    }
}

fn dirop(name: &'static str) -> Diropargs3 {
    Diropargs3 {
        dir: root_fh(),
        name: Filename3::from_static(name),
    }
}

#[test]
fn kpeer_getattr_call_and_reply_round_trip() {
    // kpeer frame 38
    let a: Getattr3Args = wire_roundtrip(&unhex(ROOT_FH));
    assert_eq!(a.object, root_fh());
    // kpeer frame 39
    let r: Getattr3Res = wire_roundtrip(&unhex(
        "0000000000000002000003ff0000000300000000000000000000000000000050\
         0000000000000000000000000000000000000000000000000000000000000001\
         6b01282423c346006b0128293a699d006b0128293a699d00",
    ));
    let ok = r.ok().unwrap().obj_attributes;
    assert_eq!(ok.ftype, Ftype3::NF3DIR);
    assert_eq!(ok.mode, 0o1777);
    assert_eq!(ok.nlink, 3);
    assert_eq!(ok.size, 0x50);
    assert_eq!(ok.fileid, 1);
    assert_eq!(ok.mtime.seconds, 0x6b01_2829);
}

#[test]
fn kpeer_fsinfo_call_and_reply_round_trip() {
    // kpeer frame 34
    let _: Fsroot3Args = wire_roundtrip(&unhex(ROOT_FH));
    // kpeer frame 35
    let r: Fsinfo3Res = wire_roundtrip(&unhex(
        "0000000000000000000800000008000000001000000800000008000000001000\
         000800007fffffffffffffff00000001000000000000001b",
    ));
    let ok = r.ok().unwrap();
    assert_eq!(ok.obj_attributes, None);
    assert_eq!((ok.rtmax, ok.wtmax, ok.rtmult), (0x80000, 0x80000, 4096));
    assert_eq!(ok.maxfilesize, i64::MAX as u64);
    assert_eq!(
        ok.time_delta,
        Nfstime3 {
            seconds: 1,
            nseconds: 0
        }
    );
    assert_eq!(
        ok.properties,
        FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME
    );
}

#[test]
fn kpeer_pathconf_reply_round_trips() {
    // kpeer frame 37
    let r: Pathconf3Res = wire_roundtrip(&unhex(
        "0000000000000000000000ff000000ff00000000000000010000000000000001",
    ));
    let ok = r.ok().unwrap();
    assert_eq!((ok.linkmax, ok.name_max), (255, 255));
    assert!(ok.chown_restricted && ok.case_preserving && !ok.case_insensitive);
}

#[test]
fn kpeer_access_call_and_reply_round_trip() {
    // kpeer frame 54
    let a: Access3Args = wire_roundtrip(&unhex("0000000801000100000000000000001f"));
    assert_eq!(a.access, 0x1f);
    // kpeer frame 55
    let r: Access3Res = wire_roundtrip(&unhex(
        "000000000000000100000002000003ff00000003000000000000000000000000\
         0000005000000000000000000000000000000000000000000000000000000000\
         000000016b01282423c346006b0128293a699d006b0128293a699d000000001f",
    ));
    assert_eq!(r.ok().unwrap().access, 0x1f);
}

#[test]
fn kpeer_readdirplus_call_round_trips() {
    // kpeer frame 56
    let a: Readdirplus3Args = wire_roundtrip(&unhex(
        "000000080100010000000000000000000000000000000000000000000001000000010000",
    ));
    assert_eq!(a.cookie, 0);
    assert_eq!(a.cookieverf, FixedOpaque([0; 8]));
    assert_eq!((a.dircount, a.maxcount), (0x1_0000, 0x1_0000));
}

#[test]
fn kpeer_lookup_call_and_replies_round_trip() {
    // kpeer frame 71
    let a: Lookup3Args = wire_roundtrip(&unhex(
        "0000000801000100000000000000000c773130306b2d76332e62696e",
    ));
    assert_eq!(a.what.name, Filename3::from_static("w100k-v3.bin"));
    // kpeer frame 72: NFS3ERR_NOENT with the directory's attributes
    let r: Lookup3Res = wire_roundtrip(&unhex(
        "000000020000000100000002000003ff00000003000000000000000000000000\
         0000005000000000000000000000000000000000000000000000000000000000\
         000000016b01282b1f78a4006b0128293a699d006b0128293a699d00",
    ));
    assert_eq!(r.status(), Nfsstat3::NFS3ERR_NOENT);
    assert!(matches!(r, Res3::Fail(_, Some(_))));
}

#[test]
fn kpeer_create_call_round_trips() {
    // kpeer frame 73
    let a: Create3Args = wire_roundtrip(&unhex(
        "0000000801000100000000000000000c773130306b2d76332e62696e00000000\
         00000001000001a40000000000000000000000000000000000000000",
    ));
    assert_eq!(
        a.how,
        Createhow3::Unchecked(Sattr3 {
            mode: Some(0o644),
            ..Sattr3::default()
        })
    );
}

#[test]
fn kpeer_read_call_round_trips() {
    // kpeer frame 99
    let a: Read3Args = wire_roundtrip(&unhex(
        "00000014010001010000000068f8dddd3600000000000000000000000000000000019000",
    ));
    assert_eq!(a.file.as_bytes(), &FILE_FH_BODY);
    assert_eq!((a.offset, a.count), (0, 102_400));
}

#[test]
fn kpeer_write_call_and_reply_round_trip() {
    // kpeer frame 153: 10 bytes inline, FILE_SYNC
    let wire = unhex(
        "00000014010001010000000059772865370000000000000000000000000000000000000a\
         000000020000000a303132333435363738390000",
    );
    let a: Write3Args = wire_roundtrip(&wire);
    assert_eq!(a.stable, StableHow::FILE_SYNC);
    assert_eq!(&a.data.0[..], b"0123456789");
    // Zero-copy: the data shares the input buffer.
    let shared = Bytes::from(wire.clone());
    let mut dec = xdr::Decoder::from_bytes(&shared);
    let z: Write3Args = dec.decode().unwrap();
    assert_eq!(z.data.0.as_ptr(), shared[wire.len() - 12..].as_ptr());
    // kpeer frame 154
    let r: Write3Res = wire_roundtrip(&unhex(
        "00000000000000000000000100000001000001a4000000010000000000000000\
         000000000000000a000000000000100000000000000000000000000000000000\
         00000000000000376b01282c044aa2006b01282c0487ab006b01282c0487ab00\
         0000000a00000002bf347551fb097c25",
    ));
    let ok = r.ok().unwrap();
    assert_eq!(ok.file_wcc.before, None);
    assert_eq!(ok.file_wcc.after.map(|a| a.size), Some(10));
    assert_eq!((ok.count, ok.committed), (10, StableHow::FILE_SYNC));
    assert_eq!(
        ok.verf,
        FixedOpaque([0xbf, 0x34, 0x75, 0x51, 0xfb, 0x09, 0x7c, 0x25])
    );
}

#[test]
fn kpeer_create_and_lookup_replies_round_trip() {
    // kpeer frame 74
    let r: Create3Res = wire_roundtrip(&unhex(
        "000000000000000100000014010001010000000068f8dddd3600000000000000\
         0000000100000001000001a40000000100000000000000000000000000000000\
         0000000000000000000000000000000000000000000000000000000000000036\
         6b01282b27d0df006b01282b27d0df006b01282b27d0df000000000100000000\
         000000506b0128293a699d006b0128293a699d000000000100000002000003ff\
         0000000300000000000000000000000000000064000000000000000000000000\
         00000000000000000000000000000000000000016b01282b1f78a4006b01282b\
         27d0df006b01282b27d0df00",
    ));
    let ok = r.ok().unwrap();
    assert_eq!(
        ok.obj.map(|f| f.as_bytes().to_vec()),
        Some(FILE_FH_BODY.to_vec())
    );
    assert_eq!(ok.obj_attributes.map(|a| a.fileid), Some(0x36));
    assert_eq!(ok.dir_wcc.before.map(|b| b.size), Some(0x50));
    assert_eq!(ok.dir_wcc.after.map(|a| a.size), Some(0x64));
    // kpeer frame 95
    let r: Lookup3Res = wire_roundtrip(&unhex(
        "0000000000000014010001010000000068f8dddd360000000000000000000001\
         00000001000001a4000000010000000000000000000000000001900000000000\
         000190000000000000000000000000000000000000000000000000366b01282b\
         27d0df006b01282b293f15006b01282b293f15000000000100000002000003ff\
         0000000300000000000000000000000000000064000000000000000000000000\
         00000000000000000000000000000000000000016b01282b1f78a4006b01282b\
         27d0df006b01282b27d0df00",
    ));
    let ok = r.ok().unwrap();
    assert_eq!(ok.object.as_bytes(), &FILE_FH_BODY);
    assert_eq!(ok.obj_attributes.map(|a| a.size), Some(102_400));
}

#[test]
fn every_argument_type_round_trips_through_args3() {
    let fh = root_fh();
    let all = vec![
        Args3::Null,
        Args3::Getattr(Getattr3Args { object: fh.clone() }),
        Args3::Setattr(Setattr3Args {
            object: fh.clone(),
            new_attributes: Sattr3 {
                mode: Some(0o600),
                uid: Some(1),
                gid: Some(2),
                size: Some(3),
                atime: SetTime::ServerTime,
                mtime: SetTime::ClientTime(Nfstime3 {
                    seconds: 4,
                    nseconds: 5,
                }),
            },
            guard: Some(Nfstime3 {
                seconds: 6,
                nseconds: 7,
            }),
        }),
        Args3::Lookup(Lookup3Args { what: dirop("a") }),
        Args3::Access(Access3Args {
            object: fh.clone(),
            access: ACCESS3_READ,
        }),
        Args3::Readlink(Readlink3Args {
            symlink: fh.clone(),
        }),
        Args3::Read(Read3Args {
            file: fh.clone(),
            offset: 1 << 40,
            count: 4096,
        }),
        Args3::Write(Write3Args {
            file: fh.clone(),
            offset: 8,
            count: 3,
            stable: StableHow::UNSTABLE,
            data: xdr::DdpOpaque(Bytes::from_static(b"abc")),
        }),
        Args3::Create(Create3Args {
            dir: dirop("c"),
            how: Createhow3::Guarded(Sattr3::default()),
        }),
        Args3::Create(Create3Args {
            dir: dirop("e"),
            how: Createhow3::Exclusive(FixedOpaque([9; 8])),
        }),
        Args3::Mkdir(Mkdir3Args {
            dir: dirop("d"),
            attributes: Sattr3::default(),
        }),
        Args3::Symlink(Symlink3Args {
            dir: dirop("l"),
            symlink_attributes: Sattr3::default(),
            symlink_data: Nfspath3(Bytes::from_static(b"../target")),
        }),
        Args3::Mknod(Mknod3Args {
            dir: dirop("f"),
            what: Mknoddata3::Special {
                ftype: Ftype3::NF3FIFO,
                attributes: Sattr3::default(),
            },
        }),
        Args3::Mknod(Mknod3Args {
            dir: dirop("b"),
            what: Mknoddata3::Device {
                ftype: Ftype3::NF3BLK,
                attributes: Sattr3::default(),
                spec: Specdata3 {
                    specdata1: 8,
                    specdata2: 1,
                },
            },
        }),
        Args3::Mknod(Mknod3Args {
            dir: dirop("r"),
            what: Mknoddata3::Other(Ftype3::NF3REG),
        }),
        Args3::Remove(Remove3Args { object: dirop("x") }),
        Args3::Rmdir(Remove3Args { object: dirop("y") }),
        Args3::Rename(Rename3Args {
            from: dirop("p"),
            to: dirop("q"),
        }),
        Args3::Link(Link3Args {
            file: fh.clone(),
            link: dirop("h"),
        }),
        Args3::Readdir(Readdir3Args {
            dir: fh.clone(),
            cookie: 3,
            cookieverf: FixedOpaque([1; 8]),
            count: 4096,
        }),
        Args3::Readdirplus(Readdirplus3Args {
            dir: fh.clone(),
            cookie: 3,
            cookieverf: FixedOpaque([1; 8]),
            dircount: 512,
            maxcount: 4096,
        }),
        Args3::Fsstat(Fsroot3Args { object: fh.clone() }),
        Args3::Fsinfo(Fsroot3Args { object: fh.clone() }),
        Args3::Pathconf(Fsroot3Args { object: fh.clone() }),
        Args3::Commit(Commit3Args {
            file: fh,
            offset: 0,
            count: 0,
        }),
    ];
    let mut procs = std::collections::BTreeSet::new();
    for a in &all {
        let wire = xdr::to_bytes(a);
        assert_eq!(Args3::decode(a.procedure(), &wire).as_ref(), Ok(a));
        // A truncated argument is GARBAGE_ARGS, never a panic.
        if !wire.is_empty() {
            assert!(matches!(
                Args3::decode(a.procedure(), &wire[..wire.len() - 1]),
                Err(ArgsError::Garbage { .. })
            ));
        }
        procs.insert(a.procedure().0);
    }
    assert_eq!(procs.len(), 22);
}

#[test]
fn every_result_type_round_trips() {
    let a = Some(attrs(Ftype3::NF3REG));
    value_roundtrip::<Getattr3Res>(&Res3::Fail(Nfsstat3::NFS3ERR_STALE, ()));
    value_roundtrip::<Setattr3Res>(&Res3::Fail(Nfsstat3::NFS3ERR_NOT_SYNC, wcc()));
    value_roundtrip::<Setattr3Res>(&Res3::Ok(wcc()));
    value_roundtrip::<Readlink3Res>(&Res3::Ok(Readlink3ResOk {
        symlink_attributes: a.clone(),
        data: Nfspath3(Bytes::from_static(b"/tmp/x")),
    }));
    value_roundtrip::<Read3Res>(&Res3::Ok(Read3ResOk {
        file_attributes: a.clone(),
        count: 5,
        eof: true,
        data: xdr::DdpOpaque(Bytes::from_static(b"hello")),
    }));
    value_roundtrip::<Read3Res>(&Res3::Fail(Nfsstat3::NFS3ERR_ISDIR, None));
    value_roundtrip::<Create3Res>(&Res3::Fail(Nfsstat3::NFS3ERR_EXIST, wcc()));
    value_roundtrip::<Remove3Res>(&Res3::Ok(wcc()));
    value_roundtrip::<Rename3Res>(&Res3::Fail(Nfsstat3::NFS3ERR_XDEV, Rename3Wcc::default()));
    value_roundtrip::<Link3Res>(&Res3::Ok(Link3Wcc {
        file_attributes: a.clone(),
        linkdir_wcc: wcc(),
    }));
    value_roundtrip::<Readdir3Res>(&Res3::Ok(Readdir3ResOk {
        dir_attributes: a.clone(),
        cookieverf: FixedOpaque([2; 8]),
        entries: vec![
            Entry3 {
                fileid: 1,
                name: Filename3::from_static("."),
                cookie: 1,
            },
            Entry3 {
                fileid: 2,
                name: Filename3::from_static("file"),
                cookie: 2,
            },
        ],
        eof: true,
    }));
    value_roundtrip::<Readdirplus3Res>(&Res3::Ok(Readdirplus3ResOk {
        dir_attributes: None,
        cookieverf: FixedOpaque([2; 8]),
        entries: vec![Entryplus3 {
            fileid: 2,
            name: Filename3::from_static("file"),
            cookie: 2,
            name_attributes: a.clone(),
            name_handle: Some(root_fh()),
        }],
        eof: false,
    }));
    value_roundtrip::<Fsstat3Res>(&Res3::Ok(Fsstat3ResOk {
        obj_attributes: a.clone(),
        tbytes: 1,
        fbytes: 2,
        abytes: 3,
        tfiles: 4,
        ffiles: 5,
        afiles: 6,
        invarsec: 0,
    }));
    value_roundtrip::<Commit3Res>(&Res3::Ok(Commit3ResOk {
        file_wcc: wcc(),
        verf: FixedOpaque([3; 8]),
    }));
    value_roundtrip::<Access3Res>(&Res3::Fail(Nfsstat3::NFS3ERR_ACCES, a));
}

#[test]
fn readdir_reply_has_literal_list_encoding() {
    let r: Readdir3Res = Res3::Ok(Readdir3ResOk {
        dir_attributes: None,
        cookieverf: FixedOpaque([0; 8]),
        entries: vec![Entry3 {
            fileid: 5,
            name: Filename3::from_static("ab"),
            cookie: 9,
        }],
        eof: true,
    });
    let wire = unhex(
        "00000000000000000000000000000000\
         00000001000000000000000500000002616200000000000000000009\
         0000000000000001",
    );
    assert_eq!(xdr::to_bytes(&r)[..], wire[..]);
    let _: Readdir3Res = wire_roundtrip(&wire);
}

#[test]
fn rejects_names_with_slash_nul_or_empty() {
    for bad in [&b"a/b"[..], b"a\0", b""] {
        let mut wire = unhex(ROOT_FH);
        wire.extend_from_slice(&(bad.len() as u32).to_be_bytes());
        wire.extend_from_slice(bad);
        wire.resize(xdr::padded_len(wire.len()), 0);
        assert!(matches!(
            Args3::decode(Nfsproc3::LOOKUP, &wire),
            Err(ArgsError::Garbage {
                proc: Nfsproc3::LOOKUP,
                ..
            })
        ));
    }
}

#[test]
fn rejects_overlong_handle_and_name() {
    let mut wire = vec![0, 0, 0, 65];
    wire.extend_from_slice(&[0; 68]);
    assert!(Args3::decode(Nfsproc3::GETATTR, &wire).is_err());
    assert!(NfsFh3::new(&[0; 65]).is_none());
    let mut wire = unhex(ROOT_FH);
    wire.extend_from_slice(&256u32.to_be_bytes());
    wire.extend_from_slice(&[b'a'; 256]);
    assert!(Args3::decode(Nfsproc3::LOOKUP, &wire).is_err());
}

#[test]
fn rejects_trailing_bytes_and_unknown_procedure() {
    let mut wire = unhex(ROOT_FH);
    wire.extend_from_slice(&[0; 4]);
    assert!(Args3::decode(Nfsproc3::GETATTR, &wire).is_err());
    assert_eq!(
        Args3::decode(Nfsproc3(22), &[]),
        Err(ArgsError::UnknownProcedure(22))
    );
}

#[test]
fn unknown_status_and_bad_union_arms_are_handled() {
    // An unknown status decodes as an open code with the failure arm.
    let r: Getattr3Res = xdr::from_slice(&[0, 0, 0x30, 0x39]).unwrap();
    assert_eq!(r.status(), Nfsstat3(12345));
    assert!(!r.status().is_known());
    // createmode3 3 and time_how 3 are invalid.
    assert!(xdr::from_slice::<Createhow3>(&[0, 0, 0, 3]).is_err());
    assert!(xdr::from_slice::<SetTime>(&[0, 0, 0, 3]).is_err());
}

#[test]
fn kpeer_readdirplus_reply_round_trips() {
    // kpeer frame 61: the reply arrived in a Reply chunk; this is the NFS
    // part of the reassembled RPC message (tshark "Reassembled RPCoRDMA
    // Message", after the 24-byte RPC reply header).
    let r: Readdirplus3Res = wire_roundtrip(&unhex(
        "000000000000000100000002000003ff00000003000000000000000000000000\
         0000005000000000000000000000000000000000000000000000000000000000\
         000000016b01282b1f78a4006b0128293a699d006b0128293a699d0000000000\
         00000000000000010000000000000001000000012e0000000000000000000001\
         0000000100000002000003ff0000000300000000000000000000000000000050\
         0000000000000000000000000000000000000000000000000000000000000001\
         6b01282b1f78a4006b0128293a699d006b0128293a699d000000000100000008\
         0100010000000000000000010000000000000001000000022e2e000000000000\
         0000000200000000000000000000000100000000000000350000000968656c6c\
         6f2e74787400000000000000000000030000000100000001000001a400000001\
         0000000000000000000000000000001b00000000000010000000000000000000\
         000000000000000000000000000000356b0128293a699d006b0128293a699d00\
         6b0128293a699d0000000001000000140100010100000000c5ccbe0835000000\
         0000000000000001000000000000000200000005646972353000000000000000\
         000000040000000100000002000001ed00000002000000000000000000000000\
         0000041000000000000000000000000000000000000000000000000000000000\
         000000026b012829365c04006b0128293a699d006b0128293a699d0000000001\
         00000014010001010000000013412f7a02000000000000000000000000000001",
    ));
    let ok = r.ok().unwrap();
    let names: Vec<_> = ok.entries.iter().map(|e| e.name.0.to_vec()).collect();
    assert_eq!(
        names,
        [&b"."[..], b"..", b"hello.txt", b"dir50"]
            .map(|n| n.to_vec())
            .to_vec()
    );
    assert!(ok.eof);
    let with_attrs: Vec<_> = ok
        .entries
        .iter()
        .map(|e| (e.name_attributes.is_some(), e.name_handle.is_some()))
        .collect();
    // Linux gives no attributes or handle for ".." at the export root.
    assert_eq!(
        with_attrs,
        [(true, true), (false, false), (true, true), (true, true)]
    );
    let hello = &ok.entries[2];
    assert_eq!(
        hello.name_attributes.as_ref().map(|a| a.fileid),
        Some(hello.fileid)
    );
}

/// The one-`put_raw` `fattr3` encoder writes the RFC 1813 §2.5 field
/// order word by word, and decodes back.
#[test]
fn fattr3_encodes_field_by_field_order() {
    let a = Fattr3 {
        rdev: Specdata3 {
            specdata1: 7,
            specdata2: 9,
        },
        ..attrs(Ftype3::NF3LNK)
    };
    let mut want: Vec<u8> = Vec::new();
    for w in [a.ftype.0, a.mode, a.nlink, a.uid, a.gid] {
        want.extend_from_slice(&w.to_be_bytes());
    }
    for h in [a.size, a.used] {
        want.extend_from_slice(&h.to_be_bytes());
    }
    for w in [a.rdev.specdata1, a.rdev.specdata2] {
        want.extend_from_slice(&w.to_be_bytes());
    }
    for h in [a.fsid, a.fileid] {
        want.extend_from_slice(&h.to_be_bytes());
    }
    for t in [a.atime, a.mtime, a.ctime] {
        want.extend_from_slice(&t.seconds.to_be_bytes());
        want.extend_from_slice(&t.nseconds.to_be_bytes());
    }
    let wire = xdr::to_bytes(&a);
    assert_eq!(wire.len(), FATTR3_LEN);
    assert_eq!(wire[..], want[..]);
    assert_eq!(xdr::from_slice::<Fattr3>(&wire).unwrap(), a);
}
