//! The run time of the fast path's programs as the kernel counts it while asked to
//! (`BPF_ENABLE_STATS`, `kernel.bpf_stats_enabled`): `bench forward` reports each
//! contender's nanoseconds per frame in its programs from it, a cost the rig's noise
//! (the generator, the sinks, the other tenants of the cores) does not blur as it blurs a
//! peak rate.

use libbpf_rs::libbpf_sys;
use libbpf_rs::query::ProgInfoIter;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// The programs of the forwarder's fast path (`bpf/forward.bpf.c`): XDP and tcx.
pub const FORWARDER_PROGRAMS: [&str; 2] = ["tessera_fast", "tessera_fast_tc"];

/// The kernel counts every program's run time while this is held.
pub struct RunTimeStats(#[allow(dead_code)] OwnedFd);

impl RunTimeStats {
    pub fn enable() -> io::Result<RunTimeStats> {
        // SAFETY: bpf(BPF_ENABLE_STATS) takes no pointer of ours; the descriptor it returns
        // is new and ours to own.
        let fd = unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) };
        if fd < 0 {
            return Err(io::Error::from_raw_os_error(-fd));
        }
        // SAFETY: fd is a descriptor just returned to us and owned nowhere else.
        Ok(RunTimeStats(unsafe { OwnedFd::from_raw_fd(fd) }))
    }
}

/// (nanoseconds run, runs) of every loaded program named one of `names`, summed: the
/// kernel's counts since each was loaded, while stats were enabled.
pub fn run_time(names: &[&str]) -> (u64, u64) {
    ProgInfoIter::default()
        .filter(|p| names.iter().any(|n| p.name.to_str() == Some(n)))
        .fold((0, 0), |(t, n), p| (t + p.run_time_ns, n + p.run_cnt))
}
