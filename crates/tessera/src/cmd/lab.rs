//! `tessera lab ...`: topologies of namespaces, hosts and elements.

use crate::*;

#[derive(clap::Args)]
pub(crate) struct LabArgs {
    /// The topology file.
    file: PathBuf,
    /// Lab name, overriding the file's (runs several copies of one topology side by side).
    #[arg(long)]
    name: Option<String>,
}

#[derive(Subcommand)]
pub(crate) enum LabCmd {
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
        /// Every forwarder, LB, switch and Axon with its fast path on or off (`[io]
        /// fast_path`: XDP on AF_XDP ports, tcx on AF_PACKET ones, where LBs, switches
        /// and Axons run without), whatever its config says; kept for `lab start`. Without it, each
        /// element's config says (the default: on). Unless it is false (or `--io packet`),
        /// GRO goes on on every switch port and host interface, so that their veths take
        /// what XDP programs redirect; with false, links stay wire-like.
        #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
        fast_path: Option<bool>,
        /// `plain`: every host's links as a container's veth is made (GRO off, no XDP
        /// program), as `gro = false` on a host does, wire-like otherwise (no checksum
        /// offload, TSO or GSO); `container`: the same with a new veth's checksum offload,
        /// TSO and GSO on (as `offloads = true` too); `tuned` (the default): GRO on where
        /// the elements' XDP fast path runs.
        #[arg(long, value_name = "KIND", default_value = "tuned", value_parser = ["tuned", "plain", "container"])]
        hosts: String,
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
    /// Restart every element of a running lab in turn, with this binary (run a new
    /// binary's `lab upgrade` to upgrade the lab to it), in the order that loses the
    /// least: each back-end drained on the active controller, restarted and undrained; each
    /// standalone forwarder (its fast path handed over); the controllers, standbys first;
    /// each LB; switches and Axons. Prints each step as a JSON line, then all of them.
    Upgrade {
        #[command(flatten)]
        lab: LabArgs,
        /// Only these kinds of element (comma-separated: back-end, forwarder, controller,
        /// balancer, switch, axon) or these elements (by name); default all, in that
        /// order.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
    },
}

pub(crate) fn load_lab(a: &LabArgs) -> Result<lab::Lab> {
    let exe = std::env::current_exe().context("cannot find the tessera binary")?;
    lab::Lab::load(&a.file, a.name.as_deref(), exe).map_err(anyhow::Error::msg)
}

pub(crate) fn lab_cmd(cmd: LabCmd) -> Result<i32> {
    match cmd {
        w @ LabCmd::Up { .. } => lab_up(w),
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
        w @ LabCmd::Show { .. } => lab_show(w),
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
        LabCmd::Upgrade { lab, only } => {
            let l = load_lab(&lab)?;
            let v = lab::upgrade::upgrade(&l, &only, &mut |s| eprintln!("lab upgrade: {s}"))
                .map_err(anyhow::Error::msg)?;
            print(&v)
        }
    }
}

/// `tessera lab up`: the lab built and its elements started.
fn lab_up(w: LabCmd) -> Result<i32> {
    let LabCmd::Up {
        lab,
        role,
        io,
        fast_path,
        hosts,
    } = w
    else {
        bail!("tessera lab: another command's arguments");
    };
    let mut l = load_lab(&lab)?;
    backend_arg(io.as_deref())?;
    l.io = io;
    l.fast_path = fast_path;
    l.plain_hosts = hosts == "plain" || hosts == "container";
    l.host_offloads = hosts == "container";
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
    let plain = l.plain_hosts || l.topo.host.iter().any(|h| h.gro == Some(false));
    let gro = if l.fast_path == Some(false) || l.io.as_deref() == Some("packet") {
        "GRO off too"
    } else if plain {
        "GRO on at switch ports, off at plain hosts (as containers have it): the elements' XDP fast paths hand those hosts' frames to tcx"
    } else {
        "GRO on at hosts and switch ports, for the elements' XDP fast paths"
    };
    let links = if l.host_offloads || l.topo.host.iter().any(|h| h.offloads == Some(true)) {
        "wire-like links but at hosts with offloads (checksum offload, TSO and GSO on there, as a new veth has them)"
    } else {
        "wire-like links: TSO, GSO and checksum offload off, frames never exceed the MTU"
    };
    eprintln!("lab {} is up ({links}; {gro})", l.name);
    Ok(0)
}

/// `tessera lab show`: the lab's nodes, interfaces and processes.
fn lab_show(w: LabCmd) -> Result<i32> {
    let LabCmd::Show { lab, json } = w else {
        bail!("tessera lab: another command's arguments");
    };
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
