//! DPDK's rte_lpm (DIR-24-8) and rte_fib (DIR-24-8 behind a RIB) as contenders of
//! `tessera bench fib --dpdk`, through `csrc/dpdk_contenders.c` (the `dpdk` feature).
//!
//! DPDK's environment starts once per process. With `huge`, its memory comes from the
//! system's pool of 2 MiB huge pages (`/proc/sys/vm/nr_hugepages`), as DPDK runs in
//! production; without, from ordinary pages (`--no-huge`).
#![allow(unsafe_code)]

use crate::table::{Table, Table6};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

extern "C" {
    fn tessera_dpdk_init(huge: c_int, mem_mb: u32, err: *mut c_char, errlen: usize) -> c_int;
    fn tessera_dpdk_error() -> *const c_char;
    fn tessera_lpm_create(name: *const c_char, max_rules: u32, tbl8s: u32) -> *mut c_void;
    fn tessera_lpm_add(lpm: *mut c_void, ip: u32, depth: u8, nh: u32) -> c_int;
    fn tessera_lpm_free(lpm: *mut c_void);
    fn tessera_lpm_lookup(lpm: *const c_void, ip: u32) -> u32;
    fn tessera_lpm_pass_single(lpm: *const c_void, ips: *const u32, n: usize) -> u64;
    fn tessera_lpm_pass_bulk(lpm: *const c_void, ips: *const u32, n: usize) -> u64;
    fn tessera_lpm_pass_x4(lpm: *const c_void, ips: *const u32, n: usize) -> u64;
    fn tessera_fib_create(name: *const c_char, max_routes: c_int, tbl8s: u32) -> *mut c_void;
    fn tessera_fib_add(fib: *mut c_void, ip: u32, depth: u8, nh: u32) -> c_int;
    fn tessera_fib_free(fib: *mut c_void);
    fn tessera_fib_lookup(fib: *mut c_void, ip: u32) -> u32;
    fn tessera_fib_pass_single(fib: *mut c_void, ips: *const u32, n: usize) -> u64;
    fn tessera_fib_pass_bulk(fib: *mut c_void, ips: *const u32, n: usize) -> u64;
    fn tessera_lpm6_create(name: *const c_char, max_rules: u32, tbl8s: u32) -> *mut c_void;
    fn tessera_lpm6_add(lpm: *mut c_void, ip: *const u8, depth: u8, nh: u32) -> c_int;
    fn tessera_lpm6_free(lpm: *mut c_void);
    fn tessera_lpm6_lookup(lpm: *mut c_void, ip: *const u8) -> u32;
    fn tessera_lpm6_pass_single(lpm: *mut c_void, ips: *const [u8; 16], n: usize) -> u64;
    fn tessera_lpm6_pass_bulk(lpm: *mut c_void, ips: *const [u8; 16], n: usize) -> u64;
    fn tessera_fib6_create(name: *const c_char, max_routes: c_int, tbl8s: u32) -> *mut c_void;
    fn tessera_fib6_add(fib: *mut c_void, ip: *const u8, depth: u8, nh: u32) -> c_int;
    fn tessera_fib6_free(fib: *mut c_void);
    fn tessera_fib6_lookup(fib: *mut c_void, ip: *const u8) -> u32;
    fn tessera_fib6_pass_single(fib: *mut c_void, ips: *const [u8; 16], n: usize) -> u64;
    fn tessera_fib6_pass_bulk(fib: *mut c_void, ips: *const [u8; 16], n: usize) -> u64;
}

/// What the lookups give for an address without a route.
pub const NO_ROUTE: u32 = u32::MAX;

/// MiB of memory DPDK's environment reserves: about 75 MiB for an rte_lpm (its 64 MiB
/// first table) and 130 MiB for an rte_fib with its RIB on a full table, for the five
/// tables of `bench fib --growth --dpdk`, with room to spare.
pub const MEMORY_MIB: u32 = 2048;

/// Starts DPDK's environment, once per process; later calls return the first result
/// (`huge` then only matters on the first call). Ok(whether huge pages back it).
pub fn init(huge: bool) -> Result<bool, String> {
    static INIT: OnceLock<Result<bool, String>> = OnceLock::new();
    INIT.get_or_init(|| {
        let mut err = [0 as c_char; 256];
        // SAFETY: `err` is writable for its length; the C side writes a terminated string.
        let r =
            unsafe { tessera_dpdk_init(huge as c_int, MEMORY_MIB, err.as_mut_ptr(), err.len()) };
        if r == 0 {
            Ok(huge)
        } else {
            // SAFETY: the C side terminated the message within `err`.
            Err(unsafe { CStr::from_ptr(err.as_ptr()) }
                .to_string_lossy()
                .into_owned())
        }
    })
    .clone()
}

/// 2 MiB huge pages free in the system's pool, from /proc/meminfo (0 if unknown).
pub fn free_huge_pages() -> u64 {
    crate::proc_field("/proc/meminfo", "HugePages_Free").unwrap_or(0)
}

fn last_error() -> String {
    // SAFETY: rte_strerror returns a static or thread-local terminated string.
    unsafe { CStr::from_ptr(tessera_dpdk_error()) }
        .to_string_lossy()
        .into_owned()
}

/// DPDK object names must be unique in the process.
fn unique_name(kind: &str) -> CString {
    static N: AtomicU32 = AtomicU32::new(0);
    CString::new(format!(
        "tessera-{kind}-{}",
        N.fetch_add(1, Ordering::Relaxed)
    ))
    .expect("no NUL in the name")
}

/// Second-level groups DIR-24-8 needs: /24s that hold a longer prefix, with headroom
/// for the groups an update may split off.
fn tbl8_groups(t: &Table) -> u32 {
    let mut v: Vec<u32> = t
        .routes
        .iter()
        .filter(|r| r.0.len() > 24)
        .map(|r| r.0.bits() >> 8)
        .collect();
    v.sort_unstable();
    v.dedup();
    v.len() as u32 + 256
}

/// Adds every route of `t` through `add` (rte_lpm_add or rte_fib_add, named `what` in
/// the error).
fn add_all(
    t: &Table,
    what: &str,
    mut add: impl FnMut(u32, u8, u32) -> c_int,
) -> Result<(), String> {
    for &(p, v) in &t.routes {
        let r = add(p.bits(), p.len(), v);
        if r < 0 {
            return Err(format!("{what} {p}: error {r}"));
        }
    }
    Ok(())
}

/// rte_lpm holding a table.
pub struct RteLpm {
    lpm: NonNull<c_void>,
    tbl8s: u32,
    rules: u32,
}

impl RteLpm {
    /// Builds it route by route with rte_lpm_add (DPDK's only way to fill it).
    /// Call [`init`] first.
    pub fn build(t: &Table) -> Result<RteLpm, String> {
        let tbl8s = tbl8_groups(t);
        let rules = t.routes.len().max(1) as u32;
        let name = unique_name("lpm");
        // SAFETY: `name` is a terminated string that outlives the call.
        let lpm = NonNull::new(unsafe { tessera_lpm_create(name.as_ptr(), rules, tbl8s) })
            .ok_or_else(|| format!("rte_lpm_create: {}", last_error()))?;
        let me = RteLpm { lpm, tbl8s, rules };
        // SAFETY: `lpm` is a live rte_lpm this value owns.
        add_all(t, "rte_lpm_add", |ip, len, v| unsafe {
            tessera_lpm_add(me.lpm.as_ptr(), ip, len, v)
        })?;
        Ok(me)
    }

    pub fn lookup(&self, a: u32) -> Option<u32> {
        // SAFETY: `lpm` is a live rte_lpm; lookups only read it.
        let v = unsafe { tessera_lpm_lookup(self.lpm.as_ptr(), a) };
        (v != NO_ROUTE).then_some(v)
    }

    /// One pass of rte_lpm_lookup over `a`; the sum of the next hops.
    pub fn pass_single(&self, a: &[u32]) -> u64 {
        // SAFETY: `a` is valid for `a.len()` reads; `lpm` is live.
        unsafe { tessera_lpm_pass_single(self.lpm.as_ptr(), a.as_ptr(), a.len()) }
    }

    /// One pass of rte_lpm_lookup_bulk in batches of 256.
    pub fn pass_bulk(&self, a: &[u32]) -> u64 {
        // SAFETY: as in `pass_single`.
        unsafe { tessera_lpm_pass_bulk(self.lpm.as_ptr(), a.as_ptr(), a.len()) }
    }

    /// One pass of rte_lpm_lookupx4 (four addresses per call, SSE).
    pub fn pass_x4(&self, a: &[u32]) -> u64 {
        // SAFETY: as in `pass_single`.
        unsafe { tessera_lpm_pass_x4(self.lpm.as_ptr(), a.as_ptr(), a.len()) }
    }

    /// What rte_lpm_create reserved: the 2^24-entry first table, the second-level groups
    /// and the rules, 4 bytes per entry and 8 per rule.
    pub fn memory_bytes(&self) -> usize {
        (1usize << 24) * 4 + self.tbl8s as usize * 256 * 4 + self.rules as usize * 8
    }
}

impl Drop for RteLpm {
    fn drop(&mut self) {
        // SAFETY: `lpm` was created by rte_lpm_create and is freed once, here.
        unsafe { tessera_lpm_free(self.lpm.as_ptr()) }
    }
}

/// rte_fib (type DIR24_8, 4-byte next hops) holding a table.
pub struct RteFib {
    fib: NonNull<c_void>,
}

impl RteFib {
    /// Builds it route by route with rte_fib_add. Call [`init`] first.
    pub fn build(t: &Table) -> Result<RteFib, String> {
        let name = unique_name("fib");
        let max = t.routes.len().max(1) as c_int;
        // SAFETY: `name` is a terminated string that outlives the call.
        let fib = NonNull::new(unsafe { tessera_fib_create(name.as_ptr(), max, tbl8_groups(t)) })
            .ok_or_else(|| format!("rte_fib_create: {}", last_error()))?;
        let me = RteFib { fib };
        // SAFETY: `fib` is a live rte_fib this value owns.
        add_all(t, "rte_fib_add", |ip, len, v| unsafe {
            tessera_fib_add(me.fib.as_ptr(), ip, len, v)
        })?;
        Ok(me)
    }

    pub fn lookup(&self, a: u32) -> Option<u32> {
        // SAFETY: `fib` is live; rte_fib_lookup_bulk only reads it.
        let v = unsafe { tessera_fib_lookup(self.fib.as_ptr(), a) };
        (v != NO_ROUTE).then_some(v)
    }

    /// One pass of rte_fib_lookup_bulk one address at a time (rte_fib has no single
    /// lookup).
    pub fn pass_single(&self, a: &[u32]) -> u64 {
        // SAFETY: `a` is valid for `a.len()` reads; `fib` is live.
        unsafe { tessera_fib_pass_single(self.fib.as_ptr(), a.as_ptr(), a.len()) }
    }

    /// One pass of rte_fib_lookup_bulk in batches of 256.
    pub fn pass_bulk(&self, a: &[u32]) -> u64 {
        // SAFETY: `a` is valid for `a.len()` reads; `fib` is live.
        unsafe { tessera_fib_pass_bulk(self.fib.as_ptr(), a.as_ptr(), a.len()) }
    }
}

impl Drop for RteFib {
    fn drop(&mut self) {
        // SAFETY: `fib` was created by rte_fib_create and is freed once, here.
        unsafe { tessera_fib_free(self.fib.as_ptr()) }
    }
}

/// Both contenders built on one table, for `bench fib --dpdk`.
pub struct Contenders {
    pub lpm: RteLpm,
    pub fib: RteFib,
    pub huge_pages: bool,
    pub lpm_build_ms: f64,
    pub fib_build_ms: f64,
}

impl Contenders {
    /// Panics unless both give `want` for `a`: a fast wrong answer is no result.
    pub fn check(&self, a: u32, want: Option<u32>) {
        let at = std::net::Ipv4Addr::from(a);
        assert_eq!(self.lpm.lookup(a), want, "rte_lpm disagrees at {at}");
        assert_eq!(self.fib.lookup(a), want, "rte_fib disagrees at {at}");
    }
}

/// Starts DPDK if it is not running yet (on huge pages if the pool has [`MEMORY_MIB`]
/// free, else on ordinary pages, saying so); Ok(whether huge pages back it).
fn start(progress: &mut dyn FnMut(&str)) -> Result<bool, String> {
    static STARTED: OnceLock<Result<bool, String>> = OnceLock::new();
    STARTED
        .get_or_init(|| {
            let huge = free_huge_pages() * 2 >= MEMORY_MIB as u64;
            if !huge {
                progress(&format!(
                    "DPDK on ordinary pages: the huge page pool has {} free 2 MiB pages, {} \
                     needed (echo {} > /proc/sys/vm/nr_hugepages reserves them)",
                    free_huge_pages(),
                    MEMORY_MIB / 2,
                    MEMORY_MIB / 2
                ));
            }
            init(huge)
        })
        .clone()
        .map_err(|e| format!("DPDK: {e}"))
}

/// The DPDK structures' rows of workload `wl` in `tessera bench fib`'s results, from `r`:
/// the rates of its passes, DPDK's from the seventh on (as `fib_bench::run` orders them).
pub fn push_rates(results: &mut Vec<serde_json::Value>, wl: &str, r: &[f64]) {
    for (s, mode, at) in [
        ("rte_lpm", "single", 6),
        ("rte_lpm", "batch", 7),
        ("rte_lpm-lookupx4", "batch", 8),
        ("rte_fib", "single", 9),
        ("rte_fib", "batch", 10),
    ] {
        let rate = r.get(at).copied().unwrap_or(0.0);
        results.push(serde_json::json!({"structure": s, "workload": wl, "mode": mode, "lookups_per_sec": rate.round()}));
    }
}

/// Starts DPDK (see [`start`]) and builds both IPv4 contenders.
pub fn contenders(t: &Table, progress: &mut dyn FnMut(&str)) -> Result<Contenders, String> {
    let huge_pages = start(progress)?;
    progress("building rte_fib (route by route)");
    let t0 = std::time::Instant::now();
    let fib = RteFib::build(t)?;
    let fib_build_ms = t0.elapsed().as_secs_f64() * 1e3;
    progress("building rte_lpm (route by route; a full table takes minutes)");
    let t0 = std::time::Instant::now();
    let lpm = RteLpm::build(t)?;
    let lpm_build_ms = t0.elapsed().as_secs_f64() * 1e3;
    Ok(Contenders {
        lpm,
        fib,
        huge_pages,
        lpm_build_ms,
        fib_build_ms,
    })
}

/// An IPv6 contender: rte_lpm6 or rte_fib6 (type TRIE, 4-byte next hops), each a 2^24
/// first table and 8-bit tables below it, holding a table.
pub struct Rte6 {
    ptr: NonNull<c_void>,
    pub name: &'static str,
    lookup: unsafe extern "C" fn(*mut c_void, *const u8) -> u32,
    single: unsafe extern "C" fn(*mut c_void, *const [u8; 16], usize) -> u64,
    bulk: unsafe extern "C" fn(*mut c_void, *const [u8; 16], usize) -> u64,
    free: unsafe extern "C" fn(*mut c_void),
    pub build_ms: f64,
    /// 8-bit tables reserved.
    pub tbl8s: u32,
}

/// 8-bit tables to reserve for a 24-bit-first trie holding `t`: twice the distinct leading
/// 24, 32, 40... bits that a longer prefix extends.
fn tbl8_groups6(t: &Table6) -> u32 {
    let mut n = 0;
    for depth in (24..128).step_by(8) {
        let mut v: Vec<u128> = t
            .routes
            .iter()
            .filter(|r| r.0.len() as u32 > depth)
            .map(|r| r.0.bits() >> (128 - depth))
            .collect();
        v.sort_unstable();
        v.dedup();
        n += v.len() as u32;
    }
    2 * n + 256
}

impl Rte6 {
    /// Builds `rte_lpm6` (`lpm` true) or `rte_fib6` route by route. Call [`init`] first.
    pub fn build(t: &Table6, lpm: bool) -> Result<Rte6, String> {
        // rte_fib6 reserves, per route longer than /24, the 8-bit levels below its
        // covering route (up to three for a /48), and refuses a route (ENOSPC) when the
        // reservations pass its pool; so its pool is that sum, not the tables it fills.
        let tbl8s = if lpm {
            tbl8_groups6(t)
        } else {
            t.routes
                .iter()
                .map(|r| (r.0.len() as u32).next_multiple_of(8).saturating_sub(24) / 8)
                .sum::<u32>()
                + 256
        };
        let rules = t.routes.len().max(1) as u32;
        let name = unique_name(if lpm { "lpm6" } else { "fib6" });
        let t0 = std::time::Instant::now();
        // SAFETY: `name` is a terminated string that outlives the call.
        let ptr = unsafe {
            if lpm {
                tessera_lpm6_create(name.as_ptr(), rules, tbl8s)
            } else {
                tessera_fib6_create(name.as_ptr(), rules as c_int, tbl8s)
            }
        };
        let what = if lpm { "rte_lpm6" } else { "rte_fib6" };
        let ptr = NonNull::new(ptr).ok_or_else(|| format!("{what}_create: {}", last_error()))?;
        let mut me = if lpm {
            Rte6 {
                ptr,
                name: what,
                lookup: tessera_lpm6_lookup,
                single: tessera_lpm6_pass_single,
                bulk: tessera_lpm6_pass_bulk,
                free: tessera_lpm6_free,
                build_ms: 0.0,
                tbl8s,
            }
        } else {
            Rte6 {
                ptr,
                name: what,
                lookup: tessera_fib6_lookup,
                single: tessera_fib6_pass_single,
                bulk: tessera_fib6_pass_bulk,
                free: tessera_fib6_free,
                build_ms: 0.0,
                tbl8s,
            }
        };
        for &(p, v) in &t.routes {
            let ip = p.bits().to_be_bytes();
            // SAFETY: `ptr` is live and owned by `me`; `ip` is 16 readable bytes.
            let r = unsafe {
                if lpm {
                    tessera_lpm6_add(me.ptr.as_ptr(), ip.as_ptr(), p.len(), v)
                } else {
                    tessera_fib6_add(me.ptr.as_ptr(), ip.as_ptr(), p.len(), v)
                }
            };
            if r < 0 {
                return Err(format!("{what}_add {p}: error {r}"));
            }
        }
        me.build_ms = t0.elapsed().as_secs_f64() * 1e3;
        Ok(me)
    }

    pub fn lookup(&self, a: u128) -> Option<u32> {
        let ip = a.to_be_bytes();
        // SAFETY: `ptr` is live; lookups only read it and the 16 bytes of `ip`.
        let v = unsafe { (self.lookup)(self.ptr.as_ptr(), ip.as_ptr()) };
        (v != NO_ROUTE).then_some(v)
    }

    /// One pass of single lookups; the sum of the next hops ([`NO_ROUTE`] for a miss).
    pub fn pass_single(&self, a: &[[u8; 16]]) -> u64 {
        // SAFETY: `a` is valid for `a.len()` addresses; `ptr` is live.
        unsafe { (self.single)(self.ptr.as_ptr(), a.as_ptr(), a.len()) }
    }

    /// One pass of bulk lookups in batches of 256.
    pub fn pass_bulk(&self, a: &[[u8; 16]]) -> u64 {
        // SAFETY: as in `pass_single`.
        unsafe { (self.bulk)(self.ptr.as_ptr(), a.as_ptr(), a.len()) }
    }
}

impl Drop for Rte6 {
    fn drop(&mut self) {
        // SAFETY: `ptr` was created by the matching create function and is freed once.
        unsafe { (self.free)(self.ptr.as_ptr()) }
    }
}

/// Starts DPDK (see [`start`]) and builds rte_lpm6 and rte_fib6 on `t`; Ok with whether
/// huge pages back them.
pub fn contenders6(
    t: &Table6,
    progress: &mut dyn FnMut(&str),
) -> Result<(Vec<Rte6>, bool), String> {
    let huge = start(progress)?;
    progress("building rte_lpm6 and rte_fib6 (route by route)");
    Ok((vec![Rte6::build(t, true)?, Rte6::build(t, false)?], huge))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fib::{BinaryTrie, Lpm};

    /// Both contenders agree with the reference trie on a synthetic table, so that their
    /// rates in `bench fib --dpdk` are rates of right answers.
    #[test]
    fn dpdk_contenders_agree_with_the_reference_trie() {
        init(false).expect("DPDK's environment starts without huge pages");
        let t = crate::table::synthetic(20_000, 7);
        let mut rib = BinaryTrie::new();
        for &(p, v) in &t.routes {
            rib.insert(p, v);
        }
        let lpm = RteLpm::build(&t).expect("rte_lpm builds");
        let fib = RteFib::build(&t).expect("rte_fib builds");
        let mut long = 0;
        for (_, addrs) in crate::fib_bench::workloads(&t, 1 << 15, 3) {
            for a in addrs {
                let want = rib.lookup(a.into());
                assert_eq!(
                    lpm.lookup(a),
                    want,
                    "rte_lpm at {}",
                    std::net::Ipv4Addr::from(a)
                );
                assert_eq!(
                    fib.lookup(a),
                    want,
                    "rte_fib at {}",
                    std::net::Ipv4Addr::from(a)
                );
            }
        }
        for &(p, _) in t.routes.iter().filter(|r| r.0.len() > 24) {
            long += 1;
            let a = p.bits();
            assert_eq!(lpm.lookup(a), rib.lookup(a.into()));
            assert_eq!(fib.lookup(a), rib.lookup(a.into()));
        }
        assert!(long > 0, "the table has prefixes longer than /24");
        // Every pass sums the next hops its single lookups give (NO_ROUTE for a miss).
        let addrs: Vec<u32> = crate::fib_bench::workloads(&t, 10_000, 5)
            .into_iter()
            .flat_map(|w| w.1)
            .chain(t.routes.iter().map(|r| r.0.bits()))
            .collect();
        let want = |f: &dyn Fn(u32) -> Option<u32>| -> u64 {
            addrs.iter().map(|&a| f(a).unwrap_or(NO_ROUTE) as u64).sum()
        };
        let sum = want(&|a| rib.lookup(a.into()));
        assert!(
            addrs.iter().any(|&a| rib.lookup(a.into()).is_none()),
            "some misses"
        );
        assert_eq!(lpm.pass_single(&addrs), sum);
        assert_eq!(lpm.pass_bulk(&addrs), sum);
        assert_eq!(lpm.pass_x4(&addrs), sum);
        assert_eq!(fib.pass_bulk(&addrs), sum);
        assert_eq!(fib.pass_single(&addrs), sum);
    }

    /// rte_lpm6 and rte_fib6 agree with the reference trie on a synthetic IPv6 table,
    /// single and bulk.
    #[test]
    fn dpdk_ipv6_contenders_agree_with_the_reference_trie() {
        init(false).expect("DPDK's environment starts without huge pages");
        let t = crate::table::synthetic6(20_000, 7);
        let mut rib = fib::BinaryTrie6::new();
        for &(p, v) in &t.routes {
            rib.insert(p, v);
        }
        let addrs: Vec<u128> = crate::fib_bench::workloads6(&t, 1 << 14, 3)
            .into_iter()
            .flat_map(|w| w.1)
            .chain(t.routes.iter().map(|r| r.0.bits()))
            .collect();
        let bytes: Vec<[u8; 16]> = addrs.iter().map(|a| a.to_be_bytes()).collect();
        let sum: u64 = addrs
            .iter()
            .map(|&a| rib.lookup(a.into()).unwrap_or(NO_ROUTE) as u64)
            .sum();
        assert!(addrs.iter().any(|&a| rib.lookup(a.into()).is_none()));
        for lpm in [true, false] {
            let c = Rte6::build(&t, lpm).expect("builds");
            for &a in &addrs {
                assert_eq!(
                    c.lookup(a),
                    rib.lookup(a.into()),
                    "{} at {}",
                    c.name,
                    std::net::Ipv6Addr::from(a)
                );
            }
            assert_eq!(c.pass_single(&bytes), sum, "{}", c.name);
            assert_eq!(c.pass_bulk(&bytes), sum, "{}", c.name);
        }
    }
}
