//! `tessera bench balancer`: the LB's packets per second per core, beside the forwarder's,
//! measured in one run.
//!
//! In memory (no system calls, one thread): 64-byte frames through the LB's whole path,
//! copy into a buffer included, from outside to the back-ends (classify, flow hash, table,
//! MAC rewrite, 802.1Q tag) for each balancing mode with one flow and 65,536 flows, and
//! from the back-ends to outside (untag, MAC rewrite); and the forwarder's path on the same
//! frames with a 10-route table. Through the lab: the same generator at its highest rate
//! through labs/multistage.toml (LB, back-end, LB) and through labs/single-router.toml (our
//! forwarder alone), and the zero-loss rate found by a binary search below it; with
//! `--fast-path`, a second pass with every element's fast path.

use crate::forward_bench::{lab_mac, lab_point, realtime_napi, threaded_napi, SinkKind};
use crate::pipeline_bench::{frame, measure};
use dataplane::balancer::{Balancer, Mode};
use dataplane::{Event, TxQueues};
use serde_json::{json, Value};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const BATCH: usize = 256;

/// Packets per second of the LB on `frames` arriving on `port`, for `time`.
fn measure_lb(mode: Mode, frames: &[Vec<u8>], port: u16, time: Duration) -> (f64, u64) {
    let (mut b, now) = dataplane::fuzzing::balancer_with(mode);
    let mut tx = TxQueues::new(2);
    let mut i = 0;
    let mut run = |b: &mut Balancer, n: usize| {
        for _ in 0..n {
            for _ in 0..BATCH {
                let mut p = b.pool.get();
                p.data.extend_from_slice(&frames[i]);
                p.meta.rx_port = port;
                i = if i + 1 == frames.len() { 0 } else { i + 1 };
                b.process(p, now, &mut tx);
            }
            for q in tx.queues.iter_mut() {
                for p in q.drain(..) {
                    b.pool.put(p);
                }
            }
        }
    };
    run(&mut b, 200);
    let done =
        |b: &Balancer| b.counters.events(Event::Balanced) + b.counters.events(Event::IntToExt);
    let before = done(&b);
    let t = Instant::now();
    let mut sent = 0u64;
    while t.elapsed() < time {
        run(&mut b, 64);
        sent += (64 * BATCH) as u64;
    }
    let pps = sent as f64 / t.elapsed().as_secs_f64();
    (pps, sent - (done(&b) - before))
}

/// The in-memory matrix.
pub fn in_memory(time: Duration, progress: &mut dyn FnMut(&str)) -> Vec<Value> {
    // The same frames for both: to the forwarder's MAC, and to the LB's external MAC.
    let dst = Ipv4Addr::new(10, 2, 0, 10);
    let one = vec![frame(dst, 1)];
    let many: Vec<Vec<u8>> = (0..65_536).map(|i| frame(dst, i as u16)).collect();
    let to_lb = |fs: &[Vec<u8>]| -> Vec<Vec<u8>> {
        fs.iter()
            .map(|f| {
                let mut f = f.clone();
                f[0..6].copy_from_slice(&dataplane::fuzzing::LB_EXT_MAC.0);
                f
            })
            .collect()
    };
    let (one_lb, many_lb) = (to_lb(&one), to_lb(&many));
    // From a back-end, tagged with VLAN 10, to an outside host.
    let int_frames: Vec<Vec<u8>> = one
        .iter()
        .map(|f| {
            let mut f = f.clone();
            f[0..6].copy_from_slice(&[2, 0, 0, 0, 0x10, 1]);
            wire::ethernet::push_vlan(&mut f, 10);
            f
        })
        .collect();
    let mut rows = Vec::new();
    let table = crate::table::synthetic(10, 10);
    for (flows, frames, lb_frames) in [("one", &one, &one_lb), ("many", &many, &many_lb)] {
        progress(&format!("forwarder, {flows} flow(s)"));
        let (fwd, fwd_lost) = measure(&table, frames, time);
        rows.push(json!({"element": "forwarder", "path": "route (10 routes)", "flows": flows, "pps_per_core": fwd.round(), "not_forwarded": fwd_lost}));
        for mode in [Mode::RoundRobin, Mode::Hash, Mode::Maglev] {
            progress(&format!("balancer {mode:?}, {flows} flow(s)"));
            let (pps, lost) = measure_lb(mode, lb_frames, 0, time);
            rows.push(json!({"element": "balancer", "path": format!("balance ({})", serde_json::to_value(mode).unwrap_or_default().as_str().unwrap_or("")), "flows": flows, "pps_per_core": pps.round(), "not_forwarded": lost, "ratio_to_forwarder": (pps / fwd * 100.0).round() / 100.0}));
        }
    }
    progress("balancer int-to-ext");
    let (fwd, _) = measure(&table, &one, time);
    let (pps, lost) = measure_lb(Mode::Maglev, &int_frames, 1, time);
    rows.push(json!({"element": "balancer", "path": "int-to-ext", "flows": "one", "pps_per_core": pps.round(), "not_forwarded": lost, "ratio_to_forwarder": (pps / fwd * 100.0).round() / 100.0}));
    rows
}

/// Options of the lab part.
pub struct LabOpts {
    pub exe: PathBuf,
    pub repo: PathBuf,
    pub seconds: f64,
    /// Packet I/O backends the elements run on, one pass each (empty: their configs').
    pub io: Vec<String>,
    /// Also a pass with every element's fast path (`--fast-path`: the forwarders' and, on
    /// AF_XDP ports, the LBs'), the switch's and the hosts' ports with GRO on (a veth takes
    /// frames an XDP program redirects to it only then).
    pub fast_path: bool,
    /// The elements' ports' NAPI threads at SCHED_FIFO priority 50 (`--rt-napi`).
    pub rt_napi: bool,
}

/// Binary-search steps of the zero-loss rate through a lab.
const SEARCHES: usize = 6;

#[derive(Clone, Copy)]
/// A path through a lab: topology, source host, first hop's interface, destination, sink.
struct LabPath {
    topo: &'static str,
    src: &'static str,
    next_hop: (&'static str, &'static str),
    dst: &'static str,
    sink: &'static str,
}

const MULTISTAGE: LabPath = LabPath {
    topo: "labs/multistage.toml",
    src: "a1",
    next_hop: ("lba", "lba-ext"),
    dst: "10.2.0.10",
    sink: "b1",
};

const SINGLE: LabPath = LabPath {
    topo: "labs/single-router.toml",
    src: "src1",
    next_hop: ("r", "r-eth0"),
    dst: "10.3.0.10",
    sink: "sink1",
};

fn through_lab(
    opts: &LabOpts,
    path: &LabPath,
    name: &str,
    flows: u16,
    io: Option<&String>,
    fast: bool,
) -> Result<Value, String> {
    let LabPath {
        topo,
        src,
        next_hop,
        dst,
        sink,
    } = *path;
    let mut l = lab::Lab::load(&opts.repo.join(topo), Some(name), opts.exe.clone())?;
    l.io = io.cloned();
    // With it, the lab turns GRO on on the switch's ports and the hosts' interfaces.
    l.fast_path = Some(fast);
    let _ = l.down();
    l.up()?;
    let r = (|| {
        let src_addr = l
            .topo
            .host
            .iter()
            .find(|h| h.name == src)
            .and_then(|h| h.interfaces[0].address.clone())
            .unwrap_or_default();
        let src_addr = src_addr.split('/').next().unwrap_or("").to_string();
        // Resolve the path first.
        lab::cmd::run(
            "ip",
            &[
                "netns",
                "exec",
                &l.ns(src),
                "ping",
                "-c",
                "2",
                "-i",
                "0.2",
                "-W",
                "2",
                dst,
            ],
        )?;
        let napi = element_napi(&l, opts.rt_napi)?;
        let mac = lab_mac(&l, next_hop.0, next_hop.1)?;
        let args: Vec<String> = [
            "--dst-mac",
            &mac,
            "--src",
            &src_addr,
            "--dst",
            dst,
            "--flows",
            &flows.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // One point of 64-byte frames at `rate` from the source to the sink.
        let point = |rate: String| {
            let gens = [(src, args.clone(), rate)];
            lab_point(
                &l,
                &opts.exe,
                opts.seconds,
                64,
                &gens,
                &[sink],
                SinkKind::AfPacket,
            )
        };
        let before = element_load(&l, &napi);
        let p = point("max".to_string())?;
        let after = element_load(&l, &napi);
        // The zero-loss rate: a binary search on the rate asked for, below what the
        // generator offered at its maximum; the highest load actually offered that
        // arrived whole.
        let (mut lo, mut hi, mut zero_loss) = (0.0f64, p.offered_pps, 0.0f64);
        for _ in 0..SEARCHES {
            let mid = (lo + hi) / 2.0;
            let q = point(format!("{mid:.0}"))?;
            if q.lost == 0 {
                lo = mid;
                zero_loss = zero_loss.max(q.offered_pps);
            } else {
                hi = mid;
            }
        }
        // The elements' cost where every frame arrives (at the overload point above they
        // also spend work on frames dropped at their rings): a longer point at the rate
        // the search found.
        let at_zero_loss = if lo > 0.0 {
            let before = element_load(&l, &napi);
            let gens = [(src, args.clone(), format!("{lo:.0}"))];
            let q = lab_point(
                &l,
                &opts.exe,
                3.0 * opts.seconds,
                64,
                &gens,
                &[sink],
                SinkKind::AfPacket,
            )?;
            let after = element_load(&l, &napi);
            json!({"offered_pps": q.offered_pps.round(), "lost": q.lost,
                "elements": element_rows(&before, &after)})
        } else {
            Value::Null
        };
        Ok(json!({"topology": topo, "flows": flows, "fast_path": fast,
            "offered_pps": p.offered_pps.round(),
            "received_pps": p.forwarded_pps.round(), "sent": p.sent, "received": p.received,
            "lost": p.lost, "zero_loss_pps": zero_loss.round(),
            "elements": element_rows(&before, &after), "at_zero_loss": at_zero_loss}))
    })();
    let _ = l.down();
    r
}

/// Per element, between two loads: frames received over CPU seconds used, i.e. packets
/// per second per core as the element ran in the lab, whatever else shared the cores. Its
/// process alone (`pps_per_core`, frames its user-space ports took), and with its ports'
/// receive work in the kernel (`frames_per_cpu_s`: every frame it took, fast path
/// included, over its process's and its ports' NAPI threads' CPU seconds). CPU time
/// comes in ticks of 10 ms: below 0.05 s, no rate.
pub(crate) fn element_rows(before: &[ElementLoad], after: &[ElementLoad]) -> Vec<Value> {
    after
        .iter()
        .filter_map(|a| {
            let b = before.iter().find(|b| b.name == a.name)?;
            let (drx, dcpu) = (a.rx.saturating_sub(b.rx), a.cpu - b.cpu);
            let dnapi = a.napi_cpu - b.napi_cpu;
            let pps = if dcpu >= 0.05 { drx as f64 / dcpu } else { 0.0 };
            let fast = a.fast.saturating_sub(b.fast);
            let all = dcpu + dnapi;
            let per_cpu = if all >= 0.05 {
                (drx + fast) as f64 / all
            } else {
                0.0
            };
            Some(json!({"element": a.name, "rx_packets": drx,
                "cpu_s": (dcpu * 100.0).round() / 100.0, "pps_per_core": pps.round(),
                "fast_path_packets": fast, "napi_threads": a.napi_threads,
                "napi_cpu_s": (dnapi * 100.0).round() / 100.0,
                "frames_per_cpu_s": per_cpu.round()}))
        })
        .collect()
}

/// What an element had done at one moment.
pub(crate) struct ElementLoad {
    name: String,
    /// Frames received on all its user-space ports.
    rx: u64,
    /// CPU seconds its process used.
    cpu: f64,
    /// CPU seconds its ports' NAPI threads used: the kernel's receive work on its ports,
    /// its XDP programs (a fast path among them) included.
    napi_cpu: f64,
    napi_threads: usize,
    /// Frames its fast path took (in the kernel's receive work, so not in `rx` and not in
    /// `cpu`).
    fast: u64,
}

/// Each element's ports' NAPI threads (see [`threaded_napi`]): a port without NAPI (no
/// XDP program and no GRO, as with `--io packet`) has none, and its receive work stays in
/// the sender's context, charged to no element.
pub(crate) fn element_napi(l: &lab::Lab, rt: bool) -> Result<Vec<(String, Vec<i32>)>, String> {
    let mut v = Vec::new();
    for e in &l.topo.element {
        let prefix = format!("{}:", e.name);
        let mut pids = Vec::new();
        for link in &l.topo.link {
            for end in [&link.a, &link.b] {
                if let Some(ifname) = end.strip_prefix(&prefix) {
                    // Writing `threaded` fails on an interface without NAPI: none then.
                    pids.extend(threaded_napi(l, &e.name, ifname).unwrap_or_default());
                }
            }
        }
        if rt {
            realtime_napi(&pids).map_err(|err| format!("--rt-napi: {}: {err}", e.name))?;
        }
        v.push((e.name.clone(), pids));
    }
    Ok(v)
}

/// The load of each running element.
pub(crate) fn element_load(l: &lab::Lab, napi: &[(String, Vec<i32>)]) -> Vec<ElementLoad> {
    let mut v = Vec::new();
    for e in &l.topo.element {
        let pid = std::fs::read_to_string(l.run_dir().join(format!("{}.pid", e.name)))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok());
        let Some(pid) = pid else { continue };
        let Some(cpu) = crate::process_cpu_seconds(pid) else {
            continue;
        };
        let threads: &[i32] = napi
            .iter()
            .find(|(n, _)| n == &e.name)
            .map(|(_, p)| p.as_slice())
            .unwrap_or(&[]);
        let napi_cpu = threads
            .iter()
            .filter_map(|&t| crate::process_cpu_seconds(t))
            .sum();
        let c = control::ctlsock::request(&l.control_socket(&e.name), "counters").ok();
        let rx = c
            .as_ref()
            .and_then(|c| {
                c["interfaces"]
                    .as_object()
                    .map(|m| m.values().filter_map(|i| i["rx_packets"].as_u64()).sum())
            })
            .unwrap_or(0);
        let fast = c
            .as_ref()
            .and_then(|c| c["fast_path"]["forwarded"].as_u64())
            .unwrap_or(0);
        v.push(ElementLoad {
            name: e.name.clone(),
            // The interfaces' counts hold the fast path's frames too.
            rx: rx.saturating_sub(fast),
            cpu,
            napi_cpu,
            napi_threads: threads.len(),
            fast,
        });
    }
    v
}

/// The lab part: the multistage router and the single router under the same generator.
pub fn in_lab(opts: &LabOpts, progress: &mut dyn FnMut(&str)) -> Result<Vec<Value>, String> {
    let name = format!("bl{}", std::process::id());
    let mut rows = Vec::new();
    let ios: Vec<Option<&String>> = if opts.io.is_empty() {
        vec![None]
    } else {
        opts.io.iter().map(Some).collect()
    };
    let passes: &[bool] = if opts.fast_path {
        &[false, true]
    } else {
        &[false]
    };
    for io in ios {
        for &fast in passes {
            let on = format!(
                "{}{}",
                io.map(|b| format!(", io {b}")).unwrap_or_default(),
                if fast { ", fast path" } else { "" }
            );
            for flows in [1u16, 64] {
                progress(&format!("lab: multistage router, {flows} flow(s){on}"));
                let mut r = through_lab(opts, &MULTISTAGE, &name, flows, io, fast)?;
                r["io"] = json!(io);
                rows.push(r);
                progress(&format!(
                    "lab: single router (our forwarder), {flows} flow(s){on}"
                ));
                let mut r = through_lab(opts, &SINGLE, &name, flows, io, fast)?;
                r["io"] = json!(io);
                rows.push(r);
            }
        }
    }
    Ok(rows)
}

/// The whole benchmark.
pub fn run(
    time: Duration,
    lab: Option<&LabOpts>,
    progress: &mut dyn FnMut(&str),
) -> Result<Value, String> {
    let mem = in_memory(time, progress);
    let labrows = match lab {
        Some(o) => in_lab(o, progress)?,
        None => Vec::new(),
    };
    Ok(
        json!({"bench": "balancer", "frame_bytes": 64, "seconds_per_point": time.as_secs_f64(), "in_memory": mem, "lab": labrows}),
    )
}

/// The repository root, from the binary's location or the working directory.
pub fn repo_root(exe: &Path) -> PathBuf {
    let mut d = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    while !d.join("labs/multistage.toml").exists() {
        if !d.pop() {
            return PathBuf::from(".");
        }
    }
    d
}
