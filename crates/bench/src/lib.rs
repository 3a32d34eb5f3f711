//! Benchmark runners behind `tessera bench`. Each returns JSON; the binary prints it.
//!
//! Rates are measured on this machine in one run, so contenders are compared as ratios
//! (the machine is shared and noisy; absolute numbers move between runs).

pub mod axon_bench;
pub mod balancer_bench;
pub mod contend_bench;
#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod fib_bench;
pub mod flood_bench;
pub mod forward_bench;
pub mod pipeline_bench;
pub mod placement;
pub mod plot;
pub mod scale_bench;
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

/// iperf3 servers (`iperf3 -s -1 -p PORT`, one test each) in lab namespaces, started
/// together; when dropped, each gets up to 3 s to end its test, then is killed.
pub struct Iperf3Servers(Vec<std::process::Child>);

impl Iperf3Servers {
    /// Starts a server per (namespace, port) and gives them time to listen.
    pub fn start(at: &[(String, u16)]) -> Result<Iperf3Servers, String> {
        let mut v = Iperf3Servers(Vec::new());
        for (ns, port) in at {
            v.0.push(
                std::process::Command::new("ip")
                    .args(["netns", "exec", ns, "iperf3", "-s", "-1", "-p"])
                    .arg(port.to_string())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .map_err(|e| format!("iperf3 (apt-get install iperf3): {e}"))?,
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(400));
        Ok(v)
    }
}

impl Drop for Iperf3Servers {
    fn drop(&mut self) {
        let t0 = std::time::Instant::now();
        for s in &mut self.0 {
            while s.try_wait().ok().flatten().is_none()
                && t0.elapsed() < std::time::Duration::from_secs(3)
            {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            let _ = s.kill();
            let _ = s.wait();
        }
    }
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

/// CPU seconds (user and system) the process `pid` has used, from /proc/PID/stat (None if
/// it is gone).
pub fn process_cpu_seconds(pid: i32) -> Option<f64> {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): utime is the 14th field of
    // the line, stime the 15th.
    let rest: Vec<&str> = stat.rsplit(')').next()?.split_whitespace().collect();
    let ticks: f64 = rest
        .get(11..13)?
        .iter()
        .filter_map(|x| x.parse::<f64>().ok())
        .sum();
    Some(ticks / hz)
}
