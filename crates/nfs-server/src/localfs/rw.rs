//! NFSv3 READ and WRITE in one pass ([`Storage::read_checked`],
//! [`Storage::write_checked`]; RFC 1813 §3.3.6, §3.3.7).
//!
//! The handle is resolved once: the `statx` that checks it gives the
//! attributes for the permission check and for WRITE's `pre_op_attr`.
//! The file's descriptor is the one kept from an earlier call
//! ([`super::files`]), whose attributes are those of the resolution, or
//! the file is opened from its directory, and the `statx` that checks
//! the opened descriptor is the right inode gives them. They give the
//! size the READ is cut to and READ's `post_op_attr` (taken just before
//! the bytes are read: a read changes at most the access time).
//!
//! The metadata steps (index lookup, `statx` of a name in a directory
//! whose descriptor is held open, `openat`) run on the calling runtime
//! thread. So do the data copies when the page cache serves them without
//! waiting: a READ of up to [`NOWAIT_READ_MAX`] bytes tries
//! `preadv2(RWF_NOWAIT)` first, an UNSTABLE WRITE `pwritev2(RWF_NOWAIT)`
//! (until the file system says it cannot, `EOPNOTSUPP`). Only what would
//! wait for the disk (the rest of a read, a larger read, a write the
//! kernel would block, FILE_SYNC's `fsync`) goes through
//! [`super::blocking`]: at most one thread hand-off per call, where
//! there used to be one per step (three for a READ, four for a WRITE).
//! A READ stops before that step ([`ReadStep::Wait`]) and yields first,
//! so the NFSv3 service can run READs inline on the connection's task
//! (no task of their own) and a READ that must wait still moves off it.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use nfs::v3::{Fattr3, NfsFh3, Nfsstat3, StableHow};
use rustix::buffer::spare_capacity;
use rustix::io::{Errno, ReadWriteFlags};

use super::attrs::{errno_status, Meta};
use super::files::Access;
use super::io::sync_fd;
use super::resolve::Node;
use super::{blocking, held, LocalFs, MAX_READ};
use crate::storage::{May, ReadData, ReadDone, StorageResult, WriteDone};

/// Largest READ first tried on the runtime thread with `RWF_NOWAIT`.
/// `preadv2` wants an initialised buffer, so this many bytes are zeroed
/// first; a larger READ reads into the buffer's spare capacity under
/// [`super::blocking`] instead (zeroing 1 MiB cost 8% of the server's CPU
/// in a sequential read).
pub(crate) const NOWAIT_READ_MAX: usize = 64 * 1024;

/// A READ that could not finish without waiting for the disk: the
/// opened file and what is read of it so far ([`Self::finish`]).
pub(crate) struct ReadRest {
    f: Arc<OwnedFd>,
    offset: u64,
    want: usize,
    buf: Vec<u8>,
    size: u64,
    attrs: Fattr3,
}

impl ReadRest {
    /// Reads the rest under [`blocking`] (one thread hand-off).
    pub(crate) fn finish(mut self) -> ReadDone {
        let read = read_rest(&self.f, self.offset, self.want, &mut self.buf);
        let eof = self.offset.saturating_add(self.buf.len() as u64) >= self.size;
        ReadDone {
            data: read.map(|()| (ReadData::Bytes(Bytes::from(self.buf)), eof)),
            attrs: Some(self.attrs),
        }
    }
}

/// How far a READ got on the runtime thread.
pub(crate) enum ReadStep {
    /// Done: the bytes (or why none), with the attributes.
    Done(ReadDone),
    /// The rest would wait for the disk.
    Wait(ReadRest),
}

impl LocalFs {
    /// A READ as far as it goes without waiting for the disk: the
    /// handle resolved once, the permission check, the file opened and,
    /// when the page cache serves them at once, the bytes.
    pub(crate) fn read_checked_now(
        &self,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
        may: May<'_>,
        files: bool,
    ) -> ReadStep {
        let node = match self.resolve(fh) {
            Ok(n) => n,
            Err(e) => {
                return ReadStep::Done(ReadDone {
                    data: Err(e),
                    attrs: None,
                })
            }
        };
        let attrs = node.meta.fattr(self.fsid());
        if let Err(e) = may(&attrs) {
            return ReadStep::Done(ReadDone {
                data: Err(e),
                attrs: Some(attrs),
            });
        }
        match self.read_node(&node, offset, count, files) {
            Ok(Now::Read(data, eof, meta)) => ReadStep::Done(ReadDone {
                data: Ok((data, eof)),
                attrs: Some(meta.fattr(self.fsid())),
            }),
            Ok(Now::Rest(rest)) => ReadStep::Wait(rest),
            Err(e) => ReadStep::Done(ReadDone {
                data: Err(e),
                attrs: Some(attrs),
            }),
        }
    }

    /// Up to `count` bytes of regular file `node` at `offset`, whether
    /// they reach its end, and its attributes when opened; or what is
    /// left to read when that would wait. With `files`, a large cached
    /// range is left in the file ([`held`]).
    fn read_node(&self, node: &Node, offset: u64, count: u32, files: bool) -> StorageResult<Now> {
        regular(node)?;
        let (f, meta) = self.open_kept(node, Access::Read)?;
        let size = meta.size();
        let want = u64::from(count.min(MAX_READ)).min(size.saturating_sub(offset));
        let want = usize::try_from(want).unwrap_or(0);
        let f = if files {
            match held::leave_in_file(f, offset, want) {
                Ok(data) => return Ok(Now::Read(data, offset + want as u64 >= size, meta)),
                Err(f) => f,
            }
        } else {
            f
        };
        match read_now(&f, offset, want)? {
            Ok(buf) => {
                let eof = offset.saturating_add(buf.len() as u64) >= size;
                Ok(Now::Read(ReadData::Bytes(Bytes::from(buf)), eof, meta))
            }
            Err(buf) => Ok(Now::Rest(ReadRest {
                f,
                offset,
                want,
                buf,
                size,
                attrs: meta.fattr(self.fsid()),
            })),
        }
    }

    pub(crate) fn write_checked_now(
        &self,
        fh: &NfsFh3,
        offset: u64,
        data: &[u8],
        stable: StableHow,
        may: May<'_>,
    ) -> WriteDone {
        let node = match self.resolve(fh) {
            Ok(n) => n,
            Err(e) => {
                return WriteDone {
                    before: None,
                    written: Err(e),
                    after: None,
                }
            }
        };
        let before = node.meta.fattr(self.fsid());
        let (written, after) = match may(&before) {
            Ok(()) => self.write_node(&node, offset, data, stable),
            Err(e) => (Err(e), None),
        };
        WriteDone {
            after: Some(after.map_or_else(|| before.clone(), |m| m.fattr(self.fsid()))),
            before: Some(before),
            written,
        }
    }

    /// Writes `data` into regular file `node`; how stable it is, and the
    /// file's attributes afterwards when it was opened.
    fn write_node(
        &self,
        node: &Node,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> (StorageResult<StableHow>, Option<Meta>) {
        if self.read_only {
            return (Err(Nfsstat3::NFS3ERR_ROFS), None);
        }
        if let Err(e) = regular(node) {
            return (Err(e), None);
        }
        if offset
            .checked_add(data.len() as u64)
            .is_none_or(|e| e > i64::MAX as u64)
        {
            return (Err(Nfsstat3::NFS3ERR_FBIG), None);
        }
        let f = match self.open_kept(node, Access::Write) {
            Ok((f, _)) => f,
            Err(e) => return (Err(e), None),
        };
        let written = self.write_at(&f, offset, data, stable);
        (written, Meta::of(&f).ok())
    }

    /// Writes all of `data` at `offset`: an UNSTABLE write first without
    /// waiting, the rest (and FILE_SYNC's `fsync`) under [`blocking`].
    fn write_at(
        &self,
        f: &OwnedFd,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> StorageResult<StableHow> {
        let mut done = 0;
        if stable == StableHow::UNSTABLE && self.nowait_writes.load(Ordering::Relaxed) {
            match rustix::io::pwritev2(f, &[IoSlice::new(data)], offset, ReadWriteFlags::NOWAIT) {
                Ok(n) => done = n,
                Err(Errno::AGAIN | Errno::INTR) => {}
                Err(Errno::OPNOTSUPP) => self.nowait_writes.store(false, Ordering::Relaxed),
                Err(e) => return Err(errno_status(e)),
            }
            if done == data.len() {
                return Ok(StableHow::UNSTABLE);
            }
        }
        blocking(|| {
            while done < data.len() {
                let rest = data.get(done..).unwrap_or_default();
                match rustix::io::pwrite(f, rest, offset + done as u64) {
                    Ok(0) => return Err(Nfsstat3::NFS3ERR_IO),
                    Ok(n) => done += n,
                    Err(Errno::INTR) => {}
                    Err(e) => return Err(errno_status(e)),
                }
            }
            if stable == StableHow::UNSTABLE {
                Ok(StableHow::UNSTABLE)
            } else {
                sync_fd(f)?;
                Ok(StableHow::FILE_SYNC)
            }
        })
    }
}

/// ISDIR for a directory, INVAL for anything but a regular file.
fn regular(node: &Node) -> StorageResult<()> {
    if node.meta.is_dir() {
        Err(Nfsstat3::NFS3ERR_ISDIR)
    } else if !node.meta.is_file() {
        Err(Nfsstat3::NFS3ERR_INVAL)
    } else {
        Ok(())
    }
}

/// What [`LocalFs::read_node`] got on the runtime thread.
enum Now {
    Read(ReadData, bool, Meta),
    Rest(ReadRest),
}

/// `want` bytes at `offset` (fewer at the end of the file) when the page
/// cache serves a small read at once (`preadv2(RWF_NOWAIT)`); else
/// `Err` with what was read so far, for [`read_rest`].
fn read_now(f: &OwnedFd, offset: u64, want: usize) -> StorageResult<Result<Vec<u8>, Vec<u8>>> {
    let mut buf = Vec::new();
    if want == 0 {
        return Ok(Ok(buf));
    }
    if want > NOWAIT_READ_MAX {
        return Ok(Err(buf));
    }
    buf.resize(want, 0);
    let flags = ReadWriteFlags::NOWAIT;
    let got = match rustix::io::preadv2(f, &mut [IoSliceMut::new(&mut buf)], offset, flags) {
        // The end of the file (it shrank since it was opened).
        Ok(0) => {
            buf.clear();
            return Ok(Ok(buf));
        }
        Ok(n) => n,
        Err(Errno::AGAIN | Errno::INTR | Errno::OPNOTSUPP) => 0,
        Err(e) => return Err(errno_status(e)),
    };
    buf.truncate(got);
    Ok(if got == want { Ok(buf) } else { Err(buf) })
}

/// Reads the rest of `want` bytes at `offset` after the `buf.len()`
/// already read, under [`blocking`], straight into the spare capacity (no
/// zero-fill of a buffer the read overwrites); fewer at the end of the
/// file.
fn read_rest(f: &OwnedFd, offset: u64, want: usize, buf: &mut Vec<u8>) -> StorageResult<()> {
    buf.reserve_exact(want.saturating_sub(buf.len()));
    blocking(|| {
        while buf.len() < want {
            let at = offset + buf.len() as u64;
            match rustix::io::pread(f, spare_capacity(buf), at) {
                Ok(0) => break,
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => return Err(errno_status(e)),
            }
        }
        Ok(())
    })?;
    buf.truncate(want);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::localfs::tests::{block, name, Tmp};
    use crate::storage::Storage;
    use nfs::v3::Fattr3;

    fn allow(_: &Fattr3) -> StorageResult<()> {
        Ok(())
    }

    fn multi_thread() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap()
    }

    #[test]
    fn read_checked_returns_the_bytes_and_the_attributes_small_and_large() {
        let t = Tmp::new("rw-read");
        let data: Vec<u8> = (0..=250u8).cycle().take(2 * 1024 * 1024 + 9).collect();
        fs::write(t.0.join("f"), &data).unwrap();
        let lfs = LocalFs::new(&t.0, false).unwrap();
        let fh = block(lfs.lookup(&lfs.root(), &name("f"))).unwrap();
        let attrs = block(lfs.getattr(&fh)).unwrap();
        // Both paths: a small READ tried without waiting, a large one
        // read under `blocking`, on a current-thread runtime and on a
        // multi-threaded one (where `blocking` hands the worker off).
        let rt = multi_thread();
        for (offset, count) in [
            (3u64, 4096u32),
            (100, 65536),
            (7, MAX_READ),
            (2 << 20, 4096),
        ] {
            let want = &data[offset as usize..data.len().min((offset + u64::from(count)) as usize)];
            let eof = offset as usize + want.len() == data.len();
            let seen = AtomicUsize::new(0);
            let may = |a: &Fattr3| {
                seen.fetch_add(1, Ordering::Relaxed);
                assert_eq!(a.size, data.len() as u64);
                Ok(())
            };
            for done in [
                block(lfs.read_checked(&fh, offset, count, &may, false)),
                rt.block_on(lfs.read_checked(&fh, offset, count, &may, false)),
            ] {
                let (got, got_eof) = done.data.unwrap();
                let want = ReadData::Bytes(Bytes::copy_from_slice(want));
                assert_eq!((got, got_eof), (want, eof), "{offset} {count}");
                let a = done.attrs.unwrap();
                assert_eq!(
                    (a.fileid, a.size, a.mtime),
                    (attrs.fileid, attrs.size, attrs.mtime)
                );
            }
            assert_eq!(seen.load(Ordering::Relaxed), 2);
        }
        // Past the end: nothing, eof.
        let done = block(lfs.read_checked(&fh, 1 << 40, 10, &allow, true));
        assert_eq!(done.data, Ok((Bytes::new().into(), true)));
    }

    /// Whether `f` finishes on its first poll, and its output.
    fn first_poll<F: core::future::Future>(f: F) -> (bool, F::Output) {
        let rt = multi_thread();
        rt.block_on(async {
            let mut f = std::pin::pin!(f);
            let first = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(core::future::Future::poll(f.as_mut(), cx))
            })
            .await;
            match first {
                std::task::Poll::Ready(out) => (true, out),
                std::task::Poll::Pending => (false, f.await),
            }
        })
    }

    /// A transport runs a call inline up to its first wait: a small READ
    /// the page cache serves finishes there (no task, no thread of its
    /// own); one that would block the thread (here a large READ of bytes
    /// the transport cannot send from the file) yields before it does,
    /// and still returns the bytes.
    #[test]
    fn a_cached_small_read_finishes_on_its_first_poll_and_a_blocking_one_yields_first() {
        let t = Tmp::new("rw-inline");
        let data: Vec<u8> = (0..=250u8).cycle().take(MAX_READ as usize + 77).collect();
        fs::write(t.0.join("f"), &data).unwrap();
        let lfs = LocalFs::new(&t.0, false).unwrap();
        let fh = block(lfs.lookup(&lfs.root(), &name("f"))).unwrap();
        let _ = fs::read(t.0.join("f")).unwrap(); // in the page cache
        for (offset, count, inline) in [
            (100u64, 4096u32, true),
            (0, NOWAIT_READ_MAX as u32, true),
            (7, MAX_READ, false),
        ] {
            let (ready, done) = first_poll(lfs.read_checked(&fh, offset, count, &allow, false));
            assert_eq!(ready, inline, "{offset} {count}");
            let end = data.len().min((offset + u64::from(count)) as usize);
            let want = ReadData::Bytes(Bytes::copy_from_slice(&data[offset as usize..end]));
            assert_eq!(done.data, Ok((want, end == data.len())), "{offset} {count}");
        }
        // Refused before any byte is read: no wait either.
        let refuse = |_: &Fattr3| Err(Nfsstat3::NFS3ERR_ACCES);
        let (ready, done) = first_poll(lfs.read_checked(&fh, 0, MAX_READ, &refuse, false));
        assert!(ready);
        assert_eq!(done.data, Err(Nfsstat3::NFS3ERR_ACCES));
    }

    /// Held by the tests that count held files (one fills the bound).
    static HELD_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// The bytes of a READ's data, read in if left in the file.
    fn bytes_of(d: ReadData) -> Vec<u8> {
        match d {
            ReadData::Bytes(b) => b.to_vec(),
            ReadData::File { file, offset, len } => {
                let mut buf = vec![0u8; len];
                assert_eq!(file.read_at(&mut buf, offset).unwrap(), len);
                buf
            }
        }
    }

    #[test]
    fn a_large_cached_read_is_left_in_the_file_when_the_transport_sends_files() {
        let _one = HELD_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        let t = Tmp::new("rw-files");
        let data: Vec<u8> = (0..=250u8).cycle().take(MAX_READ as usize + 4099).collect();
        fs::write(t.0.join("f"), &data).unwrap();
        let lfs = LocalFs::new(&t.0, false).unwrap();
        let fh = block(lfs.lookup(&lfs.root(), &name("f"))).unwrap();
        let _ = fs::read(t.0.join("f")).unwrap(); // in the page cache
        for (offset, count, file, eof) in [
            (5u64, MAX_READ, true, false),
            (4099, MAX_READ, true, true),
            (0, held::FILE_READ_MIN as u32 + 1, true, false),
            (0, held::FILE_READ_MIN as u32, false, false),
            (100, 4096, false, false),
        ] {
            let done = block(lfs.read_checked(&fh, offset, count, &allow, true));
            let (got, got_eof) = done.data.unwrap();
            assert_eq!(
                matches!(got, ReadData::File { .. }),
                file,
                "{offset} {count}"
            );
            assert_eq!(got_eof, eof, "{offset} {count}");
            let end = data.len().min(offset as usize + count as usize);
            assert_eq!(
                bytes_of(got),
                &data[offset as usize..end],
                "{offset} {count}"
            );
        }
        // Not for a transport that does not send files.
        let done = block(lfs.read_checked(&fh, 0, MAX_READ, &allow, false));
        assert!(matches!(done.data, Ok((ReadData::Bytes(_), false))));
    }

    #[test]
    fn held_files_are_bounded_and_beyond_the_bound_reads_copy() {
        let _one = HELD_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        let t = Tmp::new("rw-held");
        fs::write(t.0.join("f"), vec![9u8; 256 * 1024]).unwrap();
        let lfs = LocalFs::new(&t.0, false).unwrap();
        let fh = block(lfs.lookup(&lfs.root(), &name("f"))).unwrap();
        let _ = fs::read(t.0.join("f")).unwrap();
        let before = held::HELD_FILES.count();
        let mut kept = Vec::new();
        // Up to the bound READs hold their files (less what other tests
        // hold now); the next one copies the data and counts the trip.
        let refused = loop {
            let done = block(lfs.read_checked(&fh, 0, 200 * 1024, &allow, true));
            match done.data.unwrap().0 {
                d @ ReadData::File { .. } => kept.push(d),
                ReadData::Bytes(b) => break b,
            }
            assert!(kept.len() <= held::MAX_HELD_FILES, "no bound");
        };
        assert_eq!(refused.len(), 200 * 1024);
        assert!(held::HELD_FILES.count() > before);
        assert!(kept.len() + 4 >= held::MAX_HELD_FILES, "{}", kept.len());
        // Sent (dropped): the files are free again.
        drop(kept);
        let done = block(lfs.read_checked(&fh, 0, 200 * 1024, &allow, true));
        assert!(matches!(done.data, Ok((ReadData::File { .. }, _))));
    }

    #[test]
    fn read_checked_refused_or_not_a_file_reads_nothing() {
        let t = Tmp::new("rw-refuse");
        fs::write(t.0.join("f"), b"secret").unwrap();
        fs::create_dir(t.0.join("d")).unwrap();
        let lfs = LocalFs::new(&t.0, false).unwrap();
        let fh = block(lfs.lookup(&lfs.root(), &name("f"))).unwrap();
        let deny = |_: &Fattr3| Err(Nfsstat3::NFS3ERR_ACCES);
        let done = block(lfs.read_checked(&fh, 0, 10, &deny, true));
        assert_eq!(done.data, Err(Nfsstat3::NFS3ERR_ACCES));
        assert_eq!(done.attrs.map(|a| a.size), Some(6));
        let d = block(lfs.lookup(&lfs.root(), &name("d"))).unwrap();
        let done = block(lfs.read_checked(&d, 0, 10, &allow, true));
        assert_eq!(done.data, Err(Nfsstat3::NFS3ERR_ISDIR));
        // A removed file's handle: STALE, no attributes.
        fs::remove_file(t.0.join("f")).unwrap();
        let done = block(lfs.read_checked(&fh, 0, 10, &allow, true));
        assert_eq!(
            (done.data, done.attrs),
            (Err(Nfsstat3::NFS3ERR_STALE), None)
        );
    }

    #[test]
    fn write_checked_writes_with_before_and_after_attributes() {
        let t = Tmp::new("rw-write");
        fs::write(t.0.join("f"), b"0123456789").unwrap();
        let lfs = LocalFs::new(&t.0, false).unwrap();
        let fh = block(lfs.lookup(&lfs.root(), &name("f"))).unwrap();
        let rt = multi_thread();
        let done = rt.block_on(lfs.write_checked(&fh, 8, b"abcd", StableHow::UNSTABLE, &allow));
        assert_eq!(done.written, Ok(StableHow::UNSTABLE));
        assert_eq!(done.before.map(|a| a.size), Some(10));
        assert_eq!(done.after.map(|a| a.size), Some(12));
        let big = vec![7u8; MAX_READ as usize];
        let done = block(lfs.write_checked(&fh, 12, &big, StableHow::FILE_SYNC, &allow));
        assert_eq!(done.written, Ok(StableHow::FILE_SYNC));
        assert_eq!(done.after.map(|a| a.size), Some(12 + big.len() as u64));
        let on_disk = fs::read(t.0.join("f")).unwrap();
        assert_eq!(&on_disk[..12], b"01234567abcd");
        assert!(on_disk[12..].iter().all(|&b| b == 7));
        // Refused: nothing written, the attributes unchanged.
        let deny = |_: &Fattr3| Err(Nfsstat3::NFS3ERR_ACCES);
        let done = block(lfs.write_checked(&fh, 0, b"zz", StableHow::UNSTABLE, &deny));
        assert_eq!(done.written, Err(Nfsstat3::NFS3ERR_ACCES));
        assert_eq!(done.before, done.after);
        assert_eq!(&fs::read(t.0.join("f")).unwrap()[..2], b"01");
        // Beyond the largest offset: FBIG before anything is written.
        let done =
            block(lfs.write_checked(&fh, i64::MAX as u64, b"z", StableHow::UNSTABLE, &allow));
        assert_eq!(done.written, Err(Nfsstat3::NFS3ERR_FBIG));
    }

    #[test]
    fn write_checked_on_a_read_only_export_or_directory_writes_nothing() {
        let t = Tmp::new("rw-ro");
        fs::write(t.0.join("f"), b"data").unwrap();
        fs::set_permissions(t.0.join("f"), fs::Permissions::from_mode(0o644)).unwrap();
        let ro = LocalFs::new(&t.0, true).unwrap();
        let fh = block(ro.lookup(&ro.root(), &name("f"))).unwrap();
        let done = block(ro.write_checked(&fh, 0, b"x", StableHow::FILE_SYNC, &allow));
        assert_eq!(done.written, Err(Nfsstat3::NFS3ERR_ROFS));
        assert_eq!(fs::read(t.0.join("f")).unwrap(), b"data");
        let rw = LocalFs::new(&t.0, false).unwrap();
        let root = rw.root();
        let done = block(rw.write_checked(&root, 0, b"x", StableHow::UNSTABLE, &allow));
        assert_eq!(done.written, Err(Nfsstat3::NFS3ERR_ISDIR));
    }
}
