//! [`NfsFs4`]: a `fuser::Filesystem` whose operations are NFSv4.1 (or
//! 4.2) COMPOUNDs (RFC 8881 §18) on the client library's [`Session`].
//!
//! As for NFSv3 ([`super::fs`]): FUSE callbacks run their calls with
//! `Handle::block_on`; inode numbers are file ids; every call carries the
//! AUTH_SYS credential of the process behind the request
//! ([`Session::with_credential`]: one session, many users), and an open
//! file's READs, WRITEs, COMMITs and CLOSE carry its opener's. Object
//! operations fetch the attributes in the same COMPOUND.
//!
//! Open state (RFC 8881 §9): `open(2)` is an OPEN by file handle
//! (CLAIM_FH) for the access asked, `creat(2)` an OPEN that creates
//! (GUARDED4 for `O_EXCL`); the last `close` of the handle is a CLOSE
//! after COMMIT. The OPEN's attributes give close-to-open consistency
//! (§10.3.1): the kernel keeps its cached data only when they are
//! unchanged. With a back channel the OPENs take delegations, and opens
//! of a delegated file are served locally until it is recalled
//! ([`deleg`], §10.4). The lease is kept by the SEQUENCE of every
//! call, and by [`renew_lease`] when idle (§8.3). Unlinking an open file
//! renames it away until its last close ([`super::silly`]).

mod convert;
mod deleg;
mod files;
mod reclaim;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::future::Future;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, Request, TimeOrNow,
};
use nfs_client::nfs::v4::attr::SetTime4;
use nfs_client::nfs::v4::{
    Createtype4, Linktext4, NfsFh4, NfsFtype4, Nfstime4, Specdata4, Stateid4, NFS4_MAXNAMLEN,
};
use nfs_client::v4::{Attrs, DirEntry, SetAttrs};
use oncrpc::msg::OpaqueAuth;
use oncrpc::ClientTransport;
use tokio::runtime::Handle;

pub(crate) use nfs_client::v4::Session;

use super::cache::AttrCache;
use super::callbacks::{
    self, access_denied, reply_attr, reply_empty, reply_entry, OpenIo, ACCESS_ALL,
};
use super::creds::Creds;
use super::handles::OpenHandles;
use super::options::MountOpts;
use super::silly::Opens;
use super::table::{decode_dev, file_attr, file_type, Inodes};
use convert::{errno4, fattr3, ftype};
use files::Open4;

/// Largest FUSE WRITE asked for, whatever the server allows.
const MAX_FUSE_WRITE: u32 = 1 << 20;
/// Block size reported by `statfs`.
const STATFS_BSIZE: u64 = 4096;

type Res<T> = Result<T, Errno>;

/// What the kernel is handed for an object: its handle, attributes, and
/// how long it may cache them and its name.
type Entry = (NfsFh4, FileAttr, Duration);

/// The FUSE file system over one NFSv4 session.
#[derive(Debug)]
pub(crate) struct NfsFs4<T> {
    session: Arc<Session<T>>,
    root: NfsFh4,
    rt: Handle,
    inodes: Inodes<NfsFh4>,
    creds: Creds,
    ac: AttrCache,
    files: OpenHandles<Open4>,
    /// The delegations held, when the session has a back channel.
    delegs: Option<Arc<deleg::MountDelegs>>,
    opens: Mutex<Opens<NfsFh4>>,
    /// Open directories: the listing read at offset 0.
    dirs: Mutex<HashMap<u64, Vec<DirEntry>>>,
    next_handle: AtomicU64,
    opts: MountOpts,
    maxread: u32,
    maxwrite: u32,
}

fn nfs<T>(r: nfs_client::v4::Result<T>) -> Res<T> {
    r.map_err(|e| {
        tracing::debug!(error = %e, "NFSv4 call failed");
        errno4(&e)
    })
}

fn set_time(t: Option<TimeOrNow>) -> Option<SetTime4> {
    match t? {
        TimeOrNow::Now => Some(SetTime4::ServerTime),
        TimeOrNow::SpecificTime(t) => {
            let (seconds, nseconds) = match t.duration_since(UNIX_EPOCH) {
                Ok(d) => (
                    i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                    d.subsec_nanos(),
                ),
                Err(e) => (
                    -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
                    0,
                ),
            };
            Some(SetTime4::ClientTime(Nfstime4 { seconds, nseconds }))
        }
    }
}

impl<T: ClientTransport + Send + Sync + 'static> NfsFs4<T> {
    /// A file system whose root is directory `root` (attributes
    /// `root_attrs`) of `session`, moving at most `maxread` and
    /// `maxwrite` bytes per READ and WRITE, running its calls on `rt`.
    pub(crate) fn new(
        session: Arc<Session<T>>,
        root: NfsFh4,
        root_attrs: &Attrs,
        (maxread, maxwrite): (u32, u32),
        rt: Handle,
        opts: MountOpts,
    ) -> anyhow::Result<Self> {
        let Some(root_fileid) = root_attrs.fileid else {
            anyhow::bail!("the server gives no file id for the root (FUSE needs one)");
        };
        let me = nfs_client::process_auth_sys();
        Ok(Self {
            session,
            inodes: Inodes::new(root_fileid, root.clone()),
            root,
            rt,
            creds: Creds::new(me.machinename, me.stamp),
            ac: AttrCache::new(opts.ac),
            files: OpenHandles::default(),
            delegs: None,
            opens: Mutex::new(Opens::default()),
            dirs: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            opts,
            maxread: maxread.max(1),
            maxwrite: maxwrite.clamp(1, MAX_FUSE_WRITE),
        })
    }

    /// The credential of the process behind `req`.
    fn cred(&self, req: &Request) -> OpaqueAuth {
        self.creds.of(req.pid(), req.uid(), req.gid())
    }

    /// The session, with calls made as `cred`.
    /// Has the session reclaim this mount's opens when it is recovered
    /// with a new client id (a server restart, an expired lease;
    /// [`reclaim`]).
    pub(crate) fn reclaim_opens_on_recovery(&self) {
        self.session.set_reclaim(Arc::new(reclaim::MountOpens {
            files: self.files.clone(),
            delegs: self.delegs.clone(),
        }));
    }

    fn as_cred(&self, cred: OpaqueAuth) -> Session<&T> {
        self.session.with_credential(cred)
    }

    /// The session, with calls made as the process behind `req`.
    fn caller(&self, req: &Request) -> Session<&T> {
        self.as_cred(self.cred(req))
    }

    fn run<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    fn fh(&self, ino: INodeNo) -> Res<NfsFh4> {
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

    /// FUSE attributes of inode `ino` from fresh server attributes, and
    /// how long the kernel may cache them.
    fn attr(&self, ino: INodeNo, a: &Attrs) -> Res<(FileAttr, Duration)> {
        let f = fattr3(a).ok_or(Errno::EIO)?;
        let ttl = self.ac.observe(ino.0, &f);
        Ok((file_attr(ino, &f, self.maxwrite), ttl))
    }

    /// An object handed to the kernel, which then holds one more lookup
    /// of it.
    fn entry(&self, fh: NfsFh4, a: &Attrs) -> Res<Entry> {
        let fileid = a.fileid.ok_or(Errno::EIO)?;
        let ino = self.inodes.ino(fileid).ok_or(Errno::EIO)?;
        self.inodes.remember(ino, &fh);
        let (attr, ttl) = self.attr(ino, a)?;
        Ok((fh, attr, ttl))
    }

    /// CREATE (RFC 8881 §18.4) of a non-regular object.
    async fn create_object(
        &self,
        s: &Session<&T>,
        parent: INodeNo,
        name: &OsStr,
        objtype: Createtype4,
        mode: u32,
    ) -> Res<Entry> {
        self.writable()?;
        let dir = self.fh(parent)?;
        let (fh, a) = nfs(s.create_object(&dir, name.as_bytes(), objtype, mode).await)?;
        self.entry(fh, &a)
    }

    /// ACCESS (RFC 8881 §18.1) for `access(2)`'s mask, mapped as Linux's
    /// client does: write is any of modify, extend or delete; execute is
    /// lookup on a directory.
    async fn do_access(&self, s: &Session<&T>, ino: INodeNo, mask: AccessFlags) -> Res<()> {
        let fh = self.fh(ino)?;
        if mask == AccessFlags::F_OK {
            return Ok(());
        }
        if mask.contains(AccessFlags::W_OK) {
            self.writable()?;
        }
        let (g, a) = nfs(s.access(&fh, ACCESS_ALL).await)?;
        let denied = access_denied(mask, g, a.ftype == NfsFtype4::NF4DIR);
        if denied {
            Err(Errno::EACCES)
        } else {
            Ok(())
        }
    }

    /// The listing of directory `ino` for handle `dh`: read whole at
    /// offset 0 (READDIR, RFC 8881 §18.23, until `eof`), kept for the
    /// offsets after.
    async fn listing(
        &self,
        s: &Session<&T>,
        ino: INodeNo,
        dh: FileHandle,
        offset: u64,
    ) -> Res<Vec<DirEntry>> {
        if offset > 0 {
            let dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(l) = dirs.get(&dh.0) {
                return Ok(l.clone());
            }
        }
        let dir = self.fh(ino)?;
        let l = nfs(s.readdir(&dir).await)?;
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        dirs.insert(dh.0, l.clone());
        Ok(l)
    }
}

impl<T: ClientTransport + Send + Sync + 'static> OpenIo for NfsFs4<T> {
    fn runtime(&self) -> &Handle {
        &self.rt
    }

    fn writable(&self) -> Res<()> {
        NfsFs4::writable(self)
    }

    /// WRITE (RFC 8881 §18.32) with the open stateid, as the opener,
    /// UNSTABLE until COMMIT.
    async fn write_handle(&self, fh: FileHandle, offset: u64, data: &[u8]) -> Res<()> {
        self.do_write(fh, offset, data).await
    }

    /// COMMIT (RFC 8881 §18.3) as the opener.
    async fn commit_handle(&self, fh: FileHandle) -> Res<()> {
        let o = self.open_file(fh)?;
        self.commit(&o).await
    }

    /// COMMIT, CLOSE (RFC 8881 §18.2), and the REMOVE a silly rename put
    /// off.
    async fn release_handle(&self, fh: FileHandle) -> Res<()> {
        self.do_release(fh).await
    }
}

/// FUSE file type of a listing entry (regular when the server left the
/// type out).
fn entry_type(e: &DirEntry) -> FileType {
    file_type(ftype(e.ftype.unwrap_or(NfsFtype4::NF4REG)))
}

impl<T: ClientTransport + Send + Sync + 'static> Filesystem for NfsFs4<T> {
    callbacks::shared_file_methods!();

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        callbacks::init(config, self.maxwrite, &self.opts);
        Ok(())
    }

    /// Closes what is still open and removes what is left of silly
    /// renames when the mount ends.
    fn destroy(&mut self) {
        self.rt.block_on(self.close_all());
    }

    /// LOOKUP (RFC 8881 §18.13) with GETFH and GETATTR.
    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let s = self.caller(req);
        let r = self.run(async {
            let dir = self.fh(parent)?;
            let (fh, a) = nfs(s.lookup_attrs(&dir, name.as_bytes()).await)?;
            self.entry(fh, &a)
        });
        reply_entry(reply, r);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if self.inodes.forget(ino, nlookup) {
            self.ac.forget(ino.0);
        }
    }

    /// GETATTR (RFC 8881 §18.7).
    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let s = self.caller(req);
        let r = self.run(async {
            let fh = self.fh(ino)?;
            let a = nfs(s.getattr(&fh).await)?;
            self.attr(ino, &a)
        });
        reply_attr(reply, r);
    }

    /// SETATTR (RFC 8881 §18.30): mode, owner, size (with the open
    /// stateid of the handle given, else the anonymous one) and times.
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
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttrs {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: set_time(atime),
            mtime: set_time(mtime),
        };
        let s = self.caller(req);
        let r = self.run(async {
            self.writable()?;
            let nfh = self.fh(ino)?;
            let stateid = match fh.map(|h| self.open_file(h)) {
                Some(Ok(o)) if size.is_some() => o.file().stateid,
                _ => Stateid4::ANONYMOUS,
            };
            let a = nfs(s.setattr(&nfh, stateid, &set).await)?;
            if let (Some(size), Some(m)) = (size, &self.delegs) {
                m.table.wrote(&nfh, size, true);
            }
            self.attr(ino, &a)
        });
        reply_attr(reply, r);
    }

    /// READLINK (RFC 8881 §18.24).
    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let s = self.caller(req);
        let r = self.run(async {
            let fh = self.fh(ino)?;
            nfs(s.readlink(&fh).await)
        });
        match r {
            Ok(l) => reply.data(&l),
            Err(e) => reply.error(e),
        }
    }

    /// CREATE of a directory (RFC 8881 §18.4).
    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let s = self.caller(req);
        let mode = mode & !umask & 0o7777;
        let r = self.run(self.create_object(&s, parent, name, Createtype4::Dir, mode));
        reply_entry(reply, r);
    }

    /// CREATE (RFC 8881 §18.4) of a FIFO, socket or device; a regular
    /// file is an OPEN that creates it (GUARDED4), CLOSEd at once.
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
        let cred = self.cred(req);
        let s = self.as_cred(cred.clone());
        let perm = mode & !umask & 0o7777;
        let (major, minor) = decode_dev(rdev);
        let spec = Specdata4 {
            specdata1: major,
            specdata2: minor,
        };
        let r = self.run(async {
            let objtype = match mode & libc::S_IFMT {
                libc::S_IFREG => return self.mknod_file(cred, parent, name, perm).await,
                libc::S_IFIFO => Createtype4::Fifo,
                libc::S_IFSOCK => Createtype4::Socket,
                libc::S_IFCHR => Createtype4::Char(spec),
                libc::S_IFBLK => Createtype4::Block(spec),
                _ => return Err(Errno::EINVAL),
            };
            self.create_object(&s, parent, name, objtype, perm).await
        });
        reply_entry(reply, r);
    }

    /// REMOVE (RFC 8881 §18.25), or a silly rename of a file still open
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

    /// REMOVE (RFC 8881 §18.25) of a directory.
    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let s = self.caller(req);
        let r = self.run(async {
            self.writable()?;
            let dir = self.fh(parent)?;
            let n = std::str::from_utf8(name.as_bytes()).map_err(|_| Errno::EINVAL)?;
            nfs(s.remove(&dir, n).await)
        });
        reply_empty(reply, r);
    }

    /// CREATE (RFC 8881 §18.4) of a symbolic link.
    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let s = self.caller(req);
        let t = bytes::Bytes::copy_from_slice(target.as_os_str().as_bytes());
        let objtype = Createtype4::Link(Linktext4(t));
        let r = self.run(self.create_object(&s, parent, link_name, objtype, 0o777));
        reply_entry(reply, r);
    }

    /// RENAME (RFC 8881 §18.26), after a silly rename of a target still
    /// open here; `renameat2` flags are refused with `EINVAL`.
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
            let utf8 = |n: &OsStr| std::str::from_utf8(n.as_bytes()).map(str::to_owned);
            let (a, b) = (utf8(name), utf8(newname));
            let (Ok(a), Ok(b)) = (a, b) else {
                return Err(Errno::EINVAL);
            };
            nfs(self.as_cred(cred.clone()).rename(&from, &a, &to, &b).await)
        });
        reply_empty(reply, r);
    }

    /// LINK (RFC 8881 §18.9).
    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let s = self.caller(req);
        let r = self.run(async {
            self.writable()?;
            let fh = self.fh(ino)?;
            let dir = self.fh(newparent)?;
            let a = nfs(s.link(&fh, &dir, newname.as_bytes()).await)?;
            self.entry(fh, &a)
        });
        reply_entry(reply, r);
    }

    /// OPEN (RFC 8881 §18.16) by handle as the caller ([`files`]).
    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let cred = self.cred(req);
        match self.run(self.do_open(cred, ino, flags.acc_mode())) {
            Ok((h, f)) => reply.opened(h, f),
            Err(e) => reply.error(e),
        }
    }

    /// READ (RFC 8881 §18.22) with the open stateid, as the opener.
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
        match self.run(self.do_read(fh, offset, size)) {
            Ok(b) => reply.data(&b),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.fh(ino) {
            Ok(_) => reply.opened(FileHandle(self.handle()), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    /// READDIR (RFC 8881 §18.23): `.` and `..` first (NFSv4 lists
    /// neither), then the entries; FUSE offsets count entries.
    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let s = self.caller(req);
        let r = self.run(self.listing(&s, ino, fh, offset));
        let list = match r {
            Ok(l) => l,
            Err(e) => return reply.error(e),
        };
        let dots = [
            (ino, FileType::Directory, "."),
            (ino, FileType::Directory, ".."),
        ];
        let dots = dots.iter().map(|&(i, t, n)| Some((i, t, OsStr::new(n))));
        let rest = list.iter().map(|e| {
            let ino = self.inodes.ino(e.fileid?)?;
            Some((ino, entry_type(e), OsStr::from_bytes(&e.name)))
        });
        for (i, item) in dots.chain(rest).enumerate().skip(offset as usize) {
            let Some((eino, kind, name)) = item else {
                continue;
            };
            if reply.add(eino, i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
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

    /// GETATTR of the space and file counts (RFC 8881 §5.8.2).
    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.caller(req);
        match self.run(async { nfs(s.statfs(&self.root).await) }) {
            Ok(st) => reply.statfs(
                st.space_total / STATFS_BSIZE,
                st.space_free / STATFS_BSIZE,
                st.space_avail / STATFS_BSIZE,
                st.files_total,
                st.files_avail,
                STATFS_BSIZE as u32,
                NFS4_MAXNAMLEN as u32,
                STATFS_BSIZE as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let s = self.caller(req);
        reply_empty(reply, self.run(self.do_access(&s, ino, mask)));
    }

    /// OPEN (RFC 8881 §18.16) that creates: GUARDED4 for `O_EXCL`, else
    /// UNCHECKED4.
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
        let mode = mode & !umask & 0o7777;
        let r = self.run(self.do_create(cred, parent, name, mode, flags));
        match r {
            Ok((a, ttl, h)) => reply.created(&ttl, &a, Generation(0), h, FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }
}

/// Keeps the lease of `s` (RFC 8881 §8.3): every `lease / 3` of
/// idleness, a SEQUENCE alone; a failed renewal is logged and tried
/// again at the next tick. Runs until aborted.
pub(crate) async fn renew_lease<T: ClientTransport>(s: Arc<Session<T>>, lease: Duration) {
    let tick = (lease / 3).max(Duration::from_secs(1));
    loop {
        tokio::time::sleep(tick / 2).await;
        if s.idle_for() < tick {
            continue;
        }
        match s.renew().await {
            Ok(flags) if flags != 0 => {
                tracing::debug!(flags, "lease renewed; SEQUENCE status flags")
            }
            Ok(_) => tracing::trace!("lease renewed"),
            Err(e) => tracing::warn!(error = %e, "renewing the NFSv4 lease failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfs_client::nfs::v3::Ftype3;

    fn entry(ftype: Option<NfsFtype4>) -> DirEntry {
        DirEntry {
            name: bytes::Bytes::from_static(b"x"),
            cookie: 3,
            ftype,
            fileid: Some(9),
        }
    }

    #[test]
    fn listing_entries_keep_their_types() {
        assert_eq!(
            entry_type(&entry(Some(NfsFtype4::NF4DIR))),
            FileType::Directory
        );
        assert_eq!(
            entry_type(&entry(Some(NfsFtype4::NF4LNK))),
            FileType::Symlink
        );
        assert_eq!(entry_type(&entry(None)), FileType::RegularFile);
        assert_eq!(file_type(Ftype3::NF3FIFO), FileType::NamedPipe);
    }

    #[test]
    fn times_before_1970_are_negative_seconds() {
        let t = UNIX_EPOCH - Duration::from_secs(5);
        assert_eq!(
            set_time(Some(TimeOrNow::SpecificTime(t))),
            Some(SetTime4::ClientTime(Nfstime4 {
                seconds: -5,
                nseconds: 0
            }))
        );
        assert_eq!(set_time(Some(TimeOrNow::Now)), Some(SetTime4::ServerTime));
        assert_eq!(set_time(None), None);
    }
}
