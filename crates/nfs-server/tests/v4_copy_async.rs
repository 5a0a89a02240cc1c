//! Asynchronous COPY over TCP (RFC 7862 §15.2.3, §15.8, §15.9, §16.1):
//! scripted NFSv4.2 clients whose connections carry their back channel
//! and answer CB_OFFLOAD, holding the answer back when a test wants the
//! copy to stay in flight.

mod v4_common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nfs::v4::cb::*;
use nfs::v4::session::*;
use nfs::v4::*;
use nfs_server::v4::{BackchannelSlot, ManualClock, Nfs4Config, Nfs4Service, SessionLimits};
use nfs_server::LocalFs;
use oncrpc::client::{ClientConfig, ReplyHint, RpcCall};
use oncrpc::limits::trips;
use oncrpc::msg::{AuthSys, OpaqueAuth};
use oncrpc::tcp::{TcpClient, TcpConfig, TcpServer};
use oncrpc::{CallContext, ClientTransport, RpcService, ServiceError};
use tokio::sync::{mpsc, watch};
use v4_common::{open_session, slot0_sequence, SessionAsk, CB_PROGRAM};
use xdr::{Bounded, FixedOpaque, XdrBuf};

const MIB: u64 = 1 << 20;
/// How long a test waits for a CB_OFFLOAD.
const WAIT: Duration = Duration::from_secs(10);

/// The client's callback program: answers CB_OFFLOAD once `hold` is
/// false, after telling the test it came.
struct CbService {
    offloads: mpsc::UnboundedSender<CbOffload4Args>,
    hold: watch::Receiver<bool>,
}

impl CbService {
    async fn compound(&self, args: Bytes) -> Result<XdrBuf, ServiceError> {
        let a: CbCompound4Args = xdr::from_slice(&args).map_err(ServiceError::GarbageArgs)?;
        let mut res = Vec::new();
        for op in a.argarray {
            res.push(match op {
                NfsCbArgop4::Sequence(s) => NfsCbResop4::Sequence(Res4::Ok(CbSequence4ResOk {
                    sessionid: s.sessionid,
                    sequenceid: s.sequenceid,
                    slotid: s.slotid,
                    highest_slotid: s.highest_slotid,
                    target_highest_slotid: s.highest_slotid,
                })),
                NfsCbArgop4::Offload(o) => {
                    let _ = self.offloads.send(o);
                    let mut hold = self.hold.clone();
                    let _ = hold.wait_for(|h| !h).await;
                    NfsCbResop4::Offload(Nfsstat4::NFS4_OK)
                }
                NfsCbArgop4::Recall(_) => NfsCbResop4::Recall(Nfsstat4::NFS4_OK),
                other => unsupported(&other),
            });
        }
        Ok(xdr::to_xdr_buf(&CbCompound4Res {
            status: Nfsstat4::NFS4_OK,
            tag: Bounded(a.tag),
            resarray: Bounded(res),
        }))
    }
}

/// NFS4ERR_NOTSUPP for a callback these tests do not expect.
fn unsupported(op: &NfsCbArgop4) -> NfsCbResop4 {
    let n = match op {
        NfsCbArgop4::Other(n) => *n,
        NfsCbArgop4::Getattr(_) => OP_CB_GETATTR,
        _ => OP_CB_LAYOUTRECALL,
    };
    NfsCbResop4::Other(n, Nfsstat4::NFS4ERR_NOTSUPP)
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
            CB_COMPOUND => self.compound(args).await,
            _ => Err(ServiceError::ProcUnavail),
        }
    }
}

struct Srv {
    addr: std::net::SocketAddr,
    uid: u32,
    dir: std::path::PathBuf,
}

impl Drop for Srv {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An NFSv4 server over TCP whose callbacks go on the clients' own
/// connections.
async fn serve(tag: &str) -> Srv {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("nfs4-acopy-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&dir).unwrap());
    let slot = BackchannelSlot::new();
    let v4 = Nfs4Service::with_config(
        Arc::new(LocalFs::new(&dir, false).unwrap()),
        Nfs4Config {
            limits: SessionLimits::default(),
            clock: Arc::new(ManualClock::new()),
            server_owner: Bytes::from_static(b"acopy"),
        },
    )
    .with_backchannels(slot.clone());
    let mut server = oncrpc::Server::new();
    server.register(v4);
    let listener = TcpServer::bind("127.0.0.1:0", Arc::new(server), TcpConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    slot.set(nfs_server::tcp_backchannels(listener.backchannels()));
    listener.spawn();
    Srv { addr, uid, dir }
}

/// One scripted NFSv4.2 client.
struct Client {
    rpc: TcpClient,
    cred: OpaqueAuth,
    session: [u8; 16],
    seq: AtomicU32,
    offloads: mpsc::UnboundedReceiver<CbOffload4Args>,
    hold: watch::Sender<bool>,
}

impl Client {
    /// Connects and sets up a session, with a back channel when `back`.
    async fn connect(srv: &Srv, name: &str, back: bool) -> Self {
        let (tx, offloads) = mpsc::unbounded_channel();
        let (hold, hold_rx) = watch::channel(false);
        let mut cb = oncrpc::Server::new();
        cb.register(CbService {
            offloads: tx,
            hold: hold_rx,
        });
        let (cfg, tcp) = (ClientConfig::default(), TcpConfig::default());
        let rpc = TcpClient::connect_with_backchannel(srv.addr, 7, cfg, tcp, Arc::new(cb))
            .await
            .unwrap();
        let mut c = Self {
            rpc,
            cred: AuthSys {
                stamp: 1,
                machinename: Bytes::from_static(b"acopy"),
                uid: srv.uid,
                gid: srv.uid,
                gids: vec![],
            }
            .to_opaque_auth(),
            session: [0; 16],
            seq: AtomicU32::new(0),
            offloads,
            hold,
        };
        c.establish(name, back).await;
        c
    }

    async fn ops(&self, ops: Vec<NfsArgop4>) -> Compound4Res {
        let reply = self
            .rpc
            .call(RpcCall {
                prog: NFS4_PROGRAM,
                vers: NFS_V4,
                proc_: NFSPROC4_COMPOUND,
                cred: self.cred.clone(),
                args: xdr::to_xdr_buf(&Compound4Args {
                    tag: Bytes::new(),
                    minorversion: 2,
                    argarray: ops,
                }),
                reply_hint: ReplyHint::default(),
            })
            .await
            .unwrap();
        xdr::from_slice(&reply).unwrap()
    }

    async fn establish(&mut self, name: &str, back: bool) {
        let ask = SessionAsk {
            back_chan: back,
            fore_slots: 8,
            back_slots: 8,
            ..SessionAsk::default()
        };
        let (_, session) = open_session(|o| self.ops(o), name, &ask).await.unwrap();
        self.session = session;
    }

    async fn seq(&self, ops: Vec<NfsArgop4>) -> Compound4Res {
        let mut all = vec![slot0_sequence(self.session, &self.seq)];
        all.extend(ops);
        self.ops(all).await
    }

    /// COPY of `count` bytes (0: to the end) from `src` to `dst` (names
    /// in the export root), asking for an asynchronous copy unless
    /// `sync`.
    async fn copy(
        &self,
        src: &'static str,
        dst: &'static str,
        count: u64,
        sync: bool,
    ) -> Res4<Copy4ResOk> {
        let r = self
            .seq(vec![
                NfsArgop4::Putrootfh(()),
                lookup(src),
                NfsArgop4::Savefh(()),
                NfsArgop4::Putrootfh(()),
                lookup(dst),
                NfsArgop4::Copy(Copy4Args {
                    src_stateid: Stateid4::ANONYMOUS,
                    dst_stateid: Stateid4::ANONYMOUS,
                    src_offset: 0,
                    dst_offset: 0,
                    count,
                    consecutive: true,
                    synchronous: sync,
                    source_server: Bounded(vec![]),
                }),
            ])
            .await;
        match r.resarray.into_iter().last() {
            Some(NfsResop4::Copy(c)) => c,
            other => panic!("COPY: {other:?}"),
        }
    }

    /// PUTROOTFH; LOOKUP `file`; `op`: the last result.
    async fn on(&self, file: &'static str, op: NfsArgop4) -> NfsResop4 {
        let r = self
            .seq(vec![NfsArgop4::Putrootfh(()), lookup(file), op])
            .await;
        r.resarray.into_iter().last().unwrap()
    }

    async fn fh(&self, file: &'static str) -> NfsFh4 {
        match self.on(file, NfsArgop4::Getfh(())).await {
            NfsResop4::Getfh(Res4::Ok(g)) => g.object,
            r => panic!("GETFH: {r:?}"),
        }
    }

    async fn next_offload(&mut self) -> CbOffload4Args {
        tokio::time::timeout(WAIT, self.offloads.recv())
            .await
            .expect("a CB_OFFLOAD in time")
            .unwrap()
    }
}

fn lookup(n: &'static str) -> NfsArgop4 {
    NfsArgop4::Lookup(Lookup4Args {
        objname: Component4::from_static(n),
    })
}

/// A file of `len` bytes of a pattern that differs from block to block.
fn pattern(len: u64) -> Vec<u8> {
    (0..len).map(|i| (i / 4093 + i) as u8).collect()
}

fn async_id(r: &Res4<Copy4ResOk>) -> Stateid4 {
    match r {
        Res4::Ok(c) => {
            assert!(!c.requirements.synchronous, "asynchronous: {c:?}");
            assert_eq!(c.response.count, 0);
            assert_eq!(c.response.committed, StableHow4::UNSTABLE4);
            assert_eq!(c.response.callback_id.0.len(), 1);
            c.response.callback_id.0[0]
        }
        Res4::Err(e) => panic!("COPY: {e:?}"),
    }
}

fn assert_sync(r: &Res4<Copy4ResOk>, count: u64) {
    match r {
        Res4::Ok(c) => {
            assert!(c.requirements.synchronous, "synchronous: {c:?}");
            assert!(c.response.callback_id.0.is_empty());
            assert_eq!(c.response.count, count);
            assert_eq!(c.response.committed, StableHow4::FILE_SYNC4);
        }
        Res4::Err(e) => panic!("COPY: {e:?}"),
    }
}

/// RFC 7862 §15.2.3, §16.1: a long COPY the client lets run
/// asynchronously is answered at once with a stateid in
/// `wr_callback_id`, and CB_OFFLOAD reports its end with the
/// destination's handle, that stateid and the bytes copied; the data is
/// there. A short one, a synchronous one, and one from a client without
/// a back channel are done before the reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asynchronous_copy_reports_with_cb_offload() {
    let srv = serve("cb").await;
    let data = pattern(3 * MIB + 123);
    std::fs::write(srv.dir.join("src"), &data).unwrap();
    std::fs::write(srv.dir.join("dst"), b"").unwrap();
    let mut c = Client::connect(&srv, "acopy-a", true).await;

    let r = c.copy("src", "dst", 0, false).await;
    let sid = async_id(&r);
    let cb = c.next_offload().await;
    assert_eq!(cb.stateid, sid);
    assert_eq!(cb.fh, c.fh("dst").await);
    match cb.info {
        OffloadInfo4::Ok(w) => {
            assert_eq!(w.count, data.len() as u64);
            assert_eq!(w.committed, StableHow4::FILE_SYNC4);
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(std::fs::read(srv.dir.join("dst")).unwrap(), data);
    // Reported and answered: the stateid is gone (RFC 7862 §15.9.3).
    let mut gone = false;
    for _ in 0..100 {
        let r = c.on("dst", NfsArgop4::OffloadStatus(sid)).await;
        if r.status() == Nfsstat4::NFS4ERR_BAD_STATEID {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "OFFLOAD_STATUS after CB_OFFLOAD");

    // Short, or asked to be synchronous: done before the reply.
    assert_sync(&c.copy("src", "dst", MIB, false).await, MIB);
    assert_sync(&c.copy("src", "dst", 2 * MIB, true).await, 2 * MIB);
    // A range past the source's end is refused up front.
    assert_eq!(
        c.copy("src", "dst", 4 * MIB, false).await.status(),
        Nfsstat4::NFS4ERR_INVAL
    );
    // No back channel: synchronous.
    let d = Client::connect(&srv, "acopy-b", false).await;
    assert_sync(&d.copy("src", "dst", 2 * MIB, false).await, 2 * MIB);
}

/// RFC 7862 §15.9.3, §15.8.3: while the CB_OFFLOAD is not yet answered,
/// OFFLOAD_STATUS reports the bytes copied and the status; OFFLOAD_CANCEL
/// takes the copy away. Another file's handle, or another client, gets
/// NFS4ERR_BAD_STATEID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offload_status_and_cancel() {
    let srv = serve("status").await;
    std::fs::write(srv.dir.join("src"), pattern(2 * MIB)).unwrap();
    std::fs::write(srv.dir.join("dst"), b"").unwrap();
    let mut c = Client::connect(&srv, "acopy-s", true).await;
    let other = Client::connect(&srv, "acopy-o", true).await;
    c.hold.send_replace(true);

    let sid = async_id(&c.copy("src", "dst", 0, false).await);
    let cb = c.next_offload().await;
    assert_eq!(cb.stateid, sid);
    match c.on("dst", NfsArgop4::OffloadStatus(sid)).await {
        NfsResop4::OffloadStatus(Res4::Ok(s)) => {
            assert_eq!(s.count, 2 * MIB);
            assert_eq!(s.complete.0, vec![Nfsstat4::NFS4_OK]);
        }
        r => panic!("OFFLOAD_STATUS: {r:?}"),
    }
    for (who, file) in [(&c, "src"), (&other, "dst")] {
        assert_eq!(
            who.on(file, NfsArgop4::OffloadStatus(sid)).await.status(),
            Nfsstat4::NFS4ERR_BAD_STATEID
        );
        assert_eq!(
            who.on(file, NfsArgop4::OffloadCancel(sid)).await.status(),
            Nfsstat4::NFS4ERR_BAD_STATEID
        );
    }
    assert_eq!(
        c.on("dst", NfsArgop4::OffloadCancel(sid)).await.status(),
        Nfsstat4::NFS4_OK
    );
    assert_eq!(
        c.on("dst", NfsArgop4::OffloadStatus(sid)).await.status(),
        Nfsstat4::NFS4ERR_BAD_STATEID
    );
    c.hold.send_replace(false);
    // Minor version 1 has no such operations (RFC 8881 §15.2).
    let mut v41 = vec![NfsArgop4::Sequence(Sequence4Args {
        sessionid: FixedOpaque(c.session),
        sequenceid: c.seq.fetch_add(1, Ordering::SeqCst) + 1,
        slotid: 0,
        highest_slotid: 0,
        cachethis: false,
    })];
    v41.push(NfsArgop4::OffloadStatus(sid));
    let r = c
        .rpc
        .call(RpcCall {
            prog: NFS4_PROGRAM,
            vers: NFS_V4,
            proc_: NFSPROC4_COMPOUND,
            cred: c.cred.clone(),
            args: xdr::to_xdr_buf(&Compound4Args {
                tag: Bytes::new(),
                minorversion: 1,
                argarray: v41,
            }),
            reply_hint: ReplyHint::default(),
        })
        .await
        .unwrap();
    let r: Compound4Res = xdr::from_slice(&r).unwrap();
    assert_eq!(r.status, Nfsstat4::NFS4ERR_OP_ILLEGAL);
}

/// The bound on asynchronous copies (`nfs4.async_copies`): a client
/// whose CB_OFFLOADs are not answered has at most 4 copies in flight;
/// its next COPY is done synchronously (and counted), and once the
/// callbacks are answered its copies run in the background again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_copies_in_flight_are_bounded() {
    let srv = serve("bound").await;
    std::fs::write(srv.dir.join("src"), pattern(2 * MIB)).unwrap();
    std::fs::write(srv.dir.join("dst"), b"").unwrap();
    let mut c = Client::connect(&srv, "acopy-h", true).await;
    c.hold.send_replace(true);
    let before = trips("nfs4.async_copies");
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(async_id(&c.copy("src", "dst", 0, false).await));
    }
    assert_sync(&c.copy("src", "dst", 0, false).await, 2 * MIB);
    assert!(trips("nfs4.async_copies") > before, "the limit counts");
    for _ in 0..4 {
        assert!(ids.contains(&c.next_offload().await.stateid));
    }
    c.hold.send_replace(false);
    let mut again = false;
    for _ in 0..100 {
        match c.copy("src", "dst", 0, false).await {
            Res4::Ok(r) if !r.requirements.synchronous => {
                again = true;
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    assert!(again, "asynchronous again once the callbacks are answered");
    c.next_offload().await;
}

/// Not a check: prints how long a 64 MiB COPY takes to be answered
/// synchronously, and asynchronously (the reply, then the CB_OFFLOAD).
/// `cargo test -p nfs-server --test v4_copy_async -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, run by hand"]
async fn measure_sync_and_async_copy() {
    let srv = serve("measure").await;
    std::fs::write(srv.dir.join("src"), pattern(64 * MIB)).unwrap();
    std::fs::write(srv.dir.join("dst"), b"").unwrap();
    let mut c = Client::connect(&srv, "acopy-m", true).await;
    for round in 0..3 {
        let t = std::time::Instant::now();
        assert_sync(&c.copy("src", "dst", 0, true).await, 64 * MIB);
        let sync = t.elapsed();
        let t = std::time::Instant::now();
        let sid = async_id(&c.copy("src", "dst", 0, false).await);
        let reply = t.elapsed();
        assert_eq!(c.next_offload().await.stateid, sid);
        let done = t.elapsed();
        println!(
            "round {round}: synchronous 64 MiB COPY answered in {sync:?}; asynchronous: reply {reply:?}, CB_OFFLOAD {done:?}"
        );
    }
}
