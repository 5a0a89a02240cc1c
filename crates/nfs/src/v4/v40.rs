//! The operations only NFSv4.0 has (RFC 7530 §16): SETCLIENTID,
//! SETCLIENTID_CONFIRM, RENEW, OPEN_CONFIRM and RELEASE_LOCKOWNER.
//! NFSv4.1 replaced them with sessions; a 4.1 server answers them
//! NFS4ERR_NOTSUPP (RFC 8881 §17: "MUST NOT implement").

use xdr::{Decode, Decoder, Encode, Encoder, Error};

use super::ops::StateOwner4;
use super::{Nfsstat4, Opaque4, Stateid4, Verifier4};

xdr_struct! {
    /// `netaddr4`/`clientaddr4` (RFC 7530 §3.3.9): a universal address.
    pub struct Netaddr4 {
        /// Network id ("tcp", "tcp6", "rdma").
        pub netid: Opaque4,
        /// Universal address ("h1.h2.h3.h4.p1.p2").
        pub addr: Opaque4,
    }
}
xdr_struct! {
    /// `cb_client4` (RFC 7530 §16.33.1): where the callback program runs.
    pub struct CbClient4 {
        /// Callback program number.
        pub program: u32,
        /// Callback address.
        pub location: Netaddr4,
    }
}
xdr_struct! {
    /// `nfs_client_id4` (RFC 7530 §3.3.10).
    pub struct NfsClientId4 {
        /// Boot verifier of the client.
        pub verifier: Verifier4,
        /// Long-lived client identity.
        pub id: Opaque4,
    }
}
xdr_struct! {
    /// SETCLIENTID4args (RFC 7530 §16.33.1).
    pub struct Setclientid4Args {
        /// The client's identity and boot verifier.
        pub client: NfsClientId4,
        /// The callback path.
        pub callback: CbClient4,
        /// Put in every callback's `callback_ident`.
        pub callback_ident: u32,
    }
}
xdr_struct! {
    /// SETCLIENTID4resok (RFC 7530 §16.33.2).
    pub struct Setclientid4ResOk {
        /// The (unconfirmed) client id.
        pub clientid: u64,
        /// What SETCLIENTID_CONFIRM must echo.
        pub setclientid_confirm: Verifier4,
    }
}

/// SETCLIENTID4res (RFC 7530 §16.33.2): NFS4ERR_CLID_INUSE carries the
/// address the identity is in use from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Setclientid4Res {
    /// NFS4_OK.
    Ok(Setclientid4ResOk),
    /// NFS4ERR_CLID_INUSE and `client_using`.
    ClidInuse(Netaddr4),
    /// Any other status, no body.
    Err(Nfsstat4),
}

impl Setclientid4Res {
    /// The status the result encodes.
    pub fn status(&self) -> Nfsstat4 {
        match self {
            Self::Ok(_) => Nfsstat4::NFS4_OK,
            Self::ClidInuse(_) => Nfsstat4::NFS4ERR_CLID_INUSE,
            Self::Err(s) => *s,
        }
    }
}

/// RFC 7530 §16.33.2 `union SETCLIENTID4res switch (nfsstat4 status)`.
impl Encode for Setclientid4Res {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        self.status().encode(enc);
        match self {
            Self::Ok(r) => r.encode(enc),
            Self::ClidInuse(a) => a.encode(enc),
            Self::Err(_) => {}
        }
    }
}

impl<'a> Decode<'a> for Setclientid4Res {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        let s: Nfsstat4 = dec.decode()?;
        Ok(match s {
            Nfsstat4::NFS4_OK => Self::Ok(dec.decode()?),
            Nfsstat4::NFS4ERR_CLID_INUSE => Self::ClidInuse(dec.decode()?),
            s => Self::Err(s),
        })
    }
}

impl super::compound::OpStatus for Setclientid4Res {
    fn op_status(&self) -> Nfsstat4 {
        self.status()
    }
}

xdr_struct! {
    /// SETCLIENTID_CONFIRM4args (RFC 7530 §16.34.1).
    pub struct SetclientidConfirm4Args {
        /// The client id SETCLIENTID returned.
        pub clientid: u64,
        /// The verifier SETCLIENTID returned.
        pub setclientid_confirm: Verifier4,
    }
}
xdr_struct! {
    /// RENEW4args (RFC 7530 §16.29.1).
    pub struct Renew4Args {
        /// The client whose lease to renew.
        pub clientid: u64,
    }
}
xdr_struct! {
    /// OPEN_CONFIRM4args (RFC 7530 §16.18.1).
    pub struct OpenConfirm4Args {
        /// The stateid OPEN returned.
        pub open_stateid: Stateid4,
        /// The open owner's next seqid.
        pub seqid: u32,
    }
}
xdr_struct! {
    /// RELEASE_LOCKOWNER4args (RFC 7530 §16.30.1).
    pub struct ReleaseLockowner4Args {
        /// The lock owner whose state to drop.
        pub lock_owner: StateOwner4,
    }
}
