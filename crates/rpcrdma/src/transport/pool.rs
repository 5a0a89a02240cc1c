//! Buffers for pulled messages, reused instead of allocated and
//! zero-filled for every call with read chunks (a 1 MiB NFS WRITE pulled
//! by RDMA Read needs a 1 MiB buffer; a fresh one costs a `memset` and
//! page faults each time).
//!
//! A buffer is lent for one message ([`PullPool::take`]), registered,
//! filled (inline parts copied, read chunks placed by RDMA Read, XDR
//! padding zeroed: every byte of the message is written, so nothing of an
//! earlier message shows through) and handed to the service as [`Bytes`]
//! ([`PullPool::share`]). When the last reference to those bytes drops,
//! the buffer goes back to the pool, which keeps at most `max_bytes` of
//! idle buffers; a buffer beyond that is freed and the limit
//! `rdma.pull_pool_bytes` trips (a count and a rate-limited log line).
//! Only idle buffers are bounded here: buffers lent to calls are bounded
//! by each connection's read budget (`rdma.read_bytes_per_conn`).

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use bytes::{Bytes, BytesMut};
use oncrpc::limits::Limit;

/// A returned buffer found the pool full and was freed.
pub(super) static POOL_FULL: Limit = Limit::new("rdma.pull_pool_bytes");

/// Fresh buffers are allocated in multiples of this, so messages of
/// nearly the same size (a WRITE's data and a header of any length) reuse
/// one buffer.
const GRAIN: usize = 64 * 1024;

/// Idle buffers, each as long as its allocation.
#[derive(Debug, Default)]
struct Idle {
    bufs: Vec<BytesMut>,
    bytes: usize,
    max: usize,
}

impl Idle {
    /// Takes back `buf`, or frees it when the pool would exceed its bound.
    fn give(&mut self, buf: BytesMut) {
        let len = buf.len();
        if self.bytes + len > self.max {
            if self.max > 0 {
                let (kept, max) = (self.bytes, self.max);
                POOL_FULL.trip(format_args!(
                    "freed a {len}-byte RDMA pull buffer: the pool keeps {kept} of at most {max} bytes"
                ));
            }
            return;
        }
        self.bytes += len;
        self.bufs.push(buf);
    }

    /// The smallest idle buffer of at least `n` bytes and at most twice
    /// the size a fresh one would have.
    fn take(&mut self, n: usize) -> Option<BytesMut> {
        let most = 2 * rounded(n);
        let (i, _) = self
            .bufs
            .iter()
            .enumerate()
            .filter(|(_, b)| (n..=most).contains(&b.len()))
            .min_by_key(|(_, b)| b.len())?;
        let buf = self.bufs.swap_remove(i);
        self.bytes -= buf.len();
        Some(buf)
    }
}

/// `n` rounded up to the allocation grain.
fn rounded(n: usize) -> usize {
    n.div_ceil(GRAIN).max(1) * GRAIN
}

/// Reusable buffers for pulled messages, shared by a listener's
/// connections; at most `max_bytes` idle.
#[derive(Debug, Clone)]
pub(crate) struct PullPool {
    idle: Arc<Mutex<Idle>>,
}

impl PullPool {
    /// A pool keeping at most `max_bytes` of idle buffers (0: none, every
    /// message gets a fresh buffer).
    pub(crate) fn new(max_bytes: u64) -> Self {
        let idle = Idle {
            max: usize::try_from(max_bytes).unwrap_or(usize::MAX),
            ..Idle::default()
        };
        Self {
            idle: Arc::new(Mutex::new(idle)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Idle> {
        // The counts are updated together with the list; a poisoned lock
        // still guards a consistent pool.
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A buffer of at least `n` bytes. Its contents are unspecified (an
    /// earlier message's bytes): the caller must write all of the first
    /// `n` before [`PullPool::share`] exposes them.
    pub(crate) fn take(&self, n: usize) -> BytesMut {
        self.lock()
            .take(n)
            .unwrap_or_else(|| BytesMut::zeroed(rounded(n)))
    }

    /// The first `n` bytes of `buf` (filled), as shared bytes whose last
    /// drop gives `buf` back to the pool.
    pub(crate) fn share(&self, buf: BytesMut, n: usize) -> Bytes {
        let n = n.min(buf.len());
        let lent = Lent {
            buf,
            pool: Arc::downgrade(&self.idle),
        };
        Bytes::from_owner(lent).slice(..n)
    }

    /// Gives back a buffer whose message was not used (its reads failed).
    pub(crate) fn give(&self, buf: BytesMut) {
        self.lock().give(buf);
    }

    /// Idle bytes kept.
    #[cfg(test)]
    fn idle_bytes(&self) -> usize {
        self.lock().bytes
    }
}

/// A buffer lent to a message; back to its pool when dropped.
struct Lent {
    buf: BytesMut,
    pool: Weak<Mutex<Idle>>,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(idle) = self.pool.upgrade() {
            let buf = std::mem::take(&mut self.buf);
            idle.lock().unwrap_or_else(|e| e.into_inner()).give(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_message_gives_its_buffer_back_for_the_next() {
        let pool = PullPool::new(4 << 20);
        let mut buf = pool.take(1_000_100);
        assert_eq!(buf.len(), rounded(1_000_100));
        let ptr = buf.as_ptr();
        buf[..4].copy_from_slice(b"abcd");
        let msg = pool.share(buf, 1_000_100);
        assert_eq!(msg.len(), 1_000_100);
        let data = msg.slice(2..4);
        drop(msg);
        // A slice still holds the buffer.
        assert_eq!(pool.idle_bytes(), 0);
        assert_eq!(&data[..], b"cd");
        drop(data);
        assert_eq!(pool.idle_bytes(), rounded(1_000_100));
        // Same size class: the same memory, not zero-filled again.
        let again = pool.take(1_000_000);
        assert_eq!(again.as_ptr(), ptr);
        assert_eq!(&again[..4], b"abcd");
        assert_eq!(pool.idle_bytes(), 0);
    }

    #[test]
    fn a_small_message_does_not_take_a_large_buffer() {
        let pool = PullPool::new(64 << 20);
        pool.give(BytesMut::zeroed(16 << 20));
        let small = pool.take(100_000);
        assert_eq!(small.len(), rounded(100_000));
        assert_eq!(pool.idle_bytes(), 16 << 20);
        // A large one fits the idle buffer.
        assert_eq!(pool.take(9 << 20).len(), 16 << 20);
    }

    /// Hostile load: many large messages released at once never leave
    /// more than the bound idle, and each one freed beyond it is counted.
    #[test]
    fn idle_buffers_stay_within_the_bound_and_the_excess_is_counted() {
        let pool = PullPool::new(3 << 20);
        let msgs: Vec<Bytes> = (0..10)
            .map(|_| {
                let b = pool.take(1 << 20);
                pool.share(b, 1 << 20)
            })
            .collect();
        let before = POOL_FULL.count();
        drop(msgs);
        assert_eq!(pool.idle_bytes(), 3 << 20);
        assert!(POOL_FULL.count() >= before + 7);
    }

    #[test]
    fn a_disabled_pool_keeps_nothing() {
        let pool = PullPool::new(0);
        let b = pool.take(10);
        drop(pool.share(b, 10));
        assert_eq!(pool.idle_bytes(), 0);
    }

    #[test]
    fn buffers_outliving_the_pool_are_freed() {
        let pool = PullPool::new(1 << 20);
        let b = pool.take(10);
        let msg = pool.share(b, 10);
        drop(pool);
        drop(msg);
    }
}
