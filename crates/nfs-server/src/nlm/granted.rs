//! Granting blocked LOCKs and telling their clients (XNFS NLM
//! "NLM_GRANTED"; RFC 1813 Appendix II `NLMPROC4_GRANTED`): the I/O side
//! of [`super::blocked`].
//!
//! One task per NLM service, started with its first blocked LOCK, looks
//! at the waiters again whenever a lock goes ([`NlmLocks::released`]:
//! NLM UNLOCK, CANCEL, FREE_ALL, SM_NOTIFY, NFSv4 LOCKU, CLOSE,
//! RELEASE_LOCKOWNER, FREE_STATEID) and every [`RETRY`] (NFSv4 leases
//! that ran out, delegations returned, the grace period's end). No waiter
//! is granted during a grace period (NLM's or NFSv4's). A granted waiter
//! holds the lock at once, its host is recorded for reboot recovery, and
//! GRANTED goes to the lock manager of the address its LOCK came from,
//! found through that host's rpcbind (as Linux's lockd: program 100021
//! version 4 over TCP), with the LOCK's cookie and lock. If the client
//! answers that it no longer waits (anything but NLM4_GRANTED), the lock
//! is released again; if it cannot be reached (3 tries, 2 s apart) the
//! lock stays: a waiting client asks again (the Linux client re-sends its
//! LOCK every 30 s) and is granted the lock it already holds.

use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use nfs::nlm::{Nlm4Proc, Nlm4Res, Nlm4Stats, Nlm4TestArgs, NLM_PROGRAM, NLM_V4};
use xdr::{Bounded, Decoder};

use super::blocked::Waiter;
use super::locks::NlmLocks;
use super::restart::{call, getport};
use super::NlmRecovery;
use crate::v4::V4Locks;

/// How often the waiters are looked at without a release.
pub const RETRY: Duration = Duration::from_secs(2);

/// What granting needs: the locks of both protocols and the recovery
/// state (records, grace period).
#[derive(Debug)]
pub(crate) struct Granter {
    pub(crate) locks: NlmLocks,
    pub(crate) v4: Option<V4Locks>,
    pub(crate) rec: Arc<NlmRecovery>,
    /// The rpcbind port of client hosts (111).
    pub(crate) rpcbind_port: u16,
}

impl Granter {
    /// Starts the task that grants waiters; it ends once `g` is dropped.
    pub(crate) fn spawn(g: &Arc<Granter>) {
        let signal = g.locks.release_signal();
        let weak = Arc::downgrade(g);
        tokio::spawn(run(weak, signal));
    }

    /// Grants what can be granted now (NFSv4 state lock first, then the
    /// NLM table: the order of every path).
    fn grant(&self) -> Vec<Waiter> {
        if self.rec.in_grace() {
            return Vec::new();
        }
        let mut v4 = self.v4.as_ref().map(V4Locks::guard);
        if v4.as_mut().is_some_and(|g| g.in_grace()) {
            return Vec::new();
        }
        let mut t = self.locks.table();
        t.grant_blocked(|key, span| {
            v4.as_ref()
                .is_some_and(|g| g.conflict(key, span).is_some() || g.delegated(key, span.write))
        })
    }
}

async fn run(g: Weak<Granter>, signal: Arc<tokio::sync::Notify>) {
    loop {
        let _ = tokio::time::timeout(RETRY, signal.notified()).await;
        let Some(g) = g.upgrade() else { return };
        for w in g.grant() {
            g.rec.record(&w.owner.host, w.addr);
            tracing::debug!(
                host = %String::from_utf8_lossy(&w.owner.host),
                svid = w.owner.svid,
                "NLM blocked LOCK granted"
            );
            tokio::spawn(tell(Arc::clone(&g), w));
        }
    }
}

/// Sends GRANTED for `w`; releases the lock when the client refuses it.
async fn tell(g: Arc<Granter>, w: Waiter) {
    let args = Nlm4TestArgs {
        cookie: Bounded(w.cookie.clone()),
        exclusive: w.span.write,
        alock: w.alock.clone(),
    };
    let args = xdr::to_bytes(&args);
    for _ in 0..3 {
        match granted(&g, &w, args.clone()).await {
            Ok(Nlm4Stats::NLM4_GRANTED) => return,
            // The client's lock manager restarted or is in its grace period.
            Ok(Nlm4Stats::NLM4_DENIED_GRACE_PERIOD) | Err(_) => {}
            Ok(stat) => {
                tracing::debug!(?stat, "NLM GRANTED refused: lock released");
                let mut t = g.locks.table();
                t.unlock(&w.key, &w.owner, &w.span);
                drop(t);
                g.locks.released();
                return;
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tracing::info!(
        host = %String::from_utf8_lossy(&w.owner.host),
        addr = %w.addr,
        "NLM GRANTED not delivered; the lock is kept for the client's next LOCK"
    );
}

async fn granted(g: &Granter, w: &Waiter, args: Bytes) -> std::io::Result<Nlm4Stats> {
    let port = getport(w.addr, g.rpcbind_port, NLM_PROGRAM, NLM_V4).await?;
    let r = call(
        SocketAddr::new(w.addr, port),
        NLM_PROGRAM,
        NLM_V4,
        Nlm4Proc::GRANTED.0,
        args,
    )
    .await?;
    let res: Nlm4Res = Decoder::from_bytes(&r)
        .decode()
        .map_err(|e| std::io::Error::other(format!("GRANTED reply: {e:?}")))?;
    Ok(res.stat)
}
