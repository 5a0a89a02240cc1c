//! The pieces of the FUSE mount that do no I/O: the inode table (FUSE
//! inode number ↔ NFS file handle), attribute conversion and the NFS
//! status → errno map.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType, INodeNo};
use nfs_client::nfs::v3::{Fattr3, Ftype3, NfsFh3, Nfsstat3, Nfstime3};

/// Inode numbers are NFS file ids (RFC 1813 §2.5 `fileid3`), except that
/// FUSE's root is always 1: the export root's file id and 1 trade places,
/// which keeps the map one-to-one. Applying it twice gives the input back.
pub(crate) fn swap_root(id: u64, root_fileid: u64) -> u64 {
    if id == root_fileid {
        1
    } else if id == 1 {
        root_fileid
    } else {
        id
    }
}

#[derive(Debug)]
struct Node<H> {
    fh: H,
    /// Lookups the kernel holds (FUSE `nlookup`); the entry goes when a
    /// FORGET brings it to zero.
    nlookup: u64,
}

/// FUSE inode number → NFS file handle (NFSv3's `nfs_fh3` by default,
/// or NFSv4's `nfs_fh4`), with the kernel's lookup counts. The root is
/// pinned.
#[derive(Debug)]
pub(crate) struct Inodes<H = NfsFh3> {
    root_fileid: u64,
    root_fh: H,
    nodes: Mutex<HashMap<u64, Node<H>>>,
}

impl<H: Clone + PartialEq> Inodes<H> {
    /// A table holding the export root (`root_fileid`, `root_fh`).
    pub(crate) fn new(root_fileid: u64, root_fh: H) -> Self {
        Self {
            root_fileid,
            root_fh,
            nodes: Mutex::new(HashMap::new()),
        }
    }

    /// The FUSE inode number of NFS file id `fileid`; `None` for file id
    /// 0, which FUSE cannot represent.
    pub(crate) fn ino(&self, fileid: u64) -> Option<INodeNo> {
        match swap_root(fileid, self.root_fileid) {
            0 => None,
            n => Some(INodeNo(n)),
        }
    }

    /// The handle of inode `ino`, if the kernel still holds it.
    pub(crate) fn fh(&self, ino: INodeNo) -> Option<H> {
        if ino == INodeNo::ROOT {
            return Some(self.root_fh.clone());
        }
        let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        nodes.get(&ino.0).map(|n| n.fh.clone())
    }

    /// Records that the kernel was handed `ino` → `fh` once more (a
    /// LOOKUP, CREATE, MKDIR, SYMLINK, LINK or READDIRPLUS entry).
    pub(crate) fn remember(&self, ino: INodeNo, fh: &H) {
        if ino == INodeNo::ROOT {
            return;
        }
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        let n = nodes.entry(ino.0).or_insert_with(|| Node {
            fh: fh.clone(),
            nlookup: 0,
        });
        // A new handle for the same file id (the file was replaced on the
        // server) wins: it is the one the kernel was just given.
        if n.fh != *fh {
            n.fh = fh.clone();
        }
        n.nlookup = n.nlookup.saturating_add(1);
    }

    /// FUSE FORGET: the kernel dropped `count` lookups of `ino`.
    /// Returns whether that was the last (the inode is gone).
    pub(crate) fn forget(&self, ino: INodeNo, count: u64) -> bool {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = nodes.get_mut(&ino.0) {
            n.nlookup = n.nlookup.saturating_sub(count);
            if n.nlookup == 0 {
                nodes.remove(&ino.0);
                return true;
            }
        }
        false
    }

    /// Inodes held (the root not counted).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// FUSE file type of an NFS `ftype3` (RFC 1813 §2.6); an unknown code
/// shows as a regular file.
pub(crate) fn file_type(t: Ftype3) -> FileType {
    match t {
        Ftype3::NF3DIR => FileType::Directory,
        Ftype3::NF3BLK => FileType::BlockDevice,
        Ftype3::NF3CHR => FileType::CharDevice,
        Ftype3::NF3LNK => FileType::Symlink,
        Ftype3::NF3SOCK => FileType::Socket,
        Ftype3::NF3FIFO => FileType::NamedPipe,
        _ => FileType::RegularFile,
    }
}

/// `nfstime3` (RFC 1813 §2.5) as a `SystemTime`; nanoseconds past a
/// second are clamped.
pub(crate) fn system_time(t: Nfstime3) -> SystemTime {
    UNIX_EPOCH + Duration::new(u64::from(t.seconds), t.nseconds.min(999_999_999))
}

/// A `SystemTime` as `nfstime3`: seconds saturate at the 32-bit range
/// (times before 1970 become 0).
pub(crate) fn nfs_time(t: SystemTime) -> Nfstime3 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Nfstime3 {
            seconds: u32::try_from(d.as_secs()).unwrap_or(u32::MAX),
            nseconds: d.subsec_nanos(),
        },
        Err(_) => Nfstime3::default(),
    }
}

/// Linux's 32-bit device number encoding (`new_encode_dev`) of an NFS
/// `specdata3` (RFC 1813 §2.5: major, minor).
pub(crate) fn encode_dev(major: u32, minor: u32) -> u32 {
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// The NFS `specdata3` (major, minor) of a Linux 32-bit device number
/// (`new_decode_dev`), the inverse of [`encode_dev`].
pub(crate) fn decode_dev(dev: u32) -> (u32, u32) {
    ((dev & 0xfff00) >> 8, (dev & 0xff) | ((dev >> 12) & 0xfff00))
}

/// FUSE attributes for NFS attributes `a` (RFC 1813 §2.5 `fattr3`) under
/// inode number `ino`.
pub(crate) fn file_attr(ino: INodeNo, a: &Fattr3, blksize: u32) -> FileAttr {
    FileAttr {
        ino,
        size: a.size,
        blocks: a.used.div_ceil(512),
        atime: system_time(a.atime),
        mtime: system_time(a.mtime),
        ctime: system_time(a.ctime),
        crtime: system_time(a.ctime),
        kind: file_type(a.ftype),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: encode_dev(a.rdev.specdata1, a.rdev.specdata2),
        blksize,
        flags: 0,
    }
}

/// A directory entry's cookie becomes the FUSE offset the kernel resumes
/// from: 0 would restart the listing and the offset just asked for would
/// repeat it, so either is a server fault (RFC 1813 §3.3.16: a cookie
/// resumes after its entry; 0 means the start).
pub(crate) fn resumes_after(offset: u64, cookie: u64) -> Result<(), Errno> {
    if cookie == 0 || cookie == offset {
        tracing::warn!(offset, cookie, "directory entry cookie makes no progress");
        return Err(Errno::EIO);
    }
    Ok(())
}

/// The errno for an NFS failure status (RFC 1813 §2.6 `nfsstat3`, whose
/// values mostly are the Unix errnos), as Linux's NFS client reports
/// them to applications.
pub(crate) fn status_errno(s: Nfsstat3) -> Errno {
    let e = match s {
        Nfsstat3::NFS3ERR_PERM => libc::EPERM,
        Nfsstat3::NFS3ERR_NOENT => libc::ENOENT,
        Nfsstat3::NFS3ERR_IO => libc::EIO,
        Nfsstat3::NFS3ERR_NXIO => libc::ENXIO,
        Nfsstat3::NFS3ERR_ACCES => libc::EACCES,
        Nfsstat3::NFS3ERR_EXIST => libc::EEXIST,
        Nfsstat3::NFS3ERR_XDEV => libc::EXDEV,
        Nfsstat3::NFS3ERR_NODEV => libc::ENODEV,
        Nfsstat3::NFS3ERR_NOTDIR => libc::ENOTDIR,
        Nfsstat3::NFS3ERR_ISDIR => libc::EISDIR,
        Nfsstat3::NFS3ERR_INVAL => libc::EINVAL,
        Nfsstat3::NFS3ERR_FBIG => libc::EFBIG,
        Nfsstat3::NFS3ERR_NOSPC => libc::ENOSPC,
        Nfsstat3::NFS3ERR_ROFS => libc::EROFS,
        Nfsstat3::NFS3ERR_MLINK => libc::EMLINK,
        Nfsstat3::NFS3ERR_NAMETOOLONG => libc::ENAMETOOLONG,
        Nfsstat3::NFS3ERR_NOTEMPTY => libc::ENOTEMPTY,
        Nfsstat3::NFS3ERR_DQUOT => libc::EDQUOT,
        Nfsstat3::NFS3ERR_STALE | Nfsstat3::NFS3ERR_BADHANDLE => libc::ESTALE,
        Nfsstat3::NFS3ERR_REMOTE => libc::EREMOTE,
        Nfsstat3::NFS3ERR_NOTSUPP => libc::EOPNOTSUPP,
        Nfsstat3::NFS3ERR_JUKEBOX => libc::EAGAIN,
        Nfsstat3::NFS3ERR_SERVERFAULT => libc::EREMOTEIO,
        Nfsstat3::NFS3ERR_TOOSMALL | Nfsstat3::NFS3ERR_BADTYPE => libc::EINVAL,
        _ => libc::EIO,
    };
    Errno::from_i32(e)
}

/// The errno for a client error: the NFS status's, a local I/O error's
/// own, `ENAMETOOLONG`/`EINVAL` for a name NFS cannot carry, else `EIO`.
pub(crate) fn errno(e: &nfs_client::Error) -> Errno {
    use nfs_client::Error;
    match e {
        Error::Nfs { status, .. } => status_errno(*status),
        Error::InvalidName(n) if n.len() > nfs_client::nfs::v3::NFS3_MAXNAMLEN => {
            Errno::ENAMETOOLONG
        }
        Error::InvalidName(_) => Errno::EINVAL,
        Error::Io(io) => io.raw_os_error().map_or(Errno::EIO, Errno::from_i32),
        _ => Errno::EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfs_client::nfs::v3::{Nfsproc3, Specdata3};

    fn fh(b: &[u8]) -> NfsFh3 {
        NfsFh3::new(b).unwrap()
    }

    #[test]
    fn root_fileid_and_one_trade_places() {
        assert_eq!(swap_root(77, 77), 1);
        assert_eq!(swap_root(1, 77), 77);
        assert_eq!(swap_root(5, 77), 5);
        for id in [0, 1, 2, 5, 77, u64::MAX] {
            assert_eq!(swap_root(swap_root(id, 77), 77), id);
        }
    }

    #[test]
    fn inode_table_counts_lookups_until_forgotten() {
        let t = Inodes::new(77, fh(b"root"));
        assert_eq!(t.ino(77), Some(INodeNo::ROOT));
        assert_eq!(t.ino(0), None);
        assert_eq!(t.fh(INodeNo::ROOT), Some(fh(b"root")));
        let ino = t.ino(9).unwrap();
        assert_eq!(t.fh(ino), None);
        t.remember(ino, &fh(b"nine"));
        t.remember(ino, &fh(b"nine"));
        assert_eq!(t.fh(ino), Some(fh(b"nine")));
        assert!(!t.forget(ino, 1));
        assert_eq!(t.fh(ino), Some(fh(b"nine")));
        assert!(t.forget(ino, 1));
        assert_eq!(t.fh(ino), None);
        assert_eq!(t.len(), 0);
        assert!(!t.forget(INodeNo::ROOT, 5));
        assert_eq!(t.fh(INodeNo::ROOT), Some(fh(b"root")));
    }

    #[test]
    fn newer_handle_for_a_fileid_replaces_the_old() {
        let t = Inodes::new(2, fh(b"root"));
        let ino = t.ino(9).unwrap();
        t.remember(ino, &fh(b"old"));
        t.remember(ino, &fh(b"new"));
        assert_eq!(t.fh(ino), Some(fh(b"new")));
    }

    #[test]
    fn attributes_convert_to_fuse() {
        let a = Fattr3 {
            ftype: Ftype3::NF3CHR,
            mode: 0o104755,
            nlink: 2,
            uid: 1000,
            gid: 100,
            size: 10,
            used: 4097,
            rdev: Specdata3 {
                specdata1: 8,
                specdata2: 0x1_23,
            },
            fsid: 1,
            fileid: 9,
            atime: Nfstime3 {
                seconds: 5,
                nseconds: 7,
            },
            mtime: Nfstime3 {
                seconds: 6,
                nseconds: 2_000_000_000,
            },
            ctime: Nfstime3::default(),
        };
        let f = file_attr(INodeNo(9), &a, 4096);
        assert_eq!(f.kind, FileType::CharDevice);
        assert_eq!(f.perm, 0o4755);
        assert_eq!(f.blocks, 9);
        assert_eq!(f.atime, UNIX_EPOCH + Duration::new(5, 7));
        assert_eq!(f.mtime, UNIX_EPOCH + Duration::new(6, 999_999_999));
        // major 8, minor 0x123: low minor byte, major, high minor bits.
        assert_eq!(f.rdev, 0x23 | (8 << 8) | (0x100 << 12));
        assert_eq!(decode_dev(f.rdev), (8, 0x123));
        assert_eq!(nfs_time(UNIX_EPOCH + Duration::new(5, 7)).nseconds, 7);
        assert_eq!(nfs_time(UNIX_EPOCH - Duration::from_secs(1)).seconds, 0);
    }

    #[test]
    fn cookies_that_restart_or_repeat_a_listing_are_refused() {
        assert_eq!(resumes_after(0, 7), Ok(()));
        assert_eq!(resumes_after(7, 9), Ok(()));
        assert_eq!(resumes_after(0, 0), Err(Errno::EIO));
        assert_eq!(resumes_after(7, 7), Err(Errno::EIO));
    }

    #[test]
    fn nfs_failures_map_to_errnos() {
        let nfs = |status| nfs_client::Error::Nfs {
            proc: Nfsproc3::LOOKUP,
            status,
        };
        assert_eq!(errno(&nfs(Nfsstat3::NFS3ERR_NOENT)), Errno::ENOENT);
        assert_eq!(errno(&nfs(Nfsstat3::NFS3ERR_NOTEMPTY)), Errno::ENOTEMPTY);
        assert_eq!(errno(&nfs(Nfsstat3::NFS3ERR_STALE)), Errno::ESTALE);
        assert_eq!(errno(&nfs(Nfsstat3::NFS3ERR_ROFS)), Errno::EROFS);
        assert_eq!(errno(&nfs(Nfsstat3(424_242))), Errno::EIO);
        let long = nfs_client::Error::InvalidName("x".repeat(300));
        assert_eq!(errno(&long), Errno::ENAMETOOLONG);
        assert_eq!(errno(&nfs_client::Error::Protocol("bad")), Errno::EIO);
    }
}
