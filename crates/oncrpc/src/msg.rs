//! RPC messages (RFC 5531 §9): call and reply headers, authentication
//! (RFC 5531 §8, Appendix A) and the status code spaces.

use bytes::Bytes;
use xdr::{Decoder, Encode, Encoder, ErrorKind, ResultExt};

/// The only RPC protocol version (RFC 5531 §9: `rpcvers` MUST be 2).
pub const RPC_VERSION: u32 = 2;

/// Maximum size of an `opaque_auth` body (RFC 5531 §8.2).
pub const MAX_AUTH_BYTES: usize = 400;

/// Maximum `machinename` length in an AUTH_SYS credential (RFC 5531
/// Appendix A).
pub const MAX_MACHINENAME: usize = 255;

/// Maximum number of supplementary groups in an AUTH_SYS credential
/// (RFC 5531 Appendix A).
pub const MAX_AUTH_SYS_GIDS: usize = 16;

xdr::open_code! {
    /// `msg_type` (RFC 5531 §9).
    pub struct MsgType {
        /// A call.
        CALL = 0,
        /// A reply.
        REPLY = 1,
    }
}

xdr::open_code! {
    /// `reply_stat` (RFC 5531 §9).
    pub struct ReplyStat {
        /// The call was accepted (its `accept_stat` follows).
        MSG_ACCEPTED = 0,
        /// The call was denied (its `reject_stat` follows).
        MSG_DENIED = 1,
    }
}

xdr::open_code! {
    /// `accept_stat` (RFC 5531 §9). Unknown values decode (the RFC's
    /// `default: void` arm).
    pub struct AcceptStat {
        /// RPC executed successfully.
        SUCCESS = 0,
        /// Remote hasn't exported the program.
        PROG_UNAVAIL = 1,
        /// Remote can't support the version number.
        PROG_MISMATCH = 2,
        /// Program can't support the procedure.
        PROC_UNAVAIL = 3,
        /// Procedure can't decode the parameters.
        GARBAGE_ARGS = 4,
        /// Errors such as memory allocation failure.
        SYSTEM_ERR = 5,
    }
}

xdr::open_code! {
    /// `reject_stat` (RFC 5531 §9).
    pub struct RejectStat {
        /// RPC version number != 2.
        RPC_MISMATCH = 0,
        /// Remote can't authenticate the caller.
        AUTH_ERROR = 1,
    }
}

xdr::open_code! {
    /// `auth_stat` (RFC 5531 §9).
    pub struct AuthStat {
        /// Success.
        AUTH_OK = 0,
        /// Bad credential (seal broken).
        AUTH_BADCRED = 1,
        /// Client must begin a new session.
        AUTH_REJECTEDCRED = 2,
        /// Bad verifier (seal broken).
        AUTH_BADVERF = 3,
        /// Verifier expired or replayed.
        AUTH_REJECTEDVERF = 4,
        /// Rejected for security reasons.
        AUTH_TOOWEAK = 5,
        /// Bogus response verifier.
        AUTH_INVALIDRESP = 6,
        /// Reason unknown.
        AUTH_FAILED = 7,
        /// Kerberos generic error.
        AUTH_KERB_GENERIC = 8,
        /// Time of credential expired.
        AUTH_TIMEEXPIRE = 9,
        /// Problem with ticket file.
        AUTH_TKT_FILE = 10,
        /// Can't decode authenticator.
        AUTH_DECODE = 11,
        /// Wrong net address in ticket.
        AUTH_NET_ADDR = 12,
        /// No credentials for user (RPCSEC_GSS).
        RPCSEC_GSS_CREDPROBLEM = 13,
        /// Problem with context (RPCSEC_GSS).
        RPCSEC_GSS_CTXPROBLEM = 14,
    }
}

xdr::open_code! {
    /// `auth_flavor` (RFC 5531 §8.2, §16).
    pub struct AuthFlavor {
        /// No authentication (RFC 5531 §10.1).
        AUTH_NONE = 0,
        /// UNIX-style credentials (RFC 5531 §10.2, Appendix A).
        AUTH_SYS = 1,
        /// Short-hand credential (RFC 5531 Appendix A).
        AUTH_SHORT = 2,
        /// Diffie-Hellman (RFC 5531 §16).
        AUTH_DH = 3,
        /// RPCSEC_GSS (RFC 2203).
        RPCSEC_GSS = 6,
        /// AUTH_TLS: the RPC-over-TLS probe (RFC 9289 §4.1, §8.1).
        AUTH_TLS = 7,
    }
}

/// `opaque_auth` (RFC 5531 §8.2): a flavor and at most 400 bytes of body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OpaqueAuth {
    /// The authentication flavor.
    pub flavor: AuthFlavor,
    /// The flavor-specific body (at most [`MAX_AUTH_BYTES`]).
    pub body: Bytes,
}

impl OpaqueAuth {
    /// AUTH_NONE with an empty body (RFC 5531 §10.1).
    pub const NONE: Self = Self {
        flavor: AuthFlavor::AUTH_NONE,
        body: Bytes::new(),
    };

    /// Decodes an `opaque_auth`, rejecting a body over 400 bytes
    /// (RFC 5531 §8.2).
    pub fn decode(dec: &mut Decoder<'_>) -> Result<Self, xdr::Error> {
        let flavor = AuthFlavor(dec.u32().context("auth flavor")?);
        let body = dec.opaque_bytes(MAX_AUTH_BYTES).context("auth body")?;
        Ok(Self { flavor, body })
    }
}

impl Default for OpaqueAuth {
    fn default() -> Self {
        Self::NONE
    }
}

impl Encode for OpaqueAuth {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_u32(self.flavor.0);
        enc.put_opaque(&self.body);
    }
}

/// An AUTH_SYS credential body (RFC 5531 Appendix A, `authsys_parms`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct AuthSys {
    /// Arbitrary id the caller machine generates.
    pub stamp: u32,
    /// The caller's machine name (at most 255 bytes).
    pub machinename: Bytes,
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
    /// Supplementary groups (at most 16).
    pub gids: Vec<u32>,
}

impl AuthSys {
    /// Decodes an `authsys_parms` body, which must be consumed exactly
    /// (RFC 5531 Appendix A).
    pub fn decode_body(body: &Bytes) -> Result<Self, xdr::Error> {
        let mut dec = Decoder::from_bytes(body);
        let stamp = dec.u32().context("authsys stamp")?;
        let machinename = dec
            .opaque_bytes(MAX_MACHINENAME)
            .context("authsys machinename")?;
        let uid = dec.u32().context("authsys uid")?;
        let gid = dec.u32().context("authsys gid")?;
        let gids = dec
            .array_with(MAX_AUTH_SYS_GIDS, 4, Decoder::u32)
            .context("authsys gids")?;
        dec.finish().context("authsys")?;
        Ok(Self {
            stamp,
            machinename,
            uid,
            gid,
            gids,
        })
    }

    /// Encodes this credential as an AUTH_SYS `opaque_auth`.
    pub fn to_opaque_auth(&self) -> OpaqueAuth {
        OpaqueAuth {
            flavor: AuthFlavor::AUTH_SYS,
            body: xdr::to_bytes(self),
        }
    }
}

impl Encode for AuthSys {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_u32(self.stamp);
        enc.put_opaque(&self.machinename);
        enc.put_u32(self.uid);
        enc.put_u32(self.gid);
        self.gids.encode(enc);
    }
}

/// A decoded credential, as far as this crate understands it.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// AUTH_NONE.
    None,
    /// AUTH_SYS with its parameters.
    Sys(AuthSys),
    /// RPCSEC_GSS (RFC 2203), after the server verified the call: the
    /// client's principal and the service protecting the call.
    Gss(crate::gss::GssIdentity),
    /// Another flavor, body kept opaque.
    Other(OpaqueAuth),
}

impl Credential {
    /// Interprets an `opaque_auth` credential; a malformed AUTH_SYS body is
    /// an error (the server answers AUTH_ERROR / AUTH_BADCRED).
    pub fn from_opaque(auth: &OpaqueAuth) -> Result<Self, xdr::Error> {
        match auth.flavor {
            AuthFlavor::AUTH_NONE => Ok(Self::None),
            AuthFlavor::AUTH_SYS => AuthSys::decode_body(&auth.body).map(Self::Sys),
            _ => Ok(Self::Other(auth.clone())),
        }
    }
}

/// The fixed prefix of every RPC message: `xid` and `msg_type`
/// (RFC 5531 §9). Parsed on its own so a transport can route or answer a
/// message whose body is bad.
pub fn parse_prefix(record: &[u8]) -> Result<(u32, MsgType), xdr::Error> {
    let mut dec = Decoder::new(record);
    let xid = dec.u32().context("xid")?;
    let ty = MsgType(dec.u32().context("msg_type")?);
    Ok((xid, ty))
}

/// The header of a call message (RFC 5531 §9 `call_body`), without the
/// procedure arguments that follow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallHeader {
    /// Transaction id.
    pub xid: u32,
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub proc_: u32,
    /// Credential.
    pub cred: OpaqueAuth,
    /// Verifier.
    pub verf: OpaqueAuth,
}

/// Why a call header could not be accepted, with what the server needs to
/// answer it (RFC 5531 §9).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CallHeaderError {
    /// Fewer than eight bytes: no xid and msg_type to answer to.
    #[error("record too short for an RPC header: {0}")]
    NoPrefix(xdr::Error),
    /// The message is not a call (a REPLY, or an unknown msg_type).
    #[error("xid {xid:#x}: not a call (msg_type {msg_type})")]
    NotACall {
        /// Transaction id.
        xid: u32,
        /// The msg_type found.
        msg_type: MsgType,
    },
    /// `rpcvers` is not 2: the answer is MSG_DENIED / RPC_MISMATCH 2..2.
    #[error("xid {xid:#x}: RPC version {rpcvers}, only 2 is supported")]
    RpcVersion {
        /// Transaction id.
        xid: u32,
        /// The version found.
        rpcvers: u32,
    },
    /// The credential is malformed or over 400 bytes: the answer is
    /// MSG_DENIED / AUTH_ERROR / AUTH_BADCRED.
    #[error("xid {xid:#x}: bad credential: {error}")]
    BadCred {
        /// Transaction id.
        xid: u32,
        /// The decode failure.
        error: xdr::Error,
    },
    /// The verifier is malformed or over 400 bytes: the answer is
    /// MSG_DENIED / AUTH_ERROR / AUTH_BADVERF.
    #[error("xid {xid:#x}: bad verifier: {error}")]
    BadVerf {
        /// Transaction id.
        xid: u32,
        /// The decode failure.
        error: xdr::Error,
    },
    /// The header is truncated between `rpcvers` and the credential: the
    /// answer is MSG_ACCEPTED / GARBAGE_ARGS.
    #[error("xid {xid:#x}: truncated call header: {error}")]
    Truncated {
        /// Transaction id.
        xid: u32,
        /// The decode failure.
        error: xdr::Error,
    },
}

impl CallHeaderError {
    /// The transaction id, when one was read.
    pub fn xid(&self) -> Option<u32> {
        match *self {
            Self::NoPrefix(_) => None,
            Self::NotACall { xid, .. }
            | Self::RpcVersion { xid, .. }
            | Self::BadCred { xid, .. }
            | Self::BadVerf { xid, .. }
            | Self::Truncated { xid, .. } => Some(xid),
        }
    }
}

impl CallHeader {
    /// Decodes a call header from the start of a record. On success `dec`
    /// is left at the first byte of the procedure arguments.
    ///
    /// RFC 5531 §9: `rpcvers` is checked before anything after it is read.
    pub fn decode(dec: &mut Decoder<'_>) -> Result<Self, CallHeaderError> {
        let xid = dec
            .u32()
            .context("xid")
            .map_err(CallHeaderError::NoPrefix)?;
        let msg_type = MsgType(
            dec.u32()
                .context("msg_type")
                .map_err(CallHeaderError::NoPrefix)?,
        );
        if msg_type != MsgType::CALL {
            return Err(CallHeaderError::NotACall { xid, msg_type });
        }
        let truncated = |error| CallHeaderError::Truncated { xid, error };
        let rpcvers = dec.u32().context("rpcvers").map_err(truncated)?;
        if rpcvers != RPC_VERSION {
            return Err(CallHeaderError::RpcVersion { xid, rpcvers });
        }
        let prog = dec.u32().context("prog").map_err(truncated)?;
        let vers = dec.u32().context("vers").map_err(truncated)?;
        let proc_ = dec.u32().context("proc").map_err(truncated)?;
        let cred =
            OpaqueAuth::decode(dec).map_err(|error| CallHeaderError::BadCred { xid, error })?;
        let verf =
            OpaqueAuth::decode(dec).map_err(|error| CallHeaderError::BadVerf { xid, error })?;
        Ok(Self {
            xid,
            prog,
            vers,
            proc_,
            cred,
            verf,
        })
    }
}

/// RFC 5531 §9: `xid`, CALL, `rpcvers` 2, prog, vers, proc, cred, verf.
impl Encode for CallHeader {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_u32(self.xid);
        enc.put_u32(MsgType::CALL.0);
        enc.put_u32(RPC_VERSION);
        enc.put_u32(self.prog);
        enc.put_u32(self.vers);
        enc.put_u32(self.proc_);
        self.cred.encode(enc);
        self.verf.encode(enc);
    }
}

/// The body of an accepted reply (RFC 5531 §9 `accepted_reply`), without
/// the procedure results that follow SUCCESS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// SUCCESS: the results follow.
    Success,
    /// PROG_MISMATCH with the lowest and highest versions supported.
    ProgMismatch {
        /// Lowest version supported.
        low: u32,
        /// Highest version supported.
        high: u32,
    },
    /// Any other `accept_stat` (PROG_UNAVAIL, PROC_UNAVAIL, GARBAGE_ARGS,
    /// SYSTEM_ERR or an unknown value): a void body.
    Other(AcceptStat),
}

impl Accepted {
    /// The `accept_stat` value.
    pub fn stat(&self) -> AcceptStat {
        match self {
            Self::Success => AcceptStat::SUCCESS,
            Self::ProgMismatch { .. } => AcceptStat::PROG_MISMATCH,
            Self::Other(s) => *s,
        }
    }
}

/// The body of a denied reply (RFC 5531 §9 `rejected_reply`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// RPC_MISMATCH with the lowest and highest RPC versions supported.
    RpcMismatch {
        /// Lowest version supported.
        low: u32,
        /// Highest version supported.
        high: u32,
    },
    /// AUTH_ERROR with its `auth_stat`.
    AuthError(AuthStat),
}

/// `reply_body` (RFC 5531 §9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyBody {
    /// MSG_ACCEPTED with the server's verifier.
    Accepted {
        /// Verifier.
        verf: OpaqueAuth,
        /// The `accept_stat` arm.
        stat: Accepted,
    },
    /// MSG_DENIED.
    Denied(Rejected),
}

/// The header of a reply message (RFC 5531 §9): xid and `reply_body`,
/// without the procedure results that follow SUCCESS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyHeader {
    /// Transaction id of the call answered.
    pub xid: u32,
    /// The reply body.
    pub body: ReplyBody,
}

impl ReplyHeader {
    /// An accepted reply with an AUTH_NONE verifier.
    pub fn accepted(xid: u32, stat: Accepted) -> Self {
        Self {
            xid,
            body: ReplyBody::Accepted {
                verf: OpaqueAuth::NONE,
                stat,
            },
        }
    }

    /// A denied reply.
    pub fn denied(xid: u32, rejected: Rejected) -> Self {
        Self {
            xid,
            body: ReplyBody::Denied(rejected),
        }
    }

    /// Decodes a reply header from the start of a record. On success `dec`
    /// is left at the first byte of the results (for SUCCESS).
    pub fn decode(dec: &mut Decoder<'_>) -> Result<Self, xdr::Error> {
        let xid = dec.u32().context("xid")?;
        let at = dec.position();
        let ty = MsgType(dec.u32().context("msg_type")?);
        if ty != MsgType::REPLY {
            return Err(xdr::Error::new(
                ErrorKind::InvalidEnum(ty.0),
                at,
                "msg_type",
            ));
        }
        let at = dec.position();
        let body = match ReplyStat(dec.u32().context("reply_stat")?) {
            ReplyStat::MSG_ACCEPTED => {
                let verf = OpaqueAuth::decode(dec)?;
                let stat = match AcceptStat(dec.u32().context("accept_stat")?) {
                    AcceptStat::SUCCESS => Accepted::Success,
                    AcceptStat::PROG_MISMATCH => Accepted::ProgMismatch {
                        low: dec.u32().context("mismatch low")?,
                        high: dec.u32().context("mismatch high")?,
                    },
                    other => Accepted::Other(other),
                };
                ReplyBody::Accepted { verf, stat }
            }
            ReplyStat::MSG_DENIED => {
                let at = dec.position();
                match RejectStat(dec.u32().context("reject_stat")?) {
                    RejectStat::RPC_MISMATCH => ReplyBody::Denied(Rejected::RpcMismatch {
                        low: dec.u32().context("mismatch low")?,
                        high: dec.u32().context("mismatch high")?,
                    }),
                    RejectStat::AUTH_ERROR => ReplyBody::Denied(Rejected::AuthError(AuthStat(
                        dec.u32().context("auth_stat")?,
                    ))),
                    other => {
                        return Err(xdr::Error::new(
                            ErrorKind::InvalidEnum(other.0),
                            at,
                            "reject_stat",
                        ))
                    }
                }
            }
            other => {
                return Err(xdr::Error::new(
                    ErrorKind::InvalidEnum(other.0),
                    at,
                    "reply_stat",
                ))
            }
        };
        Ok(Self { xid, body })
    }
}

/// RFC 5531 §9 `rpc_msg` with a `reply_body`.
impl Encode for ReplyHeader {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_u32(self.xid);
        enc.put_u32(MsgType::REPLY.0);
        match &self.body {
            ReplyBody::Accepted { verf, stat } => {
                enc.put_u32(ReplyStat::MSG_ACCEPTED.0);
                verf.encode(enc);
                enc.put_u32(stat.stat().0);
                if let Accepted::ProgMismatch { low, high } = stat {
                    enc.put_u32(*low);
                    enc.put_u32(*high);
                }
            }
            ReplyBody::Denied(r) => {
                enc.put_u32(ReplyStat::MSG_DENIED.0);
                match r {
                    Rejected::RpcMismatch { low, high } => {
                        enc.put_u32(RejectStat::RPC_MISMATCH.0);
                        enc.put_u32(*low);
                        enc.put_u32(*high);
                    }
                    Rejected::AuthError(s) => {
                        enc.put_u32(RejectStat::AUTH_ERROR.0);
                        enc.put_u32(s.0);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
