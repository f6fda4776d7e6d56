//! Percentiles of timed samples (nearest rank on the sorted samples).

use std::time::{Duration, Instant};

use serde::Serialize;

/// n and p50/p95/p99 of one set of samples, in nanoseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Summary {
    pub n: usize,
    pub p50_ns: f64,
    pub p95_ns: f64,
    pub p99_ns: f64,
}

impl Summary {
    pub fn of(samples: &[Duration]) -> Summary {
        let mut ns: Vec<f64> = samples.iter().map(|d| d.as_nanos() as f64).collect();
        ns.sort_by(f64::total_cmp);
        Summary {
            n: ns.len(),
            p50_ns: percentile(&ns, 50.0),
            p95_ns: percentile(&ns, 95.0),
            p99_ns: percentile(&ns, 99.0),
        }
    }

    /// The percentiles of `self` minus those of `base` (an estimate of an added cost; not itself a
    /// distribution), floored at zero.
    pub fn minus(&self, base: &Summary) -> Summary {
        Summary {
            n: self.n.min(base.n),
            p50_ns: (self.p50_ns - base.p50_ns).max(0.0),
            p95_ns: (self.p95_ns - base.p95_ns).max(0.0),
            p99_ns: (self.p99_ns - base.p99_ns).max(0.0),
        }
    }
}

/// Nearest-rank percentile of sorted values; 0 for no values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Times `n` calls of `f` after `n / 10` untimed warm-up calls. Stops at the first error.
pub fn time_n<T>(
    n: usize,
    mut f: impl FnMut() -> anyhow::Result<T>,
) -> anyhow::Result<Vec<Duration>> {
    for _ in 0..n / 10 {
        std::hint::black_box(f()?);
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let out = f()?;
        samples.push(started.elapsed());
        std::hint::black_box(out);
    }
    Ok(samples)
}

/// A duration for people: `812 ns`, `12.3 µs`, `4.12 ms`, `1.20 s`.
pub fn human(ns: f64) -> String {
    if ns < 1_000.0 {
        format!("{ns:.0} ns")
    } else if ns < 10_000.0 {
        format!("{:.2} µs", ns / 1e3)
    } else if ns < 1_000_000.0 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1_000_000_000.0 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 95.0), 95.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn human_units() {
        assert_eq!(human(812.0), "812 ns");
        assert_eq!(human(12_345.0), "12.3 µs");
        assert_eq!(human(4_120_000.0), "4.12 ms");
    }
}
