//! NFSv4.1 delegations over RPC-over-RDMA with the backchannel on the
//! client's own connection (RFC 8881 §10.2, §10.4, §20;
//! draft-ietf-nfsv4-rpcrdma-bidirection-01 §1.4.2): two scripted clients on
//! the rnic loopback device, each answering CB_NULL and CB_COMPOUND with
//! its own callback service.

mod v4_common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nfs::v4::attr::{Bitmap4, FileAttrs};
use nfs::v4::cb::*;
use nfs::v4::session::*;
use nfs::v4::*;
use nfs_server::nfs3::Nfs3Service;
use nfs_server::v4::{
    backchannel_fn, BackchannelSlot, DelegLimits, ManualClock, Nfs4Service, SessionLimits,
};
use nfs_server::LocalFs;
use oncrpc::client::{ReplyHint, RpcCall};
use oncrpc::limits::trips;
use oncrpc::msg::{AuthSys, OpaqueAuth};
use oncrpc::{CallContext, ClientTransport, RpcService, ServiceError};
use rnic::loopback::{LoopbackDevice, LoopbackNetwork};
use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaListener, RdmaServerConfig};
use tokio::sync::mpsc;
use v4_common::{
    open_session, reclaim_complete_op, slot0_sequence, v4_config, SessionAsk, TempDir, CB_PROGRAM,
};
use xdr::{Bounded, Encode, FixedOpaque, XdrBuf};

const LEASE: Duration = Duration::from_secs(90);
const OP_DELEGRETURN: u32 = 8;

/// The client's callback program: CB_NULL, and CB_COMPOUND answering
/// CB_SEQUENCE and reporting each CB_RECALL on a channel.
struct CbService {
    recalls: mpsc::UnboundedSender<(CbSequence4Args, CbRecall4Args)>,
    nulls: Arc<AtomicU32>,
    /// Set: CB_COMPOUND never answers (a dead back channel).
    stall: Arc<std::sync::atomic::AtomicBool>,
}

impl RpcService for CbService {
    fn program(&self) -> u32 {
        CB_PROGRAM
    }
    fn versions(&self) -> std::ops::RangeInclusive<u32> {
        NFS4_CALLBACK_VERSION..=NFS4_CALLBACK_VERSION
    }
    async fn call(&self, ctx: CallContext, args: Bytes) -> Result<XdrBuf, ServiceError> {
        match ctx.proc_ {
            CB_NULL => {
                self.nulls.fetch_add(1, Ordering::SeqCst);
                Ok(XdrBuf::new())
            }
            CB_COMPOUND => {
                if self.stall.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                let a: CbCompound4Args =
                    xdr::from_slice(&args).map_err(ServiceError::GarbageArgs)?;
                let mut seq = None;
                let mut res = Vec::new();
                for op in a.argarray {
                    match op {
                        NfsCbArgop4::Sequence(s) => {
                            res.push(NfsCbResop4::Sequence(Res4::Ok(CbSequence4ResOk {
                                sessionid: s.sessionid,
                                sequenceid: s.sequenceid,
                                slotid: s.slotid,
                                highest_slotid: 0,
                                target_highest_slotid: 0,
                            })));
                            seq = Some(s);
                        }
                        NfsCbArgop4::Recall(r) => {
                            let s = seq.clone().expect("CB_SEQUENCE first");
                            let _ = self.recalls.send((s, r));
                            res.push(NfsCbResop4::Recall(Nfsstat4::NFS4_OK));
                        }
                        NfsCbArgop4::Other(n) => {
                            res.push(NfsCbResop4::Other(n, Nfsstat4::NFS4ERR_NOTSUPP))
                        }
                        NfsCbArgop4::Getattr(_) => {
                            res.push(NfsCbResop4::Other(OP_CB_GETATTR, Nfsstat4::NFS4ERR_NOTSUPP))
                        }
                        NfsCbArgop4::Layoutrecall(_) => res.push(NfsCbResop4::Layoutrecall(
                            Nfsstat4::NFS4ERR_NOMATCHING_LAYOUT,
                        )),
                        NfsCbArgop4::Offload(_) => {
                            res.push(NfsCbResop4::Offload(Nfsstat4::NFS4ERR_BAD_STATEID))
                        }
                    }
                }
                Ok(xdr::to_xdr_buf(&CbCompound4Res {
                    status: Nfsstat4::NFS4_OK,
                    tag: Bounded(a.tag),
                    resarray: Bounded(res),
                }))
            }
            _ => Err(ServiceError::ProcUnavail),
        }
    }
}

struct Srv {
    net: LoopbackNetwork,
    addr: String,
    clock: Arc<ManualClock>,
    uid: u32,
    _dir: TempDir,
}

/// The NFSv4 server on RPC-over-RDMA; `backchannel_credits` 0 means the
/// transport offers no back channel.
async fn serve(tag: &str, backchannel_credits: u32) -> Srv {
    serve_with(tag, backchannel_credits, DelegLimits::default()).await
}

/// Like [`serve`], granting delegations within `deleg`.
async fn serve_with(tag: &str, backchannel_credits: u32, deleg: DelegLimits) -> Srv {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let dir = TempDir::new(&format!("deleg-{tag}"));
    let uid = dir.owner();
    let clock = Arc::new(ManualClock::new());
    let fs = Arc::new(LocalFs::new(dir.path(), false).unwrap());
    let slot = BackchannelSlot::new();
    let mut server = oncrpc::Server::new();
    let cfg = v4_config(SessionLimits::default(), &clock, b"deleg");
    let v4 = Nfs4Service::with_config(Arc::clone(&fs), cfg)
        .with_backchannels(slot.clone())
        .with_deleg_limits(deleg);
    // NFSv3 on the same files breaks the delegations, waiting 300 ms.
    let delegs = v4.delegations().with_wait(Duration::from_millis(300));
    server.register(v4);
    server.register(
        Nfs3Service::new(std::sync::Arc::new(
            nfs_server::access::ExportTable::open_to_all(fs, Vec::new()),
        ))
        .with_delegations(delegs),
    );
    let net = LoopbackNetwork::new(7 + u64::from(n));
    let sdev = net.device();
    let cfg = RdmaServerConfig {
        backchannel_credits,
        ..RdmaServerConfig::default()
    };
    let listener = RdmaListener::bind(&sdev, &String::new(), Arc::new(server), cfg)
        .await
        .unwrap();
    let addr = listener.local_addr();
    let bcs = listener.backchannels();
    slot.set(backchannel_fn(move |p: &oncrpc::PeerInfo| {
        bcs.get(p.conn_id)
    }));
    listener.spawn();
    Srv {
        net,
        addr,
        clock,
        uid,
        _dir: dir,
    }
}

/// One scripted NFSv4.1 client over RDMA with its callback service.
struct Client {
    rpc: RdmaClient<LoopbackDevice>,
    cred: OpaqueAuth,
    clientid: u64,
    session: [u8; 16],
    seq: AtomicU32,
    recalls: mpsc::UnboundedReceiver<(CbSequence4Args, CbRecall4Args)>,
    nulls: Arc<AtomicU32>,
    tx: mpsc::UnboundedSender<(CbSequence4Args, CbRecall4Args)>,
    stall: Arc<std::sync::atomic::AtomicBool>,
}

async fn connect_rpc(
    srv: &Srv,
    tx: &mpsc::UnboundedSender<(CbSequence4Args, CbRecall4Args)>,
    nulls: &Arc<AtomicU32>,
    stall: &Arc<std::sync::atomic::AtomicBool>,
) -> RdmaClient<LoopbackDevice> {
    let mut cb = oncrpc::Server::new();
    cb.register(CbService {
        recalls: tx.clone(),
        nulls: nulls.clone(),
        stall: stall.clone(),
    });
    RdmaClient::connect_with_backchannel(
        &srv.net.device(),
        &srv.addr,
        RdmaClientConfig::default(),
        Arc::new(cb),
    )
    .await
    .unwrap()
}

impl Client {
    async fn connect(srv: &Srv, name: &str) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let nulls = Arc::new(AtomicU32::new(0));
        let stall = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let rpc = connect_rpc(srv, &tx, &nulls, &stall).await;
        let mut c = Self {
            rpc,
            cred: AuthSys {
                stamp: 1,
                machinename: Bytes::from_static(b"deleg"),
                uid: srv.uid,
                gid: srv.uid,
                gids: vec![],
            }
            .to_opaque_auth(),
            clientid: 0,
            session: [0; 16],
            seq: AtomicU32::new(0),
            recalls: rx,
            nulls,
            stall,
            tx,
        };
        c.establish(name).await;
        c
    }

    async fn raw(&self, args: Bytes) -> Bytes {
        self.rpc
            .call(RpcCall {
                prog: NFS4_PROGRAM,
                vers: NFS_V4,
                proc_: NFSPROC4_COMPOUND,
                cred: self.cred.clone(),
                args: XdrBuf::from_bytes(args),
                reply_hint: ReplyHint::default(),
            })
            .await
            .unwrap()
    }

    async fn ops(&self, ops: Vec<NfsArgop4>) -> Compound4Res {
        let args = Compound4Args {
            tag: Bytes::new(),
            minorversion: 1,
            argarray: ops,
        };
        xdr::from_slice(&self.raw(xdr::to_bytes(&args)).await).unwrap()
    }

    async fn establish(&mut self, name: &str) {
        let ask = SessionAsk {
            exchange_flags: EXCHGID4_FLAG_SUPP_MOVED_REFER,
            ..SessionAsk::default()
        };
        let (clientid, session) = open_session(|o| self.ops(o), name, &ask).await.unwrap();
        (self.clientid, self.session) = (clientid, session);
        assert_eq!(
            self.seq(vec![reclaim_complete_op()]).await.status,
            Nfsstat4::NFS4_OK
        );
    }

    fn sequence(&self) -> NfsArgop4 {
        slot0_sequence(self.session, &self.seq)
    }

    async fn seq(&self, ops: Vec<NfsArgop4>) -> Compound4Res {
        let mut all = vec![self.sequence()];
        all.extend(ops);
        self.ops(all).await
    }

    /// SEQUENCE's status flags.
    async fn flags(&self) -> u32 {
        match self.seq(vec![]).await.resarray.first() {
            Some(NfsResop4::Sequence(Res4::Ok(s))) => s.status_flags,
            r => panic!("SEQUENCE: {r:?}"),
        }
    }

    /// PUTROOTFH; OPEN `file` (created if missing) with `access`; GETFH.
    async fn open(&self, file: &'static str, access: u32) -> Compound4Res {
        self.seq(vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Open(Open4Args {
                seqid: 0,
                share_access: access,
                share_deny: OPEN4_SHARE_DENY_NONE,
                owner: StateOwner4 {
                    clientid: self.clientid,
                    owner: Bounded(Bytes::from_static(b"owner")),
                },
                openhow: OpenHow4(Some(Createhow4::Unchecked(
                    FileAttrs {
                        mode: Some(0o644),
                        ..Default::default()
                    }
                    .to_fattr4(&Bitmap4::from_bits(&[nfs::v4::attr::FATTR4_MODE])),
                ))),
                claim: OpenClaim4::Null(Component4::from_static(file)),
            }),
            NfsArgop4::Getfh(()),
        ])
        .await
    }

    /// PUTFH; OPEN (no create) with `claim` on the current file.
    async fn open_claim(&self, fh: &NfsFh4, claim: OpenClaim4, access: u32) -> Compound4Res {
        self.seq(vec![
            NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
            NfsArgop4::Open(Open4Args {
                seqid: 0,
                share_access: access,
                share_deny: OPEN4_SHARE_DENY_NONE,
                owner: StateOwner4 {
                    clientid: self.clientid,
                    owner: Bounded(Bytes::from_static(b"owner2")),
                },
                openhow: OpenHow4(None),
                claim,
            }),
        ])
        .await
    }

    /// SEQUENCE; PUTFH; DELEGRETURN (encoded here: `NfsArgop4` does not
    /// model it). Returns the COMPOUND status.
    async fn delegreturn(&self, fh: &NfsFh4, sid: &Stateid4) -> Nfsstat4 {
        let mut b = BytesMut::new();
        Bytes::new().encode(&mut b);
        1u32.encode(&mut b);
        3u32.encode(&mut b);
        self.sequence().encode(&mut b);
        NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }).encode(&mut b);
        OP_DELEGRETURN.encode(&mut b);
        sid.encode(&mut b);
        let r = self.raw(b.freeze()).await;
        xdr::from_slice::<Nfsstat4>(&r[..4]).unwrap()
    }

    async fn recall(&mut self) -> (CbSequence4Args, CbRecall4Args) {
        tokio::time::timeout(Duration::from_secs(10), self.recalls.recv())
            .await
            .expect("a CB_RECALL within 10 s")
            .unwrap()
    }
}

fn opened(r: &Compound4Res) -> (Stateid4, OpenDelegation4, NfsFh4) {
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    let o = r
        .resarray
        .iter()
        .find_map(|x| match x {
            NfsResop4::Open(Res4::Ok(o)) => Some(o.clone()),
            _ => None,
        })
        .unwrap();
    let fh = r
        .resarray
        .iter()
        .find_map(|x| match x {
            NfsResop4::Getfh(Res4::Ok(g)) => Some(g.object.clone()),
            _ => None,
        })
        .unwrap();
    (o.stateid, o.delegation, fh)
}

/// Opens `file` for reading and writing, which must bring a write
/// delegation: its stateid and the file's handle.
async fn write_deleg(a: &Client, file: &'static str) -> (Stateid4, NfsFh4) {
    let (_, deleg, fh) = opened(&a.open(file, OPEN4_SHARE_ACCESS_BOTH).await);
    let OpenDelegation4::Write(dsid, ..) = deleg else {
        panic!("write delegation expected: {deleg:?}")
    };
    (dsid, fh)
}

/// PUTFH and a FILE_SYNC WRITE of `data` at offset 0 under `sid`.
fn write_ops(fh: &NfsFh4, sid: Stateid4, data: &'static [u8]) -> Vec<NfsArgop4> {
    vec![
        NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
        NfsArgop4::Write(Write4Args {
            stateid: sid,
            offset: 0,
            stable: StableHow4::FILE_SYNC4,
            data: xdr::DdpOpaque(Bytes::from_static(data)),
        }),
    ]
}

fn open_status(r: &Compound4Res) -> Nfsstat4 {
    r.resarray.last().map(NfsResop4::status).unwrap()
}

/// B's OPEN until it stops answering NFS4ERR_DELAY (bounded).
/// Opens `file` for reading as `c`; the read delegation the open must
/// get, and the file's handle.
async fn read_delegated(c: &Client, file: &'static str) -> (Stateid4, NfsFh4) {
    let (_, deleg, fh) = opened(&c.open(file, OPEN4_SHARE_ACCESS_READ).await);
    let OpenDelegation4::Read(dsid, ..) = deleg else {
        panic!("read delegation expected: {deleg:?}")
    };
    (dsid, fh)
}

async fn open_after_delay(b: &Client, file: &'static str, access: u32) -> (u32, Compound4Res) {
    for n in 0..100 {
        let r = b.open(file, access).await;
        if r.status != Nfsstat4::NFS4ERR_DELAY {
            return (n, r);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("still NFS4ERR_DELAY");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_delegation_is_recalled_when_another_client_opens_for_write() {
    let srv = serve("read", 4).await;
    let mut a = Client::connect(&srv, "client-a").await;
    let b = Client::connect(&srv, "client-b").await;
    let (_, deleg, fh) = opened(&a.open("f", OPEN4_SHARE_ACCESS_READ).await);
    let OpenDelegation4::Read(dsid, false, _) = deleg else {
        panic!("read delegation expected: {deleg:?}")
    };
    assert_eq!(
        a.nulls.load(Ordering::SeqCst),
        1,
        "probed with CB_NULL once"
    );
    // B wants to write: DELAY while A's delegation is recalled.
    let r = b.open("f", OPEN4_SHARE_ACCESS_WRITE).await;
    assert_eq!(open_status(&r), Nfsstat4::NFS4ERR_DELAY);
    let (cbseq, recall) = a.recall().await;
    assert_eq!(cbseq.sessionid.0, a.session);
    assert_eq!((cbseq.sequenceid, cbseq.slotid), (1, 0));
    assert_eq!(recall.stateid, dsid);
    assert_eq!(recall.fh, fh);
    let r = b.open("f", OPEN4_SHARE_ACCESS_WRITE).await;
    assert_eq!(open_status(&r), Nfsstat4::NFS4ERR_DELAY, "not returned yet");
    // Before returning it, A turns a local open into a real one.
    let r = a
        .open_claim(&fh, OpenClaim4::DelegCurFh(dsid), OPEN4_SHARE_ACCESS_READ)
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    let bogus = Stateid4 {
        seqid: 1,
        other: FixedOpaque([9; 12]),
    };
    let r = b
        .open_claim(&fh, OpenClaim4::DelegCurFh(dsid), OPEN4_SHARE_ACCESS_READ)
        .await;
    assert_eq!(open_status(&r), Nfsstat4::NFS4ERR_BAD_STATEID, "not B's");
    let r = a
        .open_claim(&fh, OpenClaim4::DelegCurFh(bogus), OPEN4_SHARE_ACCESS_READ)
        .await;
    assert_eq!(open_status(&r), Nfsstat4::NFS4ERR_BAD_STATEID);
    assert_eq!(a.delegreturn(&fh, &dsid).await, Nfsstat4::NFS4_OK);
    let (_, r) = open_after_delay(&b, "f", OPEN4_SHARE_ACCESS_WRITE).await;
    let (_, bdeleg, _) = opened(&r);
    assert_eq!(bdeleg, OpenDelegation4::None, "A still has the file open");
    assert_eq!(
        a.delegreturn(&fh, &dsid).await,
        Nfsstat4::NFS4ERR_BAD_STATEID,
        "returned once"
    );
    assert_eq!(a.flags().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_delegation_is_recalled_when_another_client_reads() {
    let srv = serve("write", 4).await;
    let mut a = Client::connect(&srv, "client-a").await;
    let b = Client::connect(&srv, "client-b").await;
    let (_, deleg, fh) = opened(&a.open("w", OPEN4_SHARE_ACCESS_BOTH).await);
    let OpenDelegation4::Write(dsid, false, _, _) = deleg else {
        panic!("write delegation expected: {deleg:?}")
    };
    // A writes under its delegation stateid.
    let r = a.seq(write_ops(&fh, dsid, b"hello")).await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    let r = b.open("w", OPEN4_SHARE_ACCESS_READ).await;
    assert_eq!(open_status(&r), Nfsstat4::NFS4ERR_DELAY);
    let (cbseq, recall) = a.recall().await;
    assert_eq!(recall.stateid, dsid);
    assert_eq!(cbseq.sequenceid, 1);
    assert_eq!(a.delegreturn(&fh, &dsid).await, Nfsstat4::NFS4_OK);
    let (_, r) = open_after_delay(&b, "w", OPEN4_SHARE_ACCESS_READ).await;
    opened(&r);
    // A second conflict on another file uses the next callback sequence id.
    let (_, deleg, fh2) = opened(&a.open("w2", OPEN4_SHARE_ACCESS_BOTH).await);
    let OpenDelegation4::Write(dsid2, ..) = deleg else {
        panic!("write delegation expected: {deleg:?}")
    };
    let r = b
        .seq(vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Remove(Remove4Args {
                target: Component4::from_static("w2"),
            }),
        ])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_DELAY, "REMOVE conflicts");
    let (cbseq, recall) = a.recall().await;
    assert_eq!((cbseq.sequenceid, recall.stateid), (2, dsid2));
    assert_eq!(a.delegreturn(&fh2, &dsid2).await, Nfsstat4::NFS4_OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_backchannel_means_no_delegation_and_cb_path_down_once() {
    let srv = serve("nobc", 0).await;
    let a = Client::connect(&srv, "client-a").await;
    assert_eq!(a.flags().await, 0);
    let (_, deleg, _) = opened(&a.open("f", OPEN4_SHARE_ACCESS_READ).await);
    assert_eq!(deleg, OpenDelegation4::None);
    assert_eq!(a.flags().await, SEQ4_STATUS_CB_PATH_DOWN);
    assert_eq!(a.nulls.load(Ordering::SeqCst), 0);
    // The client binds the connection again; it still has no back
    // channel, and is not told again.
    let r = a
        .ops(vec![NfsArgop4::BindConnToSession(BindConnToSession4Args {
            sessid: FixedOpaque(a.session),
            dir: ChannelDir4::CDFC4_BACK_OR_BOTH,
            use_conn_in_rdma_mode: false,
        })])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    let (_, deleg, _) = opened(&a.open("g", OPEN4_SHARE_ACCESS_READ).await);
    assert_eq!(deleg, OpenDelegation4::None);
    assert_eq!(a.flags().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreturned_delegation_is_revoked_after_a_lease() {
    let srv = serve("revoke", 4).await;
    let mut a = Client::connect(&srv, "client-a").await;
    let b = Client::connect(&srv, "client-b").await;
    let (dsid, fh) = read_delegated(&a, "f").await;
    let r = b.open("f", OPEN4_SHARE_ACCESS_WRITE).await;
    assert_eq!(open_status(&r), Nfsstat4::NFS4ERR_DELAY);
    a.recall().await;
    // A keeps its lease but never returns the delegation.
    srv.clock.advance(LEASE / 2);
    assert_eq!(a.flags().await, 0);
    let r = b.open("f", OPEN4_SHARE_ACCESS_WRITE).await;
    assert_eq!(open_status(&r), Nfsstat4::NFS4ERR_DELAY, "within the lease");
    srv.clock.advance(LEASE / 2 + Duration::from_secs(1));
    let r = b.open("f", OPEN4_SHARE_ACCESS_WRITE).await;
    opened(&r);
    const REVOKED: u32 = 0x40; // SEQ4_STATUS_RECALLABLE_STATE_REVOKED
    assert_eq!(a.flags().await, REVOKED);
    assert_eq!(
        a.delegreturn(&fh, &dsid).await,
        Nfsstat4::NFS4ERR_DELEG_REVOKED
    );
    let r = a
        .seq(vec![NfsArgop4::FreeStateid(FreeStateid4Args {
            stateid: dsid,
        })])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    assert_eq!(a.flags().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_waits_for_the_client_to_bind_a_new_connection() {
    let srv = serve("rebind", 4).await;
    let mut a = Client::connect(&srv, "client-a").await;
    let b = Client::connect(&srv, "client-b").await;
    let (dsid, fh) = read_delegated(&a, "f").await;
    a.rpc.close();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = b.open("f", OPEN4_SHARE_ACCESS_WRITE).await;
    assert_eq!(open_status(&r), Nfsstat4::NFS4ERR_DELAY);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        a.recalls.try_recv().is_err(),
        "no connection, no recall yet"
    );
    // A reconnects, learns the back channel is down, and binds the new
    // connection to both channels.
    a.rpc = connect_rpc(&srv, &a.tx, &a.nulls, &a.stall).await;
    assert_eq!(a.flags().await, SEQ4_STATUS_CB_PATH_DOWN);
    let r = a
        .ops(vec![NfsArgop4::BindConnToSession(BindConnToSession4Args {
            sessid: FixedOpaque(a.session),
            dir: ChannelDir4::CDFC4_BACK_OR_BOTH,
            use_conn_in_rdma_mode: false,
        })])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    let (_, recall) = a.recall().await;
    assert_eq!(recall.stateid, dsid);
    assert_eq!(a.delegreturn(&fh, &dsid).await, Nfsstat4::NFS4_OK);
    let (_, r) = open_after_delay(&b, "f", OPEN4_SHARE_ACCESS_WRITE).await;
    opened(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_and_setattr_from_another_client_recall_a_read_delegation() {
    let srv = serve("io", 4).await;
    let mut a = Client::connect(&srv, "client-a").await;
    let b = Client::connect(&srv, "client-b").await;
    let (dsid, fh) = read_delegated(&a, "f").await;
    // B reads with the anonymous stateid: no conflict with a read delegation.
    let r = b
        .seq(vec![
            NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
            NfsArgop4::Read(Read4Args {
                stateid: Stateid4::ANONYMOUS,
                offset: 0,
                count: 16,
            }),
        ])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    assert!(a.recalls.try_recv().is_err());
    let write = write_ops(&fh, Stateid4::ANONYMOUS, b"B");
    assert_eq!(b.seq(write.clone()).await.status, Nfsstat4::NFS4ERR_DELAY);
    let (_, recall) = a.recall().await;
    assert_eq!(recall.stateid, dsid);
    let setattr = b
        .seq(vec![
            NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
            NfsArgop4::Setattr(Setattr4Args {
                stateid: Stateid4::ANONYMOUS,
                obj_attributes: FileAttrs {
                    mode: Some(0o600),
                    ..Default::default()
                }
                .to_fattr4(&Bitmap4::from_bits(&[nfs::v4::attr::FATTR4_MODE])),
            }),
        ])
        .await;
    assert_eq!(setattr.status, Nfsstat4::NFS4ERR_DELAY);
    assert!(a.recalls.try_recv().is_err(), "recalled once");
    assert_eq!(a.delegreturn(&fh, &dsid).await, Nfsstat4::NFS4_OK);
    assert_eq!(b.seq(write.clone()).await.status, Nfsstat4::NFS4_OK);
}

/// An NFSv3 call on `rpc`; returns the raw result.
async fn v3_call(
    rpc: &RdmaClient<LoopbackDevice>,
    cred: &OpaqueAuth,
    proc_: u32,
    args: XdrBuf,
) -> Bytes {
    rpc.call(RpcCall {
        prog: NFS4_PROGRAM,
        vers: 3,
        proc_,
        cred: cred.clone(),
        args,
        reply_hint: ReplyHint::default(),
    })
    .await
    .unwrap()
}

fn v3_write(fh: &NfsFh4, data: &'static [u8]) -> XdrBuf {
    xdr::to_xdr_buf(&nfs::v3::Write3Args {
        file: nfs::v3::NfsFh3::new(&fh.0).unwrap(),
        offset: 0,
        count: data.len() as u32,
        stable: nfs::v3::StableHow::FILE_SYNC,
        data: xdr::DdpOpaque(Bytes::from_static(data)),
    })
}

fn v3_status(r: &Bytes) -> nfs::v3::Nfsstat3 {
    xdr::from_slice::<nfs::v3::Nfsstat3>(&r[..4]).unwrap()
}

/// A's READ of `fh` under `sid`.
async fn read_all(a: &Client, fh: &NfsFh4, sid: Stateid4) -> Bytes {
    let r = a
        .seq(vec![
            NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
            NfsArgop4::Read(Read4Args {
                stateid: sid,
                offset: 0,
                count: 100,
            }),
        ])
        .await;
    match r.resarray.last() {
        Some(NfsResop4::Read(Res4::Ok(ok))) => ok.data.0.clone(),
        other => panic!("READ: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nfsv3_write_recalls_a_write_delegation_and_the_holder_sees_the_data() {
    let srv = serve("v3write", 4).await;
    let mut a = Client::connect(&srv, "client-a").await;
    let b = Client::connect(&srv, "client-b").await;
    let (dsid, fh) = write_deleg(&a, "w").await;
    // The NFSv3 WRITE waits for the recall; A returns the delegation.
    let write = v3_call(&b.rpc, &b.cred, 7, v3_write(&fh, b"from v3"));
    let holder = async {
        let (_, recall) = a.recall().await;
        assert_eq!(recall.stateid, dsid);
        assert_eq!(a.delegreturn(&fh, &dsid).await, Nfsstat4::NFS4_OK);
    };
    let (r, ()) = tokio::join!(write, holder);
    assert_eq!(v3_status(&r), nfs::v3::Nfsstat3::NFS3_OK);
    // At its next open A sees the NFSv3 client's data.
    let (sid, _, fh2) = opened(&a.open("w", OPEN4_SHARE_ACCESS_READ).await);
    assert_eq!(fh2, fh);
    assert_eq!(&read_all(&a, &fh, sid).await[..], b"from v3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nfsv3_access_gets_jukebox_while_the_holder_keeps_the_delegation() {
    let srv = serve("v3jukebox", 4).await;
    let mut a = Client::connect(&srv, "client-a").await;
    let b = Client::connect(&srv, "client-b").await;
    let (dsid, fh) = write_deleg(&a, "r").await;
    // A READ conflicts with a write delegation too.
    let read = xdr::to_xdr_buf(&nfs::v3::Read3Args {
        file: nfs::v3::NfsFh3::new(&fh.0).unwrap(),
        offset: 0,
        count: 10,
    });
    let r = v3_call(&b.rpc, &b.cred, 6, read.clone()).await;
    assert_eq!(v3_status(&r), nfs::v3::Nfsstat3::NFS3ERR_JUKEBOX);
    let (_, recall) = a.recall().await;
    assert_eq!(recall.stateid, dsid);
    // REMOVE of the delegated name is held back the same way.
    let remove = xdr::to_xdr_buf(&nfs::v3::Remove3Args {
        object: nfs::v3::Diropargs3 {
            dir: nfs::v3::NfsFh3::new(&root_fh(&a).await.0).unwrap(),
            name: nfs::v3::Filename3(Bytes::from_static(b"r")),
        },
    });
    let r = v3_call(&b.rpc, &b.cred, 12, remove.clone()).await;
    assert_eq!(v3_status(&r), nfs::v3::Nfsstat3::NFS3ERR_JUKEBOX);
    assert_eq!(a.delegreturn(&fh, &dsid).await, Nfsstat4::NFS4_OK);
    let r = v3_call(&b.rpc, &b.cred, 6, read).await;
    assert_eq!(v3_status(&r), nfs::v3::Nfsstat3::NFS3_OK);
    let r = v3_call(&b.rpc, &b.cred, 12, remove).await;
    assert_eq!(v3_status(&r), nfs::v3::Nfsstat3::NFS3_OK);
}

async fn root_fh(a: &Client) -> NfsFh4 {
    let r = a
        .seq(vec![NfsArgop4::Putrootfh(()), NfsArgop4::Getfh(())])
        .await;
    match r.resarray.last() {
        Some(NfsResop4::Getfh(Res4::Ok(g))) => g.object.clone(),
        other => panic!("GETFH: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_writer_recalls_the_delegation_and_the_holder_sees_its_data() {
    let srv = serve("local", 4).await;
    let mut a = Client::connect(&srv, "client-a").await;
    let (dsid, fh) = read_delegated(&a, "l").await;
    // A process on the server writes into the export, not through NFS.
    // The delegation's kernel lease holds its open back: the holder is
    // recalled before the data changes, and the writer goes on once the
    // delegation is returned.
    let writer = local_writer(srv._dir.0.join("l"), b"written locally");
    let (_, recall) = a.recall().await;
    assert_eq!(recall.stateid, dsid);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!writer.is_finished(), "the local open waits for the return");
    assert_eq!(&read_all(&a, &fh, dsid).await[..], b"", "not yet written");
    let returned = std::time::Instant::now();
    assert_eq!(a.delegreturn(&fh, &dsid).await, Nfsstat4::NFS4_OK);
    let written = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .expect("the local writer goes on after DELEGRETURN")
        .unwrap();
    assert!(written >= returned);
    let (sid, _, _) = opened(&a.open("l", OPEN4_SHARE_ACCESS_READ).await);
    assert_eq!(&read_all(&a, &fh, sid).await[..], b"written locally");
}

/// A local process's `open` and `write` of `path` (blocking: a kernel
/// lease may hold the open back); the instant the write was done.
fn local_writer(
    path: std::path::PathBuf,
    data: &'static [u8],
) -> tokio::task::JoinHandle<std::time::Instant> {
    tokio::task::spawn_blocking(move || {
        std::fs::write(path, data).unwrap();
        std::time::Instant::now()
    })
}

/// The holder's own WRITEs, LINK, RENAME and REMOVE of its delegated file
/// change the file's ctime (and size or nlink), which the server's inotify
/// watch sees (`IN_MODIFY`, `IN_ATTRIB`, `IN_MOVE_SELF`, then
/// `IN_CLOSE_WRITE` at CLOSE); they are no conflict (RFC 8881 §10.4.1 is
/// about other clients and local processes), so no CB_RECALL follows. (A
/// `git commit` on a v4 mount drew one recall for every two delegations
/// through the namespace ones.) A local rename does recall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holders_own_changes_do_not_recall_but_a_local_rename_does() {
    let srv = serve("ownchange", 4).await;
    let mut a = Client::connect(&srv, "client-a").await;
    let (dsid, fh) = write_deleg(&a, "n").await;
    for _ in 0..3 {
        let r = a.seq(write_ops(&fh, dsid, b"object")).await;
        assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    }
    let comp = |n: &'static str| Component4::from_static(n);
    let steps = [
        vec![NfsArgop4::Putrootfh(())],
        vec![
            NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
            NfsArgop4::Savefh(()),
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Link(Link4Args {
                newname: comp("n.link"),
            }),
        ],
        vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Savefh(()),
            NfsArgop4::Rename(Rename4Args {
                oldname: comp("n"),
                newname: comp("n.moved"),
            }),
        ],
        vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Remove(Remove4Args {
                target: comp("n.link"),
            }),
        ],
    ];
    for ops in steps {
        let r = a.seq(ops).await;
        assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
        // Past the server's quiet time after its own change (500 ms).
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(
            a.recalls.try_recv().is_err(),
            "no recall for the holder's own change before {:?}",
            r.resarray.last()
        );
    }
    // The name changes under the holder (RFC 8881 §10.4.1): recalled, so
    // its next lookup of the directory goes to the server.
    std::fs::rename(srv._dir.0.join("n.moved"), srv._dir.0.join("n.local")).unwrap();
    let (_, recall) = a.recall().await;
    assert_eq!(recall.stateid, dsid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_back_channel_does_not_hold_up_other_clients_recalls() {
    let srv = serve("deadcb", 4).await;
    let a = Client::connect(&srv, "client-a").await;
    let mut b = Client::connect(&srv, "client-b").await;
    let c = Client::connect(&srv, "client-c").await;
    let (_, da, _) = opened(&a.open("a", OPEN4_SHARE_ACCESS_READ).await);
    let (_, db, fb) = opened(&b.open("b", OPEN4_SHARE_ACCESS_READ).await);
    assert!(matches!(da, OpenDelegation4::Read(..)) && matches!(db, OpenDelegation4::Read(..)));
    // A's back channel goes dead: its recall hangs (up to 5 s).
    a.stall.store(true, Ordering::SeqCst);
    let r = c.open("a", OPEN4_SHARE_ACCESS_BOTH).await;
    assert_eq!(open_status(&r), Nfsstat4::NFS4ERR_DELAY);
    // B's recall goes out at once all the same, and C gets its file.
    let t0 = std::time::Instant::now();
    let r = c.open("b", OPEN4_SHARE_ACCESS_BOTH).await;
    assert_eq!(open_status(&r), Nfsstat4::NFS4ERR_DELAY);
    let OpenDelegation4::Read(sid, ..) = db else {
        unreachable!()
    };
    let (_, recall) = b.recall().await;
    assert_eq!(recall.stateid, sid);
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(b.delegreturn(&fb, &sid).await, Nfsstat4::NFS4_OK);
    let (_, r) = open_after_delay(&c, "b", OPEN4_SHARE_ACCESS_BOTH).await;
    opened(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nfsv3_rename_of_a_delegated_file_recalls_and_the_holder_finds_the_new_name() {
    let srv = serve("v3rename", 4).await;
    let mut a = Client::connect(&srv, "client-a").await;
    let b = Client::connect(&srv, "client-b").await;
    let (dsid, fh) = read_delegated(&a, "old").await;
    let root = nfs::v3::NfsFh3::new(&root_fh(&a).await.0).unwrap();
    let dir = |n: &'static [u8]| nfs::v3::Diropargs3 {
        dir: root.clone(),
        name: nfs::v3::Filename3(Bytes::from_static(n)),
    };
    let rename = xdr::to_xdr_buf(&nfs::v3::Rename3Args {
        from: dir(b"old"),
        to: dir(b"new"),
    });
    let call = v3_call(&b.rpc, &b.cred, 14, rename);
    let holder = async {
        let (_, recall) = a.recall().await;
        assert_eq!(recall.stateid, dsid);
        assert_eq!(a.delegreturn(&fh, &dsid).await, Nfsstat4::NFS4_OK);
    };
    let (r, ()) = tokio::join!(call, holder);
    assert_eq!(v3_status(&r), nfs::v3::Nfsstat3::NFS3_OK);
    // The holder's next lookups see the rename.
    let r = a
        .seq(vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Lookup(Lookup4Args {
                objname: Component4::from_static("old"),
            }),
        ])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NOENT);
    let (_, _, fh2) = opened(&a.open("new", OPEN4_SHARE_ACCESS_READ).await);
    assert_eq!(fh2, fh);
}

/// A read-only OPEN of `file`: its delegation stateid, if one was granted.
async fn read_deleg(c: &Client, file: &'static str) -> (Option<Stateid4>, NfsFh4) {
    let (_, d, fh) = opened(&c.open(file, OPEN4_SHARE_ACCESS_READ).await);
    match d {
        OpenDelegation4::Read(sid, ..) => (Some(sid), fh),
        OpenDelegation4::None => (None, fh),
        other => panic!("unexpected delegation {other:?}"),
    }
}

/// The delegation caps (`nfs4.delegations`, RFC 8881 §10.2: a server may
/// decline to delegate): beyond the per-client and the total cap OPEN
/// succeeds with OPEN_DELEGATE_NONE, delegations granted earlier stay
/// valid, and a returned delegation makes room.
#[tokio::test]
async fn opens_beyond_the_delegation_caps_get_none() {
    let limits = DelegLimits {
        max: 3,
        max_per_client: 2,
        ..DelegLimits::default()
    };
    let srv = serve_with("delegcaps", 16, limits).await;
    let a = Client::connect(&srv, "caps-a").await;
    let b = Client::connect(&srv, "caps-b").await;
    let before = trips("nfs4.delegations");
    let (a1, fh1) = read_deleg(&a, "a1").await;
    let (a2, _) = read_deleg(&a, "a2").await;
    assert!(a1.is_some() && a2.is_some());
    assert_eq!(read_deleg(&a, "a3").await.0, None, "per-client cap");
    assert!(trips("nfs4.delegations") > before);
    let (b1, _) = read_deleg(&b, "b1").await;
    assert!(b1.is_some());
    let before = trips("nfs4.delegations");
    assert_eq!(read_deleg(&b, "b2").await.0, None, "total cap");
    assert!(trips("nfs4.delegations") > before);
    // Earlier delegations are untouched: still held, returned normally.
    assert_eq!(a.delegreturn(&fh1, &a1.unwrap()).await, Nfsstat4::NFS4_OK);
    // The returned one made room under both caps.
    assert!(read_deleg(&a, "a3").await.0.is_some());
}

/// No kernel lease, no delegation (`nfs4.delegation_leases`): a file a
/// local process holds open for writing cannot take a read lease
/// (EAGAIN), so OPEN grants none; once the writer closes it, one is
/// granted.
#[tokio::test]
async fn a_file_open_for_writing_locally_gets_no_delegation() {
    let srv = serve("leaseless", 4).await;
    let a = Client::connect(&srv, "lease-a").await;
    let path = srv._dir.0.join("busy");
    std::fs::write(&path, b"x").unwrap();
    let local = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let before = trips("nfs4.delegation_leases");
    assert_eq!(read_deleg(&a, "busy").await.0, None);
    assert!(trips("nfs4.delegation_leases") > before);
    drop(local);
    assert!(read_deleg(&a, "busy").await.0.is_some());
}

/// The cap on delegated files watched for local changes
/// (`nfs4.delegation_watches`): beyond it OPEN grants no delegation
/// (none may be granted on a file whose local changes are not seen,
/// RFC 8881 §10.4.1); a returned delegation frees its watch.
#[tokio::test]
async fn opens_beyond_the_watch_cap_get_no_delegation() {
    let limits = DelegLimits {
        max_watches: 2,
        ..DelegLimits::default()
    };
    let srv = serve_with("watchcap", 16, limits).await;
    let a = Client::connect(&srv, "watch-a").await;
    let before = trips("nfs4.delegation_watches");
    let (w1, fh1) = read_deleg(&a, "w1").await;
    let (w2, _) = read_deleg(&a, "w2").await;
    assert!(w1.is_some() && w2.is_some());
    assert_eq!(read_deleg(&a, "w3").await.0, None);
    assert!(trips("nfs4.delegation_watches") > before);
    assert_eq!(a.delegreturn(&fh1, &w1.unwrap()).await, Nfsstat4::NFS4_OK);
    assert!(read_deleg(&a, "w3").await.0.is_some());
}

#[test]
fn delegation_limits_default_to_the_documented_values() {
    let d = DelegLimits::default();
    assert_eq!(
        (d.max, d.max_per_client, d.max_watches),
        (65_536, 4096, 4096)
    );
}

/// The directory's `change` attribute and `time_modify` as A sees them.
async fn dir_change(a: &Client) -> (u64, Nfstime4) {
    let r = a
        .seq(vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Getattr(Getattr4Args {
                attr_request: Bitmap4::from_bits(&[
                    nfs::v4::attr::FATTR4_CHANGE,
                    nfs::v4::attr::FATTR4_TIME_MODIFY,
                ]),
            }),
        ])
        .await;
    let Some(NfsResop4::Getattr(Res4::Ok(g))) = r.resarray.last() else {
        panic!("GETATTR: {r:?}")
    };
    let f = FileAttrs::from_fattr4(&g.obj_attributes).unwrap();
    (f.change.unwrap(), f.time_modify.unwrap())
}

/// A's LOOKUP of `name` in the export's root.
async fn lookup(a: &Client, name: &'static str) -> Nfsstat4 {
    lookup_fh(a, name).await.0
}

/// LOOKUP and GETFH of `name` in the export's root (no OPEN, so no
/// delegation).
async fn lookup_fh(a: &Client, name: &'static str) -> (Nfsstat4, Option<NfsFh4>) {
    let r = a
        .seq(vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Lookup(Lookup4Args {
                objname: Component4::from_static(name),
            }),
            NfsArgop4::Getfh(()),
        ])
        .await;
    let fh = match r.resarray.last() {
        Some(NfsResop4::Getfh(Res4::Ok(g))) => Some(g.object.clone()),
        _ => None,
    };
    (r.status, fh)
}

/// Who changes the directory in [`namespace_ops_change_the_directory_for_a_delegation_holder`].
enum NsOp {
    /// An NFSv3 procedure from client B.
    V3(u32, XdrBuf),
    /// An NFSv4.1 COMPOUND from client B (after SEQUENCE).
    V4(Vec<NfsArgop4>),
    /// A process on the server.
    Local(Box<dyn Fn(&std::path::Path) + Send>),
}

/// Issue 19 item 3, name-cache safety: the server grants no directory
/// delegations, so a client holding a delegation on a file in a directory
/// learns of renames, creates and removes there from the directory's
/// `change` attribute (RFC 8881 §10.8, §5.8.1.4; RFC 1813 §2.3.5 ctime
/// and mtime for NFSv3). Every namespace operation in the directory, by an
/// NFSv3 client, another NFSv4.1 client or a local process, must change
/// the directory's change attribute and mtime, and the holder's next
/// LOOKUP must see the new names and not the old ones; operations on other
/// names do not recall the holder's delegation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_ops_change_the_directory_for_a_delegation_holder() {
    let srv = serve("names", 4).await;
    let mut a = Client::connect(&srv, "client-a").await;
    let b = Client::connect(&srv, "client-b").await;
    std::fs::write(srv._dir.0.join("src"), b"link source").unwrap();
    let (_, deleg, _) = opened(&a.open("held", OPEN4_SHARE_ACCESS_READ).await);
    assert!(matches!(deleg, OpenDelegation4::Read(..)), "{deleg:?}");
    let root = nfs::v3::NfsFh3::new(&root_fh(&a).await.0).unwrap();
    let src = nfs::v3::NfsFh3::new(&lookup_fh(&b, "src").await.1.unwrap().0).unwrap();
    let d = |n: &'static str| nfs::v3::Diropargs3 {
        dir: root.clone(),
        name: nfs::v3::Filename3(Bytes::from_static(n.as_bytes())),
    };
    let v3_create = |n| {
        xdr::to_xdr_buf(&nfs::v3::Create3Args {
            dir: d(n),
            how: nfs::v3::Createhow3::Guarded(nfs::v3::Sattr3::default()),
        })
    };
    let v3_remove = |n| xdr::to_xdr_buf(&nfs::v3::Remove3Args { object: d(n) });
    let rename3 = |f, t| {
        xdr::to_xdr_buf(&nfs::v3::Rename3Args {
            from: d(f),
            to: d(t),
        })
    };
    let comp = |n: &'static str| Component4::from_static(n);
    let local = |f: fn(&std::path::Path)| NsOp::Local(Box::new(f));
    // (what, the operation, names it adds, names it takes away)
    type Case = (
        &'static str,
        NsOp,
        &'static [&'static str],
        &'static [&'static str],
    );
    let ops: Vec<Case> = vec![
        ("v3 CREATE", NsOp::V3(8, v3_create("v3c")), &["v3c"], &[]),
        (
            "v3 MKDIR",
            NsOp::V3(
                9,
                xdr::to_xdr_buf(&nfs::v3::Mkdir3Args {
                    dir: d("v3d"),
                    attributes: nfs::v3::Sattr3::default(),
                }),
            ),
            &["v3d"],
            &[],
        ),
        (
            "v3 LINK",
            NsOp::V3(
                15,
                xdr::to_xdr_buf(&nfs::v3::Link3Args {
                    file: src.clone(),
                    link: d("v3l"),
                }),
            ),
            &["v3l"],
            &[],
        ),
        (
            "v3 RENAME",
            NsOp::V3(14, rename3("v3c", "v3r")),
            &["v3r"],
            &["v3c"],
        ),
        (
            "v3 RENAME over",
            NsOp::V3(14, rename3("v3r", "v3l")),
            &["v3l"],
            &["v3r"],
        ),
        ("v3 REMOVE", NsOp::V3(12, v3_remove("v3l")), &[], &["v3l"]),
        ("v3 RMDIR", NsOp::V3(13, v3_remove("v3d")), &[], &["v3d"]),
        ("v4 OPEN create", NsOp::V4(vec![]), &["v4c"], &[]),
        (
            "v4 CREATE dir",
            NsOp::V4(vec![
                NfsArgop4::Putrootfh(()),
                NfsArgop4::Create(Create4Args {
                    objtype: Createtype4::Dir,
                    objname: comp("v4d"),
                    createattrs: FileAttrs::default().to_fattr4(&Bitmap4::from_bits(&[])),
                }),
            ]),
            &["v4d"],
            &[],
        ),
        (
            "v4 RENAME",
            NsOp::V4(vec![
                NfsArgop4::Putrootfh(()),
                NfsArgop4::Savefh(()),
                NfsArgop4::Rename(Rename4Args {
                    oldname: comp("v4c"),
                    newname: comp("v4r"),
                }),
            ]),
            &["v4r"],
            &["v4c"],
        ),
        (
            "v4 REMOVE",
            NsOp::V4(vec![
                NfsArgop4::Putrootfh(()),
                NfsArgop4::Remove(Remove4Args {
                    target: comp("v4r"),
                }),
            ]),
            &[],
            &["v4r"],
        ),
        (
            "v4 REMOVE dir",
            NsOp::V4(vec![
                NfsArgop4::Putrootfh(()),
                NfsArgop4::Remove(Remove4Args {
                    target: comp("v4d"),
                }),
            ]),
            &[],
            &["v4d"],
        ),
        (
            "local create",
            local(|p| std::fs::write(p.join("lc"), b"x").unwrap()),
            &["lc"],
            &[],
        ),
        (
            "local rename",
            local(|p| std::fs::rename(p.join("lc"), p.join("lr")).unwrap()),
            &["lr"],
            &["lc"],
        ),
        (
            "local link",
            local(|p| std::fs::hard_link(p.join("lr"), p.join("ll")).unwrap()),
            &["ll"],
            &[],
        ),
        (
            "local unlink",
            local(|p| std::fs::remove_file(p.join("lr")).unwrap()),
            &[],
            &["lr"],
        ),
        (
            "local mkdir",
            local(|p| std::fs::create_dir(p.join("ld")).unwrap()),
            &["ld"],
            &[],
        ),
        (
            "local rmdir",
            local(|p| std::fs::remove_dir(p.join("ld")).unwrap()),
            &[],
            &["ld"],
        ),
    ];
    for (what, op, added, gone) in ops {
        // A looks the names up first, as a client filling its name cache would.
        for n in added.iter().chain(gone) {
            lookup(&a, n).await;
        }
        let before = dir_change(&a).await;
        match op {
            NsOp::V3(p, args) => {
                let r = v3_call(&b.rpc, &b.cred, p, args).await;
                assert_eq!(v3_status(&r), nfs::v3::Nfsstat3::NFS3_OK, "{what}");
            }
            NsOp::V4(ops) if ops.is_empty() => {
                opened(&b.open("v4c", OPEN4_SHARE_ACCESS_READ).await);
            }
            NsOp::V4(ops) => {
                let r = b.seq(ops).await;
                assert_eq!(r.status, Nfsstat4::NFS4_OK, "{what}: {r:?}");
            }
            NsOp::Local(f) => f(&srv._dir.0),
        }
        let after = dir_change(&a).await;
        assert_ne!(
            after.0, before.0,
            "{what}: the directory's change attribute"
        );
        assert_ne!(after.1, before.1, "{what}: the directory's mtime");
        for n in added {
            assert_eq!(lookup(&a, n).await, Nfsstat4::NFS4_OK, "{what}: {n} after");
        }
        for n in gone {
            assert_eq!(
                lookup(&a, n).await,
                Nfsstat4::NFS4ERR_NOENT,
                "{what}: {n} after"
            );
        }
    }
    assert!(
        a.recalls.try_recv().is_err(),
        "changes to other names do not recall the holder's delegation"
    );
}

/// Issue 19, found by the kpeer two-mount check: a holder of a write
/// delegation only starts writing back at close (Linux), so the size and
/// change another client reads may be behind. NFSv3 GETATTR, LOOKUP and
/// ACCESS recall the write delegation first (RFC 8881 §10.4.3), and so
/// does another NFSv4.1 client's GETATTR of size or change when the holder
/// does not answer CB_GETATTR (this test's holder answers it NOTSUPP);
/// they leave read delegations alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attribute_reads_by_others_recall_a_write_delegation() {
    let srv = serve("getattr", 4).await;
    let mut a = Client::connect(&srv, "client-a").await;
    let b = Client::connect(&srv, "client-b").await;
    let root = nfs::v3::NfsFh3::new(&root_fh(&a).await.0).unwrap();
    for (name, proc_) in [("g1", 1u32), ("g2", 3), ("g3", 4)] {
        let (_, deleg, fh) = opened(&a.open(name, OPEN4_SHARE_ACCESS_BOTH).await);
        let OpenDelegation4::Write(dsid, ..) = deleg else {
            panic!("write delegation expected: {deleg:?}")
        };
        let object = nfs::v3::NfsFh3::new(&fh.0).unwrap();
        let args = match proc_ {
            1 => xdr::to_xdr_buf(&nfs::v3::Getattr3Args { object }),
            3 => xdr::to_xdr_buf(&nfs::v3::Lookup3Args {
                what: nfs::v3::Diropargs3 {
                    dir: root.clone(),
                    name: nfs::v3::Filename3(Bytes::from_static(name.as_bytes())),
                },
            }),
            _ => xdr::to_xdr_buf(&nfs::v3::Access3Args { object, access: 1 }),
        };
        let call = v3_call(&b.rpc, &b.cred, proc_, args);
        let holder = async {
            let (_, recall) = a.recall().await;
            assert_eq!(recall.stateid, dsid);
            assert_eq!(a.delegreturn(&fh, &dsid).await, Nfsstat4::NFS4_OK);
        };
        let (r, ()) = tokio::join!(call, holder);
        assert_eq!(v3_status(&r), nfs::v3::Nfsstat3::NFS3_OK, "proc {proc_}");
    }
    // A read delegation: GETATTR goes through without a recall.
    let (_, deleg, fh) = opened(&a.open("g4", OPEN4_SHARE_ACCESS_READ).await);
    assert!(matches!(deleg, OpenDelegation4::Read(..)), "{deleg:?}");
    let object = nfs::v3::NfsFh3::new(&fh.0).unwrap();
    let r = v3_call(
        &b.rpc,
        &b.cred,
        1,
        xdr::to_xdr_buf(&nfs::v3::Getattr3Args { object }),
    )
    .await;
    assert_eq!(v3_status(&r), nfs::v3::Nfsstat3::NFS3_OK);
    // Another v4.1 client's GETATTR of size: NFS4ERR_DELAY until returned.
    let (dsid, fh) = write_deleg(&a, "g5").await;
    let getattr = vec![
        NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
        NfsArgop4::Getattr(Getattr4Args {
            attr_request: Bitmap4::from_bits(&[nfs::v4::attr::FATTR4_SIZE]),
        }),
    ];
    assert_eq!(b.seq(getattr.clone()).await.status, Nfsstat4::NFS4ERR_DELAY);
    let (_, recall) = a.recall().await;
    assert_eq!(recall.stateid, dsid);
    // The holder itself is not held up.
    assert_eq!(a.seq(getattr.clone()).await.status, Nfsstat4::NFS4_OK);
    assert_eq!(a.delegreturn(&fh, &dsid).await, Nfsstat4::NFS4_OK);
    assert_eq!(b.seq(getattr).await.status, Nfsstat4::NFS4_OK);
    assert!(a.recalls.try_recv().is_err(), "one recall per delegation");
}

/// A process on the server writing just after the holder's own write
/// (within the server's quiet time for its own changes) still recalls the
/// delegation: the kpeer two-mount check had a host write missed this way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_write_right_after_the_holders_write_still_recalls() {
    let srv = serve("ownthenlocal", 4).await;
    let mut a = Client::connect(&srv, "client-a").await;
    let (dsid, fh) = write_deleg(&a, "q").await;
    let r = a.seq(write_ops(&fh, dsid, b"from the holder")).await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    let writer = local_writer(srv._dir.0.join("q"), b"local");
    let (_, recall) = a.recall().await;
    assert_eq!(recall.stateid, dsid);
    assert_eq!(a.delegreturn(&fh, &dsid).await, Nfsstat4::NFS4_OK);
    tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .expect("the local writer goes on after DELEGRETURN")
        .unwrap();
    let (sid, _, _) = opened(&a.open("q", OPEN4_SHARE_ACCESS_READ).await);
    assert_eq!(&read_all(&a, &fh, sid).await[..], b"local");
}

/// A [`LocalFs`] whose WRITEs wait while its gate is held: a WRITE the
/// server is still applying.
struct GatedFs {
    fs: LocalFs,
    gate: tokio::sync::RwLock<()>,
    /// WRITEs that reached the gate.
    entered: AtomicU32,
}

impl GatedFs {
    /// Waits until a WRITE is at the gate (bounded).
    async fn entered(&self) {
        for _ in 0..500 {
            if self.entered.load(Ordering::SeqCst) > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no WRITE reached the storage");
    }
}

mod gated {
    use nfs::v3::{Createhow3, Fattr3, Filename3, Mknoddata3, NfsFh3, Nfstime3, Sattr3, StableHow};
    use nfs_server::{
        DirPage, DirRequest, DirSink, FsStat, Segment, Storage, StorageResult, XattrError, XattrSet,
    };

    use super::*;

    impl Storage for GatedFs {
        fn root(&self) -> NfsFh3 {
            self.fs.root()
        }
        fn read_only(&self) -> bool {
            self.fs.read_only()
        }
        fn owns(&self, fh: &NfsFh3) -> bool {
            self.fs.owns(fh)
        }
        fn write_verifier(&self) -> [u8; 8] {
            self.fs.write_verifier()
        }
        async fn getattr(&self, fh: &NfsFh3) -> StorageResult<Fattr3> {
            self.fs.getattr(fh).await
        }
        async fn setattr(&self, fh: &NfsFh3, a: &Sattr3, g: Option<Nfstime3>) -> StorageResult<()> {
            self.fs.setattr(fh, a, g).await
        }
        async fn lookup(&self, d: &NfsFh3, n: &Filename3) -> StorageResult<NfsFh3> {
            self.fs.lookup(d, n).await
        }
        async fn readlink(&self, fh: &NfsFh3) -> StorageResult<Bytes> {
            self.fs.readlink(fh).await
        }
        async fn read(&self, fh: &NfsFh3, off: u64, n: u32) -> StorageResult<(Bytes, bool)> {
            self.fs.read(fh, off, n).await
        }
        async fn write(
            &self,
            fh: &NfsFh3,
            off: u64,
            data: &[u8],
            how: StableHow,
        ) -> StorageResult<StableHow> {
            self.entered.fetch_add(1, Ordering::SeqCst);
            let _open = self.gate.read().await;
            self.fs.write(fh, off, data, how).await
        }
        async fn create(&self, d: &NfsFh3, n: &Filename3, h: &Createhow3) -> StorageResult<NfsFh3> {
            self.fs.create(d, n, h).await
        }
        async fn mkdir(&self, d: &NfsFh3, n: &Filename3, a: &Sattr3) -> StorageResult<NfsFh3> {
            self.fs.mkdir(d, n, a).await
        }
        async fn symlink(
            &self,
            d: &NfsFh3,
            n: &Filename3,
            t: &[u8],
            a: &Sattr3,
        ) -> StorageResult<NfsFh3> {
            self.fs.symlink(d, n, t, a).await
        }
        async fn mknod(&self, d: &NfsFh3, n: &Filename3, w: &Mknoddata3) -> StorageResult<NfsFh3> {
            self.fs.mknod(d, n, w).await
        }
        async fn remove(&self, d: &NfsFh3, n: &Filename3) -> StorageResult<()> {
            self.fs.remove(d, n).await
        }
        async fn rmdir(&self, d: &NfsFh3, n: &Filename3) -> StorageResult<()> {
            self.fs.rmdir(d, n).await
        }
        async fn rename(
            &self,
            fd: &NfsFh3,
            f: &Filename3,
            td: &NfsFh3,
            t: &Filename3,
        ) -> StorageResult<()> {
            self.fs.rename(fd, f, td, t).await
        }
        async fn link(&self, fh: &NfsFh3, d: &NfsFh3, n: &Filename3) -> StorageResult<()> {
            self.fs.link(fh, d, n).await
        }
        async fn readdir(
            &self,
            d: &NfsFh3,
            req: DirRequest,
            sink: &mut dyn DirSink,
        ) -> StorageResult<DirPage> {
            self.fs.readdir(d, req, sink).await
        }
        async fn fsstat(&self, fh: &NfsFh3) -> StorageResult<FsStat> {
            self.fs.fsstat(fh).await
        }
        async fn commit(&self, fh: &NfsFh3) -> StorageResult<()> {
            self.fs.commit(fh).await
        }
        async fn seek(&self, fh: &NfsFh3, off: u64, hole: bool) -> StorageResult<Option<u64>> {
            self.fs.seek(fh, off, hole).await
        }
        fn open_file(&self, fh: &NfsFh3, write: bool) -> StorageResult<std::fs::File> {
            self.fs.open_file(fh, write)
        }
        fn pin(&self, fh: &NfsFh3, fd: &std::sync::Arc<std::os::fd::OwnedFd>) {
            self.fs.pin(fh, fd)
        }
        async fn allocate(
            &self,
            fh: &NfsFh3,
            off: u64,
            len: u64,
            punch: bool,
        ) -> StorageResult<()> {
            self.fs.allocate(fh, off, len, punch).await
        }
        async fn getxattr(&self, fh: &NfsFh3, n: &[u8], max: usize) -> Result<Bytes, XattrError> {
            self.fs.getxattr(fh, n, max).await
        }
        async fn setxattr(
            &self,
            fh: &NfsFh3,
            n: &[u8],
            v: &[u8],
            how: XattrSet,
        ) -> Result<(), XattrError> {
            self.fs.setxattr(fh, n, v, how).await
        }
        async fn listxattrs(&self, fh: &NfsFh3) -> Result<Vec<Bytes>, XattrError> {
            self.fs.listxattrs(fh).await
        }
        async fn removexattr(&self, fh: &NfsFh3, n: &[u8]) -> Result<(), XattrError> {
            self.fs.removexattr(fh, n).await
        }
        async fn read_plus(
            &self,
            fh: &NfsFh3,
            off: u64,
            n: u32,
            segs: usize,
        ) -> StorageResult<(Vec<Segment>, bool)> {
            self.fs.read_plus(fh, off, n, segs).await
        }
        async fn copy_range(
            &self,
            src: &NfsFh3,
            so: u64,
            dst: &NfsFh3,
            d: u64,
            n: u64,
        ) -> StorageResult<u64> {
            self.fs.copy_range(src, so, dst, d, n).await
        }
        async fn clone_range(
            &self,
            src: &NfsFh3,
            so: u64,
            dst: &NfsFh3,
            d: u64,
            n: u64,
        ) -> StorageResult<()> {
            self.fs.clone_range(src, so, dst, d, n).await
        }
    }
}

/// The NFSv4 server alone, over a [`GatedFs`], with a back channel.
async fn serve_gated(tag: &str) -> (Srv, Arc<GatedFs>) {
    serve_gated_with(tag, SessionLimits::default()).await
}

async fn serve_gated_with(tag: &str, limits: SessionLimits) -> (Srv, Arc<GatedFs>) {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let dir = TempDir::new(&format!("gated-{tag}"));
    let uid = dir.owner();
    let clock = Arc::new(ManualClock::new());
    let fs = Arc::new(GatedFs {
        fs: LocalFs::new(dir.path(), false).unwrap(),
        gate: tokio::sync::RwLock::new(()),
        entered: AtomicU32::new(0),
    });
    let slot = BackchannelSlot::new();
    let mut server = oncrpc::Server::new();
    let cfg = v4_config(limits, &clock, b"gated");
    server.register(Nfs4Service::with_config(Arc::clone(&fs), cfg).with_backchannels(slot.clone()));
    let net = LoopbackNetwork::new(900 + u64::from(n));
    let cfg = RdmaServerConfig {
        backchannel_credits: 4,
        ..RdmaServerConfig::default()
    };
    let listener = RdmaListener::bind(&net.device(), &String::new(), Arc::new(server), cfg)
        .await
        .unwrap();
    let addr = listener.local_addr();
    let bcs = listener.backchannels();
    slot.set(backchannel_fn(move |p: &oncrpc::PeerInfo| {
        bcs.get(p.conn_id)
    }));
    listener.spawn();
    let srv = Srv {
        net,
        addr,
        clock,
        uid,
        _dir: dir,
    };
    (srv, fs)
}

/// SEQUENCE on the unused `slot` (its first request); PUTFH; WRITE of
/// `data` at 0, FILE_SYNC. The COMPOUND status.
async fn write_on_slot(
    c: &Client,
    slot: u32,
    fh: &NfsFh4,
    sid: Stateid4,
    data: &'static [u8],
) -> Nfsstat4 {
    c.ops(vec![
        NfsArgop4::Sequence(Sequence4Args {
            sessionid: FixedOpaque(c.session),
            sequenceid: 1,
            slotid: slot,
            highest_slotid: slot,
            cachethis: false,
        }),
        NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
        NfsArgop4::Write(Write4Args {
            stateid: sid,
            offset: 0,
            stable: StableHow4::FILE_SYNC4,
            data: xdr::DdpOpaque(Bytes::from_static(data)),
        }),
    ])
    .await
    .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegreturn_waits_for_the_holders_writes_in_progress() {
    // Issue 19: the holder flushes and returns the delegation without
    // waiting for its WRITE's reply; the server is still applying the
    // WRITE when the DELEGRETURN arrives. The other client must not get
    // the file before the WRITE is in it.
    const DATA: &[u8] = b"flushed before the return";
    let (srv, fs) = serve_gated("inflight").await;
    let mut a = Client::connect(&srv, "client-a").await;
    let b = Client::connect(&srv, "client-b").await;
    let (dsid, fh) = write_deleg(&a, "g").await;
    assert_eq!(
        b.open("g", OPEN4_SHARE_ACCESS_READ).await.status,
        Nfsstat4::NFS4ERR_DELAY
    );
    let (_, recall) = a.recall().await;
    assert_eq!(recall.stateid, dsid);
    let held = fs.gate.write().await;
    let write = write_on_slot(&a, 1, &fh, dsid, DATA);
    let give_back = async {
        fs.entered().await;
        let ret = a.delegreturn(&fh, &dsid);
        tokio::pin!(ret);
        let early = tokio::time::timeout(Duration::from_millis(300), &mut ret).await;
        assert!(
            early.is_err(),
            "DELEGRETURN answered while a WRITE of the file was in progress"
        );
        // B is still held back.
        assert_eq!(
            b.open("g", OPEN4_SHARE_ACCESS_READ).await.status,
            Nfsstat4::NFS4ERR_DELAY
        );
        drop(held);
        assert_eq!(ret.await, Nfsstat4::NFS4_OK);
    };
    let (w, ()) = tokio::join!(write, give_back);
    assert_eq!(w, Nfsstat4::NFS4_OK);
    let (_, r) = open_after_delay(&b, "g", OPEN4_SHARE_ACCESS_READ).await;
    let (bsid, _, _) = opened(&r);
    assert_eq!(&read_all(&b, &fh, bsid).await[..], DATA);
}

/// The bound on a DELEGRETURN's wait for WRITEs in progress
/// (`SessionLimits::delegreturn_write_wait`, limit
/// `nfs4.delegreturn_write_wait`): a holder whose WRITE never completes
/// (here the storage never lets it through) gets its DELEGRETURN answered
/// once the bound has passed, the trip is counted, and the other client
/// gets the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_never_finishes_holds_delegreturn_only_for_the_bound() {
    let limits = SessionLimits {
        delegreturn_write_wait: Duration::from_millis(400),
        ..SessionLimits::default()
    };
    let (srv, fs) = serve_gated_with("stuck", limits).await;
    let mut a = Client::connect(&srv, "client-a").await;
    let b = Client::connect(&srv, "client-b").await;
    let (dsid, fh) = write_deleg(&a, "s").await;
    assert_eq!(
        b.open("s", OPEN4_SHARE_ACCESS_READ).await.status,
        Nfsstat4::NFS4ERR_DELAY
    );
    let (_, recall) = a.recall().await;
    assert_eq!(recall.stateid, dsid);
    // The gate stays shut while the DELEGRETURN runs: the WRITE stays
    // in progress, as with a client that never sends its data.
    let held = fs.gate.write().await;
    let write = write_on_slot(&a, 1, &fh, dsid, b"never applied");
    let give_back = async {
        fs.entered().await;
        let before = trips("nfs4.delegreturn_write_wait");
        let t = std::time::Instant::now();
        let ret = tokio::time::timeout(Duration::from_secs(5), a.delegreturn(&fh, &dsid))
            .await
            .expect("DELEGRETURN answered within the bound");
        let waited = t.elapsed();
        assert_eq!(ret, Nfsstat4::NFS4_OK);
        assert!(waited >= Duration::from_millis(350), "{waited:?}");
        assert!(trips("nfs4.delegreturn_write_wait") > before);
        // The delegation is gone: B gets the file.
        let (_, r) = open_after_delay(&b, "s", OPEN4_SHARE_ACCESS_READ).await;
        opened(&r);
        drop(held);
    };
    let (w, ()) = tokio::join!(write, give_back);
    assert_eq!(w, Nfsstat4::NFS4_OK);
}

/// An NFSv3 READDIRPLUS of the root: each entry's name and whether it
/// came with attributes.
async fn v3_readdirplus(b: &Client, root: &NfsFh4) -> Vec<(Bytes, bool)> {
    let args = xdr::to_xdr_buf(&nfs::v3::Readdirplus3Args {
        dir: nfs::v3::NfsFh3::new(&root.0).unwrap(),
        cookie: 0,
        cookieverf: FixedOpaque([0; 8]),
        dircount: 4096,
        maxcount: 32768,
    });
    let r = v3_call(&b.rpc, &b.cred, 17, args).await;
    let res: nfs::v3::Readdirplus3Res = xdr::from_slice(&r).unwrap();
    let nfs::v3::Res3::Ok(ok) = res else {
        panic!("READDIRPLUS: {res:?}")
    };
    ok.entries
        .into_iter()
        .map(|e| (e.name.0, e.name_attributes.is_some()))
        .collect()
}

/// READDIRPLUS returns attributes of many files: a write-delegated entry
/// comes without them (the server's size and times lag behind the
/// holder's cache) and its delegation is recalled, as a GETATTR would;
/// a read-delegated entry keeps its attributes and its delegation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nfsv3_readdirplus_withholds_attributes_of_write_delegated_entries() {
    let srv = serve("rdplus", 4).await;
    let mut a = Client::connect(&srv, "client-a").await;
    let b = Client::connect(&srv, "client-b").await;
    let (dsid, fh) = write_deleg(&a, "wd").await;
    let (rsid, _) = read_deleg(&a, "rd").await;
    assert!(rsid.is_some());
    let root = root_fh(&a).await;
    let listed = v3_readdirplus(&b, &root).await;
    let has = |n: &[u8]| listed.iter().find(|(m, _)| &m[..] == n).map(|e| e.1);
    assert_eq!(has(b"wd"), Some(false), "{listed:?}");
    assert_eq!(has(b"rd"), Some(true), "{listed:?}");
    let (_, recall) = a.recall().await;
    assert_eq!(recall.stateid, dsid);
    assert_eq!(a.delegreturn(&fh, &dsid).await, Nfsstat4::NFS4_OK);
    assert!(
        a.recalls.try_recv().is_err(),
        "the read delegation is not recalled"
    );
    let listed = v3_readdirplus(&b, &root).await;
    let has = |n: &[u8]| listed.iter().find(|(m, _)| &m[..] == n).map(|e| e.1);
    assert_eq!(has(b"wd"), Some(true), "{listed:?}");
    assert_eq!(has(b"rd"), Some(true), "{listed:?}");
}
