//! The operations a POSIX file system over a [`Session`] needs beyond
//! [`super::fs`]: each object operation returns the object's attributes
//! from a GETATTR in the same COMPOUND (RFC 8881 §16.2), as the Linux
//! client asks them, so a FUSE reply costs one round trip.

use bytes::Bytes;
use nfs::v4::attr::{
    Bitmap4, FileAttrs, SetTime4, FATTR4_FILES_AVAIL, FATTR4_FILES_FREE, FATTR4_FILES_TOTAL,
    FATTR4_LEASE_TIME, FATTR4_MODE, FATTR4_OWNER, FATTR4_OWNER_GROUP, FATTR4_SIZE,
    FATTR4_SPACE_AVAIL, FATTR4_SPACE_FREE, FATTR4_SPACE_TOTAL, FATTR4_TIME_ACCESS_SET,
    FATTR4_TIME_MODIFY_SET,
};
use nfs::v4::{
    Access4Args, Create4Args, Createhow4, Createtype4, Delegreturn4Args, Getattr4Args, Link4Args,
    Lookup4Args, NfsArgop4, NfsFh4, NfsResop4, Open4Args, OpenClaim4, OpenDelegation4, OpenHow4,
    Res4, Setattr4Args, StateOwner4, Stateid4, OPEN4_SHARE_DENY_NONE,
};
use oncrpc::ClientTransport;
use xdr::Bounded;

use super::deleg::Delegation;
use super::error::{Error, Result};
use super::fs::{component, last_fh, putfh, Attrs, OpenFile};
use super::session::Session;

/// OPEN4_SHARE_ACCESS_WANT_NO_DELEG (RFC 8881 §18.16.3): the client
/// wants no delegation (a session without a back channel to be recalled
/// on).
pub const OPEN4_SHARE_ACCESS_WANT_NO_DELEG: u32 = 0x0400;

/// What [`Session::setattr`] changes (RFC 8881 §18.30); `None` leaves
/// an attribute as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetAttrs {
    /// `mode` (§6.2.4).
    pub mode: Option<u32>,
    /// `owner` as a uid (sent as its decimal string, §5.9).
    pub uid: Option<u32>,
    /// `owner_group` as a gid (likewise).
    pub gid: Option<u32>,
    /// `size` (§5.8.1.5).
    pub size: Option<u64>,
    /// `time_access_set` (§5.8.2.33).
    pub atime: Option<SetTime4>,
    /// `time_modify_set` (§5.8.2.39).
    pub mtime: Option<SetTime4>,
}

impl SetAttrs {
    fn to_fattr4(&self) -> nfs::v4::attr::Fattr4 {
        let id = |n: Option<u32>| n.map(|n| Bounded(Bytes::from(n.to_string())));
        let a = FileAttrs {
            mode: self.mode,
            owner: id(self.uid),
            owner_group: id(self.gid),
            size: self.size,
            time_access_set: self.atime,
            time_modify_set: self.mtime,
            ..FileAttrs::default()
        };
        a.to_fattr4(&Bitmap4::from_bits(&[
            FATTR4_SIZE,
            FATTR4_MODE,
            FATTR4_OWNER,
            FATTR4_OWNER_GROUP,
            FATTR4_TIME_ACCESS_SET,
            FATTR4_TIME_MODIFY_SET,
        ]))
    }
}

/// File system figures for `statfs` (RFC 8881 §5.8.2.8–10, 27–29).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FsStats {
    /// Bytes available to this user.
    pub space_avail: u64,
    /// Bytes free.
    pub space_free: u64,
    /// Bytes in all.
    pub space_total: u64,
    /// Files available to this user.
    pub files_avail: u64,
    /// Files free.
    pub files_free: u64,
    /// Files in all.
    pub files_total: u64,
}

/// How [`Session::open_at`] creates a file (RFC 8881 §18.16.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Create {
    /// UNCHECKED4 with this mode: an existing file is opened.
    Unchecked(u32),
    /// GUARDED4 with this mode: NFS4ERR_EXIST if it exists (`O_EXCL`).
    Guarded(u32),
}

fn getattr() -> NfsArgop4 {
    NfsArgop4::Getattr(Getattr4Args {
        attr_request: Attrs::request(),
    })
}

/// The attributes of the last GETATTR in `res`.
fn last_attrs(res: &[NfsResop4]) -> Result<Attrs> {
    res.iter()
        .rev()
        .find_map(|r| match r {
            NfsResop4::Getattr(Res4::Ok(g)) => Some(Attrs::from_fattr4(&g.obj_attributes)),
            _ => None,
        })
        .ok_or(Error::Protocol("GETATTR result missing"))?
}

/// The delegation the OPEN in `res` granted (RFC 8881 §18.16.2).
fn granted(res: &[NfsResop4]) -> Option<Delegation> {
    res.iter().find_map(|r| match r {
        NfsResop4::Open(Res4::Ok(o)) => match o.delegation {
            OpenDelegation4::Read(stateid, ..) => Some(Delegation {
                stateid,
                write: false,
            }),
            OpenDelegation4::Write(stateid, ..) => Some(Delegation {
                stateid,
                write: true,
            }),
            _ => None,
        },
        _ => None,
    })
}

/// The open stateid of the OPEN in `res`.
pub(super) fn open_stateid(res: &[NfsResop4]) -> Result<Stateid4> {
    res.iter()
        .find_map(|r| match r {
            NfsResop4::Open(Res4::Ok(o)) => Some(o.stateid),
            _ => None,
        })
        .ok_or(Error::Protocol("OPEN result missing"))
}

impl<T: ClientTransport> Session<T> {
    /// LOOKUP of `name` in `dir` (RFC 8881 §18.13) with the object's
    /// handle and attributes.
    pub async fn lookup_attrs(&self, dir: &NfsFh4, name: &[u8]) -> Result<(NfsFh4, Attrs)> {
        let ops = vec![
            putfh(dir),
            NfsArgop4::Lookup(Lookup4Args {
                objname: component(name)?,
            }),
            NfsArgop4::Getfh(()),
            getattr(),
        ];
        let res = self.compound(ops).await?;
        let a = last_attrs(&res)?;
        Ok((last_fh(res)?, a))
    }

    /// ACCESS (RFC 8881 §18.1) of `bits` on `fh`: the bits granted, and
    /// the object's attributes.
    pub async fn access(&self, fh: &NfsFh4, bits: u32) -> Result<(u32, Attrs)> {
        let ops = vec![
            putfh(fh),
            NfsArgop4::Access(Access4Args { access: bits }),
            getattr(),
        ];
        let res = self.compound(ops).await?;
        let granted = res
            .iter()
            .find_map(|r| match r {
                NfsResop4::Access(Res4::Ok(a)) => Some(a.access & a.supported),
                _ => None,
            })
            .ok_or(Error::Protocol("ACCESS result missing"))?;
        Ok((granted, last_attrs(&res)?))
    }

    /// SETATTR (RFC 8881 §18.30) of `s` on `fh`, with `stateid` (an
    /// open stateid for a size change, else the anonymous one), and the
    /// attributes after.
    pub async fn setattr(&self, fh: &NfsFh4, stateid: Stateid4, s: &SetAttrs) -> Result<Attrs> {
        let ops = vec![
            putfh(fh),
            NfsArgop4::Setattr(Setattr4Args {
                stateid,
                obj_attributes: s.to_fattr4(),
            }),
            getattr(),
        ];
        last_attrs(&self.compound(ops).await?)
    }

    /// READLINK (RFC 8881 §18.24).
    pub async fn readlink(&self, fh: &NfsFh4) -> Result<Bytes> {
        match self
            .compound(vec![putfh(fh), NfsArgop4::Readlink(())])
            .await?
            .pop()
        {
            Some(NfsResop4::Readlink(Res4::Ok(r))) => Ok(r.link.0),
            _ => Err(Error::Protocol("READLINK result missing")),
        }
    }

    /// CREATE (RFC 8881 §18.4) of a non-regular object `name` in `dir`
    /// (directory, symbolic link, device, socket or FIFO) with `mode`:
    /// its handle and attributes.
    pub async fn create_object(
        &self,
        dir: &NfsFh4,
        name: &[u8],
        objtype: Createtype4,
        mode: u32,
    ) -> Result<(NfsFh4, Attrs)> {
        let attrs = FileAttrs {
            mode: Some(mode),
            ..FileAttrs::default()
        };
        let ops = vec![
            putfh(dir),
            NfsArgop4::Create(Create4Args {
                objtype,
                objname: component(name)?,
                createattrs: attrs.to_fattr4(&Bitmap4::from_bits(&[FATTR4_MODE])),
            }),
            NfsArgop4::Getfh(()),
            getattr(),
        ];
        let res = self.compound(ops).await?;
        let a = last_attrs(&res)?;
        Ok((last_fh(res)?, a))
    }

    /// LINK (RFC 8881 §18.9) of `fh` as `name` in `dir` (the saved
    /// handle is the source): the file's attributes after.
    pub async fn link(&self, fh: &NfsFh4, dir: &NfsFh4, name: &[u8]) -> Result<Attrs> {
        let ops = vec![
            putfh(fh),
            NfsArgop4::Savefh(()),
            putfh(dir),
            NfsArgop4::Link(Link4Args {
                newname: component(name)?,
            }),
            NfsArgop4::Restorefh(()),
            getattr(),
        ];
        last_attrs(&self.compound(ops).await?)
    }

    /// OPEN of the file `fh` with CLAIM_FH (RFC 8881 §18.16.1) for
    /// `share_access`, with a fresh open owner: the open stateid and the
    /// attributes (close-to-open consistency, §10.3.1, revalidates on
    /// them). A delegation the server grants is returned at once.
    pub async fn open_fh(&self, fh: &NfsFh4, share_access: u32) -> Result<(OpenFile, Attrs)> {
        let (file, a, d) = self.open_fh_deleg(fh, share_access).await?;
        self.return_unwanted(&file.fh, d).await;
        Ok((file, a))
    }

    /// Like [`Session::open_fh`], with the delegation the server granted
    /// (RFC 8881 §10.4; only with a back channel,
    /// [`Session::has_back_channel`]), which the caller now holds.
    pub async fn open_fh_deleg(
        &self,
        fh: &NfsFh4,
        share_access: u32,
    ) -> Result<(OpenFile, Attrs, Option<Delegation>)> {
        let claim = OpenClaim4::Fh;
        self.open_claim(fh, share_access, claim).await
    }

    /// OPEN of the file `fh` with CLAIM_DELEG_CUR_FH (RFC 8881 §18.16.1,
    /// §10.4.3): an open this client served locally under delegation `d`
    /// made real on the server, before the delegation is returned.
    pub async fn open_deleg_cur(
        &self,
        fh: &NfsFh4,
        share_access: u32,
        d: &Stateid4,
    ) -> Result<(OpenFile, Attrs)> {
        let claim = OpenClaim4::DelegCurFh(*d);
        let (file, a, got) = self.open_claim(fh, share_access, claim).await?;
        self.return_unwanted(fh, got).await;
        Ok((file, a))
    }

    async fn open_claim(
        &self,
        fh: &NfsFh4,
        share_access: u32,
        claim: OpenClaim4,
    ) -> Result<(OpenFile, Attrs, Option<Delegation>)> {
        let ops = vec![
            putfh(fh),
            self.open_op(share_access, OpenHow4(None), claim),
            getattr(),
        ];
        let res = self.compound(ops).await?;
        let file = OpenFile {
            fh: fh.clone(),
            stateid: open_stateid(&res)?,
        };
        Ok((file, last_attrs(&res)?, granted(&res)))
    }

    /// DELEGRETURN of delegation `d` of file `fh` (RFC 8881 §18.6).
    pub async fn delegreturn(&self, fh: &NfsFh4, d: &Stateid4) -> Result<()> {
        let ops = vec![
            putfh(fh),
            NfsArgop4::Delegreturn(Delegreturn4Args { deleg_stateid: *d }),
        ];
        self.compound(ops).await.map(drop)
    }

    /// Returns a delegation the caller does not keep (best effort: one
    /// not returned is recalled or revoked by the server later).
    async fn return_unwanted(&self, fh: &NfsFh4, d: Option<Delegation>) {
        if let Some(d) = d {
            if let Err(e) = self.delegreturn(fh, &d.stateid).await {
                tracing::debug!(error = %e, "returning an unwanted delegation failed");
            }
        }
    }

    /// OPEN of `name` in `dir` with CLAIM_NULL, creating it as `how`
    /// says (RFC 8881 §18.16.1): the open file and its attributes. A
    /// delegation the server grants is returned at once.
    pub async fn open_at(
        &self,
        dir: &NfsFh4,
        name: &[u8],
        share_access: u32,
        how: Create,
    ) -> Result<(OpenFile, Attrs)> {
        let (file, a, d) = self.open_at_deleg(dir, name, share_access, how).await?;
        self.return_unwanted(&file.fh, d).await;
        Ok((file, a))
    }

    /// Like [`Session::open_at`], with the delegation granted, which the
    /// caller now holds.
    pub async fn open_at_deleg(
        &self,
        dir: &NfsFh4,
        name: &[u8],
        share_access: u32,
        how: Create,
    ) -> Result<(OpenFile, Attrs, Option<Delegation>)> {
        let mode_attrs = |mode| {
            let a = FileAttrs {
                mode: Some(mode),
                ..FileAttrs::default()
            };
            a.to_fattr4(&Bitmap4::from_bits(&[FATTR4_MODE]))
        };
        let createhow = match how {
            Create::Unchecked(m) => Createhow4::Unchecked(mode_attrs(m)),
            Create::Guarded(m) => Createhow4::Guarded(mode_attrs(m)),
        };
        let claim = OpenClaim4::Null(component(name)?);
        let ops = vec![
            putfh(dir),
            self.open_op(share_access, OpenHow4(Some(createhow)), claim),
            NfsArgop4::Getfh(()),
            getattr(),
        ];
        let res = self.compound(ops).await?;
        let stateid = open_stateid(&res)?;
        let a = last_attrs(&res)?;
        let d = granted(&res);
        let file = OpenFile {
            fh: last_fh(res)?,
            stateid,
        };
        Ok((file, a, d))
    }

    pub(super) fn open_op(
        &self,
        share_access: u32,
        openhow: OpenHow4,
        claim: OpenClaim4,
    ) -> NfsArgop4 {
        NfsArgop4::Open(Open4Args {
            seqid: 0,
            share_access: if self.has_back_channel() {
                share_access
            } else {
                share_access | OPEN4_SHARE_ACCESS_WANT_NO_DELEG
            },
            share_deny: OPEN4_SHARE_DENY_NONE,
            owner: StateOwner4 {
                clientid: self.clientid(),
                owner: Bounded(self.next_open_owner()),
            },
            openhow,
            claim,
        })
    }

    /// The server's lease time in seconds (`lease_time`, RFC 8881
    /// §5.8.1.11): the client renews its lease within it (§8.3).
    pub async fn lease_time(&self, fh: &NfsFh4) -> Result<u32> {
        let ops = vec![
            putfh(fh),
            NfsArgop4::Getattr(Getattr4Args {
                attr_request: Bitmap4::from_bits(&[FATTR4_LEASE_TIME]),
            }),
        ];
        let Some(NfsResop4::Getattr(Res4::Ok(g))) = self.compound(ops).await?.pop() else {
            return Err(Error::Protocol("GETATTR result missing"));
        };
        FileAttrs::from_fattr4(&g.obj_attributes)?
            .lease_time
            .ok_or(Error::Protocol("GETATTR without lease_time"))
    }

    /// Space and file counts of `fh`'s file system (GETATTR, RFC 8881
    /// §5.8.2); what the server leaves out is 0.
    pub async fn statfs(&self, fh: &NfsFh4) -> Result<FsStats> {
        let ops = vec![
            putfh(fh),
            NfsArgop4::Getattr(Getattr4Args {
                attr_request: Bitmap4::from_bits(&[
                    FATTR4_FILES_AVAIL,
                    FATTR4_FILES_FREE,
                    FATTR4_FILES_TOTAL,
                    FATTR4_SPACE_AVAIL,
                    FATTR4_SPACE_FREE,
                    FATTR4_SPACE_TOTAL,
                ]),
            }),
        ];
        let Some(NfsResop4::Getattr(Res4::Ok(g))) = self.compound(ops).await?.pop() else {
            return Err(Error::Protocol("GETATTR result missing"));
        };
        let a = FileAttrs::from_fattr4(&g.obj_attributes)?;
        Ok(FsStats {
            space_avail: a.space_avail.unwrap_or(0),
            space_free: a.space_free.unwrap_or(0),
            space_total: a.space_total.unwrap_or(0),
            files_avail: a.files_avail.unwrap_or(0),
            files_free: a.files_free.unwrap_or(0),
            files_total: a.files_total.unwrap_or(0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setattr_sends_ids_as_decimal_strings_and_only_what_changes() {
        let s = SetAttrs {
            mode: Some(0o640),
            uid: Some(41001),
            size: Some(0),
            ..SetAttrs::default()
        };
        let f = s.to_fattr4();
        let back = FileAttrs::from_fattr4(&f).unwrap();
        assert_eq!(back.mode, Some(0o640));
        assert_eq!(back.size, Some(0));
        assert_eq!(back.owner.map(|o| o.0), Some(Bytes::from_static(b"41001")));
        assert_eq!(back.owner_group, None);
        assert_eq!(back.time_modify_set, None);
        let bits: Vec<u32> = f.attrmask.iter().collect();
        assert_eq!(bits, [FATTR4_SIZE, FATTR4_MODE, FATTR4_OWNER]);
    }
}
