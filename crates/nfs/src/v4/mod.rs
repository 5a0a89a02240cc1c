//! NFS version 4.1 (RFC 8881) and 4.2 (RFC 7862): the COMPOUND procedure,
//! the arguments and results of the operations a Linux client needs, the
//! file attribute codec, and the callback program's types.
//!
//! - [`Compound4Args`]/[`Compound4Res`] (RFC 8881 §16.2): a COMPOUND as a
//!   list of [`NfsArgop4`]/[`NfsResop4`]. A server decodes a COMPOUND one
//!   operation at a time with [`CompoundHeader::decode`] and
//!   [`NfsArgop4::decode`], so an operation it does not know decodes to
//!   [`NfsArgop4::Illegal`] (answer NFS4ERR_OP_ILLEGAL) and one it knows
//!   but does not parse to [`NfsArgop4::Unsupported`] (answer
//!   NFS4ERR_NOTSUPP); either ends the COMPOUND, so the bytes after it are
//!   never read.
//! - [`attr`]: `bitmap4`, `fattr4` and a typed [`attr::FileAttrs`] codec
//!   for the mandatory and recommended attributes.
//! - [`session`]: EXCHANGE_ID, CREATE_SESSION, SEQUENCE and the other
//!   session operations (RFC 8881 §18.33 to §18.51).
//! - [`cb`]: the callback program (CB_COMPOUND with CB_SEQUENCE and
//!   CB_RECALL; CB_NULL is procedure 0 with no arguments).
//! - [`pnfs`] and [`flexfiles`]: the pNFS layout operations (RFC 8881
//!   §12, §18.40 to §18.44, RFC 7862 §15.6, §15.7) and the flexible-files
//!   layout bodies (RFC 8435).
//! - [`ulb`]: the NFSv4 upper-layer binding for RPC-over-RDMA (ULB v2 draft
//!   §5).
//!
//! Bounds on peer-chosen lengths: a tag holds at most [`NFS4_MAX_TAGLEN`]
//! bytes, a COMPOUND at most [`NFS4_MAX_OPS`] operations, a file handle at
//! most [`NFS4_FHSIZE`] bytes, a name at most [`NFS4_MAXNAMLEN`] bytes, an
//! owner or other opaque identifier at most [`NFS4_OPAQUE_LIMIT`] bytes, a
//! symbolic link at most [`NFS4_MAXPATHLEN`] bytes, READ/WRITE data at most
//! [`NFS4_MAXDATA`] bytes, an attribute list at most [`attr::MAX_ATTRLIST`]
//! bytes.

pub mod attr;
pub mod cb;
mod compound;
pub mod flexfiles;
mod open;
mod ops;
pub mod pnfs;
pub mod session;
pub mod ulb;
mod v40;
mod v42;

#[cfg(test)]
mod tests;

pub use attr::{Bitmap4, Fattr4};
pub use compound::*;
pub use open::*;
pub use ops::*;
pub use pnfs::*;
pub use v40::*;
pub use v42::*;

use bytes::Bytes;
use xdr::{Decode, Decoder, Encode, Encoder, Error, ErrorKind, FixedOpaque};

/// The NFS program number (RFC 8881 §16).
pub const NFS4_PROGRAM: u32 = 100_003;
/// The NFS version of NFSv4.x (RFC 8881 §16).
pub const NFS_V4: u32 = 4;
/// Procedure NULL (RFC 8881 §16.1).
pub const NFSPROC4_NULL: u32 = 0;
/// Procedure COMPOUND (RFC 8881 §16.2).
pub const NFSPROC4_COMPOUND: u32 = 1;
/// Largest file handle (RFC 8881 §3.2, `NFS4_FHSIZE`).
pub const NFS4_FHSIZE: usize = 128;
/// Size of a verifier (RFC 8881 §3.2, `NFS4_VERIFIER_SIZE`).
pub const NFS4_VERIFIER_SIZE: usize = 8;
/// Size of a session id (RFC 8881 §3.2, `NFS4_SESSIONID_SIZE`).
pub const NFS4_SESSIONID_SIZE: usize = 16;
/// Limit on opaque identifiers such as owners (RFC 8881 §3.2,
/// `NFS4_OPAQUE_LIMIT`).
pub const NFS4_OPAQUE_LIMIT: usize = 1024;
/// Longest COMPOUND tag accepted (Linux nfsd's `NFSD4_MAX_TAGLEN`).
pub const NFS4_MAX_TAGLEN: usize = 128;
/// Most operations decoded in one COMPOUND; a server advertises fewer in
/// `ca_maxoperations` (RFC 8881 §18.36.3).
pub const NFS4_MAX_OPS: usize = 256;
/// Longest name component accepted (Linux's `NFS4_MAXNAMLEN`).
pub const NFS4_MAXNAMLEN: usize = 255;
/// Longest symbolic link target accepted (Linux's `NFS4_MAXPATHLEN`).
pub const NFS4_MAXPATHLEN: usize = 4096;
/// Largest READ or WRITE data accepted when decoding (64 MiB; servers
/// advertise far less in `maxread`/`maxwrite`).
pub const NFS4_MAXDATA: usize = 64 << 20;
/// `NFS4_UINT64_MAX`: a lock length reaching the end of the file
/// (RFC 8881 §18.10.3).
pub const NFS4_UINT64_MAX: u64 = u64::MAX;

/// `verifier4` (RFC 8881 §3.2).
pub type Verifier4 = FixedOpaque<NFS4_VERIFIER_SIZE>;
/// `sessionid4` (RFC 8881 §3.2).
pub type Sessionid4 = FixedOpaque<NFS4_SESSIONID_SIZE>;
/// `utf8str_cs`/`utf8str_cis`/`utf8str_mixed` (RFC 8881 §3.2): bytes, not
/// checked for UTF-8, at most [`NFS4_OPAQUE_LIMIT`].
pub type Utf8Str = xdr::Bounded<Bytes, NFS4_OPAQUE_LIMIT>;
/// An opaque identifier `opaque<NFS4_OPAQUE_LIMIT>` (owners, server ids).
pub type Opaque4 = xdr::Bounded<Bytes, NFS4_OPAQUE_LIMIT>;
/// READ and WRITE data: DDP-eligible (ULB v2 draft §5), zero-copy from a
/// [`Decoder::from_bytes`] stream.
pub type Data4 = xdr::DdpOpaque<NFS4_MAXDATA>;

xdr::open_code! {
    /// `nfsstat4` (RFC 8881 §15.1, RFC 7862 §11.1): an open code so that
    /// unknown values from a peer still decode.
    pub struct Nfsstat4 {
        /// Success.
        NFS4_OK = 0,
        /// Not owner.
        NFS4ERR_PERM = 1,
        /// No such file or directory.
        NFS4ERR_NOENT = 2,
        /// I/O error.
        NFS4ERR_IO = 5,
        /// No such device or address.
        NFS4ERR_NXIO = 6,
        /// Access denied.
        NFS4ERR_ACCESS = 13,
        /// File exists.
        NFS4ERR_EXIST = 17,
        /// Cross-device link.
        NFS4ERR_XDEV = 18,
        /// Not a directory.
        NFS4ERR_NOTDIR = 20,
        /// Is a directory.
        NFS4ERR_ISDIR = 21,
        /// Invalid argument.
        NFS4ERR_INVAL = 22,
        /// File too large.
        NFS4ERR_FBIG = 27,
        /// No space left.
        NFS4ERR_NOSPC = 28,
        /// Read-only file system.
        NFS4ERR_ROFS = 30,
        /// Too many hard links.
        NFS4ERR_MLINK = 31,
        /// Name too long.
        NFS4ERR_NAMETOOLONG = 63,
        /// Directory not empty.
        NFS4ERR_NOTEMPTY = 66,
        /// Quota exceeded.
        NFS4ERR_DQUOT = 69,
        /// Stale file handle.
        NFS4ERR_STALE = 70,
        /// Illegal file handle.
        NFS4ERR_BADHANDLE = 10001,
        /// READDIR cookie is stale.
        NFS4ERR_BAD_COOKIE = 10003,
        /// Operation not supported.
        NFS4ERR_NOTSUPP = 10004,
        /// Response limit exceeded.
        NFS4ERR_TOOSMALL = 10005,
        /// Undefined server error.
        NFS4ERR_SERVERFAULT = 10006,
        /// Type invalid for CREATE.
        NFS4ERR_BADTYPE = 10007,
        /// File "busy": retry.
        NFS4ERR_DELAY = 10008,
        /// NVERIFY: attributes the same.
        NFS4ERR_SAME = 10009,
        /// Lock unavailable.
        NFS4ERR_DENIED = 10010,
        /// Lock lease expired.
        NFS4ERR_EXPIRED = 10011,
        /// I/O failed due to a lock.
        NFS4ERR_LOCKED = 10012,
        /// In grace period.
        NFS4ERR_GRACE = 10013,
        /// File handle expired.
        NFS4ERR_FHEXPIRED = 10014,
        /// Share reservation denied.
        NFS4ERR_SHARE_DENIED = 10015,
        /// Wrong security flavor.
        NFS4ERR_WRONGSEC = 10016,
        /// Client id in use.
        NFS4ERR_CLID_INUSE = 10017,
        /// Resource exhaustion (NFSv4.0 only).
        NFS4ERR_RESOURCE = 10018,
        /// File system relocated.
        NFS4ERR_MOVED = 10019,
        /// No current file handle.
        NFS4ERR_NOFILEHANDLE = 10020,
        /// Minor version not supported.
        NFS4ERR_MINOR_VERS_MISMATCH = 10021,
        /// Server has rebooted.
        NFS4ERR_STALE_CLIENTID = 10022,
        /// Server has rebooted.
        NFS4ERR_STALE_STATEID = 10023,
        /// Stateid is out of date.
        NFS4ERR_OLD_STATEID = 10024,
        /// Incorrect stateid.
        NFS4ERR_BAD_STATEID = 10025,
        /// Request is out of sequence.
        NFS4ERR_BAD_SEQID = 10026,
        /// VERIFY: attributes not the same.
        NFS4ERR_NOT_SAME = 10027,
        /// Lock range not supported.
        NFS4ERR_LOCK_RANGE = 10028,
        /// Should be a file, not a symbolic link.
        NFS4ERR_SYMLINK = 10029,
        /// No saved file handle.
        NFS4ERR_RESTOREFH = 10030,
        /// Some file system moved.
        NFS4ERR_LEASE_MOVED = 10031,
        /// Recommended attribute not supported.
        NFS4ERR_ATTRNOTSUPP = 10032,
        /// Reclaim outside of grace.
        NFS4ERR_NO_GRACE = 10033,
        /// Reclaim error at server.
        NFS4ERR_RECLAIM_BAD = 10034,
        /// Conflict on reclaim.
        NFS4ERR_RECLAIM_CONFLICT = 10035,
        /// XDR decode failed.
        NFS4ERR_BADXDR = 10036,
        /// File has locks held.
        NFS4ERR_LOCKS_HELD = 10037,
        /// Conflict in OPEN and I/O.
        NFS4ERR_OPENMODE = 10038,
        /// Owner translation bad.
        NFS4ERR_BADOWNER = 10039,
        /// UTF-8 character not supported.
        NFS4ERR_BADCHAR = 10040,
        /// Name not supported.
        NFS4ERR_BADNAME = 10041,
        /// Lock range not supported.
        NFS4ERR_BAD_RANGE = 10042,
        /// No atomic up/downgrade.
        NFS4ERR_LOCK_NOTSUPP = 10043,
        /// Undefined operation.
        NFS4ERR_OP_ILLEGAL = 10044,
        /// File locking deadlock.
        NFS4ERR_DEADLOCK = 10045,
        /// Open file blocks the operation.
        NFS4ERR_FILE_OPEN = 10046,
        /// Lock owner state revoked.
        NFS4ERR_ADMIN_REVOKED = 10047,
        /// Callback path down.
        NFS4ERR_CB_PATH_DOWN = 10048,
        /// Layout I/O mode not valid (RFC 8881 §15.1.10.1).
        NFS4ERR_BADIOMODE = 10049,
        /// Layout specified is invalid (RFC 8881 §15.1.10.2).
        NFS4ERR_BADLAYOUT = 10050,
        /// Bad session.
        NFS4ERR_BADSESSION = 10052,
        /// Bad slot.
        NFS4ERR_BADSLOT = 10053,
        /// RECLAIM_COMPLETE already done.
        NFS4ERR_COMPLETE_ALREADY = 10054,
        /// Connection not bound to the session.
        NFS4ERR_CONN_NOT_BOUND_TO_SESSION = 10055,
        /// Delegation already wanted.
        NFS4ERR_DELEG_ALREADY_WANTED = 10056,
        /// Backchannel busy.
        NFS4ERR_BACK_CHAN_BUSY = 10057,
        /// Layout unavailable for now: retry (RFC 8881 §15.1.10.4).
        NFS4ERR_LAYOUTTRYLATER = 10058,
        /// Layouts not available for the file (RFC 8881 §15.1.10.5).
        NFS4ERR_LAYOUTUNAVAILABLE = 10059,
        /// No layout matches (RFC 8881 §15.1.10.6).
        NFS4ERR_NOMATCHING_LAYOUT = 10060,
        /// Recall in progress (RFC 8881 §15.1.10.7).
        NFS4ERR_RECALLCONFLICT = 10061,
        /// Layout type not supported (RFC 8881 §15.1.10.8).
        NFS4ERR_UNKNOWN_LAYOUTTYPE = 10062,
        /// Sequence id misordered.
        NFS4ERR_SEQ_MISORDERED = 10063,
        /// SEQUENCE not first.
        NFS4ERR_SEQUENCE_POS = 10064,
        /// Request too big.
        NFS4ERR_REQ_TOO_BIG = 10065,
        /// Reply too big.
        NFS4ERR_REP_TOO_BIG = 10066,
        /// Reply too big to cache.
        NFS4ERR_REP_TOO_BIG_TO_CACHE = 10067,
        /// Retry: the reply was not cached.
        NFS4ERR_RETRY_UNCACHED_REP = 10068,
        /// Unsafe non-idempotent COMPOUND.
        NFS4ERR_UNSAFE_COMPOUND = 10069,
        /// Too many operations.
        NFS4ERR_TOO_MANY_OPS = 10070,
        /// Operation outside a session.
        NFS4ERR_OP_NOT_IN_SESSION = 10071,
        /// Hash algorithm not supported.
        NFS4ERR_HASH_ALG_UNSUPP = 10072,
        /// Client id busy.
        NFS4ERR_CLIENTID_BUSY = 10074,
        /// Retry of a different request on a slot.
        NFS4ERR_SEQ_FALSE_RETRY = 10076,
        /// Bad highest slot id.
        NFS4ERR_BAD_HIGH_SLOT = 10077,
        /// Session being destroyed.
        NFS4ERR_DEADSESSION = 10078,
        /// Encryption algorithm not supported.
        NFS4ERR_ENCR_ALG_UNSUPP = 10079,
        /// Operation must be alone in the COMPOUND.
        NFS4ERR_NOT_ONLY_OP = 10081,
        /// Wrong credential.
        NFS4ERR_WRONG_CRED = 10082,
        /// Wrong object type.
        NFS4ERR_WRONG_TYPE = 10083,
        /// Conflicting LAYOUTGET and LAYOUTRETURN (RFC 8881 §15.1.10.9).
        NFS4ERR_RETURNCONFLICT = 10086,
        /// Delegation revoked.
        NFS4ERR_DELEG_REVOKED = 10087,
        /// Union not supported (RFC 7862).
        NFS4ERR_UNION_NOTSUPP = 10090,
        /// No such extended attribute (RFC 8276 §8.1).
        NFS4ERR_NOXATTR = 10095,
        /// Extended attribute value too large (RFC 8276 §8.1).
        NFS4ERR_XATTR2BIG = 10096,
    }
}

impl Nfsstat4 {
    /// True for `NFS4_OK`.
    pub const fn is_ok(&self) -> bool {
        self.0 == 0
    }
}

xdr::open_code! {
    /// `nfs_ftype4` (RFC 8881 §5.8.1.2).
    pub struct NfsFtype4 {
        /// Regular file.
        NF4REG = 1,
        /// Directory.
        NF4DIR = 2,
        /// Block device.
        NF4BLK = 3,
        /// Character device.
        NF4CHR = 4,
        /// Symbolic link.
        NF4LNK = 5,
        /// Socket.
        NF4SOCK = 6,
        /// Named pipe.
        NF4FIFO = 7,
        /// Attribute directory.
        NF4ATTRDIR = 8,
        /// Named attribute.
        NF4NAMEDATTR = 9,
    }
}

xdr::open_code! {
    /// `stable_how4` (RFC 8881 §18.32.1).
    pub struct StableHow4 {
        /// May reply before data is stable.
        UNSTABLE4 = 0,
        /// Data stable, metadata maybe not.
        DATA_SYNC4 = 1,
        /// Data and metadata stable.
        FILE_SYNC4 = 2,
    }
}

/// `nfs_fh4` (RFC 8881 §3.2): an opaque file handle of at most
/// [`NFS4_FHSIZE`] bytes.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct NfsFh4(pub Bytes);

impl NfsFh4 {
    /// The handle's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl core::fmt::Debug for NfsFh4 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "NfsFh4(")?;
        for b in self.0.iter() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// RFC 8881 §3.2 `nfs_fh4`: `opaque nfs_fh4<NFS4_FHSIZE>`.
impl Encode for NfsFh4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_opaque(&self.0);
    }
}

impl<'a> Decode<'a> for NfsFh4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        dec.opaque_bytes(NFS4_FHSIZE).map(Self)
    }
}

/// `component4` (RFC 8881 §3.2): one name, at most [`NFS4_MAXNAMLEN`]
/// bytes. The server checks its content ([`Component4::check`]).
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Component4(pub Bytes);

impl Component4 {
    /// A name from a string slice.
    pub fn from_static(s: &'static str) -> Self {
        Self(Bytes::from_static(s.as_bytes()))
    }

    /// RFC 8881 §14.5 (with §18.13.3): an empty name or one that is not
    /// UTF-8 is NFS4ERR_INVAL; a Unicode noncharacter (U+FDD0–U+FDEF,
    /// U+xxFFFE, U+xxFFFF), `/` or NUL is NFS4ERR_BADCHAR (a character
    /// this server does not accept in a name); `.` and `..` are
    /// NFS4ERR_BADNAME (names the file system does not allow).
    pub fn check(&self) -> Result<(), Nfsstat4> {
        if self.0.is_empty() {
            return Err(Nfsstat4::NFS4ERR_INVAL);
        }
        let s = utf8(&self.0)?;
        if s.chars()
            .any(|c| c == '/' || c == '\0' || is_noncharacter(c))
        {
            return Err(Nfsstat4::NFS4ERR_BADCHAR);
        }
        if s == "." || s == ".." {
            return Err(Nfsstat4::NFS4ERR_BADNAME);
        }
        Ok(())
    }
}

/// RFC 8881 §14.5: a UTF-8 string (`utf8str_cs`, `utf8str_cis`, the
/// COMPOUND tag) that is not valid UTF-8 is NFS4ERR_INVAL.
pub fn utf8(b: &[u8]) -> Result<&str, Nfsstat4> {
    core::str::from_utf8(b).map_err(|_| Nfsstat4::NFS4ERR_INVAL)
}

/// A Unicode noncharacter (Unicode §23.7): U+FDD0 to U+FDEF and the last
/// two code points of every plane.
pub fn is_noncharacter(c: char) -> bool {
    let n = u32::from(c);
    (0xfdd0..=0xfdef).contains(&n) || n & 0xfffe == 0xfffe
}

impl core::fmt::Debug for Component4 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

/// RFC 8881 §3.2 `component4` (`utf8str_cs`), bounded here.
impl Encode for Component4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_string(&self.0);
    }
}

impl<'a> Decode<'a> for Component4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        dec.opaque_bytes(NFS4_MAXNAMLEN).map(Self)
    }
}

/// `linktext4` (RFC 8881 §3.2): a symbolic link's target, DDP-eligible in
/// CREATE arguments (NF4LNK) and READLINK results (ULB v2 draft §5).
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Linktext4(pub Bytes);

impl core::fmt::Debug for Linktext4 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

/// ULB v2 draft §5: NF4LNK linkdata and READLINK4resok link are
/// DDP-eligible.
impl Encode for Linktext4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_bulk(self.0.clone(), true);
    }
}

impl<'a> Decode<'a> for Linktext4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        dec.opaque_bytes(NFS4_MAXPATHLEN).map(Self)
    }
}

xdr_struct! {
    /// `nfstime4` (RFC 8881 §3.3.1).
    #[derive(Copy, Default, PartialOrd, Ord, Hash)]
    pub struct Nfstime4 {
        /// Seconds since the epoch.
        pub seconds: i64,
        /// Nanoseconds.
        pub nseconds: u32,
    }
}

xdr_struct! {
    /// `specdata4` (RFC 8881 §3.3.6).
    #[derive(Copy, Default)]
    pub struct Specdata4 {
        /// Major number.
        pub specdata1: u32,
        /// Minor number.
        pub specdata2: u32,
    }
}

xdr_struct! {
    /// `fsid4` (RFC 8881 §3.3.7).
    #[derive(Copy, Default, Hash)]
    pub struct Fsid4 {
        /// Major.
        pub major: u64,
        /// Minor.
        pub minor: u64,
    }
}

xdr_struct! {
    /// `change_info4` (RFC 8881 §3.3.9).
    #[derive(Copy, Default)]
    pub struct ChangeInfo4 {
        /// Whether before and after were taken atomically.
        pub atomic: bool,
        /// Change attribute before.
        pub before: u64,
        /// Change attribute after.
        pub after: u64,
    }
}

xdr_struct! {
    /// `stateid4` (RFC 8881 §8.2.1).
    #[derive(Copy, Hash)]
    pub struct Stateid4 {
        /// Sequence number, incremented on each state change.
        pub seqid: u32,
        /// Opaque identity of the state.
        pub other: FixedOpaque<12>,
    }
}

impl Stateid4 {
    /// The anonymous stateid: all zeros (RFC 8881 §8.2.3).
    pub const ANONYMOUS: Self = Self {
        seqid: 0,
        other: FixedOpaque([0; 12]),
    };
    /// The READ bypass stateid: all ones (RFC 8881 §8.2.3).
    pub const BYPASS: Self = Self {
        seqid: u32::MAX,
        other: FixedOpaque([0xff; 12]),
    };
    /// The current stateid: seqid 1, other zero (RFC 8881 §8.2.3).
    pub const CURRENT: Self = Self {
        seqid: 1,
        other: FixedOpaque([0; 12]),
    };
    /// The invalid stateid: seqid `u32::MAX`, other zero (RFC 8881 §8.2.3).
    pub const INVALID: Self = Self {
        seqid: u32::MAX,
        other: FixedOpaque([0; 12]),
    };

    /// True for one of the special stateids (`other` all zeros or all
    /// ones; RFC 8881 §8.2.3).
    pub fn is_special(&self) -> bool {
        self.other.0 == [0; 12] || self.other.0 == [0xff; 12]
    }
}

/// A result `union switch (nfsstat4 status) { case NFS4_OK: T; default:
/// void; }`, the shape of most NFSv4 operation results (RFC 8881 §18).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Res4<T> {
    /// `NFS4_OK` and the `resok` arm.
    Ok(T),
    /// Any other status, no body. `Err(NFS4_OK)` would encode a success
    /// discriminant without its body; use [`Res4::Ok`].
    Err(Nfsstat4),
}

impl<T> Res4<T> {
    /// The status the result encodes.
    pub fn status(&self) -> Nfsstat4 {
        match self {
            Res4::Ok(_) => Nfsstat4::NFS4_OK,
            Res4::Err(s) => *s,
        }
    }

    /// The success body, if any.
    pub fn ok(self) -> Option<T> {
        match self {
            Res4::Ok(t) => Some(t),
            Res4::Err(_) => None,
        }
    }
}

impl<T> From<Result<T, Nfsstat4>> for Res4<T> {
    fn from(r: Result<T, Nfsstat4>) -> Self {
        match r {
            Ok(t) => Res4::Ok(t),
            Err(s) => Res4::Err(s),
        }
    }
}

/// RFC 8881 §18: `union XXX4res switch (nfsstat4 status)`.
impl<T: Encode> Encode for Res4<T> {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            Res4::Ok(t) => {
                enc.put_u32(0);
                t.encode(enc);
            }
            Res4::Err(s) => s.encode(enc),
        }
    }
}

impl<'a, T: Decode<'a>> Decode<'a> for Res4<T> {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        let status: Nfsstat4 = dec.decode()?;
        if status.is_ok() {
            Ok(Res4::Ok(dec.decode()?))
        } else {
            Ok(Res4::Err(status))
        }
    }
}

/// Reads a discriminant and fails with `InvalidEnum` when `ok` rejects it.
pub(crate) fn disc(dec: &mut Decoder<'_>, ok: impl FnOnce(u32) -> bool) -> Result<u32, Error> {
    let at = dec.position();
    let v = dec.u32()?;
    if ok(v) {
        Ok(v)
    } else {
        Err(Error::new(
            ErrorKind::InvalidEnum(v),
            at,
            "union discriminant",
        ))
    }
}
