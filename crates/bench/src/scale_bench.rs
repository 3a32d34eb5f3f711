//! `tessera bench scale`: does capacity grow with the number of elements?
//!
//! It builds a multistage router with `--ports K` external networks (an LB and a host on
//! each) and N back-ends for each N of `--backends`, every element with its fast path, and
//! measures the aggregate peak (the most forwarded at any offered load) and zero-loss rates
//! of traffic from every network to the next (network i's host sends to network i+1's,
//! the last to the first: with K = 2, each to the other). With `--ports 1` a second network
//! whose host only receives makes the one LB pair of `bench forward --multistage`. Beside
//! it, in the same run: our single forwarder with its fast path on one core (the element
//! the router is made of: `multistage_over_single` is the router's peak over its), and,
//! given the same cores as each multistage router, the Linux kernel as one router with a
//! port per network (multi-queue veths, NAPI threads on those cores: `kernel`) and our
//! forwarder with `[io] workers` on them (`workers`).
//!
//! Placement: where the machine has a core for everything (two per host, for its
//! generator and its sink, one per element, one left for the rest), every host and element
//! gets cores of its own (`cpus`, docs/lab.md), in order from CPU 1. Where it has not, the
//! scheduler shares them, and the results say so (`placed: false`, `placement_note`).
//!
//! Per element the cost per frame is measured at the load that gave the peak (its
//! process's and its ports' NAPI threads' CPU seconds over the frames it took, as `bench
//! balancer` does), and a model (`model`) predicts from those costs what each router would forward
//! with a core per element, on separate machines: see docs/scale.md.
//!
//! Traffic: `tessera gen --xdp`, `--flows` flows per host (UDP source ports; the LBs spread
//! them over the back-ends). A table of T prefixes is loaded into every router, split over
//! the networks; the traffic's destinations are the hosts (the table's size costs through
//! the memory it takes, not through lookups spread over it: `bench forward --flows many`
//! measures that).

use crate::balancer_bench::{element_load, element_napi, element_rows};
use crate::forward_bench::{self, lab_mac, realtime_napi, ForwardOpts, KeptSinks};
use crate::placement::{plan_cpus, plan_cpus_for};
use crate::table;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct ScaleOpts {
    pub out: PathBuf,
    /// The tessera binary (runs gen, sink and the lab).
    pub exe: PathBuf,
    /// External networks (K >= 1).
    pub ports: usize,
    /// Numbers of back-ends, one multistage router each.
    pub backends: Vec<usize>,
    /// Frame sizes; empty: 64 and 1470 (`--quick`: 64).
    pub sizes: Vec<usize>,
    /// Tables (synthetic sizes or files); empty: 10 and 167,000 (`--quick`: 10).
    pub tables: Vec<String>,
    /// Contenders: `multistage`, `forwarder`, `kernel`, `workers`; empty: all (`--quick`:
    /// multistage and forwarder).
    pub only: Vec<String>,
    pub quick: bool,
    /// Seconds per measurement point.
    pub seconds: f64,
    /// Flows per sending host.
    pub flows: u16,
    /// The NAPI threads at SCHED_FIFO 50 (as `bench forward --rt-napi`).
    pub rt_napi: bool,
    /// What joins the multistage router's elements.
    pub interconnect: Interconnect,
    /// How the sinks receive (`--sink`).
    pub sink: forward_bench::SinkKind,
    /// The table's prefixes split among the receiving networks and the traffic's
    /// destinations drawn from them, so that lookups spread over the table as the
    /// Internet's do (else every frame goes to a host's address).
    pub spread: bool,
    /// Cores of each LB of the multistage router (1: a core per element). With two, each
    /// of the LB's two ports' receive work (its fast path) runs on a core of its own.
    pub lb_cores: usize,
}

pub const CONTENDERS: [&str; 5] = ["multistage", "forwarder", "kernel", "workers", "star"];

/// What joins a multistage router's elements in the lab (`--interconnect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interconnect {
    /// A Linux bridge (GRO on its ports): every frame crosses it as a socket buffer, and
    /// reaches its back-end and its egress LB as one.
    Bridge,
    /// `tessera switch` with its XDP fast path: frames go from element to element as XDP
    /// frames, redirected by the switch's programs.
    Switch,
}

impl Interconnect {
    pub fn parse(s: &str) -> Option<Interconnect> {
        match s {
            "bridge" => Some(Interconnect::Bridge),
            "switch" => Some(Interconnect::Switch),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Interconnect::Bridge => "bridge",
            Interconnect::Switch => "switch",
        }
    }
}

/// One router to measure: its lab and where traffic enters and leaves.
struct Setup {
    contender: &'static str,
    /// Back-ends (multistage), or 0.
    backends: usize,
    /// The cores its elements use (with a core each).
    cores: usize,
    lab: PathBuf,
    /// The router's interface facing each network's host: (node, ifname).
    first_hops: Vec<(String, String)>,
    placed: bool,
    note: String,
}

/// Networks of a router with `k` ports: at least two (with one port, the second only
/// receives).
fn networks(k: usize) -> usize {
    k.max(2)
}

/// Who sends where: (sender network, receiver network), numbered from 1.
fn streams(k: usize) -> Vec<(usize, usize)> {
    if k == 1 {
        vec![(1, 2)]
    } else {
        (1..=k).map(|i| (i, i % k + 1)).collect()
    }
}

/// Writes an element's config (`TAG-NAME.toml` in `out`) and adds its `[[element]]` to a
/// lab's text.
fn add_element(
    out: &Path,
    topo: &mut String,
    tag: &str,
    name: &str,
    role: &str,
    config: &str,
    cpus: Option<&String>,
) -> Result<(), String> {
    let f = format!("{tag}-{name}.toml");
    write(&out.join(&f), config)?;
    let _ = write!(
        topo,
        "[[element]]\nname = \"{name}\"\nrole = \"{role}\"\nconfig = \"{f}\"\n{}\n",
        cpus_line(cpus)
    );
    Ok(())
}

/// Our switch with its fast path as the interconnection `ic`, with these ports (frames
/// stay XDP frames from element to element), then the lab's links.
fn add_switch(
    out: &Path,
    topo: &mut String,
    tag: &str,
    ports: &[String],
    cpus: Option<&String>,
    links: &str,
) -> Result<(), String> {
    let mut c = String::from("[switch]\nmode = \"fifo\"\n");
    for p in ports {
        let _ = write!(c, "\n[[port]]\nname = \"{p}\"\n");
    }
    c.push_str("\n[io]\nfast_path = true\n");
    add_element(out, topo, tag, "ic", "switch", &c, cpus)?;
    topo.push_str(links);
    Ok(())
}

fn cpus_line(c: Option<&String>) -> String {
    c.map(|c| format!("cpus = \"{c}\"\n")).unwrap_or_default()
}

/// The hosts of a lab of `m` networks, with their cores.
fn hosts(m: usize, cpus: Option<&Vec<String>>) -> String {
    let mut s = String::new();
    for i in 1..=m {
        let _ = write!(
            s,
            "[[host]]\nname = \"h{i}\"\ninterfaces = [{{ name = \"eth0\", address = \"10.{i}.0.10/24\" }}]\nroutes = [\"default via 10.{i}.0.1\"]\n{}\n",
            cpus_line(cpus.map(|c| &c[i - 1]))
        );
    }
    s
}

/// The table every router of a run loads: `table-KEY.txt` in the output directory.
struct TableFile {
    key: String,
    /// Its routes split among the receiving networks, each line with its next hop (that
    /// network's host), and the traffic drawn from them (`--spread`); else every prefix
    /// through the first network's host, and the traffic to the hosts.
    spread: bool,
}

/// The table's routes in a router's config.
fn table_line(t: &TableFile) -> String {
    if t.spread {
        format!("routes_file = \"table-{}.txt\"\n", t.key)
    } else {
        format!(
            "routes_file = \"table-{}.txt\"\nroutes_file_via = \"10.1.0.10\"\n",
            t.key
        )
    }
}

/// The multistage router of `m` networks and `n` back-ends, its LBs of `lb_cores` cores.
fn multistage(
    out: &Path,
    (m, n, lb_cores): (usize, usize, usize),
    table: &TableFile,
    tag: &str,
    interconnect: Interconnect,
) -> Result<Setup, String> {
    // Our switch as the interconnection gets a core too, after the elements', and the
    // cores left over: every frame crosses it twice, and a hardware switch forwards at
    // line rate.
    let switch = interconnect == Interconnect::Switch;
    let mut widths = vec![lb_cores; m];
    widths.resize(m + n + usize::from(switch), 1);
    let (cpus, note) = plan_cpus_for(m, &widths, switch);
    let (hc, ec) = (cpus.as_ref().map(|c| &c.0), cpus.as_ref().map(|c| &c.1));
    let mut topo = format!("name = \"sc\"\ndist_key = true\n\n{}", hosts(m, hc));
    let mut links = String::new();
    // The interconnection's end of a link from `node:ifname`: a bridge port, or a port of
    // our switch named after the node.
    let mut ic_ports = Vec::new();
    let mut ic_end = |node: &str| -> String {
        if switch {
            ic_ports.push(format!("ic-{node}"));
            format!("ic:ic-{node}")
        } else {
            "ic".to_string()
        }
    };
    for i in 1..=m {
        let mut c = format!(
            "[[interface]]\nname = \"lb{i}-ext\"\nrole = \"external\"\naddress = \"10.{i}.0.1/24\"\nvlan = {}\n\n[[interface]]\nname = \"lb{i}-int\"\nrole = \"internal\"\n\n[balance]\nmode = \"maglev\"\n\n[hello]\ninterval_ms = 100\n",
            10 * i
        );
        for j in 1..=n {
            let _ = write!(
                c,
                "\n[[backend]]\nmac = \"02:00:00:00:01:{j:02x}\"\ninterface = \"lb{i}-int\"\n"
            );
        }
        let cpus = ec.map(|c| &c[i - 1]);
        add_element(out, &mut topo, tag, &format!("lb{i}"), "balancer", &c, cpus)?;
        let _ = write!(
            links,
            "[[link]]\na = \"h{i}:eth0\"\nb = \"lb{i}:lb{i}-ext\"\n\n[[link]]\na = \"lb{i}:lb{i}-int\"\nb = \"{}\"\na_mac = \"02:00:00:00:0a:{i:02x}\"\n\n",
            ic_end(&format!("lb{i}"))
        );
    }
    for j in 1..=n {
        let mut c = format!(
            "{}[[interface]]\nname = \"r{j}-int\"\naddress = \"10.255.0.{}/24\"\n",
            table_line(table),
            10 + j
        );
        for i in 1..=m {
            let _ = write!(
                c,
                "\n[[interface]]\nname = \"ext-{i}\"\nparent = \"r{j}-int\"\nvlan = {}\naddress = \"10.{i}.0.1/24\"\n",
                10 * i
            );
        }
        c.push_str("\n[backend]\ninternal = \"r");
        let _ = write!(c, "{j}-int\"\nhello_interval_ms = 100\n");
        let cpus = ec.map(|c| &c[m + j - 1]);
        add_element(out, &mut topo, tag, &format!("r{j}"), "forwarder", &c, cpus)?;
        let _ = write!(
            links,
            "[[link]]\na = \"r{j}:r{j}-int\"\nb = \"{}\"\na_mac = \"02:00:00:00:01:{j:02x}\"\n\n",
            ic_end(&format!("r{j}"))
        );
    }
    if switch {
        add_switch(
            out,
            &mut topo,
            tag,
            &ic_ports,
            ec.map(|c| &c[m + n]),
            &links,
        )?;
    } else {
        // GRO on the bridge's ports: their veths take what the elements' XDP redirects.
        let _ = write!(topo, "[[switch]]\nname = \"ic\"\ngro = true\n\n{links}");
    }
    let p = out.join(format!("lab-{tag}.toml"));
    write(&p, &topo)?;
    Ok(Setup {
        contender: "multistage",
        backends: n,
        cores: m * lb_cores + n,
        lab: p,
        first_hops: (1..=m)
            .map(|i| (format!("lb{i}"), format!("lb{i}-ext")))
            .collect(),
        placed: cpus.is_some(),
        note,
    })
}

/// The star router of `m` members (docs/star.md), one per network, each a forwarder with
/// its fast path facing its network's host, joined by our switch as in `multistage` (the
/// cores left over with it). The route lookup is made once, by the member where a frame
/// enters; the member facing the next hop sends it on: every frame crosses two members.
fn star(out: &Path, m: usize, table: &TableFile, tag: &str) -> Result<Setup, String> {
    let (cpus, note) = plan_cpus(m, m + 1, true);
    let (hc, ec) = (cpus.as_ref().map(|c| &c.0), cpus.as_ref().map(|c| &c.1));
    let mut topo = format!("name = \"sc\"\n\n{}", hosts(m, hc));
    let mut links = String::new();
    let mut members = String::new();
    for i in 1..=m {
        let _ = write!(
            members,
            "\n[[star.member]]\nmac = \"02:00:00:00:05:{i:02x}\"\nnetworks = [{{ prefix = \"10.{i}.0.0/24\", port = 0 }}]\n"
        );
    }
    let mut ports = Vec::new();
    for i in 1..=m {
        let c = format!(
            "{}\n[[interface]]\nname = \"s{i}-ext\"\naddress = \"10.{i}.0.1/24\"\n\n[[interface]]\nname = \"s{i}-int\"\naddress = \"10.255.1.{i}/24\"\n\n[star]\ninternal = \"s{i}-int\"\n{members}",
            table_line(table)
        );
        let cpus = ec.map(|c| &c[i - 1]);
        add_element(out, &mut topo, tag, &format!("s{i}"), "forwarder", &c, cpus)?;
        // The star header (12 bytes) rides inside the switch: the largest frames cross
        // whole.
        let _ = write!(
            links,
            "[[link]]\na = \"h{i}:eth0\"\nb = \"s{i}:s{i}-ext\"\n\n[[link]]\na = \"s{i}:s{i}-int\"\nb = \"ic:ic-s{i}\"\na_mac = \"02:00:00:00:05:{i:02x}\"\nmtu = 1512\n\n"
        );
        ports.push(format!("ic-s{i}"));
    }
    add_switch(out, &mut topo, tag, &ports, ec.map(|c| &c[m]), &links)?;
    let p = out.join(format!("lab-{tag}.toml"));
    write(&p, &topo)?;
    Ok(Setup {
        contender: "star",
        backends: 0,
        cores: m,
        lab: p,
        first_hops: (1..=m)
            .map(|i| (format!("s{i}"), format!("s{i}-ext")))
            .collect(),
        placed: cpus.is_some(),
        note,
    })
}

/// One router (ours or the kernel's) with a port per network, on `cores` cores: our
/// forwarder with that many workers, or the kernel with that many queues per link.
fn single(
    out: &Path,
    m: usize,
    cores: usize,
    kernel: bool,
    table: &TableFile,
    tag: &str,
) -> Result<Setup, String> {
    // The router's cores as one element's list.
    let (cpus, note) = plan_cpus(m, cores, false);
    let (hc, rc) = match &cpus {
        Some((h, e)) => {
            let all: Vec<usize> = e
                .iter()
                .filter_map(|c| io::placement::CpuList::parse(c).ok())
                .flat_map(|c| c.cpus())
                .collect();
            (Some(h), Some(io::placement::CpuList::of(&all).to_string()))
        }
        None => (None, None),
    };
    let mut c = table_line(table);
    for i in 1..=m {
        let _ = write!(
            c,
            "\n[[interface]]\nname = \"r-eth{i}\"\naddress = \"10.{i}.0.1/24\"\n"
        );
    }
    if !kernel {
        let _ = write!(c, "\n[io]\nfast_path = true\nworkers = {cores}\n");
    }
    let f = format!("{tag}-r.toml");
    write(&out.join(&f), &c)?;
    let role = if kernel { "linux" } else { "forwarder" };
    let mut topo = format!(
        "name = \"sc\"\n\n{}[[element]]\nname = \"r\"\nrole = \"{role}\"\nconfig = \"{f}\"\n{}\n",
        hosts(m, hc),
        cpus_line(rc.as_ref())
    );
    for i in 1..=m {
        let q = if cores > 1 {
            format!("queues = {cores}\n")
        } else {
            String::new()
        };
        let _ = write!(
            topo,
            "[[link]]\na = \"h{i}:eth0\"\nb = \"r:r-eth{i}\"\n{q}\n"
        );
    }
    let p = out.join(format!("lab-{tag}.toml"));
    write(&p, &topo)?;
    Ok(Setup {
        contender: match (kernel, cores) {
            (true, _) => "kernel",
            (false, 1) => "forwarder",
            (false, _) => "workers",
        },
        backends: 0,
        cores,
        lab: p,
        first_hops: (1..=m)
            .map(|i| ("r".to_string(), format!("r-eth{i}")))
            .collect(),
        placed: cpus.is_some(),
        note,
    })
}

fn write(path: &Path, s: &str) -> Result<(), String> {
    std::fs::write(path, s).map_err(|e| format!("{}: {e}", path.display()))
}

/// What one router did at one frame size and table.
struct Measured {
    peak: f64,
    zero_loss: f64,
    /// The offered load at which the elements' costs were measured.
    cost_at: f64,
    /// The interconnection's (the bridge's) receive work at that load, a multistage
    /// router's only: no element's, but on the same cores here.
    interconnect: Value,
    rows: Vec<Value>,
    elements: Vec<Value>,
}

/// Brings a setup's lab up, resolves every path, and measures peak and zero-loss rates and
/// the elements' costs at the zero-loss rate.
fn measure(
    opts: &ScaleOpts,
    s: &Setup,
    table: &TableFile,
    size: usize,
    ceiling: f64,
    progress: &mut dyn FnMut(&str),
) -> Result<Measured, String> {
    let k = opts.ports;
    let name = format!("sc{}", std::process::id());
    let mut l = lab::Lab::load(&s.lab, Some(&name), opts.exe.clone())?;
    l.fast_path = Some(s.contender != "kernel");
    l.io = (s.contender != "kernel").then(|| "xdp".to_string());
    let _ = l.down();
    l.up()?;
    let r = (|| {
        prepare(&l, s, opts)?;
        let napi = element_napi(&l, opts.rt_napi)?;
        if s.contender == "multistage" && opts.lb_cores > 1 {
            spread_lb_napi(&l)?;
        }
        // The bridge's ports' NAPI threads: what the interconnection costs.
        let bridge = if s.contender == "multistage" && opts.interconnect == Interconnect::Bridge {
            node_napi(&l, "ic", opts.rt_napi)?
        } else {
            Vec::new()
        };
        let bridge_cpu = || -> f64 {
            bridge
                .iter()
                .filter_map(|&t| crate::process_cpu_seconds(t))
                .sum()
        };
        let macs: Vec<String> = s
            .first_hops
            .iter()
            .map(|(n, i)| lab_mac(&l, n, i))
            .collect::<Result<_, _>>()?;
        let senders = streams(k);
        let dst_dir = std::fs::canonicalize(&opts.out).unwrap_or_else(|_| opts.out.clone());
        let gens_at = |total: f64| -> Vec<(String, Vec<String>, String)> {
            let each = format!("{:.0}", (total / senders.len() as f64).max(1.0));
            senders
                .iter()
                .map(|&(from, to)| {
                    let (dst_key, dst) = if table.spread {
                        (
                            "--dst-prefixes",
                            dst_dir
                                .join(format!("table-{}-to{to}.txt", table.key))
                                .to_string_lossy()
                                .into_owned(),
                        )
                    } else {
                        ("--dst", format!("10.{to}.0.10"))
                    };
                    let args = vec![
                        "--dst-mac".into(),
                        macs[from - 1].clone(),
                        "--src".into(),
                        format!("10.{from}.0.10"),
                        dst_key.into(),
                        dst,
                        "--flows".into(),
                        opts.flows.to_string(),
                        "--flow-base".into(),
                        (from * 1000).to_string(),
                        "--xdp".into(),
                    ];
                    (format!("h{from}"), args, each.clone())
                })
                .collect()
        };
        let sinks: Vec<String> = senders.iter().map(|&(_, to)| format!("h{to}")).collect();
        // Dropped at the closure's end, before the lab goes down.
        let kept = KeptSinks::new(&l, &opts.exe);
        let point = |total: f64, secs: f64| {
            let g = gens_at(total);
            let gens: Vec<(&str, Vec<String>, String)> = g
                .iter()
                .map(|(n, a, r)| (n.as_str(), a.clone(), r.clone()))
                .collect();
            let sinks: Vec<&str> = sinks.iter().map(String::as_str).collect();
            // Which hop dropped what: every interface's transmit drops across the point.
            let before = l.tx_dropped();
            let p = kept.point(secs, size, &gens, &sinks, opts.sink)?;
            Ok::<_, String>((p, json!(lab::drops::grown(&before, &l.tx_dropped()))))
        };
        let top = ceiling * senders.len() as f64;
        let (mut rows, peak, zero_loss, peak_at) = rates(&point, top, opts, s, size, progress)?;
        // The elements' cost per frame where they work hardest: at the load that gave the
        // peak. (At a low load each frame pays for a wake-up and a poll of its own, and the
        // cost per frame says little about capacity; at overload some of the work goes to
        // frames the next hop drops, which this counts against the frames taken.)
        let at = peak_at;
        let before = element_load(&l, &napi);
        let bridge_before = bridge_cpu();
        let (p, drops) = point(at, 2.0 * opts.seconds)?;
        let after = element_load(&l, &napi);
        let bridge_s = bridge_cpu() - bridge_before;
        // Every frame crosses the bridge twice: LB to back-end, back-end to LB.
        let mut elements = element_rows(&before, &after);
        // Our switch as the interconnection is an element of the lab, not of the router:
        // its cost goes with the bridge's.
        let switch_row = elements
            .iter()
            .position(|e| e["element"] == "ic")
            .map(|i| elements.remove(i));
        // A frame crosses the multistage router's interconnection twice (LB to back-end,
        // back-end to LB), the star's once (member to member).
        let crossings = if s.contender == "star" { 1 } else { 2 } * (p.received + p.sink_dropped);
        let interconnect = if let Some(sw) = switch_row {
            let cpu =
                sw["cpu_s"].as_f64().unwrap_or(0.0) + sw["napi_cpu_s"].as_f64().unwrap_or(0.0);
            json!({"kind": "switch", "napi_threads": sw["napi_threads"], "cpu_s": sw["cpu_s"], "napi_cpu_s": sw["napi_cpu_s"],
                "fast_path_packets": sw["fast_path_packets"], "rx_packets": sw["rx_packets"],
                "frames_per_cpu_s": if cpu >= 0.05 { (crossings as f64 / cpu).round() } else { 0.0 }})
        } else if bridge.is_empty() {
            Value::Null
        } else {
            json!({"kind": "bridge", "napi_threads": bridge.len(), "napi_cpu_s": (bridge_s * 100.0).round() / 100.0,
                "frames_per_cpu_s": if bridge_s >= 0.05 { (crossings as f64 / bridge_s).round() } else { 0.0 }})
        };
        rows.push(json!({"kind": "cost", "offered_pps": p.offered_pps.round(), "forwarded_pps": p.forwarded_pps.round(), "sent": p.sent, "received": p.received, "lost": p.lost, "drops": drops}));
        shares(&mut elements, s, opts);
        progress(&format!("{} {} B: costs at {at:.0} pps", label(s), size));
        Ok(Measured {
            peak,
            zero_loss,
            cost_at: at,
            interconnect,
            rows,
            elements,
        })
    })();
    let _ = l.down();
    r
}

/// Each element's `share` of the router's traffic and its `cores`.
fn shares(elements: &mut [Value], s: &Setup, opts: &ScaleOpts) {
    let k = opts.ports;
    // The share of the router's traffic that crosses each element: every frame crosses
    // two LBs (in and out: with one pair or two networks each LB carries every frame,
    // with K networks 2/K of them) and one back-end, in the proportion the LBs spread
    // flows, read from what each took (not from what was delivered: at overload an
    // element also takes frames that are dropped further on); or the one router.
    let took = |e: &Value| {
        e["rx_packets"].as_u64().unwrap_or(0) + e["fast_path_packets"].as_u64().unwrap_or(0)
    };
    let is_lb = |e: &Value| e["element"].as_str().is_some_and(|n| n.starts_with("lb"));
    let lbs: u64 = elements.iter().filter(|e| is_lb(e)).map(took).sum();
    let others: u64 = elements.iter().filter(|e| !is_lb(e)).map(took).sum();
    for e in elements.iter_mut() {
        let share = if s.contender == "star" {
            // Every frame crosses two members: where it enters, where it leaves.
            2.0 * took(e) as f64 / others.max(1) as f64
        } else if is_lb(e) {
            // By design, not by count: with one pair the first LB also takes what the
            // second never sees, at overload.
            if lbs == 0 {
                0.0
            } else if k <= 2 {
                1.0
            } else {
                2.0 / k as f64
            }
        } else {
            took(e) as f64 / others.max(1) as f64
        };
        e["share"] = json!((share * 1000.0).round() / 1000.0);
        let cores = if s.contender == "multistage" && is_lb(e) {
            opts.lb_cores
        } else {
            1
        };
        e["cores"] = json!(cores);
    }
}

/// A setup's peak and zero-loss rates: steps of offered load up to `top`, then a search
/// for the zero-loss rate; each point's row, the peak, the zero-loss rate and the load
/// that gave the peak.
fn rates(
    point: &dyn Fn(f64, f64) -> Result<(forward_bench::Point, Value), String>,
    top: f64,
    opts: &ScaleOpts,
    s: &Setup,
    size: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<(Vec<Value>, f64, f64, f64), String> {
    let steps: Vec<f64> = if opts.quick {
        vec![0.5, 1.0]
    } else {
        (1..=5).map(|i| i as f64 / 5.0).collect()
    };
    let searches = if opts.quick { 3 } else { 6 };
    let mut rows = Vec::new();
    let (mut peak, mut zero_loss, mut peak_at) = (0.0f64, 0.0f64, 0.0f64);
    for f in steps {
        let (p, drops) = point(top * f, opts.seconds)?;
        if p.forwarded_pps > peak {
            (peak, peak_at) = (p.forwarded_pps, top * f);
        }
        if p.lost == 0 {
            zero_loss = zero_loss.max(p.offered_pps);
        }
        rows.push(json!({"kind": "step", "offered_pps": p.offered_pps.round(), "forwarded_pps": p.forwarded_pps.round(), "sent": p.sent, "received": p.received, "lost": p.lost, "drops": drops}));
        progress(&format!(
            "{} {} B: offered {:.0} pps",
            label(s),
            size,
            p.offered_pps
        ));
    }
    let (mut lo, mut hi) = (0.0f64, top);
    for _ in 0..searches {
        let mid = (lo + hi) / 2.0;
        let (p, drops) = point(mid, opts.seconds)?;
        if p.forwarded_pps > peak {
            (peak, peak_at) = (p.forwarded_pps, mid);
        }
        if p.lost == 0 {
            lo = mid;
            zero_loss = zero_loss.max(p.offered_pps);
        } else {
            hi = mid;
        }
        progress(&format!(
            "{} {} B: zero-loss search {mid:.0} pps, lost {}{}",
            label(s),
            size,
            p.lost,
            where_dropped(&drops)
        ));
        rows.push(json!({"kind": "search", "offered_pps": p.offered_pps.round(), "forwarded_pps": p.forwarded_pps.round(), "sent": p.sent, "received": p.received, "lost": p.lost, "drops": drops}));
    }
    Ok((rows, peak, zero_loss, peak_at))
}

/// The lab of a setup made ready to measure: every host's receive work where it goes (GRO
/// on, NAPI threads of its own, placed), a kernel router's too, and every stream's path
/// forwarding.
fn prepare(l: &lab::Lab, s: &Setup, opts: &ScaleOpts) -> Result<(), String> {
    let k = opts.ports;
    // Every host takes what a router redirects in XDP (GRO on, so its veth runs NAPI);
    // then its NAPI threads go to its cores; a kernel router's too.
    // Threaded whether placed or not: a host's receive work run in softirq would run
    // in the NAPI thread of whichever element sent it the frame, and be counted as
    // that element's (the egress LB's, the forwarder's).
    let m = networks(k);
    for i in 1..=m {
        let h = format!("h{i}");
        lab::cmd::in_ns(&l.ns(&h), "ethtool", &["-K", "eth0", "gro", "on"])?;
        node_napi(l, &h, opts.rt_napi)?;
        l.place(&h)?;
    }
    if s.contender == "kernel" {
        for i in 1..=m {
            lab::cmd::in_ns(
                &l.ns("r"),
                "ethtool",
                &["-K", &format!("r-eth{i}"), "gro", "on"],
            )?;
        }
        l.place("r")?;
    }
    for (from, to) in streams(k) {
        let dst = format!("10.{to}.0.10");
        let mut tries = 20;
        loop {
            match lab::cmd::in_ns(
                &l.ns(&format!("h{from}")),
                "ping",
                &["-c", "2", "-i", "0.2", "-W", "1", &dst],
            ) {
                Ok(_) => break,
                Err(e) if tries <= 1 => {
                    return Err(format!(
                        "{} does not forward h{from} -> {dst}: {e}",
                        s.contender
                    ))
                }
                Err(_) => tries -= 1,
            }
        }
    }
    Ok(())
}

/// The NAPI threads of a host's or the bridge's interfaces (moved into threads of their
/// own), at SCHED_FIFO 50 with `rt`.
fn node_napi(l: &lab::Lab, node: &str, rt: bool) -> Result<Vec<i32>, String> {
    let threads = l.napi_threads(node)?;
    if rt {
        realtime_napi(&threads).map_err(|e| format!("--rt-napi: {node}: {e}"))?;
    }
    Ok(threads)
}

/// An LB of several cores (`--lb-cores`): its external port's receive work (the fast
/// path, in NAPI) on its first core, its internal port's on its second. (Placed with
/// `cpus`, the LB itself keeps both beside its one worker, on the core it leaves free.)
fn spread_lb_napi(l: &lab::Lab) -> Result<(), String> {
    for e in l.topo.element.iter().filter(|e| e.name.starts_with("lb")) {
        let Some(c) = l.cpus(&e.name).map(|c| c.cpus()) else {
            continue;
        };
        for (k, port) in ["ext", "int"].into_iter().enumerate() {
            let ifname = format!("{}-{port}", e.name);
            for pid in forward_bench::threaded_napi(l, &e.name, &ifname)? {
                io::placement::pin(pid, &[c[k % c.len()]])
                    .map_err(|err| format!("--lb-cores: {}:{ifname}: {err}", e.name))?;
            }
        }
    }
    Ok(())
}

/// ` (at h1:eth0 40, lb1:eth1 12)`: the interfaces that dropped frames in a point, most
/// first; nothing if none did.
fn where_dropped(drops: &Value) -> String {
    let mut v: Vec<(&String, u64)> = drops
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, d)| (k, d.as_u64().unwrap_or(0)))
        .collect();
    if v.is_empty() {
        return String::new();
    }
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let at: Vec<String> = v.iter().map(|(k, d)| format!("{k} {d}")).collect();
    format!(" (at {})", at.join(", "))
}

fn label(s: &Setup) -> String {
    match s.contender {
        "multistage" => format!("multistage N={}", s.backends),
        "star" => format!("star ({} members)", s.cores),
        c => format!("{c} ({} cores)", s.cores),
    }
}

/// The model: with a core per element, each element forwards at most 1/c frames a second,
/// c its CPU seconds per frame, and carries `share` of the router's frames (an LB of one
/// pair: 1, of K >= 2 networks: 2/K; a back-end of N: about 1/N, as the LBs spread them),
/// so the router delivers at most min over elements of 1 / (c * share), and no more than
/// its generators offer. Returns (prediction, the element that limits it).
pub fn predict(elements: &[Value], offer_limit: f64) -> (f64, String) {
    let mut best = (offer_limit, "generators".to_string());
    for e in elements {
        let per_cpu = e["frames_per_cpu_s"].as_f64().unwrap_or(0.0);
        let share = e["share"].as_f64().unwrap_or(0.0);
        if per_cpu <= 0.0 || share <= 0.0 {
            continue;
        }
        let cores = e["cores"].as_f64().unwrap_or(1.0).max(1.0);
        let cap = per_cpu * cores / share;
        if cap < best.0 {
            best = (cap, e["element"].as_str().unwrap_or("").to_string());
        }
    }
    best
}

pub fn run(opts: &ScaleOpts, progress: &mut dyn FnMut(&str)) -> Result<Value, String> {
    let (only, sizes, tables) = matrix(opts)?;
    std::fs::create_dir_all(&opts.out).map_err(|e| format!("{}: {e}", opts.out.display()))?;
    let cores = io::placement::online_cpus().len();
    let m = networks(opts.ports);
    let fo = ForwardOpts {
        out: opts.out.clone(),
        quick: true,
        exe: opts.exe.clone(),
        seconds: opts.seconds,
        contenders: Vec::new(),
        xdp: true,
        io: Vec::new(),
        tables: Vec::new(),
        flows: Vec::new(),
        sizes: Vec::new(),
        ipv6: false,
        rt_napi: opts.rt_napi,
        sink: opts.sink,
        plain_hosts: false,
        acl_masks: 4,
        bpf_stats: false,
        split_cores: false,
    };
    let mut ceilings = serde_json::Map::new();
    for &size in &sizes {
        progress(&format!("generator ceiling at {size} B"));
        let c = forward_bench::ceiling(&fo, size, false, &format!("sc{}", std::process::id()))?;
        ceilings.insert(size.to_string(), json!(c.round()));
    }
    let mut results = Vec::new();
    let mut placement = Vec::new();
    for tname in &tables {
        let t = match tname.parse::<usize>() {
            Ok(n) => table::synthetic(n, n as u64),
            Err(_) => table::read(Path::new(tname))?.0,
        };
        let tf = TableFile {
            key: if opts.spread {
                format!("{}-spread", t.routes.len())
            } else {
                t.routes.len().to_string()
            },
            spread: opts.spread,
        };
        let key = tf.key.clone();
        write_table(opts, &t, &key, m)?;
        let setups = setups(opts, &only, m, &tf)?;
        for s in &setups {
            if !placement.iter().any(|p: &Value| p["contender"] == label(s)) {
                placement.push(json!({"contender": label(s), "cores": s.cores, "placed": s.placed, "note": s.note}));
            }
        }
        for &size in &sizes {
            let ceiling = ceilings[&size.to_string()].as_f64().unwrap_or(0.0);
            let offer_limit = ceiling * streams(opts.ports).len() as f64;
            let mut single_peak = None;
            for s in &setups {
                // A router that fails a point (a lab that did not come up, a generator
                // refused) is tried once more on a fresh lab, then recorded as failed: one
                // router's trouble does not cost the others' results.
                let r = match measure(opts, s, &tf, size, ceiling, progress) {
                    Ok(r) => r,
                    Err(_) if crate::interrupted() => return Err("interrupted".into()),
                    Err(e) => {
                        progress(&format!("{}: {e}; once more", label(s)));
                        match measure(opts, s, &tf, size, ceiling, progress) {
                            Ok(r) => r,
                            Err(e) => {
                                progress(&format!("{}: failed again: {e}", label(s)));
                                results.push(json!({
                                    "contender": s.contender, "label": label(s), "backends": s.backends,
                                    "cores": s.cores, "placed": s.placed, "table_prefixes": t.routes.len(),
                                    "frame_bytes": size, "error": e,
                                }));
                                continue;
                            }
                        }
                    }
                };
                let (pred, limit) = predict(&r.elements, offer_limit);
                // The elements' own limit, with generators that never run out.
                let (own, own_limit) = predict(&r.elements, f64::INFINITY);
                if s.contender == "forwarder" {
                    single_peak = Some(r.peak);
                }
                results.push(json!({
                    "contender": s.contender, "label": label(s), "backends": s.backends,
                    "cores": s.cores, "placed": s.placed, "table_prefixes": t.routes.len(),
                    "frame_bytes": size, "generator_ceiling_pps": ceiling.round(),
                    "peak_pps": r.peak.round(), "zero_loss_pps": r.zero_loss.round(),
                    "model_pps": pred.round(), "model_limit": limit,
                    "model_elements_pps": if own.is_finite() { json!(own.round()) } else { Value::Null },
                    "model_elements_limit": own_limit,
                    "costs_at_offered_pps": r.cost_at.round(),
                    "interconnect": r.interconnect,
                    "elements": r.elements, "points": r.rows,
                }));
            }
            // Each router's peak over the single forwarder's, same size and table.
            if let Some(sp) = single_peak.filter(|&p| p > 0.0) {
                for r in results
                    .iter_mut()
                    .filter(|r| r["frame_bytes"] == size && r["table_prefixes"] == t.routes.len())
                {
                    let peak = r["peak_pps"].as_f64().unwrap_or(0.0);
                    r["over_single"] = json!((peak / sp * 1000.0).round() / 1000.0);
                }
            }
        }
    }
    // The headline: the multistage router of the fewest back-ends (one LB pair at K <= 2)
    // over the single forwarder, first size and table.
    let multistage_over_single = results
        .iter()
        .find(|r| r["contender"] == "multistage")
        .and_then(|r| r["over_single"].as_f64());
    let model = model_table(&results, opts.ports, opts.lb_cores);
    let mut v = json!({
        "bench": "scale", "cores": cores, "ports": opts.ports, "networks": m,
        "backends": opts.backends, "flows_per_host": opts.flows, "seconds_per_point": opts.seconds,
        "generator": "xdp", "sink": opts.sink.name(),
        "destinations": if opts.spread { "table" } else { "hosts" },
        "rt_napi": opts.rt_napi, "interconnect": opts.interconnect.name(), "lb_cores": opts.lb_cores,
        "generator_ceiling_pps": ceilings, "placement": placement,
        "multistage_over_single": multistage_over_single,
        "model": model,
        "results": results,
    });
    write(
        &opts.out.join("results.json"),
        &serde_json::to_string_pretty(&v).unwrap_or_default(),
    )?;
    let plots = crate::plot::scale_plot(&opts.out, &v)?;
    v["plots"] = json!(plots);
    Ok(v)
}

/// What --only, --sizes and --tables ask for (or --quick, or the whole matrix), once the
/// options are checked.
#[allow(clippy::type_complexity)]
fn matrix(opts: &ScaleOpts) -> Result<(Vec<String>, Vec<usize>, Vec<String>), String> {
    if opts.ports == 0 || opts.ports > 16 {
        return Err(format!("--ports {}: 1 to 16 external networks", opts.ports));
    }
    if opts.backends.is_empty() || opts.backends.iter().any(|&n| n == 0 || n > 16) {
        return Err("--backends: numbers of back-ends from 1 to 16".into());
    }
    if !(1..=8).contains(&opts.lb_cores) {
        return Err(format!("--lb-cores {}: 1 to 8 cores an LB", opts.lb_cores));
    }
    let only: Vec<String> = if !opts.only.is_empty() {
        if let Some(o) = opts.only.iter().find(|o| !CONTENDERS.contains(&o.as_str())) {
            return Err(format!("--only {o:?}: use {}", CONTENDERS.join(", ")));
        }
        opts.only.clone()
    } else if opts.quick {
        vec!["multistage".into(), "forwarder".into()]
    } else {
        CONTENDERS.iter().map(|s| s.to_string()).collect()
    };
    let sizes = if !opts.sizes.is_empty() {
        opts.sizes.clone()
    } else if opts.quick {
        vec![64]
    } else {
        vec![64, 1470]
    };
    let tables = if !opts.tables.is_empty() {
        opts.tables.clone()
    } else if opts.quick {
        vec!["10".into()]
    } else {
        vec!["10".into(), "167000".into()]
    };
    Ok((only, sizes, tables))
}

/// The routes file of table `t` (files keyed `key`), and with --spread each receiving
/// network's share of it (the senders draw their destinations from their receiver's).
fn write_table(opts: &ScaleOpts, t: &table::Table, key: &str, m: usize) -> Result<(), String> {
    if opts.spread {
        // Prefix i to the i-th receiving network (round robin), through its host; each
        // sender draws its destinations from its receiver's share.
        let mut to: Vec<usize> = streams(opts.ports).iter().map(|s| s.1).collect();
        to.sort_unstable();
        to.dedup();
        let mut text = String::new();
        let mut shares = vec![String::new(); m + 1];
        for (i, (p, _)) in t.routes.iter().enumerate() {
            let n = to[i % to.len()];
            let _ = writeln!(text, "{p} 10.{n}.0.10");
            let _ = writeln!(shares[n], "{p}");
        }
        write(&opts.out.join(format!("table-{key}.txt")), &text)?;
        for &n in &to {
            write(&opts.out.join(format!("table-{key}-to{n}.txt")), &shares[n])?;
        }
    } else {
        let text: String = t.routes.iter().map(|(p, _)| format!("{p}\n")).collect();
        write(&opts.out.join(format!("table-{key}.txt")), &text)?;
    }
    Ok(())
}

/// The routers to measure on table `tf`, as --only and --backends ask.
fn setups(
    opts: &ScaleOpts,
    only: &[String],
    m: usize,
    tf: &TableFile,
) -> Result<Vec<Setup>, String> {
    let key = &tf.key;
    let mut setups = Vec::new();
    if only.iter().any(|o| o == "forwarder") {
        setups.push(single(&opts.out, m, 1, false, tf, &format!("fwd-{key}"))?);
    }
    for &n in &opts.backends {
        if only.iter().any(|o| o == "multistage") {
            setups.push(multistage(
                &opts.out,
                (m, n, opts.lb_cores),
                tf,
                &format!("ms{n}-{key}"),
                opts.interconnect,
            )?);
        }
        if only.iter().any(|o| o == "kernel") {
            setups.push(single(
                &opts.out,
                m,
                m + n,
                true,
                tf,
                &format!("linux{n}-{key}"),
            )?);
        }
        if only.iter().any(|o| o == "workers") {
            setups.push(single(
                &opts.out,
                m,
                m + n,
                false,
                tf,
                &format!("wk{n}-{key}"),
            )?);
        }
    }
    if only.iter().any(|o| o == "star") {
        setups.push(star(&opts.out, m, tf, &format!("star-{key}"))?);
    }
    Ok(setups)
}

/// Draws the plots again from a run's results.json (after a change to the plots).
pub fn replot(dir: &Path) -> Result<Vec<String>, String> {
    let p = dir.join("results.json");
    let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?;
    crate::plot::scale_plot(dir, &v)
}

/// The model's prediction for routers not measured: N back-ends (1 to 16) with the
/// mean per-frame costs of the measured LBs and back-ends (first size and table), each
/// element on a core of its own, the LBs carrying what they carried and the back-ends an
/// even share.
fn model_table(results: &[Value], k: usize, lb_cores: usize) -> Value {
    let Some(first) = results.iter().find(|r| r["contender"] == "multistage") else {
        return Value::Null;
    };
    let (size, table) = (&first["frame_bytes"], &first["table_prefixes"]);
    let mut lb = Vec::new();
    let mut be = Vec::new();
    for r in results.iter().filter(|r| {
        r["contender"] == "multistage" && &r["frame_bytes"] == size && &r["table_prefixes"] == table
    }) {
        for e in r["elements"].as_array().into_iter().flatten() {
            let c = e["frames_per_cpu_s"].as_f64().unwrap_or(0.0);
            let share = e["share"].as_f64().unwrap_or(0.0);
            if c <= 0.0 || share <= 0.0 {
                continue;
            }
            if e["element"].as_str().is_some_and(|n| n.starts_with("lb")) {
                lb.push((c, share));
            } else {
                be.push(c);
            }
        }
    }
    if lb.is_empty() || be.is_empty() {
        return Value::Null;
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let lb_per_cpu = mean(&lb.iter().map(|x| x.0).collect::<Vec<_>>());
    let lb_share = mean(&lb.iter().map(|x| x.1).collect::<Vec<_>>());
    let be_per_cpu = mean(&be);
    let lb_cap = lb_per_cpu * lb_cores as f64 / lb_share;
    let rows: Vec<Value> = [1usize, 2, 4, 8, 16]
        .iter()
        .map(|&n| {
            let be_cap = be_per_cpu * n as f64;
            json!({"backends": n, "cores": networks(k) * lb_cores + n,
                "predicted_pps": lb_cap.min(be_cap).round(),
                "limit": if lb_cap < be_cap { "LBs" } else { "back-ends" }})
        })
        .collect();
    json!({
        "frame_bytes": size, "table_prefixes": table,
        "lb_frames_per_cpu_s": lb_per_cpu.round(), "lb_share": (lb_share * 1000.0).round() / 1000.0,
        "backend_frames_per_cpu_s": be_per_cpu.round(),
        "lb_over_backend_cost": ((be_per_cpu / lb_per_cpu) * 1000.0).round() / 1000.0,
        "predicted": rows,
    })
}

#[cfg(test)]
mod tests;
