//! Open and lock state over TCP between clients (RFC 8881 §8, §9): share
//! reservations, byte-range lock conflicts, lease renewal and expiry on
//! the injected clock, and stateid errors.

mod v4_common;

use std::time::Duration;

use bytes::Bytes;
use nfs::v4::session::*;
use nfs::v4::*;
use nfs_server::v4::SessionLimits;
use v4_common::*;
use xdr::{Bounded, FixedOpaque};

fn file(n: &'static str) -> Vec<NfsArgop4> {
    vec![
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Lookup(Lookup4Args { objname: name(n) }),
    ]
}

fn open_existing(
    clientid: u64,
    who: &'static str,
    n: &'static str,
    access: u32,
    deny: u32,
) -> Vec<NfsArgop4> {
    vec![
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Open(Open4Args {
            seqid: 0,
            share_access: access,
            share_deny: deny,
            owner: owner(clientid, who),
            openhow: OpenHow4(None),
            claim: OpenClaim4::Null(name(n)),
        }),
    ]
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
        count: 10,
    })
}

fn lock(
    open: Stateid4,
    cid: u64,
    who: &'static str,
    offset: u64,
    length: u64,
    write: bool,
) -> NfsArgop4 {
    NfsArgop4::Lock(Lock4Args {
        locktype: if write {
            NfsLockType4::WRITE_LT
        } else {
            NfsLockType4::READ_LT
        },
        reclaim: false,
        offset,
        length,
        locker: Locker4::New(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid: open,
            lock_seqid: 0,
            lock_owner: owner(cid, who),
        }),
    })
}

async fn two_clients(tag: &str) -> (Srv, C4, C4) {
    let srv = serve(tag, SessionLimits::default()).await;
    let mut a = C4::connect(&srv).await;
    a.establish("client-a").await;
    let mut b = C4::connect(&srv).await;
    b.establish("client-b").await;
    (srv, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_reservations_conflict_between_clients() {
    let (_srv, a, b) = two_clients("share").await;
    let r = a
        .ok(vec![
            NfsArgop4::Putrootfh(()),
            open_create(
                a.clientid,
                "f",
                OPEN4_SHARE_ACCESS_BOTH,
                OPEN4_SHARE_DENY_WRITE,
            ),
        ])
        .await;
    let sa = open_stateid(&r);
    let r = b
        .seq(open_existing(
            b.clientid,
            "b",
            "f",
            OPEN4_SHARE_ACCESS_WRITE,
            0,
        ))
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_SHARE_DENIED);
    // Reading is not denied; asking to deny the reader's access is.
    b.ok(open_existing(
        b.clientid,
        "b",
        "f",
        OPEN4_SHARE_ACCESS_READ,
        0,
    ))
    .await;
    let r = b
        .seq(open_existing(
            b.clientid,
            "b2",
            "f",
            OPEN4_SHARE_ACCESS_READ,
            OPEN4_SHARE_DENY_READ,
        ))
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_SHARE_DENIED);
    // Writing with the anonymous stateid meets the deny-write: LOCKED.
    let mut ops = file("f");
    ops.push(write(Stateid4::ANONYMOUS, b"x"));
    assert_eq!(b.seq(ops).await.status, Nfsstat4::NFS4ERR_LOCKED);
    // OPEN_DOWNGRADE drops the deny; then B may open for writing.
    let mut ops = file("f");
    ops.push(NfsArgop4::OpenDowngrade(OpenDowngrade4Args {
        open_stateid: sa,
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH,
        share_deny: OPEN4_SHARE_DENY_NONE,
    }));
    let r = a.ok(ops).await;
    let NfsResop4::OpenDowngrade(Res4::Ok(sa2)) = &r[3] else {
        panic!()
    };
    assert_eq!((sa2.other, sa2.seqid), (sa.other, sa.seqid + 1));
    b.ok(open_existing(
        b.clientid,
        "b",
        "f",
        OPEN4_SHARE_ACCESS_WRITE,
        0,
    ))
    .await;
    // Widening by downgrade is refused.
    let mut ops = file("f");
    ops.push(NfsArgop4::OpenDowngrade(OpenDowngrade4Args {
        open_stateid: *sa2,
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH,
        share_deny: OPEN4_SHARE_DENY_BOTH,
    }));
    assert_eq!(a.seq(ops).await.status, Nfsstat4::NFS4ERR_INVAL);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn byte_range_locks_conflict_between_clients() {
    let (_srv, a, b) = two_clients("locks").await;
    let sa = open_stateid(
        &a.ok(vec![
            NfsArgop4::Putrootfh(()),
            open_create(a.clientid, "f", OPEN4_SHARE_ACCESS_BOTH, 0),
        ])
        .await,
    );
    let sb = open_stateid(
        &b.ok(open_existing(
            b.clientid,
            "b",
            "f",
            OPEN4_SHARE_ACCESS_BOTH,
            0,
        ))
        .await,
    );
    let mut ops = file("f");
    ops.push(lock(sa, a.clientid, "lock-a", 0, 100, true));
    let r = a.ok(ops).await;
    let NfsResop4::Lock(LockRes4::Ok(la)) = &r[3] else {
        panic!()
    };
    // B's read lock on 50..60 is denied with A's lock described.
    let mut ops = file("f");
    ops.push(lock(sb, b.clientid, "lock-b", 50, 10, false));
    let r = b.seq(ops).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_DENIED);
    let NfsResop4::Lock(LockRes4::Denied(d)) = &r.resarray[3] else {
        panic!("{r:?}")
    };
    assert_eq!(
        (d.offset, d.length, d.locktype),
        (0, 100, NfsLockType4::WRITE_LT)
    );
    assert_eq!(
        (d.owner.clientid, &d.owner.owner.0[..]),
        (a.clientid, &b"lock-a"[..])
    );
    // LOCKT agrees; beyond the range is free.
    let lockt = |off, len| {
        let mut ops = file("f");
        ops.push(NfsArgop4::Lockt(Lockt4Args {
            locktype: NfsLockType4::WRITE_LT,
            offset: off,
            length: len,
            owner: owner(b.clientid, "lock-b"),
        }));
        ops
    };
    assert_eq!(b.seq(lockt(99, 1)).await.status, Nfsstat4::NFS4ERR_DENIED);
    b.ok(lockt(100, NFS4_UINT64_MAX)).await;
    // A cannot close while holding the lock.
    let mut ops = file("f");
    ops.push(NfsArgop4::Close(Close4Args {
        seqid: 0,
        open_stateid: sa,
    }));
    assert_eq!(
        a.seq(ops.clone()).await.status,
        Nfsstat4::NFS4ERR_LOCKS_HELD
    );
    // LOCKU, and B gets its lock; an old lock stateid is then OLD_STATEID.
    let mut u = file("f");
    u.push(NfsArgop4::Locku(Locku4Args {
        locktype: NfsLockType4::WRITE_LT,
        seqid: 0,
        lock_stateid: *la,
        offset: 0,
        length: NFS4_UINT64_MAX,
    }));
    let r = a.ok(u.clone()).await;
    let NfsResop4::Locku(Res4::Ok(la2)) = &r[3] else {
        panic!()
    };
    assert_eq!(la2.seqid, la.seqid + 1);
    assert_eq!(a.seq(u).await.status, Nfsstat4::NFS4ERR_OLD_STATEID);
    let mut l = file("f");
    l.push(lock(sb, b.clientid, "lock-b", 50, 10, false));
    let r = b.ok(l).await;
    let NfsResop4::Lock(LockRes4::Ok(lb)) = r[3].clone() else {
        panic!()
    };
    // FREE_STATEID of A's now empty lock stateid, then CLOSE.
    let r = a
        .ok(vec![NfsArgop4::FreeStateid(FreeStateid4Args {
            stateid: *la2,
        })])
        .await;
    assert_eq!(r.len(), 2);
    a.ok(ops).await;
    // A lock on a directory, and a zero-length lock.
    let mut l = vec![
        NfsArgop4::Putrootfh(()),
        lock(sb, b.clientid, "x", 0, 1, true),
    ];
    assert_eq!(b.seq(l.clone()).await.status, Nfsstat4::NFS4ERR_ISDIR);
    l = file("f");
    l.push(lock(sb, b.clientid, "lock-b", 0, 0, true));
    assert_eq!(b.seq(l).await.status, Nfsstat4::NFS4ERR_INVAL);
    // B unlocks and closes, as Linux does, then frees its lock stateid
    // (kept after CLOSE until FREE_STATEID, but no longer usable).
    let mut ops = file("f");
    ops.push(NfsArgop4::Locku(Locku4Args {
        locktype: NfsLockType4::READ_LT,
        seqid: 0,
        lock_stateid: lb,
        offset: 0,
        length: NFS4_UINT64_MAX,
    }));
    ops.push(NfsArgop4::Close(Close4Args {
        seqid: 0,
        open_stateid: sb,
    }));
    b.ok(ops).await;
    let mut ops = file("f");
    ops.push(read(Stateid4 { seqid: 0, ..lb }));
    assert_eq!(b.seq(ops).await.status, Nfsstat4::NFS4ERR_BAD_STATEID);
    let free = NfsArgop4::FreeStateid(FreeStateid4Args {
        stateid: Stateid4 { seqid: 0, ..lb },
    });
    b.ok(vec![free.clone()]).await;
    assert_eq!(
        b.seq(vec![free]).await.status,
        Nfsstat4::NFS4ERR_BAD_STATEID
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateids_are_checked() {
    let (_srv, a, b) = two_clients("stateids").await;
    let sa = open_stateid(
        &a.ok(vec![
            NfsArgop4::Putrootfh(()),
            open_create(a.clientid, "f", OPEN4_SHARE_ACCESS_READ, 0),
        ])
        .await,
    );
    let with = |op| {
        let mut ops = file("f");
        ops.push(op);
        ops
    };
    // Read-only open: WRITE is OPENMODE, READ fine, the seqid-0 form too.
    assert_eq!(
        a.seq(with(write(sa, b"x"))).await.status,
        Nfsstat4::NFS4ERR_OPENMODE
    );
    a.ok(with(read(sa))).await;
    a.ok(with(read(Stateid4 { seqid: 0, ..sa }))).await;
    // Upgrading the open bumps the seqid: the old one is OLD_STATEID, a
    // future one BAD_STATEID, another client's BAD_STATEID, a made-up one
    // BAD_STATEID.
    let sa2 = open_stateid(
        &a.ok(open_existing(
            a.clientid,
            "open-owner",
            "f",
            OPEN4_SHARE_ACCESS_BOTH,
            0,
        ))
        .await,
    );
    assert_eq!((sa2.other, sa2.seqid), (sa.other, 2));
    assert_eq!(
        a.seq(with(read(sa))).await.status,
        Nfsstat4::NFS4ERR_OLD_STATEID
    );
    let future = Stateid4 { seqid: 9, ..sa };
    assert_eq!(
        a.seq(with(read(future))).await.status,
        Nfsstat4::NFS4ERR_BAD_STATEID
    );
    assert_eq!(
        b.seq(with(read(sa2))).await.status,
        Nfsstat4::NFS4ERR_BAD_STATEID
    );
    let junk = Stateid4 {
        seqid: 1,
        other: FixedOpaque([0x42; 12]),
    };
    assert_eq!(
        a.seq(with(read(junk))).await.status,
        Nfsstat4::NFS4ERR_BAD_STATEID
    );
    assert_eq!(
        a.seq(with(read(Stateid4::INVALID))).await.status,
        Nfsstat4::NFS4ERR_BAD_STATEID
    );
    a.ok(with(write(sa2, b"hello"))).await;
    // A stateid used on another file is BAD_STATEID.
    a.ok(vec![
        NfsArgop4::Putrootfh(()),
        open_create(a.clientid, "g", OPEN4_SHARE_ACCESS_BOTH, 0),
    ])
    .await;
    let mut ops = file("g");
    ops.push(read(sa2));
    assert_eq!(a.seq(ops).await.status, Nfsstat4::NFS4ERR_BAD_STATEID);
    // TEST_STATEID reports each.
    let r = a
        .ok(vec![NfsArgop4::TestStateid(TestStateid4Args {
            stateids: Bounded(vec![sa2, sa, junk, Stateid4::ANONYMOUS]),
        })])
        .await;
    let NfsResop4::TestStateid(Res4::Ok(t)) = &r[1] else {
        panic!()
    };
    assert_eq!(
        t.status_codes.0,
        [
            Nfsstat4::NFS4_OK,
            Nfsstat4::NFS4ERR_OLD_STATEID,
            Nfsstat4::NFS4ERR_BAD_STATEID,
            Nfsstat4::NFS4ERR_BAD_STATEID
        ]
    );
    // An open cannot be freed; after CLOSE its stateid is gone.
    assert_eq!(
        a.seq(vec![NfsArgop4::FreeStateid(FreeStateid4Args {
            stateid: sa2
        })])
        .await
        .status,
        Nfsstat4::NFS4ERR_LOCKS_HELD
    );
    let r = a
        .ok(with(NfsArgop4::Close(Close4Args {
            seqid: 0,
            open_stateid: sa2,
        })))
        .await;
    assert!(matches!(r[3], NfsResop4::Close(Res4::Ok(s)) if s == Stateid4::INVALID));
    assert_eq!(
        a.seq(with(read(sa2))).await.status,
        Nfsstat4::NFS4ERR_BAD_STATEID
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequence_renews_the_lease_and_an_expired_client_loses_its_state() {
    let (srv, a, mut b) = two_clients("lease").await;
    let sa = open_stateid(
        &a.ok(vec![
            NfsArgop4::Putrootfh(()),
            open_create(
                a.clientid,
                "f",
                OPEN4_SHARE_ACCESS_BOTH,
                OPEN4_SHARE_DENY_BOTH,
            ),
        ])
        .await,
    );
    let mut l = file("f");
    l.push(lock(sa, a.clientid, "lock-a", 0, NFS4_UINT64_MAX, true));
    a.ok(l).await;
    // Both renew every 60 s for three minutes: nothing expires.
    for _ in 0..3 {
        srv.clock.advance(Duration::from_secs(60));
        a.ok(vec![]).await;
        b.ok(vec![]).await;
    }
    assert_eq!(
        b.seq(open_existing(
            b.clientid,
            "b",
            "f",
            OPEN4_SHARE_ACCESS_READ,
            0
        ))
        .await
        .status,
        Nfsstat4::NFS4ERR_SHARE_DENIED
    );
    // A goes quiet for longer than the 90 s lease; B keeps renewing.
    for _ in 0..2 {
        srv.clock.advance(Duration::from_secs(50));
        b.ok(vec![]).await;
    }
    // A's share reservation and lock are gone: B opens and locks.
    let sb = open_stateid(
        &b.ok(open_existing(
            b.clientid,
            "b",
            "f",
            OPEN4_SHARE_ACCESS_BOTH,
            0,
        ))
        .await,
    );
    let mut l = file("f");
    l.push(lock(sb, b.clientid, "lock-b", 0, 10, true));
    b.ok(l).await;
    // A's session is gone, its client id stale.
    assert_eq!(a.seq(vec![]).await.status, Nfsstat4::NFS4ERR_BADSESSION);
    let r = a
        .ops(vec![NfsArgop4::CreateSession(C4::create_session_args(
            a.clientid, 2,
        ))])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_STALE_CLIENTID);
    // A comes back as a new client: its old stateid is EXPIRED.
    let mut a2 = C4::connect(&srv).await;
    a2.establish("client-a").await;
    assert_ne!(a2.clientid, a.clientid);
    let r = a2
        .ok(vec![NfsArgop4::TestStateid(TestStateid4Args {
            stateids: Bounded(vec![sa]),
        })])
        .await;
    assert!(
        matches!(&r[1], NfsResop4::TestStateid(Res4::Ok(t)) if t.status_codes.0 == [Nfsstat4::NFS4ERR_EXPIRED])
    );
    let mut ops = file("f");
    ops.push(read(sa));
    assert_eq!(a2.seq(ops).await.status, Nfsstat4::NFS4ERR_EXPIRED);
    // B is still fine; it sent RECLAIM_COMPLETE once (establish), a
    // second is COMPLETE_ALREADY (RFC 8881 §18.51.3).
    let rc = NfsArgop4::ReclaimComplete(ReclaimComplete4Args { one_fs: false });
    assert_eq!(
        b.seq(vec![rc]).await.status,
        Nfsstat4::NFS4ERR_COMPLETE_ALREADY
    );
    b.establish("client-b").await;
}
