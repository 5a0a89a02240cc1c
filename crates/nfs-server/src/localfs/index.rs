//! The handle index: inode number → (parent directory's inode number,
//! generation, name), so a handle is resolved without walking the export.
//!
//! Every LOOKUP (so every READDIRPLUS entry), create, rename and link
//! records where its file lives; resolving a handle reads its entry and
//! checks it on the file system (the name in the parent must still hold
//! that inode, device and generation). A handle with no entry, or whose
//! entry no longer holds, is STALE at once: the cost of a bad handle is a
//! B-tree lookup, whatever the size of the export.
//!
//! Store: [`redb`], an embedded, crash-safe, pure-Rust B-tree store with
//! one file per export in the state directory. It was chosen over an
//! append-only log because a log needs an in-memory map of every entry to
//! be read, which would make the server's memory grow with the number of
//! files clients ever listed; redb reads entries from its file through a
//! bounded page cache ([`CACHE_BYTES`]). Entries are dropped when their
//! file is removed, so the file stays bounded by the export's own file
//! count.
//!
//! Writes ([`store`]): in a state directory every change's record goes
//! to a log beside the store ([`log`]) with `write(2)` before the reply
//! (a LOOKUP's or OPEN's entry, or a READDIRPLUS page's, in one write),
//! and the change waits in memory, where lookups find it first, for the
//! background thread's durable commit every few hundred ms: one store
//! transaction for everything changed since, not one a page. The log is
//! in the page cache, so a server killed by SIGTERM or SIGKILL loses none
//! of the handles it handed out, and a restart on the same state
//! directory replays the log and resolves them. An operation that
//! changed the namespace asks for durability (a create, rename or link
//! syncs the log, so its handle survives a power loss as the file does).
//! Only a power loss or kernel crash may lose entries recorded by LOOKUP
//! or READDIRPLUS since the last durable commit (their handles are then
//! STALE and the client looks the names up again). The changes waiting
//! are bounded in bytes ([`PENDING_BYTES_MAX`]): the change that reaches
//! half the bound wakes the commit thread, the one that reaches the
//! bound commits at once. The commit thread paces its durable commits by
//! their cost, holds them off while changes keep coming, and syncs the
//! log between them ([`store::PACE`], [`store::BUSY_MAX`]). The index kept in memory (no state directory)
//! batches too: entries wait in a bounded map ([`PENDING_MAX`]) and go to
//! the store in one transaction when it fills.
//!
//! Recording what is already recorded is the common case (every
//! READDIRPLUS of a directory listed before): a fixed in-memory table
//! ([`super::known`]) says which entries the index holds, so those cost
//! a hash and a table lookup; a READDIRPLUS page checks the others in one
//! read transaction ([`Index::put_listed`]) and queues only the changed.
//!
//! A file with more than one link keeps the name it was first recorded
//! under in the main table and its other names in a second one
//! ([`links`], bounded per inode): when the recorded name is renamed over
//! or removed while another link lives, the handle resolves through one
//! of those, which then becomes the recorded name ([`Index::promote`]).
//! A handle whose file lost its last link is STALE: removing the last
//! link forgets all of its names.
//!
//! Without a state directory the store lives in memory (tests, embedded
//! use): handles then do not survive a restart.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use oncrpc::limits::Limit;
use redb::{Database, TableDefinition};

use super::known::Known;
use filter::Filter;
use log::Record;
use store::{Bell, Committer, Pace, Store};

mod filter;
mod links;
pub mod log;
mod memory;
mod store;
#[cfg(test)]
pub(crate) use links::MAX_NAMES;
pub use store::{set_commit_interval, COMMIT_INTERVAL};

/// The bytes a pending change of a file named `name` counts against the
/// bound ([`set_pending_bytes`]).
pub fn pending_change_bytes(name: &[u8]) -> usize {
    ENTRY_BYTES + 16 + name.len()
}

/// ino → parent ino (8 bytes), generation (8 bytes), name.
const TABLE: TableDefinition<'static, u64, &[u8]> = TableDefinition::new("ino");

/// Page cache of the store.
pub(crate) const CACHE_BYTES: usize = 16 << 20;
/// Entries held in memory before a batch is written (the index in
/// memory).
pub(crate) const PENDING_MAX: usize = 1024;
/// Bytes of changes held in memory for the next durable commit (with a
/// state directory; each costs [`entry_bytes`], 92 bytes with a 20-byte
/// name, so ~550,000 of them): the change that reaches it commits at
/// once (`index.pending_bytes`), and the one that reaches half of it
/// wakes the commit thread. A commit takes the set away, so with one
/// commit running the index holds at most twice this. Sized so that a
/// listing of 1,000,000 new entries makes a few large checkpoints of the
/// store rather than many (docs/listing.md).
pub const PENDING_BYTES_MAX: usize = 48 << 20;

/// What a pending change costs in memory besides its stored form: the
/// map's slot (key and pointer, 24 bytes, a control byte, room to grow)
/// and the heap block's header and rounding.
const ENTRY_BYTES: usize = 56;

/// The memory a pending change `c` takes, estimated (92 bytes for a
/// 20-byte name).
fn entry_bytes(c: &Change) -> usize {
    ENTRY_BYTES + c.as_ref().map_or(0, |v| v.len())
}

static PENDING_BYTES: Limit = Limit::new("index.pending_bytes");

static PENDING_BOUND: Mutex<usize> = Mutex::new(PENDING_BYTES_MAX);

/// Sets the bound on the bytes of changes waiting for the durable commit
/// ([`PENDING_BYTES_MAX`] by default) of every export opened from now on
/// (tests, embedding).
pub fn set_pending_bytes(bytes: usize) {
    if let Ok(mut b) = PENDING_BOUND.lock() {
        *b = bytes;
    }
}

/// Where one inode lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) parent: u64,
    pub(crate) gen: u64,
    pub(crate) name: Bytes,
}

/// The stored form of an entry.
fn stored(parent: u64, gen: u64, name: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + name.len());
    v.extend_from_slice(&parent.to_be_bytes());
    v.extend_from_slice(&gen.to_be_bytes());
    v.extend_from_slice(name);
    v
}

impl Entry {
    fn decode(b: &[u8]) -> Option<Self> {
        let parent = u64::from_be_bytes(b.get(..8)?.try_into().ok()?);
        let gen = u64::from_be_bytes(b.get(8..16)?.try_into().ok()?);
        let name = b.get(16..)?;
        (!name.is_empty()).then(|| Self {
            parent,
            gen,
            name: Bytes::copy_from_slice(name),
        })
    }
}

/// Whether the stored form `v` of an entry says the file is `name` in
/// `parent`, generation `gen` (compared without decoding).
fn stored_is(v: &[u8], parent: u64, gen: u64, name: &[u8]) -> bool {
    v.len() == 16 + name.len()
        && v.get(..8) == Some(&parent.to_be_bytes()[..])
        && v.get(8..16) == Some(&gen.to_be_bytes()[..])
        && v.get(16..) == Some(name)
}

/// The files one READDIRPLUS page found in a directory (inode,
/// generation, whether it has more than one link, name), recorded in one
/// go by [`Index::put_listed`].
#[derive(Debug, Default)]
pub(crate) struct Listed {
    names: Vec<u8>,
    files: Vec<(u64, u64, bool, usize, usize)>,
}

impl Listed {
    pub(crate) fn push(&mut self, ino: u64, gen: u64, linked: bool, name: &[u8]) {
        let start = self.names.len();
        self.names.extend_from_slice(name);
        self.files.push((ino, gen, linked, start, self.names.len()));
    }

    fn iter(&self) -> impl Iterator<Item = (u64, u64, bool, &[u8])> {
        self.files.iter().map(|&(ino, gen, linked, a, b)| {
            (ino, gen, linked, self.names.get(a..b).unwrap_or_default())
        })
    }
}

/// A change waiting for the store: an entry to write in its stored form
/// ([`stored`]: one heap block, a third of an [`Entry`]'s memory), or a
/// removal (`None`).
type Change = Option<Box<[u8]>>;

/// The changes waiting for the store, by inode, hashed with
/// [`foldhash`] (inode numbers are the file system's, not a client's
/// choice, so SipHash's HashDoS resistance buys nothing here; it was a
/// tenth of the instructions a new entry cost).
type Pending = HashMap<u64, Change, foldhash::fast::RandomState>;

/// A change to make ([`Index::record`]): the inode, the change, and
/// the entry's [`Known::hash`] when the caller computed it already.
type Queued = (u64, Change, Option<u64>);

/// The change recording `e`.
fn change_of(e: Option<&Entry>) -> Change {
    e.map(|e| stored(e.parent, e.gen, &e.name).into_boxed_slice())
}

/// The parent, generation and name of an entry's stored form.
fn split_stored(v: &[u8]) -> Option<(u64, u64, &[u8])> {
    let parent = u64::from_be_bytes(v.get(..8)?.try_into().ok()?);
    let gen = u64::from_be_bytes(v.get(8..16)?.try_into().ok()?);
    Some((parent, gen, v.get(16..)?))
}

/// The log record of the change `c` of `ino`.
fn record_of(ino: u64, c: &Change) -> Record<'_> {
    match c.as_deref().and_then(split_stored) {
        Some((parent, gen, name)) => Record::Put {
            ino,
            parent,
            gen,
            name,
        },
        None => Record::Remove { ino },
    }
}

/// What the index holds in memory, under one lock.
#[derive(Debug)]
struct State {
    pending: Pending,
    /// What [`Self::pending`] takes in memory ([`entry_bytes`]).
    bytes: usize,
    /// The batch being written, read as the store until it is in it.
    writing: Option<Arc<Pending>>,
    /// What the index is known to record ([`Known`]), kept exact.
    known: Known,
    /// Which inodes the store may hold ([`Filter`]): one it says not,
    /// the store does not hold, so is not looked up.
    stored: Filter,
    /// Changes so far: a lookup in the store marks what it found known
    /// only if no change came in between.
    changes: u64,
    /// Changes [`Self::pending`] holds before they are due for the store.
    bound: usize,
    /// Bytes [`Self::pending`] takes before it is due for the store.
    bound_bytes: usize,
}

impl State {
    /// Queues a change of `ino`, keeping [`Self::known`] exact; `hash`:
    /// the entry's [`Known::hash`], when the caller has it.
    fn change(&mut self, ino: u64, e: Change, hash: Option<u64>) {
        match e.as_deref().and_then(split_stored) {
            Some((parent, gen, name)) => {
                let hash = hash.unwrap_or_else(|| self.known.hash(ino, parent, gen, name));
                self.known.set(ino, hash);
                // Before the change can reach the store.
                self.stored.add(ino);
            }
            None => self.known.clear(ino),
        }
        self.bytes += entry_bytes(&e);
        if let Some(old) = self.pending.insert(ino, e) {
            self.bytes = self.bytes.saturating_sub(entry_bytes(&old));
        }
        self.changes += 1;
    }

    /// Takes the pending changes away (for the store).
    fn take(&mut self) -> Pending {
        self.bytes = 0;
        std::mem::take(&mut self.pending)
    }

    /// Whether the pending changes are due for the store.
    fn due(&self, durable: bool) -> bool {
        durable || self.pending.len() >= self.bound || self.bytes >= self.bound_bytes
    }

    /// Whether the pending changes are past half their bound: the commit
    /// thread is woken to write them before a change has to wait.
    fn half_full(&self) -> bool {
        self.bytes >= self.bound_bytes / 2
    }

    /// Where the index says `ino` lives, if a change not yet in the
    /// store says it.
    fn unstored(&self, ino: u64) -> Option<&Change> {
        let writing = self.writing.as_deref().and_then(|w| w.get(&ino));
        self.pending.get(&ino).or(writing)
    }
}

/// The index of one export.
pub(crate) struct Index {
    shared: Arc<Shared>,
    /// Commits the store durably every interval (with a state
    /// directory); stopped and joined when the index is dropped.
    _committer: Option<Committer>,
}

/// What the index and its commit thread share.
pub(crate) struct Shared {
    store: Store,
    state: Mutex<State>,
    /// Held while a batch is taken and written: batches reach the store
    /// one at a time, in the order they were taken.
    writer: Mutex<()>,
    /// Wakes the commit thread before its interval ends.
    bell: Arc<Bell>,
    /// When the commit thread's next checkpoint may start.
    pace: Mutex<Pace>,
    /// Lookups made in the store (tests).
    #[cfg(test)]
    store_reads: std::sync::atomic::AtomicU64,
}

impl std::ops::Deref for Index {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl core::fmt::Debug for Index {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Index").finish_non_exhaustive()
    }
}

fn db_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("handle index: {e}"))
}

/// A file a READDIRPLUS page found, not yet known to be recorded:
/// inode, generation, name, its [`Known`] hash, whether it is linked.
type Unsure<'a> = (u64, u64, &'a [u8], u64, bool);

impl Index {
    /// The index stored in `path` (created if missing), its log beside
    /// it replayed.
    pub(crate) fn open(path: &Path) -> std::io::Result<Self> {
        Self::open_with(path, store::LOG_MAX, store::commit_interval())
    }

    /// [`Self::open`] with a log bound of `log_max` bytes and a durable
    /// commit every `every`.
    pub(crate) fn open_with(
        path: &Path,
        log_max: u64,
        every: std::time::Duration,
    ) -> std::io::Result<Self> {
        let bound = PENDING_BOUND.lock().map_or(PENDING_BYTES_MAX, |b| *b);
        Self::open_bounded(path, log_max, every, bound)
    }

    /// [`Self::open_with`] holding changes of at most `pending_bytes` in
    /// memory between durable commits.
    pub(crate) fn open_bounded(
        path: &Path,
        log_max: u64,
        every: std::time::Duration,
        pending_bytes: usize,
    ) -> std::io::Result<Self> {
        let db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(path)
            .map_err(db_err)?;
        let logs = log_paths(path);
        let store = Store::open(db, [&logs[0], &logs[1]], log_max)?;
        let shared = Arc::new(Shared::new(store, usize::MAX, pending_bytes)?);
        let tick = {
            let shared = Arc::clone(&shared);
            move |rung| {
                if let Err(e) = shared.tick(rung) {
                    tracing::warn!(error = %e, "handle index: durable commit failed");
                }
            }
        };
        let bell = Arc::clone(&shared.bell);
        let committer = Some(Committer::spawn(every, bell, tick));
        Ok(Self {
            shared,
            _committer: committer,
        })
    }

    /// An index kept in memory only.
    pub(crate) fn in_memory() -> std::io::Result<Self> {
        #[cfg_attr(not(fuzzing), allow(unused_mut))]
        let mut builder = Database::builder();
        // Under the fuzzer (whose `nfs_server_rpc` makes an index for
        // every input) a region of 1 MiB instead of redb's 4 GiB: redb
        // sizes and saves a region's allocator at every create, grow and
        // drop, which for 4 GiB took most of each input. Only redb's
        // layout differs; redb offers the setting under `fuzzing` only.
        #[cfg(fuzzing)]
        builder.set_region_size(1 << 20);
        let db = builder
            .create_with_backend(memory::Memory::default())
            .map_err(db_err)?;
        Ok(Self {
            shared: Arc::new(Shared::new(Store::memory(db)?, PENDING_MAX, usize::MAX)?),
            _committer: None,
        })
    }

    /// Where `ino` lives, if recorded.
    pub(crate) fn get(&self, ino: u64) -> Option<Entry> {
        {
            let st = self.state.lock().ok()?;
            if let Some(p) = st.unstored(ino) {
                return p.as_deref().and_then(Entry::decode);
            }
            if !st.stored.may_hold(ino) {
                return None;
            }
        }
        self.count_store_read();
        let tx = self.store.db.begin_read().ok()?;
        let t = tx.open_table(TABLE).ok()?;
        let v = t.get(ino).ok()??;
        Entry::decode(v.value())
    }

    /// Whether `ino` is recorded as `e` (known, pending or stored).
    fn holds(&self, ino: u64, e: &Entry) -> bool {
        let Ok(mut st) = self.state.lock() else {
            return false;
        };
        let hash = st.known.hash(ino, e.parent, e.gen, &e.name);
        if st.known.is(ino, hash) {
            return true;
        }
        if let Some(p) = st.unstored(ino) {
            let same = p
                .as_deref()
                .is_some_and(|v| stored_is(v, e.parent, e.gen, &e.name));
            if same {
                st.known.set(ino, hash);
            }
            return same;
        }
        if !st.stored.may_hold(ino) {
            return false;
        }
        let since = st.changes;
        drop(st);
        let stored = self.not_stored(e.parent, vec![(ino, e.gen, &e.name[..], hash, false)]);
        let same = stored.is_empty();
        if same {
            if let Ok(mut st) = self.state.lock() {
                if st.changes == since {
                    st.known.set(ino, hash);
                }
            }
        }
        same
    }

    /// Records where `ino` lives; `durable` writes it to stable storage
    /// before returning (with everything pending). A `linked` file (more
    /// than one link) already recorded under another name keeps that
    /// one and gets `e` as a further name ([`links`]).
    pub(crate) fn put(&self, ino: u64, e: Entry, durable: bool, linked: bool) {
        if !durable && self.holds(ino, &e) {
            return;
        }
        if linked {
            self.put_linked(ino, e, durable);
        } else {
            self.change(ino, Some(e), durable);
        }
    }

    /// [`Self::put`] of a file with more than one link, not known to be
    /// recorded as `e` in the main table.
    fn put_linked(&self, ino: u64, e: Entry, durable: bool) {
        let other = |p: &Entry| p.gen == e.gen && (p.parent != e.parent || p.name != e.name);
        if !self.get(ino).is_some_and(|p| other(&p)) {
            return self.change(ino, Some(e), durable);
        }
        if !durable && links::has(&self.store.db, ino, &e) {
            return;
        }
        let r = Record::Link {
            ino,
            parent: e.parent,
            gen: e.gen,
            name: &e.name,
        };
        if let Err(err) = self.store.write(durable, |c| c.apply(&r)) {
            tracing::warn!(error = %err, ino, "handle index: a further name was not recorded");
        }
        self.log_bound();
    }

    /// `name` in `parent` no longer names `ino` of generation `gen` (a
    /// REMOVE, or a RENAME over it or away from it); `last`: that was
    /// its last link. The last link forgets the file; another link's
    /// removal forgets that name, and when it was the recorded one, a
    /// further name takes its place (RFC 8881 §4.2.3: the handle stays
    /// good while the file lives).
    pub(crate) fn unlinked(&self, ino: u64, gen: u64, parent: u64, name: &[u8], last: bool) {
        let Some(p) = self.get(ino).filter(|p| p.gen == gen) else {
            return;
        };
        if last {
            return self.remove(ino);
        }
        if p.parent != parent || p.name[..] != *name {
            if let Err(err) = self.forget_name(ino, parent, name) {
                tracing::warn!(error = %err, ino, "handle index: a removed name stays recorded");
            }
            return;
        }
        match links::names(&self.store.db, ino, gen).into_iter().next() {
            Some(e) => self.promote(ino, e),
            None => self.remove(ino),
        }
    }

    /// The further names of `ino` recorded for generation `gen`.
    pub(crate) fn other_names(&self, ino: u64, gen: u64) -> Vec<Entry> {
        links::names(&self.store.db, ino, gen)
    }

    /// Forgets `name` in `parent` as a further name of `ino`.
    fn forget_name(&self, ino: u64, parent: u64, name: &[u8]) -> std::io::Result<bool> {
        let r = Record::Unlink { ino, parent, name };
        let out = self.store.write(false, |c| c.apply(&r));
        self.log_bound();
        out
    }

    /// Makes the further name `e` of `ino` its recorded one (the
    /// recorded name no longer holds the file).
    pub(crate) fn promote(&self, ino: u64, e: Entry) {
        if let Err(err) = self.forget_name(ino, e.parent, &e.name) {
            tracing::warn!(error = %err, ino, "handle index: a promoted name stays a further one");
        }
        self.change(ino, Some(e), false);
    }

    /// Whether the known-entries table already says the index records
    /// every one of the `listed` files in `parent`: then
    /// [`Self::put_listed`] has nothing to do, and no store access to make
    /// (a READDIRPLUS page served on the runtime thread asks first).
    pub(crate) fn all_known(&self, parent: u64, listed: &Listed) -> bool {
        let Ok(st) = self.state.lock() else {
            return false;
        };
        listed
            .iter()
            .all(|(ino, gen, _, name)| st.known.is(ino, st.known.hash(ino, parent, gen, name)))
    }

    /// Records that the `listed` files live in directory `parent`, as
    /// [`Self::put`] without durability does for each: those already
    /// known to be recorded so cost a table lookup, the others one read
    /// transaction for the page, and only the changed ones are queued
    /// (a READDIRPLUS page, RFC 1813 §3.3.17, records its entries as a
    /// LOOKUP would, in one go).
    pub(crate) fn put_listed(&self, parent: u64, listed: &Listed) {
        if listed.files.is_empty() {
            return;
        }
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        let mut unsure: Vec<Unsure<'_>> = Vec::new();
        // A change waiting for the store that says otherwise is newer than
        // what the store says, and an inode the store cannot hold
        // ([`Filter`]) is new: these change without asking it.
        let mut differ: Vec<Unsure<'_>> = Vec::new();
        for (ino, gen, linked, name) in listed.iter() {
            let hash = st.known.hash(ino, parent, gen, name);
            if st.known.is(ino, hash) {
                continue;
            }
            match st.unstored(ino) {
                Some(Some(v)) if stored_is(v, parent, gen, name) => st.known.set(ino, hash),
                Some(_) => differ.push((ino, gen, name, hash, linked)),
                // Neither waiting nor in the store: new, no lookup.
                None if !st.stored.may_hold(ino) => differ.push((ino, gen, name, hash, linked)),
                None => unsure.push((ino, gen, name, hash, linked)),
            }
        }
        if unsure.is_empty() && differ.is_empty() {
            return;
        }
        let since = st.changes;
        drop(st);
        let mut changed = self.not_stored(parent, unsure.clone());
        changed.extend_from_slice(&differ);
        unsure.extend_from_slice(&differ);
        let mut linked = Vec::new();
        let mut changes = Vec::with_capacity(changed.len());
        match self.state.lock() {
            Ok(mut st) => {
                if st.changes == since {
                    for &(ino, _, _, hash, _) in &unsure {
                        st.known.set(ino, hash);
                    }
                }
            }
            Err(_) => return,
        }
        for (ino, gen, name, hash, l) in changed {
            if l {
                let name = Bytes::copy_from_slice(name);
                linked.push((ino, Entry { parent, gen, name }));
            } else {
                let c = Some(stored(parent, gen, name).into_boxed_slice());
                changes.push((ino, c, Some(hash)));
            }
        }
        self.record(changes, false);
        for (ino, e) in linked {
            self.put_linked(ino, e, false);
        }
    }

    /// Those of `files` the store does not record in `parent` as given,
    /// looked up in one read transaction.
    fn not_stored<'a>(&self, parent: u64, files: Vec<Unsure<'a>>) -> Vec<Unsure<'a>> {
        if files.is_empty() {
            return files;
        }
        self.count_store_read();
        let Ok(tx) = self.store.db.begin_read() else {
            return files;
        };
        let Ok(t) = tx.open_table(TABLE) else {
            return files;
        };
        files
            .into_iter()
            .filter(|&(ino, gen, name, _, _)| {
                !matches!(t.get(ino), Ok(Some(v)) if stored_is(v.value(), parent, gen, name))
            })
            .collect()
    }

    /// Forgets `ino` (its file was removed).
    pub(crate) fn remove(&self, ino: u64) {
        self.change(ino, None, false);
    }

    fn change(&self, ino: u64, e: Option<Entry>, durable: bool) {
        self.record(vec![(ino, change_of(e.as_ref()), None)], durable);
    }

    /// Makes `changes`, in order; `durable` puts them on stable storage
    /// before returning. With a log, their records are appended to it
    /// with one `write(2)` (and synced if `durable`) and the changes wait
    /// in memory for the next durable commit; in memory, they wait for a
    /// batch.
    fn record(&self, changes: Vec<Queued>, durable: bool) {
        if changes.is_empty() {
            return;
        }
        let logs = match self.store.logs() {
            None => {
                let due = match self.state.lock() {
                    Ok(mut st) => {
                        for (ino, e, hash) in changes {
                            st.change(ino, e, hash);
                        }
                        st.due(durable)
                    }
                    Err(_) => false,
                };
                if due {
                    self.write_pending(durable);
                }
                return;
            }
            Some(Ok(logs)) => logs,
            Some(Err(err)) => {
                tracing::warn!(error = %err, "handle index: changes not recorded");
                return;
            }
        };
        // Under the log's lock: a durable commit takes the pending set and
        // switches logs in one step, so these changes and their records
        // go to the same side of it.
        let mut logs = logs;
        let mut framed = Vec::new();
        let epoch = logs.cur.epoch();
        let pending = match self.state.lock() {
            Ok(mut st) => {
                for (ino, e, hash) in changes {
                    if let Err(err) = record_of(ino, &e).encode(epoch, &mut framed) {
                        tracing::warn!(error = %err, ino, "handle index: a change is not logged");
                    }
                    st.change(ino, e, hash);
                }
                // A durable change is due by its log sync, not by the bound.
                (st.due(false).then_some(st.bytes), st.half_full())
            }
            Err(_) => return,
        };
        let (pending, half) = pending;
        let logged = logs
            .cur
            .append(&framed)
            .and_then(|()| if durable { logs.sync() } else { Ok(()) });
        if let Err(err) = logged {
            tracing::warn!(
                error = %err,
                "handle index: changes not logged (kept for the next durable commit)"
            );
        }
        let full = logs.cur.full();
        let log_half = logs.cur.half_full();
        drop(logs);
        if full {
            self.log_bound();
        } else if let Some(n) = pending {
            PENDING_BYTES.trip(format_args!(
                "handle index changes of {n} bytes wait in memory: the index commits before the interval ends"
            ));
            if let Err(e) = self.commit() {
                tracing::warn!(error = %e, "handle index: durable commit failed");
            }
        } else if half || log_half {
            self.bell.ring();
        }
    }

    /// With a log past its bound: commits durably at once (a limit's
    /// trip).
    fn log_bound(&self) {
        let Some((path, len)) = self.store.log_full() else {
            if self.store.log_half_full() {
                self.bell.ring();
            }
            return;
        };
        store::LOG_BYTES.trip(format_args!(
            "{} holds {len} bytes: the handle index commits before the interval ends",
            path.display()
        ));
        if let Err(e) = self.commit() {
            tracing::warn!(error = %e, "handle index: durable commit failed");
        }
    }

    /// Entries waiting in memory for the store.
    #[cfg(test)]
    pub(crate) fn pending_len(&self) -> usize {
        self.state.lock().map(|p| p.pending.len()).unwrap_or(0)
    }

    /// Bytes in the log (with a state directory).
    #[cfg(test)]
    pub(crate) fn log_len(&self) -> u64 {
        self.store.log_len()
    }

    /// Writes everything pending to the store and commits it durably
    /// (the log starts afresh).
    pub(crate) fn flush(&self) {
        if self.store.logs.is_none() {
            return self.write_pending(false);
        }
        if let Err(e) = self.commit() {
            tracing::warn!(error = %e, "handle index: durable commit failed");
        }
    }

    /// Writes what is pending to the store (with `durable`, to stable
    /// storage, also what earlier batches wrote without). The batch
    /// stays readable ([`Self::get`]) until the store has it: a handle
    /// is never STALE because its entry is on its way. Calls that find
    /// a batch being written wait and then write together what came
    /// meanwhile (one transaction for all of them).
    fn write_pending(&self, durable: bool) {
        let Ok(_w) = self.writer.lock() else {
            return;
        };
        let batch = match self.state.lock() {
            Ok(mut st) if durable || !st.pending.is_empty() => {
                let b = Arc::new(st.take());
                st.writing = Some(Arc::clone(&b));
                b
            }
            _ => return,
        };
        self.write(&batch, durable);
        if let Ok(mut st) = self.state.lock() {
            st.writing = None;
        }
    }

    fn write(&self, batch: &Pending, durable: bool) {
        if let Err(e) = self.try_write(batch, durable) {
            tracing::warn!(error = %e, entries = batch.len(), "handle index write failed");
            // The batch is lost: what the table says of it no longer holds.
            if let Ok(mut st) = self.state.lock() {
                st.known.clear_all();
                st.changes += 1;
            }
        }
    }

    fn try_write(&self, batch: &Pending, durable: bool) -> std::io::Result<()> {
        self.store.write(durable, |c| {
            for (&ino, e) in batch {
                c.apply(&record_of(ino, e))?;
            }
            Ok(())
        })
    }
}

/// The filter of the inodes `db` holds ([`Filter`]): one walk of the
/// store's keys at open (measured in docs/listing.md, "The store
/// filter").
fn held(db: &Database) -> std::io::Result<Filter> {
    let mut f = Filter::new();
    let tx = db.begin_read().map_err(db_err)?;
    let t = tx.open_table(TABLE).map_err(db_err)?;
    for kv in t.range::<u64>(..).map_err(db_err)? {
        let (k, _) = kv.map_err(db_err)?;
        f.add(k.value());
    }
    Ok(f)
}

/// The index's two log files beside its store at `path`.
fn log_paths(path: &Path) -> [PathBuf; 2] {
    [path.with_extension("log"), path.with_extension("log2")]
}

fn poisoned() -> std::io::Error {
    std::io::Error::other("handle index: lock poisoned")
}

impl Shared {
    /// The index of `store` (its logs already replayed into it).
    fn new(store: Store, bound: usize, bound_bytes: usize) -> std::io::Result<Self> {
        let stored = held(&store.db)?;
        Ok(Self {
            store,
            state: Mutex::new(State {
                pending: HashMap::default(),
                bytes: 0,
                writing: None,
                known: Known::new(),
                stored,
                changes: 0,
                bound,
                bound_bytes,
            }),
            writer: Mutex::new(()),
            bell: Arc::new(Bell::default()),
            pace: Mutex::new(Pace::default()),
            #[cfg(test)]
            store_reads: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Counts a lookup in the store (tests).
    fn count_store_read(&self) {
        #[cfg(test)]
        self.store_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The commit thread's turn, every interval or when `rung` (a bound's
    /// half reached): a durable commit of the store (a checkpoint) when
    /// rung, or when the last one's [`store::PACE`] allows it and the
    /// index is quiet (no change since the last turn, or none for
    /// [`store::BUSY_MAX`]: a checkpoint does not compete for the CPU
    /// with the listing whose entries it writes); else the log is
    /// synced, so a power loss still loses at most the changes of the
    /// last interval: the log replays what the store lacks.
    fn tick(&self, rung: bool) -> std::io::Result<()> {
        let changes = self.state.lock().map_or(0, |st| st.changes);
        let now = Instant::now();
        let due = self
            .pace
            .lock()
            .map_or(true, |mut p| p.quiet(changes, now) && p.allows(now));
        if rung || due {
            return self.commit();
        }
        match self.store.logs() {
            Some(logs) => logs?.sync(),
            None => Ok(()),
        }
    }

    /// With a log: writes the pending changes to the store in one
    /// transaction, in inode order, and commits it durably as holding
    /// the current log, whose place the other log takes in the same step
    /// (the background thread every interval, a bound's trip, a flush).
    /// Changes made meanwhile go to the other log and wait for the next
    /// commit; the changes being written stay readable ([`State::writing`])
    /// until the store has them.
    fn commit(&self) -> std::io::Result<()> {
        let _w = self.writer.lock().map_err(|_| poisoned())?;
        let Some(logs) = self.store.logs() else {
            return Ok(());
        };
        let mut logs = logs?;
        let (batch, old) = {
            let mut st = self.state.lock().map_err(|_| poisoned())?;
            if !logs.cur.has_records() && st.pending.is_empty() {
                return Ok(());
            }
            let old = logs.switch()?;
            let batch = Arc::new(st.take());
            st.writing = Some(Arc::clone(&batch));
            (batch, old)
        };
        drop(logs);
        let start = Instant::now();
        let mut sorted: Vec<(&u64, &Change)> = batch.iter().collect();
        sorted.sort_unstable_by_key(|&(ino, _)| *ino);
        let done = self.store.checkpoint(old.epoch(), |t| {
            for (&ino, c) in sorted {
                match c {
                    // Already in the store's form: inserted as it is.
                    Some(v) => t.put_stored(ino, v)?,
                    None => {
                        t.apply(&record_of(ino, c))?;
                    }
                }
            }
            Ok(())
        });
        if let Ok(mut p) = self.pace.lock() {
            p.took(start, Instant::now());
        }
        let Some(logs) = self.store.logs() else {
            return done;
        };
        let mut logs = logs?;
        let mut st = self.state.lock().map_err(|_| poisoned())?;
        st.writing = None;
        if done.is_err() {
            // The store did not take them: the changes no later one
            // replaced wait again, their records in the current log, so
            // the logs still hold every change the store does not.
            let epoch = logs.cur.epoch();
            let mut framed = Vec::new();
            for (&ino, e) in batch.iter() {
                if let std::collections::hash_map::Entry::Vacant(v) = st.pending.entry(ino) {
                    let _ = record_of(ino, e).encode(epoch, &mut framed);
                    v.insert(e.clone());
                    st.bytes += entry_bytes(e);
                }
            }
            drop(st);
            if let Err(e) = logs.cur.append(&framed) {
                tracing::warn!(error = %e, "handle index: changes not logged again");
            }
        } else {
            drop(st);
        }
        logs.retired(old)?;
        done
    }
}

impl Drop for Index {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(parent: u64, name: &'static str) -> Entry {
        Entry {
            parent,
            gen: 9,
            name: Bytes::from_static(name.as_bytes()),
        }
    }

    #[test]
    fn listed_entries_are_recorded_and_unchanged_ones_not_written_again() {
        let ix = Index::in_memory().unwrap();
        let mut l = Listed::default();
        l.push(10, 9, false, b"a");
        l.push(11, 9, false, b"b");
        ix.put_listed(2, &l);
        assert_eq!(ix.get(10), Some(e(2, "a")));
        assert_eq!(ix.get(11), Some(e(2, "b")));
        assert_eq!(ix.pending_len(), 2);
        // Pending or stored as listed: nothing to write.
        ix.put_listed(2, &l);
        assert_eq!(ix.pending_len(), 2);
        ix.flush();
        ix.put_listed(2, &l);
        assert_eq!(ix.pending_len(), 0);
        // A rename, a new generation, another directory: written.
        let mut m = Listed::default();
        m.push(10, 9, false, b"a2");
        m.push(11, 8, false, b"b");
        ix.put_listed(2, &m);
        ix.put_listed(3, &l);
        assert_eq!(ix.get(10), Some(e(3, "a")));
        assert_eq!(ix.get(11).map(|x| (x.parent, x.gen)), Some((3, 9)));
        assert_eq!(ix.pending_len(), 2);
        // A removal pending is not taken for the entry.
        ix.remove(10);
        ix.put_listed(3, &l);
        assert_eq!(ix.get(10), Some(e(3, "a")));
        // Nor is the store's entry when a removal or another entry waits.
        ix.flush();
        ix.remove(10);
        ix.put_listed(3, &l);
        assert_eq!(ix.get(10), Some(e(3, "a")));
        ix.flush();
        ix.put(10, e(4, "moved"), false, false);
        ix.put_listed(3, &l);
        assert_eq!(ix.get(10), Some(e(3, "a")));
        ix.flush();
        assert_eq!(ix.get(10), Some(e(3, "a")));
    }

    #[test]
    fn the_known_table_follows_renames_and_removals() {
        let ix = Index::in_memory().unwrap();
        let mut l = Listed::default();
        l.push(10, 9, false, b"a");
        ix.put_listed(2, &l);
        ix.flush();
        // Known now; a rename (durable put) and a removal must be seen.
        ix.put(10, e(2, "b"), true, false);
        ix.put_listed(2, &l);
        assert_eq!(ix.get(10), Some(e(2, "a")));
        ix.flush();
        ix.put_listed(2, &l);
        assert_eq!(ix.pending_len(), 0);
        ix.remove(10);
        ix.flush();
        assert_eq!(ix.get(10), None);
        ix.put_listed(2, &l);
        assert_eq!(ix.get(10), Some(e(2, "a")));
        // LOOKUP's put goes through the same table.
        ix.flush();
        ix.put(10, e(2, "a"), false, false);
        assert_eq!(ix.pending_len(), 0);
        ix.put(10, e(4, "a"), false, false);
        assert_eq!(ix.get(10), Some(e(4, "a")));
    }

    #[test]
    fn a_linked_file_keeps_its_other_names_until_its_last_link_goes() {
        let ix = Index::in_memory().unwrap();
        ix.put(10, e(2, "a"), false, true);
        ix.put(10, e(3, "b"), false, true);
        ix.put(10, e(3, "b"), true, true);
        let mut l = Listed::default();
        l.push(10, 9, true, b"c");
        ix.put_listed(2, &l);
        ix.put_listed(2, &l);
        // The first name stays the recorded one; the others beside it.
        assert_eq!(ix.get(10), Some(e(2, "a")));
        assert_eq!(ix.other_names(10, 9), vec![e(2, "c"), e(3, "b")]);
        assert!(ix.other_names(10, 8).is_empty());
        // The recorded name goes: another takes its place.
        ix.unlinked(10, 9, 2, b"a", false);
        assert_eq!(ix.get(10), Some(e(2, "c")));
        assert_eq!(ix.other_names(10, 9), vec![e(3, "b")]);
        // Another name goes: forgotten, the recorded one stays.
        ix.put(10, e(2, "d"), false, true);
        ix.unlinked(10, 9, 2, b"d", false);
        assert_eq!(ix.get(10), Some(e(2, "c")));
        assert_eq!(ix.other_names(10, 9), vec![e(3, "b")]);
        // Another file's removal (another generation) changes nothing.
        ix.unlinked(10, 8, 2, b"c", true);
        assert_eq!(ix.get(10), Some(e(2, "c")));
        // The last link: all of it forgotten.
        ix.unlinked(10, 9, 3, b"b", true);
        ix.flush();
        assert_eq!(ix.get(10), None);
        assert!(ix.other_names(10, 9).is_empty());
    }

    #[test]
    fn further_names_are_bounded_per_file_and_the_trip_counted() {
        let ix = Index::in_memory().unwrap();
        ix.put(10, e(2, "first"), false, true);
        // Names of an earlier file with the same inode number go first.
        let old = Entry {
            gen: 8,
            ..e(2, "old")
        };
        let r = Record::Link {
            ino: 10,
            parent: old.parent,
            gen: old.gen,
            name: &old.name,
        };
        ix.store.write(false, |c| c.apply(&r)).unwrap();
        let before = links::NAMES.count();
        let names: Vec<String> = (0..MAX_NAMES + 20).map(|i| format!("n{i}")).collect();
        for n in &names {
            let name = Bytes::copy_from_slice(n.as_bytes());
            ix.put(
                10,
                Entry {
                    parent: 2,
                    gen: 9,
                    name,
                },
                false,
                true,
            );
        }
        assert_eq!(ix.other_names(10, 9).len(), MAX_NAMES);
        assert!(ix.other_names(10, 8).is_empty());
        assert!(links::NAMES.count() >= before + 20);
        // Recorded names still serve: one gone, another takes its place.
        ix.unlinked(10, 9, 2, b"first", false);
        assert_eq!(ix.get(10).map(|x| x.gen), Some(9));
        assert_eq!(ix.other_names(10, 9).len(), MAX_NAMES - 1);
    }

    #[test]
    fn an_entry_being_written_is_still_found() {
        let ix = std::sync::Arc::new(Index::in_memory().unwrap());
        ix.put(1, e(2, "dir"), false, false);
        let writer = {
            let ix = std::sync::Arc::clone(&ix);
            std::thread::spawn(move || {
                for round in 0..20u64 {
                    // Entry 1 changes in every batch, so each carries it.
                    let name = if round % 2 == 0 { "d1" } else { "d2" };
                    ix.put(1, e(2, name), false, false);
                    for i in 0..PENDING_MAX as u64 {
                        ix.put(1000 + round * 10_000 + i, e(1, "f"), false, false);
                    }
                }
            })
        };
        let mut looks = 0u64;
        while !writer.is_finished() {
            assert!(ix.get(1).is_some(), "entry 1 missing after {looks} looks");
            looks += 1;
        }
        writer.join().unwrap();
    }

    #[test]
    fn entries_survive_reopening_and_removals_stick() {
        let p = std::env::temp_dir().join(format!("index-{}.redb", std::process::id()));
        let _ = std::fs::remove_file(&p);
        {
            let ix = Index::open(&p).unwrap();
            ix.put(10, e(2, "a"), false, false);
            ix.put(11, e(10, "b"), true, false);
            for i in 0..(PENDING_MAX as u64 + 10) {
                ix.put(1000 + i, e(2, "many"), false, false);
            }
            ix.remove(1000);
            assert_eq!(ix.get(10), Some(e(2, "a")));
            assert_eq!(ix.get(1000), None);
            ix.put(10, e(3, "a2"), false, true);
        }
        let ix = Index::open(&p).unwrap();
        assert_eq!(ix.other_names(10, 9), vec![e(3, "a2")]);
        assert_eq!(ix.get(10), Some(e(2, "a")));
        assert_eq!(ix.get(11), Some(e(10, "b")));
        assert_eq!(ix.get(1001), Some(e(2, "many")));
        assert_eq!(ix.get(1000), None);
        assert_eq!(ix.get(5), None);
        drop(ix);
        let _ = std::fs::remove_file(&p);
    }

    /// A directory for one test's store files.
    fn scratch(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("index-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// What a server killed now leaves on disk (the page cache's view of
    /// the store and, with `log`, the log), copied to `to`.
    fn killed_copy(p: &Path, to: &Path, log: bool) {
        std::fs::copy(p, to).unwrap();
        if log {
            for (from, to) in log_paths(p).iter().zip(log_paths(to).iter()) {
                std::fs::copy(from, to).unwrap();
            }
        }
    }

    fn listing(n: u64) -> Listed {
        let mut l = Listed::default();
        for i in 0..n {
            l.push(1000 + i, 9, false, format!("f{i}").as_bytes());
        }
        l
    }

    const HOUR: std::time::Duration = std::time::Duration::from_secs(3600);

    #[test]
    fn a_killed_index_comes_back_from_its_log_and_not_without_it() {
        let d = scratch("killed");
        let p = d.join("ix.redb");
        let ix = Index::open_with(&p, store::LOG_MAX, HOUR).unwrap();
        ix.put(10, e(2, "a"), false, false);
        ix.put_listed(2, &listing(500));
        ix.put(11, e(2, "ln"), false, true);
        ix.put(11, e(3, "other"), false, true);
        ix.put(12, e(2, "gone"), false, false);
        ix.remove(12);
        ix.put(13, e(2, "last"), false, false);
        killed_copy(&p, &d.join("k.redb"), true);
        killed_copy(&p, &d.join("n.redb"), false);
        killed_copy(&p, &d.join("t.redb"), true);
        drop(ix);

        let k = Index::open(&d.join("k.redb")).unwrap();
        assert_eq!(k.get(10), Some(e(2, "a")));
        for i in 0..500 {
            let want = Entry {
                name: Bytes::from(format!("f{i}")),
                ..e(2, "")
            };
            assert_eq!(k.get(1000 + i), Some(want));
        }
        assert_eq!(k.get(11), Some(e(2, "ln")));
        assert_eq!(k.other_names(11, 9), vec![e(3, "other")]);
        assert_eq!(k.get(12), None);
        assert_eq!(k.get(13), Some(e(2, "last")));
        // Replayed into the store durably: the log started afresh.
        assert_eq!(k.log_len(), log::HEADER_LEN as u64);
        drop(k);
        let again = Index::open(&d.join("k.redb")).unwrap();
        assert_eq!(again.get(13), Some(e(2, "last")));
        drop(again);

        // The store alone (no durable commit since the start) holds none
        // of them: the log is what kept them.
        let n = Index::open(&d.join("n.redb")).unwrap();
        assert_eq!(n.get(10), None);
        assert_eq!(n.get(1000), None);
        drop(n);

        // A torn tail (the last record cut short): the records before it
        // replayed, the cut one dropped, the tail counted.
        let log = d.join("t.log");
        let len = std::fs::metadata(&log).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&log)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
        let torn = store::TORN.load(std::sync::atomic::Ordering::Relaxed);
        let t = Index::open(&d.join("t.redb")).unwrap();
        assert_eq!(t.get(10), Some(e(2, "a")));
        assert_eq!(t.get(1499).map(|x| x.parent), Some(2));
        assert_eq!(t.get(12), None);
        assert_eq!(t.get(13), None);
        assert!(store::TORN.load(std::sync::atomic::Ordering::Relaxed) > torn);
        drop(t);
        let _ = std::fs::remove_dir_all(&d);
    }

    fn store_reads(ix: &Index) -> u64 {
        ix.store_reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[test]
    fn new_entries_skip_the_store_and_stored_ones_are_never_taken_for_new() {
        let d = scratch("filter");
        let p = d.join("ix.redb");
        let span = 1u64 << filter::BITS;
        // 3,000 files, a third of them sharing their filter bit with
        // another (one span apart), and a linked file.
        let mut l = Listed::default();
        for i in 0..1000u64 {
            for ino in [1000 + i, 1000 + i + span, 1000 + i + 5 * span] {
                l.push(ino, 9, false, format!("f{ino}").as_bytes());
            }
        }
        let ix = Index::open_with(&p, store::LOG_MAX, HOUR).unwrap();
        ix.put(7, e(2, "first"), true, true);
        let reads = store_reads(&ix);
        ix.put_listed(2, &l);
        assert_eq!(store_reads(&ix), reads, "new entries were looked up");
        assert_eq!(ix.pending_len(), 3001);
        ix.flush();
        // Half of them committed, the rest in the log only (a SIGKILL).
        let mut m = Listed::default();
        for i in 0..500u64 {
            m.push(50_000 + i, 9, false, b"g");
            m.push(50_000 + i + span, 9, false, b"h");
        }
        ix.put_listed(3, &m);
        killed_copy(&p, &d.join("k.redb"), true);
        drop(ix);

        // After the restart the filter is rebuilt from the store and the
        // replayed log: every stored entry is looked up and found as
        // listed (nothing queued), never taken for new.
        let k = Index::open_with(&d.join("k.redb"), store::LOG_MAX, HOUR).unwrap();
        let reads = store_reads(&k);
        k.put_listed(2, &l);
        k.put_listed(3, &m);
        assert_eq!(k.pending_len(), 0, "a stored entry was taken for new");
        assert!(store_reads(&k) > reads);
        // A linked file listed under another name keeps its recorded one.
        let mut ln = Listed::default();
        ln.push(7, 9, true, b"second");
        k.put_listed(4, &ln);
        assert_eq!(k.get(7), Some(e(2, "first")));
        assert_eq!(k.other_names(7, 9), vec![e(4, "second")]);
        // An inode sharing a stored one's bit is looked up; one alone is
        // not; both are recorded.
        let reads = store_reads(&k);
        let mut shared = Listed::default();
        shared.push(1000 + 2 * span, 9, false, b"s");
        k.put_listed(2, &shared);
        assert_eq!(store_reads(&k), reads + 1);
        let mut alone = Listed::default();
        alone.push(900_000, 9, false, b"a");
        k.put_listed(2, &alone);
        assert_eq!(store_reads(&k), reads + 1);
        assert_eq!(
            k.get(1000 + 2 * span).map(|x| x.name),
            Some(Bytes::from("s"))
        );
        assert_eq!(k.get(900_000).map(|x| x.name), Some(Bytes::from("a")));
        assert_eq!(k.get(900_001), None);
        drop(k);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn garbage_for_a_log_is_counted_and_the_store_still_opens() {
        let d = scratch("garbage");
        let p = d.join("ix.redb");
        let ix = Index::open_with(&p, store::LOG_MAX, HOUR).unwrap();
        ix.put(10, e(2, "a"), false, false);
        ix.flush();
        drop(ix);
        std::fs::write(p.with_extension("log"), b"not a log at all, just bytes").unwrap();
        let torn = store::TORN.load(std::sync::atomic::Ordering::Relaxed);
        let ix = Index::open(&p).unwrap();
        assert!(store::TORN.load(std::sync::atomic::Ordering::Relaxed) > torn);
        assert_eq!(ix.get(10), Some(e(2, "a")));
        ix.put(11, e(2, "b"), false, false);
        drop(ix);
        let ix = Index::open(&p).unwrap();
        assert_eq!(ix.get(11), Some(e(2, "b")));
        drop(ix);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_log_past_its_bound_commits_at_once_and_the_trip_is_counted() {
        let d = scratch("bound");
        let p = d.join("ix.redb");
        let ix = Index::open_with(&p, 4096, HOUR).unwrap();
        let trips = store::LOG_BYTES.count();
        // 500 records of about 37 bytes in one page: past 4 KiB.
        ix.put_listed(2, &listing(500));
        assert!(store::LOG_BYTES.count() > trips);
        assert_eq!(ix.log_len(), log::HEADER_LEN as u64);
        for i in 0..50 {
            ix.put(5000 + i, e(2, "more"), false, false);
            assert!(ix.log_len() <= 4096 + 64, "{}", ix.log_len());
        }
        // Committed durably: the store alone holds the page.
        killed_copy(&p, &d.join("n.redb"), false);
        drop(ix);
        let n = Index::open(&d.join("n.redb")).unwrap();
        assert_eq!(n.get(1499).map(|x| x.parent), Some(2));
        drop(n);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn pages_wait_in_memory_until_the_pending_bound_commits_them() {
        let d = scratch("pending");
        let p = d.join("ix.redb");
        // 400 entries (74-76 bytes each) are below half the bound, which
        // would wake the commit thread; 400 + 700 reach it.
        let ix = Index::open_bounded(&p, store::LOG_MAX, HOUR, 80_000).unwrap();
        let trips = PENDING_BYTES.count();
        // A page below the bound: logged, served from memory, not in the
        // store file.
        ix.put_listed(2, &listing(400));
        assert_eq!(ix.pending_len(), 400);
        assert_eq!(ix.get(1399).map(|x| x.name), Some(Bytes::from("f399")));
        assert!(ix.log_len() > log::HEADER_LEN as u64);
        killed_copy(&p, &d.join("n.redb"), false);
        let n = Index::open(&d.join("n.redb")).unwrap();
        assert_eq!(n.get(1000), None);
        drop(n);
        assert_eq!(PENDING_BYTES.count(), trips);
        // The page that reaches the bound commits everything at once.
        let mut more = Listed::default();
        for i in 0..700 {
            more.push(5000 + i, 9, false, format!("g{i}").as_bytes());
        }
        ix.put_listed(3, &more);
        assert!(PENDING_BYTES.count() > trips);
        assert_eq!(ix.pending_len(), 0);
        assert_eq!(ix.log_len(), log::HEADER_LEN as u64);
        killed_copy(&p, &d.join("c.redb"), false);
        drop(ix);
        let c = Index::open(&d.join("c.redb")).unwrap();
        assert_eq!(c.get(1399).map(|x| x.parent), Some(2));
        assert_eq!(c.get(5699).map(|x| x.parent), Some(3));
        drop(c);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn changes_made_while_commits_run_survive_a_kill() {
        let d = scratch("switch");
        let p = d.join("ix.redb");
        let ix = Arc::new(Index::open_with(&p, store::LOG_MAX, HOUR).unwrap());
        let writer = {
            let ix = Arc::clone(&ix);
            std::thread::spawn(move || {
                for round in 0..200u64 {
                    let mut l = Listed::default();
                    for i in 0..50 {
                        l.push(10_000 + round * 50 + i, 9, false, b"f");
                    }
                    ix.put_listed(round + 100, &l);
                    // Entry 1 changes every round: the last one must win.
                    let name = if round % 2 == 0 { "even" } else { "odd" };
                    ix.put(1, e(2, name), false, false);
                    if round % 7 == 0 {
                        ix.remove(10_000 + round * 50);
                    }
                }
            })
        };
        let mut commits = 0;
        while !writer.is_finished() {
            ix.commit().unwrap();
            commits += 1;
        }
        writer.join().unwrap();
        // Killed with the last changes in a log only.
        ix.put(2, e(1, "last"), false, false);
        killed_copy(&p, &d.join("k.redb"), true);
        drop(ix);
        let k = Index::open(&d.join("k.redb")).unwrap();
        for round in 0..200u64 {
            for i in 0..50 {
                let ino = 10_000 + round * 50 + i;
                let want = (round % 7 != 0 || i != 0).then_some(round + 100);
                assert_eq!(
                    k.get(ino).map(|x| x.parent),
                    want,
                    "{ino} after {commits} commits"
                );
            }
        }
        assert_eq!(k.get(1), Some(e(2, "odd")));
        assert_eq!(k.get(2), Some(e(1, "last")));
        drop(k);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_background_commit_makes_the_store_hold_the_log() {
        let d = scratch("interval");
        let p = d.join("ix.redb");
        let ix =
            Index::open_with(&p, store::LOG_MAX, std::time::Duration::from_millis(20)).unwrap();
        ix.put(10, e(2, "a"), false, false);
        let start = std::time::Instant::now();
        while ix.log_len() > log::HEADER_LEN as u64 {
            assert!(start.elapsed().as_secs() < 30, "no durable commit");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        killed_copy(&p, &d.join("n.redb"), false);
        drop(ix);
        let n = Index::open(&d.join("n.redb")).unwrap();
        assert_eq!(n.get(10), Some(e(2, "a")));
        drop(n);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Waits (up to 30 s) until the store alone holds everything: no
    /// change pending or being written, the log started afresh.
    fn committed(ix: &Index) -> bool {
        let start = std::time::Instant::now();
        let writing = || ix.state.lock().unwrap().writing.is_some();
        while ix.pending_len() > 0 || writing() || ix.log_len() > log::HEADER_LEN as u64 {
            if start.elapsed().as_secs() >= 30 {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        true
    }

    #[test]
    fn half_of_either_bound_wakes_the_commit_thread() {
        let d = scratch("half");
        // Changes of 600 x 74-76 bytes: past half of 80,000, below it.
        let p = d.join("ix.redb");
        let ix = Index::open_bounded(&p, store::LOG_MAX, HOUR, 80_000).unwrap();
        ix.put_listed(2, &listing(600));
        assert!(committed(&ix), "half the pending bound did not commit");
        // 150 records of ~37 bytes: past half of an 8 KiB log, below it.
        let q = d.join("iy.redb");
        let iy = Index::open_with(&q, 8192, HOUR).unwrap();
        iy.put_listed(2, &listing(150));
        assert!(committed(&iy), "half the log bound did not commit");
        // Committed durably: the stores alone hold the pages.
        killed_copy(&p, &d.join("n.redb"), false);
        killed_copy(&q, &d.join("m.redb"), false);
        drop((ix, iy));
        let n = Index::open(&d.join("n.redb")).unwrap();
        assert_eq!(n.get(1599).map(|x| x.parent), Some(2));
        let m = Index::open(&d.join("m.redb")).unwrap();
        assert_eq!(m.get(1149).map(|x| x.parent), Some(2));
        drop((n, m));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_busy_index_syncs_its_log_and_checkpoints_once_quiet_or_busy_too_long() {
        let ms = std::time::Duration::from_millis;
        let mut pace = Pace::default();
        let t = std::time::Instant::now();
        assert!(pace.quiet(0, t), "no change yet");
        assert!(!pace.quiet(5, t + ms(300)), "changes since the last tick");
        assert!(!pace.quiet(9, t + ms(600)));
        assert!(pace.quiet(9, t + ms(900)), "none since");
        // Busy at every tick: held off for BUSY_MAX after the last quiet
        // tick, then due anyway.
        let mut n = 10;
        let mut at = t + ms(900);
        while at < t + ms(900) + store::BUSY_MAX - ms(300) {
            at += ms(300);
            n += 1;
            assert!(!pace.quiet(n, at));
        }
        assert!(pace.quiet(n + 1, t + ms(900) + store::BUSY_MAX));
        // A checkpoint's end starts the next wait afresh.
        pace.took(at, at + ms(10));
        assert!(!pace.quiet(n + 2, at + ms(300)));

        // The index: a tick that finds new changes syncs the log (the
        // store alone lacks them, with its log it has them); the next,
        // with none since, checkpoints.
        let d = scratch("busy");
        let p = d.join("ix.redb");
        let ix = Index::open_with(&p, store::LOG_MAX, HOUR).unwrap();
        ix.tick(false).unwrap();
        ix.put_listed(2, &listing(100));
        ix.tick(false).unwrap();
        assert_eq!(ix.pending_len(), 100, "checkpointed while busy");
        assert!(ix.store.log_synced());
        killed_copy(&p, &d.join("n.redb"), false);
        killed_copy(&p, &d.join("l.redb"), true);
        ix.tick(false).unwrap();
        assert_eq!(ix.pending_len(), 0, "no checkpoint once quiet");
        assert_eq!(ix.log_len(), log::HEADER_LEN as u64);
        drop(ix);
        let n = Index::open(&d.join("n.redb")).unwrap();
        assert_eq!(n.get(1000), None);
        let l = Index::open(&d.join("l.redb")).unwrap();
        assert_eq!(l.get(1099).map(|x| x.parent), Some(2));
        drop((n, l));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_checkpoint_paces_the_next_and_the_ticks_between_sync_the_log() {
        let mut pace = Pace::default();
        let t = std::time::Instant::now();
        assert!(pace.allows(t));
        let ms = std::time::Duration::from_millis;
        pace.took(t, t + ms(10));
        let next = t + ms(10) + ms(10) * store::PACE;
        assert!(!pace.allows(next - ms(1)));
        assert!(pace.allows(next));

        let d = scratch("pace");
        let p = d.join("ix.redb");
        let ix = Index::open_with(&p, store::LOG_MAX, ms(20)).unwrap();
        // The last checkpoint was long: the next is an hour away.
        ix.pace.lock().unwrap().hold_until(t + HOUR);
        ix.put(10, e(2, "a"), false, false);
        let start = std::time::Instant::now();
        while !ix.store.log_synced() {
            assert!(start.elapsed().as_secs() < 30, "the log was not synced");
            std::thread::sleep(ms(5));
        }
        // Synced, not committed: the store holds it only with its log.
        assert_eq!(ix.pending_len(), 1);
        killed_copy(&p, &d.join("n.redb"), false);
        killed_copy(&p, &d.join("l.redb"), true);
        let n = Index::open(&d.join("n.redb")).unwrap();
        assert_eq!(n.get(10), None);
        let l = Index::open(&d.join("l.redb")).unwrap();
        assert_eq!(l.get(10), Some(e(2, "a")));
        drop((n, l));
        // Once the pace allows it, a tick commits.
        ix.pace
            .lock()
            .unwrap()
            .hold_until(std::time::Instant::now());
        assert!(committed(&ix), "no checkpoint once the pace allowed it");
        drop(ix);
        let _ = std::fs::remove_dir_all(&d);
    }
}
