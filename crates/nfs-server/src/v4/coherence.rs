//! One conflict-and-recall path for every access that conflicts with an
//! NFSv4 delegation (RFC 8881 §10.4.1, §10.2): OPEN, READ, WRITE,
//! SETATTR, REMOVE, RENAME and LINK from other NFSv4.1 clients; the
//! NFSv3 procedures of [`crate::nfs3::Nfs3Service`]; and writes by local
//! processes seen by [`super::watch`].
//!
//! The conflicting access marks the delegation recalled and starts
//! CB_RECALL (once) on the holder's back channel. NFSv4.1 callers answer
//! NFS4ERR_DELAY at once (the client retries); NFSv3 callers
//! ([`Delegations::break_for`]) wait up to [`RECALL_WAIT`] for the
//! DELEGRETURN and otherwise answer NFS3ERR_JUKEBOX. A holder that does
//! not return the delegation a lease after the recall loses it (revoked,
//! [`super::deleg`]) and the access proceeds.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use nfs::v3::NfsFh3;

use super::callback::Callbacks;
use super::state::StateTable;
use super::Clock;

/// How long an NFSv3 access waits for a recalled delegation to come back
/// before answering NFS3ERR_JUKEBOX.
pub const RECALL_WAIT: Duration = Duration::from_secs(1);
/// How often the wait looks again.
const POLL: Duration = Duration::from_millis(10);

/// A handle on the server's delegations for the other ways into the
/// exported files (NFSv3, local processes): breaks the delegations an
/// access conflicts with. Cheap to clone.
#[derive(Clone)]
pub struct Delegations {
    state: Arc<Mutex<StateTable>>,
    cbs: Callbacks,
    clock: Arc<dyn Clock>,
    wait: Duration,
}

impl core::fmt::Debug for Delegations {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Delegations")
            .field("wait", &self.wait)
            .finish()
    }
}

/// [`Delegations`] without a strong hold on the state.
pub(crate) struct WeakDelegations {
    state: Weak<Mutex<StateTable>>,
    cbs: Callbacks,
    clock: Arc<dyn Clock>,
}

impl WeakDelegations {
    /// The handle, while the server's state lives.
    pub(crate) fn upgrade(&self) -> Option<Delegations> {
        Some(Delegations::new(
            self.state.upgrade()?,
            self.cbs.clone(),
            Arc::clone(&self.clock),
        ))
    }
}

/// The key delegations are kept under: the file handle's bytes.
pub(crate) fn key(fh: &NfsFh3) -> Bytes {
    Bytes::copy_from_slice(fh.as_bytes())
}

impl Delegations {
    pub(crate) fn new(
        state: Arc<Mutex<StateTable>>,
        cbs: Callbacks,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            state,
            cbs,
            clock,
            wait: RECALL_WAIT,
        }
    }

    /// The same handle waiting `wait` (instead of [`RECALL_WAIT`]) in
    /// [`Delegations::break_for`].
    pub fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// A handle that does not keep the server's state alive (for a
    /// kernel lease's break callback, which the process-wide lease
    /// table holds).
    pub(crate) fn downgrade(&self) -> WeakDelegations {
        WeakDelegations {
            state: Arc::downgrade(&self.state),
            cbs: self.cbs.clone(),
            clock: Arc::clone(&self.clock),
        }
    }

    /// Recalls the delegations on `key` that an access (`write` or not) by
    /// `clientid` (0: not an NFSv4.1 client) conflicts with; `true` while
    /// some are outstanding.
    pub(crate) fn recall(&self, key: &Bytes, clientid: u64, write: bool) -> bool {
        let now = self.clock.now();
        let (pending, recalls) = match self.state.lock() {
            Ok(mut st) => {
                let lease = st.lease();
                st.delegs.conflicts(key, clientid, write, now, lease)
            }
            Err(_) => return false,
        };
        self.cbs.recall(&self.state, recalls);
        pending
    }

    /// Whether any client holds a delegation (NFSv3 skips the lookups
    /// of its targets when none does).
    pub(crate) fn any_held(&self) -> bool {
        self.state.lock().is_ok_and(|st| st.delegs.held() > 0)
    }

    /// Whether some client holds a delegation on `key`.
    pub(crate) fn held_on(&self, key: &Bytes) -> bool {
        self.state.lock().is_ok_and(|st| st.delegs.on_file(key))
    }

    /// Breaks the delegations on `fh` that an access from outside NFSv4
    /// (`write`: data or attributes change, the name goes) conflicts
    /// with: recalls them and waits up to the configured wait for their
    /// return. `false` when some are still held (answer
    /// NFS3ERR_JUKEBOX; the client retries).
    pub async fn break_for(&self, fh: &NfsFh3, write: bool) -> bool {
        let k = key(fh);
        if !self.recall(&k, 0, write) {
            return true;
        }
        let deadline = tokio::time::Instant::now() + self.wait;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(POLL).await;
            if !self.recall(&k, 0, write) {
                return true;
            }
        }
        false
    }
}
