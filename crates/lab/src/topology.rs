//! Topology files and what `lab up`, `down`, `show`, `exec`, `stop` and `start` do with them.

use crate::cmd::{self, in_ns, ip_n};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod daemons;
mod links;

/// The BPF filesystem the lab's elements pin under (`TESSERA_BPF_DIR`, `io::pin`).
pub const LAB_BPF_DIR: &str = "/run/tessera/bpf";
/// The interface index of the first end of a lab's first link (see `Lab::build`).
const LINK_IFINDEX_BASE: usize = 100;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Lab name: namespaces are `ts-<name>-<node>`. `--name` overrides it.
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// `true`: DIST between the lab's elements is authenticated under a key made at `up`
    /// (`dist.key` in the run directory, given to every element with `--dist-key-file`).
    #[serde(default)]
    pub dist_key: bool,
    #[serde(default)]
    pub host: Vec<Host>,
    #[serde(default)]
    pub element: Vec<Element>,
    #[serde(default)]
    pub switch: Vec<Switch>,
    #[serde(default)]
    pub link: Vec<Link>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    pub name: String,
    #[serde(default)]
    pub interfaces: Vec<HostInterface>,
    /// Arguments of `ip route add`, like `"default via 10.1.0.1"`.
    #[serde(default)]
    pub routes: Vec<String>,
    /// FRR daemons to run in the host's namespace (an outside router): daemon name ->
    /// config file, relative to the topology file, as for an element but without FPM.
    #[serde(default)]
    pub frr: BTreeMap<String, String>,
    /// A BIRD 2 config file to run in the host's namespace (an outside router), relative
    /// to the topology file; `birdc -s /run/tessera/<lab>/bird-<node>.ctl` talks to it.
    #[serde(default)]
    pub bird: Option<String>,
    /// The CPUs this host's work runs on (`"4-5"`): what `lab exec` (and the benches'
    /// generators and sinks) run there, and its interfaces' NAPI threads (see
    /// `Lab::place`).
    #[serde(default)]
    pub cpus: Option<String>,
    /// `false`: the host's links stay as a container's veth is made (and as the lab
    /// makes every link: no segmentation offload, GRO off), with no XDP program: its veth
    /// then takes no frame an XDP program redirects to it, and an element's fast path
    /// hands the frames bound there to tcx (`io::handoff`). Default: GRO on where the
    /// elements' XDP fast path runs (see `lab up --fast-path`), off otherwise.
    #[serde(default)]
    pub gro: Option<bool>,
    /// `true`: the host's links keep a new veth's offloads, as a container's do:
    /// checksum offload, TSO and GSO on, so that what it sends may carry a checksum left
    /// to offload and be many segments long (a socket buffer cut into frames only where
    /// it leaves a device that cannot take it whole). Default: off, as on a wire.
    #[serde(default)]
    pub offloads: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostInterface {
    pub name: String,
    /// ADDRESS/LENGTH.
    #[serde(default)]
    pub address: Option<String>,
    /// An IPv6 ADDRESS/LENGTH (added without duplicate address detection, so that it is
    /// usable at once).
    #[serde(default)]
    pub address6: Option<String>,
    /// Get the address by DHCP instead (Debian's ISC dhclient, started by `lab up`, which
    /// waits for every lease).
    #[serde(default)]
    pub dhcp: bool,
    /// Configure an IPv6 address from the router's advertisements (SLAAC, RFC 4862): IPv6
    /// on, duplicate address detection off; `lab up` waits for the address.
    #[serde(default)]
    pub slaac: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Element {
    pub name: String,
    /// `forwarder` (our element) or `linux` (the kernel's forwarding, as a contender).
    pub role: String,
    /// The element's config file, relative to the topology file.
    pub config: String,
    /// FRR daemons to run in the element's namespace (a controller's routing suite):
    /// daemon name (`zebra`, `staticd`, `bgpd`, `ospfd`, `ospf6d`) -> its config file, relative to
    /// the topology file. zebra loads `dplane_fpm_nl`, so its config can point FPM at the
    /// controller. Needs Debian's `frr` package.
    #[serde(default)]
    pub frr: BTreeMap<String, String>,
    /// Daemons of `frr` that run only while the controller is active (the routing
    /// protocols of a controller that may stand by): `lab up` does not start them; the
    /// controller's `[takeover] on_active` command does, with `tessera lab frr-start`.
    #[serde(default)]
    pub frr_active: Vec<String>,
    /// The CPUs this element runs on (`"4-5"`): given to it as `--cpus` (its `[io] cpus`:
    /// workers and its ports' NAPI threads pinned there); for a `linux` element, its
    /// interfaces' NAPI threads.
    #[serde(default)]
    pub cpus: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Switch {
    pub name: String,
    /// GRO on the switch's ports (off by default, as on every lab link): a veth takes
    /// frames an XDP program redirects to it only if its peer runs NAPI, so this lets an
    /// element's fast path send out of a port cabled to this switch. TCP segments may then
    /// cross the bridge merged.
    #[serde(default)]
    pub gro: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// `"node:ifname"`, or the name of a switch.
    pub a: String,
    pub b: String,
    /// MTU of both ends (default 1500).
    #[serde(default)]
    pub mtu: Option<u32>,
    /// Receive and transmit queues of both ends (default 1, at most 64): a multi-queue
    /// link, as a NIC with RSS has, for elements that serve every queue.
    #[serde(default)]
    pub queues: Option<u32>,
    /// MAC of end `a` (default: derived from the lab, node and interface names). Fixed MACs
    /// let element configs name each other (an LB's back-ends, its Virtual-CP).
    #[serde(default)]
    pub a_mac: Option<String>,
    #[serde(default)]
    pub b_mac: Option<String>,
}

/// Element roles: our forwarder; our LB (`balancer`); the Linux kernel's forwarding with a
/// forwarder's config; `external`, a namespace with its links and nothing else, for a
/// router that someone else starts in it (`tessera bench forward --contender`).
pub const ROLES: [&str; 7] = [
    "forwarder",
    "balancer",
    "controller",
    "switch",
    "axon",
    "linux",
    "external",
];

/// The FRR daemons a lab element may run.
pub const FRR_DAEMONS: [&str; 5] = ["zebra", "staticd", "bgpd", "ospfd", "ospf6d"];

/// Roles whose element is a `tessera` process with a control socket.
fn runs_process(role: &str) -> bool {
    matches!(
        role,
        "forwarder" | "balancer" | "controller" | "switch" | "axon"
    )
}

/// Where the lab records what it started.
pub const RUN_DIR: &str = "/run/tessera";

/// The last `n` lines of a log file (empty if it cannot be read), for error messages.
pub fn log_tail(path: &Path, n: usize) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    namespaces: Vec<String>,
    pids: BTreeMap<String, i32>,
    /// Roles given with `--role` at `up`, so later commands see them too.
    #[serde(default)]
    roles: BTreeMap<String, String>,
    /// The packet I/O backend given with `--io` at `up`.
    #[serde(default)]
    io: Option<String>,
    /// `--fast-path` given at `up`: on or off, or each element's config says.
    #[serde(default)]
    fast_path: Option<bool>,
}

/// A topology bound to a lab name and to the directory its relative paths start from.
#[derive(Debug, Clone)]
pub struct Lab {
    /// The topology file (absolute where it can be).
    pub file: PathBuf,
    pub topo: Topology,
    pub name: String,
    pub dir: PathBuf,
    /// The `tessera` binary that runs elements.
    pub exe: PathBuf,
    /// Per-element role overrides (`--role NODE=ROLE`).
    pub roles: BTreeMap<String, String>,
    /// The packet I/O backend every element runs on (`--io`), overriding their configs.
    pub io: Option<String>,
    /// Every forwarder, LB, switch and Axon runs its fast path or not (`--fast-path
    /// BOOL`), whatever its config says (an LB's, a switch's and an Axon's on AF_XDP ports
    /// only: with `--io packet` they run without); `None`: each element's config says (on
    /// by default).
    pub fast_path: Option<bool>,
    /// Every host as with `gro = false` (`lab up --hosts plain`): links as containers
    /// have them.
    pub plain_hosts: bool,
    /// Every host as with `offloads = true` too (`lab up --hosts container`).
    pub host_offloads: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Host,
    Element,
    Switch,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Host => "host",
            Kind::Element => "element",
            Kind::Switch => "switch",
        }
    }
}

/// An `ip -batch` line for a route through one gateway or several (ECMP).
fn linux_route<P: std::fmt::Display, A: std::fmt::Display>(p: P, vias: &[A]) -> String {
    match vias {
        [one] => format!("route add {p} via {one}\n"),
        many => {
            let hops: Vec<String> = many.iter().map(|v| format!("nexthop via {v}")).collect();
            format!("route add {p} {}\n", hops.join(" "))
        }
    }
}

/// An IPv6 gateway as `ip route` takes it: a link-local one scoped to an interface of the
/// config (`wire::ipv6::IFACE_SCOPE`) as `LL dev NAME`.
fn linux_via6(a: std::net::Ipv6Addr, ifaces: &[control::config::InterfaceConfig]) -> String {
    match wire::ipv6::link_local_iface(a).and_then(|(ll, i)| Some((ll, ifaces.get(i)?))) {
        Some((ll, x)) => format!("{ll} dev {}", x.name),
        None => a.to_string(),
    }
}

/// FNV-1a, for stable locally administered MACs.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

impl Lab {
    /// Reads a topology file. Errors name the file and line.
    pub fn load(path: &Path, name: Option<&str>, exe: PathBuf) -> Result<Lab, String> {
        let file = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let src = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let topo: Topology = toml::from_str(&src).map_err(|e| {
            let line = e
                .span()
                .map(|s| src[..s.start].matches('\n').count() + 1)
                .unwrap_or(0);
            format!("{}:{line}: {}", path.display(), e.message())
        })?;
        let name = name
            .map(str::to_string)
            .unwrap_or_else(|| topo.name.clone());
        let lab = Lab {
            file,
            topo,
            name,
            dir: path.parent().unwrap_or(Path::new(".")).to_path_buf(),
            exe,
            roles: BTreeMap::new(),
            io: None,
            fast_path: None,
            plain_hosts: false,
            host_offloads: false,
        };
        lab.validate()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(lab)
    }

    fn validate(&self) -> Result<(), String> {
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
            || self.name.len() > 24
        {
            return Err(format!(
                "lab name {:?}: use 1 to 24 letters, digits or '_'",
                self.name
            ));
        }
        for h in &self.topo.host {
            if let Some(i) = h.interfaces.iter().find(|i| i.dhcp && i.address.is_some()) {
                return Err(format!(
                    "host {}: interface {} has both an address and dhcp = true",
                    h.name, i.name
                ));
            }
        }
        self.validate_cpus()?;
        let mut seen = std::collections::BTreeSet::new();
        for (n, _) in self.nodes() {
            if !seen.insert(n.to_string()) {
                return Err(format!("node {n} is defined twice"));
            }
            if n.is_empty()
                || !n
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(format!("node name {n:?}: use letters, digits, '-' or '_'"));
            }
        }
        for e in &self.topo.element {
            if !ROLES.contains(&e.role.as_str()) {
                return Err(format!(
                    "element {}: role {:?} is not one of {}",
                    e.name,
                    e.role,
                    ROLES.join(", ")
                ));
            }
        }
        let frrs = self
            .topo
            .element
            .iter()
            .map(|e| ("element", &e.name, &e.frr));
        let frrs = frrs.chain(self.topo.host.iter().map(|h| ("host", &h.name, &h.frr)));
        for (kind, name, frr) in frrs {
            if let Some(d) = frr.keys().find(|d| !FRR_DAEMONS.contains(&d.as_str())) {
                return Err(format!(
                    "{kind} {name}: frr daemon {d:?} is not one of {}",
                    FRR_DAEMONS.join(", ")
                ));
            }
            if !frr.is_empty() && !frr.contains_key("zebra") {
                return Err(format!("{kind} {name}: frr needs zebra"));
            }
        }
        for e in &self.topo.element {
            if let Some(d) = e
                .frr_active
                .iter()
                .find(|d| !e.frr.contains_key(*d) || *d == "zebra")
            {
                return Err(format!(
                    "element {}: frr_active names {d:?}, which is not one of its frr daemons (zebra always runs)",
                    e.name
                ));
            }
        }
        for (i, l) in self.topo.link.iter().enumerate() {
            if let Some(q) = l.queues.filter(|q| !(1..=64).contains(q)) {
                return Err(format!("link {i}: queues = {q}: use 1 to 64"));
            }
            for m in [&l.a_mac, &l.b_mac].into_iter().flatten() {
                match m.parse::<wire::MacAddr>() {
                    Ok(x) if !x.is_multicast() && !x.is_zero() => {}
                    _ => return Err(format!("link {i}: {m:?} is not a unicast MAC address")),
                }
            }
            for end in [&l.a, &l.b] {
                let (node, ifname) = match end.split_once(':') {
                    Some((n, i)) => (n, Some(i)),
                    None => (end.as_str(), None),
                };
                match (self.kind(node), ifname) {
                    (None, _) => return Err(format!("link {i}: no node named {node:?}")),
                    (Some(Kind::Switch), Some(_)) => {
                        return Err(format!(
                            "link {i}: name a switch without an interface: {node:?}"
                        ))
                    }
                    (Some(Kind::Host | Kind::Element), None) => {
                        return Err(format!(
                            "link {i}: {end:?} needs an interface name, like \"{node}:eth0\""
                        ))
                    }
                    (_, Some(ifn)) if ifn.is_empty() || ifn.len() > 15 => {
                        return Err(format!(
                            "link {i}: interface name {ifn:?} is not 1 to 15 characters"
                        ))
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    pub(crate) fn nodes(&self) -> Vec<(&str, Kind)> {
        let t = &self.topo;
        t.host
            .iter()
            .map(|h| (h.name.as_str(), Kind::Host))
            .chain(t.element.iter().map(|e| (e.name.as_str(), Kind::Element)))
            .chain(t.switch.iter().map(|s| (s.name.as_str(), Kind::Switch)))
            .collect()
    }

    fn kind(&self, node: &str) -> Option<Kind> {
        self.nodes()
            .into_iter()
            .find(|(n, _)| *n == node)
            .map(|(_, k)| k)
    }

    /// The namespace of a node.
    pub fn ns(&self, node: &str) -> String {
        format!("ts-{}-{}", self.name, node)
    }

    /// The lab's DIST key (when the topology has `dist_key = true`).
    pub fn dist_key_path(&self) -> PathBuf {
        self.run_dir().join("dist.key")
    }

    pub fn run_dir(&self) -> PathBuf {
        Path::new(RUN_DIR).join(&self.name)
    }

    /// The control socket of an element.
    pub fn control_socket(&self, node: &str) -> PathBuf {
        self.run_dir().join(format!("{node}.sock"))
    }

    fn role(&self, e: &Element) -> String {
        // --role given now, else --role given at `up`, else the file's.
        self.roles
            .get(&e.name)
            .cloned()
            .or_else(|| self.load_state().roles.remove(&e.name))
            .unwrap_or_else(|| e.role.clone())
    }

    fn element(&self, node: &str) -> Result<&Element, String> {
        self.topo
            .element
            .iter()
            .find(|e| e.name == node)
            .ok_or_else(|| format!("no element named {node:?} in lab {}", self.name))
    }

    fn config_path(&self, e: &Element) -> PathBuf {
        self.dir.join(&e.config)
    }

    /// The elements that run a process: name, role (as this lab runs it), config file.
    pub fn processes(&self) -> Vec<(String, String, PathBuf)> {
        self.topo
            .element
            .iter()
            .map(|e| (e.name.clone(), self.role(e), self.config_path(e)))
            .filter(|(_, r, _)| runs_process(r))
            .collect()
    }

    fn mac(&self, node: &str, ifname: &str) -> String {
        let h = fnv(&format!("{}/{node}/{ifname}", self.name)).to_be_bytes();
        format!(
            "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            h[0], h[1], h[2], h[3], h[4]
        )
    }

    fn is_up(&self) -> bool {
        let all = cmd::namespaces();
        self.nodes().iter().any(|(n, _)| all.contains(&self.ns(n)))
    }

    /// Builds the lab and starts its elements. On failure it removes what it built.
    pub fn up(&self) -> Result<(), String> {
        if self.is_up() {
            return Err(format!(
                "lab {} is already up (tessera lab down to remove it)",
                self.name
            ));
        }
        std::fs::create_dir_all(self.run_dir())
            .map_err(|e| format!("{}: {e}", self.run_dir().display()))?;
        if self.topo.dist_key {
            control::config::write_new_dist_key(&self.dist_key_path())?;
        }
        let r = self.build();
        if r.is_err() {
            let _ = self.down();
        }
        r
    }

    fn save(&self, st: &State) -> Result<(), String> {
        let p = self.run_dir().join("state.json");
        std::fs::write(&p, serde_json::to_string_pretty(st).unwrap_or_default())
            .map_err(|e| format!("{}: {e}", p.display()))
    }

    fn load_state(&self) -> State {
        std::fs::read_to_string(self.run_dir().join("state.json"))
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default()
    }

    fn build(&self) -> Result<(), String> {
        let mut st = State {
            roles: self.roles.clone(),
            io: self.io.clone(),
            fast_path: self.fast_path,
            ..Default::default()
        };
        // IPv6 is off in every namespace (the kernel's router solicitations and listener
        // reports would land in the elements' counters), except, in a lab whose hosts have
        // IPv6 addresses, on the hosts and the kernel routers: they speak it.
        let speaks6 = self
            .topo
            .host
            .iter()
            .any(|h| h.interfaces.iter().any(|i| i.address6.is_some() || i.slaac));
        let kernel_v6: Vec<&str> = self
            .topo
            .host
            .iter()
            .map(|h| h.name.as_str())
            .chain(
                self.topo
                    .element
                    .iter()
                    .filter(|e| self.role(e) == "linux")
                    .map(|e| e.name.as_str()),
            )
            .filter(|_| speaks6)
            .collect();
        self.make_namespaces(&mut st, &kernel_v6)?;
        self.make_switches()?;
        for (i, l) in self.topo.link.iter().enumerate() {
            self.make_link(i, l)?;
        }
        self.configure_hosts()?;
        self.wait_links_up(Duration::from_secs(5))?;
        // LBs last: their back-ends are running (and saying hello) when they start.
        let mut order: Vec<&Element> = self.topo.element.iter().collect();
        order.sort_by_key(|e| self.role(e) == "balancer");
        for e in order {
            match self.role(e).as_str() {
                "linux" => self.start_linux(e)?,
                "external" => {}
                _ => {
                    let pid = self.start_element(e)?;
                    st.pids.insert(e.name.clone(), pid);
                    self.save(&st)?;
                    self.start_frr(&e.name, &self.frr_always(e), true)?;
                }
            }
        }
        // Hosts' and kernel routers' receive work on their CPUs (elements place their own).
        for (node, kind) in self.nodes() {
            let kernel =
                kind == Kind::Host || self.element(node).is_ok_and(|e| self.role(e) == "linux");
            if kernel {
                self.place(node)?;
            }
        }
        self.ipv6_addresses_settled(&kernel_v6)?;
        self.dhcp_clients()?;
        self.slaac_addresses()?;
        // Outside routers, once the router is there to peer with.
        for h in &self.topo.host {
            self.start_frr(&h.name, &h.frr, false)?;
            if let Some(conf) = &h.bird {
                self.start_bird(&h.name, conf)?;
            }
        }
        Ok(())
    }

    /// Every node's namespace, recorded in the lab's state as it is made; IPv6 off but
    /// in `kernel_v6`.
    fn make_namespaces(&self, st: &mut State, kernel_v6: &[&str]) -> Result<(), String> {
        for (node, _) in self.nodes() {
            let ns = self.ns(node);
            cmd::run("ip", &["netns", "add", &ns])?;
            st.namespaces.push(ns.clone());
            self.save(st)?;
            ip_n(&ns, &["link", "set", "lo", "up"])?;
            let off = if kernel_v6.contains(&node) { "0" } else { "1" };
            in_ns(
                &ns,
                "sysctl",
                &[
                    "-qw",
                    &format!("net.ipv6.conf.all.disable_ipv6={off}"),
                    &format!("net.ipv6.conf.default.disable_ipv6={off}"),
                ],
            )?;
            // A host that configures itself: no duplicate address detection on any of its
            // interfaces (made after this), so that its link-local address is usable at
            // once.
            let slaac = self
                .topo
                .host
                .iter()
                .any(|h| h.name == node && h.interfaces.iter().any(|i| i.slaac));
            if slaac {
                in_ns(
                    &ns,
                    "sysctl",
                    &["-qw", "net.ipv6.conf.default.dad_transmits=0"],
                )?;
            }
        }
        Ok(())
    }

    fn wait_links_up(&self, limit: Duration) -> Result<(), String> {
        let t = Instant::now();
        loop {
            let mut down = Vec::new();
            for (node, _) in self.nodes() {
                let ns = self.ns(node);
                let out = ip_n(&ns, &["-j", "link", "show"])?;
                let v: Value =
                    serde_json::from_str(&out).map_err(|e| format!("ip -j link: {e}"))?;
                for i in v.as_array().into_iter().flatten() {
                    let name = i["ifname"].as_str().unwrap_or("");
                    if name != "lo" && name != "br0" && i["operstate"] != "UP" {
                        down.push(format!("{node}:{name}"));
                    }
                }
            }
            if down.is_empty() {
                return Ok(());
            }
            if t.elapsed() > limit {
                return Err(format!(
                    "links still down after {limit:?}: {}",
                    down.join(", ")
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn start_element(&self, e: &Element) -> Result<i32, String> {
        use std::os::unix::process::CommandExt;
        // `ip netns exec` hides /sys/fs/bpf: the elements pin under a BPF filesystem of
        // the lab's own, mounted before they start (their mount namespaces copy it).
        if let Err(err) = io::pin::mount_bpffs(Path::new(LAB_BPF_DIR)) {
            eprintln!("lab: {err}: fast paths will not outlive their elements");
        }
        let ns = self.ns(&e.name);
        let sock = self.control_socket(&e.name);
        let log_path = self.run_dir().join(format!("{}.log", e.name));
        // A restart keeps the last run's log beside the new one (NAME.log.1): what the
        // element said as it stopped is what an operator looks for after a restart.
        if std::fs::metadata(&log_path).is_ok_and(|m| m.len() > 0) {
            let _ = std::fs::rename(&log_path, self.run_dir().join(format!("{}.log.1", e.name)));
        }
        let log =
            std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let io = self.io.clone().or_else(|| self.load_state().io);
        let role = self.role(e);
        // The LB's, the switch's and the Axon's fast paths are XDP's: not on AF_PACKET
        // ports.
        let xdp_only = ["balancer", "switch", "axon"].contains(&role.as_str());
        let fast = match self.fast_path.or(self.load_state().fast_path) {
            Some(true) => (role == "forwarder" || (xdp_only && io.as_deref() != Some("packet")))
                .then_some(["--fast-path", "true"]),
            Some(false) => (role == "forwarder" || xdp_only).then_some(["--fast-path", "false"]),
            None => None,
        };
        let child = std::process::Command::new("ip")
            .args(["netns", "exec", &ns])
            .arg(&self.exe)
            .arg(&role)
            .arg("--config")
            .arg(self.config_path(e))
            .arg("--control")
            .arg(&sock)
            .args(io.iter().flat_map(|b| ["--io", b.as_str()]))
            .args(fast.iter().flatten())
            .args(e.cpus.iter().flat_map(|c| ["--cpus", c.as_str()]))
            .args(
                self.topo
                    .dist_key
                    .then(|| self.dist_key_path())
                    .iter()
                    .flat_map(|k| [std::ffi::OsStr::new("--dist-key-file"), k.as_os_str()]),
            )
            // Where the element runs, for its hooks (a controller's [takeover] on_active).
            .env("TESSERA_EXE", &self.exe)
            // Where it pins what outlives it (a forwarder's fast path, for its next start).
            .env("TESSERA_BPF_DIR", LAB_BPF_DIR)
            .env("TESSERA_LAB_FILE", &self.file)
            .env("TESSERA_LAB_NAME", &self.name)
            .env("TESSERA_LAB_NODE", &e.name)
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0)
            .spawn()
            .map_err(|err| {
                format!(
                    "element {}: cannot start {}: {err}",
                    e.name,
                    self.exe.display()
                )
            })?;
        let mut child = child;
        let pid = child.id() as i32;
        std::fs::write(
            self.run_dir().join(format!("{}.pid", e.name)),
            pid.to_string(),
        )
        .map_err(|e| e.to_string())?;
        // `ip netns exec` execs the element, so the PID is the element's. Wait until it
        // answers on its control socket.
        // (30 s: a start on a machine busy with other labs can take seconds.)
        let t = Instant::now();
        loop {
            if control::ctlsock::request(&sock, "counters").is_ok() {
                return Ok(pid);
            }
            let exited = child.try_wait().ok().flatten();
            if exited.is_some() || !cmd::alive(pid) || t.elapsed() > Duration::from_secs(30) {
                let how = match exited {
                    Some(status) => format!("it exited ({status})"),
                    None if cmd::alive(pid) => format!(
                        "no answer on its control socket after {:.1} s",
                        t.elapsed().as_secs_f64()
                    ),
                    None => "it is gone".to_string(),
                };
                cmd::terminate(pid, Duration::from_secs(1));
                return Err(format!(
                    "element {} did not start: {how}; its log ({}) ends:\n{}",
                    e.name,
                    log_path.display(),
                    log_tail(&log_path, 10)
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Writes the per-element configuration of this topology under `out`, so that the
    /// tested lab and a deployment share one source: for each element, `out/NAME/NAME.toml`
    /// (its configuration, with the files it names beside it: routes files, keys), its FRR
    /// configurations under `out/NAME/frr/`, `out/NAME/interfaces.json` (each interface's
    /// MAC, MTU, queues and what it is cabled to) and, where the lab authenticates DIST,
    /// one new key shared by every element (`dist.key`, named by `[dist] key_file`);
    /// `out/README.md` lists how to start each. Returns the elements written.
    pub fn export(&self, out: &Path) -> Result<Vec<String>, String> {
        let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
        std::fs::create_dir_all(out).map_err(|e| io(out, e))?;
        let key = out.join("dist.key");
        if self.topo.dist_key {
            control::config::write_new_dist_key(&key)?;
        }
        let mut written = Vec::new();
        let mut readme = format!(
            "# {}: per-element configuration\n\nExported by `tessera lab export` from `{}`{}.\n\
             Start each element on its machine (or with the unit the Debian package installs, after\n\
             copying `NAME.toml` and the files beside it to `/etc/tessera/`):\n\n\
             | element | role | command | unit |\n|---|---|---|---|\n",
            self.name,
            self.file.display(),
            if self.topo.description.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.topo.description)
            }
        );
        for e in &self.topo.element {
            if e.role == "linux" {
                continue; // the kernel's forwarding: nothing of ours to configure
            }
            let dir = out.join(&e.name);
            std::fs::create_dir_all(&dir).map_err(|err| io(&dir, err))?;
            let src = self.config_path(e);
            let mut text = std::fs::read_to_string(&src).map_err(|err| io(&src, err))?;
            let value: toml::Value =
                toml::from_str(&text).map_err(|err| format!("{}: {err}", src.display()))?;
            let base = src.parent().unwrap_or(Path::new("."));
            for rel in referenced_files(&value) {
                let (from, to) = (base.join(&rel), dir.join(&rel));
                if let Some(p) = to.parent() {
                    std::fs::create_dir_all(p).map_err(|err| io(p, err))?;
                }
                std::fs::copy(&from, &to).map_err(|err| io(&from, err))?;
            }
            if self.topo.dist_key && value.get("dist").is_none() {
                text.push_str(
                    "\n# DIST authentication: the key every element of this router shares.\n[dist]\nkey_file = \"dist.key\"\n",
                );
            }
            if self.topo.dist_key {
                let to = dir.join("dist.key");
                std::fs::copy(&key, &to).map_err(|err| io(&key, err))?;
            }
            let cfg = dir.join(format!("{}.toml", e.name));
            std::fs::write(&cfg, text).map_err(|err| io(&cfg, err))?;
            for (daemon, file) in &e.frr {
                let from = self.dir.join(file);
                let to = dir.join("frr").join(format!("{daemon}.conf"));
                std::fs::create_dir_all(dir.join("frr")).map_err(|err| io(&dir, err))?;
                std::fs::copy(&from, &to).map_err(|err| io(&from, err))?;
            }
            let mut ifs = Vec::new();
            for (i, l) in self.topo.link.iter().enumerate() {
                for (me, peer, fixed) in [(&l.a, &l.b, &l.a_mac), (&l.b, &l.a, &l.b_mac)] {
                    let Some((node, ifname)) = me.split_once(':') else {
                        continue;
                    };
                    if node != e.name {
                        continue;
                    }
                    let peer = match peer.split_once(':') {
                        Some(_) => peer.clone(),
                        None => format!("{peer} (a switch; its port p{i})"),
                    };
                    ifs.push(json!({
                        "name": ifname,
                        "mac": fixed.clone().unwrap_or_else(|| self.mac(node, ifname)),
                        "mac_fixed": fixed.is_some(),
                        "mtu": l.mtu.unwrap_or(1500),
                        "queues": l.queues.unwrap_or(1),
                        "cabled_to": peer,
                    }));
                }
            }
            let p = dir.join("interfaces.json");
            std::fs::write(&p, serde_json::to_string_pretty(&ifs).unwrap_or_default())
                .map_err(|err| io(&p, err))?;
            readme.push_str(&format!(
                "| {n} | {r} | `tessera {r} --config {n}/{n}.toml --control /run/tessera/{n}.sock` | `tessera-{r}@{n}` |\n",
                n = e.name,
                r = e.role
            ));
            written.push(e.name.clone());
        }
        readme.push_str(
            "\n`NAME/interfaces.json` says what each interface is cabled to and its MAC in the lab; a\n\
             MAC marked `mac_fixed` is named by other elements' configurations (an LB's back-ends,\n\
             the Virtual-CP): give that NIC this MAC, or change the configurations that name it.\n\
             Hosts and switches of the lab are the networks around the router; they are not exported.\n",
        );
        let p = out.join("README.md");
        std::fs::write(&p, readme).map_err(|err| io(&p, err))?;
        Ok(written)
    }

    /// Ends the processes in the lab's namespaces and deletes the namespaces.
    pub fn down(&self) -> Result<(), String> {
        let st = self.load_state();
        let existing = cmd::namespaces();
        let mut names: Vec<String> = self.nodes().iter().map(|(n, _)| self.ns(n)).collect();
        names.extend(st.namespaces);
        names.sort();
        names.dedup();
        let mut errors = Vec::new();
        for ns in names.iter().filter(|n| existing.contains(n)) {
            for pid in cmd::ns_pids(ns) {
                cmd::terminate(pid, Duration::from_secs(3));
            }
            // What its elements pinned (their fast paths, for their next start).
            if let Ok(m) = std::fs::metadata(format!("/run/netns/{ns}")) {
                use std::os::unix::fs::MetadataExt;
                io::pin::remove_netns(Path::new(LAB_BPF_DIR), m.ino());
            }
            if let Err(e) = cmd::run("ip", &["netns", "del", ns]) {
                errors.push(e);
            }
        }
        let _ = std::fs::remove_dir_all(self.run_dir());
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("\n"))
        }
    }

    /// Stops one element (SIGTERM, then SIGKILL after 3 s).
    pub fn stop(&self, node: &str) -> Result<(), String> {
        let e = self.element(node)?;
        let pidfile = self.run_dir().join(format!("{}.pid", e.name));
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| format!("element {node} is not running (no {})", pidfile.display()))?;
        if cmd::alive(pid) && cmd::ns_pids(&self.ns(node)).contains(&pid) {
            cmd::terminate(pid, Duration::from_secs(3));
        }
        let _ = std::fs::remove_file(pidfile);
        Ok(())
    }

    /// Starts one element again.
    pub fn start(&self, node: &str) -> Result<(), String> {
        let e = self.element(node)?;
        let role = self.role(e);
        if !runs_process(&role) {
            return Err(format!(
                "element {node} has role {role}; it has no process to start"
            ));
        }
        let pid = self.start_element(e)?;
        let mut st = self.load_state();
        st.pids.insert(node.to_string(), pid);
        self.save(&st)?;
        if !e.frr.is_empty() && !self.frr_running(node) {
            self.start_frr(&e.name, &self.frr_always(e), true)?;
        }
        Ok(())
    }

    /// Runs a command in a node's namespace with inherited stdio; returns its exit code.
    pub fn exec(&self, node: &str, argv: &[String]) -> Result<i32, String> {
        if self.kind(node).is_none() {
            return Err(format!("no node named {node:?} in lab {}", self.name));
        }
        let st = self
            .command(node, argv)
            .status()
            .map_err(|e| e.to_string())?;
        Ok(st.code().unwrap_or(128))
    }

    /// Every node with its namespace and interfaces, as `lab show --json` prints it.
    pub fn show(&self) -> Result<Value, String> {
        let existing = cmd::namespaces();
        let st = self.load_state();
        let mut nodes = Vec::new();
        for (node, kind) in self.nodes() {
            let ns = self.ns(node);
            let up = existing.contains(&ns);
            let mut ifaces = Vec::new();
            if up {
                let out = ip_n(&ns, &["-j", "addr", "show"])?;
                let v: Value =
                    serde_json::from_str(&out).map_err(|e| format!("ip -j addr: {e}"))?;
                for i in v.as_array().into_iter().flatten() {
                    let name = i["ifname"].as_str().unwrap_or("");
                    if name == "lo" {
                        continue;
                    }
                    let addrs: Vec<String> = i["addr_info"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        // IPv4, and IPv6 but its link-local addresses.
                        .filter(|a| {
                            a["family"] == "inet"
                                || (a["family"] == "inet6" && a["scope"] != "link")
                        })
                        .map(|a| {
                            format!("{}/{}", a["local"].as_str().unwrap_or(""), a["prefixlen"])
                        })
                        .collect();
                    ifaces.push(json!({"name": name, "mac": i["address"], "addresses": addrs}));
                }
            }
            let mut entry = json!({"name": node, "kind": kind.as_str(), "namespace": ns, "up": up, "interfaces": ifaces});
            if kind == Kind::Element {
                let e = self.element(node)?;
                let role = self.role(e);
                entry["role"] = json!(role);
                if runs_process(&role) {
                    // The element's addresses live in the element, not in the kernel.
                    let mut addrs: BTreeMap<String, Vec<String>> = BTreeMap::new();
                    if role == "forwarder" {
                        if let Ok(cfg) = control::ForwarderFile::load(&self.config_path(e)) {
                            for c in &cfg.interfaces {
                                // Sub-interfaces' addresses belong to their port.
                                let port = c.vlan.map(|(p, _)| &cfg.interfaces[p]).unwrap_or(c);
                                let a = addrs.entry(port.name.clone()).or_default();
                                a.extend(c.addresses());
                            }
                        }
                    } else if let Ok(cfg) =
                        control::balancer::BalancerFile::load(&self.config_path(e))
                    {
                        for c in cfg.interfaces.iter().filter(|c| c.prefix_len > 0) {
                            let a = addrs.entry(c.name.clone()).or_default();
                            a.push(format!("{}/{}", c.addr, c.prefix_len));
                            a.extend(c.addrs6.iter().map(|(x, l)| format!("{x}/{l}")));
                        }
                    }
                    for i in entry["interfaces"].as_array_mut().into_iter().flatten() {
                        if let Some(a) = i["name"].as_str().and_then(|n| addrs.get(n)) {
                            i["addresses"] = json!(a);
                        }
                    }
                    entry["control"] = json!(self.control_socket(node));
                    entry["pid"] = json!(st.pids.get(node));
                }
            }
            if up {
                entry["placement"] = self.placement_of(node, st.pids.get(node).copied());
            }
            nodes.push(entry);
        }
        Ok(json!({"lab": self.name, "nodes": nodes}))
    }
}

/// Relative paths of the files an element's configuration names (`routes_file`,
/// `key_file`, at any depth), to copy beside it.
fn referenced_files(v: &toml::Value) -> Vec<PathBuf> {
    let mut out = Vec::new();
    fn walk(v: &toml::Value, out: &mut Vec<PathBuf>) {
        match v {
            toml::Value::Table(t) => {
                for (k, v) in t {
                    match (k.as_str(), v) {
                        ("routes_file" | "key_file", toml::Value::String(s))
                            if Path::new(s).is_relative() =>
                        {
                            out.push(PathBuf::from(s))
                        }
                        _ => walk(v, out),
                    }
                }
            }
            toml::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    walk(v, &mut out);
    out
}

#[cfg(test)]
mod tests;
