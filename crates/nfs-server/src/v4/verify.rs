//! VERIFY and NVERIFY (RFC 8881 §18.31, §18.15): the attributes a client
//! sends compared with the server's values of the same attributes.
//!
//! The comparison is of values, not bytes: both sides go through the one
//! attribute codec ([`FileAttrs`]), and bitmaps inside values
//! (`supported_attrs`, `suppattr_exclcreat`) are compared without their
//! trailing zero words, so two encodings of the same value are the same.

use nfs::v4::attr::*;
use nfs::v4::{Nfsstat4, Verify4Args};

use super::attrs::{file_attrs, st4, wants_fsstat};
use super::fileops::cur;
use super::{Cx, Nfs4Service};
use crate::storage::Storage;

type R<T> = Result<T, Nfsstat4>;

/// RFC 8881 §18.31.3, §18.15.3: `rdattr_error` and the write-only
/// attributes cannot be compared (NFS4ERR_INVAL).
fn check_mask(mask: &Bitmap4) -> R<()> {
    let refused = [
        FATTR4_RDATTR_ERROR,
        FATTR4_TIME_ACCESS_SET,
        FATTR4_TIME_MODIFY_SET,
    ];
    if refused.iter().any(|&n| mask.contains(n)) {
        return Err(Nfsstat4::NFS4ERR_INVAL);
    }
    Ok(())
}

/// `a` with the bitmaps inside it trimmed, so equal values compare equal.
fn canonical(mut a: FileAttrs) -> FileAttrs {
    for b in [&mut a.supported_attrs, &mut a.suppattr_exclcreat]
        .into_iter()
        .flatten()
    {
        b.trim();
    }
    a
}

/// Whether the client's `fattr4` holds the same values as `server` for
/// every attribute it names. An attribute the server does not support
/// (or has no value for) is NFS4ERR_ATTRNOTSUPP, values that do not
/// decode NFS4ERR_BADXDR (RFC 8881 §18.31.3).
pub(super) fn same_attrs(client: &Fattr4, server: &FileAttrs) -> R<bool> {
    check_mask(&client.attrmask)?;
    let theirs = FileAttrs::from_fattr4(client).map_err(|e| e.status())?;
    let mut mask = client.attrmask.clone();
    mask.trim();
    let ours = server.to_fattr4(&mask);
    let mut got = ours.attrmask.clone();
    got.trim();
    if got != mask {
        return Err(Nfsstat4::NFS4ERR_ATTRNOTSUPP);
    }
    let ours = FileAttrs::from_fattr4(&ours).map_err(|_| Nfsstat4::NFS4ERR_SERVERFAULT)?;
    Ok(canonical(theirs) == canonical(ours))
}

impl<S: Storage> Nfs4Service<S> {
    /// VERIFY (RFC 8881 §18.31.3: NFS4ERR_NOT_SAME when any attribute
    /// differs) and NVERIFY (§18.15.3: NFS4ERR_SAME when all are the
    /// same); the current file handle stays.
    pub(super) async fn verify(&self, a: &Verify4Args, cx: &Cx, negate: bool) -> R<()> {
        check_mask(&a.obj_attributes.attrmask)?;
        let fh = cur(cx)?;
        let attr = self.attr(&fh).await?;
        let fsstat = if wants_fsstat(&a.obj_attributes.attrmask) {
            Some(self.fs.fsstat(&fh).await.map_err(st4)?)
        } else {
            None
        };
        let mut server = file_attrs(&attr, &fh, fsstat, self.lease_secs());
        self.fs.fix_attrs(&fh, &mut server);
        self.pnfs_attrs(&mut server);
        match (same_attrs(&a.obj_attributes, &server)?, negate) {
            (true, false) | (false, true) => Ok(()),
            (false, false) => Err(Nfsstat4::NFS4ERR_NOT_SAME),
            (true, true) => Err(Nfsstat4::NFS4ERR_SAME),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn server() -> FileAttrs {
        FileAttrs {
            supported_attrs: Some(Bitmap4::from_bits(&[0, 1, 4, 33])),
            size: Some(10),
            mode: Some(0o644),
            fileid: Some(7),
            ..FileAttrs::default()
        }
    }

    fn fattr(a: FileAttrs) -> Fattr4 {
        a.to_fattr4(&a.mask())
    }

    /// RFC 8881 §18.31.3: equal values are the same, one differing value
    /// makes the whole set differ.
    #[test]
    fn compares_values_of_the_named_attributes() {
        let same = fattr(FileAttrs {
            size: Some(10),
            mode: Some(0o644),
            ..FileAttrs::default()
        });
        assert_eq!(same_attrs(&same, &server()), Ok(true));
        let differs = fattr(FileAttrs {
            size: Some(10),
            mode: Some(0o600),
            ..FileAttrs::default()
        });
        assert_eq!(same_attrs(&differs, &server()), Ok(false));
    }

    /// Trailing zero words, in the mask or in a bitmap value, do not make
    /// equal values differ.
    #[test]
    fn bitmaps_compare_without_trailing_zero_words() {
        let mut sup = Bitmap4::from_bits(&[0, 1, 4, 33]);
        sup.0.push(0);
        let mut f = fattr(FileAttrs {
            supported_attrs: Some(sup),
            ..FileAttrs::default()
        });
        f.attrmask.0.extend([0, 0]);
        assert_eq!(same_attrs(&f, &server()), Ok(true));
    }

    /// RFC 8881 §18.31.3: rdattr_error and write-only attributes are
    /// NFS4ERR_INVAL; one the server does not support is
    /// NFS4ERR_ATTRNOTSUPP; values that do not decode NFS4ERR_BADXDR.
    #[test]
    fn refuses_what_cannot_be_compared() {
        for n in [
            FATTR4_RDATTR_ERROR,
            FATTR4_TIME_ACCESS_SET,
            FATTR4_TIME_MODIFY_SET,
        ] {
            let f = Fattr4 {
                attrmask: Bitmap4::from_bits(&[n]),
                attr_vals: xdr::Bounded(Bytes::from_static(&[0; 16])),
            };
            assert_eq!(same_attrs(&f, &server()), Err(Nfsstat4::NFS4ERR_INVAL));
        }
        let acl = Fattr4 {
            attrmask: Bitmap4::from_bits(&[12]), // acl
            attr_vals: xdr::Bounded(Bytes::from_static(&[0; 4])),
        };
        assert_eq!(
            same_attrs(&acl, &server()),
            Err(Nfsstat4::NFS4ERR_ATTRNOTSUPP)
        );
        let absent = fattr(FileAttrs {
            owner: Some(xdr::Bounded(Bytes::from_static(b"0"))),
            ..FileAttrs::default()
        });
        assert_eq!(
            same_attrs(&absent, &server()),
            Err(Nfsstat4::NFS4ERR_ATTRNOTSUPP)
        );
        let short = Fattr4 {
            attrmask: Bitmap4::from_bits(&[FATTR4_SIZE]),
            attr_vals: xdr::Bounded(Bytes::from_static(&[0; 4])),
        };
        assert_eq!(same_attrs(&short, &server()), Err(Nfsstat4::NFS4ERR_BADXDR));
    }
}
