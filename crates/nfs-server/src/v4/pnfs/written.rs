//! Files that may hold data written through a layout beyond the size the
//! metadata server knows (RFC 8881 §12.7.4, §18.42; RFC 8435 §6: the
//! client moves the data, the metadata server learns the new size only
//! from LAYOUTCOMMIT).
//!
//! A file is marked when a read-write layout of it is granted, and the
//! mark is written and synced in the state directory (`pnfs-written`)
//! before the layout goes out. It is settled when the last read-write
//! layout of the file comes back and the metadata server has compared
//! its size with the data files' (growing it when they are larger). A
//! metadata server that restarts finds the marks of the files whose
//! layouts were out when it stopped and does the same comparison for
//! each ([`super::Mds::recover_sizes`]), so a size written through a
//! layout but never committed is not lost with the layout.
//!
//! The log: records of a kind byte (1 marked, 0 settled), the file
//! system id and file id (big-endian u64 each: the data file's name),
//! the handle's length (one byte, at most [`MAX_FH`]) and the metadata
//! server's file handle. A torn last record is ignored. Opening rewrites
//! the log with the marks alone, and so does a log grown past
//! [`COMPACT_AT`] and four times the live marks' records (a client taking
//! and returning read-write layouts adds two records a cycle: without
//! this the file would grow until the next start). Memory: one entry per marked file
//! (files with read-write layouts out, bounded by `--max-layouts`, plus
//! those whose layouts were revoked or whose clients went before the
//! next start).

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use nfs::v3::{Fattr3, NfsFh3, Sattr3};
use oncrpc::limits::Limit;

use super::placement::good;
use super::{blocking, data_file_name, Mds};
use crate::storage::Storage;

/// The log's name in the state directory.
pub(crate) const LOG: &str = "pnfs-written";

/// The longest handle recorded (NFSv3's limit, RFC 1813 §2.5).
pub(crate) const MAX_FH: usize = 64;

const MARKED: u8 = 1;
const SETTLED: u8 = 0;
const HEAD: usize = 1 + 8 + 8 + 1;

/// The log is rewritten with the live marks alone once it holds more
/// than this many bytes and four times theirs.
pub(crate) const COMPACT_AT: u64 = 64 * 1024;

/// The log's bound: tripped (a log line, a counter) each time it is
/// rewritten with the live marks alone.
static LOG_BYTES: Limit = Limit::new("pnfs.written_log_bytes");

/// A marked file: its data file's ids and the metadata server's handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Marked {
    pub(crate) fsid: u64,
    pub(crate) fileid: u64,
    pub(crate) fh: Bytes,
}

/// The marks, in memory and (with a state directory) on disk.
#[derive(Debug, Default)]
pub(crate) struct Written {
    marks: HashMap<(u64, u64), Bytes>,
    /// The bytes the live marks' records take in the log (kept as marks
    /// come and go, so an append does not walk them).
    live: u64,
    log: Option<Log>,
}

/// The log file open for appending, where it is and how long it is.
#[derive(Debug)]
struct Log {
    file: File,
    path: PathBuf,
    len: u64,
}

impl Log {
    /// A new log holding `marks` alone at `path`.
    fn rewritten(path: PathBuf, marks: &HashMap<(u64, u64), Bytes>) -> io::Result<Self> {
        let file = rewrite(&path, marks)?;
        let len = file.metadata()?.len();
        Ok(Self { file, path, len })
    }

    /// Appends `rec`; rewrites the log with `marks` alone when it has
    /// grown past [`COMPACT_AT`] and four times their records (`live`
    /// bytes).
    fn append(
        &mut self,
        rec: &[u8],
        marks: &HashMap<(u64, u64), Bytes>,
        live: u64,
    ) -> io::Result<()> {
        self.file.write_all(rec)?;
        self.len += rec.len() as u64;
        if self.len > COMPACT_AT.max(4 * live) {
            LOG_BYTES.trip(format_args!(
                "pNFS written-marks log of {} bytes ({live} live) rewritten with the live marks",
                self.len
            ));
            *self = Self::rewritten(self.path.clone(), marks)?;
        }
        Ok(())
    }
}

impl Written {
    /// Marks kept in memory only (no state directory).
    pub(crate) fn memory() -> Self {
        Self::default()
    }

    /// The marks recorded in `dir` by the previous instance, the log
    /// rewritten with them alone.
    pub(crate) fn open(dir: &Path) -> io::Result<Self> {
        let path = dir.join(LOG);
        let mut buf = Vec::new();
        match File::open(&path) {
            Ok(mut f) => {
                f.read_to_end(&mut buf)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mut marks = HashMap::new();
        let mut at = 0;
        while let Some((kind, m, next)) = decode(&buf, at) {
            if kind == MARKED {
                marks.insert((m.fsid, m.fileid), m.fh);
            } else {
                marks.remove(&(m.fsid, m.fileid));
            }
            at = next;
        }
        let log = Log::rewritten(path, &marks)?;
        let live = marks.values().map(record_len).sum();
        Ok(Self {
            marks,
            live,
            log: Some(log),
        })
    }

    /// Marks the file (before a read-write layout of it goes out); the
    /// mark is synced when it is new. Handles longer than [`MAX_FH`] are
    /// not recorded (the server's own are shorter).
    pub(crate) fn mark(&mut self, m: &Marked) -> io::Result<()> {
        if m.fh.len() > MAX_FH || self.marks.contains_key(&(m.fsid, m.fileid)) {
            return Ok(());
        }
        let key = (m.fsid, m.fileid);
        self.marks.insert(key, m.fh.clone());
        self.live += record_len(&m.fh);
        if let Some(log) = &mut self.log {
            let r = log
                .append(&encode(MARKED, m), &self.marks, self.live)
                .and_then(|()| log.file.sync_data());
            if r.is_err() {
                self.marks.remove(&key);
                self.live -= record_len(&m.fh);
            }
            r?;
        }
        Ok(())
    }

    /// Settles the file (its size is known to be right). Not synced: a
    /// lost settlement only costs one more comparison after a restart.
    pub(crate) fn settle(&mut self, fsid: u64, fileid: u64) -> io::Result<()> {
        let Some(fh) = self.marks.remove(&(fsid, fileid)) else {
            return Ok(());
        };
        self.live -= record_len(&fh);
        if let Some(log) = &mut self.log {
            log.append(
                &encode(SETTLED, &Marked { fsid, fileid, fh }),
                &self.marks,
                self.live,
            )?;
        }
        Ok(())
    }

    /// Every marked file.
    pub(crate) fn marked(&self) -> Vec<Marked> {
        self.marks
            .iter()
            .map(|(&(fsid, fileid), fh)| Marked {
                fsid,
                fileid,
                fh: fh.clone(),
            })
            .collect()
    }
}

impl Mds {
    /// Marks the file `attr` (handle `fh`) before a read-write layout of
    /// it goes out; the mark is on disk when this returns.
    pub(crate) fn mark_written(&self, attr: &Fattr3, fh: &NfsFh3) -> io::Result<()> {
        let m = Marked {
            fsid: attr.fsid,
            fileid: attr.fileid,
            fh: Bytes::copy_from_slice(fh.as_bytes()),
        };
        let mut w = self
            .written
            .lock()
            .map_err(|_| io::Error::other("pNFS written marks poisoned"))?;
        blocking(|| w.mark(&m))
    }

    /// Settles the file's mark (its size is right, or it is gone).
    pub(crate) fn settle(&self, fsid: u64, fileid: u64) {
        if let Ok(mut w) = self.written.lock() {
            if let Err(e) = w.settle(fsid, fileid) {
                tracing::warn!(error = %e, "pNFS written mark not settled");
            }
        }
    }

    /// Brings the size of `fs`'s file `m` up to its data files' (the
    /// largest a good copy has: data written through a layout and never
    /// committed) and settles its mark. A data server that does not
    /// answer leaves the mark for later; a file gone settles it.
    pub(crate) async fn settle_size<S: Storage>(&self, fs: &S, m: &Marked) {
        let Some(fh) = NfsFh3::new(&m.fh) else {
            return self.settle(m.fsid, m.fileid);
        };
        let Ok(attr) = fs.getattr(&fh).await else {
            return self.settle(m.fsid, m.fileid);
        };
        let copies = self
            .placement
            .lock()
            .ok()
            .and_then(|p| p.get(m.fsid, m.fileid))
            .unwrap_or_default();
        let name = data_file_name(m.fsid, m.fileid);
        let mut size = None;
        for i in good(&copies) {
            match self.ds[i].size(&name).await {
                Ok(n) => size = size.max(Some(n)),
                Err(e) => {
                    tracing::debug!(ds = i, file = %name, error = ?e, "pNFS size not learnt; tried again later");
                }
            }
        }
        let Some(size) = size else {
            if copies.is_empty() {
                self.settle(m.fsid, m.fileid);
            }
            return;
        };
        if size > attr.size {
            let s = Sattr3 {
                size: Some(size),
                ..Sattr3::default()
            };
            if let Err(e) = fs.setattr(&fh, &s, None).await {
                tracing::warn!(file = %name, error = ?e, "pNFS size from the data servers not set");
                return;
            }
            tracing::info!(
                file = %name,
                from = attr.size,
                to = size,
                "pNFS file size recovered from its data servers (written through a layout, not committed)"
            );
        }
        self.settle(m.fsid, m.fileid);
    }

    /// After a start: the files the previous instance had read-write
    /// layouts out on get their sizes from the data servers (once).
    pub(crate) fn recover_sizes<S: Storage>(self: &std::sync::Arc<Self>, fs: std::sync::Arc<S>) {
        if self
            .recovering
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return;
        }
        let marks = match self.written.lock() {
            Ok(w) => w.marked(),
            Err(_) => return,
        };
        if marks.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        tracing::info!(files = marks.len(), "pNFS: sizes of files with layouts out before the restart are checked with the data servers");
        let me = std::sync::Arc::clone(self);
        rt.spawn(async move {
            for m in &marks {
                me.settle_size(&*fs, m).await;
            }
        });
    }
}

/// The bytes of the log record of a mark with handle `fh`.
fn record_len(fh: &Bytes) -> u64 {
    (HEAD + fh.len()) as u64
}

fn encode(kind: u8, m: &Marked) -> Vec<u8> {
    let mut r = Vec::with_capacity(HEAD + m.fh.len());
    r.push(kind);
    r.extend_from_slice(&m.fsid.to_be_bytes());
    r.extend_from_slice(&m.fileid.to_be_bytes());
    r.push(m.fh.len() as u8);
    r.extend_from_slice(&m.fh);
    r
}

/// The record at `at` of `buf` and where the next starts; `None` at the
/// end, at a torn record or at one that does not decode.
fn decode(buf: &[u8], at: usize) -> Option<(u8, Marked, usize)> {
    let head = buf.get(at..at.checked_add(HEAD)?)?;
    let kind = head[0];
    let n = usize::from(head[17]);
    if kind > MARKED || n > MAX_FH {
        return None;
    }
    let fh = buf.get(at + HEAD..at + HEAD + n)?;
    let u = |b: &[u8]| {
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        u64::from_be_bytes(a)
    };
    let m = Marked {
        fsid: u(&head[1..9]),
        fileid: u(&head[9..17]),
        fh: Bytes::copy_from_slice(fh),
    };
    Some((kind, m, at + HEAD + n))
}

/// Writes the marks alone to a new log that replaces `path`; returns it
/// open for appending.
fn rewrite(path: &Path, marks: &HashMap<(u64, u64), Bytes>) -> io::Result<File> {
    let tmp: PathBuf = path.with_extension("new");
    {
        let mut f = File::create(&tmp)?;
        for (&(fsid, fileid), fh) in marks {
            f.write_all(&encode(
                MARKED,
                &Marked {
                    fsid,
                    fileid,
                    fh: fh.clone(),
                },
            ))?;
        }
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    if let Some(d) = path.parent() {
        File::open(d)?.sync_all()?;
    }
    OpenOptions::new().append(true).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nfsrdma-written-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn m(id: u64) -> Marked {
        Marked {
            fsid: 7,
            fileid: id,
            fh: Bytes::from(vec![id as u8; 12]),
        }
    }

    /// A client taking and returning read-write layouts over and over
    /// adds two records a cycle; the log stays within its bound and still
    /// holds the live marks.
    #[test]
    fn the_log_of_many_mark_settle_cycles_stays_bounded() {
        let d = tmpdir("compact");
        let trips = LOG_BYTES.count();
        {
            let mut w = Written::open(&d).unwrap();
            w.mark(&m(1)).unwrap();
            for i in 0..2_500 {
                w.mark(&m(100 + i % 7)).unwrap();
                w.settle(7, 100 + i % 7).unwrap();
                let len = fs::metadata(d.join(LOG)).unwrap().len();
                assert!(len <= COMPACT_AT + 100, "log of {len} bytes");
            }
            w.mark(&m(2)).unwrap();
            // The running count of the live marks' bytes is their sum.
            let sum: u64 = w.marks.values().map(record_len).sum();
            assert_eq!((w.live, sum), (2 * record_len(&m(1).fh), sum));
        }
        // 5,000 records of 30 bytes: rewritten at least twice, each time
        // counted.
        assert!(LOG_BYTES.count() >= trips + 2);
        let w = Written::open(&d).unwrap();
        assert_eq!(w.live, 2 * record_len(&m(1).fh));
        let mut got: Vec<u64> = w.marked().iter().map(|x| x.fileid).collect();
        got.sort_unstable();
        assert_eq!(got, vec![1, 2]);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn marks_survive_a_restart_settled_ones_do_not_and_a_torn_record_is_ignored() {
        let d = tmpdir("restart");
        {
            let mut w = Written::open(&d).unwrap();
            w.mark(&m(1)).unwrap();
            w.mark(&m(2)).unwrap();
            w.mark(&m(2)).unwrap();
            w.mark(&m(3)).unwrap();
            w.settle(7, 2).unwrap();
            // A handle too long is not recorded.
            w.mark(&Marked {
                fsid: 7,
                fileid: 9,
                fh: Bytes::from(vec![0; MAX_FH + 1]),
            })
            .unwrap();
        }
        // A torn record at the end (a crash while appending).
        let mut f = OpenOptions::new().append(true).open(d.join(LOG)).unwrap();
        f.write_all(&encode(MARKED, &m(4))[..10]).unwrap();
        drop(f);
        let w = Written::open(&d).unwrap();
        let mut got: Vec<u64> = w.marked().iter().map(|x| x.fileid).collect();
        got.sort_unstable();
        assert_eq!(got, vec![1, 3]);
        assert!(w.marked().iter().all(|x| x.fh == m(x.fileid).fh));
        // The rewrite holds the two marks alone.
        let len = fs::metadata(d.join(LOG)).unwrap().len() as usize;
        assert_eq!(len, 2 * (HEAD + 12));
        let _ = fs::remove_dir_all(&d);
    }
}
