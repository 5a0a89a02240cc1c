//! READ data left in the file for the transport to send
//! ([`ReadData::File`]): on plain TCP the reply's data goes from the page
//! cache to the socket with `sendfile`, without the two copies through a
//! user-space buffer (page cache to buffer, buffer to socket) that a
//! READ otherwise costs.
//!
//! Only for a READ larger than [`FILE_READ_MIN`] whose first and last
//! bytes the page cache holds (a smaller one is read on the runtime
//! thread without waiting, [`super::rw`]; one that would wait for the
//! disk is read under a thread hand-off, which also brings it into the
//! cache): the writer task that sends the range must not wait for the
//! disk. A page evicted between the check and the send makes that
//! writer wait once.
//!
//! Each reply holds its file open until it is written; at most
//! [`MAX_HELD_FILES`] at once for the whole server (trips the
//! `nfs.read_held_files` limit: beyond it READs copy the bytes as
//! before, so a client that does not read its replies cannot make the
//! server hold descriptors without bound; the TCP reply budget bounds
//! the replies themselves).

use std::io;
use std::io::IoSliceMut;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use oncrpc::limits::Limit;
use rustix::io::ReadWriteFlags;
use xdr::FileSource;

use crate::storage::ReadData;

/// READs of more bytes than this may be left in the file.
pub(crate) const FILE_READ_MIN: usize = super::rw::NOWAIT_READ_MAX;

/// File ranges replies may hold open at once, server-wide: 256 READs
/// of 1 MiB are the TCP shells' default reply budget
/// (`oncrpc::tcp::TcpConfig::max_server_reply_bytes`), and 256
/// descriptors leave most of a default limit of 1024 to the rest.
pub(crate) const MAX_HELD_FILES: usize = 256;

static HELD: AtomicUsize = AtomicUsize::new(0);
pub(super) static HELD_FILES: Limit = Limit::new("nfs.read_held_files");

/// An open file a reply holds until it is sent; counted in [`HELD`].
#[derive(Debug)]
struct HeldFile(Arc<OwnedFd>);

impl FileSource for HeldFile {
    fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        Ok(rustix::io::pread(&self.0, buf, offset)?)
    }
}

impl Drop for HeldFile {
    fn drop(&mut self) {
        HELD.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `len` bytes of `f` at `offset` left in the file, when the READ is
/// large enough, the page cache holds its ends and the bound allows;
/// else `f` back.
pub(crate) fn leave_in_file(
    f: Arc<OwnedFd>,
    offset: u64,
    len: usize,
) -> Result<ReadData, Arc<OwnedFd>> {
    if len <= FILE_READ_MIN || !cached(&f, offset) || !cached(&f, offset + len as u64 - 1) {
        return Err(f);
    }
    let taken = HELD.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
        (n < MAX_HELD_FILES).then_some(n + 1)
    });
    if taken.is_err() {
        HELD_FILES.trip(format_args!(
            "{MAX_HELD_FILES} READ replies hold their files; copying the data instead"
        ));
        return Err(f);
    }
    Ok(ReadData::File {
        file: Arc::new(HeldFile(f)),
        offset,
        len,
    })
}

/// Whether the page cache holds the byte at `offset` (a one-byte
/// `preadv2(RWF_NOWAIT)`, which never waits for the disk).
fn cached(f: &OwnedFd, offset: u64) -> bool {
    let mut b = [0u8; 1];
    matches!(
        rustix::io::preadv2(
            f,
            &mut [IoSliceMut::new(&mut b)],
            offset,
            ReadWriteFlags::NOWAIT
        ),
        Ok(1)
    )
}
