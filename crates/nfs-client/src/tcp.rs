//! Mounting over TCP: finding the MOUNT port, choosing the export for a
//! path, and opening the NFS connection on oncrpc's [`TcpClient`].

use std::net::SocketAddr;
use std::time::Duration;

use nfs::mount::{MOUNT_PROGRAM, MOUNT_V3};
use oncrpc::client::ClientConfig;
use oncrpc::tcp::{ReconnectPolicy, TcpClient, TcpConfig};
use oncrpc::RpcError;

use crate::client::{process_auth_sys, Nfs3Client};
use crate::error::{Error, Result};
use crate::mount::{IoOptions, Mount};
use crate::mountproto::{
    best_export, export_candidates, getport, path_below, MountClient, PMAP_PORT,
};

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpOptions {
    /// Transfer settings of the mount.
    pub io: IoOptions,
    /// Reconnection after a lost connection; calls in flight are resent
    /// with their XIDs.
    pub reconnect: ReconnectPolicy,
    /// Time allowed for each connection attempt.
    pub connect_timeout: Duration,
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
        }
    }
}

/// A mount over TCP, with the export chosen and the path below it.
#[derive(Debug)]
pub struct TcpMount {
    /// The mounted export.
    pub mount: Mount<TcpClient>,
    /// The export path that was mounted.
    pub export: String,
    /// The target path relative to the export (empty for its root).
    pub rest: String,
}

fn xid_seed() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32).rotate_left(16))
        .unwrap_or(0);
    nanos ^ std::process::id().rotate_left(8)
}

async fn resolve_addr(host: &str, port: u16) -> Result<SocketAddr> {
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
) -> Result<TcpClient> {
    let config = ClientConfig {
        max_in_flight: in_flight.max(16),
        ..ClientConfig::default()
    };
    let fut = TcpClient::connect_with(addr, xid_seed(), config, TcpConfig::default(), reconnect);
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
    let rpc = connect(addr, opts, 1, ReconnectPolicy::default()).await?;
    getport(&rpc, MOUNT_PROGRAM, MOUNT_V3).await
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

/// Mounts `target` over TCP: finds the MOUNT service, mounts the export
/// holding `target.path` with AUTH_SYS ([`process_auth_sys`]), connects
/// to NFS and reads FSINFO.
pub async fn connect_tcp(target: &TcpTarget, opts: &TcpOptions) -> Result<TcpMount> {
    let cred = process_auth_sys().to_opaque_auth();
    let nfs_port = target.nfs_port.unwrap_or(DEFAULT_NFS_PORT);
    let try_port = |port: u16| {
        let cred = cred.clone();
        async move {
            let addr = resolve_addr(&target.host, port).await?;
            let rpc = connect(addr, opts, 1, ReconnectPolicy::default()).await?;
            mount_best(&MountClient::new(rpc, cred), &target.path).await
        }
    };
    // The MOUNT port: the explicit one alone; else, when the NFS port was
    // given, that port first (user-space servers, this project's
    // included, serve MOUNT there); then the port mapper's answer; then
    // the NFS port.
    let mut tried = Vec::new();
    let mut last_err = None;
    let mut mounted = None;
    let mut stage = 0;
    while mounted.is_none() && stage < 3 {
        let port = match stage {
            0 => target.mount_port.or(target.nfs_port),
            1 if target.mount_port.is_none() => match pmap_mount_port(&target.host, opts).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::debug!(error = %e, "port mapper lookup failed");
                    None
                }
            },
            2 if target.mount_port.is_none() => Some(nfs_port),
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
    let addr = resolve_addr(&target.host, nfs_port).await?;
    let rpc = connect(
        addr,
        opts,
        opts.io.in_flight.saturating_mul(2),
        opts.reconnect,
    )
    .await?;
    let mount = Mount::new(Nfs3Client::new(rpc, cred), ok.fhandle, opts.io).await?;
    let rest = path_below(&target.path, &export);
    Ok(TcpMount {
        mount,
        export,
        rest,
    })
}
