//! The Virtual-CP: `tessera controller`, the control plane of a multistage router.
//!
//! It owns one port on the interconnection and does four things there:
//! - **discovers** the elements from their DIST hellos (kind, ports, link speeds) and
//!   forgets one whose hellos stop for three of its intervals;
//! - **configures the LBs**: each live back-end with a weight proportional to its
//!   interconnection link's speed (its capacity), and itself as the Virtual-CP;
//! - **holds the authoritative FIB** ([`Fib`]): routes from the routing suite over FPM
//!   ([`FpmState`], fed by zebra's `dplane_fpm_nl`), from its config file, and from the
//!   control socket (`route-add`, `route-del`);
//! - **distributes** it to every back-end ([`Distributor`], docs/dist.md), and shows each
//!   back-end's version and digest (`tessera show fib`).
//!
//! The FPM reader runs on its own thread and only writes the table, so it never waits for
//! a back-end; the port's thread sends what the back-ends are missing.
//!
//! ```toml
//! # routes_file = "table.mrt.gz"  # optional: a table loaded at start (see ControllerFile)
//! # routes_file_via = "10.2.0.2"   # every route of it through this gateway (or list)
//!
//! [controller]
//! interface = "vcp-int"        # the interconnection port
//! hello_interval_ms = 100      # this controller's hellos; element timeouts use theirs
//! priority = 100               # election: the highest of those starting together is
//!                              # active, the others stand by (docs/dist.md)
//! configure_lbs = true         # send balance and virtual-cp messages to the LBs
//! terminate = true             # a TAP per external network (from the LBs' hellos), with
//!                              # its VLAN's address and LB MAC, for the routing suite
//!
//! [fpm]                        # optional: take routes from a routing suite
//! listen = "127.0.0.1:2620"    # where zebra's dplane_fpm_nl connects
//! settle_ms = 15000            # after a (re)connection: quiet time that ends the resend
//!
//! [takeover]                   # optional: what a standby does when it takes over
//! ospf_router_id = "10.255.0.1"  # send a Grace-LSA (RFC 3623) as this OSPF router on
//!                              # every external network: neighbours keep their routes
//! ospf_area = "0.0.0.0"        # the area of those networks
//! ospf_grace_period_s = 120    # how long they help
//! on_active = ["/usr/local/bin/start-protocols"]  # run on becoming active (with
//!                              # TESSERA_TAKEOVER=1 on a takeover): starts the
//!                              # routing protocols of a controller that stood by
//! on_standby = ["/usr/local/bin/stop-protocols"]  # run on standing down from active
//!
//! [[route]]                    # optional static routes, like a forwarder's
//! prefix = "198.51.100.0/24"
//! via = "10.2.0.2"             # an IPv6 route's link-local gateway names its external
//!                              # network: via = "fe80::1%vlan20"
//!
//! [io]                         # as for every element
//! backend = "auto"
//! ```

use crate::config::{from_toml, line_of, read, ConfigError, IoConfig, RawIo};
use crate::distrib::{gateways, Distributor, Fib, Gateways, Net};
use dataplane::buf::{Pkt, Pool};
use dataplane::port::Port;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use toml::Spanned;
use wire::dist::{self, ElementKind};
use wire::fpm::{self, RouteVia};
use wire::MacAddr;

/// Default `[fpm] settle_ms`. After zebra restarts, it reconnects to FPM and sends its
/// connected routes at once, but staticd's (and bgpd's) routes come back only when those
/// daemons have reconnected to zebra: 5.5 s later in the lab (FRR 8.4). A shorter quiet
/// time swept them in between, and the back-ends lost them for seconds.
pub const DEFAULT_SETTLE_MS: u64 = 15_000;

/// How long the distribution state of an element that fell silent is kept.
pub const DIST_GRACE: Duration = Duration::from_secs(10);

/// Default `[controller] priority`.
pub const DEFAULT_PRIORITY: u8 = 100;

/// Changes the controller keeps in its log (older back-ends get a snapshot).
pub const LOG_CAP: usize = 2_000_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    routes_file: Option<Spanned<String>>,
    routes_file_via: Option<Spanned<crate::config::Via>>,
    controller: RawController,
    fpm: Option<RawFpm>,
    #[serde(default)]
    route: Vec<RawRoute>,
    io: Option<RawIo>,
    dist: Option<crate::config::RawDist>,
    takeover: Option<RawTakeover>,
    metrics: Option<crate::config::RawMetrics>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTakeover {
    ospf_router_id: Option<Spanned<String>>,
    ospf_area: Option<Spanned<String>>,
    ospf_grace_period_s: Option<Spanned<i64>>,
    on_active: Option<Spanned<Vec<String>>>,
    on_standby: Option<Spanned<Vec<String>>>,
}

/// What a standby that takes over announces for the routing suite (`[takeover]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OspfGrace {
    pub router_id: Ipv4Addr,
    pub area: Ipv4Addr,
    pub grace_period_s: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawController {
    interface: Spanned<String>,
    hello_interval_ms: Option<Spanned<u64>>,
    configure_lbs: Option<bool>,
    terminate: Option<bool>,
    priority: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFpm {
    listen: Spanned<String>,
    settle_ms: Option<Spanned<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    prefix: Spanned<String>,
    via: Spanned<crate::config::Via>,
}

/// The controller's configuration.
#[derive(Debug, Clone)]
pub struct ControllerFile {
    pub path: PathBuf,
    pub interface: String,
    pub hello_interval: Duration,
    /// Election priority (`[controller] priority`, 0 to 255): of the controllers that
    /// start together, the highest becomes active (docs/dist.md, "Controller election").
    pub priority: u8,
    pub configure_lbs: bool,
    /// Present each external network as a TAP (protocol termination).
    pub terminate: bool,
    pub fpm_listen: Option<SocketAddr>,
    pub fpm_settle: Duration,
    /// `[[route]]`s of either family.
    pub routes: Vec<(Net, Gateways)>,
    /// A table loaded at start: text ("PREFIX GATEWAY..." per line), or with
    /// `routes_file_via` any table the forwarder reads (text, MRT, gzip, bzip2), every route
    /// through those gateways.
    pub routes_file: Option<PathBuf>,
    pub routes_file_via: Vec<Ipv4Addr>,
    pub io: IoConfig,
    pub dist: crate::config::DistConfig,
    /// `[metrics]`: where the router view is served to Prometheus.
    pub metrics: crate::metrics::MetricsConfig,
    /// `[takeover] ospf_router_id`: on taking over, send a Grace-LSA as this router on
    /// every external network, so that its OSPF neighbours help it restart.
    pub ospf_grace: Option<OspfGrace>,
    /// `[takeover] on_active`: a command (argv) run each time this controller becomes
    /// active, as keepalived's notify scripts are: it starts the routing protocols of a
    /// controller that may stand by. `TESSERA_TAKEOVER=1` is set in its environment when
    /// the controller takes over from another.
    pub on_active: Vec<String>,
    /// `[takeover] on_standby`: run when this controller stands down from active (it
    /// heard a higher-ranked active one): stops what `on_active` started.
    pub on_standby: Vec<String>,
}

impl ControllerFile {
    pub fn load(path: &Path) -> Result<ControllerFile, ConfigError> {
        Self::parse(path, &read(path)?)
    }

    pub fn parse(path: &Path, src: &str) -> Result<ControllerFile, ConfigError> {
        let err = |at: usize, key: &str, message: String| ConfigError {
            file: path.into(),
            line: line_of(src, at),
            key: key.into(),
            message,
        };
        let raw: Raw = from_toml(path, src)?;
        let c = &raw.controller;
        crate::config::check_ifname(c.interface.get_ref())
            .map_err(|m| err(c.interface.span().start, "controller.interface", m))?;
        let hello_interval = match &c.hello_interval_ms {
            Some(h) if !(10..=60_000).contains(h.get_ref()) => {
                return Err(err(
                    h.span().start,
                    "controller.hello_interval_ms",
                    "must be 10 to 60000".into(),
                ))
            }
            Some(h) => Duration::from_millis(*h.get_ref()),
            None => Duration::from_millis(100),
        };
        let priority = match &c.priority {
            Some(p) => u8::try_from(*p.get_ref()).map_err(|_| {
                err(
                    p.span().start,
                    "controller.priority",
                    "must be 0 to 255".into(),
                )
            })?,
            None => DEFAULT_PRIORITY,
        };
        let mut ospf_grace = None;
        let (mut on_active, mut on_standby) = (Vec::new(), Vec::new());
        if let Some(t) = &raw.takeover {
            for (v, key, out) in [
                (&t.on_active, "takeover.on_active", &mut on_active),
                (&t.on_standby, "takeover.on_standby", &mut on_standby),
            ] {
                if let Some(a) = v {
                    if a.get_ref().is_empty() || a.get_ref()[0].is_empty() {
                        return Err(err(
                            a.span().start,
                            key,
                            "needs a program and its arguments, like [\"/usr/local/bin/start-protocols\"]".into(),
                        ));
                    }
                    *out = a.get_ref().clone();
                }
            }
            let addr =
                |v: &Option<Spanned<String>>, key: &str| -> Result<Option<Ipv4Addr>, ConfigError> {
                    v.as_ref()
                        .map(|s| {
                            s.get_ref().parse().map_err(|_| {
                                err(
                                    s.span().start,
                                    key,
                                    format!("{:?} is not a dotted IPv4 address", s.get_ref()),
                                )
                            })
                        })
                        .transpose()
                };
            let area = addr(&t.ospf_area, "takeover.ospf_area")?.unwrap_or(Ipv4Addr::UNSPECIFIED);
            let grace_period_s = match &t.ospf_grace_period_s {
                Some(g) if !(1..=1800).contains(g.get_ref()) => {
                    return Err(err(
                        g.span().start,
                        "takeover.ospf_grace_period_s",
                        "must be 1 to 1800".into(),
                    ))
                }
                Some(g) => *g.get_ref() as u32,
                None => 120,
            };
            if let Some(router_id) = addr(&t.ospf_router_id, "takeover.ospf_router_id")? {
                ospf_grace = Some(OspfGrace {
                    router_id,
                    area,
                    grace_period_s,
                });
            }
        }
        let (mut fpm_listen, mut fpm_settle) = (None, Duration::from_millis(DEFAULT_SETTLE_MS));
        if let Some(f) = &raw.fpm {
            fpm_listen = Some(f.listen.get_ref().parse().map_err(|_| {
                err(
                    f.listen.span().start,
                    "fpm.listen",
                    format!("{:?} is not ADDRESS:PORT", f.listen.get_ref()),
                )
            })?);
            if let Some(s) = &f.settle_ms {
                if !(10..=600_000).contains(s.get_ref()) {
                    return Err(err(
                        s.span().start,
                        "fpm.settle_ms",
                        "must be 10 to 600000".into(),
                    ));
                }
                fpm_settle = Duration::from_millis(*s.get_ref());
            }
        }
        let mut routes = Vec::new();
        for (i, r) in raw.route.iter().enumerate() {
            let prefix = Net::parse_strict(r.prefix.get_ref()).map_err(|e| {
                err(
                    r.prefix.span().start,
                    &format!("route[{i}].prefix"),
                    e.to_string(),
                )
            })?;
            let key = format!("route[{i}].via");
            let via = match prefix {
                Net::V4(_) => r.via.get_ref().addresses().map(gateways),
                Net::V6(_) => r.via.get_ref().addresses6_scoped().map(gateways),
            }
            .map_err(|m| err(r.via.span().start, &key, m))?;
            routes.push((prefix, via));
        }
        let routes_file = crate::config::routes_file_path(path, src, raw.routes_file.as_ref())?;
        let routes_file_via = match &raw.routes_file_via {
            Some(v) if raw.routes_file.is_none() => {
                return Err(err(
                    v.span().start,
                    "routes_file_via",
                    "set without routes_file".into(),
                ))
            }
            Some(v) => v
                .get_ref()
                .addresses()
                .map_err(|m| err(v.span().start, "routes_file_via", m))?,
            None => Vec::new(),
        };
        Ok(ControllerFile {
            routes_file,
            routes_file_via,
            path: path.into(),
            interface: c.interface.get_ref().clone(),
            hello_interval,
            priority,
            configure_lbs: c.configure_lbs.unwrap_or(true),
            terminate: c.terminate.unwrap_or(true),
            fpm_listen,
            fpm_settle,
            routes,
            io: IoConfig::from_raw(path, src, raw.io.as_ref())?,
            dist: crate::config::DistConfig::from_raw(path, src, raw.dist.as_ref())?,
            metrics: crate::config::RawMetrics::check(path, src, raw.metrics.as_ref())?,
            ospf_grace,
            on_active,
            on_standby,
        })
    }
}

/// What the FPM reader has counted.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FpmStats {
    pub connected: bool,
    pub connections: u64,
    pub frames: u64,
    pub messages: u64,
    pub route_adds: u64,
    pub route_deletes: u64,
    pub nexthops: u64,
    /// Frames or messages that did not parse (skipped; the stream goes on).
    pub malformed: u64,
    /// Routes not taken, by reason.
    /// IPv6 routes whose gateways are all link-local on interfaces that are no TAP
    /// `vlan<ID>` (the back-ends have no such link; docs/virtual-cp.md).
    pub skipped_ipv6: u64,
    pub skipped_other_table: u64,
    pub skipped_not_unicast: u64,
    /// Routes with no gateway (connected networks: the back-ends have their own).
    pub skipped_no_gateway: u64,
    /// Routes through a next-hop object zebra has not sent (held until it comes).
    pub unknown_nexthop: u64,
    /// Routes removed by the sweep after a reconnection (zebra no longer has them).
    pub swept: u64,
    /// Routes from zebra held now.
    pub routes: u64,
    /// Routes marked stale by the last reconnection and not yet resent.
    pub stale: u64,
    /// Milliseconds from the first message of the current connection to the last.
    pub last_burst_ms: u64,
}

#[derive(Debug, Clone)]
struct Nh {
    gateway: Option<std::net::IpAddr>,
    /// The gateway's interface (a TAP `vlan<ID>` for the router's external networks).
    ifindex: u32,
    group: Vec<u32>,
}

fn is_link_local(a: &std::net::IpAddr) -> bool {
    matches!(a, std::net::IpAddr::V6(v) if v.segments()[0] & 0xffc0 == 0xfe80)
}

/// zebra's view, as its FPM stream tells it, and what it makes of the [`Fib`].
#[derive(Default)]
pub struct FpmState {
    nexthops: HashMap<u32, Nh>,
    routes: HashMap<Net, RouteVia>,
    /// Routes of the table (either family) that zebra has not sent again yet.
    stale: HashSet<Net>,
    /// The VLAN of each TAP (`vlan<ID>`) by interface index, learnt from the interface's
    /// name when a link-local gateway first names it.
    scopes: HashMap<u32, u16>,
    pub stats: FpmStats,
}

impl FpmState {
    /// Tells which VLAN the interface `ifindex` is (what [`FpmState::resolve`] otherwise
    /// learns from the name of a TAP `vlan<ID>`).
    pub fn set_scope(&mut self, ifindex: u32, vlan: u16) {
        self.scopes.insert(ifindex, vlan);
    }

    /// The VLAN of the TAP with index `ifindex`, if it is one.
    fn scope(&mut self, ifindex: u32) -> Option<u16> {
        if let Some(&v) = self.scopes.get(&ifindex) {
            return Some(v);
        }
        let name = io::netdev::ifname(ifindex)?;
        let v: u16 = name.strip_prefix("vlan")?.parse().ok()?;
        if !(1..=4094).contains(&v) {
            return None;
        }
        self.scopes.insert(ifindex, v);
        Some(v)
    }

    /// A route's gateways, each with its interface (0 where none is known).
    fn hops(&self, via: &RouteVia) -> Vec<(std::net::IpAddr, u32)> {
        match via {
            RouteVia::Inline {
                gateways,
                ifindexes,
                ..
            } => gateways
                .iter()
                .zip(ifindexes.iter().chain(std::iter::repeat(&0)))
                .map(|(g, i)| (*g, *i))
                .collect(),
            RouteVia::Object(id) => {
                let Some(nh) = self.nexthops.get(id) else {
                    return Vec::new();
                };
                let hop = |n: &Nh| n.gateway.map(|g| (g, n.ifindex));
                if nh.group.is_empty() {
                    hop(nh).into_iter().collect()
                } else {
                    nh.group
                        .iter()
                        .filter_map(|m| self.nexthops.get(m).and_then(hop))
                        .collect()
                }
            }
        }
    }

    /// The gateways of a route (none for a connected or unknown next hop). An IPv6
    /// link-local gateway names its interface; on a TAP `vlan<ID>` it is distributed with
    /// that VLAN written in it (`wire::ipv6::scoped_link_local`: a routes message names
    /// no interface), so that a back-end resolves it on that VLAN. One on any other
    /// interface is left out: the back-ends have no such link.
    fn resolve(&mut self, via: &RouteVia) -> Option<Gateways> {
        let mut g = Vec::new();
        for (a, ifindex) in self.hops(via) {
            match a {
                std::net::IpAddr::V6(v) if is_link_local(&a) => {
                    if wire::ipv6::link_local_scope(v).is_some() {
                        // Scoped already (a route kept across a reconnection).
                        g.push(a);
                    } else if let Some(vlan) = self.scope(ifindex) {
                        g.push(wire::ipv6::scoped_link_local(v, vlan).into());
                    }
                }
                _ => g.push(a),
            }
        }
        (!g.is_empty()).then(|| gateways(g))
    }

    /// Whether a route's gateways are all IPv6 link-local ones (see [`FpmState::resolve`]).
    fn link_local_only(&self, via: &RouteVia) -> bool {
        let h = self.hops(via);
        !h.is_empty() && h.iter().all(|(a, _)| is_link_local(a))
    }

    /// A new connection: zebra will send its whole table again. What it held is kept
    /// (the back-ends go on forwarding) but marked stale until resent.
    pub fn connection(&mut self) {
        self.stale = self.routes.keys().copied().collect();
        // The new zebra numbers its next-hop objects afresh, and may give an old id to
        // another object: routes held through objects keep the gateways they had.
        let objects: Vec<(Net, RouteVia)> = self
            .routes
            .iter()
            .filter(|(_, v)| matches!(v, RouteVia::Object(_)))
            .map(|(p, v)| (*p, v.clone()))
            .collect();
        let frozen: Vec<(Net, RouteVia)> = objects
            .into_iter()
            .map(|(p, v)| {
                let gateways = self.resolve(&v).map(|g| g.to_vec()).unwrap_or_default();
                (
                    p,
                    RouteVia::Inline {
                        ifindexes: vec![0; gateways.len()],
                        gateways,
                        direct: 0,
                    },
                )
            })
            .collect();
        self.routes.extend(frozen);
        self.nexthops.clear();
        self.stats.connections += 1;
        self.stats.stale = self.stale.len() as u64;
    }

    /// A takeover: `fib` holds the mirrored table, `own` the new controller's routes
    /// (config and zebra), which go over it; mirrored routes not among them are stale
    /// until the stream settles.
    pub fn adopt(&mut self, fib: &mut Fib, own: Vec<(Net, Gateways)>) {
        let mine: HashSet<Net> = own.iter().map(|(p, _)| *p).collect();
        self.stale = fib
            .prefixes()
            .filter(|p| !mine.contains(p))
            .copied()
            .collect();
        for (p, g) in own {
            fib.set(p, Some(g));
        }
        self.stats.stale = self.stale.len() as u64;
    }

    /// The resend has settled: routes still stale are gone from zebra.
    pub fn sweep(&mut self, fib: &mut Fib) {
        for p in std::mem::take(&mut self.stale) {
            self.routes.remove(&p);
            fib.set(p, None);
            self.stats.swept += 1;
        }
        self.stats.stale = 0;
        self.stats.routes = self.routes.len() as u64;
    }

    /// Applies the messages of one FPM frame. Changes of one prefix within a frame (a
    /// delete then a new route: zebra's replace) reach the table as one change.
    pub fn frame(&mut self, msgs: Vec<fpm::Message>, fib: &mut Fib) {
        self.stats.frames += 1;
        let mut touched: Vec<Net> = Vec::new();
        let mut nh_changed: HashSet<u32> = HashSet::new();
        for m in msgs {
            self.stats.messages += 1;
            match m {
                fpm::Message::Nexthop(n) => {
                    self.stats.nexthops += 1;
                    nh_changed.insert(n.id);
                    if n.add && !n.blackhole {
                        self.nexthops.insert(
                            n.id,
                            Nh {
                                gateway: n.gateway,
                                ifindex: n.ifindex,
                                group: n.group,
                            },
                        );
                    } else {
                        self.nexthops.remove(&n.id);
                    }
                }
                fpm::Message::Route(r) => {
                    if !matches!(r.family, fpm::Family::Ipv4 | fpm::Family::Ipv6) {
                        continue;
                    }
                    if r.table != 254 {
                        self.stats.skipped_other_table += 1;
                        continue;
                    }
                    let p = Net::new(r.dst, r.dst_len);
                    if r.add && r.rtype != fpm::nl::RTN_UNICAST {
                        self.stats.skipped_not_unicast += 1;
                        continue;
                    }
                    self.stale.remove(&p);
                    if r.add {
                        self.stats.route_adds += 1;
                        self.routes.insert(p, r.via);
                    } else {
                        self.stats.route_deletes += 1;
                        self.routes.remove(&p);
                    }
                    touched.push(p);
                }
                fpm::Message::Other(_) => {}
            }
        }
        if !nh_changed.is_empty() {
            let uses = |v: &RouteVia| match v {
                RouteVia::Object(id) => {
                    nh_changed.contains(id)
                        || self
                            .nexthops
                            .get(id)
                            .is_some_and(|n| n.group.iter().any(|m| nh_changed.contains(m)))
                }
                RouteVia::Inline { .. } => false,
            };
            touched.extend(self.routes.iter().filter(|(_, v)| uses(v)).map(|(p, _)| *p));
        }
        touched.sort_unstable_by_key(|p| p.sort_key());
        touched.dedup();
        for p in touched {
            let want = match self.routes.get(&p).cloned() {
                None => None,
                Some(v) => {
                    let g = self.resolve(&v);
                    if g.is_none() {
                        match v {
                            RouteVia::Object(_) if !self.has_object(&v) => {
                                self.stats.unknown_nexthop += 1
                            }
                            _ if self.link_local_only(&v) => self.stats.skipped_ipv6 += 1,
                            _ => self.stats.skipped_no_gateway += 1,
                        }
                    }
                    g
                }
            };
            fib.set(p, want);
        }
        self.stats.routes = self.routes.len() as u64;
        self.stats.stale = self.stale.len() as u64;
    }

    fn has_object(&self, v: &RouteVia) -> bool {
        match v {
            RouteVia::Object(id) => self.nexthops.contains_key(id),
            RouteVia::Inline { .. } => true,
        }
    }
}

/// A standby that has just become active: the table of its new epoch is its mirror of
/// the old active controller's (what the back-ends hold, so they go on forwarding the same
/// routes), with its own table over it (`fib`: its config's routes and what its zebra has
/// sent). Mirrored routes it does not have are stale until zebra's stream settles and then
/// swept, as after a zebra reconnection: its routing suite re-learns them meanwhile.
pub fn take_over(c: &mut Controller, fpm: &mut FpmState, fib: &mut Fib, resettle: &AtomicBool) {
    let t = Instant::now();
    let epoch = unix_secs()
        .max(c.mirror.epoch.saturating_add(1))
        .max(fib.epoch().saturating_add(1));
    let mut new = Fib::new(epoch, LOG_CAP);
    for (p, g) in c.mirror.routes() {
        new.set(*p, Some(g.clone()));
    }
    let mirrored = new.len();
    let own: Vec<(Net, Gateways)> = fib
        .prefixes()
        .filter_map(|p| fib.get(*p).map(|g| (*p, g.clone())))
        .collect();
    fpm.adopt(&mut new, own);
    tracing::warn!(
        epoch,
        mirrored,
        routes = new.len(),
        stale = fpm.stats.stale,
        ms = t.elapsed().as_millis() as u64,
        "took over: new epoch from the mirrored table"
    );
    *fib = new;
    c.hold = None;
    c.takeover_pending = false;
    resettle.store(true, Ordering::Relaxed);
}

/// Seconds since the Unix epoch (a new controller epoch), at least 1.
fn unix_secs() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(1)
        .max(1)
}

/// The shared state of a running controller.
pub struct Shared {
    pub fib: Mutex<Fib>,
    pub fpm: Mutex<FpmState>,
    /// Set once zebra's first resend has arrived (see [`Controller::hold`]).
    pub fpm_synced: Arc<AtomicBool>,
    /// Set by a takeover ([`take_over`]): the FPM reader starts its settle time again and
    /// then sweeps the routes zebra has not sent.
    pub resettle: AtomicBool,
}

/// Quiet on the first FPM connection after which zebra's initial resend is taken as whole.
pub const FPM_INITIAL_QUIET: Duration = Duration::from_secs(1);

/// Serves one FPM connection at a time on `listener`; a new connection replaces the old.
/// Returns when `stop` is set.
pub fn serve_fpm(
    listener: TcpListener,
    shared: Arc<Shared>,
    settle: Duration,
    stop: Arc<AtomicBool>,
) {
    listener.set_nonblocking(true).ok();
    let mut conn: Option<std::net::TcpStream> = None;
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut chunk = vec![0u8; 1 << 16];
    let mut last_msg = Instant::now();
    let mut first_msg: Option<Instant> = None;
    let mut swept = true;
    while !stop.load(Ordering::Relaxed) {
        if shared.resettle.swap(false, Ordering::Relaxed) {
            swept = false;
            last_msg = Instant::now();
        }
        if let Ok((s, peer)) = listener.accept() {
            tracing::info!(%peer, "FPM connection: marking routes stale until zebra resends them");
            s.set_nonblocking(false).ok();
            s.set_read_timeout(Some(Duration::from_millis(50))).ok();
            conn = Some(s);
            buf.clear();
            if let Ok(mut f) = shared.fpm.lock() {
                f.connection();
                f.stats.connected = true;
            }
            last_msg = Instant::now();
            first_msg = None;
            swept = false;
        }
        let Some(s) = conn.as_mut() else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        match s.read(&mut chunk) {
            Ok(0) => {
                tracing::warn!(
                    "FPM connection closed; routes kept until zebra reconnects and resends"
                );
                conn = None;
                if let Ok(mut f) = shared.fpm.lock() {
                    f.stats.connected = false;
                }
                continue;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => {
                tracing::warn!(error = %e, "FPM connection failed");
                conn = None;
                continue;
            }
        }
        let mut at = 0;
        let mut frames = Vec::new();
        let mut broken = false;
        loop {
            match fpm::split_frame(&buf[at..]) {
                Ok(Some((len, payload))) => {
                    frames.push(fpm::messages(payload));
                    at += len;
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::error!(error = %e, "FPM stream cannot be resynchronised: closing the connection");
                    broken = true;
                    break;
                }
            }
        }
        buf.drain(..at);
        if !frames.is_empty() {
            let now = Instant::now();
            last_msg = now;
            let first = *first_msg.get_or_insert(now);
            if let (Ok(mut f), Ok(mut fib)) = (shared.fpm.lock(), shared.fib.lock()) {
                for fr in frames {
                    match fr {
                        Ok(msgs) => f.frame(msgs, &mut fib),
                        Err(e) => {
                            f.stats.malformed += 1;
                            tracing::warn!(error = %e, "FPM frame skipped");
                        }
                    }
                }
                f.stats.last_burst_ms = now.duration_since(first).as_millis() as u64;
            }
        }
        if broken {
            conn = None;
            if let Ok(mut f) = shared.fpm.lock() {
                f.stats.malformed += 1;
                f.stats.connected = false;
            }
            continue;
        }
        if first_msg.is_some()
            && last_msg.elapsed() >= FPM_INITIAL_QUIET
            && !shared.fpm_synced.swap(true, Ordering::Relaxed)
        {
            tracing::info!("zebra's first resend is in: distribution may start");
        }
        if !swept && last_msg.elapsed() >= settle {
            swept = true;
            if let (Ok(mut f), Ok(mut fib)) = (shared.fpm.lock(), shared.fib.lock()) {
                let n = f.stale.len();
                f.sweep(&mut fib);
                tracing::info!(swept = n, routes = fib.len(), "FPM resend settled");
            }
        }
    }
}

/// An element the controller has heard from.
#[derive(Debug, Clone)]
pub struct ElementInfo {
    pub kind: ElementKind,
    pub ports: Vec<dist::HelloPort>,
    /// The IPv6 addresses its last hello listed, by port.
    pub addrs6: Vec<dist::HelloAddr6>,
    pub interval: Duration,
    pub last_seen: Instant,
    pub since: Instant,
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub dropped: u64,
    /// A controller's election priority and whether it says it is active.
    pub priority: u8,
    pub active: bool,
    /// The state block of its last hello: its incarnation and the table it holds.
    pub state: Option<dist::HelloState>,
}

impl ElementInfo {
    /// False for a back-end whose hellos say it holds no table of a controller yet (it
    /// started or restarted): the LBs give it no flows until it does.
    fn holds_table(&self) -> bool {
        self.state.is_none_or(|s| s.table)
    }

    /// The capacity a back-end advertises: the speed of its internal port (Mbit/s; 0 unknown).
    fn capacity_mbps(&self) -> u32 {
        self.ports
            .iter()
            .find(|p| p.role == dist::PortRole::Internal)
            .map_or(0, |p| p.speed_mbps)
    }
}

/// Weight of a back-end in the LBs' tables: its capacity in units of 100 Mbit/s (1 when
/// unknown), so back-ends of unequal capacity get proportional shares.
pub fn weight_for(capacity_mbps: u32) -> u16 {
    (capacity_mbps / 100).clamp(1, u16::MAX as u32) as u16
}

/// The controller's counters (one writer: its thread).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ControllerStats {
    pub dist_received: u64,
    /// Counter reports received from elements (and from unknown MACs: ignored).
    pub reports_received: u64,
    pub reports_unknown: u64,
    pub dist_malformed: u64,
    /// DIST frames dropped by authentication ([dist] key_file): without a valid seal under
    /// this key id, with a wrong tag, replayed, or older than max_age_s.
    pub dist_unauthenticated: u64,
    pub dist_forged: u64,
    pub dist_replayed: u64,
    pub dist_stale: u64,
    pub hellos_received: u64,
    pub acks_received: u64,
    /// Acknowledgements from a MAC that is no known back-end.
    pub acks_unknown: u64,
    pub routes_messages_sent: u64,
    pub balance_messages_sent: u64,
    pub hellos_sent: u64,
    /// Frames from the LBs (tagged with an external network's VLAN) written to its TAP.
    pub tap_in: u64,
    /// Frames the routing suite sent on a TAP, sent tagged to the LBs.
    pub tap_out: u64,
    /// TAP writes that failed, and TAPs that could not be created.
    pub tap_errors: u64,
    /// Frames for none of the above (untagged non-DIST, another station's unicast, or a
    /// VLAN with no TAP): ignored.
    pub other_frames: u64,
    pub tx_errors: u64,
    pub elements_up: u64,
    pub elements_down: u64,
    /// Routes messages received by a standby from the active controller (its mirror).
    pub mirror_messages: u64,
    /// Routes messages not from the active controller, or received while not standby.
    pub routes_ignored: u64,
    /// Frames the routing suite sent on a TAP while this controller stood by (dropped:
    /// only the active controller speaks for the router).
    pub tap_out_standby: u64,
    /// Times this controller became active, and stood down for a better active one.
    pub takeovers: u64,
    pub stepdowns: u64,
    /// Grace-LSAs sent on taking over ([takeover] ospf_router_id), one per network.
    pub grace_lsas_sent: u64,
    /// `[takeover] on_active` commands started, and those that could not start.
    pub on_active_runs: u64,
    pub on_active_failures: u64,
    /// Back-ends and standby controllers seen in a new incarnation (restarted): each got
    /// the whole table.
    pub restarts_seen: u64,
    /// LBs seen in a new incarnation (restarted): each got its table at once.
    pub lb_restarts_seen: u64,
    /// Balancing tables sent again because an LB's hello showed another table than the
    /// one sent.
    pub lb_tables_resent: u64,
}

/// A controller's part in the election (docs/dist.md, "Controller election").
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Just started: listens for three hello intervals before it may become active.
    Listening,
    /// Mirrors the active controller's table, ready to take over.
    Standby,
    /// Speaks for the router: configures the LBs, terminates the routing protocols,
    /// distributes the table.
    Active,
}

/// Election rank: higher priority wins, then the lower MAC.
fn outranks(a: (u8, MacAddr), b: (u8, MacAddr)) -> bool {
    a.0 > b.0 || (a.0 == b.0 && a.1 < b.1)
}

/// The TAP that stands for one external network of the router.
pub struct TapPort {
    pub tap: Arc<io::tap::Tap>,
    pub mac: MacAddr,
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
}

/// The controller's thread: owns the port, the elements and the distributor.
pub struct Controller {
    /// When the controller started (`synced_after_ms` counts from here).
    pub started: Instant,
    /// Protocol termination: a TAP per external network (by VLAN id), made from the LBs'
    /// hellos when `terminate` is set.
    pub terminate: bool,
    pub taps: BTreeMap<u16, TapPort>,
    tap_failed: std::collections::BTreeSet<u16>,
    tap_tx: std::sync::mpsc::Sender<(u16, Vec<u8>)>,
    tap_rx: std::sync::mpsc::Receiver<(u16, Vec<u8>)>,
    pub mac: MacAddr,
    pub hello_interval: Duration,
    pub configure_lbs: bool,
    pub elements: BTreeMap<MacAddr, ElementInfo>,
    /// The counters each element last reported (DIST counters messages), by MAC.
    pub reports: BTreeMap<MacAddr, Report>,
    pub dist: Distributor,
    pub stats: ControllerStats,
    /// Distribution waits, after a start, until this flag is set (zebra's first resend is
    /// in) or the instant passes: a controller that starts, or restarts, with a table
    /// still empty must not hand the back-ends a snapshot that would empty theirs. None:
    /// not holding.
    pub hold: Option<(Arc<AtomicBool>, Instant)>,
    /// DIST authentication (off without a key).
    pub guard: wire::dist::auth::Guard,
    pub signer: wire::dist::auth::Signer,
    /// Election ([controller] priority; docs/dist.md, "Controller election").
    pub priority: u8,
    pub role: Role,
    /// When the role last changed, and why.
    pub role_since: Instant,
    pub role_reason: &'static str,
    /// A standby's copy of the active controller's table (from its distribution).
    pub mirror: crate::distrib::Writer,
    /// Set when this controller has just become active from standby: the run loop
    /// builds the new epoch's table from the mirror ([`take_over`]), then clears it.
    pub takeover_pending: bool,
    /// Frames made while receiving (a standby's acknowledgements), sent at the next poll.
    out_pending: Vec<Vec<u8>>,
    /// Elements gone silent, since when: their distribution state is kept [`DIST_GRACE`].
    silent: HashMap<MacAddr, Instant>,
    /// Set by the run loop when it left frames in the receive ring: the election waits,
    /// so that a controller that fell behind does not take a queued hello for silence.
    pub backlog: bool,
    /// `[fpm] settle_ms` when routes come from a routing suite: how long a controller that
    /// takes over with nothing mirrored holds distribution.
    pub settle: Option<Duration>,
    /// `[takeover]`: the Grace-LSA to send on every external network on taking over, and
    /// when to send it again (once, in case the first was lost).
    pub ospf_grace: Option<OspfGrace>,
    grace_again: Option<Instant>,
    /// `[takeover] on_active` and `on_standby`.
    pub on_active: Vec<String>,
    pub on_standby: Vec<String>,
    seq: u32,
    next_hello: Instant,
    next_balance: Instant,
    balance_sent: Vec<(MacAddr, u16)>,
    /// This process's incarnation (its hellos and a standby's acknowledgements carry it).
    pub incarnation: u64,
    /// The digest of the balancing table last sent to each LB, and when.
    balance_digests: BTreeMap<MacAddr, (u64, Instant)>,
    /// The last incarnation heard from each LB, kept while it is silent too.
    lb_incarnations: BTreeMap<MacAddr, u64>,
    /// Back-ends being drained (`tessera drain`): out of the LBs' tables.
    pub drains: crate::drain::Drains,
}

impl Controller {
    pub fn new(
        mac: MacAddr,
        hello_interval: Duration,
        configure_lbs: bool,
        now: Instant,
    ) -> Controller {
        let (tap_tx, tap_rx) = std::sync::mpsc::channel();
        Controller {
            started: now,
            terminate: false,
            taps: BTreeMap::new(),
            tap_failed: Default::default(),
            tap_tx,
            tap_rx,
            mac,
            hello_interval,
            configure_lbs,
            elements: BTreeMap::new(),
            reports: BTreeMap::new(),
            dist: Distributor::default(),
            stats: ControllerStats::default(),
            hold: None,
            guard: wire::dist::auth::Guard::new(None, 0),
            signer: wire::dist::auth::Signer::new(None),
            priority: DEFAULT_PRIORITY,
            role: Role::Listening,
            role_since: now,
            role_reason: "started",
            mirror: crate::distrib::Writer::new(),
            takeover_pending: false,
            out_pending: Vec::new(),
            silent: HashMap::new(),
            backlog: false,
            settle: None,
            ospf_grace: None,
            grace_again: None,
            on_active: Vec::new(),
            on_standby: Vec::new(),
            seq: 0,
            next_hello: now,
            next_balance: now,
            balance_sent: Vec::new(),
            incarnation: 0,
            balance_digests: BTreeMap::new(),
            lb_incarnations: BTreeMap::new(),
            drains: Default::default(),
        }
        .with_incarnation(dist::new_incarnation())
    }

    /// Sets the incarnation this controller's hellos and acknowledgements carry.
    pub fn with_incarnation(mut self, incarnation: u64) -> Controller {
        self.incarnation = incarnation;
        self.mirror.incarnation = incarnation;
        self
    }

    /// Changes role.
    fn step(&mut self, to: Role, now: Instant, why: &'static str) {
        if self.role == to {
            return;
        }
        tracing::warn!(from = ?self.role, to = ?to, reason = why, "controller role changes");
        match to {
            Role::Active => {
                if self.role == Role::Standby {
                    self.stats.takeovers += 1;
                    if self.ospf_grace.is_some() {
                        self.send_grace();
                        self.grace_again = Some(now + Duration::from_millis(500));
                    }
                    self.takeover_pending = self.mirror.epoch != 0;
                    if !self.takeover_pending {
                        // Nothing mirrored: the table must come from the routing suite
                        // first, as after a start (the back-ends keep theirs meanwhile).
                        if let Some(settle) = self.settle {
                            self.hold = Some((Arc::new(AtomicBool::new(false)), now + settle));
                        }
                    }
                }
                // Every back-end, and every standby, gets this controller's table.
                let peers: Vec<MacAddr> = self
                    .elements
                    .iter()
                    .filter(|(_, e)| {
                        e.kind == ElementKind::Forwarder
                            || (e.kind == ElementKind::Controller && !e.active)
                    })
                    .map(|(m, _)| *m)
                    .collect();
                for m in peers {
                    self.dist.add(m, now);
                }
                self.run_hook(
                    &self.on_active.clone(),
                    self.role == Role::Standby,
                    "on_active",
                );
                // The LBs learn the new Virtual-CP at once.
                self.balance_sent.clear();
                self.next_balance = now;
                self.next_hello = now;
            }
            Role::Standby | Role::Listening => {
                if self.role == Role::Active {
                    self.stats.stepdowns += 1;
                    self.run_hook(&self.on_standby.clone(), false, "on_standby");
                }
                self.dist = Distributor::default();
                self.silent.clear();
                // The mirror stays as it was: the active controller goes on from there
                // with deltas (a new snapshot of a full table costs both sides seconds).
            }
        }
        self.role = to;
        self.role_since = now;
        self.role_reason = why;
    }

    /// Runs `[takeover] on_active` or `on_standby` (not waiting for it; its exit is
    /// logged).
    fn run_hook(&mut self, argv: &[String], takeover: bool, what: &'static str) {
        let Some((prog, args)) = argv.split_first() else {
            return;
        };
        let mut cmd = std::process::Command::new(prog);
        cmd.args(args).stdin(std::process::Stdio::null());
        if takeover {
            cmd.env("TESSERA_TAKEOVER", "1");
        }
        self.stats.on_active_runs += 1;
        match cmd.spawn() {
            Ok(mut child) => {
                let prog = prog.clone();
                let _ = std::thread::Builder::new()
                    .name("on-active".into())
                    .spawn(move || match child.wait() {
                        Ok(st) if st.success() => {
                            tracing::info!(%prog, hook = what, "command done")
                        }
                        Ok(st) => {
                            tracing::error!(%prog, hook = what, status = %st, "command failed")
                        }
                        Err(e) => tracing::error!(%prog, hook = what, error = %e, "command lost"),
                    });
            }
            Err(e) => {
                self.stats.on_active_failures += 1;
                tracing::error!(%prog, hook = what, error = %e, "command did not start");
            }
        }
    }

    /// Queues a Grace-LSA (RFC 3623, reason "switch to redundant control processor") as
    /// the router's OSPF process would send it on each external network: its neighbours
    /// keep the adjacency and their routes through the router while the routing suite of
    /// this controller takes the sessions over.
    fn send_grace(&mut self) {
        let Some(g) = self.ospf_grace else { return };
        // Above any Grace-LSA an earlier takeover left with the neighbours.
        let sequence = wire::ospf::INITIAL_SEQUENCE.wrapping_add(unix_secs() & 0x3fff_ffff);
        for (vlan, t) in &self.taps {
            let lsa = wire::ospf::Grace {
                router_id: g.router_id,
                area: g.area,
                interface_addr: t.addr,
                grace_period: g.grace_period_s,
                reason: wire::ospf::RestartReason::SwitchToRedundant,
                sequence,
            };
            // As the TAP's output goes: from our MAC, tagged, to the LBs.
            let mut f = lsa.frame(self.mac);
            wire::ethernet::push_vlan(&mut f, *vlan);
            self.out_pending.push(f);
            self.stats.grace_lsas_sent += 1;
        }
    }

    /// The election (docs/dist.md, "Controller election"): a listening controller
    /// stands by if an active one is there, and becomes active after three of its hello
    /// intervals if it outranks every other controller it hears; a standby takes over when
    /// the active one has been silent for 2.5 of its intervals and it outranks the other
    /// standbys; an active controller that hears a higher-ranked active one stands down.
    fn elect(&mut self, now: Instant) {
        let me = (self.priority, self.mac);
        let live: Vec<(MacAddr, u8, bool)> = self
            .elements
            .iter()
            .filter(|(_, e)| {
                e.kind == ElementKind::Controller
                    && now.duration_since(e.last_seen) <= e.interval * 5 / 2
            })
            .map(|(m, e)| (*m, e.priority, e.active))
            .collect();
        let active_other = live.iter().find(|c| c.2);
        let best = live.iter().all(|c| !outranks((c.1, c.0), me));
        match self.role {
            Role::Listening => {
                if active_other.is_some() {
                    self.step(Role::Standby, now, "an active controller is there");
                } else if now.duration_since(self.started) >= self.hello_interval * 3 {
                    if best {
                        self.step(
                            Role::Active,
                            now,
                            "no active controller; this one ranks first",
                        );
                    } else {
                        self.step(Role::Standby, now, "another controller ranks first");
                    }
                }
            }
            Role::Standby => {
                if active_other.is_none() && best && !self.backlog {
                    self.step(Role::Active, now, "the active controller fell silent");
                }
            }
            Role::Active => {
                if live.iter().any(|c| c.2 && outranks((c.1, c.0), me)) {
                    self.step(Role::Standby, now, "a higher-ranked controller is active");
                }
            }
        }
    }

    fn frame(&mut self, msg: dist::Message, dst: MacAddr) -> Option<Vec<u8>> {
        self.seq = self.seq.wrapping_add(1);
        let r = dist::Repr { seq: self.seq, msg };
        match r.to_frame(self.mac, dst) {
            Ok(mut f) => {
                let _ = self.signer.seal(&mut f, wire::dist::auth::now_ns());
                Some(f)
            }
            Err(e) => {
                tracing::error!(error = %e, "DIST message not built");
                None
            }
        }
    }

    /// Takes one received frame.
    pub fn receive(&mut self, frame: &[u8], fib: &mut Fib, now: Instant) {
        let Ok(eth) = wire::ethernet::Frame::new_checked(frame) else {
            self.stats.dist_malformed += 1;
            return;
        };
        if let Some(v) = eth.vlan() {
            return self.deliver_to_tap(v, frame);
        }
        if eth.ethertype() != dist::ETHERTYPE {
            self.stats.other_frames += 1;
            return;
        }
        let src = eth.src();
        if let Err(why) = self.guard.check(frame, wire::dist::auth::now_ns()) {
            use wire::dist::auth::Reject;
            tracing::debug!(from = %src, ?why, trailer = ?wire::dist::auth::trailer(frame), kind = frame.get(15).copied().unwrap_or(0), "DIST frame refused");
            let n = match why {
                Reject::Unauthenticated => &mut self.stats.dist_unauthenticated,
                Reject::Forged => &mut self.stats.dist_forged,
                Reject::Replayed => &mut self.stats.dist_replayed,
                Reject::Stale => &mut self.stats.dist_stale,
                Reject::Malformed => &mut self.stats.dist_malformed,
            };
            *n += 1;
            return;
        }
        let r = match dist::Repr::parse(eth.payload()) {
            Ok(r) => r,
            Err(_) => {
                self.stats.dist_malformed += 1;
                return;
            }
        };
        self.stats.dist_received += 1;
        match r.msg {
            dist::Message::Hello(h) => {
                self.stats.hellos_received += 1;
                let stats = &mut self.stats;
                let mut appeared = false;
                let e = self.elements.entry(src).or_insert_with(|| {
                    stats.elements_up += 1;
                    appeared = true;
                    tracing::info!(element = %src, kind = ?h.element, ports = h.ports.len(), incarnation = %h.state.map_or("none".into(), |s| format!("{:016x}", s.incarnation)), "element up");
                    ElementInfo {
                        kind: h.element,
                        ports: Vec::new(),
                        addrs6: Vec::new(),
                        interval: Duration::ZERO,
                        last_seen: now,
                        since: now,
                        rx_packets: 0,
                        tx_packets: 0,
                        dropped: 0,
                        priority: 0,
                        active: false,
                        state: None,
                    }
                });
                let before = e.state;
                e.kind = h.element;
                e.ports = h.ports;
                e.addrs6 = h.addrs6.clone();
                e.interval = Duration::from_millis(h.interval_ms.max(1) as u64);
                e.last_seen = now;
                self.silent.remove(&src);
                (e.rx_packets, e.tx_packets, e.dropped) = (h.rx_packets, h.tx_packets, h.dropped);
                (e.priority, e.active) = (h.priority, h.active);
                e.state = h.state;
                let lb_interval = e.interval;
                let kind = h.element;
                let ports = e.ports.clone();
                if appeared {
                    // Whatever it acknowledged before its hellos stopped, it is not
                    // consistent until it acknowledges again.
                    self.dist.reappeared(src, now);
                }
                // The active controller distributes to the back-ends, and to the standby
                // controllers, which mirror the table (docs/dist.md, "Controller election").
                if self.role == Role::Active
                    && (kind == ElementKind::Forwarder
                        || (kind == ElementKind::Controller && !h.active))
                {
                    self.dist.add(src, now);
                    if let Some(st) = &h.state {
                        if self.dist.hello(src, st, fib, now) {
                            self.stats.restarts_seen += 1;
                        }
                    }
                } else if kind == ElementKind::Controller && h.active {
                    self.dist.remove(src);
                }
                if kind == ElementKind::Balancer && self.role == Role::Active {
                    if appeared {
                        // A new LB, or one back after its hellos stopped: its table now.
                        self.next_balance = now;
                    }
                    if let Some(st) = h.state {
                        let known = self.lb_incarnations.insert(src, st.incarnation);
                        let restarted = known.is_some_and(|i| i != st.incarnation)
                            || before.is_some_and(|b| b.incarnation != st.incarnation);
                        if restarted {
                            self.stats.lb_restarts_seen += 1;
                            tracing::warn!(element = %src, incarnation = %format!("{:016x}", st.incarnation), "LB restarted (a new incarnation): its table goes to it at once");
                            self.next_balance = now;
                        } else if let Some((d, at)) = self.balance_digests.get(&src) {
                            // It holds another table than the one sent, and not for the
                            // time the last one takes to arrive.
                            if st.digest != *d && now.duration_since(*at) >= lb_interval * 2 {
                                self.stats.lb_tables_resent += 1;
                                tracing::warn!(element = %src, "LB's table differs from the one sent: sending it again");
                                self.next_balance = now;
                            }
                        }
                    }
                }
                if h.element == ElementKind::Balancer && self.terminate {
                    self.make_taps(&ports, &h.addrs6);
                }
            }
            dist::Message::Routes(b) => {
                // The active controller's table, mirrored by a standby.
                let from_active = self
                    .elements
                    .get(&src)
                    .is_some_and(|e| e.kind == ElementKind::Controller && e.active);
                // A controller that is still listening mirrors too: one that restarted
                // holds the table by the time it stands by.
                if self.role == Role::Active || !from_active {
                    self.stats.routes_ignored += 1;
                    return;
                }
                self.stats.mirror_messages += 1;
                self.mirror.mirror(src, &b);
                let ack = self.mirror.ack();
                if let Some(f) = self.frame(dist::Message::FibAck(ack), src) {
                    self.out_pending.push(f);
                }
            }
            dist::Message::Counters(c) => {
                if !self.elements.contains_key(&src) {
                    self.stats.reports_unknown += 1;
                    return;
                }
                self.stats.reports_received += 1;
                let r = self.reports.entry(src).or_default();
                r.element = c.element;
                for p in c.ports {
                    r.ports.insert(p.name.clone(), p);
                }
                r.drops.extend(c.drops);
                r.events.extend(c.events);
                if self.drains.excludes(&src) {
                    let done = crate::drain::forwarded(&r.events);
                    let current = self.lbs_current();
                    self.drains.on_report(src, done, current, now);
                }
            }
            dist::Message::FibAck(a) => {
                self.stats.acks_received += 1;
                if self.dist.peers.contains_key(&src) {
                    self.dist.on_ack(src, a, fib, now);
                } else {
                    self.stats.acks_unknown += 1;
                }
            }
            _ => {}
        }
    }

    /// A TAP for each external port of an LB that has none yet: that port's VLAN, MAC
    /// and addresses (IPv4, and the IPv6 ones the hello lists for it), named `vlan<ID>`.
    fn make_taps(&mut self, ports: &[dist::HelloPort], addrs6: &[dist::HelloAddr6]) {
        for (i, p) in ports.iter().enumerate() {
            if p.role != dist::PortRole::External || p.vlan == 0 || self.taps.contains_key(&p.vlan)
            {
                continue;
            }
            let name = format!("vlan{}", p.vlan);
            let addr = (!p.addr.is_unspecified()).then_some((p.addr, p.prefix_len));
            match io::tap::Tap::create(&name, p.mac.0, addr, 1500) {
                Ok(tap) => {
                    tracing::info!(tap = %name, mac = %p.mac, address = %format!("{}/{}", p.addr, p.prefix_len), "external network presented");
                    // IPv6 routing protocols (OSPFv3, BGP over link-local addresses) speak
                    // from the TAP's link-local address, the port's (the TAP has its MAC),
                    // even where the namespace keeps IPv6 off by default.
                    // Its global addresses, for sessions to them (BGP over IPv6) and next hops
                    // on the network.
                    let mine6: Vec<_> = addrs6.iter().filter(|a| a.port as usize == i).collect();
                    match io::netdev::enable_ipv6(&name) {
                        Err(e) => {
                            tracing::warn!(tap = %name, error = %e, "IPv6 stays off on the TAP: no IPv6 routing protocol there");
                        }
                        Ok(()) => {
                            for a in mine6 {
                                if let Err(e) = tap.add_addr6(a.addr, a.prefix_len) {
                                    self.stats.tap_errors += 1;
                                    tracing::error!(tap = %name, error = %e, "an IPv6 address of the external network is missing on its TAP");
                                } else {
                                    tracing::info!(tap = %name, address = %format!("{}/{}", a.addr, a.prefix_len), "IPv6 address presented");
                                }
                            }
                        }
                    }
                    let tap = Arc::new(tap);
                    let (t, tx, vlan) = (tap.clone(), self.tap_tx.clone(), p.vlan);
                    let spawned = std::thread::Builder::new()
                        .name(name.clone())
                        .spawn(move || {
                            let mut buf = vec![0u8; 65536];
                            while let Ok(n) = t.read(&mut buf) {
                                if tx.send((vlan, buf[..n].to_vec())).is_err() {
                                    return;
                                }
                            }
                        });
                    if spawned.is_err() {
                        self.stats.tap_errors += 1;
                        continue;
                    }
                    self.taps.insert(
                        p.vlan,
                        TapPort {
                            tap,
                            mac: p.mac,
                            addr: p.addr,
                            prefix_len: p.prefix_len,
                        },
                    );
                }
                Err(e) => {
                    if self.tap_failed.insert(p.vlan) {
                        self.stats.tap_errors += 1;
                        tracing::error!(tap = %name, error = %e, "cannot present the external network; the routing suite will not see it");
                    }
                }
            }
        }
    }

    /// A frame from the interconnection tagged with `vlan`: to that network's TAP if it is
    /// for the router's control plane (to our MAC: the LBs' redirect; or broadcast and
    /// multicast, such as ARP replies the LBs share), untagged.
    fn deliver_to_tap(&mut self, vlan: u16, frame: &[u8]) {
        if self.role != Role::Active {
            self.stats.other_frames += 1;
            return;
        }
        let Some(t) = self.taps.get(&vlan) else {
            self.stats.other_frames += 1;
            return;
        };
        let dst = MacAddr::from_slice(&frame[0..6]);
        let group = dst.0[0] & 1 == 1;
        if dst != self.mac && !group && dst != t.mac {
            self.stats.other_frames += 1;
            return;
        }
        let mut f = frame.to_vec();
        wire::ethernet::pop_vlan(&mut f);
        if dst == self.mac {
            f[0..6].copy_from_slice(&t.mac.0);
        }
        match t.tap.write(&f) {
            Ok(_) => self.stats.tap_in += 1,
            Err(_) => self.stats.tap_errors += 1,
        }
    }

    /// Timers: element timeouts, hellos, LB tables, route messages. Frames to send go to `out`.
    pub fn poll(&mut self, fib: &mut Fib, now: Instant, out: &mut Vec<Vec<u8>>) {
        // What the routing suite sent: tagged with its network's VLAN, from our MAC, to the
        // LBs, which send it out of that network's port with their external MAC. A
        // standby's routing suite is not heard.
        while let Ok((vlan, mut f)) = self.tap_rx.try_recv() {
            if f.len() < 14 {
                continue;
            }
            if self.role != Role::Active {
                self.stats.tap_out_standby += 1;
                continue;
            }
            f[6..12].copy_from_slice(&self.mac.0);
            wire::ethernet::push_vlan(&mut f, vlan);
            self.stats.tap_out += 1;
            out.push(f);
        }
        // After the drain: what a standby's routing suite wrote before a takeover is gone
        // before the Grace-LSAs go out.
        self.elect(now);
        if self.grace_again.is_some_and(|t| now >= t) && self.role == Role::Active {
            self.grace_again = None;
            self.send_grace();
        }
        out.append(&mut self.out_pending);
        let gone: Vec<MacAddr> = self
            .elements
            .iter()
            .filter(|(_, e)| now.duration_since(e.last_seen) > e.interval * 3)
            .map(|(m, _)| *m)
            .collect();
        for m in gone {
            tracing::warn!(element = %m, "element down: no hello for three of its intervals");
            self.elements.remove(&m);
            // Its distribution state stays a while: an element that stalled for a moment
            // (applying a large snapshot, on a loaded machine) resumes with deltas instead
            // of a new snapshot, which would stall it again.
            self.silent.insert(m, now);
            self.stats.elements_down += 1;
            self.next_balance = now;
        }
        let forget: Vec<MacAddr> = self
            .silent
            .iter()
            .filter(|(_, t)| now.duration_since(**t) >= DIST_GRACE)
            .map(|(m, _)| *m)
            .collect();
        for m in forget {
            self.silent.remove(&m);
            self.dist.remove(m);
        }
        if now >= self.next_hello {
            self.next_hello = now + self.hello_interval;
            let hello = dist::Message::Hello(dist::Hello {
                element: ElementKind::Controller,
                interval_ms: self.hello_interval.as_millis().min(u16::MAX as u128) as u16,
                rx_packets: self.stats.dist_received,
                tx_packets: self.stats.routes_messages_sent + self.stats.hellos_sent,
                dropped: self.stats.dist_malformed,
                priority: self.priority,
                active: self.role == Role::Active,
                ports: Vec::new(),
                addrs6: Vec::new(),
                state: Some(if self.role == Role::Active {
                    dist::HelloState {
                        incarnation: self.incarnation,
                        table: true,
                        epoch: fib.epoch(),
                        version: fib.version(),
                        routes: fib.len() as u32,
                        digest: fib.digest(),
                    }
                } else {
                    self.mirror.hello_state()
                }),
            });
            if let Some(f) = self.frame(hello, MacAddr::BROADCAST) {
                self.stats.hellos_sent += 1;
                out.push(f);
            }
        }
        if self.role != Role::Active {
            return;
        }
        if self.configure_lbs {
            self.configure_balancers(now, out);
        }
        if self.takeover_pending {
            return;
        }
        if let Some((synced, until)) = &self.hold {
            let synced = synced.load(Ordering::Relaxed);
            if !synced && now < *until {
                return;
            }
            tracing::info!(
                routes = fib.len(),
                after_ms = now.duration_since(self.started).as_millis() as u64,
                reason = if synced {
                    "zebra's first resend is in"
                } else {
                    "settle_ms passed without it"
                },
                "distribution starts"
            );
            self.hold = None;
        }
        let mut msgs = Vec::new();
        self.dist.tick(fib, now, &mut msgs);
        for (mac, b) in msgs {
            if let Some(f) = self.frame(dist::Message::Routes(b), mac) {
                self.stats.routes_messages_sent += 1;
                out.push(f);
            }
        }
    }

    /// Whether every LB runs the balancing table last sent to it (its hello's digest).
    fn lbs_current(&self) -> bool {
        self.elements
            .iter()
            .filter(|(_, e)| e.kind == ElementKind::Balancer)
            .all(|(m, e)| {
                self.balance_digests
                    .get(m)
                    .zip(e.state)
                    .is_some_and(|((d, _), s)| *d == s.digest)
            })
    }

    /// The back-end `name` (its reported element name, or its MAC).
    pub fn backend_named(&self, name: &str) -> Result<MacAddr, String> {
        let found = self
            .elements
            .iter()
            .filter(|(_, e)| e.kind == ElementKind::Forwarder)
            .find(|(m, _)| {
                m.to_string() == name.to_ascii_lowercase()
                    || self.reports.get(*m).is_some_and(|r| r.element == name)
            });
        match found {
            Some((m, _)) => Ok(*m),
            None => Err(format!(
                "no back-end {name:?}: name one by the element name it reports ({}) or its MAC",
                self.elements
                    .iter()
                    .filter(|(_, e)| e.kind == ElementKind::Forwarder)
                    .map(|(m, _)| self
                        .reports
                        .get(m)
                        .map_or(m.to_string(), |r| r.element.clone()))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// `drain` and `undrain` (the control socket): starts or ends a back-end's drain;
    /// answers its state.
    pub fn drain_command(&mut self, cmd: &str, req: &Value, now: Instant) -> Result<Value, String> {
        let name = req["element"].as_str().ok_or("missing \"element\"")?;
        let mac = self.backend_named(name)?;
        match cmd {
            "drain" => {
                if !self.drains.excludes(&mac) {
                    self.drains.start(mac, now);
                    tracing::info!(element = name, %mac, "back-end draining: out of the LBs' tables");
                }
            }
            _ => {
                if self.drains.stop(mac) {
                    tracing::info!(element = name, %mac, "back-end undrained: back in the LBs' tables");
                }
            }
        }
        Ok(self.drains.json(&mac, name, now))
    }

    /// The back-ends and weights the LBs should have.
    fn wanted_balance(&self) -> Vec<(MacAddr, u16)> {
        self.elements
            .iter()
            .filter(|(m, _)| !self.drains.excludes(m))
            .filter(|(_, e)| e.kind == ElementKind::Forwarder && e.holds_table())
            .map(|(m, e)| (*m, weight_for(e.capacity_mbps())))
            .collect()
    }

    /// Sends each LB its balancing table and the Virtual-CP's MAC when the back-ends
    /// change, and again every second (the messages are idempotent).
    fn configure_balancers(&mut self, now: Instant, out: &mut Vec<Vec<u8>>) {
        let want = self.wanted_balance();
        if want == self.balance_sent && now < self.next_balance {
            return;
        }
        self.next_balance = now + Duration::from_secs(1);
        if want != self.balance_sent {
            tracing::info!(backends = want.len(), "LB tables: {:?}", want);
        }
        self.balance_sent = want.clone();
        let lbs: Vec<(MacAddr, u8)> = self
            .elements
            .iter()
            .filter(|(_, e)| e.kind == ElementKind::Balancer)
            .filter_map(|(m, e)| {
                let i = e
                    .ports
                    .iter()
                    .position(|p| p.role == dist::PortRole::Internal)?;
                Some((*m, i as u8))
            })
            .collect();
        for (lb, port) in lbs {
            let digest = dist::balance_digest(
                want.iter().map(|(m, w)| (*m, port, *w)),
                Some((self.mac, port)),
            );
            self.balance_digests.insert(lb, (digest, now));
            let entries = want
                .iter()
                .map(|(mac, weight)| dist::BalanceEntry {
                    mac: *mac,
                    port,
                    weight: *weight,
                })
                .collect();
            let msgs = [
                dist::Message::Balance {
                    flush: true,
                    entries,
                },
                dist::Message::VirtualCp {
                    mac: self.mac,
                    port,
                },
            ];
            for m in msgs {
                if let Some(f) = self.frame(m, lb) {
                    self.stats.balance_messages_sent += 1;
                    out.push(f);
                }
            }
        }
    }

    /// The `fib` answer: the controller's table and every back-end's.
    pub fn show_fib(&self, fib: &Fib, now: Instant) -> Value {
        let backends: Vec<Value> = self
            .dist
            .peers
            .iter()
            // Live ones: an element gone silent keeps its state a while, unlisted.
            .filter(|(mac, _)| self.elements.contains_key(mac))
            .map(|(mac, p)| {
                let kind = self
                    .elements
                    .get(mac)
                    .map_or("forwarder", |e| match e.kind {
                        ElementKind::Controller => "controller",
                        _ => "forwarder",
                    });
                let a = p.ack;
                let consistent = p.consistent(fib);
                json!({
                    "mac": mac.to_string(),
                    "kind": kind,
                    "mode": p.mode(),
                    "epoch": a.map(|a| a.epoch),
                    "version": a.map(|a| a.version),
                    "routes": a.map(|a| a.routes),
                    "unresolved": a.map(|a| a.unresolved),
                    "digest": a.map(|a| format!("{:016x}", a.digest)),
                    "consistent": consistent,
                    "last_ack_ms": p.last_ack.map(|t| now.duration_since(t).as_millis() as u64),
                    "messages_sent": p.messages_sent,
                    "resends": p.resends,
                    "snapshots": p.snapshots,
                    "repairs": p.repairs,
                    "rto_ms": p.rto.as_millis() as u64,
                    "synced_after_ms": p.synced_at.map(|t| t.duration_since(self.started).as_millis() as u64),
                    "incarnation": (p.incarnation != 0).then(|| format!("{:016x}", p.incarnation)),
                    "restarts": p.restarts,
                    "acked_current_ms": p.acked_current_at.filter(|_| consistent).map(|t| now.duration_since(t).as_millis() as u64),
                    "reappeared_ms": p.reappeared.map(|t| now.duration_since(t).as_millis() as u64),
                    "acks_other_incarnation": p.acks_other_incarnation,
                })
            })
            .collect();
        let active = self.role == Role::Active;
        let mut v = json!({
            "role": "controller",
            "election": {
                "role": self.role,
                "priority": self.priority,
                "since_ms": now.duration_since(self.role_since).as_millis() as u64,
                "reason": self.role_reason,
                "takeovers": self.stats.takeovers,
                "stepdowns": self.stats.stepdowns,
            },
            "incarnation": format!("{:016x}", self.incarnation),
            "epoch": fib.epoch(),
            "version": fib.version(),
            "routes": fib.len(),
            "routes6": fib.counts().1,
            "digest": format!("{:016x}", fib.digest()),
            "distributing": active && self.hold.is_none() && !self.takeover_pending,
            "backends": backends,
        });
        if !active {
            // A standby's table is its mirror of the active controller's; what its own
            // routing suite sent is not distributed.
            let m = &self.mirror;
            v["epoch"] = json!(m.epoch);
            v["version"] = json!(m.version);
            v["routes"] = json!(m.len());
            v["routes6"] = json!(m.counts().1);
            v["digest"] = json!(format!("{:016x}", m.digest()));
            v["mirror_of"] = json!(m.controller.map(|c| c.to_string()));
        }
        v
    }

    /// The `elements` answer.
    /// The router view: every element alive that reported its counters, with every drop
    /// and event of its role (zero where it reported none).
    pub fn router_view(&self) -> Vec<crate::metrics::ElementCounters> {
        self.router_view_with(None)
    }

    /// [`Controller::router_view`], with the back-ends' table gauges where `fib` (this
    /// controller's table) is given.
    pub fn router_view_with(&self, fib: Option<&Fib>) -> Vec<crate::metrics::ElementCounters> {
        use dataplane::counters::{PortSnapshot, Scope, Snapshot};
        let mut out = Vec::new();
        for (mac, e) in &self.elements {
            let Some(r) = self.reports.get(mac) else {
                continue;
            };
            let (role, scope) = match e.kind {
                ElementKind::Balancer => ("balancer", Scope::Balancer),
                ElementKind::Forwarder => ("backend", Scope::Forwarder),
                ElementKind::Controller => ("controller", Scope::All),
            };
            let mut drops: BTreeMap<String, u64> = dataplane::Drop::ALL
                .iter()
                .filter(|d| scope.counts(d.scope()))
                .map(|d| (d.name().to_string(), 0))
                .collect();
            drops.extend(r.drops.iter().map(|(k, v)| (k.clone(), *v)));
            let mut events: BTreeMap<String, u64> = dataplane::Event::ALL
                .iter()
                .filter(|d| scope.counts(d.scope()))
                .map(|d| (d.name().to_string(), 0))
                .collect();
            events.extend(r.events.iter().map(|(k, v)| (k.clone(), *v)));
            out.push(crate::metrics::ElementCounters {
                name: r.element.clone(),
                role: role.into(),
                counters: Snapshot {
                    interfaces: r
                        .ports
                        .iter()
                        .map(|(n, p)| {
                            (
                                n.clone(),
                                PortSnapshot {
                                    rx_packets: p.rx_packets,
                                    rx_bytes: p.rx_bytes,
                                    tx_packets: p.tx_packets,
                                    tx_bytes: p.tx_bytes,
                                },
                            )
                        })
                        .collect(),
                    drops,
                    events,
                },
                external: r
                    .ports
                    .values()
                    .filter(|p| p.external)
                    .map(|p| p.name.clone())
                    .collect(),
                gauges: self.backend_gauges(mac, fib),
            });
        }
        out
    }

    /// A back-end's table gauges, as this controller knows them (with its table `fib`):
    /// whether it holds it, and the version and routes it acknowledged.
    fn backend_gauges(&self, mac: &MacAddr, fib: Option<&Fib>) -> Vec<(&'static str, f64)> {
        let (Some(fib), Some(p)) = (fib, self.dist.peers.get(mac)) else {
            return Vec::new();
        };
        let mut g = vec![("tessera_fib_consistent", p.consistent(fib) as u8 as f64)];
        if let Some(a) = p.ack {
            g.push(("tessera_fib_version", a.version as f64));
            g.push(("tessera_fib_routes", a.routes as f64));
        }
        g
    }

    /// This controller as an element of the metrics view, `name`d: no counters of its own
    /// there, its role and table as gauges.
    pub fn own_gauges(&self, name: &str, fib: &Fib) -> crate::metrics::ElementCounters {
        crate::metrics::ElementCounters {
            name: name.to_string(),
            role: "controller".into(),
            counters: dataplane::counters::Snapshot {
                interfaces: BTreeMap::new(),
                drops: BTreeMap::new(),
                events: BTreeMap::new(),
            },
            external: Vec::new(),
            gauges: vec![
                (
                    "tessera_controller_active",
                    (self.role == Role::Active) as u8 as f64,
                ),
                ("tessera_fib_routes", fib.len() as f64),
                ("tessera_fib_version", fib.version() as f64),
            ],
        }
    }

    pub fn show_elements(&self, now: Instant) -> Value {
        Value::Array(
            self.elements
                .iter()
                .map(|(m, e)| {
                    json!({
                        "mac": m.to_string(),
                        "kind": format!("{:?}", e.kind).to_lowercase(),
                        "interval_ms": e.interval.as_millis() as u64,
                        "last_seen_ms": now.duration_since(e.last_seen).as_millis() as u64,
                        "up_secs": now.duration_since(e.since).as_secs(),
                        "capacity_mbps": e.capacity_mbps(),
                        "rx_packets": e.rx_packets,
                        "tx_packets": e.tx_packets,
                        "dropped": e.dropped,
                        "priority": e.priority,
                        "active": e.active,
                        "incarnation": e.state.map(|s| format!("{:016x}", s.incarnation)),
                        "drain": self.drains.state(m),
                        "holds_table": e.state.map(|s| s.table),
                        "table_digest": e.state.map(|s| format!("{:016x}", s.digest)),
                        "table_current": match e.kind {
                            ElementKind::Balancer => self.balance_digests.get(m).zip(e.state).map(|((d, _), s)| *d == s.digest),
                            _ => None,
                        },
                        "ports": e.ports.iter().enumerate().map(|(i, p)| json!({
                            "mac": p.mac.to_string(), "address": format!("{}/{}", p.addr, p.prefix_len),
                            "addresses6": e.addrs6.iter().filter(|a| a.port as usize == i).map(|a| format!("{}/{}", a.addr, a.prefix_len)).collect::<Vec<_>>(),
                            "role": format!("{:?}", p.role).to_lowercase(), "vlan": p.vlan, "speed_mbps": p.speed_mbps,
                        })).collect::<Vec<_>>(),
                    })
                })
                .collect(),
        )
    }
}

/// What an element last reported of its counters (merged: a report may come in parts).
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub element: String,
    pub ports: BTreeMap<String, dist::PortCounts>,
    pub drops: BTreeMap<String, u64>,
    pub events: BTreeMap<String, u64>,
}

/// A route command on the controller's table (`route-add`, `route-del`).
fn route_command(fib: &Mutex<Fib>, cmd: &str, req: &Value) -> Result<Value, String> {
    let p = req["prefix"].as_str().ok_or("missing \"prefix\"")?;
    let prefix = Net::parse_strict(p).map_err(|e| format!("prefix {p:?}: {e}"))?;
    let mut fib = fib.lock().map_err(|_| "table poisoned")?;
    let changed = match cmd {
        "route-add" => {
            let via = crate::run::ip_vias_of(req)?;
            if via
                .iter()
                .any(|g| g.is_ipv6() != matches!(prefix, Net::V6(_)))
            {
                return Err(format!(
                    "prefix {p}: every via must be of its address family"
                ));
            }
            fib.set(prefix, Some(gateways(via)))
        }
        _ => fib.set(prefix, None),
    };
    Ok(json!({"changed": changed, "version": fib.version(), "count": fib.len()}))
}

/// Runs the controller on `port` until `stop` is set.
pub fn run<P: Port>(
    cfg: &ControllerFile,
    mut port: P,
    mac: MacAddr,
    control: Option<&Path>,
    stop: Arc<AtomicBool>,
) -> Result<(), String> {
    let epoch = unix_secs();
    let mut fib = Fib::new(epoch, LOG_CAP);
    for (p, g) in &cfg.routes {
        fib.set(*p, Some(g.clone()));
    }
    if let Some(file) = &cfg.routes_file {
        let t = Instant::now();
        if cfg.routes_file_via.is_empty() {
            crate::routes::load_lines(file, |l, _| {
                match l {
                    crate::routes::Line::V4(p, vias) => {
                        fib.set(p, Some(gateways(vias.iter().copied())))
                    }
                    crate::routes::Line::V6(p, vias) => {
                        fib.set(p, Some(gateways(vias.iter().copied())))
                    }
                };
                Ok(())
            })
            .map_err(|e| e.to_string())?;
        } else {
            let via = gateways(cfg.routes_file_via.clone());
            crate::tables::read(file, |p, _| {
                fib.set(p, Some(via.clone()));
            })?;
        }
        tracing::info!(file = %file.display(), routes = fib.len(), ms = t.elapsed().as_millis() as u64, "routes file read");
    }
    tracing::info!(epoch, routes = fib.len(), "controller table ready");
    let shared = Arc::new(Shared {
        fib: Mutex::new(fib),
        fpm: Mutex::new(FpmState::default()),
        fpm_synced: Arc::new(AtomicBool::new(false)),
        resettle: AtomicBool::new(false),
    });
    let mut c = Controller::new(mac, cfg.hello_interval, cfg.configure_lbs, Instant::now());
    c.terminate = cfg.terminate;
    c.priority = cfg.priority;
    c.ospf_grace = cfg.ospf_grace;
    c.on_active = cfg.on_active.clone();
    c.on_standby = cfg.on_standby.clone();
    if cfg.fpm_listen.is_some() {
        c.settle = Some(cfg.fpm_settle);
        // Hold distribution until zebra has resent its table (at most settle_ms).
        c.hold = Some((shared.fpm_synced.clone(), c.started + cfg.fpm_settle));
    }
    c.guard = cfg.dist.guard();
    c.signer = cfg.dist.signer();
    let ctl = Arc::new(Mutex::new(c));
    let view: crate::metrics::Source = {
        let (c, sh) = (ctl.clone(), shared.clone());
        let name = crate::metrics::element_name(&cfg.metrics, control, "controller");
        // Lock order everywhere: fpm, then fib, then the controller.
        Arc::new(move || {
            let Ok(fib) = sh.fib.lock() else {
                return Vec::new();
            };
            let Ok(c) = c.lock() else {
                return Vec::new();
            };
            let mut v = c.router_view_with(Some(&fib));
            v.push(c.own_gauges(&name, &fib));
            v
        })
    };
    let _metrics = crate::metrics::serve_if(&cfg.metrics, &view)?;
    let _fpm = match cfg.fpm_listen {
        Some(addr) => {
            let l = TcpListener::bind(addr).map_err(|e| format!("FPM listen on {addr}: {e}"))?;
            tracing::info!(%addr, "listening for FPM");
            let (sh, st, settle) = (shared.clone(), stop.clone(), cfg.fpm_settle);
            Some(std::thread::spawn(move || serve_fpm(l, sh, settle, st)))
        }
        None => None,
    };
    let _server = match control {
        Some(path) => {
            let (sh, c) = (shared.clone(), ctl.clone());
            let handler: crate::ctlsock::Handler = Arc::new(move |cmd: &str, req: &Value| {
                let now = Instant::now();
                match cmd {
                    "fib" => {
                        // Lock order everywhere: fpm, then fib, then the controller.
                        let fpm = sh.fpm.lock().map_err(|_| "poisoned")?.stats.clone();
                        let fib = sh.fib.lock().map_err(|_| "poisoned")?;
                        let c = c.lock().map_err(|_| "poisoned")?;
                        let mut v = c.show_fib(&fib, now);
                        v["fpm"] = serde_json::to_value(&fpm).map_err(|e| e.to_string())?;
                        Ok(v)
                    }
                    "elements" => Ok(c.lock().map_err(|_| "poisoned")?.show_elements(now)),
                    "router" => Ok(crate::metrics::router_json(&c.lock().map_err(|_| "poisoned")?.router_view())),
                    "counters" => serde_json::to_value(&c.lock().map_err(|_| "poisoned")?.stats).map_err(|e| e.to_string()),
                    "routes" => Ok(json!({"count": sh.fib.lock().map_err(|_| "poisoned")?.len()})),
                    "route-add" | "route-del" => route_command(&sh.fib, cmd, req),
                    "drain" | "undrain" => c.lock().map_err(|_| "poisoned")?.drain_command(cmd, req, now),
                    other => Err(format!("unknown command {other:?}; try fib, elements, router, counters, routes, route-add, route-del, drain, undrain")),
                }
            });
            Some(crate::ctlsock::serve(path, handler).map_err(|e| e.to_string())?)
        }
        None => None,
    };
    let mut pool = Pool::new();
    let mut batch: Vec<Pkt> = Vec::with_capacity(256);
    let mut txq: Vec<Pkt> = Vec::new();
    let mut frames = Vec::new();
    let mut pfds: Vec<libc::pollfd> = port
        .poll_fds()
        .into_iter()
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    while !stop.load(Ordering::Relaxed) {
        let mut oversize = 0;
        let n = port
            .recv(&mut pool, &mut batch, 256, &mut oversize)
            .map_err(|e| e.to_string())?;
        let now = Instant::now();
        let takeover;
        {
            let mut fib = shared.fib.lock().map_err(|_| "table poisoned")?;
            let mut c = ctl.lock().map_err(|_| "poisoned")?;
            for p in batch.drain(..) {
                c.receive(&p.data, &mut fib, now);
                pool.put(p);
            }
            c.backlog = n >= 256;
            c.poll(&mut fib, now, &mut frames);
            takeover = c.takeover_pending;
        }
        if takeover {
            // Lock order: fpm, then fib, then the controller.
            let mut f = shared.fpm.lock().map_err(|_| "poisoned")?;
            let mut fib = shared.fib.lock().map_err(|_| "table poisoned")?;
            let mut c = ctl.lock().map_err(|_| "poisoned")?;
            take_over(&mut c, &mut f, &mut fib, &shared.resettle);
        }
        for f in frames.drain(..) {
            let mut p = pool.get();
            p.data.extend_from_slice(&f);
            txq.push(p);
            if txq.len() >= 64 {
                send(&mut port, &mut txq, &mut pool, &ctl);
            }
        }
        send(&mut port, &mut txq, &mut pool, &ctl);
        if n == 0 && !pfds.is_empty() {
            // SAFETY: pfds is a valid array of pollfd for the duration of the call.
            unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, 1) };
        } else if n == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    Ok(())
}

fn send<P: Port>(port: &mut P, q: &mut Vec<Pkt>, pool: &mut Pool, ctl: &Mutex<Controller>) {
    if q.is_empty() {
        return;
    }
    let n = q.len();
    let failed = match port.send(q, pool) {
        Ok(r) => n.saturating_sub(r.sent),
        Err(e) => {
            tracing::warn!(error = %e, "controller: transmit failed");
            n
        }
    };
    for p in q.drain(..) {
        pool.put(p);
    }
    if failed > 0 {
        if let Ok(mut c) = ctl.lock() {
            c.stats.tx_errors += failed as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fib::Prefix;
    use wire::fpm::build;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    fn frame(fpm: &mut FpmState, fib: &mut Fib, msgs: &[Vec<u8>]) {
        let f = build::frame(msgs);
        let (_, payload) = fpm::split_frame(&f).unwrap().unwrap();
        fpm.frame(fpm::messages(payload).unwrap(), fib);
    }

    /// zebra's IPv6 routes reach the same table: inline gateways, ECMP, next-hop objects;
    /// link-local gateways on no TAP are left out, and a route with nothing else is
    /// counted; those on a TAP carry its VLAN.
    #[test]
    fn fpm_ipv6_routes_reach_the_table() {
        let (mut s, mut fib) = (FpmState::default(), Fib::new(1, 100));
        let g = |x: &str| -> std::net::Ipv6Addr { x.parse().unwrap() };
        let p = |x: &str| -> fib::Prefix6 { x.parse().unwrap() };
        frame(
            &mut s,
            &mut fib,
            &[
                build::nexthop(true, 20, Some(g("2001:db8:2::9").into()), &[]),
                build::route6(true, g("2001:db8:99::"), 48, &[g("2001:db8:2::10")], None),
                build::route6(
                    true,
                    g("2001:db8:98::"),
                    48,
                    &[g("2001:db8:1::5"), g("fe80::5"), g("2001:db8:2::5")],
                    None,
                ),
                build::route6(true, g("2001:db8:97::"), 64, &[], Some(20)),
                build::route6(true, g("2001:db8:96::"), 48, &[g("fe80::1")], None),
                build::route(true, ip("192.0.2.0"), 24, &[ip("10.2.0.3")], None),
            ],
        );
        assert_eq!(fib.counts(), (1, 3));
        assert_eq!(s.stats.skipped_ipv6, 1);
        let want = |a: &[&str]| -> Gateways { gateways(a.iter().map(|x| g(x))) };
        assert_eq!(
            fib.get(p("2001:db8:99::/48")),
            Some(&want(&["2001:db8:2::10"]))
        );
        assert_eq!(
            fib.get(p("2001:db8:98::/48")),
            Some(&want(&["2001:db8:1::5", "2001:db8:2::5"]))
        );
        assert_eq!(
            fib.get(p("2001:db8:97::/64")),
            Some(&want(&["2001:db8:2::9"]))
        );
        // Link-local gateways on the TAPs of VLANs 20 (ifindex 7) and 10 (ifindex 3, the
        // builder's next-hop objects' interface) go out with their VLAN written in them;
        // one on an interface that is no TAP is left out.
        s.set_scope(7, 20);
        s.set_scope(3, 10);
        frame(
            &mut s,
            &mut fib,
            &[
                build::route6_on(true, g("2001:db8:95::"), 48, &[(g("fe80::b1"), 7)]),
                build::route6_on(true, g("2001:db8:94::"), 48, &[(g("fe80::b1"), 999_999)]),
                build::nexthop(true, 21, Some(g("fe80::a1").into()), &[]),
                build::route6(true, g("2001:db8:93::"), 48, &[], Some(21)),
            ],
        );
        assert_eq!(s.stats.skipped_ipv6, 2);
        assert_eq!(
            fib.get(p("2001:db8:95::/48")),
            Some(&want(&["fe80:14::b1"]))
        );
        assert_eq!(fib.get(p("2001:db8:94::/48")), None);
        assert_eq!(fib.get(p("2001:db8:93::/48")), Some(&want(&["fe80:a::a1"])));
        // Across a reconnection the route through the object keeps its scoped gateway.
        s.connection();
        assert_eq!(
            s.resolve(&s.routes[&Net::V6(p("2001:db8:93::/48"))].clone()),
            Some(want(&["fe80:a::a1"]))
        );
        let (v4, v6) = fib.counts();
        frame(
            &mut s,
            &mut fib,
            &[
                build::route6(false, g("2001:db8:95::"), 48, &[], None),
                build::route6(false, g("2001:db8:93::"), 48, &[], None),
            ],
        );
        assert_eq!(fib.counts(), (v4, v6 - 2));
        // Withdrawn.
        frame(
            &mut s,
            &mut fib,
            &[build::route6(false, g("2001:db8:99::"), 48, &[], None)],
        );
        assert_eq!(fib.counts(), (1, 2));
    }

    #[test]
    fn fpm_routes_reach_the_table() {
        let (mut s, mut fib) = (FpmState::default(), Fib::new(1, 100));
        let p = |x: &str| -> Prefix { x.parse().unwrap() };
        // Next-hop objects, a group, and routes by id; a route inline; a connected one.
        frame(
            &mut s,
            &mut fib,
            &[
                build::nexthop(true, 6, Some(ip("10.1.0.2").into()), &[]),
                build::nexthop(true, 8, Some(ip("10.2.0.2").into()), &[]),
                build::nexthop(true, 7, None, &[6, 8]),
                build::route(true, ip("192.0.2.0"), 24, &[], Some(6)),
                build::route(true, ip("198.51.100.0"), 24, &[], Some(7)),
                build::route(true, ip("203.0.113.0"), 24, &[ip("10.2.0.3")], None),
                build::route(true, ip("10.1.0.0"), 24, &[], None),
            ],
        );
        assert_eq!(fib.len(), 3);
        assert_eq!(s.stats.skipped_no_gateway, 1);
        assert_eq!(fib.get(p("198.51.100.0/24")).unwrap().len(), 2);
        // A delete and a new route in one frame: one change, never a withdrawal.
        let v = fib.version();
        frame(
            &mut s,
            &mut fib,
            &[
                build::route(false, ip("192.0.2.0"), 24, &[], None),
                build::route(true, ip("192.0.2.0"), 24, &[ip("10.2.0.9")], None),
            ],
        );
        assert_eq!(fib.version(), v + 1);
        assert_eq!(&**fib.get(p("192.0.2.0/24")).unwrap(), &[ip("10.2.0.9")]);
        // A next-hop object changes: every route through it follows.
        frame(
            &mut s,
            &mut fib,
            &[build::nexthop(true, 8, Some(ip("10.2.0.7").into()), &[])],
        );
        assert_eq!(
            &**fib.get(p("198.51.100.0/24")).unwrap(),
            &[ip("10.1.0.2"), ip("10.2.0.7")]
        );
        // Deletes are keyed by prefix.
        frame(
            &mut s,
            &mut fib,
            &[build::route(false, ip("203.0.113.0"), 24, &[], None)],
        );
        assert!(fib.get(p("203.0.113.0/24")).is_none());
        // Reconnection: zebra resends one route only; the sweep removes the other.
        s.connection();
        assert_eq!(fib.len(), 2, "nothing is withdrawn on reconnection");
        // The new zebra gives old ids to other objects: routes held keep their gateways.
        let v = fib.version();
        frame(
            &mut s,
            &mut fib,
            &[
                build::nexthop(true, 7, None, &[]),
                build::nexthop(true, 8, Some(ip("10.1.0.99").into()), &[]),
            ],
        );
        assert_eq!(fib.version(), v, "stale routes do not follow reused ids");
        assert_eq!(fib.get(p("198.51.100.0/24")).unwrap().len(), 2);
        frame(
            &mut s,
            &mut fib,
            &[
                build::nexthop(true, 6, Some(ip("10.1.0.2").into()), &[]),
                build::route(true, ip("192.0.2.0"), 24, &[ip("10.2.0.9")], None),
            ],
        );
        s.sweep(&mut fib);
        assert_eq!(fib.len(), 1);
        // 198.51.100.0/24 and the connected 10.1.0.0/24 (never in the table) were not resent.
        assert_eq!(s.stats.swept, 2);
    }

    #[test]
    fn config_errors_name_line_and_key() {
        let path = Path::new("c.toml");
        let good = "[controller]\ninterface = \"vcp-int\"\n\n[fpm]\nlisten = \"127.0.0.1:2620\"\n\n[[route]]\nprefix = \"198.51.100.0/24\"\nvia = [\"10.2.0.2\", \"10.1.0.2\"]\n";
        let c = ControllerFile::parse(path, good).unwrap();
        assert_eq!(c.routes.len(), 1);
        assert_eq!(c.fpm_listen, Some("127.0.0.1:2620".parse().unwrap()));
        let e =
            ControllerFile::parse(path, &good.replace("127.0.0.1:2620", "nowhere")).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (5, "fpm.listen"));
        let e = ControllerFile::parse(path, &good.replace("10.2.0.2", "10.2.0")).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (9, "route[0].via"));
        let e = ControllerFile::parse(path, &good.replace("[fpm]", "[fpm]\nport = 1")).unwrap_err();
        assert_eq!(e.line, 5, "{e}");
        // An IPv6 route's link-local gateway names its external network.
        let six = |via: &str| {
            good.replace("198.51.100.0/24", "2001:db8:99::/48")
                .replace("[\"10.2.0.2\", \"10.1.0.2\"]", via)
        };
        let c =
            ControllerFile::parse(path, &six("[\"fe80::b1%vlan20\", \"2001:db8:2::9\"]")).unwrap();
        let want: Vec<std::net::IpAddr> = vec![
            "fe80:14::b1".parse().unwrap(),
            "2001:db8:2::9".parse().unwrap(),
        ];
        assert_eq!(c.routes[0].1.to_vec(), {
            let mut w = want.clone();
            w.sort();
            w
        });
        assert_eq!(
            ControllerFile::parse(path, &six("\"fe80::b1%20\""))
                .unwrap()
                .routes[0]
                .1
                .to_vec(),
            vec![want[0]]
        );
        for bad in [
            "\"fe80::b1\"",
            "\"fe80::b1%eth0\"",
            "\"fe80::b1%vlan5000\"",
            "\"2001:db8::1%vlan20\"",
        ] {
            let e = ControllerFile::parse(path, &six(bad)).unwrap_err();
            assert_eq!((e.line, e.key.as_str()), (9, "route[0].via"), "{bad}: {e}");
        }
        let e = ControllerFile::parse(path, &six("\"fe80::b1\"")).unwrap_err();
        assert!(e.to_string().contains("%vlan20"), "{e}");
        // Election and takeover keys.
        let ha = good.replace(
            "interface = \"vcp-int\"\n",
            "interface = \"vcp-int\"\npriority = 50\n\n[takeover]\nospf_router_id = \"10.255.0.1\"\non_active = [\"/bin/true\"]\n",
        );
        let c = ControllerFile::parse(path, &ha).unwrap();
        assert_eq!(c.priority, 50);
        assert_eq!(
            c.ospf_grace.map(|g| (g.router_id, g.grace_period_s)),
            Some((ip("10.255.0.1"), 120))
        );
        assert_eq!(c.on_active, vec!["/bin/true".to_string()]);
        assert_eq!(
            ControllerFile::parse(path, good).unwrap().priority,
            DEFAULT_PRIORITY
        );
        let e = ControllerFile::parse(path, &ha.replace("priority = 50", "priority = 300"))
            .unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (3, "controller.priority"));
        let e =
            ControllerFile::parse(path, &ha.replace("\"10.255.0.1\"", "\"router\"")).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (6, "takeover.ospf_router_id"));
        let e = ControllerFile::parse(path, &ha.replace("[\"/bin/true\"]", "[]")).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (7, "takeover.on_active"));
    }

    proptest::proptest! {
        /// Arbitrary netlink bytes inside well-formed FPM frames: never a panic.
        #[test]
        fn fpm_reader_takes_any_payload(payloads in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200), 1..4)) {
            let mut stream = Vec::new();
            for p in &payloads {
                stream.extend_from_slice(&[1, 1]);
                stream.extend_from_slice(&((p.len() + 4) as u16).to_be_bytes());
                stream.extend_from_slice(p);
            }
            crate::fuzzing::fpm(&stream);
        }
    }

    /// With a key, the controller takes only sealed, fresh DIST: an unsealed or forged
    /// hello adds no element and a replayed acknowledgement is not acted on.
    #[test]
    fn controller_drops_forged_and_replayed_dist() {
        use wire::dist::auth::{now_ns, seal, Guard, Key, Signer};
        let key = Key::new(1, &[3; 32]).unwrap();
        let now = Instant::now();
        let mut fib = Fib::new(1, 100);
        let mut c = Controller::new(
            MacAddr([2, 0, 0, 0, 0xc, 1]),
            Duration::from_millis(100),
            false,
            now,
        );
        c.guard = Guard::new(Some(key.clone()), 60_000_000_000);
        c.step(Role::Active, now, "the only controller");
        let r1 = MacAddr([2, 0, 0, 0, 1, 1]);
        let hello = |seq| {
            dist::Repr {
                seq,
                msg: dist::Message::Hello(dist::Hello {
                    element: ElementKind::Forwarder,
                    interval_ms: 100,
                    rx_packets: 0,
                    tx_packets: 0,
                    dropped: 0,
                    priority: 0,
                    active: false,
                    ports: Vec::new(),
                    addrs6: Vec::new(),
                    state: None,
                }),
            }
            .to_frame(r1, MacAddr::BROADCAST)
            .unwrap()
        };
        c.receive(&hello(1), &mut fib, now);
        let mut forged = hello(2);
        seal(&mut forged, &Key::new(1, &[4; 32]).unwrap(), now_ns()).unwrap();
        c.receive(&forged, &mut fib, now);
        assert!(c.elements.is_empty(), "nothing taken from a forger");
        assert_eq!((c.stats.dist_unauthenticated, c.stats.dist_forged), (1, 1));
        let signer = Signer::new(Some(key));
        let mut good = hello(3);
        signer.seal(&mut good, now_ns()).unwrap();
        c.receive(&good, &mut fib, now);
        assert!(c.elements.contains_key(&r1) && c.dist.peers.contains_key(&r1));
        let ack = |signer: &Signer| {
            let mut f = dist::Repr {
                seq: 4,
                msg: dist::Message::FibAck(dist::FibAck {
                    epoch: 1,
                    version: 0,
                    snap_epoch: 0,
                    snap_version: 0,
                    parts: 0,
                    routes: 0,
                    unresolved: 0,
                    digest: 0,
                    incarnation: 0,
                }),
            }
            .to_frame(r1, c.mac)
            .unwrap();
            signer.seal(&mut f, now_ns()).unwrap();
            f
        };
        let a = ack(&signer);
        c.receive(&a, &mut fib, now);
        c.receive(&a, &mut fib, now);
        c.receive(&good, &mut fib, now);
        assert_eq!(c.stats.acks_received, 1);
        assert_eq!(c.stats.hellos_received, 1);
        assert_eq!(c.stats.dist_replayed, 2);
        // An old capture from before a restart of this controller: stale.
        let mut old = hello(5);
        seal(
            &mut old,
            &Key::new(1, &[3; 32]).unwrap(),
            now_ns() - 120_000_000_000,
        )
        .unwrap();
        c.guard = Guard::new(Some(Key::new(1, &[3; 32]).unwrap()), 60_000_000_000);
        c.receive(&old, &mut fib, now);
        assert_eq!(c.stats.dist_stale, 1);
    }

    /// `show elements` lists each port of an element with the IPv6 addresses its hello gave
    /// for that port (a back-end's sub-interfaces, an LB's external ports).
    #[test]
    fn elements_show_the_ipv6_addresses_of_their_ports() {
        let now = Instant::now();
        let mut fib = Fib::new(1, 100);
        let mut c = Controller::new(
            MacAddr([2, 0, 0, 0, 0xc, 1]),
            Duration::from_millis(100),
            false,
            now,
        );
        let port = |vlan| dist::HelloPort {
            mac: MacAddr([2, 0, 0, 0, 1, 1]),
            addr: "10.1.0.1".parse().unwrap(),
            prefix_len: 24,
            role: dist::PortRole::External,
            vlan,
            speed_mbps: 0,
        };
        let f = dist::Repr {
            seq: 1,
            msg: dist::Message::Hello(dist::Hello {
                element: ElementKind::Forwarder,
                interval_ms: 100,
                rx_packets: 0,
                tx_packets: 0,
                dropped: 0,
                priority: 0,
                active: false,
                ports: vec![port(10), port(20)],
                addrs6: vec![dist::HelloAddr6 {
                    port: 1,
                    addr: "2001:db8:2::1".parse().unwrap(),
                    prefix_len: 64,
                }],
                state: None,
            }),
        }
        .to_frame(MacAddr([2, 0, 0, 0, 1, 1]), MacAddr::BROADCAST)
        .unwrap();
        c.receive(&f, &mut fib, now);
        let v = c.show_elements(now);
        let ports = v[0]["ports"].as_array().unwrap();
        assert_eq!(ports[0]["addresses6"], json!([]), "{v}");
        assert_eq!(ports[1]["addresses6"], json!(["2001:db8:2::1/64"]), "{v}");
    }

    fn controller_hello(mac: MacAddr, priority: u8, active: bool) -> Vec<u8> {
        dist::Repr {
            seq: 1,
            msg: dist::Message::Hello(dist::Hello {
                element: ElementKind::Controller,
                interval_ms: 100,
                rx_packets: 0,
                tx_packets: 0,
                dropped: 0,
                priority,
                active,
                ports: Vec::new(),
                addrs6: Vec::new(),
                state: None,
            }),
        }
        .to_frame(mac, MacAddr::BROADCAST)
        .unwrap()
    }

    /// Frames of `out` addressed to `to` (or broadcast), for a controller to receive.
    fn deliver(out: &[Vec<u8>], to: MacAddr, c: &mut Controller, fib: &mut Fib, now: Instant) {
        for f in out {
            let dst = MacAddr::from_slice(&f[0..6]);
            if dst == to || dst == MacAddr::BROADCAST {
                c.receive(f, fib, now);
            }
        }
    }

    /// The election of docs/dist.md: the higher priority is active after the listening
    /// time, the other stands by and mirrors its table, takes over when it falls silent
    /// (within three hello intervals) with a new epoch holding the same routes, and a
    /// returning controller stands by rather than preempt.
    #[test]
    fn standby_mirrors_and_takes_over() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let (ma, mb) = (MacAddr([2, 0, 0, 0, 0xc, 1]), MacAddr([2, 0, 0, 0, 0xc, 2]));
        let mut a = Controller::new(ma, Duration::from_millis(100), false, t0);
        let mut b = Controller::new(mb, Duration::from_millis(100), false, t0);
        (a.priority, b.priority) = (200, 50);
        let mut fa = Fib::new(7, 1000);
        let mut fb = Fib::new(8, 1000);
        for i in 0..50u8 {
            fa.set(
                Prefix::new(Ipv4Addr::new(198, 18, i, 0), 24),
                Some(gateways(vec![ip("10.2.0.10")])),
            );
        }
        // Both listen, hearing each other; after three intervals the higher priority is
        // active and the other stands by.
        let mut t = 0;
        while t <= 2000 {
            let (mut oa, mut ob) = (Vec::new(), Vec::new());
            a.poll(&mut fa, ms(t), &mut oa);
            b.poll(&mut fb, ms(t), &mut ob);
            deliver(&oa, mb, &mut b, &mut fb, ms(t));
            deliver(&ob, ma, &mut a, &mut fa, ms(t));
            t += 10;
        }
        assert_eq!((a.role, b.role), (Role::Active, Role::Standby));
        assert!(a.role_since.duration_since(t0) >= Duration::from_millis(300));
        // The standby holds the active's table (its mirror), acknowledged as consistent.
        assert_eq!(b.mirror.len(), 50);
        assert_eq!(
            (b.mirror.epoch, b.mirror.version, b.mirror.digest()),
            (7, fa.version(), fa.digest())
        );
        let shown = a.show_fib(&fa, ms(t));
        let peer = &shown["backends"][0];
        assert_eq!(
            (peer["kind"].as_str(), peer["consistent"].as_bool()),
            (Some("controller"), Some(true)),
            "{shown}"
        );
        assert_eq!(
            b.stats.tap_out + b.stats.balance_messages_sent + b.stats.routes_messages_sent,
            0
        );
        // The active falls silent: the standby takes over within three hello intervals.
        let silent = t;
        let mut took = None;
        while t <= silent + 1000 {
            let mut ob = Vec::new();
            b.poll(&mut fb, ms(t), &mut ob);
            if b.role == Role::Active && took.is_none() {
                took = Some(t - silent);
            }
            t += 10;
            if b.takeover_pending {
                let mut fpm = FpmState::default();
                let resettle = AtomicBool::new(false);
                take_over(&mut b, &mut fpm, &mut fb, &resettle);
                assert!(resettle.load(Ordering::Relaxed));
                // Every mirrored route is stale until the routing suite resends it.
                assert_eq!(fpm.stats.stale, 50);
            }
        }
        let took = took.expect("no takeover");
        assert!(took <= 300, "took over after {took} ms");
        assert_eq!(b.stats.takeovers, 1);
        assert!(fb.epoch() > 7);
        assert_eq!((fb.len(), fb.digest()), (50, fa.digest()));
        // A returns: it hears an active controller and stands by (no preemption).
        let mut a2 = Controller::new(ma, Duration::from_millis(100), false, ms(t));
        a2.priority = 200;
        let start = t;
        while t <= start + 1000 {
            let (mut oa, mut ob) = (Vec::new(), Vec::new());
            a2.poll(&mut fa, ms(t), &mut oa);
            b.poll(&mut fb, ms(t), &mut ob);
            deliver(&oa, mb, &mut b, &mut fb, ms(t));
            deliver(&ob, ma, &mut a2, &mut fa, ms(t));
            t += 10;
        }
        assert_eq!((a2.role, b.role), (Role::Standby, Role::Active));
        assert_eq!(a2.mirror.digest(), fb.digest());
    }

    /// Two active controllers (a partition healed): the lower-ranked one stands down.
    #[test]
    fn lower_ranked_active_stands_down() {
        let now = Instant::now();
        let mut fib = Fib::new(1, 10);
        let (ma, mb) = (MacAddr([2, 0, 0, 0, 0xc, 1]), MacAddr([2, 0, 0, 0, 0xc, 2]));
        let mut b = Controller::new(mb, Duration::from_millis(100), false, now);
        b.step(Role::Active, now, "alone");
        // Same priority: the lower MAC ranks first.
        b.receive(&controller_hello(ma, DEFAULT_PRIORITY, true), &mut fib, now);
        b.poll(&mut fib, now, &mut Vec::new());
        assert_eq!((b.role, b.stats.stepdowns), (Role::Standby, 1));
        let mut a = Controller::new(ma, Duration::from_millis(100), false, now);
        a.step(Role::Active, now, "alone");
        a.receive(&controller_hello(mb, DEFAULT_PRIORITY, true), &mut fib, now);
        a.poll(&mut fib, now, &mut Vec::new());
        assert_eq!(a.role, Role::Active);
        // A standby with a higher priority does not preempt an active one.
        a.receive(&controller_hello(mb, 255, false), &mut fib, now);
        a.poll(&mut fib, now, &mut Vec::new());
        assert_eq!(a.role, Role::Active);
    }

    /// A (re)started controller sends no routes until zebra's first resend is in, or
    /// until its deadline passes.
    #[test]
    fn distribution_waits_for_zebra() {
        let now = Instant::now();
        let mut fib = Fib::new(1, 100);
        fib.set(
            "10.9.0.0/16".parse::<Prefix>().unwrap(),
            Some(gateways(vec![ip("10.2.0.10")])),
        );
        let routes_sent = |c: &mut Controller, fib: &mut Fib, at: Instant| {
            let mut out = Vec::new();
            c.poll(fib, at, &mut out);
            out.iter()
                .filter(|f| f.len() > 15 && f[15] & 0x7f == dist::kind::ROUTES)
                .count()
        };
        for by_flag in [true, false] {
            let mut c = Controller::new(
                MacAddr([2, 0, 0, 0, 0xc, 1]),
                Duration::from_millis(100),
                false,
                now,
            );
            let synced = Arc::new(AtomicBool::new(false));
            c.hold = Some((synced.clone(), now + Duration::from_secs(15)));
            c.dist.add(MacAddr([2, 0, 0, 0, 1, 1]), now);
            assert_eq!(routes_sent(&mut c, &mut fib, now), 0);
            assert_eq!(
                routes_sent(&mut c, &mut fib, now + Duration::from_secs(5)),
                0
            );
            assert_eq!(c.show_fib(&fib, now)["distributing"], false);
            let at = if by_flag {
                synced.store(true, Ordering::Relaxed);
                now + Duration::from_secs(6)
            } else {
                now + Duration::from_secs(15)
            };
            assert!(routes_sent(&mut c, &mut fib, at) > 0, "by flag: {by_flag}");
            assert!(c.hold.is_none());
        }
    }

    fn stateful_hello(
        mac: MacAddr,
        kind: ElementKind,
        ports: Vec<dist::HelloPort>,
        st: dist::HelloState,
    ) -> Vec<u8> {
        dist::Repr {
            seq: 1,
            msg: dist::Message::Hello(dist::Hello {
                element: kind,
                interval_ms: 100,
                rx_packets: 0,
                tx_packets: 0,
                dropped: 0,
                priority: 0,
                active: false,
                ports,
                addrs6: Vec::new(),
                state: Some(st),
            }),
        }
        .to_frame(mac, MacAddr::BROADCAST)
        .unwrap()
    }

    /// The LBs' tables name only back-ends that hold a table of the controller: one that
    /// restarted leaves them at its first hello and returns once its hellos say its table
    /// is in. An LB that restarted gets its table at once, not at the next periodic
    /// resend; so does one whose hello shows another table than the one sent.
    #[test]
    fn lb_tables_follow_back_end_and_lb_restarts() {
        let t0 = Instant::now();
        let mut fib = Fib::new(1, 100);
        let mac = MacAddr([2, 0, 0, 0, 0xc, 1]);
        let mut c = Controller::new(mac, Duration::from_millis(100), true, t0);
        c.step(Role::Active, t0, "the only controller");
        let (r1, lb) = (MacAddr([2, 0, 0, 0, 1, 1]), MacAddr([2, 0, 0, 0, 0xa, 1]));
        let backend = |inc, table| {
            let st = dist::HelloState {
                incarnation: inc,
                table,
                ..Default::default()
            };
            stateful_hello(r1, ElementKind::Forwarder, Vec::new(), st)
        };
        let lb_port = dist::HelloPort {
            mac: lb,
            addr: Ipv4Addr::UNSPECIFIED,
            prefix_len: 0,
            role: dist::PortRole::Internal,
            vlan: 0,
            speed_mbps: 0,
        };
        let lb_hello = |inc, digest| {
            let st = dist::HelloState {
                incarnation: inc,
                table: true,
                digest,
                ..Default::default()
            };
            stateful_hello(lb, ElementKind::Balancer, vec![lb_port], st)
        };
        let balances = |out: &[Vec<u8>]| -> Vec<Vec<MacAddr>> {
            out.iter()
                .filter_map(|f| match dist::Repr::parse(&f[14..]).ok()?.msg {
                    dist::Message::Balance { entries, .. } => {
                        Some(entries.iter().map(|e| e.mac).collect())
                    }
                    _ => None,
                })
                .collect()
        };
        c.receive(&lb_hello(0x11, 0), &mut fib, t0);
        c.receive(&backend(0xa, true), &mut fib, t0);
        let mut out = Vec::new();
        c.poll(&mut fib, t0, &mut out);
        assert_eq!(balances(&out), vec![vec![r1]]);
        // r1 restarts: its new process's first hello takes it out of the LBs' table.
        let t = t0 + Duration::from_millis(100);
        c.receive(&backend(0xb, false), &mut fib, t);
        assert_eq!(c.stats.restarts_seen, 1);
        let mut out = Vec::new();
        c.poll(&mut fib, t, &mut out);
        assert_eq!(balances(&out), vec![vec![]]);
        // The whole table went to it at the same poll.
        assert!(out.iter().any(|f| MacAddr::from_slice(&f[0..6]) == r1
            && matches!(dist::Repr::parse(&f[14..]).unwrap().msg, dist::Message::Routes(ref b) if b.snapshot)));
        let t = t + Duration::from_millis(100);
        c.receive(&backend(0xb, true), &mut fib, t);
        let mut out = Vec::new();
        c.poll(&mut fib, t, &mut out);
        assert_eq!(balances(&out), vec![vec![r1]]);
        // The LB restarts: its table goes at once (not a second after the last).
        let t = t + Duration::from_millis(100);
        c.receive(&lb_hello(0x12, 0), &mut fib, t);
        assert_eq!(c.stats.lb_restarts_seen, 1);
        let mut out = Vec::new();
        c.poll(&mut fib, t, &mut out);
        assert_eq!(balances(&out), vec![vec![r1]]);
        let want = dist::balance_digest([(r1, 0, 1)], Some((mac, 0)));
        let lb_row = |c: &Controller, t| {
            c.show_elements(t)
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["kind"] == "balancer")
                .cloned()
                .unwrap()
        };
        // Its next hello shows the table sent: current. One that shows another, past the
        // time the table takes to arrive, brings it again.
        let t = t + Duration::from_millis(100);
        c.receive(&lb_hello(0x12, want), &mut fib, t);
        assert_eq!(lb_row(&c, t)["table_current"], true);
        let mut out = Vec::new();
        c.poll(&mut fib, t, &mut out);
        assert!(balances(&out).is_empty());
        let t = t + Duration::from_millis(250);
        c.receive(&backend(0xb, true), &mut fib, t);
        c.receive(&lb_hello(0x12, want ^ 1), &mut fib, t);
        assert_eq!(lb_row(&c, t)["table_current"], false);
        let mut out = Vec::new();
        c.poll(&mut fib, t, &mut out);
        assert_eq!(balances(&out), vec![vec![r1]]);
        assert_eq!(c.stats.lb_tables_resent, 1);
    }

    #[test]
    fn lb_weights_follow_capacity() {
        assert_eq!(weight_for(10_000), 100);
        assert_eq!(weight_for(1_000), 10);
        assert_eq!(weight_for(0), 1);
    }
}
