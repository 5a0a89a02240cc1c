//! `nfsrdma mount -o OPTS`: mount options parsed the mount(8)/nfs(5)
//! way (comma-separated, later ones override earlier ones), with unknown
//! options refused by name rather than ignored.

use std::time::Duration;

use crate::url::parse_size;

/// Longest attribute cache timeout accepted (a day).
const MAX_AC_SECS: u64 = 86_400;

/// Attribute cache timeouts (nfs(5) `acregmin`, `acregmax`, `acdirmin`,
/// `acdirmax`): how long attributes of regular files and of directories
/// are trusted, growing from the minimum towards the maximum while they
/// do not change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AcTimeouts {
    pub(crate) reg_min: Duration,
    pub(crate) reg_max: Duration,
    pub(crate) dir_min: Duration,
    pub(crate) dir_max: Duration,
}

impl Default for AcTimeouts {
    /// nfs(5)'s defaults: 3 to 60 s for files, 30 to 60 s for
    /// directories.
    fn default() -> Self {
        Self {
            reg_min: Duration::from_secs(3),
            reg_max: Duration::from_secs(60),
            dir_min: Duration::from_secs(30),
            dir_max: Duration::from_secs(60),
        }
    }
}

impl AcTimeouts {
    /// All four timeouts `t` (nfs(5) `actimeo=`; 0 is `noac`).
    pub(crate) fn all(t: Duration) -> Self {
        Self {
            reg_min: t,
            reg_max: t,
            dir_min: t,
            dir_max: t,
        }
    }
}

/// The settings `-o` chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct MountOpts {
    /// `allow_other`: users other than the mounting one may use the
    /// mount (each acting as itself towards the server).
    pub(crate) allow_other: bool,
    /// `default_permissions`: the kernel checks mode bits itself before
    /// asking (the server checks in any case).
    pub(crate) default_permissions: bool,
    /// `ro`: every change fails with EROFS.
    pub(crate) read_only: bool,
    /// `writeback_cache`: the kernel gathers writes (FUSE_WRITEBACK_CACHE).
    pub(crate) writeback_cache: bool,
    /// Attribute cache timeouts.
    pub(crate) ac: AcTimeouts,
    /// `rsize=`: READ size.
    pub(crate) rsize: Option<u32>,
    /// `wsize=`: WRITE size.
    pub(crate) wsize: Option<u32>,
    /// `vers=4.1`, `4.2` or `4` (4.2): the NFSv4 minor version; `None`
    /// for NFSv3.
    pub(crate) nfs4_minor: Option<u32>,
    /// `sec=krb5|krb5i|krb5p`: RPCSEC_GSS under the mounting user's
    /// Kerberos ticket, for every caller; `None` (`sec=sys`) is AUTH_SYS
    /// with each caller's ids.
    pub(crate) sec: Option<oncrpc::gss::GssService>,
    /// `deleg_opens=`: which opens an NFSv4 mount serves locally under
    /// a delegation it holds.
    pub(crate) deleg_opens: DelegOpens,
    /// `nconnect=N` (1 to 16): NFS connections of an NFSv3 mount over
    /// TCP, its calls spread over them; `None` keeps the URL's.
    pub(crate) nconnect: Option<usize>,
}

/// Which `open(2)`s of a delegated file an NFSv4 mount serves without an
/// OPEN on the server (RFC 8881 §10.4), for the credential whose open
/// took the delegation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum DelegOpens {
    /// `none`: every open goes to the server.
    None,
    /// `read`: opens for reading under a read delegation.
    Read,
    /// `write`: those, and any open under a write delegation.
    #[default]
    Write,
}

/// Options accepted, for the error message.
const KNOWN: &str = "allow_other, default_permissions, ro, rw, ac, noac, actimeo=, acregmin=, \
                     acregmax=, acdirmin=, acdirmax=, rsize=, wsize=, vers=3|4|4.1|4.2, nfsvers=, \
                     sec=sys|krb5|krb5i|krb5p, deleg_opens=none|read|write, nconnect=1..16, writeback_cache, defaults, nosuid, nodev, hard";

fn seconds(k: &str, v: &str) -> Result<Duration, String> {
    match v.parse::<u64>() {
        Ok(s) if s <= MAX_AC_SECS => Ok(Duration::from_secs(s)),
        _ => Err(format!(
            "{k}={v}: expected whole seconds, 0 to {MAX_AC_SECS}"
        )),
    }
}

impl MountOpts {
    /// Parses the `-o` arguments (each a comma-separated list), in order.
    pub(crate) fn parse<S: AsRef<str>>(args: &[S]) -> Result<Self, String> {
        let mut o = Self::default();
        for opt in args
            .iter()
            .flat_map(|a| a.as_ref().split(','))
            .filter(|s| !s.is_empty())
        {
            o.apply(opt)?;
        }
        if o.allow_other && o.sec.is_some() {
            // The context is the mounting user's: other users would act
            // as that principal (there are no per-caller contexts).
            return Err(
                "allow_other with sec=krb5*: every user would act as the mounting \
                        user's Kerberos principal (per-caller credentials are not supported)"
                    .into(),
            );
        }
        for (what, min, max) in [
            ("acregmin/acregmax", o.ac.reg_min, o.ac.reg_max),
            ("acdirmin/acdirmax", o.ac.dir_min, o.ac.dir_max),
        ] {
            if min > max {
                return Err(format!("{what}: the minimum exceeds the maximum"));
            }
        }
        Ok(o)
    }

    fn apply(&mut self, opt: &str) -> Result<(), String> {
        let (k, v) = match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt, None),
        };
        match (k, v) {
            ("allow_other", None) => self.allow_other = true,
            ("default_permissions", None) => self.default_permissions = true,
            ("ro", None) => self.read_only = true,
            ("rw", None) => self.read_only = false,
            ("writeback_cache", None) => self.writeback_cache = true,
            // Always on, or the only behaviour there is.
            ("defaults" | "nosuid" | "nodev" | "hard", None) => {}
            ("ac", None) => self.ac = AcTimeouts::default(),
            ("noac", None) => self.ac = AcTimeouts::all(Duration::ZERO),
            ("actimeo", Some(v)) => self.ac = AcTimeouts::all(seconds(k, v)?),
            ("acregmin", Some(v)) => self.ac.reg_min = seconds(k, v)?,
            ("acregmax", Some(v)) => self.ac.reg_max = seconds(k, v)?,
            ("acdirmin", Some(v)) => self.ac.dir_min = seconds(k, v)?,
            ("acdirmax", Some(v)) => self.ac.dir_max = seconds(k, v)?,
            ("rsize", Some(v)) => {
                self.rsize = Some(parse_size(v).map_err(|e| format!("rsize: {e}"))?)
            }
            ("wsize", Some(v)) => {
                self.wsize = Some(parse_size(v).map_err(|e| format!("wsize: {e}"))?)
            }
            ("vers" | "nfsvers", Some("3")) => self.nfs4_minor = None,
            ("vers" | "nfsvers", Some("4.1")) => self.nfs4_minor = Some(1),
            ("vers" | "nfsvers", Some("4" | "4.2")) => self.nfs4_minor = Some(2),
            ("vers" | "nfsvers", Some(v)) => {
                return Err(format!(
                    "{k}={v}: the FUSE mount speaks NFS versions 3, 4.1 and 4.2 \
                     (vers=3, vers=4.1, vers=4.2; vers=4 is 4.2)"
                ))
            }
            ("sec", Some("sys")) => self.sec = None,
            ("sec", Some("krb5")) => self.sec = Some(oncrpc::gss::GssService::NONE),
            ("sec", Some("krb5i")) => self.sec = Some(oncrpc::gss::GssService::INTEGRITY),
            ("sec", Some("krb5p")) => self.sec = Some(oncrpc::gss::GssService::PRIVACY),
            ("sec", Some(v)) => return Err(format!("sec={v}: expected sys, krb5, krb5i or krb5p")),
            ("deleg_opens", Some("none")) => self.deleg_opens = DelegOpens::None,
            ("deleg_opens", Some("read")) => self.deleg_opens = DelegOpens::Read,
            ("deleg_opens", Some("write")) => self.deleg_opens = DelegOpens::Write,
            ("deleg_opens", Some(v)) => {
                return Err(format!("deleg_opens={v}: expected none, read or write"))
            }
            ("nconnect", Some(v)) => {
                self.nconnect = Some(crate::url::nconnect(v).map_err(|e| format!("{e:#}"))?)
            }
            _ => return Err(format!("unknown mount option {opt:?} (known: {KNOWN})")),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_in_order_with_nfs_defaults() {
        let o = MountOpts::parse(&["allow_other,default_permissions", "ro,rsize=64k"]).unwrap();
        assert!(o.allow_other && o.default_permissions && o.read_only);
        assert_eq!(o.rsize, Some(65536));
        assert_eq!(o.wsize, None);
        assert_eq!(o.ac, AcTimeouts::default());
        assert_eq!(o.ac.reg_min, Duration::from_secs(3));
        let o = MountOpts::parse(&["ro,rw,wsize=1048576,vers=3,sec=sys"]).unwrap();
        assert!(!o.read_only);
        assert_eq!(o.wsize, Some(1 << 20));
        assert_eq!(o.nfs4_minor, None);
        for (v, minor) in [
            ("4.1", Some(1)),
            ("4.2", Some(2)),
            ("4", Some(2)),
            ("3", None),
        ] {
            let o = MountOpts::parse(&[format!("vers=4.1,nfsvers={v}")]).unwrap();
            assert_eq!(o.nfs4_minor, minor, "{v}");
        }
    }

    #[test]
    fn nconnect_takes_1_to_16_as_linux_does() {
        assert_eq!(MountOpts::parse(&["ro"]).unwrap().nconnect, None);
        assert_eq!(
            MountOpts::parse(&["nconnect=4,nconnect=16"])
                .unwrap()
                .nconnect,
            Some(16)
        );
        for bad in ["nconnect=0", "nconnect=17", "nconnect=x", "nconnect"] {
            assert!(MountOpts::parse(&[bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn timeouts_follow_actimeo_then_the_single_ones() {
        let o = MountOpts::parse(&["actimeo=5,acregmax=9"]).unwrap();
        assert_eq!(o.ac.reg_min, Duration::from_secs(5));
        assert_eq!(o.ac.reg_max, Duration::from_secs(9));
        assert_eq!(o.ac.dir_max, Duration::from_secs(5));
        let o = MountOpts::parse(&["noac"]).unwrap();
        assert_eq!(o.ac, AcTimeouts::all(Duration::ZERO));
        assert_eq!(
            MountOpts::parse(&["noac,ac"]).unwrap().ac,
            AcTimeouts::default()
        );
    }

    #[test]
    fn sec_chooses_the_rpcsec_gss_service() {
        use oncrpc::gss::GssService;
        let sec = |o: &str| MountOpts::parse(&[o]).unwrap().sec;
        assert_eq!(sec("ro"), None);
        assert_eq!(sec("sec=krb5"), Some(GssService::NONE));
        assert_eq!(sec("sec=krb5i"), Some(GssService::INTEGRITY));
        assert_eq!(sec("sec=krb5,sec=krb5p"), Some(GssService::PRIVACY));
        assert_eq!(sec("sec=krb5p,sec=sys"), None);
    }

    #[test]
    fn deleg_opens_defaults_to_write() {
        let d = |o: &str| MountOpts::parse(&[o]).unwrap().deleg_opens;
        assert_eq!(d("ro"), DelegOpens::Write);
        assert_eq!(d("deleg_opens=none"), DelegOpens::None);
        assert_eq!(d("deleg_opens=write,deleg_opens=read"), DelegOpens::Read);
        assert_eq!(d("deleg_opens=write"), DelegOpens::Write);
    }

    #[test]
    fn unknown_and_bad_options_are_refused_by_name() {
        for (bad, says) in [
            ("bogus", "unknown mount option \"bogus\""),
            ("allow_other=1", "unknown mount option"),
            ("actimeo=-1", "actimeo=-1"),
            ("acregmin=100000", "acregmin"),
            ("acregmin=10,acregmax=5", "minimum exceeds"),
            ("rsize=0", "rsize"),
            ("vers=4.0", "versions 3, 4.1 and 4.2"),
            ("vers=2", "versions 3, 4.1 and 4.2"),
            ("sec=krb4", "sys, krb5, krb5i or krb5p"),
            ("allow_other,sec=krb5p", "per-caller credentials"),
            ("deleg_opens=all", "none, read or write"),
        ] {
            let e = MountOpts::parse(&[bad]).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
