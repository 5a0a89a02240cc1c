//! Attributes of listed files, kept between READDIRPLUS (RFC 1813
//! §3.3.17) / NFSv4 READDIR (RFC 8881 §18.23) calls and kept coherent by
//! inotify, so a directory listed again costs no `statx` per entry.
//!
//! When a READDIRPLUS page lists a directory, the directory gets an inotify
//! watch ([`EVENTS`]: IN_ATTRIB, IN_MODIFY, IN_CLOSE_WRITE, IN_CREATE,
//! IN_DELETE, IN_MOVED_FROM, IN_MOVED_TO, IN_DELETE_SELF, IN_MOVE_SELF)
//! *before* any of its entries is read, and each entry's attributes and
//! handle generation are kept under its name. Every page first drains the
//! inotify descriptor (non-blocking) and drops each named entry that has an
//! event; IN_Q_OVERFLOW drops every entry, IN_IGNORED (the directory
//! removed, its file system unmounted) drops the directory. The kernel
//! queues an event before the changing system call returns, so a change
//! completed before the call arrived, through this server, another server
//! on the same files or a local process, is seen by that call.
//!
//! Only entries the parent's watch covers are kept: regular files,
//! symbolic links and special files with one link, on the export's own
//! device. Never kept: directories (their nlink and times change by events
//! in their own directory), files with more than one link (changed through
//! another name, the event goes to that name's directory), "." and "..",
//! mount points.
//!
//! What a watch cannot see, bounded by the time-to-live (`ttl`, default
//! [`DEFAULT_TTL`], `nfsrdma serve --attr-cache-ttl`; an entry older than
//! it is read again with `statx`, 0 turns the cache off):
//! - writes through a shared writable `mmap` (the kernel updates mtime at
//!   the page fault without an event; IN_CLOSE_WRITE comes when the writer
//!   closes the file);
//! - a second link made to a kept file by another process (`link(2)`
//!   reports IN_ATTRIB on the inode only, not to its parent's watch), and
//!   then changes through that other name; a LINK through this server
//!   drops the entry itself;
//! - a change through a dentry with no parent: Linux's nfsd on the same
//!   files writing to a file whose dentry had left the cache (it then
//!   works on a disconnected dentry);
//! - atime: IN_ACCESS is not watched (an event per read of every file of a
//!   listed directory), so a listing's atime may lag reads by up to `ttl`.
//!
//! GETATTR, LOOKUP and every other operation still read the file itself;
//! only READDIRPLUS / v4 READDIR attributes come from the cache.
//!
//! Bounds (each trip is a rate-limited log line and a counter,
//! [`oncrpc::limits::Limit`]):
//! - at most `max_dirs` watched directories ([`MAX_DIRS`]); one more drops
//!   the least recently listed with its watch (`readdir.attr_cache_dirs`);
//! - at most `max_entries` kept entries in all ([`MAX_ENTRIES`], about 170
//!   bytes each); one more drops the least recently listed other directory,
//!   or is not kept if there is none (`readdir.attr_cache_entries`);
//! - a watch the system refuses (`fs.inotify.max_user_watches`, ENOSPC)
//!   leaves that directory uncached (`readdir.attr_cache_watches`); no
//!   inotify instance (`fs.inotify.max_user_instances`) leaves the cache
//!   off (the same limit).

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lru::LruCache;
use nfs::v3::Fattr3;
use oncrpc::limits::Limit;
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;

static DIRS: Limit = Limit::new("readdir.attr_cache_dirs");
static ENTRIES: Limit = Limit::new("readdir.attr_cache_entries");
static WATCHES: Limit = Limit::new("readdir.attr_cache_watches");

/// How long a kept entry is used without a `statx` by default: the Linux
/// client's own shortest attribute cache time (`acregmin`).
pub const DEFAULT_TTL: Duration = Duration::from_secs(3);
/// Most directories watched at once by default.
pub(crate) const MAX_DIRS: usize = 1024;
/// Most entries kept at once by default.
pub(crate) const MAX_ENTRIES: usize = 1_000_000;

/// The events that drop a kept entry (module docs).
fn events() -> WatchFlags {
    WatchFlags::ATTRIB
        | WatchFlags::MODIFY
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::ONLYDIR
}

/// What is kept of an entry: its attributes (`fileid` is the inode
/// number), its handle's generation and its handle's tag (under the
/// export's key: the cache is the export's), so a listing served from
/// the cache, or reading an entry again after its time-to-live, does not
/// compute the keyed hash again for the same inode and generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kept {
    pub(crate) attrs: Fattr3,
    pub(crate) gen: u64,
    pub(crate) tag: [u8; crate::fh::TAG_LEN],
}

#[derive(Debug)]
struct Slot {
    kept: Kept,
    at: Instant,
}

#[derive(Debug)]
struct Dir {
    gen: u64,
    wd: i32,
    /// Bumped whenever an event of this directory is drained: a `statx`
    /// made before it may predate the change, so is not kept.
    epoch: u64,
    names: Names,
}

/// A directory's kept entries in the order they were kept, which is the
/// order listings visit them (directory order): a listing reads them as
/// one sequential run, checking the slot after the last one it used
/// against the entry's inode number, and looks a name up by hash only
/// when that is not the one (the first entry of a page, an entry kept
/// out of order).
#[derive(Debug, Default)]
struct Names {
    /// Each kept name's slot.
    at: HashMap<Box<[u8]>, u32>,
    /// Slots in the order kept; `None` where an entry was dropped.
    slots: Vec<Option<Slot>>,
    /// `None` slots.
    dead: usize,
}

impl Names {
    fn len(&self) -> usize {
        self.at.len()
    }

    fn is_empty(&self) -> bool {
        self.at.is_empty()
    }

    /// The slot of `name` (inode `ino`), trying `hint` first; `hint`
    /// becomes the slot after it.
    fn get(&self, name: &[u8], ino: u64, hint: &AtomicUsize) -> Option<&Slot> {
        let h = hint.load(Ordering::Relaxed);
        let i = match self.slots.get(h) {
            // A live slot of this inode is this name's: a kept entry has
            // one link, and its slot is dropped when the name goes.
            Some(Some(s)) if s.kept.attrs.fileid == ino => h,
            _ => *self.at.get(name)? as usize,
        };
        hint.store(i + 1, Ordering::Relaxed);
        self.slots.get(i)?.as_ref()
    }

    /// Keeps `slot` for `name`: whether the name is new.
    /// Puts `slot` in place of the one [`Self::get`] read last (before
    /// `hint`) if that one is of the same inode, without hashing the
    /// name: an entry read again after its time-to-live. A live slot of
    /// the inode is the name's, as in [`Self::get`]. `Err`: not that
    /// slot (put it by name).
    #[allow(clippy::result_large_err)] // the slot handed back, to be put by name
    fn refresh(&mut self, hint: &AtomicUsize, slot: Slot) -> Result<(), Slot> {
        let last = hint.load(Ordering::Relaxed).checked_sub(1);
        match last.and_then(|i| self.slots.get_mut(i)) {
            Some(s) if s.as_ref().map(|s| s.kept.attrs.fileid) == Some(slot.kept.attrs.fileid) => {
                *s = Some(slot);
                Ok(())
            }
            _ => Err(slot),
        }
    }

    fn put(&mut self, name: &[u8], slot: Slot) -> bool {
        if let Some(&i) = self.at.get(name) {
            if let Some(s) = self.slots.get_mut(i as usize) {
                *s = Some(slot);
            }
            return false;
        }
        let Ok(i) = u32::try_from(self.slots.len()) else {
            return false;
        };
        self.slots.push(Some(slot));
        self.at.insert(name.into(), i);
        true
    }

    /// Drops `name`: whether it was kept.
    fn remove(&mut self, name: &[u8]) -> bool {
        let Some(i) = self.at.remove(name) else {
            return false;
        };
        if let Some(s) = self.slots.get_mut(i as usize) {
            *s = None;
            self.dead += 1;
        }
        if self.dead > 64 && self.dead > self.slots.len() / 2 {
            self.compact();
        }
        true
    }

    /// Closes the gaps dropped entries left, keeping the order.
    fn compact(&mut self) {
        let mut to = vec![0u32; self.slots.len()];
        let mut n = 0u32;
        for (i, s) in self.slots.iter().enumerate() {
            if s.is_some() {
                to[i] = n;
                n += 1;
            }
        }
        self.slots.retain(Option::is_some);
        for i in self.at.values_mut() {
            *i = to[*i as usize];
        }
        self.dead = 0;
    }

    fn clear(&mut self) {
        self.at.clear();
        self.slots.clear();
        self.dead = 0;
    }
}

#[derive(Debug)]
struct Inner {
    fd: OwnedFd,
    /// Watched directories by inode number, least recently listed first.
    dirs: LruCache<u64, Dir>,
    by_wd: HashMap<i32, u64>,
    /// Entries kept in all directories.
    total: usize,
}

/// Bounds and time-to-live of an [`AttrCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttrCacheConfig {
    /// How long a kept entry is used (zero: no cache).
    pub ttl: Duration,
    /// Most directories watched.
    pub max_dirs: usize,
    /// Most entries kept in all.
    pub max_entries: usize,
}

impl Default for AttrCacheConfig {
    fn default() -> Self {
        Self {
            ttl: DEFAULT_TTL,
            max_dirs: MAX_DIRS,
            max_entries: MAX_ENTRIES,
        }
    }
}

/// The attribute cache of one export.
#[derive(Debug)]
pub(crate) struct AttrCache {
    inner: Option<Mutex<Inner>>,
    cfg: AttrCacheConfig,
    /// Entries answered from the cache.
    hits: AtomicU64,
    /// Tests: every new watch is refused with ENOSPC.
    #[cfg(test)]
    pub(crate) refuse_watches: std::sync::atomic::AtomicBool,
}

/// One page's use of the cache for one directory.
#[derive(Debug)]
pub(crate) struct View<'a> {
    cache: &'a AttrCache,
    ino: u64,
    gen: u64,
    epoch: u64,
    now: Instant,
    /// The slot after the last one read ([`Names::get`]).
    hint: AtomicUsize,
    /// Lookups that found no entry younger than the time-to-live.
    missed: AtomicUsize,
}

impl AttrCache {
    /// A cache with `cfg` (off when its `ttl` is zero or no inotify
    /// instance can be had).
    pub(crate) fn new(cfg: AttrCacheConfig) -> Self {
        let on = !cfg.ttl.is_zero() && cfg.max_dirs > 0 && cfg.max_entries > 0;
        let inner = on.then(Self::start).flatten().map(Mutex::new);
        Self {
            inner,
            cfg,
            hits: AtomicU64::new(0),
            #[cfg(test)]
            refuse_watches: Default::default(),
        }
    }

    fn start() -> Option<Inner> {
        match inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC) {
            Ok(fd) => Some(Inner {
                fd,
                dirs: LruCache::unbounded(),
                by_wd: HashMap::new(),
                total: 0,
            }),
            Err(e) => {
                WATCHES.trip(format_args!(
                    "no inotify instance ({e}): listings read every entry's attributes"
                ));
                None
            }
        }
    }

    fn lock(&self) -> Option<MutexGuard<'_, Inner>> {
        self.inner.as_ref()?.lock().ok()
    }

    /// Starts a page of directory (`ino`, `gen`), open on `fd`: drains the
    /// events so far, and watches the directory if it is not yet (before
    /// any of its entries is read). `None`: no cache for this page.
    pub(crate) fn open(&self, ino: u64, gen: u64, fd: BorrowedFd<'_>) -> Option<View<'_>> {
        let mut inner = self.lock()?;
        inner.drain();
        let fresh = inner.dirs.get(&ino).is_some_and(|d| d.gen == gen);
        if !fresh {
            #[cfg(test)]
            if self.refuse_watches.load(Ordering::Relaxed) {
                WATCHES.trip(format_args!("test: watch refused"));
                return None;
            }
            inner.watch(ino, gen, fd, self.cfg.max_dirs)?;
        }
        let epoch = inner.dirs.peek(&ino)?.epoch;
        Some(self.view(ino, gen, epoch))
    }

    fn view(&self, ino: u64, gen: u64, epoch: u64) -> View<'_> {
        View {
            cache: self,
            ino,
            gen,
            epoch,
            now: Instant::now(),
            hint: AtomicUsize::new(0),
            missed: AtomicUsize::new(0),
        }
    }

    /// [`Self::open`] for a directory already watched, without watching
    /// one: the listing prefetch ([`super::prefetch`]) reads ahead only
    /// for a directory a page is listing. Drains the events so far.
    pub(crate) fn open_watched(&self, ino: u64, gen: u64) -> Option<View<'_>> {
        let mut inner = self.lock()?;
        inner.drain();
        let epoch = inner.dirs.peek(&ino).filter(|d| d.gen == gen)?.epoch;
        Some(self.view(ino, gen, epoch))
    }

    /// Whether directory (`ino`, `gen`) is watched with entries kept: a
    /// listing of it is likely to come from the cache (they may still be
    /// older than the time-to-live).
    pub(crate) fn holds(&self, ino: u64, gen: u64) -> bool {
        self.lock().is_some_and(|i| {
            i.dirs
                .peek(&ino)
                .is_some_and(|d| d.gen == gen && !d.names.is_empty())
        })
    }

    /// Drops what is kept of `name` in directory `ino` (the server made a
    /// change the watch does not report there, such as a second link).
    pub(crate) fn forget(&self, ino: u64, name: &[u8]) {
        if let Some(mut inner) = self.lock() {
            inner.drop_name(ino, name);
        }
    }

    /// Entries answered from the cache so far.
    #[cfg(test)]
    pub(crate) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Entries kept now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().map_or(0, |i| i.total)
    }

    /// Directories watched now.
    #[cfg(test)]
    pub(crate) fn dirs(&self) -> usize {
        self.lock().map_or(0, |i| i.dirs.len())
    }
}

impl View<'_> {
    /// The kept entry `name` (inode `ino`, as listed), if it is younger
    /// than the time-to-live.
    #[cfg(test)]
    pub(crate) fn get(&self, name: &[u8], ino: u64) -> Option<Kept> {
        self.lookup(name, ino).ok()
    }

    /// [`Self::get`]; `Err` with the entry kept when it is older than the
    /// time-to-live (its attributes are not to be used, but its handle's
    /// tag is good for the same inode and generation), or `Err(None)`.
    pub(crate) fn lookup(&self, name: &[u8], ino: u64) -> Result<Kept, Option<Kept>> {
        let r = self.find(name, ino);
        if r.is_ok() {
            self.cache.hits.fetch_add(1, Ordering::Relaxed);
        } else {
            self.missed.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn find(&self, name: &[u8], ino: u64) -> Result<Kept, Option<Kept>> {
        self.find_with(name, ino, Kept::clone)
    }

    /// [`Self::lookup`] for the prefetch: `Ok` when the entry is kept and
    /// younger than the time-to-live (not counted as a hit, nothing
    /// copied), else `Err` as there.
    pub(crate) fn peek(&self, name: &[u8], ino: u64) -> Result<(), Option<Kept>> {
        self.find_with(name, ino, |_| ())
    }

    /// `fresh` of the kept entry `name` when it is younger than the
    /// time-to-live; else `Err` as [`Self::lookup`].
    fn find_with<T>(
        &self,
        name: &[u8],
        ino: u64,
        fresh: impl FnOnce(&Kept) -> T,
    ) -> Result<T, Option<Kept>> {
        let inner = self.cache.lock().ok_or(None)?;
        let d = inner.dirs.peek(&self.ino).filter(|d| d.gen == self.gen);
        let s = d
            .and_then(|d| d.names.get(name, ino, &self.hint))
            .ok_or(None)?;
        if self.now.saturating_duration_since(s.at) < self.cache.cfg.ttl {
            Ok(fresh(&s.kept))
        } else {
            Err(Some(s.kept.clone()))
        }
    }

    /// Lookups of this view that found no entry younger than the
    /// time-to-live (each is a `statx` for the page).
    pub(crate) fn missed(&self) -> usize {
        self.missed.load(Ordering::Relaxed)
    }

    /// Keeps `kept` for `name`, read (by `statx`) during this page, unless
    /// an event of the directory was drained since the page began.
    pub(crate) fn put(&self, name: &[u8], kept: Kept) {
        let Some(mut inner) = self.cache.lock() else {
            return;
        };
        let slot = Slot { kept, at: self.now };
        let Some(d) = inner.dirs.peek_mut(&self.ino) else {
            return;
        };
        if d.gen != self.gen || d.epoch != self.epoch {
            return;
        }
        // Most often the entry `get` just found too old.
        let Err(slot) = d.names.refresh(&self.hint, slot) else {
            return;
        };
        if d.names.at.contains_key(name) {
            d.names.put(name, slot);
            return;
        }
        let here = d.names.len();
        if inner.total >= self.cache.cfg.max_entries && !inner.make_room(self.ino, here) {
            return;
        }
        if let Some(d) = inner.dirs.peek_mut(&self.ino) {
            if d.names.put(name, slot) {
                inner.total += 1;
            }
        }
    }
}

/// A drained event: watch, name, what happened.
type Pending = (i32, Option<Box<[u8]>>, ReadFlags);

impl Inner {
    /// Reads every queued event, dropping what each makes stale.
    fn drain(&mut self) {
        let mut buf = [MaybeUninit::<u8>::uninit(); 8192];
        let mut stale: Vec<Pending> = Vec::new();
        {
            let mut r = inotify::Reader::new(&self.fd, &mut buf);
            loop {
                match r.next() {
                    Ok(ev) => stale.push((
                        ev.wd(),
                        ev.file_name().map(|n| n.to_bytes().into()),
                        ev.events(),
                    )),
                    Err(Errno::INTR) => continue,
                    // WOULDBLOCK: all read. Anything else: the descriptor
                    // is unusable, so nothing can be trusted.
                    Err(Errno::WOULDBLOCK) => break,
                    Err(_) => {
                        self.clear_all();
                        break;
                    }
                }
            }
        }
        for (wd, name, flags) in stale {
            self.apply(wd, name.as_deref(), flags);
        }
    }

    fn apply(&mut self, wd: i32, name: Option<&[u8]>, flags: ReadFlags) {
        if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
            self.clear_all();
            return;
        }
        let Some(&ino) = self.by_wd.get(&wd) else {
            return;
        };
        if flags.intersects(ReadFlags::IGNORED | ReadFlags::DELETE_SELF | ReadFlags::UNMOUNT) {
            self.by_wd.remove(&wd);
            if let Some(d) = self.dirs.pop(&ino) {
                self.total -= d.names.len();
            }
            return;
        }
        if let Some(n) = name {
            self.drop_name(ino, n);
        }
    }

    fn drop_name(&mut self, ino: u64, name: &[u8]) {
        if let Some(d) = self.dirs.peek_mut(&ino) {
            d.epoch += 1;
            if d.names.remove(name) {
                self.total -= 1;
            }
        }
    }

    /// Drops every kept entry (the events were lost), keeping the watches.
    fn clear_all(&mut self) {
        for (_, d) in self.dirs.iter_mut() {
            d.epoch += 1;
            d.names.clear();
        }
        self.total = 0;
    }

    /// Watches directory (`ino`, `gen`) open on `fd`, dropping the least
    /// recently listed directory if `max` are watched.
    fn watch(&mut self, ino: u64, gen: u64, fd: BorrowedFd<'_>, max: usize) -> Option<()> {
        if let Some(old) = self.dirs.pop(&ino) {
            self.total -= old.names.len();
            self.by_wd.remove(&old.wd);
        }
        while self.dirs.len() >= max {
            let (_, d) = self.dirs.pop_lru()?;
            self.unwatch(d);
            DIRS.trip(format_args!(
                "{max} directories' attributes cached: dropped the least recently listed"
            ));
        }
        // The magic link names the open directory itself, whatever its
        // path is now.
        let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let wd = match inotify::add_watch(&self.fd, path.as_str(), events()) {
            Ok(wd) => wd,
            Err(Errno::NOSPC) => {
                WATCHES.trip(format_args!(
                    "inotify watch limit (fs.inotify.max_user_watches) reached: a directory is listed without the attribute cache"
                ));
                return None;
            }
            Err(_) => return None,
        };
        // The same directory under another key (never, unless a watch
        // outlived its IN_IGNORED): that one is stale.
        if let Some(other) = self.by_wd.insert(wd, ino) {
            if let Some(d) = self.dirs.pop(&other) {
                self.total -= d.names.len();
            }
        }
        let dir = Dir {
            gen,
            wd,
            epoch: 0,
            names: Names::default(),
        };
        self.dirs.put(ino, dir);
        Some(())
    }

    fn unwatch(&mut self, d: Dir) {
        self.total -= d.names.len();
        self.by_wd.remove(&d.wd);
        let _ = inotify::remove_watch(&self.fd, d.wd);
    }

    /// Frees room for one entry by dropping the least recently listed
    /// directory other than `keep` (which holds `here` entries): whether
    /// there was one.
    fn make_room(&mut self, keep: u64, here: usize) -> bool {
        let victim = if self.total > here {
            self.dirs
                .iter()
                .rev()
                .find(|(&ino, d)| ino != keep && !d.names.is_empty())
                .map(|(&ino, _)| ino)
        } else {
            None
        };
        let Some(ino) = victim else {
            ENTRIES.trip(format_args!(
                "attribute cache full ({} entries in one directory): an entry is not kept",
                self.total
            ));
            return false;
        };
        ENTRIES.trip(format_args!(
            "attribute cache full ({} entries): dropped the least recently listed directory's",
            self.total
        ));
        if let Some(d) = self.dirs.pop(&ino) {
            self.unwatch(d);
        }
        true
    }
}

/// The trips of the cache's limits so far: (dirs, entries, watches).
#[cfg(test)]
pub(crate) fn trips() -> (u64, u64, u64) {
    (DIRS.count(), ENTRIES.count(), WATCHES.count())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(ino: u64) -> Kept {
        let root = rustix::fs::open("/", rustix::fs::OFlags::PATH, rustix::fs::Mode::empty());
        let m = super::super::attrs::Meta::at(root.unwrap(), b".").unwrap();
        Kept {
            attrs: Fattr3 {
                fileid: ino,
                ..m.fattr(0)
            },
            gen: 1,
            tag: [ino as u8; crate::fh::TAG_LEN],
        }
    }

    fn dir(path: &std::path::Path) -> OwnedFd {
        let flags = rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY;
        rustix::fs::open(path, flags, rustix::fs::Mode::empty()).unwrap()
    }

    fn tmp(tag: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("attrcache-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    /// A lost event (queue overflow) drops every entry; IN_IGNORED drops
    /// its directory; a named event only its name.
    #[test]
    fn overflow_drops_all_ignored_drops_the_directory() {
        let p = tmp("ovf");
        let c = AttrCache::new(AttrCacheConfig::default());
        let fd = dir(&p);
        let v = c.open(7, 1, rustix::fd::AsFd::as_fd(&fd)).unwrap();
        v.put(b"a", kept(1));
        v.put(b"b", kept(2));
        assert_eq!((c.len(), v.get(b"a", 1)), (2, Some(kept(1))));
        let wd = c.lock().unwrap().dirs.peek(&7).unwrap().wd;
        c.lock().unwrap().apply(wd, Some(b"a"), ReadFlags::MODIFY);
        assert_eq!(
            (c.len(), v.get(b"a", 1), v.get(b"b", 2)),
            (1, None, Some(kept(2)))
        );
        c.lock().unwrap().apply(-1, None, ReadFlags::QUEUE_OVERFLOW);
        assert_eq!((c.len(), v.get(b"b", 2)), (0, None));
        let v = c.open(7, 1, rustix::fd::AsFd::as_fd(&fd)).unwrap();
        v.put(b"c", kept(3));
        c.lock().unwrap().apply(wd, None, ReadFlags::IGNORED);
        assert_eq!((c.len(), c.dirs()), (0, 0));
        let _ = std::fs::remove_dir_all(&p);
    }

    /// A `statx` made before an event of its directory was drained is
    /// not kept: it may predate the change.
    #[test]
    fn an_entry_read_before_a_drained_event_is_not_kept() {
        let p = tmp("epoch");
        std::fs::write(p.join("f"), b"").unwrap();
        let c = AttrCache::new(AttrCacheConfig::default());
        let fd = dir(&p);
        let page = c.open(9, 1, rustix::fd::AsFd::as_fd(&fd)).unwrap();
        // Another page drains the event of a change made meanwhile.
        std::fs::write(p.join("f"), b"x").unwrap();
        let other = c.open(9, 1, rustix::fd::AsFd::as_fd(&fd)).unwrap();
        page.put(b"f", kept(1));
        assert_eq!(page.get(b"f", 1), None);
        other.put(b"f", kept(1));
        assert_eq!(other.get(b"f", 1), Some(kept(1)));
        let _ = std::fs::remove_dir_all(&p);
    }

    /// Slots are read in the order kept, found by name when the hint is
    /// not theirs, and stay right when drops make the slots compact.
    #[test]
    fn names_follow_the_listing_order_and_survive_compaction() {
        let mut n = Names::default();
        let slot = |ino| Slot {
            kept: kept(ino),
            at: Instant::now(),
        };
        for i in 0..300u64 {
            assert!(n.put(format!("f{i}").as_bytes(), slot(i + 10)));
        }
        assert!(!n.put(b"f5", slot(15)), "kept again: not new");
        let hint = AtomicUsize::new(0);
        for i in 0..300u64 {
            let s = n.get(format!("f{i}").as_bytes(), i + 10, &hint).unwrap();
            assert_eq!(s.kept.attrs.fileid, i + 10);
            assert_eq!(hint.load(Ordering::Relaxed), i as usize + 1);
        }
        // Out of order: by name.
        assert_eq!(n.get(b"f3", 13, &hint).unwrap().kept.attrs.fileid, 13);
        assert_eq!(hint.load(Ordering::Relaxed), 4);
        // The hint's slot is another inode's (f4 is inode 14): by name.
        assert!(n.get(b"f9", 19, &hint).is_some());
        assert!(
            n.get(b"gone", 11, &AtomicUsize::new(1))
                .is_some_and(|s| s.kept.attrs.fileid == 11),
            "a live slot of the same inode is the name's (kept entries have one link)"
        );
        assert!(n.get(b"gone", 99, &AtomicUsize::new(1)).is_none());
        // Read again after its time-to-live: the slot `get` read is
        // replaced in place, nothing added; the hint at another inode's
        // slot, or at none, refuses.
        let hint = AtomicUsize::new(0);
        n.get(b"f7", 17, &hint).unwrap();
        let later = Instant::now() + Duration::from_secs(5);
        assert!(n
            .refresh(
                &hint,
                Slot {
                    kept: kept(17),
                    at: later
                }
            )
            .is_ok());
        assert_eq!(n.get(b"f7", 17, &AtomicUsize::new(0)).unwrap().at, later);
        assert_eq!((n.len(), n.slots.len()), (300, 300));
        assert!(n
            .refresh(
                &hint,
                Slot {
                    kept: kept(18),
                    at: later
                }
            )
            .is_err());
        assert!(n
            .refresh(
                &AtomicUsize::new(0),
                Slot {
                    kept: kept(10),
                    at: later
                }
            )
            .is_err());
        for i in (0..300u64).filter(|i| i % 3 != 0) {
            assert!(n.remove(format!("f{i}").as_bytes()));
        }
        assert!(!n.remove(b"f1"));
        assert!(n.slots.len() < 300, "compacted");
        assert_eq!(n.len(), 100);
        let hint = AtomicUsize::new(0);
        for i in (0..300u64).step_by(3) {
            let s = n.get(format!("f{i}").as_bytes(), i + 10, &hint).unwrap();
            assert_eq!(s.kept.attrs.fileid, i + 10);
        }
        assert!(n.get(b"f1", 11, &AtomicUsize::new(0)).is_none());
    }

    #[test]
    fn a_zero_ttl_is_no_cache() {
        let p = tmp("off");
        let c = AttrCache::new(AttrCacheConfig {
            ttl: Duration::ZERO,
            ..AttrCacheConfig::default()
        });
        assert!(c.open(1, 1, rustix::fd::AsFd::as_fd(&dir(&p))).is_none());
        let _ = std::fs::remove_dir_all(&p);
    }
}
