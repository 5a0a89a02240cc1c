//! What the handle index is known to record, in memory: a fixed table of
//! [`SLOTS`] slots, each a keyed hash of an inode number and the entry
//! (parent inode, generation, name) the index holds for it, so a
//! READDIRPLUS entry or LOOKUP that finds its file where the index
//! already says is not looked up in the store (a B-tree read) again.
//!
//! The table is direct-mapped: an inode has one slot, a newer inode
//! taking the slot replaces the older one, so its memory is fixed
//! ([`SLOTS`] × 8 bytes, 16 MiB per export, enough to keep most of a
//! 1,000,000-entry directory) whatever clients do, and a miss only costs
//! the store lookup it saves on a hit. The hash is SipHash under a random
//! key (std's `RandomState`), so a client cannot pick names whose hashes
//! collide to make the server skip recording a renamed file. The index
//! keeps the table exact: every change of an entry updates or clears its
//! slot under the index's lock, and an entry confirmed from the store is
//! only marked if no change happened since the lookup (see
//! [`super::index`]).

use std::hash::{BuildHasher, RandomState};

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
            key: RandomState::new(),
        }
    }

    /// The keyed hash of inode `ino` recorded as `name` in `parent`,
    /// generation `gen` (never 0).
    pub(crate) fn hash(&self, ino: u64, parent: u64, gen: u64, name: &[u8]) -> u64 {
        self.key.hash_one((ino, parent, gen, name)).max(1)
    }

    fn at(ino: u64) -> usize {
        // Fibonacci hashing: neighbouring inode numbers spread out.
        (ino.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOTS.trailing_zeros())) as usize
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
