//! The forwarder's TOML configuration. Errors name the file, the line and the key.
//!
//! ```toml
//! routes_file = "routes.txt"   # optional; "PREFIX NEXTHOP [NEXTHOP...]" per line, relative to this file
//! # routes_file_via = "10.2.0.2"  # optional: all routes of routes_file through this gateway (or
//! #                               # list); routes_file may then be any table: text, MRT, gzip, bzip2
//!
//! [[interface]]
//! name = "r-eth0"
//! address = "10.1.0.1/24"
//! # mtu = 1500               # optional: IP MTU; default, the interface's own
//!
//! # acl_in = "edge-in"        # optional filters (docs/filters.md): the [[acl]] of what comes
//! # acl_out = "edge-out"      # in, and of what is forwarded out; the reverse-path check,
//! # urpf = "strict"           # "strict", "loose" or "off" (with urpf_allow_default = true,
//!                              # loose counts the default route)
//!
//! [[route]]
//! prefix = "10.3.0.0/16"
//! via = "10.2.0.2"             # or a list of gateways for ECMP: ["10.2.0.2", "10.2.0.3"]
//!
//! # [[acl]]                    # an access list (docs/filters.md; config/filters.rs)
//! # name = "edge-in"
//! # default = "permit"
//! # [[acl.rule]]
//! # action = "deny"            # "permit" | "deny" | "reject"
//! # protocol = "tcp"
//! # dst = "10.2.0.0/24"
//! # dst_port = "22"
//!
//! # The back-end role of a multistage router (optional): VLAN sub-interfaces mirror the
//! # external networks on the interconnection port, and hellos go out of it.
//! # [[interface]]
//! # name = "ext-a"             # a name for the sub-interface (not a kernel interface)
//! # parent = "r1-int"          # the interface whose port carries it
//! # vlan = 10                  # 802.1Q VLAN id, 1 to 4094
//! # address = "10.1.0.1/24"    # the router's address on that external network
//! # [backend]
//! # internal = "r1-int"        # the interconnection port: hellos out, DIST accepted here
//! # hello_interval_ms = 100
//!
//! [io]                         # optional
//! backend = "auto"             # "auto" (AF_XDP, else AF_PACKET with a log line saying why),
//!                              # "xdp" (AF_XDP or an error) or "packet" (AF_PACKET)
//! busy_poll = false            # true: never sleep when idle (a dedicated core at 100%)
//! fast_path = true             # forward the common case in the ports' own programs (XDP
//!                              # on AF_XDP ports, tcx on AF_PACKET ones); false: user space
//! slow_path_limit = 20000      # fast path: frames/s per port and CPU it hands user space
//!                              # for the router to answer; the excess is shed (0: no limit)
//! restart_grace_s = 5          # fast path: forwards on this long after the forwarder stops,
//!                              # for its next start to take it over (0: stops with it)
//! packet_ring = "frames"       # AF_PACKET: "frames" (a wake-up per frame) or "blocks"
//!                              # (per block or timer tick: throughput over latency)
//! # priority = 60              # workers at SCHED_FIFO 1-99, above the kernel's receive
//!                              # threads: no collapse at overload (dedicated cores only)
//! shared_umem = true           # AF_XDP: a worker's ports share one UMEM, so a frame leaves
//!                              # by another port without a copy (false: one per port)
//!
//! [dist]                       # optional; a back-end's DIST authentication (docs/dist.md)
//! key_file = "dist.key"        # the router's shared key (hex digits), relative to this file;
//!                              # without it DIST is unauthenticated and the back-end warns
//! max_age_s = 60               # messages sealed longer ago than this are dropped (0: no limit)
//!
//! [tuning]                     # optional
//! icmp_errors_per_sec = 100
//! icmp_burst = 50
//! neighbour = { reachable_secs = 30, retry_ms = 1000, max_tries = 3, queue_len = 64,
//!               max_entries = 16384, max_queued = 4096 }
//! ```

use dataplane::forwarder::ForwarderConfig;
use fib::Prefix;
use serde::Deserialize;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use toml::Spanned;

mod common;
mod filters;
mod flow_export;
mod router_filters;
pub use common::{read_dist_key, write_new_dist_key, DistConfig, IoConfig, DEFAULT_DIST_MAX_AGE_S};
pub(crate) use common::{RawDist, RawIo, RawMetrics};
pub use filters::FilterConfig;
pub(crate) use filters::{filters_of, RawAcl, RELOADABLE_IN_INTERFACE};
pub use flow_export::FlowExportConfig;
pub(crate) use flow_export::RawFlowExport;
pub(crate) use router_filters::RawRouterInterface;
pub use router_filters::{vlan_of_name, RouterFilters};

/// A configuration error: where, which key, what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    pub line: usize,
    pub key: String,
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: ", self.file.display(), self.line)?;
        if !self.key.is_empty() {
            write!(f, "key `{}`: ", self.key)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    routes_file: Option<Spanned<String>>,
    routes_file_via: Option<Spanned<Via>>,
    #[serde(default)]
    interface: Vec<RawInterface>,
    #[serde(default)]
    route: Vec<RawRoute>,
    #[serde(default)]
    tuning: ForwarderConfig,
    backend: Option<RawBackend>,
    io: Option<RawIo>,
    dist: Option<RawDist>,
    metrics: Option<RawMetrics>,
    star: Option<RawStar>,
    #[serde(default)]
    acl: Vec<filters::RawAcl>,
    flow_export: Option<flow_export::RawFlowExport>,
}

/// `[star]`: this forwarder is one of a star router's (docs/star.md).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStar {
    internal: Spanned<String>,
    #[serde(default)]
    member: Vec<RawStarMember>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStarMember {
    mac: Spanned<String>,
    #[serde(default)]
    networks: Vec<RawStarNetwork>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStarNetwork {
    prefix: Spanned<String>,
    port: Spanned<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBackend {
    internal: Spanned<String>,
    hello_interval_ms: Option<Spanned<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInterface {
    name: Spanned<String>,
    /// One prefix, or a list: one IPv4 and any IPv6 ones.
    address: Spanned<Via>,
    mtu: Option<Spanned<u32>>,
    parent: Option<Spanned<String>>,
    vlan: Option<Spanned<u16>>,
    /// Send IPv6 router advertisements on this interface (SLAAC for its hosts).
    router_advertisements: Option<Spanned<bool>>,
    acl_in: Option<Spanned<String>>,
    acl_out: Option<Spanned<String>>,
    urpf: Option<Spanned<String>>,
    urpf_allow_default: Option<Spanned<bool>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    prefix: Spanned<String>,
    via: Spanned<Via>,
}

/// One gateway, or a list of them (ECMP).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Via {
    One(String),
    Many(Vec<String>),
}

impl Via {
    /// The gateways of a controller's IPv6 route; at least one. A link-local gateway names
    /// the external network it is on, `fe80::1%vlan20` (or `fe80::1%20`), and is kept with
    /// that VLAN written in it (`wire::ipv6::scoped_link_local`), as the back-ends take it.
    pub(crate) fn addresses6_scoped(&self) -> Result<Vec<std::net::Ipv6Addr>, String> {
        let one = |t: &String| -> Result<std::net::Ipv6Addr, String> {
            let (a, zone) = match t.split_once('%') {
                Some((a, z)) => (a, Some(z)),
                None => (t.as_str(), None),
            };
            let a: std::net::Ipv6Addr = a
                .parse()
                .map_err(|_| format!("{t:?} is not an IPv6 address"))?;
            let ll = wire::ipv6::is_link_local(a);
            match zone {
                None if ll => Err(format!(
                    "{t:?} is link-local: name its network, as in \"{t}%vlan20\""
                )),
                None => Ok(a),
                Some(_) if !ll => Err(format!(
                    "{t:?}: only a link-local gateway names its network"
                )),
                Some(z) => match z.strip_prefix("vlan").unwrap_or(z).parse::<u16>() {
                    Ok(v) if (1..=4094).contains(&v) && a.segments()[1] == 0 => {
                        Ok(wire::ipv6::scoped_link_local(a, v))
                    }
                    _ => Err(format!(
                        "{t:?}: the network of a link-local gateway is vlan<ID> (1 to 4094) and its second group is 0"
                    )),
                },
            }
        };
        self.texts()?.into_iter().map(one).collect()
    }

    /// The gateways as written; at least one.
    fn texts(&self) -> Result<Vec<&String>, String> {
        let texts: Vec<&String> = match self {
            Via::One(v) => vec![v],
            Via::Many(v) => v.iter().collect(),
        };
        if texts.is_empty() {
            return Err("no gateway given".into());
        }
        Ok(texts)
    }

    /// The gateways as IPv4 addresses; at least one.
    pub(crate) fn addresses(&self) -> Result<Vec<Ipv4Addr>, String> {
        self.parsed("IPv4")
    }

    /// The gateways as addresses of one family (`what` names it in the error).
    fn parsed<A: std::str::FromStr>(&self, what: &str) -> Result<Vec<A>, String> {
        self.texts()?
            .into_iter()
            .map(|t| {
                t.parse()
                    .map_err(|_| format!("{t:?} is not an {what} address"))
            })
            .collect()
    }
}

/// One interface of the forwarder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceConfig {
    pub name: String,
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
    /// IPv6 addresses with their prefix lengths (the link-local one is derived from the
    /// MAC, not configured).
    pub addrs6: Vec<(std::net::Ipv6Addr, u8)>,
    pub mtu: Option<usize>,
    /// A VLAN sub-interface: (index of the parent interface, VLAN id).
    pub vlan: Option<(usize, u16)>,
    /// `router_advertisements`: IPv6 router advertisements on this interface.
    pub router_advertisements: bool,
    /// `acl_in`, `acl_out`, `urpf`, `urpf_allow_default`.
    pub filter: FilterConfig,
}

impl InterfaceConfig {
    /// The IPv4 address and prefix length, none on an IPv6-only interface.
    pub fn v4(&self) -> Option<(Ipv4Addr, u8)> {
        (!self.addr.is_unspecified()).then_some((self.addr, self.prefix_len))
    }

    /// The IPv4 network, none on an IPv6-only interface.
    pub fn net(&self) -> Option<Prefix> {
        self.v4().map(|(a, l)| Prefix::new(a, l))
    }

    /// Every address as `ADDRESS/LENGTH`, the IPv4 one first.
    pub fn addresses(&self) -> Vec<String> {
        self.v4()
            .map(|(a, l)| format!("{a}/{l}"))
            .into_iter()
            .chain(self.addrs6.iter().map(|(a, l)| format!("{a}/{l}")))
            .collect()
    }
}

/// `[star]`: the internal port on the star's switch, and every forwarder's networks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StarConfig {
    /// Index of the internal interface.
    pub internal: usize,
    /// (network, the forwarder's internal MAC, its port index on the network).
    pub members: Vec<(Prefix, wire::MacAddr, u8)>,
    /// The same for IPv6 networks (`networks` entries with an IPv6 prefix).
    pub members6: Vec<(fib::Prefix6, wire::MacAddr, u8)>,
}

/// The back-end role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendConfig {
    /// Index of the interconnection interface.
    pub internal: usize,
    pub hello_interval_ms: u64,
}

/// A static route, with the line it came from (for error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteConfig {
    pub prefix: Prefix,
    /// One gateway, or several for ECMP.
    pub via: Vec<Ipv4Addr>,
    pub line: usize,
}

/// A static IPv6 route, with the line it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route6Config {
    pub prefix: fib::Prefix6,
    /// One gateway, or several for ECMP.
    pub via: Vec<std::net::Ipv6Addr>,
    pub line: usize,
}

/// A parsed, validated forwarder configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwarderFile {
    pub path: PathBuf,
    pub interfaces: Vec<InterfaceConfig>,
    pub routes: Vec<RouteConfig>,
    /// Static IPv6 routes (`[[route]]` entries with an IPv6 prefix).
    pub routes6: Vec<Route6Config>,
    /// Resolved against the configuration file's directory.
    pub routes_file: Option<PathBuf>,
    /// When set, every route of `routes_file` goes through these gateways and the file may
    /// be any table format (text with or without next hops, MRT, compressed).
    pub routes_file_via: Vec<Ipv4Addr>,
    /// The IPv6 gateways among `routes_file_via`: the file's IPv6 routes go through them
    /// (and are skipped without any).
    pub routes_file_via6: Vec<std::net::Ipv6Addr>,
    pub tuning: ForwarderConfig,
    pub backend: Option<BackendConfig>,
    pub io: IoConfig,
    pub dist: DistConfig,
    /// `[metrics]`: the Prometheus endpoint and the element's name in it.
    pub metrics: crate::metrics::MetricsConfig,
    /// `[star]`: a member of a star router.
    pub star: Option<StarConfig>,
    /// `[[acl]]`: the access lists, in the file's order.
    pub acls: Vec<dataplane::acl::Acl>,
    /// `[flow_export]`: flows sampled and exported over IPFIX (docs/flows.md).
    pub flow_export: Option<FlowExportConfig>,
}

/// Line number (1-based) of byte offset `at` in `src`.
pub fn line_of(src: &str, at: usize) -> usize {
    src.as_bytes()[..at.min(src.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The key of a `key = value` line, if the line has one.
fn key_on_line(src: &str, line: usize) -> String {
    src.lines()
        .nth(line.saturating_sub(1))
        .and_then(|l| l.split_once('='))
        .map(|(k, _)| k.trim().to_string())
        .unwrap_or_default()
}

/// A configuration file's text; an error names the file.
pub(crate) fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: path.into(),
        line: 0,
        key: String::new(),
        message: format!("cannot read: {e}"),
    })
}

/// Deserializes TOML; a syntax or type error names the line and the key on it.
pub(crate) fn from_toml<T: serde::de::DeserializeOwned>(
    path: &Path,
    src: &str,
) -> Result<T, ConfigError> {
    toml::from_str(src).map_err(|e| {
        let at = e.span().map(|s| s.start).unwrap_or(0);
        let line = line_of(src, at);
        ConfigError {
            file: path.into(),
            line,
            key: key_on_line(src, line),
            message: e.message().to_string(),
        }
    })
}

/// The `routes_file` key: a path relative to the config file `path` (text `src`), which
/// must exist.
pub(crate) fn routes_file_path(
    path: &Path,
    src: &str,
    raw: Option<&Spanned<String>>,
) -> Result<Option<PathBuf>, ConfigError> {
    let Some(f) = raw else { return Ok(None) };
    let p = Path::new(f.get_ref());
    let p = if p.is_absolute() {
        p.to_path_buf()
    } else {
        path.parent().unwrap_or(Path::new(".")).join(p)
    };
    if !p.exists() {
        return Err(ConfigError {
            file: path.into(),
            line: line_of(src, f.span().start),
            key: "routes_file".into(),
            message: format!("{} does not exist", p.display()),
        });
    }
    Ok(Some(p))
}

/// Checks a Linux interface name.
pub(crate) fn check_ifname(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 15 || name.contains(['/', ' ']) {
        return Err(format!(
            "{name:?} is not a valid interface name (1 to 15 characters, no '/' or space)"
        ));
    }
    Ok(())
}

/// Parses `ADDRESS/LENGTH` (length 1 to 32).
pub(crate) fn cidr(s: &str) -> Result<(Ipv4Addr, u8), String> {
    let (a, l) = s
        .split_once('/')
        .ok_or("expected ADDRESS/LENGTH, like 10.1.0.1/24")?;
    let addr: Ipv4Addr = a
        .parse()
        .map_err(|_| format!("{a:?} is not an IPv4 address"))?;
    let len: u8 = l
        .parse()
        .ok()
        .filter(|l| (1..=32).contains(l))
        .ok_or_else(|| format!("prefix length {l:?} is not 1 to 32"))?;
    Ok((addr, len))
}

/// Parses `ADDRESS/LENGTH` for IPv6 (length 1 to 128); not a multicast or link-local
/// address (the link-local one comes from the MAC).
pub(crate) fn cidr6(s: &str) -> Result<(std::net::Ipv6Addr, u8), String> {
    let (a, l) = s
        .split_once('/')
        .ok_or("expected ADDRESS/LENGTH, like 2001:db8:1::1/64")?;
    let addr: std::net::Ipv6Addr = a
        .parse()
        .map_err(|_| format!("{a:?} is not an IPv6 address"))?;
    let len: u8 = l
        .parse()
        .ok()
        .filter(|l| (1..=128).contains(l))
        .ok_or_else(|| format!("prefix length {l:?} is not 1 to 128"))?;
    if addr.is_multicast() || wire::ipv6::is_link_local(addr) || addr.is_unspecified() {
        return Err(format!(
            "{addr} is not a unicast global address (the link-local address comes from the MAC)"
        ));
    }
    Ok((addr, len))
}

/// An IPv6 `[[route]]` (index `i`): its prefix, and one gateway on an interface's IPv6
/// network. Errors carry where and which key.
fn route6(
    src: &str,
    interfaces: &[InterfaceConfig],
    star6: &[fib::Prefix6],
    r: &RawRoute,
    i: usize,
) -> Result<Route6Config, (usize, String, String)> {
    let prefix = fib::Prefix6::parse_strict(r.prefix.get_ref()).map_err(|e| {
        (
            r.prefix.span().start,
            format!("route[{i}].prefix"),
            format!("{:?}: {e}", r.prefix.get_ref()),
        )
    })?;
    let (at, key) = (r.via.span().start, format!("route[{i}].via"));
    let texts: Vec<&String> = match r.via.get_ref() {
        Via::One(v) => vec![v],
        Via::Many(v) => v.iter().collect(),
    };
    let via = gateways6(&texts, interfaces, star6).map_err(|m| (at, key, m))?;
    Ok(Route6Config {
        prefix,
        via,
        line: line_of(src, r.prefix.span().start),
    })
}

/// IPv6 gateways (several: ECMP), each on an interface's IPv6 network (or, for a star
/// member, another member's, `star6`); at least one.
fn gateways6(
    texts: &[&String],
    interfaces: &[InterfaceConfig],
    star6: &[fib::Prefix6],
) -> Result<Vec<std::net::Ipv6Addr>, String> {
    if texts.is_empty() {
        return Err("no gateway given".into());
    }
    let mut out = Vec::with_capacity(texts.len());
    for t in texts {
        // A link-local gateway names its interface: "fe80::2%r2-eth0" (an unnumbered link).
        if let Some((a, ifname)) = t.split_once('%') {
            let a: std::net::Ipv6Addr = a
                .parse()
                .map_err(|_| format!("{t:?} is not an IPv6 address"))?;
            if !wire::ipv6::is_link_local(a) || a.segments()[1..4] != [0, 0, 0] {
                return Err(format!(
                    "{t:?}: only a link-local gateway (fe80::/64) names its interface"
                ));
            }
            let i = interfaces
                .iter()
                .position(|x| x.name == ifname)
                .ok_or_else(|| format!("{t:?}: {ifname:?} is none of the interfaces"))?;
            out.push(
                wire::ipv6::iface_scoped_link_local(a, i)
                    .ok_or_else(|| format!("{t:?}: too many interfaces"))?,
            );
            continue;
        }
        let a: std::net::Ipv6Addr = t
            .parse()
            .map_err(|_| format!("{t:?} is not an IPv6 address"))?;
        if wire::ipv6::is_link_local(a) {
            return Err(format!(
                "{t:?} is link-local: name its interface, as in \"{t}%{}\"",
                interfaces.first().map_or("eth0", |x| x.name.as_str())
            ));
        }
        if !interfaces.iter().any(|x| {
            x.addrs6
                .iter()
                .any(|&(n, l)| fib::Prefix6::new(n, l).contains(a))
        }) && !star6.iter().any(|p| p.contains(a))
        {
            return Err(format!(
                "gateway {a} is on none of the interfaces' IPv6 networks"
            ));
        }
        out.push(a);
    }
    Ok(out)
}

impl ForwarderFile {
    pub fn load(path: &Path) -> Result<ForwarderFile, ConfigError> {
        Self::parse(path, &read(path)?)
    }

    pub fn parse(path: &Path, src: &str) -> Result<ForwarderFile, ConfigError> {
        let cx = At { path, src };
        let raw: Raw = from_toml(path, src)?;
        let acls = cx.acls(&raw.acl)?;
        let mut interfaces: Vec<InterfaceConfig> = Vec::new();
        for (i, r) in raw.interface.iter().enumerate() {
            let mut x = cx.interface(r, i, &interfaces)?;
            x.filter = cx.filter(r, i, &acls)?;
            interfaces.push(x);
        }
        if interfaces.is_empty() {
            return Err(cx.err(
                0,
                "interface".into(),
                "no [[interface]] given; a forwarder needs at least one".into(),
            ));
        }
        // A star member reaches the other members' networks too (checked below).
        let star_nets: Vec<Prefix> = raw
            .star
            .iter()
            .flat_map(|s| s.member.iter())
            .flat_map(|m| m.networks.iter())
            .filter_map(|n| Prefix::parse_strict(n.prefix.get_ref()).ok())
            .collect();
        let star_nets6: Vec<fib::Prefix6> = raw
            .star
            .iter()
            .flat_map(|s| s.member.iter())
            .flat_map(|m| m.networks.iter())
            .filter_map(|n| fib::Prefix6::parse_strict(n.prefix.get_ref()).ok())
            .collect();
        let gateways = |v: &Spanned<Via>, key: String| cx.gateways(v, key, &interfaces, &star_nets);
        let mut routes = Vec::new();
        let mut routes6 = Vec::new();
        for (i, r) in raw.route.iter().enumerate() {
            if r.prefix.get_ref().contains(':') {
                routes6.push(
                    route6(src, &interfaces, &star_nets6, r, i)
                        .map_err(|(at, key, m)| cx.err(at, key, m))?,
                );
                continue;
            }
            let prefix = Prefix::parse_strict(r.prefix.get_ref()).map_err(|e| {
                cx.err(
                    r.prefix.span().start,
                    format!("route[{i}].prefix"),
                    format!("{:?}: {e}", r.prefix.get_ref()),
                )
            })?;
            let via = gateways(&r.via, format!("route[{i}].via"))?;
            routes.push(RouteConfig {
                prefix,
                via,
                line: line_of(src, r.prefix.span().start),
            });
        }
        let routes_file = routes_file_path(path, src, raw.routes_file.as_ref())?;
        let mut routes_file_via6 = Vec::new();
        let routes_file_via = match &raw.routes_file_via {
            Some(v) if raw.routes_file.is_none() => {
                return Err(cx.err(
                    v.span().start,
                    "routes_file_via".into(),
                    "set without routes_file".into(),
                ))
            }
            Some(v) => {
                // IPv6 gateways apart; the rest are IPv4 ones.
                let key = "routes_file_via".to_string();
                let (six, four): (Vec<&String>, Vec<&String>) = match v.get_ref() {
                    Via::One(t) => vec![t],
                    Via::Many(t) => t.iter().collect(),
                }
                .into_iter()
                .partition(|t| t.contains(':'));
                if !six.is_empty() {
                    routes_file_via6 = gateways6(&six, &interfaces, &star_nets6)
                        .map_err(|m| cx.err(v.span().start, key.clone(), m))?;
                }
                if four.is_empty() {
                    Vec::new()
                } else {
                    let four =
                        Spanned::new(v.span(), Via::Many(four.into_iter().cloned().collect()));
                    gateways(&four, key)?
                }
            }
            None => Vec::new(),
        };
        let backend = match &raw.backend {
            None => None,
            Some(b) => Some(cx.backend(b, &interfaces)?),
        };
        let star = match &raw.star {
            None => None,
            Some(s) => Some(cx.star(s, &interfaces, backend.is_some())?),
        };
        Ok(ForwarderFile {
            acls,
            star,
            path: path.into(),
            interfaces,
            routes,
            routes6,
            routes_file,
            routes_file_via,
            routes_file_via6,
            tuning: raw.tuning,
            backend,
            io: IoConfig::from_raw(path, src, raw.io.as_ref())?,
            dist: DistConfig::from_raw(path, src, raw.dist.as_ref())?,
            metrics: RawMetrics::check(path, src, raw.metrics.as_ref())?,
            flow_export: raw
                .flow_export
                .as_ref()
                .map(|f| f.check(path, src))
                .transpose()?,
        })
    }
}

/// Where a config file's errors point: the file and its text (for the line).
pub(crate) struct At<'a> {
    pub(crate) path: &'a Path,
    pub(crate) src: &'a str,
}

impl At<'_> {
    /// An error at byte `at` of the file, for `key`.
    pub(crate) fn err(&self, at: usize, key: String, message: String) -> ConfigError {
        ConfigError {
            file: self.path.into(),
            line: line_of(self.src, at),
            key,
            message,
        }
    }

    /// `[[interface]]` number `i`, given the ones before it.
    fn interface(
        &self,
        r: &RawInterface,
        i: usize,
        interfaces: &[InterfaceConfig],
    ) -> Result<InterfaceConfig, ConfigError> {
        let name = r.name.get_ref();
        check_ifname(name)
            .map_err(|m| self.err(r.name.span().start, format!("interface[{i}].name"), m))?;
        if interfaces.iter().any(|x| &x.name == name) {
            return Err(self.err(
                r.name.span().start,
                format!("interface[{i}].name"),
                format!("interface {name} is listed twice"),
            ));
        }
        let key = format!("interface[{i}].address");
        let at = r.address.span().start;
        let texts: Vec<&String> = match r.address.get_ref() {
            Via::One(a) => vec![a],
            Via::Many(v) => v.iter().collect(),
        };
        let (mut v4, mut addrs6) = (Vec::new(), Vec::new());
        for t in texts {
            if t.contains(':') {
                addrs6.push(cidr6(t).map_err(|m| self.err(at, key.clone(), m))?);
            } else {
                let (a, l) = cidr(t).map_err(|m| self.err(at, key.clone(), m))?;
                if a.is_unspecified() {
                    return Err(self.err(at, key, "0.0.0.0 is no interface's address".into()));
                }
                v4.push((a, l));
            }
        }
        // An IPv6-only interface: 0.0.0.0/0 stands for "no IPv4 address" (it has no
        // IPv4 network, and answers no ARP). With no address at all (`address = []`),
        // an unnumbered link: IPv6 link-local only.
        let (addr, prefix_len) = match v4[..] {
            [one] => one,
            [] => (Ipv4Addr::UNSPECIFIED, 0),
            _ => return Err(self.err(at, key, "more than one IPv4 address".into())),
        };
        let router_advertisements = match &r.router_advertisements {
            Some(ra) if *ra.get_ref() && !addrs6.iter().any(|a| a.1 == 64) => {
                return Err(self.err(
                    ra.span().start,
                    format!("interface[{i}].router_advertisements"),
                    "needs an IPv6 /64 in `address`: hosts configure themselves from /64s only (RFC 4862)".into(),
                ))
            }
            Some(ra) => *ra.get_ref(),
            None => false,
        };
        let mtu = match &r.mtu {
            Some(m) if !(68..=9216).contains(m.get_ref()) => {
                return Err(self.err(
                    m.span().start,
                    format!("interface[{i}].mtu"),
                    format!("{} is not 68 to 9216", m.get_ref()),
                ))
            }
            Some(m) => Some(*m.get_ref() as usize),
            None => None,
        };
        let vlan = match (&r.parent, &r.vlan) {
            (None, None) => None,
            (Some(p), Some(v)) => {
                let parent = interfaces
                    .iter()
                    .position(|x| &x.name == p.get_ref() && x.vlan.is_none())
                    .ok_or_else(|| {
                        self.err(
                            p.span().start,
                            format!("interface[{i}].parent"),
                            format!(
                                "{:?} is not an untagged interface listed above",
                                p.get_ref()
                            ),
                        )
                    })?;
                let id = *v.get_ref();
                if !(1..=4094).contains(&id) {
                    return Err(self.err(
                        v.span().start,
                        format!("interface[{i}].vlan"),
                        format!("{id} is not 1 to 4094"),
                    ));
                }
                if interfaces.iter().any(|x| x.vlan == Some((parent, id))) {
                    return Err(self.err(
                        v.span().start,
                        format!("interface[{i}].vlan"),
                        format!("VLAN {id} is already on {}", p.get_ref()),
                    ));
                }
                Some((parent, id))
            }
            (Some(p), None) => {
                return Err(self.err(
                    p.span().start,
                    format!("interface[{i}].parent"),
                    "a sub-interface needs `vlan` too".into(),
                ))
            }
            (None, Some(v)) => {
                return Err(self.err(
                    v.span().start,
                    format!("interface[{i}].vlan"),
                    "a sub-interface needs `parent` too".into(),
                ))
            }
        };
        Ok(InterfaceConfig {
            name: name.clone(),
            addr,
            prefix_len,
            addrs6,
            mtu,
            vlan,
            router_advertisements,
            filter: FilterConfig::default(),
        })
    }

    /// A route's gateways (`via`, at `key`): IPv4 addresses on an interface's network or
    /// a star member's.
    fn gateways(
        &self,
        v: &Spanned<Via>,
        key: String,
        interfaces: &[InterfaceConfig],
        star_nets: &[Prefix],
    ) -> Result<Vec<Ipv4Addr>, ConfigError> {
        let texts: Vec<&String> = match v.get_ref() {
            Via::One(v) => vec![v],
            Via::Many(v) => v.iter().collect(),
        };
        if texts.is_empty() {
            return Err(self.err(v.span().start, key, "no gateway given".into()));
        }
        let mut out = Vec::new();
        for t in texts {
            let a: Ipv4Addr = t.parse().map_err(|_| {
                self.err(
                    v.span().start,
                    key.clone(),
                    format!("{t:?} is not an IPv4 address"),
                )
            })?;
            if !interfaces
                .iter()
                .any(|x| x.net().is_some_and(|n| n.contains(a)))
                && !star_nets.iter().any(|p| p.contains(a))
            {
                return Err(self.err(
                    v.span().start,
                    key,
                    format!("gateway {a} is on none of the interfaces' networks"),
                ));
            }
            out.push(a);
        }
        Ok(out)
    }

    /// `[backend]`: its internal port an untagged interface of this forwarder.
    fn backend(
        &self,
        b: &RawBackend,
        interfaces: &[InterfaceConfig],
    ) -> Result<BackendConfig, ConfigError> {
        let internal = interfaces
            .iter()
            .position(|x| &x.name == b.internal.get_ref() && x.vlan.is_none())
            .ok_or_else(|| {
                self.err(
                    b.internal.span().start,
                    "backend.internal".into(),
                    format!(
                        "{:?} is not an untagged interface of this forwarder",
                        b.internal.get_ref()
                    ),
                )
            })?;
        let hello_interval_ms = match &b.hello_interval_ms {
            Some(h) if !(10..=60_000).contains(h.get_ref()) => {
                return Err(self.err(
                    h.span().start,
                    "backend.hello_interval_ms".into(),
                    format!("{} is not 10 to 60000", h.get_ref()),
                ))
            }
            Some(h) => *h.get_ref(),
            None => 100,
        };
        Ok(BackendConfig {
            internal,
            hello_interval_ms,
        })
    }

    /// `[star]`: its internal port an untagged interface of this forwarder (`backend`: the
    /// forwarder is a back-end as well, which it cannot be), its members' networks.
    fn star(
        &self,
        s: &RawStar,
        interfaces: &[InterfaceConfig],
        backend: bool,
    ) -> Result<StarConfig, ConfigError> {
        let internal = interfaces
            .iter()
            .position(|x| &x.name == s.internal.get_ref() && x.vlan.is_none())
            .ok_or_else(|| {
                self.err(
                    s.internal.span().start,
                    "star.internal".into(),
                    format!(
                        "{:?} is not an untagged interface of this forwarder",
                        s.internal.get_ref()
                    ),
                )
            })?;
        if backend {
            return Err(self.err(
                s.internal.span().start,
                "star".into(),
                "a forwarder is a star member or a back-end, not both".into(),
            ));
        }
        let mut members = Vec::new();
        let mut members6 = Vec::new();
        for (i, m) in s.member.iter().enumerate() {
            let mac: wire::MacAddr = m.mac.get_ref().parse().map_err(|_| {
                self.err(
                    m.mac.span().start,
                    format!("star.member[{i}].mac"),
                    format!("{:?} is not a MAC address", m.mac.get_ref()),
                )
            })?;
            for (j, n) in m.networks.iter().enumerate() {
                let port = *n.port.get_ref();
                if !(0..=254).contains(&port) {
                    return Err(self.err(
                        n.port.span().start,
                        format!("star.member[{i}].networks[{j}].port"),
                        format!("{port} is not a port index (0 to 254)"),
                    ));
                }
                let key = format!("star.member[{i}].networks[{j}].prefix");
                let at = n.prefix.span().start;
                let text = n.prefix.get_ref();
                if text.contains(':') {
                    let p = fib::Prefix6::parse_strict(text)
                        .map_err(|e| self.err(at, key, format!("{text:?}: {e}")))?;
                    members6.push((p, mac, port as u8));
                } else {
                    let p = Prefix::parse_strict(text)
                        .map_err(|e| self.err(at, key, format!("{text:?}: {e}")))?;
                    members.push((p, mac, port as u8));
                }
            }
        }
        Ok(StarConfig {
            internal,
            members,
            members6,
        })
    }
}

#[cfg(test)]
mod tests;
