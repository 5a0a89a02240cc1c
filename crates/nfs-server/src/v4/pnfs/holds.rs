//! Data servers a client cannot reach (RFC 8435 §9.1.2: a client that
//! cannot reach a data server reports NFS4ERR_NXIO for it, in LAYOUTERROR
//! or in the error report of LAYOUTRETURN).
//!
//! The metadata server still reaches that data server (its control path
//! is its own), so the client's I/O can go through the metadata server
//! ([`super::proxy`]). Without this, the Linux flex-files client asks for
//! a new layout naming the same data server again and again (it retries
//! pNFS after such errors). So, for a while after the report
//! (`--mds-ds-error-hold`, 120 s by default), that client's LAYOUTGET of
//! a file with no good copy on another data server is
//! NFS4ERR_LAYOUTUNAVAILABLE (RFC 8881 §18.43.3): a client then does
//! its I/O through the metadata server (Linux does for two minutes).
//! Holds are per client: what one client reports never changes what
//! others get. Errors other than NFS4ERR_NXIO (NFS4ERR_ACCESS after
//! fencing, for one) hold nothing: the client needs a new layout then.
//!
//! Bound: one entry per client and data server reported (so at most
//! clients × data servers), dropped when it has expired and is looked
//! at, or when its client goes.

use std::collections::HashMap;
use std::time::Duration;

use super::Mds;

impl Mds {
    /// Whether `client` reported data server `ds` unreachable and the
    /// hold lasts at `now`.
    pub(crate) fn held(&self, client: u64, ds: usize, now: Duration) -> bool {
        self.holds.lock().is_ok_and(|mut h| h.held(client, ds, now))
    }
}

/// Holds: (client, data server index) to the time it ends.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    until: HashMap<(u64, usize), Duration>,
}

impl Holds {
    /// `client` cannot reach data server `ds` until `until`.
    pub(crate) fn hold(&mut self, client: u64, ds: usize, until: Duration) {
        self.until.insert((client, ds), until);
    }

    /// Whether `client`'s hold on `ds` still lasts at `now` (an expired
    /// one is dropped).
    pub(crate) fn held(&mut self, client: u64, ds: usize, now: Duration) -> bool {
        match self.until.get(&(client, ds)) {
            Some(&t) if now < t => true,
            Some(_) => {
                self.until.remove(&(client, ds));
                false
            }
            None => false,
        }
    }

    /// `client` went: its holds go.
    pub(crate) fn forget_client(&mut self, client: u64) {
        self.until.retain(|&(c, _), _| c != client);
    }

    /// Holds kept now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.until.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_are_per_client_end_in_time_and_go_with_their_client() {
        let mut h = Holds::default();
        let s = Duration::from_secs;
        h.hold(1, 0, s(120));
        h.hold(1, 1, s(60));
        h.hold(2, 0, s(10));
        assert!(h.held(1, 0, s(59)));
        assert!(!h.held(3, 0, s(59)));
        assert!(!h.held(2, 0, s(10)));
        assert_eq!(h.len(), 2);
        assert!(!h.held(1, 1, s(61)));
        h.forget_client(1);
        assert_eq!(h.len(), 0);
    }
}
