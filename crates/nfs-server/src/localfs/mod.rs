//! [`LocalFs`]: a [`Storage`] back end serving one local directory, on
//! directory file descriptors.
//!
//! - Handles ([`crate::fh`]): export id, inode number and generation under
//!   a keyed MAC; a forged or altered handle is NFS3ERR_BADHANDLE.
//! - Resolving a handle ([`index`], [`resolve`]): by an index of inode →
//!   (parent inode, name), kept in the state directory, checked on use; a
//!   handle whose file is not where the index says is NFS3ERR_STALE at
//!   once. The export is never walked.
//! - Every syscall is relative to a directory fd (`openat`, `mkdirat`,
//!   `renameat`, `unlinkat`, `statx`, `linkat`, `symlinkat`,
//!   `readlinkat`, `utimensat`, `fchownat`, `fchmod`…) ([`ops`], [`io`]):
//!   no path is ever built from the export root, so paths as long as the
//!   client's (a 4,000-byte relative path) work, and symbolic links are
//!   never followed, so a rename race cannot lead outside the export.
//!   `..` at the root stays at the root (as Linux's nfsd does at an export
//!   root); mount points inside the export are not crossed.
//! - Modes are those the client asked for: [`LocalFs::new`] sets the
//!   process umask to 0 (as Linux's nfsd runs with none); the server
//!   creates its own files (state directory) with explicit modes.
//! - Durability: a change is on stable storage before the reply (the new
//!   file and each changed directory are `fsync`ed); WRITE with
//!   FILE_SYNC/DATA_SYNC and COMMIT `fsync` the file.
//!
//! Operations run with the server process's credentials; the caller's
//! AUTH_SYS identity only shapes the ACCESS answer. IO is blocking; on a
//! multi-threaded tokio runtime it runs under `block_in_place`.

mod attrcache;
mod attrs;
mod copy;
mod cursors;
mod files;
mod held;
mod index;
mod io;
mod known;
mod ops;
mod pins;
mod prefetch;
mod readdir;
mod resolve;
mod rw;
mod sparse;
mod xattr;

use std::fs;
use std::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use lru::LruCache;
use nfs::v3::{Createhow3, Fattr3, Filename3, Mknoddata3, NfsFh3, Nfstime3, Sattr3, StableHow};
use rustix::fs::{Mode, OFlags};

pub use attrcache::{AttrCacheConfig, DEFAULT_TTL as DEFAULT_ATTR_CACHE_TTL};
pub use attrs::io_status;
pub(crate) use copy::MAX_COPY;
/// The handle index log's record codec (for the fuzz target and tools).
pub use index::log as index_log;
pub use index::{
    pending_change_bytes as index_pending_change_bytes,
    set_commit_interval as set_index_commit_interval, set_pending_bytes as set_index_pending_bytes,
    COMMIT_INTERVAL as DEFAULT_INDEX_COMMIT_INTERVAL,
    PENDING_BYTES_MAX as DEFAULT_INDEX_PENDING_BYTES,
};

use crate::fh::{fnv1a, HandleKey};
use crate::statedir::{random_key, StateDir};
use crate::storage::{
    DirPage, DirRequest, DirSink, FsStat, ReadDone, Segment, Storage, StorageResult, WriteDone,
    XattrError, XattrSet,
};
use attrcache::AttrCache;
use attrs::Meta;
use cursors::Cursors;
use index::Index;

/// Largest READ served; FSINFO advertises it as `rtmax`.
pub const MAX_READ: u32 = 1 << 20;
/// Largest WRITE accepted; FSINFO advertises it as `wtmax`.
pub const MAX_WRITE: u32 = 1 << 20;

/// A directory on the local file system exported over NFS.
pub struct LocalFs {
    path: PathBuf,
    root: Arc<OwnedFd>,
    root_ino: u64,
    root_gen: u64,
    export_id: u64,
    dev: u64,
    read_only: bool,
    verifier: [u8; 8],
    key: HandleKey,
    index: Index,
    /// Open directory fds by inode, with their generation.
    dirs: Mutex<LruCache<u64, (u64, Arc<OwnedFd>)>>,
    /// Directory cursors of unfinished listings.
    cursors: Cursors,
    /// Attributes of listed entries, kept coherent by inotify.
    attrs: Arc<AttrCache>,
    /// Reads the next page's attributes ahead ([`prefetch`]).
    prefetch: prefetch::Prefetch,
    /// Descriptors of leased files the server's own opens reuse.
    pins: pins::Pins,
    /// Files kept open for READ, WRITE and COMMIT ([`files`]).
    files: Arc<files::OpenFiles>,
    /// Whether UNSTABLE writes try `RWF_NOWAIT` first (cleared when the
    /// file system answers `EOPNOTSUPP`; see [`rw`]).
    nowait_writes: AtomicBool,
}

impl core::fmt::Debug for LocalFs {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LocalFs")
            .field("path", &self.path)
            .field("export_id", &self.export_id)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

impl LocalFs {
    /// Exports `dir` without a state directory: the handle key is random
    /// and the index lives in memory, so handles do not survive this
    /// instance (use [`Self::with_state_dir`] for a server).
    pub fn new(dir: impl AsRef<Path>, read_only: bool) -> std::io::Result<Self> {
        Self::build(dir.as_ref(), read_only, None)
    }

    /// Exports `dir` with the handle key and index in `state`: handles
    /// stay valid across restarts with the same state directory.
    pub fn with_state_dir(
        dir: impl AsRef<Path>,
        read_only: bool,
        state: &StateDir,
    ) -> std::io::Result<Self> {
        Self::build(dir.as_ref(), read_only, Some(state))
    }

    fn build(dir: &Path, read_only: bool, state: Option<&StateDir>) -> std::io::Result<Self> {
        let path = fs::canonicalize(dir)?;
        if let Some(s) = state {
            if fs::canonicalize(s.path())?.starts_with(&path) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "state dir {} is inside the export {}: clients could read the handle key",
                        s.path().display(),
                        path.display()
                    ),
                ));
            }
        }
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let root = rustix::fs::open(&path, flags, Mode::empty())?;
        let meta = Meta::of(&root)?;
        // Modes exactly as clients ask (see the module doc).
        rustix::process::umask(Mode::empty());
        let export_id = fnv1a(&[path.as_os_str().as_bytes(), &meta.dev().to_be_bytes()]);
        let (key, index) = match state {
            Some(s) => (s.handle_key()?, Index::open(&s.index_path(export_id))?),
            None => (random_key()?, Index::in_memory()?),
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let verifier = fnv1a(&[
            &now.as_nanos().to_be_bytes(),
            &std::process::id().to_be_bytes(),
            &export_id.to_be_bytes(),
        ])
        .to_be_bytes();
        let cap = NonZeroUsize::new(resolve::DIR_CACHE).unwrap_or(NonZeroUsize::MIN);
        Ok(Self {
            path,
            root: Arc::new(root),
            root_ino: meta.ino(),
            root_gen: meta.gen(),
            export_id,
            dev: meta.dev(),
            read_only,
            verifier,
            key: HandleKey::new(key),
            index,
            dirs: Mutex::new(LruCache::new(cap)),
            cursors: Cursors::new(cursors::MAX_CURSORS),
            attrs: Arc::new(AttrCache::new(attr_cache_default())),
            prefetch: prefetch::Prefetch::new(prefetch::MAX_JOBS),
            pins: pins::Pins::default(),
            files: files::OpenFiles::new(files::MAX_OPEN_FILES, files::IDLE),
            nowait_writes: AtomicBool::new(true),
        })
    }

    /// The canonical path of the export.
    pub fn path(&self) -> &Path {
        &self.path
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

    /// This export with its listing attribute cache set to `cfg` instead
    /// of the process default ([`set_attr_cache`]).
    pub fn with_attr_cache(mut self, cfg: AttrCacheConfig) -> Self {
        self.attrs = Arc::new(AttrCache::new(cfg));
        self
    }

    /// Writes the handle index to stable storage (it is also written as
    /// it fills, on every create, rename and link, and when dropped).
    pub fn flush(&self) {
        self.index.flush();
    }
}

/// The attribute cache configuration of exports built from now on.
static ATTR_CACHE: Mutex<AttrCacheConfig> = Mutex::new(AttrCacheConfig {
    ttl: attrcache::DEFAULT_TTL,
    max_dirs: attrcache::MAX_DIRS,
    max_entries: attrcache::MAX_ENTRIES,
});

/// Sets the listing attribute cache (READDIRPLUS and NFSv4 READDIR
/// attributes kept coherent by inotify, `localfs/attrcache.rs`) of every export
/// built from now on; a zero `ttl` turns it off (`nfsrdma serve
/// --attr-cache-ttl`).
pub fn set_attr_cache(cfg: AttrCacheConfig) {
    if let Ok(mut c) = ATTR_CACHE.lock() {
        *c = cfg;
    }
}

fn attr_cache_default() -> AttrCacheConfig {
    ATTR_CACHE.lock().map(|c| *c).unwrap_or_default()
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

impl Storage for LocalFs {
    fn root(&self) -> NfsFh3 {
        match self.root_node() {
            Ok(n) => self.handle(&n.meta),
            Err(_) => NfsFh3::default(),
        }
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn owns(&self, fh: &NfsFh3) -> bool {
        // The export id first: with several exports, only the one named
        // computes the tag.
        crate::fh::Handle::peek_export(fh) == Some(self.export_id)
            && crate::fh::Handle::parse(fh, &self.key, self.export_id).is_ok()
    }

    fn write_verifier(&self) -> [u8; 8] {
        self.verifier
    }

    /// On the calling thread, like a READ's resolution ([`rw`]): an
    /// index lookup and a `statx` of a name in a directory held open, no
    /// thread hand-off (`block_in_place` costs more than the `statx`).
    async fn getattr(&self, fh: &NfsFh3) -> StorageResult<Fattr3> {
        Ok(self.resolve(fh)?.meta.fattr(self.fsid()))
    }

    async fn setattr(
        &self,
        fh: &NfsFh3,
        attrs: &Sattr3,
        guard: Option<Nfstime3>,
    ) -> StorageResult<()> {
        blocking(|| self.do_setattr(fh, attrs, guard))
    }

    async fn lookup(&self, dir: &NfsFh3, name: &Filename3) -> StorageResult<NfsFh3> {
        blocking(|| self.do_lookup(dir, name))
    }

    async fn readlink(&self, fh: &NfsFh3) -> StorageResult<Bytes> {
        blocking(|| self.do_readlink(fh))
    }

    async fn read(&self, fh: &NfsFh3, offset: u64, count: u32) -> StorageResult<(Bytes, bool)> {
        blocking(|| self.do_read(fh, offset, count))
    }

    async fn write(
        &self,
        fh: &NfsFh3,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> StorageResult<StableHow> {
        blocking(|| self.do_write(fh, offset, data, stable))
    }

    /// One resolution; the data on this thread when the page cache
    /// serves it at once ([`rw`]). What would wait for the disk is read
    /// after a yield: a transport that runs a connection's calls inline
    /// up to their first wait (the TCP and RPC-over-RDMA shells) moves
    /// the call to a task of its own there, so the connection's next
    /// calls are not held up behind the disk.
    async fn read_checked(
        &self,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
        may: crate::storage::May<'_>,
        files: bool,
    ) -> ReadDone {
        match self.read_checked_now(fh, offset, count, may, files) {
            rw::ReadStep::Done(done) => done,
            rw::ReadStep::Wait(rest) => {
                tokio::task::yield_now().await;
                rest.finish()
            }
        }
    }

    /// One resolution; an UNSTABLE write on this thread when the kernel
    /// takes it at once ([`rw`]).
    async fn write_checked(
        &self,
        fh: &NfsFh3,
        offset: u64,
        data: &[u8],
        stable: StableHow,
        may: crate::storage::May<'_>,
    ) -> WriteDone {
        self.write_checked_now(fh, offset, data, stable, may)
    }

    async fn create(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
        how: &Createhow3,
    ) -> StorageResult<NfsFh3> {
        blocking(|| self.do_create(dir, name, how))
    }

    async fn mkdir(&self, dir: &NfsFh3, name: &Filename3, attrs: &Sattr3) -> StorageResult<NfsFh3> {
        blocking(|| self.do_mkdir(dir, name, attrs))
    }

    async fn symlink(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
        target: &[u8],
        _attrs: &Sattr3,
    ) -> StorageResult<NfsFh3> {
        blocking(|| self.do_symlink(dir, name, target))
    }

    async fn mknod(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
        what: &Mknoddata3,
    ) -> StorageResult<NfsFh3> {
        blocking(|| self.do_mknod(dir, name, what))
    }

    async fn remove(&self, dir: &NfsFh3, name: &Filename3) -> StorageResult<()> {
        blocking(|| self.do_remove(dir, name))
    }

    async fn rmdir(&self, dir: &NfsFh3, name: &Filename3) -> StorageResult<()> {
        blocking(|| self.do_rmdir(dir, name))
    }

    async fn rename(
        &self,
        from_dir: &NfsFh3,
        from: &Filename3,
        to_dir: &NfsFh3,
        to: &Filename3,
    ) -> StorageResult<()> {
        blocking(|| self.do_rename(from_dir, from, to_dir, to))
    }

    async fn link(&self, fh: &NfsFh3, dir: &NfsFh3, name: &Filename3) -> StorageResult<()> {
        blocking(|| self.do_link(fh, dir, name))
    }

    /// From memory on this thread as far as it goes ([`readdir`]); the
    /// rest, if any, after a yield (a transport that runs calls inline
    /// moves the call to a task of its own there) under [`blocking`].
    async fn readdir(
        &self,
        dir: &NfsFh3,
        req: DirRequest,
        sink: &mut dyn DirSink,
    ) -> StorageResult<DirPage> {
        match self.readdir_now(dir, req, sink) {
            readdir::DirStep::Done(r) => r,
            readdir::DirStep::Wait(pass) => {
                tokio::task::yield_now().await;
                blocking(|| self.readdir_rest(pass, sink))
            }
        }
    }

    async fn fsstat(&self, fh: &NfsFh3) -> StorageResult<FsStat> {
        blocking(|| self.do_fsstat(fh))
    }

    async fn commit(&self, fh: &NfsFh3) -> StorageResult<()> {
        blocking(|| self.do_commit(fh))
    }

    async fn seek(&self, fh: &NfsFh3, offset: u64, hole: bool) -> StorageResult<Option<u64>> {
        blocking(|| self.do_seek(fh, offset, hole))
    }

    /// Closes the descriptors the server keeps of the file first
    /// ([`files`]): the descriptor returned is the one a kernel lease is
    /// taken on, which the kernel refuses while the server holds others.
    fn open_file(&self, fh: &NfsFh3, write: bool) -> StorageResult<std::fs::File> {
        let flags = if write { OFlags::RDWR } else { OFlags::RDONLY };
        blocking(|| {
            let (n, fd) = self.open_regular(fh, flags)?;
            self.files.close(n.ino);
            Ok(fd.into())
        })
    }

    fn pin(&self, fh: &NfsFh3, fd: &Arc<OwnedFd>) {
        if let Ok(n) = self.resolve(fh) {
            if n.meta.is_file() {
                self.pins.pin(n.ino, fd);
            }
        }
    }

    async fn allocate(&self, fh: &NfsFh3, offset: u64, len: u64, punch: bool) -> StorageResult<()> {
        blocking(|| self.do_allocate(fh, offset, len, punch))
    }

    async fn getxattr(&self, fh: &NfsFh3, name: &[u8], max: usize) -> Result<Bytes, XattrError> {
        blocking(|| self.do_getxattr(fh, name, max))
    }

    async fn setxattr(
        &self,
        fh: &NfsFh3,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> Result<(), XattrError> {
        blocking(|| self.do_setxattr(fh, name, value, how))
    }

    async fn listxattrs(&self, fh: &NfsFh3) -> Result<Vec<Bytes>, XattrError> {
        blocking(|| self.do_listxattrs(fh))
    }

    async fn removexattr(&self, fh: &NfsFh3, name: &[u8]) -> Result<(), XattrError> {
        blocking(|| self.do_removexattr(fh, name))
    }

    async fn read_plus(
        &self,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
        max_segments: usize,
    ) -> StorageResult<(Vec<Segment>, bool)> {
        blocking(|| self.do_read_plus(fh, offset, count, max_segments))
    }

    async fn copy_range(
        &self,
        src: &NfsFh3,
        src_offset: u64,
        dst: &NfsFh3,
        dst_offset: u64,
        count: u64,
    ) -> StorageResult<u64> {
        blocking(|| self.do_copy(src, src_offset, dst, dst_offset, count))
    }

    async fn clone_range(
        &self,
        src: &NfsFh3,
        src_offset: u64,
        dst: &NfsFh3,
        dst_offset: u64,
        count: u64,
    ) -> StorageResult<()> {
        blocking(|| self.do_clone(src, src_offset, dst, dst_offset, count))
    }
}

#[cfg(test)]
mod attrcache_tests;
#[cfg(test)]
mod listing_tests;
#[cfg(test)]
mod readdir_tests;
#[cfg(test)]
mod tests;
