//! Sessions over TCP (RFC 8881 §2.10, §18.35, §18.36, §18.46): COMPOUND
//! placement rules, the slot reply cache and seqid rules, channel limits,
//! CREATE_SESSION replay, session and client-id teardown.

mod v4_common;

use bytes::Bytes;
use nfs::v4::session::*;
use nfs::v4::*;
use nfs_server::v4::SessionLimits;
use oncrpc::client::{ClientTransport, ReplyHint, RpcCall};
use v4_common::*;
use xdr::FixedOpaque;

fn mkdir(n: &'static str) -> NfsArgop4 {
    NfsArgop4::Create(Create4Args {
        objtype: Createtype4::Dir,
        objname: name(n),
        createattrs: Fattr4::default(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minor_versions_above_2_are_refused() {
    let srv = serve("minor", SessionLimits::default()).await;
    let me = C4::connect(&srv).await;
    // Minor version 0 is served (tests/v4_v40.rs).
    for minor in [3, u32::MAX] {
        let r = me
            .compound(&Compound4Args {
                tag: Bytes::from_static(b"tag"),
                minorversion: minor,
                argarray: vec![NfsArgop4::Putrootfh(())],
            })
            .await;
        assert_eq!(r.status, Nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH);
        assert!(r.resarray.is_empty());
        assert_eq!(&r.tag[..], b"tag");
    }
    // NULL answers with no body.
    let null = me
        .rpc
        .call(RpcCall {
            prog: NFS4_PROGRAM,
            vers: NFS_V4,
            proc_: NFSPROC4_NULL,
            cred: me.cred.clone(),
            args: xdr::XdrBuf::new(),
            reply_hint: ReplyHint::default(),
        })
        .await
        .unwrap();
    assert!(null.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_outside_a_session_are_refused() {
    let srv = serve("placement", SessionLimits::default()).await;
    let mut me = C4::connect(&srv).await;
    let r = me
        .ops(vec![NfsArgop4::Putrootfh(()), NfsArgop4::Getfh(())])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION);
    assert_eq!(r.resarray.len(), 1);
    let r = me
        .ops(vec![
            NfsArgop4::ExchangeId(C4::exchange_id_args("x", 1)),
            NfsArgop4::Putrootfh(()),
        ])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NOT_ONLY_OP);
    me.establish("placement").await;
    let r = me
        .seq(vec![NfsArgop4::Putrootfh(()), me.sequence(1, 1, false)])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_SEQUENCE_POS);
    // An undefined operation is OP_ILLEGAL, a defined one that is not
    // implemented (GETDEVICELIST, 48) NOTSUPP; either ends the COMPOUND.
    for (op, want, opnum) in [
        (2u32, Nfsstat4::NFS4ERR_OP_ILLEGAL, Opnum4::OP_ILLEGAL),
        (48, Nfsstat4::NFS4ERR_NOTSUPP, Opnum4(48)),
    ] {
        let id = me.seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let mut w = xdr::to_bytes(&Compound4Args {
            tag: Bytes::new(),
            minorversion: 1,
            argarray: vec![me.sequence(0, id, false), NfsArgop4::Putrootfh(())],
        })
        .to_vec();
        w[11] = 4; // four operations follow
        w.extend_from_slice(&op.to_be_bytes());
        w.extend_from_slice(&[0xff; 12]);
        w.extend_from_slice(&10u32.to_be_bytes());
        let r: Compound4Res = xdr::from_slice(&me.raw(Bytes::from(w)).await).unwrap();
        assert_eq!(r.status, want);
        assert_eq!(r.resarray.len(), 3);
        assert_eq!(r.resarray[2].opnum(), opnum);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_retry_gets_the_cached_reply_and_seqids_are_checked() {
    let srv = serve("slots", SessionLimits::default()).await;
    let mut me = C4::connect(&srv).await;
    me.establish("slots").await;
    let call = |seqid, cache, dir| Compound4Args {
        tag: Bytes::new(),
        minorversion: 1,
        argarray: vec![
            me.sequence(3, seqid, cache),
            NfsArgop4::Putrootfh(()),
            mkdir(dir),
        ],
    };
    let first = me.raw(xdr::to_bytes(&call(1, true, "a"))).await;
    let r: Compound4Res = xdr::from_slice(&first).unwrap();
    assert_eq!(r.status, Nfsstat4::NFS4_OK);
    // The retry is not executed again (a second mkdir would be EXIST): the
    // first reply comes back byte for byte.
    let again = me.raw(xdr::to_bytes(&call(1, true, "a"))).await;
    assert_eq!(again, first);
    // The same seqid with different arguments is a false retry.
    let r = me.compound(&call(1, true, "b")).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_SEQ_FALSE_RETRY);
    // Skipping a seqid, or going back, is misordered.
    assert_eq!(
        me.compound(&call(3, true, "b")).await.status,
        Nfsstat4::NFS4ERR_SEQ_MISORDERED
    );
    assert_eq!(
        me.compound(&call(0, true, "b")).await.status,
        Nfsstat4::NFS4ERR_SEQ_MISORDERED
    );
    // Not cached: a retry is RETRY_UNCACHED_REP.
    assert_eq!(
        me.compound(&call(2, false, "b")).await.status,
        Nfsstat4::NFS4_OK
    );
    assert_eq!(
        me.compound(&call(2, false, "b")).await.status,
        Nfsstat4::NFS4ERR_RETRY_UNCACHED_REP
    );
    // A fresh slot starts at seqid 1; slots beyond the table are bad.
    let r = me.ops(vec![me.sequence(63, 1, false)]).await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK);
    let r = me.ops(vec![me.sequence(64, 1, false)]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_BADSLOT);
    let r = me.ops(vec![me.sequence(5, 2, false)]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_SEQ_MISORDERED);
    assert!(srv.dir.path().join("a").is_dir() && srv.dir.path().join("b").is_dir());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_and_replies_are_held_to_the_channel_limits() {
    let limits = SessionLimits {
        max_request: 2048,
        max_response: 2048,
        ..SessionLimits::default()
    };
    let srv = serve("limits", limits).await;
    let mut me = C4::connect(&srv).await;
    me.establish("limits").await;
    let cid = me.clientid;
    let r = me
        .ok(vec![
            NfsArgop4::Putrootfh(()),
            open_create(cid, "f", OPEN4_SHARE_ACCESS_BOTH, 0),
        ])
        .await;
    let sid = open_stateid(&r);
    let write = |n: usize| {
        vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Lookup(Lookup4Args { objname: name("f") }),
            NfsArgop4::Write(Write4Args {
                stateid: sid,
                offset: 0,
                stable: StableHow4::FILE_SYNC4,
                data: xdr::DdpOpaque(Bytes::from(vec![7u8; n])),
            }),
        ]
    };
    let r = me.seq(write(4000)).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_REQ_TOO_BIG);
    assert_eq!(r.resarray.len(), 1);
    // The slot was not used: the same seqid now runs the next request.
    me.seq.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    me.ok(write(1000)).await;
    // READ is cut to what fits in ca_maxresponsesize.
    let r = me
        .ok(vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Lookup(Lookup4Args { objname: name("f") }),
            NfsArgop4::Read(Read4Args {
                stateid: sid,
                offset: 0,
                count: 1000,
            }),
        ])
        .await;
    let NfsResop4::Read(Res4::Ok(rd)) = &r[3] else {
        panic!()
    };
    assert!(!rd.data.0.is_empty() && rd.data.0.len() <= 2048 - 512);
    // A reply that outgrows the limit stops at the operation that overflowed.
    let mut ops = vec![NfsArgop4::Putrootfh(())];
    ops.extend(std::iter::repeat_n(NfsArgop4::Getfh(()), 14));
    let r = me.seq(ops).await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "fits: {r:?}");
    use nfs::v4::attr::*;
    let readable: Vec<u32> = KNOWN_ATTRS
        .iter()
        .copied()
        .filter(|&n| n != FATTR4_TIME_ACCESS_SET && n != FATTR4_TIME_MODIFY_SET)
        .collect();
    let mut ops = vec![NfsArgop4::Putrootfh(())];
    for _ in 0..7 {
        ops.push(NfsArgop4::Getattr(Getattr4Args {
            attr_request: Bitmap4::from_bits(&readable),
        }));
    }
    let r = me.seq(ops).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_REP_TOO_BIG);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_session_replay_destroy_and_client_teardown() {
    let srv = serve("teardown", SessionLimits::default()).await;
    let me = C4::connect(&srv).await;
    let r = me
        .ops(vec![NfsArgop4::ExchangeId(C4::exchange_id_args("t", 1))])
        .await;
    let NfsResop4::ExchangeId(Res4::Ok(x)) = &r.resarray[0] else {
        panic!()
    };
    let cs = |seq| NfsArgop4::CreateSession(C4::create_session_args(x.clientid, seq));
    let sess = |r: &Compound4Res| match &r.resarray[0] {
        NfsResop4::CreateSession(Res4::Ok(s)) => s.sessionid,
        other => panic!("{other:?}"),
    };
    let s1 = sess(&me.ops(vec![cs(x.sequenceid)]).await);
    // The same sequence again is a replay: the same session comes back.
    assert_eq!(sess(&me.ops(vec![cs(x.sequenceid)]).await), s1);
    assert_eq!(
        me.ops(vec![cs(x.sequenceid + 5)]).await.status,
        Nfsstat4::NFS4ERR_SEQ_MISORDERED
    );
    let s2 = sess(&me.ops(vec![cs(x.sequenceid + 1)]).await);
    assert_ne!(s1, s2);
    // EXCHANGE_ID again with the same verifier finds the confirmed client.
    let r = me
        .ops(vec![NfsArgop4::ExchangeId(C4::exchange_id_args("t", 1))])
        .await;
    let NfsResop4::ExchangeId(Res4::Ok(y)) = &r.resarray[0] else {
        panic!()
    };
    assert_eq!(y.clientid, x.clientid);
    assert_ne!(y.flags & EXCHGID4_FLAG_CONFIRMED_R, 0);
    // BIND_CONN_TO_SESSION from a second connection.
    let other = C4::connect(&srv).await;
    let r = other
        .ops(vec![NfsArgop4::BindConnToSession(BindConnToSession4Args {
            sessid: s2,
            dir: ChannelDir4::CDFC4_FORE_OR_BOTH,
            use_conn_in_rdma_mode: false,
        })])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK);
    let destroy_client = NfsArgop4::DestroyClientid(DestroyClientid4Args {
        clientid: x.clientid,
    });
    assert_eq!(
        me.ops(vec![destroy_client.clone()]).await.status,
        Nfsstat4::NFS4ERR_CLIENTID_BUSY
    );
    for s in [s1, s2] {
        let d = NfsArgop4::DestroySession(DestroySession4Args { sessionid: s });
        assert_eq!(me.ops(vec![d.clone()]).await.status, Nfsstat4::NFS4_OK);
        assert_eq!(me.ops(vec![d]).await.status, Nfsstat4::NFS4ERR_BADSESSION);
    }
    let r = me
        .ops(vec![NfsArgop4::Sequence(Sequence4Args {
            sessionid: s1,
            sequenceid: 1,
            slotid: 0,
            highest_slotid: 0,
            cachethis: false,
        })])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_BADSESSION);
    assert_eq!(me.ops(vec![destroy_client]).await.status, Nfsstat4::NFS4_OK);
    assert_eq!(
        me.ops(vec![cs(x.sequenceid + 2)]).await.status,
        Nfsstat4::NFS4ERR_STALE_CLIENTID
    );
    let bad = Sequence4Args {
        sessionid: FixedOpaque([9; 16]),
        sequenceid: 1,
        slotid: 0,
        highest_slotid: 0,
        cachethis: false,
    };
    assert_eq!(
        me.ops(vec![NfsArgop4::Sequence(bad)]).await.status,
        Nfsstat4::NFS4ERR_BADSESSION
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_client_replaces_its_old_record_and_state() {
    let srv = serve("restart", SessionLimits::default()).await;
    let mut old = C4::connect(&srv).await;
    old.establish("same-owner").await;
    let cid = old.clientid;
    let r = old
        .ok(vec![
            NfsArgop4::Putrootfh(()),
            open_create(cid, "f", OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_DENY_BOTH),
        ])
        .await;
    let _sid = open_stateid(&r);
    // Same owner name, new verifier: a new client id, confirmed by
    // CREATE_SESSION, after which the old open no longer blocks.
    let new = C4::connect(&srv).await;
    let r = new
        .ops(vec![NfsArgop4::ExchangeId(C4::exchange_id_args(
            "same-owner",
            2,
        ))])
        .await;
    let NfsResop4::ExchangeId(Res4::Ok(x)) = &r.resarray[0] else {
        panic!()
    };
    assert_ne!(x.clientid, cid);
    let r = new
        .ops(vec![NfsArgop4::CreateSession(C4::create_session_args(
            x.clientid,
            x.sequenceid,
        ))])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK);
    let r = old.seq(vec![NfsArgop4::Putrootfh(())]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_BADSESSION);
}
