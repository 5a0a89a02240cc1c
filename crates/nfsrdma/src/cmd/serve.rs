//! `serve`: the NFS server (NFSv3 + MOUNT v3 + NLM v4/NSM, NFSv4.1/4.2, optional
//! rpcbind) on a local directory, over TCP and over RPC-over-RDMA on the
//! software iWARP device; TCP and RDMA connections carry the NFSv4.1
//! back channel.
//!
//! Access: `serve DIR` exports DIR read-write with root squashed to
//! loopback clients only; `--allow SPEC` (repeatable) replaces that list;
//! `--exports FILE` serves an exports(5) file instead. The listeners bind
//! `--addr` (0.0.0.0 by default) and the export lists keep everyone else
//! out: MOUNT answers MNT3ERR_ACCES, NFS calls ACCES, RDMA connection
//! requests are rejected.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use oncrpc::limits::ConnLimits;
use oncrpc::tcp::TcpConfig;

/// Transports the server can run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    /// ONC RPC over TCP with record marking (RFC 5531 §11).
    Tcp,
    /// RPC-over-RDMA (RFC 8166; version 2 negotiated when the client asks)
    /// on the software iWARP device (MPA/DDP/RDMAP over TCP, interoperable
    /// with Linux siw).
    Rdma,
}

/// Arguments of `nfsrdma serve`.
#[derive(clap::Args, Debug)]
pub(crate) struct ServeArgs {
    /// The directory to export (not with --exports).
    #[arg(required_unless_present_any = ["exports", "config"])]
    dir: Option<PathBuf>,
    /// Read options from this TOML file: each key a long option without
    /// its dashes (`port = 2049`, `allow = ["10.0.0.0/8"]`,
    /// `read-only = true`) and `dir` the directory; options on the command
    /// line win over the file (docs/operability.md).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Serve the exports of this file, in exports(5) syntax
    /// (`PATH CLIENT(OPTS)...`; see docs/hardening.md), instead of DIR.
    #[arg(long, conflicts_with_all = ["dir", "allow", "no_root_squash"])]
    exports: Option<PathBuf>,
    /// A client allowed to use DIR: an address, a network (CIDR), a host
    /// name (resolved at start) or `*`; repeatable. Without it only
    /// loopback clients (127.0.0.0/8, ::1) are allowed.
    #[arg(long, value_name = "SPEC")]
    allow: Vec<String>,
    /// Do not squash uid 0 on DIR (by default a client's root is the
    /// anonymous user 65534, as exports(5) root_squash).
    #[arg(long)]
    no_root_squash: bool,
    /// At most this many MOUNT list entries (DUMP); the oldest is dropped.
    #[arg(long, default_value_t = nfs_server::mount::MOUNT_LIST_MAX)]
    mount_list_max: usize,
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0")]
    addr: IpAddr,
    /// NFS port over TCP (0 picks an ephemeral port).
    #[arg(long, default_value_t = 2049)]
    port: u16,
    /// NFS port over RPC-over-RDMA (IANA nfsrdma, 20049).
    #[arg(long, default_value_t = 20049)]
    rdma_port: u16,
    /// Require MPA CRC32c on RDMA connections (RFC 5044 §4.4); by default
    /// CRC is used only when the client asks, as Linux siw does (software
    /// device only).
    #[arg(long)]
    rdma_crc: bool,
    /// RDMA device: `soft` (the software iWARP device, no hardware needed),
    /// an rdma-core device name (`mlx5_0`, `rxe0`, `siw0`; see `nfsrdma
    /// devices`), or `auto`: the rdma-core device whose interface owns
    /// --addr, else the software device (logged).
    #[arg(long, default_value = "auto")]
    rdma_device: crate::device::DeviceChoice,
    /// MiB all NFSv4.1 sessions' reply caches may reserve together;
    /// CREATE_SESSION grants fewer or smaller slots, then NFS4ERR_DELAY,
    /// when it runs short (RFC 8881 §18.36.3).
    #[arg(long, default_value_t = 64)]
    v4_reply_cache_mib: u64,
    /// Milliseconds a DELEGRETURN waits for the holder's WRITEs of the
    /// file still in progress before the delegation goes anyway (limit
    /// `nfs4.delegreturn_write_wait`).
    #[arg(long, default_value_t = 10_000)]
    v4_delegreturn_write_wait_ms: u64,
    /// NFSv3 clients (NLM `caller_name`s) holding byte-range locks at once;
    /// a LOCK from one more answers NLM4_DENIED_NOLOCKS. Also bounds the
    /// status monitor's list of monitored hosts.
    #[arg(long, default_value_t = nfs_server::nlm::NlmLimits::default().max_hosts)]
    nlm_max_hosts: usize,
    /// Byte ranges one NFSv3 client host may hold locked (all its files and
    /// processes); past it LOCK answers NLM4_DENIED_NOLOCKS.
    #[arg(long, default_value_t = nfs_server::nlm::NlmLimits::default().max_locks_per_host)]
    nlm_max_locks_per_host: usize,
    /// Blocking NLM LOCKs that may wait for a conflicting lock to go, over
    /// all hosts; one more answers NLM4_DENIED_NOLOCKS.
    #[arg(long, default_value_t = nfs_server::nlm::BlockedLimits::default().max_total)]
    nlm_max_blocked: usize,
    /// Blocking NLM LOCKs one client host may have waiting.
    #[arg(long, default_value_t = nfs_server::nlm::BlockedLimits::default().max_per_host)]
    nlm_max_blocked_per_host: usize,
    /// Helper threads that may share the `statx` calls of large
    /// READDIRPLUS pages (at most one less than the cores; 0, the default,
    /// prepares each page on its own thread). On the 2-core development
    /// machine they gave the same listing time at a quarter more CPU
    /// (docs/listing.md).
    #[arg(long, default_value_t = 0)]
    readdir_helpers: usize,
    /// Seconds a listed file's attributes are kept for later READDIRPLUS
    /// and NFSv4 READDIR replies, dropped at once by any inotify event of
    /// the file in its directory (this bounds only what inotify cannot
    /// see, such as writes through mmap; docs/listing.md); 0 turns the
    /// cache off.
    #[arg(long, default_value_t = nfs_server::localfs::DEFAULT_ATTR_CACHE_TTL.as_secs_f64())]
    attr_cache_ttl: f64,
    /// Directories the listing attribute cache watches at once (limit
    /// `readdir.attr_cache_dirs`: the least recently listed is dropped).
    #[arg(long, default_value_t = nfs_server::localfs::AttrCacheConfig::default().max_dirs)]
    attr_cache_dirs: usize,
    /// Entries the listing attribute cache keeps in all, about 150 bytes
    /// each (limit `readdir.attr_cache_entries`).
    #[arg(long, default_value_t = nfs_server::localfs::AttrCacheConfig::default().max_entries)]
    attr_cache_entries: usize,
    /// Seconds between durable commits of the handle index in the state
    /// directory (0.01 to 60). Every handle is in the index's log before
    /// its reply, so a killed server loses none; a power loss may lose
    /// those LOOKUP, READDIRPLUS and OPEN handed out in the last interval
    /// (they are then STALE); those of creates, renames and links are
    /// synced before the reply (docs/hardening.md).
    #[arg(long, default_value_t = nfs_server::localfs::DEFAULT_INDEX_COMMIT_INTERVAL.as_secs_f64())]
    index_commit_interval: f64,
    /// The rpcbind port of NFSv3 client hosts, asked for their status
    /// monitor when the server tells them of its restart (SM_NOTIFY) and
    /// for their lock manager when a blocked lock is granted (GRANTED).
    #[arg(long, default_value_t = 111)]
    sm_notify_port: u16,
    /// The name the server gives itself in SM_NOTIFY (`mon_name`, as
    /// sm-notify's `-v`): clients' status monitors match it against the
    /// name or address they mounted the server by. Default: the host name.
    #[arg(long, value_name = "NAME")]
    nsm_name: Option<String>,
    /// Credits granted per RDMA connection (receive buffers posted).
    #[arg(long, default_value_t = 64)]
    rdma_credits: u32,
    /// Inline size of RDMA connections: the size of each posted receive
    /// buffer and the send and receive sizes advertised in the connection
    /// private data (RFC 8797 §3.1, §4.2; 1 KiB units, 1024-65536). Messages are
    /// sent inline up to the smaller of this and the client's receive
    /// size, so a larger value changes nothing for a client that keeps
    /// the default 4096 (Linux `sunrpc.rdma_max_inline_read`); one that
    /// raises it (this project's client offers 8192) gets replies up to
    /// this size (a 4 KiB READ) inline, without registering memory for a
    /// write chunk.
    #[arg(long, default_value_t = 8192,
          value_parser = clap::value_parser!(u32).range(1024..=65536))]
    rdma_inline_size: u32,
    /// Bytes the calls of one RDMA connection may be pulling by RDMA Read
    /// at once (their buffers); a call beyond it waits for earlier ones.
    #[arg(long, default_value_t = 64 << 20)]
    rdma_read_bytes_per_conn: u64,
    /// Milliseconds the RDMA Reads of one call may take; a client that
    /// leaves them unanswered has its connection closed.
    #[arg(long, default_value_t = 30_000)]
    rdma_read_timeout_ms: u64,
    /// Receive buffers posted per RDMA connection for replies to the
    /// server's reverse-direction calls (NFSv4.1 callbacks on the client's
    /// own connection, RFC 8167); 0 disables the backchannel, and with it
    /// NFSv4.1 delegations.
    #[arg(long, default_value_t = 8)]
    rdma_backchannel_credits: u32,
    /// MOUNT v3 port over TCP (MOUNT is also served on the NFS port).
    #[arg(long, default_value_t = 20048)]
    mount_port: u16,
    /// Also answer rpcbind/portmapper (v2 GETPORT, v3/v4 GETADDR) on this
    /// port, usually 111, so clients that ask the portmapper find NFS,
    /// MOUNT, NLM and NSM (a kernel NFSv3 mount without `nolock` needs it). Off by default: the system's rpcbind usually owns 111.
    #[arg(long)]
    rpcbind_port: Option<u16>,
    /// Refuse every change with NFS3ERR_ROFS.
    #[arg(long)]
    read_only: bool,
    /// Transports for NFS. MOUNT (and rpcbind) are always served over TCP,
    /// as NFS/RDMA clients expect.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "tcp,rdma")]
    transports: Vec<Transport>,
    /// Extra names a client may MOUNT for the export (besides its full path),
    /// for example /export.
    #[arg(long = "alias")]
    aliases: Vec<String>,
    /// Connections kept open at once, all clients and listeners (TCP and
    /// RDMA) together; one more is closed as soon as it is accepted.
    #[arg(long, default_value_t = ConnLimits::default().max_total)]
    max_connections: usize,
    /// Connections kept open at once from one client address.
    #[arg(long, default_value_t = ConnLimits::default().max_per_client)]
    max_connections_per_client: usize,
    /// Bytes of replies a TCP connection may hold (written but not yet read
    /// by the client, or reserved by its calls running); above it the
    /// server stops reading that connection until the client reads.
    #[arg(long, default_value_t = TcpConfig::default().max_queued_reply_bytes)]
    max_queued_reply_bytes: usize,
    /// Bytes of replies all TCP connections together may hold; above it a
    /// connection that already holds some stops being read until replies
    /// are written (one holding none may still run one call).
    #[arg(long, default_value_t = TcpConfig::default().max_server_reply_bytes)]
    max_server_reply_bytes: usize,
    /// Bytes of room all TCP connections together may make for records
    /// (1 MiB WRITEs) ahead of their arrival, so a record is read into one
    /// buffer instead of being moved as it grows; past it records are
    /// received as they arrive.
    #[arg(long, default_value_t = TcpConfig::default().max_server_receive_reserve)]
    max_server_receive_reserve: usize,
    /// Seconds a TCP connection may stay silent with no call in progress
    /// before the server closes it (0: never). A connection bound to an
    /// NFSv4.1 session is kept while the session lives.
    #[arg(long, default_value_t = TcpConfig::default().idle_timeout.map_or(0, |d| d.as_secs()))]
    tcp_idle_timeout_secs: u64,
    /// RDMA connection set-ups (MPA handshakes) in progress at once from
    /// one client address; each must send its MPA Request within 5 s.
    #[arg(long, default_value_t = softrnic::SoftConfig::default().max_handshakes_per_client)]
    max_handshakes_per_client: usize,
    /// Set the open-file limit (RLIMIT_NOFILE) to this many descriptors
    /// instead of raising the soft limit to the hard one (for tests that
    /// exhaust descriptors on purpose).
    #[arg(long)]
    max_open_files: Option<u64>,
    /// Where the server keeps the secret key of its file handles and the
    /// handle index of each export (created mode 0700). Handles stay valid
    /// across restarts with the same directory. Default: /var/lib/nfsrdma
    /// when run as root, else $XDG_STATE_HOME/nfsrdma or
    /// ~/.local/state/nfsrdma.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Longest grace period after a start, in seconds: NFSv4 clients and
    /// NLM hosts the last run recorded in the state directory reclaim
    /// their opens and locks, new ones wait (NFS4ERR_GRACE,
    /// NLM4_DENIED_GRACE_PERIOD). The NFSv4 one ends as soon as every
    /// recorded client has finished reclaiming; with no records there is
    /// none.
    #[arg(long, default_value_t = 90)]
    grace_time: u64,
    /// Serve the server's counters in the Prometheus text format at
    /// http://ADDR/metrics: calls and latency per RPC procedure, rejected
    /// calls, limit trips, open connections (`nfsrdma stat ADDR` prints a
    /// summary). Off by default.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Offer RPC-over-TLS (RFC 9289) on the TCP listeners with this
    /// certificate chain (PEM; with --tls-key). Clients that probe with
    /// AUTH_TLS are upgraded, the others stay plain; exports' `xprtsec=`
    /// decides who must use it (docs/security.md).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Verify client certificates against these CA certificates (PEM):
    /// a client presenting one signed by them is mutually authenticated
    /// (`xprtsec=mtls`); one presenting another fails the handshake; one
    /// presenting none is plain `tls`.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Milliseconds a client has from its first byte to finish the AUTH_TLS
    /// probe and the TLS handshake; past it the connection is closed
    /// (limit `tls.handshake_timeout`).
    #[arg(long, default_value_t = oncrpc::tcp::DEFAULT_HANDSHAKE_TIMEOUT.as_millis() as u64)]
    tls_handshake_timeout_ms: u64,
    /// The Kerberos keytab holding the server's keys (`nfs/HOST@REALM`),
    /// read when an export asks for `sec=krb5`, `krb5i` or `krb5p`
    /// (RPCSEC_GSS, docs/security.md). The realm comes from krb5.conf
    /// (`KRB5_CONFIG`).
    #[arg(long, value_name = "FILE", default_value = "/etc/krb5.keytab")]
    keytab: PathBuf,
    /// RPCSEC_GSS contexts held at once (limit `gss.contexts`).
    #[arg(long, default_value_t = oncrpc::gss::GssConfig::default().max_contexts)]
    gss_max_contexts: usize,
    /// RPCSEC_GSS contexts one client address holds at once (limit
    /// `gss.contexts_per_client`).
    #[arg(long, default_value_t = oncrpc::gss::GssConfig::default().max_contexts_per_client)]
    gss_max_contexts_per_client: usize,
    /// Serve NFSv4.1/4.2 as a pNFS flexible-files metadata server
    /// (RFC 8435) over this NFSv3 data server (repeatable; each file is
    /// placed on the data servers holding the fewest files):
    /// `nfs://HOST[:PORT]/EXPORT[?rdmaport=N&mountport=N]`. HOST is
    /// advertised to clients as is; the export must let this server in
    /// with no_root_squash (docs/pnfs.md).
    #[arg(long = "data-server", value_name = "URL")]
    data_servers: Vec<String>,
    /// Synthetic uid and gid of data files on the data servers
    /// (RFC 8435 §2.2).
    #[arg(long, default_value_t = nfs_server::v4::pnfs::DEFAULT_SYNTHETIC_ID)]
    mds_synthetic_id: u32,
    /// Layout stateids a metadata server holds at once; past it LAYOUTGET
    /// answers LAYOUTTRYLATER (limit `pnfs.layouts`).
    #[arg(long, default_value_t = nfs_server::v4::pnfs::DEFAULT_MAX_LAYOUTS)]
    max_layouts: usize,
    /// Copies of each new file on a metadata server, each on its own
    /// data server (RFC 8435 §8 mirroring; 1 to 4, at most the number of
    /// data servers); clients write every copy and read any.
    #[arg(long, default_value_t = 1)]
    mds_mirrors: usize,
    /// Stale mirrors a metadata server rebuilds at once (limit
    /// `pnfs.rebuilds`).
    #[arg(long, default_value_t = nfs_server::v4::pnfs::DEFAULT_MAX_REBUILDS)]
    mds_max_rebuilds: usize,
    /// Seconds a metadata server waits for a recalled layout before it
    /// revokes it and fences its data files (RFC 8435 §2.2); default:
    /// the lease (90 s).
    #[arg(long, value_name = "SECS")]
    mds_recall_timeout: Option<u64>,
    /// Seconds a metadata server answers NFS4ERR_LAYOUTUNAVAILABLE to a
    /// client that reported a data server unreachable, for files there
    /// (the client does its I/O through the metadata server meanwhile).
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    mds_ds_error_hold: u64,
    /// Seconds a metadata server's recall for a truncation or a change of
    /// owner or mode waits for the fencing of the layouts' data files on
    /// the data servers before its callbacks go out regardless (limit
    /// `pnfs.fence_wait`); at least 1.
    #[arg(long, value_name = "SECS", default_value_t = nfs_server::v4::pnfs::DEFAULT_FENCE_WAIT.as_secs())]
    mds_fence_wait: u64,
    /// Seconds a metadata server waits for the answer to one call to a
    /// data server on its control path (creating, fencing, removing data
    /// files), or for the MOUNT of a new connection; then the data server
    /// counts as unreachable (limit `pnfs.control_timeout`); at least 1.
    #[arg(long, value_name = "SECS", default_value_t = nfs_server::v4::pnfs::DEFAULT_CONTROL_TIMEOUT.as_secs())]
    mds_control_timeout: u64,
}

/// The pNFS metadata server's settings: `--data-server` and the `--mds-*`
/// options (docs/pnfs.md).
fn mds_config(args: &ServeArgs) -> anyhow::Result<nfs_server::v4::pnfs::MdsConfig> {
    let ds = args
        .data_servers
        .iter()
        .map(|u| super::dataserver::parse(u).context("--data-server"))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let ds_count = ds.len();
    let mut mds = nfs_server::v4::pnfs::MdsConfig::new(ds);
    mds.uid = args.mds_synthetic_id;
    mds.gid = args.mds_synthetic_id;
    mds.max_layouts = args.max_layouts;
    let most = nfs_server::v4::pnfs::MAX_MIRRORS.min(ds_count);
    if !(1..=most).contains(&args.mds_mirrors) {
        anyhow::bail!("--mds-mirrors {}: 1 to {most} here", args.mds_mirrors);
    }
    mds.mirrors = args.mds_mirrors;
    mds.max_rebuilds = args.mds_max_rebuilds.max(1);
    mds.recall_timeout = args
        .mds_recall_timeout
        .map(|s| Duration::from_secs(s.max(1)));
    mds.ds_error_hold = Duration::from_secs(args.mds_ds_error_hold);
    mds.fence_wait = Duration::from_secs(args.mds_fence_wait.max(1));
    mds.control_timeout = Duration::from_secs(args.mds_control_timeout.max(1));
    Ok(mds)
}

/// The TLS settings of `--tls-cert`, `--tls-key`, `--tls-client-ca`.
fn server_tls(args: &ServeArgs) -> anyhow::Result<Option<oncrpc::tcp::ServerTls>> {
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else {
        return Ok(None);
    };
    let tls = oncrpc::tcp::ServerTls::from_pem(cert, key, args.tls_client_ca.as_deref())
        .context("loading the TLS certificate and key")?
        .with_handshake_timeout(Duration::from_millis(args.tls_handshake_timeout_ms));
    Ok(Some(tls))
}

/// RPCSEC_GSS with Kerberos from `--keytab`, when an export asks for
/// `sec=krb5*`; `None` otherwise.
fn server_gss(
    args: &ServeArgs,
    config: &nfs_server::ServerConfig,
) -> anyhow::Result<Option<std::sync::Arc<oncrpc::gss::GssServer>>> {
    let wanted = config
        .export_entries()
        .iter()
        .flat_map(|e| &e.clients)
        .any(|c| c.options.sec.iter().any(|f| f.is_gss()));
    if !wanted {
        return Ok(None);
    }
    // MIT Kerberos finds the acceptor's keytab in the environment; set
    // before any Kerberos call.
    gss::set_process_keytab(&args.keytab);
    let acceptor = gss::Krb5Acceptor::new().map_err(|e| {
        anyhow::anyhow!(
            "sec=krb5* needs the server's keys: keytab {}: {e}",
            args.keytab.display()
        )
    })?;
    let gss_config = oncrpc::gss::GssConfig {
        max_contexts: args.gss_max_contexts,
        max_contexts_per_client: args.gss_max_contexts_per_client,
        ..oncrpc::gss::GssConfig::default()
    };
    Ok(Some(std::sync::Arc::new(oncrpc::gss::GssServer::new(
        std::sync::Arc::new(acceptor),
        gss_config,
    ))))
}

/// `args` with the options of its `--config` file merged in, the command
/// line's `matches` winning (see [`super::config`]).
pub(crate) fn with_config(
    args: ServeArgs,
    matches: Option<&clap::ArgMatches>,
) -> anyhow::Result<ServeArgs> {
    use clap::{Args, FromArgMatches};
    let (Some(path), Some(given)) = (&args.config, matches) else {
        return Ok(args);
    };
    // The arguments after `nfsrdma serve`.
    let line = std::env::args_os().skip(2);
    let command = ServeArgs::augment_args(clap::Command::new("serve"));
    let merged = super::config::reparse(command, path, given, line)?;
    Ok(ServeArgs::from_arg_matches(&merged)?)
}

pub(crate) async fn run(args: ServeArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.dir.is_some() || args.exports.is_some(),
        "nothing to export: give DIR or --exports FILE (or `dir`/`exports` in the config file)"
    );
    anyhow::ensure!(!args.transports.is_empty(), "no transport selected");
    set_open_file_limit(args.max_open_files)?;
    anyhow::ensure!(
        args.attr_cache_ttl.is_finite() && args.attr_cache_ttl >= 0.0,
        "--attr-cache-ttl must be a number of seconds, 0 or more"
    );
    nfs_server::localfs::set_attr_cache(nfs_server::localfs::AttrCacheConfig {
        ttl: Duration::from_secs_f64(args.attr_cache_ttl.min(86_400.0)),
        max_dirs: args.attr_cache_dirs,
        max_entries: args.attr_cache_entries,
    });
    anyhow::ensure!(
        (0.01..=60.0).contains(&args.index_commit_interval),
        "--index-commit-interval must be 0.01 to 60 seconds"
    );
    nfs_server::localfs::set_index_commit_interval(Duration::from_secs_f64(
        args.index_commit_interval,
    ));
    let tcp = args.transports.contains(&Transport::Tcp);
    let mut config = access_config(&args)?;
    config.read_only = args.read_only;
    config.connections = ConnLimits {
        max_total: args.max_connections,
        max_per_client: args.max_connections_per_client,
    };
    config.tls = server_tls(&args)?;
    config.gss = server_gss(&args, &config)?;
    config.tcp.max_queued_reply_bytes = args.max_queued_reply_bytes;
    config.tcp.max_server_reply_bytes = args.max_server_reply_bytes;
    config.tcp.max_server_receive_reserve = args.max_server_receive_reserve;
    config.tcp.idle_timeout =
        (args.tcp_idle_timeout_secs > 0).then(|| Duration::from_secs(args.tcp_idle_timeout_secs));
    config.mount_list_max = args.mount_list_max;
    let mount_addr = SocketAddr::new(args.addr, args.mount_port);
    if tcp {
        config.nfs_addr = SocketAddr::new(args.addr, args.port);
        config.mount_addr = Some(mount_addr);
    } else {
        // One TCP listener on the MOUNT port serves MOUNT (and every other
        // program); NFS itself is reached over RDMA.
        config.nfs_addr = mount_addr;
        config.mount_addr = None;
    }
    config.rpcbind_addr = args.rpcbind_port.map(|p| SocketAddr::new(args.addr, p));
    config.aliases = args.aliases.clone();
    config.nfs4_limits.reply_cache_bytes = args.v4_reply_cache_mib << 20;
    config.nfs4_limits.delegreturn_write_wait =
        std::time::Duration::from_millis(args.v4_delegreturn_write_wait_ms);
    nfs_server::set_listing_helpers(args.readdir_helpers);
    config.nlm_limits = nfs_server::nlm::NlmLimits {
        max_hosts: args.nlm_max_hosts,
        max_locks_per_host: args.nlm_max_locks_per_host,
        blocked: nfs_server::nlm::BlockedLimits {
            max_total: args.nlm_max_blocked,
            max_per_host: args.nlm_max_blocked_per_host,
        },
    };
    config.state_dir = Some(
        args.state_dir
            .clone()
            .unwrap_or_else(nfs_server::StateDir::default_path),
    );
    config.grace_time = std::time::Duration::from_secs(args.grace_time);
    config.sm_notify_port = args.sm_notify_port;
    config.nsm_name = args.nsm_name.clone();
    if !args.data_servers.is_empty() {
        config.mds = Some(mds_config(&args)?);
    }
    let server = nfs_server::start(config)
        .await
        .with_context(|| format!("serving {}", describe(&args)))?;
    if let Some(addr) = args.metrics {
        super::metrics::serve(addr, server.conn_limiter())?;
    }

    let mut listening = Vec::new();
    if tcp {
        listening.push(format!("nfs over tcp {}", server.nfs_addr()));
    }
    listening.push(format!(
        "mount over tcp {}",
        server.mount_addr().unwrap_or(server.nfs_addr())
    ));
    if let Some(a) = server.rpcbind_addr() {
        listening.push(format!("rpcbind {a}"));
    }
    if let Some(a) = args.metrics {
        listening.push(format!("metrics http://{a}/metrics"));
    }
    let rdma = if args.transports.contains(&Transport::Rdma) {
        let addr = SocketAddr::new(args.addr, args.rdma_port);
        let (rdma_addr, task) =
            match crate::device::choose(&args.rdma_device, Some(args.addr), seed())? {
                crate::device::Chosen::Soft => {
                    let device = softrnic::SoftDevice::new(
                        softrnic::SoftConfig {
                            crc: args.rdma_crc,
                            max_handshakes_per_client: args.max_handshakes_per_client,
                            ..softrnic::SoftConfig::default()
                        },
                        seed(),
                    );
                    rdma_listen(&device, addr, &args, &server).await?
                }
                crate::device::Chosen::Verbs(device) => {
                    rdma_listen(&device, addr, &args, &server).await?
                }
            };
        listening.push(format!("nfs over rdma {rdma_addr}"));
        Some((rdma_addr, task))
    } else {
        None
    };
    let paths: Vec<String> = server
        .exports()
        .exports()
        .iter()
        .map(|e| e.path().display().to_string())
        .collect();
    println!("serving {}: {}", paths.join(" "), listening.join(", "));
    // Listeners retry failed accepts; one ending is an error the server
    // cannot recover from, reported with the listener's name and address.
    let rdma_done = async {
        match rdma {
            Some((addr, task)) => {
                let why = match task.await {
                    Ok(Ok(())) => "stopped".to_string(),
                    Ok(Err(e)) => e.to_string(),
                    Err(e) => e.to_string(),
                };
                Err(anyhow::anyhow!(
                    "NFS over RDMA listener on {addr} ended: {why}"
                ))
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = server.wait() => r.map_err(anyhow::Error::from),
        r = rdma_done => r,
        _ = tokio::signal::ctrl_c() => {
            tracing::info!("interrupted, stopping");
            Ok(())
        }
    }
}

/// Listens for RPC-over-RDMA on `device` and serves it in a task.
async fn rdma_listen<D: rnic::Device<Addr = SocketAddr>>(
    device: &D,
    addr: SocketAddr,
    args: &ServeArgs,
    server: &nfs_server::RunningServer,
) -> anyhow::Result<(
    SocketAddr,
    tokio::task::JoinHandle<Result<(), rnic::CmError>>,
)> {
    let rdma_config = rpcrdma::transport::RdmaServerConfig {
        credits: args.rdma_credits.max(1),
        inline_size: args.rdma_inline_size,
        backchannel_credits: args.rdma_backchannel_credits,
        read_bytes_per_conn: args.rdma_read_bytes_per_conn,
        read_timeout: std::time::Duration::from_millis(args.rdma_read_timeout_ms),
        ..rpcrdma::transport::RdmaServerConfig::default()
    };
    let table = std::sync::Arc::clone(server.exports());
    let listener = rpcrdma::transport::RdmaListener::bind(device, &addr, server.rpc(), rdma_config)
        .await
        .with_context(|| format!("listening for RPC-over-RDMA on {addr}"))?
        .with_conn_limiter(server.conn_limiter())
        // A client no export lists is refused at connection time.
        .with_accept_filter(move |peer| peer.is_some_and(|a| table.any_allows(a.ip())));
    if args.rdma_backchannel_credits > 0 {
        // NFSv4.1 callbacks go on the client's RDMA connection
        // (draft-ietf-nfsv4-rpcrdma-bidirection-01 §1.4.2); connection
        // ids are numbered per transport, so only RDMA calls match.
        let backchannels = listener.backchannels();
        server.v4_backchannels().set(nfs_server::v4::backchannel_fn(
            move |p: &oncrpc::PeerInfo| match p.transport {
                oncrpc::TransportKind::Rdma => backchannels.get(p.conn_id),
                _ => None,
            },
        ));
    }
    Ok((listener.local_addr(), listener.spawn()))
}

/// Raises the soft RLIMIT_NOFILE to the hard limit (each connection is a
/// descriptor; a low soft limit such as 1024 makes the server refuse
/// clients long before its own caps), or sets both to `exact`.
fn set_open_file_limit(exact: Option<u64>) -> anyhow::Result<()> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).context("reading RLIMIT_NOFILE")?;
    let (new_soft, new_hard) = match exact {
        Some(n) => (n.min(hard), hard),
        None => (hard, hard),
    };
    if (new_soft, new_hard) != (soft, hard) {
        setrlimit(Resource::RLIMIT_NOFILE, new_soft, new_hard)
            .with_context(|| format!("setting RLIMIT_NOFILE to {new_soft}"))?;
    }
    tracing::info!(
        soft = new_soft,
        hard = new_hard,
        was = soft,
        "open file limit (RLIMIT_NOFILE)"
    );
    Ok(())
}

fn describe(args: &ServeArgs) -> String {
    match (&args.exports, &args.dir) {
        (Some(f), _) => format!("the exports of {}", f.display()),
        (None, Some(d)) => d.display().to_string(),
        (None, None) => String::new(),
    }
}

/// The exports and client lists from `--exports` or DIR and `--allow`.
fn access_config(args: &ServeArgs) -> anyhow::Result<nfs_server::ServerConfig> {
    use nfs_server::exports::{self, ClientRule, ExportOptions, Exports, Squash};
    if let Some(file) = &args.exports {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let mut table = exports::parse(&text).with_context(|| format!("in {}", file.display()))?;
        anyhow::ensure!(
            !table.entries.is_empty(),
            "{} exports nothing",
            file.display()
        );
        table.resolve_hosts();
        let mut config = nfs_server::ServerConfig::new(&table.entries[0].path);
        config.exports = table.entries;
        return Ok(config);
    }
    let dir = args.dir.clone().context("no directory to export")?;
    let mut config = nfs_server::ServerConfig::new(&dir);
    let mut options = ExportOptions::read_write();
    if args.no_root_squash {
        options.squash = Squash::None;
    }
    if !args.allow.is_empty() {
        let mut clients = Vec::new();
        for spec in &args.allow {
            let spec = exports::parse_client(spec).with_context(|| format!("--allow {spec}"))?;
            clients.push(ClientRule {
                spec,
                options: options.clone(),
            });
        }
        let mut t = Exports {
            entries: vec![exports::ExportEntry {
                path: dir.clone(),
                clients,
            }],
        };
        t.resolve_hosts();
        config.clients = t.entries.remove(0).clients;
    } else {
        config.clients = nfs_server::access::loopback_clients(&options);
    }
    Ok(config)
}

/// A seed for STag keys that differs between runs, so a stale remote key
/// from an earlier server instance is not valid in this one.
fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ u64::from(std::process::id()).rotate_left(32)
}

#[cfg(test)]
mod tests {
    use clap::{Args, FromArgMatches};

    use super::*;

    /// `serve` parsed from `line` (the command line after `serve`).
    fn serve(line: &[&str]) -> ServeArgs {
        let argv = std::iter::once("serve").chain(line.iter().copied());
        let m = ServeArgs::augment_args(clap::Command::new("serve"))
            .try_get_matches_from(argv)
            .unwrap();
        ServeArgs::from_arg_matches(&m).unwrap()
    }

    #[test]
    fn mds_options_set_the_fence_wait_and_the_control_timeout() {
        let ds = ["/x", "--data-server", "nfs://127.0.0.1:3049/ds"];
        let mds = mds_config(&serve(&ds)).unwrap();
        assert_eq!(mds.fence_wait, nfs_server::v4::pnfs::DEFAULT_FENCE_WAIT);
        assert_eq!(
            mds.control_timeout,
            nfs_server::v4::pnfs::DEFAULT_CONTROL_TIMEOUT
        );
        assert_eq!(
            (mds.fence_wait, mds.control_timeout),
            (Duration::from_secs(5), Duration::from_secs(60))
        );
        let with = |extra: [&'static str; 4]| {
            let mut line = ds.to_vec();
            line.extend(extra);
            mds_config(&serve(&line)).unwrap()
        };
        let mds = with(["--mds-fence-wait", "2", "--mds-control-timeout", "15"]);
        assert_eq!(mds.fence_wait, Duration::from_secs(2));
        assert_eq!(mds.control_timeout, Duration::from_secs(15));
        // Zero would let no fencing or no call finish: one second at least.
        let mds = with(["--mds-fence-wait", "0", "--mds-control-timeout", "0"]);
        assert_eq!(
            (mds.fence_wait, mds.control_timeout),
            (Duration::from_secs(1), Duration::from_secs(1))
        );
    }
}
