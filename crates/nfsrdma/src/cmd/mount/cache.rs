//! How long the kernel may cache an inode's attributes and names: the
//! attribute cache timeout of Linux's NFS client (nfs(5) "Data and
//! metadata coherence"). Each inode's timeout starts at the minimum
//! (`acregmin`, `acdirmin`), doubles each time the server's attributes
//! come back unchanged, up to the maximum (`acregmax`, `acdirmax`), and
//! falls back to the minimum when they changed (a new mtime, ctime or
//! size). The FUSE reply carrying the attributes hands the kernel that
//! timeout for both the attributes and the name (the lookup cache).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use nfs_client::nfs::v3::{Fattr3, Ftype3, Nfstime3};

use super::options::AcTimeouts;

/// Inodes whose timeouts are tracked; past this the table starts over
/// (every inode back to its minimum), which costs only extra GETATTRs.
const MAX_TRACKED: usize = 1 << 20;

/// What tells a change: mtime, ctime and size (RFC 1813 §2.5 `fattr3`;
/// Linux's `nfs_update_inode` looks at the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    mtime: Nfstime3,
    ctime: Nfstime3,
    size: u64,
}

impl Stamp {
    pub(crate) fn of(a: &Fattr3) -> Self {
        Self {
            mtime: a.mtime,
            ctime: a.ctime,
            size: a.size,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct State {
    stamp: Stamp,
    timeout: Duration,
}

/// Per-inode attribute timeouts and the last attributes seen.
#[derive(Debug)]
pub(crate) struct AttrCache {
    t: AcTimeouts,
    inodes: Mutex<HashMap<u64, State>>,
}

impl AttrCache {
    pub(crate) fn new(t: AcTimeouts) -> Self {
        Self {
            t,
            inodes: Mutex::new(HashMap::new()),
        }
    }

    fn bounds(&self, a: &Fattr3) -> (Duration, Duration) {
        if a.ftype == Ftype3::NF3DIR {
            (self.t.dir_min, self.t.dir_max)
        } else {
            (self.t.reg_min, self.t.reg_max)
        }
    }

    /// Records fresh attributes `a` of inode `ino` from the server and
    /// returns how long the kernel may trust them.
    pub(crate) fn observe(&self, ino: u64, a: &Fattr3) -> Duration {
        let (min, max) = self.bounds(a);
        let stamp = Stamp::of(a);
        let mut m = self.inodes.lock().unwrap_or_else(|p| p.into_inner());
        let timeout = match m.get(&ino) {
            Some(s) if s.stamp == stamp => s.timeout.saturating_mul(2).clamp(min, max),
            _ => min,
        };
        if m.len() >= MAX_TRACKED && !m.contains_key(&ino) {
            m.clear();
        }
        m.insert(ino, State { stamp, timeout });
        timeout
    }

    /// Whether `a` differs from the attributes last seen for `ino` (a
    /// file not seen before counts as changed): close-to-open
    /// consistency drops the kernel's cached data of a changed file.
    pub(crate) fn changed(&self, ino: u64, a: &Fattr3) -> bool {
        let m = self.inodes.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&ino).is_none_or(|s| s.stamp != Stamp::of(a))
    }

    /// The kernel forgot `ino`.
    pub(crate) fn forget(&self, ino: u64) {
        let mut m = self.inodes.lock().unwrap_or_else(|p| p.into_inner());
        m.remove(&ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfs_client::nfs::v3::Specdata3;

    fn attrs(ftype: Ftype3, mtime: u32, size: u64) -> Fattr3 {
        Fattr3 {
            ftype,
            mode: 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            size,
            used: size,
            rdev: Specdata3 {
                specdata1: 0,
                specdata2: 0,
            },
            fsid: 1,
            fileid: 9,
            atime: Nfstime3::default(),
            mtime: Nfstime3 {
                seconds: mtime,
                nseconds: 0,
            },
            ctime: Nfstime3::default(),
        }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn timeout_doubles_while_unchanged_and_resets_on_change() {
        let c = AttrCache::new(AcTimeouts::default());
        let f = attrs(Ftype3::NF3REG, 10, 5);
        let seen: Vec<Duration> = (0..7).map(|_| c.observe(9, &f)).collect();
        assert_eq!(
            seen,
            [3, 6, 12, 24, 48, 60, 60].map(secs),
            "acregmin 3 doubling to acregmax 60"
        );
        assert!(!c.changed(9, &f));
        let grown = attrs(Ftype3::NF3REG, 10, 6);
        assert!(c.changed(9, &grown));
        assert_eq!(c.observe(9, &grown), secs(3));
        let d = attrs(Ftype3::NF3DIR, 1, 4096);
        assert_eq!(c.observe(2, &d), secs(30));
        assert_eq!(c.observe(2, &d), secs(60));
        c.forget(2);
        assert!(c.changed(2, &d));
        assert_eq!(c.observe(2, &d), secs(30));
    }

    #[test]
    fn noac_never_caches() {
        let c = AttrCache::new(AcTimeouts::all(Duration::ZERO));
        let f = attrs(Ftype3::NF3REG, 1, 1);
        assert_eq!(c.observe(3, &f), Duration::ZERO);
        assert_eq!(c.observe(3, &f), Duration::ZERO);
    }
}
