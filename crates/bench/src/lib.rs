//! Benchmark runners behind `tessera bench`. Each returns JSON; the binary prints it.
//!
//! Rates are measured on this machine in one run, so contenders are compared as ratios
//! (the machine is shared and noisy; absolute numbers move between runs).

pub mod balancer_bench;
#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod fib_bench;
pub mod forward_bench;
pub mod pipeline_bench;
pub mod plot;
pub mod switch_bench;
pub mod table;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Set when the lab benchmarks should stop (the binary registers SIGINT and SIGTERM on
/// it): the next measurement point fails with "interrupted", and the error path takes
/// the lab down, so that no namespace is left behind.
pub fn stop_flag() -> Arc<AtomicBool> {
    static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    STOP.get_or_init(|| Arc::new(AtomicBool::new(false)))
        .clone()
}

/// Whether [`stop_flag`] is set.
pub fn interrupted() -> bool {
    stop_flag().load(Ordering::Relaxed)
}

/// The number after `key:` in a /proc file of `Key: value [unit]` lines, such as
/// /proc/meminfo (None if the file or the key is missing).
pub fn proc_field(path: &str, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(path).ok()?;
    s.lines().find_map(|l| {
        let v = l.strip_prefix(key)?.strip_prefix(':')?;
        v.split_whitespace().next()?.parse().ok()
    })
}

/// A seeded xorshift generator: benchmarks are repeatable.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    #[inline]
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }
}
