//! A directory cursor over `getdents64`: READDIR pages whose cost is the
//! entries they return, not the size of the directory.
//!
//! Cookies are the file system's own directory offsets, as Linux's nfsd
//! uses them: the cookie handed out with an entry is that entry's `d_off`
//! (the position of the entry after it), and a page that resumes from a
//! cookie seeks the directory there (`lseek(SEEK_SET)`) and reads on. A
//! page costs one `open`, one `lseek` and `getdents64` calls for the
//! entries it returns (plus one buffer read ahead, at most); "." and ".."
//! come from the file system with its cookies like any other entry.
//!
//! What the cookies rely on. POSIX only promises `seekdir` to a `telldir`
//! value of the same open stream; Linux file systems that can be exported
//! promise more, and knfsd relies on it as we do: a `d_off` stays a valid
//! position in a later open of the same directory, and an entry neither
//! created nor removed in between keeps its place relative to it.
//! - ext4 (`dir_index`): positions are name hashes (major and minor hash,
//!   63 bits); an untouched entry's hash never changes, so resuming at a
//!   hash returns exactly the entries not yet returned (a hash collision
//!   across a page boundary can repeat an entry, as with knfsd). In a
//!   linear directory they are byte offsets, and ext4 rescans the block so
//!   that a position that no longer starts an entry lands on the next one.
//! - xfs, btrfs: positions are per-entry data offsets / index numbers,
//!   stable while the entry lives; xfs skips to the next entry at or after
//!   the position.
//! - tmpfs since Linux 6.6: stable per-entry offsets ("libfs: stable
//!   directory offsets"); a removed entry's offset resumes at the next one.
//!   Before 6.6, and on ramfs, offsets are entry counts: a removal before
//!   the position shifts every later entry. There the verifier also covers
//!   the directory's mtime, so a cookie from before any change is refused
//!   with BAD_COOKIE instead of silently skipping an entry.
//!
//! The cookie verifier (RFC 1813 §3.3.16 `cookieverf`, RFC 8881 §18.23.3)
//! is a hash of the directory's identity: device, inode number, birth time
//! (statx `btime`, where the file system records it) and the cookie scheme
//! version. It changes only when an old cookie can no longer be honoured:
//! when the handle now names a different directory (inode number reused
//! by a re-created directory), when the server changes its cookie scheme,
//! and, on file systems with count-based offsets, when the directory
//! changes. Entries coming and going do not change it elsewhere.
//!
//! A cookie the file system refuses to seek to (a negative offset, one past
//! its largest position) is [`CursorError::BadCookie`]: NFS3ERR_BAD_COOKIE
//! / NFS4ERR_BAD_COOKIE. Any other position lands on the next entry at or
//! after it, never inside one (above).
//!
//! Resuming without a seek. A page that stops before the end keeps the
//! entries it read ahead but did not take, and remembers the cookie it
//! stopped at; a later [`DirCursor::read`] from exactly that cookie hands
//! those entries out first and reads on from where the stream is, with
//! no `lseek` (on ext4 a seek makes the next `getdents64` rebuild its
//! hash-ordered view of the block, `ext4_htree_fill_tree`). The server
//! keeps such cursors for a while between the calls of one listing
//! ([`crate::localfs`]); any other cookie seeks as above.

use std::ffi::CStr;
use std::io;
use std::sync::OnceLock;

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, RawDir, SeekFrom, Stat, StatxFlags};
use rustix::io::Errno;

/// Smallest `getdents64` buffer: holds the longest entry (255-byte name,
/// 280 bytes) three times. A page that needs more reads again; a buffer
/// much larger than the page reads entries the page throws away.
pub const MIN_BUF: usize = 1024;
/// Largest `getdents64` buffer one page reads with.
pub const MAX_BUF: usize = 256 * 1024;

/// Version of the cookie scheme, hashed into the verifier so cookies of an
/// older scheme (name hashes) are refused after an upgrade.
const SCHEME: &[u8] = b"nfsrdma-dircursor-1";

/// Why a page could not be read.
#[derive(Debug)]
pub enum CursorError {
    /// The file system refuses the cookie as a position.
    BadCookie,
    /// Any other failure of the directory.
    Io(io::Error),
}

impl From<Errno> for CursorError {
    fn from(e: Errno) -> Self {
        Self::Io(e.into())
    }
}

/// One directory entry as `getdents64` gives it, valid during a visit.
#[derive(Debug)]
pub struct Entry<'a> {
    name: &'a CStr,
    ino: u64,
    file_type: FileType,
    cookie: u64,
    dir: BorrowedFd<'a>,
}

impl Entry<'_> {
    /// The name, without its NUL.
    pub fn name(&self) -> &[u8] {
        self.name.to_bytes()
    }

    /// The inode number the directory records.
    pub fn ino(&self) -> u64 {
        self.ino
    }

    /// The type the directory records (`Unknown` where the file system
    /// does not record types).
    pub fn file_type(&self) -> FileType {
        self.file_type
    }

    /// The cookie that resumes after this entry (its `d_off`).
    pub fn cookie(&self) -> u64 {
        self.cookie
    }

    /// The name with its NUL, as system calls take it (no copy).
    pub fn c_name(&self) -> &CStr {
        self.name
    }

    /// Whether this is "." or "..".
    pub fn is_dot(&self) -> bool {
        matches!(self.name(), b"." | b"..")
    }

    /// `lstat` of the entry relative to the open directory: one
    /// `fstatat(AT_SYMLINK_NOFOLLOW)`, no path resolution from the root.
    pub fn stat(&self) -> io::Result<Stat> {
        Ok(rustix::fs::statat(
            self.dir,
            self.name,
            AtFlags::SYMLINK_NOFOLLOW,
        )?)
    }
}

/// An open directory and its cookie verifier.
#[derive(Debug)]
pub struct DirCursor {
    fd: OwnedFd,
    verifier: [u8; 8],
    /// The cookie the last page stopped at, when it stopped early: the
    /// entries of [`Self::ahead`] come next, then the fd's stream.
    resume: Option<u64>,
    ahead: Ahead,
}

/// Entries read from the directory and not yet handed out, in order:
/// names (NUL-terminated) in one buffer.
#[derive(Debug, Default)]
struct Ahead {
    names: Vec<u8>,
    entries: Vec<AheadEntry>,
}

#[derive(Debug, Clone, Copy)]
struct AheadEntry {
    ino: u64,
    file_type: FileType,
    cookie: u64,
    /// Where the name starts and ends (after its NUL) in `names`.
    name: (usize, usize),
}

impl Ahead {
    fn push(&mut self, name: &CStr, ino: u64, file_type: FileType, cookie: u64) {
        let start = self.names.len();
        self.names.extend_from_slice(name.to_bytes_with_nul());
        self.entries.push(AheadEntry {
            ino,
            file_type,
            cookie,
            name: (start, self.names.len()),
        });
    }

    fn clear(&mut self) {
        self.names.clear();
        self.entries.clear();
    }

    /// Appends `more` (read after these) with room for exactly them.
    fn append(&mut self, more: Self) {
        let base = self.names.len();
        self.names.reserve_exact(more.names.len());
        self.names.extend_from_slice(&more.names);
        self.entries.reserve_exact(more.entries.len());
        self.entries.extend(more.entries.iter().map(|a| AheadEntry {
            name: (a.name.0 + base, a.name.1 + base),
            ..*a
        }));
    }

    /// Bytes held.
    fn bytes(&self) -> usize {
        self.names.capacity() + self.entries.capacity() * std::mem::size_of::<AheadEntry>()
    }
}

/// Entries a cursor holds for its next page, copied out of it
/// ([`DirCursor::held_entries`]).
#[derive(Debug, Default)]
pub struct HeldEntries(Ahead);

impl HeldEntries {
    /// How many.
    pub fn len(&self) -> usize {
        self.0.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.entries.is_empty()
    }

    /// Tests: `n` regular files named `f0`, `f1`, ...
    #[cfg(test)]
    pub(crate) fn of_names(n: usize) -> Self {
        let mut a = Ahead::default();
        for i in 0..n {
            let name = std::ffi::CString::new(format!("f{i}")).unwrap_or_default();
            a.push(&name, i as u64 + 10, FileType::RegularFile, i as u64 + 1);
        }
        Self(a)
    }

    /// Entry `i`'s name, inode number and type as the directory records
    /// them.
    pub fn get(&self, i: usize) -> Option<(&CStr, u64, FileType)> {
        let a = self.0.entries.get(i)?;
        let name = self.0.names.get(a.name.0..a.name.1)?;
        Some((CStr::from_bytes_with_nul(name).ok()?, a.ino, a.file_type))
    }

    /// Each entry's name, inode number and type as the directory records
    /// them, in directory order.
    pub fn iter(&self) -> impl Iterator<Item = (&CStr, u64, FileType)> {
        self.0.entries.iter().filter_map(|a| {
            let name = self.0.names.get(a.name.0..a.name.1)?;
            Some((CStr::from_bytes_with_nul(name).ok()?, a.ino, a.file_type))
        })
    }
}

impl DirCursor {
    /// A cursor over the directory open on `fd` (opened with `O_DIRECTORY`).
    pub fn new(fd: OwnedFd) -> io::Result<Self> {
        let verifier = verifier_of(fd.as_fd())?;
        Ok(Self {
            fd,
            verifier,
            resume: None,
            ahead: Ahead::default(),
        })
    }

    /// The cookie a [`Self::read`] resumes from without a seek, when the
    /// last page stopped before the end of the directory.
    pub fn resume_cookie(&self) -> Option<u64> {
        self.resume
    }

    /// Bytes of entries read ahead and held for the next page (at most
    /// about one `getdents64` buffer, [`MAX_BUF`]).
    pub fn held_bytes(&self) -> usize {
        self.ahead.bytes()
    }

    /// A copy of at most `max` of the entries read ahead and held for
    /// the next page ([`Self::resume_cookie`]), in directory order: what
    /// that page will list first, so their attributes can be read ahead
    /// on another thread while this page's reply is sent.
    pub fn held_entries(&self, max: usize) -> HeldEntries {
        let mut copy = Ahead::default();
        if self.resume.is_some() {
            for a in self.ahead.entries.iter().take(max) {
                let Some(name) = self
                    .ahead
                    .names
                    .get(a.name.0..a.name.1)
                    .and_then(|b| CStr::from_bytes_with_nul(b).ok())
                else {
                    continue;
                };
                copy.push(name, a.ino, a.file_type, a.cookie);
            }
        }
        HeldEntries(copy)
    }

    /// Reads on from the directory until at least `want` entries are held
    /// for the next page, the directory ends, or the entries held would
    /// take more than about `max_bytes` ([`Self::held_bytes`]; each read
    /// is sized to stay within it): so that the next page's entries are
    /// known, and their attributes can be read ahead, before its call
    /// comes. Only after a page that stopped early (nothing otherwise).
    /// The entries are those the next page would read itself: it goes on
    /// after them from the stream, with no seek.
    pub fn hold_more(&mut self, want: usize, max_bytes: usize) -> Result<(), CursorError> {
        if self.resume.is_none() {
            return Ok(());
        }
        let mut buf: Vec<u8> = Vec::new();
        while self.ahead.entries.len() < want {
            // A held entry takes less than twice its `getdents64` record
            // (a 40-byte `AheadEntry` and the name with its NUL, where
            // the record is the name and 20 bytes rounded up to 8).
            let room = max_bytes.saturating_sub(self.ahead.bytes()) / 2;
            let len = room.min(MAX_BUF);
            if len < MIN_BUF {
                break;
            }
            buf.clear();
            buf.reserve_exact(len);
            let spare = &mut buf.spare_capacity_mut()[..len];
            let mut raw = RawDir::new(self.fd.as_fd(), spare);
            let batch = Ahead::fill(&mut raw)?;
            if batch.entries.is_empty() {
                break;
            }
            self.ahead.append(batch);
        }
        Ok(())
    }

    /// The cookie verifier of this directory (never all zeros, which
    /// clients send to mean "no verifier").
    pub fn verifier(&self) -> [u8; 8] {
        self.verifier
    }

    /// The open directory.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Visits the entries after `cookie` (0: from the start) in directory
    /// order until `visit` returns `false` (that entry is not taken) or the
    /// directory ends. Returns whether it ended: `true` when every entry
    /// after `cookie` was visited and taken. `buf_len` sizes the
    /// `getdents64` buffer (clamped to [`MIN_BUF`]..=[`MAX_BUF`]); pass
    /// about the bytes of entries the page can hold.
    ///
    /// From [`Self::resume_cookie`] the page goes on where the last one
    /// stopped, without a seek (module docs); from any other cookie it
    /// seeks there first.
    pub fn read(
        &mut self,
        cookie: u64,
        buf_len: usize,
        mut visit: impl FnMut(&Entry<'_>) -> bool,
    ) -> Result<bool, CursorError> {
        self.walk(cookie, buf_len, &|_: &Entry<'_>| (), false, |e, ()| {
            visit(e)
        })
    }

    /// [`Self::read`], with `prep` run on each entry before `visit` gets
    /// the entry and its result. `prep` (a `statx` of the entry, say) may
    /// run on a helper thread ahead of `visit`, for the entries of one
    /// `getdents64` buffer at a time ([`crate::inorder`]): the results of
    /// entries read ahead but not taken are dropped, never kept for a
    /// later page, and `prep` may run twice on an entry (the helper's
    /// result then dropped).
    pub fn read_prepared<P: Send>(
        &mut self,
        cookie: u64,
        buf_len: usize,
        prep: &(dyn Fn(&Entry<'_>) -> P + Sync),
        visit: impl FnMut(&Entry<'_>, P) -> bool,
    ) -> Result<bool, CursorError> {
        self.walk(cookie, buf_len, prep, true, visit)
    }

    fn walk<P: Send>(
        &mut self,
        cookie: u64,
        buf_len: usize,
        prep: &(dyn Fn(&Entry<'_>) -> P + Sync),
        parallel: bool,
        mut visit: impl FnMut(&Entry<'_>, P) -> bool,
    ) -> Result<bool, CursorError> {
        let mut last = cookie;
        if self.resume.take() == Some(cookie) {
            let held = std::mem::take(&mut self.ahead);
            if let Some(i) = held.visit(self.fd.as_fd(), prep, parallel, &mut visit, &mut last) {
                self.hold(held, i, last);
                return Ok(false);
            }
        } else {
            self.ahead.clear();
            match rustix::fs::seek(&self.fd, SeekFrom::Start(cookie)) {
                Ok(_) => {}
                Err(Errno::INVAL | Errno::OVERFLOW | Errno::NXIO) => {
                    return Err(CursorError::BadCookie)
                }
                Err(e) => return Err(e.into()),
            }
        }
        let mut buf: Vec<u8> = Vec::with_capacity(buf_len.clamp(MIN_BUF, MAX_BUF));
        let mut raw = RawDir::new(self.fd.as_fd(), buf.spare_capacity_mut());
        loop {
            let batch = Ahead::fill(&mut raw)?;
            if batch.entries.is_empty() {
                return Ok(true);
            }
            if let Some(i) = batch.visit(self.fd.as_fd(), prep, parallel, &mut visit, &mut last) {
                self.hold(batch, i, last);
                return Ok(false);
            }
        }
    }

    /// Keeps the entries of `batch` from the refused `i` on for the next
    /// page, which resumes at `last`.
    fn hold(&mut self, mut batch: Ahead, i: usize, last: u64) {
        batch.entries.drain(..i);
        self.ahead = batch;
        self.resume = Some(last);
    }
}

impl Ahead {
    /// The entries of one `getdents64` read (none at the end of the
    /// directory).
    fn fill(raw: &mut RawDir<'_, BorrowedFd<'_>>) -> Result<Self, CursorError> {
        let mut batch = Self::default();
        let Some(first) = raw.next() else {
            return Ok(batch);
        };
        let e = first?;
        batch.push(e.file_name(), e.ino(), e.file_type(), e.next_entry_cookie());
        while !raw.is_buffer_empty() {
            match raw.next() {
                Some(Ok(e)) => {
                    batch.push(e.file_name(), e.ino(), e.file_type(), e.next_entry_cookie())
                }
                Some(Err(e)) => return Err(e.into()),
                None => break,
            }
        }
        Ok(batch)
    }

    /// Entry `i` of the batch, in directory `dir`.
    fn entry<'a>(&'a self, i: usize, dir: BorrowedFd<'a>) -> Option<Entry<'a>> {
        let a = self.entries.get(i)?;
        let bytes = self.names.get(a.name.0..a.name.1)?;
        Some(Entry {
            name: CStr::from_bytes_with_nul(bytes).ok()?,
            ino: a.ino,
            file_type: a.file_type,
            cookie: a.cookie,
            dir,
        })
    }

    /// Hands the entries to `visit` in order, each with its `prep`
    /// result: the index of the one refused, if any; `last` follows the
    /// cookie of the last one taken.
    fn visit<P: Send>(
        &self,
        dir: BorrowedFd<'_>,
        prep: &(dyn Fn(&Entry<'_>) -> P + Sync),
        parallel: bool,
        visit: &mut impl FnMut(&Entry<'_>, P) -> bool,
        last: &mut u64,
    ) -> Option<usize> {
        let len = self.entries.len();
        if !parallel || !crate::inorder::may_share(len) {
            // One `Entry` per entry for both steps.
            return (0..self.entries.len()).find(|&i| {
                let Some(e) = self.entry(i, dir) else {
                    return false; // never: `push` ends each name
                };
                let taken = visit(&e, prep(&e));
                if taken {
                    *last = e.cookie;
                }
                !taken
            });
        }
        let prep_at = |i: usize| self.entry(i, dir).map(|e| prep(&e));
        let take = |i: usize, p: Option<P>| match (self.entry(i, dir), p) {
            (Some(e), Some(p)) => {
                let taken = visit(&e, p);
                if taken {
                    *last = e.cookie;
                }
                taken
            }
            _ => true, // a name that is not one (never: `push` ends it)
        };
        crate::inorder::map_in_order(len, prep_at, take)
    }
}

/// 64-bit FNV-1a: stable across releases, unlike std's hasher, so
/// verifiers survive a server upgrade that keeps the scheme.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in parts.iter().flat_map(|p| p.iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The verifier of the directory open on `fd` (see the module docs).
fn verifier_of(fd: BorrowedFd<'_>) -> io::Result<[u8; 8]> {
    let want = StatxFlags::INO | StatxFlags::BTIME | StatxFlags::MTIME;
    let x = rustix::fs::statx(fd, c"", AtFlags::EMPTY_PATH, want)?;
    let btime = if x.stx_mask & StatxFlags::BTIME.bits() != 0 {
        (x.stx_btime.tv_sec, x.stx_btime.tv_nsec)
    } else {
        (0, 0)
    };
    let stable = offsets_stable(rustix::fs::fstatfs(fd)?.f_type as u64, kernel_release());
    let mtime = if stable {
        (0, 0)
    } else {
        (x.stx_mtime.tv_sec, x.stx_mtime.tv_nsec)
    };
    let h = fnv1a(&[
        SCHEME,
        &x.stx_dev_major.to_be_bytes(),
        &x.stx_dev_minor.to_be_bytes(),
        &x.stx_ino.to_be_bytes(),
        &btime.0.to_be_bytes(),
        &btime.1.to_be_bytes(),
        &mtime.0.to_be_bytes(),
        &mtime.1.to_be_bytes(),
    ]);
    Ok(h.max(1).to_be_bytes())
}

const TMPFS_MAGIC: u64 = 0x0102_1994;
const RAMFS_MAGIC: u64 = 0x8584_58f6;

/// Whether directory offsets on a file system of type `magic` stay with
/// their entries when other entries are removed (see the module docs):
/// not on ramfs, and on tmpfs only from Linux 6.6 on.
fn offsets_stable(magic: u64, release: (u32, u32)) -> bool {
    match magic {
        RAMFS_MAGIC => false,
        TMPFS_MAGIC => release >= (6, 6),
        _ => true,
    }
}

/// The running kernel's (major, minor) version; (0, 0) when unknown.
fn kernel_release() -> (u32, u32) {
    static REL: OnceLock<(u32, u32)> = OnceLock::new();
    *REL.get_or_init(|| {
        let s = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        parse_release(&s)
    })
}

fn parse_release(s: &str) -> (u32, u32) {
    let mut it = s.trim().split(['.', '-']);
    let mut num = || it.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (num(), num())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{Mode, OFlags, CWD};
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    struct Tmp(PathBuf);
    impl Tmp {
        fn new(tag: &str) -> Self {
            let p = std::env::temp_dir().join(format!("dircursor-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Self(p)
        }
    }
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn open(p: &Path) -> DirCursor {
        let fd = rustix::fs::openat(
            CWD,
            p,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        DirCursor::new(fd).unwrap()
    }

    /// One page of at most `n` entries after `cookie`: (names, last
    /// cookie, eof), each page from a fresh open as a server call does.
    fn page(p: &Path, cookie: u64, n: usize) -> (Vec<String>, u64, bool) {
        let mut c = open(p);
        let mut names = Vec::new();
        let mut last = cookie;
        let eof = c
            .read(cookie, 0, |e| {
                if names.len() == n {
                    return false;
                }
                names.push(String::from_utf8(e.name().to_vec()).unwrap());
                last = e.cookie();
                true
            })
            .unwrap();
        (names, last, eof)
    }

    #[test]
    fn pages_while_entries_come_and_go_return_untouched_entries_once() {
        let t = Tmp::new("churn");
        for i in 0..600 {
            std::fs::write(t.0.join(format!("keep-{i}")), b"").unwrap();
        }
        for i in 0..300 {
            std::fs::write(t.0.join(format!("gone-{i}")), b"").unwrap();
        }
        let mut seen: BTreeMap<String, u32> = BTreeMap::new();
        let (mut cookie, mut round) = (0, 0);
        loop {
            let (names, last, eof) = page(&t.0, cookie, 7);
            for n in names {
                *seen.entry(n).or_default() += 1;
            }
            cookie = last;
            // Between pages: remove a few, create a few more.
            for k in 0..3 {
                let _ = std::fs::remove_file(t.0.join(format!("gone-{}", round * 3 + k)));
                std::fs::write(t.0.join(format!("new-{round}-{k}")), b"").unwrap();
            }
            round += 1;
            if eof {
                break;
            }
        }
        for i in 0..600 {
            assert_eq!(seen.get(&format!("keep-{i}")), Some(&1), "keep-{i}");
        }
        assert!(seen.values().all(|&v| v == 1), "an entry came twice");
        assert_eq!(seen.get("."), Some(&1));
        assert_eq!(seen.get(".."), Some(&1));
    }

    #[test]
    fn concurrent_writer_does_not_make_untouched_entries_repeat_or_vanish() {
        let t = Tmp::new("thread");
        for i in 0..1000 {
            std::fs::write(t.0.join(format!("keep-{i}")), b"").unwrap();
        }
        let dir = t.0.clone();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = stop.clone();
        let w = std::thread::spawn(move || {
            let mut i = 0u32;
            while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                let p = dir.join(format!("tmp-{}", i % 64));
                if i % 2 == 0 {
                    let _ = std::fs::write(&p, b"");
                } else {
                    let _ = std::fs::remove_file(dir.join(format!("tmp-{}", (i * 7) % 64)));
                }
                i += 1;
            }
        });
        let mut keep = Vec::new();
        let mut cookie = 0;
        loop {
            let (names, last, eof) = page(&t.0, cookie, 5);
            keep.extend(names.into_iter().filter(|n| n.starts_with("keep-")));
            cookie = last;
            if eof {
                break;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        w.join().unwrap();
        let set: BTreeSet<_> = keep.iter().cloned().collect();
        assert_eq!((keep.len(), set.len()), (1000, 1000));
    }

    #[test]
    fn a_cookie_the_file_system_refuses_is_bad_cookie() {
        let t = Tmp::new("bad");
        std::fs::write(t.0.join("a"), b"").unwrap();
        let mut c = open(&t.0);
        let r = c.read(1 << 63, 0, |_| true);
        assert!(matches!(r, Err(CursorError::BadCookie)), "{r:?}");
        // The cursor still works from a good cookie.
        let mut n = 0;
        assert!(c
            .read(0, 0, |_| {
                n += 1;
                true
            })
            .unwrap());
        assert_eq!(n, 3);
    }

    #[test]
    fn verifier_is_stable_across_changes_and_differs_for_a_recreated_dir() {
        let t = Tmp::new("verf");
        let d = t.0.join("d");
        std::fs::create_dir(&d).unwrap();
        let v1 = open(&d).verifier();
        std::fs::write(d.join("x"), b"").unwrap();
        std::fs::remove_file(d.join("x")).unwrap();
        assert_eq!(open(&d).verifier(), v1);
        std::fs::remove_dir(&d).unwrap();
        std::fs::create_dir(&d).unwrap();
        assert_ne!(open(&d).verifier(), v1);
        assert_ne!(v1, [0; 8]);
    }

    #[test]
    fn count_offsets_only_on_ramfs_and_old_tmpfs() {
        assert!(!offsets_stable(RAMFS_MAGIC, (6, 18)));
        assert!(!offsets_stable(TMPFS_MAGIC, (6, 5)));
        assert!(offsets_stable(TMPFS_MAGIC, (6, 6)));
        assert!(offsets_stable(0xEF53, (4, 19)));
        assert_eq!(parse_release("6.18.44-fc-v657\n"), (6, 18));
        assert_eq!(parse_release("junk"), (0, 0));
    }
}
