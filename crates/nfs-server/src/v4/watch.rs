//! Local changes to delegated files that no open announces (RFC 8881
//! §10.4.1: the server must recall a delegation before an access that
//! conflicts with it, whoever makes it). A local *open* of a delegated
//! file breaks the delegation's kernel lease first ([`super::lease`]),
//! which recalls it before the open proceeds; a rename, unlink, chmod,
//! chown or utimes needs no open and breaks no lease, so each delegated
//! file also gets an inotify watch (IN_MODIFY, IN_ATTRIB,
//! IN_CLOSE_WRITE, IN_MOVE_SELF, IN_DELETE_SELF); an event not caused by
//! the server itself recalls the file's delegation through the one
//! conflict path ([`super::Delegations`]).
//!
//! Residual window for those: inotify reports after the fact, so the
//! change has happened when the holder is told; the holder's cached data for
//! the file may already be stale, and it sees the new data at its next
//! OPEN after the DELEGRETURN. (A local reader of a write-delegated file
//! opens it, which breaks the write lease: the holder is recalled and
//! flushes before the read.) The server's own
//! changes to a watched file (the holder writing through NFS) are told
//! apart from local ones by the file's state: after each one the server
//! notes the file's ctime and size ([`FileWatch::changing`],
//! [`FileWatch::quiet`]); an event while such a change is in progress or
//! within [`QUIET`] after it is checked when that time is over, any other
//! at once, and recalls only when the file no longer has the state the
//! server left it in. (An own change that took longer than [`QUIET`], a
//! WRITE waiting for a blocking thread on a loaded machine, was judged
//! before it had ended, against the state before it, and recalled the
//! holder's delegation for its own write: `fuse_deleg`, about 1 run in 15
//! at load 20.) (Found by the kpeer two-mount check: a host process
//! writing within 500 ms of the holder's own write was missed when such
//! events were simply dropped.) A local write that the server's own next
//! change overtakes within the same [`QUIET`] still goes unseen; ctime
//! granularity matters too (Linux 6.13+ gives a file whose ctime was just
//! read a fine-grained one at its next change). When no watch can be set (the inotify limit,
//! `fs.inotify.max_user_watches`, or [`MAX_WATCHES`]) no delegation is
//! granted, with an [`oncrpc::limits::Limit`] trip.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use oncrpc::limits::Limit;
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::fs::{Mode, OFlags};

use super::Delegations;

static WATCHES: Limit = Limit::new("nfs4.delegation_watches");

/// Most delegated files watched at once.
pub(crate) const MAX_WATCHES: usize = 1 << 12;
/// How long after the server's own change to a file its events are
/// ignored.
pub(crate) const QUIET: Duration = Duration::from_millis(500);

/// A file's state as the server left it: ctime in nanoseconds and size.
type Own = Option<(i128, u64)>;

#[derive(Debug, Default)]
struct Map {
    by_wd: HashMap<i32, Bytes>,
    by_key: HashMap<Bytes, i32>,
    /// A descriptor of each watched file, to read its state.
    files: HashMap<Bytes, OwnedFd>,
    quiet_until: HashMap<Bytes, Instant>,
    /// The state the server's last own change left each file in.
    own: HashMap<Bytes, Own>,
    /// Files with an event waiting for their quiet time to end.
    deferred: std::collections::HashSet<Bytes>,
    /// Own changes in progress per file ([`OwnChange`]).
    busy: HashMap<Bytes, u32>,
}

impl Map {
    fn forget(&mut self, key: &Bytes) {
        if let Some(wd) = self.by_key.remove(key) {
            self.by_wd.remove(&wd);
        }
        self.files.remove(key);
        self.quiet_until.remove(key);
        self.own.remove(key);
        self.deferred.remove(key);
        self.busy.remove(key);
    }

    /// Until when events on `key` wait before they are judged: the end of
    /// its quiet time, or (an own change still in progress) a [`QUIET`]
    /// from now, to look again then; `None` to judge them now.
    fn hold_until(&self, key: &Bytes) -> Option<Instant> {
        let now = Instant::now();
        if self.busy.contains_key(key) {
            return Some(now + QUIET);
        }
        self.quiet_until.get(key).copied().filter(|t| now < *t)
    }

    /// The state of `key`'s file now.
    fn state(&self, key: &Bytes) -> Own {
        let st = rustix::fs::fstat(self.files.get(key)?).ok()?;
        let ctime = i128::from(st.st_ctime) * 1_000_000_000 + i128::from(st.st_ctime_nsec);
        Some((ctime, u64::try_from(st.st_size).ok()?))
    }

    /// Whether `key`'s file changed since the server's own last change.
    fn changed_locally(&self, key: &Bytes) -> bool {
        let now = self.state(key);
        now.is_none() || self.own.get(key).is_none_or(|own| *own != now)
    }
}

#[derive(Debug)]
struct Inner {
    fd: Arc<OwnedFd>,
    map: Arc<Mutex<Map>>,
}

/// The inotify watches on delegated files of one server; started with the
/// first delegation.
#[derive(Debug)]
pub(crate) struct FileWatch {
    inner: OnceLock<Option<Inner>>,
    /// Most files watched at once.
    max: usize,
}

impl Default for FileWatch {
    fn default() -> Self {
        Self::with_max(MAX_WATCHES)
    }
}

fn events() -> WatchFlags {
    WatchFlags::MODIFY
        | WatchFlags::ATTRIB
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::MOVE_SELF
        | WatchFlags::DELETE_SELF
}

impl FileWatch {
    /// Watches at most `max` files at once.
    pub(crate) fn with_max(max: usize) -> Self {
        Self {
            inner: OnceLock::new(),
            max,
        }
    }

    fn inner(&self, delegs: &Delegations) -> Option<&Inner> {
        self.inner.get_or_init(|| start(delegs.clone())).as_ref()
    }

    /// Watches `file` (open on the delegated file `key`); `false` when no
    /// watch could be set: grant no delegation then.
    pub(crate) fn watch(&self, key: &Bytes, file: &OwnedFd, delegs: &Delegations) -> bool {
        let Some(inner) = self.inner(delegs) else {
            return false;
        };
        let Ok(mut map) = inner.map.lock() else {
            return false;
        };
        if map.by_key.contains_key(key) {
            return true;
        }
        if map.by_key.len() >= self.max {
            sweep(&inner.fd, &mut map, delegs);
            if map.by_key.len() >= self.max {
                WATCHES.trip(format_args!(
                    "no delegation granted: {} delegated files watched",
                    self.max
                ));
                return false;
            }
        }
        // The watch follows the inode, whatever its name becomes.
        let path = format!("/proc/self/fd/{}", file.as_raw_fd());
        // An `O_PATH` descriptor to read the file's state: it counts as
        // no open of the file, so it neither keeps a later delegation's
        // kernel lease from being taken nor breaks one.
        let Ok(dup) =
            rustix::fs::open(path.as_str(), OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
        else {
            return false;
        };
        match inotify::add_watch(&*inner.fd, path.as_str(), events()) {
            Ok(wd) => {
                map.by_wd.insert(wd, key.clone());
                map.by_key.insert(key.clone(), wd);
                map.files.insert(key.clone(), dup);
                let own = map.state(key);
                map.own.insert(key.clone(), own);
                true
            }
            Err(e) => {
                WATCHES.trip(format_args!(
                    "no delegation granted: inotify watch refused ({e}); \
                     raise fs.inotify.max_user_watches"
                ));
                false
            }
        }
    }

    /// The server itself just changed `key` (or is about to, with no
    /// [`OwnChange`] around the change). Notes the file's state; events
    /// within the next [`QUIET`] are checked against the state noted last
    /// once that time is over.
    pub(crate) fn quiet(&self, key: &Bytes) {
        self.with_map(key, |map| {
            map.quiet_until.insert(key.clone(), Instant::now() + QUIET);
            let own = map.state(key);
            map.own.insert(key.clone(), own);
        });
    }

    /// The server itself is about to change `key`: until the returned
    /// guard is dropped (the change made, failed or abandoned), events on
    /// the file wait, however long the change takes; then the file's
    /// state is noted as [`Self::quiet`] does.
    pub(crate) fn changing(&self, key: &Bytes) -> OwnChange<'_> {
        self.with_map(key, |map| {
            *map.busy.entry(key.clone()).or_default() += 1;
        });
        OwnChange {
            watch: self,
            key: key.clone(),
        }
    }

    /// Runs `f` on the map when `key` is watched.
    fn with_map(&self, key: &Bytes, f: impl FnOnce(&mut Map)) {
        let Some(Some(inner)) = self.inner.get() else {
            return;
        };
        if let Ok(mut map) = inner.map.lock() {
            if map.by_key.contains_key(key) {
                f(&mut map);
            }
        }
    }
}

/// An own change to a watched file in progress ([`FileWatch::changing`]).
#[must_use = "the change is in progress until this is dropped"]
pub(crate) struct OwnChange<'a> {
    watch: &'a FileWatch,
    key: Bytes,
}

impl Drop for OwnChange<'_> {
    fn drop(&mut self) {
        let key = &self.key;
        self.watch.with_map(key, |map| {
            if let Some(n) = map.busy.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    map.busy.remove(key);
                }
            }
        });
        self.watch.quiet(key);
    }
}

/// Drops the watches of files that no longer have a delegation.
fn sweep(fd: &OwnedFd, map: &mut Map, delegs: &Delegations) {
    let gone: Vec<(Bytes, i32)> = map
        .by_key
        .iter()
        .filter(|(k, _)| !delegs.held_on(k))
        .map(|(k, wd)| (k.clone(), *wd))
        .collect();
    for (k, wd) in gone {
        let _ = inotify::remove_watch(fd, wd);
        map.forget(&k);
    }
}

fn start(delegs: Delegations) -> Option<Inner> {
    let rt = tokio::runtime::Handle::try_current().ok()?;
    let fd = match inotify::init(CreateFlags::CLOEXEC) {
        Ok(fd) => Arc::new(fd),
        Err(e) => {
            WATCHES.trip(format_args!("no delegations: inotify unavailable ({e})"));
            return None;
        }
    };
    let map = Arc::new(Mutex::new(Map::default()));
    let (rfd, rmap) = (Arc::clone(&fd), Arc::downgrade(&map));
    let spawned = std::thread::Builder::new()
        .name("nfs4-deleg-watch".into())
        .spawn(move || {
            let _rt = rt.enter();
            let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
            let mut reader = inotify::Reader::new(&*rfd, &mut buf);
            loop {
                let (wd, flags) = match reader.next() {
                    Ok(ev) => (ev.wd(), ev.events()),
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(_) => return,
                };
                // The service is gone: stop.
                let Some(map) = rmap.upgrade() else { return };
                on_event(&rfd, &map, &delegs, wd, flags);
            }
        });
    if spawned.is_err() {
        return None;
    }
    Some(Inner { fd, map })
}

/// One inotify event: a change not made by the server recalls the
/// delegation on the file; a file without one is no longer watched.
fn on_event(
    fd: &Arc<OwnedFd>,
    map: &Arc<Mutex<Map>>,
    delegs: &Delegations,
    wd: i32,
    flags: ReadFlags,
) {
    let Ok(mut m) = map.lock() else { return };
    let Some(key) = m.by_wd.get(&wd).cloned() else {
        return;
    };
    if flags.contains(ReadFlags::IGNORED) {
        m.forget(&key);
        return;
    }
    if let Some(until) = m.hold_until(&key) {
        if m.deferred.insert(key.clone()) {
            defer(fd, map, delegs, key, until);
        }
        return;
    }
    let changed = m.changed_locally(&key);
    drop(m);
    if changed {
        recall_local(fd, map, delegs, &key, flags);
    }
}

/// Checks `key` once its quiet time (at least `until`) is over.
fn defer(
    fd: &Arc<OwnedFd>,
    map: &Arc<Mutex<Map>>,
    delegs: &Delegations,
    key: Bytes,
    until: Instant,
) {
    let (fd, map, delegs) = (Arc::clone(fd), Arc::downgrade(map), delegs.clone());
    tokio::spawn(async move {
        let mut until = until;
        loop {
            tokio::time::sleep_until(tokio::time::Instant::from_std(until)).await;
            let Some(map) = map.upgrade() else { return };
            let Ok(mut m) = map.lock() else { return };
            match m.hold_until(&key) {
                Some(t) => until = t,
                None => {
                    m.deferred.remove(&key);
                    let changed = m.by_key.contains_key(&key) && m.changed_locally(&key);
                    drop(m);
                    if changed {
                        recall_local(&fd, &map, &delegs, &key, ReadFlags::empty());
                    }
                    return;
                }
            }
        }
    });
}

/// A local change to `key`'s file: recall its delegation; a file with
/// none left is no longer watched.
fn recall_local(
    fd: &OwnedFd,
    map: &Mutex<Map>,
    delegs: &Delegations,
    key: &Bytes,
    flags: ReadFlags,
) {
    tracing::info!(?flags, "local change to a delegated file: recalling");
    if !delegs.recall(key, 0, true) && !delegs.held_on(key) {
        if let Ok(mut m) = map.lock() {
            if let Some(wd) = m.by_key.get(key).copied() {
                let _ = inotify::remove_watch(fd, wd);
            }
            m.forget(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A watch map holding one file, as [`FileWatch::watch`] leaves it
    /// (without the inotify watch and the delegation, which the judging
    /// of events does not read).
    fn watched(tag: &str) -> (FileWatch, Bytes, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!("watch-{tag}-{}", std::process::id()));
        std::fs::write(&path, b"0").unwrap();
        let key = Bytes::from_static(b"file");
        let mut map = Map::default();
        let dup = rustix::fs::open(&path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()).unwrap();
        map.by_key.insert(key.clone(), 1);
        map.by_wd.insert(1, key.clone());
        map.files.insert(key.clone(), dup);
        let own = map.state(&key);
        map.own.insert(key.clone(), own);
        let w = FileWatch::with_max(4);
        let fd = Arc::new(inotify::init(CreateFlags::CLOEXEC).unwrap());
        let inner = Inner {
            fd,
            map: Arc::new(Mutex::new(map)),
        };
        assert!(w.inner.set(Some(inner)).is_ok());
        (w, key, path)
    }

    /// Whether an event on `key` now would recall: not held back and the
    /// file not as the server left it (what `on_event` and `defer` ask).
    fn would_recall(w: &FileWatch, key: &Bytes) -> bool {
        let Some(Some(inner)) = w.inner.get() else {
            unreachable!()
        };
        let m = inner.map.lock().unwrap();
        m.hold_until(key).is_none() && m.changed_locally(key)
    }

    fn append(path: &std::path::Path) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(b"1").unwrap();
    }

    /// The holder's own WRITE taking longer than the quiet time (a loaded
    /// machine: `fuse_deleg` saw a recall mid-loop about once in 15 runs at
    /// load 20) is not judged while it runs, and once it has ended the
    /// file is as the server left it: no recall.
    #[test]
    fn an_own_change_longer_than_the_quiet_time_is_not_a_local_change() {
        let (w, key, path) = watched("long");
        let own = w.changing(&key);
        append(&path);
        std::thread::sleep(QUIET + Duration::from_millis(100));
        assert!(!would_recall(&w, &key), "judged while the change runs");
        drop(own);
        assert!(!would_recall(&w, &key));
        std::thread::sleep(QUIET + Duration::from_millis(100));
        assert!(!would_recall(&w, &key), "the state noted after the change");
        // A local change afterwards still recalls.
        std::thread::sleep(Duration::from_millis(20));
        append(&path);
        assert!(would_recall(&w, &key));
        let _ = std::fs::remove_file(path);
    }

    /// What happened before the guard: `quiet` before and after a change
    /// whose end came past the quiet time judged it against the state
    /// before it.
    #[test]
    fn a_quiet_time_alone_ends_before_a_long_change() {
        let (w, key, path) = watched("short");
        w.quiet(&key);
        append(&path);
        std::thread::sleep(QUIET + Duration::from_millis(100));
        assert!(would_recall(&w, &key));
        w.quiet(&key);
        assert!(!would_recall(&w, &key));
        let _ = std::fs::remove_file(path);
    }
}
