//! Pulling a message's read chunks by RDMA Read, for both directions: the
//! IO half of [`crate::endpoint::reads`]. The buffer is registered for
//! local writes, the inline parts copied into place and each Read posted
//! straight to its offset, so chunk data is never copied (RFC 8166 §3.5).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;
use rnic::{Access, MemoryRegion, ProtectionDomain, QueuePair, ReadWr, Stag, WcStatus};
use tokio::sync::oneshot;

use super::pool::PullPool;
use crate::endpoint::reads::ReadPlan;

/// RDMA Reads in flight, by work request id: the completion task hands
/// each status to the task that posted the Read.
#[derive(Default)]
pub(super) struct ReadWaiters(Mutex<HashMap<u64, oneshot::Sender<WcStatus>>>);

impl ReadWaiters {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, oneshot::Sender<WcStatus>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The Read `id` completed with `status`.
    pub(super) fn complete(&self, id: u64, status: WcStatus) {
        if let Some(tx) = self.lock().remove(&id) {
            let _ = tx.send(status);
        }
    }

    /// The connection is gone: every waiter sees its sender dropped.
    pub(super) fn clear(&self) {
        self.lock().clear();
    }
}

/// Why a pull did not start.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// The inline part does not fit the plan, or the buffer could not be
    /// registered: the message is not usable (ERR_CHUNK).
    Unusable,
    /// A Read could not be posted: the connection is gone.
    Closed,
}

/// Reads posted for one message; [`Pulling::finish`] waits for them.
pub(super) struct Pulling {
    mr: MemoryRegion,
    waits: Vec<oneshot::Receiver<WcStatus>>,
    pool: PullPool,
    len: usize,
}

/// Registers a buffer from `pool` for the message `plan` rebuilds from
/// `inline`, copies the inline parts into it, zeroes the chunks' XDR
/// padding and posts the plan's Reads, which write the rest: every byte
/// of the message is written before it is used.
pub(super) fn start<Q: QueuePair>(
    qp: &Q,
    pd: &ProtectionDomain,
    pool: &PullPool,
    waiters: &ReadWaiters,
    wr_id: impl Fn() -> u64,
    inline: &Bytes,
    plan: &ReadPlan,
) -> Result<Pulling, Refused> {
    let len = plan.layout.len;
    let mut buf = pool.take(len);
    let Some(msg) = buf.get_mut(..len) else {
        return Err(Refused::Unusable);
    };
    if !plan.layout.copy_inline(inline, msg) || !plan.layout.zero_padding(msg) {
        pool.give(buf);
        return Err(Refused::Unusable);
    }
    let mr = pd
        .register(buf, Access::LOCAL_WRITE)
        .map_err(|_| Refused::Unusable)?;
    let mut waits = Vec::with_capacity(plan.reads.len());
    for r in &plan.reads {
        let id = wr_id();
        let (tx, rx) = oneshot::channel();
        waiters.lock().insert(id, tx);
        let wr = ReadWr {
            wr_id: id,
            local_stag: mr.stag(),
            local_to: mr.base_to() + r.dst,
            len: r.len,
            remote_stag: Stag(r.handle),
            remote_to: r.offset,
        };
        if qp.post_read(wr).is_err() {
            waiters.lock().remove(&id);
            // Reads already posted target the region: fence it.
            pool.give(mr.invalidate().buf);
            return Err(Refused::Closed);
        }
        waits.push(rx);
    }
    Ok(Pulling {
        mr,
        waits,
        pool: pool.clone(),
        len,
    })
}

impl Pulling {
    /// Waits for every Read; the rebuilt message when all succeeded. The
    /// region is invalidated either way (RFC 8166 §3.4.3).
    pub(super) async fn finish(self) -> Option<Bytes> {
        let mut ok = true;
        for rx in self.waits {
            ok &= matches!(rx.await, Ok(WcStatus::Success));
            if !ok {
                break;
            }
        }
        let buf = self.mr.invalidate().buf;
        if !ok {
            self.pool.give(buf);
            return None;
        }
        Some(self.pool.share(buf, self.len))
    }
}
