//! The metadata mode: `in_flight` workers each LOOKUP a random name of
//! the bench directory (RFC 1813 §3.3.3), then GETATTR the handle it
//! returned (§3.3.1), one call outstanding per worker, until the run's
//! time is up. Every call's latency goes into a histogram; the rate is
//! calls (LOOKUPs plus GETATTRs) per second.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use hdrhistogram::Histogram;
use nfs_client::nfs::v3::NfsFh3;
use nfs_client::{Mount, Nfs3Client};
use oncrpc::ClientTransport;

use super::measure::{Clocks, Sample};
use super::random::{RandomSample, SplitMix};
use super::stats::{histogram, Latency, MAX_LATENCY_US};

/// Names taken from the directory at most (the first ones in server
/// order), so a huge directory does not fill memory.
pub(super) const MAX_NAMES: usize = 100_000;

/// Up to [`MAX_NAMES`] names of `dir`, `.` and `..` left out (untimed).
pub(super) async fn names<T: ClientTransport>(
    m: &Mount<T>,
    dir: &NfsFh3,
) -> anyhow::Result<Vec<Bytes>> {
    let mut it = m.read_dir(dir);
    let mut out = Vec::new();
    while out.len() < MAX_NAMES {
        let Some(e) = it.next_entry().await? else {
            break;
        };
        let n = e.name.0;
        if n.as_ref() != b"." && n.as_ref() != b".." {
            out.push(n);
        }
    }
    if out.is_empty() {
        bail!("the bench directory is empty: nothing to LOOKUP");
    }
    Ok(out)
}

/// NFSv3 LOOKUP + GETATTR pairs over `names`, `in_flight` workers, for
/// `run_for`.
pub(super) async fn point<T: ClientTransport>(
    nfs: &Nfs3Client<T>,
    dir: &NfsFh3,
    names: &[Bytes],
    shape: (usize, Duration),
    seed: u64,
    clocks: &Clocks,
) -> anyhow::Result<RandomSample> {
    let calls = Calls {
        lookup: |name: &Bytes| {
            let name = name.clone();
            async move { Ok(nfs.lookup(dir, &name).await?.object) }
        },
        getattr: |fh: NfsFh3| async move { nfs.getattr(&fh).await.map(drop).map_err(Into::into) },
    };
    point_with(&calls, names, shape, seed, clocks).await
}

/// The two calls of the metadata mode: LOOKUP of a name in the bench
/// directory (its handle), and GETATTR of that handle.
pub(super) struct Calls<L, G> {
    pub(super) lookup: L,
    pub(super) getattr: G,
}

/// LOOKUP + GETATTR pairs through `calls`, as [`point`] does them.
pub(super) async fn point_with<L, LF, G, GF, H>(
    calls: &Calls<L, G>,
    names: &[Bytes],
    (in_flight, run_for): (usize, Duration),
    seed: u64,
    clocks: &Clocks,
) -> anyhow::Result<RandomSample>
where
    L: Fn(&Bytes) -> LF,
    LF: Future<Output = anyhow::Result<H>>,
    G: Fn(H) -> GF,
    GF: Future<Output = anyhow::Result<()>>,
{
    let (c0, s0) = clocks.now()?;
    let t0 = Instant::now();
    let deadline = t0 + run_for;
    let workers = (0..in_flight).map(|w| {
        let rng = SplitMix::new(seed ^ (w as u64).wrapping_mul(0xe703_7ed1_a0b4_28db));
        worker(calls, names, deadline, rng)
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
            bytes: 0,
            seconds: secs,
            client_cpu: c1 - c0,
            server_cpu: s0.zip(s1).map(|(a, b)| b - a),
        },
        latency: Latency::of(&all),
    })
}

fn micros(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_micros())
        .unwrap_or(MAX_LATENCY_US)
        .clamp(1, MAX_LATENCY_US)
}

async fn worker<L, LF, G, GF, H>(
    calls: &Calls<L, G>,
    names: &[Bytes],
    deadline: Instant,
    mut rng: SplitMix,
) -> anyhow::Result<Histogram<u64>>
where
    L: Fn(&Bytes) -> LF,
    LF: Future<Output = anyhow::Result<H>>,
    G: Fn(H) -> GF,
    GF: Future<Output = anyhow::Result<()>>,
{
    let mut h = histogram()?;
    let len = names.len() as u64;
    while Instant::now() < deadline {
        let i = usize::try_from(rng.next_u64() % len.max(1)).unwrap_or(0);
        let name = names.get(i).context("no names")?;
        let t = Instant::now();
        let found = (calls.lookup)(name)
            .await
            .with_context(|| format!("LOOKUP {}", String::from_utf8_lossy(name)))?;
        h.saturating_record(micros(t));
        let t = Instant::now();
        (calls.getattr)(found)
            .await
            .with_context(|| format!("GETATTR of {}", String::from_utf8_lossy(name)))?;
        h.saturating_record(micros(t));
    }
    Ok(h)
}
