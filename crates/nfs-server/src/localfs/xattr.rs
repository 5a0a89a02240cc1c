//! User extended attributes (RFC 8276) in the local file system's `user.`
//! namespace (xattr(7)): an NFS attribute `name` is the local attribute
//! `user.name` (RFC 8276 §5.3, as Linux's nfsd maps them). Only regular
//! files and directories carry user attributes (xattr(7)); on anything
//! else a read finds none and a change is NFS3ERR_PERM, as the Linux VFS
//! answers. Each call opens the file itself from its directory's fd
//! (never through a link); changes are `fsync`ed before they return.

use std::os::fd::OwnedFd;

use bytes::Bytes;
use nfs::v3::{NfsFh3, Nfsstat3};
use nfs::v4::XATTR_SIZE_MAX;
use rustix::buffer::spare_capacity;
use rustix::fs::{OFlags, XattrFlags};
use rustix::io::Errno;

use super::attrs::errno_status;
use super::io::sync_fd;
use super::LocalFs;
use crate::storage::{XattrError, XattrSet};

/// The local namespace NFS extended attributes live in.
const PREFIX: &[u8] = b"user.";
/// Longest local attribute name, prefix included (Linux `XATTR_NAME_MAX`).
pub(crate) const XATTR_NAME_MAX: usize = 255;
/// Largest list of local names read (Linux `XATTR_LIST_MAX`).
const XATTR_LIST_MAX: usize = 64 << 10;

/// `user.name`, or NAMETOOLONG / INVAL (a NUL cannot be passed on).
fn local_name(name: &[u8]) -> Result<Vec<u8>, XattrError> {
    if PREFIX.len() + name.len() > XATTR_NAME_MAX {
        return Err(XattrError::Other(Nfsstat3::NFS3ERR_NAMETOOLONG));
    }
    if name.is_empty() || name.contains(&0) {
        return Err(XattrError::Other(Nfsstat3::NFS3ERR_INVAL));
    }
    Ok([PREFIX, name].concat())
}

/// The typed error for an xattr syscall's errno.
fn xerr(e: Errno) -> XattrError {
    match e {
        Errno::NODATA => XattrError::NoAttr,
        Errno::EXIST => XattrError::Exists,
        Errno::RANGE | Errno::TOOBIG => XattrError::TooBig,
        e => XattrError::Other(errno_status(e)),
    }
}

/// The user attribute names in a `listxattr` buffer, prefix removed.
fn user_names(list: &[u8]) -> Vec<Bytes> {
    list.split(|&b| b == 0)
        .filter_map(|n| n.strip_prefix(PREFIX))
        .filter(|n| !n.is_empty())
        .map(Bytes::copy_from_slice)
        .collect()
}

impl LocalFs {
    /// A readable fd of a regular file or directory; `None` for any other
    /// type (which carries no user attributes).
    fn xattr_fd(&self, fh: &NfsFh3) -> Result<Option<OwnedFd>, XattrError> {
        let n = self.resolve(fh)?;
        if !(n.meta.is_file() || n.meta.is_dir()) {
            return Ok(None);
        }
        Ok(Some(n.open(OFlags::RDONLY)?))
    }

    /// A writable export's fd for a change ([`Self::xattr_fd`]).
    fn xattr_fd_mut(&self, fh: &NfsFh3) -> Result<OwnedFd, XattrError> {
        if self.read_only {
            return Err(XattrError::Other(Nfsstat3::NFS3ERR_ROFS));
        }
        self.xattr_fd(fh)?
            .ok_or(XattrError::Other(Nfsstat3::NFS3ERR_PERM))
    }

    pub(crate) fn do_getxattr(
        &self,
        fh: &NfsFh3,
        name: &[u8],
        max: usize,
    ) -> Result<Bytes, XattrError> {
        let key = local_name(name)?;
        let fd = self.xattr_fd(fh)?.ok_or(XattrError::NoAttr)?;
        let size = rustix::fs::fgetxattr_query(&fd, &key[..]).map_err(xerr)?;
        if size > max.min(XATTR_SIZE_MAX) {
            return Err(XattrError::TooBig);
        }
        // Sized by the value on disk (at most XATTR_SIZE_MAX), plus one
        // byte so that a value grown since the query is seen as such.
        let mut buf = Vec::with_capacity(size + 1);
        rustix::fs::fgetxattr(&fd, &key[..], spare_capacity(&mut buf)).map_err(xerr)?;
        if buf.len() > max.min(XATTR_SIZE_MAX) {
            return Err(XattrError::TooBig);
        }
        Ok(Bytes::from(buf))
    }

    pub(crate) fn do_setxattr(
        &self,
        fh: &NfsFh3,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> Result<(), XattrError> {
        let key = local_name(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(XattrError::TooBig);
        }
        let flags = match how {
            XattrSet::Either => XattrFlags::empty(),
            XattrSet::Create => XattrFlags::CREATE,
            XattrSet::Replace => XattrFlags::REPLACE,
        };
        let fd = self.xattr_fd_mut(fh)?;
        rustix::fs::fsetxattr(&fd, &key[..], value, flags).map_err(xerr)?;
        Ok(sync_fd(&fd)?)
    }

    pub(crate) fn do_listxattrs(&self, fh: &NfsFh3) -> Result<Vec<Bytes>, XattrError> {
        let Some(fd) = self.xattr_fd(fh)? else {
            return Ok(Vec::new());
        };
        // The list may grow between the size query and the read: try
        // again a few times, never above XATTR_LIST_MAX.
        for _ in 0..3 {
            let size = rustix::fs::flistxattr_query(&fd).map_err(xerr)?;
            if size == 0 {
                return Ok(Vec::new());
            }
            let mut buf = Vec::with_capacity(size.min(XATTR_LIST_MAX));
            match rustix::fs::flistxattr(&fd, spare_capacity(&mut buf)) {
                Ok(_) => return Ok(user_names(&buf)),
                Err(Errno::RANGE) if size < XATTR_LIST_MAX => {}
                Err(e) => return Err(xerr(e)),
            }
        }
        Err(XattrError::Other(Nfsstat3::NFS3ERR_JUKEBOX))
    }

    pub(crate) fn do_removexattr(&self, fh: &NfsFh3, name: &[u8]) -> Result<(), XattrError> {
        let key = local_name(name)?;
        let fd = self.xattr_fd_mut(fh)?;
        rustix::fs::fremovexattr(&fd, &key[..]).map_err(xerr)?;
        Ok(sync_fd(&fd)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_the_user_namespace() {
        assert_eq!(local_name(b"k").unwrap(), b"user.k");
        let long = vec![b'a'; XATTR_NAME_MAX - PREFIX.len()];
        assert!(local_name(&long).is_ok());
        let longer = vec![b'a'; XATTR_NAME_MAX - PREFIX.len() + 1];
        assert_eq!(
            local_name(&longer),
            Err(XattrError::Other(Nfsstat3::NFS3ERR_NAMETOOLONG))
        );
        assert!(local_name(b"a\0b").is_err());
        assert!(local_name(b"").is_err());
    }

    #[test]
    fn lists_only_user_names_without_prefix() {
        let list = b"security.selinux\0user.a\0trusted.x\0user.bc\0user.\0";
        assert_eq!(
            user_names(list),
            vec![Bytes::from_static(b"a"), Bytes::from_static(b"bc")]
        );
        assert!(user_names(b"").is_empty());
    }
}
