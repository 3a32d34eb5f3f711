//! `tessera`: one binary, one subcommand per element or tool. Argument parsing and wiring
//! only; the logic lives in the library crates.

mod capture;
mod check;
mod cmd;
mod huge;

use cmd::bench::Bench;
use cmd::dist::{dist_cmd, inject, DistCmd};
use cmd::elements::{axon, backend_arg, balancer, controller, forwarder, switch, ElementArgs};
use cmd::lab::{lab_cmd, LabCmd};

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
    /// Have a running forwarder or LB re-read its config file (as SIGHUP does): a
    /// forwarder's routes, an LB's back-ends and weights change in place; a change of any
    /// other key is refused with the key, and a file that does not load changes nothing
    /// (the error names the line and key). Exits 1 then.
    Reload {
        #[arg(long)]
        control: PathBuf,
    },
    /// Drain a back-end of a multistage router, on its controller: the LBs give it no more
    /// frames (their tables leave it out), it forwards whatever still reaches it, and once
    /// every LB runs the new table and it forwarded nothing between two of its reports it is
    /// idle: stopping it then loses nothing. Waits for that (exits 1 after --wait seconds
    /// without it) and prints its state.
    Drain {
        /// The back-end: the element name it reports (its `[metrics] element`, or its
        /// control socket's name), or its MAC.
        element: String,
        /// The controller's control socket.
        #[arg(long)]
        control: PathBuf,
        /// Seconds to wait for it to go idle (0: do not wait).
        #[arg(long, default_value_t = 30.0)]
        wait: f64,
    },
    /// Put a drained back-end back into service: the LBs give it flows again.
    Undrain {
        element: String,
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
    ///
    /// Ends after --duration, at once on SIGINT or SIGTERM, or on SIGUSR1 (the senders are
    /// done) once nothing has arrived for 50 ms, 200 ms after the signal at the latest.
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
        /// Only count: an XDP program counts the test frames and drops them in the hook, no
        /// socket, no copy (the least a receiver can spend per frame). The summary has the
        /// frames and bytes received, but no flows, loss, reordering or latency.
        #[arg(long, conflicts_with_all = ["xdp", "drop", "trace"])]
        count: bool,
        /// Measurement points, one sink for many: each SIGUSR1 ends a point (once drained,
        /// as above), whose summary is printed as one line of JSON; the sink then goes on
        /// receiving for the next. SIGINT, SIGTERM or --duration end the run (the summary
        /// of the unfinished point last).
        #[arg(long, requires = "json", conflicts_with = "trace")]
        points: bool,
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
    /// The access lists with every rule's packets and bytes, and each interface's lists,
    /// reverse-path mode and filter drops, as JSON (docs/filters.md).
    Acl {
        #[arg(long)]
        control: PathBuf,
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
    /// The config the element runs with, every default filled in, as TOML that loads
    /// again (a DIST key by its file, never the key). Every element.
    Config {
        #[arg(long)]
        control: PathBuf,
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

/// [`report`], then standard output closed (/dev/null in its place): a reader of it (a
/// bench's point) has the whole report and its end at once, while this process goes on
/// closing its sockets.
fn report_and_close(v: &serde_json::Value, json: bool) -> Result<i32> {
    let r = report(v, json);
    use std::io::Write;
    std::io::stdout().flush()?;
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
    // SAFETY: dup2 onto our own standard output, with a descriptor we hold open.
    if unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), 1) } < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    r
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

fn run(cli: Cli) -> Result<i32> {
    match cli.cmd {
        Cmd::Forwarder(a) => forwarder(&a),
        w @ Cmd::Show { .. } => show(w),
        Cmd::Controller(a) if a.fast_path == Some(true) => {
            bail!("--fast-path is for forwarders, LBs, switches and Axons")
        }
        Cmd::Balancer(a) => balancer(&a),
        Cmd::Controller(a) => controller(&a),
        Cmd::Switch(a) => switch(&a),
        Cmd::Axon(a) => axon(&a),
        Cmd::Drain {
            element,
            control,
            wait,
        } => {
            let req = serde_json::json!({"cmd": "drain", "element": element});
            let t = std::time::Instant::now();
            loop {
                let v = control::ctlsock::request_with(&control, req.clone())
                    .map_err(anyhow::Error::msg)?;
                let idle = v["state"] == "idle";
                if idle || t.elapsed().as_secs_f64() >= wait {
                    print(&v)?;
                    if !idle && wait > 0.0 {
                        eprintln!("tessera drain: {element} not idle after {wait} s");
                        return Ok(1);
                    }
                    return Ok(0);
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        }
        Cmd::Undrain { element, control } => print(
            &control::ctlsock::request_with(
                &control,
                serde_json::json!({"cmd": "undrain", "element": element}),
            )
            .map_err(anyhow::Error::msg)?,
        ),
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
        w @ Cmd::Gen { .. } => gen_cmd(w),
        w @ Cmd::Sink { .. } => sink_cmd(w),
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
        Cmd::Bench { what } => cmd::bench::run(what),
    }
}

/// `tessera gen`.
fn gen_cmd(w: Cmd) -> Result<i32> {
    let Cmd::Gen {
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
    } = w
    else {
        bail!("tessera gen: another command's arguments");
    };
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
    let mut said = None;
    gen::generator::run_then(&cfg, &stop, &mut |v| said = Some(report_and_close(v, json)))
        .map_err(anyhow::Error::msg)?;
    said.unwrap_or(Ok(0))
}

/// `tessera show`.
fn show(w: Cmd) -> Result<i32> {
    let Cmd::Show { what } = w else {
        bail!("tessera show: another command's arguments");
    };
    match what {
        Show::Counters { control, describe } => {
            ask(&control, if describe { "describe" } else { "counters" })
        }
        Show::Acl { control } => ask(&control, "acl"),
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
        Show::Config { control } => {
            let v = control::ctlsock::request(&control, "config").map_err(anyhow::Error::msg)?;
            match (v["toml"].as_str(), v["error"].as_str()) {
                (Some(t), _) => {
                    print!("{t}");
                    Ok(0)
                }
                (None, e) => bail!(
                    "{}: {}",
                    control.display(),
                    e.unwrap_or("no config in the answer")
                ),
            }
        }
    }
}

/// `tessera sink`.
fn sink_cmd(w: Cmd) -> Result<i32> {
    let Cmd::Sink {
        iface,
        duration,
        interval,
        intervals,
        trace,
        trace_max,
        port,
        drop,
        xdp,
        count,
        points,
        json,
    } = w
    else {
        bail!("tessera sink: another command's arguments");
    };
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    let drain = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, drain.clone())?;
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
        count,
    };
    let mut said = None;
    let mut point = |v: &serde_json::Value| {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        // A reader waits for the line: a failed write ends the next point's wait
        // with the pipe's end instead.
        let _ = writeln!(out, "{v}").and_then(|_| out.flush());
    };
    let mut ending = gen::sink::Ending::new(&stop, &drain);
    if points {
        ending = ending.points(&mut point);
    }
    gen::sink::run_then(
        &cfg,
        &mut ending,
        || eprintln!("sink: receiving"),
        |v| said = Some(report_and_close(v, json)),
    )
    .map_err(anyhow::Error::msg)?;
    said.unwrap_or(Ok(0))
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
