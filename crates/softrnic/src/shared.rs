//! What a queue pair's IO tasks and its consumer's handle share: the core
//! and the transmit-side IO state under one lock, the fixed context, and
//! the transmit task's wake-up.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

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
    /// A [`Guard`] is delivering send-queue completions (with the lock
    /// released): the others leave theirs in `core.done_send` for it, so
    /// they reach their queue one at a time and in order.
    delivering_send: bool,
    /// Likewise for receive completions (`core.done_recv`).
    delivering_recv: bool,
    /// The receive task lets the consumers its last completions woke run
    /// before it reads again: their posts leave what they queue for it to
    /// write together once they have run ([`Shared::write_held`]).
    pub(crate) hold_tx: bool,
    /// Messages in the receive task's last delivery. When it held several
    /// (a burst, [`Locked::in_burst`]), several consumers may post one after
    /// another (a client's callers answering a batch of replies): posts are
    /// handed to the transmit task, except that every `batch`-th post since
    /// the delivery (at most every [`BURST_BATCH`]-th) writes all those
    /// queued itself. When each consumer the delivery woke posts once, the
    /// last of them writes the batch, from the posting thread, without
    /// waiting for the transmit task; those it does not cover (fewer
    /// posts than messages) go when the transmit task runs. Each writing
    /// its own call cost a system call and a wake-up of the peer per call;
    /// leaving them all to the transmit task stalled on a loaded machine,
    /// where its thread waits milliseconds for a CPU (issue 15). The burst
    /// lasts until a delivery of one message.
    pub(crate) batch: usize,
    /// Posts since the last delivery.
    pub(crate) since: usize,
}

/// Most posts of a burst left to the transmit task before one writes them
/// all itself.
pub(crate) const BURST_BATCH: usize = 16;

/// Shared by both IO tasks and the consumer's handle.
pub(crate) struct Shared {
    locked: Mutex<Locked>,
    pub(crate) ctx: QpCtx,
    pub(crate) io: Arc<IoCounters>,
    pub(crate) tx_wake: Notify,
    /// The pipe runs of FPDUs from a file go through (created at the
    /// first; `None` when it cannot be made or sized).
    pub(crate) pipe: OnceLock<Option<crate::tx::FilePipe>>,
}

impl Shared {
    pub(crate) fn new(core: Core, ctx: QpCtx, io: Arc<IoCounters>) -> Self {
        let locked = Locked {
            core,
            out: Outbox::default(),
            wr: None,
            delivering_send: false,
            delivering_recv: false,
            hold_tx: false,
            batch: 0,
            since: 0,
        };
        Shared {
            locked: Mutex::new(locked),
            ctx,
            io,
            tx_wake: Notify::new(),
            pipe: OnceLock::new(),
        }
    }

    /// The queue pair's lock (per queue pair, never the device's); the
    /// completions produced while it is held are delivered when it is
    /// released ([`Guard`]).
    pub(crate) fn lock(&self) -> Guard<'_> {
        Guard {
            sh: self,
            g: Some(self.raw_lock()),
            rx: false,
        }
    }

    /// [`Shared::lock`] for the receive task: receive completions are
    /// handed to the consumer's handler only from it.
    pub(crate) fn lock_rx(&self) -> Guard<'_> {
        Guard {
            sh: self,
            g: Some(self.raw_lock()),
            rx: true,
        }
    }

    /// Writes what posts left queued while receive completions were
    /// being delivered or the receive task held transmission
    /// ([`Locked::holds_tx`]), in one vectored write, from this task; the
    /// transmit task is woken only when the socket does not take it all.
    pub(crate) fn write_held(&self, rx: bool) {
        let mut st = if rx { self.lock_rx() } else { self.lock() };
        if st.holds_tx() || !st.core.conn.has_transmit() || !st.out.is_empty() {
            // Still held, nothing to write, or the transmit task already
            // has bytes waiting for room (and writes the rest after them).
            return;
        }
        let wake = st.wr.is_some() && crate::tx::flush(&mut st, self);
        drop(st);
        if wake {
            self.tx_wake.notify_one();
        }
    }

    fn raw_lock(&self) -> MutexGuard<'_, Locked> {
        // Every update completes between statements; a poisoned lock still
        // guards a consistent state.
        self.locked.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Locked {
    /// Whether posts are in a burst: the last delivery held several
    /// messages ([`Locked::batch`]).
    pub(crate) fn in_burst(&self) -> bool {
        self.batch > 1
    }

    /// Whether a post should leave its FPDUs queued rather than write them:
    /// receive completions are being delivered (a server's handler answers
    /// the calls of one socket read one after another, a client's wakes
    /// their callers) or the receive task lets the consumers it woke run.
    /// Whoever holds writes them all once done ([`Shared::write_held`]):
    /// one socket write for the answers to one read, where each post
    /// otherwise made its own (and woke the peer once per write).
    pub(crate) fn holds_tx(&self) -> bool {
        self.hold_tx || self.delivering_recv
    }
}

/// The queue pair's lock, held. On release it hands the completions
/// produced meanwhile to their queues *after* unlocking, so a consumer's
/// completion handler ([`rnic::CompletionQueue::set_handler`]) runs on the
/// task that produced them and may post to the queue pair again.
///
/// Send-queue completions go to the handler from whichever task produced
/// them: the receive task (Read Responses), the transmit task, or the
/// consumer's own post that wrote its Send to the socket. Receive
/// completions go to the handler only from the receive task (the one that
/// produces received messages): a consumer that posts while holding its
/// own lock never finds its handler taking a received message on its
/// stack. Any other release that finds receive completions (the flushes of
/// a consumer's disconnect) queues them for polling instead.
///
/// Per queue (send, receive): whoever finds completions and no delivery
/// under way delivers them, then those added meanwhile (including those
/// its handler's own posts produced), until none is left; so one queue
/// pair's completions reach each queue one at a time, in the order they
/// were produced.
pub(crate) struct Guard<'a> {
    sh: &'a Shared,
    /// `Some` until dropped.
    g: Option<MutexGuard<'a, Locked>>,
    /// Taken by the receive task.
    rx: bool,
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
        let send = !g.delivering_send && !g.core.done_send.is_empty();
        let recv = !g.delivering_recv && !g.core.done_recv.is_empty();
        if !send && !recv {
            return;
        }
        let mut sends = Vec::new();
        if send {
            g.delivering_send = true;
            std::mem::swap(&mut sends, &mut g.core.done_send);
        }
        let mut recvs = Vec::new();
        if recv {
            g.delivering_recv = true;
            std::mem::swap(&mut recvs, &mut g.core.done_recv);
        }
        drop(g);
        // A handler that panics must not leave the queue pair's later
        // completions (the flushes that report its close) undelivered.
        let _unwind = Unwind(self.sh, send, recv);
        let ctx = &self.sh.ctx;
        let mut received = 0;
        loop {
            received += recvs.len();
            deliver(&ctx.send_cq, sends.drain(..), true);
            deliver(&ctx.recv_cq, recvs.drain(..), self.rx);
            let mut g = self.sh.raw_lock();
            let more_send = send && !g.core.done_send.is_empty();
            let more_recv = recv && !g.core.done_recv.is_empty();
            if !more_send && !more_recv {
                // Keep the allocations for the next completions.
                if send {
                    g.delivering_send = false;
                    g.core.done_send = sends;
                }
                if recv {
                    g.delivering_recv = false;
                    g.core.done_recv = recvs;
                    if self.rx && received > 0 {
                        g.batch = received;
                        g.since = 0;
                    }
                }
                drop(g);
                if recv {
                    self.sh.write_held(self.rx);
                }
                return;
            }
            if more_send {
                std::mem::swap(&mut sends, &mut g.core.done_send);
            }
            if more_recv {
                std::mem::swap(&mut recvs, &mut g.core.done_recv);
            }
        }
    }
}

/// Ends a delivery (send, receive) that a panicking handler interrupted.
struct Unwind<'a>(&'a Shared, bool, bool);

impl Drop for Unwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut g = self.0.raw_lock();
            if self.1 {
                g.delivering_send = false;
            }
            if self.2 {
                g.delivering_recv = false;
            }
        }
    }
}
