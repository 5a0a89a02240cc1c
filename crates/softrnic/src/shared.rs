//! What a queue pair's IO tasks and its consumer's handle share: the core
//! and the transmit-side IO state under one lock, the fixed context, and
//! the transmit task's wake-up.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::Notify;

use crate::core::{Core, QpCtx};
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
        };
        Shared {
            locked: Mutex::new(locked),
            ctx,
            io,
            tx_wake: Notify::new(),
        }
    }

    /// The queue pair's lock (per queue pair, never the device's).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Locked> {
        // Every update completes between statements; a poisoned lock still
        // guards a consistent state.
        self.locked.lock().unwrap_or_else(|e| e.into_inner())
    }
}
