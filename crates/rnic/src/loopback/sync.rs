//! Two small runtime-neutral primitives for the loopback device: a one-shot
//! reply slot and a waker-driven request queue.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct OneshotInner<T> {
    value: Option<T>,
    sender_gone: bool,
    waker: Option<Waker>,
}

/// Sending half of a one-shot slot. Dropping it unsent closes the slot.
pub(crate) struct OneshotTx<T> {
    inner: Arc<Mutex<OneshotInner<T>>>,
}

/// Receiving half: a future resolving to the value, or `None` if the sender
/// was dropped unsent.
pub(crate) struct OneshotRx<T> {
    inner: Arc<Mutex<OneshotInner<T>>>,
}

pub(crate) fn oneshot<T>() -> (OneshotTx<T>, OneshotRx<T>) {
    let inner = Arc::new(Mutex::new(OneshotInner {
        value: None,
        sender_gone: false,
        waker: None,
    }));
    (
        OneshotTx {
            inner: Arc::clone(&inner),
        },
        OneshotRx { inner },
    )
}

impl<T> OneshotTx<T> {
    pub(crate) fn send(self, value: T) {
        let waker = {
            let mut g = lock(&self.inner);
            g.value = Some(value);
            g.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Drop for OneshotTx<T> {
    fn drop(&mut self) {
        let waker = {
            let mut g = lock(&self.inner);
            g.sender_gone = true;
            g.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Future for OneshotRx<T> {
    type Output = Option<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut g = lock(&self.inner);
        if let Some(v) = g.value.take() {
            return Poll::Ready(Some(v));
        }
        if g.sender_gone {
            return Poll::Ready(None);
        }
        g.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

struct QueueInner<T> {
    items: VecDeque<T>,
    closed: bool,
    waker: Option<Waker>,
}

/// A multi-producer, single-consumer queue whose consumer can await an item.
pub(crate) struct WaitQueue<T> {
    inner: Arc<Mutex<QueueInner<T>>>,
}

impl<T> Clone for WaitQueue<T> {
    fn clone(&self) -> Self {
        WaitQueue {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T> WaitQueue<T> {
    pub(crate) fn new() -> Self {
        WaitQueue {
            inner: Arc::new(Mutex::new(QueueInner {
                items: VecDeque::new(),
                closed: false,
                waker: None,
            })),
        }
    }

    /// Queues an item; gives it back if the queue is closed.
    pub(crate) fn push(&self, item: T) -> Result<(), T> {
        let waker = {
            let mut g = lock(&self.inner);
            if g.closed {
                return Err(item);
            }
            g.items.push_back(item);
            g.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }

    /// Closes the queue and returns what was left in it.
    pub(crate) fn close(&self) -> Vec<T> {
        let mut g = lock(&self.inner);
        g.closed = true;
        g.items.drain(..).collect()
    }

    /// Waits for the next item; `None` once closed and empty.
    pub(crate) fn pop(&self) -> Pop<'_, T> {
        Pop { q: self }
    }
}

pub(crate) struct Pop<'a, T> {
    q: &'a WaitQueue<T>,
}

impl<T> Future for Pop<'_, T> {
    type Output = Option<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut g = lock(&self.q.inner);
        if let Some(v) = g.items.pop_front() {
            return Poll::Ready(Some(v));
        }
        if g.closed {
            return Poll::Ready(None);
        }
        g.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}
