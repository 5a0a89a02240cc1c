//! Blocked NLM LOCKs: a LOCK with `block` set that conflicts is answered
//! NLM4_BLOCKED and waits here until the conflicting lock goes; the
//! server then takes the lock for it and tells the client with a GRANTED
//! call (XNFS NLM, "NLM_LOCK" and "NLM_GRANTED"; RFC 1813 Appendix II;
//! Linux's lockd keeps the same list, `fs/lockd/svclock.c`). A sans-IO
//! queue, kept inside the lock table ([`super::locks::LockTable`]).
//!
//! - One waiter per (owner, file, range): a client's repeated LOCK (the
//!   Linux client sends it again every 30 s while it waits) refreshes its
//!   waiter, it does not add one.
//! - CANCEL removes the waiter; FREE_ALL and SM_NOTIFY drop a host's.
//! - Bounds ([`BlockedLimits`]): waiters per host and in total; past
//!   either the LOCK answers NLM4_DENIED_NOLOCKS with an
//!   `nlm.blocked_per_host` / `nlm.blocked` trip.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use bytes::Bytes;
use nfs::nlm::Nlm4Lock;
use oncrpc::limits::Limit;

use super::locks::{Owner, Span};

static BLOCKED: Limit = Limit::new("nlm.blocked");
static BLOCKED_PER_HOST: Limit = Limit::new("nlm.blocked_per_host");

/// Bounds on waiting LOCKs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockedLimits {
    /// Waiting LOCKs over all hosts.
    pub max_total: usize,
    /// Waiting LOCKs of one host (`caller_name`).
    pub max_per_host: usize,
}

impl Default for BlockedLimits {
    fn default() -> Self {
        Self {
            max_total: 4096,
            max_per_host: 256,
        }
    }
}

/// A LOCK waiting for a conflicting lock to go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Waiter {
    /// The lock table's key of the file.
    pub(crate) key: Bytes,
    pub(crate) owner: Owner,
    pub(crate) span: Span,
    /// The LOCK's cookie, echoed in GRANTED (as Linux's lockd does).
    pub(crate) cookie: Bytes,
    /// The LOCK's lock, sent back in GRANTED.
    pub(crate) alock: Nlm4Lock,
    /// Where the LOCK came from: GRANTED goes to this host's lock manager.
    pub(crate) addr: IpAddr,
}

impl Waiter {
    fn same(&self, other: &Waiter) -> bool {
        self.key == other.key && self.owner == other.owner && self.span == other.span
    }
}

/// Why a LOCK could not wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Full;

/// The waiting LOCKs of a server, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Blocked {
    queue: VecDeque<Waiter>,
    per_host: HashMap<Bytes, usize>,
    limits: BlockedLimits,
}

impl Blocked {
    pub(crate) fn new(limits: BlockedLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// Queues `w`, or refreshes the same owner's waiter for the same range
    /// of the same file (keeping its place).
    pub(crate) fn push(&mut self, w: Waiter) -> Result<(), Full> {
        if let Some(old) = self.queue.iter_mut().find(|o| o.same(&w)) {
            *old = w;
            return Ok(());
        }
        if self.queue.len() >= self.limits.max_total {
            BLOCKED.trip(format_args!(
                "NLM4_DENIED_NOLOCKS: {} LOCKs already wait",
                self.limits.max_total
            ));
            return Err(Full);
        }
        let n = self.per_host.get(&w.owner.host).copied().unwrap_or(0);
        if n >= self.limits.max_per_host {
            BLOCKED_PER_HOST.trip(format_args!(
                "NLM4_DENIED_NOLOCKS: host {:?} has {n} LOCKs waiting",
                String::from_utf8_lossy(&w.owner.host)
            ));
            return Err(Full);
        }
        *self.per_host.entry(w.owner.host.clone()).or_default() += 1;
        self.queue.push_back(w);
        Ok(())
    }

    fn forget(&mut self, host: &Bytes) {
        if let Some(n) = self.per_host.get_mut(host) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_host.remove(host);
            }
        }
    }

    /// CANCEL: removes `owner`'s waiter for `span` of the file `key`;
    /// whether there was one.
    pub(crate) fn cancel(&mut self, key: &Bytes, owner: &Owner, span: &Span) -> bool {
        let Some(i) = self
            .queue
            .iter()
            .position(|w| w.key == *key && w.owner == *owner && w.span == *span)
        else {
            return false;
        };
        if let Some(w) = self.queue.remove(i) {
            self.forget(&w.owner.host);
        }
        true
    }

    /// Keeps only the waiters `keep` says yes to (FREE_ALL, SM_NOTIFY
    /// drop a restarted host's).
    pub(crate) fn retain(&mut self, keep: impl Fn(&Waiter) -> bool) {
        let q = self.take();
        self.put_back(q.into_iter().filter(|w| keep(w)).collect());
    }

    /// Whether a LOCK waits on the file `key`.
    pub(crate) fn on_file(&self, key: &Bytes) -> bool {
        self.queue.iter().any(|w| w.key == *key)
    }

    /// Waiting LOCKs.
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }

    /// Takes every waiter out, oldest first (the caller grants what it can
    /// and gives the rest back with [`Blocked::put_back`]).
    pub(crate) fn take(&mut self) -> VecDeque<Waiter> {
        self.per_host.clear();
        std::mem::take(&mut self.queue)
    }

    /// Gives back waiters taken by [`Blocked::take`], keeping their order.
    pub(crate) fn put_back(&mut self, ws: VecDeque<Waiter>) {
        for w in &ws {
            *self.per_host.entry(w.owner.host.clone()).or_default() += 1;
        }
        let mut ws = ws;
        ws.append(&mut self.queue);
        self.queue = ws;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xdr::Bounded;

    fn waiter(host: &'static [u8], svid: i32, start: u64) -> Waiter {
        let owner = Owner {
            host: Bytes::from_static(host),
            svid,
            oh: Bytes::from_static(b"oh"),
        };
        Waiter {
            key: Bytes::from_static(b"f"),
            owner,
            span: Span::of(start, 1, true),
            cookie: Bytes::from_static(b"c"),
            alock: Nlm4Lock {
                caller_name: Bounded(Bytes::from_static(host)),
                fh: Bounded(Bytes::from_static(b"f")),
                oh: Bounded(Bytes::from_static(b"oh")),
                svid,
                l_offset: start,
                l_len: 1,
            },
            addr: IpAddr::from([10, 0, 0, 1]),
        }
    }

    #[test]
    fn repeats_refresh_cancel_removes_and_bounds_hold() {
        let mut b = Blocked::new(BlockedLimits {
            max_total: 3,
            max_per_host: 2,
        });
        b.push(waiter(b"a", 1, 0)).unwrap();
        let mut again = waiter(b"a", 1, 0);
        again.cookie = Bytes::from_static(b"c2");
        b.push(again).unwrap();
        assert_eq!(b.len(), 1);
        b.push(waiter(b"a", 2, 0)).unwrap();
        let before = BLOCKED_PER_HOST.count();
        assert_eq!(b.push(waiter(b"a", 3, 0)), Err(Full));
        assert!(BLOCKED_PER_HOST.count() > before);
        b.push(waiter(b"b", 1, 0)).unwrap();
        let before = BLOCKED.count();
        assert_eq!(b.push(waiter(b"c", 1, 0)), Err(Full));
        assert!(BLOCKED.count() > before);
        let w = waiter(b"a", 2, 0);
        assert!(b.cancel(&w.key, &w.owner, &w.span));
        assert!(!b.cancel(&w.key, &w.owner, &w.span));
        b.push(waiter(b"a", 3, 0)).unwrap();
        let q = b.take();
        assert_eq!(q[0].cookie, Bytes::from_static(b"c2"));
        b.put_back(q);
        b.retain(|w| w.owner.host != Bytes::from_static(b"a"));
        assert_eq!(b.len(), 1);
        assert!(b.on_file(&Bytes::from_static(b"f")));
    }
}
