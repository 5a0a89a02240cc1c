//! Which inodes the store may hold: one bit per slot of [`BITS`], set
//! for every inode the store held when the index was opened and for
//! every inode recorded since, never cleared until the next open.
//!
//! A clear bit means the store does not hold the inode (and no change
//! waiting for it records it), so a READDIRPLUS entry or LOOKUP of a
//! file the index has never seen is queued without the B-tree lookup
//! that would only say so: the first listing of a directory of new
//! entries made that lookup for every entry, against a store that grows
//! with the listing (docs/listing.md, "The store filter"). A set bit
//! only means "look": the store may hold it, or another inode sharing
//! the bit, or an inode since removed.
//!
//! It is a Bloom filter with one probe whose position is the inode
//! number's low bits with the higher ones folded in (as [`Known`]'s
//! slots, [`crate::localfs::known::fold`]): inode numbers are the file
//! system's, not the client's (a client creating files picks names, not
//! numbers), and neighbouring files have neighbouring numbers, so a
//! listing walks a few KiB of the filter instead of missing the cache
//! on every entry, and on a file system with fewer than 2^[`BITS`] inode
//! numbers (ext4's are below its inode count) no two inodes share a bit.
//! Fixed memory: 2^[`BITS`] bits, 4 MiB per export, whatever the store
//! holds; a store far bigger than that only makes more bits set, so
//! more lookups, never a wrong answer.
//!
//! Exactness (never "absent" for a held inode) rests on two rules the
//! index keeps: the filter is built from the store after the log's
//! replay, before any lookup; and every entry reaches the store through
//! the index's pending changes, whose [`super::State::change`] sets the
//! bit under the index's lock before the change can be written.
//!
//! [`Known`]: crate::localfs::known::Known

/// log2 of the bits in the filter.
pub(crate) const BITS: u32 = 25;

/// The filter.
#[derive(Debug)]
pub(crate) struct Filter {
    words: Vec<u64>,
}

impl Filter {
    /// An empty filter: no inode held.
    pub(crate) fn new() -> Self {
        Self {
            words: vec![0; 1 << (BITS - 6)],
        }
    }

    /// The bit of `ino`: its low [`BITS`] bits, the higher ones folded in.
    fn at(ino: u64) -> (usize, u64) {
        let bit = crate::localfs::known::fold(ino, BITS);
        (bit >> 6, 1 << (bit & 63))
    }

    /// The store may hold `ino` from now on.
    pub(crate) fn add(&mut self, ino: u64) {
        let (w, b) = Self::at(ino);
        if let Some(w) = self.words.get_mut(w) {
            *w |= b;
        }
    }

    /// Whether the store may hold `ino`; `false` is exact.
    pub(crate) fn may_hold(&self, ino: u64) -> bool {
        let (w, b) = Self::at(ino);
        self.words.get(w).is_none_or(|w| w & b != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_added_inode_is_never_absent_and_a_shared_bit_only_says_look() {
        let mut f = Filter::new();
        let span = 1u64 << BITS;
        // Neighbours, numbers sharing a bit (one span apart, and the
        // folded high bits), and the extremes.
        let mut added = Vec::new();
        for base in [
            0u64,
            1,
            12_345,
            span - 1,
            span * 7 + 3,
            1 << 40,
            u64::MAX - 100,
        ] {
            for i in 0..100 {
                added.push(base.wrapping_add(i));
            }
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            added.push(x);
        }
        for &i in &added {
            f.add(i);
        }
        for &i in &added {
            assert!(f.may_hold(i), "{i} added, said absent");
        }
        // A bit is shared only by numbers that fold to it: absent
        // neighbours of a lone inode stay absent.
        let mut g = Filter::new();
        g.add(5_000);
        assert!(!g.may_hold(4_999) && !g.may_hold(5_001));
        assert!(g.may_hold(5_000 + span - 1), "folds onto 5,000's bit: look");
    }
}
