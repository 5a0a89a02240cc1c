//! The grace period after a restart and the stable client records it is
//! decided from (RFC 8881 §8.4.2, §8.4.2.1, §18.51; RFC 7530 §9.6.2):
//! a sans-IO table. It says which client may reclaim, when the grace
//! period ends, and which records must be written or removed; the
//! owner ([`super::state::StateTable`]) does the writes
//! ([`super::records::RecordStore`]) before answering.
//!
//! - A record names a client by its owner key (the `co_ownerid` of
//!   EXCHANGE_ID, or the `nfs_client_id4` id of SETCLIENTID with a
//!   prefix) and its principal (the AUTH_SYS uid that established it),
//!   as Linux's nfsdcld keys its database.
//! - A 4.1/4.2 client is recorded by its RECLAIM_COMPLETE (RFC 8881
//!   §18.51.3: the point after which it holds state), a 4.0 client by its
//!   first OPEN (RFC 7530 §9.6.2), each before the reply; the record goes
//!   when the client expires or is destroyed.
//! - Records found at start-up are the clients of the previous instance:
//!   during the grace period (from start-up, at most the configured
//!   length) only they may reclaim (CLAIM_PREVIOUS, LOCK with `reclaim`),
//!   anyone else gets NFS4ERR_NO_GRACE; non-reclaim OPEN and LOCK get
//!   NFS4ERR_GRACE. The period ends early once every recorded client has
//!   sent RECLAIM_COMPLETE (or is gone); with no records there is none.
//!   When it ends, the records of clients that did not come back are
//!   removed. A restart during the grace period keeps them all.
//! - At most `max` records (bound `nfs4.client_records`): a client beyond
//!   it works but is not recorded, so it cannot reclaim after a restart.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use nfs::v4::Nfsstat4;
use oncrpc::limits::Limit;

static RECORDS: Limit = Limit::new("nfs4.client_records");

/// A change the owner must make durable before it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RecordOp {
    /// Write the record of (owner key, principal).
    Put(Bytes, u32),
    /// Remove the record of this owner key.
    Remove(Bytes),
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    principal: u32,
    /// Recorded by the previous server instance.
    prev: bool,
    /// A previous client that finished reclaiming (or went away).
    done: bool,
    /// Recorded by this instance.
    current: bool,
}

/// Grace period and client records of a server instance.
#[derive(Debug)]
pub(crate) struct Grace {
    ends: Duration,
    over: bool,
    /// Every record on disk, by owner key.
    records: HashMap<Bytes, Entry>,
    /// Previous clients that have not finished reclaiming.
    waiting: usize,
    max: usize,
    /// Whether records are kept at all (a state directory).
    durable: bool,
}

impl Grace {
    /// No records and no grace period (no state directory).
    pub(crate) fn none() -> Self {
        Self {
            ends: Duration::ZERO,
            over: true,
            records: HashMap::new(),
            waiting: 0,
            max: 0,
            durable: false,
        }
    }

    /// A grace period of `length` from `now` for the clients of the
    /// previous instance, `prev` (owner key, principal), at most `max`
    /// records kept.
    pub(crate) fn start(
        prev: Vec<(Bytes, u32)>,
        now: Duration,
        length: Duration,
        max: usize,
    ) -> Self {
        let mut records = HashMap::new();
        for (key, principal) in prev.into_iter().take(max) {
            let e = Entry {
                principal,
                prev: true,
                done: false,
                current: false,
            };
            records.insert(key, e);
        }
        let waiting = records.len();
        Self {
            ends: now + length,
            over: waiting == 0,
            records,
            waiting,
            max,
            durable: true,
        }
    }

    /// Whether the grace period still runs.
    pub(crate) fn in_grace(&self) -> bool {
        !self.over
    }

    /// Records on disk.
    pub(crate) fn records(&self) -> usize {
        self.records.len()
    }

    /// Moves time to `now`; when the grace period ends, the records of
    /// previous clients that did not come back are to be removed.
    pub(crate) fn tick(&mut self, now: Duration) -> Vec<RecordOp> {
        if self.over || now < self.ends {
            return Vec::new();
        }
        self.end()
    }

    fn end(&mut self) -> Vec<RecordOp> {
        self.over = true;
        let gone: Vec<Bytes> = self
            .records
            .iter()
            .filter(|(_, e)| !e.current)
            .map(|(k, _)| k.clone())
            .collect();
        tracing::info!(
            forgotten = gone.len(),
            "NFSv4 grace period over: new opens and locks allowed"
        );
        for k in &gone {
            self.records.remove(k);
        }
        gone.into_iter().map(RecordOp::Remove).collect()
    }

    /// Whether the client of owner `key` and `principal` may reclaim now
    /// (RFC 8881 §8.4.2.1): NFS4ERR_NO_GRACE outside the grace period and
    /// for a client the previous instance did not record.
    pub(crate) fn may_reclaim(&self, key: &[u8], principal: u32) -> Result<(), Nfsstat4> {
        match self.records.get(key) {
            Some(e) if !self.over && e.prev && !e.done && e.principal == principal => Ok(()),
            _ => Err(Nfsstat4::NFS4ERR_NO_GRACE),
        }
    }

    /// A previous client finished reclaiming (RECLAIM_COMPLETE, RFC 8881
    /// §18.51.3) or went away: the grace period ends when none is left.
    fn finished(&mut self, key: &[u8]) -> Vec<RecordOp> {
        let Some(e) = self.records.get_mut(key) else {
            return Vec::new();
        };
        if !e.prev || e.done {
            return Vec::new();
        }
        e.done = true;
        self.waiting = self.waiting.saturating_sub(1);
        if self.waiting == 0 && !self.over {
            return self.end();
        }
        Vec::new()
    }

    /// RECLAIM_COMPLETE of the client of `key`: it is recorded, and the
    /// grace period may end.
    pub(crate) fn reclaim_complete(&mut self, key: &Bytes, principal: u32) -> Vec<RecordOp> {
        let mut ops = self.record(key, principal);
        ops.extend(self.finished(key));
        ops
    }

    /// Records the client of `key` for this instance (a Put when the
    /// record is new or changed); nothing past `max` records.
    pub(crate) fn record(&mut self, key: &Bytes, principal: u32) -> Vec<RecordOp> {
        if !self.durable {
            return Vec::new();
        }
        if let Some(e) = self.records.get_mut(key) {
            let changed = !e.current || e.principal != principal;
            e.current = true;
            e.principal = principal;
            return if changed {
                vec![RecordOp::Put(key.clone(), principal)]
            } else {
                Vec::new()
            };
        }
        if self.records.len() >= self.max {
            RECORDS.trip(format_args!(
                "NFSv4 client not recorded (it cannot reclaim after a restart): {} records",
                self.max
            ));
            return Vec::new();
        }
        let e = Entry {
            principal,
            prev: false,
            done: false,
            current: true,
        };
        self.records.insert(key.clone(), e);
        vec![RecordOp::Put(key.clone(), principal)]
    }

    /// Whether the client of `key` is recorded by this instance.
    pub(crate) fn is_recorded(&self, key: &[u8]) -> bool {
        self.records.get(key).is_some_and(|e| e.current)
    }

    /// The client of `key` expired or was destroyed: its record goes.
    pub(crate) fn forget(&mut self, key: &Bytes) -> Vec<RecordOp> {
        let mut ops = self.finished(key);
        if self.records.remove(key).is_some() {
            ops.push(RecordOp::Remove(key.clone()));
        }
        ops
    }

    /// A write that failed: the record is not there after all.
    pub(crate) fn unrecord(&mut self, key: &[u8]) {
        if let Some(e) = self.records.get_mut(key) {
            e.current = false;
            if !e.prev {
                self.records.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &'static str) -> Bytes {
        Bytes::from_static(s.as_bytes())
    }

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn no_records_means_no_grace_period() {
        let g = Grace::start(Vec::new(), S, 90 * S, 10);
        assert!(!g.in_grace());
        assert_eq!(g.may_reclaim(b"a", 0), Err(Nfsstat4::NFS4ERR_NO_GRACE));
        assert!(!Grace::none().in_grace());
    }

    #[test]
    fn only_recorded_clients_reclaim_until_the_period_ends() {
        let mut g = Grace::start(vec![(k("a"), 0), (k("b"), 5)], S, 10 * S, 10);
        assert!(g.in_grace());
        assert_eq!(g.may_reclaim(b"a", 0), Ok(()));
        assert_eq!(g.may_reclaim(b"b", 0), Err(Nfsstat4::NFS4ERR_NO_GRACE));
        assert_eq!(g.may_reclaim(b"c", 0), Err(Nfsstat4::NFS4ERR_NO_GRACE));
        assert!(g.tick(10 * S).is_empty());
        // a comes back (recorded again); b does not and is forgotten.
        assert_eq!(g.record(&k("a"), 0), vec![RecordOp::Put(k("a"), 0)]);
        assert!(g.record(&k("a"), 0).is_empty());
        assert_eq!(g.tick(11 * S), vec![RecordOp::Remove(k("b"))]);
        assert!(!g.in_grace());
        assert_eq!(g.may_reclaim(b"a", 0), Err(Nfsstat4::NFS4ERR_NO_GRACE));
        assert_eq!(g.records(), 1);
    }

    #[test]
    fn the_period_ends_early_when_every_client_completed() {
        let mut g = Grace::start(vec![(k("a"), 0), (k("b"), 0)], S, 90 * S, 10);
        assert_eq!(
            g.reclaim_complete(&k("a"), 0),
            vec![RecordOp::Put(k("a"), 0)]
        );
        assert!(g.in_grace());
        assert_eq!(g.may_reclaim(b"a", 0), Err(Nfsstat4::NFS4ERR_NO_GRACE));
        // b expires without coming back: nobody is left to wait for.
        assert_eq!(g.forget(&k("b")), vec![RecordOp::Remove(k("b"))]);
        assert!(!g.in_grace());
        assert_eq!(g.records(), 1);
    }

    #[test]
    fn records_are_bounded() {
        let mut g = Grace::start(vec![(k("a"), 0)], S, 90 * S, 2);
        assert_eq!(g.record(&k("b"), 0).len(), 1);
        let before = RECORDS.count();
        assert!(g.record(&k("c"), 0).is_empty());
        assert!(RECORDS.count() > before);
        assert!(!g.is_recorded(b"c"));
        assert_eq!(g.forget(&k("b")), vec![RecordOp::Remove(k("b"))]);
        assert_eq!(g.record(&k("c"), 0).len(), 1);
        assert_eq!(g.records(), 2);
    }
}
