//! The NFSv4.1 session logic against a scripted in-process server: the
//! slot table's sequence ids, NFS4ERR_DELAY retries with backoff, giving
//! up after the retry budget, and concurrent calls spread over the
//! granted slots, never two at once on one slot (RFC 8881 §2.10.6.1).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use nfs::v4::session::*;
use nfs::v4::*;
use nfs_client::v4::{Error, Session, SessionOptions};
use oncrpc::msg::OpaqueAuth;
use oncrpc::{ClientTransport, RpcCall, RpcError};
use xdr::{Bounded, FixedOpaque};

const SESSION: [u8; 16] = [3; 16];

#[derive(Default)]
struct State {
    /// (slot, seqid) of every SEQUENCE received.
    log: Vec<(u32, u32)>,
    /// Answer this many SEQUENCEs with NFS4ERR_DELAY.
    delay_sequence: u32,
    /// Answer this many PUTROOTFHs with NFS4ERR_DELAY.
    delay_putrootfh: u32,
    busy: HashSet<u32>,
    most_busy: usize,
    destroyed: Vec<&'static str>,
    /// Execute the next sequenced call, then lose its reply.
    lose_next_reply: bool,
    /// Per slot, the last sequence id executed (RFC 8881 §2.10.6.1).
    last_seqid: [u32; 2],
}

#[derive(Clone, Default)]
struct Fake(Arc<Mutex<State>>);

fn attrs(maxrequests: u32) -> ChannelAttrs4 {
    ChannelAttrs4 {
        headerpadsize: 0,
        maxrequestsize: 1 << 20,
        maxresponsesize: 1 << 20,
        maxresponsesize_cached: 4096,
        maxoperations: 8,
        maxrequests,
        rdma_ird: Bounded(vec![]),
    }
}

impl Fake {
    fn answer(&self, args: &Compound4Args) -> Compound4Res {
        let mut s = self.0.lock().unwrap();
        let mut out = Vec::new();
        for op in &args.argarray {
            let r = match op {
                NfsArgop4::ExchangeId(_) => NfsResop4::ExchangeId(Res4::Ok(ExchangeId4ResOk {
                    clientid: 9,
                    sequenceid: 1,
                    flags: EXCHGID4_FLAG_USE_NON_PNFS,
                    state_protect: StateProtect4R::None,
                    server_owner: ServerOwner4 {
                        minor_id: 0,
                        major_id: Bounded(Bytes::from_static(b"fake")),
                    },
                    server_scope: Bounded(Bytes::from_static(b"fake")),
                    server_impl_id: Bounded(vec![]),
                })),
                NfsArgop4::CreateSession(c) => {
                    assert_eq!(c.clientid, 9);
                    assert_eq!(c.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN, 0);
                    NfsResop4::CreateSession(Res4::Ok(CreateSession4ResOk {
                        sessionid: FixedOpaque(SESSION),
                        sequence: c.sequence,
                        flags: 0,
                        fore_chan_attrs: attrs(2),
                        back_chan_attrs: attrs(1),
                    }))
                }
                NfsArgop4::Sequence(q) => {
                    assert_eq!(q.sessionid.0, SESSION);
                    assert!(q.slotid <= 1 && q.highest_slotid == 1, "{q:?}");
                    s.log.push((q.slotid, q.sequenceid));
                    let last = s.last_seqid[q.slotid as usize];
                    if q.sequenceid == last {
                        // A retry of a request whose reply was not cached.
                        NfsResop4::Sequence(Res4::Err(Nfsstat4::NFS4ERR_RETRY_UNCACHED_REP))
                    } else if q.sequenceid != last.wrapping_add(1) {
                        NfsResop4::Sequence(Res4::Err(Nfsstat4::NFS4ERR_SEQ_MISORDERED))
                    } else if s.delay_sequence > 0 {
                        s.delay_sequence -= 1;
                        NfsResop4::Sequence(Res4::Err(Nfsstat4::NFS4ERR_DELAY))
                    } else {
                        s.last_seqid[q.slotid as usize] = q.sequenceid;
                        NfsResop4::Sequence(Res4::Ok(Sequence4ResOk {
                            sessionid: q.sessionid,
                            sequenceid: q.sequenceid,
                            slotid: q.slotid,
                            highest_slotid: 1,
                            target_highest_slotid: 1,
                            status_flags: 0,
                        }))
                    }
                }
                NfsArgop4::ReclaimComplete(_) => NfsResop4::ReclaimComplete(Nfsstat4::NFS4_OK),
                NfsArgop4::Putrootfh(()) if s.delay_putrootfh > 0 => {
                    s.delay_putrootfh -= 1;
                    NfsResop4::Putrootfh(Nfsstat4::NFS4ERR_DELAY)
                }
                NfsArgop4::Putrootfh(()) => NfsResop4::Putrootfh(Nfsstat4::NFS4_OK),
                NfsArgop4::Getfh(()) => NfsResop4::Getfh(Res4::Ok(Getfh4ResOk {
                    object: NfsFh4(Bytes::from_static(b"root")),
                })),
                NfsArgop4::DestroySession(_) => {
                    s.destroyed.push("session");
                    NfsResop4::DestroySession(Nfsstat4::NFS4_OK)
                }
                NfsArgop4::DestroyClientid(d) => {
                    assert_eq!(d.clientid, 9);
                    s.destroyed.push("clientid");
                    NfsResop4::DestroyClientid(Nfsstat4::NFS4_OK)
                }
                other => NfsResop4::error(other.opnum(), Nfsstat4::NFS4ERR_NOTSUPP),
            };
            let failed = !r.status().is_ok();
            out.push(r);
            if failed {
                break;
            }
        }
        Compound4Res {
            status: out.last().map_or(Nfsstat4::NFS4_OK, |r| r.status()),
            tag: args.tag.clone(),
            resarray: out,
        }
    }

    fn slot_of(args: &Compound4Args) -> Option<u32> {
        match args.argarray.first() {
            Some(NfsArgop4::Sequence(q)) => Some(q.slotid),
            _ => None,
        }
    }
}

impl ClientTransport for Fake {
    async fn call(&self, call: RpcCall) -> Result<Bytes, RpcError> {
        assert_eq!(
            (call.prog, call.vers, call.proc_),
            (NFS4_PROGRAM, NFS_V4, 1)
        );
        let wire = call.args.to_bytes();
        let args: Compound4Args = xdr::from_slice(&wire).map_err(|_| RpcError::GarbageArgs)?;
        let slot = Self::slot_of(&args);
        if let Some(slot) = slot {
            let mut s = self.0.lock().unwrap();
            assert!(s.busy.insert(slot), "two calls at once on slot {slot}");
            s.most_busy = s.most_busy.max(s.busy.len());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        let res = self.answer(&args);
        if let Some(slot) = slot {
            let mut s = self.0.lock().unwrap();
            s.busy.remove(&slot);
            if std::mem::take(&mut s.lose_next_reply) {
                return Err(RpcError::Transport("reply lost"));
            }
        }
        Ok(xdr::to_bytes(&res))
    }
}

fn opts(delay_retries: u32) -> SessionOptions {
    SessionOptions {
        delay_retries,
        ..SessionOptions::default()
    }
}

#[tokio::test]
async fn delay_is_retried_on_the_same_sequence_id_then_the_slot_advances() {
    let fake = Fake::default();
    fake.0.lock().unwrap().delay_sequence = 2;
    let s = Session::establish(fake.clone(), OpaqueAuth::NONE, &opts(5))
        .await
        .unwrap();
    assert_eq!(s.clientid(), 9);
    // RECLAIM_COMPLETE: SEQUENCE refused twice, so slot 0 keeps seqid 1.
    assert_eq!(fake.0.lock().unwrap().log, [(0, 1), (0, 1), (0, 1)]);
    // An operation after a good SEQUENCE fails with DELAY: the slot has
    // advanced, so the retry carries the next sequence id.
    fake.0.lock().unwrap().delay_putrootfh = 1;
    assert_eq!(&s.root().await.unwrap().0[..], b"root");
    assert_eq!(fake.0.lock().unwrap().log[3..], [(0, 2), (0, 3)]);
    s.close().await.unwrap();
    assert_eq!(fake.0.lock().unwrap().destroyed, ["session", "clientid"]);
}

#[tokio::test]
async fn delay_beyond_the_retry_budget_is_returned() {
    let fake = Fake::default();
    let s = Session::establish(fake.clone(), OpaqueAuth::NONE, &opts(2))
        .await
        .unwrap();
    fake.0.lock().unwrap().delay_sequence = 10;
    match s.root().await {
        Err(Error::Nfs { op, status }) => {
            assert_eq!(op, Opnum4::OP_SEQUENCE);
            assert_eq!(status, Nfsstat4::NFS4ERR_DELAY);
        }
        other => panic!("{other:?}"),
    }
    // One try and two retries.
    assert_eq!(fake.0.lock().unwrap().log.len(), 1 + 3);
}

#[tokio::test]
async fn concurrent_calls_share_the_granted_slots_one_call_per_slot() {
    let fake = Fake::default();
    let s = Session::establish(fake.clone(), OpaqueAuth::NONE, &opts(0))
        .await
        .unwrap();
    let calls = (0..12).map(|_| s.root());
    for r in futures::future::join_all(calls).await {
        assert_eq!(&r.unwrap().0[..], b"root");
    }
    let st = fake.0.lock().unwrap();
    assert_eq!(st.most_busy, 2);
    // Each slot's sequence ids run 1, 2, 3... with no gap or repeat.
    for slot in 0..2 {
        let ids: Vec<u32> = st
            .log
            .iter()
            .filter(|(s, _)| *s == slot)
            .map(|&(_, q)| q)
            .collect();
        let want: Vec<u32> = (1..=ids.len() as u32).collect();
        assert_eq!(ids, want, "slot {slot}");
    }
    assert_eq!(st.log.len(), 13);
}

#[tokio::test]
async fn lost_reply_leaves_the_slot_uncertain_and_the_retry_advances_it() {
    let fake = Fake::default();
    let s = Session::establish(fake.clone(), OpaqueAuth::NONE, &opts(0))
        .await
        .unwrap();
    fake.0.lock().unwrap().lose_next_reply = true;
    assert!(matches!(s.root().await, Err(Error::Rpc(_))));
    // The server executed seqid 2 on slot 0; the next call tries 2 again,
    // hears NFS4ERR_RETRY_UNCACHED_REP, and goes on with 3.
    assert_eq!(&s.root().await.unwrap().0[..], b"root");
    assert_eq!(fake.0.lock().unwrap().log, [(0, 1), (0, 2), (0, 2), (0, 3)]);
    // The slot is certain again: the next call goes straight to 4.
    s.root().await.unwrap();
    assert_eq!(fake.0.lock().unwrap().log[4..], [(0, 4)]);
}
