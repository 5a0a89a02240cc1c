//! Completion queues with a runtime-neutral asynchronous wait.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use crate::error::CqOverflow;
use crate::wr::WorkCompletion;

/// A bounded queue of work completions, shared by the device (which pushes) and
/// the consumer (which polls or awaits).
///
/// Cloning yields another handle to the same queue, so one queue can serve the
/// send and receive queues of many queue pairs. The wait is runtime-neutral: it
/// stores the task's [`Waker`] and wakes it on the next push.
///
/// Overflow is never silent: a push beyond the capacity drops nothing already
/// queued, marks the queue overflowed, and from then on every
/// [`poll`](Self::poll) and [`next`](Self::next) returns [`CqOverflow`]. Size the
/// queue for the sum of the work-queue depths it serves.
#[derive(Clone)]
pub struct CompletionQueue {
    inner: Arc<Mutex<CqInner>>,
}

struct CqInner {
    entries: VecDeque<WorkCompletion>,
    capacity: usize,
    overflowed: bool,
    wakers: Vec<Waker>,
}

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.lock();
        f.debug_struct("CompletionQueue")
            .field("len", &g.entries.len())
            .field("capacity", &g.capacity)
            .field("overflowed", &g.overflowed)
            .finish()
    }
}

impl CompletionQueue {
    /// A queue holding at most `capacity` completions.
    pub fn new(capacity: usize) -> Self {
        CompletionQueue {
            inner: Arc::new(Mutex::new(CqInner {
                entries: VecDeque::new(),
                capacity,
                overflowed: false,
                wakers: Vec::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, CqInner> {
        // A poisoned lock only means another thread panicked while holding it;
        // the queue's invariants hold between statements, so keep going.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a completion (device side) and wakes waiters.
    ///
    /// Returns [`CqOverflow`] (and marks the queue overflowed) when full.
    pub fn push(&self, wc: WorkCompletion) -> Result<(), CqOverflow> {
        let (wakers, result) = {
            let mut g = self.lock();
            let result = if g.overflowed || g.entries.len() >= g.capacity {
                g.overflowed = true;
                Err(CqOverflow)
            } else {
                g.entries.push_back(wc);
                Ok(())
            };
            (std::mem::take(&mut g.wakers), result)
        };
        for w in wakers {
            w.wake();
        }
        result
    }

    /// Takes the oldest completion, if any, without waiting.
    pub fn poll(&self) -> Result<Option<WorkCompletion>, CqOverflow> {
        let mut g = self.lock();
        if g.overflowed {
            return Err(CqOverflow);
        }
        Ok(g.entries.pop_front())
    }

    /// Polls for a completion, registering `cx`'s waker if there is none.
    pub fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Result<WorkCompletion, CqOverflow>> {
        let mut g = self.lock();
        if g.overflowed {
            return Poll::Ready(Err(CqOverflow));
        }
        match g.entries.pop_front() {
            Some(wc) => Poll::Ready(Ok(wc)),
            None => {
                if !g.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                    g.wakers.push(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }

    /// Waits for the next completion.
    pub fn next(&self) -> Next<'_> {
        Next { cq: self }
    }

    /// Number of queued completions.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether no completion is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The capacity given at creation.
    pub fn capacity(&self) -> usize {
        self.lock().capacity
    }

    /// Whether the two handles name the same queue.
    pub fn same_queue(&self, other: &CompletionQueue) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// Future returned by [`CompletionQueue::next`].
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct Next<'a> {
    cq: &'a CompletionQueue,
}

impl Future for Next<'_> {
    type Output = Result<WorkCompletion, CqOverflow>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.cq.poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::WcStatus;
    use crate::stag::QpNum;
    use crate::wr::WcOpcode;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    fn wc(id: u64) -> WorkCompletion {
        WorkCompletion::send_side(QpNum(1), id, WcOpcode::Send, WcStatus::Success, 0)
    }

    struct CountWake(AtomicUsize);
    impl Wake for CountWake {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn polls_in_fifo_order() {
        let cq = CompletionQueue::new(4);
        cq.push(wc(1)).unwrap();
        cq.push(wc(2)).unwrap();
        assert_eq!(cq.poll().unwrap().unwrap().wr_id, 1);
        assert_eq!(cq.poll().unwrap().unwrap().wr_id, 2);
        assert!(cq.poll().unwrap().is_none());
    }

    #[test]
    fn overflow_is_reported_and_sticky() {
        let cq = CompletionQueue::new(1);
        cq.push(wc(1)).unwrap();
        assert_eq!(cq.push(wc(2)), Err(CqOverflow));
        assert_eq!(cq.poll().err(), Some(CqOverflow));
        assert_eq!(cq.poll().err(), Some(CqOverflow));
    }

    #[test]
    fn push_wakes_a_pending_waiter() {
        let cq = CompletionQueue::new(2);
        let counter = Arc::new(CountWake(AtomicUsize::new(0)));
        let waker = Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        let mut fut = cq.next();
        assert!(Pin::new(&mut fut).poll(&mut cx).is_pending());
        cq.push(wc(7)).unwrap();
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        match Pin::new(&mut fut).poll(&mut cx) {
            Poll::Ready(Ok(w)) => assert_eq!(w.wr_id, 7),
            other => panic!("expected a completion, got {other:?}"),
        }
    }
}
