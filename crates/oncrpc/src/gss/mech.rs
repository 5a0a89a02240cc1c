//! The GSS-API mechanism behind RPCSEC_GSS, as a small trait: the one
//! place a real mechanism (Kerberos V5 through the system's GSS-API, the
//! `gss` crate) plugs in, so the RFC 2203 state machine above it runs and
//! is tested without one ([`super::fake`]).

/// A GSS-API failure: the major and minor status codes (RFC 2743
/// §1.2.1) and the mechanism's text for them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("GSS-API major {major:#x} minor {minor}: {message}")]
pub struct GssError {
    /// GSS major status (RFC 2203 Appendix A codes).
    pub major: u32,
    /// Mechanism-specific minor status.
    pub minor: u32,
    /// Human-readable text.
    pub message: String,
}

/// `GSS_S_FAILURE` (RFC 2203 Appendix A): an unspecified failure.
pub const GSS_S_FAILURE: u32 = 13 << 16;
/// `GSS_S_BAD_SIG` (RFC 2203 Appendix A): a MIC did not verify.
pub const GSS_S_BAD_SIG: u32 = 6 << 16;
/// `GSS_S_DEFECTIVE_TOKEN` (RFC 2203 Appendix A).
pub const GSS_S_DEFECTIVE_TOKEN: u32 = 9 << 16;
/// `GSS_S_NO_CRED` (RFC 2203 Appendix A).
pub const GSS_S_NO_CRED: u32 = 7 << 16;
/// `GSS_S_CONTINUE_NEEDED` (RFC 2203 Appendix A, a supplementary bit).
pub const GSS_S_CONTINUE_NEEDED: u32 = 1;

impl GssError {
    /// A failure with major status `major` and a message.
    pub fn new(major: u32, message: impl Into<String>) -> Self {
        Self {
            major,
            minor: 0,
            message: message.into(),
        }
    }
}

/// One step of context establishment (`GSS_Init_sec_context` /
/// `GSS_Accept_sec_context`, RFC 2743 §2.2.1-2.2.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The token for the peer (may be empty).
    pub token: Vec<u8>,
    /// Whether the context is established on this side.
    pub complete: bool,
}

/// A security context, initiator or acceptor: establishment steps, then
/// the per-message calls RFC 2203 uses.
pub trait SecContext: Send {
    /// One establishment step with the peer's token (empty for an
    /// initiator's first step).
    fn step(&mut self, token: &[u8]) -> Result<Step, GssError>;

    /// The peer's principal (`user@REALM`), once established (acceptor
    /// side: the client's name).
    fn peer_name(&self) -> Result<String, GssError>;

    /// The local user the peer's principal maps to by the mechanism's
    /// rules (`GSS_Localname`; for Kerberos `krb5_aname_to_localname`:
    /// `user@DEFAULT.REALM` is `user`, as Linux's gssproxy maps), if any.
    fn local_name(&self) -> Option<String> {
        None
    }

    /// `GSS_GetMIC` (RFC 2743 §2.3.1).
    fn get_mic(&mut self, msg: &[u8]) -> Result<Vec<u8>, GssError>;

    /// `GSS_VerifyMIC` (RFC 2743 §2.3.2).
    fn verify_mic(&mut self, msg: &[u8], mic: &[u8]) -> Result<(), GssError>;

    /// `GSS_Wrap` with confidentiality (RFC 2743 §2.3.3).
    fn wrap(&mut self, msg: &[u8]) -> Result<Vec<u8>, GssError>;

    /// `GSS_Unwrap` (RFC 2743 §2.3.4).
    fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, GssError>;
}

/// The server's mechanism: makes acceptor contexts with its credentials
/// (for Kerberos, the keytab).
pub trait Acceptor: Send + Sync + 'static {
    /// A fresh acceptor context.
    fn new_context(&self) -> Result<Box<dyn SecContext>, GssError>;
}

/// The client's mechanism: makes initiator contexts for a target service
/// (`nfs@host`) with the caller's credentials.
pub trait Initiator: Send + Sync + 'static {
    /// A fresh initiator context for `target` (a host-based service name,
    /// RFC 2743 §4.1: `service@host`).
    fn new_context(&self, target: &str) -> Result<Box<dyn SecContext>, GssError>;
}
