//! The statistics of repeated runs: median and range of a figure, and
//! latency percentiles from a histogram. No IO.

use hdrhistogram::Histogram;

/// Median and range of one figure over the repetitions of a point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

/// The median of `values` (the mean of the middle two for an even
/// count); `None` when empty or when a value is NaN.
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() || values.iter().any(|v| v.is_nan()) {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// Median, minimum and maximum of `values`; `None` when empty or NaN.
pub(crate) fn spread(values: &[f64]) -> Option<Spread> {
    let median = median(values)?;
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some(Spread { median, min, max })
}

/// Latency of one random-read run: reads completed and percentiles in
/// microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Latency {
    pub(crate) ops: u64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) p999_us: f64,
}

/// Highest latency recorded, in microseconds (an hour); longer ones are
/// clamped to it.
pub(crate) const MAX_LATENCY_US: u64 = 3_600_000_000;

/// An empty latency histogram in microseconds, 3 significant digits.
pub(crate) fn histogram() -> Result<Histogram<u64>, hdrhistogram::CreationError> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
}

impl Latency {
    /// p50, p99 and p99.9 of `h`; `None` when it holds nothing.
    pub(crate) fn of(h: &Histogram<u64>) -> Option<Self> {
        if h.is_empty() {
            return None;
        }
        Some(Self {
            ops: h.len(),
            p50_us: h.value_at_quantile(0.50) as f64,
            p99_us: h.value_at_quantile(0.99) as f64,
            p999_us: h.value_at_quantile(0.999) as f64,
        })
    }

    /// The median of each figure over several runs.
    pub(crate) fn median_of(runs: &[Latency]) -> Option<Self> {
        let m = |f: fn(&Latency) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
        Some(Self {
            ops: m(|l| l.ops as f64)? as u64,
            p50_us: m(|l| l.p50_us)?,
            p99_us: m(|l| l.p99_us)?,
            p999_us: m(|l| l.p999_us)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[7.0]), Some(7.0));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn spread_is_median_with_range_and_ignores_order() {
        let s = spread(&[900.0, 100.0, 500.0, 1000.0, 450.0]).unwrap();
        assert_eq!(
            s,
            Spread {
                median: 500.0,
                min: 100.0,
                max: 1000.0
            }
        );
        // One outlier moves the mean, not the median.
        let t = spread(&[10.0, 11.0, 1000.0]).unwrap();
        assert_eq!(t.median, 11.0);
        assert_eq!(spread(&[]), None);
    }

    #[test]
    fn percentiles_come_from_the_recorded_latencies() {
        let mut h = histogram().unwrap();
        // 1000 reads: 988 of 100 µs, 10 of 5 ms, 2 of 80 ms.
        for _ in 0..988 {
            h.record(100).unwrap();
        }
        for _ in 0..10 {
            h.record(5_000).unwrap();
        }
        h.record_n(80_000, 2).unwrap();
        let l = Latency::of(&h).unwrap();
        assert_eq!(l.ops, 1000);
        assert_eq!(l.p50_us, 100.0);
        // 3 significant digits: within 0.1%.
        assert!((l.p99_us - 5_000.0).abs() <= 5.0, "{l:?}");
        assert!((l.p999_us - 80_000.0).abs() <= 80.0, "{l:?}");
        assert_eq!(Latency::of(&histogram().unwrap()), None);
    }

    #[test]
    fn latency_medians_are_taken_per_figure() {
        let l = |ops, a, b, c| Latency {
            ops,
            p50_us: a,
            p99_us: b,
            p999_us: c,
        };
        let m = Latency::median_of(&[
            l(10, 1.0, 9.0, 50.0),
            l(30, 3.0, 7.0, 90.0),
            l(20, 2.0, 8.0, 70.0),
        ])
        .unwrap();
        assert_eq!(m, l(20, 2.0, 8.0, 70.0));
        assert_eq!(Latency::median_of(&[]), None);
    }
}
