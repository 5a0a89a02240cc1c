//! NFSv4 attributes and statuses in the shapes the mount's shared parts
//! take: attributes as an NFSv3 `fattr3` (the attribute cache and the
//! FUSE attribute conversion are written once over it; RFC 8881 §5.8
//! and RFC 1813 §2.5 describe the same Unix attributes), statuses as
//! errnos.

use fuser::Errno;
use nfs_client::nfs::v3::{Fattr3, Ftype3, Nfsstat3, Nfstime3, Specdata3};
use nfs_client::nfs::v4::{NfsFtype4, Nfsstat4, Nfstime4};
use nfs_client::v4::{Attrs, Error};

use super::super::table::status_errno;

/// The uid and gid shown for an owner the server names rather than
/// numbers (Linux's `nobody`).
const NOBODY: u32 = 65534;

/// NFSv3 file type of an NFSv4 one (RFC 8881 §5.8.1.2).
pub(crate) fn ftype(t: NfsFtype4) -> Ftype3 {
    match t {
        NfsFtype4::NF4DIR => Ftype3::NF3DIR,
        NfsFtype4::NF4LNK => Ftype3::NF3LNK,
        NfsFtype4::NF4BLK => Ftype3::NF3BLK,
        NfsFtype4::NF4CHR => Ftype3::NF3CHR,
        NfsFtype4::NF4SOCK => Ftype3::NF3SOCK,
        NfsFtype4::NF4FIFO => Ftype3::NF3FIFO,
        _ => Ftype3::NF3REG,
    }
}

/// `nfstime4` as `nfstime3`: seconds clamped to 0..=u32::MAX.
fn time(t: Option<Nfstime4>) -> Nfstime3 {
    t.map_or_else(Nfstime3::default, |t| Nfstime3 {
        seconds: t.seconds.clamp(0, i64::from(u32::MAX)) as u32,
        nseconds: t.nseconds,
    })
}

/// The attributes as `fattr3`; `None` without a file id (FUSE needs
/// one). Absent `mode` is 0, absent `numlinks` 1, a named owner is
/// `nobody`, absent `space_used` is the size.
pub(crate) fn fattr3(a: &Attrs) -> Option<Fattr3> {
    let (major, minor) = a.rawdev.unwrap_or((0, 0));
    Some(Fattr3 {
        ftype: ftype(a.ftype),
        mode: a.mode.unwrap_or(0) & 0o7777,
        nlink: a.nlink.unwrap_or(1),
        uid: a.uid.unwrap_or(NOBODY),
        gid: a.gid.unwrap_or(NOBODY),
        size: a.size,
        used: a.used.unwrap_or(a.size),
        rdev: Specdata3 {
            specdata1: major,
            specdata2: minor,
        },
        fsid: 0,
        fileid: a.fileid?,
        atime: time(a.atime),
        mtime: time(a.mtime),
        // The change attribute stands for ctime when the server gives no
        // time_metadata: a change is still seen (§5.8.1.4).
        ctime: match a.ctime {
            Some(t) => time(Some(t)),
            None => Nfstime3 {
                seconds: a.change.unwrap_or(0) as u32,
                nseconds: 0,
            },
        },
    })
}

/// The errno for an NFSv4 status (RFC 8881 §15.1): the codes shared
/// with NFSv3 map as they do there; the NFSv4-only ones as Linux's
/// client reports them (`nfs4_map_errors`).
pub(crate) fn status4_errno(s: Nfsstat4) -> Errno {
    let e = match s {
        Nfsstat4::NFS4ERR_FHEXPIRED | Nfsstat4::NFS4ERR_BADHANDLE => libc::ESTALE,
        Nfsstat4::NFS4ERR_SYMLINK => libc::ELOOP,
        Nfsstat4::NFS4ERR_BADNAME | Nfsstat4::NFS4ERR_WRONG_TYPE | Nfsstat4::NFS4ERR_BADCHAR => {
            libc::EINVAL
        }
        Nfsstat4::NFS4ERR_SHARE_DENIED | Nfsstat4::NFS4ERR_WRONGSEC => libc::EACCES,
        Nfsstat4::NFS4ERR_LOCKED | Nfsstat4::NFS4ERR_DELAY | Nfsstat4::NFS4ERR_GRACE => {
            libc::EAGAIN
        }
        Nfsstat4::NFS4ERR_FILE_OPEN => libc::EBUSY,
        _ => return status_errno(Nfsstat3(s.0)),
    };
    Errno::from_i32(e)
}

/// The errno for an NFSv4 client error.
pub(crate) fn errno4(e: &Error) -> Errno {
    match e {
        Error::Nfs { status, .. } => status4_errno(*status),
        Error::InvalidName(n) if n.len() > nfs_client::nfs::v4::NFS4_MAXNAMLEN => {
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

    fn attrs() -> Attrs {
        Attrs {
            ftype: NfsFtype4::NF4REG,
            size: 5000,
            mode: Some(0o100640),
            fileid: Some(77),
            atime: Some(Nfstime4 {
                seconds: 10,
                nseconds: 5,
            }),
            mtime: Some(Nfstime4 {
                seconds: -3,
                nseconds: 0,
            }),
            ctime: None,
            change: Some(99),
            nlink: Some(2),
            uid: Some(41001),
            gid: None,
            used: None,
            rawdev: None,
        }
    }

    #[test]
    fn v4_attributes_become_fattr3() {
        let f = fattr3(&attrs()).unwrap();
        assert_eq!(f.ftype, Ftype3::NF3REG);
        assert_eq!(f.mode, 0o640);
        assert_eq!((f.nlink, f.uid, f.gid), (2, 41001, NOBODY));
        assert_eq!((f.size, f.used, f.fileid), (5000, 5000, 77));
        assert_eq!((f.atime.seconds, f.atime.nseconds), (10, 5));
        assert_eq!(f.mtime.seconds, 0, "before 1970 clamps");
        assert_eq!(f.ctime.seconds, 99, "change stands for ctime");
        let no_id = Attrs {
            fileid: None,
            ..attrs()
        };
        assert!(fattr3(&no_id).is_none());
    }

    #[test]
    fn v4_statuses_map_to_the_errnos_linux_reports() {
        assert_eq!(status4_errno(Nfsstat4::NFS4ERR_ACCESS), Errno::EACCES);
        assert_eq!(status4_errno(Nfsstat4::NFS4ERR_NOENT), Errno::ENOENT);
        assert_eq!(status4_errno(Nfsstat4::NFS4ERR_EXIST), Errno::EEXIST);
        assert_eq!(status4_errno(Nfsstat4::NFS4ERR_STALE), Errno::ESTALE);
        assert_eq!(status4_errno(Nfsstat4::NFS4ERR_FHEXPIRED), Errno::ESTALE);
        assert_eq!(status4_errno(Nfsstat4::NFS4ERR_NOTEMPTY), Errno::ENOTEMPTY);
        assert_eq!(status4_errno(Nfsstat4::NFS4ERR_SYMLINK), Errno::ELOOP);
        assert_eq!(status4_errno(Nfsstat4::NFS4ERR_DELAY), Errno::EAGAIN);
        assert_eq!(status4_errno(Nfsstat4::NFS4ERR_BADSESSION), Errno::EIO);
    }
}
