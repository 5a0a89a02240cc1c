//! Embeddable NFSv3 client (RFC 1813) over any ONC RPC transport
//! ([`oncrpc::ClientTransport`]: TCP today, RPC-over-RDMA through the same
//! trait).
//!
//! - [`Nfs3Client`]: one typed async method per NFSv3 procedure (all 22),
//!   each returning the `resok` body or an [`Error`] (`Error::Nfs` carries
//!   the procedure and its `Nfsstat3`). Every call carries a
//!   [`oncrpc::ReplyHint`] from the NFSv3 upper-layer binding
//!   ([`client::reply_hint`]), so an RDMA transport can provision reply
//!   and Write chunks (RFC 8267 §3.2).
//! - [`mountproto`]: MOUNT v3 ([`MountClient`]) and the port mapper's
//!   GETPORT ([`mountproto::getport`]).
//! - [`Mount`]: a mounted export: FSINFO transfer sizes, path resolution
//!   ([`Mount::resolve`]), a READDIRPLUS iterator ([`ReadDirPlus`]),
//!   pipelined reads ([`Mount::read_at`], [`Mount::read_to`]) and writes
//!   ([`FileWriter`]: UNSTABLE + COMMIT with the write-verifier check).
//! - `tcp` (feature `tokio`, on by default): [`connect_tcp`] finds the
//!   MOUNT port (explicit, the port mapper, or the NFS port), chooses the
//!   export for a path, and mounts over [`oncrpc::tcp::TcpClient`], which
//!   reconnects and resends calls in flight with their XIDs.
//! - `rdma` (feature `tokio`): [`connect_rdma`] mounts the same way (MOUNT
//!   over TCP) and runs NFS over RPC-over-RDMA ([`rpcrdma`]'s
//!   `RdmaClient`, version 1 or 2) on any `rnic::Device` addressed by
//!   `SocketAddr`, such as the software iWARP device.
//! - [`v4`] (feature `tokio`): an NFSv4.1 client ([`v4::Session`]) over
//!   the same transports: sessions, path resolution, GETATTR, READDIR,
//!   OPEN/CLOSE, READ/WRITE/COMMIT, CREATE, REMOVE and RENAME.
//!
//! ```no_run
//! # async fn run() -> nfs_client::Result<()> {
//! use nfs_client::{connect_tcp, TcpOptions, TcpTarget};
//! let target = TcpTarget {
//!     host: "127.0.0.1".into(),
//!     nfs_port: None,
//!     mount_port: None,
//!     path: "/export/dir/file".into(),
//! };
//! let m = connect_tcp(&target, &TcpOptions::default()).await?;
//! let file = m.mount.resolve(&m.rest).await?;
//! let data = m.mount.read_file(&file.fh).await?;
//! # let _ = data; Ok(()) }
//! ```
#![forbid(unsafe_code)]

pub mod client;
mod error;
mod io;
pub mod mount;
pub mod mountproto;
pub mod nconnect;
#[cfg(feature = "tokio")]
mod rdma;
#[cfg(feature = "tokio")]
mod tcp;
#[cfg(feature = "tokio")]
pub mod v4;

pub use client::{filename, process_auth_sys, Nfs3Client};
pub use error::{Error, Result};
pub use io::{FileWriter, WriteStats};
pub use mount::{entry_name, IoOptions, Mount, ReadDirPlus, Resolved};
pub use mountproto::MountClient;
pub use nconnect::{Nconnect, MAX_NCONNECT};
#[cfg(feature = "tokio")]
pub use rdma::{
    connect_rdma, connect_rdma_gss, connect_rdma_transport, connect_rdma_transport_reconnecting,
    connect_rdma_transport_with_callbacks, RdmaMount, RdmaOptions, RdmaTarget, DEFAULT_INLINE_SIZE,
    DEFAULT_MOUNT_PORT, DEFAULT_RDMA_PORT,
};
#[cfg(feature = "tokio")]
pub use tcp::{
    connect_tcp, connect_tcp_gss, find_export, Mounted, TcpConns, TcpMount, TcpOptions, TcpTarget,
    DEFAULT_NFS_PORT,
};

pub use nfs;
pub use oncrpc;
pub use rpcrdma;
