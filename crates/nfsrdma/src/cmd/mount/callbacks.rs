//! The FUSE callbacks both NFS versions answer alike, written once over
//! the version's open-file I/O ([`OpenIo`]): WRITE (UNSTABLE, kept until
//! COMMIT: RFC 1813 §3.3.7, RFC 8881 §18.32), `close(2)` and `fsync(2)`
//! (COMMIT: RFC 1813 §3.3.21, RFC 8881 §18.3), the last release of a
//! handle; the replies; the kernel settings asked at `init`; the mapping
//! of `access(2)`'s mask onto ACCESS; no extended attributes.

use std::future::Future;
use std::time::Duration;

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, Generation, InitFlags, KernelConfig, ReplyAttr,
    ReplyEmpty, ReplyEntry, ReplyWrite, ReplyXattr,
};
use tokio::runtime::Handle;

use super::options::MountOpts;

type Res<T> = Result<T, Errno>;

/// What the shared callbacks need of an NFS version's file system: its
/// runtime, whether it may change anything, and the I/O of an open
/// file handle as its opener.
pub(crate) trait OpenIo {
    /// The runtime the callbacks run their calls on.
    fn runtime(&self) -> &Handle;
    /// `EROFS` on a read-only mount.
    fn writable(&self) -> Res<()>;
    /// An UNSTABLE WRITE of `data` at `offset` through handle `fh`.
    async fn write_handle(&self, fh: FileHandle, offset: u64, data: &[u8]) -> Res<()>;
    /// COMMIT of the writes made through handle `fh`.
    async fn commit_handle(&self, fh: FileHandle) -> Res<()>;
    /// The last close of handle `fh`.
    async fn release_handle(&self, fh: FileHandle) -> Res<()>;
}

fn run<F: Future>(fs: &impl OpenIo, f: F) -> F::Output {
    fs.runtime().block_on(f)
}

/// WRITE as the opener, UNSTABLE until COMMIT.
pub(crate) fn write(fs: &impl OpenIo, fh: FileHandle, offset: u64, data: &[u8], reply: ReplyWrite) {
    let r = run(fs, async {
        fs.writable()?;
        let n = u32::try_from(data.len()).map_err(|_| Errno::EFBIG)?;
        fs.write_handle(fh, offset, data).await?;
        Ok(n)
    });
    match r {
        Ok(n) => reply.written(n),
        Err(e) => reply.error(e),
    }
}

/// `close(2)` (FUSE flush) and `fsync(2)`: COMMIT, so that write errors
/// reach the caller (the "close" of close-to-open).
pub(crate) fn commit(fs: &impl OpenIo, fh: FileHandle, reply: ReplyEmpty) {
    reply_empty(reply, run(fs, fs.commit_handle(fh)));
}

/// The last close of a handle.
pub(crate) fn release(fs: &impl OpenIo, fh: FileHandle, reply: ReplyEmpty) {
    reply_empty(reply, run(fs, fs.release_handle(fh)));
}

/// Asks the kernel for WRITEs of up to `max_write` bytes (or its own
/// maximum) and, when the mount wants it and may write, the writeback
/// cache.
pub(crate) fn init(config: &mut KernelConfig, max_write: u32, opts: &MountOpts) {
    if let Err(max) = config.set_max_write(max_write) {
        let _ = config.set_max_write(max);
    }
    if opts.writeback_cache && !opts.read_only {
        if let Err(e) = config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE) {
            tracing::warn!("kernel lacks FUSE_WRITEBACK_CACHE ({e:?}): writes go through");
        }
    }
}

/// ACCESS bits (RFC 1813 §3.3.4; RFC 8881 §18.1 gives ACCESS4_* the
/// same values).
const READ: u32 = 0x01;
const LOOKUP: u32 = 0x02;
const MODIFY: u32 = 0x04;
const EXTEND: u32 = 0x08;
const DELETE: u32 = 0x10;
const EXECUTE: u32 = 0x20;

/// Every ACCESS bit, to ask for all at once.
pub(crate) const ACCESS_ALL: u32 = READ | LOOKUP | MODIFY | EXTEND | DELETE | EXECUTE;

/// Whether `access(2)` with `mask` is denied by the ACCESS bits
/// `granted` on an object (a directory when `dir`), mapped as Linux's
/// client does: write is any of modify, extend or (for a directory)
/// delete; execute is lookup on a directory.
pub(crate) fn access_denied(mask: AccessFlags, granted: u32, dir: bool) -> bool {
    let write = if dir {
        MODIFY | EXTEND | DELETE
    } else {
        MODIFY | EXTEND
    };
    let exec = if dir { LOOKUP } else { EXECUTE };
    (mask.contains(AccessFlags::R_OK) && granted & READ == 0)
        || (mask.contains(AccessFlags::W_OK) && granted & write == 0)
        || (mask.contains(AccessFlags::X_OK) && granted & exec == 0)
}

/// Extended attributes are not offered (NFSv3 has none; NFSv4 named
/// attributes and NFSv4.2 xattrs are not used).
pub(crate) fn no_xattrs(reply: ReplyXattr) {
    reply.error(Errno::from_i32(libc::EOPNOTSUPP));
}

/// The `fuser::Filesystem` methods both versions answer alike, for
/// their impls (over [`OpenIo`]): WRITE, flush and fsync (COMMIT),
/// release, and no extended attributes.
macro_rules! shared_file_methods {
    () => {
        /// WRITE as the opener, UNSTABLE until COMMIT.
        fn write(
            &self,
            _req: &fuser::Request,
            _ino: fuser::INodeNo,
            fh: fuser::FileHandle,
            offset: u64,
            data: &[u8],
            _write_flags: fuser::WriteFlags,
            _flags: fuser::OpenFlags,
            _lock_owner: Option<fuser::LockOwner>,
            reply: fuser::ReplyWrite,
        ) {
            $crate::cmd::mount::callbacks::write(self, fh, offset, data, reply);
        }

        /// `close(2)`: COMMIT, so that errors reach the closer.
        fn flush(
            &self,
            _req: &fuser::Request,
            _ino: fuser::INodeNo,
            fh: fuser::FileHandle,
            _lock_owner: fuser::LockOwner,
            reply: fuser::ReplyEmpty,
        ) {
            $crate::cmd::mount::callbacks::commit(self, fh, reply);
        }

        /// The last close of a handle.
        fn release(
            &self,
            _req: &fuser::Request,
            _ino: fuser::INodeNo,
            fh: fuser::FileHandle,
            _flags: fuser::OpenFlags,
            _lock_owner: Option<fuser::LockOwner>,
            _flush: bool,
            reply: fuser::ReplyEmpty,
        ) {
            $crate::cmd::mount::callbacks::release(self, fh, reply);
        }

        /// `fsync(2)`: COMMIT.
        fn fsync(
            &self,
            _req: &fuser::Request,
            _ino: fuser::INodeNo,
            fh: fuser::FileHandle,
            _datasync: bool,
            reply: fuser::ReplyEmpty,
        ) {
            $crate::cmd::mount::callbacks::commit(self, fh, reply);
        }

        fn getxattr(
            &self,
            _req: &fuser::Request,
            _ino: fuser::INodeNo,
            _name: &std::ffi::OsStr,
            _size: u32,
            reply: fuser::ReplyXattr,
        ) {
            $crate::cmd::mount::callbacks::no_xattrs(reply);
        }

        fn listxattr(
            &self,
            _req: &fuser::Request,
            _ino: fuser::INodeNo,
            _size: u32,
            reply: fuser::ReplyXattr,
        ) {
            $crate::cmd::mount::callbacks::no_xattrs(reply);
        }
    };
}
pub(crate) use shared_file_methods;

/// Replies with an object handed to the kernel (its handle is not
/// replied).
pub(crate) fn reply_entry<H>(reply: ReplyEntry, r: Res<(H, FileAttr, Duration)>) {
    match r {
        Ok((_, a, ttl)) => reply.entry(&ttl, &a, Generation(0)),
        Err(e) => reply.error(e),
    }
}

pub(crate) fn reply_attr(reply: ReplyAttr, r: Res<(FileAttr, Duration)>) {
    match r {
        Ok((a, ttl)) => reply.attr(&ttl, &a),
        Err(e) => reply.error(e),
    }
}

pub(crate) fn reply_empty(reply: ReplyEmpty, r: Res<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfs_client::nfs::{v3, v4};

    #[test]
    fn the_access_bits_of_both_versions_are_the_same() {
        let v3 = [
            v3::ACCESS3_READ,
            v3::ACCESS3_LOOKUP,
            v3::ACCESS3_MODIFY,
            v3::ACCESS3_EXTEND,
            v3::ACCESS3_DELETE,
            v3::ACCESS3_EXECUTE,
        ];
        let v4 = [
            v4::ACCESS4_READ,
            v4::ACCESS4_LOOKUP,
            v4::ACCESS4_MODIFY,
            v4::ACCESS4_EXTEND,
            v4::ACCESS4_DELETE,
            v4::ACCESS4_EXECUTE,
        ];
        assert_eq!(v3, [READ, LOOKUP, MODIFY, EXTEND, DELETE, EXECUTE]);
        assert_eq!(v3, v4);
    }

    #[test]
    fn access_masks_map_as_linux_does() {
        let w = AccessFlags::W_OK;
        let x = AccessFlags::X_OK;
        // Delete alone lets a directory be written, not a file.
        assert!(!access_denied(w, DELETE, true));
        assert!(access_denied(w, DELETE, false));
        // Execute is lookup on a directory.
        assert!(!access_denied(x, LOOKUP, true));
        assert!(access_denied(x, LOOKUP, false));
        assert!(!access_denied(x, EXECUTE, false));
        assert!(access_denied(AccessFlags::R_OK, ACCESS_ALL & !READ, false));
        assert!(!access_denied(AccessFlags::R_OK | w, READ | EXTEND, false));
    }
}
