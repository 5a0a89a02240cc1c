//! Hostile NFSv4.1 clients against the state bounds (RFC 8881 §2.4,
//! §2.10.6.1, §18.35, §18.36): a flood of unconfirmed client ids does not
//! lock real clients out, and clients caching big replies stay within
//! the server-wide reply cache budget.

mod v4_common;

use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use nfs::v4::session::*;
use nfs::v4::*;
use nfs_server::v4::{Nfs4Service, SessionLimits};
use oncrpc::client::{ClientConfig, ClientTransport};
use oncrpc::limits::trips;
use oncrpc::tcp::{TcpClient, TcpConfig};
use v4_common::*;
use xdr::FixedOpaque;

struct Served {
    svc: Arc<Nfs4Service>,
    srv: Srv,
}

async fn serve_arc(tag: &str, limits: SessionLimits) -> Served {
    let (svc, srv) = serve_with_service(tag, limits).await;
    Served { svc, srv }
}

async fn client(srv: &Srv) -> C4 {
    let rpc = TcpClient::connect(srv.addr, 7, ClientConfig::default(), TcpConfig::default())
        .await
        .unwrap();
    C4 {
        rpc,
        cred: sys_cred(srv.uid),
        clientid: 0,
        session: [0; 16],
        seq: AtomicU32::new(0),
    }
}

#[tokio::test]
async fn unconfirmed_client_flood_does_not_lock_out_a_real_client() {
    let s = serve_arc("unconfirmed", SessionLimits::default()).await;
    let hostile = client(&s.srv).await;
    // More than MAX_UNCONFIRMED (1024) distinct owners, never confirmed.
    for i in 0..1500 {
        let r = hostile
            .ops(vec![NfsArgop4::ExchangeId(C4::exchange_id_args(
                &format!("flood-{i}"),
                1,
            ))])
            .await;
        assert_eq!(r.status, Nfsstat4::NFS4_OK, "EXCHANGE_ID {i}");
    }
    assert!(s.svc.state_stats().clients <= 1024);
    let mut real = client(&s.srv).await;
    real.establish("real").await;
    real.ok(vec![
        NfsArgop4::Putrootfh(()),
        open_create(real.clientid, "f", OPEN4_SHARE_ACCESS_BOTH, 0),
    ])
    .await;
    assert!(s.svc.state_stats().clients <= 1025);
}

/// CREATE_SESSION asking for 64 slots caching 64 KiB each (4 MiB).
fn big_cache_session(clientid: u64, sequence: u32) -> CreateSession4Args {
    let mut a = C4::create_session_args(clientid, sequence);
    a.fore_chan_attrs.maxresponsesize_cached = 64 << 10;
    a.fore_chan_attrs.maxrequests = 64;
    a.flags = 0;
    a
}

async fn new_session(c: &mut C4, name: &str) -> Res4<CreateSession4ResOk> {
    let r = c
        .ops(vec![NfsArgop4::ExchangeId(C4::exchange_id_args(name, 1))])
        .await;
    let Some(NfsResop4::ExchangeId(Res4::Ok(x))) = r.resarray.first() else {
        panic!("EXCHANGE_ID: {r:?}")
    };
    c.clientid = x.clientid;
    let r = c
        .ops(vec![NfsArgop4::CreateSession(big_cache_session(
            x.clientid,
            x.sequenceid,
        ))])
        .await;
    match r.resarray.into_iter().next() {
        Some(NfsResop4::CreateSession(res)) => {
            if let Res4::Ok(s) = &res {
                c.session = s.sessionid.0;
            }
            res
        }
        other => panic!("CREATE_SESSION: {other:?}"),
    }
}

#[tokio::test]
async fn clients_caching_big_replies_stay_within_the_reply_cache_budget() {
    const BUDGET: u64 = 2 << 20;
    let limits = SessionLimits {
        reply_cache_bytes: BUDGET,
        ..SessionLimits::default()
    };
    let s = serve_arc("replycache", limits).await;
    std::fs::write(s.srv.dir.path().join("big"), vec![7u8; 60 << 10]).unwrap();
    let mut clients = Vec::new();
    let mut refused = 0;
    for i in 0..6 {
        let mut c = client(&s.srv).await;
        match new_session(&mut c, &format!("cacher-{i}")).await {
            Res4::Ok(ok) => {
                let slots = ok.fore_chan_attrs.maxrequests;
                let cached = u64::from(ok.fore_chan_attrs.maxresponsesize_cached);
                assert!(
                    u64::from(slots) * cached <= BUDGET / 4,
                    "one client: a quarter"
                );
                // Fill every slot with a cached 60 KiB READ reply.
                for slot in 0..slots {
                    let r = c
                        .ops(vec![
                            c.sequence(slot, 1, true),
                            NfsArgop4::Putrootfh(()),
                            NfsArgop4::Lookup(Lookup4Args {
                                objname: name("big"),
                            }),
                            NfsArgop4::Read(Read4Args {
                                stateid: Stateid4::ANONYMOUS,
                                offset: 0,
                                count: 60 << 10,
                            }),
                        ])
                        .await;
                    assert_eq!(r.status, Nfsstat4::NFS4_OK, "slot {slot}: {r:?}");
                }
                clients.push(c);
            }
            Res4::Err(e) => {
                assert_eq!(e, Nfsstat4::NFS4ERR_DELAY);
                refused += 1;
            }
        }
    }
    let st = s.svc.state_stats();
    assert!(st.reply_cache_reserved <= BUDGET, "{st:?}");
    assert!(st.reply_cache_cached <= st.reply_cache_reserved, "{st:?}");
    assert!(
        st.reply_cache_cached > BUDGET / 2,
        "replies were cached: {st:?}"
    );
    assert_eq!((clients.len(), refused), (4, 2));
    // A retry is answered from the cache.
    let c = &clients[0];
    let r = c
        .ops(vec![
            c.sequence(0, 1, true),
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Lookup(Lookup4Args {
                objname: name("big"),
            }),
            NfsArgop4::Read(Read4Args {
                stateid: Stateid4::ANONYMOUS,
                offset: 0,
                count: 60 << 10,
            }),
        ])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK);
    // A session going frees its share: a newcomer gets in.
    let r = c
        .ops(vec![NfsArgop4::DestroySession(DestroySession4Args {
            sessionid: FixedOpaque(c.session),
        })])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK);
    let mut late = client(&s.srv).await;
    assert!(matches!(new_session(&mut late, "late").await, Res4::Ok(_)));
    assert!(s.svc.state_stats().reply_cache_reserved <= BUDGET);
}

/// Another connection of `c`'s client and session (its own slot use is
/// the caller's business).
async fn same_session(srv: &Srv, c: &C4) -> C4 {
    let mut o = client(srv).await;
    o.clientid = c.clientid;
    o.session = c.session;
    o
}

async fn destroy_session_alone(c: &C4) -> Nfsstat4 {
    c.ops(vec![NfsArgop4::DestroySession(DestroySession4Args {
        sessionid: FixedOpaque(c.session),
    })])
    .await
    .status
}

/// RFC 8881 §2.10.3.1: a session remembers at most 64 connections
/// (`nfs4.session_connections`). §18.34 has no error for "too many
/// connections", and a server cannot tell a dead connection from a silent
/// one, so refusing the 65th would lock out a client that reconnected 64
/// times; the oldest binding is forgotten instead, and that connection
/// joins again with its next SEQUENCE (SP4_NONE, §18.34.3).
#[tokio::test]
async fn a_session_remembers_at_most_64_connections() {
    let s = serve_arc("sessconns", SessionLimits::default()).await;
    let mut first = client(&s.srv).await;
    first.establish("many-conns").await;
    let before = trips("nfs4.session_connections");
    // establish used sequence id 1 of slot 0 (RECLAIM_COMPLETE).
    let mut seqid = 1;
    let mut others = Vec::new();
    // 64 more connections join by SEQUENCE (slot 0, one at a time).
    for _ in 0..64 {
        let o = same_session(&s.srv, &first).await;
        seqid += 1;
        let r = o.ops(vec![o.sequence(0, seqid, false)]).await;
        assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
        others.push(o);
    }
    assert!(trips("nfs4.session_connections") > before);
    // The first connection was forgotten: it may not destroy the session
    // (§18.37.3) until it joins again.
    assert_eq!(
        destroy_session_alone(&first).await,
        Nfsstat4::NFS4ERR_CONN_NOT_BOUND_TO_SESSION
    );
    seqid += 1;
    let r = first.ops(vec![first.sequence(0, seqid, false)]).await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    // The newest connection is still bound, and so is the first again.
    seqid += 1;
    let last = others.last().unwrap();
    let r = last.ops(vec![last.sequence(0, seqid, false)]).await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    assert_eq!(destroy_session_alone(&first).await, Nfsstat4::NFS4_OK);
    assert_eq!(s.svc.state_stats().sessions, 0);
}

/// An idle TCP connection is closed (`tcp.idle_closed`) unless it is
/// bound to a live NFSv4.1 session, which callbacks may use; once the
/// session's client lets its lease run out, its connection goes too.
#[tokio::test]
async fn idle_connections_are_closed_unless_bound_to_a_live_session() {
    let tcp = TcpConfig {
        idle_timeout: Some(std::time::Duration::from_millis(300)),
        ..TcpConfig::default()
    };
    let (svc, srv) = serve_with_tcp("idle", SessionLimits::default(), tcp).await;
    let mut c = client(&srv).await;
    c.establish("idle-holder").await;
    let before = trips("tcp.idle_closed");
    let mut plain = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    let mut b = [0u8; 1];
    let r = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        tokio::io::AsyncReadExt::read(&mut plain, &mut b),
    )
    .await;
    assert!(
        matches!(r, Ok(Ok(0) | Err(_))),
        "a plain idle connection is closed"
    );
    assert!(trips("tcp.idle_closed") > before);
    // Four idle periods later the session's connection still works.
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    c.ok(vec![NfsArgop4::Putrootfh(())]).await;
    // The lease runs out: the connection is no longer held.
    srv.clock.advance(std::time::Duration::from_secs(200));
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let id = c.seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    let args = Compound4Args {
        tag: bytes::Bytes::new(),
        minorversion: 1,
        argarray: vec![c.sequence(0, id, false)],
    };
    let r = c
        .rpc
        .call(oncrpc::client::RpcCall {
            prog: NFS4_PROGRAM,
            vers: NFS_V4,
            proc_: NFSPROC4_COMPOUND,
            cred: c.cred.clone(),
            args: xdr::XdrBuf::from_bytes(xdr::to_bytes(&args)),
            reply_hint: Default::default(),
        })
        .await;
    assert!(r.is_err(), "closed once the session expired: {r:?}");
    assert_eq!(svc.state_stats().sessions, 0);
}
