//! Permission checks from the caller's AUTH_SYS identity and mode bits,
//! in the way Linux's nfsd applies them (`nfsd_permission`): the server
//! process may be more privileged than the caller, so the NFS layer
//! checks before it acts. Root (uid 0) is not squashed.

use nfs::v3::{
    Fattr3, Ftype3, Nfsstat3, Sattr3, SetTime, ACCESS3_DELETE, ACCESS3_EXECUTE, ACCESS3_EXTEND,
    ACCESS3_LOOKUP, ACCESS3_MODIFY, ACCESS3_READ,
};
use oncrpc::msg::Credential;

use crate::exports::{ExportOptions, Squash};

/// The uid/gid AUTH_NONE callers are mapped to (Linux's `nobody`).
pub(crate) const NOBODY: u32 = 65534;

/// Adding an entry to a directory: write and search permission.
pub(crate) const DIR_ADD: u32 = ACCESS3_EXTEND | ACCESS3_LOOKUP;
/// Removing an entry from a directory: write and search permission.
pub(crate) const DIR_REMOVE: u32 = ACCESS3_DELETE | ACCESS3_LOOKUP;

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Caller {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) gids: Vec<u32>,
}

impl Caller {
    /// AUTH_SYS identities as given, RPCSEC_GSS principals as their local
    /// user (`crate::idmap`); anything else is `nobody`.
    pub(crate) fn of(cred: &Credential) -> Self {
        match cred {
            Credential::Sys(s) => Self {
                uid: s.uid,
                gid: s.gid,
                gids: s.gids.clone(),
            },
            Credential::Gss(id) => match Self::of_principal(id) {
                Some(c) => c,
                None => Self {
                    uid: NOBODY,
                    gid: NOBODY,
                    gids: Vec::new(),
                },
            },
            _ => Self {
                uid: NOBODY,
                gid: NOBODY,
                gids: Vec::new(),
            },
        }
    }

    /// The identity `cred` acts as on an export with `opts`, as Linux's
    /// nfsd maps it (`nfsd_setuser`, exports(5) "User ID Mapping"):
    /// AUTH_NONE and `all_squash` callers are the anonymous uid/gid;
    /// under `root_squash` uid 0 becomes the anonymous uid, and gid 0
    /// (primary or supplementary) the anonymous gid.
    ///
    /// An RPCSEC_GSS caller acts as the local user its principal maps to
    /// (`crate::idmap`), squashed the same way; a principal with no local
    /// user is the anonymous identity, as nfsd maps it.
    pub(crate) fn mapped(cred: &Credential, opts: &ExportOptions) -> Self {
        let anon = Self {
            uid: opts.anonuid,
            gid: opts.anongid,
            gids: Vec::new(),
        };
        let me = match cred {
            Credential::Sys(s) => Self {
                uid: s.uid,
                gid: s.gid,
                gids: s.gids.clone(),
            },
            Credential::Gss(id) => match Self::of_principal(id) {
                Some(c) => c,
                None => return anon,
            },
            _ => return anon,
        };
        match opts.squash {
            Squash::All => anon,
            Squash::None => me,
            Squash::Root => {
                let g = |g: u32| if g == 0 { opts.anongid } else { g };
                Self {
                    uid: if me.uid == 0 { opts.anonuid } else { me.uid },
                    gid: g(me.gid),
                    gids: me.gids.iter().map(|&x| g(x)).collect(),
                }
            }
        }
    }

    fn of_principal(id: &oncrpc::gss::GssIdentity) -> Option<Self> {
        let u = crate::idmap::local_user(id.local_name.as_deref()?)?;
        Some(Self {
            uid: u.uid,
            gid: u.gid,
            gids: u.gids,
        })
    }

    fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.gids.contains(&gid)
    }
}

/// ACCESS (RFC 1813 §3.3.4) from mode bits: the caller's class (owner,
/// group, other; uid 0 passes read/write checks and execute when any
/// execute bit is set or the object is a directory), with the modifying
/// bits removed on a read-only export.
pub(crate) fn access_bits(a: &Fattr3, c: &Caller, want: u32, read_only: bool) -> u32 {
    let perm = if c.uid == 0 {
        let x = u32::from(a.mode & 0o111 != 0 || a.ftype == Ftype3::NF3DIR);
        0o6 | x
    } else if c.uid == a.uid {
        (a.mode >> 6) & 7
    } else if c.in_group(a.gid) {
        (a.mode >> 3) & 7
    } else {
        a.mode & 7
    };
    let (r, w, x) = (perm & 4 != 0, perm & 2 != 0, perm & 1 != 0);
    let mut out = 0;
    if r {
        out |= ACCESS3_READ;
    }
    if a.ftype == Ftype3::NF3DIR {
        if x {
            out |= ACCESS3_LOOKUP;
        }
        if w {
            out |= ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE;
        }
    } else {
        if w {
            out |= ACCESS3_MODIFY | ACCESS3_EXTEND;
        }
        if x {
            out |= ACCESS3_EXECUTE;
        }
    }
    if read_only {
        out &= !(ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE);
    }
    out & want
}

/// Whether `c` may do what needs all of `need` on `a`. With
/// `owner_override`, the owner may read and write a file whatever its
/// mode, as Linux's nfsd allows (`NFSD_MAY_OWNER_OVERRIDE`) so that a
/// client can write a file it just created read-only.
pub(crate) fn permits(a: &Fattr3, c: &Caller, need: u32, owner_override: bool) -> bool {
    (owner_override && c.uid == a.uid) || access_bits(a, c, need, false) == need
}

/// SETATTR rules (POSIX, as nfsd applies them): size needs write access;
/// mode and client-chosen times need the owner or root; giving a file
/// away needs root; changing its group needs the owner (to a group the
/// caller is in) or root.
pub(crate) fn check_setattr(a: &Fattr3, c: &Caller, s: &Sattr3) -> Result<(), Nfsstat3> {
    let owner = c.uid == 0 || c.uid == a.uid;
    if s.size.is_some() && !permits(a, c, ACCESS3_MODIFY, true) {
        return Err(Nfsstat3::NFS3ERR_ACCES);
    }
    if s.mode.is_some() && !owner {
        return Err(Nfsstat3::NFS3ERR_PERM);
    }
    if s.uid.is_some_and(|u| u != a.uid) && c.uid != 0 {
        return Err(Nfsstat3::NFS3ERR_PERM);
    }
    if s.gid
        .is_some_and(|g| g != a.gid && (c.uid != 0 && !(owner && c.in_group(g))))
    {
        return Err(Nfsstat3::NFS3ERR_PERM);
    }
    let client_time =
        matches!(s.atime, SetTime::ClientTime(_)) || matches!(s.mtime, SetTime::ClientTime(_));
    if client_time && !owner {
        return Err(Nfsstat3::NFS3ERR_PERM);
    }
    let server_time = s.atime == SetTime::ServerTime || s.mtime == SetTime::ServerTime;
    if server_time && !owner && !permits(a, c, ACCESS3_MODIFY, false) {
        return Err(Nfsstat3::NFS3ERR_ACCES);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfs::v3::{Nfstime3, Specdata3};

    fn file(mode: u32, uid: u32, gid: u32) -> Fattr3 {
        Fattr3 {
            ftype: Ftype3::NF3REG,
            mode,
            nlink: 1,
            uid,
            gid,
            size: 0,
            used: 0,
            rdev: Specdata3::default(),
            fsid: 0,
            fileid: 1,
            atime: Nfstime3::default(),
            mtime: Nfstime3::default(),
            ctime: Nfstime3::default(),
        }
    }

    fn user(uid: u32, gid: u32) -> Caller {
        Caller {
            uid,
            gid,
            gids: vec![],
        }
    }

    #[test]
    fn mode_classes_decide_access() {
        let f = file(0o640, 1000, 100);
        assert_eq!(
            access_bits(&f, &user(1000, 1), 0x3f, false),
            ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_EXTEND
        );
        assert_eq!(access_bits(&f, &user(2000, 100), 0x3f, false), ACCESS3_READ);
        assert_eq!(access_bits(&f, &user(2000, 200), 0x3f, false), 0);
        assert_eq!(access_bits(&f, &user(0, 0), 0x3f, true), ACCESS3_READ);
        assert!(permits(
            &file(0o444, 1000, 1),
            &user(1000, 1),
            ACCESS3_MODIFY,
            true
        ));
        assert!(!permits(
            &file(0o444, 1000, 1),
            &user(1001, 1),
            ACCESS3_MODIFY,
            true
        ));
    }

    #[test]
    fn setattr_needs_owner_or_root() {
        let f = file(0o666, 1000, 100);
        let chmod = Sattr3 {
            mode: Some(0o600),
            ..Sattr3::default()
        };
        assert_eq!(
            check_setattr(&f, &user(2000, 100), &chmod),
            Err(Nfsstat3::NFS3ERR_PERM)
        );
        assert_eq!(check_setattr(&f, &user(1000, 100), &chmod), Ok(()));
        let chown = Sattr3 {
            uid: Some(2000),
            ..Sattr3::default()
        };
        assert_eq!(
            check_setattr(&f, &user(1000, 100), &chown),
            Err(Nfsstat3::NFS3ERR_PERM)
        );
        assert_eq!(check_setattr(&f, &user(0, 0), &chown), Ok(()));
        let trunc = Sattr3 {
            size: Some(0),
            ..Sattr3::default()
        };
        assert_eq!(check_setattr(&f, &user(2000, 1), &trunc), Ok(()));
        let ro = file(0o644, 1000, 100);
        assert_eq!(
            check_setattr(&ro, &user(2000, 1), &trunc),
            Err(Nfsstat3::NFS3ERR_ACCES)
        );
    }
}
