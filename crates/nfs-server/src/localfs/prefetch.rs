//! The attributes of a listing's next READDIRPLUS pages (RFC 1813
//! §3.3.17; NFSv4 READDIR with attributes, RFC 8881 §18.23) read ahead on
//! a thread of its own while this page's reply is sent and the client
//! asks for the next, and then beside the next page.
//!
//! A page that stops before the end of its directory keeps its cursor
//! ([`super::cursors`]) with the entries it read ahead but did not take.
//! When that page had to `statx` entries (the attribute cache did not
//! have them, or had them past its time-to-live), the next ones are
//! likely the same: the cursor reads on until it holds the next pages'
//! entries (twice this page's, at least 1,024: a listing in small pages
//! queues one job per that many entries, not one per page), and a job on
//! this export's prefetch thread reads them into the attribute cache
//! ([`super::attrcache`], under the same rules as a page: its epoch, its
//! time-to-live counted from before the `statx`), so the next pages find
//! them there, on the runtime thread ([`super::readdir`]), instead of
//! paying for each `statx` after the client's call arrived. The job
//! changes nothing a page would not: an entry changed after it was read
//! has an event that the next page drains first, and one older than the
//! time-to-live is read again.
//!
//! The page that takes the cursor takes the job with it ([`Help`]) and
//! lists beside it: the two split the entries ([`Split`]), the job from
//! the back once the page claims from the front, so on two cores the
//! `statx` calls of a page are shared and none is made twice; the page
//! waits only for an entry the job is reading at that moment. The job
//! goes on with the cursor while it has entries for the next pages.
//!
//! Bounds: one thread per export, started with its first job; one job per
//! kept cursor, cancelled (at its next claim) when the cursor is dropped,
//! the listing goes past the job's entries or lists another entry where
//! the job's next one was ([`Ticket`]); a job reads the entries its
//! cursor holds (within half the bytes a kept cursor may hold); at most
//! `max` jobs wait ([`MAX_JOBS`], the cursor bound): one more drops the
//! oldest waiting, which trips the `readdir.prefetch` limit (a log line,
//! rate-limited, and a counter), as does a thread the system refuses to
//! start.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use oncrpc::limits::Limit;

use crate::dircursor::HeldEntries;

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

/// Entries a job claims at a time: a page that reaches one of them waits
/// for the whole claim (about 8 `statx` calls).
pub(crate) const CLAIM: usize = 8;

/// Longest a page waits for an entry its job claimed (a hundred times a
/// claim's work) before reading it itself: the job's thread may be
/// preempted on a busy machine.
const STALL: Duration = Duration::from_millis(2);

/// The entries a read-ahead job covers, split between the job and the
/// pages that list them, so that each entry's `statx` is made once: the
/// job claims entries from the front of the list while no page has come
/// (what the next page lists first), and from the back once a page
/// reached an entry the cache did not have; a page claims, from the
/// front, each such entry that the job has not claimed. The page then goes through the list in
/// order and finds what the job read in the attribute cache; it waits
/// only for an entry the job is reading at that moment (at most
/// [`CLAIM`]), which happens where the two meet, or where a page catches
/// up with a job still claiming from the front.
#[derive(Debug)]
pub(crate) struct Split {
    entries: HeldEntries,
    /// The front (low 32 bits: the first entry nobody claimed) and the
    /// back (high 32 bits: one past the last entry nobody claimed).
    claims: AtomicU64,
    /// A page reached an entry the cache did not have: the job claims
    /// from the back.
    page: AtomicBool,
    /// Entries the job is done with (their attributes kept, or not
    /// keepable).
    done: Box<[AtomicBool]>,
}

/// Who reads an entry of a [`Split`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// The page: it claimed the entry now.
    Page,
    /// The job claimed it; `true` once it is done with it.
    Job(bool),
}

fn pack(front: usize, back: usize) -> u64 {
    front as u64 | (back as u64) << 32
}

fn unpack(c: u64) -> (usize, usize) {
    ((c & 0xffff_ffff) as usize, (c >> 32) as usize)
}

impl Split {
    /// A split of `entries` (at most `u32::MAX`; more are not covered).
    pub(crate) fn new(entries: HeldEntries) -> Self {
        let n = entries.len().min(u32::MAX as usize);
        Self {
            entries,
            claims: AtomicU64::new(pack(0, n)),
            page: AtomicBool::new(false),
            done: (0..n).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// How many entries the split covers.
    pub(crate) fn len(&self) -> usize {
        self.done.len()
    }

    /// The entries, in directory order.
    pub(crate) fn entries(&self) -> &HeldEntries {
        &self.entries
    }

    /// The job's next claim: up to `n` entries from the front, or from
    /// the back once a page came ([`Self::owner`]); `None` when all are
    /// claimed.
    pub(crate) fn claim(&self, n: usize) -> Option<Range<usize>> {
        let back = self.page.load(Ordering::Acquire);
        let mut r = 0..0;
        self.claims
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                let (f, b) = unpack(c);
                if f >= b {
                    return None;
                }
                let k = n.min(b - f);
                r = if back { b - k..b } else { f..f + k };
                Some(if back { pack(f, b - k) } else { pack(f + k, b) })
            })
            .ok()?;
        Some(r)
    }

    /// The job is done with `r` (claimed with [`Self::claim`]).
    pub(crate) fn finish(&self, r: Range<usize>) {
        for d in self.done.get(r).unwrap_or_default() {
            d.store(true, Ordering::Release);
        }
    }

    /// A page reached entry `i` and the cache did not have it: the page's
    /// to read (claimed now, with every entry before it the job has not
    /// claimed) or the job's. Either way the job claims from the back
    /// from now on: a page that caught up with a job claiming from the
    /// front would otherwise wait behind it claim after claim.
    pub(crate) fn owner(&self, i: usize) -> Owner {
        self.page.store(true, Ordering::Release);
        let r = self
            .claims
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                let (f, b) = unpack(c);
                (f <= i && i < b).then(|| pack(i + 1, b))
            });
        match r {
            Ok(_) => Owner::Page,
            Err(_) => Owner::Job(self.is_done(i)),
        }
    }

    fn is_done(&self, i: usize) -> bool {
        self.done.get(i).is_none_or(|d| d.load(Ordering::Acquire))
    }

    /// Waits (spinning, then yielding) until the job is done with entry
    /// `i`, at most [`STALL`]: whether it is.
    pub(crate) fn wait(&self, i: usize) -> bool {
        let start = Instant::now();
        let mut spins = 0u32;
        while !self.is_done(i) {
            if spins < 64 {
                std::hint::spin_loop();
                spins += 1;
            } else if start.elapsed() >= STALL {
                return false;
            } else {
                std::thread::yield_now();
            }
        }
        true
    }
}

/// A read-ahead job kept with its cursor and carried through the pages
/// that list its entries: its [`Ticket`] (the job ends when this is
/// dropped) and where the next page is in the job's [`Split`].
#[derive(Debug)]
pub(crate) struct Help {
    split: Arc<Split>,
    /// Entries of `split` the pages took so far: the next page's first
    /// entry is this one.
    at: usize,
    _ticket: Ticket,
}

impl Help {
    pub(crate) fn new(split: Arc<Split>, ticket: Ticket) -> Self {
        Self {
            split,
            at: 0,
            _ticket: ticket,
        }
    }

    /// The index in the split of the entry named `name` that a page
    /// reached, if it is the split's next one (`None` past the split's
    /// end, or when the directory changed and the page lists another
    /// entry there: then the split no longer helps).
    pub(crate) fn index_of(&self, name: &[u8]) -> Option<usize> {
        let (n, _, _) = self.split.entries().get(self.at)?;
        (n.to_bytes() == name && self.at < self.split.len()).then_some(self.at)
    }

    /// The page took the entry [`Self::index_of`] found.
    pub(crate) fn took(&mut self) {
        self.at += 1;
    }

    /// Whether the pages took every entry of the split.
    pub(crate) fn spent(&self) -> bool {
        self.at >= self.split.len()
    }

    pub(crate) fn split(&self) -> &Split {
        &self.split
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

    fn split(n: usize) -> Split {
        Split::new(HeldEntries::of_names(n))
    }

    /// The job claims from the front until a page reaches an entry the
    /// cache does not have, then from the back; the page claims what the
    /// job has not, and waits for what the job claimed; nobody claims an
    /// entry twice.
    #[test]
    fn the_job_claims_from_the_front_then_the_back_and_the_page_between() {
        let s = split(48);
        assert_eq!(s.claim(CLAIM), Some(0..8), "no page yet: the front");
        assert_eq!(s.claim(CLAIM), Some(8..16));
        s.finish(0..8);
        assert_eq!(s.owner(3), Owner::Job(true));
        assert!(s.wait(3));
        assert_eq!(s.owner(10), Owner::Job(false), "the job is reading it");
        assert!(!s.wait(10), "not done: the wait ends at the stall");
        assert_eq!(
            s.claim(CLAIM),
            Some(40..48),
            "a page caught up with the job: the back, not the next in front of the page"
        );
        s.finish(8..16);
        assert_eq!(s.owner(16), Owner::Page);
        assert_eq!(s.claim(CLAIM), Some(32..40));
        // The page skips entries the cache had: it claims up to the one
        // it reached.
        assert_eq!(s.owner(20), Owner::Page);
        assert_eq!(s.claim(CLAIM), Some(24..32));
        assert_eq!(s.claim(100), Some(21..24), "what is left");
        assert_eq!(s.owner(21), Owner::Job(false));
        assert_eq!(s.claim(CLAIM), None);
        assert_eq!(s.owner(47), Owner::Job(false));
        // An index past the split is nobody's to wait for.
        assert_eq!(s.owner(48), Owner::Job(true));
    }

    /// A job and a page racing over a split: every entry claimed once, by
    /// one of them, and the page never goes past an entry the job claimed
    /// before the job is done with it.
    #[test]
    fn a_racing_job_and_page_claim_every_entry_once() {
        for round in 0..50 {
            let n = 500 + round;
            let s = Arc::new(split(n));
            let by: Arc<Vec<AtomicUsize>> = Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect());
            let (js, jb) = (Arc::clone(&s), Arc::clone(&by));
            let job = std::thread::spawn(move || {
                while let Some(r) = js.claim(CLAIM) {
                    for i in r.clone() {
                        jb[i].fetch_add(1, Ordering::Relaxed);
                    }
                    js.finish(r);
                }
            });
            let mut page = 0;
            for i in 0..n {
                // The page reaches entries at its own pace: some the cache
                // had (no claim), the others claimed or waited for.
                if i % 7 == 3 {
                    continue;
                }
                match s.owner(i) {
                    Owner::Page => {
                        page += 1;
                        by[i].fetch_add(1, Ordering::Relaxed);
                    }
                    Owner::Job(_) => {
                        while !s.wait(i) {}
                        assert_eq!(by[i].load(Ordering::Relaxed), 1, "done means read");
                    }
                }
            }
            job.join().unwrap();
            let twice = by.iter().filter(|c| c.load(Ordering::Relaxed) > 1).count();
            assert_eq!(twice, 0, "an entry claimed twice");
            let page_or_job = by.iter().filter(|c| c.load(Ordering::Relaxed) == 1).count();
            assert!(page_or_job >= n - n / 7 - 1 && page <= page_or_job);
        }
    }

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
