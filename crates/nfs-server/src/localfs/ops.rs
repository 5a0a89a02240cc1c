//! Namespace operations, each a `*at` call on the fd of the directory
//! involved: LOOKUP, CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME,
//! LINK, READLINK, READDIR and SETATTR. Every change is recorded in the
//! handle index and, before the reply, made durable: the new or changed
//! file and each changed directory are `fsync`ed (RFC 1813 §3.3: a
//! server must not reply to a change before it is on stable storage).

use std::os::fd::{AsFd, OwnedFd};

use bytes::Bytes;
use nfs::v3::{Createhow3, Filename3, Ftype3, Mknoddata3, NfsFh3, Nfsstat3, Nfstime3, Sattr3};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Timespec, Timestamps};
use rustix::io::Errno;

use super::attrs::{sx, Meta};
use super::index::Entry;
use super::io::{sync_dir, sync_fd};
use super::resolve::Node;
use super::LocalFs;
use crate::fh::Handle;
use crate::storage::StorageResult;

pub(crate) fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

impl LocalFs {
    /// The handle of a file with these attributes.
    pub(crate) fn handle(&self, meta: &Meta) -> NfsFh3 {
        Handle {
            export_id: self.export_id,
            ino: meta.ino(),
            gen: meta.gen(),
        }
        .to_fh(&self.key)
    }

    /// Records that `name` in directory `parent` is `meta`'s file and
    /// returns its handle (a name of a file with several links is kept
    /// beside the others, `index::links`).
    fn record(&self, parent: u64, name: &[u8], meta: &Meta, durable: bool) -> NfsFh3 {
        if meta.ino() != self.root_ino {
            let e = Entry {
                parent,
                gen: meta.gen(),
                name: Bytes::copy_from_slice(name),
            };
            self.index.put(meta.ino(), e, durable, linked(meta));
        }
        self.handle(meta)
    }

    fn writable(&self) -> StorageResult<()> {
        if self.read_only {
            Err(Nfsstat3::NFS3ERR_ROFS)
        } else {
            Ok(())
        }
    }

    /// The directory a new entry `name` goes in; `.` and `..` cannot be
    /// created (Linux: NFS3ERR_EXIST).
    fn new_child(&self, dir: &NfsFh3, name: &Filename3) -> StorageResult<Node> {
        self.writable()?;
        let d = self.resolve_dir(dir)?;
        if is_dot(&name.0) {
            return Err(Nfsstat3::NFS3ERR_EXIST);
        }
        Ok(d)
    }

    /// The directory an existing entry is removed or renamed from; `.`
    /// and `..` are refused with `dot_err`.
    fn old_child(&self, dir: &NfsFh3, name: &Filename3, dot_err: Nfsstat3) -> StorageResult<Node> {
        self.writable()?;
        let d = self.resolve_dir(dir)?;
        if is_dot(&name.0) {
            return Err(dot_err);
        }
        Ok(d)
    }

    /// Records, syncs and hands back a file just made in `d`.
    fn made(&self, d: &Node, name: &[u8], attrs: Option<&Sattr3>) -> StorageResult<NfsFh3> {
        let dfd = d.dir()?;
        let meta = sx(Meta::at(&**dfd, name))?;
        if let Some(a) = attrs {
            let n = self.child_node(d, name, meta)?;
            n.with_target(|t| t.apply(a))?;
            if let Some(own) = &n.dir {
                sync_dir(own)?;
            }
        }
        sync_dir(dfd)?;
        Ok(self.record(d.ino, name, &meta, true))
    }

    fn child_node(&self, d: &Node, name: &[u8], meta: Meta) -> StorageResult<Node> {
        let dfd = d.dir()?;
        let own = if meta.is_dir() {
            let e = Entry {
                parent: d.ino,
                gen: meta.gen(),
                name: Bytes::copy_from_slice(name),
            };
            Some(self.open_dir_at(dfd, meta.ino(), &e)?)
        } else {
            None
        };
        Ok(Node {
            ino: meta.ino(),
            meta,
            parent: std::sync::Arc::clone(dfd),
            name: Bytes::copy_from_slice(name),
            dir: own,
            pinned: None,
        })
    }

    pub(crate) fn do_setattr(
        &self,
        fh: &NfsFh3,
        attrs: &Sattr3,
        guard: Option<Nfstime3>,
    ) -> StorageResult<()> {
        self.writable()?;
        let n = self.resolve(fh)?;
        if let Some(g) = guard {
            if n.meta.fattr(self.fsid()).ctime != g {
                return Err(Nfsstat3::NFS3ERR_NOT_SYNC);
            }
        }
        n.with_target(|t| t.apply(attrs))?;
        match (&n.dir, n.meta.is_file()) {
            (Some(own), _) => sync_dir(own),
            (None, true) => sync_fd(&n.open(OFlags::RDONLY | OFlags::NONBLOCK)?),
            (None, false) => sync_dir(&n.parent),
        }
    }

    pub(crate) fn do_lookup(&self, dir: &NfsFh3, name: &Filename3) -> StorageResult<NfsFh3> {
        let d = self.resolve_dir(dir)?;
        let dfd = d.dir()?;
        match &name.0[..] {
            b"." => Ok(self.handle(&d.meta)),
            // `..` at the root stays at the root, as Linux's nfsd does at
            // an export root; elsewhere it is the recorded parent.
            b".." if d.ino == self.root_ino => Ok(self.handle(&d.meta)),
            b".." => Ok(self.handle(&sx(Meta::at(&**dfd, b".."))?)),
            other => {
                let meta = sx(Meta::at(&**dfd, other))?;
                if meta.dev() != self.dev {
                    // A mount point inside the export: not crossed.
                    return Err(Nfsstat3::NFS3ERR_ACCES);
                }
                Ok(self.record(d.ino, other, &meta, false))
            }
        }
    }

    pub(crate) fn do_readlink(&self, fh: &NfsFh3) -> StorageResult<Bytes> {
        let n = self.resolve(fh)?;
        if !n.meta.is_symlink() {
            return Err(Nfsstat3::NFS3ERR_INVAL);
        }
        let t = sx(rustix::fs::readlinkat(&*n.parent, &n.name[..], Vec::new()))?;
        Ok(Bytes::from(t.into_bytes()))
    }

    pub(crate) fn do_create(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
        how: &Createhow3,
    ) -> StorageResult<NfsFh3> {
        let d = self.new_child(dir, name)?;
        let dfd = d.dir()?;
        // Never waits for a kernel lease on an existing file (JUKEBOX).
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let open = |flags: OFlags, mode: u32| {
            rustix::fs::openat(&**dfd, &name.0[..], flags, Mode::from_raw_mode(mode))
        };
        match how {
            Createhow3::Unchecked(a) | Createhow3::Guarded(a) => {
                let excl = matches!(how, Createhow3::Guarded(_));
                let flags = if excl { flags | OFlags::EXCL } else { flags };
                let f = sx(open(flags, a.mode.unwrap_or(0o644) & 0o7777))?;
                sync_fd(&f)?;
                let rest = Sattr3 {
                    mode: a.mode.filter(|m| m & 0o6000 != 0),
                    ..a.clone()
                };
                self.made(&d, &name.0, Some(&rest))
            }
            Createhow3::Exclusive(verf) => {
                // RFC 1813 §3.3.8: the verifier is kept in the file's
                // times, as Linux's nfsd does (mtime, atime seconds).
                let [a, b, c, e, f, g, h, i] = verf.0;
                let times = Timestamps {
                    last_modification: Timespec {
                        tv_sec: i64::from(u32::from_be_bytes([a, b, c, e])),
                        tv_nsec: 0,
                    },
                    last_access: Timespec {
                        tv_sec: i64::from(u32::from_be_bytes([f, g, h, i])),
                        tv_nsec: 0,
                    },
                };
                match open(flags | OFlags::EXCL, 0o600) {
                    Ok(f) => {
                        sx(rustix::fs::futimens(&f, &times))?;
                        sync_fd(&f)?;
                    }
                    Err(Errno::EXIST) => {
                        let m = sx(Meta::at(&**dfd, &name.0))?;
                        let same = m.is_file()
                            && m.0.stx_mtime.tv_sec == times.last_modification.tv_sec
                            && m.0.stx_atime.tv_sec == times.last_access.tv_sec;
                        if !same {
                            return Err(Nfsstat3::NFS3ERR_EXIST);
                        }
                    }
                    Err(e) => return Err(sx::<()>(Err(e)).unwrap_err()),
                }
                self.made(&d, &name.0, None)
            }
        }
    }

    pub(crate) fn do_mkdir(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
        attrs: &Sattr3,
    ) -> StorageResult<NfsFh3> {
        let d = self.new_child(dir, name)?;
        let mode = attrs.mode.unwrap_or(0o755) & 0o7777;
        sx(rustix::fs::mkdirat(
            &**d.dir()?,
            &name.0[..],
            Mode::from_raw_mode(mode),
        ))?;
        let rest = Sattr3 {
            mode: attrs.mode.filter(|m| m & 0o6000 != 0),
            ..attrs.clone()
        };
        self.made(&d, &name.0, Some(&rest))
    }

    pub(crate) fn do_symlink(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
        target: &[u8],
    ) -> StorageResult<NfsFh3> {
        let d = self.new_child(dir, name)?;
        if target.is_empty() || target.contains(&0) {
            return Err(Nfsstat3::NFS3ERR_INVAL);
        }
        sx(rustix::fs::symlinkat(target, &**d.dir()?, &name.0[..]))?;
        self.made(&d, &name.0, None)
    }

    pub(crate) fn do_mknod(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
        what: &Mknoddata3,
    ) -> StorageResult<NfsFh3> {
        let (ft, attrs, dev) = match what {
            Mknoddata3::Device {
                ftype,
                attributes,
                spec,
            } => {
                let ft = if *ftype == Ftype3::NF3CHR {
                    FileType::CharacterDevice
                } else {
                    FileType::BlockDevice
                };
                let dev = rustix::fs::makedev(spec.specdata1, spec.specdata2);
                (ft, attributes, dev)
            }
            Mknoddata3::Special { ftype, attributes } => {
                let ft = if *ftype == Ftype3::NF3FIFO {
                    FileType::Fifo
                } else {
                    FileType::Socket
                };
                (ft, attributes, 0)
            }
            Mknoddata3::Other(_) => {
                self.writable()?;
                return Err(Nfsstat3::NFS3ERR_BADTYPE);
            }
        };
        let d = self.new_child(dir, name)?;
        let mode = Mode::from_raw_mode(attrs.mode.unwrap_or(0o644) & 0o7777);
        sx(rustix::fs::mknodat(&**d.dir()?, &name.0[..], ft, mode, dev))?;
        self.made(&d, &name.0, None)
    }

    /// Unlinks `name` from `d` and forgets it in the handle index (the
    /// file itself with its last link).
    fn unlink(&self, d: &Node, name: &[u8], flags: AtFlags) -> StorageResult<()> {
        let dfd = d.dir()?;
        let gone = Meta::at(&**dfd, name).ok();
        sx(rustix::fs::unlinkat(&**dfd, name, flags))?;
        if let Some(m) = gone {
            self.lost_name(&m, d.ino, name);
        }
        sync_dir(dfd)
    }

    /// `name` in directory `parent` no longer names the file `m` was
    /// (removed, or renamed over).
    fn lost_name(&self, m: &Meta, parent: u64, name: &[u8]) {
        if m.is_dir() {
            self.forget_dir(m.ino());
        } else {
            // The kept descriptors ([`super::files`]): a removed file's
            // space is freed once none holds it.
            self.files.close(m.ino());
        }
        let last = !linked(m);
        self.index.unlinked(m.ino(), m.gen(), parent, name, last);
    }

    pub(crate) fn do_remove(&self, dir: &NfsFh3, name: &Filename3) -> StorageResult<()> {
        let d = self.old_child(dir, name, Nfsstat3::NFS3ERR_ACCES)?;
        self.unlink(&d, &name.0, AtFlags::empty())
    }

    pub(crate) fn do_rmdir(&self, dir: &NfsFh3, name: &Filename3) -> StorageResult<()> {
        match &name.0[..] {
            // Linux: "." is NFS3ERR_INVAL, ".." NFS3ERR_NOTEMPTY (rmdir(2)).
            b"." => self.writable().and(Err(Nfsstat3::NFS3ERR_INVAL)),
            b".." => self.writable().and(Err(Nfsstat3::NFS3ERR_NOTEMPTY)),
            _ => {
                let d = self.old_child(dir, name, Nfsstat3::NFS3ERR_ACCES)?;
                self.unlink(&d, &name.0, AtFlags::REMOVEDIR)
            }
        }
    }

    pub(crate) fn do_rename(
        &self,
        from_dir: &NfsFh3,
        from: &Filename3,
        to_dir: &NfsFh3,
        to: &Filename3,
    ) -> StorageResult<()> {
        let s = self.old_child(from_dir, from, Nfsstat3::NFS3ERR_INVAL)?;
        let t = self.old_child(to_dir, to, Nfsstat3::NFS3ERR_INVAL)?;
        let (sfd, tfd) = (s.dir()?, t.dir()?);
        let replaced = Meta::at(&**tfd, &to.0).ok();
        sx(rustix::fs::renameat(&**sfd, &from.0[..], &**tfd, &to.0[..]))?;
        let moved = sx(Meta::at(&**tfd, &to.0))?;
        // Two links of one file: rename(2) leaves both in place.
        let same = replaced.as_ref().is_some_and(|r| r.ino() == moved.ino());
        if let Some(r) = replaced.filter(|_| !same) {
            self.lost_name(&r, t.ino, &to.0);
        }
        if linked(&moved) && !same {
            self.index
                .unlinked(moved.ino(), moved.gen(), s.ino, &from.0, false);
        }
        self.record(t.ino, &to.0, &moved, true);
        sync_dir(sfd)?;
        if t.ino != s.ino {
            sync_dir(tfd)?;
        }
        Ok(())
    }

    pub(crate) fn do_link(&self, fh: &NfsFh3, dir: &NfsFh3, name: &Filename3) -> StorageResult<()> {
        let d = self.new_child(dir, name)?;
        let n = self.resolve(fh)?;
        if n.meta.is_dir() {
            return Err(Nfsstat3::NFS3ERR_ISDIR);
        }
        let dfd = d.dir()?;
        sx(rustix::fs::linkat(
            &*n.parent,
            &n.name[..],
            &**dfd,
            &name.0[..],
            AtFlags::empty(),
        ))?;
        // The source's directory watch does not see its new link
        // (`attrcache`): drop what it keeps of the source.
        if let Ok(p) = Meta::of(&*n.parent) {
            self.attrs.forget(p.ino(), &n.name);
        }
        let meta = sx(Meta::at(&**dfd, &name.0))?;
        self.record(d.ino, &name.0, &meta, true);
        sync_dir(dfd)
    }
}

/// Whether `m` is a file with more than one link (directories' links
/// are their subdirectories' `..`).
fn linked(m: &Meta) -> bool {
    !m.is_dir() && m.nlink() > 1
}

/// A readable fd of a directory held as `O_PATH`.
pub(crate) fn open_for_listing(dir: impl AsFd) -> StorageResult<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    sx(rustix::fs::openat(dir, c".", flags, Mode::empty()))
}
