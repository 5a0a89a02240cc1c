//! Backpressure for one server connection: the bytes of replies it holds.
//!
//! A client may pipeline calls and never read the replies. Buffering them
//! would let it pin memory at will, so each connection has a budget of
//! reply bytes, charged in two steps: a call reserves
//! [`TcpConfig::reply_reserve`](super::TcpConfig) bytes when it starts (its
//! reply's size is unknown until it runs), the charge becomes the reply's
//! real size when it is ready, and is freed once the reply is written to
//! the socket. No call starts while the budget is spent, and the connection
//! reads nothing more meanwhile, so TCP flow control pushes back on the
//! client instead. This is the Linux server's rule (`svc_tcp_has_wspace`:
//! a transport with less write space than its calls in flight reserved is
//! not read).

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::limits::Limit;

static QUEUED_REPLY_BYTES: Limit = Limit::new("tcp.queued_reply_bytes");

/// The sans-IO accounting: bytes charged against a maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    max: usize,
    charged: usize,
}

impl Budget {
    pub(crate) fn new(max: usize) -> Self {
        Self { max, charged: 0 }
    }

    /// Charges `n` bytes if they fit. With nothing charged, any `n` fits,
    /// so a reply larger than the whole budget still gets through.
    pub(crate) fn try_charge(&mut self, n: usize) -> bool {
        if self.charged != 0 && self.charged.saturating_add(n) > self.max {
            return false;
        }
        self.charged = self.charged.saturating_add(n);
        true
    }

    /// Replaces a charge of `from` bytes by one of `to` bytes.
    pub(crate) fn settle(&mut self, from: usize, to: usize) {
        self.charged = self.charged.saturating_sub(from).saturating_add(to);
    }

    /// Frees `n` charged bytes.
    pub(crate) fn release(&mut self, n: usize) {
        self.charged = self.charged.saturating_sub(n);
    }

    pub(crate) fn charged(&self) -> usize {
        self.charged
    }
}

/// A connection's [`Budget`], shared by its reader, call tasks and writer.
#[derive(Debug)]
pub(crate) struct ReplyBudget {
    state: Mutex<Budget>,
    freed: Notify,
    conn_id: u64,
}

impl ReplyBudget {
    pub(crate) fn new(max: usize, conn_id: u64) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(Budget::new(max)),
            freed: Notify::new(),
            conn_id,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Budget> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until `n` bytes fit, then charges them. The first wait of a
    /// call trips the `tcp.queued_reply_bytes` limit.
    pub(crate) async fn charge(self: &Arc<Self>, n: usize) -> Charge {
        let mut tripped = false;
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut b = self.lock();
                if b.try_charge(n) {
                    return Charge {
                        budget: Arc::clone(self),
                        bytes: n,
                    };
                }
                if !tripped {
                    tripped = true;
                    let held = b.charged();
                    drop(b);
                    QUEUED_REPLY_BYTES.trip(format_args!(
                        "connection {} holds {held} bytes of unread replies; not reading it",
                        self.conn_id
                    ));
                }
            }
            freed.await;
        }
    }
}

/// Bytes charged for one call, freed when dropped (after its reply is
/// written, or when the call ends without one).
#[derive(Debug)]
pub(crate) struct Charge {
    budget: Arc<ReplyBudget>,
    bytes: usize,
}

impl Charge {
    /// The call's reply is ready: charge its real size instead.
    pub(crate) fn settle(&mut self, bytes: usize) {
        self.budget.lock().settle(self.bytes, bytes);
        if bytes < self.bytes {
            self.budget.freed.notify_waiters();
        }
        self.bytes = bytes;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.lock().release(self.bytes);
        self.budget.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn charges_within_the_maximum_and_always_lets_one_through() {
        let mut b = Budget::new(100);
        assert!(b.try_charge(150), "an empty budget takes anything");
        assert!(!b.try_charge(1));
        b.settle(150, 40);
        assert!(b.try_charge(60));
        assert!(!b.try_charge(1));
        b.release(60);
        assert_eq!(b.charged(), 40);
    }

    #[tokio::test]
    async fn waits_until_a_written_reply_frees_its_bytes() {
        let budget = ReplyBudget::new(10, 1);
        let mut first = budget.charge(8).await;
        first.settle(9);
        let waiting = {
            let budget = Arc::clone(&budget);
            tokio::spawn(async move { budget.charge(8).await.bytes })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "9 + 8 bytes exceed 10");
        let before = QUEUED_REPLY_BYTES.count();
        assert!(before >= 1);
        drop(first);
        assert_eq!(waiting.await.unwrap(), 8);
        assert_eq!(budget.lock().charged(), 0);
    }
}
