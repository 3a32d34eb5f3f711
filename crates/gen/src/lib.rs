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

#[cfg(test)]
mod tests {
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
