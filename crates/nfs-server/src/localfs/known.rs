//! What the handle index is known to record, in memory: a fixed table of
//! [`SLOTS`] slots, each a keyed hash of an inode number and the entry
//! (parent inode, generation, name) the index holds for it, so a
//! READDIRPLUS entry or LOOKUP that finds its file where the index
//! already says is not looked up in the store (a B-tree read) again.
//!
//! The table is direct-mapped: an inode has one slot (by its number's
//! low bits, so a directory's files sit together), a newer inode taking
//! the slot replaces the older one, so its memory is fixed
//! ([`SLOTS`] × 8 bytes, 16 MiB per export, enough to keep most of a
//! 1,000,000-entry directory) whatever clients do, and a miss only costs
//! the store lookup it saves on a hit. The index keeps the table exact:
//! every change of an entry updates or clears its slot under the index's
//! lock, and an entry confirmed from the store is only marked if no
//! change happened since the lookup (see [`super::index`]).
//!
//! The hash is [`foldhash`]'s quality variant under a per-table random
//! seed (it was SipHash-1-3, std's `RandomState`, about 12% of the
//! instructions of a listing; docs/listing.md, "The store filter").
//! HashDoS does not apply: the table does not chain, a slot is chosen
//! by inode number, which the file system allocates (a client creating
//! files picks names, not numbers), and the hash is only compared for
//! equality. What a collision could do is make an entry renamed behind
//! the server's back look recorded under its old name, so its handle
//! would go STALE; a client picking names would need two names of one
//! inode whose 64-bit hashes match under a seed it never sees (no hash
//! leaves the server, and a table has no iteration order to observe),
//! and the file would be one it could rename, so its own.

use std::hash::BuildHasher;

use foldhash::quality::RandomState;

/// Slots in the table.
pub(crate) const SLOTS: usize = 1 << 21;

/// The table.
#[derive(Debug)]
pub(crate) struct Known {
    /// Keyed hash of (inode, entry); 0: empty.
    slots: Vec<u64>,
    key: RandomState,
}

impl Known {
    pub(crate) fn new() -> Self {
        Self {
            slots: vec![0; SLOTS],
            key: RandomState::default(),
        }
    }

    /// The keyed hash of inode `ino` recorded as `name` in `parent`,
    /// generation `gen` (never 0).
    pub(crate) fn hash(&self, ino: u64, parent: u64, gen: u64, name: &[u8]) -> u64 {
        self.key.hash_one((ino, parent, gen, name)).max(1)
    }

    /// The slot of `ino`: its low bits, the higher ones folded in. File
    /// systems hand out neighbouring inode numbers to files created
    /// together (ext4 within a block group, xfs within an inode chunk,
    /// btrfs in sequence), so the files of one directory take
    /// neighbouring slots and a listing walks a few hundred KiB of the
    /// table, eight slots a cache line, instead of missing the cache on
    /// every entry as a scattering hash did (a listing of 50,000 entries
    /// spent 6% of the server's cycles on that miss). Which inodes share
    /// a slot only decides what a miss costs (a store lookup), never
    /// what the table says: the slot holds the keyed hash.
    fn at(ino: u64) -> usize {
        fold(ino, SLOTS.trailing_zeros())
    }

    /// Whether the index is known to record `ino` as the entry of `hash`.
    pub(crate) fn is(&self, ino: u64, hash: u64) -> bool {
        self.slots.get(Self::at(ino)) == Some(&hash)
    }

    /// The index records `ino` as the entry of `hash`.
    pub(crate) fn set(&mut self, ino: u64, hash: u64) {
        if let Some(s) = self.slots.get_mut(Self::at(ino)) {
            *s = hash;
        }
    }

    /// The index no longer records `ino` as the table says.
    pub(crate) fn clear(&mut self, ino: u64) {
        if let Some(s) = self.slots.get_mut(Self::at(ino)) {
            *s = 0;
        }
    }

    /// Forgets everything (the store lost a batch).
    pub(crate) fn clear_all(&mut self) {
        self.slots.fill(0);
    }
}

/// `ino`'s low `bits` bits with its higher bits folded in: neighbouring
/// inode numbers land on neighbouring positions, and numbers below
/// 2^`bits` on distinct ones (the slots of [`Known`] and the bits of the
/// index's filter).
pub(crate) fn fold(ino: u64, bits: u32) -> usize {
    let folded = ino
        .wrapping_add(ino >> bits)
        .wrapping_add(ino >> (2 * bits));
    (folded & ((1 << bits) - 1)) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directorys_inodes_sit_together_and_a_shared_slot_replaces() {
        // Consecutive inode numbers: consecutive slots (one cache line
        // holds eight), wherever the run starts.
        for base in [1u64, 4_000_000, 1 << 40] {
            let first = Known::at(base);
            for i in 0..64 {
                assert_eq!(Known::at(base + i), (first + i as usize) % SLOTS);
            }
        }
        let mut k = Known::new();
        let h = k.hash(12, 2, 7, b"f-1");
        assert!(!k.is(12, h));
        k.set(12, h);
        assert!(k.is(12, h));
        assert!(!k.is(12, k.hash(12, 2, 7, b"f-2")), "another name");
        assert!(!k.is(12, k.hash(12, 3, 7, b"f-1")), "another parent");
        // An inode sharing the slot replaces the entry: a miss, not a
        // wrong answer.
        let other = (0..64)
            .map(|i| SLOTS as u64 * 3 + i)
            .find(|&o| Known::at(o) == Known::at(12))
            .expect("an inode sharing the slot");
        k.set(other, k.hash(other, 2, 7, b"g"));
        assert!(!k.is(12, h));
        k.set(12, h);
        k.clear(12);
        assert!(!k.is(12, h));
    }
}
