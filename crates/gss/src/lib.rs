//! Kerberos V5 for RPCSEC_GSS (RFC 2203): `oncrpc`'s mechanism traits
//! ([`oncrpc::gss::Acceptor`], [`oncrpc::gss::Initiator`],
//! [`oncrpc::gss::SecContext`]) over the system's GSS-API, MIT Kerberos'
//! `libgssapi_krb5`, through the `libgssapi` crate (a safe binding: this
//! crate has no `unsafe`). The RPC side (context table, sequence window,
//! services) stays in `oncrpc`, sans-IO and tested with a fake mechanism.
//!
//! Credentials come from the usual places: the acceptor's keys from the
//! keytab (`KRB5_KTNAME`, default `/etc/krb5.keytab`; see
//! [`set_process_keytab`]), the initiator's tickets from the caller's
//! credential cache (`KRB5CCNAME`), the realm configuration from
//! `KRB5_CONFIG` (default `/etc/krb5.conf`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use libgssapi::context::{ClientCtx, CtxFlags, SecurityContext, ServerCtx};
use libgssapi::credential::{Cred, CredUsage};
use libgssapi::name::Name;
use libgssapi::oid::{OidSet, GSS_MECH_KRB5, GSS_NT_HOSTBASED_SERVICE};
use oncrpc::gss::{Acceptor, GssError, Initiator, SecContext, Step};

/// The Kerberos V5 mechanism's OID, 1.2.840.113554.1.2.2 (RFC 1964 §1),
/// DER-encoded: what SECINFO and MOUNT report with `sec=krb5*`.
pub const KRB5_OID_DER: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x02];

fn err(e: libgssapi::error::Error) -> GssError {
    GssError {
        major: e.major.bits(),
        minor: e.minor,
        message: e.to_string(),
    }
}

fn krb5_only() -> Result<OidSet, GssError> {
    let mut set = OidSet::new();
    set.add(GSS_MECH_KRB5).map_err(err)?;
    Ok(set)
}

/// Points the process's Kerberos acceptor at `keytab` (`KRB5_KTNAME`).
/// MIT Kerberos reads it from the environment; call this at start-up,
/// before other threads use Kerberos.
pub fn set_process_keytab(keytab: &std::path::Path) {
    std::env::set_var("KRB5_KTNAME", keytab);
}

/// The server's mechanism: acceptor contexts with the keytab's keys (any
/// service principal in it, e.g. `nfs/host@REALM`).
#[derive(Debug, Clone)]
pub struct Krb5Acceptor {
    cred: Cred,
}

impl Krb5Acceptor {
    /// Acquires acceptor credentials from the keytab; fails when there is
    /// no usable keytab.
    pub fn new() -> Result<Self, GssError> {
        let mechs = krb5_only()?;
        let cred = Cred::acquire(None, None, CredUsage::Accept, Some(&mechs)).map_err(err)?;
        Ok(Self { cred })
    }
}

impl Acceptor for Krb5Acceptor {
    fn new_context(&self) -> Result<Box<dyn SecContext>, GssError> {
        Ok(Box::new(Krb5Context::Acceptor(ServerCtx::new(Some(
            self.cred.clone(),
        )))))
    }
}

/// The client's mechanism: initiator contexts with the tickets in the
/// caller's credential cache.
#[derive(Debug, Clone)]
pub struct Krb5Initiator {
    cred: Cred,
}

impl Krb5Initiator {
    /// Acquires initiator credentials from the default credential cache
    /// (`KRB5CCNAME`); fails when it holds no ticket-granting ticket.
    pub fn from_ccache() -> Result<Self, GssError> {
        let mechs = krb5_only()?;
        let cred = Cred::acquire(None, None, CredUsage::Initiate, Some(&mechs)).map_err(err)?;
        // An expired cache acquires but cannot initiate: say so now.
        let left = cred.lifetime().map_err(err)?;
        if left.is_zero() {
            return Err(GssError::new(
                oncrpc::gss::mech::GSS_S_NO_CRED,
                "the credential cache's tickets have expired",
            ));
        }
        Ok(Self { cred })
    }
}

impl Initiator for Krb5Initiator {
    fn new_context(&self, target: &str) -> Result<Box<dyn SecContext>, GssError> {
        let name = Name::new(target.as_bytes(), Some(GSS_NT_HOSTBASED_SERVICE))
            .and_then(|n| n.canonicalize(Some(GSS_MECH_KRB5)))
            .map_err(err)?;
        Ok(Box::new(Krb5Context::Initiator(ClientCtx::new(
            Some(self.cred.clone()),
            name,
            CtxFlags::GSS_C_MUTUAL_FLAG,
            Some(GSS_MECH_KRB5),
        ))))
    }
}

/// A Kerberos security context, either side.
enum Krb5Context {
    Acceptor(ServerCtx),
    Initiator(ClientCtx),
}

impl Krb5Context {
    fn ctx(&mut self) -> &mut dyn SecurityContext {
        match self {
            Self::Acceptor(c) => c,
            Self::Initiator(c) => c,
        }
    }
}

impl SecContext for Krb5Context {
    fn step(&mut self, token: &[u8]) -> Result<Step, GssError> {
        let (out, complete) = match self {
            Self::Acceptor(c) => {
                let out = c.step(token, None).map_err(err)?;
                (out, c.is_complete())
            }
            Self::Initiator(c) => {
                let tok = (!token.is_empty()).then_some(token);
                let out = c.step(tok, None).map_err(err)?;
                (out, c.is_complete())
            }
        };
        Ok(Step {
            token: out.map(|b| b.to_vec()).unwrap_or_default(),
            complete,
        })
    }

    fn peer_name(&self) -> Result<String, GssError> {
        let name = match self {
            Self::Acceptor(c) => c.source_name(),
            Self::Initiator(c) => c.target_name(),
        }
        .map_err(err)?;
        Ok(name.to_string())
    }

    /// `gss_localname`: Kerberos' `auth_to_local` rules (by default a
    /// one-component principal of the default realm is its own name).
    fn local_name(&self) -> Option<String> {
        let Self::Acceptor(c) = self else {
            return None;
        };
        let buf = c.source_name().ok()?.local_name(Some(GSS_MECH_KRB5)).ok()?;
        String::from_utf8(buf.to_vec()).ok()
    }

    fn get_mic(&mut self, msg: &[u8]) -> Result<Vec<u8>, GssError> {
        self.ctx().get_mic(msg).map(|b| b.to_vec()).map_err(err)
    }

    fn verify_mic(&mut self, msg: &[u8], mic: &[u8]) -> Result<(), GssError> {
        self.ctx().verify_mic(msg, mic).map_err(err)
    }

    fn wrap(&mut self, msg: &[u8]) -> Result<Vec<u8>, GssError> {
        self.ctx().wrap(true, msg).map(|b| b.to_vec()).map_err(err)
    }

    fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, GssError> {
        self.ctx().unwrap(token).map(|b| b.to_vec()).map_err(err)
    }
}
