//! What the handle index is known to record, in memory: a fixed table of
//! [`SLOTS`] slots, each an inode number and a keyed hash of the entry
//! (parent inode, generation, name) the index holds for it, so a
//! READDIRPLUS entry or LOOKUP that finds its file where the index
//! already says is not looked up in the store (a B-tree read) again.
//!
//! The table is direct-mapped: an inode has one slot, a newer inode
//! taking the slot replaces the older one, so its memory is fixed
//! ([`SLOTS`] × 16 bytes, 4 MiB per export) whatever clients do, and a
//! miss only costs the store lookup it saves on a hit. The hash is
//! SipHash under a random key (std's `RandomState`), so a client cannot
//! pick names whose hashes collide to make the server skip recording a
//! renamed file. The index keeps the table exact: every change of an
//! entry updates or clears its slot under the index's lock, and an entry
//! confirmed from the store is only marked if no change happened since
//! the lookup (see [`super::index`]).

use std::hash::{BuildHasher, RandomState};

/// Slots in the table.
pub(crate) const SLOTS: usize = 1 << 18;

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    ino: u64,
    hash: u64,
}

/// The table.
#[derive(Debug)]
pub(crate) struct Known {
    slots: Vec<Slot>,
    key: RandomState,
}

impl Known {
    pub(crate) fn new() -> Self {
        Self {
            slots: vec![Slot::default(); SLOTS],
            key: RandomState::new(),
        }
    }

    /// The keyed hash of an entry.
    pub(crate) fn hash(&self, parent: u64, gen: u64, name: &[u8]) -> u64 {
        self.key.hash_one((parent, gen, name))
    }

    fn at(ino: u64) -> usize {
        // Fibonacci hashing: neighbouring inode numbers spread out.
        (ino.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOTS.trailing_zeros())) as usize
    }

    /// Whether the index is known to record `ino` as the entry of `hash`.
    pub(crate) fn is(&self, ino: u64, hash: u64) -> bool {
        self.slots
            .get(Self::at(ino))
            .is_some_and(|s| s.ino == ino && s.hash == hash && ino != 0)
    }

    /// The index records `ino` as the entry of `hash`.
    pub(crate) fn set(&mut self, ino: u64, hash: u64) {
        if let Some(s) = self.slots.get_mut(Self::at(ino)) {
            *s = Slot { ino, hash };
        }
    }

    /// The index no longer records `ino` as the table says.
    pub(crate) fn clear(&mut self, ino: u64) {
        if let Some(s) = self.slots.get_mut(Self::at(ino)) {
            if s.ino == ino {
                *s = Slot::default();
            }
        }
    }

    /// Forgets everything (the store lost a batch).
    pub(crate) fn clear_all(&mut self) {
        self.slots.fill(Slot::default());
    }
}
