//! Client id and session operations (RFC 8881 §18.33 to §18.51):
//! EXCHANGE_ID, CREATE_SESSION, DESTROY_SESSION, DESTROY_CLIENTID,
//! SEQUENCE, RECLAIM_COMPLETE, BIND_CONN_TO_SESSION, TEST_STATEID,
//! FREE_STATEID and SECINFO_NO_NAME.

use bytes::Bytes;
use xdr::{Bounded, Decode, Decoder, Encode, Encoder, Error};

use super::attr::Bitmap4;
use super::{disc, Nfsstat4, Nfstime4, Opaque4, Sessionid4, Stateid4, Utf8Str, Verifier4};

/// EXCHGID4_FLAG_SUPP_MOVED_REFER (RFC 8881 §18.35.3).
pub const EXCHGID4_FLAG_SUPP_MOVED_REFER: u32 = 0x0000_0001;
/// EXCHGID4_FLAG_SUPP_MOVED_MIGR (RFC 8881 §18.35.3).
pub const EXCHGID4_FLAG_SUPP_MOVED_MIGR: u32 = 0x0000_0002;
/// EXCHGID4_FLAG_BIND_PRINC_STATEID (RFC 8881 §18.35.3).
pub const EXCHGID4_FLAG_BIND_PRINC_STATEID: u32 = 0x0000_0100;
/// EXCHGID4_FLAG_USE_NON_PNFS (RFC 8881 §18.35.3).
pub const EXCHGID4_FLAG_USE_NON_PNFS: u32 = 0x0001_0000;
/// EXCHGID4_FLAG_USE_PNFS_MDS (RFC 8881 §18.35.3).
pub const EXCHGID4_FLAG_USE_PNFS_MDS: u32 = 0x0002_0000;
/// EXCHGID4_FLAG_USE_PNFS_DS (RFC 8881 §18.35.3).
pub const EXCHGID4_FLAG_USE_PNFS_DS: u32 = 0x0004_0000;
/// EXCHGID4_FLAG_MASK_PNFS (RFC 8881 §18.35.3).
pub const EXCHGID4_FLAG_MASK_PNFS: u32 = 0x0007_0000;
/// EXCHGID4_FLAG_UPD_CONFIRMED_REC_A (RFC 8881 §18.35.3).
pub const EXCHGID4_FLAG_UPD_CONFIRMED_REC_A: u32 = 0x4000_0000;
/// EXCHGID4_FLAG_CONFIRMED_R (RFC 8881 §18.35.3).
pub const EXCHGID4_FLAG_CONFIRMED_R: u32 = 0x8000_0000;

/// CREATE_SESSION4_FLAG_PERSIST (RFC 8881 §18.36.3).
pub const CREATE_SESSION4_FLAG_PERSIST: u32 = 0x01;
/// CREATE_SESSION4_FLAG_CONN_BACK_CHAN (RFC 8881 §18.36.3).
pub const CREATE_SESSION4_FLAG_CONN_BACK_CHAN: u32 = 0x02;
/// CREATE_SESSION4_FLAG_CONN_RDMA (RFC 8881 §18.36.3).
pub const CREATE_SESSION4_FLAG_CONN_RDMA: u32 = 0x04;

/// SEQ4_STATUS_CB_PATH_DOWN (RFC 8881 §18.46.3).
pub const SEQ4_STATUS_CB_PATH_DOWN: u32 = 0x0000_0001;
/// SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED (RFC 8881 §18.46.3).
pub const SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED: u32 = 0x0000_0008;
/// SEQ4_STATUS_CB_PATH_DOWN_SESSION (RFC 8881 §18.46.3).
pub const SEQ4_STATUS_CB_PATH_DOWN_SESSION: u32 = 0x0000_0200;

xdr_struct! {
    /// `client_owner4` (RFC 8881 §2.4).
    pub struct ClientOwner4 {
        /// Boot verifier of the client.
        pub verifier: Verifier4,
        /// The client's unique name.
        pub ownerid: Opaque4,
    }
}

xdr_struct! {
    /// `state_protect_ops4` (RFC 8881 §18.35.1).
    pub struct StateProtectOps4 {
        /// Operations that must use the machine credential.
        pub must_enforce: Bitmap4,
        /// Operations that may.
        pub must_allow: Bitmap4,
    }
}

/// Most GSS handles or algorithms decoded in SSV parameters.
pub const MAX_SSV_LIST: usize = 16;

xdr_struct! {
    /// `ssv_sp_parms4` (RFC 8881 §18.35.1).
    pub struct SsvSpParms4 {
        /// Protected operations.
        pub ops: StateProtectOps4,
        /// Hash algorithm OIDs.
        pub hash_algs: Bounded<Vec<Opaque4>, MAX_SSV_LIST>,
        /// Encryption algorithm OIDs.
        pub encr_algs: Bounded<Vec<Opaque4>, MAX_SSV_LIST>,
        /// SSV window.
        pub window: u32,
        /// GSS handles wanted.
        pub num_gss_handles: u32,
    }
}

/// `state_protect4_a` (RFC 8881 §18.35.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateProtect4A {
    /// SP4_NONE (0).
    None,
    /// SP4_MACH_CRED (1).
    MachCred(StateProtectOps4),
    /// SP4_SSV (2).
    Ssv(SsvSpParms4),
}

/// RFC 8881 §18.35.1 `union state_protect4_a switch (state_protect_how4)`.
impl Encode for StateProtect4A {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            StateProtect4A::None => enc.put_u32(0),
            StateProtect4A::MachCred(o) => {
                enc.put_u32(1);
                o.encode(enc);
            }
            StateProtect4A::Ssv(p) => {
                enc.put_u32(2);
                p.encode(enc);
            }
        }
    }
}

impl<'a> Decode<'a> for StateProtect4A {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        Ok(match disc(dec, |v| v <= 2)? {
            0 => StateProtect4A::None,
            1 => StateProtect4A::MachCred(dec.decode()?),
            _ => StateProtect4A::Ssv(dec.decode()?),
        })
    }
}

xdr_struct! {
    /// `nfs_impl_id4` (RFC 8881 §18.35.1).
    pub struct NfsImplId4 {
        /// DNS domain of the implementer.
        pub nii_domain: Utf8Str,
        /// Product name and version.
        pub nii_name: Utf8Str,
        /// Build date.
        pub nii_date: Nfstime4,
    }
}

xdr_struct! {
    /// EXCHANGE_ID4args (RFC 8881 §18.35.1).
    pub struct ExchangeId4Args {
        /// Who the client is.
        pub clientowner: ClientOwner4,
        /// EXCHGID4_FLAG_*.
        pub flags: u32,
        /// State protection wanted.
        pub state_protect: StateProtect4A,
        /// Implementation id (`nfs_impl_id4<1>`).
        pub client_impl_id: Bounded<Vec<NfsImplId4>, 1>,
    }
}

/// `state_protect4_r` (RFC 8881 §18.35.2). A server that only grants
/// SP4_NONE or SP4_MACH_CRED never sends the SSV arm, so it is not
/// modelled: decoding it fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateProtect4R {
    /// SP4_NONE (0).
    None,
    /// SP4_MACH_CRED (1).
    MachCred(StateProtectOps4),
}

/// RFC 8881 §18.35.2 `union state_protect4_r switch (state_protect_how4)`.
impl Encode for StateProtect4R {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            StateProtect4R::None => enc.put_u32(0),
            StateProtect4R::MachCred(o) => {
                enc.put_u32(1);
                o.encode(enc);
            }
        }
    }
}

impl<'a> Decode<'a> for StateProtect4R {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        Ok(match disc(dec, |v| v <= 1)? {
            0 => StateProtect4R::None,
            _ => StateProtect4R::MachCred(dec.decode()?),
        })
    }
}

xdr_struct! {
    /// `server_owner4` (RFC 8881 §2.5).
    pub struct ServerOwner4 {
        /// Minor id.
        pub minor_id: u64,
        /// Major id.
        pub major_id: Opaque4,
    }
}

xdr_struct! {
    /// EXCHANGE_ID4resok (RFC 8881 §18.35.2).
    pub struct ExchangeId4ResOk {
        /// The client id.
        pub clientid: u64,
        /// Sequence id for CREATE_SESSION.
        pub sequenceid: u32,
        /// EXCHGID4_FLAG_*.
        pub flags: u32,
        /// State protection granted.
        pub state_protect: StateProtect4R,
        /// Server owner.
        pub server_owner: ServerOwner4,
        /// Server scope.
        pub server_scope: Opaque4,
        /// Implementation id.
        pub server_impl_id: Bounded<Vec<NfsImplId4>, 1>,
    }
}

xdr_struct! {
    /// `channel_attrs4` (RFC 8881 §18.36.1).
    #[derive(Default)]
    pub struct ChannelAttrs4 {
        /// Header padding.
        pub headerpadsize: u32,
        /// Largest request.
        pub maxrequestsize: u32,
        /// Largest reply.
        pub maxresponsesize: u32,
        /// Largest cached reply.
        pub maxresponsesize_cached: u32,
        /// Most operations per COMPOUND.
        pub maxoperations: u32,
        /// Slots.
        pub maxrequests: u32,
        /// RDMA inbound read depth (`uint32_t ca_rdma_ird<1>`).
        pub rdma_ird: Bounded<Vec<u32>, 1>,
    }
}

xdr_struct! {
    /// `authsys_parms` as used in `callback_sec_parms4` (RFC 5531 §14).
    pub struct AuthsysParms {
        /// Stamp.
        pub stamp: u32,
        /// Machine name.
        pub machinename: Bounded<Bytes, 255>,
        /// User.
        pub uid: u32,
        /// Group.
        pub gid: u32,
        /// Supplementary groups.
        pub gids: Bounded<Vec<u32>, 16>,
    }
}

/// `callback_sec_parms4` (RFC 8881 §18.36.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallbackSecParms4 {
    /// AUTH_NONE (0).
    None,
    /// AUTH_SYS (1).
    Sys(AuthsysParms),
    /// RPCSEC_GSS (6): service, handle from server, handle from client.
    Gss(u32, Opaque4, Opaque4),
}

/// RFC 8881 §18.36.1 `union callback_sec_parms4 switch (uint32_t
/// cb_secflavor)`.
impl Encode for CallbackSecParms4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            CallbackSecParms4::None => enc.put_u32(0),
            CallbackSecParms4::Sys(p) => {
                enc.put_u32(1);
                p.encode(enc);
            }
            CallbackSecParms4::Gss(s, a, b) => {
                enc.put_u32(6);
                enc.put_u32(*s);
                a.encode(enc);
                b.encode(enc);
            }
        }
    }
}

impl<'a> Decode<'a> for CallbackSecParms4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        Ok(match disc(dec, |v| v <= 1 || v == 6)? {
            0 => CallbackSecParms4::None,
            1 => CallbackSecParms4::Sys(dec.decode()?),
            _ => CallbackSecParms4::Gss(dec.u32()?, dec.decode()?, dec.decode()?),
        })
    }
}

xdr_struct! {
    /// BACKCHANNEL_CTL4args (RFC 8881 §18.33.1): a new callback program
    /// and security parameters for the session's back channel.
    pub struct BackchannelCtl4Args {
        /// The callback program number.
        pub cb_program: u32,
        /// Security parameters for callbacks.
        pub sec_parms: Bounded<Vec<CallbackSecParms4>, 16>,
    }
}
xdr_struct! {
    /// CREATE_SESSION4args (RFC 8881 §18.36.1).
    pub struct CreateSession4Args {
        /// From EXCHANGE_ID.
        pub clientid: u64,
        /// From EXCHANGE_ID (the client-id sequence).
        pub sequence: u32,
        /// CREATE_SESSION4_FLAG_*.
        pub flags: u32,
        /// Fore channel wanted.
        pub fore_chan_attrs: ChannelAttrs4,
        /// Back channel wanted.
        pub back_chan_attrs: ChannelAttrs4,
        /// Callback program number.
        pub cb_program: u32,
        /// Callback security.
        pub sec_parms: Bounded<Vec<CallbackSecParms4>, 16>,
    }
}
xdr_struct! {
    /// CREATE_SESSION4resok (RFC 8881 §18.36.2).
    pub struct CreateSession4ResOk {
        /// New session.
        pub sessionid: Sessionid4,
        /// Echo of the sequence.
        pub sequence: u32,
        /// Flags granted.
        pub flags: u32,
        /// Fore channel granted.
        pub fore_chan_attrs: ChannelAttrs4,
        /// Back channel granted.
        pub back_chan_attrs: ChannelAttrs4,
    }
}
xdr_struct! {
    /// DESTROY_SESSION4args (RFC 8881 §18.37.1).
    pub struct DestroySession4Args {
        /// The session.
        pub sessionid: Sessionid4,
    }
}
xdr_struct! {
    /// DESTROY_CLIENTID4args (RFC 8881 §18.50.1).
    pub struct DestroyClientid4Args {
        /// The client id.
        pub clientid: u64,
    }
}
xdr_struct! {
    /// SEQUENCE4args (RFC 8881 §18.46.1).
    pub struct Sequence4Args {
        /// The session.
        pub sessionid: Sessionid4,
        /// Slot sequence id.
        pub sequenceid: u32,
        /// Slot.
        pub slotid: u32,
        /// Highest slot the client uses.
        pub highest_slotid: u32,
        /// Whether to cache the reply.
        pub cachethis: bool,
    }
}
xdr_struct! {
    /// SEQUENCE4resok (RFC 8881 §18.46.2).
    pub struct Sequence4ResOk {
        /// The session.
        pub sessionid: Sessionid4,
        /// Echo.
        pub sequenceid: u32,
        /// Echo.
        pub slotid: u32,
        /// Highest slot the server will accept now.
        pub highest_slotid: u32,
        /// Highest slot the server wants used.
        pub target_highest_slotid: u32,
        /// SEQ4_STATUS_*.
        pub status_flags: u32,
    }
}
xdr_struct! {
    /// RECLAIM_COMPLETE4args (RFC 8881 §18.51.1).
    pub struct ReclaimComplete4Args {
        /// Only for the current file system.
        pub one_fs: bool,
    }
}

xdr::open_code! {
    /// `channel_dir_from_client4` and `channel_dir_from_server4`
    /// (RFC 8881 §18.34.1, §18.34.2).
    pub struct ChannelDir4 {
        /// Fore channel.
        CDFC4_FORE = 1,
        /// Back channel.
        CDFC4_BACK = 2,
        /// Fore or both (client), both (server: CDFS4_BOTH).
        CDFC4_FORE_OR_BOTH = 3,
        /// Back or both (client only).
        CDFC4_BACK_OR_BOTH = 7,
    }
}

xdr_struct! {
    /// BIND_CONN_TO_SESSION4args (RFC 8881 §18.34.1).
    pub struct BindConnToSession4Args {
        /// The session.
        pub sessid: Sessionid4,
        /// Channels wanted.
        pub dir: ChannelDir4,
        /// RDMA mode.
        pub use_conn_in_rdma_mode: bool,
    }
}
xdr_struct! {
    /// BIND_CONN_TO_SESSION4resok (RFC 8881 §18.34.2).
    pub struct BindConnToSession4ResOk {
        /// The session.
        pub sessid: Sessionid4,
        /// Channels bound (CDFS4_FORE 1, CDFS4_BACK 2, CDFS4_BOTH 3).
        pub dir: ChannelDir4,
        /// RDMA mode.
        pub use_conn_in_rdma_mode: bool,
    }
}

/// Most stateids decoded in one TEST_STATEID.
pub const MAX_TEST_STATEIDS: usize = 1024;

xdr_struct! {
    /// TEST_STATEID4args (RFC 8881 §18.48.1).
    pub struct TestStateid4Args {
        /// Stateids to test.
        pub stateids: Bounded<Vec<Stateid4>, MAX_TEST_STATEIDS>,
    }
}
xdr_struct! {
    /// TEST_STATEID4resok (RFC 8881 §18.48.2).
    pub struct TestStateid4ResOk {
        /// One status per stateid.
        pub status_codes: Bounded<Vec<Nfsstat4>, MAX_TEST_STATEIDS>,
    }
}
xdr_struct! {
    /// FREE_STATEID4args (RFC 8881 §18.38.1).
    pub struct FreeStateid4Args {
        /// The stateid.
        pub stateid: Stateid4,
    }
}

xdr::open_code! {
    /// `secinfo_style4` (RFC 8881 §18.45.1).
    pub struct SecinfoStyle4 {
        /// The current file handle.
        SECINFO_STYLE4_CURRENT_FH = 0,
        /// Its parent.
        SECINFO_STYLE4_PARENT = 1,
    }
}
