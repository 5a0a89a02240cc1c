//! The byte-range locks NLM clients hold (RFC 1813 Appendix II; XNFS
//! NLM "Locking semantics"): POSIX-style ranges per file, owned by
//! (host name, `svid`, owner handle `oh`). A leaf table, no I/O: the
//! NLM service checks NFSv4 locks on the same file before asking it, and
//! the NFSv4 service asks it before granting a LOCK
//! ([`crate::v4::V4Locks`]), so locks of either protocol exclude the other's.
//!
//! Bounds ([`NlmLimits`]): hosts holding locks at once and ranges one host
//! holds; past either a LOCK answers NLM4_DENIED_NOLOCKS with a
//! `nlm.hosts` / `nlm.locks_per_host` trip.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;
use oncrpc::limits::Limit;

use super::blocked::{Blocked, BlockedLimits, Full, Waiter};

static HOSTS: Limit = Limit::new("nlm.hosts");
static LOCKS_PER_HOST: Limit = Limit::new("nlm.locks_per_host");

/// One past the last byte: a lock "to the end of the file and beyond".
pub(crate) const INF: u128 = 1 << 64;

/// Bounds on the NLM lock table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NlmLimits {
    /// Client hosts (by `caller_name`) holding locks at once.
    pub max_hosts: usize,
    /// Separate ranges one host holds over all its files and processes.
    pub max_locks_per_host: usize,
    /// Blocking LOCKs waiting for a conflicting lock to go, in total and
    /// per host ([`super::blocked`]).
    pub blocked: BlockedLimits,
}

impl Default for NlmLimits {
    fn default() -> Self {
        Self {
            max_hosts: 4096,
            max_locks_per_host: 65_536,
            blocked: BlockedLimits::default(),
        }
    }
}

/// Who holds an NLM lock: host name, process id and owner handle.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Owner {
    pub(crate) host: Bytes,
    pub(crate) svid: i32,
    pub(crate) oh: Bytes,
}

/// A byte range `start..end`, shared or exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) start: u128,
    pub(crate) end: u128,
    pub(crate) write: bool,
}

impl Span {
    /// NLM4's `l_offset`/`l_len`: a length of 0, or one running past
    /// 2^64 - 1, locks to the end (as Linux's lockd reads them).
    pub(crate) fn of(offset: u64, len: u64, write: bool) -> Self {
        let start = u128::from(offset);
        let end = match len {
            0 => INF,
            n => (start + u128::from(n)).min(INF),
        };
        Self { start, end, write }
    }

    fn overlaps(&self, start: u128, end: u128) -> bool {
        self.start < end && start < self.end
    }

    /// Whether a lock on `self` and one on `other` cannot both be held.
    pub(crate) fn conflicts(&self, other: &Span) -> bool {
        self.overlaps(other.start, other.end) && (self.write || other.write)
    }

    /// `l_offset`/`l_len` of the span (0: to the end).
    pub(crate) fn offset_len(&self) -> (u64, u64) {
        let off = u64::try_from(self.start).unwrap_or(u64::MAX);
        let len = if self.end >= INF {
            0
        } else {
            u64::try_from(self.end - self.start).unwrap_or(0)
        };
        (off, len)
    }
}

/// A held lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) owner: Owner,
    pub(crate) span: Span,
}

/// Why a LOCK was not granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Another owner holds a conflicting lock (TEST names it).
    Denied,
    /// A bound was reached (NLM4_DENIED_NOLOCKS).
    NoLocks,
}

#[derive(Debug, Default)]
struct Host {
    ranges: usize,
    addr: Option<IpAddr>,
}

/// Every NLM lock of a server instance.
#[derive(Debug, Default)]
pub(crate) struct LockTable {
    files: HashMap<Bytes, Vec<Held>>,
    hosts: HashMap<Bytes, Host>,
    limits: NlmLimits,
    /// End of the NLM grace period after a restart (none: no grace).
    grace_until: Option<Instant>,
    /// Blocking LOCKs waiting for a conflicting lock to go.
    blocked: Blocked,
}

fn subtract(held: &mut Vec<Held>, owner: &Owner, start: u128, end: u128) {
    let mut out = Vec::with_capacity(held.len() + 1);
    for h in held.drain(..) {
        if h.owner != *owner || !h.span.overlaps(start, end) {
            out.push(h);
            continue;
        }
        if h.span.start < start {
            let span = Span {
                end: start,
                ..h.span
            };
            out.push(Held { span, ..h.clone() });
        }
        if end < h.span.end {
            let span = Span {
                start: end,
                ..h.span
            };
            out.push(Held { span, ..h });
        }
    }
    *held = out;
}

fn count_of(held: &[Held], host: &Bytes) -> usize {
    held.iter().filter(|h| h.owner.host == *host).count()
}

impl LockTable {
    fn new(limits: NlmLimits) -> Self {
        Self {
            limits,
            blocked: Blocked::new(limits.blocked),
            ..Self::default()
        }
    }

    /// Queues a blocking LOCK that conflicts (NLM4_BLOCKED); `Full` past
    /// the bounds (NLM4_DENIED_NOLOCKS).
    pub(crate) fn block(&mut self, w: Waiter) -> Result<(), Full> {
        self.blocked.push(w)
    }

    /// CANCEL of a blocked LOCK: whether one waited.
    pub(crate) fn cancel_blocked(&mut self, fh: &Bytes, owner: &Owner, span: &Span) -> bool {
        self.blocked.cancel(fh, owner, span)
    }

    /// Whether NLM holds or waits for a lock on `fh` (no NFSv4 delegation
    /// is granted on such a file).
    pub(crate) fn busy(&self, fh: &Bytes) -> bool {
        self.files.contains_key(fh) || self.blocked.on_file(fh)
    }

    /// Blocking LOCKs waiting.
    pub(crate) fn blocked_len(&self) -> usize {
        self.blocked.len()
    }

    /// Grants every waiting LOCK that no longer conflicts, oldest first,
    /// and returns them (their hosts are to be told with GRANTED); one
    /// that `other` (an NFSv4 lock or delegation) still conflicts with
    /// keeps waiting. A waiter past the lock bounds is dropped: its
    /// client's next LOCK gets NLM4_DENIED_NOLOCKS.
    pub(crate) fn grant_blocked(&mut self, other: impl Fn(&Bytes, &Span) -> bool) -> Vec<Waiter> {
        if self.blocked.len() == 0 {
            return Vec::new();
        }
        let mut keep = std::collections::VecDeque::new();
        let mut granted = Vec::new();
        for w in self.blocked.take() {
            if other(&w.key, &w.span) {
                keep.push_back(w);
                continue;
            }
            match self.lock(&w.key, &w.owner, w.span, Some(w.addr)) {
                Ok(()) => granted.push(w),
                Err(Refused::Denied) => keep.push_back(w),
                Err(Refused::NoLocks) => {}
            }
        }
        self.blocked.put_back(keep);
        granted
    }

    /// The first lock of another owner on `fh` that `span` conflicts with
    /// (TEST; the conflict check of LOCK).
    pub(crate) fn conflict(&self, fh: &Bytes, owner: Option<&Owner>, span: &Span) -> Option<&Held> {
        self.files
            .get(fh)?
            .iter()
            .find(|h| Some(&h.owner) != owner && h.span.conflicts(span))
    }

    /// LOCK: grants `span` to `owner` unless another owner's lock conflicts
    /// or a bound is reached; the owner's own ranges it overlaps are
    /// replaced (POSIX semantics, as fcntl(2) locks are).
    pub(crate) fn lock(
        &mut self,
        fh: &Bytes,
        owner: &Owner,
        span: Span,
        addr: Option<IpAddr>,
    ) -> Result<(), Refused> {
        if self.conflict(fh, Some(owner), &span).is_some() {
            return Err(Refused::Denied);
        }
        if !self.hosts.contains_key(&owner.host) && self.hosts.len() >= self.limits.max_hosts {
            HOSTS.trip(format_args!(
                "NLM4_DENIED_NOLOCKS: {} hosts hold locks",
                self.limits.max_hosts
            ));
            return Err(Refused::NoLocks);
        }
        let mut held = self.files.get(fh).cloned().unwrap_or_default();
        let before = count_of(&held, &owner.host);
        subtract(&mut held, owner, span.start, span.end);
        held.push(Held {
            owner: owner.clone(),
            span,
        });
        let after = count_of(&held, &owner.host);
        let host = self.hosts.get(&owner.host).map_or(0, |h| h.ranges);
        let total = (host + after).saturating_sub(before);
        if total > self.limits.max_locks_per_host {
            LOCKS_PER_HOST.trip(format_args!(
                "NLM4_DENIED_NOLOCKS: host {:?} would hold {total} ranges (bound {})",
                String::from_utf8_lossy(&owner.host),
                self.limits.max_locks_per_host
            ));
            return Err(Refused::NoLocks);
        }
        self.files.insert(fh.clone(), held);
        let h = self.hosts.entry(owner.host.clone()).or_default();
        h.ranges = total;
        if addr.is_some() {
            h.addr = addr;
        }
        Ok(())
    }

    /// UNLOCK: releases `span` of `owner`'s locks on `fh` (releasing
    /// nothing is not an error).
    pub(crate) fn unlock(&mut self, fh: &Bytes, owner: &Owner, span: &Span) {
        let Some(held) = self.files.get_mut(fh) else {
            return;
        };
        let before = count_of(held, &owner.host);
        subtract(held, owner, span.start, span.end);
        let after = count_of(held, &owner.host);
        if held.is_empty() {
            self.files.remove(fh);
        }
        self.recount(&owner.host, before, after);
    }

    fn recount(&mut self, host: &Bytes, before: usize, after: usize) {
        if let Some(h) = self.hosts.get_mut(host) {
            h.ranges = (h.ranges + after).saturating_sub(before);
            if h.ranges == 0 {
                self.hosts.remove(host);
            }
        }
    }

    /// Drops every lock of a host that restarted (FREE_ALL, RFC 1813
    /// Appendix II; SM_NOTIFY): the hosts named `name` whose locks were
    /// taken from `from`, or any host named `name` when `from` is
    /// loopback (the local status monitor). With `any_name`, every host
    /// whose locks were taken from `from` (a client's statd names itself
    /// as it likes). Returns how many ranges went.
    pub(crate) fn free_host(&mut self, name: &[u8], from: IpAddr, any_name: bool) -> usize {
        let gone: Vec<Bytes> = self
            .hosts
            .iter()
            .filter(|(n, h)| {
                let named = n[..] == *name;
                (h.addr == Some(from) && (named || any_name)) || (named && from.is_loopback())
            })
            .map(|(n, _)| n.clone())
            .collect();
        let mut freed = 0;
        for n in &gone {
            freed += self.hosts.remove(n).map_or(0, |h| h.ranges);
        }
        self.blocked.retain(|w| {
            let named = w.owner.host[..] == *name;
            !((w.addr == from && (named || any_name)) || (named && from.is_loopback()))
        });
        self.files.retain(|_, held| {
            held.retain(|h| !gone.contains(&h.owner.host));
            !held.is_empty()
        });
        freed
    }

    /// (hosts holding locks, ranges held).
    pub(crate) fn counts(&self) -> (usize, usize) {
        (
            self.hosts.len(),
            self.hosts.values().map(|h| h.ranges).sum(),
        )
    }
}

/// The NLM lock table, shared by the NLM, NSM and NFSv4 services. Cheap
/// to clone. When an NFSv4 state lock is also needed, take it first
/// ([`crate::v4::V4Locks`]), then this one.
#[derive(Debug, Clone)]
pub struct NlmLocks(Arc<Mutex<LockTable>>, Arc<tokio::sync::Notify>);

impl NlmLocks {
    /// An empty table within `limits`.
    pub fn new(limits: NlmLimits) -> Self {
        Self(
            Arc::new(Mutex::new(LockTable::new(limits))),
            Arc::new(tokio::sync::Notify::new()),
        )
    }

    pub(crate) fn table(&self) -> MutexGuard<'_, LockTable> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A lock (NLM or NFSv4) went: blocked LOCKs are looked at again.
    pub(crate) fn released(&self) {
        self.1.notify_one();
    }

    /// Woken by [`NlmLocks::released`].
    pub(crate) fn release_signal(&self) -> Arc<tokio::sync::Notify> {
        Arc::clone(&self.1)
    }

    /// (hosts holding locks, byte ranges held).
    pub fn counts(&self) -> (usize, usize) {
        self.table().counts()
    }

    /// Sets the end of the NLM grace period ([`super::NlmRecovery`]).
    pub(crate) fn set_grace_until(&self, until: Option<Instant>) {
        self.table().grace_until = until;
    }

    /// Whether the NLM grace period runs: hosts are reclaiming their locks
    /// after a restart, so NFSv4 must not take new locks either (as
    /// Linux's lockd and nfsd share one grace list, `locks_in_grace`).
    pub(crate) fn in_grace(&self) -> bool {
        self.table().grace_until.is_some_and(|t| Instant::now() < t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(host: &'static [u8], svid: i32) -> Owner {
        Owner {
            host: Bytes::from_static(host),
            svid,
            oh: Bytes::from_static(b"oh"),
        }
    }

    fn table(hosts: usize, per_host: usize) -> LockTable {
        LockTable::new(NlmLimits {
            max_hosts: hosts,
            max_locks_per_host: per_host,
            ..NlmLimits::default()
        })
    }

    #[test]
    fn owners_conflict_shared_locks_do_not() {
        let mut t = table(8, 8);
        let fh = Bytes::from_static(b"f");
        let (a, b) = (owner(b"a", 1), owner(b"b", 1));
        t.lock(&fh, &a, Span::of(0, 10, false), None).unwrap();
        t.lock(&fh, &b, Span::of(5, 10, false), None).unwrap();
        let r = t.lock(&fh, &b, Span::of(0, 1, true), None);
        assert_eq!(r, Err(Refused::Denied));
        assert_eq!(
            t.conflict(&fh, Some(&b), &Span::of(0, 1, true))
                .map(|h| &h.owner),
            Some(&a)
        );
        // The same host, another process: a different owner.
        let a2 = owner(b"a", 2);
        assert!(t.conflict(&fh, Some(&a2), &Span::of(9, 0, true)).is_some());
        assert!(t.conflict(&fh, Some(&a2), &Span::of(15, 0, true)).is_none());
    }

    #[test]
    fn unlock_splits_and_relock_replaces() {
        let mut t = table(8, 8);
        let fh = Bytes::from_static(b"f");
        let (a, b) = (owner(b"a", 1), owner(b"b", 1));
        t.lock(&fh, &a, Span::of(0, 100, true), None).unwrap();
        t.unlock(&fh, &a, &Span::of(40, 20, false));
        assert_eq!(t.counts(), (1, 2));
        t.lock(&fh, &b, Span::of(45, 10, true), None).unwrap();
        // Downgrading a's own range to shared lets b read-lock it.
        t.lock(&fh, &a, Span::of(0, 40, false), None).unwrap();
        t.lock(&fh, &b, Span::of(0, 40, false), None).unwrap();
        assert_eq!(t.counts(), (2, 4));
        t.unlock(&fh, &a, &Span::of(0, 0, false));
        t.unlock(&fh, &b, &Span::of(0, 0, false));
        assert_eq!(t.counts(), (0, 0));
        assert!(t.files.is_empty());
    }

    #[test]
    fn free_host_drops_by_name_from_its_address_or_loopback() {
        let mut t = table(8, 8);
        let (f, g) = (Bytes::from_static(b"f"), Bytes::from_static(b"g"));
        let ip = IpAddr::from([10, 0, 0, 1]);
        let other = IpAddr::from([10, 0, 0, 2]);
        let lo = IpAddr::from([127, 0, 0, 1]);
        t.lock(&f, &owner(b"a", 1), Span::of(0, 1, true), Some(ip))
            .unwrap();
        t.lock(&g, &owner(b"a", 2), Span::of(0, 1, true), Some(ip))
            .unwrap();
        t.lock(&g, &owner(b"b", 1), Span::of(5, 1, true), Some(other))
            .unwrap();
        // Another host cannot free a's locks by naming it.
        assert_eq!(t.free_host(b"a", other, false), 0);
        assert_eq!(t.free_host(b"a", ip, false), 2);
        assert_eq!(t.counts(), (1, 1));
        t.lock(&f, &owner(b"c", 1), Span::of(0, 1, true), Some(ip))
            .unwrap();
        assert_eq!(t.free_host(b"other-name", ip, false), 0);
        assert_eq!(t.free_host(b"other-name", ip, true), 1);
        assert_eq!(t.free_host(b"b", lo, false), 1);
        assert_eq!(t.counts(), (0, 0));
        assert!(t.files.is_empty());
    }

    #[test]
    fn hosts_and_ranges_per_host_are_bounded() {
        let mut t = table(2, 3);
        let fh = Bytes::from_static(b"f");
        let a = owner(b"a", 1);
        for i in 0..3 {
            t.lock(&fh, &a, Span::of(i * 10, 1, true), None).unwrap();
        }
        let before = LOCKS_PER_HOST.count();
        assert_eq!(
            t.lock(&fh, &a, Span::of(100, 1, true), None),
            Err(Refused::NoLocks)
        );
        assert!(LOCKS_PER_HOST.count() > before);
        // Replacing a held range does not add one.
        t.lock(&fh, &a, Span::of(0, 1, false), None).unwrap();
        // Splitting one does.
        t.lock(&fh, &a, Span::of(0, 30, true), None).unwrap();
        t.lock(&fh, &a, Span::of(40, 1, true), None).unwrap();
        assert_eq!(
            t.lock(&fh, &a, Span::of(5, 1, false), None),
            Err(Refused::NoLocks)
        );
        t.lock(&fh, &owner(b"b", 1), Span::of(50, 1, true), None)
            .unwrap();
        let before = HOSTS.count();
        assert_eq!(
            t.lock(&fh, &owner(b"c", 1), Span::of(60, 1, true), None),
            Err(Refused::NoLocks)
        );
        assert!(HOSTS.count() > before);
        assert_eq!(t.counts(), (2, 3));
    }

    #[test]
    fn spans_read_nlm_lengths() {
        assert_eq!(Span::of(5, 0, true).end, INF);
        assert_eq!(Span::of(u64::MAX, 2, true).end, INF);
        assert_eq!(Span::of(5, 0, true).offset_len(), (5, 0));
        assert_eq!(Span::of(5, 7, true).offset_len(), (5, 7));
    }
}
