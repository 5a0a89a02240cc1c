//! Where the handle index is kept: the [`redb`] store, and with a state
//! directory the log beside it ([`super::log`]) and the thread that
//! commits the store durably every [`commit_interval`].
//!
//! The write policy (docs/hardening.md, "Index writes"): a change is
//! committed to the store without `fsync` (redb's `Durability::None`:
//! read transactions see it at once) and its record is appended to the
//! log with `write(2)` in the same step, before the call that made it
//! replies. So a server killed by SIGKILL or SIGTERM loses no handle it
//! handed out (the log is in the page cache; the next start replays it
//! into the store). A change whose reply promises stable storage (a
//! CREATE, RENAME, LINK…) syncs the log (`fdatasync`, one per call, as
//! the store's durable commit was before). Every [`commit_interval`]
//! (300 ms by default) a background thread commits the store durably,
//! recording the log's epoch in it, and starts the log afresh; so does
//! the write that takes the log past its bound ([`LOG_MAX`], the
//! `index.log_bytes` limit). A power loss or kernel crash loses at most
//! the handles recorded by LOOKUP, READDIRPLUS and OPEN in the last
//! interval (those of a synced change survive): the client then gets
//! STALE and looks the name up again.
//!
//! Lock order: the log's mutex, then redb's write transaction; every
//! write and the durable commit hold the log's mutex throughout, so the
//! log's records are in the store's commit order.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use oncrpc::limits::Limit;
use redb::{Database, Durability, Table, TableDefinition, WriteTransaction};

use super::log::{Log, LogError, Record, Replay};
use super::{db_err, links, stored, Entry, TABLE};

/// key → value: the log epoch whose records the store holds durably.
const META: TableDefinition<'static, &str, u64> = TableDefinition::new("meta");
const EPOCH: &str = "log_epoch";

/// The log's bound in bytes (about 170,000 records of 20-byte names):
/// past it the writer commits the store durably and restarts the log.
pub(crate) const LOG_MAX: u64 = 8 << 20;

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

/// The store and its log.
pub(super) struct Store {
    pub(super) db: Database,
    /// The log of changes the store does not hold durably yet; `None`:
    /// the index lives in memory.
    log: Option<Mutex<Log>>,
}

impl Store {
    /// A store in memory (no log).
    pub(super) fn memory(db: Database) -> std::io::Result<Self> {
        init(&db)?;
        Ok(Self { db, log: None })
    }

    /// The store in `db` with its log at `log_path`: what the log holds
    /// beyond the store is replayed into it and committed durably, and
    /// the log starts afresh.
    pub(super) fn open(db: Database, log_path: &Path, max: u64) -> std::io::Result<Self> {
        init(&db)?;
        let applied = {
            let tx = db.begin_read().map_err(db_err)?;
            let t = tx.open_table(META).map_err(db_err)?;
            let e = t.get(EPOCH).map_err(db_err)?;
            e.map_or(0, |v| v.value())
        };
        // The log passes its bound by at most one write (a page's
        // records: under 1 MiB), so this reads all of any log this code
        // wrote; a longer file's tail is dropped as torn.
        let buf = Log::read(log_path, max.saturating_mul(2).saturating_add(REPLAY_SLACK))?;
        let mut next = applied + 1;
        match Replay::new(&buf) {
            Ok(replay) if replay.epoch > applied => {
                next = replay.epoch + 1;
                replay_into(&db, replay, log_path)?;
            }
            Ok(_) => {}
            Err(LogError::Truncated { have: 0, .. }) => {}
            Err(e) => torn(log_path, 0, e),
        }
        let log = Log::create(log_path, next, max)?;
        Ok(Self {
            db,
            log: Some(Mutex::new(log)),
        })
    }

    /// Runs `f` on the store's tables in one write transaction. With a
    /// log, the changes it applies are appended to the log before the
    /// store commits (without `fsync`), and `durable` syncs the log
    /// after; a log past its bound is folded into a durable commit.
    pub(super) fn write<T>(
        &self,
        durable: bool,
        f: impl FnOnce(&mut Changes<'_>) -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        let Some(log) = &self.log else {
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
        let mut log = log.lock().map_err(|_| poisoned())?;
        let mut tx = self.db.begin_write().map_err(db_err)?;
        tx.set_durability(Durability::None);
        let (out, framed) = {
            let mut c = Changes {
                tables: Tables::open(&tx)?,
                epoch: log.epoch(),
                framed: Vec::new(),
            };
            let out = f(&mut c)?;
            (out, c.framed)
        };
        // The log first: a change not in it is not in the store either.
        log.append(&framed)?;
        tx.commit().map_err(db_err)?;
        if durable {
            log.sync()?;
        }
        if log.full() {
            LOG_BYTES.trip(format_args!(
                "{} holds {} bytes: the handle index commits before the interval ends",
                log.path().display(),
                log.len()
            ));
            self.checkpoint(&mut log)?;
        }
        Ok(out)
    }

    /// Commits the store durably if the log holds records, and restarts
    /// the log (the background thread, every interval; and a flush).
    pub(super) fn commit(&self) -> std::io::Result<()> {
        let Some(log) = &self.log else {
            return Ok(());
        };
        let mut log = log.lock().map_err(|_| poisoned())?;
        if log.has_records() {
            self.checkpoint(&mut log)?;
        }
        Ok(())
    }

    /// The store made durable with everything in `log`, which restarts.
    fn checkpoint(&self, log: &mut Log) -> std::io::Result<()> {
        let mut tx = self.db.begin_write().map_err(db_err)?;
        tx.set_durability(Durability::Immediate);
        {
            let mut m = tx.open_table(META).map_err(db_err)?;
            m.insert(EPOCH, log.epoch()).map_err(db_err)?;
        }
        tx.commit().map_err(db_err)?;
        log.restart()
    }

    #[cfg(test)]
    pub(super) fn log_len(&self) -> u64 {
        self.log
            .as_ref()
            .and_then(|l| l.lock().ok().map(|l| l.len()))
            .unwrap_or(0)
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

/// Applies the log's records to the store and commits it durably with
/// the log's epoch; a torn or garbled record ends the replay (the
/// records before it are kept).
fn replay_into(db: &Database, mut replay: Replay<'_>, path: &Path) -> std::io::Result<()> {
    let mut tx = db.begin_write().map_err(db_err)?;
    tx.set_durability(Durability::Immediate);
    let mut n = 0u64;
    {
        let mut t = Tables::open(&tx)?;
        for r in replay.by_ref() {
            t.apply(&r).map_err(db_err)?;
            n += 1;
        }
        let mut m = tx.open_table(META).map_err(db_err)?;
        m.insert(EPOCH, replay.epoch).map_err(db_err)?;
    }
    tx.commit().map_err(db_err)?;
    tracing::info!(
        log = %path.display(),
        records = n,
        epoch = replay.epoch,
        "handle index: log replayed into the store"
    );
    if let Some((at, e)) = replay.stopped {
        torn(path, at, e);
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

/// The thread committing a store durably every interval, stopped and
/// joined when dropped.
pub(super) struct Committer {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Committer {
    pub(super) fn spawn(store: Arc<Store>, every: Duration) -> Self {
        let (stop, rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("index-commit".into())
            .spawn(move || loop {
                match rx.recv_timeout(every) {
                    Err(RecvTimeoutError::Timeout) => {
                        if let Err(e) = store.commit() {
                            tracing::warn!(error = %e, "handle index: durable commit failed");
                        }
                    }
                    _ => return,
                }
            });
        let thread = match thread {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(error = %e, "handle index: no commit thread; the log is committed when it fills");
                None
            }
        };
        Self {
            stop: Some(stop),
            thread,
        }
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
