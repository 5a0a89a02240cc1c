//! Work on a list of items shared by the calling thread and one helper
//! thread, consumed in order: a large READDIRPLUS page's `statx` calls
//! (two thirds of the server's time in a listing) spread over two cores
//! while the caller encodes the entries in directory order.
//!
//! [`map_in_order`] cuts the items into chunks. The helper claims chunks
//! from the front and prepares them; the caller consumes chunk after
//! chunk, preparing a chunk itself when the helper has not claimed it
//! yet, else waiting for the helper's result. So the two share the work
//! however fast each runs, and the helper is never more than the chunk it
//! is preparing ahead of what the caller reaches; a chunk the helper has
//! not finished within [`STALL`] of the caller reaching it (its thread
//! preempted on a busy machine) the caller prepares itself rather than
//! wait. Once the caller refuses an item the helper stops at its current
//! chunk; what it prepared past the refusal is dropped.
//!
//! Helpers are off unless [`set_listing_helpers`] allows some, and then
//! bounded: at most that many run at once in the process (never more than
//! one less than the cores, none on one core, at most 7); a list that
//! finds none free, or whose thread cannot be started, is prepared by the
//! caller alone (the `readdir.helpers` limit counts those).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use oncrpc::limits::Limit;

/// Items per chunk: large enough that the hand-over (a lock and maybe a
/// wake-up) is small beside 32 `statx` calls, small enough that the
/// helper's work past the caller's refusal stays small.
pub(crate) const CHUNK: usize = 32;

/// Lists shorter than this are prepared by the caller alone: starting a
/// thread costs about as much as a few dozen `statx` calls.
pub(crate) const MIN_PARALLEL: usize = 256;

/// Longest the caller waits for a chunk the helper claimed (about ten
/// times the 32 `statx` calls of a chunk) before preparing it itself.
const STALL: std::time::Duration = std::time::Duration::from_micros(500);

static HELPERS: Limit = Limit::new("readdir.helpers");

/// Helper threads running now.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Helper threads allowed at once, as set by [`set_listing_helpers`]
/// (0, the default: every list is prepared by its caller alone).
static ALLOWED: AtomicUsize = AtomicUsize::new(0);

/// The most helper threads the process may use: one less than its cores,
/// at most 7.
fn max_helpers() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .saturating_sub(1)
            .min(7)
    })
}

/// Lets up to `n` listing helper threads run at once (capped at one less
/// than the cores, at most 7; 0 turns them off, the default). Measured
/// on the 2-core development machine (docs/listing.md): the same wall
/// time for a 50,000-entry listing and about a quarter more server CPU,
/// so they are off unless asked for (`nfsrdma serve --readdir-helpers`).
pub fn set_listing_helpers(n: usize) {
    ALLOWED.store(n.min(max_helpers()), Ordering::Relaxed);
}

/// How many helper threads may run at once now.
pub(crate) fn helpers() -> usize {
    ALLOWED.load(Ordering::Relaxed)
}

/// Prepares items `0..n` with `prep` and hands them to `consume` in order
/// until it refuses one (returns `false`): the index of the refused item,
/// or `None` when all were taken. Lists of at least [`MIN_PARALLEL`]
/// items share the preparing with a helper thread (module docs); every
/// item up to the refused one is prepared, and handed over, once; an
/// item of a chunk the helper was too slow with is prepared again by the
/// caller, so `prep` must not mind running twice.
/// Whether [`map_in_order`] of `n` items may share them with a helper
/// (else it runs them in turn on the caller, which the caller may as
/// well do itself).
pub(crate) fn may_share(n: usize) -> bool {
    n >= MIN_PARALLEL && helpers() > 0
}

pub(crate) fn map_in_order<P: Send>(
    n: usize,
    prep: impl Fn(usize) -> P + Sync,
    mut consume: impl FnMut(usize, P) -> bool,
) -> Option<usize> {
    let serial = |consume: &mut dyn FnMut(usize, P) -> bool| (0..n).find(|&i| !consume(i, prep(i)));
    if n < MIN_PARALLEL {
        return serial(&mut consume);
    }
    if helpers() == 0 {
        return serial(&mut consume);
    }
    let Some(_slot) = HelperSlot::take() else {
        HELPERS.trip(format_args!(
            "all {} listing helper threads busy: a page of {n} entries is prepared on one thread",
            helpers()
        ));
        return serial(&mut consume);
    };
    with_helper(n, prep, consume)
}

/// [`map_in_order`] with a helper thread (its slot already taken).
fn with_helper<P: Send>(
    n: usize,
    prep: impl Fn(usize) -> P + Sync,
    mut consume: impl FnMut(usize, P) -> bool,
) -> Option<usize> {
    let shared = Shared::new(n.div_ceil(CHUNK));
    std::thread::scope(|s| {
        let helper = std::thread::Builder::new()
            .name("nfs-readdir-helper".into())
            .spawn_scoped(s, || shared.help(n, &prep));
        if helper.is_err() {
            HELPERS.trip(format_args!("could not start a listing helper thread"));
            shared.gone();
        }
        let wake = || {
            if let Ok(h) = &helper {
                h.thread().unpark();
            }
        };
        let r = shared.consume(n, &prep, &mut consume, &wake);
        shared.stop.store(true, Ordering::Relaxed);
        wake();
        // A helper that panicked left its chunk to the caller, which has
        // prepared it: the list is complete, the panic is not passed on.
        if let Ok(h) = helper {
            let _ = h.join();
        }
        r
    })
}

/// A running helper, counted in [`RUNNING`] until dropped.
struct HelperSlot;

impl HelperSlot {
    fn take() -> Option<Self> {
        let max = helpers();
        RUNNING
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                (r < max).then_some(r + 1)
            })
            .ok()
            .map(|_| Self)
    }
}

impl Drop for HelperSlot {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the caller and the helper share for one list.
struct Shared<P> {
    /// The next chunk nobody has claimed.
    claim: AtomicUsize,
    /// The chunk the caller is consuming: the helper claims none past
    /// the one after it.
    at: AtomicUsize,
    /// Set once the caller is done: the helper claims no more.
    stop: AtomicBool,
    /// Chunks the helper prepared and the caller has not taken, and
    /// whether the helper has ended.
    done: Mutex<(Vec<Option<Vec<P>>>, bool)>,
    ready: Condvar,
}

impl<P: Send> Shared<P> {
    fn new(chunks: usize) -> Self {
        Self {
            claim: AtomicUsize::new(0),
            at: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            done: Mutex::new(((0..chunks).map(|_| None).collect(), false)),
            ready: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, (Vec<Option<Vec<P>>>, bool)> {
        self.done.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The helper: claims and prepares chunks until none is left or the
    /// caller is done; says it has ended even if `prep` panics.
    fn help(&self, n: usize, prep: &(impl Fn(usize) -> P + Sync)) {
        struct Gone<'a, P: Send>(&'a Shared<P>);
        impl<P: Send> Drop for Gone<'_, P> {
            fn drop(&mut self) {
                self.0.gone();
            }
        }
        let _gone = Gone(self);
        let chunks = n.div_ceil(CHUNK);
        while let Some(c) = self.next_claim() {
            if c >= chunks {
                break;
            }
            let v = chunk(c, n).map(prep).collect();
            if let Some(slot) = self.lock().0.get_mut(c) {
                *slot = Some(v);
            }
            self.ready.notify_one();
        }
    }

    /// The helper's next chunk, claimed once it is at most the one after
    /// the caller's (the caller unparks the helper as it moves on; the
    /// timeout only guards against a missed wake-up); `None` once the
    /// caller is done.
    fn next_claim(&self) -> Option<usize> {
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return None;
            }
            let c = self.claim.load(Ordering::Acquire);
            if c > self.at.load(Ordering::Acquire) + 1 {
                std::thread::park_timeout(STALL);
                continue;
            }
            if self
                .claim
                .compare_exchange(c, c + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Some(c);
            }
        }
    }

    /// Marks the helper ended (or never started) and wakes the caller.
    fn gone(&self) {
        self.lock().1 = true;
        self.ready.notify_one();
    }

    /// The caller: each chunk in order, prepared here if still unclaimed,
    /// else taken from the helper once ready.
    fn consume(
        &self,
        n: usize,
        prep: &(impl Fn(usize) -> P + Sync),
        consume: &mut impl FnMut(usize, P) -> bool,
        wake: &dyn Fn(),
    ) -> Option<usize> {
        for c in 0..n.div_ceil(CHUNK) {
            self.at.store(c, Ordering::Release);
            wake();
            let mine = self
                .claim
                .compare_exchange(c, c + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
            let items: Vec<P> = if mine {
                chunk(c, n).map(prep).collect()
            } else {
                self.wait(c)
                    .unwrap_or_else(|| chunk(c, n).map(prep).collect())
            };
            for (i, p) in chunk(c, n).zip(items) {
                if !consume(i, p) {
                    return Some(i);
                }
            }
        }
        None
    }

    /// Chunk `c` once the helper has prepared it; `None` if the helper
    /// ended without it (it panicked) or has not finished it within
    /// [`STALL`] (on a busy machine the scheduler may have taken its
    /// core for a whole time slice): the caller then prepares the chunk
    /// itself, and the helper's result for it is dropped.
    fn wait(&self, c: usize) -> Option<Vec<P>> {
        let deadline = std::time::Instant::now() + STALL;
        let mut g = self.lock();
        loop {
            if let Some(v) = g.0.get_mut(c).and_then(Option::take) {
                return Some(v);
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if g.1 || left.is_zero() {
                return None;
            }
            g = self
                .ready
                .wait_timeout(g, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// The items of chunk `c` of a list of `n`.
fn chunk(c: usize, n: usize) -> std::ops::Range<usize> {
    (c * CHUNK).min(n)..((c + 1) * CHUNK).min(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::atomic::AtomicU32;

    fn counts(n: usize) -> Vec<AtomicU32> {
        (0..n).map(|_| AtomicU32::new(0)).collect()
    }

    #[test]
    fn every_item_is_consumed_once_in_order() {
        set_listing_helpers(usize::MAX);
        for n in [0, 1, 31, 255, 256, 257, 1000, 4099] {
            let prepared = counts(n);
            let mut seen = Vec::new();
            let r = map_in_order(
                n,
                |i| {
                    prepared[i].fetch_add(1, Ordering::Relaxed);
                    i * 3
                },
                |i, p| {
                    assert_eq!(p, i * 3);
                    seen.push(i);
                    true
                },
            );
            assert_eq!(r, None);
            assert_eq!(seen, (0..n).collect::<Vec<_>>());
            // Once each, or twice where the caller took over a chunk the
            // helper was too slow with (`STALL`, on a busy machine).
            assert!(
                prepared
                    .iter()
                    .all(|c| (1..=2).contains(&c.load(Ordering::Relaxed))),
                "n {n}"
            );
        }
    }

    #[test]
    fn a_refusal_stops_the_list_and_the_helper_stays_near() {
        set_listing_helpers(usize::MAX);
        let n = 5000;
        let prepared = counts(n);
        let mut taken = 0;
        let r = map_in_order(
            n,
            |i| {
                prepared[i].fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_micros(20));
            },
            |i, ()| {
                if i == 1234 {
                    return false;
                }
                taken += 1;
                true
            },
        );
        assert_eq!((r, taken), (Some(1234), 1234));
        let counts: Vec<u32> = prepared.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        assert!(counts[..=1234].iter().all(|&c| c >= 1));
        // Past the refusal: at most the helper's chunk in hand and the one
        // it claimed as the caller stopped.
        let past = counts[1235..].iter().filter(|&&c| c > 0).count();
        assert!(past <= 2 * CHUNK, "{past} items prepared past the refusal");
    }

    #[test]
    fn a_large_list_is_shared_with_a_helper_thread() {
        let n = 4096;
        let caller = std::thread::current().id();
        let helped = AtomicU32::new(0);
        let threads = Mutex::new(HashMap::new());
        // The caller's items wait (up to 60 s: a helper thread started
        // on a machine at load 16 was once not run within 10 s) until the
        // helper has done one, so the sharing does not depend on the
        // scheduler.
        let t0 = std::time::Instant::now();
        with_helper(
            n,
            |_| {
                if std::thread::current().id() == caller {
                    while helped.load(Ordering::Relaxed) == 0
                        && t0.elapsed() < std::time::Duration::from_secs(60)
                    {
                        std::thread::sleep(std::time::Duration::from_micros(100));
                    }
                } else {
                    helped.fetch_add(1, Ordering::Relaxed);
                }
                *threads
                    .lock()
                    .unwrap()
                    .entry(std::thread::current().id())
                    .or_insert(0) += 1;
            },
            |_, ()| true,
        );
        let t = threads.into_inner().unwrap();
        // Every item at least once; a chunk the helper was too slow with
        // (`STALL`) is prepared again by the caller.
        assert!(t.values().sum::<u32>() >= 4096);
        assert_eq!(
            t.len(),
            2,
            "prepared on {} threads after {:?}",
            t.len(),
            t0.elapsed()
        );
        assert!(helped.load(Ordering::Relaxed) > 0);
    }

    /// A helper stopped in the middle of a chunk (preempted, say) does not
    /// hold the caller up: it prepares the chunk itself.
    #[test]
    fn a_stalled_helper_does_not_stall_the_caller() {
        let caller = std::thread::current().id();
        let t0 = std::time::Instant::now();
        let mut done_at = None;
        // The helper stops for 2 s on the first item it takes (a lost
        // time slice, much longer); its later items are quick, so the
        // join at the end waits for that one pause only.
        let paused = AtomicBool::new(false);
        let r = with_helper(
            1024,
            |i| {
                if std::thread::current().id() != caller && !paused.swap(true, Ordering::Relaxed) {
                    std::thread::sleep(std::time::Duration::from_secs(2));
                }
                i
            },
            |i, p| {
                assert_eq!(i, p);
                if i == 1023 {
                    done_at = Some(t0.elapsed());
                }
                true
            },
        );
        assert_eq!(r, None);
        let done_at = done_at.unwrap();
        assert!(done_at < std::time::Duration::from_secs(1), "{done_at:?}");
    }

    #[test]
    fn the_helpers_are_bounded_by_the_cores() {
        set_listing_helpers(usize::MAX);
        let max = helpers();
        assert_eq!(max, max_helpers());
        // Take every slot (other tests may hold some for a moment).
        let mut slots = Vec::new();
        let t0 = std::time::Instant::now();
        while slots.len() < max && t0.elapsed() < std::time::Duration::from_secs(10) {
            match HelperSlot::take() {
                Some(s) => slots.push(s),
                None => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
        assert_eq!(slots.len(), max);
        assert!(HelperSlot::take().is_none(), "more helpers than {max}");
        let tripped = HELPERS.count();
        // With every slot taken, a large list runs on the caller alone.
        let caller = std::thread::current().id();
        let mut n = 0;
        map_in_order(
            1000,
            |_| assert_eq!(std::thread::current().id(), caller),
            |_, ()| {
                n += 1;
                true
            },
        );
        assert_eq!(n, 1000);
        assert!(HELPERS.count() > tripped);
        drop(slots);
    }

    #[test]
    fn a_helper_that_panics_leaves_its_chunks_to_the_caller() {
        set_listing_helpers(usize::MAX);
        let n = 1024;
        let caller = std::thread::current().id();
        let mut seen = 0;
        let r = map_in_order(
            n,
            |i| {
                if std::thread::current().id() != caller {
                    panic!("helper fails (as this test wants)");
                }
                i
            },
            |i, p| {
                assert_eq!(i, p);
                seen += 1;
                true
            },
        );
        assert_eq!((r, seen), (None, n));
    }
}
