//! Reboot recovery (RFC 8881 §8.4.2, §18.51; RFC 7530 §9.6.2): a server
//! restarted in the test with the same state directory, scripted 4.1 and
//! 4.0 clients reclaiming an open and a lock in the grace period, clients
//! without a record and late reclaims refused, the grace period ending
//! early or by time, and the bound on client records.

mod v4_common;

use std::path::Path;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nfs::v4::session::*;
use nfs::v4::*;
use nfs_server::v4::{ManualClock, Nfs4Config, Nfs4Service, Recovery, SessionLimits};
use nfs_server::LocalFs;
use oncrpc::client::ClientConfig;
use oncrpc::limits::trips;
use oncrpc::tcp::{TcpClient, TcpConfig};
use v4_common::*;
use xdr::Bounded;

/// One server instance on `export`, keeping its client records in
/// `state`; its listener stops when dropped (a crash, for the clients).
struct Inst {
    addr: std::net::SocketAddr,
    uid: u32,
    clock: Arc<ManualClock>,
    svc: Arc<Nfs4Service>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Drop for Inst {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn start(export: &Path, state: &Path, grace: Duration, max_records: usize) -> Inst {
    let clock = Arc::new(ManualClock::new());
    let fs = Arc::new(LocalFs::new(export, false).unwrap());
    let rec = Recovery {
        grace,
        max_records,
        ..Recovery::new(state)
    };
    let svc = Arc::new(
        Nfs4Service::with_config(
            fs,
            Nfs4Config {
                limits: SessionLimits::default(),
                clock: clock.clone(),
                server_owner: Bytes::from_static(b"grace-test"),
            },
        )
        .with_recovery(&rec)
        .unwrap(),
    );
    let mut server = oncrpc::Server::new();
    server.register_arc(Arc::clone(&svc));
    let (addr, task) = listen(server).await;
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(export).unwrap());
    Inst {
        addr,
        uid,
        clock,
        svc,
        task,
    }
}

async fn connect(i: &Inst) -> C4 {
    let rpc = TcpClient::connect(i.addr, 7, ClientConfig::default(), TcpConfig::default())
        .await
        .unwrap();
    C4 {
        rpc,
        cred: sys_cred(i.uid),
        clientid: 0,
        session: [0; 16],
        seq: AtomicU32::new(0),
    }
}

fn rc() -> NfsArgop4 {
    NfsArgop4::ReclaimComplete(ReclaimComplete4Args { one_fs: false })
}

fn put_file(n: &'static str) -> Vec<NfsArgop4> {
    vec![
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Lookup(Lookup4Args { objname: name(n) }),
    ]
}

fn with(mut a: Vec<NfsArgop4>, b: NfsArgop4) -> Vec<NfsArgop4> {
    a.push(b);
    a
}

/// OPEN of the current file with CLAIM_PREVIOUS (no delegation held).
fn open_previous(clientid: u64, seqid: u32) -> NfsArgop4 {
    NfsArgop4::Open(Open4Args {
        seqid,
        share_access: OPEN4_SHARE_ACCESS_BOTH,
        share_deny: OPEN4_SHARE_DENY_NONE,
        owner: owner(clientid, "open-owner"),
        openhow: OpenHow4(None),
        claim: OpenClaim4::Previous(0),
    })
}

fn open_null(clientid: u64, seqid: u32, n: &'static str) -> NfsArgop4 {
    match open_create(clientid, n, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_DENY_NONE) {
        NfsArgop4::Open(mut a) => {
            a.seqid = seqid;
            NfsArgop4::Open(a)
        }
        _ => unreachable!(),
    }
}

fn lock(open: Stateid4, open_seqid: u32, cid: u64, who: &'static str, reclaim: bool) -> NfsArgop4 {
    NfsArgop4::Lock(Lock4Args {
        locktype: NfsLockType4::WRITE_LT,
        reclaim,
        offset: 0,
        length: 10,
        locker: Locker4::New(OpenToLockOwner4 {
            open_seqid,
            open_stateid: open,
            lock_seqid: 0,
            lock_owner: owner(cid, who),
        }),
    })
}

fn lockt(cid: u64) -> NfsArgop4 {
    NfsArgop4::Lockt(Lockt4Args {
        locktype: NfsLockType4::WRITE_LT,
        offset: 0,
        length: 10,
        owner: owner(cid, "tester"),
    })
}

fn open_ok(r: &Compound4Res) -> Open4ResOk {
    r.resarray
        .iter()
        .find_map(|x| match x {
            NfsResop4::Open(Res4::Ok(o)) => Some(o.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{r:?}"))
}

fn records_on_disk(state: &Path) -> usize {
    std::fs::read_dir(state.join("v4-clients")).unwrap().count()
}

/// RFC 8881 §8.4.2.1, §18.16.3, §18.10.3, §18.51.3: after a restart a
/// recorded 4.1 client reclaims its open and its lock while others wait;
/// its RECLAIM_COMPLETE ends the grace period early.
#[tokio::test]
async fn a_v41_client_reclaims_its_open_and_lock_after_a_restart() {
    let export = TempDir::new("grace41-export");
    let state = TempDir::new("grace41-state");
    let grace = Duration::from_secs(30);
    let one = start(export.path(), state.path(), grace, 100).await;
    assert!(!one.svc.state_stats().in_grace, "nothing to reclaim");
    let mut a = connect(&one).await;
    a.establish("client-a").await;
    assert_eq!(one.svc.state_stats().client_records, 1);
    assert_eq!(records_on_disk(state.path()), 1);
    let mut ops = vec![NfsArgop4::Putrootfh(())];
    ops.push(open_null(a.clientid, 0, "f"));
    let sid = open_ok(&a.seq(ops.clone()).await).stateid;
    let r = a
        .seq(with(put_file("f"), lock(sid, 0, a.clientid, "la", false)))
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    let (old_id, old_session) = (a.clientid, a.session);
    drop(a);
    drop(one);

    let two = start(export.path(), state.path(), grace, 100).await;
    assert!(two.svc.state_stats().in_grace);
    // The old session and client id are gone (the client learns it
    // must reclaim, RFC 8881 §8.4.2).
    let mut a = connect(&two).await;
    a.session = old_session;
    assert_eq!(a.seq(vec![]).await.status, Nfsstat4::NFS4ERR_BADSESSION);
    let r = a
        .ops(vec![NfsArgop4::CreateSession(C4::create_session_args(
            old_id, 2,
        ))])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_STALE_CLIENTID);
    a.session_only("client-a").await;
    a.seq = AtomicU32::new(0);
    // A client the last instance did not record may not reclaim, nor
    // open anew during the grace period.
    let mut b = connect(&two).await;
    b.session_only("client-b").await;
    let r = b
        .seq(with(put_file("f"), open_previous(b.clientid, 0)))
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NO_GRACE, "{r:?}");
    assert_eq!(b.seq(ops.clone()).await.status, Nfsstat4::NFS4ERR_GRACE);
    // A reclaims; new opens, locks and tests wait.
    let mut ops_a = vec![NfsArgop4::Putrootfh(())];
    ops_a.push(open_null(a.clientid, 0, "f"));
    assert_eq!(a.seq(ops_a.clone()).await.status, Nfsstat4::NFS4ERR_GRACE);
    let sid = open_ok(
        &a.seq(with(put_file("f"), open_previous(a.clientid, 0)))
            .await,
    )
    .stateid;
    let r = a
        .seq(with(put_file("f"), lock(sid, 0, a.clientid, "new", false)))
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_GRACE, "{r:?}");
    let r = a.seq(with(put_file("f"), lockt(a.clientid))).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_GRACE, "{r:?}");
    let r = a
        .seq(with(put_file("f"), lock(sid, 0, a.clientid, "la", true)))
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    // A was the only recorded client: its RECLAIM_COMPLETE ends grace.
    assert_eq!(a.seq(vec![rc()]).await.status, Nfsstat4::NFS4_OK);
    assert!(!two.svc.state_stats().in_grace);
    assert_eq!(
        a.seq(vec![rc()]).await.status,
        Nfsstat4::NFS4ERR_COMPLETE_ALREADY
    );
    let r = a
        .seq(with(put_file("f"), open_previous(a.clientid, 0)))
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NO_GRACE, "{r:?}");
    // B has not sent RECLAIM_COMPLETE: still GRACE (§18.51.3); then it
    // opens, and A's reclaimed lock holds against it.
    assert_eq!(b.seq(ops.clone()).await.status, Nfsstat4::NFS4ERR_GRACE);
    assert_eq!(b.seq(vec![rc()]).await.status, Nfsstat4::NFS4_OK);
    let mut ops_b = vec![NfsArgop4::Putrootfh(())];
    ops_b.push(open_null(b.clientid, 0, "f"));
    let sb = open_ok(&b.seq(ops_b).await).stateid;
    let r = b
        .seq(with(put_file("f"), lock(sb, 0, b.clientid, "lb", false)))
        .await;
    assert!(
        matches!(
            r.resarray.last(),
            Some(NfsResop4::Lock(LockRes4::Denied(_)))
        ),
        "{r:?}"
    );
    assert_eq!(two.svc.state_stats().client_records, 2);
    assert_eq!(records_on_disk(state.path()), 2);
    // DESTROY_CLIENTID of a client without state removes its record.
    let mut c = connect(&two).await;
    c.establish("client-c").await;
    assert_eq!(records_on_disk(state.path()), 3);
    let r = c
        .ops(vec![NfsArgop4::DestroySession(DestroySession4Args {
            sessionid: xdr::FixedOpaque(c.session),
        })])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    let r = c
        .ops(vec![NfsArgop4::DestroyClientid(DestroyClientid4Args {
            clientid: c.clientid,
        })])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    assert_eq!(records_on_disk(state.path()), 2);
    drop(two);
}

/// RFC 7530 §9.6.2: a 4.0 client reclaims its open and lock with its new
/// client id; the grace period then runs its full length (4.0 has no
/// RECLAIM_COMPLETE), after which reclaims are NO_GRACE and the records of
/// clients that did not come back are gone.
#[tokio::test]
async fn a_v40_client_reclaims_and_the_grace_period_times_out() {
    let export = TempDir::new("grace40-export");
    let state = TempDir::new("grace40-state");
    let grace = Duration::from_secs(20);
    let one = start(export.path(), state.path(), grace, 100).await;
    let c = connect(&one).await;
    let id = establish40(&c, "host-40").await;
    let o = open_ok(&v40(&c, vec![NfsArgop4::Putrootfh(()), open_null(id, 1, "g")]).await);
    assert_ne!(o.rflags & OPEN4_RESULT_CONFIRM, 0);
    let r = v40(&c, with(put_file("g"), open_confirm(o.stateid, 2))).await;
    let NfsResop4::OpenConfirm(Res4::Ok(sid)) = r.resarray[2] else {
        panic!("{r:?}")
    };
    let r = v40(&c, with(put_file("g"), lock(sid, 3, id, "l40", false))).await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    // A 4.1 client that will not come back.
    let mut gone = connect(&one).await;
    gone.establish("gone").await;
    assert_eq!(records_on_disk(state.path()), 2);
    drop(c);
    drop(gone);
    drop(one);

    let two = start(export.path(), state.path(), grace, 100).await;
    assert!(two.svc.state_stats().in_grace);
    let c = connect(&two).await;
    let r = v40(&c, vec![NfsArgop4::Renew(Renew4Args { clientid: id })]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_STALE_CLIENTID);
    let id = establish40(&c, "host-40").await;
    let r = v40(&c, vec![NfsArgop4::Putrootfh(()), open_null(id, 1, "g")]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_GRACE, "{r:?}");
    // The refused OPEN used seqid 1 (GRACE moves the seqid on, RFC 7530
    // §9.1.7): the reclaim is the owner's next.
    let o = open_ok(&v40(&c, with(put_file("g"), open_previous(id, 2))).await);
    let mut seqid = 3;
    let mut sid = o.stateid;
    if o.rflags & OPEN4_RESULT_CONFIRM != 0 {
        let r = v40(&c, with(put_file("g"), open_confirm(o.stateid, 3))).await;
        let NfsResop4::OpenConfirm(Res4::Ok(s)) = r.resarray[2] else {
            panic!("{r:?}")
        };
        sid = s;
        seqid = 4;
    }
    let r = v40(&c, with(put_file("g"), lock(sid, seqid, id, "l40", true))).await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    // No RECLAIM_COMPLETE in 4.0, and "gone" is not back: grace runs on.
    two.clock.advance(Duration::from_secs(19));
    let r = v40(&c, vec![NfsArgop4::Renew(Renew4Args { clientid: id })]).await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK);
    assert!(two.svc.state_stats().in_grace);
    two.clock.advance(Duration::from_secs(2));
    let r = v40(&c, vec![NfsArgop4::Renew(Renew4Args { clientid: id })]).await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK);
    assert!(!two.svc.state_stats().in_grace);
    // Too late to reclaim; "gone"'s record went with the grace period.
    let r = v40(&c, with(put_file("g"), open_previous(id, seqid + 1))).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NO_GRACE, "{r:?}");
    assert_eq!(two.svc.state_stats().client_records, 1);
    assert_eq!(records_on_disk(state.path()), 1);
    // A new 4.1 client's non-reclaim open is fine now; the reclaimed
    // lock holds against it.
    let mut n = connect(&two).await;
    n.establish("late").await;
    let mut ops = vec![NfsArgop4::Putrootfh(())];
    ops.push(open_null(n.clientid, 0, "g"));
    let sn = open_ok(&n.seq(ops).await).stateid;
    let r = n
        .seq(with(put_file("g"), lock(sn, 0, n.clientid, "ln", false)))
        .await;
    assert!(
        matches!(
            r.resarray.last(),
            Some(NfsResop4::Lock(LockRes4::Denied(_)))
        ),
        "{r:?}"
    );
}

/// Bound `nfs4.client_records`: a flood of clients leaves at most
/// `max_records` records; the others work but are not recorded.
#[tokio::test]
async fn client_records_are_bounded() {
    let export = TempDir::new("grace-bound-export");
    let state = TempDir::new("grace-bound-state");
    let srv = start(export.path(), state.path(), Duration::from_secs(30), 3).await;
    let before = trips("nfs4.client_records");
    let names = ["h1", "h2", "h3", "h4", "h5", "h6"];
    for n in names {
        let mut c = connect(&srv).await;
        c.establish(n).await;
        let mut ops = vec![NfsArgop4::Putrootfh(())];
        ops.push(open_null(c.clientid, 0, "x"));
        assert_eq!(c.seq(ops).await.status, Nfsstat4::NFS4_OK);
    }
    assert_eq!(srv.svc.state_stats().client_records, 3);
    assert_eq!(records_on_disk(state.path()), 3);
    assert!(trips("nfs4.client_records") >= before + 3);
}

async fn v40(c: &C4, ops: Vec<NfsArgop4>) -> Compound4Res {
    c.compound(&Compound4Args {
        tag: Bytes::new(),
        minorversion: 0,
        argarray: ops,
    })
    .await
}

/// SETCLIENTID and SETCLIENTID_CONFIRM; the confirmed client id.
async fn establish40(c: &C4, id: &'static str) -> u64 {
    let set = NfsArgop4::Setclientid(Setclientid4Args {
        client: NfsClientId4 {
            verifier: xdr::FixedOpaque([1; 8]),
            id: Bounded(Bytes::from_static(id.as_bytes())),
        },
        callback: CbClient4 {
            program: 0x4000_0000,
            location: Netaddr4 {
                netid: Bounded(Bytes::from_static(b"tcp")),
                addr: Bounded(Bytes::from_static(b"127.0.0.1.3.232")),
            },
        },
        callback_ident: 1,
    });
    let ok = match &v40(c, vec![set]).await.resarray[..] {
        [NfsResop4::Setclientid(Setclientid4Res::Ok(ok))] => ok.clone(),
        r => panic!("{r:?}"),
    };
    let confirm = NfsArgop4::SetclientidConfirm(SetclientidConfirm4Args {
        clientid: ok.clientid,
        setclientid_confirm: ok.setclientid_confirm,
    });
    assert_eq!(v40(c, vec![confirm]).await.status, Nfsstat4::NFS4_OK);
    ok.clientid
}

fn open_confirm(sid: Stateid4, seqid: u32) -> NfsArgop4 {
    NfsArgop4::OpenConfirm(OpenConfirm4Args {
        open_stateid: sid,
        seqid,
    })
}
