//! The file-system operations of a COMPOUND (RFC 8881 §18) on
//! [`LocalFs`](crate::LocalFs), and the dispatch of every operation.

use std::time::Duration;

use bytes::Bytes;
use nfs::v3::{
    Fattr3, Filename3, Ftype3, Mknoddata3, NfsFh3, Sattr3, Specdata3, ACCESS3_LOOKUP,
    ACCESS3_MODIFY, ACCESS3_READ,
};
use nfs::v4::attr::*;
use nfs::v4::session::SecinfoStyle4;
use nfs::v4::*;
use xdr::{Bounded, Encode, FixedOpaque};

use super::attrs::{change_of, file_attrs, st4, to_sattr, wants_fsstat};
use super::{Cx, Nfs4Service};
use crate::perm::{access_bits, check_setattr, permits, DIR_ADD, DIR_REMOVE};
use crate::storage::{DirEntry, DirRequest, DirSink, Storage, StorageResult, PLUS_TO_DIRENT};

type R<T> = Result<T, Nfsstat4>;

pub(super) fn cur(cx: &Cx) -> R<NfsFh3> {
    cx.cur.clone().ok_or(Nfsstat4::NFS4ERR_NOFILEHANDLE)
}

pub(super) use super::coherence::key;

pub(super) fn name3(c: &Component4) -> R<Filename3> {
    c.check()?;
    Ok(Filename3(c.0.clone()))
}

pub(super) fn cinfo(before: &Fattr3, after: &Fattr3) -> ChangeInfo4 {
    ChangeInfo4 {
        atomic: false,
        before: change_of(before),
        after: change_of(after),
    }
}

/// RFC 8881 §16.2.3.1.2: the special "current stateid".
pub(super) fn resolve_sid(cx: &Cx, sid: &Stateid4) -> R<Stateid4> {
    if *sid == Stateid4::CURRENT {
        cx.cur_sid.ok_or(Nfsstat4::NFS4ERR_BAD_STATEID)
    } else {
        Ok(*sid)
    }
}

fn status(r: R<()>) -> Nfsstat4 {
    match r {
        Ok(()) => Nfsstat4::NFS4_OK,
        Err(e) => e,
    }
}

/// The sink of an NFSv4 READDIR page: the access check (read permission
/// on the directory, as NFSv3's READDIR, RFC 1813 §3.3.16) and the
/// cookies no directory hands out (1 and 2, §18.23.3) on the directory's
/// attributes as the storage opens it, in the page's own blocking
/// section, then each entry to `entries`.
struct Checked<'c, F> {
    caller: &'c crate::perm::Caller,
    cookie: u64,
    /// Whether the storage handed the directory's attributes.
    checked: bool,
    entries: F,
}

impl<F> Checked<'_, F> {
    /// NFS3ERR_BAD_COOKIE (the same number as NFS4ERR_BAD_COOKIE) for
    /// the cookies reserved for "." and "..".
    fn cookie_ok(cookie: u64) -> StorageResult<()> {
        match cookie {
            1 | 2 => Err(nfs::v3::Nfsstat3::NFS3ERR_BAD_COOKIE),
            _ => Ok(()),
        }
    }
}

impl<F: FnMut(DirEntry<'_>) -> bool + Send> DirSink for Checked<'_, F> {
    fn dir(&mut self, attrs: &Fattr3) -> StorageResult<()> {
        self.checked = true;
        if !permits(attrs, self.caller, ACCESS3_READ, false) {
            return Err(nfs::v3::Nfsstat3::NFS3ERR_ACCES);
        }
        Self::cookie_ok(self.cookie)
    }

    fn entry(&mut self, e: DirEntry<'_>) -> bool {
        (self.entries)(e)
    }
}

impl<S: Storage> Nfs4Service<S> {
    pub(super) async fn attr(&self, fh: &NfsFh3) -> R<Fattr3> {
        self.fs.getattr(fh).await.map_err(st4)
    }

    /// A directory, or NFS4ERR_SYMLINK / NFS4ERR_NOTDIR.
    pub(super) async fn dir(&self, fh: &NfsFh3) -> R<Fattr3> {
        let a = self.attr(fh).await?;
        match a.ftype {
            Ftype3::NF3DIR => Ok(a),
            Ftype3::NF3LNK => Err(Nfsstat4::NFS4ERR_SYMLINK),
            _ => Err(Nfsstat4::NFS4ERR_NOTDIR),
        }
    }

    /// A regular file, or NFS4ERR_ISDIR / NFS4ERR_SYMLINK / NFS4ERR_INVAL.
    pub(super) async fn regular(&self, fh: &NfsFh3) -> R<Fattr3> {
        let a = self.attr(fh).await?;
        match a.ftype {
            Ftype3::NF3REG => Ok(a),
            Ftype3::NF3DIR => Err(Nfsstat4::NFS4ERR_ISDIR),
            Ftype3::NF3LNK => Err(Nfsstat4::NFS4ERR_SYMLINK),
            _ => Err(Nfsstat4::NFS4ERR_INVAL),
        }
    }

    pub(super) fn allow(&self, a: &Fattr3, cx: &Cx, need: u32, owner_override: bool) -> R<()> {
        if permits(a, &cx.caller, need, owner_override) {
            Ok(())
        } else {
            Err(Nfsstat4::NFS4ERR_ACCESS)
        }
    }

    /// The server itself is about to change each of `files` (a RENAME
    /// moves one and may replace another): until the guards are dropped
    /// their delegation watches do not take it for a local change
    /// ([`super::watch`]). Called only once [`Self::deleg_conflict`] let
    /// the operation through, so it never hides another client's change.
    fn changing_all(&self, files: &[&NfsFh3]) -> Vec<super::watch::OwnChange<'_>> {
        files.iter().map(|f| self.watch.changing(&key(f))).collect()
    }

    /// Hands a new object to its creator unless the client chose an owner
    /// (as Linux's nfsd creates with the caller's fsuid). Best effort.
    pub(super) async fn give(&self, fh: &NfsFh3, cx: &Cx, s: &Sattr3) {
        if s.uid.is_some() || s.gid.is_some() {
            return;
        }
        if let Ok(a) = self.fs.getattr(fh).await {
            if a.uid != cx.caller.uid || a.gid != cx.caller.gid {
                let give = Sattr3 {
                    uid: Some(cx.caller.uid),
                    gid: Some(cx.caller.gid),
                    ..Sattr3::default()
                };
                let _ = self.fs.setattr(fh, &give, None).await;
            }
        }
    }

    /// Executes one operation (anything but a leading SEQUENCE).
    pub(super) async fn exec(&self, op: &NfsArgop4, cx: &mut Cx, now: Duration) -> NfsResop4 {
        use NfsArgop4 as A;
        use NfsResop4 as Z;
        match op {
            A::Access(a) => Z::Access(self.access(a, cx).await.into()),
            A::Getattr(a) => Z::Getattr(self.getattr(a, cx).await.into()),
            A::Getfh(()) => Z::Getfh(
                cur(cx)
                    .map(|fh| Getfh4ResOk {
                        object: NfsFh4(key(&fh)),
                    })
                    .into(),
            ),
            A::Putfh(a) => Z::Putfh(status(self.putfh(&a.object, cx).await)),
            A::Putrootfh(()) | A::Putpubfh(()) => {
                cx.cur = Some(self.fs.root_for(&cx.peer));
                cx.cur_sid = None;
                if matches!(op, A::Putrootfh(())) {
                    Z::Putrootfh(Nfsstat4::NFS4_OK)
                } else {
                    Z::Putpubfh(Nfsstat4::NFS4_OK)
                }
            }
            A::Savefh(()) => Z::Savefh(match &cx.cur {
                Some(fh) => {
                    cx.saved = Some(fh.clone());
                    cx.saved_sid = cx.cur_sid;
                    Nfsstat4::NFS4_OK
                }
                None => Nfsstat4::NFS4ERR_NOFILEHANDLE,
            }),
            A::Restorefh(()) => Z::Restorefh(match &cx.saved {
                Some(fh) => {
                    cx.cur = Some(fh.clone());
                    cx.cur_sid = cx.saved_sid;
                    Nfsstat4::NFS4_OK
                }
                None => Nfsstat4::NFS4ERR_RESTOREFH,
            }),
            A::Lookup(a) => Z::Lookup(status(self.lookup(&a.objname, cx).await)),
            A::Lookupp(()) => Z::Lookupp(status(self.lookupp(cx).await)),
            A::Readlink(()) => Z::Readlink(self.readlink(cx).await.into()),
            A::Read(a) => Z::Read(self.read(a, cx).await.into()),
            A::Write(a) => Z::Write(self.write(a, cx).await.into()),
            A::Commit(_) => Z::Commit(self.commit(cx).await.into()),
            A::Create(a) => Z::Create(self.create(a, cx).await.into()),
            A::Remove(a) => Z::Remove(self.remove(&a.target, cx).await.into()),
            A::Rename(a) => Z::Rename(self.rename(a, cx).await.into()),
            A::Link(a) => Z::Link(self.link(&a.newname, cx).await.into()),
            A::Readdir(a) => Z::Readdir(self.readdir(a, cx).await.into()),
            A::Setattr(a) => Z::Setattr(match self.setattr(a, cx).await {
                Ok(mask) => Setattr4Res {
                    status: Nfsstat4::NFS4_OK,
                    attrsset: mask,
                },
                Err(e) => Setattr4Res {
                    status: e,
                    attrsset: Bitmap4::new(),
                },
            }),
            A::Secinfo(a) => Z::Secinfo(self.secinfo(Some(&a.objname), cx).await.into()),
            A::SecinfoNoName(s) => Z::SecinfoNoName(
                match *s {
                    SecinfoStyle4::SECINFO_STYLE4_CURRENT_FH => self.secinfo(None, cx).await,
                    SecinfoStyle4::SECINFO_STYLE4_PARENT => match self.lookupp(cx).await {
                        Ok(()) => self.secinfo(None, cx).await,
                        Err(e) => Err(e),
                    },
                    _ => Err(Nfsstat4::NFS4ERR_INVAL),
                }
                .into(),
            ),
            // A metadata server holds no data: the NFSv4.2 data
            // operations are not offered (`pnfs_data_op_absent`).
            op if self.pnfs_data_op_absent(op) => {
                NfsResop4::error(op.opnum(), Nfsstat4::NFS4ERR_NOTSUPP)
            }
            A::Seek(a) => Z::Seek(self.seek(a, cx).await.into()),
            A::ReadPlus(a) => Z::ReadPlus(self.read_plus(a, cx).await.into()),
            A::Copy(a) => Z::Copy(Box::pin(self.copy(a, cx)).await.into()),
            A::Clone(a) => Z::Clone(status(self.clone_op(a, cx).await)),
            A::OffloadStatus(sid) => Z::OffloadStatus(self.offload_status(sid, cx).into()),
            A::OffloadCancel(sid) => Z::OffloadCancel(self.offload_cancel(sid, cx)),
            A::Allocate(a) => Z::Allocate(status(self.allocate(a, cx, false).await)),
            A::Deallocate(a) => Z::Deallocate(status(self.allocate(a, cx, true).await)),
            A::Verify(a) => Z::Verify(status(self.verify(a, cx, false).await)),
            A::Nverify(a) => Z::Nverify(status(self.verify(a, cx, true).await)),
            A::Getxattr(a) => Z::Getxattr(self.getxattr(a, cx).await.into()),
            A::Setxattr(a) => Z::Setxattr(self.setxattr(a, cx).await.into()),
            A::Listxattrs(a) => Z::Listxattrs(self.listxattrs(a, cx).await.into()),
            A::Removexattr(a) => Z::Removexattr(self.removexattr(a, cx).await.into()),
            A::Unsupported(n) => Z::Other(*n, Nfsstat4::NFS4ERR_NOTSUPP),
            A::Illegal(_) => Z::Other(Opnum4::OP_ILLEGAL, Nfsstat4::NFS4ERR_OP_ILLEGAL),
            other => self.exec_state(other, cx, now).await,
        }
    }

    async fn putfh(&self, fh: &NfsFh4, cx: &mut Cx) -> R<()> {
        let fh = NfsFh3::new(fh.as_bytes()).ok_or(Nfsstat4::NFS4ERR_BADHANDLE)?;
        self.attr(&fh).await?;
        cx.cur = Some(fh);
        cx.cur_sid = None;
        Ok(())
    }

    /// ACCESS (RFC 8881 §18.1.4): mode bits against the AUTH_SYS caller;
    /// the extended attribute rights (RFC 8276 §8.3) follow read
    /// (XAREAD, XALIST) and write (XAWRITE) permission, as on Linux.
    async fn access(&self, a: &Access4Args, cx: &Cx) -> R<Access4ResOk> {
        let attr = self.attr(&cur(cx)?).await?;
        let xa = ACCESS4_XAREAD | ACCESS4_XAWRITE | ACCESS4_XALIST;
        let want = a.access & (0x3f | xa);
        let ro = cx.read_only || self.fs.read_only();
        let mut access = access_bits(&attr, &cx.caller, want & 0x3f, ro);
        if want & xa != 0 {
            let rw = access_bits(&attr, &cx.caller, ACCESS3_READ | ACCESS3_MODIFY, ro);
            if rw & ACCESS3_READ != 0 {
                access |= want & (ACCESS4_XAREAD | ACCESS4_XALIST);
            }
            if rw & ACCESS3_MODIFY != 0 {
                access |= want & ACCESS4_XAWRITE;
            }
        }
        Ok(Access4ResOk {
            supported: want,
            access,
        })
    }

    /// GETATTR (RFC 8881 §18.7.4): requested attributes the server does
    /// not support are left out of the mask; write-only ones are
    /// NFS4ERR_INVAL.
    async fn getattr(&self, a: &Getattr4Args, cx: &Cx) -> R<Getattr4ResOk> {
        if a.attr_request.contains(FATTR4_TIME_ACCESS_SET)
            || a.attr_request.contains(FATTR4_TIME_MODIFY_SET)
        {
            return Err(Nfsstat4::NFS4ERR_INVAL);
        }
        let fh = cur(cx)?;
        let attr = self.attr(&fh).await?;
        let fsstat = if wants_fsstat(&a.attr_request) {
            Some(self.fs.fsstat(&fh).await.map_err(st4)?)
        } else {
            None
        };
        let mut attrs = file_attrs(&attr, &fh, fsstat, self.lease_secs());
        self.fs.fix_attrs(&fh, &mut attrs);
        self.pnfs_attrs(&mut attrs);
        if let Some(size) = self.pnfs_size(&fh, &attr).await {
            attrs.size = Some(size);
        }
        let server = (change_of(&attr), attr.size);
        // RFC 8881 §10.4.3: another client's write delegation.
        if let Some((size, change)) = self
            .delegated_attrs(&fh, cx, &a.attr_request, server)
            .await?
        {
            attrs.size = Some(size);
            attrs.change = Some(change);
        }
        Ok(Getattr4ResOk {
            obj_attributes: attrs.to_fattr4(&a.attr_request),
        })
    }

    /// SETATTR (RFC 8881 §18.30.4): a size change needs a stateid allowing
    /// writes; POSIX permission rules as nfsd applies them.
    async fn setattr(&self, a: &Setattr4Args, cx: &Cx) -> R<Bitmap4> {
        let fh = cur(cx)?;
        let (s, mask) = to_sattr(&a.obj_attributes)?;
        let attr = self.attr(&fh).await?;
        if s.size.is_some() {
            if attr.ftype == Ftype3::NF3DIR {
                return Err(Nfsstat4::NFS4ERR_ISDIR);
            }
            let sid = resolve_sid(cx, &a.stateid)?;
            let clientid = cx.clientid().unwrap_or(0);
            self.state()?.io_check(&sid, clientid, &key(&fh), true)?;
        }
        check_setattr(&attr, &cx.caller, &s).map_err(st4)?;
        self.deleg_conflict(&fh, cx, true)?;
        let own = self.watch.changing(&key(&fh));
        let r = self.fs.setattr(&fh, &s, None).await.map_err(st4);
        drop(own);
        r?;
        self.pnfs_setattr(&fh, &attr, &s).await?;
        Ok(mask)
    }

    async fn lookup(&self, name: &Component4, cx: &mut Cx) -> R<()> {
        let dir = cur(cx)?;
        let n = name3(name)?;
        let d = self.dir(&dir).await?;
        self.allow(&d, cx, ACCESS3_LOOKUP, false)?;
        cx.cur = Some(self.fs.lookup_for(&dir, &n, &cx.peer).await.map_err(st4)?);
        cx.cur_sid = None;
        Ok(())
    }

    /// LOOKUPP (RFC 8881 §18.14.3): NFS4ERR_NOENT at the root.
    async fn lookupp(&self, cx: &mut Cx) -> R<()> {
        let dir = cur(cx)?;
        self.dir(&dir).await?;
        if dir == self.fs.root() {
            return Err(Nfsstat4::NFS4ERR_NOENT);
        }
        let up = self.fs.lookup(&dir, &Filename3::from_static("..")).await;
        cx.cur = Some(up.map_err(st4)?);
        cx.cur_sid = None;
        Ok(())
    }

    async fn readlink(&self, cx: &Cx) -> R<Readlink4ResOk> {
        let fh = cur(cx)?;
        if self.attr(&fh).await?.ftype != Ftype3::NF3LNK {
            return Err(Nfsstat4::NFS4ERR_INVAL);
        }
        let link = self.fs.readlink(&fh).await.map_err(st4)?;
        Ok(Readlink4ResOk {
            link: Linktext4(link),
        })
    }

    /// Stateid and permission checks shared by READ, WRITE and the 4.2
    /// data operations.
    pub(super) async fn io_prep(&self, sid: &Stateid4, cx: &Cx, write: bool) -> R<NfsFh3> {
        let fh = cur(cx)?;
        let attr = self.regular(&fh).await?;
        let sid = resolve_sid(cx, sid)?;
        let clientid = cx.clientid().unwrap_or(0);
        self.state()?.io_check(&sid, clientid, &key(&fh), write)?;
        if write {
            self.watch.quiet(&key(&fh));
        }
        if sid.is_special() {
            let need = if write { ACCESS3_MODIFY } else { ACCESS3_READ };
            self.allow(&attr, cx, need, true)?;
        }
        Ok(fh)
    }

    /// COMMIT (RFC 8881 §18.3.4): the whole file is flushed.
    async fn commit(&self, cx: &Cx) -> R<Commit4ResOk> {
        let fh = cur(cx)?;
        self.regular(&fh).await?;
        let verf = match &self.mds {
            Some(m) => Box::pin(m.commit(&*self.fs, &fh)).await.map_err(st4)?,
            None => {
                self.fs.commit(&fh).await.map_err(st4)?;
                self.fs.write_verifier()
            }
        };
        Ok(Commit4ResOk {
            writeverf: FixedOpaque(verf),
        })
    }

    /// CREATE (RFC 8881 §18.4.4): directories, symbolic links and special
    /// files; regular files are made by OPEN (NFS4ERR_BADTYPE here).
    async fn create(&self, a: &Create4Args, cx: &mut Cx) -> R<Create4ResOk> {
        let dir = cur(cx)?;
        let n = name3(&a.objname)?;
        let before = self.dir(&dir).await?;
        self.allow(&before, cx, DIR_ADD, false)?;
        let (s, mask) = to_sattr(&a.createattrs)?;
        let dev = |t: Ftype3, d: &Specdata4| Mknoddata3::Device {
            ftype: t,
            attributes: s.clone(),
            spec: Specdata3 {
                specdata1: d.specdata1,
                specdata2: d.specdata2,
            },
        };
        let special = |t: Ftype3| Mknoddata3::Special {
            ftype: t,
            attributes: s.clone(),
        };
        let made = match &a.objtype {
            Createtype4::Dir => self.fs.mkdir(&dir, &n, &s).await,
            Createtype4::Link(t) => self.fs.symlink(&dir, &n, &t.0, &s).await,
            Createtype4::Block(d) => self.fs.mknod(&dir, &n, &dev(Ftype3::NF3BLK, d)).await,
            Createtype4::Char(d) => self.fs.mknod(&dir, &n, &dev(Ftype3::NF3CHR, d)).await,
            Createtype4::Socket => self.fs.mknod(&dir, &n, &special(Ftype3::NF3SOCK)).await,
            Createtype4::Fifo => self.fs.mknod(&dir, &n, &special(Ftype3::NF3FIFO)).await,
            Createtype4::Other(_) => return Err(Nfsstat4::NFS4ERR_BADTYPE),
        };
        let fh = made.map_err(st4)?;
        self.give(&fh, cx, &s).await;
        let after = self.attr(&dir).await?;
        cx.cur = Some(fh);
        cx.cur_sid = None;
        Ok(Create4ResOk {
            cinfo: cinfo(&before, &after),
            attrset: mask,
        })
    }

    /// REMOVE (RFC 8881 §18.25.4): files and empty directories.
    async fn remove(&self, name: &Component4, cx: &Cx) -> R<Cinfo4ResOk> {
        let dir = cur(cx)?;
        let n = name3(name)?;
        let before = self.dir(&dir).await?;
        self.allow(&before, cx, DIR_REMOVE, false)?;
        let child = self.fs.lookup(&dir, &n).await.map_err(st4)?;
        self.deleg_conflict(&child, cx, true)?;
        let child_attr = self.attr(&child).await?;
        let r = if child_attr.ftype == Ftype3::NF3DIR {
            self.fs.rmdir(&dir, &n).await
        } else {
            self.keep_if_open(&child);
            let own = self.watch.changing(&key(&child));
            let r = self.fs.remove(&dir, &n).await;
            drop(own);
            r
        };
        r.map_err(st4)?;
        self.pnfs_removed(&child, &child_attr).await;
        let after = self.attr(&dir).await?;
        Ok(Cinfo4ResOk {
            cinfo: cinfo(&before, &after),
        })
    }

    /// RENAME (RFC 8881 §18.26.4): saved directory to current directory.
    async fn rename(&self, a: &Rename4Args, cx: &Cx) -> R<Rename4ResOk> {
        let to = cur(cx)?;
        let from = cx.saved.clone().ok_or(Nfsstat4::NFS4ERR_NOFILEHANDLE)?;
        let (old, new) = (name3(&a.oldname)?, name3(&a.newname)?);
        let sb = self.dir(&from).await?;
        let tb = self.dir(&to).await?;
        self.allow(&sb, cx, DIR_REMOVE, false)?;
        self.allow(&tb, cx, DIR_ADD, false)?;
        // RFC 8881 §10.4.1: renaming a delegated file, or over one, is a
        // conflicting change.
        let moved = self.fs.lookup(&from, &old).await.ok();
        if let Some(f) = &moved {
            self.deleg_conflict(f, cx, true)?;
        }
        let mut replaced = None;
        if let Ok(f) = self.fs.lookup(&to, &new).await {
            self.deleg_conflict(&f, cx, true)?;
            // §18.26.4: a client may still use the file it has open.
            self.keep_if_open(&f);
            replaced = self.attr(&f).await.ok().map(|a| (f, a));
        }
        let touched: Vec<&NfsFh3> = moved
            .iter()
            .chain(replaced.iter().map(|(f, _)| f))
            .collect();
        let own = self.changing_all(&touched);
        let r = self.fs.rename(&from, &old, &to, &new).await;
        drop(own);
        r.map_err(st4)?;
        // A file replaced by the rename lost a link, as by REMOVE: on a
        // metadata server its last link takes its data files with it.
        if let Some((f, fa)) = replaced {
            if self.attr(&f).await.map_or(true, |now| now.nlink < fa.nlink) {
                self.pnfs_removed(&f, &fa).await;
            }
        }
        let (sa, ta) = (self.attr(&from).await?, self.attr(&to).await?);
        Ok(Rename4ResOk {
            source_cinfo: cinfo(&sb, &sa),
            target_cinfo: cinfo(&tb, &ta),
        })
    }

    /// LINK (RFC 8881 §18.9.4): the saved object gets a name in the
    /// current directory.
    async fn link(&self, name: &Component4, cx: &Cx) -> R<Cinfo4ResOk> {
        let dir = cur(cx)?;
        let obj = cx.saved.clone().ok_or(Nfsstat4::NFS4ERR_NOFILEHANDLE)?;
        let n = name3(name)?;
        if self.attr(&obj).await?.ftype == Ftype3::NF3DIR {
            return Err(Nfsstat4::NFS4ERR_ISDIR);
        }
        let before = self.dir(&dir).await?;
        self.allow(&before, cx, DIR_ADD, false)?;
        self.deleg_conflict(&obj, cx, true)?;
        let own = self.watch.changing(&key(&obj));
        let r = self.fs.link(&obj, &dir, &n).await;
        drop(own);
        r.map_err(st4)?;
        let after = self.attr(&dir).await?;
        Ok(Cinfo4ResOk {
            cinfo: cinfo(&before, &after),
        })
    }

    /// READDIR (RFC 8881 §18.23.4): never "." or ".."; entries up to
    /// `maxcount` bytes of result (NFS4ERR_TOOSMALL if not even one
    /// fits; `dircount` is a hint and, as on Linux, not used); a non-zero
    /// cookie must come with the current verifier (NFS4ERR_NOT_SAME) and
    /// be one the directory can resume at (NFS4ERR_BAD_COOKIE, §18.23.3);
    /// an entry that vanished while listed is left out, as knfsd does;
    /// an entry whose attributes fail otherwise carries `rdattr_error`
    /// when asked for, else fails the operation. Attributes come with
    /// the entries from the storage (one `fstatat` each), and the storage
    /// reads only the entries that fit. One storage call: the access
    /// check is made on the directory's attributes as the storage opens
    /// it ([`Checked`]), as NFSv3 READDIR does, not by a GETATTR first.
    async fn readdir(&self, a: &Readdir4Args, cx: &Cx) -> R<Readdir4ResOk> {
        let dir = cur(cx)?;
        let fsstat = if wants_fsstat(&a.attr_request) {
            Some(self.fs.fsstat(&dir).await.map_err(st4)?)
        } else {
            None
        };
        let lease = self.lease_secs();
        let limit = cx
            .sess
            .map(|s| s.max_response.saturating_sub(512) as usize)
            .unwrap_or(usize::MAX)
            .min(a.maxcount as usize);
        let plus = !a.attr_request.is_empty();
        let req = DirRequest {
            cookie: a.cookie,
            plus,
            size_hint: limit.min(1 << 20) / if plus { PLUS_TO_DIRENT } else { 1 },
        };
        let mut entries = Vec::new();
        let mut size = 8 + 4 + 4;
        let mut failed = None;
        let entries_of = |e: DirEntry| {
            if e.name == b"." || e.name == b".." {
                return true;
            }
            let attrs = match e.plus {
                None => Fattr4::default(),
                Some(Ok((fh, at))) => {
                    let fh = NfsFh3::new(fh).unwrap_or_default();
                    let mut attrs = file_attrs(&at, &fh, fsstat, lease);
                    self.fs.fix_attrs(&fh, &mut attrs);
                    self.pnfs_attrs(&mut attrs);
                    attrs.to_fattr4(&a.attr_request)
                }
                Some(Err(nfs::v3::Nfsstat3::NFS3ERR_NOENT)) => return true,
                Some(Err(s)) if a.attr_request.contains(FATTR4_RDATTR_ERROR) => FileAttrs {
                    rdattr_error: Some(st4(s)),
                    ..FileAttrs::default()
                }
                .to_fattr4(&a.attr_request),
                Some(Err(s)) => {
                    failed = Some(st4(s));
                    return false;
                }
            };
            let entry = Entry4 {
                cookie: e.cookie,
                name: Component4(Bytes::copy_from_slice(e.name)),
                attrs,
            };
            let len = 4 + entry.encoded_len();
            if size + len > limit {
                return false;
            }
            size += len;
            entries.push(entry);
            true
        };
        let mut sink = Checked {
            caller: &cx.caller,
            cookie: a.cookie,
            checked: false,
            entries: entries_of,
        };
        let page = self.fs.readdir_for(&dir, &cx.peer, req, &mut sink).await;
        let checked = sink.checked;
        let page = match page {
            // NFS4ERR_SYMLINK for a symbolic link (RFC 8881 §18.23.4),
            // told apart by its attributes.
            Err(nfs::v3::Nfsstat3::NFS3ERR_NOTDIR) => {
                self.dir(&dir).await?;
                return Err(Nfsstat4::NFS4ERR_NOTDIR);
            }
            r => r.map_err(st4)?,
        };
        if !checked {
            // A storage that did not hand the directory's attributes.
            let d = self.dir(&dir).await?;
            self.allow(&d, cx, ACCESS3_READ, false)?;
            Checked::<()>::cookie_ok(a.cookie).map_err(st4)?;
        }
        if let Some(s) = failed {
            return Err(s);
        }
        if a.cookie != 0 && a.cookieverf.0 != page.verf {
            return Err(Nfsstat4::NFS4ERR_NOT_SAME);
        }
        if entries.is_empty() && !page.eof {
            return Err(Nfsstat4::NFS4ERR_TOOSMALL);
        }
        Ok(Readdir4ResOk {
            cookieverf: FixedOpaque(page.verf),
            entries,
            eof: page.eof,
        })
    }

    /// SECINFO and SECINFO_NO_NAME (RFC 8881 §18.29.4, §18.45.4): the
    /// flavors the object's export accepts from this client (across a
    /// junction, those of the export the name leads into, §2.6.3.1.1.5);
    /// success consumes the current file handle. SECINFO looks the name
    /// up, so it needs search permission on the directory
    /// (`ACCESS3_LOOKUP`, as LOOKUP; RFC 8881 §18.29.3).
    async fn secinfo(
        &self,
        name: Option<&Component4>,
        cx: &mut Cx,
    ) -> R<Bounded<Vec<Secinfo4>, 16>> {
        let mut fh = cur(cx)?;
        if let Some(name) = name {
            let n = name3(name)?;
            let d = self.dir(&fh).await?;
            self.allow(&d, cx, ACCESS3_LOOKUP, false)?;
            fh = self.fs.lookup_for(&fh, &n, &cx.peer).await.map_err(st4)?;
        } else {
            self.attr(&fh).await?;
        }
        let flavors = self.fs.flavors(&fh, &cx.peer).map_err(st4)?;
        if flavors.is_empty() {
            return Err(Nfsstat4::NFS4ERR_ACCESS);
        }
        cx.cur = None;
        cx.cur_sid = None;
        Ok(Bounded(flavors.into_iter().map(secinfo_of).collect()))
    }
}

/// The Kerberos V5 mechanism's OID 1.2.840.113554.1.2.2 (RFC 1964 §1),
/// its DER contents without tag and length, as Linux's nfsd sends it.
const KRB5_OID: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x02];

/// A flavor number as SECINFO reports it (RFC 8881 §18.29.2): the
/// Kerberos pseudo-flavors (RFC 2623 §2.2) as RPCSEC_GSS with the krb5
/// OID, QOP 0 and their service; any other as itself.
fn secinfo_of(flavor: u32) -> Secinfo4 {
    let base = crate::exports::KRB5_PSEUDO_FLAVOR;
    if (base..base + 3).contains(&flavor) {
        Secinfo4::Gss(
            xdr::Bounded(bytes::Bytes::from_static(KRB5_OID)),
            0,
            flavor - base + 1,
        )
    } else {
        Secinfo4::Flavor(flavor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8881 §18.29.2 with RFC 2623 §2.2's pseudo-flavors: RPCSEC_GSS,
    /// the krb5 OID, QOP 0, the service.
    #[test]
    fn secinfo_reports_kerberos_as_rpcsec_gss_with_its_service() {
        assert!(matches!(secinfo_of(1), Secinfo4::Flavor(1)));
        assert!(matches!(secinfo_of(0), Secinfo4::Flavor(0)));
        for (flavor, service) in [(390_003, 1), (390_004, 2), (390_005, 3)] {
            let Secinfo4::Gss(oid, qop, svc) = secinfo_of(flavor) else {
                panic!("{flavor}");
            };
            assert_eq!(&oid.0[..], KRB5_OID);
            assert_eq!((qop, svc), (0, service));
        }
        let wire = xdr::to_bytes(&secinfo_of(390_005));
        assert_eq!(&wire[..8], &[0, 0, 0, 6, 0, 0, 0, 9]);
        assert_eq!(&wire[8..17], KRB5_OID);
        assert_eq!(&wire[20..], &[0, 0, 0, 0, 0, 0, 0, 3]);
    }
}
