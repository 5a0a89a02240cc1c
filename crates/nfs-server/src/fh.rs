//! File handles of the local-directory back end.
//!
//! A handle is 24 bytes (RFC 1813 §2.4 allows up to 64): a version byte,
//! three zero bytes, the export id and the inode number, all big-endian.
//!
//! - The export id is a 64-bit FNV-1a hash of the export's canonical path
//!   with its device number, so handles stay valid across a server restart
//!   and a handle minted for another export is recognised and refused with
//!   NFS3ERR_STALE, as Linux does for an unknown export.
//! - A handle of the wrong length or version is NFS3ERR_BADHANDLE.
//! - There is no generation number: a user-space server cannot read
//!   `i_generation` portably, so a handle to a deleted file whose inode
//!   number is reused resolves to the new file.

use nfs::v3::{NfsFh3, Nfsstat3};

/// Handle format version.
const VERSION: u8 = 1;
/// Encoded handle length.
pub(crate) const FH_LEN: usize = 24;

/// 64-bit FNV-1a.
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

/// A decoded handle: which export, which inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Handle {
    pub(crate) export_id: u64,
    pub(crate) ino: u64,
}

impl Handle {
    /// The wire form.
    pub(crate) fn to_fh(self) -> NfsFh3 {
        let mut b = [0u8; FH_LEN];
        b[0] = VERSION;
        b[4..12].copy_from_slice(&self.export_id.to_be_bytes());
        b[12..20].copy_from_slice(&self.ino.to_be_bytes());
        // Bytes 20..24 repeat the low half of the export id as a check
        // that the handle was not truncated or spliced.
        b[20..24].copy_from_slice(&(self.export_id as u32 ^ self.ino as u32).to_be_bytes());
        NfsFh3::new(&b).unwrap_or_default()
    }

    /// Parses `fh` for export `export_id`: BADHANDLE when malformed, STALE
    /// when it belongs to another export.
    pub(crate) fn parse(fh: &NfsFh3, export_id: u64) -> Result<Self, Nfsstat3> {
        let b: &[u8; FH_LEN] = fh
            .as_bytes()
            .try_into()
            .map_err(|_| Nfsstat3::NFS3ERR_BADHANDLE)?;
        let word = |r: core::ops::Range<usize>| -> u64 {
            b.get(r)
                .unwrap_or(&[])
                .iter()
                .fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
        };
        if b[0] != VERSION || b[1..4] != [0, 0, 0] {
            return Err(Nfsstat3::NFS3ERR_BADHANDLE);
        }
        let h = Handle {
            export_id: word(4..12),
            ino: word(12..20),
        };
        if word(20..24) != u64::from(h.export_id as u32 ^ h.ino as u32) {
            return Err(Nfsstat3::NFS3ERR_BADHANDLE);
        }
        if h.export_id != export_id {
            return Err(Nfsstat3::NFS3ERR_STALE);
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_round_trips() {
        let h = Handle {
            export_id: 0x0102_0304_0506_0708,
            ino: 99,
        };
        let fh = h.to_fh();
        assert_eq!(fh.as_bytes().len(), FH_LEN);
        assert_eq!(Handle::parse(&fh, h.export_id), Ok(h));
    }

    #[test]
    fn other_export_is_stale_and_malformed_is_badhandle() {
        let fh = Handle {
            export_id: 1,
            ino: 2,
        }
        .to_fh();
        assert_eq!(Handle::parse(&fh, 3), Err(Nfsstat3::NFS3ERR_STALE));
        let short = NfsFh3::new(&fh.as_bytes()[..20]).unwrap();
        assert_eq!(Handle::parse(&short, 1), Err(Nfsstat3::NFS3ERR_BADHANDLE));
        let mut bad = fh.as_bytes().to_vec();
        bad[0] = 9;
        let bad = NfsFh3::new(&bad).unwrap();
        assert_eq!(Handle::parse(&bad, 1), Err(Nfsstat3::NFS3ERR_BADHANDLE));
        let mut spliced = fh.as_bytes().to_vec();
        spliced[19] ^= 1;
        let spliced = NfsFh3::new(&spliced).unwrap();
        assert_eq!(Handle::parse(&spliced, 1), Err(Nfsstat3::NFS3ERR_BADHANDLE));
    }
}
