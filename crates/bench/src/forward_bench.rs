//! `tessera bench forward`: forwarded versus offered load through a router, in the style
//! of the PC-router papers, for each contender in one run.
//!
//! Topology: the single-router testbed (two sources, two sinks, one router). The router
//! is our forwarder or the Linux kernel (same addresses, same routes). Traffic: constant
//! rate UDP from `tessera gen`, counted by `tessera sink --drop`. Cases: frame sizes 64,
//! 576 and 1470 bytes; one flow (src1 -> sink1), two flows (src1 -> sink1 and src2 ->
//! sink2) and many flows (src1 to destinations drawn from the table, all routed to sink1);
//! tables of 10, 1,000 and 167,000 prefixes. `--quick` runs 64 bytes, one flow, 10
//! prefixes. Before anything else it measures the generator's own ceiling (generator
//! straight into a sink on one wire), and every plot marks it: above it, the source and
//! not the router is the limit.
//!
//! `--ipv6` measures IPv6 as well, on the same lab in the same run: the hosts and the
//! router get an IPv6 network beside each IPv4 one (2001:db8:N::/64 beside 10.N.0.0/24),
//! the table file holds the IPv6 table too (synthetic with the IPv6 length mix, or a
//! file's IPv6 routes), and each contender is measured over IPv4, then over IPv6 (rows with
//! `"family": "ipv6"`, contender `NAME-ipv6`); the star's and the multistage router's
//! labs are made dual-stack the same way. IPv6's smallest test frame is 84 bytes
//! (Ethernet, IPv6, UDP, the probe, the FCS): where IPv4 is measured at 64 bytes, IPv6 is
//! at 84.

use crate::placement::{place_for, place_hosts};
use crate::table;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

mod point;
mod procs;
mod rounds;
mod variants;
pub use point::SinkKind;
pub(crate) use point::{drain, lab_point, report_of, watch_sink, KeptSinks, Point};
pub(crate) use procs::{realtime_napi, threaded_napi, External};
pub use rounds::{run_rounds, summarize as summarize_rounds};
pub use variants::{acl_rules_of, flow_sampling_of, ACL_PREFIX, FLOWS_PREFIX};
use variants::{acl_topo, flows_topo};

#[derive(Debug, Clone)]
pub struct ForwardOpts {
    pub out: PathBuf,
    pub quick: bool,
    /// The tessera binary (runs gen, sink and the lab).
    pub exe: PathBuf,
    /// Seconds per measurement point.
    pub seconds: f64,
    /// (name, command): `forwarder` and `linux` have no command (the lab runs them);
    /// others run their command in the router's namespace.
    pub contenders: Vec<(String, Option<String>)>,
    /// Send with `gen --xdp` (the XDP generator) instead of the AF_PACKET ring.
    pub xdp: bool,
    /// Our forwarder's backends: none (its config's), one, or several (then contenders
    /// `forwarder-BACKEND`).
    pub io: Vec<String>,
    /// Tables (synthetic sizes or files); empty: the default set.
    pub tables: Vec<String>,
    /// Traffic cases (one, two, many); empty: all.
    pub flows: Vec<String>,
    /// Frame sizes; empty: 64, 576, 1470.
    pub sizes: Vec<usize>,
    /// Measure IPv6 too (see the module's documentation).
    pub ipv6: bool,
    /// The receiving ports' NAPI threads at SCHED_FIFO 50 (`--rt-napi`).
    pub rt_napi: bool,
    /// How the sinks receive (`--sink`); latency is measured with an AF_XDP sink where
    /// this one only counts.
    pub sink: SinkKind,
    /// The hosts' links as a container's (`--hosts plain`: GRO off, no XDP program): the
    /// sinks then receive on the AF_PACKET ring (an XDP sink would run the host's NAPI).
    pub plain_hosts: bool,
    /// Distinct masks (prefix lengths) among the denials of an `--acl-rules` contender's
    /// list ([`dataplane::acl::tss::measurement_list`]).
    pub acl_masks: usize,
    /// The kernel counts the BPF programs' run time while the bench runs (`--bpf-stats`):
    /// each contender's nanoseconds per frame in the forwarder's fast-path programs.
    pub bpf_stats: bool,
    /// The router on the last CPU, the hosts on the others (`--split-cores`), where the
    /// machine is too small to give each node cores of its own.
    pub split_cores: bool,
}

/// The smallest IPv6 test frame: Ethernet, IPv6 and UDP headers, the probe, the FCS.
pub const MIN_FRAME6: usize = 14 + 40 + 8 + wire::probe::LEN + 4;

/// The IPv6 address beside a lab IPv4 address: 10.N.0.X is 2001:db8:N::X.
fn six_of(a: &str) -> String {
    let o: Vec<&str> = a.split('.').collect();
    match o.as_slice() {
        [_, n, _, x] => format!("2001:db8:{n}::{x}"),
        _ => a.to_string(),
    }
}

/// The single-router lab and its router's config, made dual-stack: each host and router
/// interface gets the IPv6 address beside its IPv4 one, each host a default IPv6 route.
fn dual_stack(topo: &str, router: &str) -> (String, String) {
    let mut topo = topo.to_string();
    let mut router = router.to_string();
    for n in 1..=4 {
        topo = topo
            .replace(
                &format!("address = \"10.{n}.0.10/24\" }}"),
                &format!("address = \"10.{n}.0.10/24\", address6 = \"2001:db8:{n}::10/64\" }}"),
            )
            .replace(
                &format!("routes = [\"default via 10.{n}.0.1\"]"),
                &format!("routes = [\"default via 10.{n}.0.1\", \"default via 2001:db8:{n}::1\"]"),
            );
        router = router.replace(
            &format!("address = \"10.{n}.0.1/24\""),
            &format!("address = [\"10.{n}.0.1/24\", \"2001:db8:{n}::1/64\"]"),
        );
    }
    (topo, router)
}

/// Lets `node:ifname` (a veth) take frames from the XDP generator: GRO on, so that the veth
/// runs NAPI and accepts XDP frames, and NAPI in its own kernel thread, so that receiving
/// is not charged to the sending core (see docs/measurement.md); with `rt`, that thread at
/// SCHED_FIFO priority 50.
fn xdp_receiver(lab: &lab::Lab, node: &str, ifname: &str, rt: bool) -> Result<(), String> {
    let ns = lab.ns(node);
    sh(
        "ip",
        &["netns", "exec", &ns, "ethtool", "-K", ifname, "gro", "on"],
    )?;
    let mine = threaded_napi(lab, node, ifname)?;
    if rt {
        if mine.is_empty() {
            return Err(format!(
                "--rt-napi: no NAPI thread appeared for {node}:{ifname}"
            ));
        }
        realtime_napi(&mine).map_err(|e| format!("--rt-napi: {node}:{ifname}: {e}"))?;
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flows {
    One,
    Two,
    Many,
}

impl Flows {
    fn name(self) -> &'static str {
        match self {
            Flows::One => "one",
            Flows::Two => "two",
            Flows::Many => "many",
        }
    }
}

struct Bench<'a> {
    opts: &'a ForwardOpts,
    lab: lab::Lab,
    /// The sinks, kept from one point to the next of this lab.
    sinks: KeptSinks,
    done: usize,
    total: usize,
}

fn sh(prog: &str, args: &[&str]) -> Result<String, String> {
    lab::cmd::run(prog, args)
}

impl Bench<'_> {
    fn progress(&mut self, what: &str) {
        self.done += 1;
        let w = 30;
        let filled = (self.done * w / self.total.max(1)).min(w);
        eprint!(
            "\r[{}{}] {:>3}/{} {:<60}",
            "#".repeat(filled),
            ".".repeat(w - filled),
            self.done,
            self.total,
            what
        );
        if self.done >= self.total {
            eprintln!();
        }
    }

    fn mac(&self, node: &str, ifname: &str) -> Result<String, String> {
        lab_mac(&self.lab, node, ifname)
    }

    /// Runs sinks and generators for one point. `gens` are (source node, dst args, rate).
    fn point(
        &self,
        size: usize,
        gens: &[(&str, Vec<String>, String)],
        sinks: &[&str],
    ) -> Result<Point, String> {
        self.point_with(size, gens, sinks, self.opts.sink)
    }

    /// [`Bench::point`] with sinks of the kind `sink`.
    fn point_with(
        &self,
        size: usize,
        gens: &[(&str, Vec<String>, String)],
        sinks: &[&str],
        sink: SinkKind,
    ) -> Result<Point, String> {
        self.sinks.point(self.opts.seconds, size, gens, sinks, sink)
    }
}

/// One case of the matrix: a contender over a family, a table, a frame size and a flow
/// mix, at the generator's ceiling `ceil`.
#[derive(Clone, Copy)]
struct Case<'a> {
    contender: &'a str,
    family: &'a str,
    tsize: usize,
    size: usize,
    ceil: f64,
    flows: Flows,
    steps: &'a [f64],
    searches: usize,
}

impl Bench<'_> {
    /// Measures one case: the steps of offered load, the zero-loss search, and the
    /// latency at shares of the zero-loss rate (the generators `gens_at` a rate, into
    /// `sinks`); its rows go to `rows`.
    fn case<'s>(
        &mut self,
        c: &Case,
        gens_at: &dyn Fn(f64) -> Vec<(&'s str, Vec<String>, String)>,
        sinks: &[&str],
        rows: &mut Vec<Value>,
    ) -> Result<(), String> {
        let Case {
            contender,
            family,
            tsize,
            size,
            ceil,
            flows: fl,
            steps,
            searches,
        } = *c;
        let case = format!("{contender} {tsize} prefixes {size}B {} flow", fl.name());
        // A step's and a search point's slowest frame too (where the
        // sink stamps frames; not with `--sink count`): at overload, how
        // long after its sending the tail of a point arrives, which the
        // sinks' drain (`drain`) must cover.
        let mut record = |kind: &str, p: &Point| {
            rows.push(json!({
                    "contender": contender, "family": family, "table_prefixes": tsize, "frame_bytes": size, "flows": fl.name(),
                    "kind": kind, "offered_pps": p.offered_pps.round(), "forwarded_pps": p.forwarded_pps.round(),
                    "sent": p.sent, "received": p.received, "lost": p.lost, "sink_dropped": p.sink_dropped, "generator_ceiling_pps": ceil.round(),
                    "latency_max_ns": (p.latency_ns[2] > 0).then_some(p.latency_ns[2]),
                }));
        };
        let mut best = 0.0f64;
        // Paced at a fraction of the ceiling, 100% included: `--rate max`
        // with the XDP generator offers several times what any receiver
        // here takes, and beyond the ceiling the sink, not the router, is
        // what a point would measure.
        for &f in steps {
            let p = self.point(size, &gens_at(ceil * f), sinks)?;
            if p.lost == 0 {
                best = best.max(p.offered_pps);
            }
            record("step", &p);
            self.progress(&format!("{case}: offered {:.0} pps", p.offered_pps));
        }
        // Zero-loss throughput by binary search (RFC 2544 style) on the rate
        // asked for; reported as the highest load actually offered (the
        // generator may fall short of what it was asked) that was forwarded
        // without loss, among the steps and the search.
        let (mut lo, mut hi) = (0.0f64, ceil);
        for _ in 0..searches {
            let mid = (lo + hi) / 2.0;
            let p = self.point(size, &gens_at(mid), sinks)?;
            record("search", &p);
            if p.lost == 0 {
                lo = mid;
                best = best.max(p.offered_pps);
            } else {
                hi = mid;
            }
            self.progress(&format!(
                "{case}: zero-loss search {mid:.0} pps, lost {}",
                p.lost
            ));
        }
        rows.push(json!({
                "contender": contender, "family": family, "table_prefixes": tsize, "frame_bytes": size, "flows": fl.name(),
                "kind": "zero_loss_pps", "zero_loss_pps": best.round(), "generator_ceiling_pps": ceil.round(),
            }));
        // One-way latency through the router (the sink's receive time less
        // the generator's send time) at 10%, 50% and 90% of the zero-loss
        // rate.
        if best > 0.0 {
            for f in LATENCY_LOADS {
                let p = self.point_with(
                    size,
                    &gens_at(best * f),
                    sinks,
                    self.opts.sink.with_latency(),
                )?;
                rows.push(json!({
                        "contender": contender, "family": family, "table_prefixes": tsize, "frame_bytes": size, "flows": fl.name(),
                        "kind": "latency", "load_of_zero_loss": f, "offered_pps": p.offered_pps.round(),
                        "sent": p.sent, "received": p.received, "lost": p.lost, "sink_dropped": p.sink_dropped,
                        "latency_p50_ns": p.latency_ns[0], "latency_p99_ns": p.latency_ns[1], "latency_max_ns": p.latency_ns[2],
                        "generator_ceiling_pps": ceil.round(),
                    }));
                self.progress(&format!(
                    "{case}: latency at {:.0}% of zero-loss: p50 {} us, p99 {} us",
                    f * 100.0,
                    p.latency_ns[0] / 1000,
                    p.latency_ns[1] / 1000
                ));
            }
        }
        Ok(())
    }
}

/// Pings each source's destination over each family (`six`) in `families`, so that every
/// neighbour is resolved before a point; `patient`: up to 20 tries (a router that takes a
/// few seconds to come up), else one. An error names the contender that does not forward.
fn resolve(
    l: &lab::Lab,
    sources: &[Source],
    families: &[bool],
    patient: bool,
    contender: &str,
) -> Result<(), String> {
    for (src, _, _, _, dst4, _) in sources {
        for &six in families {
            let ns = l.ns(src);
            let dst = if six { six_of(dst4) } else { dst4.to_string() };
            let fam = if six { "-6" } else { "-4" };
            let mut tries = if patient { 20 } else { 1 };
            loop {
                match sh(
                    "ip",
                    &[
                        "netns", "exec", &ns, "ping", fam, "-c", "2", "-i", "0.2", "-W", "1", &dst,
                    ],
                ) {
                    Ok(_) => break,
                    Err(e) if tries <= 1 => {
                        return Err(format!("{contender} does not forward {src} -> {dst}: {e}"))
                    }
                    Err(_) => tries -= 1,
                }
            }
        }
    }
    Ok(())
}

/// The lab of one contender, not up yet, and the role of its router node: `other`, a
/// lab of its own (the star, the multistage router), else the single router's of
/// `topos` (plain, with the fast path, without it) that the contender runs; `external`:
/// the contender is a command of the user's.
fn contender_lab(
    opts: &ForwardOpts,
    contender: &str,
    external: bool,
    other: Option<&Path>,
    [topo, topo_fast, topo_user]: [&Path; 3],
    labname: &str,
) -> Result<(lab::Lab, String), String> {
    let fast = contender == FAST
        || contender == FAST_TC
        || acl_rules_of(contender).is_some()
        || flow_sampling_of(contender).is_some();
    let mut l = lab::Lab::load(
        match other {
            Some(p) => p,
            None if fast => topo_fast,
            None if contender == USER => topo_user,
            None => topo,
        },
        Some(labname),
        opts.exe.clone(),
    )?;
    let role = if external {
        "external"
    } else if contender.starts_with("forwarder") || other.is_some() {
        "forwarder"
    } else {
        contender
    };
    if other.is_none() {
        l.roles.insert("r".into(), role.into());
    }
    l.plain_hosts = opts.plain_hosts;
    if contender == MULTISTAGE_FAST {
        // (The lab turns GRO on on the switch's ports and the hosts' interfaces.)
        l.fast_path = Some(true);
        l.io = Some("xdp".into());
    } else if fast {
        l.io = Some(
            if contender == FAST_TC {
                "packet"
            } else {
                "xdp"
            }
            .into(),
        );
    } else if contender == USER || contender == STAR_USER {
        // Wire-like hosts, as every run before the fast path was the default.
        l.fast_path = Some(false);
        l.io = opts.io.first().cloned();
    } else if role == "forwarder" {
        l.io = match (contender.strip_prefix("forwarder-"), opts.io.first()) {
            (Some(b), _) => Some(b.to_string()),
            (None, b) => b.cloned(),
        };
    }
    Ok((l, role.to_string()))
}

/// What the routers of one table are given: the files' key (the table's IPv4 size, and
/// its IPv6 size with --ipv6), the table's sizes, the routes file, the router's config,
/// and the single router's labs (plain, with the fast path, without it).
struct TableFiles {
    key: String,
    tsize: usize,
    tsize6: usize,
    tfile: PathBuf,
    rcfg: PathBuf,
    topos: [PathBuf; 3],
}

/// Writes the routes file, the router's config and the single router's labs for table
/// `tname` (a number of prefixes for a synthetic table, or a table file) into --out.
fn table_files(opts: &ForwardOpts, tname: &str) -> Result<TableFiles, String> {
    // A synthetic table of that many prefixes, or a table file.
    let (t, t6) = match tname.parse::<usize>() {
        Ok(n) => (
            table::synthetic(n, n as u64),
            opts.ipv6.then(|| table::synthetic6(n, n as u64)),
        ),
        // A file may hold one family only: over IPv6 its IPv4 part may be empty.
        Err(_) if opts.ipv6 => {
            let path = Path::new(tname);
            let t6 = table::read6(path)?.0;
            let t = table::read(path).map(|t| t.0).unwrap_or_default();
            (t, Some(t6))
        }
        Err(_) => (table::read(Path::new(tname))?.0, None),
    };
    let tsize = t.routes.len();
    let tsize6 = t6.as_ref().map_or(0, |t| t.routes.len());
    // Files are named by their IPv4 size, and their IPv6 size with --ipv6.
    let key = if opts.ipv6 {
        format!("{tsize}-{tsize6}")
    } else {
        tsize.to_string()
    };
    if opts.ipv6 {
        eprintln!("bench forward: table {tname}: {tsize} IPv4 and {tsize6} IPv6 prefixes");
    } else {
        eprintln!("bench forward: table {tname}: {tsize} prefixes");
    }
    let tfile = opts.out.join(format!("table-{key}.txt"));
    let mut text: String = t.routes.iter().map(|(p, _)| format!("{p}\n")).collect();
    if let Some(t6) = &t6 {
        text.extend(t6.routes.iter().map(|(p, _)| format!("{p}\n")));
    }
    write(&tfile, &text)?;
    let rcfg = opts.out.join(format!("r-{key}.toml"));
    let via = if opts.ipv6 {
        "[\"10.3.0.10\", \"2001:db8:3::10\"]"
    } else {
        "\"10.3.0.10\""
    };
    let base = include_str!("../../../labs/single-router/r.toml").replace(
        "routes_file = \"routes.txt\"",
        &format!("routes_file = \"table-{key}.txt\"\nroutes_file_via = {via}"),
    );
    let (lab_text, base) = if opts.ipv6 {
        dual_stack(include_str!("../../../labs/single-router.toml"), &base)
    } else {
        (
            include_str!("../../../labs/single-router.toml").to_string(),
            base,
        )
    };
    write(&rcfg, &base)?;
    let topo = opts.out.join(format!("lab-{key}.toml"));
    write(
        &topo,
        &lab_text.replace("single-router/r.toml", &format!("r-{key}.toml")),
    )?;
    // The same router with `[io] fast_path` said: `true` for the fast-path contender,
    // `false` for the user-space one.
    let variant = |name: &str, fast: bool| -> Result<PathBuf, String> {
        let topo = opts.out.join(format!("lab-{name}-{key}.toml"));
        let r = format!("r-{name}-{key}.toml");
        write(
            &opts.out.join(&r),
            &format!("{base}\n[io]\nfast_path = {fast}\n"),
        )?;
        write(&topo, &lab_text.replace("single-router/r.toml", &r))?;
        Ok(topo)
    };
    let topo_fast = variant("fast", true)?;
    let topo_user = variant("user", false)?;
    Ok(TableFiles {
        key,
        tsize,
        tsize6,
        tfile,
        rcfg,
        topos: [topo, topo_fast, topo_user],
    })
}

/// The measurement matrix --sizes, --flows, --tables and --quick ask for, and each
/// case's steps of offered load (shares of the ceiling) and zero-loss search points.
struct Matrix {
    sizes: Vec<usize>,
    flows: Vec<Flows>,
    tables: Vec<String>,
    steps: Vec<f64>,
    searches: usize,
}

fn matrix(opts: &ForwardOpts) -> Result<Matrix, String> {
    let sizes: Vec<usize> = if !opts.sizes.is_empty() {
        if let Some(b) = opts.sizes.iter().find(|b| !(64..=1518).contains(*b)) {
            return Err(format!("--sizes {b}: frames are 64 to 1518 bytes"));
        }
        opts.sizes.clone()
    } else if opts.quick {
        vec![64]
    } else {
        vec![64, 576, 1470]
    };
    let flows: Vec<Flows> = if !opts.flows.is_empty() {
        opts.flows
            .iter()
            .map(|f| match f.as_str() {
                "one" => Ok(Flows::One),
                "two" => Ok(Flows::Two),
                "many" => Ok(Flows::Many),
                o => Err(format!("--flows {o:?}: use one, two or many")),
            })
            .collect::<Result<_, _>>()?
    } else if opts.quick {
        vec![Flows::One]
    } else {
        vec![Flows::One, Flows::Two, Flows::Many]
    };
    let tables: Vec<String> = if !opts.tables.is_empty() {
        opts.tables.clone()
    } else if opts.quick {
        vec!["10".into()]
    } else {
        vec!["10".into(), "1000".into(), "167000".into()]
    };
    let steps: Vec<f64> = if opts.quick {
        vec![0.25, 0.5, 0.75, 1.0]
    } else {
        (1..=10).map(|i| i as f64 / 10.0).collect()
    };
    let searches = if opts.quick { 3 } else { 6 };
    Ok(Matrix {
        sizes,
        flows,
        tables,
        steps,
        searches,
    })
}

/// The generators of one point at `rate` (in all): from the first source, or the first
/// two (`Flows::Two`, half each), to the router's MACs `rmac`, over IPv6 where `six`, to
/// the destinations of the routes file `tfile` (`Flows::Many`) or to the sink's address.
fn generators(
    sources: &[Source],
    rmac: &[String],
    six: bool,
    fl: Flows,
    xdp: bool,
    tfile: &Path,
    rate: f64,
) -> Vec<(&'static str, Vec<String>, String)> {
    let n = if fl == Flows::Two { 2 } else { 1 };
    let rate = format!("{:.0}", (rate / n as f64).max(1.0));
    (0..n)
        .map(|i| {
            let (src, _, _, _, dst, saddr) = sources[i];
            let (dst, saddr) = if six {
                (six_of(dst), six_of(saddr))
            } else {
                (dst.to_string(), saddr.to_string())
            };
            let mut a = vec![
                "--dst-mac".to_string(),
                rmac[i].clone(),
                "--src".into(),
                saddr,
                "--flow-base".into(),
                (i * 100).to_string(),
            ];
            if xdp {
                a.push("--xdp".into());
            }
            if fl == Flows::Many {
                a.extend([
                    "--dst-prefixes".into(),
                    tfile.to_string_lossy().into_owned(),
                ]);
            } else {
                a.extend(["--dst".into(), dst]);
            }
            (src, a, rate.clone())
        })
        .collect()
}

/// A contender's lab made ready to measure: the receive side of the XDP generator, GRO on
/// at the hosts, the hosts placed on cores where the nodes were (`placed`: whether the
/// router is the kernel's, or an external one), and every neighbour resolved
/// ([`resolve`]; `patient` for a router that takes a few seconds).
fn prepare(
    opts: &ForwardOpts,
    l: &lab::Lab,
    sources: &[Source],
    families: &[bool],
    placed: Option<bool>,
    patient: bool,
    contender: &str,
) -> Result<(), String> {
    if opts.xdp {
        for (_, rnode, rport, _, _, _) in sources {
            xdp_receiver(l, rnode, rport, opts.rt_napi)?;
        }
    }
    // Sinks take frames a router redirects in XDP (the fast path's): their veths run
    // NAPI, with GRO on; so do the sources, which take the replies to the pings below.
    // The same for every contender. Not with `--hosts plain`: their links stay as a
    // container's (GRO off, no XDP program), as the lab made them, so that the router's
    // fast path must hand their frames to tcx.
    let mut hosts: Vec<&str> = Vec::new();
    if !opts.plain_hosts {
        for (src, _, _, sink, _, _) in sources {
            hosts.extend([*src, *sink]);
        }
    }
    hosts.sort_unstable();
    hosts.dedup();
    for host in hosts {
        sh(
            "ip",
            &[
                "netns",
                "exec",
                &l.ns(host),
                "ethtool",
                "-K",
                "eth0",
                "gro",
                "on",
            ],
        )?;
    }
    if let Some(kernel_or_external) = placed {
        place_hosts(l, kernel_or_external)?;
    }
    // Resolve every neighbour before measuring (ARP has its own tests).
    resolve(l, sources, families, patient, contender)
}

/// The frame sizes of a family: IPv6 at its smallest frame where IPv4 is at a size below
/// it.
fn sizes_of(sizes: &[usize], six: bool) -> Vec<usize> {
    let mut v: Vec<usize> = sizes
        .iter()
        .map(|&s| if six { s.max(MIN_FRAME6) } else { s })
        .collect();
    v.dedup();
    v
}

/// Where a frame size's ceiling sits in the results' `generator_ceiling_pps`.
fn ceiling_key(size: usize, six: bool) -> String {
    if six {
        format!("{size}-ipv6")
    } else {
        size.to_string()
    }
}

/// The generator's ceiling at each frame size of each family, straight into a sink.
fn ceilings(
    opts: &ForwardOpts,
    sizes: &[usize],
    families: &[bool],
    labname: &str,
) -> Result<serde_json::Map<String, Value>, String> {
    eprintln!("bench forward: measuring the generator's ceiling");
    let mut ceilings = serde_json::Map::new();
    for &six in families {
        for size in sizes_of(sizes, six) {
            let c = ceiling(opts, size, six, labname)?;
            let fam = if six { "IPv6" } else { "IPv4" };
            eprintln!(
                "bench forward: generator ceiling at {size} bytes over {fam}: {c:.0} packets/s"
            );
            ceilings.insert(ceiling_key(size, six), json!(c.round()));
        }
    }
    Ok(ceilings)
}

/// The MAC of a lab interface.
pub(crate) fn lab_mac(lab: &lab::Lab, node: &str, ifname: &str) -> Result<String, String> {
    let v = lab.show()?;
    v["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["name"] == node))
        .and_then(|n| {
            n["interfaces"]
                .as_array()?
                .iter()
                .find(|i| i["name"] == ifname)?["mac"]
                .as_str()
                .map(str::to_string)
        })
        .ok_or_else(|| format!("no interface {node}:{ifname}"))
}

/// The contender that runs our forwarder with `[io] fast_path = true` (`--fast-path`), on
/// AF_XDP ports (the fast path in their XDP programs).
pub const FAST: &str = "forwarder-fast";
/// ... and on AF_PACKET ports (the fast path in their tcx programs).
pub const FAST_TC: &str = "forwarder-fast-tc";
/// ... and with `[io] fast_path = false`: every frame through user space (measured beside
/// the fast path with `--fast-path`; the plain `forwarder` runs the default, the fast
/// path).
pub const USER: &str = "forwarder-user";

/// Loads, as shares of the zero-loss rate, at which latency is measured.
const LATENCY_LOADS: [f64; 3] = [0.1, 0.5, 0.9];

/// The contender that measures the star router of labs/star.toml (`--star`).
pub const STAR: &str = "star";
/// ... with every member's `[io] fast_path = false` (`--star --fast-path`): every packet
/// through user space, hosts' links wire-like.
pub const STAR_USER: &str = "star-user";
/// The contender that measures the multistage router of labs/multistage.toml
/// (`--multistage`).
pub const MULTISTAGE: &str = "multistage";
/// ... with every element's fast path (`--multistage --fast-path`): the LBs' and the
/// back-ends', in XDP on AF_XDP ports; the switch's ports with GRO on, so that their veths
/// take what the elements redirect to them.
pub const MULTISTAGE_FAST: &str = "multistage-fast";

/// One traffic source of a site: source node, the router node and port it sends into,
/// the sink node, the sink's address, the source's address.
type Source = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

/// The single router: src1 -> sink1 and src2 -> sink2 through r.
const SOURCES: [Source; 2] = [
    ("src1", "r", "r-eth0", "sink1", "10.3.0.10", "10.1.0.10"),
    ("src2", "r", "r-eth1", "sink2", "10.4.0.10", "10.2.0.10"),
];
/// The star (labs/star.toml, hosts renamed): src1 on s1's network to sink1 on s3's, src2
/// on s2's to sink2 on s4's; every packet crosses the switch.
const STAR_SOURCES: [Source; 2] = [
    ("src1", "s1", "s1-ext", "sink1", "10.3.0.10", "10.1.0.10"),
    ("src2", "s2", "s2-ext", "sink2", "10.4.0.10", "10.2.0.10"),
];
/// The multistage router (labs/multistage.toml): a1 on network A to b1 on network B
/// through LB A, a back-end and LB B; two flows add b1 to a1 the other way.
const MULTISTAGE_SOURCES: [Source; 2] = [
    ("a1", "lba", "lba-ext", "b1", "10.2.0.10", "10.1.0.10"),
    ("b1", "lbb", "lbb-ext", "a1", "10.1.0.10", "10.2.0.10"),
];

/// Writes the lab topology of `contender` for the table `table-{tsize}.txt` into `out`
/// (every forwarder that looks routes up loads the table through the site's first sink),
/// and returns it with its sources.
fn site(
    out: &Path,
    contender: &str,
    key: &str,
    ipv6: bool,
) -> Result<Option<(PathBuf, [Source; 2])>, String> {
    // The table's routes go through one host (its IPv6 address too, with --ipv6).
    let table = |via: &str| {
        let via = if ipv6 {
            format!("[\"{via}\", \"{}\"]", six_of(via))
        } else {
            format!("\"{via}\"")
        };
        format!("routes_file = \"table-{key}.txt\"\nroutes_file_via = {via}\n")
    };
    // With --ipv6 every element's and host's address gets its IPv6 twin.
    let stack = |topo: String, element: String| {
        if ipv6 {
            dual_stack(&topo, &element)
        } else {
            (topo, element)
        }
    };
    match contender {
        STAR | STAR_USER => {
            let mut topo = stack(
                include_str!("../../../labs/star.toml").into(),
                String::new(),
            )
            .0;
            for (h, n) in [
                ("h1", "src1"),
                ("h2", "src2"),
                ("h3", "sink1"),
                ("h4", "sink2"),
            ] {
                topo = topo
                    .replace(&format!("name = \"{h}\""), &format!("name = \"{n}\""))
                    .replace(&format!("\"{h}:eth0\""), &format!("\"{n}:eth0\""));
            }
            let configs = [
                include_str!("../../../labs/star/s1.toml"),
                include_str!("../../../labs/star/s2.toml"),
                include_str!("../../../labs/star/s3.toml"),
                include_str!("../../../labs/star/s4.toml"),
            ];
            for (i, c) in configs.iter().enumerate() {
                let name = format!("star-s{}-{key}.toml", i + 1);
                let mut c = stack(String::new(), c.to_string()).1;
                if ipv6 {
                    // Each member's IPv6 network beside its IPv4 one in every list.
                    for m in 1..=4 {
                        let v4 = format!("{{ prefix = \"10.{m}.0.0/24\", port = 0 }}");
                        let v6 = format!("{v4}, {{ prefix = \"2001:db8:{m}::/64\", port = 0 }}");
                        c = c.replace(&v4, &v6);
                    }
                }
                write(
                    &out.join(&name),
                    &c.replace("routes_file = \"routes.txt\"\n", &table("10.3.0.10")),
                )?;
                topo = topo.replace(&format!("star/s{}.toml", i + 1), &name);
            }
            let p = out.join(format!("lab-star-{key}.toml"));
            write(&p, &topo)?;
            Ok(Some((p, STAR_SOURCES)))
        }
        MULTISTAGE | MULTISTAGE_FAST => {
            let mut topo = stack(
                include_str!("../../../labs/multistage.toml").into(),
                String::new(),
            )
            .0;
            let configs = [
                (
                    "lba",
                    include_str!("../../../labs/multistage/lba.toml"),
                    false,
                ),
                (
                    "lbb",
                    include_str!("../../../labs/multistage/lbb.toml"),
                    false,
                ),
                ("r1", include_str!("../../../labs/multistage/r1.toml"), true),
                ("r2", include_str!("../../../labs/multistage/r2.toml"), true),
                ("r3", include_str!("../../../labs/multistage/r3.toml"), true),
            ];
            for (n, c, backend) in configs {
                let name = format!("ms-{n}-{key}.toml");
                let c = stack(String::new(), c.to_string()).1;
                // Top-level keys come before the first table.
                let text = if backend {
                    format!("{}{c}", table("10.2.0.10"))
                } else {
                    c
                };
                write(&out.join(&name), &text)?;
                topo = topo.replace(&format!("multistage/{n}.toml"), &name);
            }
            let p = out.join(format!("lab-ms-{key}.toml"));
            write(&p, &topo)?;
            Ok(Some((p, MULTISTAGE_SOURCES)))
        }
        _ => Ok(None),
    }
}

fn write(path: &Path, s: &str) -> Result<(), String> {
    std::fs::write(path, s).map_err(|e| format!("{}: {e}", path.display()))
}

/// The generator's ceiling: one generator straight into a sink on one wire, `--rate max`.
pub(crate) fn ceiling(
    opts: &ForwardOpts,
    size: usize,
    six: bool,
    name: &str,
) -> Result<f64, String> {
    let topo = opts.out.join("ceiling.toml");
    write(
        &topo,
        "name = \"x\"\n[[host]]\nname = \"src1\"\ninterfaces = [{ name = \"eth0\", address = \"10.9.0.1/24\" }]\n[[host]]\nname = \"sink1\"\ninterfaces = [{ name = \"eth0\", address = \"10.9.0.2/24\" }]\n[[link]]\na = \"src1:eth0\"\nb = \"sink1:eth0\"\n",
    )?;
    let l = lab::Lab::load(&topo, Some(name), opts.exe.clone())?;
    l.up()?;
    let b = Bench {
        opts,
        lab: l.clone(),
        sinks: KeptSinks::new(&l, &opts.exe),
        done: 0,
        total: 1,
    };
    let r = (|| {
        if opts.xdp {
            xdp_receiver(&l, "sink1", "eth0", opts.rt_napi)?;
        }
        let mac = b.mac("sink1", "eth0")?;
        let (src, dst) = if six {
            ("2001:db8:9::1", "2001:db8:9::2")
        } else {
            ("10.9.0.1", "10.9.0.2")
        };
        let mut dst = vec![
            "--dst-mac".into(),
            mac,
            "--src".into(),
            src.into(),
            "--dst".into(),
            dst.into(),
        ];
        if opts.xdp {
            dst.push("--xdp".into());
        }
        b.point(size, &[("src1", dst, "max".into())], &["sink1"])
    })();
    drop(b);
    let _ = l.down();
    // What arrived, not what was sent: the XDP generator can send more than a sink takes,
    // and then the pair's ceiling is the sink's.
    Ok(r?.forwarded_pps)
}

pub fn run(opts: &ForwardOpts) -> Result<Value, String> {
    std::fs::create_dir_all(&opts.out).map_err(|e| format!("{}: {e}", opts.out.display()))?;
    let Matrix {
        sizes,
        flows,
        tables,
        steps,
        searches,
    } = matrix(opts)?;
    let contenders = &opts.contenders;
    let labname = format!("bf{}", std::process::id());
    let families: &[bool] = if opts.ipv6 { &[false, true] } else { &[false] };
    let sizes_of = |six: bool| sizes_of(&sizes, six);
    let ceilings = ceilings(opts, &sizes, families, &labname)?;
    let per_table: usize = families
        .iter()
        .map(|&six| sizes_of(six).len() * flows.len())
        .sum();
    let total = contenders.len()
        * tables.len()
        * per_table
        * (steps.len() + searches + LATENCY_LOADS.len());
    let mut rows = Vec::new();
    let mut placements: Vec<Value> = Vec::new();
    let mut costs: Vec<Value> = Vec::new();
    let stats = enable_stats(opts)?;
    let mut done = 0;
    for tname in &tables {
        let TableFiles {
            key,
            tsize,
            tsize6,
            tfile,
            rcfg,
            topos: [topo, topo_fast, topo_user],
        } = table_files(opts, tname)?;
        for (contender, command) in contenders {
            let contender = contender.as_str();
            let other = match (acl_rules_of(contender), flow_sampling_of(contender)) {
                (Some(n), _) => Some((acl_topo(&opts.out, &key, n, opts.acl_masks)?, SOURCES)),
                (_, Some(n)) => Some((flows_topo(&opts.out, &key, n)?, SOURCES)),
                _ => site(&opts.out, contender, &key, opts.ipv6)?,
            };
            let sources = other.as_ref().map_or(SOURCES, |o| o.1);
            let (mut l, role) = contender_lab(
                opts,
                contender,
                command.is_some(),
                other.as_ref().map(|o| o.0.as_path()),
                [&topo, &topo_fast, &topo_user],
                &labname,
            )?;
            let (placed, note) = place_for(opts.split_cores, &mut l);
            if !placements
                .iter()
                .any(|p: &Value| p["contender"] == contender)
            {
                placements.push(json!({"contender": contender, "placed": placed, "note": note}));
            }
            l.up()?;
            let before = stats.as_ref().map(|_| fast_path_run_time());
            let mut bench = Bench {
                opts,
                lab: l.clone(),
                sinks: KeptSinks::new(&l, &opts.exe),
                done,
                total,
            };
            let mut external = None;
            let r = (|| -> Result<(), String> {
                if let Some(cmd) = command {
                    external = Some(External::start(
                        &l.ns("r"),
                        cmd,
                        &[
                            ("TESSERA_ROUTER_CONFIG", rcfg.display().to_string()),
                            ("TESSERA_ROUTES_FILE", tfile.display().to_string()),
                        ],
                        None,
                    )?);
                }
                prepare(
                    opts,
                    &l,
                    &sources,
                    families,
                    placed.then_some(role == "linux" || role == "external"),
                    command.is_some() || other.is_some(),
                    contender,
                )?;
                let rmac: Vec<String> = sources
                    .iter()
                    .map(|s| bench.mac(s.1, s.2))
                    .collect::<Result<_, _>>()?;
                for &six in families {
                    let tsize = if six { tsize6 } else { tsize };
                    if tsize == 0 {
                        continue;
                    }
                    let family = if six { "ipv6" } else { "ipv4" };
                    let label = if six {
                        format!("{contender}-ipv6")
                    } else {
                        contender.to_string()
                    };
                    let contender = label.as_str();
                    for size in sizes_of(six) {
                        let ceil = ceilings[&ceiling_key(size, six)].as_f64().unwrap_or(1.0);
                        for fl in flows.iter().copied() {
                            let gens_at = |rate: f64| {
                                generators(&sources, &rmac, six, fl, opts.xdp, &tfile, rate)
                            };
                            let sinks: Vec<&str> = if fl == Flows::Two {
                                vec![sources[0].3, sources[1].3]
                            } else {
                                vec![sources[0].3]
                            };
                            let c = Case {
                                contender,
                                family,
                                tsize,
                                size,
                                ceil,
                                flows: fl,
                                steps: &steps,
                                searches,
                            };
                            bench.case(&c, &gens_at, &sinks, &mut rows)?;
                        }
                    }
                }
                Ok(())
            })();
            done = bench.done;
            if let Some(c) = before.and_then(|b| fast_path_cost(b, contender)) {
                eprintln!(
                    "\n{contender}: {} ns per frame in the fast path's programs",
                    c["ns_per_frame"]
                );
                costs.push(c);
            }
            drop(bench);
            drop(external);
            let _ = l.down();
            r?;
        }
    }
    let v = json!({"bench": "forward", "generator": if opts.xdp { "xdp" } else { "afpacket" }, "io": opts.io, "ipv6": opts.ipv6, "rt_napi": opts.rt_napi, "sink": opts.sink.name(), "hosts": if opts.plain_hosts { "plain" } else { "tuned" }, "seconds_per_point": opts.seconds, "generator_ceiling_pps": ceilings, "placement": placements, "fast_path_cost": costs, "points": rows});
    finish(opts, v, &rows)
}

/// Writes a run's results (JSON, CSV) and plots into `--out`: the JSON with the plots.
fn finish(opts: &ForwardOpts, mut v: Value, rows: &[Value]) -> Result<Value, String> {
    write(
        &opts.out.join("results.json"),
        &serde_json::to_string_pretty(&v).unwrap_or_default(),
    )?;
    write_csv(&opts.out.join("results.csv"), rows)?;
    v["plots"] = json!(crate::plot::forward_plots(&opts.out, rows)?);
    Ok(v)
}

/// `--bpf-stats`: the kernel counts the programs' run time while the result is held.
fn enable_stats(opts: &ForwardOpts) -> Result<Option<io::fastpath::stats::RunTimeStats>, String> {
    if !opts.bpf_stats {
        return Ok(None);
    }
    io::fastpath::stats::RunTimeStats::enable()
        .map(Some)
        .map_err(|e| format!("--bpf-stats: BPF_ENABLE_STATS: {e}"))
}

/// The run time and runs of the forwarder's fast-path programs loaded now.
fn fast_path_run_time() -> (u64, u64) {
    io::fastpath::stats::run_time(&io::fastpath::stats::FORWARDER_PROGRAMS)
}

/// A contender's cost in the forwarder's fast-path programs since `before` (their run
/// time and runs then): `{contender, ns_per_frame, frames}`, or None where they ran none.
fn fast_path_cost((t0, n0): (u64, u64), contender: &str) -> Option<Value> {
    let (t, n) = fast_path_run_time();
    let (t, n) = (t.saturating_sub(t0), n.saturating_sub(n0));
    let ns = (n > 0).then(|| t as f64 / n as f64)?;
    Some(json!({"contender": contender, "ns_per_frame": (ns * 10.0).round() / 10.0, "frames": n}))
}

/// Draws the plots again from a run's results.json (after a change to the plots, without
/// measuring again).
pub fn replot(dir: &Path) -> Result<Vec<String>, String> {
    let p = dir.join("results.json");
    let v: Value = serde_json::from_str(
        &std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?,
    )
    .map_err(|e| format!("{}: {e}", p.display()))?;
    let rows = v["points"].as_array().cloned().unwrap_or_default();
    crate::plot::forward_plots(dir, &rows)
}

fn write_csv(path: &Path, rows: &[Value]) -> Result<(), String> {
    // New columns go at the end: scripts read these by position too.
    let cols = [
        "contender",
        "table_prefixes",
        "frame_bytes",
        "flows",
        "kind",
        "offered_pps",
        "forwarded_pps",
        "sent",
        "received",
        "lost",
        "zero_loss_pps",
        "load_of_zero_loss",
        "latency_p50_ns",
        "latency_p99_ns",
        "latency_max_ns",
        "generator_ceiling_pps",
        "family",
        "sink_dropped",
    ];
    let mut s = cols.join(",") + "\n";
    for r in rows {
        let line: Vec<String> = cols
            .iter()
            .map(|c| match &r[*c] {
                Value::Null => String::new(),
                Value::String(x) => x.clone(),
                x => x.to_string(),
            })
            .collect();
        s.push_str(&line.join(","));
        s.push('\n');
    }
    write(path, &s)
}
