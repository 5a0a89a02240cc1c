//! The mount's side of session recovery (RFC 8881 §8.4.2): after the
//! server restarted or the lease expired, the session is made again
//! ([`nfs_client::v4::Reclaim`]) and asks the mount for the opens it
//! holds; each is reclaimed as its opener (CLAIM_PREVIOUS in the grace
//! period, else CLAIM_FH) and its new stateid goes into the open file,
//! so the descriptors the kernel holds keep working. Opens served
//! locally under a delegation become real opens: the delegations of the
//! old client id are gone, so they are forgotten.

use std::sync::Arc;

use nfs_client::v4::{Error, HeldOpen, OpenFile, Reclaim};

use super::super::handles::OpenHandles;
use super::deleg::MountDelegs;
use super::files::Open4;

/// The mount's open files, as [`Reclaim`] sees them.
#[derive(Debug)]
pub(super) struct MountOpens {
    pub(super) files: OpenHandles<Open4>,
    pub(super) delegs: Option<Arc<MountDelegs>>,
}

impl MountOpens {
    fn get(&self, key: u64) -> Option<Arc<Open4>> {
        self.files.lock().get(&key).cloned()
    }
}

impl Reclaim for MountOpens {
    fn held(&self) -> Vec<HeldOpen> {
        if let Some(m) = &self.delegs {
            m.forget_all();
        }
        self.files
            .lock()
            .iter()
            .map(|(&key, o)| HeldOpen {
                key,
                fh: o.file().fh,
                share_access: o.access,
                cred: o.cred.clone(),
            })
            .collect()
    }

    fn reclaimed(&self, key: u64, file: OpenFile) {
        if let Some(o) = self.get(key) {
            o.make_real(file);
        }
    }

    fn lost(&self, key: u64, error: &Error) {
        // Its I/O now fails (EIO) with the old stateid.
        tracing::warn!(key, %error, "an open file could not be reclaimed");
    }
}
