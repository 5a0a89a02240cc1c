//! NFSv4.1 client (RFC 8881) over any ONC RPC transport: a [`Session`]
//! (EXCHANGE_ID with SP4_NONE, CREATE_SESSION with or without a back
//! channel on its connection ([`Session::establish_with_callbacks`] and
//! the callback program of [`Delegations`]),
//! SEQUENCE over a slot table, RECLAIM_COMPLETE, and DESTROY_SESSION plus
//! DESTROY_CLIENTID on [`Session::close`]) and the file operations a
//! program needs: path resolution, GETATTR, READDIR, OPEN/CLOSE, READ,
//! WRITE (UNSTABLE + COMMIT), CREATE of a directory, REMOVE and RENAME.
//!
//! [`Session::with_credential`] gives a view of the session whose calls
//! carry another AUTH_SYS credential (a multi-user mount), and
//! [`Session::renew`] sends the SEQUENCE that keeps the lease when idle.
//! The operations of a POSIX file system ([`SetAttrs`], ACCESS, LINK,
//! READLINK, CREATE of any type, OPEN by handle) return attributes from
//! the same COMPOUND.
//!
//! READ data is DDP-eligible (ULB v2 draft §5.1): every READ COMPOUND
//! carries a [`oncrpc::ReplyHint`] naming the data's offset in the
//! results, so an RPC-over-RDMA transport moves it by Write chunk.

mod deleg;
mod error;
mod fs;
mod io;
mod posix;
mod recover;
mod session;

pub use deleg::{
    CallbackService, Delegation, Delegations, Recall, BACK_SLOTS, CB_PROGRAM, MAX_HELD,
};
pub use error::{Error, Result};
pub use fs::{component, Attrs, DirEntry, OpenFile, OpenOptions};
pub use io::Writer4;
pub use posix::{Create, FsStats, SetAttrs, OPEN4_SHARE_ACCESS_WANT_NO_DELEG};
pub use recover::{HeldOpen, Reclaim};
pub use session::{Session, SessionOptions};
