//! Stable storage for NFSv4 client records and the boot epoch, in the
//! server's state directory (RFC 8881 §8.4.2.1: the server must
//! remember which clients held state across its restart to tell a
//! legitimate reclaim from a conflicting one; Linux keeps the same in
//! nfsdcld's database).
//!
//! - `v4-clients/` (mode 0700): one file per client, named by the BLAKE3
//!   hash of its owner key, holding a magic, the principal and the key.
//!   A write goes to a temporary file that is `fsync`ed and renamed, then
//!   the directory is `fsync`ed: a record is on disk before the reply
//!   that needs it. A removal is an `unlink` and a directory `fsync`.
//! - `boot-epoch`: the last instance's boot number; each start takes one
//!   above both it and the time in seconds, so client ids and session ids
//!   of one instance are never those of another, even when it restarts
//!   within the second (RFC 8881 §2.4: a client id from an earlier
//!   instance must be stale).
//!
//! The grace period's decisions are [`super::grace::Grace`]'s; this
//! module only reads and writes.

use std::fs::{self, DirBuilder, File};
use std::io::{self, Read};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use oncrpc::limits::Limit;

use super::grace::RecordOp;
use crate::statedir::{read_counter, remove_durably, write_durably};

static LOADED: Limit = Limit::new("nfs4.client_records_loaded");

const DIR: &str = "v4-clients";
const EPOCH: &str = "boot-epoch";
const MAGIC: &[u8; 8] = b"nfs4rec1";
/// Longest owner key: an `opaque<NFS4_OPAQUE_LIMIT>` and a prefix.
const MAX_KEY: usize = 1024 + 16;

/// The client record directory of a state directory.
#[derive(Debug)]
pub(crate) struct RecordStore {
    dir: PathBuf,
}

impl RecordStore {
    /// Opens (creating) the records under `state`; returns the store and
    /// the records found, at most `max` (the rest are left on disk and
    /// counted by the `nfs4.client_records_loaded` limit).
    pub(crate) fn open(state: &Path, max: usize) -> io::Result<(Self, Vec<(Bytes, u32)>)> {
        let dir = state.join(DIR);
        DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
        File::open(state)?.sync_all()?;
        let mut found = Vec::new();
        for ent in fs::read_dir(&dir)? {
            let ent = ent?;
            let name = ent.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".tmp") {
                let _ = fs::remove_file(ent.path());
                continue;
            }
            match read_record(&ent.path()) {
                Ok(r) if found.len() < max => found.push(r),
                Ok(_) => {
                    LOADED.trip(format_args!(
                        "NFSv4 client record {name} not loaded: {max} records"
                    ));
                }
                Err(e) => tracing::warn!(record = %name, error = %e, "bad NFSv4 client record"),
            }
        }
        Ok((Self { dir }, found))
    }

    fn path(&self, key: &[u8]) -> PathBuf {
        let h = blake3::hash(key);
        let hex: String = h.as_bytes()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        self.dir.join(hex)
    }

    /// Writes the record of `key` durably.
    pub(crate) fn put(&self, key: &[u8], principal: u32) -> io::Result<()> {
        let mut buf = Vec::with_capacity(16 + key.len());
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&principal.to_be_bytes());
        buf.extend_from_slice(&(key.len() as u32).to_be_bytes());
        buf.extend_from_slice(key);
        write_durably(&self.dir, &self.path(key), &buf)
    }

    /// Removes the record of `key` durably (none is fine).
    pub(crate) fn remove(&self, key: &[u8]) -> io::Result<()> {
        remove_durably(&self.dir, &self.path(key))
    }

    /// Carries out `ops`; the keys whose Put failed (they are not
    /// recorded: the client works but cannot reclaim after a restart).
    pub(crate) fn apply(&self, ops: Vec<RecordOp>) -> Vec<Bytes> {
        let mut failed = Vec::new();
        for op in ops {
            let (r, key) = match op {
                RecordOp::Put(k, p) => (self.put(&k, p), Some(k)),
                RecordOp::Remove(k) => (self.remove(&k), None),
            };
            if let Err(e) = r {
                tracing::warn!(error = %e, dir = %self.dir.display(), "NFSv4 client record not written");
                failed.extend(key);
            }
        }
        failed
    }
}

fn read_record(p: &Path) -> io::Result<(Bytes, u32)> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    let f = File::open(p)?;
    if f.metadata()?.len() > (16 + MAX_KEY) as u64 {
        return Err(bad("too long"));
    }
    let mut buf = Vec::new();
    f.take((16 + MAX_KEY) as u64).read_to_end(&mut buf)?;
    if buf.len() < 16 || &buf[..8] != MAGIC {
        return Err(bad("not a client record"));
    }
    let principal = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]);
    let len = u32::from_be_bytes([buf[12], buf[13], buf[14], buf[15]]) as usize;
    if buf.len() != 16 + len {
        return Err(bad("wrong length"));
    }
    Ok((Bytes::copy_from_slice(&buf[16..]), principal))
}

/// The boot number of a starting instance: one above the last one
/// recorded in `state` and above the time in seconds, written durably.
pub(crate) fn next_boot(state: &Path) -> io::Result<u32> {
    let p = state.join(EPOCH);
    let last: u32 = read_counter(&p)?;
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0);
    let boot = last.wrapping_add(1).max(secs).max(1);
    write_durably(state, &p, format!("{boot}\n").as_bytes())?;
    Ok(boot)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("records-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        p
    }

    #[test]
    fn records_round_trip_and_go() {
        let d = tmp("rt");
        let (s, found) = RecordStore::open(&d, 10).unwrap();
        assert!(found.is_empty());
        let long = vec![7u8; 1024];
        s.put(b"nfs4.0:a", 3).unwrap();
        s.put(&long, 0).unwrap();
        s.put(b"b", 1).unwrap();
        s.remove(b"b").unwrap();
        s.remove(b"never").unwrap();
        fs::write(d.join(DIR).join("junk"), b"xx").unwrap();
        fs::write(d.join(DIR).join("x.tmp"), b"xx").unwrap();
        let (_, mut found) = RecordStore::open(&d, 10).unwrap();
        found.sort();
        let mut want = vec![(Bytes::from_static(b"nfs4.0:a"), 3), (Bytes::from(long), 0)];
        want.sort();
        assert_eq!(found, want);
        assert!(!d.join(DIR).join("x.tmp").exists());
        let (_, few) = RecordStore::open(&d, 1).unwrap();
        assert_eq!(few.len(), 1);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn boot_numbers_always_grow() {
        let d = tmp("boot");
        let a = next_boot(&d).unwrap();
        let b = next_boot(&d).unwrap();
        assert!(b > a);
        fs::write(d.join(EPOCH), format!("{}\n", u32::MAX - 1)).unwrap();
        assert_eq!(next_boot(&d).unwrap(), u32::MAX);
        let _ = fs::remove_dir_all(&d);
    }
}
