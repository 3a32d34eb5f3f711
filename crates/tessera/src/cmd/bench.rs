//! `tessera bench ...`: the benchmarks' arguments and how each runs.

use crate::*;

#[derive(Subcommand)]
pub(crate) enum Bench {
    /// LPM lookup rates, build time, memory and update rates on one table, against the
    /// reference trie and an existing Rust LPM crate. A table with IPv6 prefixes and no
    /// IPv4 ones (or --ipv6) measures the IPv6 structure.
    Fib {
        /// A table: text (one prefix per line, optional next hop) or MRT, plain or
        /// compressed.
        #[arg(long, required_unless_present_any = ["synthetic", "growth"])]
        table: Option<PathBuf>,
        /// Measure the table's IPv6 prefixes (with --synthetic: a synthetic IPv6 table
        /// with the prefix-length mix of a full one).
        #[arg(long, conflicts_with = "growth")]
        ipv6: bool,
        /// Use a seeded synthetic table of N prefixes (real prefix-length mix) instead.
        #[arg(long, conflicts_with_all = ["table", "growth"])]
        synthetic: Option<usize>,
        /// Lookup rates as the table grows: synthetic tables of 10, 1,000, 10,000 and
        /// 167,000 prefixes and the --table (a synthetic 901,899 without one), measured in
        /// alternating rounds in one process.
        #[arg(long)]
        growth: bool,
        /// Rounds of the growth run.
        #[arg(long, default_value_t = 11, requires = "growth")]
        rounds: usize,
        /// Also measure DPDK's rte_lpm and rte_fib in the same run, with --growth too (a
        /// build with `--features dpdk`; huge pages if the pool has 1,024 free, else
        /// ordinary pages).
        #[arg(long)]
        dpdk: bool,
    },
    /// Forwarded versus offered load through a lab router, our forwarder against the Linux
    /// kernel: steps of offered load, zero-loss search, CSV, JSON and PNG plots in --out.
    Forward {
        #[arg(long)]
        out: PathBuf,
        /// A reduced matrix (64-byte frames, one flow, 10 prefixes) that ends in about a minute.
        #[arg(long)]
        quick: bool,
        /// Seconds per measurement point.
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
        /// Another router to measure: NAME=COMMAND, run with `sh -c` inside the router's
        /// namespace (interfaces r-eth0..3; $TESSERA_ROUTER_CONFIG names the forwarder
        /// config with the addresses and routes, $TESSERA_ROUTES_FILE the table).
        #[arg(long, value_name = "NAME=COMMAND")]
        contender: Vec<String>,
        /// Measure only these contenders (comma-separated names; default: forwarder, linux
        /// and every --contender).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Measure nothing: draw the plots of --out again from its results.json.
        #[arg(long)]
        replot: bool,
        /// The traffic generator: `xdp` (gen --xdp, about 2 Mpps paced from one core) or
        /// `afpacket` (gen on the AF_PACKET ring, about 0.4 Mpps).
        #[arg(long, default_value = "xdp", value_parser = ["xdp", "afpacket"])]
        generator: String,
        /// Our forwarder's packet I/O backends (comma-separated: auto, xdp, packet). With
        /// more than one, each is a contender of its own (`forwarder-xdp`,
        /// `forwarder-packet`) in the same run.
        #[arg(long, value_delimiter = ',', value_name = "BACKEND")]
        io: Vec<String>,
        /// Tables to measure on instead of the synthetic 10, 1,000 and 167,000 prefixes:
        /// sizes of synthetic tables or files (text or MRT, plain, gzip or bzip2),
        /// comma-separated, e.g. `--tables 167000,../shared/data/ipv4-bgp-2023.txt.gz`.
        #[arg(long, value_delimiter = ',', value_name = "N|FILE")]
        tables: Vec<String>,
        /// Traffic cases to measure (comma-separated: one, two, many); default all.
        #[arg(long, value_delimiter = ',', value_name = "CASE")]
        flows: Vec<String>,
        /// Frame sizes to measure (comma-separated bytes); default 64, 576, 1470.
        #[arg(long, value_delimiter = ',', value_name = "BYTES")]
        sizes: Vec<usize>,
        /// The plain `forwarder` runs what a config without `[io]` gives (the fast path,
        /// on by default). This also measures it with every frame through user space
        /// (`[io] fast_path = false`, hosts' links wire-like), as `forwarder-user`, and
        /// with the fast path said outright on AF_XDP ports, as `forwarder-fast`; with `packet` among `--io`, also with the fast path
        /// in its AF_PACKET ports' tcx programs, as `forwarder-fast-tc`; with `--multistage`,
        /// also the multistage router with every element's fast path (LBs and back-ends, on
        /// AF_XDP ports), as `multistage-fast`; with `--star`, also the star with every
        /// member's fast path off, as `star-user`.
        #[arg(long)]
        fast_path: bool,
        /// Also measure the star router of labs/star.toml (four forwarders; sources on
        /// two networks, sinks on the two others), as contender `star`.
        #[arg(long)]
        star: bool,
        /// Also measure the multistage router of labs/multistage.toml (LB, back-end, LB;
        /// two flows go both ways between networks A and B), as contender `multistage`.
        #[arg(long)]
        multistage: bool,
        /// The receiving ports' NAPI threads (the router's, from the XDP generator, and
        /// the sinks') at real-time priority (SCHED_FIFO 50) for every contender: on by
        /// default, `--rt-napi false` leaves them at normal priority. A NIC's receive work
        /// runs in softirq, ahead of every thread; the bench moves a veth's into threads
        /// of its own (so that it is placed and counted apart), and this gives them that
        /// precedence back. At normal priority a thread that waits for a core lets the
        /// veth's 256-frame ring overflow at low rates, which then decides every
        /// contender's zero-loss rate on a shared machine (docs/forwarder.md). At overload
        /// the thread takes its core before any user-space forwarder, as softirq does.
        #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true",
              default_value = "true", action = clap::ArgAction::Set)]
        rt_napi: bool,
        /// How the sinks receive: `xdp` (an AF_XDP socket, frames stamped in the XDP hook:
        /// no socket buffer per frame) or `afpacket` (the AF_PACKET ring, as before).
        /// A veth receives on the sender's core, the router's: the sink's own work there
        /// is the same for every contender, and `xdp` makes it a fraction of
        /// `afpacket`'s (docs/measurement.md); or `count` (an XDP program that counts
        /// the frames and drops them: no socket, no copy, the least a receiver spends,
        /// so that the sink is not what limits a fast router; no flows, and latency is
        /// measured with an AF_XDP sink).
        #[arg(long, default_value = "xdp", value_parser = ["xdp", "afpacket", "count"])]
        sink: String,
        /// `plain`: the hosts' links as a container's veth is made (GRO off, no XDP
        /// program: `lab up --hosts plain`), so that an XDP program cannot redirect to
        /// them and the fast path hands their frames to tcx; the sinks then receive on
        /// the AF_PACKET ring whatever `--sink` says (an XDP sink would run the host's
        /// NAPI). `tuned` (the default): GRO on at the hosts where the fast path runs.
        #[arg(long, default_value = "tuned", value_parser = ["tuned", "plain"])]
        hosts: String,
        /// Measure IPv6 as well, on the same (dual-stack) lab in the same run: each
        /// contender over IPv4, then over IPv6 (as `NAME-ipv6`; 84-byte frames where IPv4
        /// has 64), the table's IPv6 part (synthetic, or a file's IPv6 routes) loaded too.
        #[arg(long)]
        ipv6: bool,
        /// Also measure the fast-path forwarder (AF_XDP) with an access list of N rules
        /// on its sources' ports, every one of which the traffic walks (N - 1 denials it
        /// does not match, then a permit), as `forwarder-fast-acl-N`, for each N given
        /// (comma-separated; 0 is `forwarder-fast` itself, which this adds).
        #[arg(long, value_delimiter = ',', value_name = "N")]
        acl_rules: Vec<usize>,
        /// The distinct masks (prefix lengths, 1 to 16) among those denials: the tuples
        /// the fast path's search walks (docs/filters.md).
        #[arg(long, default_value_t = 4, value_name = "M")]
        acl_masks: usize,
        /// Also measure the fast-path forwarder (AF_XDP) exporting flows sampled 1 in N
        /// (docs/flows.md), as `forwarder-fast-flows-N`, for each N given (comma-separated;
        /// `forwarder-fast`, without export, is added to compare with).
        #[arg(long, value_delimiter = ',', value_name = "N")]
        flow_export: Vec<u32>,
        /// The kernel counts the BPF programs' run time while the bench runs
        /// (BPF_ENABLE_STATS): each contender's nanoseconds per frame in the forwarder's
        /// fast-path programs, in the output and results.json (`fast_path_cost`). A cost
        /// the rig's noise does not blur as it blurs a peak; counting costs every BPF
        /// program some nanoseconds per run, the generator's and the sinks' too.
        #[arg(long)]
        bpf_stats: bool,
        /// Measure the whole run N times over, so that the contenders take turns (A, B,
        /// A, B, ...): round K's results and plots in OUT/round-K, and in OUT/rounds.json
        /// each contender's peak per round with their median and, for every contender
        /// but `forwarder-fast` (where measured; else the first), its peak over that
        /// one's in the same round, per round, with their median. On a shared machine a
        /// peak moves by half between minutes; ratios taken within a round do not.
        #[arg(long, default_value_t = 1, value_name = "N")]
        rounds: usize,
        /// On a machine too small to give every host and the router cores of their own
        /// (fewer than nine): the router (its element, workers and ports' receive
        /// threads, or the kernel's receive work) on the last CPU, every host's generator,
        /// sink and receive work on the others. On two cores the scheduler otherwise puts
        /// the router's receive thread beside a sink's in one minute and apart in the
        /// next, and a contender's peak moves twofold between points. Only with one
        /// router element (not with --star or --multistage); with `--sink count`, since
        /// a sink that copies frames on the hosts' shared core limits every contender.
        #[arg(long)]
        split_cores: bool,
    },
    /// `tessera switch` against the Linux bridge: one generator into one sink through
    /// each (and straight, for the generator's ceiling), at the generator's highest rate;
    /// forwarded frames per second, and per CPU-second for our switch.
    Switch {
        /// Seconds per point.
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        /// Frame sizes (comma-separated bytes); default 64, 1470.
        #[arg(long, value_delimiter = ',', value_name = "BYTES")]
        sizes: Vec<usize>,
        /// Our switch's packet I/O backends (comma-separated: auto, xdp, packet), one pass
        /// each; default: auto.
        #[arg(long, value_delimiter = ',', value_name = "BACKEND")]
        io: Vec<String>,
        /// Where results.json and the lab files go.
        #[arg(long, default_value = "results/switch")]
        out: PathBuf,
    },
    /// The Axon (docs/axon.md): route setup rate in memory, per-hop latency beside a
    /// Linux bridge's, six flows on a line against a ring of Axons, a cut ring link, and
    /// the forwarding rate beside a bridge's.
    Axon {
        /// Route setups measured in memory.
        #[arg(long, default_value_t = 200_000)]
        setups: usize,
        /// Capacity of the links between Axons, Mbit/s (line against ring).
        #[arg(long, default_value_t = 100)]
        link_mbps: u64,
        /// Seconds per measurement.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// The Axons' packet I/O backend: auto, xdp or packet.
        #[arg(long, value_name = "BACKEND")]
        io: Option<String>,
        #[arg(long, default_value = "results/axon")]
        out: PathBuf,
    },
    /// Contending flows into one output port (docs/contend.md): two constant-rate flows
    /// through each device under test (a Linux bridge shaped by tbf, our switch in FIFO
    /// and in fair mode, and any --dut); per flow, rates over 1 ms and 100 ms intervals;
    /// the rate grid with isoline plots; sequence-number traces; the TCP table.
    Contend {
        /// Built-in devices under test (comma-separated: bridge-tbf, switch-fifo,
        /// switch-fair); default: all three.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Another device under test: NAME=COMMAND, run with `sh -c` in the device's
        /// namespace, whose interfaces in1 and in2 face the sources and out the sink
        /// ($TESSERA_PORT_MBPS, $TESSERA_BUFFER_BYTES and $TESSERA_EXE are set). It may
        /// configure and end, or run on; its process group is ended afterwards.
        #[arg(long, value_name = "NAME=COMMAND")]
        dut: Vec<String>,
        /// The output port's rate in Mbit/s (wire); the cases and the grid scale with it.
        #[arg(long, default_value_t = 1000.0)]
        port_mbps: f64,
        /// The output port's buffer in bytes (built-in devices).
        #[arg(long, default_value_t = 131_072)]
        buffer_bytes: usize,
        /// Frame size in bytes, FCS included.
        #[arg(long, default_value_t = 1470)]
        size: usize,
        /// Seconds per case of the table.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Step of the rate grid in Mbit/s (the study's is 20; 0: no grid).
        #[arg(long, default_value_t = 100.0)]
        grid_step: f64,
        /// Seconds per grid point.
        #[arg(long, default_value_t = 1.0)]
        grid_seconds: f64,
        /// Seconds per TCP run (0: no TCP experiment).
        #[arg(long, default_value_t = 10.0)]
        tcp_seconds: f64,
        /// Round-trip times added for the TCP experiment, in ms (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "0,50")]
        rtt: Vec<f64>,
        /// Congestion controls (comma-separated; default: every one the kernel offers).
        #[arg(long, value_delimiter = ',')]
        cc: Vec<String>,
        /// Our switch's packet I/O backend: auto, xdp or packet (default: its default).
        #[arg(long, value_name = "BACKEND")]
        io: Option<String>,
        /// Packets in each sequence-number trace.
        #[arg(long, default_value_t = 20_000)]
        trace_packets: u64,
        /// Where results.json, table.md, the plots and the traces go.
        #[arg(long, default_value = "results/contend")]
        out: PathBuf,
    },
    /// The LB's packets per second per core beside the forwarder's: over in-memory ports
    /// (64-byte frames, every balancing mode, one and 65,536 flows) and through the lab
    /// (labs/multistage.toml against labs/single-router.toml).
    Balancer {
        /// Seconds per point.
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
        /// In-memory only: no lab.
        #[arg(long)]
        no_lab: bool,
        /// The elements' packet I/O backends in the lab (comma-separated: auto, xdp,
        /// packet), one pass each; default: their configs'.
        #[arg(long, value_delimiter = ',', value_name = "BACKEND")]
        io: Vec<String>,
        /// A second pass through the labs with every element's fast path (the forwarders'
        /// and, on AF_XDP ports, the LBs'; GRO on the switch's and the hosts' ports).
        #[arg(long)]
        fast_path: bool,
        /// The elements' ports' NAPI threads at SCHED_FIFO priority 50 (each element's
        /// ports always get NAPI threads of their own, whose CPU time is counted as the
        /// element's: `napi_cpu_s`, `frames_per_cpu_s`).
        #[arg(long)]
        rt_napi: bool,
    },
    /// Does capacity grow with the number of elements? A multistage router of `--ports`
    /// external networks and each number of `--backends`, every element with its fast path
    /// and, where the machine has them, cores of its own; beside it our single forwarder on
    /// one core and, on the same cores, the kernel and our forwarder with workers. Aggregate
    /// peak and zero-loss rates, each element's cost per frame, a model of the router on
    /// separate machines (docs/scale.md). JSON and a plot per frame size and table.
    Scale {
        #[arg(long, default_value = "results/scale")]
        out: PathBuf,
        /// External networks (an LB and a host each; 1: one LB pair, a second network only
        /// receiving).
        #[arg(long, default_value_t = 2)]
        ports: usize,
        /// Numbers of back-ends, one router each (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
        backends: Vec<usize>,
        /// Frame sizes (default 64 and 1470; --quick: 64).
        #[arg(long, value_delimiter = ',')]
        sizes: Vec<usize>,
        /// Tables: synthetic sizes or files (default 10 and 167000; --quick: 10).
        #[arg(long, value_delimiter = ',')]
        tables: Vec<String>,
        /// Contenders: multistage, forwarder, kernel, workers (default all; --quick: the
        /// first two).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// One size, one table, fewer points.
        #[arg(long)]
        quick: bool,
        /// Seconds per point.
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
        /// Flows per sending host (UDP source ports: what the LBs spread).
        #[arg(long, default_value_t = 256)]
        flows: u16,
        /// Every port's NAPI thread (the elements', the interconnection's, the hosts') at
        /// real-time priority (SCHED_FIFO 50): on by default, as in `bench forward`;
        /// `--rt-napi false` leaves them at normal priority. A thread that waits for its
        /// core behind another lets its veth's 256-frame ring overflow, and a router of
        /// several elements has a ring at every hop (docs/scale.md).
        #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true",
              default_value = "true", action = clap::ArgAction::Set)]
        rt_napi: bool,
        /// Draw the plots of the run in --out again from its results.json; measure nothing.
        #[arg(long)]
        replot: bool,
        /// What joins the multistage router's elements: `switch` (tessera switch with its
        /// XDP fast path: frames stay XDP frames) or `bridge` (a Linux bridge).
        #[arg(long, default_value = "switch")]
        interconnect: String,
        /// How the hosts' sinks receive: `xdp` (an AF_XDP socket, no socket buffer per
        /// frame: the host's cores go to its generator) or `afpacket` (`sink --drop`, as
        /// runs before 2026-11-27 did) or `count` (an XDP program that counts the frames
        /// and drops them: the least a receiver spends).
        #[arg(long, default_value = "xdp", value_parser = ["xdp", "afpacket", "count"])]
        sink: String,
        /// Destinations drawn from the table, its prefixes split among the receiving
        /// networks (each through its host), so that the routers' lookups spread over the
        /// table as Internet traffic's do; without it every frame goes to a host's address.
        #[arg(long)]
        spread: bool,
        /// Cores of each LB of the multistage router (1 to 8; default 1, a core per
        /// element): with two, the receive work of the LB's external port (its fast path
        /// runs there) on one core and its internal port's on the other, as an LB machine
        /// with a NIC per side would have it. Where nothing can be placed it changes only
        /// the cores counted.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=8))]
        lb_cores: u16,
    },
    /// Transit forwarding beside a flood of packets addressed to the router: our forwarder
    /// (its fast path shedding the flood at `[io] slow_path_limit`, and with no limit)
    /// against the Linux kernel, the flood stepped from 0 to --flood; JSON, CSV and a PNG
    /// plot in --out.
    Flood {
        #[arg(long, default_value = "results/flood")]
        out: PathBuf,
        /// Seconds per point.
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        /// The transit traffic's offered rate (frames per second).
        #[arg(long, default_value_t = 500_000.0)]
        transit: f64,
        /// The highest flood rate (frames per second); steps at 0, 1/4, 1/2 and all of it.
        #[arg(long, default_value_t = 1_000_000.0)]
        flood: f64,
        /// Measurements per step (the summary takes their median).
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Our forwarder's packet I/O backend (auto, xdp, packet); default: its config's.
        #[arg(long)]
        io: Option<String>,
        /// Measure only these contenders (comma-separated: forwarder,
        /// forwarder-unlimited, linux, forwarder-acl: the flood to sink2 and denied by an access list, which the fast path drops).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
    },
    /// The forwarder's per-packet path over in-memory ports: 64-byte frames, tables of 10 to
    /// 167,000 prefixes (and --table, the full real one), one, two and many flows.
    Pipeline {
        /// The full table (text or MRT, plain or compressed) for the last row.
        #[arg(long)]
        table: Option<PathBuf>,
        /// Seconds per point.
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
        /// Print JSON only (the text table goes to stderr otherwise too).
        #[arg(long)]
        json: bool,
    },
    /// Draws DIR/rtt.png from DIR/rtt.csv (`router,round,ms` per echo request, as
    /// scripts/plain-hosts writes it): per router, over all rounds, the share of requests
    /// slower than each round trip, with the p99 line and a mark at --target-ms.
    RttPlot {
        dir: PathBuf,
        /// Where the vertical mark goes (ms).
        #[arg(long, default_value_t = 0.1)]
        target_ms: f64,
        /// The plot's title.
        #[arg(long, default_value = "idle round trips")]
        title: String,
    },
}

/// Runs one benchmark.
/// Runs the benchmark `what` names: each has a function of its own below.
pub(crate) fn run(what: Bench) -> Result<i32> {
    match what {
        w @ Bench::Fib { growth: true, .. } => fib_growth(w),
        w @ Bench::Fib { .. } => fib(w),
        w @ Bench::Forward { replot: true, .. } => forward_replot(w),
        w @ Bench::Forward { replot: false, .. } => forward(w),
        w @ Bench::Switch { .. } => switch(w),
        w @ Bench::Axon { .. } => axon(w),
        w @ Bench::Contend { .. } => contend(w),
        w @ Bench::Balancer { .. } => balancer(w),
        w @ Bench::Scale { replot: true, .. } => scale_replot(w),
        w @ Bench::Scale { replot: false, .. } => scale(w),
        w @ Bench::Flood { .. } => flood(w),
        w @ Bench::Pipeline { .. } => pipeline(w),
        Bench::RttPlot {
            dir,
            target_ms,
            title,
        } => rtt_plot(&dir, target_ms, &title),
    }
}

/// `tessera bench fib --growth`: lookup rates as the table grows.
fn fib_growth(w: Bench) -> Result<i32> {
    let Bench::Fib {
        table,
        growth: true,
        rounds,
        dpdk,
        ..
    } = w
    else {
        bail!("bench fib: another benchmark's arguments");
    };
    if rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    let mut tables: Vec<(String, bench::table::Table)> = bench::fib_bench::GROWTH_SIZES
        .iter()
        .map(|&n| (format!("synthetic-{n}"), bench::table::synthetic(n, 1)))
        .collect();
    tables.push(match table {
        Some(path) => {
            let (t, _) = bench::table::read(&path).map_err(anyhow::Error::msg)?;
            (path.display().to_string(), t)
        }
        None => (
            "synthetic-901899".into(),
            bench::table::synthetic(901_899, 1),
        ),
    });
    let v = bench::fib_bench::growth(&tables, rounds, dpdk, &mut |stage| {
        eprintln!("bench fib --growth: {stage}")
    })
    .map_err(anyhow::Error::msg)?;
    eprintln!(
        "{:<42} {:>9} {:>12} {:>7}",
        "table", "prefixes", "batch M/s", "ratio"
    );
    for r in v["growth"].as_array().into_iter().flatten() {
        eprintln!(
            "{:<42} {:>9} {:>12.1} {:>7.2}",
            r["table"].as_str().unwrap_or(""),
            r["prefixes"].as_u64().unwrap_or(0),
            r["batch"]["median"].as_f64().unwrap_or(0.0) / 1e6,
            r["batch_ratio_to_first"].as_f64().unwrap_or(0.0)
        );
    }
    for r in v["dpdk_growth"].as_array().into_iter().flatten() {
        eprintln!(
            "{:<42} {:>9} rte_lpm {:>7.1} M/s {:>5.2}, rte_fib {:>7.1} M/s {:>5.2}",
            r["table"].as_str().unwrap_or(""),
            r["prefixes"].as_u64().unwrap_or(0),
            r["rte_lpm_batch"]["median"].as_f64().unwrap_or(0.0) / 1e6,
            r["rte_lpm_ratio_to_first"].as_f64().unwrap_or(0.0),
            r["rte_fib_batch"]["median"].as_f64().unwrap_or(0.0) / 1e6,
            r["rte_fib_ratio_to_first"].as_f64().unwrap_or(0.0)
        );
    }
    print(&v)
}

/// `tessera bench fib`.
fn fib(w: Bench) -> Result<i32> {
    let Bench::Fib {
        table,
        synthetic,
        dpdk,
        ipv6,
        ..
    } = w
    else {
        bail!("bench fib: another benchmark's arguments");
    };
    let v4_only = match &table {
        Some(path) if !ipv6 => bench::table::read(path).map(Some),
        _ => Ok(None),
    };
    let ipv6 = ipv6
        || match &v4_only {
            Err(e) if e.contains("no IPv4 prefix") => {
                eprintln!("{e}: measuring its IPv6 prefixes");
                true
            }
            Err(e) => bail!("{e}"),
            Ok(_) => false,
        };
    if ipv6 {
        let (t, name) = match (table, synthetic) {
            (Some(path), _) => {
                let (t, skipped) = bench::table::read6(&path).map_err(anyhow::Error::msg)?;
                eprintln!(
                    "{}: {} IPv6 prefixes, {} next hops ({skipped} other lines or \
                         records skipped)",
                    path.display(),
                    t.routes.len(),
                    t.next_hops.len()
                );
                (t, path.display().to_string())
            }
            (None, Some(n)) => (bench::table::synthetic6(n, 1), format!("synthetic6-{n}")),
            (None, None) => bail!("give --table FILE or --synthetic N"),
        };
        let v = bench::fib_bench::run6(&t, &name, dpdk, bench::fib_bench::LOOKUPS, &mut |stage| {
            eprintln!("bench fib: {stage}")
        })
        .map_err(anyhow::Error::msg)?;
        return print(&v);
    }
    let (t, name) = match (table, synthetic) {
        (Some(path), _) => {
            let (t, skipped) = v4_only
                .map_err(anyhow::Error::msg)?
                .context("the table was read")?;
            eprintln!(
                "{}: {} IPv4 prefixes, {} next hops ({skipped} other lines skipped)",
                path.display(),
                t.routes.len(),
                t.next_hops.len()
            );
            (t, path.display().to_string())
        }
        (None, Some(n)) => (bench::table::synthetic(n, 1), format!("synthetic-{n}")),
        (None, None) => bail!("give --table FILE or --synthetic N"),
    };
    let v = bench::fib_bench::run(&t, &name, dpdk, &mut |stage| {
        eprintln!("bench fib: {stage}")
    })
    .map_err(anyhow::Error::msg)?;
    print(&v)
}

/// `tessera bench forward --replot`: the plots drawn again from a run's results.
fn forward_replot(w: Bench) -> Result<i32> {
    let Bench::Forward {
        out, replot: true, ..
    } = w
    else {
        bail!("bench forward: another benchmark's arguments");
    };
    let files = bench::forward_bench::replot(&out).map_err(anyhow::Error::msg)?;
    print(&serde_json::json!({ "plots": files }))
}

/// `tessera bench forward`.
fn forward(w: Bench) -> Result<i32> {
    let Bench::Forward {
        out,
        quick,
        seconds,
        contender,
        only,
        replot: false,
        generator,
        io,
        tables,
        flows,
        sizes,
        fast_path,
        star,
        multistage,
        ipv6,
        rt_napi,
        sink,
        hosts,
        acl_rules,
        acl_masks,
        flow_export,
        bpf_stats,
        rounds,
        split_cores,
    } = w
    else {
        bail!("bench forward: another benchmark's arguments");
    };
    let exe = std::env::current_exe().context("cannot find the tessera binary")?;
    stop_lab_benches_on_signals()?;
    let plain_hosts = hosts == "plain";
    let sink = if plain_hosts && sink != "afpacket" {
        eprintln!("bench forward: --hosts plain: the sinks receive on the AF_PACKET ring (--sink {sink} would run an XDP program on the hosts)");
        "afpacket".to_string()
    } else {
        sink
    };
    for b in &io {
        backend_arg(Some(b))?;
    }
    let mut contenders: Vec<(String, Option<String>)> = match io.len() {
        0 | 1 => vec![("forwarder".into(), None)],
        _ => io
            .iter()
            .map(|b| (format!("forwarder-{b}"), None))
            .collect(),
    };
    if fast_path {
        contenders.push((bench::forward_bench::USER.into(), None));
        contenders.push((bench::forward_bench::FAST.into(), None));
        if io.iter().any(|b| b == "packet") {
            contenders.push((bench::forward_bench::FAST_TC.into(), None));
        }
    }
    if (!acl_rules.is_empty() || !flow_export.is_empty()) && !fast_path {
        contenders.push((bench::forward_bench::FAST.into(), None));
    }
    for n in flow_export.iter().filter(|&&n| n > 0) {
        contenders.push((format!("{}{n}", bench::forward_bench::FLOWS_PREFIX), None));
    }
    for n in acl_rules.iter().filter(|&&n| n > 0) {
        contenders.push((format!("{}{n}", bench::forward_bench::ACL_PREFIX), None));
    }
    if star {
        contenders.push((bench::forward_bench::STAR.into(), None));
        if fast_path {
            contenders.push((bench::forward_bench::STAR_USER.into(), None));
        }
    }
    if multistage {
        contenders.push((bench::forward_bench::MULTISTAGE.into(), None));
        if fast_path {
            contenders.push((bench::forward_bench::MULTISTAGE_FAST.into(), None));
        }
    }
    contenders.push(("linux".into(), None));
    for c in contender {
        let (name, cmd) = c
            .split_once('=')
            .with_context(|| format!("--contender {c:?}: expected NAME=COMMAND"))?;
        contenders.push((name.to_string(), Some(cmd.to_string())));
    }
    if !only.is_empty() {
        if let Some(o) = only.iter().find(|o| !contenders.iter().any(|c| &c.0 == *o)) {
            bail!("--only {o:?}: no such contender");
        }
        contenders.retain(|c| only.contains(&c.0));
    }
    let opts = bench::forward_bench::ForwardOpts {
        out,
        quick,
        exe,
        seconds: seconds.clamp(0.2, 60.0),
        contenders,
        xdp: generator == "xdp",
        io,
        tables,
        flows,
        sizes,
        ipv6,
        rt_napi,
        sink: bench::forward_bench::SinkKind::parse(&sink).map_err(anyhow::Error::msg)?,
        plain_hosts,
        acl_masks,
        bpf_stats,
        split_cores,
    };
    let v = match rounds {
        0 => bail!("--rounds 0: measure at least one round"),
        1 => bench::forward_bench::run(&opts),
        n => bench::forward_bench::run_rounds(&opts, n),
    }
    .map_err(anyhow::Error::msg)?;
    print(&v)
}

/// `tessera bench switch`.
fn switch(w: Bench) -> Result<i32> {
    let Bench::Switch {
        seconds,
        sizes,
        io,
        out,
    } = w
    else {
        bail!("bench switch: another benchmark's arguments");
    };
    let exe = std::env::current_exe().context("cannot find the tessera binary")?;
    for b in &io {
        backend_arg(Some(b))?;
    }
    stop_lab_benches_on_signals()?;
    let opts = bench::switch_bench::SwitchOpts {
        exe,
        out,
        seconds: seconds.clamp(0.2, 60.0),
        sizes,
        io,
    };
    let v = bench::switch_bench::run(&opts, &mut |s| eprintln!("bench switch: {s}"))
        .map_err(anyhow::Error::msg)?;
    print(&v)
}

/// `tessera bench axon`.
fn axon(w: Bench) -> Result<i32> {
    let Bench::Axon {
        setups,
        link_mbps,
        seconds,
        io,
        out,
    } = w
    else {
        bail!("bench axon: another benchmark's arguments");
    };
    let exe = std::env::current_exe().context("cannot find the tessera binary")?;
    backend_arg(io.as_deref())?;
    if !(1..=100_000).contains(&link_mbps) {
        bail!("--link-mbps {link_mbps}: use 1 to 100000");
    }
    stop_lab_benches_on_signals()?;
    let opts = bench::axon_bench::AxonOpts {
        exe,
        out,
        setups: setups.clamp(1, 10_000_000),
        link_mbps,
        seconds: seconds.clamp(0.5, 60.0),
        io,
    };
    let v = bench::axon_bench::run(&opts, &mut |s| eprintln!("bench axon: {s}"))
        .map_err(anyhow::Error::msg)?;
    print(&v)
}

/// `tessera bench contend`.
fn contend(w: Bench) -> Result<i32> {
    let Bench::Contend {
        only,
        dut,
        port_mbps,
        buffer_bytes,
        size,
        seconds,
        grid_step,
        grid_seconds,
        tcp_seconds,
        rtt,
        cc,
        io,
        trace_packets,
        out,
    } = w
    else {
        bail!("bench contend: another benchmark's arguments");
    };
    let exe = std::env::current_exe().context("cannot find the tessera binary")?;
    backend_arg(io.as_deref())?;
    let duts: Vec<String> = if only.is_empty() {
        bench::contend_bench::BUILTIN
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else {
        only
    };
    if let Some(d) = duts
        .iter()
        .find(|d| !bench::contend_bench::BUILTIN.contains(&d.as_str()))
    {
        bail!(
            "--only {d:?}: the built-in devices are {}",
            bench::contend_bench::BUILTIN.join(", ")
        );
    }
    let mut commands = Vec::new();
    for d in dut {
        let (name, cmd) = d
            .split_once('=')
            .with_context(|| format!("--dut {d:?}: expected NAME=COMMAND"))?;
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            bail!("--dut {d:?}: the name takes letters, digits, '-' and '_'");
        }
        commands.push((name.to_string(), cmd.to_string()));
    }
    if !(port_mbps > 0.0 && port_mbps <= 100_000.0) {
        bail!("--port-mbps {port_mbps}: use a rate above 0, up to 100000");
    }
    if rtt.iter().any(|r| !(0.0..=10_000.0).contains(r)) {
        bail!("--rtt: round-trip times are 0 to 10000 ms");
    }
    stop_lab_benches_on_signals()?;
    let opts = bench::contend_bench::ContendOpts {
        exe,
        out,
        duts,
        commands,
        port_mbps,
        buffer_bytes,
        size,
        seconds: seconds.clamp(0.3, 600.0),
        grid_step_mbps: grid_step.max(0.0),
        grid_seconds: grid_seconds.clamp(0.3, 60.0),
        tcp_seconds: tcp_seconds.clamp(0.0, 600.0),
        rtts_ms: rtt,
        ccs: cc,
        io,
        trace_packets,
    };
    let v = bench::contend_bench::run(&opts, &mut |s| eprintln!("bench contend: {s}"))
        .map_err(anyhow::Error::msg)?;
    print(&v)
}

/// `tessera bench balancer`.
fn balancer(w: Bench) -> Result<i32> {
    let Bench::Balancer {
        seconds,
        no_lab,
        io,
        fast_path,
        rt_napi,
    } = w
    else {
        bail!("bench balancer: another benchmark's arguments");
    };
    let exe = std::env::current_exe().context("cannot find the tessera binary")?;
    for b in &io {
        backend_arg(Some(b))?;
    }
    if !no_lab {
        stop_lab_benches_on_signals()?;
    }
    let secs = seconds.clamp(0.05, 60.0);
    let opts = bench::balancer_bench::LabOpts {
        repo: bench::balancer_bench::repo_root(&exe),
        exe,
        seconds: secs,
        io,
        fast_path,
        rt_napi,
    };
    let v = bench::balancer_bench::run(
        std::time::Duration::from_secs_f64(secs),
        (!no_lab).then_some(&opts),
        &mut |s| eprintln!("bench balancer: {s}"),
    )
    .map_err(anyhow::Error::msg)?;
    print(&v)
}

/// `tessera bench scale --replot`: the plots drawn again from a run's results.
fn scale_replot(w: Bench) -> Result<i32> {
    let Bench::Scale {
        out, replot: true, ..
    } = w
    else {
        bail!("bench scale: another benchmark's arguments");
    };
    let files = bench::scale_bench::replot(&out).map_err(anyhow::Error::msg)?;
    print(&serde_json::json!({ "plots": files }))
}

/// `tessera bench scale`.
fn scale(w: Bench) -> Result<i32> {
    let Bench::Scale {
        out,
        ports,
        backends,
        sizes,
        tables,
        only,
        quick,
        seconds,
        flows,
        rt_napi,
        replot: false,
        interconnect,
        sink,
        spread,
        lb_cores,
    } = w
    else {
        bail!("bench scale: another benchmark's arguments");
    };
    let exe = std::env::current_exe().context("cannot find the tessera binary")?;
    let interconnect = bench::scale_bench::Interconnect::parse(&interconnect)
        .with_context(|| format!("--interconnect {interconnect:?}: use switch or bridge"))?;
    stop_lab_benches_on_signals()?;
    let opts = bench::scale_bench::ScaleOpts {
        out,
        exe,
        ports,
        backends,
        sizes,
        tables,
        only,
        quick,
        seconds: seconds.clamp(0.05, 60.0),
        flows: flows.max(1),
        rt_napi,
        interconnect,
        sink: bench::forward_bench::SinkKind::parse(&sink).map_err(anyhow::Error::msg)?,
        spread,
        lb_cores: lb_cores.into(),
    };
    let v = bench::scale_bench::run(&opts, &mut |s| eprintln!("bench scale: {s}"))
        .map_err(anyhow::Error::msg)?;
    // The per-point rows stay in results.json; the answer is the summary.
    let mut brief = v.clone();
    for r in brief["results"].as_array_mut().into_iter().flatten() {
        if let Some(o) = r.as_object_mut() {
            o.remove("points");
            o.remove("elements");
        }
    }
    print(&brief)
}

/// `tessera bench flood`.
fn flood(w: Bench) -> Result<i32> {
    let Bench::Flood {
        out,
        seconds,
        transit,
        flood,
        repeats,
        io,
        only,
    } = w
    else {
        bail!("bench flood: another benchmark's arguments");
    };
    let exe = std::env::current_exe().context("cannot find the tessera binary")?;
    stop_lab_benches_on_signals()?;
    let opts = bench::flood_bench::FloodOpts {
        out,
        exe,
        seconds: seconds.clamp(0.2, 60.0),
        transit_pps: transit.max(1.0),
        flood_pps: flood.max(0.0),
        repeats: repeats.max(1),
        io,
        only,
    };
    let v = bench::flood_bench::run(&opts, &mut |s| eprintln!("bench flood: {s}"))
        .map_err(anyhow::Error::msg)?;
    print(&serde_json::json!({ "summary": v["summary"], "plots": v["plots"] }))
}

/// `tessera bench rtt-plot`.
fn rtt_plot(dir: &std::path::Path, target_ms: f64, title: &str) -> Result<i32> {
    let csv = dir.join("rtt.csv");
    let text =
        std::fs::read_to_string(&csv).with_context(|| format!("cannot read {}", csv.display()))?;
    let rtts =
        bench::plot::parse_rtt_csv(&text).map_err(|e| anyhow::anyhow!("{}: {e}", csv.display()))?;
    if !(target_ms.is_finite() && target_ms > 0.0) {
        bail!("bench rtt-plot: --target-ms must be a positive number of milliseconds");
    }
    let png = dir.join("rtt.png");
    bench::plot::rtt_plot(&png, &rtts, title, target_ms).map_err(anyhow::Error::msg)?;
    print(&serde_json::json!({ "plots": [png] }))
}

/// `tessera bench pipeline`.
fn pipeline(w: Bench) -> Result<i32> {
    let Bench::Pipeline {
        table,
        seconds,
        json,
    } = w
    else {
        bail!("bench pipeline: another benchmark's arguments");
    };
    let full = match &table {
        Some(p) => Some(bench::table::read(p).map_err(anyhow::Error::msg)?.0),
        None => None,
    };
    let name = table
        .as_ref()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let secs = std::time::Duration::from_secs_f64(seconds.clamp(0.05, 60.0));
    let v = bench::pipeline_bench::run(full.as_ref().map(|t| (t, name.as_str())), secs, &mut |s| {
        eprintln!("bench pipeline: {s}")
    });
    if !json {
        eprint!("{}", bench::pipeline_bench::text_table(&v));
    }
    print(&v)
}
