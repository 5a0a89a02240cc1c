//! Attributes: `statx` relative to a directory fd, the generation taken
//! from the birth time, `fattr3` (RFC 1813 §2.5), the errno → NFSv3 status
//! map, and SETATTR applied on a resolved file.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use nfs::v3::{Fattr3, Ftype3, Nfsstat3, Nfstime3, Sattr3, SetTime, Specdata3};
use rustix::fs::{
    AtFlags, FileType, Gid, Mode, OFlags, Statx, StatxFlags, StatxTimestamp, Timespec, Timestamps,
    Uid,
};
use rustix::io::Errno;

use super::pins::reuse;
use crate::storage::StorageResult;

/// Maps an IO error to the NFSv3 status Linux's nfsd gives for the errno
/// (`nfserrno`); unknown errors are NFS3ERR_IO.
pub fn io_status(e: &io::Error) -> Nfsstat3 {
    match Errno::from_io_error(e) {
        Some(errno) => errno_status(errno),
        None => Nfsstat3::NFS3ERR_IO,
    }
}

/// [`io_status`] for a raw errno.
pub(crate) fn errno_status(errno: Errno) -> Nfsstat3 {
    match errno {
        Errno::PERM => Nfsstat3::NFS3ERR_PERM,
        Errno::NOENT => Nfsstat3::NFS3ERR_NOENT,
        Errno::NXIO => Nfsstat3::NFS3ERR_NXIO,
        Errno::ACCESS => Nfsstat3::NFS3ERR_ACCES,
        Errno::EXIST => Nfsstat3::NFS3ERR_EXIST,
        Errno::XDEV => Nfsstat3::NFS3ERR_XDEV,
        Errno::NODEV => Nfsstat3::NFS3ERR_NODEV,
        Errno::NOTDIR => Nfsstat3::NFS3ERR_NOTDIR,
        Errno::ISDIR => Nfsstat3::NFS3ERR_ISDIR,
        Errno::INVAL | Errno::LOOP => Nfsstat3::NFS3ERR_INVAL,
        Errno::FBIG => Nfsstat3::NFS3ERR_FBIG,
        Errno::NOSPC => Nfsstat3::NFS3ERR_NOSPC,
        Errno::ROFS => Nfsstat3::NFS3ERR_ROFS,
        Errno::MLINK => Nfsstat3::NFS3ERR_MLINK,
        Errno::NAMETOOLONG => Nfsstat3::NFS3ERR_NAMETOOLONG,
        Errno::NOTEMPTY => Nfsstat3::NFS3ERR_NOTEMPTY,
        Errno::DQUOT => Nfsstat3::NFS3ERR_DQUOT,
        Errno::STALE => Nfsstat3::NFS3ERR_STALE,
        Errno::OPNOTSUPP => Nfsstat3::NFS3ERR_NOTSUPP,
        // An open that a kernel lease holds back (a delegated file): the
        // lease's break has started; the client retries.
        Errno::AGAIN => Nfsstat3::NFS3ERR_JUKEBOX,
        _ => Nfsstat3::NFS3ERR_IO,
    }
}

/// `?` for rustix calls.
pub(crate) fn sx<T>(r: rustix::io::Result<T>) -> StorageResult<T> {
    r.map_err(errno_status)
}

/// What the server knows of a file: its `statx` data.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Meta(pub(crate) Statx);

impl Meta {
    /// `statx(dir, name)` without following a final symbolic link.
    pub(crate) fn at(dir: impl AsFd, name: &[u8]) -> rustix::io::Result<Self> {
        Self::at_c(dir, name)
    }

    /// [`Self::at`] with any path argument: a `&CStr` name (a listing's
    /// entry) goes to the kernel as it is, where bytes are copied to add
    /// the NUL.
    pub(crate) fn at_c(dir: impl AsFd, name: impl rustix::path::Arg) -> rustix::io::Result<Self> {
        rustix::fs::statx(
            dir,
            name,
            AtFlags::SYMLINK_NOFOLLOW,
            StatxFlags::BASIC_STATS | StatxFlags::BTIME,
        )
        .map(Self)
    }

    /// `statx` of an open fd.
    pub(crate) fn of(fd: impl AsFd) -> rustix::io::Result<Self> {
        rustix::fs::statx(
            fd,
            c"",
            AtFlags::EMPTY_PATH,
            StatxFlags::BASIC_STATS | StatxFlags::BTIME,
        )
        .map(Self)
    }

    pub(crate) fn ino(&self) -> u64 {
        self.0.stx_ino
    }

    pub(crate) fn dev(&self) -> u64 {
        rustix::fs::makedev(self.0.stx_dev_major, self.0.stx_dev_minor)
    }

    /// Hard links to the file (0 once its last name is gone).
    pub(crate) fn nlink(&self) -> u32 {
        self.0.stx_nlink
    }

    pub(crate) fn file_type(&self) -> FileType {
        FileType::from_raw_mode(u32::from(self.0.stx_mode))
    }

    pub(crate) fn is_dir(&self) -> bool {
        self.file_type() == FileType::Directory
    }

    pub(crate) fn is_file(&self) -> bool {
        self.file_type() == FileType::RegularFile
    }

    pub(crate) fn is_symlink(&self) -> bool {
        self.file_type() == FileType::Symlink
    }

    pub(crate) fn size(&self) -> u64 {
        self.0.stx_size
    }

    /// The generation: the birth time folded into 64 bits where the file
    /// system reports it, else 0 (see [`crate::fh`]).
    pub(crate) fn gen(&self) -> u64 {
        if self.0.stx_mask & StatxFlags::BTIME.bits() == 0 {
            return 0;
        }
        let b = self.0.stx_btime;
        (b.tv_sec as u64)
            .wrapping_mul(1_000_000_007)
            .wrapping_add(u64::from(b.tv_nsec))
    }

    /// `fattr3` (RFC 1813 §2.5).
    pub(crate) fn fattr(&self, fsid: u64) -> Fattr3 {
        let s = &self.0;
        let ftype = match self.file_type() {
            FileType::Directory => Ftype3::NF3DIR,
            FileType::Symlink => Ftype3::NF3LNK,
            FileType::BlockDevice => Ftype3::NF3BLK,
            FileType::CharacterDevice => Ftype3::NF3CHR,
            FileType::Socket => Ftype3::NF3SOCK,
            FileType::Fifo => Ftype3::NF3FIFO,
            _ => Ftype3::NF3REG,
        };
        Fattr3 {
            ftype,
            mode: u32::from(s.stx_mode) & 0o7777,
            nlink: s.stx_nlink,
            uid: s.stx_uid,
            gid: s.stx_gid,
            size: s.stx_size,
            used: s.stx_blocks.saturating_mul(512),
            rdev: Specdata3 {
                specdata1: s.stx_rdev_major,
                specdata2: s.stx_rdev_minor,
            },
            fsid,
            fileid: s.stx_ino,
            atime: time3(&s.stx_atime),
            mtime: time3(&s.stx_mtime),
            ctime: time3(&s.stx_ctime),
        }
    }
}

fn time3(t: &StatxTimestamp) -> Nfstime3 {
    Nfstime3 {
        seconds: u32::try_from(t.tv_sec.max(0)).unwrap_or(u32::MAX),
        nseconds: t.tv_nsec.min(999_999_999),
    }
}

fn timespec(t: SetTime) -> Timespec {
    match t {
        SetTime::DontChange => Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        SetTime::ServerTime => Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        },
        SetTime::ClientTime(t) => Timespec {
            tv_sec: i64::from(t.seconds),
            tv_nsec: i64::from(t.nseconds.min(999_999_999)) as _,
        },
    }
}

/// Where a file to change lives: the directory holding it and its name,
/// and an `O_PATH` fd of the file itself.
pub(crate) struct Target<'a> {
    pub(crate) parent: &'a OwnedFd,
    pub(crate) name: &'a [u8],
    pub(crate) fd: &'a OwnedFd,
    pub(crate) meta: Meta,
    /// The file's pinned descriptor (`super::pins`), reused for opens.
    pub(crate) pinned: Option<&'a OwnedFd>,
}

impl Target<'_> {
    /// Applies `attrs` (RFC 1813 §3.3.2). Size, owner and times act on the
    /// file's own fd, never on a name, so nothing outside the export can
    /// be reached. The mode is set with `fchmod` on an fd opened on the
    /// file without following links; where that open is refused (a file
    /// the server cannot read, a device or a fifo) `fchmodat` on the name
    /// in its directory fd is used, after checking it is not a symbolic
    /// link (Linux's nfsd drops a mode change on a symbolic link).
    pub(crate) fn apply(&self, attrs: &Sattr3) -> StorageResult<()> {
        if let Some(size) = attrs.size {
            if self.meta.is_dir() {
                return Err(Nfsstat3::NFS3ERR_ISDIR);
            }
            if !self.meta.is_file() {
                return Err(Nfsstat3::NFS3ERR_INVAL);
            }
            let f = match self.pinned.and_then(|p| reuse(p, OFlags::WRONLY)) {
                Some(f) => f,
                None => sx(rustix::fs::openat(
                    self.parent,
                    self.name,
                    OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
                    Mode::empty(),
                ))?,
            };
            self.same(&f)?;
            sx(rustix::fs::ftruncate(&f, size))?;
        }
        if let (Some(mode), false) = (attrs.mode, self.meta.is_symlink()) {
            self.chmod(mode)?;
        }
        if attrs.uid.is_some() || attrs.gid.is_some() {
            sx(rustix::fs::chownat(
                self.fd,
                c"",
                attrs.uid.map(Uid::from_raw),
                attrs.gid.map(Gid::from_raw),
                AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
            ))?;
        }
        if attrs.atime != SetTime::DontChange || attrs.mtime != SetTime::DontChange {
            self.set_times(&Timestamps {
                last_access: timespec(attrs.atime),
                last_modification: timespec(attrs.mtime),
            })?;
        }
        Ok(())
    }

    /// Sets the times of the file itself (a symbolic link's own times).
    pub(crate) fn set_times(&self, times: &Timestamps) -> StorageResult<()> {
        sx(rustix::fs::utimensat(
            self.parent,
            self.name,
            times,
            AtFlags::SYMLINK_NOFOLLOW,
        ))
    }

    fn same(&self, f: &OwnedFd) -> StorageResult<()> {
        let m = sx(Meta::of(f))?;
        if m.ino() == self.meta.ino() && m.dev() == self.meta.dev() {
            Ok(())
        } else {
            Err(Nfsstat3::NFS3ERR_STALE)
        }
    }

    fn chmod(&self, mode: u32) -> StorageResult<()> {
        let mode = Mode::from_raw_mode(mode & 0o7777);
        if self.meta.is_file() || self.meta.is_dir() {
            let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
            let f = match self.pinned.and_then(|p| reuse(p, OFlags::RDONLY)) {
                Some(f) => Ok(f),
                None => rustix::fs::openat(self.parent, self.name, flags, Mode::empty()),
            };
            if let Ok(f) = f {
                self.same(&f)?;
                return sx(rustix::fs::fchmod(&f, mode));
            }
        }
        let now = sx(Meta::at(self.parent, self.name))?;
        if now.ino() != self.meta.ino() || now.is_symlink() {
            return Err(Nfsstat3::NFS3ERR_STALE);
        }
        sx(rustix::fs::chmodat(
            self.parent,
            self.name,
            mode,
            AtFlags::empty(),
        ))
    }
}
