//! `tessera bench fib`: lookup rates of our LPM structure against the reference trie, an
//! existing Rust crate and our DIR-24-8 (and with `--dpdk`, DPDK's rte_lpm and rte_fib,
//! see [`crate::dpdk`]), on one table, in one run.
//!
//! Workloads (4 Mi addresses each, seeded): `random-prefix` (a random prefix of the table,
//! a random address in it), `uniform` (uniformly random addresses), `one` (one address,
//! repeated). Modes: `single` (one call per address) and `batch` (256 addresses per call;
//! structures without a batched lookup loop over `single`). Each rate is the best of three
//! timed passes after a warm-up pass; the contenders of a workload take their passes in
//! turn (round by round), so that a noisy moment of the shared machine falls on all of
//! them alike, not on whichever happened to run then.

use crate::table::{Table, Table6};
use crate::Rng;
use fib::{BinaryTrie, BinaryTrie6, Dir24, Lpm, Poptrie, Poptrie6};
use serde_json::{json, Value};
use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::Instant;
use treebitmap::IpLookupTable;

extern crate ip_network_table_deps_treebitmap as treebitmap;

pub const LOOKUPS: usize = 1 << 22;
#[cfg(not(feature = "dpdk"))]
const NO_DPDK: &str = "this tessera was built without DPDK: run `bash scripts/setup --dpdk`, \
                       then build with `cargo build --release --features dpdk`";
const BATCH: usize = 256;

pub fn workloads(t: &Table, n: usize, seed: u64) -> Vec<(&'static str, Vec<u32>)> {
    let mut rng = Rng::new(seed);
    let random_prefix = (0..n)
        .map(|_| {
            let p = t.routes[rng.below(t.routes.len())].0;
            p.bits() | (rng.next_u64() as u32 & !fib::mask(p.len()))
        })
        .collect();
    let uniform = (0..n).map(|_| rng.next_u64() as u32).collect();
    let one = vec![t.routes.first().map(|r| r.0.bits()).unwrap_or(0); n];
    vec![
        ("random-prefix", random_prefix),
        ("uniform", uniform),
        ("one", one),
    ]
}

/// Best-of-three rate of `f` over `addrs`, after one warm-up pass.
fn rate<T>(addrs: &[T], mut f: impl FnMut(&[T]) -> u64) -> f64 {
    black_box(f(addrs));
    (0..3)
        .map(|_| {
            let t = Instant::now();
            black_box(f(addrs));
            addrs.len() as f64 / t.elapsed().as_secs_f64()
        })
        .fold(0.0, f64::max)
}

/// The rates of `passes` (each one pass over `n` addresses), as [`rate`] but interleaved:
/// a warm-up pass of each, then three rounds in which each takes one timed pass; the best
/// of each one's three.
fn rates(n: usize, passes: &mut [Box<dyn FnMut() -> u64 + '_>]) -> Vec<f64> {
    for p in passes.iter_mut() {
        black_box(p());
    }
    let mut best = vec![0.0f64; passes.len()];
    for _ in 0..3 {
        for (p, b) in passes.iter_mut().zip(&mut best) {
            let t = Instant::now();
            black_box(p());
            *b = b.max(n as f64 / t.elapsed().as_secs_f64());
        }
    }
    best
}

/// Looks `addrs` up in batches of [`BATCH`] through `look` (addresses, outputs), summing
/// the values so that no lookup can be skipped.
fn batched<T>(addrs: &[T], out: &mut [u32], look: impl Fn(&[T], &mut [u32])) -> u64 {
    addrs
        .chunks(BATCH)
        .map(|c| {
            look(c, &mut out[..c.len()]);
            out[..c.len()].iter().map(|&v| v as u64).sum::<u64>()
        })
        .sum()
}

fn single<T: Copy>(addrs: &[T], look: impl Fn(T) -> u32) -> u64 {
    addrs.iter().map(|&a| look(a) as u64).sum()
}

/// `dpdk`: also measure DPDK's rte_lpm and rte_fib (needs the `dpdk` feature).
pub fn run(
    t: &Table,
    name: &str,
    dpdk: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<Value, String> {
    #[cfg(feature = "dpdk")]
    let dpdk = if dpdk {
        Some(crate::dpdk::contenders(t, progress)?)
    } else {
        None
    };
    #[cfg(not(feature = "dpdk"))]
    if dpdk {
        return Err(NO_DPDK.into());
    }
    progress("building");
    let t0 = Instant::now();
    let mut rib = BinaryTrie::new();
    for &(p, v) in &t.routes {
        rib.insert(p, v);
    }
    let rib_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    let huge_before = anon_huge_kib();
    let pop = Poptrie::build(&rib);
    let pop_huge_kib = anon_huge_kib().saturating_sub(huge_before);
    let build_ms = t1.elapsed().as_secs_f64() * 1e3;
    let t3 = Instant::now();
    let dir24 = Dir24::build_in(&rib, small_pages_vec(1 << 24));
    let dir24_ms = t3.elapsed().as_secs_f64() * 1e3;
    let huge_before = anon_huge_kib();
    let dir24_huge = Dir24::build_in(&rib, huge_vec(1 << 24));
    let dir24_huge_kib = anon_huge_kib().saturating_sub(huge_before);
    let t2 = Instant::now();
    let mut tbm: IpLookupTable<Ipv4Addr, u32> = IpLookupTable::new();
    for &(p, v) in &t.routes {
        tbm.insert(p.addr(), p.len() as u32, v);
    }
    let tbm_ms = t2.elapsed().as_secs_f64() * 1e3;

    // Agreement first: a fast wrong answer is no result.
    let check = workloads(t, 1 << 16, 99);
    for (_, addrs) in &check {
        for &a in addrs {
            // (DPDK's structures check it too, where built.)
            #[cfg_attr(not(feature = "dpdk"), allow(unused_variables))]
            let want = agree(&rib, &pop, &tbm, a);
            #[cfg(feature = "dpdk")]
            if let Some(d) = &dpdk {
                d.check(a, want);
            }
        }
    }

    let mut results = Vec::new();
    for (wl, addrs) in workloads(t, LOOKUPS, 1) {
        progress(wl);
        let a = &addrs[..];
        let mut passes: Vec<Box<dyn FnMut() -> u64 + '_>> = vec![
            Box::new(|| single(a, |x| pop.lookup_raw(x))),
            Box::new(|| batched(a, &mut [0; BATCH], |c, o| pop.lookup_batch_raw(c, o))),
            Box::new(|| single(a, |x| dir24.lookup_raw(x))),
            Box::new(|| batched(a, &mut [0; BATCH], |c, o| dir24.lookup_batch_raw(c, o))),
            Box::new(|| single(a, |x| dir24_huge.lookup_raw(x))),
            Box::new(|| batched(a, &mut [0; BATCH], |c, o| dir24_huge.lookup_batch_raw(c, o))),
        ];
        #[cfg(feature = "dpdk")]
        if let Some(d) = &dpdk {
            passes.push(Box::new(|| d.lpm.pass_single(a)));
            passes.push(Box::new(|| d.lpm.pass_bulk(a)));
            passes.push(Box::new(|| d.lpm.pass_x4(a)));
            passes.push(Box::new(|| d.fib.pass_single(a)));
            passes.push(Box::new(|| d.fib.pass_bulk(a)));
        }
        let r = rates(a.len(), &mut passes);
        drop(passes);
        let (pop_single, pop_batch, d24_single, d24_batch, d24h_single, d24h_batch) =
            (r[0], r[1], r[2], r[3], r[4], r[5]);
        // The slow references take their passes alone.
        let trie_single = rate(&addrs, |a| single(a, |x| rib.lookup(x.into()).unwrap_or(0)));
        let tbm_single = rate(&addrs, |a| {
            single(a, |x| {
                tbm.longest_match(x.into()).map(|m| *m.2).unwrap_or(0)
            })
        });
        let ours = [
            ("poptrie", "single", pop_single),
            ("poptrie", "batch", pop_batch),
            ("dir-24-8", "single", d24_single),
            ("dir-24-8", "batch", d24_batch),
            ("dir-24-8-huge-pages", "single", d24h_single),
            ("dir-24-8-huge-pages", "batch", d24h_batch),
            ("binary-trie", "single", trie_single),
            ("binary-trie", "batch", trie_single),
            ("ip_network_table-deps-treebitmap", "single", tbm_single),
            ("ip_network_table-deps-treebitmap", "batch", tbm_single),
        ];
        for (s, mode, r) in ours {
            results.push(
                json!({"structure": s, "workload": wl, "mode": mode, "lookups_per_sec": r.round()}),
            );
        }
        #[cfg(feature = "dpdk")]
        if dpdk.is_some() {
            crate::dpdk::push_rates(&mut results, wl, &r);
        }
    }
    progress("updates");
    let updates = update_rate(t);
    progress("memory");
    let memory_probe = memory_probe(pop.memory_bytes(), LOOKUPS);
    let ratios = ratios(&results);
    #[allow(unused_mut)]
    let mut v = json!({
        "table": name,
        "prefixes": t.routes.len(),
        "next_hops": t.next_hops.len(),
        "build_ms": (build_ms * 10.0).round() / 10.0,
        "reference_trie_build_ms": rib_ms.round(),
        "treebitmap_build_ms": tbm_ms.round(),
        "dir24_build_ms": dir24_ms.round(),
        "dir24_memory_bytes": dir24.memory_bytes(),
        "dir24_huge_pages_kib": dir24_huge_kib,
        "memory_bytes": pop.memory_bytes(),
        "poptrie_huge_pages_kib": pop_huge_kib,
        "bytes_per_prefix": (pop.memory_bytes() as f64 / t.routes.len().max(1) as f64 * 100.0).round() / 100.0,
        "reference_trie_memory_bytes": rib.memory_bytes(),
        "updates_per_sec": updates["single"],
        "updates": updates,
        "memory_probe": memory_probe,
        "lookups_per_workload": LOOKUPS,
        "results": results,
        "ratios": Value::Object(ratios),
    });
    #[cfg(feature = "dpdk")]
    if let Some(d) = &dpdk {
        v["dpdk"] = json!({
            "huge_pages": d.huge_pages,
            "rte_lpm_build_ms": d.lpm_build_ms.round(),
            "rte_lpm_memory_bytes": d.lpm.memory_bytes(),
            "rte_fib_build_ms": d.fib_build_ms.round(),
        });
    }
    Ok(v)
}

/// The reference trie's answer for `a`, which Poptrie and the treebitmap must give too.
fn agree(
    rib: &BinaryTrie,
    pop: &Poptrie,
    tbm: &IpLookupTable<Ipv4Addr, u32>,
    a: u32,
) -> Option<u32> {
    let want = rib.lookup(a.into());
    assert_eq!(
        pop.lookup(a.into()),
        want,
        "poptrie disagrees at {}",
        Ipv4Addr::from(a)
    );
    assert_eq!(
        tbm.longest_match(a.into()).map(|m| *m.2),
        want,
        "treebitmap disagrees at {}",
        Ipv4Addr::from(a)
    );
    want
}

/// Poptrie's lookup rate over each other structure's, per workload and mode (those this
/// run measured).
fn ratios(results: &[Value]) -> serde_json::Map<String, Value> {
    let get = |s: &str, wl: &str, m: &str| {
        results
            .iter()
            .find(|r| r["structure"] == s && r["workload"] == wl && r["mode"] == m)
            .and_then(|r| r["lookups_per_sec"].as_f64())
            .unwrap_or(0.0)
    };
    let mut ratios = serde_json::Map::new();
    for other in [
        "dir-24-8",
        "dir-24-8-huge-pages",
        "binary-trie",
        "ip_network_table-deps-treebitmap",
        "rte_lpm",
        "rte_lpm-lookupx4",
        "rte_fib",
    ] {
        let mut m = serde_json::Map::new();
        for wl in ["random-prefix", "uniform", "one"] {
            for mode in ["single", "batch"] {
                if get(other, wl, mode) == 0.0 {
                    continue; // not measured in this run
                }
                m.insert(
                    format!("{wl}/{mode}"),
                    json!(
                        (get("poptrie", wl, mode) / get(other, wl, mode) * 100.0).round() / 100.0
                    ),
                );
            }
        }
        if !m.is_empty() {
            ratios.insert(format!("poptrie/{other}"), Value::Object(m));
        }
    }
    ratios
}

/// The IPv6 workloads, as [`workloads`]: `random-prefix`, `uniform` (over 2000::/3, the
/// global unicast space, since nearly all of the rest has no route), `one`.
pub fn workloads6(t: &Table6, n: usize, seed: u64) -> Vec<(&'static str, Vec<u128>)> {
    let mut rng = Rng::new(seed);
    let mut r128 = move || (rng.next_u64() as u128) << 64 | rng.next_u64() as u128;
    let random_prefix = (0..n)
        .map(|_| {
            let p = t.routes[(r128() % t.routes.len() as u128) as usize].0;
            p.bits() | (r128() & !fib::v6::mask6(p.len()))
        })
        .collect();
    let uniform = (0..n).map(|_| 1 << 125 | r128() >> 3).collect();
    let one = vec![t.routes.first().map(|r| r.0.bits()).unwrap_or(0); n];
    vec![
        ("random-prefix", random_prefix),
        ("uniform", uniform),
        ("one", one),
    ]
}

/// `tessera bench fib` on an IPv6 table: Poptrie6 against the reference trie (and with
/// `dpdk`, rte_lpm6 and rte_fib6), the same workloads, modes and JSON shape as [`run`];
/// `lookups` per workload ([`LOOKUPS`] for the command).
pub fn run6(
    t: &Table6,
    name: &str,
    dpdk: bool,
    lookups: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<Value, String> {
    #[cfg(feature = "dpdk")]
    let (dpdk, huge_pages) = if dpdk {
        let (c, huge) = crate::dpdk::contenders6(t, progress)?;
        (c, Some(huge))
    } else {
        (Vec::new(), None)
    };
    #[cfg(not(feature = "dpdk"))]
    if dpdk {
        return Err(NO_DPDK.into());
    }
    progress("building");
    let t0 = Instant::now();
    let mut rib = BinaryTrie6::new();
    for &(p, v) in &t.routes {
        rib.insert(p, v);
    }
    let rib_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    let huge_before = anon_huge_kib();
    let pop = Poptrie6::build(&rib);
    let pop_huge_kib = anon_huge_kib().saturating_sub(huge_before);
    let build_ms = t1.elapsed().as_secs_f64() * 1e3;

    // Agreement first: a fast wrong answer is no result.
    let mut out = vec![0u32; BATCH];
    for (_, addrs) in &workloads6(t, 1 << 16, 99) {
        for c in addrs.chunks(BATCH) {
            pop.lookup_batch_raw(c, &mut out[..c.len()]);
            for (&a, &o) in c.iter().zip(&out) {
                let want = rib.lookup(a.into());
                let at = std::net::Ipv6Addr::from(a);
                assert_eq!(pop.lookup(a.into()), want, "poptrie6 disagrees at {at}");
                assert_eq!(o, want.unwrap_or(fib::poptrie::NO_ROUTE), "batch at {at}");
                #[cfg(feature = "dpdk")]
                for d in &dpdk {
                    assert_eq!(d.lookup(a), want, "{} disagrees at {at}", d.name);
                }
            }
        }
    }

    let mut results = Vec::new();
    let mut push = |s: &str, wl: &str, mode: &str, r: f64| {
        results.push(
            json!({"structure": s, "workload": wl, "mode": mode, "lookups_per_sec": r.round()}),
        );
    };
    for (wl, addrs) in workloads6(t, lookups, 1) {
        progress(wl);
        #[cfg(feature = "dpdk")]
        let bytes: Vec<[u8; 16]> = addrs.iter().map(|a| a.to_be_bytes()).collect();
        let a = &addrs[..];
        #[cfg_attr(not(feature = "dpdk"), allow(unused_mut))]
        let mut names = vec![("poptrie", "single"), ("poptrie", "batch")];
        let mut passes: Vec<Box<dyn FnMut() -> u64 + '_>> = vec![
            Box::new(|| single(a, |x| pop.lookup_raw(x))),
            Box::new(|| batched(a, &mut [0; BATCH], |c, o| pop.lookup_batch_raw(c, o))),
        ];
        #[cfg(feature = "dpdk")]
        for d in &dpdk {
            let b = &bytes[..];
            names.push((d.name, "single"));
            passes.push(Box::new(move || d.pass_single(b)));
            names.push((d.name, "batch"));
            passes.push(Box::new(move || d.pass_bulk(b)));
        }
        let r = rates(a.len(), &mut passes);
        drop(passes);
        for ((s, mode), r) in names.into_iter().zip(r) {
            push(s, wl, mode, r);
        }
        // The reference trie, slow, takes its passes alone.
        let trie = rate(&addrs, |a| single(a, |x| rib.lookup(x.into()).unwrap_or(0)));
        push("binary-trie", wl, "single", trie);
        push("binary-trie", wl, "batch", trie);
    }
    progress("updates");
    let updates = update_rate6(t);
    let get = |s: &str, wl: &str, m: &str| {
        results
            .iter()
            .find(|r| r["structure"] == s && r["workload"] == wl && r["mode"] == m)
            .and_then(|r| r["lookups_per_sec"].as_f64())
            .unwrap_or(0.0)
    };
    let mut ratios = serde_json::Map::new();
    for other in ["binary-trie", "rte_lpm6", "rte_fib6"] {
        let mut m = serde_json::Map::new();
        for wl in ["random-prefix", "uniform", "one"] {
            for mode in ["single", "batch"] {
                if get(other, wl, mode) > 0.0 {
                    let r = get("poptrie", wl, mode) / get(other, wl, mode);
                    m.insert(format!("{wl}/{mode}"), json!((r * 100.0).round() / 100.0));
                }
            }
        }
        if !m.is_empty() {
            ratios.insert(format!("poptrie/{other}"), Value::Object(m));
        }
    }
    #[allow(unused_mut)]
    let mut v = json!({
        "table": name,
        "family": "ipv6",
        "prefixes": t.routes.len(),
        "next_hops": t.next_hops.len(),
        "structure": "poptrie6 (16-bit dir, a 16-bit wide node, 8-bit strides)",
        "build_ms": (build_ms * 10.0).round() / 10.0,
        "reference_trie_build_ms": rib_ms.round(),
        "memory_bytes": pop.memory_bytes(),
        "poptrie_huge_pages_kib": pop_huge_kib,
        "bytes_per_prefix": (pop.memory_bytes() as f64 / t.routes.len().max(1) as f64 * 100.0).round() / 100.0,
        "reference_trie_memory_bytes": rib.memory_bytes(),
        "updates_per_sec": updates["single"],
        "updates": updates,
        "memory_probe": memory_probe(pop.memory_bytes(), lookups),
        "lookups_per_workload": lookups,
        "results": results,
        "ratios": Value::Object(ratios),
    });
    #[cfg(feature = "dpdk")]
    if let Some(huge) = huge_pages {
        let mut d = json!({ "huge_pages": huge });
        for c in &dpdk {
            d[format!("{}_build_ms", c.name)] = json!(c.build_ms.round());
            d[format!("{}_tbl8s", c.name)] = json!(c.tbl8s);
        }
        v["dpdk"] = d;
    }
    Ok(v)
}

/// Table sizes of the growth run (the paper's, before the full table).
pub const GROWTH_SIZES: [usize; 4] = [10, 1_000, 10_000, 167_000];

/// `tessera bench fib --growth`: Poptrie's random-prefix lookups on several tables,
/// measured in one process in alternating rounds (each pass after an untimed warm-up
/// pass on the same table), so that a neighbour's load falls on every table alike.
/// Reports each table's median, lowest and highest rate over the rounds, and its median
/// as a ratio of the first table's.
pub fn growth(
    tables: &[(String, Table)],
    rounds: usize,
    dpdk: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<Value, String> {
    #[cfg(not(feature = "dpdk"))]
    if dpdk {
        return Err(NO_DPDK.into());
    }
    struct Entry {
        name: String,
        prefixes: usize,
        pop: Poptrie,
        addrs: Vec<u32>,
        batch: Vec<f64>,
        single: Vec<f64>,
        #[cfg(feature = "dpdk")]
        dpdk: Option<(crate::dpdk::Contenders, Vec<f64>, Vec<f64>)>,
    }
    let mut entries: Vec<Entry> = Vec::new();
    for (name, t) in tables {
        progress(&format!("building {name}"));
        let mut rib = BinaryTrie::new();
        for &(p, v) in &t.routes {
            rib.insert(p, v);
        }
        let pop = Poptrie::build(&rib);
        let addrs = workloads(t, LOOKUPS, 1).swap_remove(0).1;
        #[cfg(feature = "dpdk")]
        let dpdk = if dpdk {
            Some((
                crate::dpdk::contenders(t, progress)?,
                Vec::new(),
                Vec::new(),
            ))
        } else {
            None
        };
        for &a in addrs.iter().step_by(64) {
            let want = rib.lookup(a.into());
            assert_eq!(
                pop.lookup(a.into()),
                want,
                "poptrie disagrees at {} in {name}",
                Ipv4Addr::from(a)
            );
            #[cfg(feature = "dpdk")]
            if let Some((d, ..)) = &dpdk {
                d.check(a, want);
            }
        }
        entries.push(Entry {
            name: name.clone(),
            prefixes: t.routes.len(),
            pop,
            addrs,
            batch: Vec::new(),
            single: Vec::new(),
            #[cfg(feature = "dpdk")]
            dpdk,
        });
    }
    // One timed pass after an untimed one.
    let timed = |addrs: &[u32], pass: &mut dyn FnMut() -> u64| {
        black_box(pass());
        let t = Instant::now();
        black_box(pass());
        addrs.len() as f64 / t.elapsed().as_secs_f64()
    };
    let mut out = vec![0u32; BATCH];
    for r in 0..rounds {
        progress(&format!("round {} of {rounds}", r + 1));
        for e in &mut entries {
            let (pop, addrs) = (&e.pop, &e.addrs);
            e.batch.push(timed(addrs, &mut || {
                batched(addrs, &mut out, |c, o| pop.lookup_batch_raw(c, o))
            }));
            e.single
                .push(timed(addrs, &mut || single(addrs, |x| pop.lookup_raw(x))));
            #[cfg(feature = "dpdk")]
            if let Some((d, lpm, fib)) = &mut e.dpdk {
                lpm.push(timed(addrs, &mut || d.lpm.pass_bulk(addrs)));
                fib.push(timed(addrs, &mut || d.fib.pass_bulk(addrs)));
            }
        }
    }
    let stats = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    let summary = |v: &[f64]| {
        let (m, l, h) = stats(v);
        json!({"median": m.round(), "lowest": l.round(), "highest": h.round()})
    };
    let ratio = |a: f64, b: f64| (a / b * 100.0).round() / 100.0;
    let first = entries.first().map(|e| stats(&e.batch).0).unwrap_or(1.0);
    let first_single = entries.first().map(|e| stats(&e.single).0).unwrap_or(1.0);
    let rows: Vec<Value> = entries
        .iter()
        .map(|e| {
            json!({
                "table": e.name,
                "prefixes": e.prefixes,
                "memory_bytes": e.pop.memory_bytes(),
                "batch": summary(&e.batch),
                "single": summary(&e.single),
                "batch_ratio_to_first": ratio(stats(&e.batch).0, first),
                "single_ratio_to_first": ratio(stats(&e.single).0, first_single),
            })
        })
        .collect();
    #[allow(unused_mut)]
    let mut v = json!({
        "workload": "random-prefix",
        "structure": "poptrie",
        "rounds": rounds,
        "lookups_per_pass": LOOKUPS,
        "growth": rows,
    });
    #[cfg(feature = "dpdk")]
    if dpdk {
        let firsts = entries
            .first()
            .and_then(|e| e.dpdk.as_ref())
            .map(|(_, l, f)| (stats(l).0, stats(f).0))
            .unwrap_or((1.0, 1.0));
        let rows: Vec<Value> = entries
            .iter()
            .filter_map(|e| {
                let (_, l, f) = e.dpdk.as_ref()?;
                Some(json!({
                    "table": e.name,
                    "prefixes": e.prefixes,
                    "rte_lpm_batch": summary(l),
                    "rte_fib_batch": summary(f),
                    "rte_lpm_ratio_to_first": ratio(stats(l).0, firsts.0),
                    "rte_fib_ratio_to_first": ratio(stats(f).0, firsts.1),
                    "poptrie_batch_to_rte_lpm": ratio(stats(&e.batch).0, stats(l).0),
                    "poptrie_batch_to_rte_fib": ratio(stats(&e.batch).0, stats(f).0),
                }))
            })
            .collect();
        v["dpdk_growth"] = Value::Array(rows);
    }
    Ok(v)
}

/// An empty vector with room for `n` words, whose memory the kernel is asked to back with
/// transparent huge pages before anything touches it (DPDK backs rte_lpm with huge pages).
/// Advice only: where THP is off, the memory is ordinary pages, which `anon_huge_kib`
/// shows.
#[allow(unsafe_code)]
fn huge_vec(n: usize) -> Vec<u32> {
    const HUGE: usize = 2 << 20;
    let v: Vec<u32> = Vec::with_capacity(n);
    let start = (v.as_ptr() as usize).next_multiple_of(HUGE);
    let end = (v.as_ptr() as usize + n * 4) & !(HUGE - 1);
    if end > start {
        // SAFETY: the range lies inside `v`'s allocation, which is this process's own
        // memory; MADV_HUGEPAGE only advises how to back it and changes no contents.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
    v
}

/// An empty vector with room for `n` words, whose memory the kernel is asked to back with
/// ordinary pages: this binary's allocator advises every large block for huge pages
/// (`crates/tessera/src/huge.rs`), and `dir-24-8` is measured without them, beside
/// `dir-24-8-huge-pages`.
#[allow(unsafe_code)]
fn small_pages_vec(n: usize) -> Vec<u32> {
    let v: Vec<u32> = Vec::with_capacity(n);
    let start = v.as_ptr() as usize & !4095;
    let end = (v.as_ptr() as usize + n * 4).next_multiple_of(4096);
    // SAFETY: the range covers `v`'s allocation (rounded out to its pages, which the
    // allocation owns: large blocks are mappings of their own), this process's memory;
    // MADV_NOHUGEPAGE only advises how to back it and changes no contents.
    unsafe {
        libc::madvise(
            start as *mut libc::c_void,
            end - start,
            libc::MADV_NOHUGEPAGE,
        )
    };
    v
}

/// KiB of this process's anonymous memory in transparent huge pages (0 if unknown).
fn anon_huge_kib() -> u64 {
    crate::proc_field("/proc/self/smaps_rollup", "AnonHugePages").unwrap_or(0)
}

/// What this machine's memory allows at the structure's size, measured in the same run: an
/// array of `bytes` read at `n` random places, as independent loads and as chains of
/// two dependent loads (a Poptrie lookup is mostly two: `dir`, then a node with its leaf
/// beside it). A lookup rate near `dependent_pairs_per_sec` is bound by the memory system,
/// one far below it by the lookup's own instructions.
fn memory_probe(bytes: usize, n: usize) -> Value {
    let words = (bytes / 4).max(1);
    let arr: Vec<u32> = (0..words)
        .map(|i| ((i as u64 * 2_654_435_761) % words as u64) as u32)
        .collect();
    let mut rng = Rng::new(3);
    let idx: Vec<u32> = (0..n).map(|_| rng.below(words) as u32).collect();
    let independent = rate(&idx, |ix| ix.iter().map(|&i| arr[i as usize] as u64).sum());
    let pairs = rate(&idx, |ix| {
        ix.iter()
            .map(|&i| arr[arr[i as usize] as usize] as u64)
            .sum()
    });
    json!({
        "bytes": words * 4,
        "independent_loads_per_sec": independent.round(),
        "dependent_pairs_per_sec": pairs.round(),
    })
}

/// Update rates through the loss-free writer, with a reader holding and releasing
/// snapshots: `single` publishes after every change (withdraw then re-add a random prefix
/// of the table), `batched_1000` publishes once per 1,000 changes.
fn update_rate(t: &Table) -> Value {
    let mut rib = BinaryTrie::new();
    for &(p, v) in &t.routes {
        rib.insert(p, v);
    }
    update_rate_of::<fib::table::V4>(&t.routes, rib)
}

/// As [`update_rate`], through the IPv6 writer.
fn update_rate6(t: &Table6) -> Value {
    let mut rib = BinaryTrie6::new();
    for &(p, v) in &t.routes {
        rib.insert(p, v);
    }
    update_rate_of::<fib::table::V6>(&t.routes, rib)
}

/// The update rates of a writer of family `F` loaded with `rib` (which holds `routes`).
fn update_rate_of<F: fib::table::Family>(routes: &[(F::Prefix, u32)], rib: F::Rib) -> Value {
    if routes.is_empty() {
        return json!({"single": 0, "batched_1000": 0});
    }
    let (mut w, _reader) = fib::table::Writer::<F>::new(rib);
    let mut rng = Rng::new(5);
    let mut pick = || routes[rng.below(routes.len())];
    let n = 2000;
    let t0 = Instant::now();
    for _ in 0..n / 2 {
        let (p, v) = pick();
        w.remove(p);
        w.insert(p, v);
    }
    let single = n as f64 / t0.elapsed().as_secs_f64();
    let batches = 20;
    let t1 = Instant::now();
    for _ in 0..batches {
        let ch: Vec<_> = (0..500)
            .flat_map(|_| {
                let (p, v) = pick();
                [(p, None), (p, Some(v))]
            })
            .collect();
        w.apply(ch);
    }
    let batched = (batches * 1000) as f64 / t1.elapsed().as_secs_f64();
    json!({"single": single.round(), "batched_1000": batched.round(), "full_builds": w.full_builds})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(feature = "dpdk"))]
    #[test]
    fn dpdk_contenders_without_the_feature_are_a_clear_error() {
        let t = crate::table::synthetic(10, 1);
        let e = run(&t, "t", true, &mut |_| {}).expect_err("no DPDK in this build");
        assert!(e.contains("--features dpdk"), "{e}");
        let e = growth(&[("t".into(), t)], 1, true, &mut |_| {}).expect_err("no DPDK");
        assert!(e.contains("--features dpdk"), "{e}");
    }

    #[test]
    fn ipv6_run_reports_every_structure_and_workload() {
        let t = crate::table::synthetic6(2_000, 1);
        // The report's shape, not its rates: a sixteenth of the command's lookups.
        let v = run6(&t, "synthetic6", false, LOOKUPS / 16, &mut |_| {}).expect("runs");
        assert_eq!(v["prefixes"], 2_000);
        assert_eq!(v["family"], "ipv6");
        let rows = v["results"].as_array().expect("results");
        assert_eq!(rows.len(), 3 * 2 * 2);
        assert!(rows
            .iter()
            .all(|r| r["lookups_per_sec"].as_f64().unwrap() > 0.0));
        assert!(v["bytes_per_prefix"].as_f64().unwrap() > 0.0);
        assert!(v["ratios"]["poptrie/binary-trie"]["random-prefix/batch"]
            .as_f64()
            .is_some());
    }

    #[test]
    fn growth_measures_every_table_against_the_first() {
        let tables: Vec<(String, Table)> = [10, 1_000]
            .iter()
            .map(|&n| (format!("synthetic-{n}"), crate::table::synthetic(n, 1)))
            .collect();
        let v = growth(&tables, 1, false, &mut |_| {}).expect("runs");
        let rows = v["growth"].as_array().expect("rows");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["batch_ratio_to_first"], 1.0);
        assert_eq!(rows[1]["prefixes"], 1_000);
        for r in rows {
            for mode in ["batch", "single"] {
                let m = &r[mode];
                let (lo, med, hi) = (
                    m["lowest"].as_f64().unwrap(),
                    m["median"].as_f64().unwrap(),
                    m["highest"].as_f64().unwrap(),
                );
                assert!(0.0 < lo && lo <= med && med <= hi, "{r}");
            }
        }
    }
}
