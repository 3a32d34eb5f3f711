//! The controller's config file (`ControllerFile`): its sections as written, checked and
//! turned into what the controller runs with, every error naming the line and key.

use super::*;

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
    /// The router's filters (docs/filters.md, "In the multistage router").
    #[serde(default)]
    acl: Vec<crate::config::RawAcl>,
    #[serde(default)]
    interface: Vec<crate::config::RawRouterInterface>,
    /// The router's flow export (docs/flows.md, "In the multistage router").
    flow_export: Option<crate::config::RawFlowExport>,
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
    /// `[[acl]]` and `[[interface]]`: the router's filters, sent to the LBs and back-ends.
    pub filters: crate::config::RouterFilters,
    /// `[flow_export]`: the router's flows, sampled by the back-ends, exported by the
    /// active controller as the router.
    pub flow_export: Option<crate::config::FlowExportConfig>,
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
        let filters = crate::config::At { path, src }.router_filters(&raw.acl, &raw.interface)?;
        let (ospf_grace, on_active, on_standby) = match &raw.takeover {
            Some(t) => takeover(&crate::config::At { path, src }, t)?,
            None => (None, Vec::new(), Vec::new()),
        };
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
            filters,
            flow_export: raw
                .flow_export
                .as_ref()
                .map(|f| f.check(path, src))
                .transpose()?,
        })
    }
}

/// `[takeover]`: the OSPF Grace-LSA's facts (where a router ID is given), and the commands
/// run on becoming active and standby.
type Takeover = (Option<OspfGrace>, Vec<String>, Vec<String>);

/// Reads `[takeover]` ([`Takeover`]).
fn takeover(cx: &crate::config::At, t: &RawTakeover) -> Result<Takeover, ConfigError> {
    let mut ospf_grace = None;
    let (mut on_active, mut on_standby) = (Vec::new(), Vec::new());
    for (v, key, out) in [
        (&t.on_active, "takeover.on_active", &mut on_active),
        (&t.on_standby, "takeover.on_standby", &mut on_standby),
    ] {
        if let Some(a) = v {
            if a.get_ref().is_empty() || a.get_ref()[0].is_empty() {
                return Err(cx.err(
                    a.span().start,
                    key.to_string(),
                    "needs a program and its arguments, like [\"/usr/local/bin/start-protocols\"]"
                        .into(),
                ));
            }
            *out = a.get_ref().clone();
        }
    }
    let addr = |v: &Option<Spanned<String>>, key: &str| -> Result<Option<Ipv4Addr>, ConfigError> {
        v.as_ref()
            .map(|s| {
                s.get_ref().parse().map_err(|_| {
                    cx.err(
                        s.span().start,
                        key.to_string(),
                        format!("{:?} is not a dotted IPv4 address", s.get_ref()),
                    )
                })
            })
            .transpose()
    };
    let area = addr(&t.ospf_area, "takeover.ospf_area")?.unwrap_or(Ipv4Addr::UNSPECIFIED);
    let grace_period_s = match &t.ospf_grace_period_s {
        Some(g) if !(1..=1800).contains(g.get_ref()) => {
            return Err(cx.err(
                g.span().start,
                "takeover.ospf_grace_period_s".into(),
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
    Ok((ospf_grace, on_active, on_standby))
}

impl ControllerFile {
    /// The config as the controller runs it, every default filled in, as TOML that loads
    /// again to the same (`tessera show config`); a DIST key by its file.
    pub fn shown(&self) -> String {
        use crate::showconfig::{finish, int, list, s};
        use toml::{Table, Value};
        let mut t = Table::new();
        if let Some(p) = &self.routes_file {
            t.insert("routes_file".into(), s(p.display()));
        }
        if !self.routes_file_via.is_empty() {
            t.insert("routes_file_via".into(), list(&self.routes_file_via));
        }
        let mut c = Table::new();
        c.insert("interface".into(), s(&self.interface));
        c.insert(
            "hello_interval_ms".into(),
            int(self.hello_interval.as_millis()),
        );
        c.insert("priority".into(), int(self.priority));
        c.insert("configure_lbs".into(), Value::Boolean(self.configure_lbs));
        c.insert("terminate".into(), Value::Boolean(self.terminate));
        t.insert("controller".into(), Value::Table(c));
        self.filters.tables(&mut t);
        if let Some(fe) = &self.flow_export {
            t.insert(
                "flow_export".into(),
                Value::Table(crate::showconfig::flow_export(fe)),
            );
        }
        if let Some(l) = self.fpm_listen {
            let mut f = Table::new();
            f.insert("listen".into(), s(l));
            f.insert("settle_ms".into(), int(self.fpm_settle.as_millis()));
            t.insert("fpm".into(), Value::Table(f));
        }
        if self.ospf_grace.is_some() || !self.on_active.is_empty() || !self.on_standby.is_empty() {
            let mut k = Table::new();
            if let Some(g) = self.ospf_grace {
                k.insert("ospf_router_id".into(), s(g.router_id));
                k.insert("ospf_area".into(), s(g.area));
                k.insert("ospf_grace_period_s".into(), int(g.grace_period_s));
            }
            if !self.on_active.is_empty() {
                k.insert("on_active".into(), list(&self.on_active));
            }
            if !self.on_standby.is_empty() {
                k.insert("on_standby".into(), list(&self.on_standby));
            }
            t.insert("takeover".into(), Value::Table(k));
        }
        // A link-local gateway with its network, as written: "fe80::1%vlan20".
        let gw = |g: &std::net::IpAddr| match g {
            std::net::IpAddr::V6(a) => match wire::ipv6::link_local_scope(*a) {
                Some((ll, vlan)) => format!("{ll}%vlan{vlan}"),
                None => a.to_string(),
            },
            std::net::IpAddr::V4(a) => a.to_string(),
        };
        let routes: Vec<Value> = self
            .routes
            .iter()
            .map(|(p, via)| {
                let mut r = Table::new();
                r.insert("prefix".into(), s(p));
                r.insert("via".into(), list(via.iter().map(gw)));
                Value::Table(r)
            })
            .collect();
        if !routes.is_empty() {
            t.insert("route".into(), Value::Array(routes));
        }
        finish(t, &self.io, Some(&self.dist), &self.metrics)
    }
}
