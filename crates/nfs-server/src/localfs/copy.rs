//! COPY and CLONE within one export (RFC 7862 §15.2, §15.13):
//! `copy_file_range` from one open file to the other, and a whole-file
//! reflink (`FICLONE`) where the file system shares extents. Both files
//! are opened from their directories' fds (never through a link); the
//! destination is `fsync`ed before the call returns.

use nfs::v3::{NfsFh3, Nfsstat3};
use rustix::fs::OFlags;
use rustix::io::Errno;

use super::attrs::{errno_status, sx, Meta};
use super::io::sync_fd;
use super::LocalFs;
use crate::storage::StorageResult;

/// Most bytes one COPY moves: a longer copy is answered short (RFC 7862
/// §15.2.3 lets `wr_count` be less than asked) and the client goes on.
pub(crate) const MAX_COPY: u64 = 64 << 20;

/// The length of a copy or clone of `count` bytes (0: to the end) at
/// `offset` of a source of `size` bytes: NFS3ERR_INVAL when the range
/// passes the end (RFC 7862 §15.2.3, §15.13.3).
pub(crate) fn range_len(offset: u64, count: u64, size: u64) -> StorageResult<u64> {
    if offset > size {
        return Err(Nfsstat3::NFS3ERR_INVAL);
    }
    match count {
        0 => Ok(size - offset),
        n if offset.checked_add(n).is_some_and(|e| e <= size) => Ok(n),
        _ => Err(Nfsstat3::NFS3ERR_INVAL),
    }
}

impl LocalFs {
    pub(crate) fn do_copy(
        &self,
        src: &NfsFh3,
        src_offset: u64,
        dst: &NfsFh3,
        dst_offset: u64,
        count: u64,
    ) -> StorageResult<u64> {
        if self.read_only {
            return Err(Nfsstat3::NFS3ERR_ROFS);
        }
        let (_, s) = self.open_regular(src, OFlags::RDONLY)?;
        let (_, d) = self.open_regular(dst, OFlags::WRONLY)?;
        let size = sx(Meta::of(&s))?.size();
        let len = range_len(src_offset, count, size)?.min(MAX_COPY);
        if dst_offset
            .checked_add(len)
            .is_none_or(|e| e > i64::MAX as u64)
        {
            return Err(Nfsstat3::NFS3ERR_FBIG);
        }
        let (mut from, mut to, mut done) = (src_offset, dst_offset, 0u64);
        while done < len {
            let want = usize::try_from(len - done).unwrap_or(usize::MAX);
            match rustix::fs::copy_file_range(&s, Some(&mut from), &d, Some(&mut to), want) {
                Ok(0) => break,
                Ok(n) => done += n as u64,
                Err(Errno::INTR) => {}
                Err(e) => return Err(errno_status(e)),
            }
        }
        sync_fd(&d)?;
        Ok(done)
    }

    pub(crate) fn do_clone(
        &self,
        src: &NfsFh3,
        src_offset: u64,
        dst: &NfsFh3,
        dst_offset: u64,
        count: u64,
    ) -> StorageResult<()> {
        if self.read_only {
            return Err(Nfsstat3::NFS3ERR_ROFS);
        }
        let (_, s) = self.open_regular(src, OFlags::RDONLY)?;
        let (_, d) = self.open_regular(dst, OFlags::WRONLY)?;
        let size = sx(Meta::of(&s))?.size();
        let len = range_len(src_offset, count, size)?;
        // Only the whole file: a range clone (FICLONERANGE) needs an
        // ioctl rustix does not wrap, and `unsafe` is not allowed here.
        if src_offset != 0 || dst_offset != 0 || len != size {
            return Err(Nfsstat3::NFS3ERR_NOTSUPP);
        }
        match rustix::fs::ioctl_ficlone(&d, &s) {
            Ok(()) => sync_fd(&d),
            // No shared extents on this file system (ext4, tmpfs…).
            Err(Errno::OPNOTSUPP | Errno::XDEV | Errno::INVAL | Errno::NOTTY | Errno::NOSYS) => {
                Err(Nfsstat3::NFS3ERR_NOTSUPP)
            }
            Err(e) => Err(errno_status(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_past_the_end_are_invalid() {
        assert_eq!(range_len(0, 0, 10), Ok(10));
        assert_eq!(range_len(4, 0, 10), Ok(6));
        assert_eq!(range_len(4, 6, 10), Ok(6));
        assert_eq!(range_len(10, 0, 10), Ok(0));
        assert_eq!(range_len(4, 7, 10), Err(Nfsstat3::NFS3ERR_INVAL));
        assert_eq!(range_len(11, 0, 10), Err(Nfsstat3::NFS3ERR_INVAL));
        assert_eq!(range_len(1, u64::MAX, 10), Err(Nfsstat3::NFS3ERR_INVAL));
    }
}
