//! What a queue pair's IO tasks and its consumer's handle share: the core
//! and the transmit-side IO state under one lock, the fixed context, and
//! the transmit task's wake-up.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::Notify;

use crate::core::{deliver, Core, QpCtx};
use crate::outbox::{IoCounters, Outbox};

/// The state behind [`Shared::lock`]: the socket-free core, and beside it
/// the FPDUs gathered and not yet written and the socket's write half.
pub(crate) struct Locked {
    pub(crate) core: Core,
    /// Gathered FPDU bytes the socket did not take yet.
    pub(crate) out: Outbox,
    /// The socket's write half, once launched; written only under this
    /// lock, so FPDUs never interleave.
    pub(crate) wr: Option<Arc<OwnedWriteHalf>>,
    /// A [`Guard`] is delivering completions (with the lock released): the
    /// others leave theirs in `core.done` for it, so they reach their
    /// queues one at a time and in order.
    delivering: bool,
}

/// Shared by both IO tasks and the consumer's handle.
pub(crate) struct Shared {
    locked: Mutex<Locked>,
    pub(crate) ctx: QpCtx,
    pub(crate) io: Arc<IoCounters>,
    pub(crate) tx_wake: Notify,
}

impl Shared {
    pub(crate) fn new(core: Core, ctx: QpCtx, io: Arc<IoCounters>) -> Self {
        let locked = Locked {
            core,
            out: Outbox::default(),
            wr: None,
            delivering: false,
        };
        Shared {
            locked: Mutex::new(locked),
            ctx,
            io,
            tx_wake: Notify::new(),
        }
    }

    /// The queue pair's lock (per queue pair, never the device's); the
    /// completions produced while it is held are delivered when it is
    /// released ([`Guard`]).
    pub(crate) fn lock(&self) -> Guard<'_> {
        Guard {
            sh: self,
            g: Some(self.raw_lock()),
        }
    }

    fn raw_lock(&self) -> MutexGuard<'_, Locked> {
        // Every update completes between statements; a poisoned lock still
        // guards a consistent state.
        self.locked.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The queue pair's lock, held; on release it hands the completions
/// produced meanwhile to their queues, *after* unlocking, so a consumer's
/// completion handler ([`rnic::CompletionQueue::set_handler`]) runs on the
/// task that produced them (the receive task for a received message) and
/// may post to the queue pair again. Whoever finds completions and no
/// delivery under way delivers them, then those others added meanwhile
/// (including those its handler's own posts produced), until none is left:
/// one queue pair's completions reach their queues one at a time, in the
/// order they were produced.
pub(crate) struct Guard<'a> {
    sh: &'a Shared,
    /// `Some` until dropped.
    g: Option<MutexGuard<'a, Locked>>,
}

impl Deref for Guard<'_> {
    type Target = Locked;

    fn deref(&self) -> &Locked {
        match &self.g {
            Some(g) => g,
            None => unreachable!("a guard is only emptied when dropped"),
        }
    }
}

impl DerefMut for Guard<'_> {
    fn deref_mut(&mut self) -> &mut Locked {
        match &mut self.g {
            Some(g) => g,
            None => unreachable!("a guard is only emptied when dropped"),
        }
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        let Some(mut g) = self.g.take() else {
            return;
        };
        if g.core.done.is_empty() || g.delivering {
            return;
        }
        g.delivering = true;
        let mut batch = std::mem::take(&mut g.core.done);
        drop(g);
        // A handler that panics must not leave the queue pair's later
        // completions (the flushes that report its close) undelivered.
        let _unwind = Unwind(self.sh);
        loop {
            deliver(&self.sh.ctx, batch.drain(..));
            let mut g = self.sh.raw_lock();
            if g.core.done.is_empty() {
                g.delivering = false;
                // Keep the allocation for the next completions.
                g.core.done = batch;
                return;
            }
            std::mem::swap(&mut batch, &mut g.core.done);
        }
    }
}

/// Ends a delivery that a panicking handler interrupted.
struct Unwind<'a>(&'a Shared);

impl Drop for Unwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.raw_lock().delivering = false;
        }
    }
}
