//! Where the handle index is kept: the [`redb`] store, and with a state
//! directory the log beside it ([`super::log`]) and the thread that
//! commits the store durably every [`commit_interval`].
//!
//! The write policy (docs/hardening.md, "Index writes"): a change's
//! record is appended to the log with `write(2)` before the call that
//! made it replies, and the change waits in memory (the index's pending
//! set, which lookups read first) for the next durable commit. So a
//! server killed by SIGKILL or SIGTERM loses no handle it handed out (the
//! log is in the page cache; the next start replays it into the store).
//! A change whose reply promises stable storage (a CREATE, RENAME,
//! LINK…) syncs the log (`fdatasync`, one per call). Every
//! [`commit_interval`] (300 ms by default) a background thread either
//! writes the pending changes to the store in one transaction and
//! commits it durably (a checkpoint), recording the epoch of the log
//! that held them, or, while the last checkpoint's cost holds the next
//! one off ([`PACE`]) or changes keep coming ([`BUSY_MAX`]), syncs the
//! log. The change that takes the log past
//! half its bound ([`LOG_MAX`]) or the pending set past half its own
//! ([`super::PENDING_BYTES_MAX`]) wakes the thread for a checkpoint; the
//! change that takes either past the whole bound checkpoints at once
//! (the `index.log_bytes` and `index.pending_bytes` limits). A power loss
//! or kernel crash loses at most the handles recorded by LOOKUP,
//! READDIRPLUS and OPEN in the last interval (those of a synced change
//! survive): the client then gets STALE and looks the name up again.
//!
//! Two log files take turns ([`Logs`]): the commit switches to the other
//! one and takes the pending set in the same step, under the log's lock,
//! so the records of the changes it writes are all in the old file and
//! every later record in the new one; writers append to the new file
//! while the store's `fsync` runs, and the old file starts afresh (next
//! epoch but one) once the store holds it. At open, the files whose
//! epoch the store does not hold yet are replayed in epoch order.
//!
//! Lock order: the index's writer lock (one commit at a time), the
//! log's mutex, the index's state, redb's write transaction. Changes of
//! further names ([`Store::write`]) still go to the store as they are
//! made, without `fsync`, their record to the log in the same step.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use oncrpc::limits::Limit;
use redb::{Database, Durability, Table, TableDefinition, WriteTransaction};

use super::log::{Log, LogError, Record, Replay};
use super::{db_err, links, stored, Entry, TABLE};

/// key → value: the log epoch whose records the store holds durably.
const META: TableDefinition<'static, &str, u64> = TableDefinition::new("meta");
const EPOCH: &str = "log_epoch";

/// The log's bound in bytes (about 630,000 records of 20-byte names):
/// past it the writer commits the store durably and restarts the log;
/// past half of it the commit thread is woken to do so. It bounds the
/// replay at open: two logs, read whole into memory and written to the
/// store in one transaction (measured in docs/listing.md).
pub(crate) const LOG_MAX: u64 = 32 << 20;

/// A durable commit of the store (a checkpoint: the log holds every
/// change already) that took `d` makes the next one wait `PACE` x `d`
/// after it, unless a bound's half wakes it sooner; the log is synced at
/// every interval meanwhile. So checkpoints take at most a fifth of the
/// commit thread's time however big the store grows.
pub(crate) const PACE: u32 = 4;

/// Bytes read from a log at replay beyond twice its bound.
const REPLAY_SLACK: u64 = 64 << 20;

/// Default time between durable commits of the store.
pub const COMMIT_INTERVAL: Duration = Duration::from_millis(300);

pub(super) static LOG_BYTES: Limit = Limit::new("index.log_bytes");

/// Logs that ended in a torn or garbled record at replay, this process.
pub(crate) static TORN: AtomicU64 = AtomicU64::new(0);

static INTERVAL: Mutex<Duration> = Mutex::new(COMMIT_INTERVAL);

/// Sets the time between durable commits of the handle index of every
/// export opened from now on (`nfsrdma serve --index-commit-interval`).
pub fn set_commit_interval(every: Duration) {
    if let Ok(mut i) = INTERVAL.lock() {
        *i = every;
    }
}

/// The time between durable commits of indexes opened now.
pub(crate) fn commit_interval() -> Duration {
    INTERVAL.lock().map_or(COMMIT_INTERVAL, |i| *i)
}

/// The store's two tables, open in one write transaction.
pub(super) struct Tables<'t> {
    pub(super) main: Table<'t, u64, &'static [u8]>,
    pub(super) links: Table<'t, &'static [u8], u64>,
}

impl<'t> Tables<'t> {
    pub(super) fn open(tx: &'t WriteTransaction) -> std::io::Result<Self> {
        Ok(Self {
            main: tx.open_table(TABLE).map_err(db_err)?,
            links: tx.open_table(links::LINKS).map_err(db_err)?,
        })
    }

    /// Records `ino` as the entry whose stored form is `v`
    /// ([`super::stored`]).
    pub(super) fn put_stored(&mut self, ino: u64, v: &[u8]) -> redb::Result<()> {
        self.main.insert(ino, v)?;
        Ok(())
    }

    /// Makes the change `r` says; whether it changed anything (a further
    /// name already held, or over the bound, does not).
    pub(super) fn apply(&mut self, r: &Record<'_>) -> redb::Result<bool> {
        match *r {
            Record::Put {
                ino,
                parent,
                gen,
                name,
            } => {
                self.main
                    .insert(ino, stored(parent, gen, name).as_slice())?;
            }
            Record::Remove { ino } => {
                self.main.remove(ino)?;
                links::forget_all(&mut self.links, ino)?;
            }
            Record::Link {
                ino,
                parent,
                gen,
                name,
            } => {
                let e = Entry {
                    parent,
                    gen,
                    name: bytes::Bytes::copy_from_slice(name),
                };
                return links::add_in(&mut self.links, ino, &e);
            }
            Record::Unlink { ino, parent, name } => {
                links::forget_in(&mut self.links, ino, parent, name)?;
            }
        }
        Ok(true)
    }
}

/// A batch of changes for [`Store::write`]: applied to the store and
/// framed for the log.
pub(super) struct Changes<'t> {
    pub(super) tables: Tables<'t>,
    epoch: u64,
    framed: Vec<u8>,
}

impl Changes<'_> {
    /// Applies `r` and, when it changed the store, frames it for the log.
    pub(super) fn apply(&mut self, r: &Record<'_>) -> std::io::Result<bool> {
        let changed = self.tables.apply(r).map_err(db_err)?;
        if changed {
            r.encode(self.epoch, &mut self.framed)
                .map_err(|e| std::io::Error::other(format!("handle index log: {e}")))?;
        }
        Ok(changed)
    }
}

/// The two log files: the one appended to, and the other, started
/// afresh with the next epoch, or held by a durable commit.
pub(super) struct Logs {
    /// The log changes are appended to.
    pub(super) cur: Log,
    /// The next log (epoch after [`Self::cur`]'s); `None` while a durable
    /// commit holds it.
    pub(super) spare: Option<Log>,
    /// The file of the log a durable commit is making the store hold: a
    /// change that syncs the log syncs it too, so every record before a
    /// synced one is on stable storage.
    retiring: Option<std::fs::File>,
}

impl Logs {
    /// Puts what was appended on stable storage: the current log, and
    /// the one a durable commit is writing to the store.
    pub(super) fn sync(&mut self) -> std::io::Result<()> {
        self.cur.sync()?;
        if let Some(f) = &self.retiring {
            f.sync_data()?;
        }
        Ok(())
    }

    /// Switches to the spare log; the old one is returned for the
    /// durable commit of its records, and synced by [`Self::sync`] until
    /// [`Self::retired`].
    pub(super) fn switch(&mut self) -> std::io::Result<Log> {
        let spare = self
            .spare
            .take()
            .ok_or_else(|| std::io::Error::other("handle index log: no spare log"))?;
        let old = std::mem::replace(&mut self.cur, spare);
        self.retiring = old.file_clone().ok();
        Ok(old)
    }

    /// The store holds the records of `old` (from [`Self::switch`])
    /// durably: it starts afresh as the spare, with the epoch after the
    /// current log's.
    pub(super) fn retired(&mut self, mut old: Log) -> std::io::Result<()> {
        self.retiring = None;
        old.restart(self.cur.epoch() + 1)?;
        self.spare = Some(old);
        Ok(())
    }
}

/// The store and its logs.
pub(super) struct Store {
    pub(super) db: Database,
    /// The logs of changes the store does not hold durably yet; `None`:
    /// the index lives in memory.
    pub(super) logs: Option<Mutex<Logs>>,
}

impl Store {
    /// A store in memory (no log).
    pub(super) fn memory(db: Database) -> std::io::Result<Self> {
        init(&db)?;
        Ok(Self { db, logs: None })
    }

    /// The store in `db` with its two logs at `paths`: what the logs hold
    /// beyond the store is replayed into it (in epoch order) and
    /// committed durably, and both logs start afresh.
    pub(super) fn open(db: Database, paths: [&Path; 2], max: u64) -> std::io::Result<Self> {
        init(&db)?;
        let applied = {
            let tx = db.begin_read().map_err(db_err)?;
            let t = tx.open_table(META).map_err(db_err)?;
            let e = t.get(EPOCH).map_err(db_err)?;
            e.map_or(0, |v| v.value())
        };
        // A log passes its bound by at most one write (a page's records:
        // under 1 MiB), so this reads all of any log this code wrote; a
        // longer file's tail is dropped as torn.
        let cap = max.saturating_mul(2).saturating_add(REPLAY_SLACK);
        let bufs = [Log::read(paths[0], cap)?, Log::read(paths[1], cap)?];
        let mut replays = Vec::new();
        for (buf, path) in bufs.iter().zip(paths) {
            match Replay::new(buf) {
                Ok(replay) if replay.epoch > applied => replays.push((replay, path)),
                Ok(_) => {}
                Err(LogError::Truncated { have: 0, .. }) => {}
                Err(e) => torn(path, 0, e),
            }
        }
        replays.sort_by_key(|(r, _)| r.epoch);
        let mut next = applied + 1;
        if let Some((last, _)) = replays.last() {
            next = last.epoch + 1;
            replay_into(&db, replays)?;
        }
        let cur = Log::create(paths[0], next, max)?;
        let spare = Log::create(paths[1], next + 1, max)?;
        Ok(Self {
            db,
            logs: Some(Mutex::new(Logs {
                cur,
                spare: Some(spare),
                retiring: None,
            })),
        })
    }

    /// The logs, locked; `None` for a store in memory.
    pub(super) fn logs(&self) -> Option<std::io::Result<std::sync::MutexGuard<'_, Logs>>> {
        self.logs.as_ref().map(|l| l.lock().map_err(|_| poisoned()))
    }

    /// Runs `f` on the store's tables in one write transaction (the
    /// changes of further names, and the in-memory index's batches).
    /// With a log, the changes it applies are appended to the log before
    /// the store commits (without `fsync`), and `durable` syncs the log
    /// after; the caller commits durably when the log is full
    /// ([`Self::log_full`]).
    pub(super) fn write<T>(
        &self,
        durable: bool,
        f: impl FnOnce(&mut Changes<'_>) -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        let Some(logs) = self.logs() else {
            let tx = self.db.begin_write().map_err(db_err)?;
            let out = {
                let mut c = Changes {
                    tables: Tables::open(&tx)?,
                    epoch: 0,
                    framed: Vec::new(),
                };
                f(&mut c)?
            };
            tx.commit().map_err(db_err)?;
            return Ok(out);
        };
        let mut logs = logs?;
        let mut tx = self.db.begin_write().map_err(db_err)?;
        tx.set_durability(Durability::None);
        let (out, framed) = {
            let mut c = Changes {
                tables: Tables::open(&tx)?,
                epoch: logs.cur.epoch(),
                framed: Vec::new(),
            };
            let out = f(&mut c)?;
            (out, c.framed)
        };
        // The log first: a change not in it is not in the store either.
        logs.cur.append(&framed)?;
        tx.commit().map_err(db_err)?;
        if durable {
            logs.sync()?;
        }
        Ok(out)
    }

    /// The current log's path and length, when it is past its bound.
    pub(super) fn log_full(&self) -> Option<(std::path::PathBuf, u64)> {
        let logs = self.logs()?.ok()?;
        logs.cur
            .full()
            .then(|| (logs.cur.path().to_owned(), logs.cur.len()))
    }

    /// Applies `f`'s changes to the store and commits it durably as
    /// holding every record of log `epoch` (and the earlier ones).
    pub(super) fn checkpoint(
        &self,
        epoch: u64,
        f: impl FnOnce(&mut Tables<'_>) -> redb::Result<()>,
    ) -> std::io::Result<()> {
        let mut tx = self.db.begin_write().map_err(db_err)?;
        tx.set_durability(Durability::Immediate);
        {
            let mut t = Tables::open(&tx)?;
            f(&mut t).map_err(db_err)?;
            let mut m = tx.open_table(META).map_err(db_err)?;
            m.insert(EPOCH, epoch).map_err(db_err)?;
        }
        tx.commit().map_err(db_err)
    }

    /// Whether the current log is past half its bound.
    pub(super) fn log_half_full(&self) -> bool {
        self.logs()
            .and_then(|l| l.ok().map(|l| l.cur.half_full()))
            .unwrap_or(false)
    }

    #[cfg(test)]
    pub(super) fn log_len(&self) -> u64 {
        self.logs()
            .and_then(|l| l.ok().map(|l| l.cur.len()))
            .unwrap_or(0)
    }

    #[cfg(test)]
    pub(super) fn log_synced(&self) -> bool {
        self.logs()
            .and_then(|l| l.ok().map(|l| l.cur.is_synced()))
            .unwrap_or(false)
    }
}

/// How long the commit thread holds checkpoints off while changes keep
/// coming (every tick busy): past it, a tick checkpoints if [`PACE`]
/// allows, busy or not.
pub(crate) const BUSY_MAX: Duration = Duration::from_secs(5);

/// When the next checkpoint may start ([`PACE`], [`BUSY_MAX`]).
#[derive(Debug, Default)]
pub(super) struct Pace {
    next: Option<Instant>,
    /// The index's change count at the last tick.
    seen: u64,
    /// Since when checkpoints were held off by changes: the last quiet
    /// tick or checkpoint's end.
    busy_since: Option<Instant>,
}

impl Pace {
    /// A tick at `now` with the index at `changes` changes: whether it
    /// is quiet enough for a checkpoint (no change since the last tick,
    /// or changes for [`BUSY_MAX`] since the last checkpoint).
    pub(super) fn quiet(&mut self, changes: u64, now: Instant) -> bool {
        let idle = changes == self.seen;
        self.seen = changes;
        if idle {
            self.busy_since = Some(now);
            return true;
        }
        let since = *self.busy_since.get_or_insert(now);
        now.saturating_duration_since(since) >= BUSY_MAX
    }

    /// Whether a checkpoint may start at `now`.
    pub(super) fn allows(&self, now: Instant) -> bool {
        self.next.is_none_or(|n| now >= n)
    }

    /// A checkpoint ran from `start` to `end`.
    pub(super) fn took(&mut self, start: Instant, end: Instant) {
        self.next = Some(end + end.saturating_duration_since(start) * PACE);
        self.busy_since = Some(end);
    }

    /// No checkpoint before `at` (tests).
    #[cfg(test)]
    pub(super) fn hold_until(&mut self, at: Instant) {
        self.next = Some(at);
    }
}

fn poisoned() -> std::io::Error {
    std::io::Error::other("handle index log: lock poisoned")
}

fn init(db: &Database) -> std::io::Result<()> {
    let tx = db.begin_write().map_err(db_err)?;
    tx.open_table(TABLE).map_err(db_err)?;
    tx.open_table(links::LINKS).map_err(db_err)?;
    tx.open_table(META).map_err(db_err)?;
    tx.commit().map_err(db_err)
}

/// Applies the logs' records to the store (in the order given: epoch
/// order) and commits it durably with the last log's epoch; a torn or
/// garbled record ends its log's replay (the records before it are kept,
/// a later log's are all newer).
fn replay_into(db: &Database, replays: Vec<(Replay<'_>, &Path)>) -> std::io::Result<()> {
    let mut tx = db.begin_write().map_err(db_err)?;
    tx.set_durability(Durability::Immediate);
    let mut done = Vec::new();
    {
        let mut t = Tables::open(&tx)?;
        let mut m = tx.open_table(META).map_err(db_err)?;
        for (mut replay, path) in replays {
            let mut n = 0u64;
            for r in replay.by_ref() {
                t.apply(&r).map_err(db_err)?;
                n += 1;
            }
            m.insert(EPOCH, replay.epoch).map_err(db_err)?;
            done.push((path, n, replay.epoch, replay.stopped));
        }
    }
    tx.commit().map_err(db_err)?;
    for (path, n, epoch, stopped) in done {
        tracing::info!(
            log = %path.display(),
            records = n,
            epoch,
            "handle index: log replayed into the store"
        );
        if let Some((at, e)) = stopped {
            torn(path, at, e);
        }
    }
    Ok(())
}

/// A log that ends in a record that does not decode: counted and logged.
fn torn(path: &Path, at: usize, e: LogError) {
    TORN.fetch_add(1, Ordering::Relaxed);
    metrics::counter!("nfs_index_log_torn_total").increment(1);
    tracing::warn!(
        log = %path.display(),
        offset = at,
        error = %e,
        "handle index: the log ends in a record that does not decode; the records before it are replayed, the rest dropped"
    );
}

/// Wakes the commit thread before its interval ends (a bound's half is
/// reached), and stops it.
#[derive(Debug, Default)]
pub(super) struct Bell {
    rung: Mutex<Ring>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct Ring {
    woken: bool,
    stop: bool,
}

impl Bell {
    /// Wakes the commit thread (at once if it waits, else when its
    /// current commit ends).
    pub(super) fn ring(&self) {
        if let Ok(mut r) = self.rung.lock() {
            r.woken = true;
        }
        self.cv.notify_one();
    }

    fn stop(&self) {
        if let Ok(mut r) = self.rung.lock() {
            r.stop = true;
        }
        self.cv.notify_one();
    }

    /// Waits `every` or until rung: whether it was rung, `None` once
    /// stopped.
    fn wait(&self, every: Duration) -> Option<bool> {
        let deadline = Instant::now() + every;
        let mut r = self.rung.lock().ok()?;
        loop {
            if r.stop {
                return None;
            }
            if std::mem::take(&mut r.woken) {
                return Some(true);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Some(false);
            }
            r = self.cv.wait_timeout(r, left).ok()?.0;
        }
    }
}

/// The thread committing a store durably, stopped and joined when
/// dropped.
pub(super) struct Committer {
    bell: Arc<Bell>,
    thread: Option<JoinHandle<()>>,
}

impl Committer {
    /// A thread running `tick(rung)` every `every`, and at once when
    /// `bell` rings (`rung`).
    pub(super) fn spawn(
        every: Duration,
        bell: Arc<Bell>,
        tick: impl Fn(bool) + Send + 'static,
    ) -> Self {
        let waits = Arc::clone(&bell);
        let thread = std::thread::Builder::new()
            .name("index-commit".into())
            .spawn(move || {
                while let Some(rung) = waits.wait(every) {
                    tick(rung);
                }
            });
        let thread = match thread {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(error = %e, "handle index: no commit thread; the log is committed when it fills");
                None
            }
        };
        Self { bell, thread }
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        self.bell.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
