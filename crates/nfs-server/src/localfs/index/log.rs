//! The handle index's log: every change of the index (an entry recorded
//! or forgotten, a further name of a linked file added or forgotten) is
//! appended here with `write(2)` before the call that made it replies,
//! and the store ([`redb`]) is committed without `fsync`. A write that
//! reached the page cache survives the server being killed (SIGKILL,
//! SIGTERM, a panic), so the next start replays the log into the store
//! and resolves every handle handed out; one durable store commit every
//! few hundred ms (or when the log reaches its bound) makes the store
//! hold everything and starts the log afresh. An operation whose reply
//! promises stable storage (CREATE, RENAME, LINK…) syncs the log
//! (`fdatasync`) instead of committing the store durably.
//!
//! File: a header (the magic `nfsrIXL1`, the log's epoch as a big-endian
//! u64), then records, each framed as
//!
//! | bytes | field |
//! |---|---|
//! | 4 | body length, big-endian, at most [`MAX_BODY`] |
//! | 4 | CRC32c of the epoch (8 bytes, big-endian) and the body |
//! | n | body: a kind byte, then the kind's fields |
//!
//! | kind | body after the kind byte |
//! |---|---|
//! | 1 `Put` | inode, parent inode, generation (big-endian u64 each), name |
//! | 2 `Remove` | inode |
//! | 3 `Link` | inode, parent inode, generation, name |
//! | 4 `Unlink` | inode, parent inode, name |
//!
//! A name is the rest of the body: 1 to [`MAX_NAME`] bytes. The epoch
//! goes up by one each time the log starts afresh, and the store records
//! the epoch whose records it holds durably, so a log whose truncation a
//! crash cut short is not replayed twice, and a record left over from an
//! earlier epoch fails its checksum. The decoder borrows names from the
//! buffer and allocates nothing; a record cut short (a torn tail: the
//! server or the machine stopped mid-write) or garbled is a typed
//! [`LogError`], and replay keeps the records before it.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The log file's first eight bytes.
pub const MAGIC: [u8; 8] = *b"nfsrIXL1";
/// The header: [`MAGIC`] and the epoch.
pub const HEADER_LEN: usize = 16;
/// The longest name recorded (Linux's `NAME_MAX` is 255; this leaves room
/// for other file systems, and bounds a record).
pub const MAX_NAME: usize = 4096;
/// The longest record body: a kind byte, three u64 and a name.
pub const MAX_BODY: usize = 1 + 24 + MAX_NAME;
/// A record's frame: body length and checksum.
pub const FRAME_LEN: usize = 8;

const PUT: u8 = 1;
const REMOVE: u8 = 2;
const LINK: u8 = 3;
const UNLINK: u8 = 4;

/// One change of the handle index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    /// `ino` is `name` in directory `parent`, generation `gen` (the
    /// index's main table).
    Put {
        /// Inode number.
        ino: u64,
        /// Parent directory's inode number.
        parent: u64,
        /// Generation.
        gen: u64,
        /// Name in the parent.
        name: &'a [u8],
    },
    /// `ino` is forgotten with all its names (its last link went).
    Remove {
        /// Inode number.
        ino: u64,
    },
    /// `name` in `parent` is a further name of linked file `ino`.
    Link {
        /// Inode number.
        ino: u64,
        /// Parent directory's inode number.
        parent: u64,
        /// Generation.
        gen: u64,
        /// Name in the parent.
        name: &'a [u8],
    },
    /// `name` in `parent` is no longer a further name of `ino`.
    Unlink {
        /// Inode number.
        ino: u64,
        /// Parent directory's inode number.
        parent: u64,
        /// Name in the parent.
        name: &'a [u8],
    },
}

/// Why a log (or its header) did not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The buffer ends inside a header or record (a torn tail).
    #[error("cut short: {have} of {need} bytes")]
    Truncated {
        /// Bytes there.
        have: usize,
        /// Bytes the header or record needs.
        need: usize,
    },
    /// A frame announces a body longer than [`MAX_BODY`].
    #[error("a record body of {0} bytes is over the bound")]
    TooLong(u32),
    /// The checksum does not match (garbled, or of another epoch).
    #[error("checksum mismatch")]
    Checksum,
    /// An unknown record kind.
    #[error("unknown record kind {0}")]
    Kind(u8),
    /// A body whose length does not fit its kind (or an empty name).
    #[error("a body of {len} bytes does not fit record kind {kind}")]
    Body {
        /// The kind byte.
        kind: u8,
        /// The body's length.
        len: usize,
    },
    /// The file does not start with [`MAGIC`].
    #[error("not a handle index log")]
    Magic,
    /// A name longer than [`MAX_NAME`] (encoding).
    #[error("a name of {0} bytes is over the bound")]
    Name(usize),
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn checksum(epoch: u64, body: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&epoch.to_be_bytes()), body)
}

impl<'a> Record<'a> {
    /// Appends the framed record to `out`, for a log of `epoch`.
    pub fn encode(&self, epoch: u64, out: &mut Vec<u8>) -> Result<(), LogError> {
        let (kind, ino, mid, name): (u8, u64, &[u64], &[u8]) = match *self {
            Self::Put {
                ino,
                parent,
                gen,
                name,
            } => (PUT, ino, &[parent, gen], name),
            Self::Remove { ino } => (REMOVE, ino, &[], &[]),
            Self::Link {
                ino,
                parent,
                gen,
                name,
            } => (LINK, ino, &[parent, gen], name),
            Self::Unlink { ino, parent, name } => (UNLINK, ino, &[parent], name),
        };
        let named = kind != REMOVE;
        if named && (name.is_empty() || name.len() > MAX_NAME) {
            return Err(LogError::Name(name.len()));
        }
        let start = out.len();
        out.extend_from_slice(&[0; FRAME_LEN]);
        out.push(kind);
        out.extend_from_slice(&ino.to_be_bytes());
        for v in mid {
            out.extend_from_slice(&v.to_be_bytes());
        }
        out.extend_from_slice(name);
        let body = out.get(start + FRAME_LEN..).unwrap_or_default();
        let len = body.len() as u32;
        let crc = checksum(epoch, body);
        if let Some(f) = out.get_mut(start..start + FRAME_LEN) {
            f[..4].copy_from_slice(&len.to_be_bytes());
            f[4..].copy_from_slice(&crc.to_be_bytes());
        }
        Ok(())
    }

    /// The record at the front of `buf` in a log of `epoch`, and the
    /// bytes it takes.
    pub fn decode(buf: &'a [u8], epoch: u64) -> Result<(Self, usize), LogError> {
        let frame = buf.get(..FRAME_LEN).ok_or(LogError::Truncated {
            have: buf.len(),
            need: FRAME_LEN,
        })?;
        let len = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
        let crc = u32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
        if len as usize > MAX_BODY {
            return Err(LogError::TooLong(len));
        }
        let end = FRAME_LEN + len as usize;
        let body = buf.get(FRAME_LEN..end).ok_or(LogError::Truncated {
            have: buf.len(),
            need: end,
        })?;
        // Fuzzing reaches the body decoder with any checksum.
        if !cfg!(fuzzing) && checksum(epoch, body) != crc {
            return Err(LogError::Checksum);
        }
        Ok((Self::body(body)?, end))
    }

    fn body(b: &'a [u8]) -> Result<Self, LogError> {
        let kind = *b.first().ok_or(LogError::Body { kind: 0, len: 0 })?;
        let bad = LogError::Body { kind, len: b.len() };
        let ino = u64_at(b, 1).ok_or(bad)?;
        let name_at = |at: usize| {
            b.get(at..)
                .filter(|n| !n.is_empty() && n.len() <= MAX_NAME)
                .ok_or(bad)
        };
        match kind {
            PUT | LINK => {
                let parent = u64_at(b, 9).ok_or(bad)?;
                let gen = u64_at(b, 17).ok_or(bad)?;
                let name = name_at(25)?;
                Ok(if kind == PUT {
                    Self::Put {
                        ino,
                        parent,
                        gen,
                        name,
                    }
                } else {
                    Self::Link {
                        ino,
                        parent,
                        gen,
                        name,
                    }
                })
            }
            REMOVE if b.len() == 9 => Ok(Self::Remove { ino }),
            REMOVE => Err(bad),
            UNLINK => {
                let parent = u64_at(b, 9).ok_or(bad)?;
                let name = name_at(17)?;
                Ok(Self::Unlink { ino, parent, name })
            }
            k => Err(LogError::Kind(k)),
        }
    }
}

/// The header of a log of `epoch`.
pub fn header(epoch: u64) -> [u8; HEADER_LEN] {
    let mut h = [0; HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..].copy_from_slice(&epoch.to_be_bytes());
    h
}

/// The epoch in the header at the front of `buf`.
pub fn decode_header(buf: &[u8]) -> Result<u64, LogError> {
    let h = buf.get(..HEADER_LEN).ok_or(LogError::Truncated {
        have: buf.len(),
        need: HEADER_LEN,
    })?;
    if h[..8] != MAGIC {
        return Err(LogError::Magic);
    }
    u64_at(h, 8).ok_or(LogError::Magic)
}

/// What a log's bytes hold: the records of its epoch, in order, up to the
/// first that does not decode.
#[derive(Debug)]
pub struct Replay<'a> {
    /// The log's epoch.
    pub epoch: u64,
    buf: &'a [u8],
    at: usize,
    /// Why the records ended before the end of the buffer, and where.
    pub stopped: Option<(usize, LogError)>,
}

impl<'a> Replay<'a> {
    /// The records of the log in `buf`; an error if its header is missing
    /// or garbled.
    pub fn new(buf: &'a [u8]) -> Result<Self, LogError> {
        let epoch = decode_header(buf)?;
        Ok(Self {
            epoch,
            buf,
            at: HEADER_LEN,
            stopped: None,
        })
    }

    /// Bytes read so far (header and good records).
    pub fn offset(&self) -> usize {
        self.at
    }
}

impl<'a> Iterator for Replay<'a> {
    type Item = Record<'a>;

    fn next(&mut self) -> Option<Record<'a>> {
        if self.stopped.is_some() {
            return None;
        }
        let rest = self.buf.get(self.at..).filter(|r| !r.is_empty())?;
        match Record::decode(rest, self.epoch) {
            Ok((r, used)) => {
                self.at += used;
                Some(r)
            }
            Err(e) => {
                self.stopped = Some((self.at, e));
                None
            }
        }
    }
}

/// The log file, open for appending.
#[derive(Debug)]
pub(crate) struct Log {
    file: File,
    path: PathBuf,
    epoch: u64,
    len: u64,
    /// Bytes of the log on stable storage ([`Self::sync`]).
    synced: u64,
    /// Bytes past which the index commits durably and starts afresh.
    pub(crate) max: u64,
}

impl Log {
    /// Reads the log at `path` (at most `cap` bytes; none if there is no
    /// file).
    pub(crate) fn read(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
        let mut buf = Vec::new();
        match File::open(path) {
            Ok(f) => {
                f.take(cap).read_to_end(&mut buf)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(buf)
    }

    /// A fresh log of `epoch` at `path` (anything there replaced), its
    /// header on stable storage with the directory entry.
    pub(crate) fn create(path: &Path, epoch: u64, max: u64) -> io::Result<Self> {
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        file.set_len(0)?;
        file.write_all(&header(epoch))?;
        file.sync_data()?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(Self {
            file,
            path: path.to_owned(),
            epoch,
            len: HEADER_LEN as u64,
            synced: HEADER_LEN as u64,
            max,
        })
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether records were appended since the log started.
    pub(crate) fn has_records(&self) -> bool {
        self.len > HEADER_LEN as u64
    }

    pub(crate) fn full(&self) -> bool {
        self.len > self.max
    }

    /// Whether the log is past half its bound: time for a durable commit
    /// of the store before a change has to wait for one.
    pub(crate) fn half_full(&self) -> bool {
        self.len > self.max / 2
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Appends `records` (framed for [`Self::epoch`]) with one `write(2)`.
    pub(crate) fn append(&mut self, records: &[u8]) -> io::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.file.write_all(records) {
            // A part may be in the file: what follows would be read as
            // garbage, so the length is put back.
            let _ = self.file.set_len(self.len);
            return Err(e);
        }
        self.len += records.len() as u64;
        Ok(())
    }

    /// Puts what was appended on stable storage (nothing to do when
    /// nothing was appended since the last sync).
    pub(crate) fn sync(&mut self) -> io::Result<()> {
        if self.has_records() && self.synced < self.len {
            let len = self.len;
            self.file.sync_data()?;
            self.synced = len;
        }
        Ok(())
    }

    /// Whether everything appended is on stable storage.
    #[cfg(test)]
    pub(crate) fn is_synced(&self) -> bool {
        self.synced >= self.len
    }

    /// A second handle on the log's file, to sync it while a durable
    /// commit of the store has it.
    pub(crate) fn file_clone(&self) -> io::Result<File> {
        self.file.try_clone()
    }

    /// Starts the log afresh with `epoch` (the store holds every record
    /// of the old one durably).
    pub(crate) fn restart(&mut self, epoch: u64) -> io::Result<()> {
        self.epoch = epoch;
        self.file.set_len(0)?;
        self.len = 0;
        self.file.write_all(&header(self.epoch))?;
        self.len = HEADER_LEN as u64;
        self.synced = self.len;
        Ok(())
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Record<'static>> {
        vec![
            Record::Put {
                ino: 12,
                parent: 2,
                gen: 7,
                name: b"f-1",
            },
            Record::Remove { ino: u64::MAX },
            Record::Link {
                ino: 1 << 40,
                parent: 3,
                gen: 0,
                name: &[0xff; MAX_NAME],
            },
            Record::Unlink {
                ino: 5,
                parent: 6,
                name: b"x",
            },
        ]
    }

    #[test]
    fn records_round_trip_and_every_cut_is_a_typed_error() {
        let mut buf = header(9).to_vec();
        for r in samples() {
            r.encode(9, &mut buf).unwrap();
        }
        let mut replay = Replay::new(&buf).unwrap();
        assert_eq!(replay.epoch, 9);
        assert_eq!(replay.by_ref().collect::<Vec<_>>(), samples());
        assert_eq!(replay.stopped, None);
        assert_eq!(replay.offset(), buf.len());
        // A torn tail at every length: the whole records before it, and
        // a typed error where it starts.
        let ends: Vec<usize> = {
            let mut r = Replay::new(&buf).unwrap();
            let mut v = vec![r.offset()];
            while r.next().is_some() {
                v.push(r.offset());
            }
            v
        };
        for cut in HEADER_LEN..buf.len() {
            let mut r = Replay::new(&buf[..cut]).unwrap();
            let got = r.by_ref().count();
            let whole = ends.iter().filter(|&&e| e <= cut).count() - 1;
            assert_eq!(got, whole, "cut at {cut}");
            if ends.contains(&cut) {
                assert_eq!(r.stopped, None);
            } else {
                assert!(
                    matches!(r.stopped, Some((at, LogError::Truncated { .. })) if at == ends[whole]),
                    "cut at {cut}: {:?}",
                    r.stopped
                );
            }
        }
    }

    #[test]
    fn garbled_records_and_headers_are_typed_errors() {
        let mut buf = header(3).to_vec();
        samples()[0].encode(3, &mut buf).unwrap();
        let one = buf.len();
        samples()[3].encode(3, &mut buf).unwrap();
        // A flipped bit in the second record: the first one stays.
        let mut bad = buf.clone();
        bad[one + FRAME_LEN + 3] ^= 1;
        let mut r = Replay::new(&bad).unwrap();
        assert_eq!(r.by_ref().count(), 1);
        assert_eq!(r.stopped, Some((one, LogError::Checksum)));
        // A record of another epoch fails its checksum.
        let mut other = header(4).to_vec();
        other.extend_from_slice(&buf[HEADER_LEN..]);
        let mut r = Replay::new(&other).unwrap();
        assert_eq!(r.next(), None);
        assert_eq!(r.stopped, Some((HEADER_LEN, LogError::Checksum)));
        // A length over the bound, whatever follows.
        let mut long = header(3).to_vec();
        long.extend_from_slice(&(MAX_BODY as u32 + 1).to_be_bytes());
        long.extend_from_slice(&[0; 4]);
        assert_eq!(
            Record::decode(&long[HEADER_LEN..], 3),
            Err(LogError::TooLong(MAX_BODY as u32 + 1))
        );
        // Bodies that do not fit their kind.
        for (body, err) in [
            (&[9u8, 0, 0, 0, 0, 0, 0, 0, 1][..], LogError::Kind(9)),
            (
                &[REMOVE, 0, 0, 0, 0, 0, 0, 0, 1, 0],
                LogError::Body {
                    kind: REMOVE,
                    len: 10,
                },
            ),
            (&[PUT; 25], LogError::Body { kind: PUT, len: 25 }),
            (&[], LogError::Body { kind: 0, len: 0 }),
        ] {
            let mut rec = (body.len() as u32).to_be_bytes().to_vec();
            rec.extend_from_slice(&checksum(3, body).to_be_bytes());
            rec.extend_from_slice(body);
            assert_eq!(Record::decode(&rec, 3), Err(err), "{body:?}");
        }
        assert_eq!(
            decode_header(b"nfsrIXL2\0\0\0\0\0\0\0\x01"),
            Err(LogError::Magic)
        );
        assert!(matches!(
            decode_header(b"nfsr"),
            Err(LogError::Truncated { .. })
        ));
        // Names: empty or over the bound are refused when encoding.
        let long_name = vec![b'a'; MAX_NAME + 1];
        let put = |name| Record::Put {
            ino: 1,
            parent: 2,
            gen: 3,
            name,
        };
        assert_eq!(put(b"").encode(3, &mut Vec::new()), Err(LogError::Name(0)));
        assert_eq!(
            put(&long_name).encode(3, &mut Vec::new()),
            Err(LogError::Name(MAX_NAME + 1))
        );
    }
}
