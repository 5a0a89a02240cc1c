//! The principal a client id is bound to (RFC 8881 §2.4.3, §18.35.4,
//! §18.36.4; RFC 7530 §16.33.5): who sent the EXCHANGE_ID or SETCLIENTID
//! that made the client record. Later calls for the same client id or
//! owner are compared with it.
//!
//! Two principals are the same as Linux's nfsd decides it (`same_creds`
//! in `fs/nfsd/nfs4state.c`): the same flavour and, for AUTH_SYS, the
//! same uid, gid and set of supplementary groups. The machine name and
//! stamp of an AUTH_SYS credential are not part of it (a client may
//! change its stamp at any call). An RPCSEC_GSS principal is its name
//! (`nfs/client@REALM`, `user@REALM`), whatever service (integrity,
//! privacy) protects the call, as Linux compares `cr_principal`. A
//! flavour this server does not interpret is kept as its number.

use oncrpc::gss::GssService;
use oncrpc::msg::Credential;

/// Whether RPCSEC_GSS integrity or privacy protects a call: what
/// SP4_MACH_CRED asks of the machine credential besides its principal
/// (RFC 8881 §18.35.3).
pub(crate) fn gss_protected(cred: &Credential) -> bool {
    matches!(cred, Credential::Gss(g)
        if g.service == GssService::INTEGRITY || g.service == GssService::PRIVACY)
}

/// Who established a client record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Principal {
    /// AUTH_NONE: anonymous; equal only to another AUTH_NONE caller.
    None,
    /// AUTH_SYS: the identity the credential claims.
    Sys {
        uid: u32,
        gid: u32,
        /// Supplementary groups, sorted and without repeats (the order
        /// in the credential does not matter).
        gids: Vec<u32>,
    },
    /// RPCSEC_GSS: the principal the mechanism authenticated.
    Gss(std::sync::Arc<str>),
    /// Another flavour, by its number.
    Other(u32),
}

impl Principal {
    /// The principal of a call's credential.
    pub(crate) fn of(cred: &Credential) -> Self {
        match cred {
            Credential::None => Self::None,
            Credential::Sys(s) => {
                let mut gids = s.gids.clone();
                gids.sort_unstable();
                gids.dedup();
                Self::Sys {
                    uid: s.uid,
                    gid: s.gid,
                    gids,
                }
            }
            Credential::Gss(g) => Self::Gss(std::sync::Arc::clone(&g.principal)),
            Credential::Other(a) => Self::Other(a.flavor.0),
            // A credential kind oncrpc decodes that this code does not
            // know yet: it must get its own variant here before clients
            // may tell one principal of it from another.
            _ => Self::Other(u32::MAX),
        }
    }

    /// The number kept in a stable client record (`records.rs`): the
    /// AUTH_SYS uid, nobody for other flavours.
    pub(crate) fn record_id(&self) -> u32 {
        match self {
            Self::Sys { uid, .. } => *uid,
            _ => crate::perm::NOBODY,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use oncrpc::msg::AuthSys;

    fn sys(machine: &'static [u8], uid: u32, gid: u32, gids: Vec<u32>) -> Credential {
        Credential::Sys(AuthSys {
            stamp: uid ^ 7,
            machinename: Bytes::from_static(machine),
            uid,
            gid,
            gids,
        })
    }

    #[test]
    fn auth_sys_principals_compare_uid_gid_and_group_set() {
        let a = Principal::of(&sys(b"a", 1000, 100, vec![3, 1, 2]));
        assert_eq!(a, Principal::of(&sys(b"b", 1000, 100, vec![1, 2, 3, 3])));
        assert_ne!(a, Principal::of(&sys(b"a", 1001, 100, vec![1, 2, 3])));
        assert_ne!(a, Principal::of(&sys(b"a", 1000, 101, vec![1, 2, 3])));
        assert_ne!(a, Principal::of(&sys(b"a", 1000, 100, vec![1, 2])));
        assert_eq!(a.record_id(), 1000);
    }

    #[test]
    fn gss_principals_compare_by_name_whatever_the_service() {
        use oncrpc::gss::{GssIdentity, GssService};
        let gss = |name: &str, service| {
            Principal::of(&Credential::Gss(GssIdentity {
                principal: name.into(),
                local_name: None,
                service,
            }))
        };
        let a = gss("nfs/client@REALM", GssService::NONE);
        assert_eq!(a, gss("nfs/client@REALM", GssService::PRIVACY));
        assert_ne!(a, gss("nfs/other@REALM", GssService::NONE));
        assert_ne!(a, Principal::None);
        assert_eq!(a.record_id(), crate::perm::NOBODY);
    }

    #[test]
    fn auth_none_is_its_own_principal() {
        let none = Principal::of(&Credential::None);
        assert_eq!(none, Principal::None);
        let nobody = crate::perm::NOBODY;
        assert_ne!(none, Principal::of(&sys(b"a", nobody, nobody, vec![])));
        assert_eq!(none.record_id(), nobody);
    }
}
