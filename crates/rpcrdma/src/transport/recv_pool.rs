//! Receive buffers posted again once nothing refers to them, instead of
//! a fresh allocation for every received message (issue 15).
//!
//! Each received message (a call on the server, a reply on the client) is
//! taken out of its receive buffer as [`Bytes`], and a receive is posted
//! again at once, so the grant in every reply stays backed by posted
//! receives (RFC 8166 §3.3.1). The message goes up to the RPC service or
//! the caller, which may keep slices of it for as long as it likes, so its
//! buffer cannot simply be posted again. Instead the pool keeps a
//! reference to each message it is given, oldest first; when a receive is
//! posted, the oldest one is reused if that reference has become the only
//! one (the message was dropped): cleared and posted again with the same
//! capacity. A message still in use stays in the pool until it is the
//! oldest of more than `max`; then the pool lets go of it (its memory is
//! its holder's and goes when the holder drops it).
//!
//! A fresh 8 KiB buffer per message was `malloc`'s largest cost on both
//! sides of a 4 KiB READ (glibc's `malloc_consolidate` on the client,
//! docs/bench.md). The pool holds at most `max` messages that nobody else
//! refers to, each of the connection's inline receive size: with `max`
//! no more than the receives posted, at most as much memory as those.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::{Bytes, BytesMut};

/// Messages kept for reuse at most, per connection (and never more than
/// its posted receives): 32 calls in flight reuse every buffer.
pub(super) const RECV_KEEP: usize = 32;

/// The receive buffers of one connection, for reuse.
#[derive(Debug)]
pub(super) struct RecvPool {
    kept: Mutex<VecDeque<Bytes>>,
    /// Each buffer's capacity: the inline receive size (the device takes
    /// a message up to the capacity, so a reused buffer must not be
    /// larger).
    size: usize,
    max: usize,
    /// Buffers posted again.
    reused: AtomicU64,
}

impl RecvPool {
    /// A pool of buffers of `size` bytes keeping at most `max` messages.
    pub(super) fn new(size: u32, max: usize) -> Self {
        Self {
            kept: Mutex::new(VecDeque::with_capacity(max)),
            size: size as usize,
            max,
            reused: AtomicU64::new(0),
        }
    }

    /// A buffer for the next receive: the oldest kept message's, if
    /// nothing else refers to it any more, else a fresh one. `msg` (a
    /// message just taken out of its receive buffer, from the buffer's
    /// start) is kept for a later receive.
    pub(super) fn recycle(&self, msg: &Bytes) -> BytesMut {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let reused = match kept.pop_front().map(Bytes::try_into_mut) {
            Some(Ok(mut buf)) => {
                buf.clear();
                // Sized as the pool's, or dropped (never a larger one).
                (buf.capacity() == self.size).then_some(buf)
            }
            Some(Err(held)) => {
                // Still in use: it stays the oldest, unless the pool is full.
                if kept.len() < self.max {
                    kept.push_front(held);
                }
                None
            }
            None => None,
        };
        if self.max > 0 && msg.len() <= self.size {
            if kept.len() >= self.max {
                kept.pop_front();
            }
            kept.push_back(msg.clone());
        }
        drop(kept);
        match reused {
            Some(buf) => {
                self.reused.fetch_add(1, Ordering::Relaxed);
                buf
            }
            None => BytesMut::with_capacity(self.size),
        }
    }

    /// Buffers posted again so far.
    pub(super) fn reused(&self) -> u64 {
        self.reused.load(Ordering::Relaxed)
    }

    /// Messages kept.
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A receive buffer of `size` holding `msg`, taken as the transport
    /// takes a message.
    fn received(pool: &RecvPool, msg: &[u8]) -> Bytes {
        let mut buf = BytesMut::with_capacity(pool.size);
        buf.extend_from_slice(msg);
        buf.freeze()
    }

    #[test]
    fn a_dropped_message_s_buffer_is_posted_again_cleared() {
        let pool = RecvPool::new(8192, 4);
        let first = received(&pool, b"first message");
        let ptr = first.as_ptr();
        let fresh = pool.recycle(&first);
        assert_ne!(fresh.as_ptr(), ptr);
        drop(first);
        let second = received(&pool, b"second");
        let again = pool.recycle(&second);
        // The first message's buffer, empty, with the full capacity.
        assert_eq!(again.as_ptr(), ptr);
        assert!(again.is_empty());
        assert_eq!(again.capacity(), 8192);
    }

    #[test]
    fn a_message_still_held_is_never_reused() {
        let pool = RecvPool::new(8192, 4);
        let held = received(&pool, b"kept by the caller");
        let slice = held.slice(5..9);
        let _ = pool.recycle(&held);
        drop(held);
        // A slice still refers to the buffer: a fresh one is posted.
        for _ in 0..3 {
            let m = received(&pool, b"next");
            let buf = pool.recycle(&m);
            assert_ne!(buf.as_ptr(), slice.as_ptr().wrapping_sub(5));
        }
        assert_eq!(&slice[..], b"by t");
    }

    #[test]
    fn the_pool_keeps_at_most_max_messages() {
        let pool = RecvPool::new(64, 3);
        let held: Vec<Bytes> = (0..10u8).map(|i| received(&pool, &[i; 8])).collect();
        for m in &held {
            let _ = pool.recycle(m);
            assert!(pool.kept() <= 3);
        }
        assert_eq!(pool.kept(), 3);
        // A pool of none keeps nothing and always allocates.
        let none = RecvPool::new(64, 0);
        let m = received(&none, b"x");
        let _ = none.recycle(&m);
        assert_eq!(none.kept(), 0);
    }

    #[test]
    fn a_buffer_of_another_size_is_not_reused() {
        let pool = RecvPool::new(64, 4);
        let mut big = BytesMut::with_capacity(128);
        big.extend_from_slice(b"larger buffer");
        let big = big.freeze();
        let _ = pool.recycle(&big);
        drop(big);
        let m = received(&pool, b"next");
        let buf = pool.recycle(&m);
        assert_eq!(buf.capacity(), 64);
    }
}
