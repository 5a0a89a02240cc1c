//! The two `fcntl` commands of kernel file leases, `F_SETLEASE` and
//! `F_GETLEASE` (fcntl(2), Linux `fs/locks.c`), the one place of
//! nfs-server that calls the C library directly: neither rustix 1.1 nor
//! nix 0.32 wraps them. Each `unsafe` block carries a SAFETY note; both
//! calls take an int argument (or none) and read or write no memory.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// A lease's type, or the type a lease is being broken to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `F_RDLCK`: broken by an open for writing or a truncate.
    Read,
    /// `F_WRLCK`: broken by any open or a truncate.
    Write,
    /// `F_UNLCK`: no lease (or one being broken to none).
    None,
}

impl Kind {
    fn arg(self) -> libc::c_int {
        match self {
            Kind::Read => libc::F_RDLCK,
            Kind::Write => libc::F_WRLCK,
            Kind::None => libc::F_UNLCK,
        }
    }
}

/// `fcntl(fd, F_SETLEASE, kind)`: takes, changes or (with
/// [`Kind::None`]) releases the lease of `fd`'s open file description.
pub(crate) fn set(fd: BorrowedFd<'_>, kind: Kind) -> io::Result<()> {
    // SAFETY: F_SETLEASE takes an int by value and touches no memory of
    // this process; `fd` is a live descriptor borrowed for the call.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLEASE, kind.arg()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `fcntl(fd, F_GETLEASE)`: the lease `fd` holds, or while a break is
/// pending the type it is being broken to.
pub(crate) fn get(fd: BorrowedFd<'_>) -> io::Result<Kind> {
    // SAFETY: F_GETLEASE takes no argument and touches no memory of this
    // process; `fd` is a live descriptor borrowed for the call.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETLEASE) };
    match r {
        r if r < 0 => Err(io::Error::last_os_error()),
        r if r == libc::F_RDLCK => Ok(Kind::Read),
        r if r == libc::F_WRLCK => Ok(Kind::Write),
        _ => Ok(Kind::None),
    }
}
