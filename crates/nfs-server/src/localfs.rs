//! [`LocalFs`]: a [`Storage`] back end serving one local directory.
//!
//! Resolving a handle: a handle is 24 bytes (version, export id, inode
//! number, check word). An in-memory map from inode to export-relative
//! path is filled by every LOOKUP, READDIR and create, and checked on use (the path must still
//! name that inode on the export's device). On a miss, after a restart or
//! a rename, the export is walked breadth-first (never following symbolic
//! links, never leaving the export's device) to find the inode; a handle
//! whose inode is not found is NFS3ERR_STALE.
//!
//! Staying inside the export: paths are only ever built from the export
//! root and single checked components; `..` at the root stays at the root
//! (as Linux's nfsd does at an export root); symbolic links are never
//! followed by the server (files are opened with `O_NOFOLLOW`, attributes
//! are read with `lstat`, times set with `AT_SYMLINK_NOFOLLOW`). A client
//! racing renames of directories against symlinks could still steer an
//! in-flight operation (no `openat2(RESOLVE_BENEATH)` here yet).
//!
//! Operations run with the server process's credentials; the caller's
//! AUTH_SYS identity only shapes the ACCESS answer. IO is blocking; on a
//! multi-threaded tokio runtime it runs under `block_in_place`.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsStr;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, DirEntryExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bytes::Bytes;
use nfs::v3::{
    Createhow3, Fattr3, Filename3, Ftype3, Mknoddata3, NfsFh3, Nfsstat3, Nfstime3, Sattr3, SetTime,
    Specdata3, StableHow,
};
use rustix::buffer::spare_capacity;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat, Timespec, Timestamps, CWD};
use rustix::io::Errno;

use crate::dircursor::{CursorError, DirCursor, Entry};
use crate::fh::{fnv1a, Handle};
use crate::storage::{DirEntry, DirPage, DirRequest, DirSink, FsStat, Storage, StorageResult};

/// Largest READ served; FSINFO advertises it as `rtmax`.
pub const MAX_READ: u32 = 1 << 20;
/// Largest WRITE accepted; FSINFO advertises it as `wtmax`.
pub const MAX_WRITE: u32 = 1 << 20;

/// Maps an IO error to the NFSv3 status Linux's nfsd gives for the errno
/// (`nfserrno`); unknown errors are NFS3ERR_IO.
pub fn io_status(e: &io::Error) -> Nfsstat3 {
    let Some(errno) = Errno::from_io_error(e) else {
        return Nfsstat3::NFS3ERR_IO;
    };
    match errno {
        Errno::PERM => Nfsstat3::NFS3ERR_PERM,
        Errno::NOENT => Nfsstat3::NFS3ERR_NOENT,
        Errno::NXIO => Nfsstat3::NFS3ERR_NXIO,
        Errno::ACCESS => Nfsstat3::NFS3ERR_ACCES,
        Errno::EXIST => Nfsstat3::NFS3ERR_EXIST,
        Errno::XDEV => Nfsstat3::NFS3ERR_XDEV,
        Errno::NODEV => Nfsstat3::NFS3ERR_NODEV,
        Errno::NOTDIR => Nfsstat3::NFS3ERR_NOTDIR,
        Errno::ISDIR => Nfsstat3::NFS3ERR_ISDIR,
        Errno::INVAL | Errno::LOOP => Nfsstat3::NFS3ERR_INVAL,
        Errno::FBIG => Nfsstat3::NFS3ERR_FBIG,
        Errno::NOSPC => Nfsstat3::NFS3ERR_NOSPC,
        Errno::ROFS => Nfsstat3::NFS3ERR_ROFS,
        Errno::MLINK => Nfsstat3::NFS3ERR_MLINK,
        Errno::NAMETOOLONG => Nfsstat3::NFS3ERR_NAMETOOLONG,
        Errno::NOTEMPTY => Nfsstat3::NFS3ERR_NOTEMPTY,
        Errno::DQUOT => Nfsstat3::NFS3ERR_DQUOT,
        Errno::STALE => Nfsstat3::NFS3ERR_STALE,
        Errno::OPNOTSUPP => Nfsstat3::NFS3ERR_NOTSUPP,
        _ => Nfsstat3::NFS3ERR_IO,
    }
}

fn st<T>(r: io::Result<T>) -> StorageResult<T> {
    r.map_err(|e| io_status(&e))
}

fn time3(secs: i64, nsecs: i64) -> Nfstime3 {
    Nfstime3 {
        seconds: u32::try_from(secs.max(0)).unwrap_or(u32::MAX),
        nseconds: u32::try_from(nsecs.clamp(0, 999_999_999)).unwrap_or(0),
    }
}

/// `fattr3` from `lstat` data (RFC 1813 §2.5).
pub fn fattr_from(meta: &Metadata, fsid: u64) -> Fattr3 {
    let ft = FileType::from_raw_mode(meta.mode());
    let ftype = match ft {
        FileType::Directory => Ftype3::NF3DIR,
        FileType::Symlink => Ftype3::NF3LNK,
        FileType::BlockDevice => Ftype3::NF3BLK,
        FileType::CharacterDevice => Ftype3::NF3CHR,
        FileType::Socket => Ftype3::NF3SOCK,
        FileType::Fifo => Ftype3::NF3FIFO,
        _ => Ftype3::NF3REG,
    };
    let rdev = meta.rdev();
    Fattr3 {
        ftype,
        mode: meta.mode() & 0o7777,
        nlink: u32::try_from(meta.nlink()).unwrap_or(u32::MAX),
        uid: meta.uid(),
        gid: meta.gid(),
        size: meta.size(),
        used: meta.blocks().saturating_mul(512),
        rdev: Specdata3 {
            specdata1: rustix::fs::major(rdev),
            specdata2: rustix::fs::minor(rdev),
        },
        fsid,
        fileid: meta.ino(),
        atime: time3(meta.atime(), meta.atime_nsec()),
        mtime: time3(meta.mtime(), meta.mtime_nsec()),
        ctime: time3(meta.ctime(), meta.ctime_nsec()),
    }
}

/// `fattr3` from an `fstatat` result, as [`fattr_from`].
#[allow(clippy::unnecessary_cast)] // field widths differ by architecture
pub fn fattr_from_stat(s: &Stat, fsid: u64) -> Fattr3 {
    let ftype = match FileType::from_raw_mode(s.st_mode as u32) {
        FileType::Directory => Ftype3::NF3DIR,
        FileType::Symlink => Ftype3::NF3LNK,
        FileType::BlockDevice => Ftype3::NF3BLK,
        FileType::CharacterDevice => Ftype3::NF3CHR,
        FileType::Socket => Ftype3::NF3SOCK,
        FileType::Fifo => Ftype3::NF3FIFO,
        _ => Ftype3::NF3REG,
    };
    let rdev = s.st_rdev as u64;
    Fattr3 {
        ftype,
        mode: s.st_mode as u32 & 0o7777,
        nlink: u32::try_from(s.st_nlink as u64).unwrap_or(u32::MAX),
        uid: s.st_uid,
        gid: s.st_gid,
        size: s.st_size.max(0) as u64,
        used: (s.st_blocks as u64).saturating_mul(512),
        rdev: Specdata3 {
            specdata1: rustix::fs::major(rdev),
            specdata2: rustix::fs::minor(rdev),
        },
        fsid,
        fileid: s.st_ino as u64,
        atime: time3(s.st_atime as i64, s.st_atime_nsec as i64),
        mtime: time3(s.st_mtime as i64, s.st_mtime_nsec as i64),
        ctime: time3(s.st_ctime as i64, s.st_ctime_nsec as i64),
    }
}

/// A directory on the local file system exported over NFSv3.
#[derive(Debug)]
pub struct LocalFs {
    root: PathBuf,
    export_id: u64,
    dev: u64,
    root_ino: u64,
    read_only: bool,
    verifier: [u8; 8],
    /// Inode number to export-relative path.
    paths: Mutex<HashMap<u64, PathBuf>>,
}

/// A resolved handle: the inode's path and its `lstat` data.
struct Node {
    rel: PathBuf,
    abs: PathBuf,
    meta: Metadata,
}

impl LocalFs {
    /// Exports `dir`. The export id, and so every handle, depends on the
    /// canonical path and the device number, which survive a restart.
    /// The write verifier is new for each instance.
    pub fn new(dir: impl AsRef<Path>, read_only: bool) -> io::Result<Self> {
        let root = fs::canonicalize(dir.as_ref())?;
        let meta = fs::symlink_metadata(&root)?;
        if !meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "export is not a directory",
            ));
        }
        let export_id = fnv1a(&[root.as_os_str().as_bytes(), &meta.dev().to_be_bytes()]);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let verifier = fnv1a(&[
            &now.as_nanos().to_be_bytes(),
            &std::process::id().to_be_bytes(),
            &export_id.to_be_bytes(),
        ])
        .to_be_bytes();
        let mut paths = HashMap::new();
        paths.insert(meta.ino(), PathBuf::new());
        Ok(Self {
            root,
            export_id,
            dev: meta.dev(),
            root_ino: meta.ino(),
            read_only,
            verifier,
            paths: Mutex::new(paths),
        })
    }

    /// The canonical path of the export.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// The export id carried by every handle.
    pub fn export_id(&self) -> u64 {
        self.export_id
    }

    /// The `fsid` reported in attributes: the export id, so two exports on
    /// one device still look like different file systems.
    fn fsid(&self) -> u64 {
        self.export_id
    }

    fn handle_of(&self, ino: u64) -> NfsFh3 {
        Handle {
            export_id: self.export_id,
            ino,
        }
        .to_fh()
    }

    fn remember(&self, ino: u64, rel: PathBuf) {
        if let Ok(mut m) = self.paths.lock() {
            m.insert(ino, rel);
        }
    }

    fn cached(&self, ino: u64) -> Option<PathBuf> {
        self.paths.lock().ok()?.get(&ino).cloned()
    }

    fn check(&self, rel: &Path, ino: u64) -> Option<Node> {
        let abs = self.root.join(rel);
        let meta = fs::symlink_metadata(&abs).ok()?;
        (meta.ino() == ino && meta.dev() == self.dev).then(|| Node {
            rel: rel.to_path_buf(),
            abs,
            meta,
        })
    }

    /// Walks the export breadth-first for `ino`, caching what it sees.
    fn walk_for(&self, ino: u64) -> Option<Node> {
        let mut queue = VecDeque::from([PathBuf::new()]);
        while let Some(rel) = queue.pop_front() {
            let Ok(rd) = fs::read_dir(self.root.join(&rel)) else {
                continue;
            };
            for ent in rd.flatten() {
                let child = rel.join(ent.file_name());
                let Ok(ft) = ent.file_type() else { continue };
                self.remember(ent.ino(), child.clone());
                if ent.ino() == ino {
                    if let Some(n) = self.check(&child, ino) {
                        return Some(n);
                    }
                }
                if ft.is_dir() {
                    if let Ok(m) = ent.metadata() {
                        if m.dev() == self.dev {
                            queue.push_back(child);
                        }
                    }
                }
            }
        }
        None
    }

    fn resolve(&self, fh: &NfsFh3) -> StorageResult<Node> {
        let h = Handle::parse(fh, self.export_id)?;
        if let Some(rel) = self.cached(h.ino) {
            if let Some(n) = self.check(&rel, h.ino) {
                return Ok(n);
            }
        }
        self.walk_for(h.ino).ok_or(Nfsstat3::NFS3ERR_STALE)
    }

    fn resolve_dir(&self, fh: &NfsFh3) -> StorageResult<Node> {
        let n = self.resolve(fh)?;
        if n.meta.is_dir() {
            Ok(n)
        } else {
            Err(Nfsstat3::NFS3ERR_NOTDIR)
        }
    }

    /// A READDIR entry from the cursor: ".." at the export root is the
    /// root itself, with no handle or attributes (as Linux); with `plus`,
    /// the handle and attributes come from one `fstatat` relative to the
    /// open directory, and a mount point inside the export is not crossed
    /// (as LOOKUP).
    #[allow(clippy::unnecessary_cast)] // `st_dev` is not u64 everywhere
    fn dir_entry(&self, e: &Entry<'_>, at_root: bool, plus: bool) -> DirEntry {
        let root_dotdot = at_root && e.name() == b"..";
        let plus = plus.then(|| {
            if root_dotdot {
                return Err(Nfsstat3::NFS3ERR_ACCES);
            }
            let s = e.stat().map_err(|e| io_status(&e))?;
            if s.st_dev as u64 != self.dev {
                return Err(Nfsstat3::NFS3ERR_ACCES);
            }
            let a = fattr_from_stat(&s, self.fsid());
            Ok((self.handle_of(a.fileid), a))
        });
        DirEntry {
            fileid: if root_dotdot { self.root_ino } else { e.ino() },
            name: Filename3(Bytes::copy_from_slice(e.name())),
            cookie: e.cookie(),
            plus,
        }
    }

    fn writable(&self) -> StorageResult<()> {
        if self.read_only {
            Err(Nfsstat3::NFS3ERR_ROFS)
        } else {
            Ok(())
        }
    }

    /// The path of a new entry `name` in `dir`; `.` and `..` cannot be
    /// created (Linux: NFS3ERR_EXIST).
    fn new_child(&self, dir: &NfsFh3, name: &Filename3) -> StorageResult<(PathBuf, PathBuf)> {
        self.writable()?;
        let d = self.resolve_dir(dir)?;
        if is_dot(name) {
            return Err(Nfsstat3::NFS3ERR_EXIST);
        }
        let os = OsStr::from_bytes(&name.0);
        Ok((d.rel.join(os), d.abs.join(os)))
    }

    /// An existing entry to remove or rename; `.` and `..` are refused
    /// with `dot_err`.
    fn old_child(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
        dot_err: Nfsstat3,
    ) -> StorageResult<(PathBuf, PathBuf)> {
        self.writable()?;
        let d = self.resolve_dir(dir)?;
        if is_dot(name) {
            return Err(dot_err);
        }
        let os = OsStr::from_bytes(&name.0);
        Ok((d.rel.join(os), d.abs.join(os)))
    }

    fn finish_create(&self, rel: PathBuf, abs: &Path) -> StorageResult<NfsFh3> {
        let meta = st(fs::symlink_metadata(abs))?;
        self.remember(meta.ino(), rel);
        Ok(self.handle_of(meta.ino()))
    }

    fn open_nofollow(abs: &Path, write: bool) -> StorageResult<File> {
        st(OpenOptions::new()
            .read(!write)
            .write(write)
            .custom_flags(OFlags::NOFOLLOW.bits() as i32)
            .open(abs))
    }

    fn apply_sattr(&self, abs: &Path, meta: &Metadata, attrs: &Sattr3) -> StorageResult<()> {
        let is_link = meta.file_type().is_symlink();
        if let Some(size) = attrs.size {
            if meta.is_dir() {
                return Err(Nfsstat3::NFS3ERR_ISDIR);
            }
            if !meta.is_file() {
                return Err(Nfsstat3::NFS3ERR_INVAL);
            }
            st(Self::open_nofollow(abs, true)?.set_len(size))?;
        }
        // Linux's nfsd drops a mode change on a symbolic link.
        if let (Some(mode), false) = (attrs.mode, is_link) {
            st(fs::set_permissions(
                abs,
                std::os::unix::fs::PermissionsExt::from_mode(mode & 0o7777),
            ))?;
        }
        if attrs.uid.is_some() || attrs.gid.is_some() {
            st(std::os::unix::fs::lchown(abs, attrs.uid, attrs.gid))?;
        }
        let ts = |t: SetTime| match t {
            SetTime::DontChange => Timespec {
                tv_sec: 0,
                tv_nsec: rustix::fs::UTIME_OMIT,
            },
            SetTime::ServerTime => Timespec {
                tv_sec: 0,
                tv_nsec: rustix::fs::UTIME_NOW,
            },
            SetTime::ClientTime(t) => Timespec {
                tv_sec: i64::from(t.seconds),
                tv_nsec: i64::from(t.nseconds.min(999_999_999)) as _,
            },
        };
        if attrs.atime != SetTime::DontChange || attrs.mtime != SetTime::DontChange {
            let times = Timestamps {
                last_access: ts(attrs.atime),
                last_modification: ts(attrs.mtime),
            };
            rustix::fs::utimensat(CWD, abs, &times, AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| io_status(&e.into()))?;
        }
        Ok(())
    }
}

/// Runs blocking file-system work: on a multi-threaded tokio runtime the
/// worker hands its other tasks to another thread first
/// (`block_in_place`); elsewhere it simply runs.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

fn is_dot(name: &Filename3) -> bool {
    name.0[..] == b"."[..] || name.0[..] == b".."[..]
}

impl Storage for LocalFs {
    fn root(&self) -> NfsFh3 {
        self.handle_of(self.root_ino)
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn write_verifier(&self) -> [u8; 8] {
        self.verifier
    }

    async fn getattr(&self, fh: &NfsFh3) -> StorageResult<Fattr3> {
        blocking(|| {
            let n = self.resolve(fh)?;
            Ok(fattr_from(&n.meta, self.fsid()))
        })
    }

    async fn setattr(
        &self,
        fh: &NfsFh3,
        attrs: &Sattr3,
        guard: Option<Nfstime3>,
    ) -> StorageResult<()> {
        blocking(|| {
            self.writable()?;
            let n = self.resolve(fh)?;
            if let Some(g) = guard {
                if fattr_from(&n.meta, self.fsid()).ctime != g {
                    return Err(Nfsstat3::NFS3ERR_NOT_SYNC);
                }
            }
            self.apply_sattr(&n.abs, &n.meta, attrs)
        })
    }

    async fn lookup(&self, dir: &NfsFh3, name: &Filename3) -> StorageResult<NfsFh3> {
        blocking(|| {
            let d = self.resolve_dir(dir)?;
            let rel = match &name.0[..] {
                b"." => d.rel,
                b".." => d.rel.parent().map(Path::to_path_buf).unwrap_or_default(),
                other => d.rel.join(OsStr::from_bytes(other)),
            };
            let meta = st(fs::symlink_metadata(self.root.join(&rel)))?;
            if meta.dev() != self.dev {
                // A mount point inside the export: not crossed.
                return Err(Nfsstat3::NFS3ERR_ACCES);
            }
            self.remember(meta.ino(), rel);
            Ok(self.handle_of(meta.ino()))
        })
    }

    async fn readlink(&self, fh: &NfsFh3) -> StorageResult<Bytes> {
        blocking(|| {
            let n = self.resolve(fh)?;
            if !n.meta.file_type().is_symlink() {
                return Err(Nfsstat3::NFS3ERR_INVAL);
            }
            let t = st(fs::read_link(&n.abs))?;
            Ok(Bytes::copy_from_slice(t.as_os_str().as_bytes()))
        })
    }

    async fn read(&self, fh: &NfsFh3, offset: u64, count: u32) -> StorageResult<(Bytes, bool)> {
        blocking(|| {
            let n = self.resolve(fh)?;
            if n.meta.is_dir() {
                return Err(Nfsstat3::NFS3ERR_ISDIR);
            }
            if !n.meta.is_file() {
                return Err(Nfsstat3::NFS3ERR_INVAL);
            }
            let f = Self::open_nofollow(&n.abs, false)?;
            let size = st(f.metadata())?.len();
            let want = u64::from(count.min(MAX_READ)).min(size.saturating_sub(offset));
            let want = usize::try_from(want).unwrap_or(0);
            // pread straight into the spare capacity: no zero-fill of a
            // buffer the read overwrites (that memset cost 8% of the
            // server's CPU in a 1 GiB sequential read).
            let mut buf = Vec::with_capacity(want);
            while buf.len() < want {
                let at = offset + buf.len() as u64;
                match rustix::io::pread(&f, spare_capacity(&mut buf), at) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(Errno::INTR) => {}
                    Err(e) => return Err(io_status(&e.into())),
                }
            }
            buf.truncate(want);
            let got = buf.len();
            let eof = offset.saturating_add(got as u64) >= size;
            Ok((Bytes::from(buf), eof))
        })
    }

    async fn write(
        &self,
        fh: &NfsFh3,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> StorageResult<StableHow> {
        blocking(|| {
            self.writable()?;
            let n = self.resolve(fh)?;
            if n.meta.is_dir() {
                return Err(Nfsstat3::NFS3ERR_ISDIR);
            }
            if !n.meta.is_file() {
                return Err(Nfsstat3::NFS3ERR_INVAL);
            }
            if offset
                .checked_add(data.len() as u64)
                .is_none_or(|e| e > i64::MAX as u64)
            {
                return Err(Nfsstat3::NFS3ERR_FBIG);
            }
            let f = Self::open_nofollow(&n.abs, true)?;
            st(f.write_all_at(data, offset))?;
            if stable == StableHow::UNSTABLE {
                Ok(StableHow::UNSTABLE)
            } else {
                st(f.sync_all())?;
                Ok(StableHow::FILE_SYNC)
            }
        })
    }

    async fn create(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
        how: &Createhow3,
    ) -> StorageResult<NfsFh3> {
        blocking(|| {
            let (rel, abs) = self.new_child(dir, name)?;
            let mut opts = OpenOptions::new();
            opts.write(true)
                .custom_flags(OFlags::NOFOLLOW.bits() as i32);
            match how {
                Createhow3::Unchecked(a) | Createhow3::Guarded(a) => {
                    opts.mode(a.mode.unwrap_or(0o644) & 0o7777);
                    if matches!(how, Createhow3::Guarded(_)) {
                        opts.create_new(true);
                    } else {
                        opts.create(true);
                    }
                    st(opts.open(&abs))?;
                    let meta = st(fs::symlink_metadata(&abs))?;
                    let rest = Sattr3 {
                        mode: None,
                        ..a.clone()
                    };
                    self.apply_sattr(&abs, &meta, &rest)?;
                }
                Createhow3::Exclusive(verf) => {
                    // RFC 1813 §3.3.8: the verifier is kept in the file's
                    // times, as Linux's nfsd does (mtime, atime seconds).
                    let [a, b, c, d, e, f, g, h] = verf.0;
                    let times = Timestamps {
                        last_modification: Timespec {
                            tv_sec: i64::from(u32::from_be_bytes([a, b, c, d])),
                            tv_nsec: 0,
                        },
                        last_access: Timespec {
                            tv_sec: i64::from(u32::from_be_bytes([e, f, g, h])),
                            tv_nsec: 0,
                        },
                    };
                    opts.mode(0o600).create_new(true);
                    match opts.open(&abs) {
                        Ok(_) => {
                            rustix::fs::utimensat(CWD, &abs, &times, AtFlags::SYMLINK_NOFOLLOW)
                                .map_err(|e| io_status(&e.into()))?;
                        }
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                            let m = st(fs::symlink_metadata(&abs))?;
                            let same = m.is_file()
                                && m.mtime() == times.last_modification.tv_sec
                                && m.atime() == times.last_access.tv_sec;
                            if !same {
                                return Err(Nfsstat3::NFS3ERR_EXIST);
                            }
                        }
                        Err(e) => return Err(io_status(&e)),
                    }
                }
            }
            self.finish_create(rel, &abs)
        })
    }

    async fn mkdir(&self, dir: &NfsFh3, name: &Filename3, attrs: &Sattr3) -> StorageResult<NfsFh3> {
        blocking(|| {
            let (rel, abs) = self.new_child(dir, name)?;
            st(fs::DirBuilder::new()
                .mode(attrs.mode.unwrap_or(0o755) & 0o7777)
                .create(&abs))?;
            let meta = st(fs::symlink_metadata(&abs))?;
            self.apply_sattr(
                &abs,
                &meta,
                &Sattr3 {
                    mode: None,
                    ..attrs.clone()
                },
            )?;
            self.finish_create(rel, &abs)
        })
    }

    async fn symlink(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
        target: &[u8],
        _attrs: &Sattr3,
    ) -> StorageResult<NfsFh3> {
        blocking(|| {
            let (rel, abs) = self.new_child(dir, name)?;
            if target.is_empty() || target.contains(&0) {
                return Err(Nfsstat3::NFS3ERR_INVAL);
            }
            st(std::os::unix::fs::symlink(OsStr::from_bytes(target), &abs))?;
            self.finish_create(rel, &abs)
        })
    }

    async fn mknod(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
        what: &Mknoddata3,
    ) -> StorageResult<NfsFh3> {
        blocking(|| {
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
                    (
                        ft,
                        attributes,
                        rustix::fs::makedev(spec.specdata1, spec.specdata2),
                    )
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
            let (rel, abs) = self.new_child(dir, name)?;
            let mode = Mode::from_raw_mode(attrs.mode.unwrap_or(0o644) & 0o7777);
            rustix::fs::mknodat(CWD, &abs, ft, mode, dev).map_err(|e| io_status(&e.into()))?;
            self.finish_create(rel, &abs)
        })
    }

    async fn remove(&self, dir: &NfsFh3, name: &Filename3) -> StorageResult<()> {
        blocking(|| {
            let (_, abs) = self.old_child(dir, name, Nfsstat3::NFS3ERR_ACCES)?;
            st(fs::remove_file(abs))
        })
    }

    async fn rmdir(&self, dir: &NfsFh3, name: &Filename3) -> StorageResult<()> {
        blocking(|| {
            let (_, abs) = match &name.0[..] {
                // Linux: "." is NFS3ERR_INVAL, ".." NFS3ERR_NOTEMPTY (rmdir(2)).
                b"." => return self.writable().and(Err(Nfsstat3::NFS3ERR_INVAL)),
                b".." => return self.writable().and(Err(Nfsstat3::NFS3ERR_NOTEMPTY)),
                _ => self.old_child(dir, name, Nfsstat3::NFS3ERR_ACCES)?,
            };
            st(fs::remove_dir(abs))
        })
    }

    async fn rename(
        &self,
        from_dir: &NfsFh3,
        from: &Filename3,
        to_dir: &NfsFh3,
        to: &Filename3,
    ) -> StorageResult<()> {
        blocking(|| {
            let (_, src) = self.old_child(from_dir, from, Nfsstat3::NFS3ERR_INVAL)?;
            let (to_rel, dst) = self.old_child(to_dir, to, Nfsstat3::NFS3ERR_INVAL)?;
            st(fs::rename(&src, &dst))?;
            if let Ok(m) = fs::symlink_metadata(&dst) {
                self.remember(m.ino(), to_rel);
            }
            Ok(())
        })
    }

    async fn link(&self, fh: &NfsFh3, dir: &NfsFh3, name: &Filename3) -> StorageResult<()> {
        blocking(|| {
            let (rel, abs) = self.new_child(dir, name)?;
            let n = self.resolve(fh)?;
            if n.meta.is_dir() {
                return Err(Nfsstat3::NFS3ERR_ISDIR);
            }
            st(fs::hard_link(&n.abs, &abs))?;
            self.remember(n.meta.ino(), rel);
            Ok(())
        })
    }

    async fn readdir(
        &self,
        dir: &NfsFh3,
        req: DirRequest,
        sink: &mut DirSink<'_>,
    ) -> StorageResult<DirPage> {
        blocking(|| {
            let d = self.resolve_dir(dir)?;
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let fd = rustix::fs::openat(CWD, &d.abs, flags, Mode::empty())
                .map_err(|e| io_status(&e.into()))?;
            let mut cur = st(DirCursor::new(fd))?;
            let at_root = d.rel.as_os_str().is_empty();
            let eof = cur.read(req.cookie, req.size_hint, |e| {
                let entry = self.dir_entry(e, at_root, req.plus);
                let (ino, dot) = (entry.fileid, e.is_dot());
                let taken = sink(entry);
                if taken && !dot {
                    self.remember(ino, d.rel.join(OsStr::from_bytes(e.name())));
                }
                taken
            });
            match eof {
                Ok(eof) => Ok(DirPage {
                    verf: cur.verifier(),
                    eof,
                }),
                Err(CursorError::BadCookie) => Err(Nfsstat3::NFS3ERR_BAD_COOKIE),
                Err(CursorError::Io(e)) => Err(io_status(&e)),
            }
        })
    }

    async fn fsstat(&self, fh: &NfsFh3) -> StorageResult<FsStat> {
        blocking(|| {
            let n = self.resolve(fh)?;
            let s = rustix::fs::statvfs(&n.abs).map_err(|e| io_status(&e.into()))?;
            let fr = s.f_frsize.max(1);
            Ok(FsStat {
                tbytes: s.f_blocks.saturating_mul(fr),
                fbytes: s.f_bfree.saturating_mul(fr),
                abytes: s.f_bavail.saturating_mul(fr),
                tfiles: s.f_files,
                ffiles: s.f_ffree,
                afiles: s.f_favail,
            })
        })
    }

    async fn commit(&self, fh: &NfsFh3) -> StorageResult<()> {
        blocking(|| {
            self.writable()?;
            let n = self.resolve(fh)?;
            if !n.meta.is_file() && !n.meta.is_dir() {
                return Err(Nfsstat3::NFS3ERR_INVAL);
            }
            let f = if n.meta.is_dir() {
                st(File::open(&n.abs))?
            } else {
                Self::open_nofollow(&n.abs, false)?
            };
            st(f.sync_all())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tmp(PathBuf);
    impl Tmp {
        fn new(tag: &str) -> Self {
            let p = std::env::temp_dir().join(format!("localfs-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            Self(p)
        }
    }
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn block<F: core::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn errno_maps_like_linux_nfsd() {
        let e = |n: Errno| io::Error::from_raw_os_error(n.raw_os_error());
        assert_eq!(io_status(&e(Errno::NOENT)), Nfsstat3::NFS3ERR_NOENT);
        assert_eq!(io_status(&e(Errno::NOTEMPTY)), Nfsstat3::NFS3ERR_NOTEMPTY);
        assert_eq!(io_status(&e(Errno::LOOP)), Nfsstat3::NFS3ERR_INVAL);
        assert_eq!(io_status(&e(Errno::BADF)), Nfsstat3::NFS3ERR_IO);
        assert_eq!(
            io_status(&io::Error::other("no errno")),
            Nfsstat3::NFS3ERR_IO
        );
    }

    #[test]
    fn handle_resolves_after_restart_and_rename_by_walking() {
        let t = Tmp::new("walk");
        fs::create_dir_all(t.0.join("a/b/c")).unwrap();
        fs::write(t.0.join("a/b/c/f"), b"x").unwrap();
        let fs1 = LocalFs::new(&t.0, false).unwrap();
        let ino = fs::metadata(t.0.join("a/b/c/f")).unwrap().ino();
        let fh = fs1.handle_of(ino);
        // A fresh instance knows only the root: it walks.
        let fs2 = LocalFs::new(&t.0, false).unwrap();
        assert_eq!(fs2.export_id(), fs1.export_id());
        assert_ne!(fs2.write_verifier(), fs1.write_verifier());
        assert_eq!(block(fs2.getattr(&fh)).unwrap().fileid, ino);
        // Renamed behind the server's back: the cached path is checked and
        // the walk finds the new one.
        fs::rename(t.0.join("a/b/c/f"), t.0.join("a/g")).unwrap();
        assert_eq!(block(fs2.getattr(&fh)).unwrap().fileid, ino);
        fs::remove_file(t.0.join("a/g")).unwrap();
        assert_eq!(block(fs2.getattr(&fh)), Err(Nfsstat3::NFS3ERR_STALE));
    }

    #[test]
    fn read_returns_exact_bytes_up_to_eof_without_zero_fill() {
        let t = Tmp::new("read");
        let data: Vec<u8> = (0..=255u8).cycle().take(3 * 1024 * 1024 + 17).collect();
        fs::write(t.0.join("f"), &data).unwrap();
        let lfs = LocalFs::new(&t.0, false).unwrap();
        let ino = fs::metadata(t.0.join("f")).unwrap().ino();
        let fh = lfs.handle_of(ino);
        let (b, eof) = block(lfs.read(&fh, 5, 1000)).unwrap();
        assert_eq!((&b[..], eof), (&data[5..1005], false));
        // A full-size read in the middle, then one spanning the end.
        let (b, eof) = block(lfs.read(&fh, 1024 * 1024, MAX_READ)).unwrap();
        let end = 1024 * 1024 + MAX_READ as usize;
        assert_eq!((&b[..], eof), (&data[1024 * 1024..end], false));
        let tail = data.len() as u64 - 10;
        let (b, eof) = block(lfs.read(&fh, tail, 4096)).unwrap();
        assert_eq!((&b[..], eof), (&data[data.len() - 10..], true));
        // At and past the end: no data, eof.
        let (b, eof) = block(lfs.read(&fh, data.len() as u64, 10)).unwrap();
        assert!(b.is_empty() && eof);
        let (b, eof) = block(lfs.read(&fh, u64::MAX, 10)).unwrap();
        assert!(b.is_empty() && eof);
        let (b, eof) = block(lfs.read(&fh, 0, 0)).unwrap();
        assert!(b.is_empty() && !eof);
    }

    #[test]
    fn dotdot_at_root_is_root_and_dot_names_cannot_be_created() {
        let t = Tmp::new("dots");
        let lfs = LocalFs::new(&t.0, false).unwrap();
        let root = lfs.root();
        let dd = Filename3::from_static("..");
        assert_eq!(block(lfs.lookup(&root, &dd)), Ok(root.clone()));
        let how = Createhow3::Unchecked(Sattr3::default());
        assert_eq!(
            block(lfs.create(&root, &dd, &how)),
            Err(Nfsstat3::NFS3ERR_EXIST)
        );
        assert_eq!(
            block(lfs.rmdir(&root, &Filename3::from_static("."))),
            Err(Nfsstat3::NFS3ERR_INVAL)
        );
        assert_eq!(fs::read_dir(&t.0).unwrap().count(), 0);
    }

    #[test]
    fn read_only_export_refuses_changes_before_touching_disk() {
        let t = Tmp::new("ro");
        fs::write(t.0.join("f"), b"data").unwrap();
        let lfs = LocalFs::new(&t.0, true).unwrap();
        let root = lfs.root();
        let f = block(lfs.lookup(&root, &Filename3::from_static("f"))).unwrap();
        assert_eq!(
            block(lfs.write(&f, 0, b"XX", StableHow::FILE_SYNC)),
            Err(Nfsstat3::NFS3ERR_ROFS)
        );
        assert_eq!(
            block(lfs.mkdir(&root, &Filename3::from_static("d"), &Sattr3::default())),
            Err(Nfsstat3::NFS3ERR_ROFS)
        );
        assert_eq!(block(lfs.commit(&f)), Err(Nfsstat3::NFS3ERR_ROFS));
        assert_eq!(fs::read(t.0.join("f")).unwrap(), b"data");
    }

    /// Up to `n` entries after `cookie`, with the page's end.
    fn list(
        lfs: &LocalFs,
        dir: &NfsFh3,
        cookie: u64,
        n: usize,
        plus: bool,
    ) -> (Vec<DirEntry>, DirPage) {
        let mut out = Vec::new();
        let req = DirRequest {
            cookie,
            plus,
            size_hint: 0,
        };
        let page = block(lfs.readdir(dir, req, &mut |e| {
            if out.len() == n {
                return false;
            }
            out.push(e);
            true
        }))
        .unwrap();
        (out, page)
    }

    #[test]
    fn readdir_resumes_after_a_deleted_cookie() {
        let t = Tmp::new("rd");
        for n in ["a", "b", "c", "d"] {
            fs::write(t.0.join(n), b"").unwrap();
        }
        let lfs = LocalFs::new(&t.0, false).unwrap();
        let root = lfs.root();
        let (all, page) = list(&lfs, &root, 0, 100, false);
        assert!(page.eof);
        assert_eq!(all.len(), 6);
        // The file system's order ("." and ".." need not come first): a
        // file in the middle.
        let k = (1..5).find(|&i| !is_dot(&all[i].name)).unwrap();
        let third = &all[k];
        let after: Vec<_> = all[k + 1..].iter().map(|e| e.name.clone()).collect();
        fs::remove_file(t.0.join(std::str::from_utf8(&third.name.0).unwrap())).unwrap();
        let (rest, again) = list(&lfs, &root, third.cookie, 100, false);
        assert_eq!(again.verf, page.verf);
        assert_eq!(rest.into_iter().map(|e| e.name).collect::<Vec<_>>(), after);
        // A page cut short is not eof, and resumes where it stopped.
        let (two, p2) = list(&lfs, &root, 0, 2, false);
        assert!(!p2.eof);
        let (more, _) = list(&lfs, &root, two[1].cookie, 100, false);
        assert_eq!(two.len() + more.len(), 5);
    }

    #[test]
    fn readdirplus_attributes_match_getattr_and_dotdot_at_root_has_none() {
        let t = Tmp::new("rdp");
        fs::create_dir(t.0.join("sub")).unwrap();
        fs::write(t.0.join("sub/f"), b"12345").unwrap();
        let lfs = LocalFs::new(&t.0, false).unwrap();
        let root = lfs.root();
        let (ents, _) = list(&lfs, &root, 0, 100, true);
        for e in &ents {
            match &e.name.0[..] {
                b".." => {
                    assert_eq!(e.fileid, lfs.root_ino);
                    assert_eq!(e.plus, Some(Err(Nfsstat3::NFS3ERR_ACCES)));
                }
                _ => {
                    let (fh, a) = e.plus.clone().unwrap().unwrap();
                    assert_eq!(block(lfs.getattr(&fh)).unwrap(), a);
                    assert_eq!(a.fileid, e.fileid);
                }
            }
        }
        let sub = block(lfs.lookup(&root, &Filename3::from_static("sub"))).unwrap();
        let (ents, _) = list(&lfs, &sub, 0, 100, true);
        let f = ents.iter().find(|e| e.name.0[..] == b"f"[..]).unwrap();
        let (_, a) = f.plus.clone().unwrap().unwrap();
        assert_eq!(a.size, 5);
        let dd = ents.iter().find(|e| e.name.0[..] == b".."[..]).unwrap();
        assert_eq!(dd.plus.clone().unwrap().unwrap().0, root);
    }
}
