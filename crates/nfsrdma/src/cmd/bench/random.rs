//! The random-read mode: `in_flight` workers each keep one READ of
//! `count` bytes outstanding at a uniformly random aligned offset of the
//! file until the run's time is up (or, with `--calls`, until that many
//! READs were issued); every READ's latency goes into a histogram
//! (microseconds). Reports IOPS and latency percentiles.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hdrhistogram::Histogram;
use nfs_client::nfs::v3::NfsFh3;
use nfs_client::Nfs3Client;
use oncrpc::ClientTransport;

use super::measure::{Clocks, Sample};
use super::stats::{histogram, Latency, MAX_LATENCY_US};

/// A small deterministic generator (SplitMix64): the offsets need to be
/// spread over the file, not unpredictable.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix(u64);

impl SplitMix {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// An offset that is a multiple of `count` with the whole READ inside
    /// a file of `file_size` bytes; `None` when no READ fits.
    pub(crate) fn offset(&mut self, count: u32, file_size: u64) -> Option<u64> {
        let blocks = file_size.checked_div(u64::from(count))?;
        if blocks == 0 {
            return None;
        }
        Some((self.next_u64() % blocks) * u64::from(count))
    }
}

/// When a run ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Stop {
    /// No READ starts after this long.
    After(Duration),
    /// This many READs in all, shared by the workers: a fixed amount of
    /// work, so that instruction counts (`valgrind --tool=callgrind`) of
    /// two runs differ by the cost of the calls alone.
    Calls(u64),
}

/// What the workers of one run share to know whether to start another
/// READ.
struct Budget {
    deadline: Option<Instant>,
    calls: Option<AtomicU64>,
}

impl Budget {
    fn new(stop: Stop, t0: Instant) -> Self {
        match stop {
            Stop::After(d) => Self {
                deadline: Some(t0 + d),
                calls: None,
            },
            Stop::Calls(n) => Self {
                deadline: None,
                calls: Some(AtomicU64::new(n)),
            },
        }
    }

    /// Whether one more READ may start (taking it from the count).
    fn take(&self) -> bool {
        if let Some(d) = self.deadline {
            if Instant::now() >= d {
                return false;
            }
        }
        match &self.calls {
            Some(left) => left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok(),
            None => true,
        }
    }
}

/// One random-read run's figures.
pub(super) struct RandomSample {
    pub(super) sample: Sample,
    pub(super) latency: Option<Latency>,
}

/// Random NFSv3 READs of `count` bytes, `in_flight` at a time, until
/// `stop`, over a file of `file_size` bytes; every READ must return
/// `count` bytes.
pub(super) async fn point<T: ClientTransport>(
    nfs: &Nfs3Client<T>,
    fh: &NfsFh3,
    shape: (u32, usize),
    file_size: u64,
    stop: Stop,
    seed: u64,
    clocks: &Clocks,
) -> anyhow::Result<RandomSample> {
    let read = |off: u64, count: u32| async move {
        let r = nfs.read(fh, off, count).await?;
        Ok(r.count)
    };
    point_with(&read, shape, file_size, stop, seed, clocks).await
}

/// Random READs through `read` (offset, count: the bytes it returned),
/// as [`point`] does them.
pub(super) async fn point_with<F, Fut>(
    read: &F,
    shape: (u32, usize),
    file_size: u64,
    stop: Stop,
    seed: u64,
    clocks: &Clocks,
) -> anyhow::Result<RandomSample>
where
    F: Fn(u64, u32) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<u32>>,
{
    let (count, in_flight) = shape;
    if file_size < u64::from(count) {
        bail!("the file ({file_size} bytes) is smaller than one READ ({count})");
    }
    let (c0, s0) = clocks.now()?;
    let t0 = Instant::now();
    let budget = Budget::new(stop, t0);
    let workers = (0..in_flight).map(|w| {
        let rng = SplitMix::new(seed ^ (w as u64).wrapping_mul(0xa076_1d64_78bd_642f));
        worker(read, count, file_size, &budget, rng)
    });
    let hists = futures::future::try_join_all(workers).await?;
    let secs = t0.elapsed().as_secs_f64();
    let (c1, s1) = clocks.now()?;
    let mut all = histogram()?;
    for h in &hists {
        all.add(h).context("merging latency histograms")?;
    }
    Ok(RandomSample {
        sample: Sample {
            bytes: all.len() * u64::from(count),
            seconds: secs,
            client_cpu: c1 - c0,
            server_cpu: s0.zip(s1).map(|(a, b)| b - a),
        },
        latency: Latency::of(&all),
    })
}

/// One worker: READ after READ while the budget lasts.
async fn worker<F, Fut>(
    read: &F,
    count: u32,
    file_size: u64,
    budget: &Budget,
    mut rng: SplitMix,
) -> anyhow::Result<Histogram<u64>>
where
    F: Fn(u64, u32) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<u32>>,
{
    let mut h = histogram()?;
    while budget.take() {
        let Some(off) = rng.offset(count, file_size) else {
            bail!("no READ of {count} bytes fits in {file_size}");
        };
        let t = Instant::now();
        let got = read(off, count)
            .await
            .with_context(|| format!("READ {count} at {off}"))?;
        let us = u64::try_from(t.elapsed().as_micros()).unwrap_or(MAX_LATENCY_US);
        if got != count {
            bail!("READ {count} at {off} returned {got} bytes");
        }
        h.saturating_record(us.clamp(1, MAX_LATENCY_US));
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_aligned_inside_the_file_and_spread() {
        let mut r = SplitMix::new(7);
        let size = 1u64 << 20;
        let mut seen = std::collections::HashSet::new();
        for _ in 0..4096 {
            let off = r.offset(4096, size).unwrap();
            assert_eq!(off % 4096, 0);
            assert!(off + 4096 <= size);
            seen.insert(off);
        }
        // 256 blocks, 4096 draws: every block comes up.
        assert_eq!(seen.len(), 256);
        // A tail shorter than one READ is never read.
        for _ in 0..1000 {
            let off = r.offset(65536, 65536 * 3 + 100).unwrap();
            assert!(off + 65536 <= 65536 * 3 + 100);
        }
        assert_eq!(r.offset(4096, 4095), None);
        assert_eq!(r.offset(0, 4096), None);
    }

    #[test]
    fn a_call_budget_is_shared_and_exact() {
        let b = Budget::new(Stop::Calls(3), Instant::now());
        assert!(b.take() && b.take() && b.take());
        assert!(!b.take());
        assert!(!b.take());
        let t = Budget::new(Stop::After(Duration::ZERO), Instant::now());
        assert!(!t.take());
    }

    #[tokio::test]
    async fn a_run_with_a_call_count_makes_exactly_that_many_reads() {
        let made = AtomicU64::new(0);
        let read = |_off: u64, count: u32| {
            made.fetch_add(1, Ordering::Relaxed);
            async move { Ok(count) }
        };
        let clocks = Clocks::new(None).unwrap();
        let r = point_with(&read, (4096, 7), 1 << 20, Stop::Calls(100), 1, &clocks)
            .await
            .unwrap();
        assert_eq!(made.load(Ordering::Relaxed), 100);
        assert_eq!(r.sample.bytes, 100 * 4096);
    }

    #[test]
    fn seeds_give_different_sequences() {
        let a: Vec<u64> = (0..4)
            .scan(SplitMix::new(1), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..4)
            .scan(SplitMix::new(2), |r, _| Some(r.next_u64()))
            .collect();
        assert_ne!(a, b);
        let a2: Vec<u64> = (0..4)
            .scan(SplitMix::new(1), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, a2);
    }
}
