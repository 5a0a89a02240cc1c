//! File handles of the local-directory back end: unforgeable, and stale
//! when their file is gone.
//!
//! A handle is 44 bytes (RFC 1813 §2.4 allows 64 for NFSv3, RFC 8881
//! §4.2.1 128 for NFSv4): a version byte, three zero bytes, the export id,
//! the inode number, the generation (all big-endian) and a 16-byte tag,
//! the first 16 bytes of the BLAKE3 keyed hash of the 28 bytes before it
//! under the server's 32-byte handle key (kept in the state directory,
//! see [`crate::statedir`]).
//!
//! - A handle of the wrong length or version, or whose tag does not
//!   check, is NFS3ERR_BADHANDLE (NFS4ERR_BADHANDLE): a client cannot
//!   make a handle for an inode it was never given, nor alter one.
//! - A handle with a good tag minted for another export is NFS3ERR_STALE,
//!   as Linux does for an unknown export.
//! - The second byte is the handle's kind: 0 for a file of an export,
//!   [`KIND_PSEUDO`] for a directory of the NFSv4 pseudo file system
//!   (`crate::v4::pseudofs`), whose export id is [`PSEUDO_EXPORT`] and
//!   whose inode number is the node's file id. Both are tagged alike, so a
//!   pseudo handle is as unforgeable, and as lasting across restarts with
//!   the same state directory, as a file's.
//! - The generation tells apart two files that had the same inode number
//!   one after the other. Without `unsafe` the server cannot call
//!   `ioctl(FS_IOC_GETVERSION)` or `name_to_handle_at`, so it uses the
//!   file's birth time (`statx` `stx_btime`, seconds and nanoseconds
//!   folded into 64 bits) where the file system reports one (ext4, xfs,
//!   btrfs, tmpfs), else 0: on a file system without birth times a
//!   reused inode number is not detected by the handle (the index check
//!   of [`crate::localfs`] still requires the recorded name to hold it).

use nfs::v3::{NfsFh3, Nfsstat3};

use crate::statedir::KEY_LEN;

/// Handle format version.
const VERSION: u8 = 2;
/// Bytes covered by the tag.
const BODY_LEN: usize = 28;
/// Tag length.
pub(crate) const TAG_LEN: usize = 16;
/// Encoded handle length.
pub(crate) const FH_LEN: usize = BODY_LEN + TAG_LEN;
/// The kind byte of a pseudo file system handle.
pub(crate) const KIND_PSEUDO: u8 = 1;
/// The export id pseudo file system handles carry (no export's: those
/// are hashes of a path and a device).
pub(crate) const PSEUDO_EXPORT: u64 = 0;

/// 64-bit FNV-1a (export ids, READDIR cookies; not for secrets).
pub(crate) fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The key handles are tagged with.
#[derive(Clone)]
pub(crate) struct HandleKey([u8; KEY_LEN]);

impl core::fmt::Debug for HandleKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("HandleKey(..)")
    }
}

impl HandleKey {
    pub(crate) fn new(key: [u8; KEY_LEN]) -> Self {
        Self(key)
    }

    fn tag(&self, body: &[u8]) -> [u8; TAG_LEN] {
        let h = blake3::keyed_hash(&self.0, body);
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(&h.as_bytes()[..TAG_LEN]);
        t
    }
}

/// A decoded handle: which export, which inode, which generation of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Handle {
    pub(crate) export_id: u64,
    pub(crate) ino: u64,
    pub(crate) gen: u64,
}

/// Compares without an early exit, so the time taken does not tell how
/// many leading bytes of a guessed tag were right.
fn same_tag(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Handle {
    /// The wire form, tagged under `key`.
    pub(crate) fn to_fh(self, key: &HandleKey) -> NfsFh3 {
        NfsFh3::new(&self.to_bytes(key)).unwrap_or_default()
    }

    /// The wire form's bytes, tagged under `key` (no allocation: a
    /// READDIRPLUS page encodes them straight into the reply).
    pub(crate) fn to_bytes(self, key: &HandleKey) -> [u8; FH_LEN] {
        self.body(0, key)
    }

    /// The wire form of pseudo file system node `fileid`.
    pub(crate) fn pseudo_fh(fileid: u64, key: &HandleKey) -> NfsFh3 {
        let h = Handle {
            export_id: PSEUDO_EXPORT,
            ino: fileid,
            gen: 0,
        };
        NfsFh3::new(&h.body(KIND_PSEUDO, key)).unwrap_or_default()
    }

    /// Whether `fh` is shaped as a pseudo file system handle (its tag is
    /// not checked: [`Self::parse_pseudo`] does).
    pub(crate) fn is_pseudo(fh: &NfsFh3) -> bool {
        let b = fh.as_bytes();
        b.len() == FH_LEN && b[0] == VERSION && b[1] == KIND_PSEUDO
    }

    /// The export id `fh` claims, without checking its tag (to pick which
    /// export checks it).
    pub(crate) fn peek_export(fh: &NfsFh3) -> Option<u64> {
        let b = fh.as_bytes();
        if b.len() != FH_LEN || b[0] != VERSION || b[1] != 0 {
            return None;
        }
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[4..12]);
        Some(u64::from_be_bytes(w))
    }

    /// The file id of pseudo file system handle `fh`: BADHANDLE when it is
    /// malformed or not tagged under `key`.
    pub(crate) fn parse_pseudo(fh: &NfsFh3, key: &HandleKey) -> Result<u64, Nfsstat3> {
        Self::parse_kind(fh, key, KIND_PSEUDO, PSEUDO_EXPORT).map(|h| h.ino)
    }

    /// The wire form's bytes with `tag`, the tag [`Self::to_bytes`]
    /// gave this same handle under the same key earlier (kept beside the
    /// file's attributes, so a listing does not hash it again).
    pub(crate) fn with_tag(self, tag: &[u8; TAG_LEN]) -> [u8; FH_LEN] {
        let mut b = self.untagged(0);
        b[BODY_LEN..].copy_from_slice(tag);
        b
    }

    /// The tag of the wire form `fh`.
    pub(crate) fn tag_of(fh: &[u8; FH_LEN]) -> [u8; TAG_LEN] {
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(&fh[BODY_LEN..]);
        t
    }

    fn untagged(self, kind: u8) -> [u8; FH_LEN] {
        let mut b = [0u8; FH_LEN];
        b[0] = VERSION;
        b[1] = kind;
        b[4..12].copy_from_slice(&self.export_id.to_be_bytes());
        b[12..20].copy_from_slice(&self.ino.to_be_bytes());
        b[20..28].copy_from_slice(&self.gen.to_be_bytes());
        b
    }

    fn body(self, kind: u8, key: &HandleKey) -> [u8; FH_LEN] {
        let mut b = self.untagged(kind);
        let tag = key.tag(&b[..BODY_LEN]);
        b[BODY_LEN..].copy_from_slice(&tag);
        b
    }

    /// Parses `fh` for export `export_id`: BADHANDLE when malformed or
    /// not tagged under `key`, STALE when it belongs to another export.
    pub(crate) fn parse(fh: &NfsFh3, key: &HandleKey, export_id: u64) -> Result<Self, Nfsstat3> {
        Self::parse_kind(fh, key, 0, export_id)
    }

    fn parse_kind(
        fh: &NfsFh3,
        key: &HandleKey,
        kind: u8,
        export_id: u64,
    ) -> Result<Self, Nfsstat3> {
        let b: &[u8; FH_LEN] = fh
            .as_bytes()
            .try_into()
            .map_err(|_| Nfsstat3::NFS3ERR_BADHANDLE)?;
        if b[0] != VERSION || b[1] != kind || b[2..4] != [0, 0] {
            return Err(Nfsstat3::NFS3ERR_BADHANDLE);
        }
        if !same_tag(&key.tag(&b[..BODY_LEN]), &b[BODY_LEN..]) {
            return Err(Nfsstat3::NFS3ERR_BADHANDLE);
        }
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            u64::from_be_bytes(w)
        };
        let h = Handle {
            export_id: word(4),
            ino: word(12),
            gen: word(20),
        };
        if h.export_id != export_id {
            return Err(Nfsstat3::NFS3ERR_STALE);
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> HandleKey {
        HandleKey::new([b; KEY_LEN])
    }

    #[test]
    fn handle_round_trips() {
        let h = Handle {
            export_id: 0x0102_0304_0506_0708,
            ino: 99,
            gen: 7,
        };
        let fh = h.to_fh(&key(1));
        assert_eq!(fh.as_bytes().len(), FH_LEN);
        const { assert!(FH_LEN <= 64) };
        assert_eq!(Handle::parse(&fh, &key(1), h.export_id), Ok(h));
    }

    #[test]
    fn every_flipped_bit_and_another_key_is_badhandle() {
        let h = Handle {
            export_id: 1,
            ino: 2,
            gen: 3,
        };
        let fh = h.to_fh(&key(1));
        for bit in 0..FH_LEN * 8 {
            let mut b = fh.as_bytes().to_vec();
            b[bit / 8] ^= 1 << (bit % 8);
            let bad = NfsFh3::new(&b).unwrap();
            assert_eq!(
                Handle::parse(&bad, &key(1), 1),
                Err(Nfsstat3::NFS3ERR_BADHANDLE),
                "bit {bit}"
            );
        }
        assert_eq!(
            Handle::parse(&fh, &key(2), 1),
            Err(Nfsstat3::NFS3ERR_BADHANDLE)
        );
        let short = NfsFh3::new(&fh.as_bytes()[..20]).unwrap();
        assert_eq!(
            Handle::parse(&short, &key(1), 1),
            Err(Nfsstat3::NFS3ERR_BADHANDLE)
        );
    }

    #[test]
    fn pseudo_handles_are_their_own_kind() {
        let fh = Handle::pseudo_fh(77, &key(1));
        assert!(Handle::is_pseudo(&fh));
        assert_eq!(Handle::parse_pseudo(&fh, &key(1)), Ok(77));
        assert_eq!(Handle::peek_export(&fh), None);
        // Not a file handle of any export, and not under another key.
        assert_eq!(
            Handle::parse(&fh, &key(1), PSEUDO_EXPORT),
            Err(Nfsstat3::NFS3ERR_BADHANDLE)
        );
        assert_eq!(
            Handle::parse_pseudo(&fh, &key(2)),
            Err(Nfsstat3::NFS3ERR_BADHANDLE)
        );
        // A file handle is not a pseudo one.
        let file = Handle {
            export_id: 9,
            ino: 77,
            gen: 0,
        }
        .to_fh(&key(1));
        assert!(!Handle::is_pseudo(&file));
        assert_eq!(Handle::peek_export(&file), Some(9));
        assert_eq!(
            Handle::parse_pseudo(&file, &key(1)),
            Err(Nfsstat3::NFS3ERR_BADHANDLE)
        );
    }

    #[test]
    fn other_export_is_stale() {
        let fh = Handle {
            export_id: 1,
            ino: 2,
            gen: 0,
        }
        .to_fh(&key(1));
        assert_eq!(Handle::parse(&fh, &key(1), 3), Err(Nfsstat3::NFS3ERR_STALE));
    }
}
