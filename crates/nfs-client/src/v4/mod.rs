//! NFSv4.1 client (RFC 8881) over any ONC RPC transport: a [`Session`]
//! (EXCHANGE_ID with SP4_NONE, CREATE_SESSION without a back channel,
//! SEQUENCE over a slot table, RECLAIM_COMPLETE, and DESTROY_SESSION plus
//! DESTROY_CLIENTID on [`Session::close`]) and the file operations a
//! program needs: path resolution, GETATTR, READDIR, OPEN/CLOSE, READ,
//! WRITE (UNSTABLE + COMMIT), CREATE of a directory, REMOVE and RENAME.
//!
//! READ data is DDP-eligible (ULB v2 draft §5.1): every READ COMPOUND
//! carries a [`oncrpc::ReplyHint`] naming the data's offset in the
//! results, so an RPC-over-RDMA transport moves it by Write chunk.

mod error;
mod fs;
mod io;
mod session;

pub use error::{Error, Result};
pub use fs::{component, Attrs, DirEntry, OpenFile, OpenOptions};
pub use io::Writer4;
pub use session::{Session, SessionOptions};
