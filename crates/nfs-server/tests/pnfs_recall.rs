//! CB_LAYOUTRECALL and fencing at the pNFS metadata server (RFC 8881
//! §12.5.5, §20.3; RFC 8435 §2.2), with scripted NFSv4.1 clients whose
//! TCP connections carry the back channel, two in-process nfsrdma data
//! servers, and an NFSv3 client changing files through the metadata
//! server: a truncation, chmod or removal recalls the layouts; a client
//! that returns its layout ends the recall; one that does not is fenced a
//! lease later (its credentials fail at the data server, its next layout
//! carries the new ids).

mod v4_common;

use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nfs::v3::{NfsFh3, Nfsstat3, Sattr3, StableHow};
use nfs::v4::attr::{Bitmap4, FileAttrs, FATTR4_MODE};
use nfs::v4::cb::*;
use nfs::v4::flexfiles::*;
use nfs::v4::session::*;
use nfs::v4::*;
use nfs_client::Nfs3Client;
use nfs_server::access::ExportTable;
use nfs_server::exports::Squash;
use nfs_server::nfs3::Nfs3Service;
use nfs_server::v4::pnfs::{DataServer, Mds, MdsConfig, DEFAULT_SYNTHETIC_ID};
use nfs_server::v4::{BackchannelSlot, ManualClock, Nfs4Config, Nfs4Service, SessionLimits};
use nfs_server::{LocalFs, RunningServer, ServerConfig, Storage};
use oncrpc::client::{ClientConfig, ReplyHint, RpcCall};
use oncrpc::msg::{AuthSys, OpaqueAuth};
use oncrpc::tcp::{TcpClient, TcpConfig, TcpServer};
use oncrpc::{CallContext, ClientTransport, RpcService, ServiceError};
use tokio::sync::mpsc;
use v4_common::{
    layoutcommit_file, layoutreturn_file, open_session, reclaim_complete_op, slot0_sequence,
    SessionAsk, TempDir, CB_PROGRAM,
};
use xdr::{Bounded, XdrBuf};

const LEASE: Duration = Duration::from_secs(90);

/// The client's callback program: answers CB_LAYOUTRECALL with
/// `answer` and hands each one to the test.
struct CbService {
    answer: Arc<AtomicU32>,
    seen: mpsc::UnboundedSender<CbLayoutrecall4Args>,
    /// CB_RECALLs (of delegations) received.
    deleg_recalls: Arc<AtomicU32>,
}

impl CbService {
    fn reply(&self, op: &NfsCbArgop4) -> NfsCbResop4 {
        match op {
            NfsCbArgop4::Sequence(s) => NfsCbResop4::Sequence(Res4::Ok(CbSequence4ResOk {
                sessionid: s.sessionid,
                sequenceid: s.sequenceid,
                slotid: s.slotid,
                highest_slotid: s.highest_slotid,
                target_highest_slotid: s.highest_slotid,
            })),
            NfsCbArgop4::Layoutrecall(a) => {
                let _ = self.seen.send(a.clone());
                NfsCbResop4::Layoutrecall(Nfsstat4(self.answer.load(Ordering::SeqCst)))
            }
            NfsCbArgop4::Recall(_) => {
                self.deleg_recalls.fetch_add(1, Ordering::SeqCst);
                NfsCbResop4::Recall(Nfsstat4::NFS4_OK)
            }
            NfsCbArgop4::Getattr(_) => NfsCbResop4::Getattr(Res4::Err(Nfsstat4::NFS4ERR_BADHANDLE)),
            NfsCbArgop4::Offload(_) => NfsCbResop4::Offload(Nfsstat4::NFS4_OK),
            NfsCbArgop4::Other(n) => NfsCbResop4::Other(*n, Nfsstat4::NFS4ERR_NOTSUPP),
        }
    }
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
            CB_NULL => Ok(XdrBuf::new()),
            CB_COMPOUND => {
                let a: CbCompound4Args =
                    xdr::from_slice(&args).map_err(ServiceError::GarbageArgs)?;
                let res = a.argarray.iter().map(|op| self.reply(op)).collect();
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

struct Cluster {
    addr: SocketAddr,
    clock: Arc<ManualClock>,
    uid: u32,
    mds: Arc<Mds>,
    /// The metadata server's export root over NFSv3.
    root: NfsFh3,
    _dir: TempDir,
    _ds: Vec<(RunningServer, TempDir)>,
}

async fn cluster(tag: &str) -> Cluster {
    cluster_with(tag, |_| {}).await
}

/// A cluster whose metadata server settings `tweak` changes.
async fn cluster_with(tag: &str, tweak: impl FnOnce(&mut MdsConfig)) -> Cluster {
    cluster_via(tag, tweak, None).await
}

/// A TCP relay to `to`: forwards both ways until `silent` is set, then
/// reads what comes and forwards nothing (a data server that keeps the
/// connection and never answers).
async fn relay(to: SocketAddr, silent: Arc<AtomicBool>) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    async fn pipe(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        silent: Arc<AtomicBool>,
    ) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) if !silent.load(Ordering::SeqCst) => {
                    if to.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
                Ok(_) => {}
            }
        }
    }
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((a, _)) = l.accept().await {
            let Ok(b) = tokio::net::TcpStream::connect(to).await else {
                continue;
            };
            let ((ar, aw), (br, bw)) = (a.into_split(), b.into_split());
            tokio::spawn(pipe(ar, bw, Arc::clone(&silent)));
            tokio::spawn(pipe(br, aw, Arc::clone(&silent)));
        }
    });
    addr
}

/// A cluster whose metadata server reaches its data servers through
/// [`relay`]s silenced by `silent`, when given.
async fn cluster_via(
    tag: &str,
    tweak: impl FnOnce(&mut MdsConfig),
    silent: Option<Arc<AtomicBool>>,
) -> Cluster {
    let mut ds = Vec::new();
    for i in 0..2 {
        let dir = TempDir::new(&format!("{tag}-ds{i}"));
        let mut cfg = ServerConfig::new(&dir.0);
        cfg.nfs_addr = "127.0.0.1:0".parse().unwrap();
        cfg.mount_addr = None;
        cfg.set_squash(Squash::None);
        ds.push((nfs_server::start(cfg).await.unwrap(), dir));
    }
    let mut specs = Vec::new();
    for (s, d) in &ds {
        let tcp = match &silent {
            Some(q) => relay(s.nfs_addr(), Arc::clone(q)).await,
            None => s.nfs_addr(),
        };
        specs.push(DataServer {
            tcp,
            rdma: None,
            mount_port: None,
            export: d.0.to_str().unwrap().to_owned(),
            advertise: None,
        });
    }
    let mut mds_cfg = MdsConfig::new(specs);
    tweak(&mut mds_cfg);
    let mds = Arc::new(Mds::new(mds_cfg));
    let dir = TempDir::new(&format!("{tag}-mds"));
    let clock = Arc::new(ManualClock::new());
    let fs = Arc::new(LocalFs::new(&dir.0, false).unwrap());
    let slot = BackchannelSlot::new();
    let v4 = Nfs4Service::with_config(
        Arc::clone(&fs),
        Nfs4Config {
            limits: SessionLimits::default(),
            clock: clock.clone(),
            server_owner: Bytes::from_static(b"recall"),
        },
    )
    .with_backchannels(slot.clone())
    .with_callback_timeout(Duration::from_millis(400))
    .with_mds(Arc::clone(&mds));
    let root = fs.root();
    let table = Arc::new(ExportTable::open_to_all(fs, Vec::new()));
    let mut server = oncrpc::Server::new();
    server.register(v4);
    server.register(Nfs3Service::new(table).with_mds(Arc::clone(&mds)));
    let listener = TcpServer::bind("127.0.0.1:0", Arc::new(server), TcpConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    slot.set(nfs_server::tcp_backchannels(listener.backchannels()));
    listener.spawn();
    let uid = std::fs::metadata(&dir.0).unwrap().uid();
    Cluster {
        addr,
        clock,
        uid,
        mds,
        root,
        _dir: dir,
        _ds: ds,
    }
}

fn cred(uid: u32) -> OpaqueAuth {
    AuthSys {
        stamp: 1,
        machinename: Bytes::from_static(b"recall"),
        uid,
        gid: uid,
        gids: vec![],
    }
    .to_opaque_auth()
}

/// A scripted NFSv4.1 client whose connection is its back channel.
struct Client {
    rpc: TcpClient,
    cred: OpaqueAuth,
    clientid: u64,
    session: [u8; 16],
    seq: AtomicU32,
    answer: Arc<AtomicU32>,
    recalls: mpsc::UnboundedReceiver<CbLayoutrecall4Args>,
    deleg_recalls: Arc<AtomicU32>,
}

impl Client {
    async fn connect(cl: &Cluster, name: &str) -> Self {
        let (tx, recalls) = mpsc::unbounded_channel();
        let answer = Arc::new(AtomicU32::new(0));
        let deleg_recalls = Arc::new(AtomicU32::new(0));
        let mut cb = oncrpc::Server::new();
        cb.register(CbService {
            answer: Arc::clone(&answer),
            seen: tx,
            deleg_recalls: Arc::clone(&deleg_recalls),
        });
        let rpc = TcpClient::connect_with_backchannel(
            cl.addr,
            7,
            ClientConfig::default(),
            TcpConfig::default(),
            Arc::new(cb),
        )
        .await
        .unwrap();
        let mut c = Self {
            rpc,
            cred: cred(cl.uid),
            clientid: 0,
            session: [0; 16],
            seq: AtomicU32::new(0),
            answer,
            recalls,
            deleg_recalls,
        };
        c.establish(name).await;
        c
    }

    async fn ops(&self, ops: Vec<NfsArgop4>) -> Compound4Res {
        let args = xdr::to_bytes(&Compound4Args {
            tag: Bytes::new(),
            minorversion: 1,
            argarray: ops,
        });
        let reply = self
            .rpc
            .call(RpcCall {
                prog: NFS4_PROGRAM,
                vers: NFS_V4,
                proc_: NFSPROC4_COMPOUND,
                cred: self.cred.clone(),
                args: XdrBuf::from_bytes(args),
                reply_hint: ReplyHint::default(),
            })
            .await
            .unwrap();
        xdr::from_slice(&reply).unwrap()
    }

    async fn establish(&mut self, name: &str) {
        let ask = SessionAsk {
            exchange_flags: EXCHGID4_FLAG_USE_PNFS_MDS,
            back_slots: 4,
            ..SessionAsk::default()
        };
        let (clientid, session) = open_session(|o| self.ops(o), name, &ask).await.unwrap();
        (self.clientid, self.session) = (clientid, session);
        assert_eq!(
            self.seq(vec![reclaim_complete_op()]).await.status,
            Nfsstat4::NFS4_OK
        );
    }

    async fn seq(&self, ops: Vec<NfsArgop4>) -> Compound4Res {
        let mut all = vec![slot0_sequence(self.session, &self.seq)];
        all.extend(ops);
        self.ops(all).await
    }

    /// OPEN `file` read-write, created if missing: its handle and open
    /// stateid.
    async fn open(&self, file: &'static str) -> (NfsFh4, Stateid4) {
        let r = self
            .seq(vec![
                NfsArgop4::Putrootfh(()),
                NfsArgop4::Open(Open4Args {
                    seqid: 0,
                    share_access: OPEN4_SHARE_ACCESS_BOTH,
                    share_deny: OPEN4_SHARE_DENY_NONE,
                    owner: StateOwner4 {
                        clientid: self.clientid,
                        owner: Bounded(Bytes::from_static(b"owner")),
                    },
                    openhow: OpenHow4(Some(Createhow4::Unchecked(
                        FileAttrs {
                            mode: Some(0o666),
                            ..Default::default()
                        }
                        .to_fattr4(&Bitmap4::from_bits(&[FATTR4_MODE])),
                    ))),
                    claim: OpenClaim4::Null(Component4::from_static(file)),
                }),
                NfsArgop4::Getfh(()),
            ])
            .await;
        let sid = r
            .resarray
            .iter()
            .find_map(|x| match x {
                NfsResop4::Open(Res4::Ok(o)) => Some(o.stateid),
                _ => None,
            })
            .unwrap_or_else(|| panic!("OPEN: {r:?}"));
        let Some(NfsResop4::Getfh(Res4::Ok(g))) = r.resarray.last() else {
            panic!("GETFH: {r:?}")
        };
        (g.object.clone(), sid)
    }

    /// LAYOUTGET (RW, whole file) of `fh` with `sid`: the result.
    async fn layoutget(&self, fh: &NfsFh4, sid: Stateid4) -> Layoutget4Res {
        let r = self
            .seq(vec![
                NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
                NfsArgop4::Layoutget(Layoutget4Args {
                    signal_layout_avail: false,
                    layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
                    iomode: Layoutiomode4::LAYOUTIOMODE4_RW,
                    offset: 0,
                    length: u64::MAX,
                    minlength: 0,
                    stateid: sid,
                    maxcount: 4096,
                }),
            ])
            .await;
        match r.resarray.last() {
            Some(NfsResop4::Layoutget(l)) => l.clone(),
            _ => panic!("LAYOUTGET: {r:?}"),
        }
    }

    /// LAYOUTRETURN of the whole file `fh` under `sid`: the status.
    async fn layoutreturn(&self, fh: &NfsFh4, sid: Stateid4) -> Nfsstat4 {
        let r = self
            .seq(vec![
                NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
                layoutreturn_file(sid, Bounded(Bytes::new())),
            ])
            .await;
        r.status
    }

    /// The next CB_LAYOUTRECALL this client is sent (within 5 s).
    async fn recalled(&mut self) -> CbLayoutrecall4Args {
        self.recalled_within(Duration::from_secs(5)).await
    }

    /// The next CB_LAYOUTRECALL this client is sent within `wait`.
    async fn recalled_within(&mut self, wait: Duration) -> CbLayoutrecall4Args {
        tokio::time::timeout(wait, self.recalls.recv())
            .await
            .expect("a CB_LAYOUTRECALL")
            .unwrap()
    }
}

/// The layout of a LAYOUTGET: its stateid, the data file's handle, the
/// data server's address (from GETDEVICEINFO) and the user it names.
struct Got {
    stateid: Stateid4,
    ds_fh: NfsFh3,
    ds: SocketAddr,
    user: u32,
}

async fn got(c: &Client, l: Layoutget4Res) -> Got {
    let Layoutget4Res::Ok(lg) = l else {
        panic!("LAYOUTGET: {l:?}")
    };
    let ff: FfLayout4 = decode_body(&lg.layout.0[0].content.body.0).unwrap();
    let d = &ff.mirrors.0[0].data_servers.0[0];
    let r = c
        .seq(vec![NfsArgop4::Getdeviceinfo(Getdeviceinfo4Args {
            device_id: d.deviceid,
            layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
            maxcount: 4096,
            notify_types: Bitmap4::new(),
        })])
        .await;
    let Some(NfsResop4::Getdeviceinfo(Getdeviceinfo4Res::Ok(gd))) = r.resarray.last() else {
        panic!("{r:?}")
    };
    let addr: FfDeviceAddr4 = decode_body(&gd.device_addr.addr_body.0).unwrap();
    Got {
        stateid: lg.stateid,
        ds_fh: NfsFh3::new(d.fh_vers.0[0].as_bytes()).unwrap(),
        ds: addr.netaddrs.0[0].to_socket().unwrap(),
        user: std::str::from_utf8(&d.user.0).unwrap().parse().unwrap(),
    }
}

async fn nfs3(addr: SocketAddr, uid: u32) -> Nfs3Client<TcpClient> {
    let rpc = TcpClient::connect(addr, 9, ClientConfig::default(), TcpConfig::default())
        .await
        .unwrap();
    Nfs3Client::new(rpc, cred(uid))
}

/// Lets a lease pass on the server's clock while `c` keeps renewing its
/// own (SEQUENCE every 31 s).
async fn pass_lease(cl: &Cluster, c: &Client) {
    for _ in 0..3 {
        cl.clock.advance(Duration::from_secs(31));
        assert_eq!(c.seq(vec![]).await.status, Nfsstat4::NFS4_OK);
    }
    assert!(Duration::from_secs(93) > LEASE);
}

fn recalled_file(a: &CbLayoutrecall4Args) -> &LayoutrecallFile4 {
    assert_eq!(a.layout_type, Layouttype4::LAYOUT4_FLEX_FILES);
    assert_eq!(a.iomode, Layoutiomode4::LAYOUTIOMODE4_ANY);
    match &a.recall {
        Layoutrecall4::File(f) => f,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_truncation_recalls_the_layout_and_layoutreturn_ends_the_recall() {
    let cl = cluster("trunc").await;
    let mut c = Client::connect(&cl, "truncated").await;
    let (fh, open) = c.open("f").await;
    let l = got(&c, c.layoutget(&fh, open).await).await;
    assert_eq!(l.user, DEFAULT_SYNTHETIC_ID);
    let old = nfs3(l.ds, l.user).await;
    old.write(
        &l.ds_fh,
        0,
        Bytes::from_static(b"data"),
        StableHow::UNSTABLE,
    )
    .await
    .unwrap();

    // Another client truncates the file through the metadata server.
    let v3 = nfs3(cl.addr, cl.uid).await;
    let root = cl.root.clone();
    let f3 = v3.lookup(&root, "f").await.unwrap().object;
    let s = Sattr3 {
        size: Some(0),
        ..Default::default()
    };
    v3.setattr(&f3, s, None).await.unwrap();

    // RFC 8881 §20.3: the whole file, any iomode, the layout stateid
    // with its seqid bumped; the layout changed.
    let r = c.recalled().await;
    assert!(r.changed);
    let f = recalled_file(&r);
    assert_eq!(f.fh, fh);
    assert_eq!((f.offset, f.length), (0, u64::MAX));
    assert_eq!(f.stateid.other, l.stateid.other);
    assert_eq!(f.stateid.seqid, l.stateid.seqid + 1);

    // While the recall is out, LAYOUTGET of the file is RECALLCONFLICT.
    assert!(matches!(
        c.layoutget(&fh, open).await,
        Layoutget4Res::Err(Nfsstat4::NFS4ERR_RECALLCONFLICT)
    ));
    // The data file was fenced before the recall went out: a WRITE the
    // client still had in flight under the layout is refused, not
    // landed after the truncation (RFC 8435 §2.2).
    assert!(
        matches!(
            old.write(
                &l.ds_fh,
                0,
                Bytes::from_static(b"stale"),
                StableHow::FILE_SYNC
            )
            .await,
            Err(nfs_client::Error::Nfs {
                status: Nfsstat3::NFS3ERR_ACCES,
                ..
            })
        ),
        "a WRITE under the recalled layout's ids reached the truncated data file"
    );
    // LAYOUTRETURN ends the recall; a lease later nothing more is fenced:
    // the next layout names the ids of the fencing at the recall.
    assert_eq!(c.layoutreturn(&fh, f.stateid).await, Nfsstat4::NFS4_OK);
    assert_eq!(cl.mds.layouts_held(), 0);
    pass_lease(&cl, &c).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = got(&c, c.layoutget(&fh, open).await).await;
    assert_eq!(again.user, DEFAULT_SYNTHETIC_ID + 1);
    let ds = nfs3(again.ds, again.user).await;
    ds.write(
        &again.ds_fh,
        0,
        Bytes::from_static(b"ok"),
        StableHow::FILE_SYNC,
    )
    .await
    .unwrap();
}

/// A LAYOUTCOMMIT grows the file on the metadata server: the server's
/// own change, made for the client that wrote the data, so the write
/// delegation that client holds on the file is not recalled as if a local
/// process had changed it (v4::watch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holders_layoutcommit_does_not_recall_its_write_delegation() {
    let cl = cluster("commitdeleg").await;
    let c = Client::connect(&cl, "committer").await;
    let (fh, sid) = c.open("grown").await;
    let l = got(&c, c.layoutget(&fh, sid).await).await;
    let r = c
        .seq(vec![
            NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
            layoutcommit_file(l.stateid, false, 9999),
        ])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    assert_eq!(
        std::fs::metadata(cl._dir.0.join("grown")).unwrap().len(),
        10_000
    );
    // Past the server's quiet time after its own change (500 ms).
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(c.deleg_recalls.load(Ordering::SeqCst), 0);
    // A local process's change to the file does recall it (a chmod: no
    // open, so no kernel lease holds it back until a DELEGRETURN).
    use std::os::unix::fs::PermissionsExt;
    let p = std::fs::Permissions::from_mode(0o600);
    std::fs::set_permissions(cl._dir.0.join("grown"), p).unwrap();
    let t0 = std::time::Instant::now();
    while c.deleg_recalls.load(Ordering::SeqCst) == 0 && t0.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        c.deleg_recalls.load(Ordering::SeqCst),
        1,
        "a local change recalls"
    );
}

/// `serve --mds-recall-timeout`: a recall unanswered for the configured
/// timeout, well within the lease, is fenced then, not a lease later
/// (RFC 8435 §2.2).
#[tokio::test]
async fn a_recall_timeout_shorter_than_the_lease_fences_at_that_timeout() {
    let cl = cluster_with("fence-soon", |m| {
        m.recall_timeout = Some(Duration::from_secs(10));
    })
    .await;
    let mut c = Client::connect(&cl, "slow").await;
    let (fh, open) = c.open("f").await;
    let l = got(&c, c.layoutget(&fh, open).await).await;
    let old = nfs3(l.ds, l.user).await;
    let v3 = nfs3(cl.addr, cl.uid).await;
    let f3 = v3.lookup(&cl.root, "f").await.unwrap().object;
    let s = Sattr3 {
        mode: Some(0o600),
        ..Default::default()
    };
    v3.setattr(&f3, s, None).await.unwrap();
    assert_eq!(
        recalled_file(&c.recalled().await).stateid.other,
        l.stateid.other
    );

    // 9 s after the recall the layout is still out.
    cl.clock.advance(Duration::from_secs(9));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(cl.mds.layouts_held(), 1);
    // Past 10 s (a ninth of the lease) it is revoked and fenced.
    cl.clock.advance(Duration::from_secs(2));
    let mut fenced = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if cl.mds.layouts_held() == 0 {
            if let Err(nfs_client::Error::Nfs {
                status: Nfsstat3::NFS3ERR_ACCES,
                ..
            }) = old
                .write(&l.ds_fh, 0, Bytes::from_static(b"x"), StableHow::FILE_SYNC)
                .await
            {
                fenced = true;
                break;
            }
        }
    }
    assert!(fenced, "not fenced at the recall timeout");
    // Fenced at the recall (the mode changed under a read-write layout)
    // and again at the timeout.
    let new = got(&c, c.layoutget(&fh, open).await).await;
    assert_eq!(new.user, DEFAULT_SYNTHETIC_ID + 2);
}

/// A data server that keeps the control path's connection and never
/// answers holds the fencing before a recall for a chmod no longer than
/// `fence_wait` (limit `pnfs.fence_wait`): every recall reaches its
/// client, and however many recalls there are, fencing holds one task
/// per data server and one queued name per data file (before: one task
/// per recall, each waiting for good).
#[tokio::test]
async fn a_data_server_that_never_answers_delays_recalls_by_the_fence_wait_only() {
    const FILES: [&str; 12] = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"];
    let silent = Arc::new(AtomicBool::new(false));
    let cl = cluster_via(
        "fence-hung",
        |m| m.fence_wait = Duration::from_millis(300),
        Some(Arc::clone(&silent)),
    )
    .await;
    let mut c = Client::connect(&cl, "hung-ds").await;
    let mut layouts = std::collections::HashMap::new();
    for f in FILES {
        let (fh, open) = c.open(f).await;
        let l = got(&c, c.layoutget(&fh, open).await).await;
        layouts.insert(l.stateid.other, fh);
    }
    assert_eq!(cl.mds.fencing(), (0, 0));
    silent.store(true, Ordering::SeqCst);

    let trips = oncrpc::limits::trips("pnfs.fence_wait");
    let v3 = nfs3(cl.addr, cl.uid).await;
    for f in FILES {
        let f3 = v3.lookup(&cl.root, f).await.unwrap().object;
        let s = Sattr3 {
            mode: Some(0o600),
            ..Default::default()
        };
        v3.setattr(&f3, s, None).await.unwrap();
    }
    // Every layout is recalled (the guard is generous: a loaded machine).
    for _ in FILES {
        let r = c.recalled_within(Duration::from_secs(60)).await;
        assert!(layouts.remove(&recalled_file(&r).stateid.other).is_some());
    }
    assert!(layouts.is_empty());
    assert!(oncrpc::limits::trips("pnfs.fence_wait") > trips);
    // One fencing task per data server, held by the silent one; the
    // other files wait in its queue.
    let (tasks, queued) = cl.mds.fencing();
    assert!((1..=2).contains(&tasks), "{tasks} fencing tasks");
    assert_eq!(tasks + queued, FILES.len());
}

/// A data server that keeps the control path's connection and never
/// answers holds each control-path call no longer than the control
/// timeout (limit `pnfs.control_timeout`): the fencing task ends, and a
/// client's truncation through the metadata server, which sets the data
/// file's size too, is answered NFS3ERR_JUKEBOX instead of never.
#[tokio::test]
async fn control_path_calls_to_a_data_server_that_never_answers_time_out() {
    let silent = Arc::new(AtomicBool::new(false));
    let cl = cluster_via(
        "control-hung",
        |m| {
            m.fence_wait = Duration::from_millis(300);
            m.control_timeout = Duration::from_secs(2);
        },
        Some(Arc::clone(&silent)),
    )
    .await;
    let mut c = Client::connect(&cl, "hung-control").await;
    let (fh, open) = c.open("f").await;
    let l = got(&c, c.layoutget(&fh, open).await).await;
    silent.store(true, Ordering::SeqCst);
    let timeouts = oncrpc::limits::trips("pnfs.control_timeout");

    let v3 = nfs3(cl.addr, cl.uid).await;
    let f3 = v3.lookup(&cl.root, "f").await.unwrap().object;
    let chmod = Sattr3 {
        mode: Some(0o600),
        ..Default::default()
    };
    v3.setattr(&f3, chmod, None).await.unwrap();
    let r = c.recalled_within(Duration::from_secs(60)).await;
    assert_eq!(recalled_file(&r).stateid.other, l.stateid.other);
    // The fencing call times out and its task ends.
    let t0 = std::time::Instant::now();
    while cl.mds.fencing() != (0, 0) {
        assert!(t0.elapsed() < Duration::from_secs(60), "fencing still held");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(oncrpc::limits::trips("pnfs.control_timeout") > timeouts);
    // A truncation reaches the silent data server and is answered.
    let trunc = Sattr3 {
        size: Some(0),
        ..Default::default()
    };
    let r = tokio::time::timeout(Duration::from_secs(60), v3.setattr(&f3, trunc, None)).await;
    assert!(
        matches!(
            r,
            Ok(Err(nfs_client::Error::Nfs {
                status: Nfsstat3::NFS3ERR_JUKEBOX,
                ..
            }))
        ),
        "{r:?}"
    );
}

#[tokio::test]
async fn an_unanswered_recall_is_fenced_after_the_lease() {
    let cl = cluster("fence").await;
    let mut c = Client::connect(&cl, "silent").await;
    let (fh, open) = c.open("f").await;
    let l = got(&c, c.layoutget(&fh, open).await).await;
    let old = nfs3(l.ds, l.user).await;
    old.write(
        &l.ds_fh,
        0,
        Bytes::from_static(b"before"),
        StableHow::FILE_SYNC,
    )
    .await
    .unwrap();

    // A chmod through the metadata server recalls the layout (not
    // "changed": the data is still good); the client never returns it.
    let v3 = nfs3(cl.addr, cl.uid).await;
    let root = cl.root.clone();
    let f3 = v3.lookup(&root, "f").await.unwrap().object;
    let s = Sattr3 {
        mode: Some(0o600),
        ..Default::default()
    };
    v3.setattr(&f3, s, None).await.unwrap();
    let r = c.recalled().await;
    assert!(!r.changed);
    assert_eq!(recalled_file(&r).stateid.other, l.stateid.other);

    // Within the lease nothing happens; past it the layout is revoked
    // and the data file fenced: the old credentials are refused.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(cl.mds.layouts_held(), 1);
    pass_lease(&cl, &c).await;
    let mut fenced = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if cl.mds.layouts_held() == 0 {
            if let Err(nfs_client::Error::Nfs {
                status: Nfsstat3::NFS3ERR_ACCES,
                ..
            }) = old
                .write(
                    &l.ds_fh,
                    0,
                    Bytes::from_static(b"stale"),
                    StableHow::FILE_SYNC,
                )
                .await
            {
                fenced = true;
                break;
            }
        }
    }
    assert!(fenced, "the stale layout's WRITE was not refused");

    // A new layout names the new synthetic ids (fenced at the recall and
    // again at the revocation), which write.
    let new = got(&c, c.layoutget(&fh, open).await).await;
    assert_eq!(new.user, DEFAULT_SYNTHETIC_ID + 2);
    let fresh = nfs3(new.ds, new.user).await;
    fresh
        .write(
            &new.ds_fh,
            0,
            Bytes::from_static(b"after"),
            StableHow::FILE_SYNC,
        )
        .await
        .unwrap();
    let r = v3.read(&f3, 0, 100).await.unwrap();
    assert_eq!(&r.data.0[..], b"aftere");

    // Removal recalls the new layout ("changed") and drops it at once.
    c.answer
        .store(Nfsstat4::NFS4ERR_NOMATCHING_LAYOUT.0, Ordering::SeqCst);
    v3.remove(&root, "f").await.unwrap();
    let r = c.recalled().await;
    assert!(r.changed);
    assert_eq!(recalled_file(&r).stateid.other, new.stateid.other);
    assert_eq!(cl.mds.layouts_held(), 0);
}

/// A client that answers CB_LAYOUTRECALL with NFS4ERR_DELAY is asked
/// again with a backoff (100 ms doubling to 1.6 s), not every 100 ms:
/// each retry waits from the answer to the last, so within 4 s of the
/// chmod at most 6 reach it (at 0, 0.1, 0.3, 0.7, 1.5, 3.1 s after the
/// first; the former fixed 100 ms sent ~40). Load only makes them fewer.
/// The retries go on, and once the client takes the recall LAYOUTRETURN
/// ends it.
#[tokio::test]
async fn a_recall_answered_delay_is_retried_with_a_backoff() {
    let cl = cluster("delay").await;
    let mut c = Client::connect(&cl, "busy").await;
    let (fh, open) = c.open("f").await;
    let l = got(&c, c.layoutget(&fh, open).await).await;
    c.answer.store(Nfsstat4::NFS4ERR_DELAY.0, Ordering::SeqCst);
    let v3 = nfs3(cl.addr, cl.uid).await;
    let f3 = v3.lookup(&cl.root, "f").await.unwrap().object;
    let s = Sattr3 {
        mode: Some(0o600),
        ..Default::default()
    };
    // The span starts before the recall can: every CB_LAYOUTRECALL taken
    // from the queue within it was sent within it.
    let span = tokio::time::Instant::now() + Duration::from_secs(4);
    v3.setattr(&f3, s, None).await.unwrap();
    let r = c.recalled().await;
    assert_eq!(recalled_file(&r).stateid.other, l.stateid.other);
    let mut sent = 1;
    while let Ok(r) = tokio::time::timeout_at(span, c.recalls.recv()).await {
        assert_eq!(recalled_file(&r.unwrap()).stateid.other, l.stateid.other);
        sent += 1;
    }
    assert!(sent <= 6, "{sent} CB_LAYOUTRECALLs in 4 s");
    // Still retried (each within the 1.6 s cap; 5 s is a failure guard).
    c.recalled().await;
    // Taken: LAYOUTRETURN ends the recall.
    c.answer.store(Nfsstat4::NFS4_OK.0, Ordering::SeqCst);
    let r = c.recalled().await;
    let f = recalled_file(&r);
    assert_eq!(c.layoutreturn(&fh, f.stateid).await, Nfsstat4::NFS4_OK);
    assert_eq!(cl.mds.layouts_held(), 0);
}

#[tokio::test]
async fn an_expired_clients_layouts_are_dropped_and_its_data_files_fenced() {
    let cl = cluster("expiry").await;
    let gone = Client::connect(&cl, "vanishes").await;
    let stays = Client::connect(&cl, "stays").await;
    let (fh, open) = gone.open("f").await;
    let l = got(&gone, gone.layoutget(&fh, open).await).await;
    let (rfh, ropen) = gone.open("r").await;
    let _read = gone.layoutget(&rfh, ropen).await;
    let old = nfs3(l.ds, l.user).await;
    old.write(
        &l.ds_fh,
        0,
        Bytes::from_static(b"before"),
        StableHow::FILE_SYNC,
    )
    .await
    .unwrap();
    let (sfh, sopen) = stays.open("s").await;
    let kept = got(&stays, stays.layoutget(&sfh, sopen).await).await;
    assert_eq!(cl.mds.layouts_held(), 3);
    let count = || oncrpc::limits::trips("pnfs.expired_layouts");
    let before = count();

    // "vanishes" stops renewing; once its lease has run out (seen at the
    // other client's next SEQUENCE) its two layouts go, counted, and the
    // file it could write is fenced: its old credentials are refused.
    pass_lease(&cl, &stays).await;
    assert_eq!(cl.mds.layouts_held(), 1);
    assert!(count() > before, "the expiry was not counted");
    // (The fencing runs in the background: until it has, the same
    // bytes are written again.)
    let mut fenced = false;
    for _ in 0..50 {
        if let Err(nfs_client::Error::Nfs {
            status: Nfsstat3::NFS3ERR_ACCES,
            ..
        }) = old
            .write(
                &l.ds_fh,
                0,
                Bytes::from_static(b"before"),
                StableHow::FILE_SYNC,
            )
            .await
        {
            fenced = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(fenced, "the expired client's WRITE was not refused");

    // The other client's layout is untouched and still works.
    assert_eq!(
        stays.layoutreturn(&sfh, kept.stateid).await,
        Nfsstat4::NFS4_OK
    );
    assert_eq!(cl.mds.layouts_held(), 0);
    let v3 = nfs3(cl.addr, cl.uid).await;
    let f3 = v3.lookup(&cl.root, "f").await.unwrap().object;
    assert_eq!(&v3.read(&f3, 0, 100).await.unwrap().data.0[..], b"before");
}
