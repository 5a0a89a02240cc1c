//! NFS server: NFSv3 (RFC 1813), MOUNT v3 (RFC 1813 Appendix I) and a
//! minimal rpcbind (RFC 1833) over TCP, on a local directory.
//!
//! - [`Storage`]: the async file-tree interface with typed
//!   [`nfs::v3::Nfsstat3`] errors; [`LocalFs`] implements it on a local
//!   directory (handles stable across restarts, never leaving the export).
//! - [`nfs3::Nfs3Service`], [`mount::MountService`],
//!   [`rpcbind::RpcbindService`]: the programs as [`oncrpc::RpcService`]s.
//! - [`nlm::NlmService`], [`nsm::NsmService`]: NLM v4 byte-range locks
//!   for NFSv3 clients (sharing exclusion with NFSv4 locks) and the
//!   status monitor beside it.
//! - [`exports`]: the exports(5) file; [`access::ExportTable`]: every
//!   export's storage and who may use it, checked on every MOUNT, NFSv3
//!   and NFSv4 call and (through [`access::ExportTable::any_allows`]) on
//!   RDMA connection set-up.
//! - [`ServerConfig`] and [`start`]: bind the listeners and serve; this is
//!   what `nfsrdma serve DIR` calls. [`rpc_server`] builds the same
//!   program table for another transport (RPC-over-RDMA).
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! let mut cfg = nfs_server::ServerConfig::new("/srv/export");
//! cfg.nfs_addr = "127.0.0.1:0".parse().unwrap();
//! cfg.mount_addr = Some("127.0.0.1:0".parse().unwrap());
//! let server = nfs_server::start(cfg).await?;
//! println!("NFS on {}, MOUNT on {:?}", server.nfs_addr(), server.mount_addr());
//! # Ok(()) }
//! ```
// Unsafe code is denied everywhere but in `v4/lease/sys.rs` (fcntl leases).
#![deny(unsafe_code)]

pub mod access;
pub mod dircursor;
pub mod exports;
mod fh;
mod idmap;
mod inorder;
pub use inorder::set_listing_helpers;
pub mod localfs;
pub mod mount;
pub mod nfs3;
mod nfs3_deleg;
mod nfs3_dir;
mod nfs3_pnfs;
pub mod nlm;
pub mod nsm;
mod perm;
pub mod rpcbind;
pub mod statedir;
pub mod storage;
pub mod v4;

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;

use bytes::Bytes;
use nfs::mount::{MOUNT_PROGRAM, MOUNT_V3};
use nfs::nlm::{NLM_PROGRAM, NLM_V4};
use nfs::nsm::{SM_PROGRAM, SM_V1};
use nfs::v3::{NfsFh3, NFS_PROGRAM, NFS_V3};
use oncrpc::drc::DrcConfig;
use oncrpc::limits::{ConnLimiter, ConnLimits};
use oncrpc::tcp::{ServerReceiveBudget, ServerReplyBudget, TcpBackchannels, TcpConfig, TcpServer};
use tokio::task::JoinHandle;

pub use localfs::LocalFs;
pub use statedir::StateDir;
pub use storage::{
    DirEntry, DirPage, DirRequest, DirSink, FsStat, May, ReadDone, Segment, Storage, StorageResult,
    WriteDone, XattrError, XattrSet,
};

use crate::access::{loopback_clients, ExportTable};
use crate::exports::{ClientRule, ExportEntry, ExportOptions, Squash};
use crate::mount::MountService;
use crate::nfs3::Nfs3Service;
use crate::nlm::{NlmLimits, NlmLocks, NlmService};
use crate::nsm::NsmService;
use crate::rpcbind::{Registration, Registry, RpcbindService, RPCBIND_PROGRAM};

/// Default NFS port (RFC 1813 §3 / IANA `nfs`).
pub const NFS_PORT: u16 = 2049;
/// Default MOUNT port (Linux `rpc.mountd`'s customary 20048).
pub const MOUNT_PORT: u16 = 20048;
/// The rpcbind port (RFC 1833).
pub const RPCBIND_PORT: u16 = 111;

/// What to serve and where.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The directory to export (when `exports` is empty).
    pub export: PathBuf,
    /// Who may use `export`, and how. Default: loopback clients
    /// (127.0.0.0/8 and ::1), read-write, root squashed.
    pub clients: Vec<ClientRule>,
    /// Exports from an exports(5) file; when not empty they replace
    /// `export` and `clients`. NFSv4 clients find each at its path under
    /// the pseudo file system's root.
    pub exports: Vec<ExportEntry>,
    /// Refuse every change on every export with ROFS, whatever the
    /// client options say.
    pub read_only: bool,
    /// Bound on MOUNT's list of mounts (DUMP), oldest dropped.
    pub mount_list_max: usize,
    /// NFS listener (every program is also served here). Default
    /// `0.0.0.0:2049`; port 0 picks an ephemeral port.
    pub nfs_addr: SocketAddr,
    /// A separate MOUNT listener, or `None` to serve MOUNT only on the NFS
    /// port. Default `0.0.0.0:20048`.
    pub mount_addr: Option<SocketAddr>,
    /// An rpcbind listener, or `None` (the default: port 111 needs
    /// privileges and usually belongs to the system's rpcbind).
    pub rpcbind_addr: Option<SocketAddr>,
    /// Extra MNT paths that name the export besides its canonical path
    /// (e.g. `/export`).
    pub aliases: Vec<String>,
    /// Per-connection settings of the TCP listeners, among them the bytes
    /// of unread replies a connection may hold
    /// ([`TcpConfig::max_queued_reply_bytes`], 8 MiB by default), and the
    /// bytes of replies all TCP listeners hold together
    /// ([`TcpConfig::max_server_reply_bytes`], 256 MiB by default), and
    /// how long an idle connection is kept ([`TcpConfig::idle_timeout`],
    /// 6 minutes; connections bound to an NFSv4.1 session are kept).
    pub tcp: TcpConfig,
    /// Connections the TCP listeners (NFS, MOUNT, rpcbind together) keep
    /// open at once, in total and per client address; one over is closed
    /// as soon as it is accepted.
    pub connections: ConnLimits,
    /// NFSv4.1 session and state limits (lease, slots, the reply cache
    /// budget; docs/hardening.md "NFSv4 state bounds").
    pub nfs4_limits: v4::SessionLimits,
    /// Bounds on NLM locks: hosts holding locks, ranges per host (past
    /// either LOCK answers NLM4_DENIED_NOLOCKS); the status monitor keeps
    /// at most `max_hosts` monitored hosts.
    pub nlm_limits: NlmLimits,
    /// Where the handle key and the handle index live ([`StateDir`]);
    /// `None` (the library default) keeps them in memory, so handles do
    /// not survive a restart. `nfsrdma serve` always names one. With one,
    /// NFSv4 client records are kept there too, for reboot recovery.
    pub state_dir: Option<PathBuf>,
    /// Longest NFSv4 grace period after a start with client records in
    /// the state directory (RFC 8881 §8.4.2; `serve --grace-time`,
    /// default 90 s as Linux's nfsd); [`v4::Recovery`].
    pub grace_time: std::time::Duration,
    /// RPC-over-TLS (RFC 9289) on the TCP listeners (NFS, MOUNT,
    /// rpcbind): a client that probes with AUTH_TLS gets its connection
    /// upgraded; the others stay plain. `None` (the default): no TLS, a
    /// probe is answered AUTH_ERROR. Exports choose who must use it
    /// (`xprtsec=`).
    pub tls: Option<oncrpc::tcp::ServerTls>,
    /// RPCSEC_GSS (RFC 2203) for every program on every listener, with
    /// its mechanism (Kerberos from the keytab: the `gss` crate) and
    /// context table; exports choose who must use it (`sec=krb5*`).
    /// `None` (the default): RPCSEC_GSS calls are refused AUTH_BADCRED,
    /// and [`start`] refuses an exports table that asks for `sec=krb5*`.
    pub gss: Option<Arc<oncrpc::gss::GssServer>>,
    /// Serve NFSv4.1/4.2 as a pNFS flexible-files metadata server over
    /// these NFSv3 data servers ([`v4::pnfs`]); `None` (the default)
    /// serves data itself.
    pub mds: Option<v4::pnfs::MdsConfig>,
    /// The rpcbind port of clients, asked for their status monitor when
    /// SM_NOTIFY tells them of a restart, and for their lock manager when
    /// a blocked NLM LOCK is granted (111; tests use their own).
    pub sm_notify_port: u16,
    /// The `mon_name` SM_NOTIFY names this server by (sm-notify's `-v`);
    /// `None`: the host name. A client's status monitor matches it
    /// against the name or address it mounted the server by.
    pub nsm_name: Option<String>,
}

impl ServerConfig {
    /// Defaults for exporting `export`.
    pub fn new(export: impl Into<PathBuf>) -> Self {
        Self {
            export: export.into(),
            clients: loopback_clients(&ExportOptions::read_write()),
            exports: Vec::new(),
            read_only: false,
            mount_list_max: mount::MOUNT_LIST_MAX,
            nfs_addr: SocketAddr::from(([0, 0, 0, 0], NFS_PORT)),
            mount_addr: Some(SocketAddr::from(([0, 0, 0, 0], MOUNT_PORT))),
            rpcbind_addr: None,
            aliases: Vec::new(),
            tcp: TcpConfig::default(),
            connections: ConnLimits::default(),
            nfs4_limits: v4::SessionLimits::default(),
            nlm_limits: NlmLimits::default(),
            state_dir: None,
            grace_time: std::time::Duration::from_secs(90),
            tls: None,
            gss: None,
            mds: None,
            sm_notify_port: 111,
            nsm_name: None,
        }
    }
}

impl ServerConfig {
    /// Sets the squashing of every rule in `clients` (tests that run as
    /// root and act as the export's owner use [`Squash::None`]).
    pub fn set_squash(&mut self, squash: Squash) {
        for c in &mut self.clients {
            c.options.squash = squash;
        }
    }

    /// The exports this configuration serves.
    pub fn export_entries(&self) -> Vec<ExportEntry> {
        if self.exports.is_empty() {
            vec![ExportEntry {
                path: self.export.clone(),
                clients: self.clients.clone(),
            }]
        } else {
            self.exports.clone()
        }
    }
}

/// The program table (NFSv3, NFSv4.1/4.2, MOUNT v3, NLM v4, NSM, rpcbind) with a duplicate-request
/// cache, ready for any transport shell. The DRC keys on the client's IP
/// address and never the source port (ULB v2 draft §3.3.2, via
/// `oncrpc::PeerInfo::client_id`).
///
/// No access control: every client may use `fs`, with the identity its
/// credential claims (`*(rw,no_root_squash,sec=sys:none)`). For tests and
/// for embedding behind checks of one's own; [`start`] and
/// [`rpc_server_for`] apply an export table.
pub fn rpc_server(
    fs: Arc<LocalFs>,
    mount_paths: Vec<Bytes>,
    registry: Registry,
    advertise: IpAddr,
) -> oncrpc::Server {
    rpc_server_with_backchannels(
        fs,
        mount_paths,
        registry,
        advertise,
        v4::BackchannelSlot::new(),
    )
}

/// Like [`rpc_server`], with the NFSv4.1 service taking callback paths
/// from `backchannels` (RFC 8881 §2.10.3.1): once a transport that offers
/// back channels fills it (RPC-over-RDMA, RFC 8167), NFSv4.1 clients get
/// delegations.
pub fn rpc_server_with_backchannels(
    fs: Arc<LocalFs>,
    mount_paths: Vec<Bytes>,
    registry: Registry,
    advertise: IpAddr,
    backchannels: v4::BackchannelSlot,
) -> oncrpc::Server {
    let table = Arc::new(ExportTable::open_to_all(fs, mount_paths));
    rpc_server_for(
        table,
        registry,
        advertise,
        backchannels,
        mount::MOUNT_LIST_MAX,
        v4::SessionLimits::default(),
        NlmLimits::default(),
    )
}

/// The program table for the exports of `table`, each call checked
/// against its export's client list, flavors and squashing, with NFSv4
/// session `limits`.
pub fn rpc_server_for(
    table: Arc<ExportTable<LocalFs>>,
    registry: Registry,
    advertise: IpAddr,
    backchannels: v4::BackchannelSlot,
    mount_list_max: usize,
    limits: v4::SessionLimits,
    nlm_limits: NlmLimits,
) -> oncrpc::Server {
    let v4 = v4_service(&table, backchannels, limits);
    let nlm = NlmSetup {
        limits: nlm_limits,
        recovery: None,
        client_rpcbind_port: 111,
    };
    assemble(table, registry, advertise, mount_list_max, nlm, v4)
}

/// How the NLM and NSM services are set up: their bounds, the reboot
/// recovery of a server with a state directory, and the rpcbind port of
/// client hosts (GRANTED calls).
struct NlmSetup<'a> {
    limits: NlmLimits,
    recovery: Option<(Arc<nlm::NlmRecovery>, &'a nlm::Restart)>,
    client_rpcbind_port: u16,
}

/// The NFSv4 service for the exports of `table`.
fn v4_service(
    table: &Arc<ExportTable<LocalFs>>,
    backchannels: v4::BackchannelSlot,
    limits: v4::SessionLimits,
) -> v4::Nfs4Service {
    let primary = Arc::clone(table.primary().fs());
    v4::Nfs4Service::with_config(
        primary,
        v4::Nfs4Config {
            limits,
            ..v4::Nfs4Config::default()
        },
    )
    .with_exports(Arc::clone(table))
    .with_backchannels(backchannels)
}

/// The program table around the NFSv4 service `v4`.
fn assemble(
    table: Arc<ExportTable<LocalFs>>,
    registry: Registry,
    advertise: IpAddr,
    mount_list_max: usize,
    nlm_setup: NlmSetup<'_>,
    v4: v4::Nfs4Service,
) -> oncrpc::Server {
    let nlm_limits = nlm_setup.limits;
    let mut server = oncrpc::Server::new().with_drc(DrcConfig::default());
    server.register(MountService::new(Arc::clone(&table)).with_max_entries(mount_list_max));
    server.register(RpcbindService::new(registry, advertise));
    // NLM and NFSv4 locks on one file exclude each other (RFC 8881 §9.5).
    let locks = NlmLocks::new(nlm_limits);
    let v4 = v4.with_nlm_locks(locks.clone());
    let delegs = v4.delegations();
    let mut nlm = NlmService::new(Arc::clone(&table), locks.clone())
        .with_v4_locks(v4.byte_range_locks())
        .with_delegations(delegs.clone())
        .with_client_rpcbind_port(nlm_setup.client_rpcbind_port);
    let mut nsm = NsmService::new(locks, nlm_limits.max_hosts);
    if let Some((rec, restart)) = nlm_setup.recovery {
        nlm = nlm.with_recovery(Arc::clone(&rec));
        nsm = nsm.with_recovery(rec, restart);
    }
    server.register(nlm);
    server.register(nsm);
    // On a pNFS metadata server NFSv3 I/O reaches the data servers too.
    let mut nfs3 = Nfs3Service::new(table).with_delegations(delegs);
    if let Some(mds) = v4.mds() {
        nfs3 = nfs3.with_mds(Arc::clone(mds));
    }
    server.register(v4);
    server.register_arc(Arc::new(nfs3));
    server
}

/// The [`v4::BackchannelSource`] of ONC RPC over TCP: the reverse
/// direction of the client's own connection (connection ids are unique
/// across transports, so only TCP calls match).
pub fn tcp_backchannels(bcs: TcpBackchannels) -> Arc<dyn v4::BackchannelSource> {
    v4::backchannel_fn(move |p: &oncrpc::PeerInfo| match p.transport {
        oncrpc::TransportKind::Tcp => bcs.get(p.conn_id),
        _ => None,
    })
}

/// A running server: its bound addresses and listener tasks.
#[derive(Debug)]
pub struct RunningServer {
    fs: Arc<LocalFs>,
    table: Arc<ExportTable<LocalFs>>,
    rpc: Arc<oncrpc::Server>,
    nfs_addr: SocketAddr,
    mount_addr: Option<SocketAddr>,
    rpcbind_addr: Option<SocketAddr>,
    tasks: Vec<Listening>,
    backchannels: v4::BackchannelSlot,
    conns: Arc<ConnLimiter>,
}

impl RunningServer {
    /// The program table every listener serves, with its duplicate-request
    /// cache: hand it to another transport shell (an RPC-over-RDMA
    /// listener) so that all transports share one DRC.
    pub fn rpc(&self) -> Arc<oncrpc::Server> {
        Arc::clone(&self.rpc)
    }

    /// The connection counts of the TCP listeners (capped by
    /// [`ServerConfig::connections`]): hand it to an RPC-over-RDMA
    /// listener so that its connections count against the same caps.
    pub fn conn_limiter(&self) -> Arc<ConnLimiter> {
        Arc::clone(&self.conns)
    }

    /// Where NFS (and every other program) is served.
    pub fn nfs_addr(&self) -> SocketAddr {
        self.nfs_addr
    }

    /// The separate MOUNT listener, if any.
    pub fn mount_addr(&self) -> Option<SocketAddr> {
        self.mount_addr
    }

    /// The rpcbind listener, if any.
    pub fn rpcbind_addr(&self) -> Option<SocketAddr> {
        self.rpcbind_addr
    }

    /// Every export and who may use it (for a transport's accept
    /// filter: [`ExportTable::any_allows`]).
    pub fn exports(&self) -> &Arc<ExportTable<LocalFs>> {
        &self.table
    }

    /// The first export's root handle.
    pub fn root_handle(&self) -> NfsFh3 {
        self.fs.root()
    }

    /// This instance's write verifier.
    pub fn write_verifier(&self) -> [u8; 8] {
        self.fs.write_verifier()
    }

    /// The storage back end.
    pub fn storage(&self) -> &Arc<LocalFs> {
        &self.fs
    }

    /// Where the NFSv4.1 service finds back channels: fill it with
    /// [`v4::BackchannelSlot::set`] once an RPC-over-RDMA listener offers
    /// them.
    pub fn v4_backchannels(&self) -> &v4::BackchannelSlot {
        &self.backchannels
    }

    /// Stops accepting connections. Connections already open are served
    /// until their peers close them.
    pub fn stop(self) {
        for t in &self.tasks {
            t.task.abort();
        }
    }

    /// Waits on every listener; returns only if one of them ends, which
    /// they never do on their own (a failed accept is retried): the error
    /// names the listener and why it ended (an error or a panic).
    pub async fn wait(mut self) -> io::Result<()> {
        if self.tasks.is_empty() {
            return Ok(());
        }
        std::future::poll_fn(|cx| {
            for l in &mut self.tasks {
                if let Poll::Ready(r) = Pin::new(&mut l.task).poll(cx) {
                    return Poll::Ready(l.ended(r));
                }
            }
            Poll::Pending
        })
        .await
    }
}

/// A listener's task and what it listens for.
#[derive(Debug)]
struct Listening {
    what: &'static str,
    addr: SocketAddr,
    task: JoinHandle<io::Result<()>>,
}

impl Listening {
    fn spawn(what: &'static str, server: TcpServer) -> io::Result<Self> {
        Ok(Self {
            what,
            addr: server.local_addr()?,
            task: server.spawn(),
        })
    }

    fn ended(&self, r: Result<io::Result<()>, tokio::task::JoinError>) -> io::Result<()> {
        let why = match r {
            Ok(Ok(())) => "stopped".to_string(),
            Ok(Err(e)) => e.to_string(),
            Err(e) => e.to_string(),
        };
        Err(io::Error::other(format!(
            "{} listener on {} ended: {why}",
            self.what, self.addr
        )))
    }
}

/// Binds the listeners and starts serving the configured exports.
pub async fn start(config: ServerConfig) -> io::Result<RunningServer> {
    let aliases: Vec<Bytes> = config
        .aliases
        .iter()
        .map(|a| Bytes::from(a.clone()))
        .collect();
    let state = match &config.state_dir {
        Some(d) => Some(StateDir::open(d)?),
        None => None,
    };
    let table = Arc::new(ExportTable::open(
        &config.export_entries(),
        config.read_only,
        &aliases,
        state.as_ref(),
    )?);
    let fs = Arc::clone(table.primary().fs());
    let registry: Registry = Arc::new(Mutex::new(Vec::new()));
    let backchannels = v4::BackchannelSlot::new();
    // With a state directory, NFSv4 clients are recorded there and a
    // restart opens a grace period for them (RFC 8881 §8.4.2).
    let v4 = v4_service(&table, backchannels.clone(), config.nfs4_limits);
    let v4 = match &state {
        Some(s) => v4.with_recovery(&v4::Recovery {
            grace: config.grace_time,
            ..v4::Recovery::new(s.path())
        })?,
        None => v4,
    };
    // A pNFS metadata server over the configured data servers.
    let v4 = match config.mds.clone() {
        Some(cfg) => v4.with_mds(Arc::new(match &state {
            Some(s) => v4::pnfs::Mds::open(cfg, s.path())?,
            None => v4::pnfs::Mds::new(cfg),
        })),
        None => v4,
    };
    // NLM hosts are recorded there too; after a restart they are sent
    // SM_NOTIFY and get a grace period to reclaim (XNFS NLM, SM).
    let nlm_rec = match &state {
        Some(s) => {
            let (r, restart) =
                nlm::NlmRecovery::open(s.path(), config.grace_time, config.nlm_limits.max_hosts)?;
            Some((Arc::new(r), restart))
        }
        None => None,
    };
    let mut server = assemble(
        Arc::clone(&table),
        Arc::clone(&registry),
        config.nfs_addr.ip(),
        config.mount_list_max,
        NlmSetup {
            limits: config.nlm_limits,
            recovery: nlm_rec.as_ref().map(|(r, s)| (Arc::clone(r), s)),
            client_rpcbind_port: config.sm_notify_port,
        },
        v4,
    );
    match &config.gss {
        Some(gss) => server = server.with_gss(Arc::clone(gss)),
        None if config.export_entries().iter().any(|e| {
            e.clients
                .iter()
                .any(|c| c.options.sec.iter().any(|f| f.is_gss()))
        }) =>
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an export asks for sec=krb5*, but RPCSEC_GSS is not configured (a keytab)",
            ));
        }
        None => {}
    }
    let server = Arc::new(server);
    if let Some((_, restart)) = nlm_rec {
        let name = match &config.nsm_name {
            Some(n) => bytes::Bytes::from(n.clone()),
            None => nlm::restart::host_name(),
        };
        tokio::spawn(restart.notify(name, config.sm_notify_port));
    }
    let conns = ConnLimiter::new(config.connections);
    let replies = ServerReplyBudget::new(config.tcp.max_server_reply_bytes);
    let receives = ServerReceiveBudget::new(config.tcp.max_server_receive_reserve);
    // NFSv4.1 callbacks over TCP go on a connection the client opened and
    // bound to the back channel (RFC 8881 §2.10.3.1).
    let tcp_back = TcpBackchannels::new();
    backchannels.set(tcp_backchannels(tcp_back.clone()));
    let bind = |addr: SocketAddr| {
        let server = Arc::clone(&server);
        let conns = Arc::clone(&conns);
        let replies = Arc::clone(&replies);
        let receives = Arc::clone(&receives);
        let tcp_back = tcp_back.clone();
        let tls = config.tls.clone();
        async move {
            let l = TcpServer::bind(addr, server, config.tcp).await?;
            let l = l
                .with_conn_limiter(conns)
                .with_reply_budget(replies)
                .with_receive_budget(receives)
                .with_backchannels(tcp_back);
            Ok::<_, io::Error>(match tls {
                Some(tls) => l.with_tls(tls),
                None => l,
            })
        }
    };
    let nfs = bind(config.nfs_addr).await?;
    let nfs_addr = nfs.local_addr()?;
    let mut tasks = vec![Listening::spawn("NFS over TCP", nfs)?];
    let mut mount_addr = None;
    if let Some(a) = config.mount_addr {
        let l = bind(a).await?;
        mount_addr = Some(l.local_addr()?);
        tasks.push(Listening::spawn("MOUNT over TCP", l)?);
    }
    let mut rpcbind_addr = None;
    if let Some(a) = config.rpcbind_addr {
        let l = bind(a).await?;
        rpcbind_addr = Some(l.local_addr()?);
        tasks.push(Listening::spawn("rpcbind over TCP", l)?);
    }
    if let Ok(mut r) = registry.lock() {
        let mport = mount_addr.unwrap_or(nfs_addr).port();
        r.push(Registration {
            prog: NFS_PROGRAM,
            vers: NFS_V3,
            port: nfs_addr.port(),
        });
        r.push(Registration {
            prog: MOUNT_PROGRAM,
            vers: MOUNT_V3,
            port: mport,
        });
        // NLM and NSM are served on the NFS port, where kernel clients'
        // lockd find them through rpcbind (RFC 1813 Appendix II).
        for (prog, vers) in [(NLM_PROGRAM, NLM_V4), (SM_PROGRAM, SM_V1)] {
            r.push(Registration {
                prog,
                vers,
                port: nfs_addr.port(),
            });
        }
        if let Some(a) = rpcbind_addr {
            for vers in 2..=4 {
                r.push(Registration {
                    prog: RPCBIND_PROGRAM,
                    vers,
                    port: a.port(),
                });
            }
        }
    }
    tracing::info!(export = %fs.path().display(), %nfs_addr, ?mount_addr, ?rpcbind_addr, "NFS server started");
    Ok(RunningServer {
        fs,
        table,
        rpc: server,
        nfs_addr,
        mount_addr,
        rpcbind_addr,
        tasks,
        backchannels,
        conns,
    })
}
