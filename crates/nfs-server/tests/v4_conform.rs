//! NFSv4.1/4.2 conformance over TCP, one test per bug of issue 14 item 7
//! (listed in docs/conformance.md): SECINFO permissions, the RFC 8276
//! operation numbers (served in 4.2 only), VERIFY/NVERIFY, DESTROY_SESSION placement and
//! connection binding, CREATE_SESSION channel checks, FREE_STATEID with
//! the current stateid, OPEN without a delegation wanted, and UTF-8
//! names and tags.

mod v4_common;

use std::sync::atomic::Ordering;

use bytes::Bytes;
use nfs::v4::attr::{Bitmap4, FileAttrs, FATTR4_MODE, FATTR4_RDATTR_ERROR, FATTR4_SIZE};
use nfs::v4::session::*;
use nfs::v4::*;
use nfs_server::v4::SessionLimits;
use v4_common::*;
use xdr::{Bounded, FixedOpaque};

fn lookup(n: &'static str) -> NfsArgop4 {
    NfsArgop4::Lookup(Lookup4Args { objname: name(n) })
}

fn raw_name(b: &'static [u8]) -> Component4 {
    Component4(Bytes::from_static(b))
}

/// A COMPOUND in minor version `minor` on `me`'s session, slot 0.
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

fn secinfo(n: &'static str) -> NfsArgop4 {
    NfsArgop4::Secinfo(Lookup4Args { objname: name(n) })
}

/// RFC 8881 §18.29.3, §18.45.3: SECINFO needs search permission on the
/// directory (as LOOKUP), not execute permission, which directories never
/// grant; it then consumes the current file handle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secinfo_needs_search_permission_on_the_directory() {
    let srv = serve("secinfo", SessionLimits::default()).await;
    std::fs::create_dir(srv.dir.path().join("d")).unwrap();
    std::fs::write(srv.dir.path().join("d/f"), b"x").unwrap();
    let mut me = C4::connect(&srv).await;
    me.establish("secinfo-owner").await;
    let r = me
        .ok(vec![NfsArgop4::Putrootfh(()), lookup("d"), secinfo("f")])
        .await;
    let NfsResop4::Secinfo(Res4::Ok(flavors)) = &r[3] else {
        panic!("{r:?}")
    };
    assert_eq!(flavors.0, vec![Secinfo4::Flavor(1)], "AUTH_SYS");
    let r = me
        .seq(vec![
            NfsArgop4::Putrootfh(()),
            secinfo("d"),
            NfsArgop4::Getfh(()),
        ])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NOFILEHANDLE, "{r:?}");
    for style in [
        SecinfoStyle4::SECINFO_STYLE4_CURRENT_FH,
        SecinfoStyle4::SECINFO_STYLE4_PARENT,
    ] {
        me.ok(vec![
            NfsArgop4::Putrootfh(()),
            lookup("d"),
            NfsArgop4::SecinfoNoName(style),
        ])
        .await;
    }
    // Another user, without search permission on a 0700 directory: ACCESS.
    std::fs::set_permissions(
        srv.dir.path().join("d"),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let mut other = C4::connect(&srv).await;
    other.cred = sys_cred(srv.uid.wrapping_add(4242));
    other.establish("secinfo-other").await;
    let r = other
        .seq(vec![NfsArgop4::Putrootfh(()), lookup("d"), secinfo("f")])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_ACCESS, "{r:?}");
    // The owner still may.
    me.ok(vec![NfsArgop4::Putrootfh(()), lookup("d"), secinfo("f")])
        .await;
}

/// RFC 8276 §8.4 with RFC 8881 §15.2: GETXATTR, SETXATTR, LISTXATTRS and
/// REMOVEXATTR (72–75) are NFSv4.2 operations, served (their behaviour is
/// tested in v4_xattr.rs); in a minor version 1 COMPOUND they do not exist
/// (NFS4ERR_OP_ILLEGAL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xattr_operations_are_served_in_4_2_only() {
    let srv = serve("xattr", SessionLimits::default()).await;
    std::fs::write(srv.dir.path().join("f"), b"x").unwrap();
    let mut me = C4::connect(&srv).await;
    me.establish("xattr").await;
    let key = || Component4::from_static("user.k");
    let ops = [
        NfsArgop4::Getxattr(Xattrkey4Args { name: key() }),
        NfsArgop4::Setxattr(Setxattr4Args {
            option: SetxattrOption4::SETXATTR4_CREATE,
            key: key(),
            value: Bounded(Bytes::from_static(b"value")),
        }),
        NfsArgop4::Listxattrs(Listxattrs4Args {
            cookie: 0,
            maxcount: 4096,
        }),
        NfsArgop4::Removexattr(Xattrkey4Args { name: key() }),
    ];
    for (i, op) in ops.into_iter().enumerate() {
        let num = 72 + i as u32;
        let r = seq_minor(
            &me,
            2,
            vec![
                NfsArgop4::Putrootfh(()),
                lookup("f"),
                op.clone(),
                NfsArgop4::Getfh(()),
            ],
        )
        .await;
        assert!(
            !matches!(
                r.status,
                Nfsstat4::NFS4ERR_NOTSUPP | Nfsstat4::NFS4ERR_OP_ILLEGAL
            ),
            "op {num}: {r:?}"
        );
        assert_eq!(r.resarray[3].opnum(), Opnum4(num));
        let r = seq_minor(&me, 1, vec![NfsArgop4::Putrootfh(()), op]).await;
        assert_eq!(r.status, Nfsstat4::NFS4ERR_OP_ILLEGAL, "op {num} in 4.1");
        assert_eq!(r.resarray[2].opnum(), Opnum4::OP_ILLEGAL);
    }
    // Arguments cut short are BADXDR, not NOTSUPP: they are decoded.
    let id = me.seq.fetch_add(1, Ordering::SeqCst) + 1;
    let mut w = xdr::to_bytes(&Compound4Args {
        tag: Bytes::new(),
        minorversion: 2,
        argarray: vec![me.sequence(0, id, false), NfsArgop4::Putrootfh(())],
    })
    .to_vec();
    w[11] = 3;
    w.extend_from_slice(&72u32.to_be_bytes());
    w.extend_from_slice(&100u32.to_be_bytes());
    w.extend_from_slice(b"user");
    let r: Compound4Res = xdr::from_slice(&me.raw(Bytes::from(w)).await).unwrap();
    assert_eq!(r.status, Nfsstat4::NFS4ERR_BADXDR);
}

fn verify(a: FileAttrs, negate: bool) -> NfsArgop4 {
    let args = Verify4Args {
        obj_attributes: a.to_fattr4(&a.mask()),
    };
    if negate {
        NfsArgop4::Nverify(args)
    } else {
        NfsArgop4::Verify(args)
    }
}

fn size_mode(size: u64, mode: u32) -> FileAttrs {
    FileAttrs {
        size: Some(size),
        mode: Some(mode),
        ..FileAttrs::default()
    }
}

/// RFC 8881 §18.31.3 (VERIFY) and §18.15.3 (NVERIFY): the attributes sent
/// are compared with the object's; VERIFY fails with NFS4ERR_NOT_SAME
/// when any differs, NVERIFY with NFS4ERR_SAME when all match;
/// rdattr_error and write-only attributes are NFS4ERR_INVAL, attributes
/// the server does not support NFS4ERR_ATTRNOTSUPP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_and_nverify_compare_attributes() {
    let srv = serve("verify", SessionLimits::default()).await;
    let p = srv.dir.path().join("f");
    std::fs::write(&p, b"12345").unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    let mut me = C4::connect(&srv).await;
    me.establish("verify").await;
    let run = |op: NfsArgop4| {
        let me = &me;
        async move {
            me.seq(vec![
                NfsArgop4::Putrootfh(()),
                lookup("f"),
                op,
                NfsArgop4::Getfh(()),
            ])
            .await
        }
    };
    let r = run(verify(size_mode(5, 0o640), false)).await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    assert_eq!(r.resarray.len(), 5, "the file handle stays for GETFH");
    let r = run(verify(size_mode(6, 0o640), false)).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NOT_SAME);
    assert_eq!(r.resarray.len(), 4);
    assert_eq!(
        run(verify(size_mode(5, 0o640), true)).await.status,
        Nfsstat4::NFS4ERR_SAME
    );
    assert_eq!(
        run(verify(size_mode(5, 0o600), true)).await.status,
        Nfsstat4::NFS4_OK
    );
    let rdattr = FileAttrs {
        rdattr_error: Some(Nfsstat4::NFS4_OK),
        ..FileAttrs::default()
    };
    assert_eq!(
        run(verify(rdattr, false)).await.status,
        Nfsstat4::NFS4ERR_INVAL
    );
    let mtime_set = FileAttrs {
        time_modify_set: Some(nfs::v4::attr::SetTime4::ServerTime),
        ..FileAttrs::default()
    };
    assert_eq!(
        run(verify(mtime_set, true)).await.status,
        Nfsstat4::NFS4ERR_INVAL
    );
    let acl = Verify4Args {
        obj_attributes: Fattr4 {
            attrmask: Bitmap4::from_bits(&[12]),
            attr_vals: Bounded(Bytes::from_static(&[0; 4])),
        },
    };
    assert_eq!(
        run(NfsArgop4::Verify(acl)).await.status,
        Nfsstat4::NFS4ERR_ATTRNOTSUPP
    );
    let r = me.seq(vec![verify(size_mode(5, 0o640), false)]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NOFILEHANDLE);
    // Bits for rdattr_error and size, as a client might mix them.
    let mixed = Verify4Args {
        obj_attributes: Fattr4 {
            attrmask: Bitmap4::from_bits(&[FATTR4_RDATTR_ERROR, FATTR4_SIZE, FATTR4_MODE]),
            attr_vals: Bounded(Bytes::from_static(&[0; 16])),
        },
    };
    assert_eq!(
        run(NfsArgop4::Nverify(mixed)).await.status,
        Nfsstat4::NFS4ERR_INVAL
    );
}

fn destroy(s: Sessionid4) -> NfsArgop4 {
    NfsArgop4::DestroySession(DestroySession4Args { sessionid: s })
}

/// RFC 8881 §18.37.3: DESTROY_SESSION must come on a connection bound to
/// the session (NFS4ERR_CONN_NOT_BOUND_TO_SESSION; CREATE_SESSION,
/// BIND_CONN_TO_SESSION and SEQUENCE bind, §2.10.3.1), and must be the
/// last operation of a COMPOUND whose SEQUENCE names the same session
/// (NFS4ERR_NOT_ONLY_OP).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroy_session_needs_a_bound_connection_and_the_last_place() {
    let srv = serve("destroy", SessionLimits::default()).await;
    let mut me = C4::connect(&srv).await;
    me.establish("destroy").await;
    let sid = FixedOpaque(me.session);
    let stranger = C4::connect(&srv).await;
    let r = stranger.ops(vec![destroy(sid)]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_CONN_NOT_BOUND_TO_SESSION);
    me.ok(vec![NfsArgop4::Putrootfh(())]).await;
    // Not last in its own session's COMPOUND: refused, nothing after runs.
    let r = me.seq(vec![destroy(sid), NfsArgop4::Putrootfh(())]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NOT_ONLY_OP);
    assert_eq!(r.resarray.len(), 2);
    me.ok(vec![NfsArgop4::Putrootfh(())]).await;
    // A second session of the client, destroyed from a connection that a
    // SEQUENCE of it bound, as the last operation.
    let mut second = C4::connect(&srv).await;
    second.clientid = me.clientid;
    let r = me
        .ops(vec![NfsArgop4::ExchangeId(C4::exchange_id_args(
            "destroy", 1,
        ))])
        .await;
    let Some(NfsResop4::ExchangeId(Res4::Ok(x))) = r.resarray.first() else {
        panic!("{r:?}")
    };
    let r = me
        .ops(vec![NfsArgop4::CreateSession(C4::create_session_args(
            x.clientid,
            x.sequenceid,
        ))])
        .await;
    let Some(NfsResop4::CreateSession(Res4::Ok(s2))) = r.resarray.first() else {
        panic!("{r:?}")
    };
    second.session = s2.sessionid.0;
    let r = second
        .seq(vec![NfsArgop4::Putrootfh(()), destroy(s2.sessionid)])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    // BIND_CONN_TO_SESSION lets the stranger destroy the first session.
    let r = stranger
        .ops(vec![NfsArgop4::BindConnToSession(BindConnToSession4Args {
            sessid: sid,
            dir: ChannelDir4::CDFC4_FORE,
            use_conn_in_rdma_mode: false,
        })])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK);
    assert_eq!(
        stranger.ops(vec![destroy(sid)]).await.status,
        Nfsstat4::NFS4_OK
    );
    assert_eq!(
        me.seq(vec![NfsArgop4::Putrootfh(())]).await.status,
        Nfsstat4::NFS4ERR_BADSESSION
    );
}

/// A change to CREATE_SESSION arguments.
type Edit = fn(&mut CreateSession4Args);

/// RFC 8881 §18.36.3: channel attributes too small to carry a SEQUENCE
/// (or the server's callbacks) are NFS4ERR_TOOSMALL, flags the protocol
/// does not define NFS4ERR_INVAL; neither uses up the sequence id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_session_refuses_unusable_channels_and_unknown_flags() {
    let srv = serve("cs-checks", SessionLimits::default()).await;
    let me = C4::connect(&srv).await;
    let r = me
        .ops(vec![NfsArgop4::ExchangeId(C4::exchange_id_args("cs", 1))])
        .await;
    let Some(NfsResop4::ExchangeId(Res4::Ok(x))) = r.resarray.first() else {
        panic!("{r:?}")
    };
    let good = C4::create_session_args(x.clientid, x.sequenceid);
    let cases: [(Edit, Nfsstat4); 8] = [
        (|a| a.flags |= 0x8, Nfsstat4::NFS4ERR_INVAL),
        (
            |a| a.fore_chan_attrs.maxrequestsize = 64,
            Nfsstat4::NFS4ERR_TOOSMALL,
        ),
        (
            |a| a.fore_chan_attrs.maxresponsesize = 40,
            Nfsstat4::NFS4ERR_TOOSMALL,
        ),
        (
            |a| a.fore_chan_attrs.maxoperations = 0,
            Nfsstat4::NFS4ERR_TOOSMALL,
        ),
        (
            |a| a.fore_chan_attrs.maxrequests = 0,
            Nfsstat4::NFS4ERR_TOOSMALL,
        ),
        (
            |a| a.back_chan_attrs.maxrequestsize = 100,
            Nfsstat4::NFS4ERR_TOOSMALL,
        ),
        (
            |a| a.back_chan_attrs.maxresponsesize = 16,
            Nfsstat4::NFS4ERR_TOOSMALL,
        ),
        (
            |a| a.back_chan_attrs.maxoperations = 1,
            Nfsstat4::NFS4ERR_TOOSMALL,
        ),
    ];
    for (i, (edit, want)) in cases.into_iter().enumerate() {
        let mut a = good.clone();
        edit(&mut a);
        let r = me.ops(vec![NfsArgop4::CreateSession(a)]).await;
        assert_eq!(r.status, want, "case {i}");
    }
    let r = me.ops(vec![NfsArgop4::CreateSession(good)]).await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
}

/// RFC 8881 §18.38.3 with §16.2.3.1.2: FREE_STATEID of the current
/// stateid frees the stateid the previous operation made (here a lock
/// stateid without locks); with no current stateid it is
/// NFS4ERR_BAD_STATEID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn free_stateid_takes_the_current_stateid() {
    let srv = serve("free-cur", SessionLimits::default()).await;
    let mut me = C4::connect(&srv).await;
    me.establish("free-cur").await;
    let r = me
        .ok(vec![
            NfsArgop4::Putrootfh(()),
            open_create(me.clientid, "f", OPEN4_SHARE_ACCESS_BOTH, 0),
        ])
        .await;
    let open = open_stateid(&r);
    let r = me
        .ok(vec![
            NfsArgop4::Putrootfh(()),
            lookup("f"),
            NfsArgop4::Lock(Lock4Args {
                locktype: NfsLockType4::WRITE_LT,
                reclaim: false,
                offset: 0,
                length: 10,
                locker: Locker4::New(OpenToLockOwner4 {
                    open_seqid: 0,
                    open_stateid: open,
                    lock_seqid: 0,
                    lock_owner: owner(me.clientid, "locker"),
                }),
            }),
            NfsArgop4::Locku(Locku4Args {
                locktype: NfsLockType4::WRITE_LT,
                seqid: 0,
                lock_stateid: Stateid4::CURRENT,
                offset: 0,
                length: 10,
            }),
            NfsArgop4::FreeStateid(FreeStateid4Args {
                stateid: Stateid4::CURRENT,
            }),
        ])
        .await;
    let Some(NfsResop4::Lock(LockRes4::Ok(lock_sid))) = r.get(3) else {
        panic!("{r:?}")
    };
    let r = me
        .ok(vec![NfsArgop4::TestStateid(TestStateid4Args {
            stateids: Bounded(vec![*lock_sid, open]),
        })])
        .await;
    let NfsResop4::TestStateid(Res4::Ok(t)) = &r[1] else {
        panic!("{r:?}")
    };
    assert_eq!(
        t.status_codes.0,
        vec![Nfsstat4::NFS4ERR_BAD_STATEID, Nfsstat4::NFS4_OK],
        "the lock stateid is gone, the open stays"
    );
    let r = me
        .seq(vec![NfsArgop4::FreeStateid(FreeStateid4Args {
            stateid: Stateid4::CURRENT,
        })])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_BAD_STATEID);
}

/// RFC 8881 §18.16.3: an OPEN with OPEN4_SHARE_ACCESS_WANT_NO_DELEG is
/// answered OPEN_DELEGATE_NONE_EXT with WND4_NOT_WANTED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_wanting_no_delegation_is_told_not_wanted() {
    let srv = serve("no-deleg", SessionLimits::default()).await;
    std::fs::write(srv.dir.path().join("f"), b"x").unwrap();
    let mut me = C4::connect(&srv).await;
    me.establish("no-deleg").await;
    let open = |want: u32| {
        NfsArgop4::Open(Open4Args {
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_READ | want,
            share_deny: 0,
            owner: owner(me.clientid, "o"),
            openhow: OpenHow4(None),
            claim: OpenClaim4::Null(name("f")),
        })
    };
    let deleg = |r: &[NfsResop4]| match &r[2] {
        NfsResop4::Open(Res4::Ok(o)) => o.delegation.clone(),
        other => panic!("{other:?}"),
    };
    let r = me.ok(vec![NfsArgop4::Putrootfh(()), open(0x0400)]).await;
    assert_eq!(deleg(&r), OpenDelegation4::NoneExt(WND4_NOT_WANTED, None));
    // Without a back channel and without the want, plain NONE.
    let r = me.ok(vec![NfsArgop4::Putrootfh(()), open(0)]).await;
    assert_eq!(deleg(&r), OpenDelegation4::None);
}

/// RFC 8881 §14.5: a name that is not UTF-8 is NFS4ERR_INVAL, one with a
/// character the server refuses (a Unicode noncharacter, `/`) is
/// NFS4ERR_BADCHAR, `.` and `..` are NFS4ERR_BADNAME, in every operation
/// that takes a name; §16.2.3: a tag that is not UTF-8 fails the COMPOUND
/// with NFS4ERR_INVAL and no operation runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_and_tags_must_be_utf8() {
    let srv = serve("utf8", SessionLimits::default()).await;
    std::fs::write(srv.dir.path().join("f"), b"x").unwrap();
    let mut me = C4::connect(&srv).await;
    me.establish("utf8").await;
    let names: [(&'static [u8], Nfsstat4); 6] = [
        (b"bad\xff", Nfsstat4::NFS4ERR_INVAL),
        (b"\xc3", Nfsstat4::NFS4ERR_INVAL),
        ("x\u{fffe}".as_bytes(), Nfsstat4::NFS4ERR_BADCHAR),
        ("\u{fdd0}".as_bytes(), Nfsstat4::NFS4ERR_BADCHAR),
        (b".", Nfsstat4::NFS4ERR_BADNAME),
        (b"..", Nfsstat4::NFS4ERR_BADNAME),
    ];
    for (n, want) in names {
        let c = raw_name(n);
        let ops: Vec<Vec<NfsArgop4>> = vec![
            vec![NfsArgop4::Lookup(Lookup4Args { objname: c.clone() })],
            vec![NfsArgop4::Create(Create4Args {
                objtype: Createtype4::Dir,
                objname: c.clone(),
                createattrs: Fattr4::default(),
            })],
            vec![NfsArgop4::Remove(Remove4Args { target: c.clone() })],
            vec![NfsArgop4::Secinfo(Lookup4Args { objname: c.clone() })],
            vec![
                NfsArgop4::Savefh(()),
                NfsArgop4::Rename(Rename4Args {
                    oldname: name("f"),
                    newname: c.clone(),
                }),
            ],
            vec![
                lookup("f"),
                NfsArgop4::Savefh(()),
                NfsArgop4::Putrootfh(()),
                NfsArgop4::Link(Link4Args { newname: c.clone() }),
            ],
            vec![NfsArgop4::Open(Open4Args {
                seqid: 0,
                share_access: OPEN4_SHARE_ACCESS_BOTH,
                share_deny: 0,
                owner: owner(me.clientid, "o"),
                openhow: OpenHow4(Some(Createhow4::Unchecked(Fattr4::default()))),
                claim: OpenClaim4::Null(c.clone()),
            })],
        ];
        for tail in ops {
            let mut all = vec![NfsArgop4::Putrootfh(())];
            all.extend(tail);
            let r = me.seq(all).await;
            assert_eq!(r.status, want, "{n:?}: {r:?}");
        }
    }
    assert!(srv.dir.path().join("f").exists(), "nothing renamed");
    let r = me
        .compound(&Compound4Args {
            tag: Bytes::from_static(b"tag\xfe"),
            minorversion: 1,
            argarray: vec![NfsArgop4::Putrootfh(())],
        })
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_INVAL);
    assert!(r.resarray.is_empty());
    assert_eq!(&r.tag[..], b"tag\xfe");
    let r = me
        .compound(&Compound4Args {
            tag: Bytes::from("tâg".as_bytes()),
            minorversion: 1,
            argarray: vec![me.sequence(0, me.seq.fetch_add(1, Ordering::SeqCst) + 1, false)],
        })
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "a UTF-8 tag is fine");
}

/// RFC 8881 §18.26.4 (RENAME), §18.25.4 (REMOVE): when another client's
/// RENAME replaces a file a client has open, or its REMOVE takes it, that
/// client's open file stays usable by its handle: WRITE, READ, GETATTR
/// and CLOSE succeed; after the CLOSE the handle is STALE (the file is
/// gone), and the name holds the renamed file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_over_an_open_file_keeps_its_handle_usable() {
    let srv = serve("rename-open", SessionLimits::default()).await;
    let mut me = C4::connect(&srv).await;
    me.establish("rename-open").await;
    let mut other = C4::connect(&srv).await;
    other.establish("rename-other").await;
    std::fs::write(srv.dir.path().join("other"), b"new").unwrap();
    for (file, rename) in [("victim", true), ("gone", false)] {
        let r = me
            .ok(vec![
                NfsArgop4::Putrootfh(()),
                open_create(me.clientid, file, OPEN4_SHARE_ACCESS_BOTH, 0),
                NfsArgop4::Getfh(()),
            ])
            .await;
        let sid = open_stateid(&r);
        let NfsResop4::Getfh(Res4::Ok(fh)) = &r[3] else {
            panic!("{r:?}")
        };
        let put = || {
            NfsArgop4::Putfh(Putfh4Args {
                object: fh.object.clone(),
            })
        };
        let change = if rename {
            vec![
                NfsArgop4::Putrootfh(()),
                NfsArgop4::Savefh(()),
                NfsArgop4::Rename(Rename4Args {
                    oldname: name("other"),
                    newname: name("victim"),
                }),
            ]
        } else {
            vec![
                NfsArgop4::Putrootfh(()),
                NfsArgop4::Remove(Remove4Args {
                    target: name("gone"),
                }),
            ]
        };
        other.ok(change).await;
        let r = me
            .ok(vec![
                put(),
                NfsArgop4::Write(Write4Args {
                    stateid: sid,
                    offset: 0,
                    stable: StableHow4::FILE_SYNC4,
                    data: xdr::DdpOpaque(Bytes::from_static(b"still open")),
                }),
                NfsArgop4::Read(Read4Args {
                    stateid: sid,
                    offset: 0,
                    count: 100,
                }),
                NfsArgop4::Getattr(Getattr4Args {
                    attr_request: Bitmap4::from_bits(&[FATTR4_SIZE]),
                }),
            ])
            .await;
        let NfsResop4::Read(Res4::Ok(read)) = &r[3] else {
            panic!("{r:?}")
        };
        assert_eq!(&read.data.0[..], b"still open", "{file}");
        let NfsResop4::Getattr(Res4::Ok(g)) = &r[4] else {
            panic!("{r:?}")
        };
        let a = FileAttrs::from_fattr4(&g.obj_attributes).unwrap();
        assert_eq!(a.size, Some(10));
        me.ok(vec![
            put(),
            NfsArgop4::Close(Close4Args {
                seqid: 0,
                open_stateid: sid,
            }),
        ])
        .await;
        let r = me.seq(vec![put()]).await;
        assert_eq!(r.status, Nfsstat4::NFS4ERR_STALE, "{file} after CLOSE");
    }
    assert_eq!(
        std::fs::read(srv.dir.path().join("victim")).unwrap(),
        b"new"
    );
    assert!(!srv.dir.path().join("gone").exists());
}

/// RFC 8881 §15.2, §17, RFC 7862 §13: the operations this server does
/// not implement (docs/conformance.md, "Every operation") are answered
/// NFS4ERR_NOTSUPP, numbered as asked, in every minor version that
/// defines them; the NFSv4.0-only operations are NFS4ERR_NOTSUPP in 4.1
/// and 4.2 ("MUST NOT implement", RFC 8881 §17).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unimplemented_operations_answer_notsupp() {
    let srv = serve("notsupp", SessionLimits::default()).await;
    let mut me = C4::connect(&srv).await;
    me.establish("notsupp-owner").await;
    // DELEGPURGE, OPENATTR; GET_DIR_DELEGATION, GETDEVICELIST, SET_SSV,
    // WANT_DELEGATION; COPY_NOTIFY, IO_ADVISE, WRITE_SAME (arguments not
    // decoded: the COMPOUND stops there).
    let cases: [(u32, &[u32]); 4] = [
        (1, &[7, 19, 46, 48, 54, 56]),
        (2, &[7, 19, 46, 48, 54, 56, 61, 63, 70]),
        (0, &[7, 19]),
        (1, &[61, 63, 70]),
    ];
    for (minor, ops) in cases {
        for &n in ops {
            let op = NfsArgop4::Unsupported(Opnum4(n));
            let r = if minor == 0 {
                me.compound(&Compound4Args {
                    tag: Bytes::new(),
                    minorversion: 0,
                    argarray: vec![NfsArgop4::Putrootfh(()), op],
                })
                .await
            } else {
                seq_minor(&me, minor, vec![NfsArgop4::Putrootfh(()), op]).await
            };
            let last = r.resarray.last().unwrap();
            // 4.2 operations in a 4.1 COMPOUND do not exist there.
            let (want, num) = if minor == 1 && n >= 59 {
                (Nfsstat4::NFS4ERR_OP_ILLEGAL, Opnum4::OP_ILLEGAL)
            } else {
                (Nfsstat4::NFS4ERR_NOTSUPP, Opnum4(n))
            };
            assert_eq!(
                (r.status, last.opnum()),
                (want, num),
                "op {n} minor {minor}"
            );
        }
    }
    // The NFSv4.0-only operations, with their arguments.
    let v40_only = [
        NfsArgop4::Renew(Renew4Args {
            clientid: me.clientid,
        }),
        NfsArgop4::ReleaseLockowner(ReleaseLockowner4Args {
            lock_owner: owner(me.clientid, "lo"),
        }),
    ];
    for minor in [1, 2] {
        for op in v40_only.clone() {
            let n = op.opnum();
            let r = seq_minor(&me, minor, vec![op]).await;
            assert_eq!(
                (r.status, r.resarray[1].opnum()),
                (Nfsstat4::NFS4ERR_NOTSUPP, n)
            );
        }
    }
}

/// RFC 8881 §18.20.3: the public file handle may be the root's; here it
/// is, in every minor version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn putpubfh_is_the_root() {
    let srv = serve("putpubfh", SessionLimits::default()).await;
    let mut me = C4::connect(&srv).await;
    me.establish("putpubfh-owner").await;
    let fh = |r: &Compound4Res| match r.resarray.last() {
        Some(NfsResop4::Getfh(Res4::Ok(g))) => g.object.clone(),
        x => panic!("{x:?}"),
    };
    for minor in [1, 2] {
        let root = seq_minor(
            &me,
            minor,
            vec![NfsArgop4::Putrootfh(()), NfsArgop4::Getfh(())],
        )
        .await;
        let public = seq_minor(
            &me,
            minor,
            vec![NfsArgop4::Putpubfh(()), NfsArgop4::Getfh(())],
        )
        .await;
        assert_eq!(fh(&public), fh(&root));
    }
    let v40 = me
        .compound(&Compound4Args {
            tag: Bytes::new(),
            minorversion: 0,
            argarray: vec![NfsArgop4::Putpubfh(()), NfsArgop4::Getfh(())],
        })
        .await;
    assert_eq!(v40.status, Nfsstat4::NFS4_OK, "{v40:?}");
}
