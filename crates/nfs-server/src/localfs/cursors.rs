//! Directory cursors kept open between the READDIR calls of one listing,
//! so a page that resumes where the last one stopped neither reopens the
//! directory nor seeks it ([`crate::dircursor`]: on ext4 a seek makes the
//! next `getdents64` rebuild its hash-ordered view of a block).
//!
//! A cursor that stopped before the end of its directory is kept under
//! (directory inode, generation, the cookie it stopped at). The next call
//! from that cookie takes it out (two calls at once: the second opens its
//! own), if the directory has not changed since: its change stamp (mtime
//! and ctime, which every entry created, removed or renamed moves) must be
//! the one taken before the kept cursor last read. A changed directory is
//! reopened and sought as without the cache, so what a changed directory
//! lists is exactly what it listed before the cache.
//!
//! Bounds (every listing a client leaves unfinished holds one):
//! - at most `max` cursors ([`MAX_CURSORS`] by default), each an open fd
//!   and at most [`MAX_HELD_BYTES`] of entries read ahead (a cursor
//!   holding more is closed, not kept); keeping one more drops the least
//!   recently used, which trips the `readdir.cursors` limit (a log line,
//!   rate-limited, and a counter);
//! - a cursor unused for [`IDLE`] is dropped when the cache is next used;
//! - removing a directory drops its cursors.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lru::LruCache;
use oncrpc::limits::Limit;

use super::attrs::Meta;
use super::prefetch::Help;
use crate::dircursor::DirCursor;

/// Cursors kept by default.
pub(crate) const MAX_CURSORS: usize = 64;
/// Entries read ahead (bytes) a kept cursor may hold.
pub(crate) const MAX_HELD_BYTES: usize = 256 << 10;
/// How long an unused cursor is kept.
pub(crate) const IDLE: Duration = Duration::from_secs(30);

static CURSORS: Limit = Limit::new("readdir.cursors");

/// What a directory looked like: mtime and ctime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp([(i64, u32); 2]);

impl Stamp {
    pub(crate) fn of(m: &Meta) -> Self {
        let t = |x: rustix::fs::StatxTimestamp| (x.tv_sec, x.tv_nsec);
        Self([t(m.0.stx_mtime), t(m.0.stx_ctime)])
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    ino: u64,
    gen: u64,
    cookie: u64,
}

#[derive(Debug)]
struct Held {
    cursor: DirCursor,
    stamp: Stamp,
    used: Instant,
    /// The read-ahead of the next pages' attributes, handed to the page
    /// that takes the cursor (which lists with it and keeps it again
    /// with the cursor), cancelled when the cursor is dropped
    /// ([`super::prefetch`]).
    help: Option<Help>,
}

/// The kept cursors of one export.
#[derive(Debug)]
pub(crate) struct Cursors {
    map: Mutex<LruCache<Key, Held>>,
    max: usize,
    /// Pages that went on with a kept cursor.
    resumed: AtomicU64,
}

impl Cursors {
    /// A cache of at most `max` cursors (0: none kept).
    pub(crate) fn new(max: usize) -> Self {
        Self {
            map: Mutex::new(LruCache::unbounded()),
            max,
            resumed: AtomicU64::new(0),
        }
    }

    /// The cursor of directory (`ino`, `gen`) that stopped at `cookie`,
    /// if the directory still has the `stamp` it had then, with its
    /// read-ahead job, if any.
    pub(crate) fn take(
        &self,
        ino: u64,
        gen: u64,
        cookie: u64,
        stamp: Stamp,
    ) -> Option<(DirCursor, Option<Help>)> {
        let mut map = self.map.lock().ok()?;
        let h = map.pop(&Key { ino, gen, cookie })?;
        let fresh = h.stamp == stamp && h.used.elapsed() < IDLE;
        if fresh {
            self.resumed.fetch_add(1, Ordering::Relaxed);
        }
        fresh.then_some((h.cursor, h.help))
    }

    /// Pages that went on with a kept cursor so far.
    #[cfg(test)]
    pub(crate) fn resumed(&self) -> u64 {
        self.resumed.load(Ordering::Relaxed)
    }

    /// Keeps `cursor` of directory (`ino`, `gen`), which stopped early and
    /// read it when it had `stamp`, for the listing's next call, with the
    /// read-ahead job of its next pages, if any (cancelled if the cursor
    /// is not kept).
    pub(crate) fn keep(
        &self,
        ino: u64,
        gen: u64,
        stamp: Stamp,
        cursor: DirCursor,
        help: Option<Help>,
    ) {
        let Some(cookie) = cursor.resume_cookie() else {
            return;
        };
        if self.max == 0 || cursor.held_bytes() > MAX_HELD_BYTES {
            return;
        }
        let Ok(mut map) = self.map.lock() else {
            return;
        };
        while map
            .peek_lru()
            .is_some_and(|(_, h)| h.used.elapsed() >= IDLE)
        {
            map.pop_lru();
        }
        let key = Key { ino, gen, cookie };
        if map.len() >= self.max && !map.contains(&key) {
            map.pop_lru();
            CURSORS.trip(format_args!(
                "{} directory cursors held: dropped the least recently used",
                self.max
            ));
        }
        let used = Instant::now();
        map.put(
            key,
            Held {
                cursor,
                stamp,
                used,
                help,
            },
        );
    }

    /// Drops the cursors of directory `ino` (it was removed).
    pub(crate) fn forget_dir(&self, ino: u64) {
        if let Ok(mut map) = self.map.lock() {
            let keys: Vec<Key> = map
                .iter()
                .filter(|(k, _)| k.ino == ino)
                .map(|(k, _)| *k)
                .collect();
            for k in keys {
                map.pop(&k);
            }
        }
    }

    /// Cursors kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.lock().map(|m| m.len()).unwrap_or(0)
    }
}

/// The trips of the `readdir.cursors` limit so far.
#[cfg(test)]
pub(crate) fn trips() -> u64 {
    CURSORS.count()
}
