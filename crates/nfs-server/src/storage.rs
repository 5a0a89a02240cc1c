//! The storage interface the NFSv3 and NFSv4 services run on.
//!
//! Every method works on NFS file handles and returns a typed
//! [`Nfsstat3`] on failure, so a back end decides the error a client sees.
//! Weak cache consistency data is assembled by the service from
//! [`Storage::getattr`] before and after a change (RFC 1813 §2.6 allows
//! attributes that are not atomic with the operation as long as
//! `pre_op_attr` is then omitted; the service omits nothing but takes the
//! figures as close to the change as it can).

use core::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use nfs::v3::{
    Createhow3, Fattr3, Filename3, Mknoddata3, NfsFh3, Nfsstat3, Nfstime3, Sattr3, StableHow,
};
use xdr::{Encoder, FileSource, XdrBuf};

/// Result of a storage call.
pub type StorageResult<T> = Result<T, Nfsstat3>;

/// One directory entry as READDIR/READDIRPLUS return it, borrowed from
/// the back end for the time the sink looks at it (nothing is allocated
/// per entry: a sink copies what it keeps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry<'a> {
    /// File id (inode number).
    pub fileid: u64,
    /// Name.
    pub name: &'a [u8],
    /// Cookie that resumes after this entry.
    pub cookie: u64,
    /// With [`DirRequest::plus`]: the entry's handle (its bytes) and
    /// attributes, or why they could not be had (the entry vanished, a
    /// mount point, ".." at the export root); `None` when not asked for.
    pub plus: Option<StorageResult<(&'a [u8], Fattr3)>>,
}

/// What one READDIR page asks of [`Storage::readdir`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirRequest {
    /// Resume after this cookie (0: from the start).
    pub cookie: u64,
    /// Also each entry's handle and attributes (READDIRPLUS, NFSv4
    /// READDIR with attributes).
    pub plus: bool,
    /// About how many bytes of entries the page can hold: the back end
    /// reads ahead about this much.
    pub size_hint: usize,
}

/// About how many bytes of READDIRPLUS reply one byte of `getdents64`
/// record makes (an entry with a 10-byte name: 32 bytes of dirent, about
/// 190 bytes of `entryplus3` with attributes and handle), to read ahead
/// only what a reply can hold.
pub const PLUS_TO_DIRENT: usize = 5;

/// How a page ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirPage {
    /// The verifier the page's cookies are valid under.
    pub verf: [u8; 8],
    /// Whether the last entry of the directory was taken.
    pub eof: bool,
}

/// Where [`Storage::readdir`] hands a page: first the directory's own
/// attributes, from the look-up that opens it (so the caller's access
/// check needs no call of its own), then the entries.
pub trait DirSink: Send {
    /// The listed directory's attributes, before any entry; an error
    /// ends the call with that status and no entry is read (the access
    /// check of READDIR, RFC 1813 §3.3.16). Accepts by default.
    fn dir(&mut self, attrs: &Fattr3) -> StorageResult<()> {
        let _ = attrs;
        Ok(())
    }

    /// Takes an entry into the page (`true`) or refuses it because it
    /// does not fit (`false`: the page ends before it).
    fn entry(&mut self, e: DirEntry<'_>) -> bool;
}

/// A closure is a sink that takes entries and accepts any directory.
impl<F: FnMut(DirEntry<'_>) -> bool + Send> DirSink for F {
    fn entry(&mut self, e: DirEntry<'_>) -> bool {
        self(e)
    }
}

/// File system figures for FSSTAT (RFC 1813 §3.3.18).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FsStat {
    /// Total bytes.
    pub tbytes: u64,
    /// Free bytes.
    pub fbytes: u64,
    /// Bytes available to unprivileged users.
    pub abytes: u64,
    /// Total inodes.
    pub tfiles: u64,
    /// Free inodes.
    pub ffiles: u64,
    /// Inodes available to unprivileged users.
    pub afiles: u64,
}

/// Why an extended attribute call failed (RFC 8276 §8.4 errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum XattrError {
    /// The attribute does not exist (NFS4ERR_NOXATTR).
    #[error("no such extended attribute")]
    NoAttr,
    /// Create-only, and the attribute exists (NFS4ERR_EXIST).
    #[error("extended attribute exists")]
    Exists,
    /// The value is larger than the file system or the reply takes
    /// (NFS4ERR_XATTR2BIG).
    #[error("extended attribute value too large")]
    TooBig,
    /// Any other failure, as for other calls.
    #[error("{0:?}")]
    Other(Nfsstat3),
}

impl From<Nfsstat3> for XattrError {
    fn from(s: Nfsstat3) -> Self {
        Self::Other(s)
    }
}

/// How SETXATTR may change an attribute (RFC 8276 §8.4.2:
/// `setxattr_option4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrSet {
    /// Create or replace.
    Either,
    /// Create only: [`XattrError::Exists`] if it exists.
    Create,
    /// Replace only: [`XattrError::NoAttr`] if it does not exist.
    Replace,
}

/// A run of a file as READ_PLUS returns it (RFC 7862 §15.10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// Bytes at `offset`.
    Data {
        /// Where they start.
        offset: u64,
        /// The bytes.
        data: Bytes,
    },
    /// `length` bytes of a hole (reading as zeros) at `offset`.
    Hole {
        /// Where it starts.
        offset: u64,
        /// How long it is.
        length: u64,
    },
}

/// A permission check on a file's attributes, made by the storage before
/// it touches the data ([`Storage::read_checked`],
/// [`Storage::write_checked`]).
pub type May<'a> = &'a (dyn Fn(&Fattr3) -> StorageResult<()> + Sync);

/// The bytes a READ returns: read into memory, or a range of the open
/// file for a transport that sends it from the file
/// ([`xdr::XdrBuf::put_file`]: `sendfile` on plain TCP).
#[derive(Debug, Clone)]
pub enum ReadData {
    /// The bytes.
    Bytes(Bytes),
    /// `len` bytes of `file` at `offset`, not read yet.
    File {
        /// The open file.
        file: Arc<dyn FileSource>,
        /// Where the bytes start.
        offset: u64,
        /// How many bytes.
        len: usize,
    },
}

impl ReadData {
    /// How many bytes.
    pub fn len(&self) -> usize {
        match self {
            Self::Bytes(b) => b.len(),
            Self::File { len, .. } => *len,
        }
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends the bytes as variable-length opaque data (RFC 4506 §4.10),
    /// DDP-eligible or not (RFC 8166 §3.4).
    pub fn encode_into(self, out: &mut XdrBuf, ddp_eligible: bool) {
        match self {
            Self::Bytes(b) => out.put_bulk(b, ddp_eligible),
            Self::File { file, offset, len } => out.put_file(file, offset, len, ddp_eligible),
        }
    }
}

/// Bytes by content, file ranges by file, offset and length.
impl PartialEq for ReadData {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Bytes(a), Self::Bytes(b)) => a == b,
            (
                Self::File { file, offset, len },
                Self::File {
                    file: f2,
                    offset: o2,
                    len: l2,
                },
            ) => Arc::ptr_eq(file, f2) && offset == o2 && len == l2,
            _ => false,
        }
    }
}

impl From<Bytes> for ReadData {
    fn from(b: Bytes) -> Self {
        Self::Bytes(b)
    }
}

/// What [`Storage::read_checked`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadDone {
    /// The bytes read and whether they reach the end of the file, or why
    /// nothing was read.
    pub data: StorageResult<(ReadData, bool)>,
    /// The file's attributes after the read, when they could be had.
    pub attrs: Option<Fattr3>,
}

/// What [`Storage::write_checked`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteDone {
    /// The attributes before the write, when they could be had.
    pub before: Option<Fattr3>,
    /// How stable the data now is, or why it was not written.
    pub written: StorageResult<StableHow>,
    /// The attributes after it.
    pub after: Option<Fattr3>,
}

/// A file tree served over NFSv3 and NFSv4.
///
/// Names given to the methods are single components already checked by
/// the XDR layer (not empty, no `/`, no NUL); `.` and `..` may still
/// occur and are the back end's to handle.
pub trait Storage: Send + Sync + 'static {
    /// The export root's handle.
    fn root(&self) -> NfsFh3;

    /// Whether every change is refused with NFS3ERR_ROFS.
    fn read_only(&self) -> bool;

    /// Whether `fh` was minted by this export (well formed and naming this
    /// export, whether or not the object still exists): how a server with
    /// several exports finds which one a call is for.
    fn owns(&self, fh: &NfsFh3) -> bool;

    /// The server instance's write verifier (RFC 1813 §3.3.7): it changes
    /// when the server restarts, telling clients to resend unstable data.
    fn write_verifier(&self) -> [u8; 8];

    /// Attributes of `fh`.
    fn getattr(&self, fh: &NfsFh3) -> impl Future<Output = StorageResult<Fattr3>> + Send;

    /// Applies `attrs`; with `guard`, first checks the ctime equals it
    /// (NFS3ERR_NOT_SYNC otherwise).
    fn setattr(
        &self,
        fh: &NfsFh3,
        attrs: &Sattr3,
        guard: Option<Nfstime3>,
    ) -> impl Future<Output = StorageResult<()>> + Send;

    /// Looks `name` up in `dir`.
    fn lookup(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
    ) -> impl Future<Output = StorageResult<NfsFh3>> + Send;

    /// The target of symbolic link `fh`.
    fn readlink(&self, fh: &NfsFh3) -> impl Future<Output = StorageResult<Bytes>> + Send;

    /// Up to `count` bytes at `offset`, and whether they reach the end.
    fn read(
        &self,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
    ) -> impl Future<Output = StorageResult<(Bytes, bool)>> + Send;

    /// Writes `data` at `offset`; returns how stable it now is.
    fn write(
        &self,
        fh: &NfsFh3,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> impl Future<Output = StorageResult<StableHow>> + Send;

    /// NFSv3 READ in one pass (RFC 1813 §3.3.6): the file's attributes
    /// go to `may`, which decides whether the caller may read before any
    /// byte is read; then up to `count` bytes at `offset`, and the
    /// attributes after the read for the reply's `post_op_attr`. With
    /// `files` (the reply goes where a file range is sent from the file,
    /// [`oncrpc::CallContext::sends_files`]) a back end may return
    /// [`ReadData::File`] instead of reading the bytes. The default asks
    /// [`Self::getattr`], [`Self::read`] and [`Self::getattr`]; a back
    /// end that resolves the handle once overrides it. The NFSv3 service
    /// runs a READ inline on its connection's task up to its first wait
    /// (no yield first, as for the other procedures), so a back end
    /// yields before any step that would block the thread for long.
    fn read_checked(
        &self,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
        may: May<'_>,
        files: bool,
    ) -> impl Future<Output = ReadDone> + Send {
        let _ = files;
        async move {
            let data = match self.getattr(fh).await.and_then(|a| may(&a)) {
                Ok(()) => self.read(fh, offset, count).await,
                Err(e) => Err(e),
            };
            ReadDone {
                data: data.map(|(b, eof)| (ReadData::Bytes(b), eof)),
                attrs: self.getattr(fh).await.ok(),
            }
        }
    }

    /// NFSv3 WRITE in one pass (RFC 1813 §3.3.7): the attributes before
    /// (the reply's `pre_op_attr`) go to `may`, which decides whether the
    /// caller may write; then `data` is written at `offset` as stable as
    /// `stable` asks (on stable storage before this returns unless
    /// UNSTABLE), and the attributes after it are taken. The default asks
    /// [`Self::getattr`], [`Self::write`] and [`Self::getattr`].
    fn write_checked(
        &self,
        fh: &NfsFh3,
        offset: u64,
        data: &[u8],
        stable: StableHow,
        may: May<'_>,
    ) -> impl Future<Output = WriteDone> + Send {
        async move {
            let before = self.getattr(fh).await;
            let written = match &before {
                Ok(a) => match may(a) {
                    Ok(()) => self.write(fh, offset, data, stable).await,
                    Err(e) => Err(e),
                },
                Err(e) => Err(*e),
            };
            WriteDone {
                before: before.ok(),
                written,
                after: self.getattr(fh).await.ok(),
            }
        }
    }

    /// Creates a regular file (RFC 1813 §3.3.8 semantics per mode).
    fn create(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
        how: &Createhow3,
    ) -> impl Future<Output = StorageResult<NfsFh3>> + Send;

    /// Creates a directory.
    fn mkdir(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
        attrs: &Sattr3,
    ) -> impl Future<Output = StorageResult<NfsFh3>> + Send;

    /// Creates a symbolic link holding `target` (never followed by the
    /// server).
    fn symlink(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
        target: &[u8],
        attrs: &Sattr3,
    ) -> impl Future<Output = StorageResult<NfsFh3>> + Send;

    /// Creates a special file.
    fn mknod(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
        what: &Mknoddata3,
    ) -> impl Future<Output = StorageResult<NfsFh3>> + Send;

    /// Removes a non-directory.
    fn remove(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
    ) -> impl Future<Output = StorageResult<()>> + Send;

    /// Removes an empty directory.
    fn rmdir(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
    ) -> impl Future<Output = StorageResult<()>> + Send;

    /// Renames `from_dir/from` to `to_dir/to`.
    fn rename(
        &self,
        from_dir: &NfsFh3,
        from: &Filename3,
        to_dir: &NfsFh3,
        to: &Filename3,
    ) -> impl Future<Output = StorageResult<()>> + Send;

    /// Makes `dir/name` a hard link to `fh`.
    fn link(
        &self,
        fh: &NfsFh3,
        dir: &NfsFh3,
        name: &Filename3,
    ) -> impl Future<Output = StorageResult<()>> + Send;

    /// Hands `dir`'s attributes to [`DirSink::dir`] (ending the call if
    /// it refuses), then the entries of `dir` after `req.cookie` to `sink` in
    /// directory order until the sink refuses one or the directory ends,
    /// doing work for those entries only. NFS3ERR_BAD_COOKIE when the
    /// cookie cannot be honoured. The caller checks the client's verifier
    /// against [`DirPage::verf`].
    fn readdir(
        &self,
        dir: &NfsFh3,
        req: DirRequest,
        sink: &mut dyn DirSink,
    ) -> impl Future<Output = StorageResult<DirPage>> + Send;

    /// File system figures.
    fn fsstat(&self, fh: &NfsFh3) -> impl Future<Output = StorageResult<FsStat>> + Send;

    /// Flushes the file's data and metadata to stable storage.
    fn commit(&self, fh: &NfsFh3) -> impl Future<Output = StorageResult<()>> + Send;

    /// The first offset at or after `offset` in a hole (`hole`) or in data
    /// of regular file `fh` (`lseek` `SEEK_HOLE`/`SEEK_DATA`), or `None`
    /// when there is no more data (NFSv4.2 SEEK, RFC 7862 §15.11).
    fn seek(
        &self,
        fh: &NfsFh3,
        offset: u64,
        hole: bool,
    ) -> impl Future<Output = StorageResult<Option<u64>>> + Send;

    /// Opens regular file `fh` for reading, or with `write` for reading
    /// and writing (the descriptor of a delegated file's kernel lease and
    /// inotify watch). Never waits for a lease (`O_NONBLOCK`).
    fn open_file(&self, fh: &NfsFh3, write: bool) -> StorageResult<std::fs::File>;

    /// Makes the server's own opens of regular file `fh` reuse `fd` (an
    /// open of it) while `fd` lives, where its access mode serves them:
    /// the descriptor holding a delegation's kernel lease, which a new
    /// open by the server would break. A storage without kernel files
    /// ignores it.
    fn pin(&self, _fh: &NfsFh3, _fd: &std::sync::Arc<std::os::fd::OwnedFd>) {}

    /// Reserves `len` bytes at `offset` of regular file `fh`, or with
    /// `punch` frees them keeping the size (NFSv4.2 ALLOCATE and
    /// DEALLOCATE, RFC 7862 §15.1, §15.4); NFS3ERR_NOTSUPP where the file
    /// system cannot.
    fn allocate(
        &self,
        fh: &NfsFh3,
        offset: u64,
        len: u64,
        punch: bool,
    ) -> impl Future<Output = StorageResult<()>> + Send;

    /// The value of user extended attribute `name` of `fh` (`name` without
    /// the `user.` prefix, RFC 8276 §5.3), at most `max` bytes
    /// ([`XattrError::TooBig`] if larger).
    fn getxattr(
        &self,
        fh: &NfsFh3,
        name: &[u8],
        max: usize,
    ) -> impl Future<Output = Result<Bytes, XattrError>> + Send;

    /// Sets user extended attribute `name` of `fh`, on stable storage
    /// before it returns.
    fn setxattr(
        &self,
        fh: &NfsFh3,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> impl Future<Output = Result<(), XattrError>> + Send;

    /// The names of the user extended attributes of `fh`, without the
    /// `user.` prefix.
    fn listxattrs(
        &self,
        fh: &NfsFh3,
    ) -> impl Future<Output = Result<Vec<Bytes>, XattrError>> + Send;

    /// Removes user extended attribute `name` of `fh`, on stable storage
    /// before it returns.
    fn removexattr(
        &self,
        fh: &NfsFh3,
        name: &[u8],
    ) -> impl Future<Output = Result<(), XattrError>> + Send;

    /// Up to `count` bytes of regular file `fh` at `offset` as data and
    /// holes (`SEEK_DATA`/`SEEK_HOLE`), at most `max_segments` of them,
    /// and whether they reach the end of the file (NFSv4.2 READ_PLUS,
    /// RFC 7862 §15.10).
    fn read_plus(
        &self,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
        max_segments: usize,
    ) -> impl Future<Output = StorageResult<(Vec<Segment>, bool)>> + Send;

    /// Copies `count` bytes (0: to the end of `src`) of regular file `src`
    /// at `src_offset` to regular file `dst` at `dst_offset` of the same
    /// export (NFS3ERR_XDEV otherwise); returns how many were copied,
    /// possibly fewer, on stable storage (NFSv4.2 COPY, RFC 7862 §15.2).
    fn copy_range(
        &self,
        src: &NfsFh3,
        src_offset: u64,
        dst: &NfsFh3,
        dst_offset: u64,
        count: u64,
    ) -> impl Future<Output = StorageResult<u64>> + Send;

    /// Makes the range of `dst` share the source's extents (NFSv4.2
    /// CLONE, RFC 7862 §15.13); NFS3ERR_NOTSUPP where the file system
    /// (or the back end, for that range) cannot.
    fn clone_range(
        &self,
        src: &NfsFh3,
        src_offset: u64,
        dst: &NfsFh3,
        dst_offset: u64,
        count: u64,
    ) -> impl Future<Output = StorageResult<()>> + Send;
}
