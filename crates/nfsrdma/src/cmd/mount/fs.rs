//! [`NfsFs`]: a `fuser::Filesystem` whose operations are NFSv3 calls
//! (RFC 1813 §3.3) on a mounted export.
//!
//! FUSE calls arrive on fuser's session threads, which are not runtime
//! threads: each callback runs its calls with `Handle::block_on` on the
//! command's tokio runtime and replies. Inode numbers are NFS file ids
//! ([`super::table::Inodes`]). Writes are UNSTABLE and kept until a
//! COMMIT (on flush, fsync, release, or when the commit window fills)
//! confirms them under the same write verifier; a changed verifier resends
//! them FILE_SYNC (RFC 1813 §3.3.7, §3.3.21).
//!
//! Every call carries the AUTH_SYS credential of the process that made
//! the request ([`super::creds`]), so the server decides what each user
//! may do; an open file's READs, WRITEs and COMMITs carry its opener's,
//! as Linux's client does with its open context. Attributes and names
//! are cached by the kernel for the timeouts of [`super::cache`];
//! opening a file checks ACCESS and revalidates its attributes
//! (close-to-open), closing it COMMITs. Unlinking an open file renames it
//! to a hidden `.nfs…` name until its last close ([`open`]).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::future::Future;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, Request,
    TimeOrNow,
};
use nfs_client::nfs::v3::{
    Create3ResOk, Createhow3, Fattr3, Ftype3, Mknoddata3, NfsFh3, Sattr3, SetTime, Specdata3,
    NFS3_MAXNAMLEN,
};
use nfs_client::Mount;
use oncrpc::msg::OpaqueAuth;
use oncrpc::ClientTransport;
use tokio::runtime::Handle;

use super::cache::AttrCache;
use super::callbacks::{
    self, access_denied, reply_attr, reply_empty, reply_entry, OpenIo, ACCESS_ALL,
};
use super::creds::Creds;
use super::handles::OpenHandles;
use super::options::MountOpts;
use super::table::{decode_dev, errno, file_attr, nfs_time, Inodes};

mod dir;
mod open;

use open::Open;

use super::silly::Opens;
use super::unstable::V3;

/// Largest FUSE WRITE asked for, whatever the server allows.
const MAX_FUSE_WRITE: u32 = 1 << 20;
/// Largest FUSE READ served in one reply.
const MAX_FUSE_READ: u32 = 4 << 20;
/// Block size reported by `statfs`.
const STATFS_BSIZE: u64 = 4096;

type Res<T> = Result<T, Errno>;

/// What the kernel is handed for an object: its handle, attributes, and
/// how long it may cache them and its name.
type Entry = (NfsFh3, FileAttr, Duration);

/// The FUSE file system over one mounted export.
#[derive(Debug)]
pub(crate) struct NfsFs<T> {
    mount: Mount<T>,
    rt: Handle,
    inodes: Inodes,
    creds: Creds,
    ac: AttrCache,
    files: OpenHandles<Open>,
    opens: Mutex<Opens<NfsFh3>>,
    dirs: Mutex<HashMap<u64, dir::OpenDir>>,
    next_handle: AtomicU64,
    opts: MountOpts,
    blksize: u32,
}

fn nfs<T>(r: nfs_client::Result<T>) -> Res<T> {
    r.map_err(|e| {
        tracing::debug!(error = %e, "NFS call failed");
        errno(&e)
    })
}

fn set_time(t: Option<TimeOrNow>) -> SetTime {
    match t {
        None => SetTime::DontChange,
        Some(TimeOrNow::Now) => SetTime::ServerTime,
        Some(TimeOrNow::SpecificTime(t)) => SetTime::ClientTime(nfs_time(t)),
    }
}

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

impl<T: ClientTransport + Send + Sync + 'static> NfsFs<T> {
    /// A file system whose root is directory `root_fh` (attributes
    /// `root`) of `mount`, running its calls on `rt`.
    pub(crate) fn new(
        mount: Mount<T>,
        root_fh: NfsFh3,
        root: &Fattr3,
        rt: Handle,
        opts: MountOpts,
    ) -> Self {
        let blksize = mount.write_size().min(MAX_FUSE_WRITE);
        let me = nfs_client::process_auth_sys();
        Self {
            mount,
            rt,
            inodes: Inodes::new(root.fileid, root_fh),
            creds: Creds::new(me.machinename, me.stamp),
            ac: AttrCache::new(opts.ac),
            files: OpenHandles::default(),
            opens: Mutex::new(Opens::default()),
            dirs: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            opts,
            blksize,
        }
    }

    /// The credential of the process behind `req`.
    fn cred(&self, req: &Request) -> OpaqueAuth {
        self.creds.of(req.pid(), req.uid(), req.gid())
    }

    /// The mount, with calls made as the process behind `req`.
    fn caller(&self, req: &Request) -> Mount<&T> {
        self.mount.with_credential(self.cred(req))
    }

    /// FUSE attributes of inode `ino` from fresh server attributes `a`,
    /// and how long the kernel may cache them.
    fn attr(&self, ino: INodeNo, a: &Fattr3) -> (FileAttr, Duration) {
        let ttl = self.ac.observe(ino.0, a);
        (file_attr(ino, a, self.blksize), ttl)
    }

    fn run<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    fn fh(&self, ino: INodeNo) -> Res<NfsFh3> {
        self.inodes.fh(ino).ok_or(Errno::ESTALE)
    }

    fn writable(&self) -> Res<()> {
        if self.opts.read_only {
            Err(Errno::EROFS)
        } else {
            Ok(())
        }
    }

    fn handle(&self) -> u64 {
        self.next_handle.fetch_add(1, Ordering::Relaxed)
    }

    fn open_file(&self, fh: FileHandle) -> Res<Arc<Open>> {
        self.files.get(fh)
    }

    /// Attributes for an object handed to the kernel, which then holds
    /// one more lookup of it.
    async fn entry(&self, m: &Mount<&T>, fh: NfsFh3, attrs: Option<Fattr3>) -> Res<Entry> {
        let a = match attrs {
            Some(a) => a,
            None => nfs(m.client().getattr(&fh).await)?,
        };
        let ino = self.inodes.ino(a.fileid).ok_or(Errno::EIO)?;
        self.inodes.remember(ino, &fh);
        let (attr, ttl) = self.attr(ino, &a);
        Ok((fh, attr, ttl))
    }

    /// The new object of a CREATE, MKDIR or SYMLINK (RFC 1813 §3.3.8):
    /// its handle, or a LOOKUP when the server left it out.
    async fn created(
        &self,
        m: &Mount<&T>,
        dir: &NfsFh3,
        name: &OsStr,
        r: Create3ResOk,
    ) -> Res<Entry> {
        match r.obj {
            Some(fh) => self.entry(m, fh, r.obj_attributes).await,
            None => {
                let l = nfs(m.client().lookup(dir, name.as_bytes()).await)?;
                self.entry(m, l.object, l.obj_attributes).await
            }
        }
    }

    async fn do_setattr(
        &self,
        m: &Mount<&T>,
        ino: INodeNo,
        s: Sattr3,
    ) -> Res<(FileAttr, Duration)> {
        self.writable()?;
        let fh = self.fh(ino)?;
        let c = m.client();
        let wcc = nfs(c.setattr(&fh, s, None).await)?;
        let a = match wcc.after {
            Some(a) => a,
            None => nfs(c.getattr(&fh).await)?,
        };
        Ok(self.attr(ino, &a))
    }

    /// ACCESS (RFC 1813 §3.3.4) for `access(2)`'s mask, mapped as Linux's
    /// client does: write is any of modify, extend or delete; execute is
    /// lookup on a directory.
    async fn do_access(&self, m: &Mount<&T>, ino: INodeNo, mask: AccessFlags) -> Res<()> {
        let fh = self.fh(ino)?;
        if mask == AccessFlags::F_OK {
            return Ok(());
        }
        if mask.contains(AccessFlags::W_OK) {
            self.writable()?;
        }
        let c = m.client();
        let r = nfs(c.access(&fh, ACCESS_ALL).await)?;
        let ftype = match r.obj_attributes {
            Some(a) => a.ftype,
            None => nfs(c.getattr(&fh).await)?.ftype,
        };
        let denied = access_denied(mask, r.access, ftype == Ftype3::NF3DIR);
        if denied {
            Err(Errno::EACCES)
        } else {
            Ok(())
        }
    }
}

impl<T: ClientTransport + Send + Sync + 'static> OpenIo for NfsFs<T> {
    fn runtime(&self) -> &Handle {
        &self.rt
    }

    fn writable(&self) -> Res<()> {
        NfsFs::writable(self)
    }

    /// WRITE (RFC 1813 §3.3.7) as the opener, UNSTABLE until COMMIT.
    async fn write_handle(&self, fh: FileHandle, offset: u64, data: &[u8]) -> Res<()> {
        let o = self.open_file(fh)?;
        let m = self.mount.with_credential(o.cred.clone());
        o.file.write(&V3 { m: &m, fh: &o.fh }, offset, data).await
    }

    /// COMMIT (RFC 1813 §3.3.21) as the opener.
    async fn commit_handle(&self, fh: FileHandle) -> Res<()> {
        let o = self.open_file(fh)?;
        self.commit(&o).await
    }

    async fn release_handle(&self, fh: FileHandle) -> Res<()> {
        self.do_release(fh).await
    }
}

impl<T: ClientTransport + Send + Sync + 'static> Filesystem for NfsFs<T> {
    callbacks::shared_file_methods!();

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let want = self.mount.write_size().min(MAX_FUSE_WRITE);
        callbacks::init(config, want, &self.opts);
        // Directory listings carry attributes and handles (READDIRPLUS).
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS);
        let _ = config.add_capabilities(InitFlags::FUSE_READDIRPLUS_AUTO);
        Ok(())
    }

    /// Removes what is left of silly renames when the mount ends.
    fn destroy(&mut self) {
        self.rt.block_on(self.hider().remove_left());
    }

    /// LOOKUP (RFC 1813 §3.3.3).
    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let m = self.caller(req);
        let r = self.run(async {
            let dir = self.fh(parent)?;
            let l = nfs(m.client().lookup(&dir, name.as_bytes()).await)?;
            self.entry(&m, l.object, l.obj_attributes).await
        });
        reply_entry(reply, r);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if self.inodes.forget(ino, nlookup) {
            self.ac.forget(ino.0);
        }
    }

    /// GETATTR (RFC 1813 §3.3.1).
    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let m = self.caller(req);
        let r = self.run(async {
            let fh = self.fh(ino)?;
            let a = nfs(m.client().getattr(&fh).await)?;
            Ok(self.attr(ino, &a))
        });
        reply_attr(reply, r);
    }

    /// SETATTR (RFC 1813 §3.3.2): mode, owner, size and times.
    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let s = Sattr3 {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: set_time(atime),
            mtime: set_time(mtime),
        };
        let m = self.caller(req);
        reply_attr(reply, self.run(self.do_setattr(&m, ino, s)));
    }

    /// READLINK (RFC 1813 §3.3.5).
    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let m = self.caller(req);
        let r = self.run(async {
            let fh = self.fh(ino)?;
            nfs(m.client().readlink(&fh).await)
        });
        match r {
            Ok(l) => reply.data(&l.data.0),
            Err(e) => reply.error(e),
        }
    }

    /// MKDIR (RFC 1813 §3.3.9).
    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let m = self.caller(req);
        let r = self.run(async {
            self.writable()?;
            let dir = self.fh(parent)?;
            let s = Sattr3 {
                mode: Some(mode & !umask & 0o7777),
                ..Sattr3::default()
            };
            let c = nfs(m.client().mkdir(&dir, name.as_bytes(), s).await)?;
            self.created(&m, &dir, name, c).await
        });
        reply_entry(reply, r);
    }

    /// MKNOD (RFC 1813 §3.3.11) for FIFOs, sockets and devices; CREATE
    /// GUARDED for a regular file.
    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let m = self.caller(req);
        let r = self.run(async {
            self.writable()?;
            let dir = self.fh(parent)?;
            let attributes = Sattr3 {
                mode: Some(mode & !umask & 0o7777),
                ..Sattr3::default()
            };
            let special = |ftype| Mknoddata3::Special {
                ftype,
                attributes: attributes.clone(),
            };
            let device = |ftype| {
                let (major, minor) = decode_dev(rdev);
                Mknoddata3::Device {
                    ftype,
                    attributes: attributes.clone(),
                    spec: Specdata3 {
                        specdata1: major,
                        specdata2: minor,
                    },
                }
            };
            let c = m.client();
            let n = name.as_bytes();
            let res = match mode & libc::S_IFMT {
                libc::S_IFREG => {
                    let how = Createhow3::Guarded(attributes.clone());
                    c.create(&dir, n, how).await
                }
                libc::S_IFIFO => c.mknod(&dir, n, special(Ftype3::NF3FIFO)).await,
                libc::S_IFSOCK => c.mknod(&dir, n, special(Ftype3::NF3SOCK)).await,
                libc::S_IFCHR => c.mknod(&dir, n, device(Ftype3::NF3CHR)).await,
                libc::S_IFBLK => c.mknod(&dir, n, device(Ftype3::NF3BLK)).await,
                _ => return Err(Errno::EINVAL),
            };
            let res = nfs(res)?;
            self.created(&m, &dir, name, res).await
        });
        reply_entry(reply, r);
    }

    /// REMOVE (RFC 1813 §3.3.12), or a silly rename of a file still open
    /// here.
    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let cred = self.cred(req);
        let r = self.run(async {
            self.writable()?;
            let dir = self.fh(parent)?;
            self.hider()
                .remove_or_hide(&cred, &dir, name.as_bytes())
                .await
        });
        reply_empty(reply, r);
    }

    /// RMDIR (RFC 1813 §3.3.13).
    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let m = self.caller(req);
        let r = self.run(async {
            self.writable()?;
            let dir = self.fh(parent)?;
            nfs(m.client().rmdir(&dir, name.as_bytes()).await).map(drop)
        });
        reply_empty(reply, r);
    }

    /// SYMLINK (RFC 1813 §3.3.10).
    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let m = self.caller(req);
        let r = self.run(async {
            self.writable()?;
            let dir = self.fh(parent)?;
            let t = target.as_os_str().as_bytes();
            let res = nfs(m
                .client()
                .symlink(&dir, link_name.as_bytes(), t, Sattr3::default())
                .await)?;
            self.created(&m, &dir, link_name, res).await
        });
        reply_entry(reply, r);
    }

    /// RENAME (RFC 1813 §3.3.14), after a silly rename of a target still
    /// open here; `renameat2` flags are refused with `EINVAL`, which
    /// makes callers fall back to plain `rename`.
    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let cred = self.cred(req);
        let r = self.run(async {
            if !flags.is_empty() {
                return Err(Errno::EINVAL);
            }
            self.writable()?;
            let from = self.fh(parent)?;
            let to = self.fh(newparent)?;
            self.hider()
                .hide_if_open(&cred, &to, newname.as_bytes())
                .await?;
            let m = self.mount.with_credential(cred.clone());
            nfs(m
                .client()
                .rename(&from, name.as_bytes(), &to, newname.as_bytes())
                .await)
            .map(drop)
        });
        reply_empty(reply, r);
    }

    /// LINK (RFC 1813 §3.3.15).
    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let m = self.caller(req);
        let r = self.run(async {
            self.writable()?;
            let fh = self.fh(ino)?;
            let dir = self.fh(newparent)?;
            let l = nfs(m.client().link(&fh, &dir, newname.as_bytes()).await)?;
            self.entry(&m, fh, l.file_attributes).await
        });
        reply_entry(reply, r);
    }

    /// OPEN: ACCESS for the open mode as the caller, which also brings
    /// fresh attributes (close-to-open consistency, [`open`]).
    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let cred = self.cred(req);
        match self.run(self.do_open(cred, ino, flags.0, flags.acc_mode())) {
            Ok((h, f)) => reply.opened(h, f),
            Err(e) => reply.error(e),
        }
    }

    /// READ (RFC 1813 §3.3.6) as the opener, pipelined for large
    /// requests.
    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let r = self.run(async {
            let o = self.open_file(fh)?;
            let m = self.mount.with_credential(o.cred.clone());
            let mut buf = vec![0u8; size.min(MAX_FUSE_READ) as usize];
            let n = nfs(m.read_at(&o.fh, offset, &mut buf).await)?;
            buf.truncate(n);
            Ok(buf)
        });
        match r {
            Ok(b) => reply.data(&b),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.fh(ino) {
            Ok(_) => {
                let id = self.handle();
                let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
                dirs.insert(id, dir::OpenDir::default());
                reply.opened(FileHandle(id), FopenFlags::empty());
            }
            Err(e) => reply.error(e),
        }
    }

    /// READDIRPLUS (RFC 1813 §3.3.17) for plain `readdir`: the entry
    /// types come from the attributes. FUSE offsets are NFS cookies.
    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let m = self.caller(req);
        let r = self.run(self.fill_dir(&m, ino, fh, offset, &mut reply));
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// READDIRPLUS (RFC 1813 §3.3.17): each entry but `.` and `..` hands
    /// the kernel one lookup of its inode.
    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let m = self.caller(req);
        let r = self.run(self.fill_dir_plus(&m, ino, fh, offset, &mut reply));
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        dirs.remove(&fh.0);
        reply.ok();
    }

    /// FSSTAT (RFC 1813 §3.3.18).
    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let m = self.caller(req);
        let r = self.run(async { nfs(m.client().fsstat(m.root()).await) });
        match r {
            Ok(s) => reply.statfs(
                s.tbytes / STATFS_BSIZE,
                s.fbytes / STATFS_BSIZE,
                s.abytes / STATFS_BSIZE,
                s.tfiles,
                s.afiles,
                STATFS_BSIZE as u32,
                NFS3_MAXNAMLEN as u32,
                STATFS_BSIZE as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let m = self.caller(req);
        reply_empty(reply, self.run(self.do_access(&m, ino, mask)));
    }

    /// CREATE (RFC 1813 §3.3.8): GUARDED for `O_EXCL`, else UNCHECKED.
    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let cred = self.cred(req);
        let m = self.mount.with_credential(cred.clone());
        let r = self.run(async {
            self.writable()?;
            let dir = self.fh(parent)?;
            let s = Sattr3 {
                mode: Some(mode & !umask & 0o7777),
                ..Sattr3::default()
            };
            let how = if flags & libc::O_EXCL != 0 {
                Createhow3::Guarded(s)
            } else {
                Createhow3::Unchecked(s)
            };
            let c = nfs(m.client().create(&dir, name.as_bytes(), how).await)?;
            let (fh, attr, ttl) = self.created(&m, &dir, name, c).await?;
            let h = self.new_open_file(fh, attr.ino, cred.clone());
            Ok((attr, ttl, h))
        });
        match r {
            Ok((a, ttl, h)) => reply.created(&ttl, &a, Generation(0), h, FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }
}
