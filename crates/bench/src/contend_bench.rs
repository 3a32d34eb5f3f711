//! `tessera bench contend`: contending flows into one output port (issue 16), after
//! Soudan et al., "Investigation of Ethernet switches behavior in presence of contending
//! flows at very high-speed links".
//!
//! Two sources send constant-rate UDP flows through a device under test to one sink; the
//! device's port towards the sink has the capacity of one input (`port_mbps`, counted on the
//! wire). Every device under test is a namespace `dut` with three interfaces, `in1`, `in2`
//! (from the sources) and `out` (to the sink), set up by a command run there with `sh -c`:
//! built-in ones for a Linux bridge whose output is shaped by `tbf` (a FIFO) and for
//! `tessera switch` in FIFO and in fair mode, and any the user names. The command may
//! configure and end (the bridge) or run on as a daemon (the switch); its process group is
//! ended when the device's runs are done. Before measuring, the sink pings both sources
//! through the device, so that a learning device knows where everyone is.
//!
//! Per device:
//! - **The study's table**: flows at 100+100, 80+80, 50+50 and 80+60 % of the port; per
//!   flow, its rate on the wire over 1 ms and 100 ms intervals (from the sink's kernel
//!   receive times): mean, max, min, variance; its max-min fair share and the 100 ms
//!   minimum as a share of it. A sequence-number trace of the first packets at the output
//!   (CSV and PNG).
//! - **The rate grid**: both inputs from one step to the port's rate in steps; flow 1's
//!   output/input ratio (100 ms intervals) and the standard deviation of its 1 ms output
//!   rate relative to its input, as isoline plots (PNG) over the grid.
//! - **TCP**: two iperf3 flows (one per source) through the device, for each congestion
//!   control this kernel offers, with and without SACK (set in every host's namespace), at
//!   each round-trip time: the added delay comes from a delay line (`tessera switch` with
//!   `delay_ms` on both ports, no capacity limit) between the device and the sink, since
//!   the kernel here has no netem. Per flow, throughput and its standard deviation over
//!   iperf3's 1 s intervals, and Jain's fairness index of the two.

use crate::forward_bench::{lab_mac, External};
use plotters::prelude::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The devices under test built in.
pub const BUILTIN: [&str; 3] = ["bridge-tbf", "switch-fifo", "switch-fair"];

/// The study's cases, as shares of the port's rate: (flow 1, flow 2).
pub const CASES: [(f64, f64); 4] = [(1.0, 1.0), (0.8, 0.8), (0.5, 0.5), (0.8, 0.6)];

pub struct ContendOpts {
    pub exe: PathBuf,
    pub out: PathBuf,
    /// Built-in devices under test to measure (names of [`BUILTIN`]).
    pub duts: Vec<String>,
    /// Devices under test the user names: (name, command).
    pub commands: Vec<(String, String)>,
    /// The output port's rate, and the unit of the cases and the grid (Mbit/s, wire).
    pub port_mbps: f64,
    /// The output port's buffer (bytes), for the built-in devices.
    pub buffer_bytes: usize,
    /// Frame size (bytes, FCS included).
    pub size: usize,
    /// Seconds per case of the table.
    pub seconds: f64,
    /// Step of the rate grid in Mbit/s (0: no grid).
    pub grid_step_mbps: f64,
    /// Seconds per grid point.
    pub grid_seconds: f64,
    /// Seconds per TCP run (0: no TCP experiment).
    pub tcp_seconds: f64,
    /// Round-trip times added for the TCP experiment (ms).
    pub rtts_ms: Vec<f64>,
    /// Congestion controls (empty: every one this kernel offers).
    pub ccs: Vec<String>,
    /// Our switch's packet I/O backend (None: its default).
    pub io: Option<String>,
    /// Packets in each sequence-number trace.
    pub trace_packets: u64,
}

fn write(path: &Path, s: &str) -> Result<(), String> {
    std::fs::write(path, s).map_err(|e| format!("{}: {e}", path.display()))
}

const SRC: [(&str, &str); 2] = [("src1", "10.9.0.1"), ("src2", "10.9.0.2")];
const SINK: &str = "10.9.0.9";

/// The topology: two sources and a sink around the namespace `dut`; with `rtt_ms` above
/// zero, a delay line between the device and the sink.
fn topology(dir: &Path, rtt_ms: f64) -> Result<PathBuf, String> {
    let name = format!("contend-rtt{rtt_ms}.toml");
    let mut t = String::from("name = \"x\"\n");
    for (h, a) in SRC.iter().chain([&("sink1", SINK)]) {
        t += &format!(
            "[[host]]\nname = \"{h}\"\ninterfaces = [{{ name = \"eth0\", address = \"{a}/24\" }}]\n"
        );
    }
    t += "[[element]]\nname = \"dut\"\nrole = \"external\"\nconfig = \"none\"\n";
    t += "[[link]]\na = \"src1:eth0\"\nb = \"dut:in1\"\n[[link]]\na = \"src2:eth0\"\nb = \"dut:in2\"\n";
    if rtt_ms > 0.0 {
        let cfg = format!("delay-rtt{rtt_ms}.toml");
        let one_way = rtt_ms / 2.0;
        write(
            &dir.join(&cfg),
            &format!(
                "# A delay line: {one_way} ms each way, no capacity limit.\n[switch]\nmode = \"fifo\"\n[[port]]\nname = \"dl-a\"\ndelay_ms = {one_way:?}\nbuffer_bytes = 67_108_864\n[[port]]\nname = \"dl-b\"\ndelay_ms = {one_way:?}\nbuffer_bytes = 67_108_864\n"
            ),
        )?;
        t += &format!("[[element]]\nname = \"dl\"\nrole = \"switch\"\nconfig = \"{cfg}\"\n");
        t += "[[link]]\na = \"dut:out\"\nb = \"dl:dl-a\"\n[[link]]\na = \"dl:dl-b\"\nb = \"sink1:eth0\"\n";
    } else {
        t += "[[link]]\na = \"dut:out\"\nb = \"sink1:eth0\"\n";
    }
    let p = dir.join(name);
    write(&p, &t)?;
    Ok(p)
}

/// The command that builds a built-in device under test in its namespace.
fn builtin_command(dut: &str, opts: &ContendOpts) -> Result<String, String> {
    match dut {
        // tbf counts the frame without FCS; the size table adds FCS, preamble and gap
        // (24 bytes), so that the port's rate is counted on the wire as the switch's is.
        "bridge-tbf" => Ok(format!(
            "set -e; ip link add br0 type bridge stp_state 0; \
             for i in in1 in2 out; do ip link set $i master br0; done; ip link set br0 up; \
             tc qdisc replace dev out root stab overhead 24 linklayer ethernet \
             tbf rate {}kbit burst 16k limit {}",
            (opts.port_mbps * 1000.0).round() as u64,
            opts.buffer_bytes
        )),
        "switch-fifo" | "switch-fair" => {
            let mode = dut.trim_start_matches("switch-");
            let cfg = opts.out.join(format!("{dut}.toml"));
            let io = opts
                .io
                .as_ref()
                .map_or(String::new(), |b| format!("[io]\nbackend = \"{b}\"\n"));
            write(
                &cfg,
                &format!(
                    "[switch]\nmode = \"{mode}\"\n[[port]]\nname = \"in1\"\n[[port]]\nname = \"in2\"\n[[port]]\nname = \"out\"\ncapacity_bps = {}\nbuffer_bytes = {}\n{io}",
                    (opts.port_mbps * 1e6).round() as u64,
                    opts.buffer_bytes
                ),
            )?;
            Ok(format!(
                "exec \"$TESSERA_EXE\" switch --config '{}' --control '{}'",
                cfg.display(),
                opts.out.join(format!("{dut}.sock")).display()
            ))
        }
        _ => Err(format!("no built-in device under test {dut:?}")),
    }
}

/// Runs `ip netns exec NS ARGS...` and says whether it succeeded.
fn in_ns(ns: &str, args: &[&str]) -> bool {
    lab::cmd::in_ns(ns, args[0], &args[1..]).is_ok()
}

/// Starts the device under test and waits until the sink reaches both sources through it.
fn start_dut(l: &lab::Lab, opts: &ContendOpts, name: &str, cmd: &str) -> Result<External, String> {
    let log = opts.out.join(format!("{name}.log"));
    let env = [
        ("TESSERA_EXE", opts.exe.display().to_string()),
        ("TESSERA_DUT_IN1", "in1".into()),
        ("TESSERA_DUT_IN2", "in2".into()),
        ("TESSERA_DUT_OUT", "out".into()),
        ("TESSERA_PORT_MBPS", opts.port_mbps.to_string()),
        ("TESSERA_BUFFER_BYTES", opts.buffer_bytes.to_string()),
    ];
    let mut d = External::start(&l.ns("dut"), cmd, &env, Some(&log))?;
    let tail = || {
        let s = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    };
    let sink = l.ns("sink1");
    let t0 = Instant::now();
    loop {
        if let Some(st) = d.exited() {
            if !st.success() {
                return Err(format!("device {name}: {cmd:?} failed ({st}): {}", tail()));
            }
        }
        if crate::interrupted() {
            return Err("interrupted".into());
        }
        if SRC
            .iter()
            .all(|(_, a)| in_ns(&sink, &["ping", "-c", "1", "-W", "1", a]))
        {
            return Ok(d);
        }
        if t0.elapsed() > Duration::from_secs(15) {
            return Err(format!(
                "device {name} does not connect the sink to both sources after 15 s: {}",
                tail()
            ));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The mean round-trip time of three pings from the sink to the first source (ms).
fn ping_rtt_ms(l: &lab::Lab) -> Option<f64> {
    let o = Command::new("ip")
        .args([
            "netns",
            "exec",
            &l.ns("sink1"),
            "ping",
            "-q",
            "-c",
            "3",
            "-i",
            "0.2",
        ])
        .arg(SRC[0].1)
        .output()
        .ok()?;
    // "rtt min/avg/max/mdev = 0.041/0.052/0.063/0.009 ms"
    let s = String::from_utf8_lossy(&o.stdout);
    let l = s.lines().find(|l| l.contains("min/avg/max"))?;
    l.split('=').nth(1)?.trim().split('/').nth(1)?.parse().ok()
}

/// Rate statistics of the sink (packets per second) in Mbit/s on the wire.
fn mbps(stats: &Value, size: usize) -> Value {
    let k = ((size + 20) * 8) as f64 / 1e6;
    let f = |key: &str| stats[key].as_f64().map(|x| x * k);
    json!({
        "intervals": stats["n"],
        "mean": f("mean"), "max": f("max"), "min": f("min"),
        "variance": stats["variance"].as_f64().map(|v| v * k * k),
        "stddev": f("stddev"),
    })
}

/// Max-min fair shares of `port` for demands `r`.
pub fn fair_shares(r: &[f64], port: f64) -> Vec<f64> {
    let mut share = vec![0.0; r.len()];
    let mut left: Vec<usize> = (0..r.len()).collect();
    let mut cap = port;
    while !left.is_empty() {
        let each = cap / left.len() as f64;
        let (small, big): (Vec<usize>, Vec<usize>) = left.iter().partition(|&&i| r[i] <= each);
        if small.is_empty() {
            for &i in &big {
                share[i] = each;
            }
            break;
        }
        for &i in &small {
            share[i] = r[i];
            cap -= r[i];
        }
        left = big;
    }
    share
}

/// One measurement: flow i+1 from source i at `rates[i]` Mbit/s (0: that source is
/// silent). Returns per flow what the generator sent and what the sink saw.
fn point(
    l: &lab::Lab,
    opts: &ContendOpts,
    mac: &str,
    rates: [f64; 2],
    secs: f64,
    trace: Option<&Path>,
) -> Result<Vec<Value>, String> {
    if crate::interrupted() {
        return Err("interrupted".into());
    }
    let exe = opts.exe.display().to_string();
    let mut sargs: Vec<String> = [
        "netns",
        "exec",
        &l.ns("sink1"),
        &exe,
        "sink",
        "--iface",
        "eth0",
        // A cap: the sink is stopped once the generators are done and a drain has passed
        // (as a forward bench's point does).
        "--duration",
        &format!("{}", secs + 30.0),
        "--drop",
        "--json",
        "--intervals",
        "1,100",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(t) = trace {
        sargs.extend([
            "--trace".into(),
            t.display().to_string(),
            "--trace-max".into(),
            opts.trace_packets.to_string(),
        ]);
    }
    let mut sink = Command::new("ip")
        .args(&sargs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    // The generators start when the sink says it receives (or after 5 s); its error
    // output is kept for a failure's message.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let said = crate::forward_bench::watch_sink(&mut sink, ready_tx);
    let _ = ready_rx.recv_timeout(Duration::from_secs(5));
    let mut gens = Vec::new();
    for (i, ((node, addr), r)) in SRC.iter().zip(rates).enumerate() {
        if r <= 0.0 {
            continue;
        }
        let args = [
            "netns".to_string(),
            "exec".into(),
            l.ns(node),
            exe.clone(),
            "gen".into(),
            "--iface".into(),
            "eth0".into(),
            "--dst-mac".into(),
            mac.into(),
            "--src".into(),
            addr.to_string(),
            "--dst".into(),
            SINK.into(),
            "--flow-base".into(),
            (i + 1).to_string(),
            "--size".into(),
            opts.size.to_string(),
            "--rate".into(),
            format!("{r}Mbps"),
            "--duration".into(),
            secs.to_string(),
            "--sleep-us".into(),
            "50".into(),
            "--json".into(),
        ];
        gens.push((
            i,
            Command::new("ip")
                .args(&args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| e.to_string())?,
        ));
    }
    let mut sent = [None, None];
    let mut gen_error = None;
    for (i, g) in gens {
        match crate::forward_bench::report_of(g, "gen", false) {
            Ok(v) => sent[i] = Some(v),
            Err(e) => gen_error = gen_error.or(Some(e)),
        }
    }
    if let Some(e) = gen_error {
        // SAFETY: kill(2) on a child of ours that has not been reaped yet.
        unsafe { libc::kill(sink.id() as libc::pid_t, libc::SIGINT) };
        let _ = sink.wait();
        return Err(e);
    }
    crate::forward_bench::drain(&sink);
    let v = crate::forward_bench::report_of(sink, "sink", false)
        .map_err(|e| format!("{e}{}", said.lock().unwrap_or_else(|e| e.into_inner())))?;
    let shares = fair_shares(&rates, opts.port_mbps);
    let mut flows = Vec::new();
    for i in 0..2 {
        let Some(g) = &sent[i] else { continue };
        let f = v["flows"]
            .as_array()
            .and_then(|a| a.iter().find(|f| f["flow"] == i + 1))
            .cloned()
            .unwrap_or(Value::Null);
        let rate = |ms: f64| {
            f["rates"]
                .as_array()
                .and_then(|a| a.iter().find(|r| r["interval_ms"].as_f64() == Some(ms)))
                .map_or(Value::Null, |r| mbps(&r["rate_pps"], opts.size))
        };
        let (r1, r100) = (rate(1.0), rate(100.0));
        let offered = g["achieved_wire_bps"].as_f64().unwrap_or(0.0) / 1e6;
        let min100 = r100["min"].as_f64();
        flows.push(json!({
            "flow": i + 1,
            "asked_mbps": rates[i],
            "offered_mbps": offered,
            "sent": g["sent"],
            "received": f["packets"].as_u64().unwrap_or(0),
            "lost": f["lost"].as_u64().unwrap_or(g["sent"].as_u64().unwrap_or(0)),
            "fair_share_mbps": shares[i],
            "min_100ms_over_fair_share": min100.map(|m| m / shares[i]),
            "rate_1ms_mbps": r1,
            "rate_100ms_mbps": r100,
        }));
    }
    Ok(flows)
}

/// The congestion controls this kernel offers.
fn available_ccs() -> Vec<String> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Mean and standard deviation of `xs`.
fn mean_sd(xs: &[f64]) -> (f64, f64) {
    if xs.is_empty() {
        return (0.0, 0.0);
    }
    let n = xs.len() as f64;
    let m = xs.iter().sum::<f64>() / n;
    let v = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n;
    (m, v.sqrt())
}

/// Jain's fairness index of `xs` (1: equal shares).
pub fn jain(xs: &[f64]) -> f64 {
    let s: f64 = xs.iter().sum();
    let q: f64 = xs.iter().map(|x| x * x).sum();
    if q == 0.0 {
        0.0
    } else {
        s * s / (xs.len() as f64 * q)
    }
}

/// One TCP run: two iperf3 flows, one from each source to the sink, at once.
fn tcp_run(l: &lab::Lab, cc: &str, sack: bool, secs: f64) -> Result<Vec<Value>, String> {
    if crate::interrupted() {
        return Err("interrupted".into());
    }
    let flag = format!("net.ipv4.tcp_sack={}", u8::from(sack));
    for n in ["src1", "src2", "sink1"] {
        if !in_ns(&l.ns(n), &["sysctl", "-qw", &flag]) {
            return Err(format!("{n}: sysctl {flag} failed"));
        }
    }
    let ports = ["5201", "5202"];
    let _servers = crate::Iperf3Servers::start(&[(l.ns("sink1"), 5201), (l.ns("sink1"), 5202)])?;
    let t = format!("{}", secs.ceil().max(1.0) as u64);
    let mut clients = Vec::new();
    for ((node, _), p) in SRC.iter().zip(ports) {
        clients.push(
            Command::new("ip")
                .args(["netns", "exec", &l.ns(node), "iperf3", "-c", SINK, "-p", p])
                .args(["-t", &t, "-i", "1", "-C", cc, "-J"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| e.to_string())?,
        );
    }
    let mut flows = Vec::new();
    for (i, c) in clients.into_iter().enumerate() {
        let o = c.wait_with_output().map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_slice(&o.stdout).map_err(|e| format!("iperf3: {e}"))?;
        if let Some(e) = v["error"].as_str() {
            return Err(format!("iperf3 -C {cc}: {e}"));
        }
        let per_s: Vec<f64> = v["intervals"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x["sum"]["bits_per_second"].as_f64())
                    .map(|b| b / 1e6)
                    .collect()
            })
            .unwrap_or_default();
        let (mean, sd) = mean_sd(&per_s);
        flows.push(json!({
            "flow": i + 1,
            "received_mbps": v["end"]["sum_received"]["bits_per_second"].as_f64().map(|b| b / 1e6),
            "mean_1s_mbps": mean, "stddev_1s_mbps": sd,
            "min_1s_mbps": per_s.iter().copied().fold(f64::INFINITY, f64::min),
            "retransmits": v["end"]["sum_sent"]["retransmits"],
        }));
    }
    Ok(flows)
}

pub fn run(opts: &ContendOpts, progress: &mut dyn FnMut(&str)) -> Result<Value, String> {
    std::fs::create_dir_all(opts.out.join("traces"))
        .map_err(|e| format!("{}: {e}", opts.out.display()))?;
    if !(64..=1518).contains(&opts.size) {
        return Err(format!("--size {}: frames are 64 to 1518 bytes", opts.size));
    }
    if opts.port_mbps.is_nan() || opts.port_mbps <= 0.0 {
        return Err("--port-mbps must be above zero".into());
    }
    let mut duts: Vec<(String, String)> = Vec::new();
    for d in &opts.duts {
        duts.push((d.clone(), builtin_command(d, opts)?));
    }
    duts.extend(opts.commands.iter().cloned());
    let ccs = if opts.ccs.is_empty() {
        available_ccs()
    } else {
        opts.ccs.clone()
    };
    let grid: Vec<f64> = if opts.grid_step_mbps > 0.0 {
        let n = (opts.port_mbps / opts.grid_step_mbps).floor() as usize;
        (1..=n).map(|i| i as f64 * opts.grid_step_mbps).collect()
    } else {
        Vec::new()
    };
    let mut table = Vec::new();
    let mut grid_rows = Vec::new();
    let mut tcp_rows = Vec::new();
    let mut files = Vec::new();
    let labname = format!("bc{}", std::process::id());
    let rtts: Vec<f64> = if opts.tcp_seconds > 0.0 {
        opts.rtts_ms.clone()
    } else {
        Vec::new()
    };
    for (dut, cmd) in &duts {
        // The table and the grid without added delay; TCP at each round-trip time.
        let mut passes: Vec<f64> = vec![0.0];
        passes.extend(rtts.iter().copied().filter(|r| *r > 0.0));
        for &rtt in &passes {
            let topo = topology(&opts.out, rtt)?;
            let l = lab::Lab::load(&topo, Some(&labname), opts.exe.clone())?;
            l.up()?;
            let r = (|| -> Result<(), String> {
                let _d = start_dut(&l, opts, dut, cmd)?;
                let mac = lab_mac(&l, "sink1", "eth0")?;
                if rtt == 0.0 {
                    for (a, b) in CASES {
                        let mbps = |x: f64| (x * opts.port_mbps * 1000.0).round() / 1000.0;
                        let rates = [mbps(a), mbps(b)];
                        let case = format!("{}+{}", rates[0], rates[1]);
                        let trace = opts.out.join("traces").join(format!("{dut}-{case}.csv"));
                        let flows = point(&l, opts, &mac, rates, opts.seconds, Some(&trace))?;
                        progress(&format!(
                            "{dut} {case} Mbit/s: {}",
                            flows
                                .iter()
                                .map(|f| format!(
                                    "flow {} mean {:.0} min {:.0} Mbit/s over 100 ms ({:.0}% of its fair share), min {:.0} over 1 ms",
                                    f["flow"],
                                    f["rate_100ms_mbps"]["mean"].as_f64().unwrap_or(0.0),
                                    f["rate_100ms_mbps"]["min"].as_f64().unwrap_or(0.0),
                                    f["min_100ms_over_fair_share"].as_f64().unwrap_or(0.0) * 100.0,
                                    f["rate_1ms_mbps"]["min"].as_f64().unwrap_or(0.0),
                                ))
                                .collect::<Vec<_>>()
                                .join("; ")
                        ));
                        let png = format!("trace-{dut}-{case}.png");
                        trace_plot(
                            &trace,
                            &opts.out.join(&png),
                            &format!("{dut}, {case} Mbit/s into {} Mbit/s", opts.port_mbps),
                        )?;
                        files.push(png);
                        table.push(json!({"device": dut, "case": case, "flows": flows}));
                    }
                    let total = grid.len() * grid.len();
                    for (k, (&a, &b)) in grid
                        .iter()
                        .flat_map(|a| grid.iter().map(move |b| (a, b)))
                        .enumerate()
                    {
                        let flows = point(&l, opts, &mac, [a, b], opts.grid_seconds, None)?;
                        if (k + 1) % grid.len() == 0 {
                            progress(&format!("{dut} grid: {}/{total} points", k + 1));
                        }
                        grid_rows.push(
                            json!({"device": dut, "in1_mbps": a, "in2_mbps": b, "flows": flows}),
                        );
                    }
                }
                if opts.tcp_seconds > 0.0 && rtts.contains(&rtt) {
                    tcp_rows.extend(tcp_pass(&l, opts, dut, rtt, &ccs, progress)?);
                }
                Ok(())
            })();
            let _ = l.down();
            r?;
        }
    }
    for (dut, _) in &duts {
        files.extend(grid_plots(
            &opts.out,
            dut,
            &grid,
            &grid_rows,
            opts.port_mbps,
        )?);
    }
    let v = json!({
        "bench": "contend",
        "port_mbps": opts.port_mbps,
        "buffer_bytes": opts.buffer_bytes,
        "frame_bytes": opts.size,
        "seconds_per_case": opts.seconds,
        "grid_step_mbps": opts.grid_step_mbps,
        "grid_seconds": opts.grid_seconds,
        "tcp_seconds": opts.tcp_seconds,
        "devices": duts.iter().map(|(d, c)| json!({"name": d, "command": c})).collect::<Vec<_>>(),
        "table": table,
        "grid": grid_rows,
        "tcp": tcp_rows,
        "plots": files,
    });
    write(
        &opts.out.join("results.json"),
        &serde_json::to_string_pretty(&v).unwrap_or_default(),
    )?;
    write(&opts.out.join("table.md"), &markdown(&v))?;
    Ok(v)
}

/// The TCP runs through `dut` at added round-trip time `rtt` (ms): each congestion
/// control of `ccs`, with SACK and without; their rows.
fn tcp_pass(
    l: &lab::Lab,
    opts: &ContendOpts,
    dut: &str,
    rtt: f64,
    ccs: &[String],
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Value>, String> {
    let mut rows = Vec::new();
    let ping = ping_rtt_ms(l);
    progress(&format!(
        "{dut}: round-trip time {} (added {rtt} ms)",
        ping.map_or("unknown".into(), |p| format!("{p:.2} ms"))
    ));
    for cc in ccs {
        for sack in [true, false] {
            let flows = tcp_run(l, cc, sack, opts.tcp_seconds)?;
            let rates: Vec<f64> = flows
                .iter()
                .map(|f| f["received_mbps"].as_f64().unwrap_or(0.0))
                .collect();
            progress(&format!(
                "{dut} TCP {cc} rtt {rtt} ms sack {}: {:.0} + {:.0} Mbit/s (Jain {:.3})",
                if sack { "on" } else { "off" },
                rates[0],
                rates[1],
                jain(&rates)
            ));
            rows.push(json!({
                "device": dut, "cc": cc, "rtt_ms": rtt, "ping_rtt_ms": ping, "sack": sack,
                "total_mbps": rates.iter().sum::<f64>(), "jain": jain(&rates),
                "flows": flows,
            }));
        }
    }
    Ok(rows)
}

/// The study's table and the TCP table, as Markdown.
pub fn markdown(v: &Value) -> String {
    let f = |x: &Value| x.as_f64().map_or("-".to_string(), |x| format!("{x:.1}"));
    let mut s = format!(
        "# Contending flows into one {} Mbit/s port ({}-byte frames, {} s per case)\n\n\
         Rates on the wire, in Mbit/s; variance in (Mbit/s)^2. `min/fair` is the minimum over\n\
         100 ms intervals as a share of the flow's max-min fair share.\n\n\
         | device | case | flow | offered | interval | mean | max | min | variance | min/fair |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
        v["port_mbps"], v["frame_bytes"], v["seconds_per_case"]
    );
    for row in v["table"].as_array().into_iter().flatten() {
        for fl in row["flows"].as_array().into_iter().flatten() {
            for (iv, key) in [("1 ms", "rate_1ms_mbps"), ("100 ms", "rate_100ms_mbps")] {
                let r = &fl[key];
                s += &format!(
                    "| {} | {} | {} | {} | {iv} | {} | {} | {} | {} | {} |\n",
                    row["device"].as_str().unwrap_or(""),
                    row["case"].as_str().unwrap_or(""),
                    fl["flow"],
                    f(&fl["offered_mbps"]),
                    f(&r["mean"]),
                    f(&r["max"]),
                    f(&r["min"]),
                    f(&r["variance"]),
                    if key == "rate_100ms_mbps" {
                        fl["min_100ms_over_fair_share"]
                            .as_f64()
                            .map_or("-".into(), |x| format!("{:.0}%", x * 100.0))
                    } else {
                        String::new()
                    },
                );
            }
        }
    }
    if v["tcp"].as_array().is_some_and(|a| !a.is_empty()) {
        s += "\n# TCP: two iperf3 flows into the port\n\nThroughput in Mbit/s (iperf3's receiver), its mean and standard deviation over 1 s intervals.\n\n\
              | device | cc | RTT (ms) | SACK | flow 1 | sd 1 | flow 2 | sd 2 | total | Jain |\n|---|---|---|---|---|---|---|---|---|---|\n";
        for r in v["tcp"].as_array().into_iter().flatten() {
            let fl = |i: usize, k: &str| f(&r["flows"][i][k]);
            s += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.3} |\n",
                r["device"].as_str().unwrap_or(""),
                r["cc"].as_str().unwrap_or(""),
                r["rtt_ms"],
                if r["sack"] == true { "on" } else { "off" },
                fl(0, "received_mbps"),
                fl(0, "stddev_1s_mbps"),
                fl(1, "received_mbps"),
                fl(1, "stddev_1s_mbps"),
                f(&r["total_mbps"]),
                r["jain"].as_f64().unwrap_or(0.0),
            );
        }
    }
    s
}

/// Sequence numbers against receive time, per flow, from a trace CSV.
fn trace_plot(csv: &Path, png: &Path, title: &str) -> Result<(), String> {
    crate::plot::register_font()?;
    let text = std::fs::read_to_string(csv).map_err(|e| format!("{}: {e}", csv.display()))?;
    let mut pts: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
    let mut t0 = None;
    let mut s0 = [None, None];
    for l in text.lines().skip(1) {
        let mut it = l.split(',').map(|x| x.parse::<u64>().ok());
        let (Some(Some(f)), Some(Some(seq)), Some(Some(t))) = (it.next(), it.next(), it.next())
        else {
            continue;
        };
        let Some(i) = (f as usize).checked_sub(1).filter(|i| *i < 2) else {
            continue;
        };
        let t0 = *t0.get_or_insert(t);
        let s0 = *s0[i].get_or_insert(seq);
        pts[i].push((
            t.saturating_sub(t0) as f64 / 1e6,
            seq.saturating_sub(s0) as f64,
        ));
    }
    let xmax = pts.iter().flatten().map(|p| p.0).fold(1.0, f64::max);
    let ymax = pts.iter().flatten().map(|p| p.1).fold(1.0, f64::max);
    let e = |x: String| format!("{}: {x}", png.display());
    let root = BitMapBackend::new(png, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax * 1.05)
        .map_err(|x| e(x.to_string()))?;
    chart
        .configure_mesh()
        .x_desc("time at the output (ms)")
        .y_desc("sequence number (from the flow's first received)")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|x| e(x.to_string()))?;
    let colors = [RGBColor(0, 90, 180), RGBColor(210, 80, 0)];
    for (i, p) in pts.iter().enumerate() {
        let c = colors[i];
        chart
            .draw_series(p.iter().map(|q| Circle::new(*q, 1, c.filled())))
            .map_err(|x| e(x.to_string()))?
            .label(format!("flow {} ({} packets)", i + 1, p.len()))
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, c.filled()));
    }
    crate::plot::legend(&mut chart, SeriesLabelPosition::UpperLeft).map_err(e)?;
    root.present().map_err(|x| e(x.to_string()))
}

/// Segments of the isoline at `level` of `v` (rows over y, columns over x) by marching
/// squares, with linear interpolation along the cells' edges.
pub fn isoline(xs: &[f64], ys: &[f64], v: &[Vec<f64>], level: f64) -> Vec<[(f64, f64); 2]> {
    let mut segs = Vec::new();
    for j in 0..ys.len().saturating_sub(1) {
        for i in 0..xs.len().saturating_sub(1) {
            // Corners in order around the cell, and the edges between them.
            let c = [
                (xs[i], ys[j], v[j][i]),
                (xs[i + 1], ys[j], v[j][i + 1]),
                (xs[i + 1], ys[j + 1], v[j + 1][i + 1]),
                (xs[i], ys[j + 1], v[j + 1][i]),
            ];
            if c.iter().any(|p| !p.2.is_finite()) {
                continue;
            }
            let mut cross = Vec::new();
            for k in 0..4 {
                let (a, b) = (c[k], c[(k + 1) % 4]);
                if (a.2 < level) != (b.2 < level) {
                    let t = (level - a.2) / (b.2 - a.2);
                    cross.push((a.0 + t * (b.0 - a.0), a.1 + t * (b.1 - a.1)));
                }
            }
            for pair in cross.chunks_exact(2) {
                segs.push([pair[0], pair[1]]);
            }
        }
    }
    segs
}

/// A colour from blue (0) through green to red (1).
fn ramp(t: f64) -> RGBColor {
    let t = t.clamp(0.0, 1.0);
    let (r, g, b) = if t < 0.5 {
        let u = t * 2.0;
        (0.0, 0.3 + 0.5 * u, 0.8 - 0.5 * u)
    } else {
        let u = (t - 0.5) * 2.0;
        (0.9 * u, 0.8 - 0.5 * u, 0.3 - 0.3 * u)
    };
    RGBColor((r * 255.0) as u8, (g * 255.0) as u8, (b * 255.0) as u8)
}

/// The two isoline plots of one device over the grid: flow 1's output/input ratio, and the
/// standard deviation of its 1 ms output rate relative to its input.
fn grid_plots(
    out: &Path,
    dut: &str,
    grid: &[f64],
    rows: &[Value],
    port: f64,
) -> Result<Vec<String>, String> {
    if grid.len() < 2 {
        return Ok(Vec::new());
    }
    crate::plot::register_font()?;
    let n = grid.len();
    let mut ratio = vec![vec![f64::NAN; n]; n];
    let mut sd = vec![vec![f64::NAN; n]; n];
    let at = |x: f64| grid.iter().position(|g| (g - x).abs() < 1e-6);
    for r in rows.iter().filter(|r| r["device"] == dut) {
        let (Some(i), Some(j)) = (
            r["in1_mbps"].as_f64().and_then(at),
            r["in2_mbps"].as_f64().and_then(at),
        ) else {
            continue;
        };
        let Some(f) = r["flows"]
            .as_array()
            .and_then(|a| a.iter().find(|f| f["flow"] == 1))
        else {
            continue;
        };
        let inp = f["offered_mbps"].as_f64().unwrap_or(0.0);
        if inp > 0.0 {
            if let Some(m) = f["rate_100ms_mbps"]["mean"].as_f64() {
                ratio[j][i] = m / inp;
            }
            if let Some(s) = f["rate_1ms_mbps"]["stddev"].as_f64() {
                sd[j][i] = s / inp;
            }
        }
    }
    let mut files = Vec::new();
    for (what, v, title) in [
        ("ratio", &ratio, "flow 1: output / input rate"),
        (
            "stddev",
            &sd,
            "flow 1: standard deviation of its 1 ms output rate / its input rate",
        ),
    ] {
        let name = format!("grid-{dut}-{what}.png");
        let path = out.join(&name);
        let vmax = v
            .iter()
            .flatten()
            .copied()
            .filter(|x| x.is_finite())
            .fold(0.0, f64::max);
        let top = if what == "ratio" {
            1.0f64.max(vmax)
        } else {
            vmax.max(1e-3)
        };
        let e = |x: String| format!("{name}: {x}");
        let root = BitMapBackend::new(&path, (800, 700)).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
        let half = grid[0] / 2.0;
        let lo = grid[0] - half;
        let hi = grid[n - 1] + half;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{dut}: {title}"), ("sans-serif", 18))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(lo..hi, lo..hi)
            .map_err(|x| e(x.to_string()))?;
        chart
            .configure_mesh()
            .x_desc(format!("flow 1 input (Mbit/s), port {port} Mbit/s"))
            .y_desc("flow 2 input (Mbit/s)")
            .label_style(("sans-serif", 14))
            .disable_mesh()
            .draw()
            .map_err(|x| e(x.to_string()))?;
        // Cells coloured by value, pale; isolines over them, labelled in the legend.
        chart
            .draw_series((0..n).flat_map(|j| {
                (0..n).filter_map(move |i| {
                    let x = v[j][i];
                    x.is_finite().then(|| {
                        Rectangle::new(
                            [
                                (grid[i] - half, grid[j] - half),
                                (grid[i] + half, grid[j] + half),
                            ],
                            ramp(x / top).mix(0.35).filled(),
                        )
                    })
                })
            }))
            .map_err(|x| e(x.to_string()))?;
        let levels: Vec<f64> = (1..10).map(|k| top * k as f64 / 10.0).collect();
        for lv in levels {
            let c = ramp(lv / top);
            let segs = isoline(grid, grid, v, lv);
            if segs.is_empty() {
                continue;
            }
            chart
                .draw_series(
                    segs.into_iter()
                        .map(|s| PathElement::new(vec![s[0], s[1]], c.stroke_width(2))),
                )
                .map_err(|x| e(x.to_string()))?
                .label(format!("{lv:.2}"))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font(("sans-serif", 12))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|x| e(x.to_string()))?;
        root.present().map_err(|x| e(x.to_string()))?;
        files.push(name);
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_min_fair_shares() {
        assert_eq!(fair_shares(&[1000.0, 1000.0], 1000.0), vec![500.0, 500.0]);
        assert_eq!(fair_shares(&[800.0, 600.0], 1000.0), vec![500.0, 500.0]);
        assert_eq!(fair_shares(&[800.0, 100.0], 1000.0), vec![800.0, 100.0]);
        assert_eq!(fair_shares(&[900.0, 300.0], 1000.0), vec![700.0, 300.0]);
        assert_eq!(fair_shares(&[0.0, 1000.0], 1000.0), vec![0.0, 1000.0]);
    }

    #[test]
    fn jain_index() {
        assert!((jain(&[5.0, 5.0]) - 1.0).abs() < 1e-12);
        assert!((jain(&[10.0, 0.0]) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn isolines_cross_where_the_values_do() {
        // v = x over a 3 x 3 grid: the isoline at 1.5 is the vertical line x = 1.5.
        let g = [0.0, 1.0, 2.0];
        let v: Vec<Vec<f64>> = (0..3).map(|_| g.to_vec()).collect();
        let segs = isoline(&g, &g, &v, 1.5);
        assert_eq!(segs.len(), 2);
        for s in &segs {
            assert!(s.iter().all(|p| (p.0 - 1.5).abs() < 1e-12), "{s:?}");
        }
        // A level outside the values draws nothing; a missing value leaves its cells out.
        assert!(isoline(&g, &g, &v, 5.0).is_empty());
        let mut w = v.clone();
        w[0][1] = f64::NAN;
        assert_eq!(isoline(&g, &g, &w, 1.5).len(), 1);
    }

    #[test]
    fn the_table_in_markdown() {
        let v = json!({
            "port_mbps": 1000.0, "frame_bytes": 1470, "seconds_per_case": 3.0,
            "table": [{"device": "switch-fair", "case": "1000+1000", "flows": [{
                "flow": 1, "offered_mbps": 999.0, "min_100ms_over_fair_share": 0.98,
                "rate_1ms_mbps": {"mean": 500.0, "max": 600.0, "min": 400.0, "variance": 100.0},
                "rate_100ms_mbps": {"mean": 500.0, "max": 510.0, "min": 490.0, "variance": 4.0},
            }]}],
            "tcp": [],
        });
        let md = markdown(&v);
        assert!(md.contains("| switch-fair | 1000+1000 | 1 | 999.0 | 100 ms | 500.0 | 510.0 | 490.0 | 4.0 | 98% |"), "{md}");
        assert!(!md.contains("TCP"));
    }
}
