//! NFSv4 byte-range locks and NLM locks on the same file exclude each
//! other (RFC 8881 §9.5: a server that also serves NFSv3 with NLM
//! enforces both sets of locks against each other, as Linux's nfsd does
//! through the one VFS lock list).
//!
//! - An NFSv4 LOCK on a range an NLM client holds answers NFS4ERR_DENIED
//!   with the NLM lock as the holder ([`Nfs4Service::nlm_denied`]).
//! - The NLM service asks [`V4Locks`] for a conflicting NFSv4 lock before
//!   granting one, under the NFSv4 state lock, then takes the NLM table's
//!   lock: the order (NFSv4 state, then NLM table) is the same on both
//!   paths, so they cannot deadlock, and no LOCK of one protocol slips in
//!   between the other's check and grant.

use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use nfs::v4::{Lock4Denied, NfsLockType4, StateOwner4, NFS4_UINT64_MAX};
use xdr::Bounded;

use super::state::StateTable;
use super::Nfs4Service;
use crate::nlm::locks::{Held, Span};
use crate::nlm::NlmLocks;
use crate::storage::Storage;

/// A handle on the NFSv4 byte-range locks of a server, for the NLM
/// service. Cheap to clone.
#[derive(Clone)]
pub struct V4Locks {
    state: Arc<Mutex<StateTable>>,
    clock: Arc<dyn super::Clock>,
}

impl<S: Storage> Nfs4Service<S> {
    /// NFS4ERR_GRACE for a non-reclaim LOCK or LOCKT while NLM hosts
    /// reclaim their locks after a restart (RFC 8881 §8.4.2.1: a lock not
    /// yet reclaimed must not be granted to another; Linux's nfsd asks
    /// the grace list lockd is on too).
    pub(super) fn nlm_grace(&self) -> Result<(), nfs::v4::Nfsstat4> {
        match self.nlm.as_ref().is_some_and(NlmLocks::in_grace) {
            true => Err(nfs::v4::Nfsstat4::NFS4ERR_GRACE),
            false => Ok(()),
        }
    }
}

impl core::fmt::Debug for V4Locks {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("V4Locks").finish_non_exhaustive()
    }
}

/// The NFSv4 state held while an NLM lock is checked and granted, and
/// the lease clock.
pub(crate) struct V4Guard<'a>(MutexGuard<'a, StateTable>, &'a dyn super::Clock);

/// An NFSv4 lock an NLM lock conflicts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct V4Holder {
    pub(crate) span: Span,
    pub(crate) owner: Bytes,
}

impl V4Locks {
    /// Takes the NFSv4 state lock (take it before [`NlmLocks::table`]).
    pub(crate) fn guard(&self) -> V4Guard<'_> {
        V4Guard(
            self.state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            &*self.clock,
        )
    }
}

impl V4Guard<'_> {
    /// Whether the NFSv4 grace period runs (moved on to now first).
    pub(crate) fn in_grace(&mut self) -> bool {
        self.0.grace_now(self.1.now())
    }

    /// Whether a delegation on `fh` conflicts with an NLM lock
    /// (`exclusive` or not): a write delegation always, a read one with
    /// an exclusive lock.
    pub(crate) fn delegated(&self, fh: &Bytes, exclusive: bool) -> bool {
        let d = &self.0.delegs;
        d.write_holder(fh, 0).is_some() || (exclusive && d.on_file(fh))
    }

    /// The first NFSv4 lock on `fh` that an NLM lock of `span` conflicts with.
    pub(crate) fn conflict(&self, fh: &Bytes, span: &Span) -> Option<V4Holder> {
        self.0
            .ids
            .foreign_conflict(fh, span.start, span.end, span.write)
            .map(|(start, end, write, owner)| V4Holder {
                span: Span { start, end, write },
                owner,
            })
    }
}

/// `offset`/`length` of an NFSv4 LOCK as a span; `None` when invalid
/// (the LOCK itself then answers NFS4ERR_INVAL, RFC 8881 §18.10.4).
fn v4_span(offset: u64, length: u64, write: bool) -> Option<Span> {
    let start = u128::from(offset);
    let end = match length {
        0 => return None,
        NFS4_UINT64_MAX => super::super::nlm::locks::INF,
        n => start.checked_add(u128::from(n)).filter(|e| *e <= 1 << 64)?,
    };
    Some(Span { start, end, write })
}

/// An NLM lock as NFS4ERR_DENIED's holder: the owner is the NLM host
/// name, client id 0 (RFC 8881 §18.10.4 `LOCK4denied`).
fn denied(h: &Held) -> Lock4Denied {
    let (offset, len) = h.span.offset_len();
    Lock4Denied {
        offset,
        length: if len == 0 { NFS4_UINT64_MAX } else { len },
        locktype: if h.span.write {
            NfsLockType4::WRITE_LT
        } else {
            NfsLockType4::READ_LT
        },
        owner: StateOwner4 {
            clientid: 0,
            owner: Bounded(h.owner.host.clone()),
        },
    }
}

impl<S: Storage> Nfs4Service<S> {
    /// Makes NFSv4 LOCK and LOCKT see the locks of `locks` (NLM clients').
    pub fn with_nlm_locks(mut self, locks: NlmLocks) -> Self {
        self.nlm = Some(locks);
        self
    }

    /// A handle the NLM service checks NFSv4 locks through.
    pub fn byte_range_locks(&self) -> V4Locks {
        V4Locks {
            state: Arc::clone(&self.state),
            clock: Arc::clone(&self.clock),
        }
    }

    /// An NFSv4 lock may have gone (LOCKU, CLOSE, RELEASE_LOCKOWNER,
    /// FREE_STATEID): blocked NLM LOCKs are looked at again.
    pub(super) fn nlm_released(&self) {
        if let Some(l) = &self.nlm {
            if l.table().blocked_len() > 0 {
                l.released();
            }
        }
    }

    /// Whether an NLM client holds or waits for a lock on `fh`: no delegation is
    /// granted on such a file (the holder would cache its own locks and
    /// not see the NLM ones; Linux's nfsd cannot get a lease on a file
    /// its lockd holds open). Call with the NFSv4 state lock held.
    pub(super) fn nlm_locked(&self, fh: &Bytes) -> bool {
        self.nlm.as_ref().is_some_and(|l| l.table().busy(fh))
    }

    /// The NLM lock a LOCK or LOCKT of `fh` conflicts with, as its
    /// NFS4ERR_DENIED holder. Call with the NFSv4 state lock held.
    pub(super) fn nlm_denied(
        &self,
        fh: &Bytes,
        offset: u64,
        length: u64,
        write: bool,
    ) -> Option<Lock4Denied> {
        let span = v4_span(offset, length, write)?;
        let t = self.nlm.as_ref()?.table();
        t.conflict(fh, None, &span).map(denied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v4_lengths_become_spans() {
        assert_eq!(v4_span(0, 0, true), None);
        assert_eq!(v4_span(u64::MAX, 2, true), None);
        assert_eq!(
            v4_span(3, NFS4_UINT64_MAX, false).map(|s| s.end),
            Some(1 << 64)
        );
        assert_eq!(v4_span(3, 4, false).map(|s| (s.start, s.end)), Some((3, 7)));
    }
}
