//! Mounting over TCP: finding the MOUNT port, choosing the export for a
//! path, and opening the NFS connection on oncrpc's [`TcpClient`].

use std::net::SocketAddr;
use std::time::Duration;

use nfs::mount::{MOUNT_PROGRAM, MOUNT_V3};
use oncrpc::client::ClientConfig;
use oncrpc::tcp::{ClientTls, ReconnectPolicy, TcpClient, TcpConfig};
use oncrpc::RpcError;

use crate::client::{process_auth_sys, Nfs3Client};
use crate::error::{Error, Result};
use crate::mount::{IoOptions, Mount};
use crate::mountproto::{
    best_export, export_candidates, getport, path_below, MountClient, PMAP_PORT,
};
use crate::nconnect::{check_nconnect, Nconnect};

/// The NFS port when none is given (RFC 1813 §3, IANA `nfs`).
pub const DEFAULT_NFS_PORT: u16 = 2049;
/// MOUNT paths tried when the server lists no matching export.
const MAX_EXPORT_TRIES: usize = 16;

/// Where and what to mount: the fields of an
/// `nfs://host[:port]/path?mountport=N&nfsport=N` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpTarget {
    /// Host name or address.
    pub host: String,
    /// NFS port; `None` means [`DEFAULT_NFS_PORT`].
    pub nfs_port: Option<u16>,
    /// MOUNT port; `None` asks the port mapper (port 111), and failing
    /// that tries the NFS port.
    pub mount_port: Option<u16>,
    /// Absolute path on the server: an export, possibly followed by a
    /// path inside it.
    pub path: String,
}

/// Connection settings.
#[derive(Debug, Clone)]
pub struct TcpOptions {
    /// Transfer settings of the mount.
    pub io: IoOptions,
    /// Reconnection after a lost connection; calls in flight are resent
    /// with their XIDs.
    pub reconnect: ReconnectPolicy,
    /// Time allowed for each connection attempt.
    pub connect_timeout: Duration,
    /// RPC-over-TLS (RFC 9289) for the NFS connection: probe, handshake,
    /// and never plain RPC. MOUNT and the port mapper stay plain, as
    /// Linux's `mount.nfs` talks to `rpc.mountd`: the handle MNT returns
    /// is only usable on an NFS connection an export's `xprtsec=` admits.
    pub tls: Option<ClientTls>,
    /// NFS connections to open (`nconnect=N`, 1 to
    /// [`crate::MAX_NCONNECT`]): calls go to each in turn
    /// ([`Nconnect`]). MOUNT uses one connection of its own, as ever.
    pub nconnect: usize,
}

impl Default for TcpOptions {
    fn default() -> Self {
        Self {
            io: IoOptions::default(),
            reconnect: ReconnectPolicy {
                max_attempts: 10,
                delay: Duration::from_millis(200),
            },
            connect_timeout: Duration::from_secs(10),
            tls: None,
            nconnect: 1,
        }
    }
}

/// A mounted export over transport `T`, with the export chosen and the
/// path below it ([`connect_tcp`], [`crate::connect_rdma`]).
#[derive(Debug)]
pub struct Mounted<T> {
    /// The mounted export.
    pub mount: Mount<T>,
    /// The export path that was mounted.
    pub export: String,
    /// The target path relative to the export (empty for its root).
    pub rest: String,
}

/// The NFS transport of a mount over TCP: its `nconnect` connections.
pub type TcpConns = Nconnect<TcpClient>;

/// A mount over TCP.
pub type TcpMount = Mounted<TcpConns>;

/// The result of MOUNT over TCP, before the NFS transport is opened:
/// what every transport's connect shares ([`mount_export`]).
#[derive(Debug, Clone)]
pub(crate) struct Exported {
    /// The export path that was mounted.
    pub(crate) export: String,
    /// The MNT reply (root handle and flavors).
    pub(crate) ok: nfs::mount::Mountres3Ok,
    /// The AUTH_SYS credential used for MOUNT, and then for NFS.
    pub(crate) cred: oncrpc::msg::OpaqueAuth,
    /// The target path relative to the export.
    pub(crate) rest: String,
}

impl Exported {
    /// Opens the mount over `rpc`: FSINFO on the export's root.
    pub(crate) async fn attach<T: oncrpc::ClientTransport>(
        self,
        rpc: T,
        io: IoOptions,
    ) -> Result<Mounted<T>> {
        let mount = Mount::new(Nfs3Client::new(rpc, self.cred), self.ok.fhandle, io).await?;
        Ok(Mounted {
            mount,
            export: self.export,
            rest: self.rest,
        })
    }
}

/// Where MOUNT is looked for over TCP, in order: `explicit` alone when
/// given; else `first`, the port mapper's answer, then each of `fallback`.
#[derive(Debug, Clone, Default)]
pub(crate) struct MountPorts {
    pub(crate) explicit: Option<u16>,
    pub(crate) first: Option<u16>,
    pub(crate) fallback: Vec<u16>,
}

pub(crate) fn xid_seed() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32).rotate_left(16))
        .unwrap_or(0);
    nanos ^ std::process::id().rotate_left(8)
}

pub(crate) async fn resolve_addr(host: &str, port: u16) -> Result<SocketAddr> {
    let mut addrs = tokio::net::lookup_host((host, port)).await?;
    addrs.next().ok_or_else(|| {
        Error::Io(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{host}: no address"),
        ))
    })
}

async fn connect(
    addr: SocketAddr,
    opts: &TcpOptions,
    in_flight: usize,
    reconnect: ReconnectPolicy,
    tls: Option<&ClientTls>,
) -> Result<TcpClient> {
    let config = ClientConfig {
        max_in_flight: in_flight.max(16),
        ..ClientConfig::default()
    };
    let tcp = TcpConfig::default();
    let fut = async {
        match tls {
            Some(tls) => {
                let tls = tls.clone();
                TcpClient::connect_tls(addr, xid_seed(), config, tcp, reconnect, tls).await
            }
            None => TcpClient::connect_with(addr, xid_seed(), config, tcp, reconnect).await,
        }
    };
    match tokio::time::timeout(opts.connect_timeout, fut).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("connecting to {addr} timed out"),
        ))),
    }
}

/// Asks the port mapper on `host` (RFC 1833 §3) for the MOUNT port.
async fn pmap_mount_port(host: &str, opts: &TcpOptions) -> Result<Option<u16>> {
    let addr = resolve_addr(host, PMAP_PORT).await?;
    let rpc = connect(addr, opts, 1, ReconnectPolicy::default(), None).await?;
    getport(&rpc, MOUNT_PROGRAM, MOUNT_V3).await
}

/// The export holding `path` on `host`, and `path` below it, asked of
/// MOUNT over TCP (on `mount_port`, else found as [`connect_tcp`] finds
/// it: the port mapper, `nfs_port`, 2049, 20048): for an NFSv4 client of
/// a server whose root is an export rather than a pseudo file system.
pub async fn find_export(
    host: &str,
    mount_port: Option<u16>,
    nfs_port: Option<u16>,
    path: &str,
) -> Result<(String, String)> {
    let ports = MountPorts {
        explicit: mount_port,
        first: nfs_port,
        fallback: vec![DEFAULT_NFS_PORT, crate::rdma::DEFAULT_MOUNT_PORT],
    };
    let e = mount_export(host, path, &ports, &TcpOptions::default()).await?;
    Ok((e.export, e.rest))
}

/// Whether a failed MOUNT attempt on one port says to try another: no
/// connection, or no MOUNT program behind it.
fn try_next_port(e: &Error) -> bool {
    matches!(
        e,
        Error::Io(_)
            | Error::Rpc(
                RpcError::ProgUnavail | RpcError::ProgMismatch { .. } | RpcError::ConnectionClosed
            )
    )
}

/// Finds the export for `path` on `mnt` and mounts it: the longest
/// exported prefix from the EXPORT list, else each component prefix from
/// the longest down. Returns the export and its MNT reply.
async fn mount_best<T: oncrpc::ClientTransport>(
    mnt: &MountClient<T>,
    path: &str,
) -> Result<(String, nfs::mount::Mountres3Ok)> {
    if let Ok(ex) = mnt.export().await {
        if let Some(e) = best_export(path, ex.0.iter().map(|n| &n.dir.0[..])) {
            if let Ok(ok) = mnt.mnt(&e).await {
                return Ok((e, ok));
            }
        }
    }
    let mut last = None;
    for cand in export_candidates(path, MAX_EXPORT_TRIES) {
        match mnt.mnt(&cand).await {
            Ok(ok) => return Ok((cand, ok)),
            Err(e @ Error::Mount { .. }) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or(Error::InvalidName(path.to_owned())))
}

/// Finds the MOUNT service of `host` over TCP (RFC 1813 §5: MOUNT is a
/// TCP/UDP program even when NFS runs over RDMA, RFC 8267 §6) on the
/// ports of `ports`, and mounts the export holding `path` with AUTH_SYS
/// ([`process_auth_sys`]).
pub(crate) async fn mount_export(
    host: &str,
    path: &str,
    ports: &MountPorts,
    opts: &TcpOptions,
) -> Result<Exported> {
    let cred = process_auth_sys().to_opaque_auth();
    let try_port = |port: u16| {
        let cred = cred.clone();
        async move {
            let addr = resolve_addr(host, port).await?;
            let rpc = connect(addr, opts, 1, ReconnectPolicy::default(), None).await?;
            mount_best(&MountClient::new(rpc, cred), path).await
        }
    };
    let mut tried = Vec::new();
    let mut last_err = None;
    let mut mounted = None;
    let mut stage = 0;
    while mounted.is_none() && stage < 2 + ports.fallback.len() {
        let port = match stage {
            0 => ports.explicit.or(ports.first),
            1 if ports.explicit.is_none() => match pmap_mount_port(host, opts).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::debug!(error = %e, "port mapper lookup failed");
                    None
                }
            },
            n if ports.explicit.is_none() => n
                .checked_sub(2)
                .and_then(|i| ports.fallback.get(i))
                .copied(),
            _ => None,
        };
        stage += 1;
        let Some(port) = port.filter(|p| !tried.contains(p)) else {
            continue;
        };
        tried.push(port);
        match try_port(port).await {
            Ok(m) => mounted = Some(m),
            Err(e) => {
                let next = try_next_port(&e);
                last_err = Some(e);
                if !next {
                    break;
                }
            }
        }
    }
    let Some((export, ok)) = mounted else {
        return Err(last_err.unwrap_or(Error::NotRegistered {
            prog: MOUNT_PROGRAM,
            vers: MOUNT_V3,
        }));
    };
    let rest = path_below(path, &export);
    Ok(Exported {
        export,
        ok,
        cred,
        rest,
    })
}

/// Opens an NFS connection over TCP to `host:port`, sized for `io`,
/// over TLS when `opts.tls` says so.
pub(crate) async fn connect_nfs_tcp(host: &str, port: u16, opts: &TcpOptions) -> Result<TcpClient> {
    let addr = resolve_addr(host, port).await?;
    connect(
        addr,
        opts,
        opts.io.in_flight.saturating_mul(2),
        opts.reconnect,
        opts.tls.as_ref(),
    )
    .await
}

/// Mounts `target` over TCP: finds the MOUNT service, mounts the export
/// holding `target.path` with AUTH_SYS ([`process_auth_sys`]), connects
/// to NFS and reads FSINFO.
///
/// With `opts.nconnect` above 1 it opens that many NFS connections, all
/// before the mount is used, and spreads the calls over them
/// ([`Nconnect`]).
pub async fn connect_tcp(target: &TcpTarget, opts: &TcpOptions) -> Result<TcpMount> {
    let n = check_nconnect(opts.nconnect).map_err(|e| Error::Options(e.to_string()))?;
    let (exported, first) = mount_and_connect_tcp(target, opts).await?;
    let mut conns = vec![first];
    let port = target.nfs_port.unwrap_or(DEFAULT_NFS_PORT);
    while conns.len() < n {
        conns.push(connect_nfs_tcp(&target.host, port, opts).await?);
    }
    let rpc = Nconnect::new(conns).map_err(|e| Error::Options(e.to_string()))?;
    exported.attach(rpc, opts.io).await
}

/// MOUNT of the export holding `target.path`, then the NFS connection:
/// the parts [`connect_tcp`] and [`connect_tcp_gss`] attach.
async fn mount_and_connect_tcp(
    target: &TcpTarget,
    opts: &TcpOptions,
) -> Result<(Exported, TcpClient)> {
    let nfs_port = target.nfs_port.unwrap_or(DEFAULT_NFS_PORT);
    // The MOUNT port: the explicit one alone; else, when the NFS port was
    // given, that port first (user-space servers, this project's
    // included, serve MOUNT there); then the port mapper's answer; then
    // the NFS port.
    let ports = MountPorts {
        explicit: target.mount_port,
        first: target.nfs_port,
        fallback: vec![nfs_port],
    };
    let exported = mount_export(&target.host, &target.path, &ports, opts).await?;
    let rpc = connect_nfs_tcp(&target.host, nfs_port, opts).await?;
    Ok((exported, rpc))
}

/// [`connect_tcp`] with RPCSEC_GSS (RFC 2203) on the NFS connection: a
/// context for `target_name` (`nfs@host`) from `initiator` (Kerberos:
/// `gss::Krb5Initiator`, the caller's credential cache), every NFS call
/// protected with `service`. MOUNT is asked with AUTH_SYS, as Linux's
/// `mount.nfs` asks `rpc.mountd`; the export's `sec=` then decides.
pub async fn connect_tcp_gss(
    target: &TcpTarget,
    opts: &TcpOptions,
    initiator: &dyn oncrpc::gss::Initiator,
    target_name: &str,
    service: oncrpc::gss::GssService,
) -> Result<Mounted<oncrpc::gss::GssClient<TcpClient>>> {
    if opts.nconnect != 1 {
        // One GSS context per connection is not built: refused rather
        // than quietly one connection.
        return Err(Error::Options(format!(
            "nconnect={} with RPCSEC_GSS: not supported (one connection)",
            opts.nconnect
        )));
    }
    let (exported, rpc) = mount_and_connect_tcp(target, opts).await?;
    let gss = oncrpc::gss::GssClient::establish(
        rpc,
        initiator,
        target_name,
        nfs::v3::NFS_PROGRAM,
        nfs::v3::NFS_V3,
        service,
    )
    .await?;
    exported.attach(gss, opts.io).await
}
