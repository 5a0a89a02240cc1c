//! Arguments and results of the NFSv4.1/4.2 file operations (RFC 8881
//! §18, RFC 7862 §15). Session and client-id operations are in
//! [`super::session`].

use xdr::{Decode, Decoder, Encode, Encoder, Error};

use super::attr::{Bitmap4, Fattr4};
use super::{
    ChangeInfo4, Component4, Data4, Linktext4, NfsFh4, Opaque4, Specdata4, StableHow4, Stateid4,
    Verifier4,
};

/// ACCESS4_READ (RFC 8881 §18.1.3).
pub const ACCESS4_READ: u32 = 0x01;
/// ACCESS4_LOOKUP (RFC 8881 §18.1.3).
pub const ACCESS4_LOOKUP: u32 = 0x02;
/// ACCESS4_MODIFY (RFC 8881 §18.1.3).
pub const ACCESS4_MODIFY: u32 = 0x04;
/// ACCESS4_EXTEND (RFC 8881 §18.1.3).
pub const ACCESS4_EXTEND: u32 = 0x08;
/// ACCESS4_DELETE (RFC 8881 §18.1.3).
pub const ACCESS4_DELETE: u32 = 0x10;
/// ACCESS4_XAREAD: read extended attributes (RFC 8276 §8.3).
pub const ACCESS4_XAREAD: u32 = 0x40;
/// ACCESS4_XAWRITE: set or remove extended attributes (RFC 8276 §8.3).
pub const ACCESS4_XAWRITE: u32 = 0x80;
/// ACCESS4_XALIST: list extended attributes (RFC 8276 §8.3).
pub const ACCESS4_XALIST: u32 = 0x100;
/// ACCESS4_EXECUTE (RFC 8881 §18.1.3).
pub const ACCESS4_EXECUTE: u32 = 0x20;

/// OPEN4_SHARE_ACCESS_READ (RFC 8881 §18.16.3).
pub const OPEN4_SHARE_ACCESS_READ: u32 = 1;
/// OPEN4_SHARE_ACCESS_WRITE (RFC 8881 §18.16.3).
pub const OPEN4_SHARE_ACCESS_WRITE: u32 = 2;
/// OPEN4_SHARE_ACCESS_BOTH (RFC 8881 §18.16.3).
pub const OPEN4_SHARE_ACCESS_BOTH: u32 = 3;
/// OPEN4_SHARE_DENY_NONE (RFC 8881 §18.16.3).
pub const OPEN4_SHARE_DENY_NONE: u32 = 0;
/// OPEN4_SHARE_DENY_READ (RFC 8881 §18.16.3).
pub const OPEN4_SHARE_DENY_READ: u32 = 1;
/// OPEN4_SHARE_DENY_WRITE (RFC 8881 §18.16.3).
pub const OPEN4_SHARE_DENY_WRITE: u32 = 2;
/// OPEN4_SHARE_DENY_BOTH (RFC 8881 §18.16.3).
pub const OPEN4_SHARE_DENY_BOTH: u32 = 3;
/// Mask of the delegation-want bits in `share_access` (RFC 8881 §18.16.3).
pub const OPEN4_SHARE_WANT_MASK: u32 = 0xff00;
/// OPEN4_RESULT_CONFIRM, never set by a 4.1 server (RFC 8881 §18.16.4).
pub const OPEN4_RESULT_CONFIRM: u32 = 0x02;
/// OPEN4_RESULT_LOCKTYPE_POSIX (RFC 8881 §18.16.4).
pub const OPEN4_RESULT_LOCKTYPE_POSIX: u32 = 0x04;
/// OPEN4_RESULT_PRESERVE_UNLINKED (RFC 8881 §18.16.4).
pub const OPEN4_RESULT_PRESERVE_UNLINKED: u32 = 0x08;

xdr_struct! {
    /// ACCESS4args (RFC 8881 §18.1.1).
    pub struct Access4Args {
        /// Access bits to check.
        pub access: u32,
    }
}
xdr_struct! {
    /// ACCESS4resok (RFC 8881 §18.1.2).
    pub struct Access4ResOk {
        /// Bits the server could evaluate.
        pub supported: u32,
        /// Bits granted.
        pub access: u32,
    }
}
xdr_struct! {
    /// CLOSE4args (RFC 8881 §18.2.1).
    pub struct Close4Args {
        /// Ignored in 4.1.
        pub seqid: u32,
        /// The open.
        pub open_stateid: Stateid4,
    }
}
xdr_struct! {
    /// DELEGRETURN4args (RFC 8881 §18.6.1).
    pub struct Delegreturn4Args {
        /// The delegation returned.
        pub deleg_stateid: Stateid4,
    }
}
xdr_struct! {
    /// COMMIT4args (RFC 8881 §18.3.1).
    pub struct Commit4Args {
        /// Start.
        pub offset: u64,
        /// Bytes (0: to the end).
        pub count: u32,
    }
}
xdr_struct! {
    /// COMMIT4resok (RFC 8881 §18.3.2).
    pub struct Commit4ResOk {
        /// Write verifier.
        pub writeverf: Verifier4,
    }
}

/// `createtype4` (RFC 8881 §18.4.1): the kind of object CREATE makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Createtype4 {
    /// NF4LNK with the target (DDP-eligible, ULB v2 draft §5).
    Link(Linktext4),
    /// NF4BLK with device numbers.
    Block(Specdata4),
    /// NF4CHR with device numbers.
    Char(Specdata4),
    /// NF4SOCK.
    Socket,
    /// NF4FIFO.
    Fifo,
    /// NF4DIR.
    Dir,
    /// Any other type (the server answers NFS4ERR_BADTYPE).
    Other(u32),
}

/// RFC 8881 §18.4.1 `union createtype4 switch (nfs_ftype4 type)`.
impl Encode for Createtype4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            Createtype4::Link(l) => {
                enc.put_u32(5);
                l.encode(enc);
            }
            Createtype4::Block(s) => {
                enc.put_u32(3);
                s.encode(enc);
            }
            Createtype4::Char(s) => {
                enc.put_u32(4);
                s.encode(enc);
            }
            Createtype4::Socket => enc.put_u32(6),
            Createtype4::Fifo => enc.put_u32(7),
            Createtype4::Dir => enc.put_u32(2),
            Createtype4::Other(t) => enc.put_u32(*t),
        }
    }
}

impl<'a> Decode<'a> for Createtype4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        Ok(match dec.u32()? {
            5 => Createtype4::Link(dec.decode()?),
            3 => Createtype4::Block(dec.decode()?),
            4 => Createtype4::Char(dec.decode()?),
            6 => Createtype4::Socket,
            7 => Createtype4::Fifo,
            2 => Createtype4::Dir,
            t => Createtype4::Other(t),
        })
    }
}

xdr_struct! {
    /// CREATE4args (RFC 8881 §18.4.1).
    pub struct Create4Args {
        /// What to create.
        pub objtype: Createtype4,
        /// Its name.
        pub objname: Component4,
        /// Initial attributes.
        pub createattrs: Fattr4,
    }
}
xdr_struct! {
    /// CREATE4resok (RFC 8881 §18.4.2).
    pub struct Create4ResOk {
        /// Directory change.
        pub cinfo: ChangeInfo4,
        /// Attributes set.
        pub attrset: Bitmap4,
    }
}
xdr_struct! {
    /// GETATTR4args (RFC 8881 §18.7.1).
    pub struct Getattr4Args {
        /// Attributes wanted.
        pub attr_request: Bitmap4,
    }
}
xdr_struct! {
    /// GETATTR4resok (RFC 8881 §18.7.2).
    pub struct Getattr4ResOk {
        /// The attributes.
        pub obj_attributes: Fattr4,
    }
}
xdr_struct! {
    /// GETFH4resok (RFC 8881 §18.8.2).
    pub struct Getfh4ResOk {
        /// The current file handle.
        pub object: NfsFh4,
    }
}
xdr_struct! {
    /// LINK4args (RFC 8881 §18.9.1).
    pub struct Link4Args {
        /// New name in the current (directory) handle.
        pub newname: Component4,
    }
}
xdr_struct! {
    /// LINK4resok, REMOVE4resok (RFC 8881 §18.9.2, §18.25.2).
    pub struct Cinfo4ResOk {
        /// Directory change.
        pub cinfo: ChangeInfo4,
    }
}

xdr::open_code! {
    /// `nfs_lock_type4` (RFC 8881 §18.10.1).
    pub struct NfsLockType4 {
        /// Shared lock.
        READ_LT = 1,
        /// Exclusive lock.
        WRITE_LT = 2,
        /// Blocking shared lock.
        READW_LT = 3,
        /// Blocking exclusive lock.
        WRITEW_LT = 4,
    }
}

impl NfsLockType4 {
    /// True for WRITE_LT and WRITEW_LT.
    pub fn is_write(&self) -> bool {
        *self == Self::WRITE_LT || *self == Self::WRITEW_LT
    }
}

xdr_struct! {
    /// `lock_owner4`/`open_owner4` (`state_owner4`, RFC 8881 §3.3.11).
    #[derive(Hash)]
    pub struct StateOwner4 {
        /// Client id.
        pub clientid: u64,
        /// Owner, at most `NFS4_OPAQUE_LIMIT` bytes.
        pub owner: Opaque4,
    }
}

xdr_struct! {
    /// `open_to_lock_owner4` (RFC 8881 §18.10.1).
    pub struct OpenToLockOwner4 {
        /// Ignored in 4.1.
        pub open_seqid: u32,
        /// The open the lock derives from.
        pub open_stateid: Stateid4,
        /// Ignored in 4.1.
        pub lock_seqid: u32,
        /// The new lock owner.
        pub lock_owner: StateOwner4,
    }
}
xdr_struct! {
    /// `exist_lock_owner4` (RFC 8881 §18.10.1).
    pub struct ExistLockOwner4 {
        /// The lock stateid.
        pub lock_stateid: Stateid4,
        /// Ignored in 4.1.
        pub lock_seqid: u32,
    }
}

/// `locker4` (RFC 8881 §18.10.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locker4 {
    /// `new_lock_owner` TRUE.
    New(OpenToLockOwner4),
    /// `new_lock_owner` FALSE.
    Existing(ExistLockOwner4),
}

/// RFC 8881 §18.10.1 `union locker4 switch (bool new_lock_owner)`.
impl Encode for Locker4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            Locker4::New(o) => {
                enc.put_bool(true);
                o.encode(enc);
            }
            Locker4::Existing(o) => {
                enc.put_bool(false);
                o.encode(enc);
            }
        }
    }
}

impl<'a> Decode<'a> for Locker4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        if dec.bool()? {
            Ok(Locker4::New(dec.decode()?))
        } else {
            Ok(Locker4::Existing(dec.decode()?))
        }
    }
}

xdr_struct! {
    /// LOCK4args (RFC 8881 §18.10.1).
    pub struct Lock4Args {
        /// Lock type.
        pub locktype: NfsLockType4,
        /// A reclaim after a restart.
        pub reclaim: bool,
        /// Start.
        pub offset: u64,
        /// Length (`NFS4_UINT64_MAX`: to the end).
        pub length: u64,
        /// Who locks.
        pub locker: Locker4,
    }
}
xdr_struct! {
    /// LOCK4denied (RFC 8881 §18.10.2): the conflicting lock.
    pub struct Lock4Denied {
        /// Start.
        pub offset: u64,
        /// Length.
        pub length: u64,
        /// Type.
        pub locktype: NfsLockType4,
        /// Holder.
        pub owner: StateOwner4,
    }
}

/// LOCK4res and LOCKT4res (RFC 8881 §18.10.2, §18.11.2): a body on success
/// (the lock stateid for LOCK, void for LOCKT) or the conflicting lock on
/// NFS4ERR_DENIED.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockRes4<T> {
    /// NFS4_OK.
    Ok(T),
    /// NFS4ERR_DENIED with the conflict.
    Denied(Lock4Denied),
    /// Any other error.
    Err(super::Nfsstat4),
}

impl<T> LockRes4<T> {
    /// The status the result encodes.
    pub fn status(&self) -> super::Nfsstat4 {
        match self {
            LockRes4::Ok(_) => super::Nfsstat4::NFS4_OK,
            LockRes4::Denied(_) => super::Nfsstat4::NFS4ERR_DENIED,
            LockRes4::Err(s) => *s,
        }
    }
}

/// RFC 8881 §18.10.2 `union LOCK4res switch (nfsstat4 status)`.
impl<T: Encode> Encode for LockRes4<T> {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            LockRes4::Ok(t) => {
                enc.put_u32(0);
                t.encode(enc);
            }
            LockRes4::Denied(d) => {
                super::Nfsstat4::NFS4ERR_DENIED.encode(enc);
                d.encode(enc);
            }
            LockRes4::Err(s) => s.encode(enc),
        }
    }
}

impl<'a, T: Decode<'a>> Decode<'a> for LockRes4<T> {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        let s: super::Nfsstat4 = dec.decode()?;
        Ok(match s {
            super::Nfsstat4::NFS4_OK => LockRes4::Ok(dec.decode()?),
            super::Nfsstat4::NFS4ERR_DENIED => LockRes4::Denied(dec.decode()?),
            s => LockRes4::Err(s),
        })
    }
}

xdr_struct! {
    /// LOCKT4args (RFC 8881 §18.11.1).
    pub struct Lockt4Args {
        /// Lock type.
        pub locktype: NfsLockType4,
        /// Start.
        pub offset: u64,
        /// Length.
        pub length: u64,
        /// Who asks.
        pub owner: StateOwner4,
    }
}
xdr_struct! {
    /// LOCKU4args (RFC 8881 §18.12.1).
    pub struct Locku4Args {
        /// Lock type.
        pub locktype: NfsLockType4,
        /// Ignored in 4.1.
        pub seqid: u32,
        /// The lock stateid.
        pub lock_stateid: Stateid4,
        /// Start.
        pub offset: u64,
        /// Length.
        pub length: u64,
    }
}
xdr_struct! {
    /// LOOKUP4args (RFC 8881 §18.13.1).
    pub struct Lookup4Args {
        /// The name.
        pub objname: Component4,
    }
}

xdr_struct! {
    /// PUTFH4args (RFC 8881 §18.19.1).
    pub struct Putfh4Args {
        /// The handle.
        pub object: NfsFh4,
    }
}
xdr_struct! {
    /// READ4args (RFC 8881 §18.22.1).
    pub struct Read4Args {
        /// The open, lock or special stateid.
        pub stateid: Stateid4,
        /// Start.
        pub offset: u64,
        /// Bytes wanted.
        pub count: u32,
    }
}
xdr_struct! {
    /// READ4resok (RFC 8881 §18.22.2); `data` is DDP-eligible (ULB v2
    /// draft §5).
    pub struct Read4ResOk {
        /// Whether the read reached the end.
        pub eof: bool,
        /// The bytes.
        pub data: Data4,
    }
}
xdr_struct! {
    /// READDIR4args (RFC 8881 §18.23.1).
    pub struct Readdir4Args {
        /// Resume after this cookie (0: start).
        pub cookie: u64,
        /// Verifier of the cookie.
        pub cookieverf: Verifier4,
        /// Bytes of names and cookies wanted.
        pub dircount: u32,
        /// Largest reply body.
        pub maxcount: u32,
        /// Attributes per entry.
        pub attr_request: Bitmap4,
    }
}
xdr_struct! {
    /// One `entry4` (RFC 8881 §18.23.2) without the list link.
    pub struct Entry4 {
        /// Resume cookie.
        pub cookie: u64,
        /// Name.
        pub name: Component4,
        /// Attributes.
        pub attrs: Fattr4,
    }
}

/// Most entries decoded from one READDIR reply.
pub const MAX_READDIR_ENTRIES: usize = 1 << 16;

/// READDIR4resok (RFC 8881 §18.23.2): the verifier and `dirlist4`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readdir4ResOk {
    /// Cookie verifier.
    pub cookieverf: Verifier4,
    /// Entries (the XDR linked list `entry4 *entries`).
    pub entries: Vec<Entry4>,
    /// No more entries.
    pub eof: bool,
}

/// RFC 8881 §18.23.2: `dirlist4` is an optional-linked list.
impl Encode for Readdir4ResOk {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        self.cookieverf.encode(enc);
        for e in &self.entries {
            enc.put_bool(true);
            e.encode(enc);
        }
        enc.put_bool(false);
        enc.put_bool(self.eof);
    }
}

impl<'a> Decode<'a> for Readdir4ResOk {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        let cookieverf = dec.decode()?;
        let mut entries = Vec::new();
        while dec.bool()? {
            if entries.len() >= MAX_READDIR_ENTRIES {
                return Err(Error::new(
                    xdr::ErrorKind::LengthExceeded {
                        len: entries.len() as u64 + 1,
                        max: MAX_READDIR_ENTRIES as u64,
                    },
                    dec.position(),
                    "dirlist4",
                ));
            }
            entries.push(dec.decode()?);
        }
        Ok(Self {
            cookieverf,
            entries,
            eof: dec.bool()?,
        })
    }
}

xdr_struct! {
    /// READLINK4resok (RFC 8881 §18.24.2); `link` is DDP-eligible.
    pub struct Readlink4ResOk {
        /// Target.
        pub link: Linktext4,
    }
}
xdr_struct! {
    /// REMOVE4args (RFC 8881 §18.25.1).
    pub struct Remove4Args {
        /// Name in the current directory.
        pub target: Component4,
    }
}
xdr_struct! {
    /// RENAME4args (RFC 8881 §18.26.1): from the saved directory to the
    /// current one.
    pub struct Rename4Args {
        /// Old name (saved handle's directory).
        pub oldname: Component4,
        /// New name (current handle's directory).
        pub newname: Component4,
    }
}
xdr_struct! {
    /// RENAME4resok (RFC 8881 §18.26.2).
    pub struct Rename4ResOk {
        /// Source directory change.
        pub source_cinfo: ChangeInfo4,
        /// Target directory change.
        pub target_cinfo: ChangeInfo4,
    }
}

/// One `secinfo4` (RFC 8881 §18.29.2): a flavor, with the RPCSEC_GSS
/// triple for flavor 6.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Secinfo4 {
    /// AUTH_NONE, AUTH_SYS or another flavor without data.
    Flavor(u32),
    /// RPCSEC_GSS (6): mechanism OID, QOP and service.
    Gss(Opaque4, u32, u32),
}

/// RFC 8881 §18.29.2 `union secinfo4 switch (uint32_t flavor)`.
impl Encode for Secinfo4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            Secinfo4::Flavor(f) => enc.put_u32(*f),
            Secinfo4::Gss(oid, qop, svc) => {
                enc.put_u32(6);
                oid.encode(enc);
                enc.put_u32(*qop);
                enc.put_u32(*svc);
            }
        }
    }
}

impl<'a> Decode<'a> for Secinfo4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        match dec.u32()? {
            6 => Ok(Secinfo4::Gss(dec.decode()?, dec.u32()?, dec.u32()?)),
            f => Ok(Secinfo4::Flavor(f)),
        }
    }
}

/// Most flavors decoded from a SECINFO reply.
pub const MAX_SECINFO: usize = 16;

xdr_struct! {
    /// SETATTR4args (RFC 8881 §18.30.1).
    pub struct Setattr4Args {
        /// Stateid when the size changes, else anonymous.
        pub stateid: Stateid4,
        /// New attributes.
        pub obj_attributes: Fattr4,
    }
}
xdr_struct! {
    /// SETATTR4res (RFC 8881 §18.30.2): `attrsset` in every case.
    pub struct Setattr4Res {
        /// Status.
        pub status: super::Nfsstat4,
        /// Attributes set.
        pub attrsset: Bitmap4,
    }
}
xdr_struct! {
    /// WRITE4args (RFC 8881 §18.32.1); `data` is DDP-eligible.
    pub struct Write4Args {
        /// The open, lock or special stateid.
        pub stateid: Stateid4,
        /// Start.
        pub offset: u64,
        /// Stability wanted.
        pub stable: StableHow4,
        /// The bytes.
        pub data: Data4,
    }
}
xdr_struct! {
    /// WRITE4resok (RFC 8881 §18.32.2).
    pub struct Write4ResOk {
        /// Bytes written.
        pub count: u32,
        /// Stability reached.
        pub committed: StableHow4,
        /// Write verifier.
        pub writeverf: Verifier4,
    }
}
xdr_struct! {
    /// ALLOCATE4args and DEALLOCATE4args (RFC 7862 §15.1.1, §15.4.1).
    pub struct Allocate4Args {
        /// Stateid.
        pub stateid: Stateid4,
        /// Start.
        pub offset: u64,
        /// Length.
        pub length: u64,
    }
}

xdr::open_code! {
    /// `data_content4` (RFC 7862 §15.11.1).
    pub struct DataContent4 {
        /// Next data.
        NFS4_CONTENT_DATA = 0,
        /// Next hole.
        NFS4_CONTENT_HOLE = 1,
    }
}

xdr_struct! {
    /// SEEK4args (RFC 7862 §15.11.1).
    pub struct Seek4Args {
        /// Stateid.
        pub stateid: Stateid4,
        /// Start.
        pub offset: u64,
        /// Data or hole.
        pub what: DataContent4,
    }
}
xdr_struct! {
    /// SEEK4resok (RFC 7862 §15.11.2).
    pub struct Seek4ResOk {
        /// No data or hole follows.
        pub eof: bool,
        /// Where it starts.
        pub offset: u64,
    }
}

xdr_struct! {
    /// VERIFY4args and NVERIFY4args (RFC 8881 §18.31.1, §18.15.1).
    pub struct Verify4Args {
        /// The attributes, with the values the client expects.
        pub obj_attributes: Fattr4,
    }
}

/// Largest extended attribute value decoded (as Linux's
/// `XATTR_SIZE_MAX`); RFC 8276 §8.3 leaves `xattrvalue4` unbounded.
pub const XATTR_SIZE_MAX: usize = 64 << 10;
/// Most names decoded from one LISTXATTRS reply.
pub const MAX_XATTR_NAMES: usize = 1 << 12;
/// Largest SETXATTR value decoded: more than any request a server takes
/// (its `ca_maxrequestsize`), so that a server sees a value above
/// [`XATTR_SIZE_MAX`] and answers NFS4ERR_XATTR2BIG (RFC 8276 §8.4.2.3)
/// rather than a decoding error. The bytes are those of the request
/// already received: decoding allocates nothing for them.
pub const SETXATTR_DECODE_MAX: usize = 4 << 20;

/// `xattrvalue4` (RFC 8276 §8.3), bounded by [`XATTR_SIZE_MAX`].
pub type Xattrvalue4 = xdr::Bounded<bytes::Bytes, XATTR_SIZE_MAX>;

xdr::open_code! {
    /// `setxattr_option4` (RFC 8276 §8.4.2.1).
    pub struct SetxattrOption4 {
        /// Create or replace.
        SETXATTR4_EITHER = 0,
        /// Create only.
        SETXATTR4_CREATE = 1,
        /// Replace only.
        SETXATTR4_REPLACE = 2,
    }
}

xdr_struct! {
    /// GETXATTR4args and REMOVEXATTR4args (RFC 8276 §8.4.1.1,
    /// §8.4.4.1): one `xattrkey4` (a `component4`).
    pub struct Xattrkey4Args {
        /// The attribute's name.
        pub name: Component4,
    }
}
xdr_struct! {
    /// GETXATTR4resok (RFC 8276 §8.4.1.2).
    pub struct Getxattr4ResOk {
        /// The value.
        pub value: Xattrvalue4,
    }
}
xdr_struct! {
    /// SETXATTR4args (RFC 8276 §8.4.2.1).
    pub struct Setxattr4Args {
        /// Create, replace or either.
        pub option: SetxattrOption4,
        /// The attribute's name.
        pub key: Component4,
        /// The value (checked against [`XATTR_SIZE_MAX`] by the server).
        pub value: xdr::Bounded<bytes::Bytes, SETXATTR_DECODE_MAX>,
    }
}
xdr_struct! {
    /// LISTXATTRS4args (RFC 8276 §8.4.3.1).
    pub struct Listxattrs4Args {
        /// Resume after this cookie (0: start).
        pub cookie: u64,
        /// Largest reply body.
        pub maxcount: u32,
    }
}
xdr_struct! {
    /// LISTXATTRS4resok (RFC 8276 §8.4.3.2).
    pub struct Listxattrs4ResOk {
        /// Resume cookie.
        pub cookie: u64,
        /// Names.
        pub names: xdr::Bounded<Vec<Component4>, MAX_XATTR_NAMES>,
        /// No more names.
        pub eof: bool,
    }
}
