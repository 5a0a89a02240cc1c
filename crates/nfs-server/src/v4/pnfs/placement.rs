//! Which data servers hold each file's data (RFC 8435 §2: the metadata
//! server chooses; the choice is its own), and which of a mirrored
//! file's copies are stale (RFC 8435 §8.3).
//!
//! Policy: a file is placed when its data file is first needed (the
//! first LAYOUTGET, or the first WRITE through the metadata server), on
//! the data servers holding the fewest files placed so far (ties to the
//! lowest index): one, or with mirroring one per mirror, each on a
//! different data server. It stays there until it is removed. So files
//! spread evenly in number whatever their inode numbers, and a data
//! server added to the list takes new files until it has caught up.
//!
//! The choices are recorded, so that a restart finds every file where it
//! was placed: in memory, and with a state directory in the file
//! `pnfs-placement` there, an append-only log of 20-byte records (file
//! system id and file id as big-endian u64, then a big-endian u32 whose
//! top byte is the kind and low 24 bits the data server index: kind 0 a
//! copy placed there, 1 that copy went stale, 2 it was rebuilt; `u32::MAX`
//! the file's removal), each written and synced before the placement is
//! used. Logs written before mirroring hold kind 0 records only and read
//! the same. A torn last record (a crash while appending) is ignored.
//! Opening rewrites the log when removals make up more than half of it.
//! Memory: one map entry per placed file (about 60 bytes) and one set
//! entry per stale copy.

use std::collections::{BTreeSet, HashMap};
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

/// The record of a removal.
const REMOVED: u32 = u32::MAX;

/// Record kinds (the top byte of the last field).
const PLACED: u32 = 0;
const STALE: u32 = 1;
const FRESH: u32 = 2;

/// The data server index bits of a record.
const DS_MASK: u32 = 0x00ff_ffff;

/// One copy of a file's data: the data server holding it, and whether
/// it is stale (missed writes; left out of layouts until rebuilt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mirror {
    pub(crate) ds: usize,
    pub(crate) stale: bool,
}

/// The data servers of the good copies of `m`, in placement order.
pub(crate) fn good(m: &[Mirror]) -> impl Iterator<Item = usize> + '_ {
    m.iter().filter(|x| !x.stale).map(|x| x.ds)
}

/// The placement of every file with a data file.
#[derive(Debug)]
pub(crate) struct Placement {
    map: HashMap<(u64, u64), Vec<Mirror>>,
    /// Files per data server.
    counts: Vec<u64>,
    /// Stale copies: data server, file system id, file id (ordered by
    /// data server, so one server's are found without the others').
    stale: BTreeSet<(usize, u64, u64)>,
    /// Copies of each newly placed file.
    mirrors: usize,
    log: Option<File>,
}

impl Placement {
    /// An empty placement over `n` data servers, `mirrors` copies per
    /// new file (at most `n`), kept in memory only.
    pub(crate) fn memory(n: usize, mirrors: usize) -> Self {
        let n = n.max(1);
        Self {
            map: HashMap::new(),
            counts: vec![0; n],
            stale: BTreeSet::new(),
            mirrors: mirrors.clamp(1, n),
            log: None,
        }
    }

    /// The placement recorded in `dir` over `n` data servers (created
    /// empty when there is none). Records naming a data server past `n`
    /// (the list shrank) are dropped with a warning: those copies are on
    /// a server no longer configured.
    pub(crate) fn open(dir: &Path, n: usize, mirrors: usize) -> io::Result<Self> {
        Self::open_with(dir, n, mirrors, COMPACT_SLACK)
    }

    fn open_with(dir: &Path, n: usize, mirrors: usize, slack: usize) -> io::Result<Self> {
        let path = dir.join(LOG);
        let mut p = Self::memory(n, mirrors);
        let mut records = 0usize;
        let mut dropped = 0usize;
        if let Ok(mut f) = File::open(&path) {
            let mut buf = Vec::new();
            f.read_to_end(&mut buf)?;
            for r in buf.chunks_exact(RECORD) {
                records += 1;
                let (fsid, fileid, v) = decode(r);
                if !p.replay(fsid, fileid, v) {
                    dropped += 1;
                }
            }
        }
        if dropped > 0 {
            tracing::warn!(
                records = dropped,
                data_servers = n,
                "pNFS placement names data servers no longer configured; files only there read as holes"
            );
        }
        if records > 2 * p.map.len() + slack {
            p.rewrite(&path)?;
        }
        p.log = Some(OpenOptions::new().create(true).append(true).open(&path)?);
        Ok(p)
    }

    /// Applies one record; false when it names an unknown data server.
    fn replay(&mut self, fsid: u64, fileid: u64, v: u32) -> bool {
        if v == REMOVED {
            self.unset(fsid, fileid);
            return true;
        }
        let ds = (v & DS_MASK) as usize;
        if ds >= self.counts.len() {
            return false;
        }
        match v >> 24 {
            PLACED => self.add(fsid, fileid, ds),
            STALE => self.set_stale(fsid, fileid, ds, true),
            FRESH => self.set_stale(fsid, fileid, ds, false),
            _ => return false,
        }
        true
    }

    /// The copies of the file `fileid` of `fsid`, if it was placed.
    pub(crate) fn get(&self, fsid: u64, fileid: u64) -> Option<Vec<Mirror>> {
        self.map.get(&(fsid, fileid)).cloned()
    }

    /// The file's copies, placing it first on the data servers with the
    /// fewest files, one per mirror (recorded and synced before they are
    /// returned).
    pub(crate) fn place(&mut self, fsid: u64, fileid: u64) -> io::Result<Vec<Mirror>> {
        if let Some(m) = self.get(fsid, fileid) {
            return Ok(m);
        }
        let mut by_load: Vec<usize> = (0..self.counts.len()).collect();
        by_load.sort_by_key(|&i| (self.counts[i], i));
        by_load.truncate(self.mirrors);
        let recs: Vec<u8> = by_load
            .iter()
            .flat_map(|&ds| encode(fsid, fileid, PLACED << 24 | ds as u32))
            .collect();
        self.append(&recs)?;
        for &ds in &by_load {
            self.add(fsid, fileid, ds);
        }
        Ok(self.get(fsid, fileid).unwrap_or_default())
    }

    /// The file was removed: its placement goes.
    pub(crate) fn remove(&mut self, fsid: u64, fileid: u64) -> io::Result<()> {
        if self.get(fsid, fileid).is_none() {
            return Ok(());
        }
        self.unset(fsid, fileid);
        self.append(&encode(fsid, fileid, REMOVED))
    }

    /// Marks the file's copy on `ds` stale (`stale`) or rebuilt: whether
    /// that changed anything. The last good copy of a file is never
    /// marked stale (there would be nothing to rebuild it from).
    pub(crate) fn mark(
        &mut self,
        fsid: u64,
        fileid: u64,
        ds: usize,
        stale: bool,
    ) -> io::Result<bool> {
        let Some(m) = self.map.get(&(fsid, fileid)) else {
            return Ok(false);
        };
        let Some(x) = m.iter().find(|x| x.ds == ds) else {
            return Ok(false);
        };
        if x.stale == stale || (stale && good(m).count() < 2) {
            return Ok(false);
        }
        let kind = if stale { STALE } else { FRESH };
        self.append(&encode(fsid, fileid, kind << 24 | ds as u32))?;
        self.set_stale(fsid, fileid, ds, stale);
        Ok(true)
    }

    /// Up to `max` of the stale copies on data server `ds` (file system
    /// id, file id).
    pub(crate) fn stale_on(&self, ds: usize, max: usize) -> Vec<(u64, u64)> {
        self.stale
            .range((ds, 0, 0)..=(ds, u64::MAX, u64::MAX))
            .take(max)
            .map(|&(_, fsid, fileid)| (fsid, fileid))
            .collect()
    }

    /// The data servers holding stale copies.
    pub(crate) fn stale_servers(&self) -> Vec<usize> {
        let mut v: Vec<usize> = Vec::new();
        let mut next = self.stale.first().map(|x| x.0);
        while let Some(ds) = next {
            v.push(ds);
            next = self.stale.range((ds + 1, 0, 0)..).next().map(|x| x.0);
        }
        v
    }

    /// Stale copies in all.
    pub(crate) fn stale_count(&self) -> usize {
        self.stale.len()
    }

    /// Files placed on each data server.
    pub(crate) fn counts(&self) -> &[u64] {
        &self.counts
    }

    fn add(&mut self, fsid: u64, fileid: u64, ds: usize) {
        let m = self.map.entry((fsid, fileid)).or_default();
        if m.iter().all(|x| x.ds != ds) {
            m.push(Mirror { ds, stale: false });
            self.counts[ds] += 1;
        }
    }

    fn set_stale(&mut self, fsid: u64, fileid: u64, ds: usize, stale: bool) {
        let Some(m) = self.map.get_mut(&(fsid, fileid)) else {
            return;
        };
        if let Some(x) = m.iter_mut().find(|x| x.ds == ds) {
            x.stale = stale;
            if stale {
                self.stale.insert((ds, fsid, fileid));
            } else {
                self.stale.remove(&(ds, fsid, fileid));
            }
        }
    }

    fn unset(&mut self, fsid: u64, fileid: u64) {
        if let Some(old) = self.map.remove(&(fsid, fileid)) {
            for x in old {
                self.counts[x.ds] -= 1;
                self.stale.remove(&(x.ds, fsid, fileid));
            }
        }
    }

    fn append(&mut self, recs: &[u8]) -> io::Result<()> {
        let Some(f) = self.log.as_mut() else {
            return Ok(());
        };
        f.write_all(recs)?;
        f.sync_data()
    }

    /// Replaces the log at `path` by the live records only (a new file
    /// synced, renamed over the old one, the directory synced).
    fn rewrite(&self, path: &Path) -> io::Result<()> {
        let tmp: PathBuf = path.with_extension("new");
        let mut buf = Vec::with_capacity(self.map.len() * RECORD);
        for (&(fsid, fileid), m) in &self.map {
            for x in m {
                buf.extend_from_slice(&encode(fsid, fileid, PLACED << 24 | x.ds as u32));
                if x.stale {
                    buf.extend_from_slice(&encode(fsid, fileid, STALE << 24 | x.ds as u32));
                }
            }
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

fn encode(fsid: u64, fileid: u64, v: u32) -> [u8; RECORD] {
    let mut r = [0u8; RECORD];
    r[..8].copy_from_slice(&fsid.to_be_bytes());
    r[8..16].copy_from_slice(&fileid.to_be_bytes());
    r[16..].copy_from_slice(&v.to_be_bytes());
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
        let mut p = Placement::memory(4, 1);
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
        let mut p = Placement::open(&d, 3, 1).unwrap();
        let placed: Vec<usize> = (0..30).map(|k| p.place(1, 64 * k).unwrap()[0].ds).collect();
        p.remove(1, 0).unwrap();
        drop(p);
        // A crash in the middle of an append.
        let mut f = OpenOptions::new().append(true).open(d.join(LOG)).unwrap();
        f.write_all(&[1, 2, 3]).unwrap();
        drop(f);
        let p = Placement::open(&d, 3, 1).unwrap();
        assert_eq!(p.get(1, 0), None);
        for k in 1..30u64 {
            assert_eq!(p.get(1, 64 * k).unwrap()[0].ds, placed[k as usize]);
        }
        assert_eq!(p.counts().iter().sum::<u64>(), 29);
        // With fewer data servers, files on the missing ones are dropped.
        let p = Placement::open(&d, 2, 1).unwrap();
        assert_eq!(p.counts(), [9, 10]);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn the_log_is_compacted_when_removals_dominate() {
        let d = tmpdir("compact");
        let mut p = Placement::open(&d, 2, 1).unwrap();
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
        drop(Placement::open_with(&d, 2, 1, 40).unwrap());
        assert_eq!(fs::metadata(d.join(LOG)).unwrap().len(), before);
        let p = Placement::open_with(&d, 2, 1, 8).unwrap();
        assert_eq!(p.counts(), [5, 5]);
        assert_eq!(fs::metadata(d.join(LOG)).unwrap().len(), 10 * RECORD as u64);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn mirrors_go_to_different_servers_and_stale_copies_survive_a_restart() {
        let mut p = Placement::memory(3, 2);
        for k in 0..3 {
            let m = p.place(1, k).unwrap();
            assert_eq!(m.len(), 2);
            assert_ne!(m[0].ds, m[1].ds);
        }
        assert_eq!(p.counts(), [2, 2, 2]);
        // More mirrors than data servers: one copy per server.
        assert_eq!(Placement::memory(2, 5).place(1, 1).unwrap().len(), 2);

        let d = tmpdir("mirrors");
        let mut p = Placement::open(&d, 3, 2).unwrap();
        let m = p.place(5, 6).unwrap();
        let (a, b) = (m[0].ds, m[1].ds);
        assert!(p.mark(5, 6, b, true).unwrap());
        assert!(!p.mark(5, 6, b, true).unwrap(), "already stale");
        assert!(!p.mark(5, 6, a, true).unwrap(), "the last good copy stays");
        assert!(!p.mark(5, 6, 7, true).unwrap(), "no copy there");
        assert_eq!(p.stale_on(b, 10), [(5, 6)]);
        assert_eq!(p.stale_servers(), [b]);
        assert_eq!(good(&p.get(5, 6).unwrap()).collect::<Vec<_>>(), [a]);
        drop(p);
        let mut p = Placement::open(&d, 3, 2).unwrap();
        assert_eq!(p.stale_on(b, 10), [(5, 6)]);
        assert!(p.stale_on(a, 10).is_empty());
        assert_eq!(p.counts().iter().sum::<u64>(), 2);
        assert!(p.mark(5, 6, b, false).unwrap());
        drop(p);
        let mut p = Placement::open(&d, 3, 2).unwrap();
        assert_eq!(p.stale_count(), 0);
        assert_eq!(good(&p.get(5, 6).unwrap()).count(), 2);
        // A removal takes the stale marks with it; a compaction keeps them.
        p.mark(5, 6, a, true).unwrap();
        p.place(5, 7).unwrap();
        p.remove(5, 7).unwrap();
        assert_eq!(p.stale_count(), 1);
        drop(p);
        let p = Placement::open_with(&d, 3, 2, 0).unwrap();
        assert_eq!(p.stale_on(a, 10), [(5, 6)]);
        assert_eq!(p.stale_servers(), [a]);
        assert_eq!(p.counts().iter().sum::<u64>(), 2);
        let _ = fs::remove_dir_all(&d);
    }
}
