//! The NFSv4.1 client's typed error.

use nfs::v4::{Nfsstat4, Opnum4};
use oncrpc::RpcError;

/// Why an NFSv4.1 client operation failed.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operation of the COMPOUND failed with a status (RFC 8881 §15.1
    /// `nfsstat4`; RFC 8881 §16.2.3: the COMPOUND stops at the first
    /// failure).
    #[error("NFSv4 {op} failed: {status}")]
    Nfs {
        /// The operation that failed.
        op: Opnum4,
        /// The status the server returned.
        status: Nfsstat4,
    },
    /// The RPC layer failed: an RPC error reply, a timeout, or the
    /// connection is gone.
    #[error("RPC: {0}")]
    Rpc(#[from] RpcError),
    /// The COMPOUND results did not decode.
    #[error("malformed reply: {0}")]
    Decode(#[from] xdr::Error),
    /// An `fattr4` in a reply did not decode.
    #[error("malformed attributes: {0}")]
    Attr(#[from] nfs::v4::attr::AttrError),
    /// The reply is well formed but breaks the protocol (results that do
    /// not match the operations sent, a READ returning more than asked, a
    /// READDIR that makes no progress...).
    #[error("protocol violation by the server: {0}")]
    Protocol(&'static str),
    /// A path component cannot be an NFSv4 name (empty, `.`/`..`, too
    /// long, or holding `/` or NUL).
    #[error("invalid file name {0:?}")]
    InvalidName(String),
    /// The local side of a transfer failed (the sink of
    /// [`super::Session::read_to`]).
    #[error("local I/O: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// The NFSv4 status when this is an operation failure.
    pub fn nfs_status(&self) -> Option<Nfsstat4> {
        match self {
            Error::Nfs { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// True when the server said the object does not exist
    /// (`NFS4ERR_NOENT`).
    pub fn is_not_found(&self) -> bool {
        self.nfs_status() == Some(Nfsstat4::NFS4ERR_NOENT)
    }
}

/// Result of NFSv4.1 client operations.
pub type Result<T, E = Error> = core::result::Result<T, E>;
