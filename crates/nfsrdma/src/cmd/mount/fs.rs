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
    InitFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use nfs_client::nfs::v3::{
    Create3ResOk, Createhow3, Fattr3, Ftype3, Mknoddata3, NfsFh3, Sattr3, SetTime, Specdata3,
    ACCESS3_DELETE, ACCESS3_EXECUTE, ACCESS3_EXTEND, ACCESS3_LOOKUP, ACCESS3_MODIFY, ACCESS3_READ,
    NFS3_MAXNAMLEN,
};
use nfs_client::Mount;
use oncrpc::ClientTransport;
use tokio::runtime::Handle;

use super::table::{decode_dev, errno, file_attr, nfs_time, Inodes};
use super::unstable::OpenFile;

mod dir;

/// Largest FUSE WRITE asked for, whatever the server allows.
const MAX_FUSE_WRITE: u32 = 1 << 20;
/// Largest FUSE READ served in one reply.
const MAX_FUSE_READ: u32 = 4 << 20;
/// Block size reported by `statfs`.
const STATFS_BSIZE: u64 = 4096;

/// Mount-wide settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FsOptions {
    /// How long the kernel may cache attributes and names.
    pub(crate) ttl: Duration,
    /// Refuse every change with `EROFS`.
    pub(crate) read_only: bool,
    /// Let the kernel cache writes and send them in large pieces
    /// (FUSE_WRITEBACK_CACHE); it then trusts its own size and mtime of
    /// regular files over the server's.
    pub(crate) writeback_cache: bool,
}

type Res<T> = Result<T, Errno>;

/// The FUSE file system over one mounted export.
#[derive(Debug)]
pub(crate) struct NfsFs<T> {
    mount: Mount<T>,
    rt: Handle,
    inodes: Inodes,
    files: Mutex<HashMap<u64, Arc<OpenFile>>>,
    dirs: Mutex<HashMap<u64, dir::OpenDir>>,
    next_handle: AtomicU64,
    opts: FsOptions,
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
        opts: FsOptions,
    ) -> Self {
        let blksize = mount.write_size().min(MAX_FUSE_WRITE);
        Self {
            mount,
            rt,
            inodes: Inodes::new(root.fileid, root_fh),
            files: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            opts,
            blksize,
        }
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

    fn open_file(&self, fh: FileHandle) -> Res<Arc<OpenFile>> {
        let files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        files.get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    fn new_open_file(&self, fh: NfsFh3) -> FileHandle {
        let id = self.handle();
        let of = Arc::new(OpenFile::new(fh));
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        files.insert(id, of);
        FileHandle(id)
    }

    /// Attributes for an object handed to the kernel, which then holds
    /// one more lookup of it.
    async fn entry(&self, fh: NfsFh3, attrs: Option<Fattr3>) -> Res<(NfsFh3, FileAttr)> {
        let a = match attrs {
            Some(a) => a,
            None => nfs(self.mount.client().getattr(&fh).await)?,
        };
        let ino = self.inodes.ino(a.fileid).ok_or(Errno::EIO)?;
        self.inodes.remember(ino, &fh);
        Ok((fh, file_attr(ino, &a, self.blksize)))
    }

    /// The new object of a CREATE, MKDIR or SYMLINK (RFC 1813 §3.3.8):
    /// its handle, or a LOOKUP when the server left it out.
    async fn created(
        &self,
        dir: &NfsFh3,
        name: &OsStr,
        r: Create3ResOk,
    ) -> Res<(NfsFh3, FileAttr)> {
        match r.obj {
            Some(fh) => self.entry(fh, r.obj_attributes).await,
            None => {
                let l = nfs(self.mount.client().lookup(dir, name.as_bytes()).await)?;
                self.entry(l.object, l.obj_attributes).await
            }
        }
    }

    async fn do_setattr(&self, ino: INodeNo, s: Sattr3) -> Res<FileAttr> {
        self.writable()?;
        let fh = self.fh(ino)?;
        let c = self.mount.client();
        let wcc = nfs(c.setattr(&fh, s, None).await)?;
        let a = match wcc.after {
            Some(a) => a,
            None => nfs(c.getattr(&fh).await)?,
        };
        Ok(file_attr(ino, &a, self.blksize))
    }

    /// ACCESS (RFC 1813 §3.3.4) for `access(2)`'s mask, mapped as Linux's
    /// client does: write is any of modify, extend or delete; execute is
    /// lookup on a directory.
    async fn do_access(&self, ino: INodeNo, mask: AccessFlags) -> Res<()> {
        let fh = self.fh(ino)?;
        if mask == AccessFlags::F_OK {
            return Ok(());
        }
        if mask.contains(AccessFlags::W_OK) {
            self.writable()?;
        }
        let c = self.mount.client();
        let all = ACCESS3_READ
            | ACCESS3_LOOKUP
            | ACCESS3_MODIFY
            | ACCESS3_EXTEND
            | ACCESS3_DELETE
            | ACCESS3_EXECUTE;
        let r = nfs(c.access(&fh, all).await)?;
        let ftype = match r.obj_attributes {
            Some(a) => a.ftype,
            None => nfs(c.getattr(&fh).await)?.ftype,
        };
        let g = r.access;
        let write = if ftype == Ftype3::NF3DIR {
            ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE
        } else {
            ACCESS3_MODIFY | ACCESS3_EXTEND
        };
        let exec = if ftype == Ftype3::NF3DIR {
            ACCESS3_LOOKUP
        } else {
            ACCESS3_EXECUTE
        };
        let denied = (mask.contains(AccessFlags::R_OK) && g & ACCESS3_READ == 0)
            || (mask.contains(AccessFlags::W_OK) && g & write == 0)
            || (mask.contains(AccessFlags::X_OK) && g & exec == 0);
        if denied {
            Err(Errno::EACCES)
        } else {
            Ok(())
        }
    }
}

fn reply_entry(reply: ReplyEntry, ttl: Duration, r: Res<(NfsFh3, FileAttr)>) {
    match r {
        Ok((_, a)) => reply.entry(&ttl, &a, Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn reply_empty(reply: ReplyEmpty, r: Res<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl<T: ClientTransport + Send + Sync + 'static> Filesystem for NfsFs<T> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let want = self.mount.write_size().min(MAX_FUSE_WRITE);
        if let Err(max) = config.set_max_write(want) {
            let _ = config.set_max_write(max);
        }
        // Directory listings carry attributes and handles (READDIRPLUS).
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS);
        let _ = config.add_capabilities(InitFlags::FUSE_READDIRPLUS_AUTO);
        if self.opts.writeback_cache && !self.opts.read_only {
            if let Err(e) = config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE) {
                tracing::warn!("kernel lacks FUSE_WRITEBACK_CACHE ({e:?}): writes go through");
            }
        }
        Ok(())
    }

    /// LOOKUP (RFC 1813 §3.3.3).
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = self.run(async {
            let dir = self.fh(parent)?;
            let l = nfs(self.mount.client().lookup(&dir, name.as_bytes()).await)?;
            self.entry(l.object, l.obj_attributes).await
        });
        reply_entry(reply, self.opts.ttl, r);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.inodes.forget(ino, nlookup);
    }

    /// GETATTR (RFC 1813 §3.3.1).
    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let r = self.run(async {
            let fh = self.fh(ino)?;
            let a = nfs(self.mount.client().getattr(&fh).await)?;
            Ok(file_attr(ino, &a, self.blksize))
        });
        match r {
            Ok(a) => reply.attr(&self.opts.ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    /// SETATTR (RFC 1813 §3.3.2): mode, owner, size and times.
    fn setattr(
        &self,
        _req: &Request,
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
        match self.run(self.do_setattr(ino, s)) {
            Ok(a) => reply.attr(&self.opts.ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    /// READLINK (RFC 1813 §3.3.5).
    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let r = self.run(async {
            let fh = self.fh(ino)?;
            nfs(self.mount.client().readlink(&fh).await)
        });
        match r {
            Ok(l) => reply.data(&l.data.0),
            Err(e) => reply.error(e),
        }
    }

    /// MKDIR (RFC 1813 §3.3.9).
    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.run(async {
            self.writable()?;
            let dir = self.fh(parent)?;
            let s = Sattr3 {
                mode: Some(mode & !umask & 0o7777),
                ..Sattr3::default()
            };
            let c = nfs(self.mount.client().mkdir(&dir, name.as_bytes(), s).await)?;
            self.created(&dir, name, c).await
        });
        reply_entry(reply, self.opts.ttl, r);
    }

    /// MKNOD (RFC 1813 §3.3.11) for FIFOs, sockets and devices; CREATE
    /// GUARDED for a regular file.
    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
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
            let c = self.mount.client();
            let res = match mode & libc::S_IFMT {
                libc::S_IFREG => {
                    let how = Createhow3::Guarded(attributes.clone());
                    c.create(&dir, name.as_bytes(), how).await
                }
                libc::S_IFIFO => {
                    c.mknod(&dir, name.as_bytes(), special(Ftype3::NF3FIFO))
                        .await
                }
                libc::S_IFSOCK => {
                    c.mknod(&dir, name.as_bytes(), special(Ftype3::NF3SOCK))
                        .await
                }
                libc::S_IFCHR => c.mknod(&dir, name.as_bytes(), device(Ftype3::NF3CHR)).await,
                libc::S_IFBLK => c.mknod(&dir, name.as_bytes(), device(Ftype3::NF3BLK)).await,
                _ => return Err(Errno::EINVAL),
            };
            let res = nfs(res)?;
            self.created(&dir, name, res).await
        });
        reply_entry(reply, self.opts.ttl, r);
    }

    /// REMOVE (RFC 1813 §3.3.12).
    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.run(async {
            self.writable()?;
            let dir = self.fh(parent)?;
            nfs(self.mount.client().remove(&dir, name.as_bytes()).await).map(drop)
        });
        reply_empty(reply, r);
    }

    /// RMDIR (RFC 1813 §3.3.13).
    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.run(async {
            self.writable()?;
            let dir = self.fh(parent)?;
            nfs(self.mount.client().rmdir(&dir, name.as_bytes()).await).map(drop)
        });
        reply_empty(reply, r);
    }

    /// SYMLINK (RFC 1813 §3.3.10).
    fn symlink(
        &self,
        _req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = self.run(async {
            self.writable()?;
            let dir = self.fh(parent)?;
            let c = self.mount.client();
            let t = target.as_os_str().as_bytes();
            let res = nfs(c
                .symlink(&dir, link_name.as_bytes(), t, Sattr3::default())
                .await)?;
            self.created(&dir, link_name, res).await
        });
        reply_entry(reply, self.opts.ttl, r);
    }

    /// RENAME (RFC 1813 §3.3.14); `renameat2` flags are refused with
    /// `EINVAL`, which makes callers fall back to plain `rename`.
    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = self.run(async {
            if !flags.is_empty() {
                return Err(Errno::EINVAL);
            }
            self.writable()?;
            let from = self.fh(parent)?;
            let to = self.fh(newparent)?;
            let c = self.mount.client();
            nfs(c
                .rename(&from, name.as_bytes(), &to, newname.as_bytes())
                .await)
            .map(drop)
        });
        reply_empty(reply, r);
    }

    /// LINK (RFC 1813 §3.3.15).
    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = self.run(async {
            self.writable()?;
            let fh = self.fh(ino)?;
            let dir = self.fh(newparent)?;
            let l = nfs(self
                .mount
                .client()
                .link(&fh, &dir, newname.as_bytes())
                .await)?;
            self.entry(fh, l.file_attributes).await
        });
        reply_entry(reply, self.opts.ttl, r);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = self.fh(ino).and_then(|fh| {
            if flags.acc_mode() != OpenAccMode::O_RDONLY {
                self.writable()?;
            }
            Ok(self.new_open_file(fh))
        });
        match r {
            Ok(h) => reply.opened(h, FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    /// READ (RFC 1813 §3.3.6), pipelined for large requests.
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
            let of = self.open_file(fh)?;
            let mut buf = vec![0u8; size.min(MAX_FUSE_READ) as usize];
            let n = nfs(self.mount.read_at(&of.fh, offset, &mut buf).await)?;
            buf.truncate(n);
            Ok(buf)
        });
        match r {
            Ok(b) => reply.data(&b),
            Err(e) => reply.error(e),
        }
    }

    /// WRITE (RFC 1813 §3.3.7), UNSTABLE until COMMIT.
    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = self.run(async {
            self.writable()?;
            let n = u32::try_from(data.len()).map_err(|_| Errno::EFBIG)?;
            let of = self.open_file(fh)?;
            nfs(of.write(&self.mount, offset, data).await)?;
            Ok(n)
        });
        match r {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    /// `close(2)`: COMMIT (RFC 1813 §3.3.21), so that errors reach the
    /// closer.
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let r = self.run(async {
            let of = self.open_file(fh)?;
            nfs(of.commit(&self.mount).await)
        });
        reply_empty(reply, r);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let of = {
            let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
            files.remove(&fh.0)
        };
        let r = match of {
            Some(of) => self.run(async { nfs(of.commit(&self.mount).await) }),
            None => Err(Errno::EBADF),
        };
        reply_empty(reply, r);
    }

    /// `fsync(2)`: COMMIT (RFC 1813 §3.3.21).
    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.run(async {
            let of = self.open_file(fh)?;
            nfs(of.commit(&self.mount).await)
        });
        reply_empty(reply, r);
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
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = self.run(self.fill_dir(ino, fh, offset, &mut reply));
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// READDIRPLUS (RFC 1813 §3.3.17): each entry but `.` and `..` hands
    /// the kernel one lookup of its inode.
    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let r = self.run(self.fill_dir_plus(ino, fh, offset, &mut reply));
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
    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let r = self.run(async { nfs(self.mount.client().fsstat(self.mount.root()).await) });
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

    /// NFSv3 has no extended attributes.
    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::from_i32(libc::EOPNOTSUPP));
    }

    /// NFSv3 has no extended attributes.
    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::from_i32(libc::EOPNOTSUPP));
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        reply_empty(reply, self.run(self.do_access(ino, mask)));
    }

    /// CREATE (RFC 1813 §3.3.8): GUARDED for `O_EXCL`, else UNCHECKED.
    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
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
            let c = nfs(self.mount.client().create(&dir, name.as_bytes(), how).await)?;
            let (fh, attr) = self.created(&dir, name, c).await?;
            Ok((attr, self.new_open_file(fh)))
        });
        match r {
            Ok((a, h)) => reply.created(&self.opts.ttl, &a, Generation(0), h, FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }
}
