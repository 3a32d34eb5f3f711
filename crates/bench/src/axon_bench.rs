//! `tessera bench axon` (issue 15), in one run:
//!
//! - **Route setup rate** of the control plane, in memory: two Axons joined by a link, a
//!   host port each; N hosts on one ask by ARP for N hosts on the other; each answers the
//!   far Axon's ARP. Counted: setups per second (the ARP request in, the Axon-ARP
//!   exchange, both routes installed, the ARP reply out), both Axons' work on one core.
//! - **Per-hop latency**: one-way latency (the sink's p50 and p99, 64-byte frames at a
//!   light load) from h1 to a host one, two and three switches away on a line of three
//!   Axons and on a line of three Linux bridges; the per-hop figure is the slope of a
//!   least-squares line over the hop count, so that what the hosts and the generator add
//!   cancels out.
//! - **Line against ring**: six flows, each host to one on another Axon, over links of
//!   `--link-mbps` (Axon ports shaped): the aggregate UDP rate (iperf3 at the link rate
//!   each) and TCP rate (iperf3), on the line and on the ring, as in the thesis's
//!   Table 4.1.
//! - **A cut ring link**: a UDP flow whose route uses the link ax1-ax3; the link is set
//!   down; measured: when ax1's path to ax3 changed (polled), and the longest gap in the
//!   flow at the sink (its sequence-number trace).
//! - **Forwarding rate**: 64-byte frames at the generator's highest rate from h1 to h2
//!   through one Axon and through one Linux bridge, with the Axon's CPU seconds.
//! - **Transit**: 64-byte frames from h1 to h5 over the unshaped line, passing through
//!   ax2, with the Axons' fast path (the default) and without (`fast_path = false`): the
//!   rate at the generator's highest, the one-way latency at 10 kpps, ax2's CPU seconds
//!   and the frames its programs forwarded.

use crate::forward_bench::{lab_mac, lab_point, SinkKind};
use dataplane::axon::{Axon, AxonConfig};
use dataplane::buf::{Pkt, TxQueues};
use dataplane::switch::PortConfig;
use serde_json::{json, Value};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::MacAddr;

pub struct AxonOpts {
    pub exe: PathBuf,
    pub out: PathBuf,
    /// Route setups measured in memory.
    pub setups: usize,
    /// Capacity of the links between Axons (Mbit/s) for line against ring.
    pub link_mbps: u64,
    /// Seconds per measurement.
    pub seconds: f64,
    pub io: Option<String>,
}

fn write(path: &Path, s: &str) -> Result<(), String> {
    std::fs::write(path, s).map_err(|e| format!("{}: {e}", path.display()))
}

/// Host i (1..=6) and its address; hosts 2k-1 and 2k are on Axon (or bridge) k.
fn host_ip(i: usize) -> String {
    format!("10.7.0.{i}")
}

/// A line or ring of three Axons (or, with `bridges`, a line of three Linux bridges), two
/// hosts on each with static addresses.
fn topology(dir: &Path, kind: &str, link_mbps: Option<u64>) -> Result<PathBuf, String> {
    let ring = kind == "ring";
    let bridges = kind == "bridge-line";
    let links: Vec<(usize, usize)> = if ring {
        vec![(1, 2), (2, 3), (3, 1)]
    } else {
        vec![(1, 2), (2, 3)]
    };
    let mut t = String::from("name = \"x\"\n");
    for i in 1..=6 {
        t += &format!(
            "[[host]]\nname = \"h{i}\"\ninterfaces = [{{ name = \"eth0\", address = \"{}/24\" }}]\n",
            host_ip(i)
        );
    }
    for a in 1..=3usize {
        if bridges {
            t += &format!("[[switch]]\nname = \"ax{a}\"\n");
            for h in [2 * a - 1, 2 * a] {
                t += &format!("[[link]]\na = \"h{h}:eth0\"\nb = \"ax{a}\"\n");
            }
            continue;
        }
        let mut cfg =
            format!("[axon]\nid = {a}\nhello_ms = 20\ncam_size = 65536\nprobe_ms = 200\n");
        for h in [2 * a - 1, 2 * a] {
            cfg += &format!("[[port]]\nname = \"ax{a}-h{h}\"\n");
            t += &format!("[[link]]\na = \"h{h}:eth0\"\nb = \"ax{a}:ax{a}-h{h}\"\n");
        }
        for &(x, y) in &links {
            let other = if x == a {
                y
            } else if y == a {
                x
            } else {
                continue;
            };
            cfg += &format!("[[port]]\nname = \"ax{a}-a{other}\"\n");
            if let Some(m) = link_mbps {
                cfg += &format!("capacity_bps = {}\n", m * 1_000_000);
            }
        }
        let file = format!("{kind}-ax{a}.toml");
        write(&dir.join(&file), &cfg)?;
        t += &format!("[[element]]\nname = \"ax{a}\"\nrole = \"axon\"\nconfig = \"{file}\"\n");
    }
    for &(x, y) in &links {
        if bridges {
            t += &format!("[[link]]\na = \"ax{x}\"\nb = \"ax{y}\"\n");
        } else {
            t += &format!(
                "[[link]]\na = \"ax{x}:ax{x}-a{y}\"\nb = \"ax{y}:ax{y}-a{x}\"\nmtu = 1600\n"
            );
        }
    }
    let p = dir.join(format!("{kind}-{}.toml", link_mbps.unwrap_or(0)));
    write(&p, &t)?;
    Ok(p)
}

fn ping(l: &lab::Lab, from: &str, to: &str) -> bool {
    Command::new("ip")
        .args([
            "netns",
            "exec",
            &l.ns(from),
            "ping",
            "-c",
            "1",
            "-W",
            "2",
            to,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Brings a topology up and has every host reach every other (ARP resolved everywhere).
fn up(opts: &AxonOpts, topo: &Path) -> Result<lab::Lab, String> {
    up_with(opts, topo, None)
}

/// As [`up`], with every Axon's fast path on or off (`fast`), or as its config says.
fn up_with(opts: &AxonOpts, topo: &Path, fast: Option<bool>) -> Result<lab::Lab, String> {
    let mut l = lab::Lab::load(
        topo,
        Some(&format!("ba{}", std::process::id())),
        opts.exe.clone(),
    )?;
    l.io = opts.io.clone();
    l.fast_path = fast;
    l.up()?;
    let t0 = Instant::now();
    // The Axons find each other within a few hello intervals.
    while !ping(&l, "h1", &host_ip(6)) {
        if t0.elapsed() > Duration::from_secs(15) || crate::interrupted() {
            let _ = l.down();
            return Err(format!("{}: h1 cannot reach h6", topo.display()));
        }
    }
    for i in 1..=6 {
        for j in 1..=6 {
            if i != j && !ping(&l, &format!("h{i}"), &host_ip(j)) {
                let _ = l.down();
                return Err(format!("{}: h{i} cannot reach h{j}", topo.display()));
            }
        }
    }
    Ok(l)
}

/// One-way latency p50 and p99 (µs) from h1 to host `to`, 64-byte frames at 10 kpps.
fn latency(l: &lab::Lab, opts: &AxonOpts, to: usize) -> Result<(f64, f64), String> {
    let mac = lab_mac(l, &format!("h{to}"), "eth0")?;
    let p = h1_to(l, opts, mac, to, "10kpps")?;
    Ok((p.latency_ns[0] as f64 / 1e3, p.latency_ns[1] as f64 / 1e3))
}

/// 64-byte frames from h1 to host `to` (its MAC `mac`) at `rate`, into a sink there.
fn h1_to(
    l: &lab::Lab,
    opts: &AxonOpts,
    mac: String,
    to: usize,
    rate: &str,
) -> Result<crate::forward_bench::Point, String> {
    let dst = vec![
        "--dst-mac".to_string(),
        mac,
        "--src".into(),
        host_ip(1),
        "--dst".into(),
        host_ip(to),
    ];
    lab_point(
        l,
        &opts.exe,
        opts.seconds,
        64,
        &[("h1", dst, rate.into())],
        &[&format!("h{to}")],
        SinkKind::AfPacket,
    )
}

/// Per-hop latency from ax1's probes to ax3 over the line (ax1 -> ax2 -> ax3 -> ax2 ->
/// ax1): the time a probe spent in an Axon between input and output (residence: ax2 both
/// ways and ax3's turn), and on each link from one Axon's output to the next one's input;
/// medians over `samples` probes, 200 ms apart.
fn probe_hops(l: &lab::Lab, samples: usize) -> Result<Value, String> {
    let mut residence = Vec::new();
    let mut links = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..samples * 3 {
        if seen.len() >= samples {
            break;
        }
        let v = show(l, "probes", "ax1")?;
        if let Some(p) = v["axons"]
            .as_array()
            .and_then(|a| a.iter().find(|p| p["axon"] == 3))
        {
            if seen.insert(p["seq"].as_u64().unwrap_or(0)) {
                for h in p["hops"].as_array().into_iter().flatten() {
                    if let Some(r) = h["residence_us"].as_f64() {
                        residence.push(r);
                    }
                    if let Some(x) = h["link_from_previous_us"].as_f64() {
                        links.push(x);
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let (r, k) = (median(&mut residence), median(&mut links));
    Ok(json!({
        "probes": seen.len(),
        "residence_median_us": r, "link_median_us": k,
        "per_hop_us": r.zip(k).map(|(a, b)| a + b),
    }))
}

/// Switches crossed, one-way latency p50 and p99 (µs).
type HopLatency = (usize, f64, f64);

/// Least-squares slope and intercept of y over x.
pub fn fit(pts: &[(f64, f64)]) -> (f64, f64) {
    let n = pts.len() as f64;
    let (sx, sy) = pts.iter().fold((0.0, 0.0), |a, p| (a.0 + p.0, a.1 + p.1));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (slope, my - slope * mx)
}

/// The six flows of line against ring: each host to one on another Axon.
const SIX: [(usize, usize); 6] = [(1, 3), (2, 5), (3, 6), (4, 1), (5, 2), (6, 4)];

/// Aggregate throughput (Mbit/s) of the six flows, UDP at `udp_mbps` each or TCP.
fn six_flows(l: &lab::Lab, secs: f64, udp_mbps: Option<u64>) -> Result<(f64, Vec<f64>), String> {
    let at: Vec<(String, u16)> = SIX
        .iter()
        .enumerate()
        .map(|(i, &(_, to))| (l.ns(&format!("h{to}")), 5201 + i as u16))
        .collect();
    let _servers = crate::Iperf3Servers::start(&at)?;
    let t = format!("{}", secs.ceil().max(1.0) as u64);
    let mut clients = Vec::new();
    for (i, &(from, to)) in SIX.iter().enumerate() {
        let mut c = Command::new("ip");
        c.args([
            "netns",
            "exec",
            &l.ns(&format!("h{from}")),
            "iperf3",
            "-c",
            &host_ip(to),
        ])
        .args(["-p", &(5201 + i).to_string(), "-t", &t, "-J"]);
        if let Some(m) = udp_mbps {
            c.args(["-u", "-b", &format!("{m}M"), "-l", "1400"]);
        }
        clients.push(
            c.stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| e.to_string())?,
        );
    }
    let mut rates = Vec::new();
    for c in clients {
        let o = c.wait_with_output().map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_slice(&o.stdout).map_err(|e| format!("iperf3: {e}"))?;
        if let Some(e) = v["error"].as_str() {
            return Err(format!("iperf3: {e}"));
        }
        // UDP: what arrived (iperf3's sum, the server's count); TCP: the receiver's.
        let bps = if udp_mbps.is_some() {
            let s = &v["end"]["sum"];
            let sent = s["bits_per_second"].as_f64().unwrap_or(0.0);
            sent * (1.0 - s["lost_percent"].as_f64().unwrap_or(100.0) / 100.0)
        } else {
            v["end"]["sum_received"]["bits_per_second"]
                .as_f64()
                .unwrap_or(0.0)
        };
        rates.push(bps / 1e6);
    }
    Ok((rates.iter().sum(), rates))
}

fn show(l: &lab::Lab, what: &str, node: &str) -> Result<Value, String> {
    let o = Command::new(&l.exe)
        .args(["show", what, "--control"])
        .arg(l.run_dir().join(format!("{node}.sock")))
        .output()
        .map_err(|e| e.to_string())?;
    serde_json::from_slice(&o.stdout).map_err(|e| format!("show {what}: {e}"))
}

/// The cut: a UDP flow h1 -> h5 over ax1-ax3; the link goes down; when the path moved
/// and the longest gap at the sink.
fn cut(l: &lab::Lab, opts: &AxonOpts) -> Result<Value, String> {
    let exe = opts.exe.display().to_string();
    let trace = opts.out.join("cut-trace.csv");
    let mac = lab_mac(l, "h5", "eth0")?;
    let secs = 3.0;
    let sink = Command::new("ip")
        .args([
            "netns",
            "exec",
            &l.ns("h5"),
            &exe,
            "sink",
            "--iface",
            "eth0",
            "--drop",
            "--json",
        ])
        .args(["--duration", &format!("{}", secs + 1.0), "--trace"])
        .arg(&trace)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(300));
    let gen = Command::new("ip")
        .args([
            "netns",
            "exec",
            &l.ns("h1"),
            &exe,
            "gen",
            "--iface",
            "eth0",
            "--dst-mac",
            &mac,
        ])
        .args([
            "--src",
            &host_ip(1),
            "--dst",
            &host_ip(5),
            "--size",
            "200",
            "--rate",
            "20kpps",
        ])
        .args([
            "--duration",
            &secs.to_string(),
            "--sleep-us",
            "20",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(1000));
    let paths = |v: &Value| -> Option<usize> {
        v["paths"]
            .as_array()?
            .iter()
            .find(|p| p["axon"] == 3)
            .and_then(|p| p["ports"].as_array().map(|a| a.len()))
    };
    let before = paths(&show(l, "routes", "ax1")?);
    let t0 = Instant::now();
    Command::new("ip")
        .args(["-n", &l.ns("ax1"), "link", "set", "ax1-a3", "down"])
        .status()
        .map_err(|e| e.to_string())?;
    let mut moved = None;
    while t0.elapsed() < Duration::from_secs(2) {
        if paths(&show(l, "routes", "ax1")?) == Some(2) {
            moved = Some(t0.elapsed().as_secs_f64() * 1e3);
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let g = gen.wait_with_output().map_err(|e| e.to_string())?;
    let s = sink.wait_with_output().map_err(|e| e.to_string())?;
    let gv: Value = serde_json::from_slice(&g.stdout).map_err(|e| format!("gen: {e}"))?;
    let sv: Value = serde_json::from_slice(&s.stdout).map_err(|e| format!("sink: {e}"))?;
    let text = std::fs::read_to_string(&trace).map_err(|e| e.to_string())?;
    let times: Vec<u64> = text
        .lines()
        .skip(1)
        .filter_map(|l| l.split(',').nth(2)?.parse().ok())
        .collect();
    let gap_ms = times
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .max()
        .unwrap_or(0) as f64
        / 1e6;
    Ok(json!({
        "path_hops_before": before, "path_moved_ms": moved,
        "sent": gv["sent"], "received": sv["received"], "lost": sv["lost"],
        "longest_gap_ms": gap_ms,
    }))
}

/// Route setups per second in memory (see the module's doc).
pub fn route_setups(n: usize) -> Value {
    let now0 = Instant::now();
    let mk = |id: u32| {
        let cfg = AxonConfig {
            id,
            ports: (0..2)
                .map(|i| PortConfig {
                    name: format!("a{id}p{i}"),
                    capacity_bps: None,
                    buffer_bytes: 1 << 30,
                    delay: Duration::ZERO,
                })
                .collect(),
            macs: (0..2)
                .map(|i| MacAddr([2, 0xa, 0, 0, id as u8, i]))
                .collect(),
            hello: Duration::from_millis(20),
            dead: 1000,
            cam_size: n + 16,
            dhcp: None,
            probe: Duration::ZERO,
            pace_hosts: false,
            spread: true,
        };
        let names = cfg.ports.iter().map(|p| p.name.clone()).collect();
        Axon::new(
            cfg,
            Arc::new(dataplane::Counters::for_role(
                names,
                dataplane::counters::Scope::Axon,
            )),
            now0,
        )
    };
    let mut ax = [mk(1), mk(2)];
    let mut now = now0;
    // Frames each Axon sent: to the other (port 1) or to its hosts (port 0).
    fn run(ax: &mut [Axon; 2], now: Instant, host_reply: bool) -> usize {
        let mut delivered = 0;
        loop {
            let mut moved = false;
            for i in 0..2 {
                let mut tx = TxQueues::new(2);
                ax[i].poll(now, &mut tx);
                for (port, p) in tx.drain_all() {
                    moved = true;
                    if port == 1 {
                        let mut p = p;
                        p.meta.rx_port = 1;
                        let mut t = TxQueues::new(0);
                        ax[1 - i].process(p, now, &mut t);
                    } else if host_reply && i == 1 && p.data.get(12..14) == Some(&[8, 6]) {
                        // A host on Axon 2 answers the ARP asked in the requester's name.
                        if let Ok(a) = wire::arp::Packet::new_checked(&p.data[14..]) {
                            let a = wire::arp::Repr::parse(&a);
                            if a.operation == wire::arp::Operation::Request {
                                let mac = host_mac(2, u32::from(a.target_ip));
                                let f = arp_frame(
                                    wire::arp::Operation::Reply,
                                    mac,
                                    a.target_ip,
                                    a.sender_mac,
                                    a.sender_ip,
                                );
                                let mut q = Pkt::from_bytes(&f);
                                q.meta.rx_port = 0;
                                let mut t = TxQueues::new(0);
                                ax[1].process(q, now, &mut t);
                            }
                        }
                        ax[i].pool.put(p);
                    } else {
                        delivered += 1;
                        ax[i].pool.put(p);
                    }
                }
            }
            if !moved {
                return delivered;
            }
        }
    }
    for _ in 0..5 {
        now += Duration::from_millis(25);
        run(&mut ax, now, false);
    }
    let requests: Vec<Vec<u8>> = (0..n as u32)
        .map(|i| {
            arp_frame(
                wire::arp::Operation::Request,
                host_mac(1, i),
                Ipv4Addr::from(0x0a00_0000 + i),
                MacAddr::ZERO,
                Ipv4Addr::from(0x1400_0000 + i),
            )
        })
        .collect();
    let t0 = Instant::now();
    for chunk in requests.chunks(1024) {
        for f in chunk {
            let mut p = Pkt::from_bytes(f);
            p.meta.rx_port = 0;
            let mut t = TxQueues::new(0);
            ax[0].process(p, now, &mut t);
        }
        run(&mut ax, now, true);
    }
    let secs = t0.elapsed().as_secs_f64();
    let routes = [ax[0].routes().len(), ax[1].routes().len()];
    json!({
        "setups": n, "seconds": secs, "setups_per_second": (n as f64 / secs).round(),
        "routes_installed": routes,
        "arp_answered": ax[0].counters.events(dataplane::Event::AxonArpAnswered),
    })
}

fn host_mac(axon: u8, i: u32) -> MacAddr {
    let b = i.to_be_bytes();
    MacAddr([2, axon, b[0], b[1], b[2], b[3]])
}

fn arp_frame(
    op: wire::arp::Operation,
    smac: MacAddr,
    sip: Ipv4Addr,
    tmac: MacAddr,
    tip: Ipv4Addr,
) -> Vec<u8> {
    let dst = if op == wire::arp::Operation::Request {
        MacAddr::BROADCAST
    } else {
        tmac
    };
    let mut f = Vec::with_capacity(42);
    wire::arp::Repr {
        operation: op,
        sender_mac: smac,
        sender_ip: sip,
        target_mac: tmac,
        target_ip: tip,
    }
    .append_frame(dst, &mut f);
    f
}

pub fn run(opts: &AxonOpts, progress: &mut dyn FnMut(&str)) -> Result<Value, String> {
    std::fs::create_dir_all(&opts.out).map_err(|e| format!("{}: {e}", opts.out.display()))?;
    let setups = route_setups(opts.setups);
    progress(&format!(
        "route setup: {} per second ({} setups in memory, both Axons on one core)",
        setups["setups_per_second"], opts.setups
    ));
    // Per-hop latency: hosts 1, 2 and 3 switches away on a line.
    let mut lat = Vec::new();
    for kind in ["axon-line", "bridge-line"] {
        let l = up(opts, &topology(&opts.out, kind, None)?)?;
        let r = (|| -> Result<(Vec<HopLatency>, Value), String> {
            let mut v = Vec::new();
            for (hops, to) in [(1, 2), (2, 3), (3, 5)] {
                let (p50, p99) = latency(&l, opts, to)?;
                progress(&format!(
                    "{kind}: {hops} hop(s): p50 {p50:.1} us, p99 {p99:.1} us"
                ));
                v.push((hops, p50, p99));
            }
            let probes = if kind == "axon-line" {
                let p = probe_hops(&l, 10)?;
                progress(&format!("{kind}: probes: {p}"));
                p
            } else {
                Value::Null
            };
            Ok((v, probes))
        })();
        let _ = l.down();
        let (v, probes) = r?;
        let (slope, icpt) = fit(&v.iter().map(|x| (x.0 as f64, x.1)).collect::<Vec<_>>());
        lat.push(json!({
            "device": kind, "per_hop_p50_us": slope, "intercept_us": icpt, "probes": probes,
            "points": v.iter().map(|x| json!({"hops": x.0, "p50_us": x.1, "p99_us": x.2})).collect::<Vec<_>>(),
        }));
        progress(&format!("{kind}: {slope:.1} us per hop (p50 slope)"));
    }
    // Line against ring, and the cut.
    let mut table = Vec::new();
    let mut cut_result = Value::Null;
    for kind in ["line", "ring"] {
        let l = up(opts, &topology(&opts.out, kind, Some(opts.link_mbps))?)?;
        let r = (|| -> Result<(), String> {
            let (udp, udp_flows) = six_flows(&l, opts.seconds.max(3.0), Some(opts.link_mbps))?;
            let (tcp, tcp_flows) = six_flows(&l, opts.seconds.max(3.0), None)?;
            progress(&format!(
                "{kind}: six flows: UDP {udp:.0} Mbit/s, TCP {tcp:.0} Mbit/s"
            ));
            table.push(
                json!({"topology": kind, "udp_mbps": udp, "udp_flows_mbps": udp_flows,
                              "tcp_mbps": tcp, "tcp_flows_mbps": tcp_flows}),
            );
            if kind == "ring" {
                cut_result = cut(&l, opts)?;
                progress(&format!("ring link cut: {cut_result}"));
            }
            Ok(())
        })();
        let _ = l.down();
        r?;
    }
    let gain = |k: &str| {
        let v = |t: &str| {
            table
                .iter()
                .find(|r| r["topology"] == t)
                .and_then(|r| r[k].as_f64())
                .unwrap_or(0.0)
        };
        if v("line") > 0.0 {
            v("ring") / v("line") - 1.0
        } else {
            0.0
        }
    };
    let (udp_gain, tcp_gain) = (gain("udp_mbps"), gain("tcp_mbps"));
    progress(&format!(
        "ring over line: UDP {:+.0}%, TCP {:+.0}%",
        udp_gain * 100.0,
        tcp_gain * 100.0
    ));
    // Forwarding rate through one Axon and one bridge, host to host.
    let mut fwd = Vec::new();
    for kind in ["axon-line", "bridge-line"] {
        let l = up(opts, &topology(&opts.out, kind, None)?)?;
        let r = (|| -> Result<Value, String> {
            let mac = lab_mac(&l, "h2", "eth0")?;
            let (p, cpu) = flat_out(&l, opts, mac, 2, "ax1")?;
            progress(&format!(
                "{kind}: 64 B host to host: {:.0} pps forwarded",
                p.forwarded_pps
            ));
            Ok(
                json!({"device": kind, "forwarded_pps": p.forwarded_pps.round(), "offered_pps": p.offered_pps.round(),
                      "axon_cpu_s": cpu, "frames_per_cpu_second": cpu.filter(|c| *c > 0.0).map(|c| (p.received as f64 / c).round())}),
            )
        })();
        let _ = l.down();
        fwd.push(r?);
    }
    let transit = transit(opts, progress)?;
    let plots = plots(&opts.out, &lat, &table)?;
    let v = json!({
        "bench": "axon",
        "plots": plots,
        "route_setup": setups,
        "latency": lat,
        "line_vs_ring": {"link_mbps": opts.link_mbps, "rows": table, "udp_gain": udp_gain, "tcp_gain": tcp_gain},
        "cut": cut_result,
        "forwarding_64B": fwd,
        "transit_64B": transit,
    });
    write(
        &opts.out.join("results.json"),
        &serde_json::to_string_pretty(&v).unwrap_or_default(),
    )?;
    Ok(v)
}

/// 64-byte frames from h1 to host `to` (its MAC `mac`) at the generator's highest rate,
/// and the CPU seconds `node`'s process spent meanwhile.
fn flat_out(
    l: &lab::Lab,
    opts: &AxonOpts,
    mac: String,
    to: usize,
    node: &str,
) -> Result<(crate::forward_bench::Point, Option<f64>), String> {
    let pid = std::fs::read_to_string(l.run_dir().join(format!("{node}.pid")))
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok());
    let cpu0 = pid.and_then(crate::process_cpu_seconds);
    let p = h1_to(l, opts, mac, to, "max")?;
    let cpu = match (pid.and_then(crate::process_cpu_seconds), cpu0) {
        (Some(a), Some(b)) => Some(a - b),
        _ => None,
    };
    Ok((p, cpu))
}

/// Frames passing through an Axon, with its fast path and without: 64-byte frames from
/// h1 to h5 over the unshaped line (through ax1, ax2 and ax3, ax2 passing them on) at the
/// generator's highest rate, and the one-way latency at 10 kpps; with ax2's CPU seconds
/// (its process: what its XDP programs do is the kernel's, not counted there) and the
/// frames its programs forwarded.
fn transit(opts: &AxonOpts, progress: &mut dyn FnMut(&str)) -> Result<Vec<Value>, String> {
    let mut rows = Vec::new();
    for fast in [true, false] {
        let l = up_with(opts, &topology(&opts.out, "axon-line", None)?, Some(fast))?;
        let r = (|| -> Result<Value, String> {
            let mac = lab_mac(&l, "h5", "eth0")?;
            let fast_forwarded = || -> u64 {
                show(&l, "counters", "ax2")
                    .ok()
                    .and_then(|c| c["fast_path"]["forwarded"].as_u64())
                    .unwrap_or(0)
            };
            let fwd0 = fast_forwarded();
            let (p, cpu) = flat_out(&l, opts, mac, 5, "ax2")?;
            let by_program = fast_forwarded().saturating_sub(fwd0);
            let (p50, p99) = latency(&l, opts, 5)?;
            let label = if fast { "fast path" } else { "user space" };
            progress(&format!(
                "transit through ax2 ({label}): 64 B h1 to h5: {:.0} pps forwarded, {by_program} by ax2's programs; 3 hops at 10 kpps: p50 {p50:.1} us, p99 {p99:.1} us",
                p.forwarded_pps
            ));
            Ok(
                json!({"fast_path": fast, "forwarded_pps": p.forwarded_pps.round(),
                "offered_pps": p.offered_pps.round(), "received": p.received,
                "ax2_fast_path_forwarded": by_program, "ax2_cpu_s": cpu,
                "p50_us_3_hops": p50, "p99_us_3_hops": p99}),
            )
        })();
        let _ = l.down();
        rows.push(r?);
    }
    Ok(rows)
}

/// `axon-latency.png` (one-way p50 over the hop count, Axons and bridges) and
/// `axon-line-ring.png` (the six flows' aggregate, UDP and TCP, line and ring).
fn plots(out: &Path, lat: &[Value], table: &[Value]) -> Result<Vec<String>, String> {
    use plotters::prelude::*;
    crate::plot::register_font()?;
    let colors = [RGBColor(0, 90, 180), RGBColor(210, 80, 0)];
    let name = "axon-latency.png";
    let path = out.join(name);
    let e = |x: String| format!("{name}: {x}");
    let pts: Vec<(String, Vec<(f64, f64)>)> = lat
        .iter()
        .map(|d| {
            (
                d["device"].as_str().unwrap_or("").to_string(),
                d["points"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| {
                        (
                            p["hops"].as_f64().unwrap_or(0.0),
                            p["p50_us"].as_f64().unwrap_or(0.0),
                        )
                    })
                    .collect(),
            )
        })
        .collect();
    let ymax = pts
        .iter()
        .flat_map(|p| &p.1)
        .map(|p| p.1)
        .fold(1.0, f64::max)
        * 1.15;
    {
        let root = BitMapBackend::new(&path, (800, 550)).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
        let mut c = ChartBuilder::on(&root)
            .caption(
                "One-way latency (p50) over the switches crossed",
                ("sans-serif", 20),
            )
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(0.5f64..3.5, 0f64..ymax)
            .map_err(|x| e(x.to_string()))?;
        c.configure_mesh()
            .x_desc("switches crossed")
            .y_desc("one-way latency p50 (us)")
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(|x| e(x.to_string()))?;
        for (i, (who, p)) in pts.iter().enumerate() {
            let col = colors[i % 2];
            let slope = lat[i]["per_hop_p50_us"].as_f64().unwrap_or(0.0);
            c.draw_series(LineSeries::new(p.clone(), col.stroke_width(2)))
                .map_err(|x| e(x.to_string()))?
                .label(format!("{who}: {slope:.1} us per hop"))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], col.stroke_width(2)));
            c.draw_series(p.iter().map(|q| Circle::new(*q, 4, col.filled())))
                .map_err(|x| e(x.to_string()))?;
        }
        crate::plot::legend(&mut c, SeriesLabelPosition::UpperLeft).map_err(e)?;
        root.present().map_err(|x| e(x.to_string()))?;
    }
    let name2 = "axon-line-ring.png";
    let path2 = out.join(name2);
    let e = |x: String| format!("{name2}: {x}");
    let get = |t: &str, k: &str| {
        table
            .iter()
            .find(|r| r["topology"] == t)
            .and_then(|r| r[k].as_f64())
            .unwrap_or(0.0)
    };
    let bars = [
        (0.0, get("line", "udp_mbps"), 0),
        (1.0, get("ring", "udp_mbps"), 1),
        (3.0, get("line", "tcp_mbps"), 0),
        (4.0, get("ring", "tcp_mbps"), 1),
    ];
    let ymax = bars.iter().map(|b| b.1).fold(1.0, f64::max) * 1.2;
    {
        let root = BitMapBackend::new(&path2, (800, 550)).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
        let mut c = ChartBuilder::on(&root)
            .caption(
                "Six flows: aggregate throughput, line and ring of Axons",
                ("sans-serif", 20),
            )
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5f64..4.5, 0f64..ymax)
            .map_err(|x| e(x.to_string()))?;
        c.configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .x_desc("UDP (left pair), TCP (right pair)")
            .y_desc("aggregate Mbit/s")
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(|x| e(x.to_string()))?;
        for (k, label) in [(0usize, "line"), (1, "ring")] {
            let col = colors[k];
            c.draw_series(
                bars.iter()
                    .filter(|b| b.2 == k)
                    .map(|b| Rectangle::new([(b.0 - 0.4, 0.0), (b.0 + 0.4, b.1)], col.filled())),
            )
            .map_err(|x| e(x.to_string()))?
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], col.filled()));
            c.draw_series(bars.iter().filter(|b| b.2 == k).map(|b| {
                Text::new(
                    format!("{:.0}", b.1),
                    (b.0 - 0.2, b.1 + ymax * 0.02),
                    ("sans-serif", 15),
                )
            }))
            .map_err(|x| e(x.to_string()))?;
        }
        crate::plot::legend(&mut c, SeriesLabelPosition::UpperLeft).map_err(e)?;
        root.present().map_err(|x| e(x.to_string()))?;
    }
    Ok(vec![name.to_string(), name2.to_string()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_squares() {
        let (s, i) = fit(&[(1.0, 12.0), (2.0, 22.0), (3.0, 32.0)]);
        assert!((s - 10.0).abs() < 1e-9 && (i - 2.0).abs() < 1e-9);
    }

    #[test]
    fn routes_are_set_up_in_memory() {
        let v = route_setups(500);
        assert_eq!(v["routes_installed"], json!([500, 500]), "{v}");
        assert_eq!(v["arp_answered"], 500, "{v}");
    }
}
