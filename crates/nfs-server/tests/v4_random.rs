//! Random COMPOUNDs (seeded, reproducible) from two clients: every reply
//! decodes, holds no more results than operations, its status is the last
//! result's, and the server keeps answering; random bytes as COMPOUND
//! arguments draw GARBAGE_ARGS or a well-formed reply, never a hang.

mod v4_common;

use bytes::Bytes;
use nfs::v4::attr::*;
use nfs::v4::*;
use nfs_server::v4::SessionLimits;
use oncrpc::client::{ClientTransport, ReplyHint, RpcCall, RpcError};
use v4_common::*;
use xdr::{Bounded, FixedOpaque};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const NAMES: [&str; 5] = ["a", "b", "dir", "..", "x/y"];

fn op(rng: &mut Rng, cid: u64, sids: &[Stateid4], fhs: &[NfsFh4]) -> NfsArgop4 {
    let n = Component4::from_static(NAMES[rng.below(5) as usize]);
    let sid = if sids.is_empty() || rng.below(4) == 0 {
        Stateid4 {
            seqid: rng.below(3) as u32,
            other: FixedOpaque([rng.below(3) as u8; 12]),
        }
    } else {
        let s = sids[rng.below(sids.len() as u64) as usize];
        Stateid4 {
            seqid: s.seqid.wrapping_add(rng.below(3) as u32).wrapping_sub(1),
            ..s
        }
    };
    let off = rng.below(3) * 4096;
    let len = [0, 1, 100, NFS4_UINT64_MAX][rng.below(4) as usize];
    let mode = FileAttrs {
        mode: Some(0o600 + rng.below(0o100) as u32),
        size: (rng.below(3) == 0).then_some(rng.below(5000)),
        ..Default::default()
    }
    .to_fattr4(&Bitmap4::from_bits(KNOWN_ATTRS));
    match rng.below(24) {
        0 => NfsArgop4::Putrootfh(()),
        1 => NfsArgop4::Putfh(Putfh4Args {
            object: if fhs.is_empty() || rng.below(3) == 0 {
                NfsFh4(Bytes::from(vec![
                    rng.below(256) as u8;
                    rng.below(30) as usize
                ]))
            } else {
                fhs[rng.below(fhs.len() as u64) as usize].clone()
            },
        }),
        2 => NfsArgop4::Lookup(Lookup4Args { objname: n }),
        3 => NfsArgop4::Lookupp(()),
        4 => NfsArgop4::Getfh(()),
        5 => NfsArgop4::Savefh(()),
        6 => NfsArgop4::Restorefh(()),
        7 => NfsArgop4::Getattr(Getattr4Args {
            attr_request: Bitmap4(vec![
                rng.next() as u32,
                rng.next() as u32,
                rng.below(4) as u32,
            ]),
        }),
        8 => NfsArgop4::Setattr(Setattr4Args {
            stateid: sid,
            obj_attributes: mode,
        }),
        9 => NfsArgop4::Create(Create4Args {
            objtype: [Createtype4::Dir, Createtype4::Fifo, Createtype4::Other(1)]
                [rng.below(3) as usize]
                .clone(),
            objname: n,
            createattrs: Fattr4::default(),
        }),
        10 => NfsArgop4::Open(Open4Args {
            seqid: 0,
            share_access: rng.below(5) as u32,
            share_deny: rng.below(5) as u32,
            owner: owner(cid, ["o1", "o2"][rng.below(2) as usize]),
            openhow: OpenHow4(match rng.below(4) {
                0 => None,
                1 => Some(Createhow4::Unchecked(mode)),
                2 => Some(Createhow4::Guarded(Fattr4::default())),
                _ => Some(Createhow4::Exclusive41(
                    FixedOpaque([7; 8]),
                    Fattr4::default(),
                )),
            }),
            claim: if rng.below(5) == 0 {
                OpenClaim4::Fh
            } else {
                OpenClaim4::Null(n)
            },
        }),
        11 => NfsArgop4::Close(Close4Args {
            seqid: 0,
            open_stateid: sid,
        }),
        12 => NfsArgop4::Read(Read4Args {
            stateid: sid,
            offset: off,
            count: rng.below(10_000) as u32,
        }),
        13 => NfsArgop4::Write(Write4Args {
            stateid: sid,
            offset: off,
            stable: StableHow4(rng.below(3) as u32),
            data: xdr::DdpOpaque(Bytes::from(vec![1u8; rng.below(3000) as usize])),
        }),
        14 => NfsArgop4::Lock(Lock4Args {
            locktype: NfsLockType4(1 + rng.below(4) as u32),
            reclaim: rng.below(8) == 0,
            offset: off,
            length: len,
            locker: if rng.below(2) == 0 {
                Locker4::New(OpenToLockOwner4 {
                    open_seqid: 0,
                    open_stateid: sid,
                    lock_seqid: 0,
                    lock_owner: owner(cid, ["l1", "l2"][rng.below(2) as usize]),
                })
            } else {
                Locker4::Existing(ExistLockOwner4 {
                    lock_stateid: sid,
                    lock_seqid: 0,
                })
            },
        }),
        15 => NfsArgop4::Locku(Locku4Args {
            locktype: NfsLockType4::WRITE_LT,
            seqid: 0,
            lock_stateid: sid,
            offset: off,
            length: len,
        }),
        16 => NfsArgop4::Lockt(Lockt4Args {
            locktype: NfsLockType4::WRITE_LT,
            offset: off,
            length: len,
            owner: owner(cid, "l3"),
        }),
        17 => NfsArgop4::Remove(Remove4Args { target: n }),
        18 => NfsArgop4::Rename(Rename4Args {
            oldname: n,
            newname: Component4::from_static(NAMES[rng.below(5) as usize]),
        }),
        19 => NfsArgop4::Link(Link4Args { newname: n }),
        20 => NfsArgop4::Readdir(Readdir4Args {
            cookie: rng.below(4),
            cookieverf: FixedOpaque([0; 8]),
            dircount: 100,
            maxcount: rng.below(3000) as u32,
            attr_request: Bitmap4::from_bits(&[
                FATTR4_TYPE,
                FATTR4_RDATTR_ERROR,
                FATTR4_FILEHANDLE,
            ]),
        }),
        21 => NfsArgop4::FreeStateid(session::FreeStateid4Args { stateid: sid }),
        22 => NfsArgop4::OpenDowngrade(OpenDowngrade4Args {
            open_stateid: sid,
            seqid: 0,
            share_access: rng.below(4) as u32,
            share_deny: rng.below(4) as u32,
        }),
        _ => NfsArgop4::TestStateid(session::TestStateid4Args {
            stateids: Bounded(vec![sid]),
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_compounds_never_break_the_server() {
    let srv = serve("random", SessionLimits::default()).await;
    let mut clients = Vec::new();
    for name in ["r1", "r2"] {
        let mut c = C4::connect(&srv).await;
        c.establish(name).await;
        clients.push(c);
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut sids = Vec::new();
    let mut fhs = Vec::new();
    let mut oks = 0;
    for _ in 0..400 {
        let c = &clients[rng.below(2) as usize];
        let mut ops = Vec::new();
        if rng.below(5) != 0 {
            ops.push(NfsArgop4::Putrootfh(()));
        }
        for _ in 0..1 + rng.below(5) {
            ops.push(op(&mut rng, c.clientid, &sids, &fhs));
        }
        let n = ops.len();
        let r = c.seq(ops).await;
        assert!(r.resarray.len() <= n + 1, "{r:?}");
        assert_eq!(r.status, r.resarray.last().unwrap().status());
        assert!(r.resarray[..r.resarray.len() - 1]
            .iter()
            .all(|x| x.status().is_ok()));
        oks += usize::from(r.status.is_ok());
        for x in &r.resarray {
            match x {
                NfsResop4::Open(Res4::Ok(o)) => sids.push(o.stateid),
                NfsResop4::Lock(LockRes4::Ok(s)) => sids.push(*s),
                NfsResop4::Getfh(Res4::Ok(g)) => fhs.push(g.object.clone()),
                _ => {}
            }
        }
    }
    assert!(oks > 20, "only {oks} COMPOUNDs succeeded");
    // Random argument bytes.
    for _ in 0..200 {
        let len = rng.below(200) as usize;
        let mut w: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if rng.below(2) == 0 && w.len() >= 12 {
            w[..12].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 3]);
        }
        let got = clients[0]
            .rpc
            .call(RpcCall {
                prog: NFS4_PROGRAM,
                vers: NFS_V4,
                proc_: NFSPROC4_COMPOUND,
                cred: clients[0].cred.clone(),
                args: xdr::XdrBuf::from_bytes(Bytes::from(w)),
                reply_hint: ReplyHint::default(),
            })
            .await;
        match got {
            Ok(b) => {
                xdr::from_slice::<Compound4Res>(&b).unwrap();
            }
            Err(RpcError::GarbageArgs) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    let r = clients[1]
        .seq(vec![NfsArgop4::Putrootfh(()), NfsArgop4::Getfh(())])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK);
}
