use bytes::Bytes;
use nfs::v4::attr::{Bitmap4, FATTR4_CHANGE, FATTR4_SIZE};
use nfs::v4::cb::{CbGetattr4Args, CbRecall4Args, ReferringCallList4};
use xdr::FixedOpaque;

use super::*;

const SESSION: Sessionid4 = FixedOpaque([5; 16]);

fn fh(n: u8) -> NfsFh4 {
    NfsFh4(Bytes::from(vec![n; 24]))
}

fn sid(n: u8) -> Stateid4 {
    Stateid4 {
        seqid: 1,
        other: FixedOpaque([n; 12]),
    }
}

fn seq(session: Sessionid4, slot: u32) -> NfsCbArgop4 {
    NfsCbArgop4::Sequence(CbSequence4Args {
        sessionid: session,
        sequenceid: 1,
        slotid: slot,
        highest_slotid: slot,
        cachethis: false,
        referring_call_lists: Bounded(Vec::<ReferringCallList4>::new()),
    })
}

fn recall(f: NfsFh4, s: Stateid4) -> NfsCbArgop4 {
    NfsCbArgop4::Recall(CbRecall4Args {
        stateid: s,
        truncate: false,
        fh: f,
    })
}

fn run(t: &Delegations, ops: Vec<NfsCbArgop4>) -> CbCompound4Res {
    t.compound(CbCompound4Args {
        tag: Bytes::new(),
        minorversion: 1,
        callback_ident: 0,
        argarray: ops,
    })
}

fn table() -> (Arc<Delegations>, mpsc::UnboundedReceiver<Recall>) {
    let (t, rx) = Delegations::new();
    t.set_session(SESSION);
    (t, rx)
}

#[test]
fn a_recall_of_a_held_delegation_is_answered_and_handed_over_once() {
    let (t, mut rx) = table();
    let d = Delegation {
        stateid: sid(1),
        write: false,
    };
    assert!(t.insert(&fh(1), d, 10, 7));
    assert_eq!(t.get(&fh(1)), Some(d));
    for _ in 0..2 {
        let r = run(&t, vec![seq(SESSION, 0), recall(fh(1), sid(1))]);
        assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    }
    assert_eq!(
        rx.try_recv().unwrap(),
        Recall {
            fh: fh(1),
            deleg: d
        }
    );
    assert!(rx.try_recv().is_err(), "one recall per delegation");
    assert_eq!(t.get(&fh(1)), None, "not used while recalled");
    assert_eq!(t.remove(&fh(1)), Some(d));
}

#[test]
fn a_recall_of_what_is_not_held_is_badhandle_or_bad_stateid() {
    let (t, mut rx) = table();
    let r = run(&t, vec![seq(SESSION, 0), recall(fh(2), sid(2))]);
    assert_eq!(r.status, Nfsstat4::NFS4ERR_BADHANDLE);
    let d = Delegation {
        stateid: sid(2),
        write: true,
    };
    t.insert(&fh(2), d, 0, 0);
    let r = run(&t, vec![seq(SESSION, 0), recall(fh(2), sid(3))]);
    assert_eq!(r.status, Nfsstat4::NFS4ERR_BAD_STATEID);
    assert!(rx.try_recv().is_err());
}

#[test]
fn cb_getattr_reports_the_holders_size_and_a_change_past_the_grant_after_writes() {
    let (t, _rx) = table();
    let d = Delegation {
        stateid: sid(3),
        write: true,
    };
    t.insert(&fh(3), d, 100, 40);
    let ask = || {
        let r = run(
            &t,
            vec![
                seq(SESSION, 1),
                NfsCbArgop4::Getattr(CbGetattr4Args {
                    fh: fh(3),
                    attr_request: Bitmap4::from_bits(&[FATTR4_CHANGE, FATTR4_SIZE]),
                }),
            ],
        );
        match &r.resarray.0[..] {
            [_, NfsCbResop4::Getattr(Res4::Ok(f))] => {
                let a = FileAttrs::from_fattr4(f).unwrap();
                (a.change.unwrap(), a.size.unwrap())
            }
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(ask(), (40, 100));
    t.wrote(&fh(3), 4096, false);
    t.wrote(&fh(3), 200, false);
    assert_eq!(ask(), (41, 4096));
    t.wrote(&fh(3), 10, true);
    assert_eq!(ask(), (41, 10));
    // Not for a read delegation.
    t.insert(
        &fh(4),
        Delegation {
            stateid: sid(4),
            write: false,
        },
        1,
        1,
    );
    let r = run(
        &t,
        vec![
            seq(SESSION, 0),
            NfsCbArgop4::Getattr(CbGetattr4Args {
                fh: fh(4),
                attr_request: Bitmap4::from_bits(&[FATTR4_SIZE]),
            }),
        ],
    );
    assert_eq!(r.status, Nfsstat4::NFS4ERR_BADHANDLE);
}

#[test]
fn cb_sequence_must_come_first_name_this_session_and_a_slot_asked_for() {
    let (t, mut rx) = table();
    t.insert(
        &fh(5),
        Delegation {
            stateid: sid(5),
            write: false,
        },
        0,
        0,
    );
    let r = run(&t, vec![recall(fh(5), sid(5))]);
    assert_eq!(r.status, Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION);
    let r = run(
        &t,
        vec![seq(FixedOpaque([6; 16]), 0), recall(fh(5), sid(5))],
    );
    assert_eq!(r.status, Nfsstat4::NFS4ERR_BADSESSION);
    assert_eq!(r.resarray.0.len(), 1, "stops at the failure");
    let r = run(&t, vec![seq(SESSION, BACK_SLOTS), recall(fh(5), sid(5))]);
    assert_eq!(r.status, Nfsstat4::NFS4ERR_BADSLOT);
    let r = run(&t, vec![seq(SESSION, 0), seq(SESSION, 0)]);
    assert_eq!(r.status, Nfsstat4::NFS4ERR_SEQUENCE_POS);
    assert!(rx.try_recv().is_err(), "no recall from a refused compound");
}

#[test]
fn delegations_beyond_the_bound_are_refused_and_counted() {
    let (t, _rx) = Delegations::with_max(2);
    let d = |n| Delegation {
        stateid: sid(n),
        write: false,
    };
    let before = HELD.count();
    assert!(t.insert(&fh(1), d(1), 0, 0));
    assert!(t.insert(&fh(2), d(2), 0, 0));
    assert!(!t.insert(&fh(3), d(3), 0, 0), "a third is refused");
    assert!(t.insert(&fh(2), d(4), 0, 0), "replacing one held is not");
    assert_eq!(t.len(), 2);
    assert!(HELD.count() > before);
    assert_eq!(t.drain().len(), 2);
    assert!(t.is_empty());
}
