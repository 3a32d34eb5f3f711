//! Measurement tools: `tessera gen` (constant-bit-rate UDP test traffic) and `tessera sink`
//! (per-flow counts, loss, reordering, duplicates, one-way latency, interval rates).
//!
//! Both speak the test header of [`wire::probe`]. Output schemas: docs/measurement.md.

pub mod generator;
pub mod rate;
pub mod sink;

/// Nanoseconds of CLOCK_REALTIME: the clock of the send timestamps, and the clock of the
/// kernel's receive timestamps, so one-way latency on one host needs no synchronisation.
pub fn now_ns() -> u64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    d.as_secs() * 1_000_000_000 + d.subsec_nanos() as u64
}

/// Mean, spread and extremes of a series, accumulated in one pass (Welford).
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub n: u64,
    mean: f64,
    m2: f64,
    pub min: f64,
    pub max: f64,
}

impl Stats {
    pub fn add(&mut self, x: f64) {
        if self.n == 0 {
            self.min = x;
            self.max = x;
        } else {
            self.min = self.min.min(x);
            self.max = self.max.max(x);
        }
        self.n += 1;
        let d = x - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (x - self.mean);
    }

    pub fn mean(&self) -> f64 {
        self.mean
    }

    /// Population variance.
    pub fn variance(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.m2 / self.n as f64
        }
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "n": self.n, "mean": self.mean, "min": self.min, "max": self.max,
            "variance": self.variance(), "stddev": self.variance().sqrt(),
        })
    }
}

/// Sub-buckets per power of two in a [`Histogram`]: values are kept to within 1/16
/// (6%) of themselves.
const SUB: u64 = 16;

/// A log-linear histogram of non-negative integers (nanoseconds) for quantiles: 16
/// buckets per power of two, from 0 to 2^48. A quantile is reported as the upper bound of
/// its bucket, so it is never below the true value and at most 1/16 above it.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    pub n: u64,
    pub max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; (48 * SUB) as usize],
            n: 0,
            max: 0,
        }
    }
}

impl Histogram {
    fn bucket(v: u64) -> usize {
        if v < SUB {
            return v as usize;
        }
        let e = 63 - v.leading_zeros() as u64; // v in [2^e, 2^(e+1))
        let m = (v >> (e - 4)) & (SUB - 1); // the four bits below the leading one
        (((e - 3) * SUB + m) as usize).min((48 * SUB) as usize - 1)
    }

    /// The largest value of bucket `b`.
    fn upper(b: usize) -> u64 {
        let b = b as u64;
        if b < SUB {
            return b;
        }
        let e = b / SUB + 3;
        let m = b % SUB;
        ((SUB + m + 1) << (e - 4)) - 1
    }

    pub fn add(&mut self, v: u64) {
        self.counts[Self::bucket(v)] += 1;
        self.n += 1;
        self.max = self.max.max(v);
    }

    /// The value below which a share `q` (0 to 1) of the values lie; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        for (b, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::upper(b).min(self.max);
            }
        }
        self.max
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "n": self.n, "p50": self.quantile(0.5), "p90": self.quantile(0.9),
            "p99": self.quantile(0.99), "p999": self.quantile(0.999), "max": self.max,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn histogram_quantiles_are_within_a_sixteenth_above() {
        let mut h = super::Histogram::default();
        assert_eq!(h.quantile(0.5), 0);
        for v in 1..=100_000u64 {
            h.add(v * 7);
        }
        for (q, exact) in [(0.5, 350_000u64), (0.99, 693_000), (1.0, 700_000)] {
            let got = h.quantile(q);
            assert!(
                got >= exact && got <= exact + exact / 16,
                "q{q}: {got} vs {exact}"
            );
        }
        assert_eq!(h.max, 700_000);
        for v in 0..40u64 {
            let x = 1u64 << v;
            let b = super::Histogram::bucket(x);
            assert!(super::Histogram::upper(b) >= x, "{x}");
            if b > 0 {
                assert!(super::Histogram::upper(b - 1) < x, "{x}");
            }
        }
    }

    use super::*;

    #[test]
    fn stats() {
        let mut s = Stats::default();
        for x in [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0] {
            s.add(x);
        }
        assert_eq!((s.mean(), s.variance(), s.min, s.max), (5.0, 4.0, 2.0, 9.0));
    }
}
