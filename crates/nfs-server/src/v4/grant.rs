//! What a delegation needs before it is granted (issue 19 item 2): a
//! kernel lease on the file ([`super::lease`]), whose break recalls the
//! delegation before a local process opens the file, kept with the
//! delegation and pinned as the descriptor of the holder's own I/O
//! ([`crate::storage::Storage::pin`]); and the inotify watch
//! ([`super::watch`]) for the local changes no open announces (rename,
//! unlink, chmod). Where either cannot be had, no delegation is granted
//! (RFC 8881 §10.2: a server may always decline), with a rate-limited
//! log line and a count.

use std::os::fd::OwnedFd;

use bytes::Bytes;
use nfs::v3::NfsFh3;
use nfs::v4::Stateid4;
use oncrpc::limits::Limit;

use super::lease::Lease;
use super::Nfs4Service;
use crate::storage::Storage;

static LEASES: Limit = Limit::new("nfs4.delegation_leases");

impl<S: Storage> Nfs4Service<S> {
    /// Takes the lease and the watch for delegation `sid` (a `write` one
    /// or not) just offered on `fh` (key `k`); `false`: do not grant it.
    pub(super) fn guard_delegation(
        &self,
        fh: &NfsFh3,
        k: &Bytes,
        sid: &Stateid4,
        write: bool,
    ) -> bool {
        let file = match self.open_fd(fh, write) {
            Ok(f) => f,
            Err(e) => {
                LEASES.trip(format_args!(
                    "no delegation granted: open for a lease: {e:?}"
                ));
                return false;
            }
        };
        let delegs = self.delegations().downgrade();
        let key = k.clone();
        let rt = tokio::runtime::Handle::try_current().ok();
        let on_break = move || {
            let (Some(d), Some(rt)) = (delegs.upgrade(), rt.as_ref()) else {
                return;
            };
            let _rt = rt.enter();
            tracing::info!("kernel lease break on a delegated file: recalling");
            d.recall(&key, 0, true);
        };
        let lease = match Lease::take(OwnedFd::from(file), write, on_break) {
            Ok(l) => l,
            Err(e) => {
                LEASES.trip(format_args!(
                    "no delegation granted: kernel lease refused ({e}); \
                     the file is open elsewhere, or the server lacks CAP_LEASE, \
                     or the file system (or fs.leases-enable=0) has no leases"
                ));
                return false;
            }
        };
        if !self.watch.watch(k, lease.fd(), &self.delegations()) {
            return false;
        }
        self.fs.pin(fh, lease.fd());
        self.state()
            .is_ok_and(|mut st| st.delegs.attach_lease(sid, lease))
    }
}
