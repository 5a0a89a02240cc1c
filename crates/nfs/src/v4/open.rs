//! OPEN and OPEN_DOWNGRADE (RFC 8881 §18.16, §18.18): how to create,
//! what to open, and the delegation a server may grant.

use xdr::{Decode, Decoder, Encode, Encoder, Error};

use super::attr::{Bitmap4, Fattr4};
use super::{disc, ChangeInfo4, Component4, StateOwner4, Stateid4, Verifier4};

/// `createhow4` (RFC 8881 §18.16.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Createhow4 {
    /// UNCHECKED4 (0).
    Unchecked(Fattr4),
    /// GUARDED4 (1).
    Guarded(Fattr4),
    /// EXCLUSIVE4 (2).
    Exclusive(Verifier4),
    /// EXCLUSIVE4_1 (3): verifier and attributes.
    Exclusive41(Verifier4, Fattr4),
}

/// RFC 8881 §18.16.1 `union createhow4 switch (createmode4 mode)`.
impl Encode for Createhow4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            Createhow4::Unchecked(a) => {
                enc.put_u32(0);
                a.encode(enc);
            }
            Createhow4::Guarded(a) => {
                enc.put_u32(1);
                a.encode(enc);
            }
            Createhow4::Exclusive(v) => {
                enc.put_u32(2);
                v.encode(enc);
            }
            Createhow4::Exclusive41(v, a) => {
                enc.put_u32(3);
                v.encode(enc);
                a.encode(enc);
            }
        }
    }
}

impl<'a> Decode<'a> for Createhow4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        Ok(match disc(dec, |v| v <= 3)? {
            0 => Createhow4::Unchecked(dec.decode()?),
            1 => Createhow4::Guarded(dec.decode()?),
            2 => Createhow4::Exclusive(dec.decode()?),
            _ => Createhow4::Exclusive41(dec.decode()?, dec.decode()?),
        })
    }
}

/// `openflag4` (RFC 8881 §18.16.1): `None` is OPEN4_NOCREATE.
pub type Openflag4 = Option<Createhow4>;

/// `open_claim4` (RFC 8881 §18.16.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenClaim4 {
    /// CLAIM_NULL (0): a name in the current directory.
    Null(Component4),
    /// CLAIM_PREVIOUS (1): reclaim with the delegation type held.
    Previous(u32),
    /// CLAIM_DELEGATE_CUR (2).
    DelegateCur(Stateid4, Component4),
    /// CLAIM_DELEGATE_PREV (3).
    DelegatePrev(Component4),
    /// CLAIM_FH (4): the current file handle.
    Fh,
    /// CLAIM_DELEG_CUR_FH (5).
    DelegCurFh(Stateid4),
    /// CLAIM_DELEG_PREV_FH (6).
    DelegPrevFh,
}

/// RFC 8881 §18.16.1 `union open_claim4 switch (open_claim_type4 claim)`.
impl Encode for OpenClaim4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            OpenClaim4::Null(n) => {
                enc.put_u32(0);
                n.encode(enc);
            }
            OpenClaim4::Previous(t) => {
                enc.put_u32(1);
                enc.put_u32(*t);
            }
            OpenClaim4::DelegateCur(s, n) => {
                enc.put_u32(2);
                s.encode(enc);
                n.encode(enc);
            }
            OpenClaim4::DelegatePrev(n) => {
                enc.put_u32(3);
                n.encode(enc);
            }
            OpenClaim4::Fh => enc.put_u32(4),
            OpenClaim4::DelegCurFh(s) => {
                enc.put_u32(5);
                s.encode(enc);
            }
            OpenClaim4::DelegPrevFh => enc.put_u32(6),
        }
    }
}

impl<'a> Decode<'a> for OpenClaim4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        Ok(match disc(dec, |v| v <= 6)? {
            0 => OpenClaim4::Null(dec.decode()?),
            1 => OpenClaim4::Previous(dec.u32()?),
            2 => OpenClaim4::DelegateCur(dec.decode()?, dec.decode()?),
            3 => OpenClaim4::DelegatePrev(dec.decode()?),
            4 => OpenClaim4::Fh,
            5 => OpenClaim4::DelegCurFh(dec.decode()?),
            _ => OpenClaim4::DelegPrevFh,
        })
    }
}

/// `openflag4` on the wire (RFC 8881 §18.16.1): `opentype4` then, for
/// OPEN4_CREATE, the `createhow4`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenHow4(pub Openflag4);

/// RFC 8881 §18.16.1 `union openflag4 switch (opentype4 opentype)`.
impl Encode for OpenHow4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match &self.0 {
            None => enc.put_u32(0),
            Some(h) => {
                enc.put_u32(1);
                h.encode(enc);
            }
        }
    }
}

impl<'a> Decode<'a> for OpenHow4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        match disc(dec, |v| v <= 1)? {
            0 => Ok(OpenHow4(None)),
            _ => Ok(OpenHow4(Some(dec.decode()?))),
        }
    }
}

xdr_struct! {
    /// OPEN4args (RFC 8881 §18.16.1).
    pub struct Open4Args {
        /// Ignored in 4.1.
        pub seqid: u32,
        /// OPEN4_SHARE_ACCESS_* plus want bits.
        pub share_access: u32,
        /// OPEN4_SHARE_DENY_*.
        pub share_deny: u32,
        /// The open owner.
        pub owner: StateOwner4,
        /// Create or not.
        pub openhow: OpenHow4,
        /// What to open.
        pub claim: OpenClaim4,
    }
}

xdr_struct! {
    /// `nfsace4` (RFC 8881 §6.2.1).
    pub struct Nfsace4 {
        /// ACE type.
        pub acetype: u32,
        /// ACE flags.
        pub flag: u32,
        /// Access mask.
        pub access_mask: u32,
        /// Principal.
        pub who: super::Utf8Str,
    }
}

/// The delegation granted by OPEN (`open_delegation4`, RFC 8881 §18.16.2).
/// This server never grants one (it has no backchannel yet), but a client
/// decodes every arm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenDelegation4 {
    /// OPEN_DELEGATE_NONE (0).
    None,
    /// OPEN_DELEGATE_READ (1): stateid, recall flag, permissions.
    Read(Stateid4, bool, Nfsace4),
    /// OPEN_DELEGATE_WRITE (2): stateid, recall flag, the space limit as
    /// (`limitby4`, two words or a size), permissions.
    Write(Stateid4, bool, SpaceLimit4, Nfsace4),
    /// OPEN_DELEGATE_NONE_EXT (3): `why_no_delegation4` and, for
    /// WND4_CONTENTION/WND4_RESOURCE, the boolean that follows.
    NoneExt(u32, Option<bool>),
}

/// WND4_NOT_WANTED (`why_no_delegation4`, RFC 8881 §18.16.2): the client
/// asked for no delegation.
pub const WND4_NOT_WANTED: u32 = 0;

/// `nfs_space_limit4` (RFC 8881 §18.16.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpaceLimit4 {
    /// NFS_LIMIT_SIZE (1).
    Size(u64),
    /// NFS_LIMIT_BLOCKS (2): blocks and bytes per block.
    Blocks(u32, u32),
}

/// RFC 8881 §18.16.1 `union nfs_space_limit4 switch (limit_by4 limitby)`.
impl Encode for SpaceLimit4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            SpaceLimit4::Size(s) => {
                enc.put_u32(1);
                enc.put_u64(*s);
            }
            SpaceLimit4::Blocks(n, b) => {
                enc.put_u32(2);
                enc.put_u32(*n);
                enc.put_u32(*b);
            }
        }
    }
}

impl<'a> Decode<'a> for SpaceLimit4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        Ok(match disc(dec, |v| v == 1 || v == 2)? {
            1 => SpaceLimit4::Size(dec.u64()?),
            _ => SpaceLimit4::Blocks(dec.u32()?, dec.u32()?),
        })
    }
}

/// RFC 8881 §18.16.2 `union open_delegation4 switch
/// (open_delegation_type4 delegation_type)`.
impl Encode for OpenDelegation4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            OpenDelegation4::None => enc.put_u32(0),
            OpenDelegation4::Read(s, r, a) => {
                enc.put_u32(1);
                s.encode(enc);
                enc.put_bool(*r);
                a.encode(enc);
            }
            OpenDelegation4::Write(s, r, l, a) => {
                enc.put_u32(2);
                s.encode(enc);
                enc.put_bool(*r);
                l.encode(enc);
                a.encode(enc);
            }
            OpenDelegation4::NoneExt(why, b) => {
                enc.put_u32(3);
                enc.put_u32(*why);
                if let Some(b) = b {
                    enc.put_bool(*b);
                }
            }
        }
    }
}

impl<'a> Decode<'a> for OpenDelegation4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        Ok(match disc(dec, |v| v <= 3)? {
            0 => OpenDelegation4::None,
            1 => OpenDelegation4::Read(dec.decode()?, dec.bool()?, dec.decode()?),
            2 => OpenDelegation4::Write(dec.decode()?, dec.bool()?, dec.decode()?, dec.decode()?),
            _ => {
                let why = dec.u32()?;
                let b = if why == 1 || why == 2 {
                    Some(dec.bool()?)
                } else {
                    None
                };
                OpenDelegation4::NoneExt(why, b)
            }
        })
    }
}

xdr_struct! {
    /// OPEN4resok (RFC 8881 §18.16.2).
    pub struct Open4ResOk {
        /// The open stateid.
        pub stateid: Stateid4,
        /// Directory change.
        pub cinfo: ChangeInfo4,
        /// OPEN4_RESULT_* flags.
        pub rflags: u32,
        /// Attributes set on create.
        pub attrset: Bitmap4,
        /// Delegation granted.
        pub delegation: OpenDelegation4,
    }
}
xdr_struct! {
    /// OPEN_DOWNGRADE4args (RFC 8881 §18.18.1).
    pub struct OpenDowngrade4Args {
        /// The open.
        pub open_stateid: Stateid4,
        /// Ignored in 4.1.
        pub seqid: u32,
        /// New access.
        pub share_access: u32,
        /// New deny.
        pub share_deny: u32,
    }
}
