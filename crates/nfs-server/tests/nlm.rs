//! NLM v4 and NSM (RFC 1813 Appendix II; XNFS SM) against the whole
//! server over TCP, as an NFSv3 client's lock manager talks to it: found
//! through rpcbind, locks between owners, exclusion with NFSv4 locks on
//! the same file, FREE_ALL and SM_NOTIFY, and the bounds.

mod common;
mod v4_common;

use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{fh_of, Client, TempDir};
use nfs::nlm::*;
use nfs::nsm::*;
use nfs::v3::NfsFh3;
use nfs::v4::*;
use nfs_server::nlm::NlmLimits;
use oncrpc::client::{ClientConfig, RpcError};
use oncrpc::limits::trips;
use oncrpc::tcp::{TcpClient, TcpConfig};
use v4_common::{open_create, open_stateid, owner, sys_cred, C4};
use xdr::{Bounded, FixedOpaque};

async fn serve(dir: &TempDir, limits: NlmLimits) -> nfs_server::RunningServer {
    let mut cfg = nfs_server::ServerConfig::new(dir.path());
    cfg.set_squash(nfs_server::exports::Squash::None);
    cfg.nfs_addr = "127.0.0.1:0".parse().unwrap();
    cfg.mount_addr = None;
    cfg.rpcbind_addr = Some("127.0.0.1:0".parse().unwrap());
    cfg.nlm_limits = limits;
    nfs_server::start(cfg).await.unwrap()
}

/// A server with one file "f"; a client and the file's handle.
async fn with_file(
    tag: &str,
    limits: NlmLimits,
) -> (TempDir, nfs_server::RunningServer, Client, NfsFh3) {
    let dir = TempDir::new(tag);
    let srv = serve(&dir, limits).await;
    let c = Client::connect(srv.nfs_addr()).await;
    let root = c.root(dir.path()).await;
    let fh = fh_of(c.create(&root, "f").await);
    (dir, srv, c, fh)
}

fn alock(host: &'static str, svid: i32, fh: &NfsFh3, off: u64, len: u64) -> Nlm4Lock {
    Nlm4Lock {
        caller_name: Bounded(Bytes::from_static(host.as_bytes())),
        fh: Bounded(Bytes::copy_from_slice(fh.as_bytes())),
        oh: Bounded(Bytes::from(format!("{svid}@{host}"))),
        svid,
        l_offset: off,
        l_len: len,
    }
}

fn cookie() -> Netobj {
    Bounded(Bytes::from_static(b"ck01"))
}

async fn lock(c: &Client, l: Nlm4Lock, exclusive: bool) -> Nlm4Stats {
    let a = Nlm4LockArgs {
        cookie: cookie(),
        block: false,
        exclusive,
        alock: l,
        reclaim: false,
        state: 1,
    };
    let r: Nlm4Res = c.call(NLM_PROGRAM, NLM_V4, 2, &a).await.unwrap();
    assert_eq!(r.cookie, cookie(), "the cookie comes back");
    r.stat
}

async fn test(c: &Client, l: Nlm4Lock, exclusive: bool) -> Nlm4TestReply {
    let a = Nlm4TestArgs {
        cookie: cookie(),
        exclusive,
        alock: l,
    };
    let r: Nlm4TestRes = c.call(NLM_PROGRAM, NLM_V4, 1, &a).await.unwrap();
    r.stat
}

async fn unlock(c: &Client, l: Nlm4Lock) -> Nlm4Stats {
    let a = Nlm4UnlockArgs {
        cookie: cookie(),
        alock: l,
    };
    let r: Nlm4Res = c.call(NLM_PROGRAM, NLM_V4, 4, &a).await.unwrap();
    r.stat
}

const GRANTED: Nlm4Stats = Nlm4Stats::NLM4_GRANTED;
const DENIED: Nlm4Stats = Nlm4Stats::NLM4_DENIED;

#[tokio::test]
async fn rpcbind_reports_nlm_and_nsm_on_the_nfs_port() {
    let dir = TempDir::new("nlm-rpcbind");
    let srv = serve(&dir, NlmLimits::default()).await;
    let pm = Client::connect(srv.rpcbind_addr().unwrap()).await;
    let port = u32::from(srv.nfs_addr().port());
    for (prog, vers) in [(NLM_PROGRAM, NLM_V4), (SM_PROGRAM, SM_V1)] {
        // PMAPPROC_GETPORT (RFC 1833 §3.2).
        let p: u32 = pm.call(100_000, 2, 3, &[prog, vers, 6, 0]).await.unwrap();
        assert_eq!(p, port, "program {prog}");
    }
    let c = Client::connect(srv.nfs_addr()).await;
    let () = c.call(NLM_PROGRAM, NLM_V4, 0, &()).await.unwrap();
    let () = c.call(SM_PROGRAM, SM_V1, 0, &()).await.unwrap();
}

#[tokio::test]
async fn two_owners_test_lock_and_unlock() {
    let (_d, _srv, c, fh) = with_file("nlm-owners", NlmLimits::default()).await;
    assert_eq!(lock(&c, alock("a", 1, &fh, 0, 100), true).await, GRANTED);
    // Another process of the same host is another owner.
    assert_eq!(lock(&c, alock("a", 2, &fh, 50, 10), false).await, DENIED);
    match test(&c, alock("b", 1, &fh, 99, 0), false).await {
        Nlm4TestReply::Denied(h) => {
            assert_eq!(
                (h.exclusive, h.svid, h.l_offset, h.l_len),
                (true, 1, 0, 100)
            );
            assert_eq!(&h.oh.0[..], b"1@a");
        }
        r => panic!("TEST: {r:?}"),
    }
    assert_eq!(
        test(&c, alock("b", 1, &fh, 100, 0), true).await,
        Nlm4TestReply::Other(GRANTED)
    );
    // The owner itself re-locks and tests its own range freely.
    assert_eq!(lock(&c, alock("a", 1, &fh, 0, 10), false).await, GRANTED);
    assert_eq!(
        test(&c, alock("a", 1, &fh, 0, 0), true).await,
        Nlm4TestReply::Other(GRANTED)
    );
    // Shared now on 0..10: b may share it, not take it.
    assert_eq!(lock(&c, alock("b", 1, &fh, 0, 10), false).await, GRANTED);
    assert_eq!(lock(&c, alock("b", 1, &fh, 20, 1), true).await, DENIED);
    assert_eq!(unlock(&c, alock("a", 1, &fh, 0, 0)).await, GRANTED);
    assert_eq!(lock(&c, alock("b", 1, &fh, 20, 1), true).await, GRANTED);
    assert_eq!(lock(&c, alock("a", 1, &fh, 5, 1), true).await, DENIED);
    assert_eq!(unlock(&c, alock("b", 1, &fh, 0, 0)).await, GRANTED);
    assert_eq!(lock(&c, alock("a", 1, &fh, 0, 0), true).await, GRANTED);
}

#[tokio::test]
async fn bad_handles_reclaims_and_unserved_procedures() {
    let (dir, _srv, c, fh) = with_file("nlm-bad", NlmLimits::default()).await;
    let bogus = NfsFh3::new(&[0xee; 32]).unwrap();
    assert_eq!(
        lock(&c, alock("a", 1, &bogus, 0, 1), true).await,
        Nlm4Stats::NLM4_STALE_FH
    );
    let root = c.root(dir.path()).await;
    assert_eq!(
        lock(&c, alock("a", 1, &root, 0, 1), true).await,
        Nlm4Stats::NLM4_FAILED,
        "a directory is not lockable"
    );
    let reclaim = Nlm4LockArgs {
        cookie: cookie(),
        block: false,
        exclusive: true,
        alock: alock("a", 1, &fh, 0, 1),
        reclaim: true,
        state: 3,
    };
    let r: Nlm4Res = c.call(NLM_PROGRAM, NLM_V4, 2, &reclaim).await.unwrap();
    assert_eq!(r.stat, Nlm4Stats::NLM4_DENIED_GRACE_PERIOD);
    // SHARE (20) and the asynchronous LOCK_MSG (7): not served.
    for p in [7, 20] {
        let e = c.raw(NLM_PROGRAM, NLM_V4, p, xdr::XdrBuf::new()).await;
        assert!(matches!(e, Err(RpcError::ProcUnavail)), "proc {p}: {e:?}");
    }
    // Truncated arguments are a decoding error, not a lock.
    let e = c
        .raw(
            NLM_PROGRAM,
            NLM_V4,
            2,
            xdr::XdrBuf::from_bytes(Bytes::from_static(&[0, 0, 0, 4])),
        )
        .await;
    assert!(matches!(e, Err(RpcError::GarbageArgs)), "{e:?}");
    assert_eq!(lock(&c, alock("b", 1, &fh, 0, 1), true).await, GRANTED);
}

/// An NFSv4.1 client with a session on `srv`'s NFS port.
async fn v4_client(srv: &nfs_server::RunningServer, name: &str) -> C4 {
    let rpc = TcpClient::connect(
        srv.nfs_addr(),
        7,
        ClientConfig::default(),
        TcpConfig::default(),
    )
    .await
    .unwrap();
    let mut c = C4 {
        rpc,
        cred: sys_cred(0),
        clientid: 0,
        session: [0; 16],
        seq: AtomicU32::new(0),
    };
    // No back channel: the client answers no callbacks, so the server
    // must not wait on one before granting (or not) a delegation.
    let r = c
        .ops(vec![NfsArgop4::ExchangeId(C4::exchange_id_args(name, 1))])
        .await;
    let Some(NfsResop4::ExchangeId(Res4::Ok(x))) = r.resarray.first() else {
        panic!("EXCHANGE_ID: {r:?}")
    };
    c.clientid = x.clientid;
    let mut cs = C4::create_session_args(x.clientid, x.sequenceid);
    cs.flags = 0;
    let r = c.ops(vec![NfsArgop4::CreateSession(cs)]).await;
    let Some(NfsResop4::CreateSession(Res4::Ok(s))) = r.resarray.first() else {
        panic!("CREATE_SESSION: {r:?}")
    };
    c.session = s.sessionid.0;
    c.reclaim_complete().await;
    c
}

fn v4_lock(open: Stateid4, cid: u64, off: u64, len: u64, write: bool) -> NfsArgop4 {
    NfsArgop4::Lock(Lock4Args {
        locktype: if write {
            NfsLockType4::WRITE_LT
        } else {
            NfsLockType4::READ_LT
        },
        reclaim: false,
        offset: off,
        length: len,
        locker: Locker4::New(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid: open,
            lock_seqid: 0,
            lock_owner: owner(cid, "v4-lock-owner"),
        }),
    })
}

#[tokio::test]
async fn nlm_and_nfsv4_locks_on_one_file_exclude_each_other() {
    let (dir, srv, c, fh) = with_file("nlm-v4", NlmLimits::default()).await;
    let root = c.root(dir.path()).await;
    let v4 = v4_client(&srv, "v4-locker").await;
    let put_root = NfsArgop4::Putfh(Putfh4Args {
        object: NfsFh4(Bytes::copy_from_slice(root.as_bytes())),
    });
    let r = v4
        .ok(vec![put_root.clone(), open_create(v4.clientid, "f", 3, 0)])
        .await;
    // Seqid 0: whatever the open's current seqid is (RFC 8881 §8.2.2).
    let open = Stateid4 {
        seqid: 0,
        ..open_stateid(&r)
    };
    let put_file = NfsArgop4::Putfh(Putfh4Args {
        object: NfsFh4(Bytes::copy_from_slice(fh.as_bytes())),
    });
    // NFSv4 holds 0..10 exclusively: NLM is refused there, granted past it.
    let r = v4
        .ok(vec![
            put_file.clone(),
            v4_lock(open, v4.clientid, 0, 10, true),
        ])
        .await;
    let NfsResop4::Lock(LockRes4::Ok(lsid)) = r[2].clone() else {
        panic!("LOCK: {r:?}")
    };
    assert_eq!(lock(&c, alock("nlm", 1, &fh, 5, 1), false).await, DENIED);
    match test(&c, alock("nlm", 1, &fh, 0, 0), false).await {
        Nlm4TestReply::Denied(h) => assert_eq!((h.exclusive, h.l_offset, h.l_len), (true, 0, 10)),
        r => panic!("TEST: {r:?}"),
    }
    assert_eq!(lock(&c, alock("nlm", 1, &fh, 10, 0), true).await, GRANTED);
    // NLM holds 10..: an NFSv4 LOCK there is NFS4ERR_DENIED with the NLM
    // host as the owner; LOCKT says the same.
    let r = v4
        .seq(vec![
            put_file.clone(),
            v4_lock(open, v4.clientid, 20, 1, false),
        ])
        .await;
    let Some(NfsResop4::Lock(LockRes4::Denied(d))) = r.resarray.get(2) else {
        panic!("LOCK over an NLM lock: {r:?}")
    };
    assert_eq!((d.offset, d.length), (10, NFS4_UINT64_MAX));
    assert_eq!(
        (d.locktype, &d.owner.owner.0[..]),
        (NfsLockType4::WRITE_LT, &b"nlm"[..])
    );
    let lockt = NfsArgop4::Lockt(Lockt4Args {
        locktype: NfsLockType4::READ_LT,
        offset: 15,
        length: 1,
        owner: owner(v4.clientid, "v4-lock-owner"),
    });
    let r = v4.seq(vec![put_file.clone(), lockt.clone()]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_DENIED, "{r:?}");
    // Released on each side, the other gets it.
    assert_eq!(unlock(&c, alock("nlm", 1, &fh, 0, 0)).await, GRANTED);
    v4.ok(vec![put_file.clone(), lockt]).await;
    v4.ok(vec![
        put_file,
        NfsArgop4::Locku(Locku4Args {
            locktype: NfsLockType4::WRITE_LT,
            seqid: 0,
            lock_stateid: lsid,
            offset: 0,
            length: NFS4_UINT64_MAX,
        }),
    ])
    .await;
    assert_eq!(lock(&c, alock("nlm", 1, &fh, 0, 0), true).await, GRANTED);
}

#[tokio::test]
async fn free_all_and_sm_notify_drop_a_hosts_locks() {
    let (_d, srv, c, fh) = with_file("nlm-free", NlmLimits::default()).await;
    assert_eq!(lock(&c, alock("gone", 1, &fh, 0, 10), true).await, GRANTED);
    assert_eq!(lock(&c, alock("gone", 2, &fh, 20, 10), true).await, GRANTED);
    assert_eq!(
        lock(&c, alock("stays", 1, &fh, 40, 10), true).await,
        GRANTED
    );
    let notify = Nlm4Notify {
        name: Bounded(Bytes::from_static(b"gone")),
        state: 3,
    };
    let () = c.call(NLM_PROGRAM, NLM_V4, 23, &notify).await.unwrap();
    assert_eq!(lock(&c, alock("new", 1, &fh, 0, 30), true).await, GRANTED);
    assert_eq!(lock(&c, alock("new", 1, &fh, 40, 1), true).await, DENIED);
    // The client "stays" restarts; its status monitor tells ours.
    let chg = StatChge {
        mon_name: Bounded(Bytes::from_static(b"stays")),
        state: 5,
    };
    let () = c.call(SM_PROGRAM, SM_V1, 6, &chg).await.unwrap();
    assert_eq!(lock(&c, alock("new", 1, &fh, 40, 1), true).await, GRANTED);
    let _ = srv;
}

#[tokio::test]
async fn nsm_monitors_a_bounded_list_and_reports_its_state() {
    let dir = TempDir::new("nsm");
    let limits = NlmLimits {
        max_hosts: 2,
        ..NlmLimits::default()
    };
    let srv = serve(&dir, limits).await;
    let c = Client::connect(srv.nfs_addr()).await;
    let stat: SmStatRes = c
        .call(
            SM_PROGRAM,
            SM_V1,
            1,
            &SmNameArgs {
                mon_name: Bounded(Bytes::from_static(b"x")),
            },
        )
        .await
        .unwrap();
    assert_eq!(stat.res_stat, SmRes::STAT_SUCC);
    assert_eq!(stat.state % 2, 1, "odd: up");
    let me = MyId {
        my_name: Bounded(Bytes::from_static(b"localhost")),
        my_prog: NLM_PROGRAM as i32,
        my_vers: 4,
        my_proc: 16,
    };
    let mon = |host: &'static str| Mon {
        mon_id: MonId {
            mon_name: Bounded(Bytes::from_static(host.as_bytes())),
            my_id: me.clone(),
        },
        priv_: FixedOpaque([0; 16]),
    };
    for h in ["h1", "h2"] {
        let r: SmStatRes = c.call(SM_PROGRAM, SM_V1, 2, &mon(h)).await.unwrap();
        assert_eq!((r.res_stat, r.state), (SmRes::STAT_SUCC, stat.state));
    }
    let before = trips("nsm.monitored");
    let r: SmStatRes = c.call(SM_PROGRAM, SM_V1, 2, &mon("h3")).await.unwrap();
    assert_eq!(r.res_stat, SmRes::STAT_FAIL);
    assert!(trips("nsm.monitored") > before);
    let r: SmStat = c
        .call(SM_PROGRAM, SM_V1, 3, &mon("h1").mon_id)
        .await
        .unwrap();
    assert_eq!(r.state, stat.state);
    let r: SmStatRes = c.call(SM_PROGRAM, SM_V1, 2, &mon("h3")).await.unwrap();
    assert_eq!(r.res_stat, SmRes::STAT_SUCC, "room again after SM_UNMON");
    let _: SmStat = c.call(SM_PROGRAM, SM_V1, 4, &me).await.unwrap();
    for h in ["h4", "h5"] {
        let r: SmStatRes = c.call(SM_PROGRAM, SM_V1, 2, &mon(h)).await.unwrap();
        assert_eq!(
            r.res_stat,
            SmRes::STAT_SUCC,
            "room again after SM_UNMON_ALL"
        );
    }
}

#[tokio::test]
async fn hostile_client_cannot_hold_unbounded_locks_or_hosts() {
    let limits = NlmLimits {
        max_hosts: 3,
        max_locks_per_host: 8,
        ..NlmLimits::default()
    };
    let (_d, _srv, c, fh) = with_file("nlm-bounds", limits).await;
    for i in 0..8 {
        assert_eq!(
            lock(&c, alock("greedy", 1, &fh, i * 2, 1), true).await,
            GRANTED
        );
    }
    let before = trips("nlm.locks_per_host");
    // A ninth range, even under another process id of the same host.
    assert_eq!(
        lock(&c, alock("greedy", 2, &fh, 100, 1), true).await,
        Nlm4Stats::NLM4_DENIED_NOLOCKS
    );
    assert!(trips("nlm.locks_per_host") > before);
    for h in ["h2", "h3"] {
        assert_eq!(lock(&c, alock(h, 1, &fh, 200, 1), false).await, GRANTED);
    }
    let before = trips("nlm.hosts");
    assert_eq!(
        lock(&c, alock("h4", 1, &fh, 300, 1), true).await,
        Nlm4Stats::NLM4_DENIED_NOLOCKS
    );
    assert!(trips("nlm.hosts") > before);
    // Giving locks back makes room.
    assert_eq!(unlock(&c, alock("h3", 1, &fh, 0, 0)).await, GRANTED);
    assert_eq!(lock(&c, alock("h4", 1, &fh, 300, 1), true).await, GRANTED);
    assert_eq!(unlock(&c, alock("greedy", 1, &fh, 0, 2)).await, GRANTED);
    assert_eq!(
        lock(&c, alock("greedy", 2, &fh, 100, 1), true).await,
        GRANTED
    );
}

/// A client host's rpcbind and one of its services on one port:
/// rpcbind's GETPORT names that port, calls to `prog` version `vers` go
/// to `handle` (procedure, arguments).
struct FakeHost<H> {
    port: Arc<AtomicU32>,
    prog: u32,
    vers: u32,
    handle: Arc<H>,
}

type Handled = Result<xdr::XdrBuf, oncrpc::ServiceError>;

impl<H> oncrpc::RpcService for FakeHost<H>
where
    H: Fn(u32, &Bytes) -> Handled + Send + Sync + 'static,
{
    fn program(&self) -> u32 {
        self.prog
    }

    fn versions(&self) -> std::ops::RangeInclusive<u32> {
        self.vers..=self.vers
    }

    async fn call(&self, ctx: oncrpc::CallContext, args: Bytes) -> Handled {
        match (self.prog, ctx.proc_) {
            (100_000, 3) => {
                let port = self.port.load(std::sync::atomic::Ordering::SeqCst);
                Ok(xdr::XdrBuf::from_bytes(Bytes::copy_from_slice(
                    &port.to_be_bytes(),
                )))
            }
            (100_000, _) => Err(oncrpc::ServiceError::ProcUnavail),
            (_, proc_) => (self.handle)(proc_, &args),
        }
    }
}

/// Starts a [`FakeHost`] for `prog`/`vers` on a loopback port: its port
/// and its task.
async fn fake_host<H>(
    prog: u32,
    vers: u32,
    handle: H,
) -> (u16, tokio::task::JoinHandle<std::io::Result<()>>)
where
    H: Fn(u32, &Bytes) -> Handled + Send + Sync + 'static,
{
    let port = Arc::new(AtomicU32::new(0));
    let handle = Arc::new(handle);
    let mut fake = oncrpc::Server::new();
    for (prog, vers) in [(100_000, 2), (prog, vers)] {
        fake.register(FakeHost {
            port: Arc::clone(&port),
            prog,
            vers,
            handle: Arc::clone(&handle),
        });
    }
    let server = oncrpc::tcp::TcpServer::bind(
        "127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap(),
        Arc::new(fake),
        TcpConfig::default(),
    )
    .await
    .unwrap();
    let bound = server.local_addr().unwrap().port();
    port.store(u32::from(bound), std::sync::atomic::Ordering::SeqCst);
    (bound, server.spawn())
}

/// XNFS NLM crash recovery and XNFS SM: a host that locked is recorded in
/// the state directory; after a restart its status monitor gets SM_NOTIFY
/// with the new (larger, odd) state number, its reclaim is granted in the
/// grace period while new locks wait, and after it reclaims are refused.
#[tokio::test]
async fn after_a_restart_hosts_are_notified_and_reclaim_in_grace() {
    let dir = TempDir::new("nlm-restart");
    let state = TempDir::new("nlm-restart-state");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (statd_port, _statd) = fake_host(SM_PROGRAM, 1, move |proc_, args| match proc_ {
        6 => {
            let c: StatChge = xdr::from_slice(args)?;
            let _ = tx.send(c);
            Ok(xdr::XdrBuf::new())
        }
        _ => Err(oncrpc::ServiceError::ProcUnavail),
    })
    .await;
    let cfg = || {
        let mut cfg = nfs_server::ServerConfig::new(dir.path());
        cfg.set_squash(nfs_server::exports::Squash::None);
        cfg.nfs_addr = "127.0.0.1:0".parse().unwrap();
        cfg.mount_addr = None;
        cfg.state_dir = Some(state.path().to_path_buf());
        cfg.grace_time = Duration::from_secs(3);
        cfg.sm_notify_port = statd_port;
        cfg
    };
    let srv = nfs_server::start(cfg()).await.unwrap();
    let c = Client::connect(srv.nfs_addr()).await;
    let root = c.root(dir.path()).await;
    let fh = fh_of(c.create(&root, "f").await);
    let state1 = nsm_stat(&c).await;
    assert_eq!(
        lock(&c, alock("host-a", 1, &fh, 0, 10), true).await,
        GRANTED
    );
    assert!(rx.try_recv().is_err(), "no notification on a first start");
    let old = std::sync::Arc::downgrade(srv.storage());
    srv.stop();
    drop(c);
    for _ in 0..200 {
        if old.upgrade().is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let srv = nfs_server::start(cfg()).await.unwrap();
    let note = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("SM_NOTIFY within 10 s")
        .unwrap();
    let c = Client::connect(srv.nfs_addr()).await;
    let state2 = nsm_stat(&c).await;
    assert!(state2 > state1 && state2 % 2 == 1, "{state1} -> {state2}");
    assert_eq!(note.state, state2);
    // In the grace period: a new lock and a test wait, the reclaim is
    // granted and then holds.
    let reclaim = |host: &'static str, reclaim: bool| Nlm4LockArgs {
        cookie: cookie(),
        block: false,
        exclusive: true,
        alock: alock(host, 1, &fh, 0, 10),
        reclaim,
        state: 3,
    };
    let grace = Nlm4Stats::NLM4_DENIED_GRACE_PERIOD;
    assert_eq!(nlm_lock(&c, reclaim("host-b", false)).await, grace);
    assert!(matches!(
        test(&c, alock("host-b", 1, &fh, 0, 10), true).await,
        Nlm4TestReply::Other(Nlm4Stats::NLM4_DENIED_GRACE_PERIOD)
    ));
    assert_eq!(nlm_lock(&c, reclaim("host-a", true)).await, GRANTED);
    // One grace period for both protocols (as Linux's `locks_in_grace`):
    // an NFSv4 client (with no grace of its own to wait for) may open,
    // but not lock, while NLM hosts reclaim (RFC 8881 §8.4.2.1).
    let root = c.root(dir.path()).await;
    let v4 = v4_client(&srv, "v4-in-nlm-grace").await;
    let put_root = NfsArgop4::Putfh(Putfh4Args {
        object: NfsFh4(Bytes::copy_from_slice(root.as_bytes())),
    });
    let r = v4
        .ok(vec![put_root, open_create(v4.clientid, "f", 3, 0)])
        .await;
    let open = Stateid4 {
        seqid: 0,
        ..open_stateid(&r)
    };
    let v4_lock_f = || {
        vec![
            NfsArgop4::Putfh(Putfh4Args {
                object: NfsFh4(Bytes::copy_from_slice(fh.as_bytes())),
            }),
            v4_lock(open, v4.clientid, 50, 1, true),
        ]
    };
    let r = v4.seq(v4_lock_f()).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_GRACE, "{r:?}");
    tokio::time::sleep(Duration::from_millis(3100)).await;
    v4.ok(v4_lock_f()).await;
    assert_eq!(nlm_lock(&c, reclaim("host-a", true)).await, grace);
    assert_eq!(nlm_lock(&c, reclaim("host-b", false)).await, DENIED);
    // host-a reclaimed, so it is on record again: a second restart
    // notifies it too.
    let old = std::sync::Arc::downgrade(srv.storage());
    srv.stop();
    drop((c, v4));
    for _ in 0..200 {
        if old.upgrade().is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let srv = nfs_server::start(cfg()).await.unwrap();
    let note = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a second SM_NOTIFY within 10 s")
        .unwrap();
    assert!(note.state > state2);
    srv.stop();
}

async fn nsm_stat(c: &Client) -> i32 {
    let a = SmNameArgs {
        mon_name: Bounded(Bytes::from_static(b"x")),
    };
    let r: SmStatRes = c.call(SM_PROGRAM, SM_V1, 1, &a).await.unwrap();
    r.state
}

async fn nlm_lock(c: &Client, a: Nlm4LockArgs) -> Nlm4Stats {
    let r: Nlm4Res = c.call(NLM_PROGRAM, NLM_V4, 2, &a).await.unwrap();
    r.stat
}

type Granted = tokio::sync::mpsc::UnboundedReceiver<Nlm4TestArgs>;

/// A server whose GRANTED calls reach a fake client lock manager, with
/// one file "f": the client, the file's handle, the GRANTED calls and the
/// lock manager's answer (an `Nlm4Stats` value).
async fn with_lockd(
    tag: &str,
    limits: NlmLimits,
) -> (
    TempDir,
    nfs_server::RunningServer,
    Client,
    NfsFh3,
    Granted,
    Arc<AtomicU32>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let answer = Arc::new(AtomicU32::new(0));
    let stat = Arc::clone(&answer);
    let (lockd_port, lockd) = fake_host(NLM_PROGRAM, 4, move |proc_, args| match proc_ {
        5 => {
            let a: Nlm4TestArgs = xdr::from_slice(args)?;
            let cookie = a.cookie.clone();
            let _ = tx.send(a);
            let stat = Nlm4Stats(stat.load(std::sync::atomic::Ordering::SeqCst));
            Ok(xdr::to_xdr_buf(&Nlm4Res { cookie, stat }))
        }
        _ => Err(oncrpc::ServiceError::ProcUnavail),
    })
    .await;
    let dir = TempDir::new(tag);
    let mut cfg = nfs_server::ServerConfig::new(dir.path());
    cfg.set_squash(nfs_server::exports::Squash::None);
    cfg.nfs_addr = "127.0.0.1:0".parse().unwrap();
    cfg.mount_addr = None;
    cfg.nlm_limits = limits;
    cfg.sm_notify_port = lockd_port;
    let srv = nfs_server::start(cfg).await.unwrap();
    let c = Client::connect(srv.nfs_addr()).await;
    let root = c.root(dir.path()).await;
    let fh = fh_of(c.create(&root, "f").await);
    (dir, srv, c, fh, rx, answer, lockd)
}

fn lock_args(l: Nlm4Lock, block: bool, ck: &'static [u8]) -> Nlm4LockArgs {
    Nlm4LockArgs {
        cookie: Bounded(Bytes::from_static(ck)),
        block,
        exclusive: true,
        alock: l,
        reclaim: false,
        state: 1,
    }
}

async fn cancel(c: &Client, l: Nlm4Lock) -> Nlm4Stats {
    let a = Nlm4CancArgs {
        cookie: cookie(),
        block: true,
        exclusive: true,
        alock: l,
    };
    let r: Nlm4Res = c.call(NLM_PROGRAM, NLM_V4, 3, &a).await.unwrap();
    r.stat
}

async fn next_granted(rx: &mut Granted) -> Nlm4TestArgs {
    tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("GRANTED within 5 s")
        .unwrap()
}

/// Whether the range is free for another owner within `ms` milliseconds.
async fn free_within(c: &Client, fh: &NfsFh3, off: u64, len: u64, ms: u64) -> bool {
    for _ in 0..ms / 50 {
        let r = test(c, alock("probe", 99, fh, off, len), true).await;
        if matches!(r, Nlm4TestReply::Other(GRANTED)) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// XNFS NLM "NLM_LOCK" with `block` and "NLM_GRANTED", "NLM_CANCEL"
/// (RFC 1813 Appendix II): a blocking LOCK that conflicts answers
/// NLM4_BLOCKED; when the holder unlocks, the lock is taken for the
/// waiter and its host's lock manager (found through its rpcbind) gets
/// GRANTED with the LOCK's cookie and lock; a cancelled waiter gets
/// nothing; a GRANTED the client refuses releases the lock again.
#[tokio::test]
async fn blocking_lock_waits_and_is_granted_by_callback() {
    let (_d, _srv, c, fh, mut rx, answer, _lockd) =
        with_lockd("nlm-block", NlmLimits::default()).await;
    let blocked = Nlm4Stats::NLM4_BLOCKED;
    assert_eq!(lock(&c, alock("a", 1, &fh, 0, 100), true).await, GRANTED);
    let b = lock_args(alock("b", 7, &fh, 0, 10), true, b"wait-b");
    assert_eq!(nlm_lock(&c, b.clone()).await, blocked);
    // Sent again while it waits (the Linux client polls): still one waiter.
    assert_eq!(nlm_lock(&c, b.clone()).await, blocked);
    let cc = lock_args(alock("c", 8, &fh, 50, 10), true, b"wait-c");
    assert_eq!(nlm_lock(&c, cc).await, blocked);
    assert_eq!(cancel(&c, alock("c", 8, &fh, 50, 10)).await, GRANTED);
    // Without `block` a conflict is still NLM4_DENIED.
    let d = lock_args(alock("d", 9, &fh, 20, 1), false, b"no-wait");
    assert_eq!(nlm_lock(&c, d).await, DENIED);
    assert!(rx.try_recv().is_err(), "no GRANTED while the holder holds");
    assert_eq!(unlock(&c, alock("a", 1, &fh, 0, 100)).await, GRANTED);
    let g = next_granted(&mut rx).await;
    assert_eq!(g.cookie, b.cookie, "GRANTED echoes the LOCK's cookie");
    assert_eq!((g.alock.svid, g.exclusive), (7, true));
    assert_eq!(g.alock.caller_name.0, Bytes::from_static(b"b"));
    // b holds 0-10 now; c's cancelled range 50-60 was not taken.
    match test(&c, alock("e", 1, &fh, 0, 1), true).await {
        Nlm4TestReply::Denied(h) => assert_eq!(h.svid, 7),
        other => panic!("b should hold the lock: {other:?}"),
    }
    assert!(free_within(&c, &fh, 50, 10, 100).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(rx.try_recv().is_err(), "no GRANTED for the cancelled LOCK");
    // A waiter whose client no longer wants the lock (GRANTED answered
    // NLM4_DENIED): the lock goes again.
    answer.store(
        Nlm4Stats::NLM4_DENIED.0,
        std::sync::atomic::Ordering::SeqCst,
    );
    let f = lock_args(alock("f", 3, &fh, 5, 1), true, b"wait-f");
    assert_eq!(nlm_lock(&c, f).await, blocked);
    assert_eq!(unlock(&c, alock("b", 7, &fh, 0, 10)).await, GRANTED);
    assert_eq!(next_granted(&mut rx).await.alock.svid, 3);
    assert!(
        free_within(&c, &fh, 0, 100, 2000).await,
        "refused grant released"
    );
}

/// RFC 8881 §9.5 with XNFS NLM "NLM_GRANTED": an NLM LOCK blocked by an
/// NFSv4 lock is granted (and its host called back) once the NFSv4 client
/// unlocks with LOCKU.
#[tokio::test]
async fn nlm_waiter_is_granted_when_the_nfsv4_lock_goes() {
    let (dir, srv, c, fh, mut rx, _answer, _lockd) =
        with_lockd("nlm-block-v4", NlmLimits::default()).await;
    let root = c.root(dir.path()).await;
    let v4 = v4_client(&srv, "v4-holder").await;
    let put_root = NfsArgop4::Putfh(Putfh4Args {
        object: NfsFh4(Bytes::copy_from_slice(root.as_bytes())),
    });
    let r = v4
        .ok(vec![put_root, open_create(v4.clientid, "f", 3, 0)])
        .await;
    let open = Stateid4 {
        seqid: 0,
        ..open_stateid(&r)
    };
    let put_file = NfsArgop4::Putfh(Putfh4Args {
        object: NfsFh4(Bytes::copy_from_slice(fh.as_bytes())),
    });
    let r = v4
        .ok(vec![
            put_file.clone(),
            v4_lock(open, v4.clientid, 0, 10, true),
        ])
        .await;
    let NfsResop4::Lock(LockRes4::Ok(lsid)) = r[2].clone() else {
        panic!("LOCK: {r:?}")
    };
    let b = lock_args(alock("b", 4, &fh, 0, 10), true, b"wait-v4");
    assert_eq!(nlm_lock(&c, b).await, Nlm4Stats::NLM4_BLOCKED);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(rx.try_recv().is_err(), "no GRANTED while NFSv4 holds it");
    v4.ok(vec![
        put_file,
        NfsArgop4::Locku(Locku4Args {
            locktype: NfsLockType4::WRITE_LT,
            seqid: 0,
            lock_stateid: lsid,
            offset: 0,
            length: NFS4_UINT64_MAX,
        }),
    ])
    .await;
    let g = next_granted(&mut rx).await;
    assert_eq!(g.alock.svid, 4);
    match test(&c, alock("e", 1, &fh, 0, 1), true).await {
        Nlm4TestReply::Denied(h) => assert_eq!(h.svid, 4),
        other => panic!("the waiter should hold the lock: {other:?}"),
    }
}

/// Bounds on waiting LOCKs (docs/hardening.md): per host and in total;
/// past either NLM4_DENIED_NOLOCKS and a limit trip; a repeated LOCK
/// does not take a second place, and a CANCEL frees its place.
#[tokio::test]
async fn hostile_client_cannot_queue_unbounded_blocked_locks() {
    let limits = NlmLimits {
        blocked: nfs_server::nlm::BlockedLimits {
            max_total: 3,
            max_per_host: 2,
        },
        ..NlmLimits::default()
    };
    let (_d, _srv, c, fh, _rx, _answer, _lockd) = with_lockd("nlm-block-bounds", limits).await;
    let blocked = Nlm4Stats::NLM4_BLOCKED;
    let nolocks = Nlm4Stats::NLM4_DENIED_NOLOCKS;
    assert_eq!(lock(&c, alock("a", 1, &fh, 0, 0), true).await, GRANTED);
    let w = |host: &'static str, svid| lock_args(alock(host, svid, &fh, 0, 1), true, b"w");
    assert_eq!(nlm_lock(&c, w("h", 1)).await, blocked);
    assert_eq!(nlm_lock(&c, w("h", 1)).await, blocked);
    assert_eq!(nlm_lock(&c, w("h", 2)).await, blocked);
    let before = trips("nlm.blocked_per_host");
    assert_eq!(nlm_lock(&c, w("h", 3)).await, nolocks);
    assert!(trips("nlm.blocked_per_host") > before);
    assert_eq!(nlm_lock(&c, w("g", 1)).await, blocked);
    let before = trips("nlm.blocked");
    assert_eq!(nlm_lock(&c, w("k", 1)).await, nolocks);
    assert!(trips("nlm.blocked") > before);
    assert_eq!(cancel(&c, alock("g", 1, &fh, 0, 1)).await, GRANTED);
    assert_eq!(nlm_lock(&c, w("k", 1)).await, blocked);
}
