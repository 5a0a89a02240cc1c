//! NFSv4.0 (RFC 7530) over TCP: SETCLIENTID/SETCLIENTID_CONFIRM cases,
//! OPEN + OPEN_CONFIRM + WRITE/READ + CLOSE, the open-owner seqid rules
//! with replay, RENEW and lease expiry, RELEASE_LOCKOWNER, and which
//! operation numbers each minor version accepts.

mod v4_common;

use std::time::Duration;

use bytes::Bytes;
use nfs::v4::*;
use nfs_server::v4::SessionLimits;
use v4_common::*;
use xdr::{Bounded, FixedOpaque};

async fn v40(c: &C4, ops: Vec<NfsArgop4>) -> Compound4Res {
    c.compound(&Compound4Args {
        tag: Bytes::from_static(b"v40"),
        minorversion: 0,
        argarray: ops,
    })
    .await
}

fn setclientid(id: &'static str, verifier: u8) -> NfsArgop4 {
    NfsArgop4::Setclientid(Setclientid4Args {
        client: NfsClientId4 {
            verifier: FixedOpaque([verifier; 8]),
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
    })
}

fn confirm(clientid: u64, k: [u8; 8]) -> NfsArgop4 {
    NfsArgop4::SetclientidConfirm(SetclientidConfirm4Args {
        clientid,
        setclientid_confirm: FixedOpaque(k),
    })
}

async fn set(c: &C4, id: &'static str, verifier: u8) -> Setclientid4ResOk {
    match &v40(c, vec![setclientid(id, verifier)]).await.resarray[..] {
        [NfsResop4::Setclientid(Setclientid4Res::Ok(ok))] => ok.clone(),
        r => panic!("{r:?}"),
    }
}

async fn status(c: &C4, ops: Vec<NfsArgop4>) -> Nfsstat4 {
    v40(c, ops).await.status
}

/// SETCLIENTID then SETCLIENTID_CONFIRM; the confirmed client id.
async fn establish(c: &C4, id: &'static str) -> u64 {
    let ok = set(c, id, 1).await;
    let s = status(c, vec![confirm(ok.clientid, ok.setclientid_confirm.0)]).await;
    assert_eq!(s, Nfsstat4::NFS4_OK);
    ok.clientid
}

fn renew(clientid: u64) -> NfsArgop4 {
    NfsArgop4::Renew(Renew4Args { clientid })
}

fn open(clientid: u64, seqid: u32, file: &'static str) -> NfsArgop4 {
    match open_create(
        clientid,
        file,
        OPEN4_SHARE_ACCESS_BOTH,
        OPEN4_SHARE_DENY_NONE,
    ) {
        NfsArgop4::Open(mut a) => {
            a.seqid = seqid;
            NfsArgop4::Open(a)
        }
        _ => unreachable!(),
    }
}

fn open_res(r: &Compound4Res) -> Open4ResOk {
    r.resarray
        .iter()
        .find_map(|x| match x {
            NfsResop4::Open(Res4::Ok(o)) => Some(o.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{r:?}"))
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

fn write(sid: Stateid4, data: &'static [u8]) -> NfsArgop4 {
    NfsArgop4::Write(Write4Args {
        stateid: sid,
        offset: 0,
        stable: StableHow4::FILE_SYNC4,
        data: xdr::DdpOpaque(Bytes::from_static(data)),
    })
}

fn read(sid: Stateid4) -> NfsArgop4 {
    NfsArgop4::Read(Read4Args {
        stateid: sid,
        offset: 0,
        count: 100,
    })
}

fn close(seqid: u32, sid: Stateid4) -> NfsArgop4 {
    NfsArgop4::Close(Close4Args {
        seqid,
        open_stateid: sid,
    })
}

fn open_confirm(sid: Stateid4, seqid: u32) -> NfsArgop4 {
    NfsArgop4::OpenConfirm(OpenConfirm4Args {
        open_stateid: sid,
        seqid,
    })
}

/// RFC 7530 §16.33.5 and §16.34.4: a new client, a retried confirmation,
/// a wrong verifier, another principal, a callback update and a client
/// reboot.
#[tokio::test]
async fn setclientid_and_confirm_cases() {
    let srv = serve("v40-scid", SessionLimits::default()).await;
    let c = C4::connect(&srv).await;
    let ok = set(&c, "host-a", 1).await;
    // Unconfirmed: not usable yet.
    assert_eq!(
        status(&c, vec![renew(ok.clientid)]).await,
        Nfsstat4::NFS4ERR_STALE_CLIENTID
    );
    assert_eq!(
        status(&c, vec![confirm(ok.clientid, [9; 8])]).await,
        Nfsstat4::NFS4ERR_STALE_CLIENTID
    );
    let k = ok.setclientid_confirm.0;
    assert_eq!(
        status(&c, vec![confirm(ok.clientid, k)]).await,
        Nfsstat4::NFS4_OK
    );
    // A retry of the confirmation is answered the same.
    assert_eq!(
        status(&c, vec![confirm(ok.clientid, k)]).await,
        Nfsstat4::NFS4_OK
    );
    assert_eq!(
        status(&c, vec![renew(ok.clientid)]).await,
        Nfsstat4::NFS4_OK
    );

    // Another principal cannot take the identity while its lease runs.
    let mut other = C4::connect(&srv).await;
    other.cred = sys_cred(srv.uid + 1);
    let r = v40(&other, vec![setclientid("host-a", 1)]).await;
    assert!(
        matches!(&r.resarray[..], [NfsResop4::Setclientid(Setclientid4Res::ClidInuse(a))] if &a.netid.0[..] == b"tcp"),
        "{r:?}"
    );
    assert_eq!(
        status(&other, vec![confirm(ok.clientid, k)]).await,
        Nfsstat4::NFS4ERR_CLID_INUSE
    );

    // Same verifier: a callback update keeps the client id.
    let upd = set(&c, "host-a", 1).await;
    assert_eq!(upd.clientid, ok.clientid);
    assert_ne!(upd.setclientid_confirm, ok.setclientid_confirm);
    assert_eq!(
        status(&c, vec![confirm(upd.clientid, upd.setclientid_confirm.0)]).await,
        Nfsstat4::NFS4_OK
    );

    // New verifier: the client rebooted; confirming the new id drops the
    // old one and its state.
    let root = v40(
        &c,
        vec![NfsArgop4::Putrootfh(()), open(ok.clientid, 1, "a")],
    )
    .await;
    assert_eq!(root.status, Nfsstat4::NFS4_OK);
    let reboot = set(&c, "host-a", 2).await;
    assert_ne!(reboot.clientid, ok.clientid);
    // Until confirmed, the old record still works.
    assert_eq!(
        status(&c, vec![renew(ok.clientid)]).await,
        Nfsstat4::NFS4_OK
    );
    assert_eq!(
        status(
            &c,
            vec![confirm(reboot.clientid, reboot.setclientid_confirm.0)]
        )
        .await,
        Nfsstat4::NFS4_OK
    );
    assert_eq!(
        status(&c, vec![renew(ok.clientid)]).await,
        Nfsstat4::NFS4ERR_STALE_CLIENTID
    );
    assert_eq!(
        status(&c, vec![renew(reboot.clientid)]).await,
        Nfsstat4::NFS4_OK
    );
}

/// RFC 7530 §9.1.11, §16.18: a new open owner's OPEN asks for
/// OPEN_CONFIRM; its stateid works only after it; then WRITE, READ and
/// CLOSE with the owner's next seqids.
#[tokio::test]
async fn open_confirm_write_read_close() {
    let srv = serve("v40-open", SessionLimits::default()).await;
    let c = C4::connect(&srv).await;
    let id = establish(&c, "host-b").await;
    let r = v40(&c, vec![NfsArgop4::Putrootfh(()), open(id, 10, "f")]).await;
    let o = open_res(&r);
    assert_ne!(o.rflags & OPEN4_RESULT_CONFIRM, 0, "{o:?}");
    assert_eq!(o.delegation, OpenDelegation4::None);
    let unconfirmed = v40(&c, with(put_file("f"), write(o.stateid, b"x"))).await;
    assert_eq!(unconfirmed.status, Nfsstat4::NFS4ERR_BAD_STATEID);
    let r = v40(&c, with(put_file("f"), open_confirm(o.stateid, 11))).await;
    let sid = match &r.resarray[..] {
        [_, _, NfsResop4::OpenConfirm(Res4::Ok(s))] => *s,
        x => panic!("{x:?}"),
    };
    assert_eq!(sid.other, o.stateid.other);
    assert_eq!(sid.seqid, o.stateid.seqid + 1);
    let w = v40(&c, with(put_file("f"), write(sid, b"hello v4.0"))).await;
    assert_eq!(w.status, Nfsstat4::NFS4_OK, "{w:?}");
    let rd = v40(&c, with(put_file("f"), read(sid))).await;
    match &rd.resarray[..] {
        [_, _, NfsResop4::Read(Res4::Ok(d))] => assert_eq!(&d.data.0[..], b"hello v4.0"),
        x => panic!("{x:?}"),
    }
    assert_eq!(
        std::fs::read(srv.dir.path().join("f")).unwrap(),
        b"hello v4.0"
    );
    // RFC 7530 §9.1.3: seqid 0 is not "current" in 4.0.
    let zero = Stateid4 { seqid: 0, ..sid };
    let old = v40(&c, with(put_file("f"), read(zero))).await;
    assert_eq!(old.status, Nfsstat4::NFS4ERR_OLD_STATEID);
    // The confirmed owner opens another file without confirming again.
    let r2 = v40(&c, vec![NfsArgop4::Putrootfh(()), open(id, 12, "g")]).await;
    assert_eq!(open_res(&r2).rflags & OPEN4_RESULT_CONFIRM, 0);
    let cl = v40(&c, with(put_file("f"), close(13, sid))).await;
    assert_eq!(cl.status, Nfsstat4::NFS4_OK, "{cl:?}");
    let gone = v40(&c, with(put_file("f"), read(sid))).await;
    assert_eq!(gone.status, Nfsstat4::NFS4ERR_BAD_STATEID);
}

/// RFC 7530 §9.1.7: the owner's last seqid again replays its last reply
/// (the open is not taken twice), a seqid neither last nor next is
/// NFS4ERR_BAD_SEQID, and a reply of BAD_SEQID does not move it on.
#[tokio::test]
async fn seqid_replay_and_bad_seqid() {
    let srv = serve("v40-seq", SessionLimits::default()).await;
    let c = C4::connect(&srv).await;
    let id = establish(&c, "host-c").await;
    let first = v40(&c, vec![NfsArgop4::Putrootfh(()), open(id, 1, "f")]).await;
    let o = open_res(&first);
    let again = v40(&c, vec![NfsArgop4::Putrootfh(()), open(id, 1, "f")]).await;
    assert_eq!(again.resarray[1], first.resarray[1]);
    let bad = v40(&c, vec![NfsArgop4::Putrootfh(()), open(id, 5, "f")]).await;
    assert_eq!(bad.status, Nfsstat4::NFS4ERR_BAD_SEQID);
    let bad = v40(&c, with(put_file("f"), open_confirm(o.stateid, 7))).await;
    assert_eq!(bad.status, Nfsstat4::NFS4ERR_BAD_SEQID);
    // The stateid was not bumped by the replay: seqid 2 confirms it.
    let r = v40(&c, with(put_file("f"), open_confirm(o.stateid, 2))).await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    match &r.resarray[2] {
        NfsResop4::OpenConfirm(Res4::Ok(s)) => assert_eq!(s.seqid, o.stateid.seqid + 1),
        x => panic!("{x:?}"),
    }
    // A retried OPEN_CONFIRM is replayed too.
    let r2 = v40(&c, with(put_file("f"), open_confirm(o.stateid, 2))).await;
    assert_eq!(r2.resarray[2], r.resarray[2]);
}

/// RFC 7530 §16.29.4, §9.6: RENEW and stateid operations renew the lease;
/// once it ran out the client and its stateids are NFS4ERR_EXPIRED.
#[tokio::test]
async fn renew_keeps_the_lease_and_expiry_ends_it() {
    let limits = SessionLimits {
        lease: Duration::from_secs(10),
        ..SessionLimits::default()
    };
    let srv = serve("v40-lease", limits).await;
    let c = C4::connect(&srv).await;
    let id = establish(&c, "host-d").await;
    let o = open_res(&v40(&c, vec![NfsArgop4::Putrootfh(()), open(id, 1, "f")]).await);
    let r = v40(&c, with(put_file("f"), open_confirm(o.stateid, 2))).await;
    let NfsResop4::OpenConfirm(Res4::Ok(sid)) = r.resarray[2] else {
        panic!("{r:?}")
    };
    for _ in 0..3 {
        srv.clock.advance(Duration::from_secs(7));
        assert_eq!(status(&c, vec![renew(id)]).await, Nfsstat4::NFS4_OK);
    }
    srv.clock.advance(Duration::from_secs(7));
    // A READ with the open stateid renews as well.
    let rd = v40(&c, with(put_file("f"), read(sid))).await;
    assert_eq!(rd.status, Nfsstat4::NFS4_OK);
    srv.clock.advance(Duration::from_secs(11));
    assert_eq!(status(&c, vec![renew(id)]).await, Nfsstat4::NFS4ERR_EXPIRED);
    let rd = v40(&c, with(put_file("f"), read(sid))).await;
    assert_eq!(rd.status, Nfsstat4::NFS4ERR_EXPIRED);
    assert_eq!(
        status(&c, vec![renew(0x1234_5678_0000_0001)]).await,
        Nfsstat4::NFS4ERR_STALE_CLIENTID
    );
}

/// RFC 7530 §16.30.4: RELEASE_LOCKOWNER is refused while the owner holds
/// locks, and frees it once they are unlocked.
#[tokio::test]
async fn release_lockowner_after_unlock() {
    let srv = serve("v40-rlo", SessionLimits::default()).await;
    let c = C4::connect(&srv).await;
    let id = establish(&c, "host-e").await;
    let o = open_res(&v40(&c, vec![NfsArgop4::Putrootfh(()), open(id, 1, "f")]).await);
    let r = v40(&c, with(put_file("f"), open_confirm(o.stateid, 2))).await;
    let NfsResop4::OpenConfirm(Res4::Ok(sid)) = r.resarray[2] else {
        panic!("{r:?}")
    };
    let lock = NfsArgop4::Lock(Lock4Args {
        locktype: NfsLockType4::WRITE_LT,
        reclaim: false,
        offset: 0,
        length: 10,
        locker: Locker4::New(OpenToLockOwner4 {
            open_seqid: 3,
            open_stateid: sid,
            lock_seqid: 0,
            lock_owner: owner(id, "lock-owner"),
        }),
    });
    let r = v40(&c, with(put_file("f"), lock)).await;
    let NfsResop4::Lock(LockRes4::Ok(lsid)) = r.resarray[2] else {
        panic!("{r:?}")
    };
    let release = NfsArgop4::ReleaseLockowner(ReleaseLockowner4Args {
        lock_owner: owner(id, "lock-owner"),
    });
    assert_eq!(
        status(&c, vec![release.clone()]).await,
        Nfsstat4::NFS4ERR_LOCKS_HELD
    );
    let unlock = |seqid| {
        NfsArgop4::Locku(Locku4Args {
            locktype: NfsLockType4::WRITE_LT,
            seqid,
            lock_stateid: lsid,
            offset: 0,
            length: 10,
        })
    };
    // The lock owner's sequence started at lock_seqid 0.
    let bad = v40(&c, with(put_file("f"), unlock(5))).await;
    assert_eq!(bad.status, Nfsstat4::NFS4ERR_BAD_SEQID);
    let u = v40(&c, with(put_file("f"), unlock(1))).await;
    assert_eq!(u.status, Nfsstat4::NFS4_OK, "{u:?}");
    assert_eq!(status(&c, vec![release]).await, Nfsstat4::NFS4_OK);
    let after = v40(&c, with(put_file("f"), unlock(2))).await;
    assert_eq!(after.status, Nfsstat4::NFS4ERR_BAD_STATEID);
}

/// RFC 7530 §15.2: in a minor version 0 COMPOUND the 4.1 and 4.2
/// operations are OP_ILLEGAL; RFC 8881 §17: in 4.1 the 4.0-only ones are
/// NOTSUPP; minor version 3 is MINOR_VERS_MISMATCH; 4.0 needs no session.
#[tokio::test]
async fn operations_per_minor_version() {
    let srv = serve("v40-ops", SessionLimits::default()).await;
    let c = C4::connect(&srv).await;
    let r = v40(
        &c,
        vec![NfsArgop4::ExchangeId(C4::exchange_id_args("x", 1))],
    )
    .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_OP_ILLEGAL);
    assert_eq!(r.resarray[0].opnum(), Opnum4::OP_ILLEGAL);
    let r = v40(
        &c,
        vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Getfh(()),
            NfsArgop4::Lookup(Lookup4Args {
                objname: name("nope"),
            }),
        ],
    )
    .await;
    assert_eq!(r.resarray.len(), 3);
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NOENT);
    let r = c.ops(vec![setclientid("y", 1)]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NOTSUPP);
    let r = c
        .compound(&Compound4Args {
            tag: Bytes::new(),
            minorversion: 3,
            argarray: vec![NfsArgop4::Putrootfh(())],
        })
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH);
    assert!(r.resarray.is_empty());
}

/// What a 4.0 client's callback service saw.
#[derive(Debug)]
enum CbSeen {
    Null,
    Compound(nfs::v4::cb::CbCompound4Args, oncrpc::msg::Credential),
}

/// A 4.0 client's callback service (RFC 7530 §15 of the callback
/// program): answers CB_NULL and CB_RECALL, reports both.
struct Cb40 {
    program: u32,
    seen: tokio::sync::mpsc::UnboundedSender<CbSeen>,
    /// CB_COMPOUND fails (SYSTEM_ERR): a broken callback service.
    fail: bool,
}

impl oncrpc::RpcService for Cb40 {
    fn program(&self) -> u32 {
        self.program
    }
    fn versions(&self) -> std::ops::RangeInclusive<u32> {
        1..=1
    }
    async fn call(
        &self,
        ctx: oncrpc::CallContext,
        args: Bytes,
    ) -> Result<xdr::XdrBuf, oncrpc::ServiceError> {
        use nfs::v4::cb::*;
        match ctx.proc_ {
            CB_NULL => {
                let _ = self.seen.send(CbSeen::Null);
                Ok(xdr::XdrBuf::new())
            }
            CB_COMPOUND if self.fail => Err(oncrpc::ServiceError::SystemErr("broken")),
            CB_COMPOUND => {
                let a: CbCompound4Args =
                    xdr::from_slice(&args).map_err(oncrpc::ServiceError::GarbageArgs)?;
                let res = a
                    .argarray
                    .iter()
                    .map(|op| match op {
                        NfsCbArgop4::Recall(_) => NfsCbResop4::Recall(Nfsstat4::NFS4_OK),
                        _ => NfsCbResop4::Other(0, Nfsstat4::NFS4ERR_NOTSUPP),
                    })
                    .collect();
                let tag = a.tag.clone();
                let _ = self.seen.send(CbSeen::Compound(a, ctx.credential.clone()));
                Ok(xdr::to_xdr_buf(&CbCompound4Res {
                    status: Nfsstat4::NFS4_OK,
                    tag: Bounded(tag),
                    resarray: Bounded(res),
                }))
            }
            _ => Err(oncrpc::ServiceError::ProcUnavail),
        }
    }
}

/// A client's callback service ([`Cb40`] for `program`, failing every
/// call if `fail`) on a loopback port: the port and what it sees.
async fn cb40_listener(
    program: u32,
    fail: bool,
) -> (u16, tokio::sync::mpsc::UnboundedReceiver<CbSeen>) {
    let (seen, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut cbs = oncrpc::Server::new();
    cbs.register(Cb40 {
        program,
        seen,
        fail,
    });
    let listener = oncrpc::tcp::TcpServer::bind(
        "127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap(),
        std::sync::Arc::new(cbs),
        oncrpc::tcp::TcpConfig::default(),
    )
    .await
    .unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.spawn();
    (port, rx)
}

/// RFC 7530 §10.2.1, §16.33, §16.2 (callback program): after
/// SETCLIENTID_CONFIRM the server probes the client's callback address
/// (r_netid "tcp", r_addr, cb_program) with CB_NULL on a connection of its
/// own, grants a write delegation, and recalls it for another client's
/// conflicting OPEN with CB_COMPOUND minor version 0 carrying the
/// client's callback_ident and CB_RECALL (no CB_SEQUENCE); the other OPEN
/// is NFS4ERR_DELAY until DELEGRETURN. A client whose callback address
/// does not answer gets no delegation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callbacks_go_to_the_setclientid_address() {
    const PROG: u32 = 0x4000_0123;
    let srv = serve("v40-cb", SessionLimits::default()).await;
    let (port, mut seen) = cb40_listener(PROG, false).await;
    async fn next(rx: &mut tokio::sync::mpsc::UnboundedReceiver<CbSeen>) -> CbSeen {
        tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("a callback within 10 s")
            .unwrap()
    }

    let c = C4::connect(&srv).await;
    let mut sc = setclientid("host-cb", 1);
    if let NfsArgop4::Setclientid(a) = &mut sc {
        a.callback.program = PROG;
        a.callback.location.addr = Bounded(Bytes::from(format!(
            "127.0.0.1.{}.{}",
            port >> 8,
            port & 0xff
        )));
        a.callback_ident = 77;
    }
    let ok = match &v40(&c, vec![sc]).await.resarray[..] {
        [NfsResop4::Setclientid(Setclientid4Res::Ok(ok))] => ok.clone(),
        r => panic!("{r:?}"),
    };
    let id = ok.clientid;
    let s = status(&c, vec![confirm(id, ok.setclientid_confirm.0)]).await;
    assert_eq!(s, Nfsstat4::NFS4_OK);
    // The path is probed after the confirmation, before the OPEN gets a
    // delegation.
    assert!(
        matches!(next(&mut seen).await, CbSeen::Null),
        "CB_NULL first"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = v40(
        &c,
        vec![
            NfsArgop4::Putrootfh(()),
            open(id, 10, "d"),
            NfsArgop4::Getfh(()),
        ],
    )
    .await;
    let o = open_res(&r);
    let OpenDelegation4::Write(dsid, ..) = o.delegation else {
        panic!("write delegation expected: {o:?}")
    };
    let fh = match r.resarray.last() {
        Some(NfsResop4::Getfh(Res4::Ok(g))) => g.object.clone(),
        x => panic!("{x:?}"),
    };

    // Another client's conflicting OPEN recalls the delegation.
    let mut other = C4::connect(&srv).await;
    other.establish("other-41").await;
    let read = open_create(other.clientid, "d", OPEN4_SHARE_ACCESS_READ, 0);
    let r = other
        .seq(vec![NfsArgop4::Putrootfh(()), read.clone()])
        .await;
    assert_eq!(last_status(&r), Nfsstat4::NFS4ERR_DELAY);
    let CbSeen::Compound(cb, cred) = next(&mut seen).await else {
        panic!("CB_COMPOUND expected")
    };
    assert_eq!((cb.minorversion, cb.callback_ident), (0, 77));
    match &cb.argarray[..] {
        [nfs::v4::cb::NfsCbArgop4::Recall(r)] => assert_eq!((r.stateid, &r.fh), (dsid, &fh)),
        x => panic!("CB_RECALL alone expected: {x:?}"),
    }
    assert!(matches!(cred, oncrpc::msg::Credential::Sys(_)), "{cred:?}");

    // DELEGRETURN (op 8, not modelled by NfsArgop4), then the OPEN works.
    let mut b = bytes::BytesMut::new();
    {
        use xdr::Encode;
        Bytes::new().encode(&mut b);
        0u32.encode(&mut b);
        2u32.encode(&mut b);
        NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }).encode(&mut b);
        8u32.encode(&mut b);
        dsid.encode(&mut b);
    }
    let r = c.raw(b.freeze()).await;
    assert_eq!(
        xdr::from_slice::<Nfsstat4>(&r[..4]).unwrap(),
        Nfsstat4::NFS4_OK
    );
    let r = other.seq(vec![NfsArgop4::Putrootfh(()), read]).await;
    assert_eq!(last_status(&r), Nfsstat4::NFS4_OK, "{r:?}");

    // A client whose callback address does not answer: no delegation.
    let dead = establish(&c, "host-dead").await;
    let r = v40(&c, vec![NfsArgop4::Putrootfh(()), open(dead, 1, "e")]).await;
    assert_eq!(open_res(&r).delegation, OpenDelegation4::None);
}

/// RFC 7530 §16.29.4 (RENEW): a client holding a delegation whose
/// callback path failed gets NFS4ERR_CB_PATH_DOWN from RENEW (its lease
/// renewed all the same), as from Linux's nfsd; without delegations, or
/// with a working path, RENEW is NFS4_OK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_reports_a_failed_callback_path_of_a_delegation_holder() {
    const PROG: u32 = 0x4000_0124;
    let srv = serve("v40-cbdown", SessionLimits::default()).await;
    let (port, mut seen) = cb40_listener(PROG, true).await;
    let c = C4::connect(&srv).await;
    let mut sc = setclientid("host-cbdown", 1);
    if let NfsArgop4::Setclientid(a) = &mut sc {
        a.callback.program = PROG;
        a.callback.location.addr = Bounded(Bytes::from(format!(
            "127.0.0.1.{}.{}",
            port >> 8,
            port & 0xff
        )));
    }
    let ok = match &v40(&c, vec![sc]).await.resarray[..] {
        [NfsResop4::Setclientid(Setclientid4Res::Ok(ok))] => ok.clone(),
        r => panic!("{r:?}"),
    };
    let id = ok.clientid;
    assert_eq!(
        status(&c, vec![confirm(id, ok.setclientid_confirm.0)]).await,
        Nfsstat4::NFS4_OK
    );
    let null = tokio::time::timeout(Duration::from_secs(10), seen.recv()).await;
    assert!(matches!(null, Ok(Some(CbSeen::Null))), "CB_NULL probe");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = v40(&c, vec![NfsArgop4::Putrootfh(()), open(id, 10, "d")]).await;
    assert!(
        matches!(open_res(&r).delegation, OpenDelegation4::Write(..)),
        "{r:?}"
    );
    assert_eq!(status(&c, vec![renew(id)]).await, Nfsstat4::NFS4_OK);

    // Another client's OPEN makes the server call back; the call fails.
    let mut other = C4::connect(&srv).await;
    other.establish("other-cbdown").await;
    let read = open_create(other.clientid, "d", OPEN4_SHARE_ACCESS_READ, 0);
    let r = other.seq(vec![NfsArgop4::Putrootfh(()), read]).await;
    assert_eq!(last_status(&r), Nfsstat4::NFS4ERR_DELAY);
    let mut down = false;
    for _ in 0..200 {
        if status(&c, vec![renew(id)]).await == Nfsstat4::NFS4ERR_CB_PATH_DOWN {
            down = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(down, "RENEW reports the failed callback path");
    // A client without delegations: NFS4_OK.
    let plain = establish(&c, "host-plain").await;
    assert_eq!(status(&c, vec![renew(plain)]).await, Nfsstat4::NFS4_OK);
}
