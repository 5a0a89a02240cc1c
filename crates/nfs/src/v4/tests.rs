//! Round trips of COMPOUND arguments and results. Literal vectors marked
//! "kpeer" are NFS bodies cut from /work/shared/kpeer/pcaps/nfsrdma-v4.1.pcap
//! (the Linux 6.1 kernel client and server over RPC-over-RDMA over siw);
//! the frame number is given.

use bytes::Bytes;
use xdr::{Bounded, FixedOpaque};

use super::attr::*;
use super::session::*;
use super::*;

use crate::roundtrip::{unhex, value_roundtrip, wire_roundtrip};

/// kpeer frame 10: the kernel's EXCHANGE_ID.
const EXCHANGE_ID_CALL: &str = "0000000000000001000000010000002a18e9f762fb7887ca000000134c696e7578204e465376342e31206b70656572000000010100000000000000010000000a6b65726e656c2e6f72670000000000504c696e757820362e312e302d35362d616d64363420233120534d5020505245454d50545f44594e414d49432044656269616e20362e312e3139322d322028323032362d31312d313629207838365f3634000000000000000000000000";
/// kpeer frame 18: CREATE_SESSION.
const CREATE_SESSION_CALL: &str = "0000000000000001000000010000002b2728016bd1f8a4c0000000010000000300000000001004140010038800001da00000000800000040000000000000000000000fe400000fe400000000000000020000001000000000400000000000000100000001fb7887ca000000056b70656572000000000000000000000000000000";
/// kpeer frame 19: the CREATE_SESSION reply.
const CREATE_SESSION_REPLY: &str = "0000000000000000000000010000002b000000002728016bd1f8a4c00100000000000000000000010000000200000000000810000008100000000850000000080000001e000000000000000000000fe400000fe400000000000000020000001000000000";
/// kpeer frame 26: SEQUENCE, PUTROOTFH, GETFH, GETATTR.
const ROOT_GETATTR_CALL: &str = "000000000000000100000004000000352728016bd1f8a4c0010000000000000000000003000000000000000000000000000000180000000a00000009000000020010011a00b0a23a";

#[test]
fn decodes_kernel_exchange_id() {
    let c: Compound4Args = wire_roundtrip(&unhex(EXCHANGE_ID_CALL));
    assert_eq!(c.minorversion, 1);
    let [NfsArgop4::ExchangeId(a)] = &c.argarray[..] else {
        panic!("{c:?}")
    };
    assert_eq!(&a.clientowner.ownerid.0[..], b"Linux NFSv4.1 kpeer");
    assert_eq!(
        a.flags,
        EXCHGID4_FLAG_SUPP_MOVED_REFER | EXCHGID4_FLAG_BIND_PRINC_STATEID
    );
    assert_eq!(a.state_protect, StateProtect4A::None);
    assert_eq!(&a.client_impl_id.0[0].nii_domain.0[..], b"kernel.org");
}

#[test]
fn decodes_kernel_create_session() {
    let c: Compound4Args = wire_roundtrip(&unhex(CREATE_SESSION_CALL));
    let [NfsArgop4::CreateSession(a)] = &c.argarray[..] else {
        panic!("{c:?}")
    };
    assert_eq!(a.clientid, 0x2728_016b_d1f8_a4c0);
    assert_eq!(a.sequence, 1);
    assert_eq!(
        a.flags,
        CREATE_SESSION4_FLAG_PERSIST | CREATE_SESSION4_FLAG_CONN_BACK_CHAN
    );
    assert_eq!(a.fore_chan_attrs.maxrequestsize, 0x0010_0414);
    assert_eq!(a.fore_chan_attrs.maxresponsesize, 0x0010_0388);
    assert_eq!(a.fore_chan_attrs.maxrequests, 64);
    assert_eq!(a.cb_program, 0x4000_0000);
    assert!(
        matches!(&a.sec_parms.0[..], [CallbackSecParms4::Sys(p)] if &p.machinename.0[..] == b"kpeer")
    );
}

#[test]
fn decodes_kernel_create_session_reply() {
    let r: Compound4Res = wire_roundtrip(&unhex(CREATE_SESSION_REPLY));
    assert_eq!(r.status, Nfsstat4::NFS4_OK);
    let [NfsResop4::CreateSession(Res4::Ok(ok))] = &r.resarray[..] else {
        panic!("{r:?}")
    };
    assert_eq!(ok.sequence, 1);
    assert_eq!(ok.fore_chan_attrs.maxrequests, 30);
    assert_eq!(ok.back_chan_attrs.maxrequests, 16);
}

#[test]
fn decodes_kernel_sequence_putrootfh_getattr() {
    let c: Compound4Args = wire_roundtrip(&unhex(ROOT_GETATTR_CALL));
    let ops: Vec<Opnum4> = c.argarray.iter().map(NfsArgop4::opnum).collect();
    assert_eq!(
        ops,
        [
            Opnum4::OP_SEQUENCE,
            Opnum4::OP_PUTROOTFH,
            Opnum4::OP_GETFH,
            Opnum4::OP_GETATTR
        ]
    );
    let NfsArgop4::Sequence(s) = &c.argarray[0] else {
        panic!()
    };
    assert_eq!(s.sequenceid, 3);
    assert_eq!(s.slotid, 0);
    let NfsArgop4::Getattr(g) = &c.argarray[3] else {
        panic!()
    };
    // Every attribute the kernel asks for here is one FileAttrs carries.
    assert!(g.attr_request.iter().all(|n| KNOWN_ATTRS.contains(&n)));
    assert!(g.attr_request.contains(FATTR4_MOUNTED_ON_FILEID));
}

/// DELEGRETURN on the wire (RFC 8881 §18.6): the opnum, then the
/// stateid's seqid and 12 bytes of `other`; the result is a bare status.
#[test]
fn delegreturn_is_opnum_8_then_the_stateid() {
    let op = NfsArgop4::Delegreturn(Delegreturn4Args {
        deleg_stateid: sid(7),
    });
    let wire = xdr::to_bytes(&op);
    let mut want = vec![0, 0, 0, 8, 0, 0, 0, 1];
    want.extend_from_slice(&[7; 12]);
    assert_eq!(&wire[..], &want[..]);
    assert_eq!(xdr::from_slice::<NfsArgop4>(&want).unwrap(), op);
    assert!(xdr::from_slice::<NfsArgop4>(&want[..12]).is_err());
    let res: NfsResop4 = xdr::from_slice(&[0, 0, 0, 8, 0, 0, 0x27, 0x11]).unwrap();
    assert_eq!(res, NfsResop4::Delegreturn(Nfsstat4::NFS4ERR_BADHANDLE));
}

#[test]
fn unknown_operation_decodes_as_illegal_and_stops_the_compound() {
    // Operation 2 is not defined, 48 (GETDEVICELIST) is defined but not parsed.
    for (op, want) in [
        (2u32, NfsArgop4::Illegal(2)),
        (48, NfsArgop4::Unsupported(Opnum4(48))),
    ] {
        let mut w = vec![0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 24];
        w.extend_from_slice(&op.to_be_bytes());
        w.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, 1, 2, 3]);
        let c: Compound4Args = xdr::from_slice(&w).unwrap();
        assert_eq!(c.argarray, vec![NfsArgop4::Putrootfh(()), want]);
    }
}

#[test]
fn rejects_oversized_tag_and_too_many_ops() {
    let mut w = vec![0, 0, 0x01, 0];
    w.extend(std::iter::repeat_n(b'a', 256));
    w.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0]);
    assert!(xdr::from_slice::<Compound4Args>(&w).is_err());
    let mut w = vec![0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 1];
    for _ in 0..257 {
        w.extend_from_slice(&24u32.to_be_bytes());
    }
    assert!(xdr::from_slice::<Compound4Args>(&w).is_err());
}

#[test]
fn rejects_oversized_file_handle_and_name() {
    let mut w = 22u32.to_be_bytes().to_vec();
    w.extend_from_slice(&129u32.to_be_bytes());
    w.extend(std::iter::repeat_n(0, 132));
    assert!(xdr::from_slice::<NfsArgop4>(&w).is_err());
    let mut w = 15u32.to_be_bytes().to_vec();
    w.extend_from_slice(&256u32.to_be_bytes());
    w.extend(std::iter::repeat_n(b'a', 256));
    assert!(xdr::from_slice::<NfsArgop4>(&w).is_err());
}

fn sid(n: u8) -> Stateid4 {
    Stateid4 {
        seqid: 1,
        other: FixedOpaque([n; 12]),
    }
}

#[test]
fn every_argument_round_trips() {
    let fattr = FileAttrs {
        mode: Some(0o644),
        ..Default::default()
    }
    .to_fattr4(&Bitmap4::from_bits(&[FATTR4_MODE]));
    let owner = StateOwner4 {
        clientid: 9,
        owner: Bounded(Bytes::from_static(b"owner")),
    };
    let ops = vec![
        NfsArgop4::Access(Access4Args { access: 0x1f }),
        NfsArgop4::Close(Close4Args {
            seqid: 0,
            open_stateid: sid(1),
        }),
        NfsArgop4::Commit(Commit4Args {
            offset: 0,
            count: 0,
        }),
        NfsArgop4::Delegreturn(Delegreturn4Args {
            deleg_stateid: sid(4),
        }),
        NfsArgop4::Create(Create4Args {
            objtype: Createtype4::Link(Linktext4(Bytes::from_static(b"target"))),
            objname: Component4::from_static("l"),
            createattrs: fattr.clone(),
        }),
        NfsArgop4::Create(Create4Args {
            objtype: Createtype4::Dir,
            objname: Component4::from_static("d"),
            createattrs: Fattr4::default(),
        }),
        NfsArgop4::Getfh(()),
        NfsArgop4::Link(Link4Args {
            newname: Component4::from_static("n"),
        }),
        NfsArgop4::Lock(Lock4Args {
            locktype: NfsLockType4::WRITE_LT,
            reclaim: false,
            offset: 0,
            length: NFS4_UINT64_MAX,
            locker: Locker4::New(OpenToLockOwner4 {
                open_seqid: 0,
                open_stateid: sid(2),
                lock_seqid: 0,
                lock_owner: owner.clone(),
            }),
        }),
        NfsArgop4::Lock(Lock4Args {
            locktype: NfsLockType4::READ_LT,
            reclaim: false,
            offset: 5,
            length: 5,
            locker: Locker4::Existing(ExistLockOwner4 {
                lock_stateid: sid(3),
                lock_seqid: 0,
            }),
        }),
        NfsArgop4::Lockt(Lockt4Args {
            locktype: NfsLockType4::READ_LT,
            offset: 0,
            length: 1,
            owner: owner.clone(),
        }),
        NfsArgop4::Locku(Locku4Args {
            locktype: NfsLockType4::READ_LT,
            seqid: 0,
            lock_stateid: sid(3),
            offset: 0,
            length: 1,
        }),
        NfsArgop4::Lookupp(()),
        NfsArgop4::Open(Open4Args {
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_BOTH,
            share_deny: OPEN4_SHARE_DENY_NONE,
            owner: owner.clone(),
            openhow: OpenHow4(Some(Createhow4::Exclusive41(
                FixedOpaque([1; 8]),
                fattr.clone(),
            ))),
            claim: OpenClaim4::Null(Component4::from_static("f")),
        }),
        NfsArgop4::Open(Open4Args {
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_READ,
            share_deny: OPEN4_SHARE_DENY_WRITE,
            owner,
            openhow: OpenHow4(None),
            claim: OpenClaim4::Fh,
        }),
        NfsArgop4::OpenDowngrade(OpenDowngrade4Args {
            open_stateid: sid(1),
            seqid: 0,
            share_access: 1,
            share_deny: 0,
        }),
        NfsArgop4::Putfh(Putfh4Args {
            object: NfsFh4(Bytes::from_static(&[1, 2, 3])),
        }),
        NfsArgop4::Read(Read4Args {
            stateid: sid(1),
            offset: 4096,
            count: 100,
        }),
        NfsArgop4::Readdir(Readdir4Args {
            cookie: 0,
            cookieverf: FixedOpaque([0; 8]),
            dircount: 8192,
            maxcount: 32768,
            attr_request: Bitmap4::from_bits(&[FATTR4_TYPE, FATTR4_FILEID]),
        }),
        NfsArgop4::Remove(Remove4Args {
            target: Component4::from_static("x"),
        }),
        NfsArgop4::Rename(Rename4Args {
            oldname: Component4::from_static("a"),
            newname: Component4::from_static("b"),
        }),
        NfsArgop4::SecinfoNoName(SecinfoStyle4::SECINFO_STYLE4_CURRENT_FH),
        NfsArgop4::Setattr(Setattr4Args {
            stateid: Stateid4::ANONYMOUS,
            obj_attributes: fattr,
        }),
        NfsArgop4::Write(Write4Args {
            stateid: sid(1),
            offset: 0,
            stable: StableHow4::FILE_SYNC4,
            data: xdr::DdpOpaque(Bytes::from_static(b"hello")),
        }),
        NfsArgop4::BindConnToSession(BindConnToSession4Args {
            sessid: FixedOpaque([4; 16]),
            dir: ChannelDir4::CDFC4_FORE_OR_BOTH,
            use_conn_in_rdma_mode: false,
        }),
        NfsArgop4::DestroySession(DestroySession4Args {
            sessionid: FixedOpaque([4; 16]),
        }),
        NfsArgop4::FreeStateid(FreeStateid4Args { stateid: sid(3) }),
        NfsArgop4::TestStateid(TestStateid4Args {
            stateids: Bounded(vec![sid(1), sid(2)]),
        }),
        NfsArgop4::DestroyClientid(DestroyClientid4Args { clientid: 7 }),
        NfsArgop4::ReclaimComplete(ReclaimComplete4Args { one_fs: false }),
        NfsArgop4::Allocate(Allocate4Args {
            stateid: sid(1),
            offset: 0,
            length: 10,
        }),
        NfsArgop4::Deallocate(Allocate4Args {
            stateid: sid(1),
            offset: 0,
            length: 10,
        }),
        NfsArgop4::Seek(Seek4Args {
            stateid: sid(1),
            offset: 0,
            what: DataContent4::NFS4_CONTENT_HOLE,
        }),
    ];
    for op in &ops {
        value_roundtrip(op);
    }
    value_roundtrip(&Compound4Args {
        tag: Bytes::from_static(b"t"),
        minorversion: 2,
        argarray: ops,
    });
}

#[test]
fn every_result_round_trips() {
    let ok_attrs = FileAttrs {
        ftype: Some(NfsFtype4::NF4REG),
        size: Some(3),
        owner: Some(Bounded(Bytes::from_static(b"1000"))),
        ..Default::default()
    };
    let all = Bitmap4::from_bits(KNOWN_ATTRS);
    let results = vec![
        NfsResop4::Access(Res4::Ok(Access4ResOk {
            supported: 0x1f,
            access: 0x3,
        })),
        NfsResop4::Close(Res4::Ok(sid(1))),
        NfsResop4::Delegreturn(Nfsstat4::NFS4_OK),
        NfsResop4::Delegreturn(Nfsstat4::NFS4ERR_BAD_STATEID),
        NfsResop4::Getattr(Res4::Ok(Getattr4ResOk {
            obj_attributes: ok_attrs.to_fattr4(&all),
        })),
        NfsResop4::Lock(LockRes4::Denied(Lock4Denied {
            offset: 0,
            length: 10,
            locktype: NfsLockType4::WRITE_LT,
            owner: StateOwner4 {
                clientid: 1,
                owner: Bounded(Bytes::from_static(b"o")),
            },
        })),
        NfsResop4::Lockt(LockRes4::Ok(())),
        NfsResop4::Open(Res4::Ok(Open4ResOk {
            stateid: sid(1),
            cinfo: ChangeInfo4 {
                atomic: true,
                before: 1,
                after: 2,
            },
            rflags: OPEN4_RESULT_LOCKTYPE_POSIX,
            attrset: Bitmap4::new(),
            delegation: OpenDelegation4::NoneExt(1, Some(false)),
        })),
        NfsResop4::Read(Res4::Ok(Read4ResOk {
            eof: true,
            data: xdr::DdpOpaque(Bytes::from_static(b"abc")),
        })),
        NfsResop4::Readdir(Res4::Ok(Readdir4ResOk {
            cookieverf: FixedOpaque([0; 8]),
            entries: vec![Entry4 {
                cookie: 3,
                name: Component4::from_static("f"),
                attrs: ok_attrs.to_fattr4(&all),
            }],
            eof: true,
        })),
        NfsResop4::Setattr(Setattr4Res {
            status: Nfsstat4::NFS4ERR_PERM,
            attrsset: Bitmap4::new(),
        }),
        NfsResop4::Sequence(Res4::Ok(Sequence4ResOk {
            sessionid: FixedOpaque([1; 16]),
            sequenceid: 2,
            slotid: 0,
            highest_slotid: 7,
            target_highest_slotid: 7,
            status_flags: 0,
        })),
        NfsResop4::ExchangeId(Res4::Ok(ExchangeId4ResOk {
            clientid: 1,
            sequenceid: 1,
            flags: EXCHGID4_FLAG_USE_NON_PNFS,
            state_protect: StateProtect4R::None,
            server_owner: ServerOwner4 {
                minor_id: 0,
                major_id: Bounded(Bytes::from_static(b"srv")),
            },
            server_scope: Bounded(Bytes::from_static(b"srv")),
            server_impl_id: Bounded(vec![]),
        })),
        NfsResop4::SecinfoNoName(Res4::Ok(Bounded(vec![Secinfo4::Flavor(1)]))),
        NfsResop4::TestStateid(Res4::Ok(TestStateid4ResOk {
            status_codes: Bounded(vec![Nfsstat4::NFS4_OK, Nfsstat4::NFS4ERR_BAD_STATEID]),
        })),
        NfsResop4::Seek(Res4::Ok(Seek4ResOk {
            eof: false,
            offset: 4096,
        })),
        NfsResop4::Other(Opnum4::OP_ILLEGAL, Nfsstat4::NFS4ERR_OP_ILLEGAL),
    ];
    for r in &results {
        value_roundtrip(r);
    }
    let back = FileAttrs::from_fattr4(&ok_attrs.to_fattr4(&all)).unwrap();
    assert_eq!(back, ok_attrs);
}

#[test]
fn error_results_encode_as_their_error_arm() {
    let r = NfsResop4::error(Opnum4::OP_SETATTR, Nfsstat4::NFS4ERR_ACCESS);
    assert_eq!(
        xdr::to_bytes(&r).as_ref(),
        &[0, 0, 0, 34, 0, 0, 0, 13, 0, 0, 0, 0]
    );
    let r = NfsResop4::error(Opnum4::OP_READ, Nfsstat4::NFS4ERR_BAD_STATEID);
    assert!(matches!(r, NfsResop4::Read(Res4::Err(_))));
    let r = NfsResop4::error(Opnum4(48), Nfsstat4::NFS4ERR_NOTSUPP);
    assert_eq!(r, NfsResop4::Other(Opnum4(48), Nfsstat4::NFS4ERR_NOTSUPP));
}

/// RFC 7530 §16.18, §16.29, §16.30, §16.33, §16.34: the NFSv4.0-only
/// operations and results round-trip, and CLID_INUSE carries its address.
#[test]
fn v40_operations_round_trip() {
    let owner = StateOwner4 {
        clientid: 0x1122_3344_5566_7788,
        owner: Bounded(Bytes::from_static(b"lockowner")),
    };
    let args = Compound4Args {
        tag: Bytes::from_static(b"v40"),
        minorversion: 0,
        argarray: vec![
            NfsArgop4::Setclientid(Setclientid4Args {
                client: NfsClientId4 {
                    verifier: FixedOpaque([1; 8]),
                    id: Bounded(Bytes::from_static(b"Linux NFSv4.0 host")),
                },
                callback: CbClient4 {
                    program: 0x4000_0000,
                    location: Netaddr4 {
                        netid: Bounded(Bytes::from_static(b"tcp")),
                        addr: Bounded(Bytes::from_static(b"127.0.0.1.3.232")),
                    },
                },
                callback_ident: 7,
            }),
            NfsArgop4::SetclientidConfirm(SetclientidConfirm4Args {
                clientid: 9,
                setclientid_confirm: FixedOpaque([2; 8]),
            }),
            NfsArgop4::Renew(Renew4Args { clientid: 9 }),
            NfsArgop4::OpenConfirm(OpenConfirm4Args {
                open_stateid: Stateid4::ANONYMOUS,
                seqid: 3,
            }),
            NfsArgop4::ReleaseLockowner(ReleaseLockowner4Args { lock_owner: owner }),
        ],
    };
    value_roundtrip(&args);
    let res = Compound4Res {
        status: Nfsstat4::NFS4ERR_CLID_INUSE,
        tag: Bytes::new(),
        resarray: vec![
            NfsResop4::Setclientid(Setclientid4Res::Ok(Setclientid4ResOk {
                clientid: 5,
                setclientid_confirm: FixedOpaque([3; 8]),
            })),
            NfsResop4::SetclientidConfirm(Nfsstat4::NFS4_OK),
            NfsResop4::Renew(Nfsstat4::NFS4ERR_EXPIRED),
            NfsResop4::OpenConfirm(Res4::Ok(Stateid4::ANONYMOUS)),
            NfsResop4::ReleaseLockowner(Nfsstat4::NFS4ERR_LOCKS_HELD),
            NfsResop4::Setclientid(Setclientid4Res::ClidInuse(Netaddr4 {
                netid: Bounded(Bytes::from_static(b"tcp")),
                addr: Bounded(Bytes::from_static(b"10.0.0.1.8.1")),
            })),
        ],
    };
    value_roundtrip(&res);
    // status CLID_INUSE, netid "tcp", addr "1.2.3.4.0.1" (11 bytes).
    let wire = unhex("0000272100000003746370000000000b312e322e332e342e302e3100");
    let r: Setclientid4Res = wire_roundtrip(&wire);
    assert_eq!(r.status(), Nfsstat4::NFS4ERR_CLID_INUSE);
    assert!(is_v40_op(39) && !is_v40_op(40) && is_v40_only_op(20) && !is_v40_only_op(18));
}
