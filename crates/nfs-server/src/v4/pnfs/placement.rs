//! Which data server holds each file's data (RFC 8435 §2: the metadata
//! server chooses; the choice is its own).
//!
//! Policy: a file is placed when its data file is first needed (the
//! first LAYOUTGET, or the first WRITE through the metadata server), on
//! the data server holding the fewest files placed so far (ties to the
//! lowest index), and stays there until it is removed. So files spread
//! evenly in number whatever their inode numbers, and a data server
//! added to the list takes new files until it has caught up.
//!
//! The choices are recorded, so that a restart finds every file where it
//! was placed: in memory, and with a state directory in the file
//! `pnfs-placement` there, an append-only log of 20-byte records (file
//! system id and file id as big-endian u64, data server index as u32,
//! `u32::MAX` for a removal), each written and synced before the
//! placement is used. A torn last record (a crash while appending) is
//! ignored. Opening rewrites the log when removals make up more than
//! half of it. Memory: one map entry per placed file (about 40 bytes).

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// The log's name in the state directory.
pub(crate) const LOG: &str = "pnfs-placement";

/// Bytes in one record.
const RECORD: usize = 20;

/// Records beyond twice the live ones that do not yet make opening
/// rewrite the log.
const COMPACT_SLACK: usize = 1024;

/// The data server index recording a removal.
const REMOVED: u32 = u32::MAX;

/// The placement of every file with a data file.
#[derive(Debug)]
pub(crate) struct Placement {
    map: HashMap<(u64, u64), u32>,
    /// Files per data server.
    counts: Vec<u64>,
    log: Option<File>,
}

impl Placement {
    /// An empty placement over `n` data servers, kept in memory only.
    pub(crate) fn memory(n: usize) -> Self {
        Self {
            map: HashMap::new(),
            counts: vec![0; n.max(1)],
            log: None,
        }
    }

    /// The placement recorded in `dir` over `n` data servers (created
    /// empty when there is none). Records naming a data server past `n`
    /// (the list shrank) are dropped with a warning: those files' data
    /// is on a server no longer configured.
    pub(crate) fn open(dir: &Path, n: usize) -> io::Result<Self> {
        Self::open_with(dir, n, COMPACT_SLACK)
    }

    fn open_with(dir: &Path, n: usize, slack: usize) -> io::Result<Self> {
        let path = dir.join(LOG);
        let mut p = Self::memory(n);
        let mut records = 0usize;
        let mut dropped = 0usize;
        if let Ok(mut f) = File::open(&path) {
            let mut buf = Vec::new();
            f.read_to_end(&mut buf)?;
            for r in buf.chunks_exact(RECORD) {
                records += 1;
                let (fsid, fileid, ds) = decode(r);
                if ds == REMOVED {
                    p.unset(fsid, fileid);
                } else if (ds as usize) < p.counts.len() {
                    p.set(fsid, fileid, ds);
                } else {
                    dropped += 1;
                }
            }
        }
        if dropped > 0 {
            tracing::warn!(
                files = dropped,
                data_servers = n,
                "pNFS placement names data servers no longer configured; those files read as holes"
            );
        }
        if records > 2 * p.map.len() + slack {
            p.rewrite(&path)?;
        }
        p.log = Some(OpenOptions::new().create(true).append(true).open(&path)?);
        Ok(p)
    }

    /// Where the file `fileid` of `fsid` is, if it was placed.
    pub(crate) fn get(&self, fsid: u64, fileid: u64) -> Option<usize> {
        self.map.get(&(fsid, fileid)).map(|&d| d as usize)
    }

    /// Where the file is, placing it first on the data server with the
    /// fewest files (recorded and synced before it is returned).
    pub(crate) fn place(&mut self, fsid: u64, fileid: u64) -> io::Result<usize> {
        if let Some(d) = self.get(fsid, fileid) {
            return Ok(d);
        }
        let ds = self
            .counts
            .iter()
            .enumerate()
            .min_by_key(|&(i, c)| (*c, i))
            .map_or(0, |(i, _)| i) as u32;
        self.append(fsid, fileid, ds)?;
        self.set(fsid, fileid, ds);
        Ok(ds as usize)
    }

    /// The file was removed: its placement goes.
    pub(crate) fn remove(&mut self, fsid: u64, fileid: u64) -> io::Result<()> {
        if self.get(fsid, fileid).is_none() {
            return Ok(());
        }
        self.unset(fsid, fileid);
        self.append(fsid, fileid, REMOVED)
    }

    /// Files placed on each data server.
    pub(crate) fn counts(&self) -> &[u64] {
        &self.counts
    }

    fn set(&mut self, fsid: u64, fileid: u64, ds: u32) {
        if let Some(old) = self.map.insert((fsid, fileid), ds) {
            self.counts[old as usize] -= 1;
        }
        self.counts[ds as usize] += 1;
    }

    fn unset(&mut self, fsid: u64, fileid: u64) {
        if let Some(old) = self.map.remove(&(fsid, fileid)) {
            self.counts[old as usize] -= 1;
        }
    }

    fn append(&mut self, fsid: u64, fileid: u64, ds: u32) -> io::Result<()> {
        let Some(f) = self.log.as_mut() else {
            return Ok(());
        };
        f.write_all(&encode(fsid, fileid, ds))?;
        f.sync_data()
    }

    /// Replaces the log at `path` by the live records only (a new file
    /// synced, renamed over the old one, the directory synced).
    fn rewrite(&self, path: &Path) -> io::Result<()> {
        let tmp: PathBuf = path.with_extension("new");
        let mut buf = Vec::with_capacity(self.map.len() * RECORD);
        for (&(fsid, fileid), &ds) in &self.map {
            buf.extend_from_slice(&encode(fsid, fileid, ds));
        }
        let mut f = File::create(&tmp)?;
        f.write_all(&buf)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

fn encode(fsid: u64, fileid: u64, ds: u32) -> [u8; RECORD] {
    let mut r = [0u8; RECORD];
    r[..8].copy_from_slice(&fsid.to_be_bytes());
    r[8..16].copy_from_slice(&fileid.to_be_bytes());
    r[16..].copy_from_slice(&ds.to_be_bytes());
    r
}

fn decode(r: &[u8]) -> (u64, u64, u32) {
    let mut a = [0u8; 8];
    let mut b = [0u8; 8];
    let mut c = [0u8; 4];
    a.copy_from_slice(&r[..8]);
    b.copy_from_slice(&r[8..16]);
    c.copy_from_slice(&r[16..RECORD]);
    (
        u64::from_be_bytes(a),
        u64::from_be_bytes(b),
        u32::from_be_bytes(c),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pnfs-place-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn files_spread_evenly_whatever_their_inode_numbers() {
        // Inode numbers that share a residue modulo the number of data
        // servers (a placement on fileid mod N would put them all on one).
        let mut p = Placement::memory(4);
        for k in 0..400u64 {
            p.place(7, 1000 + 4 * k * 4099).unwrap();
        }
        assert_eq!(p.counts(), [100, 100, 100, 100]);
        // Placing again finds the same server.
        let first = p.get(7, 1000).unwrap();
        assert_eq!(p.place(7, 1000).unwrap(), first);
        assert_eq!(p.counts(), [100, 100, 100, 100]);
        // A removal frees a place, which the next new file takes.
        p.remove(7, 1000).unwrap();
        assert_eq!(p.get(7, 1000), None);
        assert_eq!(p.place(9, 1).unwrap(), first);
    }

    #[test]
    fn placements_survive_a_restart_and_a_torn_record_is_ignored() {
        let d = tmpdir("restart");
        let mut p = Placement::open(&d, 3).unwrap();
        let placed: Vec<usize> = (0..30).map(|k| p.place(1, 64 * k).unwrap()).collect();
        p.remove(1, 0).unwrap();
        drop(p);
        // A crash in the middle of an append.
        let mut f = OpenOptions::new().append(true).open(d.join(LOG)).unwrap();
        f.write_all(&[1, 2, 3]).unwrap();
        drop(f);
        let p = Placement::open(&d, 3).unwrap();
        assert_eq!(p.get(1, 0), None);
        for k in 1..30u64 {
            assert_eq!(p.get(1, 64 * k), Some(placed[k as usize]));
        }
        assert_eq!(p.counts().iter().sum::<u64>(), 29);
        // With fewer data servers, files on the missing ones are dropped.
        let p = Placement::open(&d, 2).unwrap();
        assert_eq!(p.counts(), [9, 10]);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn the_log_is_compacted_when_removals_dominate() {
        let d = tmpdir("compact");
        let mut p = Placement::open(&d, 2).unwrap();
        for k in 0..30u64 {
            p.place(1, k).unwrap();
            if k >= 10 {
                p.remove(1, k).unwrap();
            }
        }
        drop(p);
        let before = fs::metadata(d.join(LOG)).unwrap().len();
        assert_eq!(before, (30 + 20) * RECORD as u64);
        // Not yet past the slack: left alone.
        drop(Placement::open_with(&d, 2, 40).unwrap());
        assert_eq!(fs::metadata(d.join(LOG)).unwrap().len(), before);
        let p = Placement::open_with(&d, 2, 8).unwrap();
        assert_eq!(p.counts(), [5, 5]);
        assert_eq!(fs::metadata(d.join(LOG)).unwrap().len(), 10 * RECORD as u64);
        let _ = fs::remove_dir_all(&d);
    }
}
