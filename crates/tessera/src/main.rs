//! `tessera`: one binary, one subcommand per element or tool. Argument parsing and wiring
//! only; the logic lives in the library crates.

mod capture;
mod check;
mod huge;

#[global_allocator]
static ALLOC: huge::HugeAlloc = huge::HugeAlloc;

use anyhow::{bail, Context, Result};
use clap::{CommandFactory, Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

#[derive(Parser)]
#[command(
    name = "tessera",
    version,
    about = "A multistage software router built from commodity Linux machines"
)]
struct Cli {
    /// How log lines are written to standard error: `text` for people, `json` (one JSON
    /// object per line: timestamp, level, target, fields with the message) for log
    /// shippers. `TESSERA_LOG_FORMAT` says the same (and reaches the elements a lab
    /// starts); `TESSERA_LOG` filters, as `RUST_LOG` does (default `info`).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t = LogFormat::Text,
        env = "TESSERA_LOG_FORMAT"
    )]
    log: LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run an IPv4 forwarder (RFC 1812) on the interfaces named in its config, in the foreground.
    Forwarder(ElementArgs),
    /// Run a layer-2 load balancer (LB) of a multistage router, in the foreground.
    Balancer(ElementArgs),
    /// Run the Virtual-CP of a multistage router (element discovery, LB tables, the
    /// authoritative FIB from FPM and its distribution to the back-ends), in the foreground.
    Controller(ElementArgs),
    /// Run a learning Ethernet switch whose output ports have a capacity, a buffer and
    /// FIFO or fair (deficit round robin) service, in the foreground (docs/switch.md).
    Switch(ElementArgs),
    /// Run an Axon, a source-routed Ethernet switch that hosts take for a learning switch,
    /// in the foreground (docs/axon.md).
    Axon(ElementArgs),
    /// Have a running forwarder re-read its config file (as SIGHUP does): its routes change
    /// in place; a change of any other key is refused with the key, and a file that does
    /// not load changes nothing (the error names the line and key). Exits 1 then.
    Reload {
        #[arg(long)]
        control: PathBuf,
    },
    /// Parse and validate a configuration as its element would, touching no interface:
    /// exits 0 with what it holds, or 1 with the file, line and key of the first error. A lab
    /// topology is checked with every element configuration it names.
    Check {
        #[arg(long)]
        config: PathBuf,
        /// The element the file is for (forwarder, balancer, controller, switch, axon or
        /// lab); default: read from its tables.
        #[arg(long)]
        role: Option<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write a man page for every command (tessera.1, tessera-forwarder.1,
    /// tessera-show-counters.1, ...) into a directory, from these very argument
    /// definitions (the Debian package installs them).
    Man {
        /// The directory (made if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Print a completion script for a shell (bash, zsh, fish, elvish, powershell), e.g.
    /// `tessera completions bash > /etc/bash_completion.d/tessera`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Send and receive DIST messages (the protocol between the elements of a multistage
    /// router), for tests and operations.
    Dist {
        #[command(subcommand)]
        cmd: DistCmd,
    },
    /// Ask a running element for its state.
    Show {
        #[command(subcommand)]
        what: Show,
    },
    /// Copy the frames a running element receives and sends into a pcap file (or `-w -`
    /// to pipe into `tcpdump -r -`), as tcpdump would on its interfaces (docs/operate.md).
    Capture {
        #[arg(long)]
        control: PathBuf,
        /// Only this port (an interface name of the element).
        #[arg(long)]
        port: Option<String>,
        /// A filter in tcpdump's syntax, e.g. 'icmp or udp port 53' (compiled by libpcap
        /// through `tcpdump -ddd`; run by the element on each frame).
        #[arg(long)]
        filter: Option<String>,
        /// Stop after this many frames (default: until interrupted).
        #[arg(long)]
        count: Option<u64>,
        /// The pcap file to write, `-` for standard output.
        #[arg(short = 'w', long = "write")]
        write: String,
    },
    /// Live rates of the router's external ports and elements in the terminal, refreshed
    /// like `top` (Ctrl-C ends it).
    Top {
        #[arg(long)]
        control: PathBuf,
        /// Milliseconds between refreshes.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// Stop after this many refreshes (default: run until interrupted).
        #[arg(long)]
        count: Option<u64>,
    },
    /// Build, inspect and remove lab topologies of namespaces, links and elements.
    Lab {
        #[command(subcommand)]
        cmd: LabCmd,
    },
    /// Send constant-bit-rate UDP test traffic out of an interface.
    Gen {
        #[arg(long)]
        iface: String,
        /// MAC of the next hop (the router's, or the sink's on a direct link).
        #[arg(long)]
        dst_mac: String,
        /// The source address: IPv4 or IPv6, the traffic's family (IPv6 frames are 84
        /// bytes at least).
        #[arg(long)]
        src: std::net::IpAddr,
        /// One destination (with --flows, flows differ by UDP source port).
        #[arg(
            long,
            conflicts_with = "dst_prefixes",
            required_unless_present = "dst_prefixes"
        )]
        dst: Option<std::net::IpAddr>,
        /// Destinations drawn at random from a table's prefixes of --src's family (many
        /// flows).
        #[arg(long)]
        dst_prefixes: Option<PathBuf>,
        #[arg(long, default_value_t = 1)]
        flows: u16,
        /// First flow id, so that several generators can run at once.
        #[arg(long, default_value_t = 0)]
        flow_base: u16,
        /// Frame size on the wire, FCS included (64 to 1518).
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// 100kpps, 1.5Mpps, 800Mbps (wire bits: preamble and gap included), or max.
        #[arg(long)]
        rate: String,
        #[arg(long)]
        duration: Option<f64>,
        #[arg(long)]
        count: Option<u64>,
        #[arg(long, default_value_t = 1234)]
        port: u16,
        /// Send with an XDP program in the kernel (several times faster) instead of the
        /// AF_PACKET ring; one --dst only. On a veth, the peer needs GRO on or an XDP program.
        #[arg(long)]
        xdp: bool,
        /// Sleep this many microseconds whenever no packet is due, instead of spinning
        /// (AF_PACKET ring only): small bursts, the same rate, the core left to others.
        #[arg(long, default_value_t = 0)]
        sleep_us: u64,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Receive test traffic and report per-flow counts, loss, reordering, latency, rates.
    Sink {
        #[arg(long)]
        iface: String,
        #[arg(long)]
        duration: f64,
        /// Interval for the rate statistics, in milliseconds (1 to 1000).
        #[arg(long, default_value_t = 100.0)]
        interval: f64,
        /// Rate statistics over several intervals, in milliseconds, comma-separated, like
        /// `1,100` (each a multiple of the first; replaces --interval): per flow, `rates`.
        #[arg(long, value_delimiter = ',')]
        intervals: Vec<f64>,
        /// Write a sequence-number trace (CSV: flow,seq,rx_ns) of the test packets received.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Packets the trace holds at most.
        #[arg(long, default_value_t = 1_000_000)]
        trace_max: u64,
        #[arg(long, default_value_t = 1234)]
        port: u16,
        /// Drop test traffic (UDP to --port) after the sink has seen it (nftables netdev
        /// ingress, removed at exit), so the host's stack does no work for it.
        #[arg(long)]
        drop: bool,
        /// Receive on an AF_XDP socket with receive times taken in the XDP hook, instead
        /// of the AF_PACKET ring: no socket buffer per frame, so the receiving costs the
        /// sender's core (on a veth) far less. UDP only goes to the sink; ARP and the rest
        /// to the host's stack.
        #[arg(long)]
        xdp: bool,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Change the routes of a running forwarder (published atomically while it forwards).
    Route {
        #[command(subcommand)]
        cmd: RouteCmd,
    },
    /// Benchmarks (JSON on stdout, progress on stderr).
    Bench {
        #[command(subcommand)]
        what: Bench,
    },
    /// Send raw frames, given in hex, out of an interface (for tests and operations).
    Inject {
        #[arg(long)]
        iface: String,
        /// Frame bytes in hex (spaces and colons allowed).
        #[arg(long)]
        hex: String,
        #[arg(long, default_value_t = 1)]
        count: usize,
    },
}

/// What every element takes on the command line.
#[derive(clap::Args)]
struct ElementArgs {
    #[arg(long)]
    config: PathBuf,
    /// Serve counters and state on this Unix socket (JSON lines).
    #[arg(long)]
    control: Option<PathBuf>,
    /// Packet I/O backend, overriding the config's `[io] backend`: auto, xdp or packet.
    #[arg(long, value_name = "BACKEND")]
    io: Option<String>,
    /// The fast path on or off (`[io] fast_path`), whatever the config says: in the
    /// ports' XDP programs on AF_XDP, in their tcx programs on AF_PACKET (the forwarder's;
    /// the LB's and the switch's are XDP's alone). On by default in forwarders, back-ends,
    /// LBs and switches; `--fast-path` alone means true.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    fast_path: Option<bool>,
    /// The DIST key (hex digits in a file), overriding the config's `[dist] key_file`.
    #[arg(long, value_name = "FILE")]
    dist_key_file: Option<PathBuf>,
    /// The CPUs to run on, as `[io] cpus` says ("4-5", "0-3,8"), overriding the config's:
    /// workers pinned to them, the ports' receive work in NAPI threads pinned beside them.
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
}

impl ElementArgs {
    /// Applies `--cpus` to `io` and keeps the process to the CPUs it names (before any
    /// thread starts, so that every thread inherits them).
    fn place(&self, io: &mut control::config::IoConfig) -> Result<()> {
        if let Some(c) = &self.cpus {
            io.cpus = Some(
                io::placement::CpuList::parse(c)
                    .map_err(|e| anyhow::anyhow!("--cpus {c:?}: {e}"))?,
            );
        }
        control::run::place_process(io).map_err(anyhow::Error::msg)
    }

    /// Applies `--fast-path` to `io`.
    fn fast(&self, io: &mut control::config::IoConfig) {
        if let Some(on) = self.fast_path {
            io.fast_path = on;
            io.fast_path_set = true;
        }
    }

    /// Applies `--dist-key-file` to `dist` and says loudly if DIST stays unauthenticated.
    fn dist(&self, dist: &mut control::config::DistConfig, element: &str) -> Result<()> {
        if let Some(f) = &self.dist_key_file {
            dist.set_key_file(f)
                .map_err(|e| anyhow::anyhow!("--dist-key-file: {e}"))?;
        }
        dist.warn_if_open(element);
        Ok(())
    }
}

#[derive(Subcommand)]
enum Show {
    /// Per-interface and per-reason counters, as JSON.
    Counters {
        #[arg(long)]
        control: PathBuf,
        /// Print what each counter means instead.
        #[arg(long)]
        describe: bool,
    },
    /// The neighbour (ARP) table, as JSON; on an Axon, the neighbour Axons by port.
    Neighbours {
        #[arg(long)]
        control: PathBuf,
    },
    /// The router's counters as one view, as JSON: in total (external ports; drops by
    /// reason over every element), per external port and per element.
    Router {
        #[arg(long)]
        control: PathBuf,
    },
    /// The element's interfaces, as JSON.
    Interfaces {
        #[arg(long)]
        control: PathBuf,
    },
    /// Route table size, as JSON; on an Axon, its paths to the other Axons and every host
    /// port's routes.
    Routes {
        #[arg(long)]
        control: PathBuf,
    },
    /// An LB's balancing table: back-ends, weights, liveness, packets, last hello.
    Balance {
        #[arg(long)]
        control: PathBuf,
    },
    /// An LB's classifier rules, most specific first.
    Rules {
        #[arg(long)]
        control: PathBuf,
    },
    /// The distributed FIB. On the controller: its epoch, version, route count and digest,
    /// and each back-end's (consistent when all four match). On a back-end: its own.
    Fib {
        #[arg(long)]
        control: PathBuf,
    },
    /// The elements a controller has discovered from their hellos.
    Elements {
        #[arg(long)]
        control: PathBuf,
    },
    /// A switch's learned MAC addresses: port and age.
    Macs {
        #[arg(long)]
        control: PathBuf,
    },
    /// An Axon's hosts: address, MAC, port, last seen.
    Hosts {
        #[arg(long)]
        control: PathBuf,
    },
    /// An Axon's DHCP leases (and offers): MAC, address, bound, expiry.
    Leases {
        #[arg(long)]
        control: PathBuf,
    },
    /// An Axon's last probe to each other Axon: per hop, input and output timestamps,
    /// residence and link times, and the round trip.
    Probes {
        #[arg(long)]
        control: PathBuf,
    },
}

#[derive(Subcommand)]
enum DistCmd {
    /// Send one DIST message, given as JSON (see docs/dist.md), out of an interface.
    Send {
        #[arg(long)]
        iface: String,
        /// The message, e.g. '{"type": "balance", "flush": true, "entries": [{"mac":
        /// "02:00:00:00:01:01", "port": 1, "weight": 1}]}'; `-` reads it from stdin.
        #[arg(long, required_unless_present = "frame", conflicts_with = "frame")]
        json: Option<String>,
        /// A whole Ethernet frame in hex, sent as it is (e.g. one `dist listen --frames`
        /// printed: a replay); --dst, --src and --key-file do not apply.
        #[arg(long)]
        frame: Option<String>,
        /// Seal the message under the key in this file (hex digits), as elements with
        /// `[dist] key_file` do.
        #[arg(long, value_name = "FILE")]
        key_file: Option<PathBuf>,
        /// Destination MAC (default broadcast).
        #[arg(long, default_value = "ff:ff:ff:ff:ff:ff")]
        dst: String,
        /// Source MAC (default the interface's).
        #[arg(long)]
        src: Option<String>,
        /// Tag the frame with this VLAN id (to test that tagged DIST is refused).
        #[arg(long)]
        vlan: Option<u16>,
        #[arg(long, default_value_t = 1)]
        count: usize,
    },
    /// Print the DIST messages arriving on an interface, one JSON object per line.
    Listen {
        #[arg(long)]
        iface: String,
        /// Stop after this many messages.
        #[arg(long)]
        count: Option<usize>,
        /// Stop after this many seconds.
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
        /// Check each sealed message's tag against the key in this file ("auth": "ok" or
        /// "forged"; "unsealed" for a message without a seal).
        #[arg(long, value_name = "FILE")]
        key_file: Option<PathBuf>,
        /// Also print each whole frame in hex ("frame"), as `dist send --frame` takes it.
        #[arg(long)]
        frames: bool,
    },
    /// Write a new random DIST key (hex digits, mode 600) for `[dist] key_file`.
    Keygen {
        /// The file to write (replaced if it exists).
        #[arg(long)]
        out: PathBuf,
    },
    /// Decode a DIST message given in hex (the Ethernet payload, or a whole frame).
    Decode {
        #[arg(long)]
        hex: String,
    },
}

#[derive(Subcommand)]
enum RouteCmd {
    /// Add or replace a route; several --via make an ECMP route.
    Add {
        prefix: String,
        #[arg(long, required = true)]
        via: Vec<String>,
        #[arg(long)]
        control: PathBuf,
    },
    /// Withdraw a route.
    Del {
        prefix: String,
        #[arg(long)]
        control: PathBuf,
    },
    /// Read the configuration's routes and routes file again and replace every route.
    Reload {
        #[arg(long)]
        control: PathBuf,
    },
}

#[derive(Subcommand)]
enum Bench {
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
        /// AF_XDP ports), as `multistage-fast`.
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
        /// Run the receiving ports' NAPI threads (the router's, from the XDP generator) at
        /// real-time priority (SCHED_FIFO 50) for every contender: a thread that waits for
        /// a core lets the veth's 256-frame ring overflow at low rates, which otherwise
        /// decides the zero-loss rates on a shared machine (docs/forwarder.md). At overload
        /// that thread then takes its core before any user-space forwarder.
        #[arg(long)]
        rt_napi: bool,
        /// How the sinks receive: `xdp` (an AF_XDP socket, frames stamped in the XDP hook:
        /// no socket buffer per frame) or `afpacket` (the AF_PACKET ring, as before).
        /// A veth receives on the sender's core, the router's: the sink's own work there
        /// is the same for every contender, and `xdp` makes it a fraction of
        /// `afpacket`'s (docs/measurement.md).
        #[arg(long, default_value = "xdp", value_parser = ["xdp", "afpacket"])]
        sink: String,
        /// Measure IPv6 as well, on the same (dual-stack) lab in the same run: each
        /// contender over IPv4, then over IPv6 (as `NAME-ipv6`; 84-byte frames where IPv4
        /// has 64), the table's IPv6 part (synthetic, or a file's IPv6 routes) loaded too.
        #[arg(long)]
        ipv6: bool,
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
        /// NAPI threads at SCHED_FIFO 50.
        #[arg(long)]
        rt_napi: bool,
        /// Draw the plots of the run in --out again from its results.json; measure nothing.
        #[arg(long)]
        replot: bool,
        /// What joins the multistage router's elements: `switch` (tessera switch with its
        /// XDP fast path: frames stay XDP frames) or `bridge` (a Linux bridge).
        #[arg(long, default_value = "switch")]
        interconnect: String,
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
}

#[derive(clap::Args)]
struct LabArgs {
    /// The topology file.
    file: PathBuf,
    /// Lab name, overriding the file's (runs several copies of one topology side by side).
    #[arg(long)]
    name: Option<String>,
}

#[derive(Subcommand)]
enum LabCmd {
    /// Build the topology and start its elements.
    Up {
        #[command(flatten)]
        lab: LabArgs,
        /// Run an element in another role, e.g. `--role r=linux` for the kernel contender.
        #[arg(long, value_name = "NODE=ROLE")]
        role: Vec<String>,
        /// Run every element on this packet I/O backend (auto, xdp or packet), whatever
        /// its config says; kept for `lab start`.
        #[arg(long, value_name = "BACKEND")]
        io: Option<String>,
        /// Every forwarder, LB and switch with its fast path on or off (`[io] fast_path`:
        /// XDP on AF_XDP ports, tcx on AF_PACKET ones, where LBs and switches run
        /// without), whatever its config says; kept for `lab start`. Without it, each
        /// element's config says (the default: on). Unless it is false (or `--io packet`),
        /// GRO goes on on every switch port and host interface, so that their veths take
        /// what XDP programs redirect; with false, links stay wire-like.
        #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
        fast_path: Option<bool>,
    },
    /// Stop the elements and remove every namespace, link and bridge of the lab.
    Down {
        #[command(flatten)]
        lab: LabArgs,
    },
    /// List every node with its namespace and interfaces.
    Show {
        #[command(flatten)]
        lab: LabArgs,
        #[arg(long)]
        json: bool,
    },
    /// Write each element's configuration (with the files it names, its interfaces'
    /// MACs and cabling, and a shared DIST key) under a directory, to start by hand or
    /// with the Debian package's units on real machines (docs/deploy.md).
    Export {
        #[command(flatten)]
        lab: LabArgs,
        #[arg(long)]
        out: PathBuf,
    },
    /// Run a command inside a node: `tessera lab exec FILE NODE -- CMD...`.
    Exec {
        #[command(flatten)]
        lab: LabArgs,
        node: String,
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
    /// Stop one element of a running lab.
    Stop {
        #[command(flatten)]
        lab: LabArgs,
        node: String,
        /// Also kill (SIGKILL) the element's routing suite (its FRR daemons), as when
        /// the machine fails. `lab start` starts both again.
        #[arg(long)]
        routing_suite: bool,
    },
    /// Start the `frr_active` daemons of an element that are not running: what a
    /// controller's `[takeover] on_active` command runs.
    FrrStart {
        #[command(flatten)]
        lab: LabArgs,
        node: String,
        /// Start ospfd in graceful-restart mode for this many seconds (RFC 3623): on a
        /// takeover, after the controller's Grace-LSA.
        #[arg(long, value_name = "SECONDS")]
        graceful_restart: Option<u32>,
    },
    /// Stop the `frr_active` daemons of an element (SIGTERM): what a controller's
    /// `[takeover] on_standby` command runs.
    FrrStop {
        #[command(flatten)]
        lab: LabArgs,
        node: String,
    },
    /// Start one element of a running lab again (and its routing suite, if stopped).
    Start {
        #[command(flatten)]
        lab: LabArgs,
        node: String,
    },
}

fn main() {
    let cli = Cli::parse();
    let filter = || {
        tracing_subscriber::EnvFilter::try_from_env("TESSERA_LOG").unwrap_or_else(|_| "info".into())
    };
    match cli.log {
        LogFormat::Text => tracing_subscriber::fmt()
            .with_env_filter(filter())
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter())
            .with_writer(std::io::stderr)
            .init(),
    }
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tessera: {e:#}");
            2
        }
    };
    std::process::exit(code);
}

fn print(v: &serde_json::Value) -> Result<i32> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(0)
}

/// Prints a summary: JSON, or `key: value` lines for people.
fn report(v: &serde_json::Value, json: bool) -> Result<i32> {
    if json {
        return print(v);
    }
    for (k, x) in v.as_object().into_iter().flatten() {
        println!("{k}: {x}");
    }
    Ok(0)
}

fn ask(control: &Path, cmd: &str) -> Result<i32> {
    let v = control::ctlsock::request(control, cmd).map_err(anyhow::Error::msg)?;
    print(&v)
}

/// `tessera top`: asks for the router view every `interval_ms` and prints the rates
/// since the previous one.
fn top(control: &Path, interval_ms: u64, count: Option<u64>) -> Result<i32> {
    use std::io::IsTerminal;
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    let tty = std::io::stdout().is_terminal();
    let interval = std::time::Duration::from_millis(interval_ms.max(100));
    let get = || control::ctlsock::request(control, "router").map_err(anyhow::Error::msg);
    let mut prev = get()?;
    let mut at = std::time::Instant::now();
    let mut n = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) && count.is_none_or(|c| n < c) {
        std::thread::sleep(interval);
        let now = get()?;
        let dt = at.elapsed().as_secs_f64();
        at = std::time::Instant::now();
        n += 1;
        let text = control::metrics::top_text(&prev, &now, dt);
        if tty {
            print!("\x1b[H\x1b[2J");
        }
        println!("{text}");
        prev = now;
    }
    Ok(0)
}

fn load_lab(a: &LabArgs) -> Result<lab::Lab> {
    let exe = std::env::current_exe().context("cannot find the tessera binary")?;
    lab::Lab::load(&a.file, a.name.as_deref(), exe).map_err(anyhow::Error::msg)
}

fn run(cli: Cli) -> Result<i32> {
    match cli.cmd {
        Cmd::Forwarder(a) => forwarder(&a),
        Cmd::Show { what } => match what {
            Show::Counters { control, describe } => {
                ask(&control, if describe { "describe" } else { "counters" })
            }
            Show::Neighbours { control } => ask(&control, "neighbours"),
            Show::Interfaces { control } => ask(&control, "interfaces"),
            Show::Router { control } => ask(&control, "router"),
            Show::Routes { control } => ask(&control, "routes"),
            Show::Balance { control } => ask(&control, "balance"),
            Show::Rules { control } => ask(&control, "rules"),
            Show::Fib { control } => ask(&control, "fib"),
            Show::Elements { control } => ask(&control, "elements"),
            Show::Macs { control } => ask(&control, "macs"),
            Show::Hosts { control } => ask(&control, "hosts"),
            Show::Leases { control } => ask(&control, "leases"),
            Show::Probes { control } => ask(&control, "probes"),
        },
        Cmd::Controller(a) | Cmd::Axon(a) if a.fast_path == Some(true) => {
            bail!("--fast-path is for forwarders, LBs and switches")
        }
        Cmd::Balancer(a) => balancer(&a),
        Cmd::Controller(a) => controller(&a),
        Cmd::Switch(a) => switch(&a),
        Cmd::Axon(a) => axon(&a),
        Cmd::Reload { control } => match control::ctlsock::request(&control, "reload") {
            Ok(v) => print(&v),
            Err(e) => {
                eprintln!("tessera reload: {e}");
                Ok(1)
            }
        },
        Cmd::Man { out } => {
            std::fs::create_dir_all(&out).with_context(|| format!("{}", out.display()))?;
            let n = write_man(&Cli::command(), "tessera", &out)?;
            eprintln!("{n} man pages in {}", out.display());
            Ok(0)
        }
        Cmd::Completions { shell } => {
            // Into memory first: the generator panics on a write error (a closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "tessera", &mut script);
            use std::io::Write;
            match std::io::stdout().write_all(&script) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
                _ => Ok(0),
            }
        }
        Cmd::Check { config, role, json } => match check::run(&config, role.as_deref()) {
            Ok(v) if json => print(&v),
            Ok(v) => {
                println!(
                    "{}: {}: ok ({})",
                    config.display(),
                    v["role"].as_str().unwrap_or(""),
                    v["summary"].as_str().unwrap_or("")
                );
                for e in v["elements"].as_array().into_iter().flatten() {
                    println!(
                        "  {} ({}): {}",
                        e["element"].as_str().unwrap_or(""),
                        e["role"].as_str().unwrap_or(""),
                        e["summary"].as_str().unwrap_or("")
                    );
                }
                Ok(0)
            }
            Err(e) => {
                eprintln!("tessera check: {e:#}");
                Ok(1)
            }
        },
        Cmd::Dist { cmd } => dist_cmd(cmd),
        Cmd::Lab { cmd } => lab_cmd(cmd),
        Cmd::Capture {
            control,
            port,
            filter,
            count,
            write,
        } => capture::run(&capture::CaptureArgs {
            control,
            port,
            filter,
            count,
            write,
        }),
        Cmd::Top {
            control,
            interval_ms,
            count,
        } => top(&control, interval_ms, count),
        Cmd::Gen {
            iface,
            dst_mac,
            src,
            dst,
            dst_prefixes,
            flows,
            flow_base,
            size,
            rate,
            duration,
            count,
            port,
            xdp,
            sleep_us,
            json,
        } => {
            let dst = match (dst, dst_prefixes) {
                (Some(d), _) => gen::generator::Destinations::One(d),
                (None, Some(path)) if src.is_ipv6() => {
                    let mut v = Vec::new();
                    control::tables::read6(&path, |p, _| v.push(p)).map_err(anyhow::Error::msg)?;
                    gen::generator::Destinations::Prefixes6(v)
                }
                (None, Some(path)) => {
                    let mut v = Vec::new();
                    control::tables::read(&path, |p, _| v.push(p)).map_err(anyhow::Error::msg)?;
                    gen::generator::Destinations::Prefixes(v)
                }
                (None, None) => bail!("give --dst ADDR or --dst-prefixes FILE"),
            };
            let cfg = gen::generator::GenConfig {
                iface,
                dst_mac: dst_mac
                    .parse()
                    .map_err(|e| anyhow::anyhow!("--dst-mac {dst_mac:?}: {e}"))?,
                src,
                dst,
                flows,
                flow_base,
                size,
                rate: gen::rate::Rate::parse(&rate).map_err(anyhow::Error::msg)?,
                duration,
                count,
                dst_port: port,
                seed: 1,
                xdp,
                sleep_us,
            };
            let stop = Arc::new(AtomicBool::new(false));
            signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
            signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
            let v = gen::generator::run(&cfg, &stop).map_err(anyhow::Error::msg)?;
            report(&v, json)
        }
        Cmd::Sink {
            iface,
            duration,
            interval,
            intervals,
            trace,
            trace_max,
            port,
            drop,
            xdp,
            json,
        } => {
            let stop = Arc::new(AtomicBool::new(false));
            signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
            signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
            let cfg = gen::sink::SinkConfig {
                iface,
                duration,
                interval_ms: intervals.first().copied().unwrap_or(interval),
                more_intervals_ms: intervals.iter().skip(1).copied().collect(),
                trace,
                trace_max,
                port,
                drop,
                xdp,
            };
            let v = gen::sink::run(&cfg, &stop, || eprintln!("sink: receiving"))
                .map_err(anyhow::Error::msg)?;
            report(&v, json)
        }
        Cmd::Route { cmd } => {
            let (control, req) = match cmd {
                RouteCmd::Add {
                    prefix,
                    via,
                    control,
                } => (
                    control,
                    serde_json::json!({"cmd": "route-add", "prefix": prefix, "via": via}),
                ),
                RouteCmd::Del { prefix, control } => (
                    control,
                    serde_json::json!({"cmd": "route-del", "prefix": prefix}),
                ),
                RouteCmd::Reload { control } => {
                    (control, serde_json::json!({"cmd": "reload-routes"}))
                }
            };
            print(&control::ctlsock::request_with(&control, req).map_err(anyhow::Error::msg)?)
        }
        Cmd::Inject { iface, hex, count } => inject(&iface, &hex, count),
        Cmd::Bench { what } => match what {
            Bench::Fib {
                table,
                growth: true,
                rounds,
                dpdk,
                ..
            } => {
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
            Bench::Fib {
                table,
                synthetic,
                dpdk,
                ipv6,
                ..
            } => {
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
                            let (t, skipped) =
                                bench::table::read6(&path).map_err(anyhow::Error::msg)?;
                            eprintln!(
                                "{}: {} IPv6 prefixes, {} next hops ({skipped} other lines or \
                                 records skipped)",
                                path.display(),
                                t.routes.len(),
                                t.next_hops.len()
                            );
                            (t, path.display().to_string())
                        }
                        (None, Some(n)) => {
                            (bench::table::synthetic6(n, 1), format!("synthetic6-{n}"))
                        }
                        (None, None) => bail!("give --table FILE or --synthetic N"),
                    };
                    let v = bench::fib_bench::run6(&t, &name, dpdk, &mut |stage| {
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
            Bench::Forward {
                out, replot: true, ..
            } => {
                let files = bench::forward_bench::replot(&out).map_err(anyhow::Error::msg)?;
                print(&serde_json::json!({ "plots": files }))
            }
            Bench::Forward {
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
            } => {
                let exe = std::env::current_exe().context("cannot find the tessera binary")?;
                stop_lab_benches_on_signals()?;
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
                if star {
                    contenders.push((bench::forward_bench::STAR.into(), None));
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
                    sink_xdp: sink == "xdp",
                };
                let v = bench::forward_bench::run(&opts).map_err(anyhow::Error::msg)?;
                print(&v)
            }
            Bench::Switch {
                seconds,
                sizes,
                io,
                out,
            } => {
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
            Bench::Axon {
                setups,
                link_mbps,
                seconds,
                io,
                out,
            } => {
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
            Bench::Contend {
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
            } => {
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
            Bench::Balancer {
                seconds,
                no_lab,
                io,
                fast_path,
                rt_napi,
            } => {
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
            Bench::Scale {
                out, replot: true, ..
            } => {
                let files = bench::scale_bench::replot(&out).map_err(anyhow::Error::msg)?;
                print(&serde_json::json!({ "plots": files }))
            }
            Bench::Scale {
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
            } => {
                let exe = std::env::current_exe().context("cannot find the tessera binary")?;
                let interconnect = bench::scale_bench::Interconnect::parse(&interconnect)
                    .with_context(|| {
                        format!("--interconnect {interconnect:?}: use switch or bridge")
                    })?;
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
            Bench::Pipeline {
                table,
                seconds,
                json,
            } => {
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
                let v = bench::pipeline_bench::run(
                    full.as_ref().map(|t| (t, name.as_str())),
                    secs,
                    &mut |s| eprintln!("bench pipeline: {s}"),
                );
                if !json {
                    eprint!("{}", bench::pipeline_bench::text_table(&v));
                }
                print(&v)
            }
        },
    }
}

fn lab_cmd(cmd: LabCmd) -> Result<i32> {
    match cmd {
        LabCmd::Up {
            lab,
            role,
            io,
            fast_path,
        } => {
            let mut l = load_lab(&lab)?;
            backend_arg(io.as_deref())?;
            l.io = io;
            l.fast_path = fast_path;
            for r in role {
                let (node, role) = r
                    .split_once('=')
                    .with_context(|| format!("--role {r:?}: expected NODE=ROLE"))?;
                if !lab::topology::ROLES.contains(&role) {
                    bail!(
                        "--role {r:?}: role is one of {}",
                        lab::topology::ROLES.join(", ")
                    );
                }
                l.roles.insert(node.to_string(), role.to_string());
            }
            l.up().map_err(anyhow::Error::msg)?;
            let gro = if l.fast_path == Some(false) || l.io.as_deref() == Some("packet") {
                "GRO off too"
            } else {
                "GRO on at hosts and switch ports, for the elements' XDP fast paths"
            };
            eprintln!(
                "lab {} is up (wire-like links: TSO, GSO and checksum offload off, frames never exceed the MTU; {gro})",
                l.name
            );
            Ok(0)
        }
        LabCmd::Down { lab } => {
            let l = load_lab(&lab)?;
            l.down().map_err(anyhow::Error::msg)?;
            eprintln!("lab {} is down", l.name);
            Ok(0)
        }
        LabCmd::Export { lab, out } => {
            let l = load_lab(&lab)?;
            let names = l.export(&out).map_err(anyhow::Error::msg)?;
            println!(
                "exported {} element(s) to {}: {} (see {}/README.md)",
                names.len(),
                out.display(),
                names.join(", "),
                out.display()
            );
            Ok(0)
        }
        LabCmd::Show { lab, json } => {
            let l = load_lab(&lab)?;
            let v = l.show().map_err(anyhow::Error::msg)?;
            if json {
                return print(&v);
            }
            for n in v["nodes"].as_array().into_iter().flatten() {
                println!(
                    "{:<10} {:<8} {:<20} {}",
                    n["name"].as_str().unwrap_or(""),
                    n["kind"].as_str().unwrap_or(""),
                    n["namespace"].as_str().unwrap_or(""),
                    if n["up"] == true { "up" } else { "down" }
                );
                let pl = &n["placement"];
                for i in n["interfaces"].as_array().into_iter().flatten() {
                    let name = i["name"].as_str().unwrap_or("");
                    // Where its receive work runs: NAPI threads' CPUs, or the sender's.
                    let napi: Vec<String> = pl["napi"][name]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|t| match t["cpus"].as_str() {
                            Some(c) => format!("cpu {c}"),
                            None => "softirq".into(),
                        })
                        .collect();
                    let rx = if napi.is_empty() {
                        "rx: sender's cpu".to_string()
                    } else {
                        format!("rx: napi {}", napi.join(","))
                    };
                    println!(
                        "    {:<10} {} {} {rx}",
                        name,
                        i["mac"].as_str().unwrap_or(""),
                        i["addresses"]
                    );
                }
                let threads: Vec<String> = pl["threads"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| {
                        format!(
                            "{} cpu {}",
                            t["name"].as_str().unwrap_or(""),
                            t["cpus"].as_str().unwrap_or("")
                        )
                    })
                    .collect();
                if pl["cpus"].is_string() || !threads.is_empty() {
                    println!(
                        "    cpus {}; threads: {}",
                        pl["cpus"].as_str().unwrap_or("any"),
                        threads.join(", ")
                    );
                }
            }
            Ok(0)
        }
        LabCmd::Exec { lab, node, argv } => load_lab(&lab)?
            .exec(&node, &argv)
            .map_err(anyhow::Error::msg),
        LabCmd::Stop {
            lab,
            node,
            routing_suite,
        } => {
            let l = load_lab(&lab)?;
            // The element first: with it gone, nothing the dying routing suite sends
            // (a TCP reset, an OSPF goodbye) leaves the machine.
            l.stop(&node).map_err(anyhow::Error::msg)?;
            if routing_suite {
                l.stop_frr(&node).map_err(anyhow::Error::msg)?;
            }
            Ok(0)
        }
        LabCmd::FrrStart {
            lab,
            node,
            graceful_restart,
        } => {
            let started = load_lab(&lab)?
                .frr_start(&node, graceful_restart)
                .map_err(anyhow::Error::msg)?;
            println!(
                "{node}: started {}",
                if started.is_empty() {
                    "nothing (all running)".to_string()
                } else {
                    started.join(", ")
                }
            );
            Ok(0)
        }
        LabCmd::FrrStop { lab, node } => {
            let stopped = load_lab(&lab)?
                .frr_stop(&node)
                .map_err(anyhow::Error::msg)?;
            println!(
                "{node}: stopped {}",
                if stopped.is_empty() {
                    "nothing (none running)".to_string()
                } else {
                    stopped.join(", ")
                }
            );
            Ok(0)
        }
        LabCmd::Start { lab, node } => {
            load_lab(&lab)?.start(&node).map_err(anyhow::Error::msg)?;
            Ok(0)
        }
    }
}

/// Writes `cmd`'s man page as `NAME.1` into `out`, then each visible subcommand's as
/// `NAME-SUB.1`, recursively; returns how many.
fn write_man(cmd: &clap::Command, name: &str, out: &Path) -> Result<usize> {
    let cmd = cmd
        .clone()
        .display_name(name.to_string())
        .bin_name(name.replace('-', " "));
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
    let file = out.join(format!("{name}.1"));
    std::fs::write(&file, page).with_context(|| format!("{}", file.display()))?;
    let mut n = 1;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        n += write_man(sub, &format!("{name}-{}", sub.get_name()), out)?;
    }
    Ok(n)
}

/// SIGHUP would end the process: an element that reloads nothing yet logs it and goes on.
fn sighup_reloads_nothing(element: &'static str) -> Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP])?;
    std::thread::Builder::new()
        .name("sighup".into())
        .spawn(move || {
            for _ in signals.forever() {
                tracing::warn!(element, "SIGHUP: this element does not reload its config yet (a forwarder does); nothing changed");
            }
        })?;
    Ok(())
}

/// `--io BACKEND`, if given.
fn backend_arg(io: Option<&str>) -> Result<Option<io::Backend>> {
    io.map(|b| {
        io::Backend::parse(b).with_context(|| format!("--io {b:?}: use auto, xdp or packet"))
    })
    .transpose()
}

fn forwarder(a: &ElementArgs) -> Result<i32> {
    use dataplane::port::Port;
    let (config, control) = (a.config.as_path(), a.control.as_deref());
    let mut cfg = control::ForwarderFile::load(config)?;
    if let Some(b) = backend_arg(a.io.as_deref())? {
        cfg.io.backend = b;
    }
    a.place(&mut cfg.io)?;
    a.fast(&mut cfg.io);
    if cfg.backend.is_some() {
        a.dist(&mut cfg.dist, "back-end")?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    let mut links = Vec::new();
    // Sub-interfaces ride on their parent's port.
    let names: Vec<&str> = cfg
        .interfaces
        .iter()
        .filter(|i| i.vlan.is_none())
        .map(|i| i.name.as_str())
        .collect();
    for name in &names {
        links.push(take_port(name)?);
    }
    let t = std::time::Instant::now();
    let mut f = control::run::build(&cfg, &links).map_err(anyhow::Error::msg)?;
    let build_ms = t.elapsed().as_millis() as u64;
    let mut off = (!cfg.io.fast_path).then(|| "[io] fast_path = false".to_string());
    if cfg.io.fast_path && cfg.star.is_some() {
        if cfg.io.fast_path_set {
            bail!(
                "{}: [io] fast_path is not built for a star member yet ([star])",
                config.display()
            );
        }
        off = Some("the fast path is not built for a star member yet ([star])".into());
    }
    let fast = match &off {
        None => {
            let fl = control::fast::FastLink::new(&f.ifaces).map_err(anyhow::Error::msg)?;
            fl.watch_egress(stop.clone());
            Some(fl)
        }
        Some(_) => None,
    };
    let workers = cfg.io.workers;
    // ports[w]: the ports worker w owns, one per interface.
    let mut ports: Vec<Vec<io::AnyPort>> = (0..workers).map(|_| Vec::new()).collect();
    let mut umems = cfg.io.shared_umem.then(|| io::Umems::new(&names, workers));
    for (k, (name, link)) in names.iter().zip(&links).enumerate() {
        let (backend, ring) = (cfg.io.backend, cfg.io.packet_ring);
        let mine = match &fast {
            Some(fl) => {
                let facts = control::fast::FastLink::facts(&f, k as u32, link.mac.0);
                let program = |hook: io::xsk::Hook| match fl.fp.lock() {
                    Ok(fp) => fp.program(&facts, hook),
                    Err(_) => Vec::new(),
                };
                io::open_workers(name, backend, ring, Some(&program), workers, umems.as_mut())?
            }
            None => io::open_workers(name, backend, ring, None, workers, umems.as_mut())?,
        };
        let info = mine[0].info();
        tracing::info!(interface = name, backend = info.backend, mode = %info.mode, workers, "port open");
        for (w, p) in mine.into_iter().enumerate() {
            ports[w].push(p);
        }
    }
    control::run::place_ports(&cfg.io, &names);
    tracing::info!(
        interfaces = %ports[0].iter().map(|p| p.name()).collect::<Vec<_>>().join(","),
        routes = f.route_count(),
        build_ms,
        fast_path = fast.is_some(),
        workers,
        "forwarder running"
    );
    let s = control::run::run(f, ports, Some(&cfg), control, stop, fast, off)
        .map_err(anyhow::Error::msg)?;
    let dropped: u64 = s.drops.values().sum();
    tracing::info!(
        forwarded = s.events["ip4_forwarded"],
        dropped,
        "forwarder stopped"
    );
    Ok(0)
}

/// Takes an interface from the kernel's IP stack; what the system says of it.
fn take_port(name: &str) -> Result<control::run::Link> {
    io::netdev::take_over(name)?;
    Ok(control::run::Link {
        mac: wire::MacAddr(io::netdev::mac(name)?),
        mtu: io::netdev::mtu(name)?,
        speed_mbps: io::netdev::speed_mbps(name),
    })
}

/// Takes an interface from the kernel's IP stack and opens its port as `io` says (on the
/// element's shared UMEM `umems`, if given).
fn open_port(
    name: &str,
    io: &control::config::IoConfig,
    umems: Option<&mut io::Umems>,
) -> Result<(io::AnyPort, control::run::Link)> {
    if io.workers > 1 {
        bail!(
            "[io] workers = {}: the forwarder, the back-end and the LB run several workers; this element runs one",
            io.workers
        );
    }
    let link = take_port(name)?;
    let port = io::open_with(name, io.backend, io.packet_ring, None, umems)?;
    let info = dataplane::port::Port::info(&port);
    tracing::info!(interface = name, backend = info.backend, mode = %info.mode, "port open");
    Ok((port, link))
}

fn balancer(a: &ElementArgs) -> Result<i32> {
    sighup_reloads_nothing("LB")?;
    let (config, control) = (a.config.as_path(), a.control.as_deref());
    let mut cfg = control::balancer::BalancerFile::load(config)?;
    if let Some(b) = backend_arg(a.io.as_deref())? {
        cfg.io.backend = b;
    }
    a.place(&mut cfg.io)?;
    a.dist(&mut cfg.dist, "balancer")?;
    a.fast(&mut cfg.io);
    // The LB's fast path is an XDP program: its ports are AF_XDP's. Said outright, "auto"
    // does not fall back to AF_PACKET then; by default, a port that cannot open AF_XDP
    // runs on AF_PACKET without it, and says so.
    let mut off = (!cfg.io.fast_path).then(|| "[io] fast_path = false".to_string());
    if cfg.io.fast_path && cfg.io.backend == io::Backend::Packet {
        if cfg.io.fast_path_set {
            bail!(
                "{}: [io] fast_path of the LB runs in XDP: it needs backend = \"xdp\" or \"auto\", not \"packet\"",
                config.display()
            );
        }
        off = Some("the LB's fast path runs in XDP, and [io] backend = \"packet\"".into());
    }
    if cfg.io.fast_path && cfg.io.fast_path_set {
        cfg.io.backend = io::Backend::Xdp;
    }
    let mut fast_off = std::collections::HashMap::new();
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    let workers = cfg.io.workers;
    // ports[w]: the ports worker w owns, one per interface.
    let mut ports: Vec<Vec<io::AnyPort>> = (0..workers).map(|_| Vec::new()).collect();
    let mut links = Vec::new();
    for i in &cfg.interfaces {
        links.push(take_port(&i.name)?);
    }
    let mut umems = cfg.io.shared_umem.then(|| {
        let names: Vec<&str> = cfg.interfaces.iter().map(|i| i.name.as_str()).collect();
        io::Umems::new(&names, workers)
    });
    let b = control::balancer::build(&cfg, &links).map_err(anyhow::Error::msg)?;
    let fast = match &off {
        None => {
            let names: Vec<String> = cfg.interfaces.iter().map(|i| i.name.clone()).collect();
            let fl = control::lbfast::LbFastLink::new(&names).map_err(anyhow::Error::msg)?;
            fl.watch_egress(stop.clone());
            Some(fl)
        }
        Some(why) => {
            for i in &cfg.interfaces {
                fast_off.insert(i.name.clone(), why.clone());
            }
            None
        }
    };
    for (k, i) in cfg.interfaces.iter().enumerate() {
        let facts = control::lbfast::LbFastLink::facts(&b, k as u32);
        let program = |hook: io::xsk::Hook| match (&fast, hook) {
            (Some(fl), io::xsk::Hook::Xdp(xsk)) => fl.fp.program(&facts, xsk),
            _ => Vec::new(),
        };
        let program = fast.as_ref().map(|_| &program as io::xsk::ProgramFor);
        let (ring, backend) = (cfg.io.packet_ring, cfg.io.backend);
        let mine = match program {
            // By default, on "auto": AF_XDP with the fast path, else AF_PACKET without.
            Some(p) if backend == io::Backend::Auto => {
                match io::open_workers(
                    &i.name,
                    io::Backend::Xdp,
                    ring,
                    Some(p),
                    workers,
                    umems.as_mut(),
                ) {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::warn!(interface = %i.name, reason = %e, "AF_XDP unavailable; using AF_PACKET, without the fast path");
                        fast_off.insert(
                            i.name.clone(),
                            format!("AF_XDP unavailable ({e}): AF_PACKET, without the fast path"),
                        );
                        io::open_workers(&i.name, io::Backend::Packet, ring, None, workers, None)?
                    }
                }
            }
            p => io::open_workers(&i.name, backend, ring, p, workers, umems.as_mut())?,
        };
        let info = dataplane::port::Port::info(&mine[0]);
        tracing::info!(interface = %i.name, backend = info.backend, mode = %info.mode, workers, "port open");
        for (w, p) in mine.into_iter().enumerate() {
            ports[w].push(p);
        }
    }
    let names: Vec<&str> = cfg.interfaces.iter().map(|i| i.name.as_str()).collect();
    control::run::place_ports(&cfg.io, &names);
    tracing::info!(
        interfaces = %cfg.interfaces.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(","),
        backends = b.table.entries.len(),
        mode = ?b.table.mode,
        fast_path = fast.is_some(),
        workers,
        "balancer running"
    );
    let external = cfg
        .interfaces
        .iter()
        .filter(|i| i.role == wire::dist::PortRole::External)
        .map(|i| i.name.clone())
        .collect();
    let how = control::balancer::RunWith {
        io: cfg.io,
        metrics: cfg.metrics.clone(),
        external,
        fast,
        fast_off,
    };
    let s = control::balancer::run(b, ports, control, stop, how).map_err(anyhow::Error::msg)?;
    tracing::info!(
        balanced = s.events["balance_packets"],
        dropped = s.drops.values().sum::<u64>(),
        "balancer stopped"
    );
    Ok(0)
}

fn switch(a: &ElementArgs) -> Result<i32> {
    sighup_reloads_nothing("switch")?;
    let (config, control) = (a.config.as_path(), a.control.as_deref());
    let mut cfg = control::switch::SwitchFile::load(config)?;
    if let Some(b) = backend_arg(a.io.as_deref())? {
        cfg.io.backend = b;
    }
    a.place(&mut cfg.io)?;
    a.fast(&mut cfg.io);
    // The switch's fast path is an XDP program: its ports are AF_XDP's (by default, on
    // "auto", a port that cannot open AF_XDP turns it off for the switch, and says so).
    let mut off = (!cfg.io.fast_path).then(|| "[io] fast_path = false".to_string());
    if cfg.io.fast_path && cfg.io.backend == io::Backend::Packet {
        if cfg.io.fast_path_set {
            bail!(
                "{}: [io] fast_path of the switch runs in XDP: it needs backend = \"xdp\" or \"auto\", not \"packet\"",
                config.display()
            );
        }
        off = Some("the switch's fast path runs in XDP, and [io] backend = \"packet\"".into());
    }
    if a.dist_key_file.is_some() {
        tracing::info!("a switch speaks no DIST: --dist-key-file is not used");
    }
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    let mut ports = Vec::new();
    let mut umems = cfg.io.shared_umem.then(|| {
        let names: Vec<&str> = cfg.cfg.ports.iter().map(|p| p.name.as_str()).collect();
        io::Umems::new(&names, 1)
    });
    let fast = match &off {
        None => Some(control::switch::SwitchFast::new(&cfg.cfg).map_err(anyhow::Error::msg)?),
        Some(_) => None,
    };
    let mut fast_off: std::collections::HashMap<String, String> = match &off {
        Some(why) => cfg
            .cfg
            .ports
            .iter()
            .map(|p| (p.name.clone(), why.clone()))
            .collect(),
        None => Default::default(),
    };
    for (k, p) in cfg.cfg.ports.iter().enumerate() {
        let port = match &fast {
            Some(f) => {
                take_port(&p.name)?;
                let program = |hook: io::xsk::Hook| match hook {
                    io::xsk::Hook::Xdp(xsk) => f.fp.program(k as u32, xsk),
                    _ => Vec::new(),
                };
                let ring = cfg.io.packet_ring;
                let xdp = io::open_workers(
                    &p.name,
                    io::Backend::Xdp,
                    ring,
                    Some(&program),
                    1,
                    umems.as_mut(),
                );
                let mut v = match xdp {
                    Ok(v) => v,
                    // By default, on "auto": AF_PACKET without the fast path's program
                    // (frames still leave by it in the fast path of the other ports).
                    Err(e) if !cfg.io.fast_path_set && cfg.io.backend == io::Backend::Auto => {
                        tracing::warn!(interface = %p.name, reason = %e, "AF_XDP unavailable; using AF_PACKET, without the fast path");
                        fast_off.insert(
                            p.name.clone(),
                            format!("AF_XDP unavailable ({e}): AF_PACKET, without the fast path"),
                        );
                        io::open_workers(&p.name, io::Backend::Packet, ring, None, 1, None)?
                    }
                    Err(e) => return Err(e.into()),
                };
                let port = v.remove(0);
                let info = dataplane::port::Port::info(&port);
                tracing::info!(interface = %p.name, backend = info.backend, mode = %info.mode, fast_path_egress = f.eligible[k], "port open");
                port
            }
            None => open_port(&p.name, &cfg.io, umems.as_mut())?.0,
        };
        // A switch port takes frames for every MAC.
        io::netdev::set_promisc(&p.name)
            .with_context(|| format!("{}: promiscuous mode", p.name))?;
        ports.push(port);
    }
    let names: Vec<&str> = cfg.cfg.ports.iter().map(|p| p.name.as_str()).collect();
    control::run::place_ports(&cfg.io, &names);
    let names = cfg.cfg.ports.iter().map(|p| p.name.clone()).collect();
    let counters = Arc::new(dataplane::Counters::for_role(
        names,
        dataplane::counters::Scope::Switch,
    ));
    let sw = dataplane::switch::Switch::new(
        cfg.cfg.clone(),
        counters.clone(),
        std::time::Instant::now(),
    );
    tracing::info!(
        ports = %cfg.cfg.ports.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(","),
        mode = ?cfg.cfg.mode,
        "switch running"
    );
    control::switch::run(
        sw,
        ports,
        control,
        stop,
        cfg.io,
        &cfg.metrics,
        fast,
        fast_off,
    )
    .map_err(anyhow::Error::msg)?;
    let s = counters.snapshot();
    tracing::info!(dropped = s.drops.values().sum::<u64>(), "switch stopped");
    Ok(0)
}

fn axon(a: &ElementArgs) -> Result<i32> {
    sighup_reloads_nothing("Axon")?;
    let (config, control) = (a.config.as_path(), a.control.as_deref());
    let mut cfg = control::axon::AxonFile::load(config)?;
    if let Some(b) = backend_arg(a.io.as_deref())? {
        cfg.io.backend = b;
    }
    a.place(&mut cfg.io)?;
    if cfg.io.fast_path && cfg.io.fast_path_set {
        bail!(
            "{}: [io] fast_path is for forwarders, back-ends, LBs and switches",
            config.display()
        );
    }
    if a.dist_key_file.is_some() {
        tracing::info!("an Axon speaks no DIST: --dist-key-file is not used");
    }
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    let mut ports = Vec::new();
    let mut umems = cfg.io.shared_umem.then(|| {
        let names: Vec<&str> = cfg.cfg.ports.iter().map(|p| p.name.as_str()).collect();
        io::Umems::new(&names, 1)
    });
    for (i, p) in cfg.cfg.ports.clone().iter().enumerate() {
        let (port, _) = open_port(&p.name, &cfg.io, umems.as_mut())?;
        // A host port takes frames for every MAC (the far hosts').
        io::netdev::set_promisc(&p.name)
            .with_context(|| format!("{}: promiscuous mode", p.name))?;
        cfg.cfg.macs[i] = wire::MacAddr(io::netdev::mac(&p.name)?);
        ports.push(port);
    }
    let names: Vec<&str> = cfg.cfg.ports.iter().map(|p| p.name.as_str()).collect();
    control::run::place_ports(&cfg.io, &names);
    let names = cfg.cfg.ports.iter().map(|p| p.name.clone()).collect();
    let counters = Arc::new(dataplane::Counters::for_role(
        names,
        dataplane::counters::Scope::Axon,
    ));
    let ax =
        dataplane::axon::Axon::new(cfg.cfg.clone(), counters.clone(), std::time::Instant::now());
    tracing::info!(
        id = cfg.cfg.id,
        ports = %cfg.cfg.ports.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(","),
        "axon running"
    );
    control::axon::run(ax, ports, control, stop, cfg.io, &cfg.metrics)
        .map_err(anyhow::Error::msg)?;
    let s = counters.snapshot();
    tracing::info!(dropped = s.drops.values().sum::<u64>(), "axon stopped");
    Ok(0)
}

fn controller(a: &ElementArgs) -> Result<i32> {
    sighup_reloads_nothing("controller")?;
    let (config, control) = (a.config.as_path(), a.control.as_deref());
    let mut cfg = control::vcp::ControllerFile::load(config)?;
    if let Some(b) = backend_arg(a.io.as_deref())? {
        cfg.io.backend = b;
    }
    a.place(&mut cfg.io)?;
    a.dist(&mut cfg.dist, "controller")?;
    if cfg.io.fast_path && cfg.io.fast_path_set {
        bail!(
            "{}: [io] fast_path is for forwarders, back-ends, LBs and switches",
            config.display()
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    let (port, link) = open_port(&cfg.interface, &cfg.io, None)?;
    tracing::info!(interface = %cfg.interface, mac = %link.mac, "controller running");
    control::vcp::run(&cfg, port, link.mac, control, stop).map_err(anyhow::Error::msg)?;
    tracing::info!("controller stopped");
    Ok(0)
}

/// A DIST key from a file of hex digits.
fn read_dist_key(path: &Path) -> Result<wire::dist::auth::Key> {
    control::config::read_dist_key(path).map_err(|e| anyhow::anyhow!("--key-file {e}"))
}

fn parse_hex(hex: &str) -> Result<Vec<u8>> {
    let digits: String = hex
        .chars()
        .filter(|c| !c.is_whitespace() && *c != ':')
        .collect();
    if !digits.len().is_multiple_of(2) {
        bail!("--hex: odd number of hex digits");
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16))
        .collect::<Result<_, _>>()
        .context("--hex: not hex")
}

fn dist_cmd(cmd: DistCmd) -> Result<i32> {
    use dataplane::port::Port;
    use wire::dist;
    match cmd {
        DistCmd::Send {
            iface,
            json,
            frame: Some(hex),
            vlan,
            count,
            ..
        } => {
            let mut frame = parse_hex(&hex)?;
            if frame.len() < 14 {
                bail!(
                    "--frame: {} bytes is shorter than an Ethernet header",
                    frame.len()
                );
            }
            if let Some(v) = vlan {
                if !(1..=4094).contains(&v) {
                    bail!("--vlan {v}: not 1 to 4094");
                }
                wire::ethernet::push_vlan(&mut frame, v);
            }
            let _ = json;
            let r = send_frames(&iface, &frame, count)?;
            print(
                &serde_json::json!({"sent": r.sent, "ring_full": r.ring_full, "bytes": frame.len()}),
            )
        }
        DistCmd::Send {
            iface,
            json,
            frame: None,
            key_file,
            dst,
            src,
            vlan,
            count,
        } => {
            let json = json.context("--json or --frame is needed")?;
            let text = if json == "-" {
                std::io::read_to_string(std::io::stdin())?
            } else {
                json
            };
            let msg: dist::Repr = serde_json::from_str(&text).with_context(|| {
                format!("--json: not a DIST message (see docs/dist.md): {text}")
            })?;
            msg.validate().map_err(|e| anyhow::anyhow!("--json: {e}"))?;
            let dst: wire::MacAddr = dst
                .parse()
                .map_err(|e| anyhow::anyhow!("--dst {dst:?}: {e}"))?;
            let src = match src {
                Some(s) => s.parse().map_err(|e| anyhow::anyhow!("--src {s:?}: {e}"))?,
                None => wire::MacAddr(io::netdev::mac(&iface)?),
            };
            let mut frame = msg.to_frame(src, dst).map_err(|e| anyhow::anyhow!("{e}"))?;
            if let Some(f) = &key_file {
                let key = read_dist_key(f)?;
                dist::auth::seal(&mut frame, &key, dist::auth::now_ns())
                    .map_err(|e| anyhow::anyhow!("sealing: {e:?}"))?;
            }
            if let Some(v) = vlan {
                if !(1..=4094).contains(&v) {
                    bail!("--vlan {v}: not 1 to 4094");
                }
                wire::ethernet::push_vlan(&mut frame, v);
            }
            let r = send_frames(&iface, &frame, count)?;
            let hex: String = frame.iter().map(|b| format!("{b:02x}")).collect();
            print(
                &serde_json::json!({"sent": r.sent, "ring_full": r.ring_full, "bytes": frame.len(), "frame": hex}),
            )
        }
        DistCmd::Listen {
            iface,
            count,
            duration,
            key_file,
            frames,
        } => {
            let key = key_file.as_deref().map(read_dist_key).transpose()?;
            let stop = Arc::new(AtomicBool::new(false));
            signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
            signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
            let mut port = io::AfPacket::open(
                &iface,
                io::RingConfig {
                    rx_blocks: 4,
                    ..Default::default()
                },
            )?;
            let mut pool = dataplane::Pool::new();
            let mut batch = Vec::new();
            let end =
                std::time::Instant::now() + std::time::Duration::from_secs_f64(duration.max(0.0));
            let mut seen = 0;
            eprintln!("dist: listening on {iface}");
            while std::time::Instant::now() < end
                && !stop.load(std::sync::atomic::Ordering::Relaxed)
            {
                let mut over = 0;
                port.recv(&mut pool, &mut batch, 64, &mut over)?;
                for p in batch.drain(..) {
                    let Ok(f) = wire::ethernet::Frame::new_checked(&p.data[..]) else {
                        continue;
                    };
                    if f.ethertype() != dist::ETHERTYPE {
                        continue;
                    }
                    let mut v = match dist::Repr::parse(f.payload()) {
                        Ok(r) => serde_json::to_value(&r)?,
                        Err(e) => serde_json::json!({"error": e.to_string()}),
                    };
                    v["src"] = serde_json::json!(f.src().to_string());
                    v["dst"] = serde_json::json!(f.dst().to_string());
                    if let Some((id, counter)) = dist::auth::trailer(&p.data) {
                        v["key_id"] = serde_json::json!(id);
                        v["counter"] = serde_json::json!(counter);
                    }
                    if let Some(k) = &key {
                        v["auth"] = serde_json::json!(match dist::auth::verify(&p.data, k) {
                            Ok(_) => "ok",
                            Err(dist::auth::Reject::Unauthenticated) => "unsealed",
                            Err(dist::auth::Reject::Malformed) => "malformed",
                            Err(_) => "forged",
                        });
                    }
                    if frames {
                        v["frame"] = serde_json::json!(p
                            .data
                            .iter()
                            .map(|b| format!("{b:02x}"))
                            .collect::<String>());
                    }
                    if let Some(vid) = f.vlan() {
                        v["vlan"] = serde_json::json!(vid);
                    }
                    println!("{v}");
                    seen += 1;
                    pool.put(p);
                }
                if count.is_some_and(|c| seen >= c) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Ok(if count.is_some_and(|c| seen < c) {
                1
            } else {
                0
            })
        }
        DistCmd::Keygen { out } => {
            control::config::write_new_dist_key(&out).map_err(anyhow::Error::msg)?;
            eprintln!(
                "DIST key written to {} (give every element the same key)",
                out.display()
            );
            Ok(0)
        }
        DistCmd::Decode { hex } => {
            let b = parse_hex(&hex)?;
            // A whole frame if it carries the DIST EtherType, else the payload.
            let payload = match wire::ethernet::Frame::new_checked(&b[..]) {
                Ok(f) if f.ethertype() == dist::ETHERTYPE => f.payload().to_vec(),
                _ => b.clone(),
            };
            let r = dist::Repr::parse(&payload).map_err(|e| anyhow::anyhow!("{e}"))?;
            print(&serde_json::to_value(&r)?)
        }
    }
}

/// Sends `count` copies of `frame` out of `iface` through an AF_PACKET ring.
fn send_frames(iface: &str, frame: &[u8], count: usize) -> Result<dataplane::port::TxResult> {
    use dataplane::port::Port;
    let mut port = io::AfPacket::open(
        iface,
        io::RingConfig {
            rx_blocks: 1,
            ..Default::default()
        },
    )?;
    let mut pool = dataplane::Pool::new();
    let mut q: Vec<dataplane::Pkt> = (0..count)
        .map(|_| dataplane::Pkt::from_bytes(frame))
        .collect();
    let r = port.send(&mut q, &mut pool)?;
    // Give the kernel a moment to drain the ring before the socket closes.
    std::thread::sleep(std::time::Duration::from_millis(50));
    Ok(r)
}

fn inject(iface: &str, hex: &str, count: usize) -> Result<i32> {
    let frame = parse_hex(hex)?;
    if frame.len() < 14 {
        bail!("--hex: a frame needs at least the 14-byte Ethernet header");
    }
    let r = send_frames(iface, &frame, count)?;
    println!(
        "{}",
        serde_json::json!({"sent": r.sent, "ring_full": r.ring_full})
    );
    Ok(0)
}

/// Ctrl-C or SIGTERM during a lab benchmark: the point under way fails ("interrupted")
/// and the benchmark takes its lab down before it exits. A second Ctrl-C ends the process
/// at once (the lab then stays up: `tessera lab down` removes it).
fn stop_lab_benches_on_signals() -> Result<()> {
    let stop = bench::stop_flag();
    signal_hook::flag::register_conditional_shutdown(signal_hook::consts::SIGINT, 1, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command has its man page, named after its path, saying its options.
    #[test]
    fn a_man_page_per_command() {
        let out = std::env::temp_dir().join(format!("tessera-man-{}", std::process::id()));
        std::fs::create_dir_all(&out).unwrap();
        let n = write_man(&Cli::command(), "tessera", &out).unwrap();
        fn count(c: &clap::Command) -> usize {
            1 + c
                .get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(count)
                .sum::<usize>()
        }
        assert_eq!(n, count(&Cli::command()));
        assert!(n > 40, "{n}");
        let page = std::fs::read_to_string(out.join("tessera-forwarder.1")).unwrap();
        assert!(page.contains("fast\\-path") && page.contains(".TH tessera-forwarder 1"));
        assert!(out.join("tessera-show-counters.1").exists());
        std::fs::remove_dir_all(&out).unwrap();
    }
}
