//! RPCSEC_GSS principals to local users, as Linux's gssproxy (or
//! rpc.svcgssd) and nfsd do: the mechanism maps the principal to a local
//! name (`krb5_aname_to_localname`: `alice@DEFAULT.REALM` is `alice`),
//! and the system's user database (NSS: `getpwnam`, `getgrouplist`)
//! gives that user's uid, gid and groups. A principal without a local
//! user (another realm, a service principal such as `nfs/host`, a name
//! NSS does not know) is the export's anonymous identity, as nfsd maps an
//! unmapped principal to `anonuid`/`anongid`. Lookups are cached for a
//! minute (at most 1,024 names), as gssproxy caches them.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A local user's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LocalUser {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) gids: Vec<u32>,
}

const TTL: Duration = Duration::from_secs(60);
const MAX_CACHED: usize = 1024;
/// Groups kept per user (AUTH_SYS carries 16; Linux nfsd keeps more for
/// RPCSEC_GSS callers, up to the kernel's NGROUPS).
const MAX_GROUPS: usize = 1024;

type Cache = Mutex<HashMap<String, (Instant, Option<LocalUser>)>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The local user `name` (from [`oncrpc::gss::GssIdentity::local_name`]),
/// `None` when NSS does not know it.
pub(crate) fn local_user(name: &str) -> Option<LocalUser> {
    let now = Instant::now();
    let mut c = cache().lock().unwrap_or_else(|p| p.into_inner());
    if let Some((at, u)) = c.get(name) {
        if now.duration_since(*at) < TTL {
            return u.clone();
        }
    }
    let u = lookup(name);
    if c.len() >= MAX_CACHED {
        c.retain(|_, (at, _)| now.duration_since(*at) < TTL);
        if c.len() >= MAX_CACHED {
            c.clear();
        }
    }
    c.insert(name.to_owned(), (now, u.clone()));
    u
}

fn lookup(name: &str) -> Option<LocalUser> {
    let user = nix::unistd::User::from_name(name).ok().flatten()?;
    let cname = CString::new(name).ok()?;
    let mut gids: Vec<u32> = nix::unistd::getgrouplist(&cname, user.gid)
        .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
        .unwrap_or_default();
    gids.retain(|&g| g != user.gid.as_raw());
    gids.truncate(MAX_GROUPS);
    Some(LocalUser {
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
        gids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_known_and_an_unknown_name_is_not() {
        let root = local_user("root").expect("root in the user database");
        assert_eq!((root.uid, root.gid), (0, 0));
        assert_eq!(local_user("no-such-user-nfsrdma-test"), None);
        // Cached: the same answer again.
        assert_eq!(local_user("root"), Some(root));
    }
}
