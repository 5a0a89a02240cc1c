//! The other names of hard-linked files: the index's main table records
//! one name per inode, this one the further names a file with more than
//! one link was found or made under (LOOKUP, READDIRPLUS, LINK, a
//! RENAME onto another link), so its handle still resolves when the
//! recorded name is renamed over or removed while the file keeps a link
//! (RFC 8881 §4.2.3: a persistent handle is accepted for the lifetime
//! of its object; RFC 1813 §2.3.3: STALE means the file no longer
//! exists). Linux's nfsd finds such a file by its inode; this server
//! never walks the export, so it keeps the names.
//!
//! Key: inode, parent inode (8 bytes each, big-endian, so one inode's
//! names are one key range), name; value: the generation.
//!
//! Bound: [`MAX_NAMES`] further names per inode. The names of an inode
//! of another generation (an inode number reused after the file died
//! with names the server never saw go) are purged before a new one is
//! counted; beyond the bound a new name is not recorded, with the
//! `index.names_per_file` limit tripped. All of an inode's names go
//! when its last link does, so the table holds at most the export's own
//! names of hard-linked files, and [`MAX_NAMES`] per inode number of
//! those local processes removed behind the server's back.

use std::ops::Bound;

use bytes::Bytes;
use oncrpc::limits::Limit;
use redb::{Database, ReadableTable, Table, TableDefinition};

use super::Entry;

/// (inode, parent, name) → generation.
pub(super) const LINKS: TableDefinition<'static, &[u8], u64> = TableDefinition::new("links");

/// Names kept per inode besides the one in the main table.
pub(crate) const MAX_NAMES: usize = 32;

pub(super) static NAMES: Limit = Limit::new("index.names_per_file");

fn key(ino: u64, parent: u64, name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(16 + name.len());
    k.extend_from_slice(&ino.to_be_bytes());
    k.extend_from_slice(&parent.to_be_bytes());
    k.extend_from_slice(name);
    k
}

/// The key range of `ino`'s names, from the bounds' bytes `lo`, `hi`.
type Span<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

fn bytes_of(ino: u64) -> ([u8; 8], Option<[u8; 8]>) {
    (ino.to_be_bytes(), ino.checked_add(1).map(u64::to_be_bytes))
}

fn span<'a>(lo: &'a [u8; 8], hi: &'a Option<[u8; 8]>) -> Span<'a> {
    let hi = hi
        .as_ref()
        .map_or(Bound::Unbounded, |h| Bound::Excluded(&h[..]));
    (Bound::Included(&lo[..]), hi)
}

/// The entry a stored key and generation say.
fn decode(k: &[u8], gen: u64) -> Option<Entry> {
    let parent = u64::from_be_bytes(k.get(8..16)?.try_into().ok()?);
    let name = k.get(16..).filter(|n| !n.is_empty())?;
    Some(Entry {
        parent,
        gen,
        name: Bytes::copy_from_slice(name),
    })
}

/// `ino`'s names in `t`, whatever their generation.
fn names_in(t: &impl ReadableTable<&'static [u8], u64>, ino: u64) -> Vec<Entry> {
    let (lo, hi) = bytes_of(ino);
    let Ok(r) = t.range::<&[u8]>(span(&lo, &hi)) else {
        return Vec::new();
    };
    r.filter_map(Result::ok)
        .filter_map(|(k, v)| decode(k.value(), v.value()))
        .collect()
}

/// The further names of `ino` recorded for generation `gen`.
pub(super) fn names(db: &Database, ino: u64, gen: u64) -> Vec<Entry> {
    let Ok(tx) = db.begin_read() else {
        return Vec::new();
    };
    let Ok(t) = tx.open_table(LINKS) else {
        return Vec::new();
    };
    names_in(&t, ino)
        .into_iter()
        .filter(|e| e.gen == gen)
        .collect()
}

/// Whether `ino` is recorded under `e` as a further name.
pub(super) fn has(db: &Database, ino: u64, e: &Entry) -> bool {
    let Ok(tx) = db.begin_read() else {
        return false;
    };
    let Ok(t) = tx.open_table(LINKS) else {
        return false;
    };
    matches!(t.get(key(ino, e.parent, &e.name).as_slice()), Ok(Some(g)) if g.value() == e.gen)
}

/// Records `e` as a further name of `ino` in `t`, within [`MAX_NAMES`]
/// (the names of another generation purged first); whether it was
/// added.
pub(super) fn add_in(
    t: &mut Table<'_, &'static [u8], u64>,
    ino: u64,
    e: &Entry,
) -> redb::Result<bool> {
    let (lo, hi) = bytes_of(ino);
    let gen = e.gen;
    t.retain_in::<&[u8], _>(span(&lo, &hi), |_, g| g == gen)?;
    let held = names_in(t, ino);
    if held
        .iter()
        .any(|h| h.parent == e.parent && h.name == e.name)
    {
        return Ok(false);
    }
    if held.len() >= MAX_NAMES {
        NAMES.trip(format_args!(
            "inode {ino} has {} names recorded: another one is not",
            held.len()
        ));
        return Ok(false);
    }
    t.insert(key(ino, e.parent, &e.name).as_slice(), e.gen)?;
    Ok(true)
}

/// Forgets `name` in `parent` as a further name of `ino` in `t`.
pub(super) fn forget_in(
    t: &mut Table<'_, &'static [u8], u64>,
    ino: u64,
    parent: u64,
    name: &[u8],
) -> redb::Result<()> {
    t.remove(key(ino, parent, name).as_slice())?;
    Ok(())
}

/// Forgets every further name of `ino` (its last link is gone), in the
/// write transaction of the main table's change.
pub(super) fn forget_all(t: &mut Table<'_, &'static [u8], u64>, ino: u64) -> redb::Result<()> {
    let (lo, hi) = bytes_of(ino);
    t.retain_in::<&[u8], _>(span(&lo, &hi), |_, _| false)
}
