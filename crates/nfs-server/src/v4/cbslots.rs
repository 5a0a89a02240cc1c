//! A session's callback parameters (CREATE_SESSION, RFC 8881 §18.36;
//! BACKCHANNEL_CTL, §18.33) and the server's side of its back-channel
//! slot table (RFC 8881
//! §2.10.6.1 as it applies to the back channel; §20.9.3 CB_SEQUENCE):
//! several callbacks in flight per session, one per slot, each slot with
//! its own sequence id.
//!
//! The table has `min(ca_maxrequests of the back channel, MAX_CB_SLOTS)`
//! slots; a callback waits for a free one, so the callbacks a session
//! has in flight never exceed what the client granted. A client that
//! holds its slots (never replies) makes callbacks wait: at most
//! [`MAX_SLOT_WAITERS`] wait per session (one more is refused at once,
//! [`SlotWait::Crowded`]), each at most the wait its caller gives
//! ([`SlotWait::TimedOut`]); the caller counts both (limits
//! `nfs4.cb_slot_waiters`, `nfs4.cb_slot_wait`). A slot's sequence
//! id advances when the client answered CB_SEQUENCE, starts over after
//! the client refused it (a misordered id), and stays when no reply came
//! (the next callback on the slot then is a retry the client can
//! recognise).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nfs::v4::session::CallbackSecParms4;
use oncrpc::limits::Waiters;
use oncrpc::msg::{AuthSys, OpaqueAuth};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};

/// What CREATE_SESSION or BACKCHANNEL_CTL set for a session's callbacks.
#[derive(Debug, Clone)]
pub(crate) struct CbParams {
    pub(crate) clientid: u64,
    /// `csa_cb_program`.
    pub(crate) program: u32,
    /// The credential chosen from `csa_sec_parms`.
    pub(crate) cred: OpaqueAuth,
    /// The back channel's `ca_maxrequests` as granted.
    pub(crate) slots: u32,
}

/// The credential for callbacks from `csa_sec_parms` (RFC 8881
/// §18.36.3, §18.33.3: the server uses one of the client's choices): the
/// first AUTH_NONE or AUTH_SYS entry in the client's order, as the Linux
/// server does. `None` when the client offers only RPCSEC_GSS, which this
/// server does not support (the operation is NFS4ERR_ENCR_ALG_UNSUPP).
pub(crate) fn cb_cred(parms: &[CallbackSecParms4]) -> Option<OpaqueAuth> {
    parms.iter().find_map(|p| match p {
        CallbackSecParms4::None => Some(OpaqueAuth::NONE),
        CallbackSecParms4::Sys(a) => Some(
            AuthSys {
                stamp: a.stamp,
                machinename: a.machinename.0.clone(),
                uid: a.uid,
                gid: a.gid,
                gids: a.gids.0.clone(),
            }
            .to_opaque_auth(),
        ),
        CallbackSecParms4::Gss(..) => None,
    })
}

/// Most back-channel slots the server uses per session, whatever the
/// client grants.
pub(crate) const MAX_CB_SLOTS: u32 = 16;

/// Callbacks that may wait for a free slot of one session at once
/// (four for each slot there can be).
pub(crate) const MAX_SLOT_WAITERS: usize = 4 * MAX_CB_SLOTS as usize;

/// Why no slot was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotWait {
    /// [`MAX_SLOT_WAITERS`] callbacks wait already.
    Crowded,
    /// No slot came free within the wait.
    TimedOut,
}

/// How a callback on a slot ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotOutcome {
    /// CB_SEQUENCE succeeded: the sequence id was used.
    Sequenced,
    /// CB_SEQUENCE failed: the slot starts over.
    Refused,
    /// No reply: the sequence id stays for a retry.
    NoReply,
}

#[derive(Debug)]
struct Table {
    seqids: Vec<u32>,
    free: Vec<u32>,
}

/// The slot table of one session's back channel.
#[derive(Debug)]
pub(crate) struct CbSlots {
    room: Arc<Semaphore>,
    table: Mutex<Table>,
    /// Callbacks waiting for a free slot now.
    waiting: Waiters,
}

/// A slot taken for one callback; given back on drop as
/// [`SlotOutcome::NoReply`] unless [`CbSlot::finish`] said otherwise.
#[derive(Debug)]
pub(crate) struct CbSlot {
    slots: Arc<CbSlots>,
    /// The slot id.
    pub(crate) slot: u32,
    /// The sequence id to send (RFC 8881 §20.9.3).
    pub(crate) seq: u32,
    /// The highest slot id of the table.
    pub(crate) highest: u32,
    outcome: SlotOutcome,
    _room: OwnedSemaphorePermit,
}

impl CbSlots {
    /// A table of `granted` slots (at least one, at most
    /// [`MAX_CB_SLOTS`]).
    pub(crate) fn new(granted: u32) -> Arc<Self> {
        let n = granted.clamp(1, MAX_CB_SLOTS);
        Arc::new(Self {
            room: Arc::new(Semaphore::new(n as usize)),
            table: Mutex::new(Table {
                seqids: vec![0; n as usize],
                free: (0..n).rev().collect(),
            }),
            waiting: Waiters::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Slots in the table.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().seqids.len()
    }

    /// Callbacks waiting for a free slot now.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.count()
    }

    /// Takes a free slot, waiting at most `wait` while all are in use
    /// (and not at all when [`MAX_SLOT_WAITERS`] wait already).
    pub(crate) async fn take(self: &Arc<Self>, wait: Duration) -> Result<CbSlot, SlotWait> {
        let room = match Arc::clone(&self.room).try_acquire_owned() {
            Ok(room) => room,
            // The semaphore is never closed.
            Err(TryAcquireError::Closed) => return Err(SlotWait::TimedOut),
            Err(TryAcquireError::NoPermits) => {
                let Some(_counted) = self.waiting.enter(MAX_SLOT_WAITERS) else {
                    return Err(SlotWait::Crowded);
                };
                match tokio::time::timeout(wait, Arc::clone(&self.room).acquire_owned()).await {
                    Ok(Ok(room)) => room,
                    Ok(Err(_)) | Err(_) => return Err(SlotWait::TimedOut),
                }
            }
        };
        let mut t = self.lock();
        let slot = t.free.pop().ok_or(SlotWait::TimedOut)?;
        let seq = t
            .seqids
            .get(slot as usize)
            .ok_or(SlotWait::TimedOut)?
            .wrapping_add(1);
        let highest = u32::try_from(t.seqids.len().saturating_sub(1)).unwrap_or(0);
        Ok(CbSlot {
            slots: Arc::clone(self),
            slot,
            seq,
            highest,
            outcome: SlotOutcome::NoReply,
            _room: room,
        })
    }
}

impl CbSlot {
    /// Records how the callback on this slot ended.
    pub(crate) fn finish(&mut self, outcome: SlotOutcome) {
        self.outcome = outcome;
    }
}

impl Drop for CbSlot {
    fn drop(&mut self) {
        let mut t = self.slots.lock();
        if let Some(s) = t.seqids.get_mut(self.slot as usize) {
            match self.outcome {
                SlotOutcome::Sequenced => *s = self.seq,
                SlotOutcome::Refused => *s = 0,
                SlotOutcome::NoReply => {}
            }
        }
        t.free.push(self.slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn slots_bound_the_callbacks_in_flight_and_keep_their_own_sequence() {
        let t = CbSlots::new(2);
        let mut a = t.take(LONG).await.unwrap();
        let b = t.take(LONG).await.unwrap();
        assert_ne!(a.slot, b.slot);
        assert_eq!((a.seq, b.seq, a.highest), (1, 1, 1));
        // A third waits for a free slot.
        let waiting = tokio::time::timeout(Duration::from_millis(20), t.take(LONG)).await;
        assert!(waiting.is_err());
        assert_eq!(t.waiting(), 0, "a waiter that went is not counted");
        let a_slot = a.slot;
        a.finish(SlotOutcome::Sequenced);
        drop(a);
        let mut c = t.take(LONG).await.unwrap();
        assert_eq!((c.slot, c.seq), (a_slot, 2));
        // Refused: the slot starts over; no reply: the id is reused.
        c.finish(SlotOutcome::Refused);
        drop(c);
        let d = t.take(LONG).await.unwrap();
        assert_eq!((d.slot, d.seq), (a_slot, 1));
        drop(d);
        let e = t.take(LONG).await.unwrap();
        assert_eq!(e.seq, 1);
        drop((b, e));
        assert_eq!(CbSlots::new(1000).len(), MAX_CB_SLOTS as usize);
        assert_eq!(CbSlots::new(0).len(), 1);
    }

    /// A client that holds its only slot (never replies): the callbacks
    /// waiting for it are bounded in number and in time.
    #[tokio::test]
    async fn waiting_for_a_held_slot_is_bounded_in_number_and_time() {
        let t = CbSlots::new(1);
        let held = t.take(LONG).await.unwrap();
        let mut waiters = Vec::new();
        for _ in 0..MAX_SLOT_WAITERS {
            let t = Arc::clone(&t);
            waiters.push(tokio::spawn(async move { t.take(LONG).await.map(|_| ()) }));
        }
        while t.waiting() < MAX_SLOT_WAITERS {
            tokio::task::yield_now().await;
        }
        // One more is refused at once.
        assert_eq!(t.take(LONG).await.err(), Some(SlotWait::Crowded));
        assert_eq!(t.waiting(), MAX_SLOT_WAITERS);
        for w in &waiters {
            w.abort();
        }
        for w in waiters {
            let _ = w.await;
        }
        assert_eq!(t.waiting(), 0);
        // A waiter gives up after its wait.
        let short = Duration::from_millis(20);
        assert_eq!(t.take(short).await.err(), Some(SlotWait::TimedOut));
        assert_eq!(t.waiting(), 0);
        drop(held);
        assert!(t.take(short).await.is_ok());
    }
}
