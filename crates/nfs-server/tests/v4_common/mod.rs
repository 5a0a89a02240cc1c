//! Test support for NFSv4.1: a server with an injected clock over TCP and
//! a small COMPOUND client on oncrpc's TcpClient.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use nfs::v4::attr::{Bitmap4, FileAttrs};
use nfs::v4::session::*;
use nfs::v4::*;
use nfs_server::v4::{ManualClock, Nfs4Config, Nfs4Service, SessionLimits};
use nfs_server::LocalFs;
use oncrpc::client::{ClientConfig, ClientTransport, ReplyHint, RpcCall};
use oncrpc::msg::{AuthSys, OpaqueAuth};
use oncrpc::tcp::{TcpClient, TcpConfig, TcpServer};
use xdr::{Bounded, FixedOpaque};

/// The program number scripted clients give for their callbacks.
pub const CB_PROGRAM: u32 = 0x4000_0000;

/// A fresh temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!("nfs4-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    /// The uid that owns the directory.
    pub fn owner(&self) -> u32 {
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&self.0).unwrap())
    }
}

/// An NFSv4 service's configuration: `limits`, time from `clock`,
/// `owner` as its server owner.
pub fn v4_config(
    limits: SessionLimits,
    clock: &Arc<ManualClock>,
    owner: &'static [u8],
) -> Nfs4Config {
    Nfs4Config {
        limits,
        clock: clock.clone(),
        server_owner: Bytes::from_static(owner),
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running NFSv4 server on an ephemeral port.
pub struct Srv {
    pub addr: SocketAddr,
    pub uid: u32,
    pub clock: Arc<ManualClock>,
    pub dir: TempDir,
}

pub async fn serve(tag: &str, limits: SessionLimits) -> Srv {
    serve_with_service(tag, limits).await.1
}

/// Like [`serve`], also handing back the service (to read its state).
pub async fn serve_with_service(tag: &str, limits: SessionLimits) -> (Arc<Nfs4Service>, Srv) {
    serve_with_tcp(tag, limits, TcpConfig::default()).await
}

/// Like [`serve_with_service`], with the TCP listener's settings.
pub async fn serve_with_tcp(
    tag: &str,
    limits: SessionLimits,
    tcp_config: TcpConfig,
) -> (Arc<Nfs4Service>, Srv) {
    let dir = TempDir::new(tag);
    let clock = Arc::new(ManualClock::new());
    let fs = Arc::new(LocalFs::new(dir.path(), false).unwrap());
    let svc = Arc::new(Nfs4Service::with_config(
        fs,
        v4_config(limits, &clock, b"test"),
    ));
    let mut server = oncrpc::Server::new();
    server.register_arc(Arc::clone(&svc));
    let (addr, _) = listen_with(server, tcp_config).await;
    let uid = dir.owner();
    (
        svc,
        Srv {
            addr,
            uid,
            clock,
            dir,
        },
    )
}

/// One NFSv4.1 client: a connection, and after [`C4::establish`] a client
/// id and a session whose slot 0 it uses.
pub struct C4 {
    pub rpc: TcpClient,
    pub cred: OpaqueAuth,
    pub clientid: u64,
    pub session: [u8; 16],
    pub seq: AtomicU32,
}

pub fn sys_cred(uid: u32) -> OpaqueAuth {
    AuthSys {
        stamp: 1,
        machinename: Bytes::from_static(b"test"),
        uid,
        gid: uid,
        gids: vec![],
    }
    .to_opaque_auth()
}

impl C4 {
    /// Connects as the owner of the export (`srv.uid`).
    pub async fn connect(srv: &Srv) -> Self {
        let addr = srv.addr;
        let rpc = TcpClient::connect(addr, 7, ClientConfig::default(), TcpConfig::default())
            .await
            .unwrap();
        Self {
            rpc,
            cred: sys_cred(srv.uid),
            clientid: 0,
            session: [0; 16],
            seq: AtomicU32::new(0),
        }
    }

    /// Sends raw COMPOUND argument bytes; returns the raw result bytes.
    pub async fn raw(&self, args: Bytes) -> Bytes {
        self.rpc
            .call(RpcCall {
                prog: NFS4_PROGRAM,
                vers: NFS_V4,
                proc_: NFSPROC4_COMPOUND,
                cred: self.cred.clone(),
                args: xdr::XdrBuf::from_bytes(args),
                reply_hint: ReplyHint::default(),
            })
            .await
            .unwrap()
    }

    pub async fn compound(&self, args: &Compound4Args) -> Compound4Res {
        let r = self.raw(xdr::to_bytes(args)).await;
        xdr::from_slice(&r).unwrap()
    }

    pub async fn ops(&self, ops: Vec<NfsArgop4>) -> Compound4Res {
        self.compound(&Compound4Args {
            tag: Bytes::new(),
            minorversion: 1,
            argarray: ops,
        })
        .await
    }

    pub fn exchange_id_args(name: &str, verifier: u8) -> ExchangeId4Args {
        ExchangeId4Args {
            clientowner: ClientOwner4 {
                verifier: FixedOpaque([verifier; 8]),
                ownerid: Bounded(Bytes::from(name.to_string())),
            },
            flags: EXCHGID4_FLAG_SUPP_MOVED_REFER | EXCHGID4_FLAG_BIND_PRINC_STATEID,
            state_protect: StateProtect4A::None,
            client_impl_id: Bounded(vec![]),
        }
    }

    pub fn create_session_args(clientid: u64, sequence: u32) -> CreateSession4Args {
        let attrs = |req, resp| ChannelAttrs4 {
            headerpadsize: 0,
            maxrequestsize: req,
            maxresponsesize: resp,
            maxresponsesize_cached: 7584,
            maxoperations: 16,
            maxrequests: 64,
            rdma_ird: Bounded(vec![]),
        };
        CreateSession4Args {
            clientid,
            sequence,
            flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
            fore_chan_attrs: attrs(1_049_620, 1_049_480),
            back_chan_attrs: attrs(4096, 4096),
            cb_program: CB_PROGRAM,
            sec_parms: Bounded(vec![CallbackSecParms4::None]),
        }
    }

    /// EXCHANGE_ID then CREATE_SESSION, then RECLAIM_COMPLETE.
    pub async fn establish(&mut self, name: &str) {
        self.session_only(name).await;
        // RFC 8881 §18.51.3: before its first OPEN (once per client id:
        // a second session of the same one has done it).
        let r = self
            .seq(vec![NfsArgop4::ReclaimComplete(ReclaimComplete4Args {
                one_fs: false,
            })])
            .await;
        assert!(
            matches!(
                r.status,
                Nfsstat4::NFS4_OK | Nfsstat4::NFS4ERR_COMPLETE_ALREADY
            ),
            "{r:?}"
        );
    }

    /// EXCHANGE_ID and CREATE_SESSION without RECLAIM_COMPLETE (a client
    /// about to reclaim after a server restart).
    pub async fn session_only(&mut self, name: &str) {
        let r = self
            .ops(vec![NfsArgop4::ExchangeId(Self::exchange_id_args(name, 1))])
            .await;
        let Some(NfsResop4::ExchangeId(Res4::Ok(x))) = r.resarray.first() else {
            panic!("EXCHANGE_ID: {r:?}")
        };
        self.clientid = x.clientid;
        let r = self
            .ops(vec![NfsArgop4::CreateSession(Self::create_session_args(
                x.clientid,
                x.sequenceid,
            ))])
            .await;
        let Some(NfsResop4::CreateSession(Res4::Ok(s))) = r.resarray.first() else {
            panic!("CREATE_SESSION: {r:?}")
        };
        self.session = s.sessionid.0;
        self.seq.store(0, Ordering::SeqCst);
    }

    /// RECLAIM_COMPLETE (not for one file system), asserting it succeeded.
    pub async fn reclaim_complete(&self) {
        self.ok(vec![NfsArgop4::ReclaimComplete(ReclaimComplete4Args {
            one_fs: false,
        })])
        .await;
    }

    pub fn sequence(&self, slot: u32, seqid: u32, cachethis: bool) -> NfsArgop4 {
        NfsArgop4::Sequence(Sequence4Args {
            sessionid: FixedOpaque(self.session),
            sequenceid: seqid,
            slotid: slot,
            highest_slotid: 0,
            cachethis,
        })
    }

    /// SEQUENCE on slot 0 with the next sequence id, then `ops`.
    pub async fn seq(&self, ops: Vec<NfsArgop4>) -> Compound4Res {
        let id = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let mut all = vec![self.sequence(0, id, true)];
        all.extend(ops);
        self.ops(all).await
    }

    /// Like [`C4::seq`], asserting every operation succeeded.
    pub async fn ok(&self, ops: Vec<NfsArgop4>) -> Vec<NfsResop4> {
        let r = self.seq(ops).await;
        assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
        r.resarray
    }
}

pub fn name(s: &'static str) -> Component4 {
    Component4::from_static(s)
}

pub fn owner(clientid: u64, s: &'static str) -> StateOwner4 {
    StateOwner4 {
        clientid,
        owner: Bounded(Bytes::from_static(s.as_bytes())),
    }
}

/// OPEN of `file` in the current directory, creating it (UNCHECKED4).
pub fn open_create(clientid: u64, file: &'static str, access: u32, deny: u32) -> NfsArgop4 {
    NfsArgop4::Open(Open4Args {
        seqid: 0,
        share_access: access,
        share_deny: deny,
        owner: owner(clientid, "open-owner"),
        openhow: OpenHow4(Some(Createhow4::Unchecked(
            FileAttrs {
                mode: Some(0o644),
                ..Default::default()
            }
            .to_fattr4(&Bitmap4::from_bits(&[nfs::v4::attr::FATTR4_MODE])),
        ))),
        claim: OpenClaim4::Null(Component4::from_static(file)),
    })
}

/// LAYOUTRETURN (RFC 8881 §18.44) of the whole current file, any iomode,
/// under `stateid`, with the layout type's return `body` (RFC 8435 §10
/// for flex files; empty for none).
pub fn layoutreturn_file(stateid: Stateid4, body: nfs::v4::pnfs::LayoutBody) -> NfsArgop4 {
    NfsArgop4::Layoutreturn(Layoutreturn4Args {
        reclaim: false,
        layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
        iomode: Layoutiomode4::LAYOUTIOMODE4_ANY,
        layoutreturn: Layoutreturn4::File(LayoutreturnFile4 {
            offset: 0,
            length: u64::MAX,
            stateid,
            body,
        }),
    })
}

/// LAYOUTCOMMIT (RFC 8881 §18.42) of the whole current file under
/// `stateid`, the last byte written at `last_write_offset`, no time and
/// an empty flex-files update body (RFC 8435 §12: none is defined).
pub fn layoutcommit_file(stateid: Stateid4, reclaim: bool, last_write_offset: u64) -> NfsArgop4 {
    NfsArgop4::Layoutcommit(Layoutcommit4Args {
        offset: 0,
        length: u64::MAX,
        reclaim,
        stateid,
        last_write_offset: Some(last_write_offset),
        time_modify: None,
        layoutupdate: Layoutupdate4 {
            layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
            body: Bounded(Bytes::new()),
        },
    })
}

pub fn open_stateid(r: &[NfsResop4]) -> Stateid4 {
    r.iter()
        .find_map(|x| match x {
            NfsResop4::Open(Res4::Ok(o)) => Some(o.stateid),
            _ => None,
        })
        .expect("an OPEN result")
}

pub fn last_status(r: &Compound4Res) -> Nfsstat4 {
    r.resarray.last().map(NfsResop4::status).unwrap()
}

/// What a scripted client asks for when it sets up its session.
pub struct SessionAsk {
    /// EXCHANGE_ID's flags.
    pub exchange_flags: u32,
    /// CREATE_SESSION4_FLAG_CONN_BACK_CHAN.
    pub back_chan: bool,
    /// Fore and back channel `ca_maxrequests`.
    pub fore_slots: u32,
    pub back_slots: u32,
    /// The back channel's security (`csa_sec_parms`).
    pub sec: Vec<CallbackSecParms4>,
}

impl Default for SessionAsk {
    fn default() -> Self {
        Self {
            exchange_flags: 0,
            back_chan: true,
            fore_slots: 16,
            back_slots: 1,
            sec: vec![CallbackSecParms4::None],
        }
    }
}

/// EXCHANGE_ID (verifier 1) and CREATE_SESSION with `ask`, each sent
/// through `ops` (a COMPOUND without SEQUENCE); the client id and session
/// id, or CREATE_SESSION's error. Asserts the server granted the back
/// channel exactly as asked (RFC 8881 §18.36.4).
pub async fn open_session<F, Fut>(
    ops: F,
    name: &str,
    ask: &SessionAsk,
) -> Result<(u64, [u8; 16]), Nfsstat4>
where
    F: Fn(Vec<NfsArgop4>) -> Fut,
    Fut: std::future::Future<Output = Compound4Res>,
{
    let mut eid = C4::exchange_id_args(name, 1);
    eid.flags = ask.exchange_flags;
    let r = ops(vec![NfsArgop4::ExchangeId(eid)]).await;
    let Some(NfsResop4::ExchangeId(Res4::Ok(x))) = r.resarray.first() else {
        panic!("EXCHANGE_ID: {r:?}")
    };
    let attrs = |n| ChannelAttrs4 {
        headerpadsize: 0,
        maxrequestsize: 65536,
        maxresponsesize: 65536,
        maxresponsesize_cached: 7584,
        maxoperations: 16,
        maxrequests: n,
        rdma_ird: Bounded(vec![]),
    };
    let flags = if ask.back_chan {
        CREATE_SESSION4_FLAG_CONN_BACK_CHAN
    } else {
        0
    };
    let r = ops(vec![NfsArgop4::CreateSession(CreateSession4Args {
        clientid: x.clientid,
        sequence: x.sequenceid,
        flags,
        fore_chan_attrs: attrs(ask.fore_slots),
        back_chan_attrs: attrs(ask.back_slots),
        cb_program: CB_PROGRAM,
        sec_parms: Bounded(ask.sec.clone()),
    })])
    .await;
    match r.resarray.first() {
        Some(NfsResop4::CreateSession(Res4::Ok(s))) => {
            assert_eq!(s.flags, flags, "back channel granted as asked");
            Ok((x.clientid, s.sessionid.0))
        }
        Some(NfsResop4::CreateSession(Res4::Err(e))) => Err(*e),
        _ => panic!("CREATE_SESSION: {r:?}"),
    }
}

/// SEQUENCE on slot 0 of `session` with the next sequence id from `seq`,
/// not cached.
pub fn slot0_sequence(session: [u8; 16], seq: &AtomicU32) -> NfsArgop4 {
    NfsArgop4::Sequence(Sequence4Args {
        sessionid: FixedOpaque(session),
        sequenceid: seq.fetch_add(1, Ordering::SeqCst) + 1,
        slotid: 0,
        highest_slotid: 0,
        cachethis: false,
    })
}

/// RECLAIM_COMPLETE for all file systems (RFC 8881 §18.51.3: before a
/// client's first OPEN), to follow a SEQUENCE.
pub fn reclaim_complete_op() -> NfsArgop4 {
    NfsArgop4::ReclaimComplete(ReclaimComplete4Args { one_fs: false })
}

/// Serves `server` on a loopback port: its address and its task.
pub async fn listen(
    server: oncrpc::Server,
) -> (SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>) {
    listen_with(server, TcpConfig::default()).await
}

/// [`listen`] with a TCP configuration of the test's own.
pub async fn listen_with(
    server: oncrpc::Server,
    config: TcpConfig,
) -> (SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>) {
    let tcp = TcpServer::bind(
        "127.0.0.1:0".parse::<SocketAddr>().unwrap(),
        Arc::new(server),
        config,
    )
    .await
    .unwrap();
    let addr = tcp.local_addr().unwrap();
    (addr, tcp.spawn())
}
