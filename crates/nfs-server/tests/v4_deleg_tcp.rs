//! NFSv4.1 delegations over ONC RPC on TCP, with the back channel on a
//! connection the client opened (RFC 8881 §2.10.3.1, §10.2, §10.4,
//! §18.33, §18.34, §18.36, §20): scripted clients whose TCP connections
//! answer the server's CB_NULL and CB_COMPOUND (CB_SEQUENCE, CB_RECALL,
//! CB_GETATTR) with their own callback service.

mod v4_common;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nfs::nlm::*;
use nfs::v4::attr::{Bitmap4, FileAttrs, FATTR4_CHANGE, FATTR4_MODE, FATTR4_SIZE};
use nfs::v4::cb::*;
use nfs::v4::session::*;
use nfs::v4::*;
use nfs_server::nfs3::Nfs3Service;
use nfs_server::nlm::{NlmLimits, NlmLocks, NlmService};
use nfs_server::v4::{BackchannelSlot, ManualClock, Nfs4Service, SessionLimits};
use nfs_server::LocalFs;
use oncrpc::client::{ClientConfig, ReplyHint, RpcCall};
use oncrpc::msg::{AuthSys, Credential, OpaqueAuth};
use oncrpc::tcp::{TcpClient, TcpConfig, TcpServer};
use oncrpc::{CallContext, ClientTransport, RpcService, ServiceError};
use tokio::sync::mpsc;
use v4_common::{
    open_session, reclaim_complete_op, slot0_sequence, v4_config, SessionAsk, TempDir, CB_PROGRAM,
};
use xdr::{Bounded, Encode, FixedOpaque, XdrBuf};

const LEASE: Duration = Duration::from_secs(90);
const OP_DELEGRETURN: u32 = 8;
/// The server's bound on one callback in these tests.
const CB_BOUND: Duration = Duration::from_millis(400);

/// One callback as the client saw it.
#[derive(Debug, Clone)]
struct Seen {
    /// The CB_COMPOUND's minor version.
    minor: u32,
    seq: CbSequence4Args,
    op: NfsCbArgop4,
    cred: Credential,
}

/// What a client's callback service does and saw.
#[derive(Default)]
struct CbState {
    nulls: AtomicU32,
    /// CB_COMPOUND never answers (a dead back channel).
    stall: AtomicBool,
    /// CB_GETATTRs left unanswered so far.
    stalled_getattrs: AtomicUsize,
    /// CB_RECALL answers only after this long.
    recall_delay_ms: AtomicU32,
    /// CB_RECALL answers only once this many CB_COMPOUNDs run at once
    /// (or after 5 s): proves concurrency without racing a fixed delay.
    recall_gate: AtomicUsize,
    /// CB_COMPOUNDs running now, and the most at once.
    running: AtomicUsize,
    most: AtomicUsize,
    /// What CB_GETATTR reports: (change, size).
    attrs: Mutex<Option<(u64, u64)>>,
}

/// The client's callback program.
struct CbService {
    program: u32,
    st: Arc<CbState>,
    seen: mpsc::UnboundedSender<Seen>,
}

impl CbService {
    fn answer(&self, op: &NfsCbArgop4) -> NfsCbResop4 {
        match op {
            NfsCbArgop4::Sequence(s) => NfsCbResop4::Sequence(Res4::Ok(CbSequence4ResOk {
                sessionid: s.sessionid,
                sequenceid: s.sequenceid,
                slotid: s.slotid,
                highest_slotid: s.highest_slotid,
                target_highest_slotid: s.highest_slotid,
            })),
            NfsCbArgop4::Recall(_) => NfsCbResop4::Recall(Nfsstat4::NFS4_OK),
            NfsCbArgop4::Getattr(g) => match *self.st.attrs.lock().unwrap() {
                Some((change, size)) => NfsCbResop4::Getattr(Res4::Ok(
                    FileAttrs {
                        change: Some(change),
                        size: Some(size),
                        ..Default::default()
                    }
                    .to_fattr4(&g.attr_request),
                )),
                None => NfsCbResop4::Getattr(Res4::Err(Nfsstat4::NFS4ERR_BADHANDLE)),
            },
            NfsCbArgop4::Other(n) => NfsCbResop4::Other(*n, Nfsstat4::NFS4ERR_NOTSUPP),
            NfsCbArgop4::Layoutrecall(_) => {
                NfsCbResop4::Layoutrecall(Nfsstat4::NFS4ERR_NOMATCHING_LAYOUT)
            }
            NfsCbArgop4::Offload(_) => NfsCbResop4::Offload(Nfsstat4::NFS4_OK),
        }
    }

    /// Waits until `recall_gate` CB_COMPOUNDs have run at once, at most
    /// 5 s (the most at once, not the count now: the first to be let go
    /// lowers that).
    async fn wait_for_gate(&self) {
        let gate = self.st.recall_gate.load(Ordering::SeqCst);
        let until = tokio::time::Instant::now() + Duration::from_secs(5);
        while self.st.most.load(Ordering::SeqCst) < gate && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn compound(&self, ctx: CallContext, args: Bytes) -> Result<XdrBuf, ServiceError> {
        if self.st.stall.load(Ordering::SeqCst) {
            if let Ok(a) = xdr::from_slice::<CbCompound4Args>(&args) {
                let n = a
                    .argarray
                    .iter()
                    .filter(|o| matches!(o, NfsCbArgop4::Getattr(_)));
                self.st
                    .stalled_getattrs
                    .fetch_add(n.count(), Ordering::SeqCst);
            }
            std::future::pending::<()>().await;
        }
        let a: CbCompound4Args = xdr::from_slice(&args).map_err(ServiceError::GarbageArgs)?;
        let Some(NfsCbArgop4::Sequence(seq)) = a.argarray.first().cloned() else {
            return Err(ServiceError::SystemErr("no CB_SEQUENCE"));
        };
        let now = self.st.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.st.most.fetch_max(now, Ordering::SeqCst);
        let mut res = Vec::new();
        for op in &a.argarray {
            if matches!(op, NfsCbArgop4::Recall(_)) {
                let ms = self.st.recall_delay_ms.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(u64::from(ms))).await;
                self.wait_for_gate().await;
            }
            if !matches!(op, NfsCbArgop4::Sequence(_)) {
                let _ = self.seen.send(Seen {
                    minor: a.minorversion,
                    seq: seq.clone(),
                    op: op.clone(),
                    cred: ctx.credential.clone(),
                });
            }
            res.push(self.answer(op));
        }
        self.st.running.fetch_sub(1, Ordering::SeqCst);
        Ok(xdr::to_xdr_buf(&CbCompound4Res {
            status: Nfsstat4::NFS4_OK,
            tag: Bounded(a.tag),
            resarray: Bounded(res),
        }))
    }
}

impl RpcService for CbService {
    fn program(&self) -> u32 {
        self.program
    }
    fn versions(&self) -> std::ops::RangeInclusive<u32> {
        NFS4_CALLBACK_VERSION..=NFS4_CALLBACK_VERSION
    }
    async fn call(&self, ctx: CallContext, args: Bytes) -> Result<XdrBuf, ServiceError> {
        match ctx.proc_ {
            CB_NULL => {
                self.st.nulls.fetch_add(1, Ordering::SeqCst);
                Ok(XdrBuf::new())
            }
            CB_COMPOUND => self.compound(ctx, args).await,
            _ => Err(ServiceError::ProcUnavail),
        }
    }
}

struct Srv {
    addr: std::net::SocketAddr,
    clock: Arc<ManualClock>,
    uid: u32,
    _dir: TempDir,
}

/// The NFSv4.1 (and NFSv3) server over TCP, callbacks on the clients'
/// connections, each bounded by [`CB_BOUND`].
async fn serve(tag: &str) -> Srv {
    serve_with(tag, CB_BOUND).await
}

/// A server whose bound on one callback is `cb_bound`.
async fn serve_with(tag: &str, cb_bound: Duration) -> Srv {
    let dir = TempDir::new(&format!("cbtcp-{tag}"));
    let uid = dir.owner();
    let clock = Arc::new(ManualClock::new());
    let fs = Arc::new(LocalFs::new(dir.path(), false).unwrap());
    let slot = BackchannelSlot::new();
    let mut server = oncrpc::Server::new();
    let cfg = v4_config(SessionLimits::default(), &clock, b"cbtcp");
    let v4 = Nfs4Service::with_config(Arc::clone(&fs), cfg)
        .with_backchannels(slot.clone())
        .with_callback_timeout(cb_bound);
    let delegs = v4.delegations().with_wait(Duration::from_millis(300));
    let locks = NlmLocks::new(NlmLimits::default());
    let v4 = v4.with_nlm_locks(locks.clone());
    let table = Arc::new(nfs_server::access::ExportTable::open_to_all(fs, Vec::new()));
    server.register(
        NlmService::new(Arc::clone(&table), locks)
            .with_v4_locks(v4.byte_range_locks())
            .with_delegations(delegs.clone()),
    );
    server.register(v4);
    server.register(Nfs3Service::new(table).with_delegations(delegs));
    let listener = TcpServer::bind("127.0.0.1:0", Arc::new(server), TcpConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    slot.set(nfs_server::tcp_backchannels(listener.backchannels()));
    listener.spawn();
    Srv {
        addr,
        clock,
        uid,
        _dir: dir,
    }
}

/// How a scripted client sets up its session.
#[derive(Clone)]
struct Setup {
    /// CREATE_SESSION4_FLAG_CONN_BACK_CHAN.
    back_chan: bool,
    /// Back channel `ca_maxrequests`.
    back_slots: u32,
    sec: Vec<CallbackSecParms4>,
    /// Whether the fore-channel connection answers calls from the server.
    answers: bool,
    /// The minor version of the client's COMPOUNDs.
    minor: u32,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            back_chan: true,
            back_slots: 4,
            sec: vec![CallbackSecParms4::None],
            answers: true,
            minor: 1,
        }
    }
}

/// One scripted NFSv4.1 client over TCP with its callback service.
struct Client {
    rpc: TcpClient,
    cred: OpaqueAuth,
    clientid: u64,
    session: [u8; 16],
    seq: AtomicU32,
    st: Arc<CbState>,
    seen: mpsc::UnboundedReceiver<Seen>,
    tx: mpsc::UnboundedSender<Seen>,
    minor: u32,
}

/// A TCP connection to `srv`, answering calls for `program` with a
/// service sharing `st` when `answers`.
async fn connect_rpc(
    srv: &Srv,
    answers: bool,
    program: u32,
    st: &Arc<CbState>,
    tx: &mpsc::UnboundedSender<Seen>,
) -> TcpClient {
    let (cfg, tcp) = (ClientConfig::default(), TcpConfig::default());
    if !answers {
        return TcpClient::connect(srv.addr, 7, cfg, tcp).await.unwrap();
    }
    let mut cb = oncrpc::Server::new();
    cb.register(CbService {
        program,
        st: Arc::clone(st),
        seen: tx.clone(),
    });
    TcpClient::connect_with_backchannel(srv.addr, 7, cfg, tcp, Arc::new(cb))
        .await
        .unwrap()
}

fn sys_parms(uid: u32) -> CallbackSecParms4 {
    CallbackSecParms4::Sys(AuthsysParms {
        stamp: 3,
        machinename: Bounded(Bytes::from_static(b"cbhost")),
        uid,
        gid: uid,
        gids: Bounded(vec![]),
    })
}

async fn call(rpc: &TcpClient, cred: &OpaqueAuth, args: Bytes) -> Compound4Res {
    xdr::from_slice(&raw(rpc, cred, args).await).unwrap()
}

async fn raw(rpc: &TcpClient, cred: &OpaqueAuth, args: Bytes) -> Bytes {
    rpc.call(RpcCall {
        prog: NFS4_PROGRAM,
        vers: NFS_V4,
        proc_: NFSPROC4_COMPOUND,
        cred: cred.clone(),
        args: XdrBuf::from_bytes(args),
        reply_hint: ReplyHint::default(),
    })
    .await
    .unwrap()
}

fn compound(minor: u32, ops: Vec<NfsArgop4>) -> Bytes {
    xdr::to_bytes(&Compound4Args {
        tag: Bytes::new(),
        minorversion: minor,
        argarray: ops,
    })
}

impl Client {
    async fn connect(srv: &Srv, name: &str, setup: Setup) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let st = Arc::new(CbState::default());
        let rpc = connect_rpc(srv, setup.answers, CB_PROGRAM, &st, &tx).await;
        let mut c = Self {
            rpc,
            cred: AuthSys {
                stamp: 1,
                machinename: Bytes::from_static(b"cbtcp"),
                uid: srv.uid,
                gid: srv.uid,
                gids: vec![],
            }
            .to_opaque_auth(),
            clientid: 0,
            session: [0; 16],
            seq: AtomicU32::new(0),
            st,
            seen: rx,
            tx,
            minor: setup.minor,
        };
        let r = c.establish(name, &setup).await;
        assert_eq!(r, Nfsstat4::NFS4_OK);
        c
    }

    async fn ops(&self, ops: Vec<NfsArgop4>) -> Compound4Res {
        call(&self.rpc, &self.cred, compound(self.minor, ops)).await
    }

    /// EXCHANGE_ID and CREATE_SESSION; the CREATE_SESSION status.
    async fn establish(&mut self, name: &str, setup: &Setup) -> Nfsstat4 {
        let ask = SessionAsk {
            back_chan: setup.back_chan,
            back_slots: setup.back_slots,
            sec: setup.sec.clone(),
            ..SessionAsk::default()
        };
        match open_session(|o| self.ops(o), name, &ask).await {
            Ok((clientid, session)) => {
                (self.clientid, self.session) = (clientid, session);
                let rc = reclaim_complete_op();
                assert_eq!(self.seq(vec![rc]).await.status, Nfsstat4::NFS4_OK);
                Nfsstat4::NFS4_OK
            }
            Err(e) => e,
        }
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
        self.open_in(NfsArgop4::Putrootfh(()), file, access).await
    }

    /// `dir` (PUTROOTFH or PUTFH); OPEN `file` (created if missing) with
    /// `access`; GETFH.
    async fn open_in(&self, dir: NfsArgop4, file: &'static str, access: u32) -> Compound4Res {
        self.seq(vec![
            dir,
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
                    .to_fattr4(&Bitmap4::from_bits(&[FATTR4_MODE])),
                ))),
                claim: OpenClaim4::Null(Component4::from_static(file)),
            }),
            NfsArgop4::Getfh(()),
        ])
        .await
    }

    /// PUTFH; GETATTR(change, size).
    async fn getattr(&self, fh: &NfsFh4) -> Result<FileAttrs, Nfsstat4> {
        let r = self
            .seq(vec![
                NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
                NfsArgop4::Getattr(Getattr4Args {
                    attr_request: Bitmap4::from_bits(&[FATTR4_CHANGE, FATTR4_SIZE]),
                }),
            ])
            .await;
        match r.resarray.last() {
            Some(NfsResop4::Getattr(Res4::Ok(g))) => {
                Ok(FileAttrs::from_fattr4(&g.obj_attributes).unwrap())
            }
            Some(other) => Err(other.status()),
            None => panic!("no result"),
        }
    }

    /// SEQUENCE; PUTFH; DELEGRETURN. Returns the COMPOUND status.
    async fn delegreturn(&self, fh: &NfsFh4, sid: &Stateid4) -> Nfsstat4 {
        let mut b = BytesMut::new();
        Bytes::new().encode(&mut b);
        self.minor.encode(&mut b);
        3u32.encode(&mut b);
        self.sequence().encode(&mut b);
        NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }).encode(&mut b);
        OP_DELEGRETURN.encode(&mut b);
        sid.encode(&mut b);
        let r = raw(&self.rpc, &self.cred, b.freeze()).await;
        xdr::from_slice::<Nfsstat4>(&r[..4]).unwrap()
    }

    /// The next callback operation the client received.
    async fn callback(&mut self) -> Seen {
        tokio::time::timeout(Duration::from_secs(10), self.seen.recv())
            .await
            .expect("a callback within 10 s")
            .unwrap()
    }
}

fn opened(r: &Compound4Res) -> (OpenDelegation4, NfsFh4) {
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
    (o.delegation, fh)
}

fn write_deleg(d: &OpenDelegation4) -> Stateid4 {
    match d {
        OpenDelegation4::Write(sid, ..) => *sid,
        other => panic!("write delegation expected: {other:?}"),
    }
}

fn open_status(r: &Compound4Res) -> Nfsstat4 {
    r.resarray.last().map(NfsResop4::status).unwrap()
}

/// `c`'s OPEN until it stops answering NFS4ERR_DELAY (bounded).
async fn open_after_delay(c: &Client, file: &'static str, access: u32) -> Compound4Res {
    for _ in 0..200 {
        let r = c.open(file, access).await;
        if r.status != Nfsstat4::NFS4ERR_DELAY {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("still NFS4ERR_DELAY");
}

/// RFC 8881 §2.10.3.1, §18.36.3 (CONN_BACK_CHAN on TCP), §10.4.1,
/// §20.2: a TCP client gets a delegation, another client's conflicting
/// OPEN recalls it on the holder's own connection, with the AUTH_SYS
/// credential the holder asked for in `csa_sec_parms`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_delegation_is_recalled_on_the_holders_connection_with_its_credential() {
    let srv = serve("recall").await;
    let setup = Setup {
        sec: vec![sys_parms(4242), CallbackSecParms4::None],
        ..Setup::default()
    };
    let mut a = Client::connect(&srv, "client-a", setup).await;
    let b = Client::connect(&srv, "client-b", Setup::default()).await;
    let (deleg, fh) = opened(&a.open("f", OPEN4_SHARE_ACCESS_BOTH).await);
    let dsid = write_deleg(&deleg);
    assert_eq!(a.st.nulls.load(Ordering::SeqCst), 1, "CB_NULL probe first");
    let r = b.open("f", OPEN4_SHARE_ACCESS_READ).await;
    assert_eq!(open_status(&r), Nfsstat4::NFS4ERR_DELAY);
    let cb = a.callback().await;
    let NfsCbArgop4::Recall(recall) = &cb.op else {
        panic!("CB_RECALL expected: {cb:?}")
    };
    assert_eq!((recall.stateid, &recall.fh), (dsid, &fh));
    assert_eq!(cb.minor, 1);
    assert_eq!(cb.seq.sessionid.0, a.session);
    assert_eq!(cb.seq.sequenceid, 1);
    let Credential::Sys(sys) = &cb.cred else {
        panic!("AUTH_SYS expected: {:?}", cb.cred)
    };
    assert_eq!((sys.uid, &sys.machinename[..]), (4242, &b"cbhost"[..]));
    assert_eq!(a.delegreturn(&fh, &dsid).await, Nfsstat4::NFS4_OK);
    let r = open_after_delay(&b, "f", OPEN4_SHARE_ACCESS_READ).await;
    opened(&r);
    assert_eq!(a.flags().await, 0);
}

/// RFC 8881 §10.4.3, §20.1: another client's GETATTR of a file under a
/// write delegation is answered with the size the holder reports by
/// CB_GETATTR, and a change attribute past the server's that moves when
/// the holder's does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cb_getattr_answers_the_size_the_write_delegation_holder_reports() {
    let srv = serve("getattr").await;
    let mut a = Client::connect(&srv, "client-a", Setup::default()).await;
    let b = Client::connect(&srv, "client-b", Setup::default()).await;
    let (deleg, fh) = opened(&a.open("g", OPEN4_SHARE_ACCESS_BOTH).await);
    write_deleg(&deleg);
    let server = a.getattr(&fh).await.unwrap();
    assert_eq!(server.size, Some(0));
    let c0 = server.change.unwrap();
    // The holder has written 12345 bytes it has not sent yet.
    *a.st.attrs.lock().unwrap() = Some((c0 + 7, 12345));
    let seen = b.getattr(&fh).await.unwrap();
    assert_eq!(seen.size, Some(12345));
    let c1 = seen.change.unwrap();
    assert!(c1 > c0, "{c1} > {c0}");
    let cb = a.callback().await;
    let NfsCbArgop4::Getattr(g) = &cb.op else {
        panic!("CB_GETATTR expected: {cb:?}")
    };
    assert_eq!(g.fh, fh);
    assert!(g.attr_request.contains(FATTR4_SIZE) && g.attr_request.contains(FATTR4_CHANGE));
    // Same report: same answer; the holder writes more: change moves.
    assert_eq!(b.getattr(&fh).await.unwrap().change, Some(c1));
    *a.st.attrs.lock().unwrap() = Some((c0 + 8, 20000));
    let again = b.getattr(&fh).await.unwrap();
    assert_eq!(again.size, Some(20000));
    assert!(again.change.unwrap() > c1);
    // The holder's own GETATTR is the server's: no callback.
    assert_eq!(a.getattr(&fh).await.unwrap().size, Some(0));
    // A holder that cannot answer CB_GETATTR has the delegation recalled;
    // meanwhile the GETATTR is NFS4ERR_DELAY.
    *a.st.attrs.lock().unwrap() = None;
    assert_eq!(b.getattr(&fh).await, Err(Nfsstat4::NFS4ERR_DELAY));
    loop {
        let cb = a.callback().await;
        if matches!(cb.op, NfsCbArgop4::Recall(_)) {
            break;
        }
    }
}

/// RFC 8881 §10.4.3: a write-delegation holder that never answers
/// CB_GETATTR holds another client's GETATTR of size for the CB_GETATTR
/// wait only (500 ms, limit `nfs4.cb_getattr_wait`, counted when it runs
/// out): the GETATTR is answered NFS4ERR_DELAY and the delegation is
/// recalled, so the next GETATTR asks no one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_never_answers_cb_getattr_trips_the_wait_and_is_recalled() {
    // The server's default callback bound (5 s): the CB_GETATTR wait
    // ends first.
    let srv = serve_with("getattr-stall", Duration::from_secs(5)).await;
    let a = Client::connect(&srv, "client-a", Setup::default()).await;
    let b = Client::connect(&srv, "client-b", Setup::default()).await;
    let (deleg, fh) = opened(&a.open("g", OPEN4_SHARE_ACCESS_BOTH).await);
    write_deleg(&deleg);
    a.st.stall.store(true, Ordering::SeqCst);
    let waits = oncrpc::limits::trips("nfs4.cb_getattr_wait");
    assert_eq!(b.getattr(&fh).await, Err(Nfsstat4::NFS4ERR_DELAY));
    assert!(oncrpc::limits::trips("nfs4.cb_getattr_wait") > waits);
    assert_eq!(a.st.stalled_getattrs.load(Ordering::SeqCst), 1);
    // Being recalled: DELAY again, without a CB_GETATTR.
    assert_eq!(b.getattr(&fh).await, Err(Nfsstat4::NFS4ERR_DELAY));
    assert_eq!(a.st.stalled_getattrs.load(Ordering::SeqCst), 1);
}

/// RFC 8881 §20.9.3: a client that holds its one back-channel slot
/// (never replies) makes the server's other callbacks to it wait for the
/// slot, at most 64 of them per session (limit `nfs4.cb_slot_waiters`:
/// one more is refused at once) and each for one callback bound (limit
/// `nfs4.cb_slot_wait`), then tried again later; before, each waited for
/// good and their number had no bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callbacks_waiting_for_a_held_back_channel_slot_are_bounded() {
    const FILES: usize = 100;
    // A callback bound long enough that all recalls start while the
    // first holds the slot, on a loaded machine too.
    let srv = serve_with("slot-held", Duration::from_secs(3)).await;
    let setup = Setup {
        back_slots: 1,
        ..Setup::default()
    };
    let a = Client::connect(&srv, "client-a", setup).await;
    let b = Client::connect(&srv, "client-b", Setup::default()).await;
    let names: Vec<&'static str> = (0..FILES)
        .map(|i| &*Box::leak(format!("h{i}").into_boxed_str()))
        .collect();
    for n in &names {
        write_deleg(&opened(&a.open(n, OPEN4_SHARE_ACCESS_BOTH).await).0);
    }
    a.st.stall.store(true, Ordering::SeqCst);
    let (crowded, waited) = (
        oncrpc::limits::trips("nfs4.cb_slot_waiters"),
        oncrpc::limits::trips("nfs4.cb_slot_wait"),
    );
    // Each conflicting OPEN starts a recall: FILES callbacks for one
    // slot the client holds.
    for n in &names {
        let r = b.open(n, OPEN4_SHARE_ACCESS_READ).await;
        assert_eq!(open_status(&r), Nfsstat4::NFS4ERR_DELAY);
    }
    let t0 = std::time::Instant::now();
    while oncrpc::limits::trips("nfs4.cb_slot_waiters") == crowded
        || oncrpc::limits::trips("nfs4.cb_slot_wait") == waited
    {
        assert!(t0.elapsed() < Duration::from_secs(60), "no slot bound held");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// RFC 8881 §18.46.3 (SEQ4_STATUS_CB_PATH_DOWN), §10.2, §8.4: a holder
/// whose connection never answers callbacks has its path marked down
/// after the callback bound, and the conflicting OPEN proceeds once the
/// delegation is revoked a lease after the recall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_never_answers_gets_cb_path_down_and_the_conflict_proceeds() {
    let srv = serve("stall").await;
    let a = Client::connect(&srv, "client-a", Setup::default()).await;
    let b = Client::connect(&srv, "client-b", Setup::default()).await;
    let (deleg, _) = opened(&a.open("s", OPEN4_SHARE_ACCESS_BOTH).await);
    write_deleg(&deleg);
    a.st.stall.store(true, Ordering::SeqCst);
    let timeouts = oncrpc::limits::trips("nfs4.callback_timeout");
    let r = b.open("s", OPEN4_SHARE_ACCESS_READ).await;
    assert_eq!(open_status(&r), Nfsstat4::NFS4ERR_DELAY);
    let t0 = std::time::Instant::now();
    while a.flags().await & SEQ4_STATUS_CB_PATH_DOWN == 0 {
        assert!(t0.elapsed() < Duration::from_secs(5), "no CB_PATH_DOWN");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The bound that held is logged and counted.
    assert!(oncrpc::limits::trips("nfs4.callback_timeout") > timeouts);
    assert!(t0.elapsed() >= CB_BOUND / 2, "marked down by the bound");
    let r = b.open("s", OPEN4_SHARE_ACCESS_READ).await;
    assert_eq!(open_status(&r), Nfsstat4::NFS4ERR_DELAY, "within the lease");
    // A down path grants nothing more.
    let (deleg, _) = opened(&a.open("s2", OPEN4_SHARE_ACCESS_BOTH).await);
    assert_eq!(deleg, OpenDelegation4::None);
    // A lease after the recall the delegation is revoked (B renews its
    // own lease meanwhile).
    for _ in 0..10 {
        srv.clock.advance(LEASE / 9);
        b.flags().await;
    }
    let r = b.open("s", OPEN4_SHARE_ACCESS_READ).await;
    opened(&r);
}

/// RFC 8881 §18.34.3, §2.10.3.1: a session made without a back channel
/// gets one by BIND_CONN_TO_SESSION from a second connection that
/// answers callbacks; recalls then go there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_conn_to_session_gives_the_session_a_back_channel_connection() {
    let srv = serve("bind").await;
    let setup = Setup {
        back_chan: false,
        answers: false,
        ..Setup::default()
    };
    let mut a = Client::connect(&srv, "client-a", setup).await;
    let b = Client::connect(&srv, "client-b", Setup::default()).await;
    let (deleg, _) = opened(&a.open("x", OPEN4_SHARE_ACCESS_BOTH).await);
    assert_eq!(deleg, OpenDelegation4::None, "no back channel yet");
    let back = connect_rpc(&srv, true, CB_PROGRAM, &a.st, &a.tx).await;
    let bind = compound(
        1,
        vec![NfsArgop4::BindConnToSession(BindConnToSession4Args {
            sessid: FixedOpaque(a.session),
            dir: ChannelDir4::CDFC4_BACK,
            use_conn_in_rdma_mode: false,
        })],
    );
    let r = call(&back, &a.cred, bind).await;
    let Some(NfsResop4::BindConnToSession(Res4::Ok(ok))) = r.resarray.first() else {
        panic!("BIND_CONN_TO_SESSION: {r:?}")
    };
    assert_eq!(ok.dir, ChannelDir4::CDFC4_BACK);
    let (deleg, fh) = opened(&a.open("y", OPEN4_SHARE_ACCESS_BOTH).await);
    let dsid = write_deleg(&deleg);
    let r = b.open("y", OPEN4_SHARE_ACCESS_READ).await;
    assert_eq!(open_status(&r), Nfsstat4::NFS4ERR_DELAY);
    let cb = a.callback().await;
    assert!(matches!(cb.op, NfsCbArgop4::Recall(_)), "{cb:?}");
    assert_eq!(a.delegreturn(&fh, &dsid).await, Nfsstat4::NFS4_OK);
    opened(&open_after_delay(&b, "y", OPEN4_SHARE_ACCESS_READ).await);
    drop(back);
}

/// RFC 8881 §18.33.3: BACKCHANNEL_CTL gives the back channel a new
/// program and credential; RPCSEC_GSS alone is refused
/// (NFS4ERR_ENCR_ALG_UNSUPP), in CREATE_SESSION as well (§18.36.3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backchannel_ctl_changes_the_callback_program_and_credential() {
    let srv = serve("ctl").await;
    let gss = CallbackSecParms4::Gss(1, Bounded(Bytes::new()), Bounded(Bytes::new()));
    let (tx, _rx) = mpsc::unbounded_channel();
    let mut c = Client {
        rpc: TcpClient::connect(srv.addr, 9, ClientConfig::default(), TcpConfig::default())
            .await
            .unwrap(),
        cred: OpaqueAuth::NONE,
        clientid: 0,
        session: [0; 16],
        seq: AtomicU32::new(0),
        st: Arc::default(),
        seen: _rx,
        tx,
        minor: 1,
    };
    let only_gss = Setup {
        sec: vec![gss.clone()],
        ..Setup::default()
    };
    assert_eq!(
        c.establish("gss-only", &only_gss).await,
        Nfsstat4::NFS4ERR_ENCR_ALG_UNSUPP
    );
    // A client whose connection serves only program 0x4000_0001.
    let (tx, rx) = mpsc::unbounded_channel();
    let st = Arc::new(CbState::default());
    let mut a = Client {
        rpc: connect_rpc(&srv, true, CB_PROGRAM + 1, &st, &tx).await,
        cred: AuthSys {
            stamp: 1,
            machinename: Bytes::from_static(b"cbtcp"),
            uid: srv.uid,
            gid: srv.uid,
            gids: vec![],
        }
        .to_opaque_auth(),
        clientid: 0,
        session: [0; 16],
        seq: AtomicU32::new(0),
        st,
        seen: rx,
        tx,
        minor: 1,
    };
    assert_eq!(
        a.establish("client-a", &Setup::default()).await,
        Nfsstat4::NFS4_OK
    );
    let ctl = |prog, sec: Vec<CallbackSecParms4>| {
        NfsArgop4::BackchannelCtl(BackchannelCtl4Args {
            cb_program: prog,
            sec_parms: Bounded(sec),
        })
    };
    let r = a.seq(vec![ctl(CB_PROGRAM + 1, vec![gss])]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_ENCR_ALG_UNSUPP, "{r:?}");
    let r = a.seq(vec![ctl(CB_PROGRAM + 1, vec![sys_parms(777)])]).await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    let b = Client::connect(&srv, "client-b", Setup::default()).await;
    let (deleg, _) = opened(&a.open("c", OPEN4_SHARE_ACCESS_BOTH).await);
    write_deleg(&deleg);
    let r = b.open("c", OPEN4_SHARE_ACCESS_READ).await;
    assert_eq!(open_status(&r), Nfsstat4::NFS4ERR_DELAY);
    let cb = a.callback().await;
    let Credential::Sys(sys) = &cb.cred else {
        panic!("AUTH_SYS expected: {:?}", cb.cred)
    };
    assert_eq!(sys.uid, 777);
    // Outside a session BACKCHANNEL_CTL has no session to act on.
    let r = a.ops(vec![ctl(CB_PROGRAM, vec![])]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION, "{r:?}");
}

/// RFC 8881 §20.9.3, §2.10.6.1: several callbacks in flight per session,
/// on distinct back-channel slots, never more than the client granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_recalls_run_at_once_on_distinct_slots_within_the_grant() {
    let srv = serve("slots").await;
    for (granted, files) in [(3u32, ["m1", "m2", "m3"]), (1, ["n1", "n2", "n3"])] {
        let setup = Setup {
            back_slots: granted,
            ..Setup::default()
        };
        let mut a = Client::connect(&srv, &format!("client-a{granted}"), setup).await;
        let b = Client::connect(&srv, &format!("client-b{granted}"), Setup::default()).await;
        let mut held = Vec::new();
        for f in files {
            let (deleg, fh) = opened(&a.open(f, OPEN4_SHARE_ACCESS_BOTH).await);
            held.push((fh, write_deleg(&deleg)));
        }
        // Three slots: each recall is held until all three run at once
        // (a server that ran them one by one would hold each 5 s and
        // fail below). One slot: a delay, so a second recall sent while
        // the first is unanswered would show as two at once.
        if granted == 3 {
            a.st.recall_gate.store(3, Ordering::SeqCst);
        } else {
            a.st.recall_gate.store(0, Ordering::SeqCst);
            a.st.recall_delay_ms.store(150, Ordering::SeqCst);
        }
        for f in files {
            let r = b.open(f, OPEN4_SHARE_ACCESS_READ).await;
            assert_eq!(open_status(&r), Nfsstat4::NFS4ERR_DELAY);
        }
        let mut slots = Vec::new();
        for _ in 0..3 {
            let cb = a.callback().await;
            assert!(matches!(cb.op, NfsCbArgop4::Recall(_)), "{cb:?}");
            assert_eq!(cb.seq.highest_slotid, granted - 1);
            slots.push((cb.seq.slotid, cb.seq.sequenceid));
        }
        let most = a.st.most.load(Ordering::SeqCst);
        if granted == 1 {
            assert_eq!(most, 1, "one slot: one at a time");
            slots.sort_unstable();
            assert_eq!(slots, vec![(0, 1), (0, 2), (0, 3)]);
        } else {
            assert_eq!(most, 3, "three at once");
            let mut ids: Vec<u32> = slots.iter().map(|s| s.0).collect();
            ids.sort_unstable();
            assert_eq!(ids, vec![0, 1, 2]);
        }
        for (fh, sid) in &held {
            assert_eq!(a.delegreturn(fh, sid).await, Nfsstat4::NFS4_OK);
        }
    }
}

/// `nfs_server::start`, what `nfsrdma serve` runs: its TCP listener offers
/// back channels, so a TCP client with CONN_BACK_CHAN gets a delegation
/// and its recall (RFC 8881 §2.10.3.1, §10.4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_server_grants_delegations_over_tcp() {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let p = std::env::temp_dir().join(format!("nfs4-cbtcp-start-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    let export = p.join("export");
    std::fs::create_dir_all(&export).unwrap();
    // Root is squashed to 65534: let anyone create files.
    std::fs::set_permissions(&export, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let dir = TempDir(p.clone());
    let mut config = nfs_server::ServerConfig::new(&export);
    config.nfs_addr = "127.0.0.1:0".parse().unwrap();
    config.mount_addr = None;
    config.state_dir = Some(p.join("state"));
    let server = nfs_server::start(config).await.unwrap();
    let srv = Srv {
        addr: server.nfs_addr(),
        clock: Arc::new(ManualClock::new()),
        uid: std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&p).unwrap()),
        _dir: dir,
    };
    let root = NfsArgop4::Putfh(Putfh4Args {
        object: NfsFh4(Bytes::copy_from_slice(server.root_handle().as_bytes())),
    });
    let mut a = Client::connect(&srv, "start-a", Setup::default()).await;
    let b = Client::connect(&srv, "start-b", Setup::default()).await;
    let (deleg, fh) = opened(&a.open_in(root.clone(), "f", OPEN4_SHARE_ACCESS_BOTH).await);
    let dsid = write_deleg(&deleg);
    let r = b.open_in(root.clone(), "f", OPEN4_SHARE_ACCESS_READ).await;
    assert_eq!(open_status(&r), Nfsstat4::NFS4ERR_DELAY);
    let cb = a.callback().await;
    assert!(matches!(cb.op, NfsCbArgop4::Recall(_)), "{cb:?}");
    assert_eq!(a.delegreturn(&fh, &dsid).await, Nfsstat4::NFS4_OK);
    let mut done = false;
    for _ in 0..200 {
        let r = b.open_in(root.clone(), "f", OPEN4_SHARE_ACCESS_READ).await;
        if r.status != Nfsstat4::NFS4ERR_DELAY {
            opened(&r);
            done = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(done, "B's OPEN still delayed");
    server.stop();
}

/// RFC 8881 §10.4.1, §20.2: an NFSv3 WRITE (over TCP) of a file a TCP
/// NFSv4.1 client holds a write delegation on waits for the recall on the
/// holder's connection and succeeds once the holder returns it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nfsv3_write_recalls_a_tcp_write_delegation() {
    let srv = serve("v3write").await;
    let mut a = Client::connect(&srv, "client-a", Setup::default()).await;
    let (deleg, fh) = opened(&a.open("w", OPEN4_SHARE_ACCESS_BOTH).await);
    let dsid = write_deleg(&deleg);
    let v3 = TcpClient::connect(srv.addr, 11, ClientConfig::default(), TcpConfig::default())
        .await
        .unwrap();
    let args = xdr::to_xdr_buf(&nfs::v3::Write3Args {
        file: nfs::v3::NfsFh3::new(&fh.0).unwrap(),
        offset: 0,
        count: 7,
        stable: nfs::v3::StableHow::FILE_SYNC,
        data: xdr::DdpOpaque(Bytes::from_static(b"from v3")),
    });
    let write = v3.call(RpcCall {
        prog: NFS4_PROGRAM,
        vers: 3,
        proc_: 7,
        cred: a.cred.clone(),
        args,
        reply_hint: ReplyHint::default(),
    });
    let holder = async {
        let cb = a.callback().await;
        let NfsCbArgop4::Recall(recall) = &cb.op else {
            panic!("CB_RECALL expected: {cb:?}")
        };
        assert_eq!(recall.stateid, dsid);
        assert_eq!(a.delegreturn(&fh, &dsid).await, Nfsstat4::NFS4_OK);
    };
    let (r, ()) = tokio::join!(write, holder);
    let status = xdr::from_slice::<nfs::v3::Nfsstat3>(&r.unwrap()[..4]).unwrap();
    assert_eq!(status, nfs::v3::Nfsstat3::NFS3_OK);
}

/// NLMPROC4_LOCK (non-blocking) of the whole file `fh` by `host`.
async fn nlm_lock(c: &Client, host: &'static str, fh: &NfsFh4, exclusive: bool) -> Nlm4Stats {
    let a = Nlm4LockArgs {
        cookie: Bounded(Bytes::from_static(b"ck")),
        block: false,
        exclusive,
        alock: Nlm4Lock {
            caller_name: Bounded(Bytes::from_static(host.as_bytes())),
            fh: Bounded(Bytes::copy_from_slice(&fh.0)),
            oh: Bounded(Bytes::from_static(b"1@v3host")),
            svid: 1,
            l_offset: 0,
            l_len: 0,
        },
        reclaim: false,
        state: 1,
    };
    let r = c
        .rpc
        .call(RpcCall {
            prog: NLM_PROGRAM,
            vers: NLM_V4,
            proc_: 2,
            cred: c.cred.clone(),
            args: xdr::to_xdr_buf(&a),
            reply_hint: ReplyHint::default(),
        })
        .await
        .unwrap();
    xdr::from_slice::<Nlm4Res>(&r).unwrap().stat
}

/// RFC 8881 §10.4.1, §9.5: a delegation holder caches its byte-range
/// locks without telling the server (the Linux client does), so an NLM
/// lock first recalls a write delegation (NLM4_DENIED_GRACE_PERIOD, which
/// clients retry, while it is out) and is granted once it is returned;
/// while the NLM lock is held no client is given a delegation on the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nlm_lock_recalls_delegations_and_keeps_them_off_the_file() {
    let srv = serve("nlm").await;
    let mut a = Client::connect(&srv, "client-a", Setup::default()).await;
    let b = Client::connect(&srv, "client-b", Setup::default()).await;
    let (deleg, fh) = opened(&a.open("n", OPEN4_SHARE_ACCESS_BOTH).await);
    let dsid = write_deleg(&deleg);
    assert_eq!(
        nlm_lock(&b, "v3host", &fh, true).await,
        Nlm4Stats::NLM4_DENIED_GRACE_PERIOD
    );
    let cb = a.callback().await;
    let NfsCbArgop4::Recall(recall) = &cb.op else {
        panic!("CB_RECALL expected: {cb:?}")
    };
    assert_eq!(recall.stateid, dsid);
    assert_eq!(a.delegreturn(&fh, &dsid).await, Nfsstat4::NFS4_OK);
    assert_eq!(
        nlm_lock(&b, "v3host", &fh, true).await,
        Nlm4Stats::NLM4_GRANTED
    );
    // Another client opening the NLM-locked file gets no delegation.
    let c = Client::connect(&srv, "client-c", Setup::default()).await;
    let (deleg, _) = opened(&c.open("n", OPEN4_SHARE_ACCESS_READ).await);
    assert_eq!(deleg, OpenDelegation4::None);
}

/// RFC 8881 §16.2.3 (and RFC 7862 for 4.2): a callback carries the minor
/// version of the session it goes to; the Linux client looks the session
/// up among its clients of that minor version and answers
/// NFS4ERR_BADSESSION otherwise (seen with a kernel 4.2 mount).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_4_2_client_is_called_back_in_minor_version_2() {
    let srv = serve("minor2").await;
    let v42 = Setup {
        minor: 2,
        ..Setup::default()
    };
    let mut a = Client::connect(&srv, "client-42", v42.clone()).await;
    let b = Client::connect(&srv, "client-b", v42).await;
    let (deleg, fh) = opened(&a.open("m", OPEN4_SHARE_ACCESS_BOTH).await);
    let dsid = write_deleg(&deleg);
    assert_eq!(
        open_status(&b.open("m", OPEN4_SHARE_ACCESS_READ).await),
        Nfsstat4::NFS4ERR_DELAY
    );
    let cb = a.callback().await;
    assert!(matches!(cb.op, NfsCbArgop4::Recall(_)), "{cb:?}");
    assert_eq!(cb.minor, 2);
    assert_eq!(a.delegreturn(&fh, &dsid).await, Nfsstat4::NFS4_OK);
}
