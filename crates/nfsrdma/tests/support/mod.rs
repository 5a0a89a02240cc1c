//! Shared by the `nfsrdma` integration tests: a temporary directory and the
//! project's NFS server started in the test process on 127.0.0.1, over TCP
//! and over RPC-over-RDMA on the software iWARP device.
// Each test file uses part of this module.
#![allow(dead_code)]

pub(crate) mod fuse;
pub(crate) mod serve;

use std::path::{Path, PathBuf};

/// A fresh directory under the system's temporary directory, removed on
/// drop. The path is canonical (no symlinks), as MOUNT paths must be.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!("nfsrdma-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(std::fs::canonicalize(&p).unwrap())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The project's server on ephemeral ports, alive as long as this value:
/// NFS and MOUNT over TCP on `port`, NFS over RPC-over-RDMA on `rdma_port`.
pub(crate) struct Server {
    _rt: tokio::runtime::Runtime,
    pub(crate) port: u16,
    pub(crate) rdma_port: u16,
    pub(crate) export: TempDir,
}

impl Server {
    pub(crate) fn start(tag: &str) -> Self {
        Self::start_with(tag, false)
    }

    /// `rdma_crc`: the RDMA listener requires MPA CRC32c.
    pub(crate) fn start_with(tag: &str, rdma_crc: bool) -> Self {
        Self::start_config(tag, rdma_crc, |_| {})
    }

    /// Like [`Server::start_with`], with `tweak` applied to the
    /// configuration before the server starts.
    pub(crate) fn start_config(
        tag: &str,
        rdma_crc: bool,
        tweak: impl FnOnce(&mut nfs_server::ServerConfig),
    ) -> Self {
        let export = TempDir::new(tag);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let mut cfg = nfs_server::ServerConfig::new(&export.0);
        // The tests run as root and act as the export's owner.
        cfg.set_squash(nfs_server::exports::Squash::None);
        cfg.nfs_addr = "127.0.0.1:0".parse().unwrap();
        cfg.mount_addr = None;
        tweak(&mut cfg);
        let srv = rt.block_on(nfs_server::start(cfg)).unwrap();
        let port = srv.nfs_addr().port();
        let rdma_port = rt.block_on(async {
            let device = softrnic::SoftDevice::new(
                softrnic::SoftConfig {
                    crc: rdma_crc,
                    ..softrnic::SoftConfig::default()
                },
                u64::from(std::process::id()),
            );
            // NFSv4.1 callbacks on the client's RDMA connection, as
            // `nfsrdma serve` has them by default (8 credits).
            let config = rpcrdma::transport::RdmaServerConfig {
                backchannel_credits: 8,
                ..rpcrdma::transport::RdmaServerConfig::default()
            };
            let listener = rpcrdma::transport::RdmaListener::bind(
                &device,
                &"127.0.0.1:0".parse().unwrap(),
                srv.rpc(),
                config,
            )
            .await
            .unwrap();
            let backchannels = listener.backchannels();
            srv.v4_backchannels().set(nfs_server::v4::backchannel_fn(
                move |p: &oncrpc::PeerInfo| match p.transport {
                    oncrpc::TransportKind::Rdma => backchannels.get(p.conn_id),
                    _ => None,
                },
            ));
            let p = listener.local_addr().port();
            listener.spawn();
            p
        });
        rt.spawn(srv.wait());
        Self {
            _rt: rt,
            port,
            rdma_port,
            export,
        }
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.export.0
    }
}
