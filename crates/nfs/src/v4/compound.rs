//! The COMPOUND procedure (RFC 8881 §16.2): operation numbers, the
//! argument and result unions of every operation modelled here, and the
//! COMPOUND header.

use bytes::Bytes;
use xdr::{Bounded, Decode, Decoder, Encode, Encoder, Error, ErrorKind};

use super::open::*;
use super::ops::*;
use super::pnfs::*;
use super::session::*;
use super::v40::*;
use super::v42::*;
use super::{Nfsstat4, Res4, Stateid4, NFS4_MAX_OPS, NFS4_MAX_TAGLEN};

/// The status an operation result carries, whatever its shape.
pub trait OpStatus {
    /// The `nfsstat4` of the result.
    fn op_status(&self) -> Nfsstat4;
}

impl OpStatus for Nfsstat4 {
    fn op_status(&self) -> Nfsstat4 {
        *self
    }
}

impl<T> OpStatus for Res4<T> {
    fn op_status(&self) -> Nfsstat4 {
        self.status()
    }
}

impl<T> OpStatus for LockRes4<T> {
    fn op_status(&self) -> Nfsstat4 {
        self.status()
    }
}

impl OpStatus for Setattr4Res {
    fn op_status(&self) -> Nfsstat4 {
        self.status
    }
}

/// SECINFO4resok / SECINFO_NO_NAME4resok (RFC 8881 §18.29.2, §18.45.2).
pub type SecinfoList = Bounded<Vec<Secinfo4>, MAX_SECINFO>;

macro_rules! operations {
    ($( $(#[$m:meta])* $var:ident = $num:literal $konst:ident ($arg:ty) -> $res:ty; )*) => {
        xdr::open_code! {
            /// `nfs_opnum4` (RFC 8881 §16.2.1, RFC 7862 §16): the
            /// operations this crate decodes, plus OP_ILLEGAL.
            pub struct Opnum4 {
                $( $(#[$m])* $konst = $num, )*
                /// OP_ILLEGAL (RFC 8881 §18.52).
                OP_ILLEGAL = 10044,
            }
        }

        /// One operation's arguments (`nfs_argop4`, RFC 8881 §16.2.1).
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum NfsArgop4 {
            $( $(#[$m])* $var($arg), )*
            /// A defined operation (RFC 8881 §16.2.1, RFC 7862) whose
            /// arguments are not decoded here: the server answers
            /// NFS4ERR_NOTSUPP. Encoding writes the number only.
            Unsupported(Opnum4),
            /// An undefined operation number: NFS4ERR_OP_ILLEGAL
            /// (RFC 8881 §15.2). Encoding writes the number only.
            Illegal(u32),
        }

        impl NfsArgop4 {
            /// The operation number on the wire.
            pub fn opnum(&self) -> Opnum4 {
                match self {
                    $( NfsArgop4::$var(_) => Opnum4::$konst, )*
                    NfsArgop4::Unsupported(o) => *o,
                    NfsArgop4::Illegal(n) => Opnum4(*n),
                }
            }
        }

        /// RFC 8881 §16.2.1 `union nfs_argop4 switch (nfs_opnum4 argop)`.
        impl Encode for NfsArgop4 {
            fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
                self.opnum().encode(enc);
                match self {
                    $( NfsArgop4::$var(a) => a.encode(enc), )*
                    NfsArgop4::Unsupported(_) | NfsArgop4::Illegal(_) => {}
                }
            }
        }

        /// Decodes one operation. [`NfsArgop4::Unsupported`] and
        /// [`NfsArgop4::Illegal`] consume only the operation number: the
        /// COMPOUND stops there (RFC 8881 §15.2), so what follows is never
        /// read.
        impl<'a> Decode<'a> for NfsArgop4 {
            fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
                let op = dec.u32()?;
                Ok(match op {
                    $( $num => NfsArgop4::$var(dec.decode()?), )*
                    n if is_defined_op(n) => NfsArgop4::Unsupported(Opnum4(n)),
                    n => NfsArgop4::Illegal(n),
                })
            }
        }

        /// One operation's result (`nfs_resop4`, RFC 8881 §16.2.2).
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum NfsResop4 {
            $( $(#[$m])* $var($res), )*
            /// Any other operation (or OP_ILLEGAL) answered with an error
            /// status and no body.
            Other(Opnum4, Nfsstat4),
        }

        impl NfsResop4 {
            /// The operation number on the wire.
            pub fn opnum(&self) -> Opnum4 {
                match self {
                    $( NfsResop4::$var(_) => Opnum4::$konst, )*
                    NfsResop4::Other(o, _) => *o,
                }
            }

            /// The operation's status.
            pub fn status(&self) -> Nfsstat4 {
                match self {
                    $( NfsResop4::$var(r) => r.op_status(), )*
                    NfsResop4::Other(_, s) => *s,
                }
            }

            /// An error result for operation `op`: the typed variant when
            /// the operation is modelled (so it encodes exactly as its
            /// error arm, RFC 8881 §18), else [`NfsResop4::Other`].
            pub fn error(op: Opnum4, status: Nfsstat4) -> Self {
                let mut enc = bytes::BytesMut::new();
                status.encode(&mut enc);
                if op == Opnum4::OP_SETATTR {
                    Bitmap4Empty.encode(&mut enc);
                }
                let wire = enc.freeze();
                let mut dec = Decoder::new(&wire);
                match op.0 {
                    $( $num => match dec.decode() {
                        Ok(r) => NfsResop4::$var(r),
                        Err(_) => NfsResop4::Other(op, status),
                    }, )*
                    _ => NfsResop4::Other(op, status),
                }
            }
        }

        /// RFC 8881 §16.2.2 `union nfs_resop4 switch (nfs_opnum4 resop)`.
        impl Encode for NfsResop4 {
            fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
                self.opnum().encode(enc);
                match self {
                    $( NfsResop4::$var(r) => r.encode(enc), )*
                    NfsResop4::Other(_, s) => s.encode(enc),
                }
            }
        }

        /// Decodes one result; an operation not modelled here decodes only
        /// with an error status (its success body is unknown).
        impl<'a> Decode<'a> for NfsResop4 {
            fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
                let at = dec.position();
                let op = dec.u32()?;
                Ok(match op {
                    $( $num => NfsResop4::$var(dec.decode()?), )*
                    n => {
                        let s: Nfsstat4 = dec.decode()?;
                        if s.is_ok() {
                            return Err(Error::new(ErrorKind::InvalidEnum(n), at, "nfs_resop4"));
                        }
                        NfsResop4::Other(Opnum4(n), s)
                    }
                })
            }
        }
    };
}

/// An empty `bitmap4` (the `attrsset` of a failed SETATTR).
struct Bitmap4Empty;

impl Encode for Bitmap4Empty {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_u32(0);
    }
}

/// Whether `n` is an operation defined by NFSv4.1 or 4.2 (RFC 8881
/// §16.2.1: 3 to 58; RFC 7862: 59 to 71; the RFC 8276 extended attribute
/// extension to 4.2: 72 to 75).
pub fn is_defined_op(n: u32) -> bool {
    (3..=75).contains(&n)
}

/// Whether `n` is an operation that exists only from minor version 2 on
/// (RFC 7862 §16: 59 to 71; RFC 8276 §8: 72 to 75): in a minor version 1
/// COMPOUND it is OP_ILLEGAL.
pub fn is_v42_op(n: u32) -> bool {
    (59..=75).contains(&n)
}

/// Whether `n` is an operation of NFSv4.0 (RFC 7530 §16: 3 to 39); in
/// a minor version 0 COMPOUND any other number is OP_ILLEGAL (RFC 7530
/// §15.2).
pub fn is_v40_op(n: u32) -> bool {
    (3..=39).contains(&n)
}

/// Whether `n` is an operation NFSv4.1 removed (RFC 8881 §17: "MUST NOT
/// implement"): OPEN_CONFIRM, RENEW, SETCLIENTID, SETCLIENTID_CONFIRM and
/// RELEASE_LOCKOWNER; a 4.1 server answers them NFS4ERR_NOTSUPP.
pub fn is_v40_only_op(n: u32) -> bool {
    matches!(n, 20 | 30 | 35 | 36 | 39)
}

operations! {
    /// ACCESS (RFC 8881 §18.1).
    Access = 3 OP_ACCESS(Access4Args) -> Res4<Access4ResOk>;
    /// CLOSE (RFC 8881 §18.2).
    Close = 4 OP_CLOSE(Close4Args) -> Res4<Stateid4>;
    /// COMMIT (RFC 8881 §18.3).
    Commit = 5 OP_COMMIT(Commit4Args) -> Res4<Commit4ResOk>;
    /// CREATE (RFC 8881 §18.4).
    Create = 6 OP_CREATE(Create4Args) -> Res4<Create4ResOk>;
    /// DELEGRETURN (RFC 8881 §18.6): the delegation of the current file,
    /// named by its stateid, goes back to the server.
    Delegreturn = 8 OP_DELEGRETURN(Delegreturn4Args) -> Nfsstat4;
    /// GETATTR (RFC 8881 §18.7).
    Getattr = 9 OP_GETATTR(Getattr4Args) -> Res4<Getattr4ResOk>;
    /// GETFH (RFC 8881 §18.8).
    Getfh = 10 OP_GETFH(()) -> Res4<Getfh4ResOk>;
    /// LINK (RFC 8881 §18.9).
    Link = 11 OP_LINK(Link4Args) -> Res4<Cinfo4ResOk>;
    /// LOCK (RFC 8881 §18.10).
    Lock = 12 OP_LOCK(Lock4Args) -> LockRes4<Stateid4>;
    /// LOCKT (RFC 8881 §18.11).
    Lockt = 13 OP_LOCKT(Lockt4Args) -> LockRes4<()>;
    /// LOCKU (RFC 8881 §18.12).
    Locku = 14 OP_LOCKU(Locku4Args) -> Res4<Stateid4>;
    /// LOOKUP (RFC 8881 §18.13).
    Lookup = 15 OP_LOOKUP(Lookup4Args) -> Nfsstat4;
    /// LOOKUPP (RFC 8881 §18.14).
    Lookupp = 16 OP_LOOKUPP(()) -> Nfsstat4;
    /// NVERIFY (RFC 8881 §18.15).
    Nverify = 17 OP_NVERIFY(Verify4Args) -> Nfsstat4;
    /// OPEN (RFC 8881 §18.16).
    Open = 18 OP_OPEN(Open4Args) -> Res4<Open4ResOk>;
    /// OPEN_CONFIRM (RFC 7530 §16.18), NFSv4.0 only.
    OpenConfirm = 20 OP_OPEN_CONFIRM(OpenConfirm4Args) -> Res4<Stateid4>;
    /// OPEN_DOWNGRADE (RFC 8881 §18.18).
    OpenDowngrade = 21 OP_OPEN_DOWNGRADE(OpenDowngrade4Args) -> Res4<Stateid4>;
    /// PUTFH (RFC 8881 §18.19).
    Putfh = 22 OP_PUTFH(Putfh4Args) -> Nfsstat4;
    /// PUTPUBFH (RFC 8881 §18.20).
    Putpubfh = 23 OP_PUTPUBFH(()) -> Nfsstat4;
    /// PUTROOTFH (RFC 8881 §18.21).
    Putrootfh = 24 OP_PUTROOTFH(()) -> Nfsstat4;
    /// READ (RFC 8881 §18.22).
    Read = 25 OP_READ(Read4Args) -> Res4<Read4ResOk>;
    /// READDIR (RFC 8881 §18.23).
    Readdir = 26 OP_READDIR(Readdir4Args) -> Res4<Readdir4ResOk>;
    /// READLINK (RFC 8881 §18.24).
    Readlink = 27 OP_READLINK(()) -> Res4<Readlink4ResOk>;
    /// REMOVE (RFC 8881 §18.25).
    Remove = 28 OP_REMOVE(Remove4Args) -> Res4<Cinfo4ResOk>;
    /// RENAME (RFC 8881 §18.26).
    Rename = 29 OP_RENAME(Rename4Args) -> Res4<Rename4ResOk>;
    /// RENEW (RFC 7530 §16.29), NFSv4.0 only.
    Renew = 30 OP_RENEW(Renew4Args) -> Nfsstat4;
    /// RESTOREFH (RFC 8881 §18.27).
    Restorefh = 31 OP_RESTOREFH(()) -> Nfsstat4;
    /// SAVEFH (RFC 8881 §18.28).
    Savefh = 32 OP_SAVEFH(()) -> Nfsstat4;
    /// SECINFO (RFC 8881 §18.29).
    Secinfo = 33 OP_SECINFO(Lookup4Args) -> Res4<SecinfoList>;
    /// SETATTR (RFC 8881 §18.30).
    Setattr = 34 OP_SETATTR(Setattr4Args) -> Setattr4Res;
    /// SETCLIENTID (RFC 7530 §16.33), NFSv4.0 only.
    Setclientid = 35 OP_SETCLIENTID(Setclientid4Args) -> Setclientid4Res;
    /// SETCLIENTID_CONFIRM (RFC 7530 §16.34), NFSv4.0 only.
    SetclientidConfirm = 36 OP_SETCLIENTID_CONFIRM(SetclientidConfirm4Args) -> Nfsstat4;
    /// VERIFY (RFC 8881 §18.31).
    Verify = 37 OP_VERIFY(Verify4Args) -> Nfsstat4;
    /// WRITE (RFC 8881 §18.32).
    Write = 38 OP_WRITE(Write4Args) -> Res4<Write4ResOk>;
    /// RELEASE_LOCKOWNER (RFC 7530 §16.30), NFSv4.0 only.
    ReleaseLockowner = 39 OP_RELEASE_LOCKOWNER(ReleaseLockowner4Args) -> Nfsstat4;
    /// BACKCHANNEL_CTL (RFC 8881 §18.33).
    BackchannelCtl = 40 OP_BACKCHANNEL_CTL(BackchannelCtl4Args) -> Nfsstat4;
    /// BIND_CONN_TO_SESSION (RFC 8881 §18.34).
    BindConnToSession = 41 OP_BIND_CONN_TO_SESSION(BindConnToSession4Args)
        -> Res4<BindConnToSession4ResOk>;
    /// EXCHANGE_ID (RFC 8881 §18.35).
    ExchangeId = 42 OP_EXCHANGE_ID(ExchangeId4Args) -> Res4<ExchangeId4ResOk>;
    /// CREATE_SESSION (RFC 8881 §18.36).
    CreateSession = 43 OP_CREATE_SESSION(CreateSession4Args) -> Res4<CreateSession4ResOk>;
    /// DESTROY_SESSION (RFC 8881 §18.37).
    DestroySession = 44 OP_DESTROY_SESSION(DestroySession4Args) -> Nfsstat4;
    /// FREE_STATEID (RFC 8881 §18.38).
    FreeStateid = 45 OP_FREE_STATEID(FreeStateid4Args) -> Nfsstat4;
    /// GETDEVICEINFO (RFC 8881 §18.40).
    Getdeviceinfo = 47 OP_GETDEVICEINFO(Getdeviceinfo4Args) -> Getdeviceinfo4Res;
    /// LAYOUTCOMMIT (RFC 8881 §18.42).
    Layoutcommit = 49 OP_LAYOUTCOMMIT(Layoutcommit4Args) -> Res4<Layoutcommit4ResOk>;
    /// LAYOUTGET (RFC 8881 §18.43).
    Layoutget = 50 OP_LAYOUTGET(Layoutget4Args) -> Layoutget4Res;
    /// LAYOUTRETURN (RFC 8881 §18.44).
    Layoutreturn = 51 OP_LAYOUTRETURN(Layoutreturn4Args) -> Res4<Layoutreturn4ResOk>;
    /// SECINFO_NO_NAME (RFC 8881 §18.45).
    SecinfoNoName = 52 OP_SECINFO_NO_NAME(SecinfoStyle4) -> Res4<SecinfoList>;
    /// SEQUENCE (RFC 8881 §18.46).
    Sequence = 53 OP_SEQUENCE(Sequence4Args) -> Res4<Sequence4ResOk>;
    /// TEST_STATEID (RFC 8881 §18.48).
    TestStateid = 55 OP_TEST_STATEID(TestStateid4Args) -> Res4<TestStateid4ResOk>;
    /// DESTROY_CLIENTID (RFC 8881 §18.50).
    DestroyClientid = 57 OP_DESTROY_CLIENTID(DestroyClientid4Args) -> Nfsstat4;
    /// RECLAIM_COMPLETE (RFC 8881 §18.51).
    ReclaimComplete = 58 OP_RECLAIM_COMPLETE(ReclaimComplete4Args) -> Nfsstat4;
    /// ALLOCATE (RFC 7862 §15.1).
    Allocate = 59 OP_ALLOCATE(Allocate4Args) -> Nfsstat4;
    /// COPY (RFC 7862 §15.2).
    Copy = 60 OP_COPY(Copy4Args) -> Res4<Copy4ResOk>;
    /// DEALLOCATE (RFC 7862 §15.4).
    Deallocate = 62 OP_DEALLOCATE(Allocate4Args) -> Nfsstat4;
    /// LAYOUTERROR (RFC 7862 §15.6).
    Layouterror = 64 OP_LAYOUTERROR(Layouterror4Args) -> Nfsstat4;
    /// LAYOUTSTATS (RFC 7862 §15.7).
    Layoutstats = 65 OP_LAYOUTSTATS(Layoutstats4Args) -> Nfsstat4;
    /// OFFLOAD_CANCEL (RFC 7862 §15.8): the asynchronous copy's stateid.
    OffloadCancel = 66 OP_OFFLOAD_CANCEL(Stateid4) -> Nfsstat4;
    /// OFFLOAD_STATUS (RFC 7862 §15.9): the asynchronous copy's stateid.
    OffloadStatus = 67 OP_OFFLOAD_STATUS(Stateid4) -> Res4<OffloadStatus4ResOk>;
    /// READ_PLUS (RFC 7862 §15.10).
    ReadPlus = 68 OP_READ_PLUS(ReadPlus4Args) -> Res4<ReadPlus4ResOk>;
    /// SEEK (RFC 7862 §15.11).
    Seek = 69 OP_SEEK(Seek4Args) -> Res4<Seek4ResOk>;
    /// CLONE (RFC 7862 §15.13).
    Clone = 71 OP_CLONE(Clone4Args) -> Nfsstat4;
    /// GETXATTR (RFC 8276 §8.4.1).
    Getxattr = 72 OP_GETXATTR(Xattrkey4Args) -> Res4<Getxattr4ResOk>;
    /// SETXATTR (RFC 8276 §8.4.2).
    Setxattr = 73 OP_SETXATTR(Setxattr4Args) -> Res4<Cinfo4ResOk>;
    /// LISTXATTRS (RFC 8276 §8.4.3).
    Listxattrs = 74 OP_LISTXATTRS(Listxattrs4Args) -> Res4<Listxattrs4ResOk>;
    /// REMOVEXATTR (RFC 8276 §8.4.4).
    Removexattr = 75 OP_REMOVEXATTR(Xattrkey4Args) -> Res4<Cinfo4ResOk>;
}

/// The fixed part of COMPOUND4args (RFC 8881 §16.2.1): a server reads it,
/// then each operation with [`NfsArgop4::decode`] just before executing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompoundHeader {
    /// Tag, echoed in the reply (at most [`NFS4_MAX_TAGLEN`] bytes).
    pub tag: Bytes,
    /// Minor version.
    pub minorversion: u32,
    /// Number of operations that follow; checked only against the bytes
    /// left (each operation takes at least four), so a server can answer
    /// NFS4ERR_TOO_MANY_OPS against its own `ca_maxoperations`.
    pub numops: usize,
}

impl CompoundHeader {
    /// Reads the tag, minor version and operation count.
    pub fn decode(dec: &mut Decoder<'_>) -> Result<Self, Error> {
        let tag = dec.opaque_bytes(NFS4_MAX_TAGLEN)?;
        let minorversion = dec.u32()?;
        let numops = dec.array_len(usize::MAX, 4)?;
        Ok(Self {
            tag,
            minorversion,
            numops,
        })
    }
}

/// COMPOUND4args (RFC 8881 §16.2.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compound4Args {
    /// Tag.
    pub tag: Bytes,
    /// Minor version (1 or 2).
    pub minorversion: u32,
    /// Operations (at most [`NFS4_MAX_OPS`] when decoded).
    pub argarray: Vec<NfsArgop4>,
}

/// RFC 8881 §16.2.1 `struct COMPOUND4args`.
impl Encode for Compound4Args {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_opaque(&self.tag);
        enc.put_u32(self.minorversion);
        self.argarray.encode(enc);
    }
}

/// Decodes every operation; stops after the first
/// [`NfsArgop4::Unsupported`] or [`NfsArgop4::Illegal`], whose remaining
/// bytes cannot be parsed (the list is then shorter than its count).
impl<'a> Decode<'a> for Compound4Args {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        let at = dec.position();
        let h = CompoundHeader::decode(dec)?;
        if h.numops > NFS4_MAX_OPS {
            return Err(Error::new(
                ErrorKind::LengthExceeded {
                    len: h.numops as u64,
                    max: NFS4_MAX_OPS as u64,
                },
                at,
                "COMPOUND4args argarray",
            ));
        }
        let mut argarray = Vec::with_capacity(h.numops);
        for _ in 0..h.numops {
            let op: NfsArgop4 = dec.decode()?;
            let stop = matches!(op, NfsArgop4::Unsupported(_) | NfsArgop4::Illegal(_));
            argarray.push(op);
            if stop {
                let _ = dec.rest();
                break;
            }
        }
        Ok(Self {
            tag: h.tag,
            minorversion: h.minorversion,
            argarray,
        })
    }
}

/// COMPOUND4res (RFC 8881 §16.2.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compound4Res {
    /// Status of the last operation executed.
    pub status: Nfsstat4,
    /// The request's tag.
    pub tag: Bytes,
    /// Results of the operations executed.
    pub resarray: Vec<NfsResop4>,
}

/// RFC 8881 §16.2.2 `struct COMPOUND4res`.
impl Encode for Compound4Res {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        self.status.encode(enc);
        enc.put_opaque(&self.tag);
        self.resarray.encode(enc);
    }
}

impl<'a> Decode<'a> for Compound4Res {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        Ok(Self {
            status: dec.decode()?,
            tag: dec.opaque_bytes(NFS4_MAX_TAGLEN)?,
            resarray: dec.array(NFS4_MAX_OPS)?,
        })
    }
}
