//! NFSv4 attributes from and to the storage's NFSv3 view (RFC 8881 §5).

use bytes::Bytes;
use nfs::v3::{Fattr3, NfsFh3, Nfsstat3, Nfstime3, Sattr3, SetTime};
use nfs::v4::attr::*;
use nfs::v4::{Fsid4, NfsFh4, NfsFtype4, Nfsstat4, Nfstime4, Specdata4};
use xdr::Bounded;

use crate::localfs::{MAX_READ, MAX_WRITE};
use crate::storage::FsStat;

/// The status NFSv4 uses for a storage error: NFSv3 and NFSv4 share the
/// numbers (RFC 8881 §15.1) except for the few NFSv3-only codes.
pub(crate) fn st4(s: Nfsstat3) -> Nfsstat4 {
    match s {
        Nfsstat3::NFS3ERR_NODEV => Nfsstat4::NFS4ERR_NXIO,
        Nfsstat3::NFS3ERR_NOT_SYNC => Nfsstat4::NFS4ERR_INVAL,
        Nfsstat3::NFS3ERR_REMOTE => Nfsstat4::NFS4ERR_SERVERFAULT,
        other => Nfsstat4(other.0),
    }
}

/// The pNFS attributes (RFC 8881 §5.12), reported only by a metadata
/// server.
const PNFS_ATTRS: [u32; 2] = [FATTR4_FS_LAYOUT_TYPES, FATTR4_LAYOUT_BLKSIZE];

/// The attributes this server reports in `supported_attrs`: every
/// attribute [`FileAttrs`] carries but the pNFS ones.
pub(crate) fn supported() -> Bitmap4 {
    let mut b = Bitmap4::new();
    for n in KNOWN_ATTRS.iter().filter(|n| !PNFS_ATTRS.contains(n)) {
        b.insert(*n);
    }
    b
}

/// Attributes that need file system figures.
const FS_ATTRS: [u32; 6] = [
    FATTR4_FILES_AVAIL,
    FATTR4_FILES_FREE,
    FATTR4_FILES_TOTAL,
    FATTR4_SPACE_AVAIL,
    FATTR4_SPACE_FREE,
    FATTR4_SPACE_TOTAL,
];

/// Whether `req` asks for any file system figure.
pub(crate) fn wants_fsstat(req: &Bitmap4) -> bool {
    FS_ATTRS.iter().any(|&n| req.contains(n))
}

fn time4(t: Nfstime3) -> Nfstime4 {
    Nfstime4 {
        seconds: i64::from(t.seconds),
        nseconds: t.nseconds,
    }
}

/// The `change` attribute (RFC 8881 §5.8.1.4): the ctime in nanoseconds.
pub(crate) fn change_of(a: &Fattr3) -> u64 {
    u64::from(a.ctime.seconds) * 1_000_000_000 + u64::from(a.ctime.nseconds)
}

/// Every readable attribute of an object (RFC 8881 §5.6, §5.7).
pub(crate) fn file_attrs(a: &Fattr3, fh: &NfsFh3, fs: Option<FsStat>, lease: u32) -> FileAttrs {
    let excl = Bitmap4::from_bits(&[FATTR4_SIZE, FATTR4_MODE, FATTR4_OWNER, FATTR4_OWNER_GROUP]);
    let num = |n: u32| Bounded(Bytes::from(n.to_string()));
    FileAttrs {
        supported_attrs: Some(supported()),
        ftype: Some(NfsFtype4(a.ftype.0)),
        fh_expire_type: Some(0),
        change: Some(change_of(a)),
        size: Some(a.size),
        link_support: Some(true),
        symlink_support: Some(true),
        named_attr: Some(false),
        fsid: Some(Fsid4 {
            major: a.fsid,
            minor: 0,
        }),
        unique_handles: Some(true),
        lease_time: Some(lease),
        rdattr_error: Some(Nfsstat4::NFS4_OK),
        aclsupport: Some(0),
        cansettime: Some(true),
        case_insensitive: Some(false),
        case_preserving: Some(true),
        chown_restricted: Some(true),
        filehandle: Some(NfsFh4(Bytes::copy_from_slice(fh.as_bytes()))),
        fileid: Some(a.fileid),
        files_avail: fs.map(|f| f.afiles),
        files_free: fs.map(|f| f.ffiles),
        files_total: fs.map(|f| f.tfiles),
        homogeneous: Some(true),
        maxfilesize: Some(i64::MAX as u64),
        maxlink: Some(65000),
        maxname: Some(255),
        maxread: Some(u64::from(MAX_READ)),
        maxwrite: Some(u64::from(MAX_WRITE)),
        mode: Some(a.mode & 0o7777),
        no_trunc: Some(true),
        numlinks: Some(a.nlink),
        owner: Some(num(a.uid)),
        owner_group: Some(num(a.gid)),
        rawdev: Some(Specdata4 {
            specdata1: a.rdev.specdata1,
            specdata2: a.rdev.specdata2,
        }),
        space_avail: fs.map(|f| f.abytes),
        space_free: fs.map(|f| f.fbytes),
        space_total: fs.map(|f| f.tbytes),
        space_used: Some(a.used),
        time_access: Some(time4(a.atime)),
        time_access_set: None,
        time_delta: Some(Nfstime4 {
            seconds: 0,
            nseconds: 1,
        }),
        time_metadata: Some(time4(a.ctime)),
        time_modify: Some(time4(a.mtime)),
        time_modify_set: None,
        mounted_on_fileid: Some(a.fileid),
        suppattr_exclcreat: Some(excl),
        xattr_support: Some(true),
        fs_layout_types: None,
        layout_blksize: None,
    }
}

/// A numeric owner or group string ("1000", or "1000@domain" with the
/// domain ignored); anything else is NFS4ERR_BADOWNER (RFC 8881 §5.9).
fn parse_id(s: &[u8]) -> Result<u32, Nfsstat4> {
    let id = s.split(|&b| b == b'@').next().unwrap_or_default();
    core::str::from_utf8(id)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(Nfsstat4::NFS4ERR_BADOWNER)
}

fn settime(t: SetTime4) -> Result<SetTime, Nfsstat4> {
    Ok(match t {
        SetTime4::ServerTime => SetTime::ServerTime,
        SetTime4::ClientTime(t) => SetTime::ClientTime(Nfstime3 {
            seconds: u32::try_from(t.seconds).map_err(|_| Nfsstat4::NFS4ERR_INVAL)?,
            nseconds: if t.nseconds < 1_000_000_000 {
                t.nseconds
            } else {
                return Err(Nfsstat4::NFS4ERR_INVAL);
            },
        }),
    })
}

/// The settable attributes of an `fattr4` as a storage `Sattr3`, with the
/// mask of what will be set (RFC 8881 §18.30.3): an unknown attribute is
/// NFS4ERR_ATTRNOTSUPP, a read-only one NFS4ERR_INVAL.
pub(crate) fn to_sattr(f: &Fattr4) -> Result<(Sattr3, Bitmap4), Nfsstat4> {
    let a = FileAttrs::from_fattr4(f).map_err(|e| e.status())?;
    let settable = Bitmap4::from_bits(&[
        FATTR4_SIZE,
        FATTR4_MODE,
        FATTR4_OWNER,
        FATTR4_OWNER_GROUP,
        FATTR4_TIME_ACCESS_SET,
        FATTR4_TIME_MODIFY_SET,
    ]);
    let mask = a.mask();
    if mask.iter().any(|n| !settable.contains(n)) {
        return Err(Nfsstat4::NFS4ERR_INVAL);
    }
    let s = Sattr3 {
        mode: a.mode.map(|m| m & 0o7777),
        uid: a.owner.as_ref().map(|o| parse_id(&o.0)).transpose()?,
        gid: a.owner_group.as_ref().map(|o| parse_id(&o.0)).transpose()?,
        size: a.size,
        atime: a
            .time_access_set
            .map(settime)
            .transpose()?
            .unwrap_or_default(),
        mtime: a
            .time_modify_set
            .map(settime)
            .transpose()?
            .unwrap_or_default(),
    };
    Ok((s, mask))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_numeric_owners_and_rejects_names() {
        assert_eq!(parse_id(b"1000"), Ok(1000));
        assert_eq!(parse_id(b"0@example.org"), Ok(0));
        assert_eq!(parse_id(b"alice"), Err(Nfsstat4::NFS4ERR_BADOWNER));
    }

    #[test]
    fn refuses_to_set_read_only_attributes() {
        let f = FileAttrs {
            fileid: Some(3),
            ..Default::default()
        }
        .to_fattr4(&supported());
        assert_eq!(to_sattr(&f).err(), Some(Nfsstat4::NFS4ERR_INVAL));
        let f = FileAttrs {
            mode: Some(0o600),
            size: Some(0),
            ..Default::default()
        }
        .to_fattr4(&supported());
        let (s, m) = to_sattr(&f).unwrap();
        assert_eq!((s.mode, s.size), (Some(0o600), Some(0)));
        assert_eq!(m, Bitmap4::from_bits(&[FATTR4_SIZE, FATTR4_MODE]));
    }
}
