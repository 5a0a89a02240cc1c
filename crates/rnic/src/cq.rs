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
///
/// # Completion handlers
///
/// A consumer may also have completions handled where the device produces
/// them, with no queue and no wake-up of a polling task in between (as the
/// Linux kernel's `IB_POLL_DIRECT` / a completion callback on the CQ): it
/// registers a [`CompletionHandler`] with [`set_handler`](Self::set_handler).
/// A device that supports this hands each completion to
/// [`deliver`](Self::deliver) instead of [`push`](Self::push); the handler
/// takes it (`None`) or gives it back (`Some`) to be queued for the poll
/// interface, which stays: a handler typically consumes the common
/// successful completions and gives back errors and flushes for the task
/// that polls. The order holds across both: a completion goes to the
/// handler only while none is queued before it, so once one is queued (given
/// back, or produced before the handler was registered) the later ones queue
/// behind it until the poller has taken it. A device that does not support
/// handlers keeps pushing, and every completion reaches the poll interface as
/// before, so a consumer that registers a handler must still poll.
///
/// Rules for the device calling [`deliver`](Self::deliver): it holds no
/// lock of its own (the handler may post work, disconnect, or otherwise
/// re-enter the device), and it delivers one queue pair's completions one
/// at a time, in the order they were produced.
///
/// Rules for the handler: it is short and never blocks nor awaits. It runs
/// on the device's own task (its receive or transmit task), or inside the
/// post or disconnect call that produced the completion (a Send completes
/// when the device hands it to the transport, which the posting call may
/// do itself): so it must never wait for a lock that the consumer holds
/// while it posts to, or disconnects, a queue pair of this queue.
#[derive(Clone)]
pub struct CompletionQueue {
    inner: Arc<Mutex<CqInner>>,
}

struct CqInner {
    entries: VecDeque<WorkCompletion>,
    capacity: usize,
    overflowed: bool,
    wakers: Vec<Waker>,
    handler: Option<Arc<CompletionHandler>>,
}

/// A consumer's handler of completions where they are produced (see
/// [`CompletionQueue`]): returns `None` when it took the completion, or
/// gives it back to be queued for polling.
pub type CompletionHandler = dyn Fn(WorkCompletion) -> Option<WorkCompletion> + Send + Sync;

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.lock();
        f.debug_struct("CompletionQueue")
            .field("len", &g.entries.len())
            .field("capacity", &g.capacity)
            .field("overflowed", &g.overflowed)
            .field("handler", &g.handler.is_some())
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
                handler: None,
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

    /// Registers `handler` (replacing any other): from now on a device that
    /// supports it hands completions to it first ([`deliver`](Self::deliver)).
    /// The handler is kept until [`clear_handler`](Self::clear_handler) or
    /// the last handle of the queue drops: one that refers back to the
    /// queue pair or the queue should hold weak references, or be cleared.
    pub fn set_handler(
        &self,
        handler: impl Fn(WorkCompletion) -> Option<WorkCompletion> + Send + Sync + 'static,
    ) {
        self.lock().handler = Some(Arc::new(handler));
    }

    /// Removes the handler: every later completion is queued.
    pub fn clear_handler(&self) {
        self.lock().handler = None;
    }

    /// Whether a handler is registered.
    pub fn has_handler(&self) -> bool {
        self.lock().handler.is_some()
    }

    /// Device side, for a device that holds none of its own locks here:
    /// hands the completion to the registered handler, or queues it (as
    /// [`push`](Self::push)) when there is none, when completions are
    /// already queued (it goes behind them), when the handler gives it back,
    /// or once the queue has overflowed (which stays reported).
    pub fn deliver(&self, wc: WorkCompletion) -> Result<(), CqOverflow> {
        let handler = {
            let g = self.lock();
            if g.overflowed || !g.entries.is_empty() {
                None
            } else {
                g.handler.clone()
            }
        };
        match handler {
            Some(h) => match h(wc) {
                None => Ok(()),
                Some(back) => self.push(back),
            },
            None => self.push(wc),
        }
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
    fn a_handler_takes_what_it_handles_and_the_rest_is_queued_in_order() {
        let cq = CompletionQueue::new(8);
        let taken = Arc::new(Mutex::new(Vec::new()));
        let t = Arc::clone(&taken);
        cq.set_handler(move |wc| {
            if wc.wr_id == 2 {
                return Some(wc);
            }
            t.lock().unwrap().push(wc.wr_id);
            None
        });
        let counter = Arc::new(CountWake(AtomicUsize::new(0)));
        let waker = Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(cq.poll_next(&mut cx).is_pending());
        for id in 0..2 {
            cq.deliver(wc(id)).unwrap();
        }
        // The handled ones never reach the queue nor wake its poller.
        assert_eq!(*taken.lock().unwrap(), [0, 1]);
        assert_eq!(counter.0.load(Ordering::SeqCst), 0);
        assert!(cq.is_empty());
        // 2 is given back; 3 and 4 queue behind it, not to the handler.
        for id in 2..5 {
            cq.deliver(wc(id)).unwrap();
        }
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        assert_eq!(*taken.lock().unwrap(), [0, 1]);
        for id in 2..5 {
            assert_eq!(cq.poll().unwrap().unwrap().wr_id, id);
        }
        // Once the poller has emptied the queue, the handler gets them again.
        cq.deliver(wc(5)).unwrap();
        assert_eq!(*taken.lock().unwrap(), [0, 1, 5]);
        // A plain push bypasses the handler, as for a device without one.
        cq.push(wc(6)).unwrap();
        assert_eq!(cq.poll().unwrap().unwrap().wr_id, 6);
        cq.clear_handler();
        cq.deliver(wc(8)).unwrap();
        assert_eq!(*taken.lock().unwrap(), [0, 1, 5]);
        assert_eq!(cq.poll().unwrap().unwrap().wr_id, 8);
    }

    #[test]
    fn a_handler_may_use_the_queue_and_overflow_stays_reported() {
        let cq = CompletionQueue::new(1);
        let inner = cq.clone();
        // Re-entering the queue from the handler does not deadlock.
        cq.set_handler(move |wc| {
            let _ = inner.len();
            Some(wc)
        });
        cq.deliver(wc(1)).unwrap();
        assert_eq!(cq.deliver(wc(2)), Err(CqOverflow));
        assert_eq!(cq.poll().err(), Some(CqOverflow));
        assert!(cq.has_handler());
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
