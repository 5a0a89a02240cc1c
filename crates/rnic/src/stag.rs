//! Steering tags, access rights and protection-domain identifiers.

use std::fmt;

/// A Steering Tag: the identifier of a registered memory region on the wire.
///
/// RFC 5040 §2.1 (STag) and RFC 5041 §2.1: an STag is a 32-bit value. As in the
/// iWARP verbs and Linux `siw`, the upper 24 bits are the *index* of the region
/// in the device's table and the low 8 bits are a *key* chosen by the consumer
/// (here: by the table, fresh at every registration), so that a stale STag held
/// by a peer stops matching as soon as the index is re-registered.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Stag(pub u32);

impl Stag {
    /// The largest index an STag can carry (24 bits).
    pub const MAX_INDEX: u32 = 0x00ff_ffff;

    /// Builds an STag from an index (upper 24 bits) and a key (low 8 bits).
    ///
    /// Index bits above the 24th are discarded.
    pub const fn new(index: u32, key: u8) -> Self {
        Stag(((index & Self::MAX_INDEX) << 8) | key as u32)
    }

    /// The 24-bit index (upper 24 bits).
    pub const fn index(self) -> u32 {
        self.0 >> 8
    }

    /// The 8-bit key (low 8 bits).
    pub const fn key(self) -> u8 {
        (self.0 & 0xff) as u8
    }
}

impl fmt::Debug for Stag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Stag({:#010x})", self.0)
    }
}

impl fmt::Display for Stag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

bitflags::bitflags! {
    /// Access rights of a memory region.
    ///
    /// RFC 5040 §2.1 and §6.4: a remote peer may read or write a tagged buffer
    /// only if the region was registered with the matching remote right. Local
    /// write is required of a region that the local RNIC writes into on its
    /// owner's behalf (the data sink of an RDMA Read).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Access: u8 {
        /// The local device may write into the region (RDMA Read sink).
        const LOCAL_WRITE = 0b001;
        /// A remote peer may read the region (RDMA Read source).
        const REMOTE_READ = 0b010;
        /// A remote peer may write the region (RDMA Write / Read Response target).
        const REMOTE_WRITE = 0b100;
    }
}

/// Identifier of a protection domain within one device.
///
/// RFC 5040 §2.1 (Protection Domain): an STag may only be used on a stream (queue
/// pair) of the same protection domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdId(pub u32);

/// Identifier of a queue pair within one device, carried by its work completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpNum(pub u32);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_index_and_key() {
        let s = Stag(0x1234_56ab);
        assert_eq!(s.index(), 0x12_3456);
        assert_eq!(s.key(), 0xab);
        assert_eq!(Stag::new(0x12_3456, 0xab), s);
    }

    #[test]
    fn new_discards_index_bits_above_24() {
        let s = Stag::new(0xff12_3456, 0x01);
        assert_eq!(s.index(), 0x12_3456);
        assert_eq!(s.0, 0x1234_5601);
    }

    #[test]
    fn access_rights_combine() {
        let a = Access::REMOTE_READ | Access::REMOTE_WRITE;
        assert!(a.contains(Access::REMOTE_WRITE));
        assert!(!a.contains(Access::LOCAL_WRITE));
    }
}
