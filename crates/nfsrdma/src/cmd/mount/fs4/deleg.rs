//! Delegations in the NFSv4 mount (RFC 8881 §10.2, §10.4): the session's
//! back channel answers CB_RECALL and CB_GETATTR
//! ([`nfs_client::v4::Delegations`]); OPENs take the delegations the
//! server offers, and while one is held the opens of its file by the
//! process credential that took it are served here without an OPEN
//! (§10.4): for reading under a read delegation, for any access under a
//! write delegation (`-o deleg_opens=` narrows that), their I/O with the
//! delegation stateid (§8.2.1), keeping the kernel's cached data (no
//! other client can change the file). Another caller's open still goes
//! to the server, which checks its access (§18.16.3).
//!
//! A recall (§10.4.1, §20.2) is handled in the background as Linux's
//! client does: each open served locally is made real with OPEN
//! CLAIM_DELEG_CUR_FH (§10.4.3, as its opener), then DELEGRETURN
//! (§18.6); the mount holds no dirty data to flush (every WRITE is sent
//! when made). At unmount the delegations still held are returned.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use nfs_client::nfs::v4::{NfsFh4, Nfsstat4, OPEN4_SHARE_ACCESS_READ};
use nfs_client::v4::{Attrs, Delegation, Delegations, OpenFile, Recall};
use oncrpc::msg::OpaqueAuth;
use oncrpc::ClientTransport;
use tokio::sync::mpsc::UnboundedReceiver;

use super::super::handles::OpenHandles;
use super::super::options::DelegOpens;
use super::files::Open4;
use super::{NfsFs4, Session};

/// The delegations of the mount and, for each, the credential of the
/// process whose open took it (only its opens are served locally).
#[derive(Debug)]
pub(crate) struct MountDelegs {
    pub(super) table: Arc<Delegations>,
    takers: Mutex<HashMap<Bytes, OpaqueAuth>>,
}

impl MountDelegs {
    fn takers(&self) -> std::sync::MutexGuard<'_, HashMap<Bytes, OpaqueAuth>> {
        self.takers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets every delegation (the client id that held them is gone).
    pub(super) fn forget_all(&self) {
        self.takers().clear();
        drop(self.table.drain());
    }

    fn forget(&self, fh: &NfsFh4) -> Option<Delegation> {
        self.takers().remove(fh.as_bytes());
        self.table.remove(fh)
    }
}

type Files = OpenHandles<Open4>;

impl<T: ClientTransport + Send + Sync + 'static> NfsFs4<T> {
    /// Takes delegations (the session has a back channel: `table` is
    /// what its callback program answers from) and returns the task that
    /// handles their recalls, to be spawned.
    pub(crate) fn with_delegations(
        mut self,
        table: Arc<Delegations>,
        recalls: UnboundedReceiver<Recall>,
    ) -> (Self, impl std::future::Future<Output = ()> + Send + 'static) {
        let m = Arc::new(MountDelegs {
            table,
            takers: Mutex::new(HashMap::new()),
        });
        self.delegs = Some(Arc::clone(&m));
        let task = serve_recalls(Arc::clone(&self.session), self.files.clone(), m, recalls);
        (self, task)
    }

    /// The file to use for an open by `cred` of `fh` for `access` served
    /// locally under a delegation, if one allows it.
    pub(super) fn delegated_open(
        &self,
        cred: &OpaqueAuth,
        fh: &NfsFh4,
        access: u32,
    ) -> Option<OpenFile> {
        let m = self.delegs.as_ref()?;
        let d = m.table.get(fh)?;
        let served = match self.opts.deleg_opens {
            DelegOpens::None => false,
            DelegOpens::Read => !d.write && access == OPEN4_SHARE_ACCESS_READ,
            DelegOpens::Write => d.write || access == OPEN4_SHARE_ACCESS_READ,
        };
        if !served {
            return None;
        }
        if m.takers().get(fh.as_bytes()) != Some(cred) {
            return None;
        }
        tracing::trace!(write = d.write, "open served under a delegation");
        Some(OpenFile {
            fh: fh.clone(),
            stateid: d.stateid,
        })
    }

    /// Keeps delegation `d` an OPEN as `cred` was granted on `fh` (with
    /// attributes `a`), or returns it when it cannot be kept.
    pub(super) async fn took_delegation(
        &self,
        s: &Session<&T>,
        fh: &NfsFh4,
        cred: &OpaqueAuth,
        d: Option<Delegation>,
        a: &Attrs,
    ) {
        let Some(d) = d else {
            return;
        };
        if let Some(m) = &self.delegs {
            if m.table.insert(fh, d, a.size, a.change.unwrap_or(0)) {
                let k = Bytes::copy_from_slice(fh.as_bytes());
                m.takers().insert(k, cred.clone());
                tracing::debug!(write = d.write, "delegation granted");
                return;
            }
        }
        if let Err(e) = s.delegreturn(fh, &d.stateid).await {
            tracing::debug!(error = %e, "returning a delegation not kept failed");
        }
    }

    /// After I/O through open `o` served under a delegation failed with
    /// `e`: if the delegation is gone (returned on a recall that raced
    /// with the open, or revoked), the open is made real with an OPEN by
    /// handle as its opener and `true` says to try again.
    pub(super) async fn reopen_if_gone(&self, o: &Open4, e: &nfs_client::v4::Error) -> bool {
        let gone = matches!(
            e.nfs_status(),
            Some(
                Nfsstat4::NFS4ERR_BAD_STATEID
                    | Nfsstat4::NFS4ERR_DELEG_REVOKED
                    | Nfsstat4::NFS4ERR_OLD_STATEID
                    | Nfsstat4::NFS4ERR_EXPIRED
            )
        );
        if !gone || !o.is_local() {
            return false;
        }
        let fh = o.file().fh;
        let s = self.as_cred(o.cred.clone());
        match s.open_fh(&fh, o.access).await {
            Ok((file, _)) => {
                tracing::debug!("an open served under a returned delegation reopened");
                o.make_real(file);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "reopening after a lost delegation failed");
                false
            }
        }
    }

    /// At unmount: DELEGRETURN of every delegation still held.
    pub(super) async fn return_delegations(&self) {
        let Some(m) = &self.delegs else {
            return;
        };
        for (fh, d) in m.table.drain() {
            if let Err(e) = self.session.delegreturn(&fh, &d.stateid).await {
                tracing::debug!(error = %e, "DELEGRETURN at unmount failed");
            }
        }
        m.takers().clear();
    }
}

/// Handles recalls until the session's callback program is gone.
async fn serve_recalls<T: ClientTransport + Send + Sync + 'static>(
    session: Arc<Session<T>>,
    files: Files,
    m: Arc<MountDelegs>,
    mut recalls: UnboundedReceiver<Recall>,
) {
    while let Some(r) = recalls.recv().await {
        recall(&session, &files, &m, &r).await;
    }
}

/// One recall (RFC 8881 §10.4.1): local opens made real, then
/// DELEGRETURN. Nothing is flushed first: every WRITE went to the server
/// when it was made (this mount caches no dirty data; the server's
/// DELEGRETURN waits for WRITEs in progress), and waiting here for a
/// WRITE the server holds back until the delegation is returned would
/// deadlock the two. Close and fsync COMMIT as always.
async fn recall<T: ClientTransport>(
    session: &Session<T>,
    files: &Files,
    m: &MountDelegs,
    r: &Recall,
) {
    tracing::debug!(write = r.deleg.write, "delegation recalled");
    let opens: Vec<Arc<Open4>> = {
        let files = files.lock();
        let mine = files
            .values()
            .filter(|o| o.is_local() && o.file().fh == r.fh);
        mine.cloned().collect()
    };
    for o in &opens {
        let s = session.with_credential(o.cred.clone());
        match s.open_deleg_cur(&r.fh, o.access, &r.deleg.stateid).await {
            Ok((file, _)) => o.make_real(file),
            Err(e) => tracing::warn!(error = %e, "reopening a delegated open failed"),
        }
    }
    if let Err(e) = session.delegreturn(&r.fh, &r.deleg.stateid).await {
        tracing::warn!(error = %e, "DELEGRETURN after a recall failed");
    }
    m.forget(&r.fh);
}
