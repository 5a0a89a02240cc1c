//! NFS version 3 (RFC 1813): the basic data types (§2.5, §2.6), the
//! arguments and results of the 22 procedures (§3.3) and a decoder of any
//! procedure's arguments by number.
//!
//! Bounds chosen where RFC 1813 leaves a length open, all Linux's values:
//! a file handle holds at most [`NFS3_FHSIZE`] = 64 bytes (§2.4), a file
//! name at most [`NFS3_MAXNAMLEN`] = 255 bytes, a path at most
//! [`NFS3_MAXPATHLEN`] = 4096 bytes, READ/WRITE data at most
//! [`NFS3_MAXDATA`] bytes.

mod bound;
mod call;
mod procs;
#[cfg(test)]
mod tests;

pub use bound::reply_size_bound;
pub use call::{Args3, ArgsError, Nfsproc3};
pub use procs::*;

use bytes::Bytes;
use xdr::{Decode, Decoder, Encode, Encoder, Error, ErrorKind, FixedOpaque};

/// The NFS program number (RFC 1813 §3).
pub const NFS_PROGRAM: u32 = 100_003;
/// The NFS protocol version this module implements (RFC 1813 §3).
pub const NFS_V3: u32 = 3;
/// Largest file handle in bytes (RFC 1813 §2.4).
pub const NFS3_FHSIZE: usize = 64;
/// Size of a cookie verifier (RFC 1813 §2.4).
pub const NFS3_COOKIEVERFSIZE: usize = 8;
/// Size of a CREATE verifier (RFC 1813 §2.4).
pub const NFS3_CREATEVERFSIZE: usize = 8;
/// Size of a WRITE verifier (RFC 1813 §2.4).
pub const NFS3_WRITEVERFSIZE: usize = 8;
/// Longest file name accepted (`filename3`, RFC 1813 §2.5; Linux
/// `NFS3_MAXNAMLEN`).
pub const NFS3_MAXNAMLEN: usize = 255;
/// Longest path accepted (`nfspath3`, RFC 1813 §2.5; Linux
/// `NFS3_MAXPATHLEN`).
pub const NFS3_MAXPATHLEN: usize = 4096;
/// Largest READ result or WRITE argument data accepted when decoding.
/// RFC 1813 leaves `opaque data<>` unbounded; servers advertise far less
/// in FSINFO (`rtmax`/`wtmax`), so 64 MiB only guards against nonsense.
pub const NFS3_MAXDATA: usize = 64 << 20;

/// `cookieverf3` (RFC 1813 §2.5).
pub type Cookieverf3 = FixedOpaque<NFS3_COOKIEVERFSIZE>;
/// `createverf3` (RFC 1813 §2.5).
pub type Createverf3 = FixedOpaque<NFS3_CREATEVERFSIZE>;
/// `writeverf3` (RFC 1813 §2.5).
pub type Writeverf3 = FixedOpaque<NFS3_WRITEVERFSIZE>;

xdr::open_code! {
    /// `nfsstat3` (RFC 1813 §2.6): an open code so that unknown values from
    /// a peer still decode.
    pub struct Nfsstat3 {
        /// Success.
        NFS3_OK = 0,
        /// Not owner.
        NFS3ERR_PERM = 1,
        /// No such file or directory.
        NFS3ERR_NOENT = 2,
        /// I/O error.
        NFS3ERR_IO = 5,
        /// No such device or address.
        NFS3ERR_NXIO = 6,
        /// Permission denied.
        NFS3ERR_ACCES = 13,
        /// File exists.
        NFS3ERR_EXIST = 17,
        /// Cross-device hard link.
        NFS3ERR_XDEV = 18,
        /// No such device.
        NFS3ERR_NODEV = 19,
        /// Not a directory.
        NFS3ERR_NOTDIR = 20,
        /// Is a directory.
        NFS3ERR_ISDIR = 21,
        /// Invalid argument.
        NFS3ERR_INVAL = 22,
        /// File too large.
        NFS3ERR_FBIG = 27,
        /// No space left on device.
        NFS3ERR_NOSPC = 28,
        /// Read-only file system.
        NFS3ERR_ROFS = 30,
        /// Too many hard links.
        NFS3ERR_MLINK = 31,
        /// File name too long.
        NFS3ERR_NAMETOOLONG = 63,
        /// Directory not empty.
        NFS3ERR_NOTEMPTY = 66,
        /// Quota exceeded.
        NFS3ERR_DQUOT = 69,
        /// Stale file handle.
        NFS3ERR_STALE = 70,
        /// Too many levels of remote in path.
        NFS3ERR_REMOTE = 71,
        /// Illegal NFS file handle.
        NFS3ERR_BADHANDLE = 10001,
        /// SETATTR guard mismatch.
        NFS3ERR_NOT_SYNC = 10002,
        /// READDIR/READDIRPLUS cookie is stale.
        NFS3ERR_BAD_COOKIE = 10003,
        /// Operation not supported.
        NFS3ERR_NOTSUPP = 10004,
        /// Buffer or request too small.
        NFS3ERR_TOOSMALL = 10005,
        /// Server error not covered by another code.
        NFS3ERR_SERVERFAULT = 10006,
        /// Object type not supported.
        NFS3ERR_BADTYPE = 10007,
        /// Try again later.
        NFS3ERR_JUKEBOX = 10008,
    }
}

impl Nfsstat3 {
    /// True for `NFS3_OK`.
    pub const fn is_ok(&self) -> bool {
        self.0 == 0
    }
}

xdr::open_code! {
    /// `ftype3` (RFC 1813 §2.6).
    pub struct Ftype3 {
        /// Regular file.
        NF3REG = 1,
        /// Directory.
        NF3DIR = 2,
        /// Block device.
        NF3BLK = 3,
        /// Character device.
        NF3CHR = 4,
        /// Symbolic link.
        NF3LNK = 5,
        /// Socket.
        NF3SOCK = 6,
        /// Named pipe.
        NF3FIFO = 7,
    }
}

xdr::open_code! {
    /// `stable_how` (RFC 1813 §3.3.7).
    pub struct StableHow {
        /// The server may reply before data reaches stable storage.
        UNSTABLE = 0,
        /// Data must be stable; metadata may not be.
        DATA_SYNC = 1,
        /// Data and metadata must be stable.
        FILE_SYNC = 2,
    }
}

/// ACCESS3_READ (RFC 1813 §3.3.4).
pub const ACCESS3_READ: u32 = 0x0001;
/// ACCESS3_LOOKUP (RFC 1813 §3.3.4).
pub const ACCESS3_LOOKUP: u32 = 0x0002;
/// ACCESS3_MODIFY (RFC 1813 §3.3.4).
pub const ACCESS3_MODIFY: u32 = 0x0004;
/// ACCESS3_EXTEND (RFC 1813 §3.3.4).
pub const ACCESS3_EXTEND: u32 = 0x0008;
/// ACCESS3_DELETE (RFC 1813 §3.3.4).
pub const ACCESS3_DELETE: u32 = 0x0010;
/// ACCESS3_EXECUTE (RFC 1813 §3.3.4).
pub const ACCESS3_EXECUTE: u32 = 0x0020;

/// FSF3_LINK: the file system supports hard links (RFC 1813 §3.3.19).
pub const FSF3_LINK: u32 = 0x0001;
/// FSF3_SYMLINK: the file system supports symbolic links (RFC 1813 §3.3.19).
pub const FSF3_SYMLINK: u32 = 0x0002;
/// FSF3_HOMOGENEOUS: PATHCONF is the same for every file (RFC 1813 §3.3.19).
pub const FSF3_HOMOGENEOUS: u32 = 0x0008;
/// FSF3_CANSETTIME: SETATTR can set times (RFC 1813 §3.3.19).
pub const FSF3_CANSETTIME: u32 = 0x0010;

/// `nfs_fh3` (RFC 1813 §2.5): an opaque file handle of at most
/// [`NFS3_FHSIZE`] bytes. Decoding a longer one fails.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct NfsFh3(Bytes);

impl NfsFh3 {
    /// A handle holding `data`, or `None` when it is longer than
    /// [`NFS3_FHSIZE`].
    pub fn new(data: &[u8]) -> Option<Self> {
        (data.len() <= NFS3_FHSIZE).then(|| Self(Bytes::copy_from_slice(data)))
    }

    /// The handle's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl core::fmt::Debug for NfsFh3 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "NfsFh3(")?;
        for b in self.0.iter() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// RFC 1813 §2.5 `nfs_fh3`: `opaque data<NFS3_FHSIZE>`.
impl Encode for NfsFh3 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_opaque(&self.0);
    }
}

impl<'a> Decode<'a> for NfsFh3 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        dec.opaque_bytes(NFS3_FHSIZE).map(Self)
    }
}

/// `filename3` (RFC 1813 §2.5): a name of at most [`NFS3_MAXNAMLEN`]
/// bytes, not necessarily UTF-8.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Filename3(pub Bytes);

impl Filename3 {
    /// A name from a string slice (not checked against the bound).
    pub fn from_static(s: &'static str) -> Self {
        Self(Bytes::from_static(s.as_bytes()))
    }

    /// Whether the name can name a directory entry on a server: not empty,
    /// and free of `/` and NUL. Linux's nfsd rejects other names while
    /// decoding arguments (`svcxdr_decode_filename3`), so they draw
    /// GARBAGE_ARGS.
    pub fn is_valid_component(&self) -> bool {
        !self.0.is_empty() && !self.0.iter().any(|&b| b == b'/' || b == 0)
    }
}

impl core::fmt::Debug for Filename3 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

/// RFC 1813 §2.5 `filename3`: `string filename3<>`, bounded here.
impl Encode for Filename3 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_string(&self.0);
    }
}

impl<'a> Decode<'a> for Filename3 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        dec.opaque_bytes(NFS3_MAXNAMLEN).map(Self)
    }
}

/// `nfspath3` (RFC 1813 §2.5) as carried by SYMLINK arguments and READLINK
/// results: a DDP-eligible item (ULB v2 draft §3), at most
/// [`NFS3_MAXPATHLEN`] bytes.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Nfspath3(pub Bytes);

impl core::fmt::Debug for Nfspath3 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

/// ULB v2 draft §3: the SYMLINK path and READLINK result are DDP-eligible.
impl Encode for Nfspath3 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_bulk(self.0.clone(), true);
    }
}

impl<'a> Decode<'a> for Nfspath3 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        dec.opaque_bytes(NFS3_MAXPATHLEN).map(Self)
    }
}

/// READ result and WRITE argument data (RFC 1813 §3.3.6, §3.3.7): a
/// DDP-eligible item (ULB v2 draft §3), at most [`NFS3_MAXDATA`] bytes when
/// decoded, taken without a copy from a [`Decoder::from_bytes`] stream.
pub type Data3 = xdr::DdpOpaque<NFS3_MAXDATA>;

xdr_struct! {
    /// `specdata3` (RFC 1813 §2.5): device numbers.
    #[derive(Copy, Default)]
    pub struct Specdata3 {
        /// Major number.
        pub specdata1: u32,
        /// Minor number.
        pub specdata2: u32,
    }
}

xdr_struct! {
    /// `nfstime3` (RFC 1813 §2.5).
    #[derive(Copy, Default, PartialOrd, Ord, Hash)]
    pub struct Nfstime3 {
        /// Seconds since the epoch.
        pub seconds: u32,
        /// Nanoseconds.
        pub nseconds: u32,
    }
}

/// `fattr3` (RFC 1813 §2.5): file attributes, 84 bytes on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fattr3 {
    /// File type.
    pub ftype: Ftype3,
    /// Mode bits (the low 12 bits of `st_mode`).
    pub mode: u32,
    /// Hard link count.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// Bytes of disk space used.
    pub used: u64,
    /// Device numbers for NF3BLK and NF3CHR.
    pub rdev: Specdata3,
    /// File system id.
    pub fsid: u64,
    /// File id (inode number).
    pub fileid: u64,
    /// Last access.
    pub atime: Nfstime3,
    /// Last data modification.
    pub mtime: Nfstime3,
    /// Last attribute change.
    pub ctime: Nfstime3,
}

/// RFC 1813 §2.5 `fattr3`: the 21 words built on the stack and written
/// with one `put_raw` (every READDIRPLUS entry and most replies carry
/// one; a `put_u32` per field cost ~1,000 instructions an entry).
impl Encode for Fattr3 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        let mut b = [0u8; FATTR3_LEN];
        let words32 = [
            (0, self.ftype.0),
            (4, self.mode),
            (8, self.nlink),
            (12, self.uid),
            (16, self.gid),
            (36, self.rdev.specdata1),
            (40, self.rdev.specdata2),
            (60, self.atime.seconds),
            (64, self.atime.nseconds),
            (68, self.mtime.seconds),
            (72, self.mtime.nseconds),
            (76, self.ctime.seconds),
            (80, self.ctime.nseconds),
        ];
        for (at, v) in words32 {
            b[at..at + 4].copy_from_slice(&v.to_be_bytes());
        }
        for (at, v) in [
            (20, self.size),
            (28, self.used),
            (44, self.fsid),
            (52, self.fileid),
        ] {
            b[at..at + 8].copy_from_slice(&v.to_be_bytes());
        }
        enc.put_raw(&b);
    }
}

impl<'a> Decode<'a> for Fattr3 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        Ok(Self {
            ftype: dec.decode()?,
            mode: dec.decode()?,
            nlink: dec.decode()?,
            uid: dec.decode()?,
            gid: dec.decode()?,
            size: dec.decode()?,
            used: dec.decode()?,
            rdev: dec.decode()?,
            fsid: dec.decode()?,
            fileid: dec.decode()?,
            atime: dec.decode()?,
            mtime: dec.decode()?,
            ctime: dec.decode()?,
        })
    }
}

/// Encoded size of [`Fattr3`] (RFC 1813 §2.5).
pub const FATTR3_LEN: usize = 84;

/// `post_op_attr` (RFC 1813 §2.6): attributes if the server has them.
pub type PostOpAttr = Option<Fattr3>;

xdr_struct! {
    /// `wcc_attr` (RFC 1813 §2.6): the attributes weak cache consistency
    /// compares.
    #[derive(Copy, Default)]
    pub struct WccAttr {
        /// Size before the operation.
        pub size: u64,
        /// mtime before the operation.
        pub mtime: Nfstime3,
        /// ctime before the operation.
        pub ctime: Nfstime3,
    }
}

/// `pre_op_attr` (RFC 1813 §2.6).
pub type PreOpAttr = Option<WccAttr>;

xdr_struct! {
    /// `wcc_data` (RFC 1813 §2.6): attributes before and after a change.
    #[derive(Default)]
    pub struct WccData {
        /// Before.
        pub before: PreOpAttr,
        /// After.
        pub after: PostOpAttr,
    }
}

/// `post_op_fh3` (RFC 1813 §2.6).
pub type PostOpFh3 = Option<NfsFh3>;

/// `time_how` with its time (`set_atime`/`set_mtime`, RFC 1813 §2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetTime {
    /// DONT_CHANGE (0).
    #[default]
    DontChange,
    /// SET_TO_SERVER_TIME (1).
    ServerTime,
    /// SET_TO_CLIENT_TIME (2) with the time.
    ClientTime(Nfstime3),
}

/// RFC 1813 §2.6 `set_atime`/`set_mtime` unions over `time_how`.
impl Encode for SetTime {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            SetTime::DontChange => enc.put_u32(0),
            SetTime::ServerTime => enc.put_u32(1),
            SetTime::ClientTime(t) => {
                enc.put_u32(2);
                t.encode(enc);
            }
        }
    }
}

impl<'a> Decode<'a> for SetTime {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        match dec.enum_checked(|v| v <= 2)? {
            0 => Ok(SetTime::DontChange),
            1 => Ok(SetTime::ServerTime),
            _ => Ok(SetTime::ClientTime(dec.decode()?)),
        }
    }
}

xdr_struct! {
    /// `sattr3` (RFC 1813 §2.6): attributes to set; `None` leaves one
    /// unchanged.
    #[derive(Default)]
    pub struct Sattr3 {
        /// New mode bits.
        pub mode: Option<u32>,
        /// New owner.
        pub uid: Option<u32>,
        /// New group.
        pub gid: Option<u32>,
        /// New size.
        pub size: Option<u64>,
        /// New access time.
        pub atime: SetTime,
        /// New modification time.
        pub mtime: SetTime,
    }
}

/// `diropargs3` (RFC 1813 §2.6): a directory and a name in it.
///
/// Decoding also rejects a name that cannot be one directory entry (empty,
/// or holding `/` or NUL), as Linux's nfsd does while decoding arguments,
/// so such a call draws GARBAGE_ARGS ([`Filename3::is_valid_component`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diropargs3 {
    /// The directory.
    pub dir: NfsFh3,
    /// The name.
    pub name: Filename3,
}

/// RFC 1813 §2.6 `diropargs3`.
impl Encode for Diropargs3 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        self.dir.encode(enc);
        self.name.encode(enc);
    }
}

impl<'a> Decode<'a> for Diropargs3 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        let dir = dec.decode()?;
        let at = dec.position();
        let name: Filename3 = dec.decode()?;
        if !name.is_valid_component() {
            return Err(Error::new(
                ErrorKind::InvalidEnum(0),
                at,
                "filename3 is empty or holds '/' or NUL",
            ));
        }
        Ok(Self { dir, name })
    }
}

/// A procedure result: `NFS3_OK` with the success body, or a failure status
/// with the failure body. Every NFSv3 result is this union over `nfsstat3`
/// (RFC 1813 §3.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Res3<T, F> {
    /// `NFS3_OK` and the `resok` arm.
    Ok(T),
    /// Any other status and the `resfail` arm. A status of `NFS3_OK` here
    /// would encode a success discriminant with a failure body; use
    /// [`Res3::Ok`].
    Fail(Nfsstat3, F),
}

impl<T, F> Res3<T, F> {
    /// The status the result encodes.
    pub fn status(&self) -> Nfsstat3 {
        match self {
            Res3::Ok(_) => Nfsstat3::NFS3_OK,
            Res3::Fail(s, _) => *s,
        }
    }

    /// The success body, if any.
    pub fn ok(self) -> Option<T> {
        match self {
            Res3::Ok(t) => Some(t),
            Res3::Fail(..) => None,
        }
    }
}

/// RFC 1813 §3.3: `union XXX3res switch (nfsstat3 status)`.
impl<T: Encode, F: Encode> Encode for Res3<T, F> {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            Res3::Ok(t) => {
                enc.put_u32(0);
                t.encode(enc);
            }
            Res3::Fail(s, f) => {
                s.encode(enc);
                f.encode(enc);
            }
        }
    }
}

impl<'a, T: Decode<'a>, F: Decode<'a>> Decode<'a> for Res3<T, F> {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        let status: Nfsstat3 = dec.decode()?;
        if status.is_ok() {
            Ok(Res3::Ok(dec.decode()?))
        } else {
            Ok(Res3::Fail(status, dec.decode()?))
        }
    }
}
