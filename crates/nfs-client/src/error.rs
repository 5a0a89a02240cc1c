//! The client's typed error.

use nfs::mount::Mountstat3;
use nfs::v3::{Nfsproc3, Nfsstat3};
use oncrpc::RpcError;

/// Why a client operation failed.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered the NFSv3 procedure with a failure status
    /// (RFC 1813 §2.6 `nfsstat3`).
    #[error("NFS {proc} failed: {status}")]
    Nfs {
        /// The procedure that failed.
        proc: Nfsproc3,
        /// The status the server returned.
        status: Nfsstat3,
    },
    /// The server refused the MNT request (RFC 1813 Appendix I
    /// `mountstat3`).
    #[error("MOUNT of {path:?} failed: {status}")]
    Mount {
        /// The export path asked for.
        path: String,
        /// The status the server returned.
        status: Mountstat3,
    },
    /// The RPC layer failed: the reply was an RPC error, the call timed
    /// out, or the connection is gone.
    #[error("RPC: {0}")]
    Rpc(#[from] RpcError),
    /// The procedure results did not decode.
    #[error("malformed reply: {0}")]
    Decode(#[from] xdr::Error),
    /// The server's reply is well formed but breaks the protocol (a READ
    /// returning more than asked, a READDIR that makes no progress, a
    /// CREATE without a handle...).
    #[error("protocol violation by the server: {0}")]
    Protocol(&'static str),
    /// A path component cannot be an NFS file name (empty, too long, or
    /// holding `/` or NUL).
    #[error("invalid file name {0:?}")]
    InvalidName(String),
    /// The port mapper has no TCP port for the program.
    #[error("program {prog} version {vers} is not registered with the port mapper")]
    NotRegistered {
        /// Program number.
        prog: u32,
        /// Version.
        vers: u32,
    },
    /// The mount's options ask what cannot be done (`nconnect=` out of
    /// range, or with a transport that does not take it).
    #[error("mount options: {0}")]
    Options(String),
    /// A local I/O failure: connecting, or a caller's source or sink.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// The NFS status when this is an NFS failure.
    pub fn nfs_status(&self) -> Option<Nfsstat3> {
        match self {
            Error::Nfs { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// True when the server said the object does not exist
    /// (`NFS3ERR_NOENT`, or `MNT3ERR_NOENT` for MOUNT).
    pub fn is_not_found(&self) -> bool {
        match self {
            Error::Nfs { status, .. } => *status == Nfsstat3::NFS3ERR_NOENT,
            Error::Mount { status, .. } => *status == Mountstat3::MNT3ERR_NOENT,
            _ => false,
        }
    }
}

/// Result of client operations.
pub type Result<T, E = Error> = core::result::Result<T, E>;
