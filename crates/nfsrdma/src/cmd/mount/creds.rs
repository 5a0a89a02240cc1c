//! The AUTH_SYS credential of a FUSE request's caller (RFC 5531
//! Appendix A): the uid and gid the kernel reports for the request (the
//! caller's fsuid and fsgid) and the caller's supplementary groups, read
//! from `/proc/PID/status`. A bounded cache keeps each caller's
//! credential for a short while, so a busy process costs one read of
//! `/proc` per [`CRED_TTL`], not one per request.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use oncrpc::msg::{AuthSys, OpaqueAuth, MAX_AUTH_SYS_GIDS};

/// How long a caller's groups are trusted before `/proc` is read again
/// (a process that changes its groups is seen as such within this time).
pub(crate) const CRED_TTL: Duration = Duration::from_secs(1);
/// Callers (pid, uid, gid) remembered at once.
pub(crate) const CRED_CACHE_ENTRIES: usize = 1024;

/// The fsuid, fsgid and supplementary groups in a `/proc/PID/status`
/// text (proc(5): `Uid:` and `Gid:` list real, effective, saved and file
/// system ids; `Groups:` the supplementary groups).
pub(crate) fn parse_status(status: &str) -> Option<(u32, u32, Vec<u32>)> {
    let mut fsuid = None;
    let mut fsgid = None;
    let mut groups = None;
    for line in status.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let ids = || v.split_whitespace().map(str::parse::<u32>);
        match k {
            "Uid" => fsuid = ids().nth(3).and_then(Result::ok),
            "Gid" => fsgid = ids().nth(3).and_then(Result::ok),
            "Groups" => groups = ids().collect::<Result<Vec<u32>, _>>().ok(),
            _ => {}
        }
    }
    Some((fsuid?, fsgid?, groups?))
}

/// The supplementary groups to send for a caller: at most
/// [`MAX_AUTH_SYS_GIDS`] (RFC 5531 Appendix A: `gids<16>`; the rest are
/// dropped, as Linux's client does).
pub(crate) fn auth_sys_groups(mut groups: Vec<u32>) -> Vec<u32> {
    groups.truncate(MAX_AUTH_SYS_GIDS);
    groups
}

/// The groups of process `pid` if it still runs as `uid`/`gid` (a pid
/// reused by another process, or 0 for a request the kernel made on
/// its own, gets no supplementary groups).
fn groups_of(pid: u32, uid: u32, gid: u32) -> Vec<u32> {
    if pid == 0 {
        return Vec::new();
    }
    match std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .as_deref()
        .and_then(parse_status)
    {
        Some((u, g, groups)) if u == uid && g == gid => auth_sys_groups(groups),
        _ => Vec::new(),
    }
}

#[derive(Debug)]
struct Entry {
    at: Instant,
    cred: OpaqueAuth,
}

/// Callers' credentials, keyed by (pid, uid, gid), each kept for
/// [`CRED_TTL`], at most [`CRED_CACHE_ENTRIES`] of them.
#[derive(Debug)]
pub(crate) struct Creds {
    machinename: Bytes,
    stamp: u32,
    cache: Mutex<HashMap<(u32, u32, u32), Entry>>,
}

impl Creds {
    /// Credentials naming this host as `machinename`.
    pub(crate) fn new(machinename: Bytes, stamp: u32) -> Self {
        Self {
            machinename,
            stamp,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The AUTH_SYS credential of the caller `pid` acting as `uid`/`gid`.
    pub(crate) fn of(&self, pid: u32, uid: u32, gid: u32) -> OpaqueAuth {
        self.of_with(pid, uid, gid, Instant::now(), groups_of)
    }

    fn of_with(
        &self,
        pid: u32,
        uid: u32,
        gid: u32,
        now: Instant,
        groups: impl FnOnce(u32, u32, u32) -> Vec<u32>,
    ) -> OpaqueAuth {
        let key = (pid, uid, gid);
        {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(e) = cache.get(&key) {
                if now.saturating_duration_since(e.at) < CRED_TTL {
                    return e.cred.clone();
                }
            }
        }
        let cred = AuthSys {
            stamp: self.stamp,
            machinename: self.machinename.clone(),
            uid,
            gid,
            gids: groups(pid, uid, gid),
        }
        .to_opaque_auth();
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= CRED_CACHE_ENTRIES {
            cache.retain(|_, e| now.saturating_duration_since(e.at) < CRED_TTL);
            if cache.len() >= CRED_CACHE_ENTRIES {
                cache.clear();
            }
        }
        cache.insert(
            key,
            Entry {
                at: now,
                cred: cred.clone(),
            },
        );
        cred
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tsh\nUmask:\t0022\nState:\tS (sleeping)\n\
        Uid:\t1001\t1001\t1001\t1002\nGid:\t100\t100\t100\t101\n\
        FDSize:\t64\nGroups:\t4 24 27 \nNStgid:\t7\n";

    #[test]
    fn status_gives_file_system_ids_and_groups() {
        assert_eq!(parse_status(STATUS), Some((1002, 101, vec![4, 24, 27])));
        let none = STATUS.replace("Groups:\t4 24 27 ", "Groups:\t");
        assert_eq!(parse_status(&none), Some((1002, 101, vec![])));
        assert_eq!(parse_status("Uid:\t1\t1\t1\t1\n"), None);
        assert_eq!(parse_status(&STATUS.replace("24", "x")), None);
    }

    #[test]
    fn at_most_sixteen_groups_are_sent() {
        let g = auth_sys_groups((0..40).collect());
        assert_eq!(g, (0..16).collect::<Vec<u32>>());
    }

    #[test]
    fn this_process_reads_its_own_groups() {
        let (u, g, groups) =
            parse_status(&std::fs::read_to_string("/proc/self/status").unwrap()).unwrap();
        assert_eq!(groups_of(std::process::id(), u, g), auth_sys_groups(groups));
        // A pid whose ids differ from the request's gets no groups.
        assert_eq!(groups_of(std::process::id(), u.wrapping_add(1), g), vec![]);
        assert_eq!(groups_of(0, u, g), vec![]);
    }

    #[test]
    fn credentials_are_cached_for_a_while_and_bounded() {
        let c = Creds::new(Bytes::from_static(b"host"), 7);
        let t0 = Instant::now();
        let mut reads = 0;
        let mut get = |pid, at| {
            c.of_with(pid, 1001, 100, at, |_, _, _| {
                reads += 1;
                vec![5, 6]
            })
        };
        let a = get(42, t0);
        let sys = AuthSys::decode_body(&a.body).unwrap();
        assert_eq!((sys.uid, sys.gid, sys.gids), (1001, 100, vec![5, 6]));
        assert_eq!(sys.machinename, Bytes::from_static(b"host"));
        assert_eq!(get(42, t0 + Duration::from_millis(500)), a);
        get(42, t0 + CRED_TTL);
        assert_eq!(reads, 2);
        for pid in 0..(CRED_CACHE_ENTRIES as u32 * 2) {
            c.of_with(pid, 1, 1, t0, |_, _, _| Vec::new());
        }
        assert!(c.len() <= CRED_CACHE_ENTRIES);
    }
}
