//! The attributes of a listing's next READDIRPLUS page (RFC 1813
//! §3.3.17; NFSv4 READDIR with attributes, RFC 8881 §18.23) read ahead on
//! a thread of its own while this page's reply is sent and the client
//! asks for the next.
//!
//! A page that stops before the end of its directory keeps its cursor
//! ([`super::cursors`]) with the entries it read ahead but did not take.
//! When that page had to `statx` entries (the attribute cache did not
//! have them, or had them past its time-to-live), those held entries are
//! likely the same: a job on this export's prefetch thread reads them
//! into the attribute cache ([`super::attrcache`], under the same rules
//! as a page: its epoch, its time-to-live counted from before the
//! `statx`), so the next page finds them there, on the runtime thread
//! ([`super::readdir`]), instead of paying for each `statx` after the
//! client's call arrived. The job changes nothing a page would not: an
//! entry changed after it was read has an event that the next page
//! drains first, and one older than the time-to-live is read again.
//!
//! Bounds: one thread per export, started with its first job; one job per
//! kept cursor, cancelled (at the next entry) when the cursor is taken by
//! the next page or dropped ([`Ticket`]); a job reads at most twice the
//! entries of the page that queued it; at most `max` jobs wait
//! ([`MAX_JOBS`], the cursor bound): one more drops the oldest waiting,
//! which trips the `readdir.prefetch` limit (a log line, rate-limited,
//! and a counter), as does a thread the system refuses to start.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use oncrpc::limits::Limit;

static PREFETCH: Limit = Limit::new("readdir.prefetch");

/// Jobs waiting at most by default: one per kept cursor.
pub(crate) const MAX_JOBS: usize = super::cursors::MAX_CURSORS;

/// A job: reads ahead until done or until the flag says it was cancelled.
type Work = Box<dyn FnOnce(&AtomicBool) + Send>;

struct Job {
    cancel: Arc<AtomicBool>,
    work: Work,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// The thread was started.
    started: bool,
    /// A job is running.
    busy: bool,
    /// The export is gone: the thread ends.
    stop: bool,
    /// Tests: jobs wait until resumed.
    #[cfg(test)]
    paused: bool,
}

#[derive(Default)]
struct Shared {
    q: Mutex<Queue>,
    /// A job came, or the export is gone.
    work: Condvar,
    /// A job ended.
    #[cfg(test)]
    done: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.q.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The prefetch thread of one export and its waiting jobs.
pub(crate) struct Prefetch {
    shared: Arc<Shared>,
    max: usize,
}

impl core::fmt::Debug for Prefetch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Prefetch")
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

/// Cancels its job when dropped: kept with the cursor whose next page
/// the job reads ahead for, so taking or dropping the cursor ends it.
#[derive(Debug)]
pub(crate) struct Ticket(Arc<AtomicBool>);

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl Prefetch {
    /// At most `max` jobs waiting (0: none are run).
    pub(crate) fn new(max: usize) -> Self {
        Self {
            shared: Arc::default(),
            max,
        }
    }

    /// Queues `work` for the export's thread: the [`Ticket`] that cancels
    /// it, or `None` when it will not run (no jobs allowed, no thread).
    pub(crate) fn submit(&self, work: impl FnOnce(&AtomicBool) + Send + 'static) -> Option<Ticket> {
        if self.max == 0 {
            return None;
        }
        let mut q = self.shared.lock();
        if !q.started {
            let shared = Arc::clone(&self.shared);
            let spawned = std::thread::Builder::new()
                .name("nfsrdma-prefetch".into())
                .spawn(move || run(&shared));
            if let Err(e) = spawned {
                PREFETCH.trip(format_args!(
                    "no listing prefetch thread ({e}): pages read their own attributes"
                ));
                return None;
            }
            q.started = true;
        }
        q.jobs.retain(|j| !j.cancel.load(Ordering::Relaxed));
        while q.jobs.len() >= self.max {
            q.jobs.pop_front();
            PREFETCH.trip(format_args!(
                "{} listing prefetches waiting: dropped the oldest",
                self.max
            ));
        }
        let cancel = Arc::new(AtomicBool::new(false));
        q.jobs.push_back(Job {
            cancel: Arc::clone(&cancel),
            work: Box::new(work),
        });
        drop(q);
        self.shared.work.notify_one();
        Some(Ticket(cancel))
    }

    /// Jobs waiting now, not counting cancelled ones (those leave the
    /// queue at the next [`Self::submit`], or when the thread reaches
    /// them).
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        let q = self.shared.lock();
        q.jobs
            .iter()
            .filter(|j| !j.cancel.load(Ordering::Relaxed))
            .count()
    }

    /// Tests: holds the jobs (`true`) or lets them run.
    #[cfg(test)]
    pub(crate) fn pause(&self, paused: bool) {
        self.shared.lock().paused = paused;
        self.shared.work.notify_all();
    }

    /// Tests: waits until no job waits or runs.
    #[cfg(test)]
    pub(crate) fn wait_idle(&self) {
        let mut q = self.shared.lock();
        while q.busy || !q.jobs.is_empty() {
            q = self
                .shared
                .done
                .wait(q)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        let mut q = self.shared.lock();
        q.stop = true;
        q.jobs.clear();
        drop(q);
        self.shared.work.notify_all();
    }
}

/// The thread: each job in turn, unless cancelled while it waited.
fn run(shared: &Shared) {
    let mut q = shared.lock();
    loop {
        if q.stop {
            return;
        }
        #[cfg(test)]
        let held = q.paused;
        #[cfg(not(test))]
        let held = false;
        let job = if held { None } else { q.jobs.pop_front() };
        let Some(job) = job else {
            q = shared.work.wait(q).unwrap_or_else(PoisonError::into_inner);
            continue;
        };
        q.busy = true;
        drop(q);
        if !job.cancel.load(Ordering::Relaxed) {
            (job.work)(&job.cancel);
        }
        q = shared.lock();
        q.busy = false;
        #[cfg(test)]
        shared.done.notify_all();
    }
}

/// The trips of the `readdir.prefetch` limit so far.
#[cfg(test)]
pub(crate) fn trips() -> u64 {
    PREFETCH.count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Jobs run in turn; a cancelled one does not start; a running one
    /// sees its ticket dropped; more than `max` waiting drops the oldest
    /// and trips the limit.
    #[test]
    fn jobs_run_in_turn_are_cancelled_by_their_ticket_and_bounded() {
        let p = Prefetch::new(3);
        let ran = Arc::new(AtomicUsize::new(0));
        let job = |ran: &Arc<AtomicUsize>| {
            let ran = Arc::clone(ran);
            move |_: &AtomicBool| {
                ran.fetch_add(1, Ordering::Relaxed);
            }
        };
        let t = p.submit(job(&ran)).unwrap();
        p.wait_idle();
        assert_eq!(ran.load(Ordering::Relaxed), 1);
        drop(t);

        p.pause(true);
        let cancelled = p.submit(job(&ran)).unwrap();
        drop(cancelled);
        let kept: Vec<_> = (0..2).map(|_| p.submit(job(&ran)).unwrap()).collect();
        assert_eq!(p.waiting(), 2, "the cancelled job left the queue");
        let before = trips();
        let more: Vec<_> = (0..3).map(|_| p.submit(job(&ran)).unwrap()).collect();
        assert_eq!(p.waiting(), 3);
        assert!(trips() >= before + 2, "two dropped");
        p.pause(false);
        p.wait_idle();
        assert_eq!(ran.load(Ordering::Relaxed), 1 + 3);
        drop((kept, more));

        // A running job sees its ticket go.
        let (tx, rx) = std::sync::mpsc::channel();
        let seen = Arc::new(AtomicBool::new(false));
        let s2 = Arc::clone(&seen);
        let t = p
            .submit(move |cancel: &AtomicBool| {
                tx.send(()).unwrap();
                while !cancel.load(Ordering::Relaxed) {
                    std::thread::yield_now();
                }
                s2.store(true, Ordering::Relaxed);
            })
            .unwrap();
        rx.recv().unwrap();
        drop(t);
        p.wait_idle();
        assert!(seen.load(Ordering::Relaxed));

        assert!(Prefetch::new(0).submit(job(&ran)).is_none());
    }
}
