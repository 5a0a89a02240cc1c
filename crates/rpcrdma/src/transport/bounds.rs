//! What one RPC-over-RDMA connection lets its peer make the server hold:
//! calls in flight (at most the credits granted) and bytes being pulled by
//! RDMA Read (a per-connection budget), each with an
//! [`oncrpc::limits::Limit`] that counts and logs when it trips.

use std::time::Duration;

use oncrpc::limits::Limit;
use tokio::sync::{Semaphore, SemaphorePermit};

/// A peer sent a call while as many of its calls as the largest grant
/// were in flight (RFC 8166 §3.3.1): the connection is closed.
pub(super) static CREDITS_EXCEEDED: Limit = Limit::new("rdma.calls_beyond_credits");
/// A call's read chunks add up to more than the server accepts: answered
/// with ERR_CHUNK before anything is allocated.
pub(super) static CALL_TOO_LARGE: Limit = Limit::new("rdma.max_read_bytes");
/// A call waits because the connection's calls are already pulling the
/// budget of bytes by RDMA Read.
pub(super) static READ_BUDGET: Limit = Limit::new("rdma.read_bytes_per_conn");
/// The peer did not answer a call's RDMA Reads in time: the connection is
/// closed.
pub(super) static READ_TIMEOUT: Limit = Limit::new("rdma.read_timeout");
/// As many replies as the credits are posted and not yet on the wire (the
/// peer does not read them): the next reply waits, its call still in
/// flight.
pub(super) static UNSENT_REPLIES: Limit = Limit::new("rdma.unsent_replies");

/// Tag of the wr_id of a reply's Send, whose completion frees a reply slot.
pub(super) const REPLY_TAG: u64 = 1 << 63;

/// The bytes a connection's calls may be pulling by RDMA Read at once:
/// the buffers the reads fill exist only while a call holds its share.
#[derive(Debug)]
pub(super) struct ReadBudget {
    bytes: Semaphore,
    max: u32,
}

/// The connection closed while a call waited for its share.
#[derive(Debug)]
pub(super) struct BudgetClosed;

impl ReadBudget {
    pub(super) fn new(max: u64) -> Self {
        let max = u32::try_from(max).unwrap_or(u32::MAX).max(1);
        Self {
            bytes: Semaphore::new(max as usize),
            max,
        }
    }

    /// The largest share one call can get.
    pub(super) fn max(&self) -> u64 {
        u64::from(self.max)
    }

    /// Waits for `n` bytes of the budget (`n` ≤ [`ReadBudget::max`]);
    /// counts a trip when the call has to wait.
    pub(super) async fn acquire(&self, n: u32) -> Result<SemaphorePermit<'_>, BudgetClosed> {
        let n = n.min(self.max);
        match self.bytes.try_acquire_many(n) {
            Ok(p) => return Ok(p),
            Err(tokio::sync::TryAcquireError::Closed) => return Err(BudgetClosed),
            Err(tokio::sync::TryAcquireError::NoPermits) => {}
        }
        READ_BUDGET.trip(format_args!(
            "an RPC-over-RDMA call waits to pull {n} bytes: the connection's \
             RDMA Read budget of {} bytes is in use",
            self.max
        ));
        self.bytes.acquire_many(n).await.map_err(|_| BudgetClosed)
    }

    /// The connection is gone: waiting calls stop.
    pub(super) fn close(&self) {
        self.bytes.close();
    }
}

/// Replies posted whose Send has not completed (the device has not put it
/// on the wire): at most the credits, so a peer that stops reading its
/// replies while sending calls holds a bounded amount of reply data, and
/// its next calls count as in flight until earlier replies leave.
#[derive(Debug)]
pub(super) struct ReplySlots {
    slots: Semaphore,
    max: u32,
}

impl ReplySlots {
    pub(super) fn new(max: u32) -> Self {
        let max = max.max(1);
        Self {
            slots: Semaphore::new(max as usize),
            max,
        }
    }

    /// Takes a slot for a reply about to be posted (given back by
    /// [`ReplySlots::sent`]); `false` when the connection closed meanwhile.
    /// `peer` is formatted only when the limit trips.
    pub(super) async fn take(&self, peer: &(dyn std::fmt::Display + Sync)) -> bool {
        let permit = match self.slots.try_acquire() {
            Ok(p) => p,
            Err(tokio::sync::TryAcquireError::Closed) => return false,
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                UNSENT_REPLIES.trip(format_args!(
                    "RPC-over-RDMA peer {peer} has {} replies not yet sent \
                     (it does not read them); the next reply waits",
                    self.max
                ));
                match self.slots.acquire().await {
                    Ok(p) => p,
                    Err(_) => return false,
                }
            }
        };
        permit.forget();
        true
    }

    /// A reply's Send completed.
    pub(super) fn sent(&self) {
        self.slots.add_permits(1);
    }

    pub(super) fn close(&self) {
        self.slots.close();
    }
}

/// Waits for `f` at most `limit`; `None` when the time ran out.
pub(super) async fn within<F: std::future::Future>(limit: Duration, f: F) -> Option<F::Output> {
    tokio::time::timeout(limit, f).await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn budget_makes_a_second_call_wait_until_the_first_is_done() {
        let before = READ_BUDGET.count();
        let b = ReadBudget::new(100);
        let first = b.acquire(80).await.unwrap();
        let second = b.acquire(30);
        tokio::pin!(second);
        assert!(within(Duration::from_millis(20), &mut second)
            .await
            .is_none());
        assert!(READ_BUDGET.count() > before);
        drop(first);
        assert!(within(Duration::from_secs(5), second).await.is_some());
    }

    #[tokio::test]
    async fn closing_the_budget_ends_waiting_calls() {
        let b = ReadBudget::new(10);
        let _all = b.acquire(10).await.unwrap();
        let (r, ()) = tokio::join!(b.acquire(5), async { b.close() });
        assert!(r.is_err());
    }
}
