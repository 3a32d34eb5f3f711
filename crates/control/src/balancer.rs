//! The LB element: its TOML configuration (errors name the file, the line and the key) and
//! its run loop.
//!
//! ```toml
//! [[interface]]
//! name = "lba-ext"
//! role = "external"            # faces an external network
//! address = "10.1.0.1/24"      # the router's address there (answered by external ARP); or
//!                              # ["10.1.0.1/24", "2001:db8:1::1/64"]: IPv6 ones too (external ND),
//!                              # or IPv6 ones alone (an IPv6-only network: no ARP answered)
//! vlan = 10                    # carries this network's traffic on the interconnection
//!
//! [[interface]]
//! name = "lba-int"
//! role = "internal"            # on the interconnection
//!
//! [balance]                    # optional
//! mode = "maglev"              # "round-robin", "hash" or "maglev" (the default)
//!
//! [hello]                      # optional
//! interval_ms = 100            # between this LB's hellos
//! # timeout_ms = 250           # a back-end without hello this long leaves the table;
//!                              # default 2.5 times the interval it advertises
//!
//! [virtual_cp]                 # optional: where routing and management packets go
//! mac = "02:00:00:00:0c:01"
//! interface = "lba-int"
//!
//! [[backend]]                  # the initial balancing table
//! mac = "02:00:00:00:01:01"
//! interface = "lba-int"
//! weight = 1                   # default 1
//!
//! [[rule]]                     # optional classifier rules, added to the built-in ones
//! name = "ssh-to-cp"
//! from = "external"
//! ethertype = 0x0800
//! protocol = 6
//! port = 22
//! to_router = true             # only to the router's own address (or 224.0.0.0/24)
//! action = "virtual-cp"        # external-arp, internal-arp, virtual-cp, balance, dist,
//!                              # int-to-ext or drop
//!
//! [spare]                      # optional: another LB serves the same external network
//! peer = "02:00:00:00:0a:02"   # its internal MAC (the one LB active, the other standby)
//! priority = 200               # 1-255: the higher is active, at start and when both are
//!
//! [io]                         # optional, as for the forwarder
//! backend = "auto"             # "auto", "xdp" or "packet"
//! busy_poll = false
//!
//! # [dist]                     # optional, as for the forwarder: DIST authentication
//! # key_file = "dist.key"      # the router's shared key (docs/dist.md)
//! ```

use crate::config::{check_ifname, cidr, cidr6, from_toml, line_of, read, ConfigError, Via};
use crate::ctlsock;
use crate::run::{ask_worker, run_element, Asker, Link, Query};
mod control;
use control::LbControl;
use dataplane::balancer::{default_rules, Balancer, BalancerConfig, LbPort, LogEvent, Mode, Rule};
use dataplane::port::Port;
use serde::Deserialize;
use serde_json::{json, Value};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use toml::Spanned;
use wire::dist::PortRole;
use wire::MacAddr;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    interface: Vec<RawInterface>,
    #[serde(default)]
    balance: RawBalance,
    #[serde(default)]
    hello: RawHello,
    virtual_cp: Option<RawVcp>,
    #[serde(default)]
    backend: Vec<RawBackend>,
    #[serde(default)]
    rule: Vec<Spanned<Rule>>,
    spare: Option<RawSpare>,
    io: Option<crate::config::RawIo>,
    metrics: Option<crate::config::RawMetrics>,
    dist: Option<crate::config::RawDist>,
    #[serde(default)]
    acl: Vec<crate::config::RawAcl>,
    /// Refused with a pointer to where it belongs (the controller's file).
    flow_export: Option<Spanned<toml::Value>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInterface {
    name: Spanned<String>,
    role: Spanned<PortRole>,
    address: Option<Spanned<Via>>,
    vlan: Option<Spanned<u16>>,
    acl_in: Option<Spanned<String>>,
    acl_out: Option<Spanned<String>>,
    urpf: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBalance {
    #[serde(default)]
    mode: Mode,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHello {
    interval_ms: Option<Spanned<u64>>,
    timeout_ms: Option<Spanned<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpare {
    peer: Spanned<String>,
    priority: Spanned<u8>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVcp {
    mac: Spanned<String>,
    interface: Spanned<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBackend {
    mac: Spanned<String>,
    interface: Spanned<String>,
    #[serde(default = "one")]
    weight: Spanned<u16>,
}

fn one() -> Spanned<u16> {
    Spanned::new(0..0, 1)
}

/// `[flow_export]` belongs in the controller's file (docs/flows.md): an LB's is refused,
/// naming its line and saying so.
fn refuse_flow_export(
    path: &Path,
    src: &str,
    table: Option<&Spanned<toml::Value>>,
) -> Result<(), ConfigError> {
    let Some(t) = table else { return Ok(()) };
    Err(ConfigError {
        file: path.into(),
        line: line_of(src, t.span().start),
        key: "flow_export".into(),
        message: "an LB samples no flows: the multistage router's back-ends sample them and \
                  its controller exports them as the router's, by the controller's \
                  [flow_export] (docs/flows.md)"
            .into(),
    })
}

/// One port of the LB as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbInterface {
    pub name: String,
    pub role: PortRole,
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
    /// The router's IPv6 addresses on an external interface and their prefix lengths
    /// (`address` lists them after the IPv4 one).
    pub addrs6: Vec<(std::net::Ipv6Addr, u8)>,
    pub vlan: u16,
    /// An external interface's `acl_in` (applied before balancing) and `acl_out` (to what
    /// leaves by it); docs/filters.md.
    pub filter: crate::config::FilterConfig,
}

/// A parsed, validated LB configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BalancerFile {
    pub path: PathBuf,
    pub interfaces: Vec<LbInterface>,
    pub cfg: BalancerConfig,
    /// (MAC, port index, weight) of the initial balancing table.
    pub backends: Vec<(MacAddr, u16, u16)>,
    pub io: crate::config::IoConfig,
    pub dist: crate::config::DistConfig,
    pub metrics: crate::metrics::MetricsConfig,
    /// `[[acl]]`: the access lists its external interfaces apply.
    pub acls: Vec<dataplane::acl::Acl>,
}

impl BalancerFile {
    /// The filters this file configures, keeping the counters of `previous` where a rule
    /// or an interface is the same (a reload).
    pub fn filters(&self, previous: Option<&dataplane::acl::Filters>) -> dataplane::acl::Filters {
        let ifaces = self.interfaces.iter().map(|i| (&i.name, &i.filter));
        crate::config::filters_of(&self.acls, ifaces, previous)
    }

    /// Its own filters, for merging with the router's from the controller (its external
    /// ports face the router's networks).
    pub fn local_filters(&self) -> crate::remote_filters::Local {
        crate::remote_filters::Local {
            acls: self.acls.clone(),
            ifaces: self
                .interfaces
                .iter()
                .map(|i| crate::remote_filters::LocalIface {
                    name: i.name.clone(),
                    filter: i.filter.clone(),
                    vlan: (i.role == PortRole::External && i.vlan != 0).then_some(i.vlan),
                })
                .collect(),
        }
    }

    /// The config as `tessera show config` shows it (crate::showconfig): interfaces,
    /// balancing, hellos, Virtual-CP, initial back-ends, the rules added to the built-in
    /// ones, `[io]`, `[dist]` and `[metrics]`, every default filled in.
    pub fn shown(&self) -> String {
        use crate::showconfig::{finish, int, list, s};
        use toml::{Table, Value};
        let f = self;
        let name = |port: u16| s(&f.interfaces[port as usize].name);
        let mut t = Table::new();
        let ifaces: Vec<Value> = f
            .interfaces
            .iter()
            .map(|i| {
                let mut e = Table::new();
                e.insert("name".into(), s(&i.name));
                match i.role {
                    PortRole::External => {
                        e.insert("role".into(), s("external"));
                        let addrs: Vec<String> = (!i.addr.is_unspecified())
                            .then(|| format!("{}/{}", i.addr, i.prefix_len))
                            .into_iter()
                            .chain(i.addrs6.iter().map(|(a, l)| format!("{a}/{l}")))
                            .collect();
                        e.insert("address".into(), list(addrs));
                        e.insert("vlan".into(), int(i.vlan));
                        crate::showconfig::filter_keys(&mut e, &i.filter);
                    }
                    PortRole::Internal => {
                        e.insert("role".into(), s("internal"));
                    }
                }
                Value::Table(e)
            })
            .collect();
        t.insert("interface".into(), Value::Array(ifaces));
        if !f.acls.is_empty() {
            t.insert("acl".into(), crate::showconfig::acls(&f.acls));
        }
        let mut b = Table::new();
        b.insert(
            "mode".into(),
            s(match f.cfg.mode {
                Mode::RoundRobin => "round-robin",
                Mode::Hash => "hash",
                Mode::Maglev => "maglev",
            }),
        );
        t.insert("balance".into(), Value::Table(b));
        let mut h = Table::new();
        h.insert("interval_ms".into(), int(f.cfg.hello_interval.as_millis()));
        if let Some(to) = f.cfg.hello_timeout {
            h.insert("timeout_ms".into(), int(to.as_millis()));
        }
        t.insert("hello".into(), Value::Table(h));
        if let Some((mac, port)) = f.cfg.virtual_cp {
            let mut v = Table::new();
            v.insert("mac".into(), s(mac));
            v.insert("interface".into(), name(port));
            t.insert("virtual_cp".into(), Value::Table(v));
        }
        let backends: Vec<Value> = f
            .backends
            .iter()
            .map(|(mac, port, weight)| {
                let mut e = Table::new();
                e.insert("mac".into(), s(mac));
                e.insert("interface".into(), name(*port));
                e.insert("weight".into(), int(*weight));
                Value::Table(e)
            })
            .collect();
        if !backends.is_empty() {
            t.insert("backend".into(), Value::Array(backends));
        }
        if let Some(sp) = &f.cfg.spare {
            let mut v = Table::new();
            v.insert("peer".into(), s(sp.peer));
            v.insert("priority".into(), int(sp.priority));
            t.insert("spare".into(), Value::Table(v));
        }
        let builtin = default_rules();
        let rules: Vec<Value> = f
            .cfg
            .rules
            .iter()
            .filter(|r| !builtin.contains(r))
            .filter_map(|r| Value::try_from(r).ok())
            .collect();
        if !rules.is_empty() {
            t.insert("rule".into(), Value::Array(rules));
        }
        finish(t, &f.io, Some(&f.dist), &f.metrics)
    }

    pub fn load(path: &Path) -> Result<BalancerFile, ConfigError> {
        Self::parse(path, &read(path)?)
    }

    pub fn parse(path: &Path, src: &str) -> Result<BalancerFile, ConfigError> {
        let err = |at: usize, key: String, message: String| ConfigError {
            file: path.into(),
            line: line_of(src, at),
            key,
            message,
        };
        let raw: Raw = from_toml(path, src)?;
        refuse_flow_export(path, src, raw.flow_export.as_ref())?;
        let mut interfaces: Vec<LbInterface> = Vec::new();
        let cx = crate::config::At { path, src };
        let acls = cx.acls(&raw.acl)?;
        for (i, r) in raw.interface.iter().enumerate() {
            let mut ifc = lb_interface(&cx, r, i, &interfaces)?;
            ifc.filter = lb_filter(&cx, r, i, &acls)?;
            interfaces.push(ifc);
        }
        let has = |role| interfaces.iter().any(|x| x.role == role);
        if !has(PortRole::External) || !has(PortRole::Internal) {
            return Err(err(
                0,
                "interface".into(),
                "an LB needs at least one external and one internal [[interface]]".into(),
            ));
        }
        let internal = |s: &Spanned<String>, key: String| -> Result<u16, ConfigError> {
            interfaces
                .iter()
                .position(|x| &x.name == s.get_ref() && x.role == PortRole::Internal)
                .map(|p| p as u16)
                .ok_or_else(|| {
                    err(
                        s.span().start,
                        key,
                        format!("{:?} is not an internal interface of this LB", s.get_ref()),
                    )
                })
        };
        let mac = |s: &Spanned<String>, key: String| -> Result<MacAddr, ConfigError> {
            let m: MacAddr = s.get_ref().parse().map_err(|e| {
                err(
                    s.span().start,
                    key.clone(),
                    format!("{:?}: {e}", s.get_ref()),
                )
            })?;
            if m.is_multicast() || m.is_zero() {
                return Err(err(
                    s.span().start,
                    key,
                    format!("{m} is not a unicast MAC address"),
                ));
            }
            Ok(m)
        };
        let mut backends: Vec<(MacAddr, u16, u16)> = Vec::new();
        for (i, b) in raw.backend.iter().enumerate() {
            let m = mac(&b.mac, format!("backend[{i}].mac"))?;
            if backends.iter().any(|x| x.0 == m) {
                return Err(err(
                    b.mac.span().start,
                    format!("backend[{i}].mac"),
                    format!("back-end {m} is listed twice"),
                ));
            }
            let port = internal(&b.interface, format!("backend[{i}].interface"))?;
            if *b.weight.get_ref() == 0 {
                return Err(err(
                    b.weight.span().start,
                    format!("backend[{i}].weight"),
                    "weight 0: leave the back-end out instead".into(),
                ));
            }
            backends.push((m, port, *b.weight.get_ref()));
        }
        let virtual_cp = match &raw.virtual_cp {
            Some(v) => Some((
                mac(&v.mac, "virtual_cp.mac".into())?,
                internal(&v.interface, "virtual_cp.interface".into())?,
            )),
            None => None,
        };
        let spare = match &raw.spare {
            Some(sp) => {
                let peer = mac(&sp.peer, "spare.peer".into())?;
                if interfaces.iter().all(|i| i.role != PortRole::External) {
                    return Err(err(
                        sp.peer.span().start,
                        "spare.peer".into(),
                        "a spare pair serves an external network: this LB has no external interface".into(),
                    ));
                }
                if *sp.priority.get_ref() == 0 {
                    return Err(err(
                        sp.priority.span().start,
                        "spare.priority".into(),
                        "0 is not 1 to 255".into(),
                    ));
                }
                Some(dataplane::balancer::SpareConfig {
                    peer,
                    priority: *sp.priority.get_ref(),
                })
            }
            None => None,
        };
        let ms = |v: &Option<Spanned<u64>>,
                  key: &str,
                  default: Option<u64>|
         -> Result<Option<Duration>, ConfigError> {
            match v {
                Some(x) if !(10..=60_000).contains(x.get_ref()) => Err(err(
                    x.span().start,
                    key.into(),
                    format!("{} is not 10 to 60000", x.get_ref()),
                )),
                Some(x) => Ok(Some(Duration::from_millis(*x.get_ref()))),
                None => Ok(default.map(Duration::from_millis)),
            }
        };
        let hello_interval =
            ms(&raw.hello.interval_ms, "hello.interval_ms", Some(100))?.unwrap_or_default();
        let hello_timeout = ms(&raw.hello.timeout_ms, "hello.timeout_ms", None)?;
        let rules = lb_rules(&cx, &raw.rule)?;
        Ok(BalancerFile {
            acls,
            path: path.into(),
            interfaces,
            cfg: BalancerConfig {
                mode: raw.balance.mode,
                hello_interval,
                hello_timeout,
                virtual_cp,
                rules,
                spare,
            },
            backends,
            io: crate::config::IoConfig::from_raw(path, src, raw.io.as_ref())?,
            metrics: crate::config::RawMetrics::check(path, src, raw.metrics.as_ref())?,
            dist: crate::config::DistConfig::from_raw(path, src, raw.dist.as_ref())?,
        })
    }
}

/// `[[interface]]` number `i` of an LB's file, given the ones before it: an external one
/// with the router's address and its VLAN id on the interconnection, or an internal one
/// with neither.
fn lb_interface(
    cx: &crate::config::At,
    r: &RawInterface,
    i: usize,
    interfaces: &[LbInterface],
) -> Result<LbInterface, ConfigError> {
    let name = r.name.get_ref();
    let key = |k: &str| format!("interface[{i}].{k}");
    check_ifname(name).map_err(|m| cx.err(r.name.span().start, key("name"), m))?;
    if interfaces.iter().any(|x| &x.name == name) {
        return Err(cx.err(
            r.name.span().start,
            key("name"),
            format!("interface {name} is listed twice"),
        ));
    }
    let role = *r.role.get_ref();
    let mut ifc = LbInterface {
        name: name.clone(),
        role,
        addr: Ipv4Addr::UNSPECIFIED,
        prefix_len: 0,
        addrs6: Vec::new(),
        vlan: 0,
        filter: Default::default(),
    };
    match role {
        PortRole::External => {
            let a = r.address.as_ref().ok_or_else(|| {
                cx.err(
                    r.name.span().start,
                    key("address"),
                    "an external interface needs the router's address, like \"10.1.0.1/24\"".into(),
                )
            })?;
            let texts: Vec<&String> = match a.get_ref() {
                Via::One(t) => vec![t],
                Via::Many(v) => v.iter().collect(),
            };
            let mut v4 = Vec::new();
            for t in texts {
                if t.contains(':') {
                    ifc.addrs6
                        .push(cidr6(t).map_err(|m| cx.err(a.span().start, key("address"), m))?);
                } else {
                    let (ip, len) =
                        cidr(t).map_err(|m| cx.err(a.span().start, key("address"), m))?;
                    if ip.is_unspecified() {
                        return Err(cx.err(
                            a.span().start,
                            key("address"),
                            "0.0.0.0 is no interface's address".into(),
                        ));
                    }
                    v4.push((ip, len));
                }
            }
            // IPv6-only: the address stays 0.0.0.0 (no IPv4 network, no ARP).
            match v4[..] {
                [(addr, len)] => {
                    ifc.addr = addr;
                    ifc.prefix_len = len;
                }
                [] if !ifc.addrs6.is_empty() => {}
                _ => {
                    return Err(cx.err(
                        a.span().start,
                        key("address"),
                        "at most one IPv4 address and any IPv6 ones (at least one address), like [\"10.1.0.1/24\", \"2001:db8:1::1/64\"]".into(),
                    ))
                }
            }
            let v = r.vlan.as_ref().ok_or_else(|| {
                cx.err(
                    r.name.span().start,
                    key("vlan"),
                    "an external interface needs its VLAN id on the interconnection".into(),
                )
            })?;
            if !(1..=4094).contains(v.get_ref()) {
                return Err(cx.err(
                    v.span().start,
                    key("vlan"),
                    format!("{} is not 1 to 4094", v.get_ref()),
                ));
            }
            if interfaces.iter().any(|x| x.vlan == *v.get_ref()) {
                return Err(cx.err(
                    v.span().start,
                    key("vlan"),
                    format!("VLAN {} is already used by another interface", v.get_ref()),
                ));
            }
            ifc.vlan = *v.get_ref();
        }
        PortRole::Internal => {
            if let Some(a) = &r.address {
                return Err(cx.err(
                    a.span().start,
                    key("address"),
                    "internal interfaces have no address".into(),
                ));
            }
            if let Some(v) = &r.vlan {
                return Err(cx.err(
                    v.span().start,
                    key("vlan"),
                    "internal interfaces have no VLAN id".into(),
                ));
            }
        }
    }
    Ok(ifc)
}

/// `view` with the LB's filters' counts (`show acl`'s answer, for `/metrics`); the fast
/// path's frames and denials folded into `b`'s counters (the first worker's).
fn lb_view(
    view: crate::metrics::Source,
    b: &Balancer,
    fast: Option<&crate::lbfast::LbFast>,
) -> crate::metrics::Source {
    let fp = fast.map(|fl| fl.fp.clone());
    if let (Some(fl), Some(fp)) = (fast, fp.clone()) {
        let stats = fp.clone();
        crate::fast::fold(&b.counters, &fl.names, move || stats.stats());
        b.counters.fold_fast_drops(Arc::new(move || {
            vec![(
                dataplane::counters::Drop::AclDeny,
                crate::lbfast::LbFast::filter_denied(&fp),
            )]
        }));
    }
    crate::filters::view_with(view, b.filters.clone(), move |fl| {
        fp.as_ref()
            .map(|fp| crate::lbfast::LbFast::filter_counts(fp, fl))
    })
}

/// An LB interface's filter keys: lists on external interfaces only, no reverse-path
/// check (it needs routes, which the back-ends hold: set `urpf` on their sub-interfaces),
/// no `reject` (the LB sends no ICMP errors yet).
fn lb_filter(
    cx: &crate::config::At,
    r: &RawInterface,
    i: usize,
    acls: &[dataplane::acl::Acl],
) -> Result<crate::config::FilterConfig, ConfigError> {
    if let Some(u) = &r.urpf {
        return Err(cx.err(
            u.span().start,
            format!("interface[{i}].urpf"),
            "an LB has no routes for a reverse-path check: set urpf on the back-ends' sub-interfaces of this network (docs/filters.md)".into(),
        ));
    }
    let f = cx.filter_keys([r.acl_in.as_ref(), r.acl_out.as_ref()], None, None, i, acls)?;
    for (n, k) in [(&r.acl_in, "acl_in"), (&r.acl_out, "acl_out")] {
        let Some(n) = n else { continue };
        if *r.role.get_ref() != PortRole::External {
            return Err(cx.err(
                n.span().start,
                format!("interface[{i}].{k}"),
                "only an external interface filters (what crosses the router enters and leaves by those)".into(),
            ));
        }
        let list = acls.iter().find(|a| &a.name == n.get_ref());
        if let Some(j) = list.and_then(|l| {
            l.rules
                .iter()
                .position(|x| x.action == dataplane::acl::Action::Reject)
        }) {
            return Err(cx.err(
                n.span().start,
                format!("interface[{i}].{k}"),
                format!("access list {:?} rule {j} rejects, which an LB cannot answer yet (it sends no ICMP errors): use deny here", n.get_ref()),
            ));
        }
    }
    Ok(f)
}

/// The classifier's rules: the defaults, with the file's `[[rule]]`s first among rules as
/// specific as they are; a field that needs another (`arp_op` an ARP ethertype,
/// `protocol` IPv4's, `port` TCP or UDP) is an error.
fn lb_rules(cx: &crate::config::At, raw: &[Spanned<Rule>]) -> Result<Vec<Rule>, ConfigError> {
    let mut rules = default_rules();
    for (i, r) in raw.iter().enumerate() {
        let rr = r.get_ref();
        if rr.arp_op.is_some() && rr.ethertype != Some(wire::ethernet::ethertype::ARP) {
            return Err(cx.err(
                r.span().start,
                format!("rule[{i}].arp_op"),
                "needs ethertype = 0x0806".into(),
            ));
        }
        if rr.protocol.is_some() && rr.ethertype != Some(wire::ethernet::ethertype::IPV4) {
            return Err(cx.err(
                r.span().start,
                format!("rule[{i}].protocol"),
                "needs ethertype = 0x0800".into(),
            ));
        }
        if rr.port.is_some() && !matches!(rr.protocol, Some(6) | Some(17)) {
            return Err(cx.err(
                r.span().start,
                format!("rule[{i}].port"),
                "needs protocol = 6 (TCP) or 17 (UDP)".into(),
            ));
        }
        // Configured rules come first among rules as specific as they are.
        rules.insert(0, rr.clone());
    }
    Ok(rules)
}

/// Builds the LB from its configuration and its ports (one link per interface, in order).
pub fn build(cfg: &BalancerFile, links: &[Link]) -> Result<Balancer, String> {
    if links.len() != cfg.interfaces.len() {
        return Err(format!(
            "{} interfaces, {} ports",
            cfg.interfaces.len(),
            links.len()
        ));
    }
    let ports = cfg
        .interfaces
        .iter()
        .zip(links)
        .map(|(i, l)| LbPort {
            name: i.name.clone(),
            mac: l.mac,
            role: i.role,
            vlan: i.vlan,
            addr: i.addr,
            prefix_len: i.prefix_len,
            addrs6: i.addrs6.clone(),
            speed_mbps: l.speed_mbps,
        })
        .collect();
    let now = Instant::now();
    let mut b = Balancer::new(ports, cfg.cfg.clone(), now);
    b.filters = dataplane::acl::FilterShare::new(cfg.filters(None));
    b.dist_auth = dataplane::element::DistAuth {
        guard: cfg.dist.guard(),
        signer: Arc::new(cfg.dist.signer()),
    };
    b.set_backends(&cfg.backends, true, now);
    Ok(b)
}

/// The balancing table as `tessera show balance` prints it.
pub fn table_json(b: &Balancer, now: Instant) -> Value {
    json!({
        "mode": b.table.mode,
        "live": b.table.live(),
        "incarnation": format!("{:016x}", b.incarnation),
        "controller": b.controller.map(|m| m.to_string()),
        "digest": format!("{:016x}", b.table_digest()),
        "virtual_cp": b.cfg.virtual_cp.map(|(m, p)| json!({"mac": m.to_string(), "interface": b.ports[p as usize].name})),
        "spare": b.spare.as_ref().map(|s| json!({
            "role": if s.active { "active" } else if s.resuming { "resuming" } else { "standby" },
            "since_ms": now.saturating_duration_since(s.since).as_millis() as u64,
            "peer": s.cfg.peer.to_string(),
            "priority": s.cfg.priority,
            "peer_heard_ms": s.peer_seen.map(|t| now.saturating_duration_since(t).as_millis() as u64),
            "peer_active": s.peer_active,
            "peer_priority": s.peer_priority,
            "peer_left": s.peer_left,
            "handed_over": s.handed_over,
            "takeovers": s.takeovers,
            "stepdowns": s.stepdowns,
        })),
        "entries": b.table.entries.iter().map(|e| json!({
            "mac": e.mac.to_string(),
            "interface": b.ports.get(e.port as usize).map(|p| p.name.as_str()).unwrap_or("?"),
            "weight": e.weight,
            "live": e.live,
            "waiting_for_table": e.waiting,
            "incarnation": (e.incarnation != 0).then(|| format!("{:016x}", e.incarnation)),
            "packets": e.packets,
            "last_hello_ms": now.saturating_duration_since(e.seen).as_millis() as u64,
            "hello_interval_ms": e.interval.map(|i| i.as_millis() as u64),
        })).collect::<Vec<_>>(),
    })
}

fn answer(b: &mut Balancer, cmd: &str, _req: &Value) -> Value {
    match cmd {
        "balance" => table_json(b, Instant::now()),
        "interfaces" => Value::Array(
            b.ports
                .iter()
                .map(|p| {
                    let mut v = json!({"name": p.name, "mac": p.mac.to_string(), "role": p.role, "vlan": p.vlan, "address": (!p.addr.is_unspecified()).then(|| format!("{}/{}", p.addr, p.prefix_len))});
                    if !p.addrs6.is_empty() {
                        v["addresses6"] = json!(p.addrs6.iter().map(|(a, l)| format!("{a}/{l}")).collect::<Vec<_>>());
                    }
                    v
                })
                .collect(),
        ),
        "rules" => serde_json::to_value(&b.cfg.rules).unwrap_or(Value::Null),
        // A reload's classifier rules (every one, built-in and configured), in place.
        "set-rules" => match serde_json::from_value::<Vec<Rule>>(_req["rules"].clone()) {
            Ok(rules) => {
                b.set_rules(rules);
                serde_json::to_value(&b.cfg.rules).unwrap_or(Value::Null)
            }
            Err(e) => json!({ "error": format!("set-rules: {e}") }),
        },
        // A reload's back-ends: [[mac, port, weight], ...], the table replaced by them.
        "set-backends" => {
            let entries: Vec<(MacAddr, u16, u16)> = _req["entries"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| {
                    Some((
                        e[0].as_str()?.parse().ok()?,
                        e[1].as_u64()? as u16,
                        e[2].as_u64()? as u16,
                    ))
                })
                .collect();
            b.set_backends(&entries, true, Instant::now());
            table_json(b, Instant::now())
        }
        _ => Value::Null,
    }
}

/// Logs what the LB noted (back-ends down and up, DIST messages refused).
fn log_events(b: &mut Balancer) {
    for (_, e) in b.log.drain(..) {
        match e {
            LogEvent::Down(m) => {
                tracing::warn!(backend = %m, "back-end down: no hello within its timeout")
            }
            LogEvent::Up(m) => tracing::info!(backend = %m, "back-end up"),
            LogEvent::Waiting { mac, incarnation } => tracing::warn!(
                backend = %mac,
                incarnation = %format!("{incarnation:016x}"),
                "back-end holds no table from the controller yet (started or restarted): no flows to it until it does"
            ),
            LogEvent::Rejected { from, error } => {
                tracing::warn!(%from, %error, "DIST message not applied")
            }
        }
    }
}

/// Puts this LB's programs in the ports' links where a predecessor's still ran (its fast
/// path handed over), now that this LB's state is published; logs how many.
fn take_over(
    programs: &[(
        io::fastpath::lb::LbProgramFacts,
        Arc<io::xsk::AttachedShared>,
    )],
) {
    let mut taken = 0;
    for (facts, att) in programs {
        match att.take_over() {
            Ok(true) => taken += 1,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(port = facts.port, error = %e, "fast path: the predecessor's program not replaced")
            }
        }
    }
    if taken > 0 {
        tracing::info!(
            ports = taken,
            "fast path: taken over from this LB's last start"
        );
    }
}

/// The config file's text as this LB started from it (for `reload` to compare with), and
/// the config as the LB runs it (the last one a reload applied; `[io]` as the command
/// line left it, `io`), for `config`.
fn as_started(
    config: Option<&Path>,
    io: crate::config::IoConfig,
) -> (Option<String>, Arc<Mutex<Option<BalancerFile>>>) {
    let text = config.and_then(|p| std::fs::read_to_string(p).ok());
    let running = config
        .and_then(|p| BalancerFile::load(p).ok())
        .map(|f| BalancerFile { io, ..f });
    (text, Arc::new(Mutex::new(running)))
}

/// Takes the router's filters from the controller (docs/filters.md): the first worker
/// `b` hands whole sets to a thread that merges them with the file `running`'s filters.
fn filters_from_controller(
    b: &mut Balancer,
    running: &Arc<Mutex<Option<BalancerFile>>>,
    stop: &Arc<AtomicBool>,
) -> Result<crate::remote_filters::HeldShare, String> {
    let held = crate::remote_filters::HeldShare::default();
    let (link, fctl) = dataplane::acl::remote::FilterLink::pair();
    b.filter_input.link = Some(link);
    let (r, share) = (running.clone(), b.filters.clone());
    let apply = move |set: Option<&crate::config::RouterFilters>| {
        control::apply_filters(&r, &share, set).map(|_| ())
    };
    crate::remote_filters::serve(fctl, held.clone(), apply, stop.clone())
        .map_err(|e| e.to_string())?;
    Ok(held)
}

/// How [`run`] runs the LB: its `[io]` and `[metrics]` settings, the names of its external
/// interfaces (for the metrics) and its fast path, if it runs one.
pub struct RunWith {
    pub io: crate::config::IoConfig,
    pub metrics: crate::metrics::MetricsConfig,
    pub external: Vec<String>,
    pub fast: Option<crate::lbfast::LbFast>,
    /// Per port name, why its program does not carry the fast path (every port, when the
    /// element runs none).
    pub fast_off: std::collections::HashMap<String, String>,
    /// The config file, for `reload` and SIGHUP (None: nothing to reload).
    pub config: Option<std::path::PathBuf>,
    /// Per port that runs the fast path's XDP program: what its program was made from,
    /// and the interface's attachment, where a reload that changes the rules puts the
    /// next program.
    pub programs: Vec<(
        io::fastpath::lb::LbProgramFacts,
        Arc<io::xsk::AttachedShared>,
    )>,
}

/// What a reload of an LB may change in place: its back-ends and their weights, its
/// classifier rules (`[[rule]]`: the fast path's programs replaced in one step on each
/// port), and where `/metrics` is served (`[metrics] listen`).
pub const RELOADABLE: [&str; 4] = ["backend", "rule", "metrics", "acl"];

/// Runs the LB until `stop` is set: one worker per element of `ports` (the ports it owns:
/// one share of every interface's queues), the first on this thread, holding the LB's
/// state and answering the control socket, the others on threads of their own (see
/// [`Balancer::connect_workers`]). Returns the counters of all workers, summed, as they
/// stood at the end.
pub fn run<P: Port + Send>(
    mut b: Balancer,
    mut ports: Vec<Vec<P>>,
    control: Option<&Path>,
    stop: Arc<AtomicBool>,
    how: RunWith,
) -> Result<dataplane::counters::Snapshot, String> {
    let RunWith {
        io,
        metrics,
        external,
        mut fast,
        fast_off,
        config,
        programs,
    } = how;
    let (started_text, running) = as_started(config.as_deref(), io);
    let metrics = &metrics;
    if ports.is_empty() {
        return Err("no worker".into());
    }
    // Each port's link going down or coming up, logged once (crate::statelog).
    let mut names: Vec<String> = ports[0].iter().map(|p| p.name().to_string()).collect();
    names.dedup();
    crate::statelog::watch_links(names, stop.clone()).map_err(|e| format!("links: {e}"))?;
    // A member of a spare pair whose last start's fast path still runs in the links (a
    // restart within its grace) forwards on until the other LB's hello settles the roles
    // (dataplane::balancer::Balancer::resume_spare).
    if b.spare.is_some() && programs.iter().any(|(_, att)| att.takeover_pending()) {
        b.resume_spare(Instant::now());
        tracing::info!(
            "spare: resuming where this LB's last start left off, until the other LB is heard"
        );
    }
    if let Some(fl) = &mut fast {
        fl.publish(&b)?;
        // The standby of a spare pair balances nothing, from its first frame.
        if b.standby {
            fl.fp.suspend(true);
        }
    }
    // The state published: where a predecessor's programs still ran in the ports' links
    // (its fast path handed over), this LB's take their place now.
    take_over(&programs);
    let fast_view = fast
        .as_ref()
        .map(|fl| (fl.fp.clone(), fl.names.clone(), fl.egress.clone()));
    let now = Instant::now();
    b.start_clocks(now);
    let mut all = vec![b];
    for _ in 1..ports.len() {
        let w = all[0].worker(now);
        all.push(w);
    }
    Balancer::connect_workers(&mut all);
    let mut b = all.remove(0);
    let all_counters: Vec<Arc<dataplane::Counters>> = std::iter::once(b.counters.clone())
        .chain(all.iter().map(|w| w.counters.clone()))
        .collect();
    let counters = b.counters.clone();
    let at_end = all_counters.clone();
    let name = crate::metrics::element_name(metrics, control, "balancer");
    // The LB reports its counters to the controller under the same name.
    b.report.name = Some(name.clone());
    let view = crate::metrics::element_source(all_counters.clone(), name, "balancer", external);
    let filters = b.filters.clone();
    let held = filters_from_controller(&mut b, &running, &stop)?;
    let view = lb_view(view, &b, fast.as_ref());
    let metrics = crate::metrics::MetricsSlot::start(metrics, &view)?;
    let (qtx, qrx) = mpsc::channel::<Query>();
    let ctl = LbControl {
        config,
        started_text,
        running,
        io,
        asker: Mutex::new(qtx),
        counters: counters.clone(),
        all_counters,
        metrics: metrics.clone(),
        view,
        fast_view,
        fast_off,
        programs,
        filters,
        held,
    };
    let _server = {
        {
            let handler: ctlsock::Handler =
                Arc::new(move |cmd: &str, req: &Value| ctl.handle(cmd, req));
            // SIGHUP reloads, as `tessera reload` does.
            crate::run::reload_on_sighup(handler.clone(), stop.clone())?;
            match control {
                Some(path) => Some(ctlsock::serve(path, handler).map_err(|e| e.to_string())?),
                None => None,
            }
        }
    };
    let mine = ports.remove(0);
    let busy = io.busy_poll;
    std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for (i, (w, ports)) in all.into_iter().zip(ports).enumerate() {
            let stop = stop.clone();
            let h = std::thread::Builder::new()
                .name(format!("worker-{}", i + 1))
                .spawn_scoped(scope, move || {
                    // Nobody asks the other workers anything: they follow the first's
                    // captures.
                    let r = crate::run::enter_worker(&io, i + 1).and_then(|()| {
                        run_element(
                            w,
                            ports,
                            stop.clone(),
                            None,
                            answer,
                            |b| b.log.clear(),
                            busy,
                        )
                    });
                    // One worker failing ends them all: the LB is one process.
                    stop.store(true, Ordering::Relaxed);
                    r
                })
                .map_err(|e| e.to_string())?;
            handles.push(h);
        }
        // The first worker logs what happened and keeps the fast path in step.
        let tick = move |b: &mut Balancer| {
            log_events(b);
            if let Some(fl) = &mut fast {
                fl.sync(b);
            }
        };
        let lead = b.counters.clone();
        let r = crate::run::enter_worker(&io, 0)
            .and_then(|()| run_element(b, mine, stop.clone(), Some(qrx), answer, tick, busy));
        stop.store(true, Ordering::Relaxed);
        if lead.events(dataplane::counters::Event::SpareFarewells) > 0 {
            tracing::info!(
                "spare: told the other LB that this one is going (a last hello): it takes over now"
            );
        }
        for h in handles {
            h.join().map_err(|_| "a worker panicked".to_string())??;
        }
        r
    })?;
    dataplane::counters::Snapshot::sum(&at_end).ok_or_else(|| "no worker".into())
}

#[cfg(test)]
mod tests;
