//! The principal-dependent cases of EXCHANGE_ID and CREATE_SESSION
//! (RFC 8881 §18.35.4 cases 2, 3, 5 and 9; §18.36.4), over TCP with
//! scripted clients whose credentials differ: a client id is bound to
//! the principal (AUTH_SYS uid, gid and groups; AUTH_NONE) that made it.

mod v4_common;

use bytes::Bytes;
use nfs::v4::session::*;
use nfs::v4::*;
use nfs_server::v4::SessionLimits;
use oncrpc::msg::{AuthSys, OpaqueAuth};
use v4_common::*;
use xdr::FixedOpaque;

/// EXCHANGE_ID for `owner` with `verifier` and extra `flags`.
async fn exchange(c: &C4, owner: &str, verifier: u8, flags: u32) -> Res4<ExchangeId4ResOk> {
    let mut a = C4::exchange_id_args(owner, verifier);
    a.flags |= flags;
    let r = c.ops(vec![NfsArgop4::ExchangeId(a)]).await;
    match r.resarray.into_iter().next() {
        Some(NfsResop4::ExchangeId(x)) => x,
        other => panic!("EXCHANGE_ID: {other:?}"),
    }
}

fn exchange_ok(r: Res4<ExchangeId4ResOk>) -> ExchangeId4ResOk {
    match r {
        Res4::Ok(x) => x,
        Res4::Err(e) => panic!("EXCHANGE_ID: {e:?}"),
    }
}

async fn create_session(c: &C4, clientid: u64, sequence: u32) -> Res4<CreateSession4ResOk> {
    let r = c
        .ops(vec![NfsArgop4::CreateSession(C4::create_session_args(
            clientid, sequence,
        ))])
        .await;
    match r.resarray.into_iter().next() {
        Some(NfsResop4::CreateSession(x)) => x,
        other => panic!("CREATE_SESSION: {other:?}"),
    }
}

/// An AUTH_SYS credential with a machine name and groups of its own.
fn cred(machine: &'static [u8], uid: u32, gids: Vec<u32>) -> OpaqueAuth {
    AuthSys {
        stamp: 99,
        machinename: Bytes::from_static(machine),
        uid,
        gid: uid,
        gids,
    }
    .to_opaque_auth()
}

/// RFC 8881 §18.35.4: a confirmed client with state (a session) cannot
/// be taken over by another principal (case 3: NFS4ERR_CLID_INUSE, for
/// another uid and for AUTH_NONE), nor updated by one (case 9:
/// NFS4ERR_PERM); the same principal from another machine name, with
/// its groups in another order, is the same client (case 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_principal_cannot_take_over_a_client_with_state() {
    let srv = serve("clid-inuse", SessionLimits::default()).await;
    let mut a = C4::connect(&srv).await;
    a.cred = cred(b"host-a", srv.uid, vec![5, 7]);
    a.establish("shared-owner").await;

    let mut b = C4::connect(&srv).await;
    b.cred = sys_cred(srv.uid + 1);
    let r = exchange(&b, "shared-owner", 1, 0).await;
    assert_eq!(r.status(), Nfsstat4::NFS4ERR_CLID_INUSE, "case 3");
    let r = exchange(&b, "shared-owner", 1, EXCHGID4_FLAG_UPD_CONFIRMED_REC_A).await;
    assert_eq!(r.status(), Nfsstat4::NFS4ERR_PERM, "case 9");
    // Case 9 is decided before the verifier (case 8).
    let r = exchange(&b, "shared-owner", 9, EXCHGID4_FLAG_UPD_CONFIRMED_REC_A).await;
    assert_eq!(r.status(), Nfsstat4::NFS4ERR_PERM, "case 9 before 8");
    b.cred = OpaqueAuth::NONE;
    let r = exchange(&b, "shared-owner", 1, 0).await;
    assert_eq!(
        r.status(),
        Nfsstat4::NFS4ERR_CLID_INUSE,
        "AUTH_NONE is another principal"
    );

    // The owner's client is untouched: its session still works.
    a.ok(vec![NfsArgop4::Putrootfh(())]).await;

    let mut a2 = C4::connect(&srv).await;
    a2.cred = cred(b"host-a-renamed", srv.uid, vec![7, 5]);
    let x = exchange_ok(exchange(&a2, "shared-owner", 1, 0).await);
    assert_eq!(x.clientid, a.clientid, "case 2: the same client id");
    assert_ne!(x.flags & EXCHGID4_FLAG_CONFIRMED_R, 0);
    let x = exchange_ok(exchange(&a2, "shared-owner", 1, EXCHGID4_FLAG_UPD_CONFIRMED_REC_A).await);
    assert_eq!(
        x.clientid, a.clientid,
        "case 6: update by the same principal"
    );
}

/// RFC 8881 §18.35.4 case 3 without state: another principal's
/// EXCHANGE_ID replaces a confirmed client that holds nothing, with a new
/// client id; the old one is then NFS4ERR_STALE_CLIENTID. Case 5 (the
/// same principal, a new verifier) also gets a new client id, and the old
/// record lives until the new one is confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_replaced_get_new_client_ids() {
    let srv = serve("clid-replace", SessionLimits::default()).await;
    let mut a = C4::connect(&srv).await;
    a.establish("idle-owner").await;
    let old = a.clientid;
    let r = a
        .ops(vec![NfsArgop4::DestroySession(DestroySession4Args {
            sessionid: FixedOpaque(a.session),
        })])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");

    let mut b = C4::connect(&srv).await;
    b.cred = sys_cred(srv.uid + 1);
    let x = exchange_ok(exchange(&b, "idle-owner", 1, 0).await);
    assert_ne!(x.clientid, old, "a new client id");
    assert_eq!(x.flags & EXCHGID4_FLAG_CONFIRMED_R, 0, "unconfirmed");
    assert_eq!(
        create_session(&a, old, 2).await.status(),
        Nfsstat4::NFS4ERR_STALE_CLIENTID,
        "the replaced client id is gone"
    );
    let s = create_session(&b, x.clientid, x.sequenceid).await;
    assert_eq!(s.status(), Nfsstat4::NFS4_OK);

    // Case 5: b restarts (new verifier) with its session still up.
    let y = exchange_ok(exchange(&b, "idle-owner", 2, 0).await);
    assert_ne!(y.clientid, x.clientid, "case 5: a new client id");
    assert_eq!(y.flags & EXCHGID4_FLAG_CONFIRMED_R, 0);
    let again = exchange_ok(exchange(&b, "idle-owner", 1, 0).await);
    assert_eq!(again.clientid, x.clientid, "the old record lives on");
    assert_ne!(again.flags & EXCHGID4_FLAG_CONFIRMED_R, 0);
}

/// RFC 8881 §18.36.4: CREATE_SESSION for an unconfirmed client id from
/// another principal than its EXCHANGE_ID's is NFS4ERR_CLID_INUSE, and
/// uses up nothing: the right principal then confirms it with the same
/// sequence id. An unknown client id is NFS4ERR_STALE_CLIENTID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_session_must_come_from_the_exchange_id_principal() {
    let srv = serve("clid-cs", SessionLimits::default()).await;
    let a = C4::connect(&srv).await;
    let mut b = C4::connect(&srv).await;
    b.cred = sys_cred(srv.uid + 1);
    let x = exchange_ok(exchange(&a, "cs-owner", 1, 0).await);
    let r = create_session(&b, x.clientid, x.sequenceid).await;
    assert_eq!(r.status(), Nfsstat4::NFS4ERR_CLID_INUSE);
    b.cred = OpaqueAuth::NONE;
    let r = create_session(&b, x.clientid, x.sequenceid).await;
    assert_eq!(r.status(), Nfsstat4::NFS4ERR_CLID_INUSE);
    let r = create_session(&a, x.clientid, x.sequenceid).await;
    assert_eq!(r.status(), Nfsstat4::NFS4_OK, "{r:?}");
    let r = create_session(&a, x.clientid ^ 0xffff, 1).await;
    assert_eq!(r.status(), Nfsstat4::NFS4ERR_STALE_CLIENTID);
}
