//! Mounting over RPC-over-RDMA: MOUNT over TCP (RFC 8267 §6: MOUNT is not
//! an RDMA-enabled program), then NFS over [`RdmaClient`] on any
//! [`rnic::Device`] addressed by `SocketAddr` (the software iWARP device,
//! `softrnic::SoftDevice`, in this project).
//!
//! ```no_run
//! # async fn run<D: rnic::Device<Addr = std::net::SocketAddr>>(device: D) -> nfs_client::Result<()> {
//! use nfs_client::{connect_rdma, RdmaOptions, RdmaTarget};
//! let target = RdmaTarget {
//!     host: "127.0.0.1".into(),
//!     rdma_port: None,
//!     mount_port: None,
//!     path: "/export/dir/file".into(),
//! };
//! let m = connect_rdma(&device, &target, &RdmaOptions::default()).await?;
//! let file = m.mount.resolve(&m.rest).await?;
//! let data = m.mount.read_file(&file.fh).await?;
//! # let _ = data; Ok(()) }
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use rnic::{CmError, Device};
use rpcrdma::plan::Version;
use rpcrdma::transport::{RdmaClient, RdmaClientConfig};

use crate::error::{Error, Result};
use crate::mount::IoOptions;
use crate::tcp::{
    mount_export, resolve_addr, xid_seed, Exported, MountPorts, Mounted, TcpOptions,
    DEFAULT_NFS_PORT,
};

/// The NFS/RDMA port when none is given (RFC 8267 §6, IANA `nfsrdma`).
pub const DEFAULT_RDMA_PORT: u16 = 20049;
/// The MOUNT port tried after the port mapper: the one `nfsrdma serve`
/// and Linux's `rpc.mountd -p 20048` conventionally use.
pub const DEFAULT_MOUNT_PORT: u16 = 20048;

/// Where and what to mount over RDMA: the fields of an
/// `nfs+rdma://host[:port]/path?mountport=N` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaTarget {
    /// Host name or address.
    pub host: String,
    /// NFS/RDMA port; `None` means [`DEFAULT_RDMA_PORT`].
    pub rdma_port: Option<u16>,
    /// MOUNT port over TCP; `None` asks the port mapper (port 111), then
    /// tries [`DEFAULT_MOUNT_PORT`] and the NFS/TCP port
    /// ([`DEFAULT_NFS_PORT`]).
    pub mount_port: Option<u16>,
    /// Absolute path on the server: an export, possibly followed by a
    /// path inside it.
    pub path: String,
}

/// Connection settings of an RDMA mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaOptions {
    /// Transfer settings of the mount.
    pub io: IoOptions,
    /// RPC-over-RDMA version to start with: version 2 falls back to 1
    /// when the server answers ERR_VERS
    /// (draft-ietf-nfsv4-rpcrdma-version-two §7).
    pub version: Version,
    /// Credits asked of the server (RFC 8166 §3.3); at least twice the
    /// reads or writes in flight are asked in any case.
    pub max_requests: u32,
    /// Inline send and receive size offered in the connection's private
    /// data (RFC 8797 §4), and the size of each posted receive buffer.
    /// Default [`DEFAULT_INLINE_SIZE`].
    pub inline_size: u32,
    /// Time allowed for each connection attempt (MOUNT's TCP connection
    /// and the RDMA connection's MPA exchange).
    pub connect_timeout: Duration,
    /// Offer the server Send With Invalidate in the private data
    /// (RFC 8797 §4): only when the device lets a peer invalidate its
    /// regions (softrnic does; user-space memory on a verbs NIC may not).
    pub send_with_invalidate: bool,
}

/// The inline size a mount offers (RFC 8797 §4): 8 KiB, so that a 4 KiB
/// READ's reply (4,252 bytes with its headers) comes inline in the Send
/// from a server that sends as much (`nfsrdma serve` does by default),
/// without a Write chunk to register, write and invalidate (RFC 8166
/// §3.5.1: a reply that fits the requester's receive buffers needs no
/// chunk; the Linux client likewise inlines replies below its threshold).
/// Each end sends at most the smaller of its send size and the peer's
/// receive size, so toward a server that advertises 4 KiB (Linux knfsd)
/// or none (1 KiB, RFC 8797 §5) nothing changes on the wire; only the
/// receive buffers are larger (credits x 8 KiB).
pub const DEFAULT_INLINE_SIZE: u32 = 8192;

impl Default for RdmaOptions {
    fn default() -> Self {
        let rdma = RdmaClientConfig::default();
        Self {
            io: IoOptions::default(),
            version: Version::V1,
            max_requests: rdma.max_requests,
            inline_size: DEFAULT_INLINE_SIZE,
            connect_timeout: Duration::from_secs(10),
            send_with_invalidate: rdma.send_with_invalidate_ok,
        }
    }
}

impl RdmaOptions {
    /// The options MOUNT over TCP runs with.
    fn tcp(&self) -> TcpOptions {
        TcpOptions {
            io: self.io,
            connect_timeout: self.connect_timeout,
            ..TcpOptions::default()
        }
    }

    /// The RPC-over-RDMA client settings for these options.
    pub fn client_config(&self) -> RdmaClientConfig {
        let wanted = u32::try_from(self.io.in_flight.saturating_mul(2)).unwrap_or(u32::MAX);
        RdmaClientConfig {
            max_requests: self.max_requests.max(wanted).max(1),
            inline_size: self.inline_size,
            xid_seed: xid_seed(),
            version: self.version,
            send_with_invalidate_ok: self.send_with_invalidate,
            ..RdmaClientConfig::default()
        }
    }
}

/// A mount over RPC-over-RDMA on device `D`.
pub type RdmaMount<D> = Mounted<RdmaClient<D>>;

/// Maps a connection-manager failure to the client's error: a refused
/// connection stays recognisable as [`std::io::ErrorKind::ConnectionRefused`].
fn cm_error(addr: SocketAddr, e: CmError) -> Error {
    let kind = match e {
        CmError::Refused => std::io::ErrorKind::ConnectionRefused,
        _ => std::io::ErrorKind::Other,
    };
    Error::Io(std::io::Error::new(
        kind,
        format!("RDMA connection to {addr}: {e}"),
    ))
}

/// Opens an RPC-over-RDMA connection to `host:port` on `device`.
pub async fn connect_rdma_transport<D: Device<Addr = SocketAddr>>(
    device: &D,
    host: &str,
    port: u16,
    opts: &RdmaOptions,
) -> Result<RdmaClient<D>> {
    connect_rdma_inner(device, host, port, opts, None).await
}

/// Like [`connect_rdma_transport`], answering the calls the server sends
/// on the connection's reverse direction (an NFSv4.1 back channel,
/// RFC 8167) with `callbacks`.
pub async fn connect_rdma_transport_with_callbacks<D: Device<Addr = SocketAddr>>(
    device: &D,
    host: &str,
    port: u16,
    opts: &RdmaOptions,
    callbacks: std::sync::Arc<oncrpc::Server>,
) -> Result<RdmaClient<D>> {
    connect_rdma_inner(device, host, port, opts, Some(callbacks)).await
}

/// Like [`connect_rdma_transport_with_callbacks`], and the connection is
/// made again under `policy` when it is lost (a server restart), with
/// the calls in flight sent again on the new one; a `hard` mount passes
/// a policy that never gives up. Each new connection answers the
/// server's calls with `callbacks` too.
pub async fn connect_rdma_transport_reconnecting<D: Device<Addr = SocketAddr> + Clone>(
    device: &D,
    host: &str,
    port: u16,
    opts: &RdmaOptions,
    callbacks: std::sync::Arc<oncrpc::Server>,
    policy: rpcrdma::transport::ReconnectPolicy,
) -> Result<RdmaClient<D>> {
    let addr = resolve_addr(host, port).await?;
    let config = opts.client_config();
    let fut = RdmaClient::connect_with_backchannel_and_reconnect(
        device, &addr, config, callbacks, policy,
    );
    match tokio::time::timeout(opts.connect_timeout, fut).await {
        Ok(r) => r.map_err(|e| cm_error(addr, e)),
        Err(_) => Err(Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("RDMA connection to {addr} timed out"),
        ))),
    }
}

async fn connect_rdma_inner<D: Device<Addr = SocketAddr>>(
    device: &D,
    host: &str,
    port: u16,
    opts: &RdmaOptions,
    callbacks: Option<std::sync::Arc<oncrpc::Server>>,
) -> Result<RdmaClient<D>> {
    let addr = resolve_addr(host, port).await?;
    let config = opts.client_config();
    let fut = async {
        match callbacks {
            Some(cb) => RdmaClient::connect_with_backchannel(device, &addr, config, cb).await,
            None => RdmaClient::connect(device, &addr, config).await,
        }
    };
    match tokio::time::timeout(opts.connect_timeout, fut).await {
        Ok(r) => r.map_err(|e| cm_error(addr, e)),
        Err(_) => Err(Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("RDMA connection to {addr} timed out"),
        ))),
    }
}

/// Where MOUNT is looked for when NFS runs over RDMA.
fn mount_ports(target: &RdmaTarget) -> MountPorts {
    MountPorts {
        explicit: target.mount_port,
        first: None,
        fallback: vec![DEFAULT_MOUNT_PORT, DEFAULT_NFS_PORT],
    }
}

/// Mounts `target` over RPC-over-RDMA: MOUNT over TCP with the same port
/// search and export choice as [`crate::connect_tcp`], then NFS over an
/// [`RdmaClient`] on `device` to `host:rdma_port`, and FSINFO.
pub async fn connect_rdma<D: Device<Addr = SocketAddr>>(
    device: &D,
    target: &RdmaTarget,
    opts: &RdmaOptions,
) -> Result<RdmaMount<D>> {
    let (exported, rpc) = mount_and_connect_rdma(device, target, opts).await?;
    exported.attach(rpc, opts.io).await
}

/// MOUNT over TCP, then the RPC-over-RDMA connection: the parts
/// [`connect_rdma`] and [`connect_rdma_gss`] attach.
async fn mount_and_connect_rdma<D: Device<Addr = SocketAddr>>(
    device: &D,
    target: &RdmaTarget,
    opts: &RdmaOptions,
) -> Result<(Exported, RdmaClient<D>)> {
    let exported = mount_export(
        &target.host,
        &target.path,
        &mount_ports(target),
        &opts.tcp(),
    )
    .await?;
    let port = target.rdma_port.unwrap_or(DEFAULT_RDMA_PORT);
    let rpc = connect_rdma_transport(device, &target.host, port, opts).await?;
    Ok((exported, rpc))
}

/// [`connect_rdma`] with RPCSEC_GSS: MOUNT over TCP with AUTH_SYS (as
/// `mount.nfs` asks `rpc.mountd`), then a context for `target_name`
/// (`nfs@host`) created with `initiator` on the RDMA connection, and every
/// NFS call under it. With integrity or privacy no data item is placed
/// directly (RFC 8166 §9.2.2; see `RdmaClient::call_signed`).
pub async fn connect_rdma_gss<D: Device<Addr = SocketAddr>>(
    device: &D,
    target: &RdmaTarget,
    opts: &RdmaOptions,
    initiator: &dyn oncrpc::gss::Initiator,
    target_name: &str,
    service: oncrpc::gss::GssService,
) -> Result<Mounted<oncrpc::gss::GssClient<RdmaClient<D>>>> {
    let (exported, rpc) = mount_and_connect_rdma(device, target, opts).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_is_searched_on_the_explicit_port_alone() {
        let t = RdmaTarget {
            host: "h".into(),
            rdma_port: Some(1),
            mount_port: Some(7),
            path: "/x".into(),
        };
        let p = mount_ports(&t);
        assert_eq!(p.explicit, Some(7));
        assert_eq!(p.first, None);
    }

    #[test]
    fn mount_falls_back_to_mountd_then_nfs_ports() {
        let t = RdmaTarget {
            host: "h".into(),
            rdma_port: None,
            mount_port: None,
            path: "/x".into(),
        };
        let p = mount_ports(&t);
        assert_eq!(p.explicit, None);
        assert_eq!(p.fallback, vec![20048, 2049]);
    }

    #[test]
    fn credits_cover_twice_the_reads_in_flight() {
        let opts = RdmaOptions {
            io: IoOptions {
                in_flight: 100,
                ..IoOptions::default()
            },
            max_requests: 8,
            ..RdmaOptions::default()
        };
        assert_eq!(opts.client_config().max_requests, 200);
        let opts = RdmaOptions {
            version: Version::V2,
            ..RdmaOptions::default()
        };
        let c = opts.client_config();
        assert_eq!(c.version, Version::V2);
        assert_eq!(c.max_requests, 128);
    }

    #[test]
    fn refused_rdma_connections_keep_their_kind() {
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        match cm_error(addr, CmError::Refused) {
            Error::Io(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused),
            e => panic!("{e:?}"),
        }
        match cm_error(addr, CmError::Setup("x".into())) {
            Error::Io(e) => assert!(e.to_string().contains("127.0.0.1:1")),
            e => panic!("{e:?}"),
        }
    }

    /// Serves a fresh directory: NFS and MOUNT over TCP on one ephemeral
    /// port, NFS over RPC-over-RDMA on softrnic on another.
    async fn serve(dir: &std::path::Path, crc: bool) -> (u16, u16) {
        let mut cfg = nfs_server::ServerConfig::new(dir);
        // The tests run as root and act as the export's owner.
        cfg.set_squash(nfs_server::exports::Squash::None);
        cfg.nfs_addr = "127.0.0.1:0".parse().unwrap();
        cfg.mount_addr = None;
        let srv = nfs_server::start(cfg).await.unwrap();
        let device = softrnic::SoftDevice::new(
            softrnic::SoftConfig {
                crc,
                ..softrnic::SoftConfig::default()
            },
            3,
        );
        let listener = rpcrdma::transport::RdmaListener::bind(
            &device,
            &"127.0.0.1:0".parse().unwrap(),
            srv.rpc(),
            rpcrdma::transport::RdmaServerConfig::default(),
        )
        .await
        .unwrap();
        let rdma_port = listener.local_addr().port();
        let tcp_port = srv.nfs_addr().port();
        listener.spawn();
        tokio::spawn(srv.wait());
        (tcp_port, rdma_port)
    }

    async fn round_trip(tag: &str, crc: bool, version: Version) {
        let dir =
            std::env::temp_dir().join(format!("nfs-client-rdma-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let dir = std::fs::canonicalize(&dir).unwrap();
        let (tcp_port, rdma_port) = serve(&dir, crc).await;
        let target = RdmaTarget {
            host: "127.0.0.1".into(),
            rdma_port: Some(rdma_port),
            mount_port: Some(tcp_port),
            path: format!("{}/sub", dir.display()),
        };
        let opts = RdmaOptions {
            io: IoOptions {
                in_flight: 4,
                block_size: Some(64 * 1024),
                ..IoOptions::default()
            },
            version,
            ..RdmaOptions::default()
        };
        let device = softrnic::SoftDevice::new(
            softrnic::SoftConfig {
                crc,
                ..softrnic::SoftConfig::default()
            },
            9,
        );
        let m = connect_rdma(&device, &target, &opts).await.unwrap();
        assert_eq!(m.export, dir.to_str().unwrap());
        assert_eq!(m.rest, "sub");
        let sub = m.mount.resolve(&m.rest).await.unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 253) as u8).collect();
        let fh = m.mount.create_file(&sub.fh, "f.bin", 0o644).await.unwrap();
        let mut w = m.mount.writer(&fh, 0);
        w.write(bytes::Bytes::from(data.clone())).await.unwrap();
        w.finish().await.unwrap();
        assert!(std::fs::read(dir.join("sub/f.bin")).unwrap() == data);
        assert!(m.mount.read_file(&fh).await.unwrap() == data);
        let rpc = m.mount.client().transport();
        assert_eq!(rpc.version(), version);
        let s = rpc.stats();
        assert!(s.write_chunk_replies >= 5, "{s:?}");
        assert!(s.read_chunk_calls >= 5, "{s:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn file_round_trips_over_softrnic_v1() {
        round_trip("v1", false, Version::V1).await;
    }

    #[tokio::test]
    async fn file_round_trips_over_softrnic_v2_with_crc() {
        round_trip("v2", true, Version::V2).await;
    }

    #[tokio::test]
    async fn refuses_when_nothing_listens_for_rdma() {
        let dir = std::env::temp_dir().join(format!("nfs-client-rdma-none-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let dir = std::fs::canonicalize(&dir).unwrap();
        let (tcp_port, _) = serve(&dir, false).await;
        // A port that was just free: bound, read, released.
        let free = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let target = RdmaTarget {
            host: "127.0.0.1".into(),
            rdma_port: Some(free),
            mount_port: Some(tcp_port),
            path: dir.to_str().unwrap().into(),
        };
        let device = softrnic::SoftDevice::new(softrnic::SoftConfig::default(), 1);
        match connect_rdma(&device, &target, &RdmaOptions::default()).await {
            Err(Error::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused),
            r => panic!("{:?}", r.map(|m| m.export)),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
