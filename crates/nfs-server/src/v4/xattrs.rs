//! The NFSv4.2 extended attribute operations GETXATTR, SETXATTR,
//! LISTXATTRS and REMOVEXATTR (RFC 8276 §8.4) on the storage's user
//! attributes ([`Storage::getxattr`] and the like).
//!
//! Bounds (RFC 8276 §8.4 leaves them to the server): a name is at most
//! 250 bytes (`user.` and the name within Linux's 255-byte
//! `XATTR_NAME_MAX`; NFS4ERR_NAMETOOLONG beyond), a value at most
//! [`XATTR_SIZE_MAX`] (64 KiB, NFS4ERR_XATTR2BIG beyond), each refusal
//! counted and logged by a [`Limit`]. Reading needs read permission,
//! changing write permission (the ACCESS4_XAREAD/XAWRITE rights, RFC 8276
//! §8.3); a change recalls another client's delegation of the file (RFC
//! 8881 §10.4.1) and moves the file's change attribute (its ctime).

use bytes::Bytes;
use nfs::v3::{ACCESS3_MODIFY, ACCESS3_READ};
use nfs::v4::*;
use oncrpc::limits::Limit;
use xdr::Bounded;

use super::attrs::st4;
use super::fileops::{cinfo, cur, key};
use super::{Cx, Nfs4Service};
use crate::storage::{Storage, XattrError, XattrSet};

type R<T> = Result<T, Nfsstat4>;

/// Longest NFS attribute name: `user.` and it fit Linux's 255 bytes.
pub(crate) const MAX_XATTR_NAME: usize = 250;

static NAME_LEN: Limit = Limit::new("nfs4.xattr_name_len");
static VALUE_SIZE: Limit = Limit::new("nfs4.xattr_value_size");

/// What SETXATTR or REMOVEXATTR does.
enum Change<'a> {
    Set(&'a [u8], &'a [u8], XattrSet),
    Remove(&'a [u8]),
}

/// The NFSv4 status of a storage xattr error (RFC 8276 §8.4).
fn x4(e: XattrError) -> Nfsstat4 {
    match e {
        XattrError::NoAttr => Nfsstat4::NFS4ERR_NOXATTR,
        XattrError::Exists => Nfsstat4::NFS4ERR_EXIST,
        XattrError::TooBig => Nfsstat4::NFS4ERR_XATTR2BIG,
        XattrError::Other(s) => st4(s),
    }
}

/// An attribute name (`xattrkey4`, a `component4`: RFC 8276 §8.3) checked
/// as UTF-8 and against [`MAX_XATTR_NAME`].
fn xname(c: &Component4) -> R<Bytes> {
    c.check()?;
    if c.0.len() > MAX_XATTR_NAME {
        NAME_LEN.trip(format_args!(
            "xattr name of {} bytes refused (max {MAX_XATTR_NAME})",
            c.0.len()
        ));
        return Err(Nfsstat4::NFS4ERR_NAMETOOLONG);
    }
    Ok(c.0.clone())
}

/// One LISTXATTRS page (RFC 8276 §8.4.3): the names after `cookie` (the
/// number of names the client has had; NFS4ERR_BAD_COOKIE past the end)
/// that fit `limit` bytes of LISTXATTRS4resok, at most
/// [`MAX_XATTR_NAMES`]; NFS4ERR_TOOSMALL when not even one fits.
pub(crate) fn list_page(names: &[Bytes], cookie: u64, limit: usize) -> R<Listxattrs4ResOk> {
    let start = usize::try_from(cookie)
        .ok()
        .filter(|&s| s <= names.len())
        .ok_or(Nfsstat4::NFS4ERR_BAD_COOKIE)?;
    // cookie, the array's count, eof.
    let mut size = 8 + 4 + 4;
    if size > limit {
        return Err(Nfsstat4::NFS4ERR_TOOSMALL);
    }
    let mut out = Vec::new();
    for n in &names[start..] {
        let len = 4 + xdr::padded_len(n.len());
        if size + len > limit || out.len() == MAX_XATTR_NAMES {
            break;
        }
        size += len;
        out.push(Component4(n.clone()));
    }
    let next = start + out.len();
    if out.is_empty() && next < names.len() {
        return Err(Nfsstat4::NFS4ERR_TOOSMALL);
    }
    Ok(Listxattrs4ResOk {
        cookie: next as u64,
        names: Bounded(out),
        eof: next == names.len(),
    })
}

impl<S: Storage> Nfs4Service<S> {
    /// Reply bytes an operation's result may take in this session.
    fn reply_room(cx: &Cx) -> usize {
        cx.sess
            .map(|s| s.max_response.saturating_sub(512) as usize)
            .unwrap_or(usize::MAX)
    }

    /// GETXATTR (RFC 8276 §8.4.1): NFS4ERR_NOXATTR when absent,
    /// NFS4ERR_XATTR2BIG when the value does not fit the reply.
    pub(super) async fn getxattr(&self, a: &Xattrkey4Args, cx: &Cx) -> R<Getxattr4ResOk> {
        let fh = cur(cx)?;
        let name = xname(&a.name)?;
        let attr = self.attr(&fh).await?;
        self.allow(&attr, cx, ACCESS3_READ, false)?;
        let room = Self::reply_room(cx).saturating_sub(8);
        let value = self.fs.getxattr(&fh, &name, room).await.map_err(x4)?;
        Ok(Getxattr4ResOk {
            value: Bounded(value),
        })
    }

    /// SETXATTR (RFC 8276 §8.4.2): SETXATTR4_CREATE on an existing
    /// attribute is NFS4ERR_EXIST, SETXATTR4_REPLACE on a missing one
    /// NFS4ERR_NOXATTR; the change info is the file's.
    pub(super) async fn setxattr(&self, a: &Setxattr4Args, cx: &Cx) -> R<Cinfo4ResOk> {
        let name = xname(&a.key)?;
        let how = match a.option {
            SetxattrOption4::SETXATTR4_EITHER => XattrSet::Either,
            SetxattrOption4::SETXATTR4_CREATE => XattrSet::Create,
            SetxattrOption4::SETXATTR4_REPLACE => XattrSet::Replace,
            _ => return Err(Nfsstat4::NFS4ERR_INVAL),
        };
        if a.value.0.len() > XATTR_SIZE_MAX {
            VALUE_SIZE.trip(format_args!(
                "xattr value of {} bytes refused (max {XATTR_SIZE_MAX})",
                a.value.0.len()
            ));
            return Err(Nfsstat4::NFS4ERR_XATTR2BIG);
        }
        self.xattr_change(cx, Change::Set(&name, &a.value.0, how))
            .await
    }

    /// REMOVEXATTR (RFC 8276 §8.4.4): NFS4ERR_NOXATTR when absent.
    pub(super) async fn removexattr(&self, a: &Xattrkey4Args, cx: &Cx) -> R<Cinfo4ResOk> {
        let name = xname(&a.name)?;
        self.xattr_change(cx, Change::Remove(&name)).await
    }

    /// A change of the current file's attributes: write permission, the
    /// delegations of other clients recalled first, change info around.
    async fn xattr_change(&self, cx: &Cx, change: Change<'_>) -> R<Cinfo4ResOk> {
        let fh = cur(cx)?;
        let before = self.attr(&fh).await?;
        self.allow(&before, cx, ACCESS3_MODIFY, false)?;
        self.deleg_conflict(&fh, cx, true)?;
        let own = self.watch.changing(&key(&fh));
        let r = match change {
            Change::Set(name, value, how) => self.fs.setxattr(&fh, name, value, how).await,
            Change::Remove(name) => self.fs.removexattr(&fh, name).await,
        };
        drop(own);
        r.map_err(x4)?;
        let after = self.attr(&fh).await?;
        Ok(Cinfo4ResOk {
            cinfo: cinfo(&before, &after),
        })
    }

    /// LISTXATTRS (RFC 8276 §8.4.3): pages of names within `lxa_maxcount`
    /// and the session's reply size.
    pub(super) async fn listxattrs(&self, a: &Listxattrs4Args, cx: &Cx) -> R<Listxattrs4ResOk> {
        let fh = cur(cx)?;
        self.attr(&fh).await?;
        let names = self.fs.listxattrs(&fh).await.map_err(x4)?;
        let limit = Self::reply_room(cx).min(a.maxcount as usize);
        list_page(&names, a.cookie, limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<Bytes> {
        (0..n).map(|i| Bytes::from(format!("name{i:04}"))).collect()
    }

    #[test]
    fn pages_follow_the_cookie_and_maxcount() {
        let all = names(10);
        // 16 bytes of frame, 12 per name (8 bytes and their length).
        let p = list_page(&all, 0, 16 + 3 * 12).unwrap();
        assert_eq!(p.names.0.len(), 3);
        assert_eq!((p.cookie, p.eof), (3, false));
        let p = list_page(&all, p.cookie, 1 << 20).unwrap();
        assert_eq!(p.names.0.len(), 7);
        assert_eq!(&p.names.0[0].0[..], b"name0003");
        assert_eq!((p.cookie, p.eof), (10, true));
        let p = list_page(&all, 10, 16).unwrap();
        assert!(p.names.0.is_empty() && p.eof);
    }

    #[test]
    fn too_small_and_bad_cookies_are_refused() {
        let all = names(2);
        assert_eq!(
            list_page(&all, 0, 16 + 11).unwrap_err(),
            Nfsstat4::NFS4ERR_TOOSMALL
        );
        assert_eq!(
            list_page(&all, 0, 15).unwrap_err(),
            Nfsstat4::NFS4ERR_TOOSMALL
        );
        assert_eq!(
            list_page(&all, 3, 4096).unwrap_err(),
            Nfsstat4::NFS4ERR_BAD_COOKIE
        );
        assert_eq!(
            list_page(&all, u64::MAX, 4096).unwrap_err(),
            Nfsstat4::NFS4ERR_BAD_COOKIE
        );
    }

    #[test]
    fn a_page_holds_at_most_the_decodable_count() {
        let all: Vec<Bytes> = (0..MAX_XATTR_NAMES + 5)
            .map(|i| Bytes::from(i.to_string()))
            .collect();
        let p = list_page(&all, 0, usize::MAX).unwrap();
        assert_eq!(p.names.0.len(), MAX_XATTR_NAMES);
        assert!(!p.eof);
    }
}
