//! Open files kept for READ, WRITE and COMMIT, as Linux's nfsd keeps them
//! (`fs/nfsd/filecache.c`): NFSv3 has no OPEN or CLOSE (RFC 1813 §3.3.6,
//! §3.3.7: each READ and WRITE names the file by its handle), so without
//! a cache every call opens the file, checks the descriptor and closes it
//! again, three of a 4 KiB READ's five system calls.
//!
//! A descriptor is kept per inode and access (read-only or write-only),
//! with the inode's generation: a handle still resolves first
//! ([`super::resolve`], the `statx` of its name in its directory, which
//! also gives the attributes), and the kept descriptor is used only when
//! the resolved inode and generation are the ones it was opened for. So
//! a file removed or moved behind the server's back is STALE exactly as
//! before, and what the cache changes is only which descriptor the bytes
//! go through.
//!
//! Bounds and lifetime:
//! - at most [`MAX_OPEN_FILES`] descriptors; one more closes the least
//!   recently used (trips the `nfs.open_files` limit: a client touching
//!   many files gets the old open-per-call path, never more descriptors);
//! - a descriptor unused for [`IDLE`] is closed (on the next use of the
//!   cache, and by a sweeper task while any are kept), so an idle server
//!   holds none and a file removed locally does not keep its space long;
//! - removing or renaming over a file through the server closes its
//!   descriptors at once (`ops.rs`);
//! - before the server takes a kernel lease for an NFSv4 delegation
//!   ([`crate::storage::Storage::open_file`]) the file's descriptors are
//!   closed: a write lease is refused while any other descriptor of the
//!   file is open, a read lease while one is open for writing
//!   (fcntl(2) F_SETLEASE). A descriptor still in use by a call in flight
//!   makes the kernel refuse the lease, and no delegation is granted
//!   (RFC 8881 §10.2: a server may always decline).
//!
//! Files under a lease are never kept: their opens are `dup`s of the
//! leased descriptor ([`super::pins`]), and a kept `dup` would keep the
//! leased open file description alive after the delegation returns.

use std::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use lru::LruCache;
use oncrpc::limits::Limit;
use rustix::fs::OFlags;

use super::attrs::Meta;
use super::resolve::Node;
use super::LocalFs;
use crate::storage::StorageResult;

/// Descriptors kept at once per export: a quarter of a default limit of
/// 1024 descriptors (the directory cache and the READ replies holding
/// their files take at most 512 and 256 more).
pub(crate) const MAX_OPEN_FILES: usize = 128;
/// How long an unused descriptor is kept (Linux's nfsd closes them after
/// about two seconds, its `NFSD_LAUNDRETTE_DELAY`).
pub(crate) const IDLE: Duration = Duration::from_secs(1);

pub(super) static OPEN_FILES: Limit = Limit::new("nfs.open_files");

/// What a kept descriptor was opened for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Access {
    Read,
    Write,
}

impl Access {
    pub(crate) fn flags(self) -> OFlags {
        match self {
            Self::Read => OFlags::RDONLY,
            Self::Write => OFlags::WRONLY,
        }
    }
}

struct Slot {
    gen: u64,
    fd: Arc<OwnedFd>,
    used: Instant,
}

/// The kept descriptors of one export.
pub(crate) struct OpenFiles {
    map: Mutex<LruCache<(u64, Access), Slot>>,
    idle: Duration,
    /// A sweeper task is running.
    sweeping: AtomicBool,
}

impl OpenFiles {
    pub(crate) fn new(cap: usize, idle: Duration) -> Arc<Self> {
        let cap = NonZeroUsize::new(cap).unwrap_or(NonZeroUsize::MIN);
        Arc::new(Self {
            map: Mutex::new(LruCache::new(cap)),
            idle,
            sweeping: AtomicBool::new(false),
        })
    }

    /// The kept descriptor of inode `ino` of generation `gen` for
    /// `access`; a descriptor of an older generation of the inode number
    /// is closed.
    pub(crate) fn get(&self, ino: u64, gen: u64, access: Access) -> Option<Arc<OwnedFd>> {
        let now = Instant::now();
        let mut gone = Vec::new();
        let found = {
            let mut m = self.map.lock().ok()?;
            self.expire(&mut m, now, &mut gone);
            match m.get_mut(&(ino, access)) {
                Some(s) if s.gen == gen => {
                    s.used = now;
                    Some(Arc::clone(&s.fd))
                }
                Some(_) => {
                    gone.extend(m.pop(&(ino, access)).map(|s| s.fd));
                    None
                }
                None => None,
            }
        };
        drop(gone);
        found
    }

    /// Keeps `fd`, opened for `access` on inode `ino` of generation
    /// `gen`; the least recently used descriptor is closed when the
    /// cache is full.
    pub(crate) fn put(self: &Arc<Self>, ino: u64, gen: u64, access: Access, fd: Arc<OwnedFd>) {
        let now = Instant::now();
        let mut gone = Vec::new();
        if let Ok(mut m) = self.map.lock() {
            self.expire(&mut m, now, &mut gone);
            let slot = Slot { gen, fd, used: now };
            if let Some((k, old)) = m.push((ino, access), slot) {
                if k != (ino, access) {
                    OPEN_FILES.trip(format_args!(
                        "{} open files kept; closing the least recently used",
                        m.cap()
                    ));
                }
                gone.push(old.fd);
            }
            if !self.sweeping.swap(true, Ordering::AcqRel) {
                self.start_sweeper();
            }
        }
        drop(gone);
    }

    /// Closes the kept descriptors of inode `ino` (those in use by calls
    /// in flight close when the calls end).
    pub(crate) fn close(&self, ino: u64) {
        let gone: Vec<_> = match self.map.lock() {
            Ok(mut m) => [Access::Read, Access::Write]
                .into_iter()
                .filter_map(|a| m.pop(&(ino, a)))
                .collect(),
            Err(_) => return,
        };
        drop(gone);
    }

    /// Descriptors kept now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.lock().map_or(0, |m| m.len())
    }

    /// Closes the descriptors unused for the idle time; whether none is
    /// left (then the sweeper ends, with the lock held, so a `put` that
    /// follows starts another).
    fn sweep(&self) -> bool {
        let mut gone = Vec::new();
        let empty = match self.map.lock() {
            Ok(mut m) => {
                self.expire(&mut m, Instant::now(), &mut gone);
                let empty = m.is_empty();
                if empty {
                    self.sweeping.store(false, Ordering::Release);
                }
                empty
            }
            Err(_) => true,
        };
        drop(gone);
        empty
    }

    /// Moves the descriptors unused since `now - idle` to `gone` (closed
    /// by the caller once the lock is released).
    fn expire(
        &self,
        m: &mut LruCache<(u64, Access), Slot>,
        now: Instant,
        gone: &mut Vec<Arc<OwnedFd>>,
    ) {
        while m
            .peek_lru()
            .is_some_and(|(_, s)| now.saturating_duration_since(s.used) >= self.idle)
        {
            gone.extend(m.pop_lru().map(|(_, s)| s.fd));
        }
    }

    /// A thread that sweeps every half idle time while descriptors are
    /// kept (a thread, not a task: the cache also serves callers outside
    /// a runtime with timers).
    fn start_sweeper(self: &Arc<Self>) {
        let me: Weak<Self> = Arc::downgrade(self);
        let every = self.idle / 2;
        let started = std::thread::Builder::new()
            .name("nfs-open-files".into())
            .spawn(move || loop {
                std::thread::sleep(every);
                match me.upgrade() {
                    Some(files) if !files.sweep() => {}
                    _ => break,
                }
            });
        if started.is_err() {
            // The cache's own uses still sweep it.
            self.sweeping.store(false, Ordering::Release);
        }
    }
}

impl LocalFs {
    /// The descriptor of resolved regular file `node` for `access`, kept
    /// or opened (and then kept), with the file's attributes: those of
    /// the resolution for a kept one (the same inode, checked a moment
    /// ago), those of the opened descriptor otherwise.
    pub(crate) fn open_kept(
        &self,
        node: &Node,
        access: Access,
    ) -> StorageResult<(Arc<OwnedFd>, Meta)> {
        if let Some(fd) = self.kept(node, access) {
            return Ok((fd, node.meta));
        }
        let (fd, meta) = node.open_checked(access.flags())?;
        let fd = Arc::new(fd);
        if keepable(node) {
            self.files
                .put(node.ino, meta.gen(), access, Arc::clone(&fd));
        }
        Ok((fd, meta))
    }

    /// The kept descriptor of `node` for `access`, if any.
    pub(crate) fn kept(&self, node: &Node, access: Access) -> Option<Arc<OwnedFd>> {
        keepable(node)
            .then(|| self.files.get(node.ino, node.meta.gen(), access))
            .flatten()
    }
}

/// A regular file with a name and no lease ([`super::pins`]; the
/// nameless ones are the orphans the server holds through their pin).
fn keepable(node: &Node) -> bool {
    node.pinned.is_none() && node.dir.is_none() && !node.name.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd() -> Arc<OwnedFd> {
        Arc::new(rustix::fs::open("/", OFlags::PATH, rustix::fs::Mode::empty()).unwrap())
    }

    #[test]
    fn kept_descriptors_match_inode_generation_and_access() {
        let c = OpenFiles::new(8, Duration::from_secs(60));
        let f = fd();
        c.put(7, 1, Access::Read, Arc::clone(&f));
        assert!(Arc::ptr_eq(&c.get(7, 1, Access::Read).unwrap(), &f));
        assert!(c.get(7, 1, Access::Write).is_none());
        assert!(c.get(8, 1, Access::Read).is_none());
        // Another generation of the inode number: not served, and closed.
        assert!(c.get(7, 2, Access::Read).is_none());
        assert_eq!(Arc::strong_count(&f), 1);
        c.put(7, 2, Access::Read, fd());
        c.put(7, 2, Access::Write, fd());
        c.close(7);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn a_full_cache_closes_the_least_recently_used_and_counts_it() {
        let c = OpenFiles::new(4, Duration::from_secs(60));
        let first = fd();
        c.put(0, 0, Access::Read, Arc::clone(&first));
        for ino in 1..4 {
            c.put(ino, 0, Access::Read, fd());
        }
        let trips = OPEN_FILES.count();
        c.get(0, 0, Access::Read).unwrap(); // now the most recent
        for ino in 4..20 {
            c.put(ino, 0, Access::Read, fd());
            assert!(c.len() <= 4);
        }
        assert!(OPEN_FILES.count() >= trips + 16);
        assert_eq!(Arc::strong_count(&first), 1, "closed");
        assert!(c.get(19, 0, Access::Read).is_some());
    }

    #[test]
    fn idle_descriptors_are_closed_by_use_and_by_the_sweeper() {
        let c = OpenFiles::new(8, Duration::from_millis(40));
        let f = fd();
        c.put(1, 0, Access::Read, Arc::clone(&f));
        std::thread::sleep(Duration::from_millis(60));
        c.put(2, 0, Access::Read, fd()); // closed by now (this use or the sweeper)
        assert_eq!(Arc::strong_count(&f), 1);
        assert_eq!(c.len(), 1);
        // An idle server closes them with no further call. The sweeper
        // closes what it took out of the map after releasing the lock, so
        // wait for both.
        let f = fd();
        c.put(3, 0, Access::Write, Arc::clone(&f));
        for _ in 0..100 {
            if (c.len(), Arc::strong_count(&f)) == (0, 1) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!((c.len(), Arc::strong_count(&f)), (0, 1));
    }

    /// Descriptors of this process open on `path`, by `/proc/self/fd`
    /// (a removed file's shows as "PATH (deleted)").
    fn fds_on(path: &std::path::Path) -> usize {
        let want = path.as_os_str().as_encoded_bytes();
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|l| l.as_os_str().as_encoded_bytes().starts_with(want))
            .count()
    }

    #[test]
    fn reads_and_writes_reuse_one_descriptor_and_removal_closes_it() {
        use crate::localfs::tests::{block, name, Tmp};
        use crate::storage::Storage;
        use nfs::v3::{Fattr3, StableHow};
        let allow = |_: &Fattr3| Ok(());
        let t = Tmp::new("files-kept");
        std::fs::write(t.0.join("f"), vec![5u8; 8192]).unwrap();
        std::fs::write(t.0.join("g"), b"g").unwrap();
        let lfs = LocalFs::new(&t.0, false).unwrap();
        let fh = block(lfs.lookup(&lfs.root(), &name("f"))).unwrap();
        for i in 0..4u64 {
            let done = block(lfs.read_checked(&fh, i * 100, 4096, &allow, false));
            assert_eq!(done.data.unwrap().0.len(), 4096);
            let w = block(lfs.write_checked(&fh, i, b"w", StableHow::UNSTABLE, &allow));
            assert_eq!(w.written, Ok(StableHow::UNSTABLE));
            assert_eq!(w.after.map(|a| a.size), Some(8192));
        }
        block(lfs.commit(&fh)).unwrap();
        // One read-only and one write-only descriptor served all of them.
        assert_eq!(fds_on(&t.0.join("f")), 2);
        assert_eq!(std::fs::read(t.0.join("f")).unwrap()[..4], *b"wwww");
        // Removed through the server: closed at once (its space freed).
        block(lfs.remove(&lfs.root(), &name("f"))).unwrap();
        assert_eq!(fds_on(&t.0.join("f")), 0);
        let stale = block(lfs.read_checked(&fh, 0, 10, &allow, false));
        assert_eq!(
            stale.data.map(|_| ()),
            Err(nfs::v3::Nfsstat3::NFS3ERR_STALE)
        );
        // Renamed over: the same.
        let gh = block(lfs.lookup(&lfs.root(), &name("g"))).unwrap();
        std::fs::write(t.0.join("h"), b"h").unwrap();
        block(lfs.read_checked(&gh, 0, 1, &allow, false))
            .data
            .unwrap();
        assert_eq!(fds_on(&t.0.join("g")), 1);
        block(lfs.rename(&lfs.root(), &name("h"), &lfs.root(), &name("g"))).unwrap();
        assert_eq!(fds_on(&t.0.join("g")), 0);
    }

    /// A client reading many files: the server never keeps more than the
    /// bound, and every READ is still answered.
    #[test]
    fn many_files_read_keep_at_most_the_bound_open() {
        use crate::localfs::tests::{block, name, Tmp};
        use crate::storage::Storage;
        let t = Tmp::new("files-many");
        let n = MAX_OPEN_FILES + 40;
        for i in 0..n {
            std::fs::write(t.0.join(format!("f{i}")), format!("{i}")).unwrap();
        }
        let lfs = LocalFs::new(&t.0, false).unwrap();
        let trips = OPEN_FILES.count();
        for i in 0..n {
            let fh = block(lfs.lookup(&lfs.root(), &name(&format!("f{i}")))).unwrap();
            let done = block(lfs.read_checked(&fh, 0, 16, &|_| Ok(()), false));
            assert_eq!(done.data.unwrap().0.len(), format!("{i}").len());
            assert!(lfs.files.len() <= MAX_OPEN_FILES);
        }
        assert!(fds_on(&t.0.join("f")) <= MAX_OPEN_FILES);
        assert!(OPEN_FILES.count() >= trips + 40);
    }
}
