//! Recovery of a session whose server restarted or whose lease expired
//! (RFC 8881 §8.4.2, §8.4.3, §2.10.13).
//!
//! A SEQUENCE answered NFS4ERR_BADSESSION or NFS4ERR_DEADSESSION (the
//! session is gone), NFS4ERR_STALE_CLIENTID or NFS4ERR_EXPIRED (the client
//! id is gone) makes [`Session::compound`] recover before it sends its
//! COMPOUND again; one caller recovers, the others wait and then use the
//! new session:
//!
//! 1. CREATE_SESSION for the same client id (§18.36): enough when only
//!    the session was lost; the client's state (its opens) stays valid.
//! 2. When the server answers NFS4ERR_STALE_CLIENTID or NFS4ERR_EXPIRED
//!    (it restarted, or the lease expired and the state went), EXCHANGE_ID
//!    with the same client owner and verifier (§2.4: the same client
//!    instance, which a restarted server lets reclaim) and CREATE_SESSION
//!    for the new client id; then the opens the session's user holds
//!    ([`Reclaim`]) are reclaimed: OPEN with CLAIM_PREVIOUS during the
//!    grace period (§8.4.2.1, §18.16.1), as their openers; RECLAIM_COMPLETE
//!    (§18.51); and the opens the server refused with NFS4ERR_NO_GRACE (no
//!    grace period: the lease expired while the server kept running) are
//!    opened again by handle with CLAIM_FH, the handle form of CLAIM_NULL.
//!    Each open's new stateid goes back to the user; the delegations of
//!    the old client id are forgotten (the server dropped them).
//!
//! The session keeps its fore channel attributes; a server granting fewer
//! slots than before gets fewer calls in flight.

use std::sync::Arc;

use nfs::v4::session::ReclaimComplete4Args;
use nfs::v4::{NfsArgop4, NfsFh4, Nfsstat4, OpenClaim4, OpenHow4};
use oncrpc::msg::OpaqueAuth;
use oncrpc::ClientTransport;

use super::error::{Error, Result};
use super::fs::{putfh, OpenFile};
use super::posix::OPEN4_SHARE_ACCESS_WANT_NO_DELEG;
use super::session::{create_session, exchange_id, Ident, Session, Slots};

/// `open_delegation_type4` OPEN_DELEGATE_NONE (RFC 8881 §18.16.1): the
/// delegation a CLAIM_PREVIOUS says was held.
const OPEN_DELEGATE_NONE: u32 = 0;

/// Whether a SEQUENCE failing with `status` means the session or the
/// client id is gone, so that the session is recovered.
pub(crate) fn session_lost(status: Nfsstat4) -> bool {
    matches!(
        status,
        Nfsstat4::NFS4ERR_BADSESSION
            | Nfsstat4::NFS4ERR_DEADSESSION
            | Nfsstat4::NFS4ERR_STALE_CLIENTID
            | Nfsstat4::NFS4ERR_EXPIRED
    )
}

/// Whether CREATE_SESSION failing with `status` means the client id is
/// gone (a new one is needed).
fn client_lost(status: Nfsstat4) -> bool {
    matches!(
        status,
        Nfsstat4::NFS4ERR_STALE_CLIENTID | Nfsstat4::NFS4ERR_EXPIRED
    )
}

/// One open the session's user holds, to reclaim under a new client id.
#[derive(Debug, Clone)]
pub struct HeldOpen {
    /// The user's name for it, given back in [`Reclaim::reclaimed`].
    pub key: u64,
    /// The file.
    pub fh: NfsFh4,
    /// `OPEN4_SHARE_ACCESS_*` it was opened with.
    pub share_access: u32,
    /// The opener's credential, which the reclaim carries.
    pub cred: OpaqueAuth,
}

/// The user of a session who holds opens: what to reclaim after the
/// client id changed, and where the new stateids go.
pub trait Reclaim: Send + Sync + std::fmt::Debug {
    /// The opens held now.
    fn held(&self) -> Vec<HeldOpen>;
    /// Open `key` was reclaimed (or opened again) as `file`.
    fn reclaimed(&self, key: u64, file: OpenFile);
    /// Open `key` could not be reclaimed.
    fn lost(&self, key: u64, error: &Error);
}

impl<T: ClientTransport> Session<T> {
    /// Registers the user whose opens are reclaimed when a recovery
    /// needs a new client id (else none are).
    pub fn set_reclaim(&self, r: Arc<dyn Reclaim>) {
        *self
            .shared
            .reclaim
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(r);
    }

    /// Waits until no recovery is in progress: once it returns, the
    /// opens a recovery under way reclaimed have their new stateids
    /// ([`Reclaim::reclaimed`]). I/O that failed with a stale stateid
    /// calls it before asking whether its open was reclaimed: a call made
    /// on the new session while the opens were still being reclaimed
    /// fails with the old stateid, and its open gets the new one only
    /// when the reclaim ends.
    pub async fn settled(&self) {
        drop(self.shared.recovering.lock().await);
    }

    /// How many times the session was recovered.
    pub fn recoveries(&self) -> u64 {
        self.ident().generation
    }

    /// Recovers the session lost under generation `seen` (the module
    /// docs); nothing when another call recovered it meanwhile.
    pub(super) async fn recover(&self, seen: u64) -> Result<()> {
        let _one = self.shared.recovering.lock().await;
        let id = self.ident();
        if id.generation != seen {
            return Ok(());
        }
        let o = &self.shared.origin;
        let (rpc, minor) = (&self.rpc, self.minor);
        let (new_client, clientid, sequence, cs) =
            match create_session(rpc, minor, o, id.clientid, id.next_create).await {
                Ok(cs) => (false, id.clientid, id.next_create, cs),
                Err(Error::Nfs { status, .. }) if client_lost(status) => {
                    let (c, q) = exchange_id(rpc, &o.cred, minor, &o.owner).await?;
                    (true, c, q, create_session(rpc, minor, o, c, q).await?)
                }
                Err(e) => return Err(e),
            };
        self.install(
            clientid,
            sequence,
            cs.sessionid,
            cs.fore_chan_attrs.maxrequests,
        );
        if let Some(cb) = &o.callbacks {
            cb.set_session(cs.sessionid);
            if new_client {
                cb.drain();
            }
        }
        tracing::info!(new_client, clientid, "NFSv4 session recovered");
        if new_client {
            self.reclaim_opens().await?;
        }
        Ok(())
    }

    /// Switches to session `sessionid` of `clientid` with a fresh slot
    /// table of at most `granted` slots (never more than before).
    fn install(&self, clientid: u64, sequence: u32, sessionid: nfs::v4::Sessionid4, granted: u32) {
        let sh = &self.shared;
        let mut slots = sh.slots.lock().unwrap_or_else(|p| p.into_inner());
        let mut id = sh.ident.lock().unwrap_or_else(|p| p.into_inner());
        let before = slots.len();
        let n = granted.clamp(1, before.max(1));
        if n < before {
            sh.slot_wait.forget_permits((before - n) as usize);
        }
        *slots = Slots::new(n);
        *id = Ident {
            clientid,
            sessionid,
            next_create: sequence.wrapping_add(1),
            generation: id.generation + 1,
        };
    }

    /// Reclaims the registered user's opens (the module docs, step 2).
    async fn reclaim_opens(&self) -> Result<()> {
        let user = self
            .shared
            .reclaim
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let held = user.as_ref().map(|u| u.held()).unwrap_or_default();
        let mut later = Vec::new();
        for h in held {
            let claim = OpenClaim4::Previous(OPEN_DELEGATE_NONE);
            match self.reopen(&h, claim).await {
                Ok(f) => user.iter().for_each(|u| u.reclaimed(h.key, f.clone())),
                Err(e) if e.nfs_status() == Some(Nfsstat4::NFS4ERR_NO_GRACE) => later.push(h),
                Err(e) => user.iter().for_each(|u| u.lost(h.key, &e)),
            }
        }
        let rc = NfsArgop4::ReclaimComplete(ReclaimComplete4Args { one_fs: false });
        match self.compound_retrying(vec![rc], None).await {
            Ok(_) => {}
            Err(Error::Nfs { status, .. }) if status == Nfsstat4::NFS4ERR_COMPLETE_ALREADY => {}
            Err(e) => return Err(e),
        }
        for h in later {
            match self.reopen(&h, OpenClaim4::Fh).await {
                Ok(f) => user.iter().for_each(|u| u.reclaimed(h.key, f.clone())),
                Err(e) => user.iter().for_each(|u| u.lost(h.key, &e)),
            }
        }
        Ok(())
    }

    /// OPEN of `h.fh` with `claim` as its opener, without delegation and
    /// without recovering again.
    async fn reopen(&self, h: &HeldOpen, claim: OpenClaim4) -> Result<OpenFile> {
        let v = self.with_credential(h.cred.clone());
        let access = h.share_access | OPEN4_SHARE_ACCESS_WANT_NO_DELEG;
        let ops = vec![putfh(&h.fh), v.open_op(access, OpenHow4(None), claim)];
        let res = v.compound_retrying(ops, None).await?;
        Ok(OpenFile {
            fh: h.fh.clone(),
            stateid: super::posix::open_stateid(&res)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_sessions_and_client_ids_are_recovered_other_errors_not() {
        for s in [
            Nfsstat4::NFS4ERR_BADSESSION,
            Nfsstat4::NFS4ERR_DEADSESSION,
            Nfsstat4::NFS4ERR_STALE_CLIENTID,
            Nfsstat4::NFS4ERR_EXPIRED,
        ] {
            assert!(session_lost(s), "{s:?}");
        }
        for s in [
            Nfsstat4::NFS4ERR_DELAY,
            Nfsstat4::NFS4ERR_BADSLOT,
            Nfsstat4::NFS4ERR_SEQ_MISORDERED,
            Nfsstat4::NFS4ERR_BAD_STATEID,
        ] {
            assert!(!session_lost(s), "{s:?}");
        }
        assert!(client_lost(Nfsstat4::NFS4ERR_STALE_CLIENTID));
        assert!(!client_lost(Nfsstat4::NFS4ERR_BADSESSION));
    }
}
