//! `tessera axon`: its configuration file and its run loop (docs/axon.md).
//!
//! ```toml
//! [axon]
//! id = 1                         # unique among the Axons (1 to 4294967295)
//! hello_ms = 20                  # hellos on every port this often
//! dead_intervals = 3             # a neighbour is dead after this many without a hello
//! cam_size = 4096                # routes per host port at most
//! probe_ms = 1000                # probe every other Axon this often (0: never)
//! pace_hosts = false             # pace host ports with a capacity_bps at that rate,
//!                                # counting the Axon headers (self-congestion)
//! spread = true                  # spread routes over equal-cost shortest paths
//!
//! [dhcp]                         # optional: lease addresses to this Axon's hosts
//! server = "10.7.0.251"          # server identifier, source of the replies
//! pool = "10.7.0.101-10.7.0.110" # this Axon's own range (disjoint from other Axons')
//! prefix_len = 24                # the hosts' subnet mask
//! lease_s = 3600
//! router = "10.7.0.254"          # optional: the default gateway the hosts are given
//!
//! [[port]]                       # at most 15; as a switch's (capacity_bps, buffer_bytes,
//! name = "ax1-p0"                # delay_ms); host or Axon port is found out on the wire
//!
//! [io]                           # as for every element
//! backend = "auto"
//! fast_path = true               # the default: frames passing through, sent on to the
//!                                # next Axon in the ports' XDP programs (docs/axon.md)
//! ```

use crate::config::{from_toml, line_of, read, ConfigError, IoConfig, RawIo};
use crate::run::run_element;
use crate::switch::{parse_ports, RawPort};
use dataplane::axon::{Axon, AxonConfig, DhcpConfig, MAX_PORTS};
use dataplane::port::Port;
use serde::Deserialize;
use serde_json::{json, Value};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toml::Spanned;
use wire::MacAddr;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    axon: Option<RawAxon>,
    #[serde(default)]
    port: Vec<RawPort>,
    dhcp: Option<RawDhcp>,
    io: Option<RawIo>,
    metrics: Option<crate::config::RawMetrics>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDhcp {
    server: Spanned<String>,
    pool: Spanned<String>,
    prefix_len: Option<Spanned<i64>>,
    lease_s: Option<Spanned<i64>>,
    router: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAxon {
    id: Option<Spanned<i64>>,
    hello_ms: Option<Spanned<i64>>,
    dead_intervals: Option<Spanned<i64>>,
    cam_size: Option<Spanned<i64>>,
    probe_ms: Option<Spanned<i64>>,
    pace_hosts: Option<bool>,
    spread: Option<bool>,
}

/// The Axon's configuration (its ports' MACs are filled in when the ports open).
#[derive(Debug, Clone)]
pub struct AxonFile {
    pub path: PathBuf,
    pub cfg: AxonConfig,
    pub io: IoConfig,
    pub metrics: crate::metrics::MetricsConfig,
}

impl AxonFile {
    pub fn load(path: &Path) -> Result<AxonFile, ConfigError> {
        Self::parse(path, &read(path)?)
    }

    pub fn parse(path: &Path, src: &str) -> Result<AxonFile, ConfigError> {
        let err = |at: usize, key: &str, message: String| ConfigError {
            file: path.into(),
            line: line_of(src, at),
            key: key.into(),
            message,
        };
        let raw: Raw = from_toml(path, src)?;
        let Some(a) = &raw.axon else {
            return Err(err(0, "axon", "missing [axon] (with its id)".into()));
        };
        let int = |v: &Option<Spanned<i64>>, key: &str, lo: i64, hi: i64, default: i64| match v {
            Some(x) if !(lo..=hi).contains(x.get_ref()) => {
                Err(err(x.span().start, key, format!("must be {lo} to {hi}")))
            }
            Some(x) => Ok(*x.get_ref()),
            None => Ok(default),
        };
        let id = match &a.id {
            Some(_) => int(&a.id, "axon.id", 1, u32::MAX as i64, 0)? as u32,
            None => return Err(err(0, "axon.id", "missing: every Axon needs its id".into())),
        };
        let hello = int(&a.hello_ms, "axon.hello_ms", 1, 10_000, 20)?;
        let dead = int(&a.dead_intervals, "axon.dead_intervals", 2, 100, 3)?;
        let cam_size = int(&a.cam_size, "axon.cam_size", 1, 1 << 20, 4096)?;
        let probe_ms = int(&a.probe_ms, "axon.probe_ms", 0, 3_600_000, 1000)?;
        if raw.port.is_empty() || raw.port.len() > MAX_PORTS {
            return Err(err(
                0,
                "port",
                format!("an Axon has 1 to {MAX_PORTS} [[port]]s (4-bit port numbers)"),
            ));
        }
        let ports = parse_ports(path, src, &raw.port)?;
        let dhcp = match &raw.dhcp {
            None => None,
            Some(d) => {
                let addr = |v: &Spanned<String>, key: &str| {
                    v.get_ref().parse::<Ipv4Addr>().map_err(|_| {
                        err(
                            v.span().start,
                            key,
                            format!("{:?} is not an IPv4 address", v.get_ref()),
                        )
                    })
                };
                let server = addr(&d.server, "dhcp.server")?;
                let bad_pool = || {
                    err(
                        d.pool.span().start,
                        "dhcp.pool",
                        format!(
                            "{:?}: expected FIRST-LAST, like \"10.7.0.101-10.7.0.110\"",
                            d.pool.get_ref()
                        ),
                    )
                };
                let (a, b) = d.pool.get_ref().split_once('-').ok_or_else(bad_pool)?;
                let first: Ipv4Addr = a.trim().parse().map_err(|_| bad_pool())?;
                let last: Ipv4Addr = b.trim().parse().map_err(|_| bad_pool())?;
                if last < first || u32::from(last) - u32::from(first) > 65_535 {
                    return Err(err(
                        d.pool.span().start,
                        "dhcp.pool",
                        "the last address must not be below the first, and a pool holds at most 65536".into(),
                    ));
                }
                let len = int(&d.prefix_len, "dhcp.prefix_len", 1, 30, 24)? as u32;
                let mask = Ipv4Addr::from(u32::MAX << (32 - len));
                let lease = int(&d.lease_s, "dhcp.lease_s", 10, 1 << 30, 3600)?;
                let router = d
                    .router
                    .as_ref()
                    .map(|r| addr(r, "dhcp.router"))
                    .transpose()?;
                Some(DhcpConfig {
                    server,
                    first,
                    last,
                    mask,
                    lease: Duration::from_secs(lease as u64),
                    router,
                })
            }
        };
        Ok(AxonFile {
            path: path.into(),
            cfg: AxonConfig {
                id,
                macs: vec![MacAddr::ZERO; ports.len()],
                ports,
                hello: Duration::from_millis(hello as u64),
                dead: dead as u32,
                cam_size: cam_size as usize,
                dhcp,
                probe: Duration::from_millis(probe_ms as u64),
                pace_hosts: a.pace_hosts.unwrap_or(false),
                spread: a.spread.unwrap_or(true),
            },
            io: IoConfig::from_raw(path, src, raw.io.as_ref())?,
            metrics: crate::config::RawMetrics::check(path, src, raw.metrics.as_ref())?,
        })
    }
}

impl AxonFile {
    /// An Axon's config: `[axon]`, `[dhcp]` where it leases, its `[[port]]`s, `[io]` and
    /// `[metrics]`.
    pub fn shown(&self) -> String {
        use crate::showconfig::{finish, int, ports, s};
        let f = self;
        let c = &f.cfg;
        let mut t = toml::Table::new();
        let mut a = toml::Table::new();
        a.insert("id".into(), int(c.id));
        a.insert("hello_ms".into(), int(c.hello.as_millis()));
        a.insert("dead_intervals".into(), int(c.dead));
        a.insert("cam_size".into(), int(c.cam_size));
        a.insert("probe_ms".into(), int(c.probe.as_millis()));
        a.insert("pace_hosts".into(), toml::Value::Boolean(c.pace_hosts));
        a.insert("spread".into(), toml::Value::Boolean(c.spread));
        t.insert("axon".into(), toml::Value::Table(a));
        if let Some(d) = &c.dhcp {
            let mut e = toml::Table::new();
            e.insert("server".into(), s(d.server));
            e.insert("pool".into(), s(format!("{}-{}", d.first, d.last)));
            e.insert("prefix_len".into(), int(u32::from(d.mask).count_ones()));
            e.insert("lease_s".into(), int(d.lease.as_secs()));
            if let Some(r) = d.router {
                e.insert("router".into(), s(r));
            }
            t.insert("dhcp".into(), toml::Value::Table(e));
        }
        t.insert("port".into(), ports(&c.ports));
        finish(t, &f.io, None, &f.metrics)
    }
}

fn answer(a: &mut Axon, cmd: &str, _req: &Value) -> Value {
    let now = Instant::now();
    let name = |p: u8| {
        a.cfg
            .ports
            .get(p as usize)
            .map_or(format!("{p}"), |c| c.name.clone())
    };
    match cmd {
        "neighbours" => Value::Array(
            a.neighbours()
                .into_iter()
                .map(|(p, n)| {
                    json!({"port": name(p), "port_number": p, "axon": n.id, "their_port": n.port,
                           "mac": n.mac.to_string(), "up_s": now.duration_since(n.since).as_secs_f64(),
                           "last_hello_ms": now.duration_since(n.seen).as_secs_f64() * 1e3})
                })
                .collect(),
        ),
        "probes" => json!({"axons": Value::Array(
            a.probes()
                .into_iter()
                .map(|(far, r)| {
                    let recs = &r.records;
                    // Per Axon: how long the probe stayed (in to out); per link: from one
                    // Axon's out to the next one's in.
                    let hops: Vec<Value> = recs
                        .iter()
                        .enumerate()
                        .map(|(i, x)| {
                            json!({"axon": x.axon,
                                   "in_ns": x.in_ns, "out_ns": x.out_ns,
                                   "residence_us": (x.out_ns > 0 && i > 0 && i + 1 < recs.len()).then(|| x.out_ns.saturating_sub(x.in_ns) as f64 / 1e3),
                                   "link_from_previous_us": (i > 0).then(|| x.in_ns.saturating_sub(recs[i - 1].out_ns) as f64 / 1e3)})
                        })
                        .collect();
                    let rtt = match (recs.first(), recs.last()) {
                        (Some(a), Some(b)) if recs.len() > 1 => Some(b.in_ns.saturating_sub(a.out_ns) as f64 / 1e3),
                        _ => None,
                    };
                    json!({"axon": far, "seq": r.seq, "age_s": now.duration_since(r.at).as_secs_f64(),
                           "round_trip_us": rtt, "hops": hops})
                })
                .collect(),
        ),
        "segments": a.segments().into_iter().map(|(ip, s)| json!({
            "host": ip.to_string(), "mac": s.mac.to_string(), "port": name(s.port),
            "round_trip_us": s.rtt_ns.map(|r| r as f64 / 1e3),
            "age_s": now.duration_since(s.at).as_secs_f64(),
        })).collect::<Vec<_>>()}),
        "leases" => Value::Array(
            a.leases()
                .into_iter()
                .map(|(m, l)| {
                    json!({"mac": m.to_string(), "ip": l.ip.to_string(), "bound": l.bound,
                           "expires_in_s": l.until.saturating_duration_since(now).as_secs_f64()})
                })
                .collect(),
        ),
        "hosts" => Value::Array(
            a.hosts()
                .into_iter()
                .map(|(ip, h)| {
                    json!({"ip": ip.to_string(), "mac": h.mac.to_string(), "port": name(h.port),
                           "seen_s_ago": now.duration_since(h.seen).as_secs_f64()})
                })
                .collect(),
        ),
        "routes" => json!({
            "axon": a.cfg.id,
            "paths": a.paths().into_iter().map(|(id, p)| json!({"axon": id, "ports": p})).collect::<Vec<_>>(),
            "routes": a.routes().into_iter().map(|(p, r, masq)| json!({
                "port": name(p), "dst_mac": r.mac.to_string(), "dst_ip": r.ip.to_string(),
                "masqueraded_as": masq.map(|m| m.to_string()),
                "axon": r.axon, "far_port": r.port, "path": r.path,
                "age_s": now.duration_since(r.installed).as_secs_f64(),
            })).collect::<Vec<_>>(),
        }),
        "interfaces" => {
            let queued = a.queued();
            let neigh = a.neighbours();
            Value::Array(
                a.cfg
                    .ports
                    .iter()
                    .enumerate()
                    .map(|(i, p)| {
                        let n = neigh.iter().find(|(q, _)| *q as usize == i);
                        json!({
                            "name": p.name, "port_number": i,
                            "kind": if n.is_some() { "axon" } else { "host" },
                            "capacity_bps": p.capacity_bps, "buffer_bytes": p.buffer_bytes,
                            "delay_ms": p.delay.as_secs_f64() * 1000.0,
                            "queued_frames": queued.get(i),
                        })
                    })
                    .collect(),
            )
        }
        _ => Value::Null,
    }
}

/// The Axon's fast path (`[io] fast_path`, docs/axon.md): its maps, kept in step with the
/// neighbour table by the run loop.
pub struct AxonFast {
    pub fp: io::fastpath::axon::AxonFastPath,
    /// Per port: frames may leave there in the fast path (no capacity, no delay).
    pub eligible: Vec<bool>,
    /// Per port: its device takes frames redirected in XDP (`io::egress`).
    pub egress: Vec<bool>,
    /// Every frame through user space, while a capture runs.
    pub suspended: bool,
    /// Every port's tcx hook runs the hand-off (`io::handoff`): a port whose device takes
    /// no XDP frames gets its frames through it.
    pub handoff: bool,
    /// Per port: the neighbour Axon's MAC, while one is heard there.
    neighbours: Vec<Option<[u8; 6]>>,
    /// Per port: what its entry in the program's map says now (None: no frame leaves by
    /// it in the fast path; else the neighbour's MAC and whether through the hand-off).
    published: Vec<Option<([u8; 6], bool)>>,
    /// The ports' interfaces, in port order.
    names: Vec<String>,
    /// Per port: the neighbour a predecessor's fast path sent to (handed over across a
    /// restart), used until this Axon hears its own hellos there or `adopted_until`.
    adopted: Vec<Option<[u8; 6]>>,
    adopted_until: Option<Instant>,
    /// Handed over to the next start: the programs' deadline is kept this far ahead while
    /// the Axon runs ([`AxonFast::hand_over`]).
    grace: Option<Duration>,
}

impl AxonFast {
    /// The maps for the Axon's ports (their interfaces open already, `cfg.macs` their
    /// MACs).
    pub fn new(cfg: &AxonConfig) -> Result<AxonFast, String> {
        let names: Vec<String> = cfg.ports.iter().map(|p| p.name.clone()).collect();
        let macs: Vec<[u8; 6]> = cfg.macs.iter().map(|m| m.0).collect();
        let fp = io::fastpath::axon::AxonFastPath::new(&names, &macs)
            .map_err(|e| format!("Axon fast path: {e}"))?;
        let n = names.len();
        // As the devices are now, and the hand-off taken as there (the ports' opening
        // attaches it before their programs; the Axon says so once they are open): a
        // restart's programs, which take a predecessor's links at once, send every frame
        // the right way from the first.
        let egress = names
            .iter()
            .map(|n| io::egress::xdp_egress(n).ok())
            .collect();
        Ok(AxonFast {
            fp,
            eligible: cfg
                .ports
                .iter()
                .map(|p| p.capacity_bps.is_none() && p.delay.is_zero())
                .collect(),
            egress,
            suspended: false,
            handoff: true,
            neighbours: vec![None; n],
            published: vec![None; n],
            names,
            adopted: vec![None; n],
            adopted_until: None,
            grace: None,
        })
    }

    /// The neighbours a predecessor's fast path sent to, handed over across a restart
    /// (pinned beside its links): written to this fast path's map before the ports open,
    /// so that the programs that replace the predecessor's in its links send on from
    /// their first frame what it sent, and used until this Axon hears its own hellos on
    /// those ports (or for `hold`, at most). `macs`: the ports' own MACs, by which the
    /// predecessor's ports are found. `None`: nothing was handed over.
    pub fn adopt(&mut self, macs: &[[u8; 6]], hold: Duration) -> Option<usize> {
        let dir = crate::fast::first_port_pin_dir(&self.names, false)
            .filter(|d| d.join("axon-ports").exists())?;
        let mut n = 0;
        for (mine, theirs) in io::fastpath::axon::AxonFastPath::pinned_neighbours(&dir) {
            if let Some(p) = macs.iter().position(|m| *m == mine) {
                self.adopted[p] = Some(theirs);
                self.neighbours[p] = Some(theirs);
                n += 1;
            }
        }
        self.adopted_until = Some(Instant::now() + hold);
        for p in 0..self.neighbours.len() {
            self.write_port(p);
        }
        Some(n)
    }

    /// The ports whose neighbours a predecessor's fast path sent to ([`AxonFast::adopt`]).
    pub fn adopted_ports(&self) -> Vec<usize> {
        (0..self.adopted.len())
            .filter(|&p| self.adopted[p].is_some())
            .collect()
    }

    /// Hands the fast path over to the Axon's next start, where its links are pinned
    /// (`io::pin::enable`, as the ports opened): its ports' entries pinned beside them for
    /// the successor ([`AxonFast::adopt`]), and, while the Axon runs, the programs'
    /// deadline kept `grace` ahead ([`run`]). False where no link is pinned.
    pub fn hand_over(&mut self, grace: Duration) -> bool {
        let fp = &self.fp;
        let handed = crate::fast::pin_for_successor(&self.names, "Axon", |d| fp.pin(d));
        if handed {
            self.grace = Some(grace);
        }
        handed
    }

    /// Whether port `port`'s device takes frames redirected in XDP.
    pub fn set_egress(&mut self, port: usize, ok: bool) {
        if let Some(e) = self.egress.get_mut(port) {
            *e = ok;
            self.write_port(port);
        }
    }

    /// Says whether every port's tcx hook runs the hand-off to tcx.
    pub fn set_handoff(&mut self, on: bool) {
        self.handoff = on;
        for p in 0..self.eligible.len() {
            self.write_port(p);
        }
    }

    /// How frames may leave by `port` in the fast path now, once a neighbour Axon is
    /// heard there (`None`: they may not).
    pub fn egress_now(&self, port: usize) -> Option<io::fastpath::EgressMode> {
        crate::fast::egress_mode(
            self.suspended || !self.eligible[port],
            self.egress[port],
            self.handoff,
        )
    }

    /// Brings port `port`'s map entry in step (written only when it changes).
    fn write_port(&mut self, port: usize) {
        let mode = self.egress_now(port);
        let want = self.neighbours[port]
            .filter(|_| mode.is_some())
            .map(|m| (m, mode == Some(io::fastpath::EgressMode::Tcx)));
        if self.published[port] == want {
            return;
        }
        match self
            .fp
            .set_port(port as u32, want.map(|w| w.0), want.is_some_and(|w| w.1))
        {
            Ok(()) => self.published[port] = want,
            Err(e) => tracing::warn!(port, error = %e, "Axon fast path: ports map"),
        }
    }

    /// Follows the Axon: a capture under way (every frame through user space, where the
    /// capture sees it), and each port's neighbour, heard or lost (only an Axon link
    /// takes fast-path frames). Cheap while nothing changes: a comparison per port.
    fn sync(&mut self, a: &Axon) {
        let want = crate::capturing::capture_under_way();
        if self.suspended != want {
            self.suspended = want;
            tracing::info!(
                suspended = want,
                "Axon fast path: a capture started or ended"
            );
        }
        let adopted = self.adopted_until.is_some_and(|t| Instant::now() < t);
        for (p, n) in self.neighbours.iter_mut().enumerate() {
            *n = a
                .neighbour_mac(p)
                .map(|m| m.0)
                .or(self.adopted[p].filter(|_| adopted));
        }
        for p in 0..self.neighbours.len() {
            self.write_port(p);
        }
    }
}

/// Runs the Axon over `ports` (in the config's order) until `stop` is set; with `fast`,
/// its ports' programs send frames passing through on to the next Axon themselves (else
/// `fast_off` says why not, per port).
pub fn run<P: Port>(
    a: Axon,
    ports: Vec<P>,
    control: Option<&Path>,
    stop: Arc<AtomicBool>,
    file: &AxonFile,
    fast: Option<AxonFast>,
    fast_off: std::collections::HashMap<String, String>,
) -> Result<(), String> {
    let (io, metrics) = (file.io, &file.metrics);
    // Shared with the control socket's thread, which reads the programs' counters.
    let fast = fast.map(|f| Arc::new(std::sync::Mutex::new(f)));
    // Handed over: the deadline kept ahead while the Axon runs.
    if let Some(f) = &fast {
        if let Some(grace) = f.lock().ok().and_then(|g| g.grace) {
            let f = f.clone();
            crate::fast::keep_beating(stop.clone(), move || {
                f.lock().map_or(Ok(()), |f| f.fp.beat(grace))
            });
        }
    }
    let names: Vec<String> = a.cfg.ports.iter().map(|p| p.name.clone()).collect();
    // Each port's link going down or coming up, logged once (crate::statelog).
    crate::statelog::watch_links(
        ports.iter().map(|p| p.name().to_string()).collect(),
        stop.clone(),
    )
    .map_err(|e| format!("links: {e}"))?;
    if let Some(f) = &fast {
        let f = f.clone();
        crate::fast::fold(&a.counters, &names, move || {
            f.lock().map(|f| f.fp.stats()).unwrap_or_default()
        });
    }
    let fast_counters: Option<crate::run::FastCounters> = fast.clone().map(|f| {
        let names = names.clone();
        Arc::new(move || match f.lock() {
            Ok(f) => crate::fast::stats_json(&names, &f.fp.stats()),
            Err(_) => Value::Null,
        }) as crate::run::FastCounters
    });
    // Each port's device is watched: frames leave by it in the fast path only while it
    // takes frames redirected in XDP.
    let watch = fast.clone().map(|f| {
        io::egress::EgressWatch::start(&names, stop.clone(), move |port, ok| {
            if let Ok(mut f) = f.lock() {
                f.set_egress(port, ok);
            }
        })
    });
    let (servers, qrx) = crate::run::serve_element(
        control,
        a.counters.clone(),
        &[
            "interfaces",
            "neighbours",
            "hosts",
            "leases",
            "probes",
            "routes",
            "reload",
            "config",
        ],
        metrics,
        "axon",
        fast_counters,
    )?;
    crate::run::set_priority(io.priority)?;
    // The file as the Axon runs it, for `reload` to compare with.
    let mut running = std::fs::read_to_string(&file.path).unwrap_or_default();
    // ... and as parsed, for `config` (`tessera show config`).
    let mut shown = file.clone();
    let answer = |a: &mut Axon, cmd: &str, req: &Value| match cmd {
        "reload" => reload(
            a,
            fast.as_deref(),
            &file.path,
            &mut running,
            &mut shown,
            &servers.1,
        )
        .unwrap_or_else(|e| json!({ "error": e })),
        "config" => json!({ "toml": shown.shown() }),
        "interfaces" => {
            // Each port's fast-path frames beside its queue.
            let mut v = answer(a, cmd, req);
            let f = fast.as_ref().and_then(|f| f.lock().ok());
            let stats = f.as_ref().map(|f| f.fp.stats()).unwrap_or_default();
            let watched = watch.as_ref().map(|w| w.ports()).unwrap_or_default();
            for (i, p) in v.as_array_mut().into_iter().flatten().enumerate() {
                let off = p["name"].as_str().and_then(|n| fast_off.get(n));
                let held = f.as_ref().and_then(|f| {
                    if f.suspended {
                        Some(crate::fast::SUSPENDED.into())
                    } else if !f.eligible[i] {
                        Some(crate::fast::SHAPED.into())
                    } else {
                        f.neighbours[i]
                            .is_none()
                            .then(|| "a host port: frames leave by it through user space, which takes the Axon header off".into())
                    }
                });
                let egress = f
                    .as_ref()
                    .filter(|f| f.neighbours[i].is_some())
                    .and_then(|f| f.egress_now(i));
                p["fast_path"] =
                    crate::fast::port_fast(off, stats.get(i), egress, held, watched.get(i)).json();
            }
            v
        }
        _ => answer(a, cmd, req),
    };
    let tick = |a: &mut Axon| {
        if let Some(f) = &fast {
            if let Ok(mut f) = f.lock() {
                f.sync(a);
            }
        }
    };
    run_element(a, ports, stop, Some(qrx), answer, tick, io.busy_poll)
}

/// `reload`: reads `path` again and applies each `[[port]]`'s `capacity_bps`,
/// `buffer_bytes` and `delay_ms`, and `[metrics] listen`, in place; anything else is
/// refused with its key, and a bad file changes nothing.
fn reload(
    a: &mut Axon,
    fast: Option<&std::sync::Mutex<AxonFast>>,
    path: &Path,
    running: &mut String,
    shown: &mut AxonFile,
    metrics: &crate::metrics::MetricsSlot,
) -> Result<Value, String> {
    let text = read(path).map_err(|e| e.to_string())?;
    let new = AxonFile::parse(path, &text).map_err(|e| e.to_string())?;
    if let Some(k) = crate::run::changed_key_outside(running, &text, &["port", "metrics"])
        .or_else(|| metrics.refused(&new.metrics).map(str::to_string))
    {
        return Err(format!(
            "{}: {k}: changes only with a restart; nothing reloaded",
            path.display()
        ));
    }
    a.reconfigure_ports(new.cfg.ports.clone())
        .map_err(|e| format!("{}: {e}; nothing reloaded", path.display()))?;
    // A port shaped or delayed now, or no longer, leaves the fast path or joins it.
    if let Some(mut f) = fast.and_then(|f| f.lock().ok()) {
        for (i, p) in new.cfg.ports.iter().enumerate() {
            if let Some(e) = f.eligible.get_mut(i) {
                *e = p.capacity_bps.is_none() && p.delay.is_zero();
                f.write_port(i);
            }
        }
    }
    *running = text;
    let moved = metrics.reload(&new.metrics);
    *shown = new;
    moved.map_err(|e| {
        format!(
            "{}: ports reloaded; [metrics] not moved: {e}",
            path.display()
        )
    })?;
    tracing::info!(file = %path.display(), "config reloaded");
    Ok(json!({ "reloaded": true }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_and_errors_name_line_and_key() {
        let path = Path::new("ax.toml");
        let good = "[axon]\nid = 7\nhello_ms = 10\n\n[[port]]\nname = \"p1\"\n\n[[port]]\nname = \"p2\"\ncapacity_bps = 100_000_000\n";
        let a = AxonFile::parse(path, good).unwrap();
        assert_eq!(a.cfg.id, 7);
        assert_eq!(a.cfg.hello, Duration::from_millis(10));
        assert_eq!(a.cfg.dead, 3);
        assert_eq!(a.cfg.ports[1].capacity_bps, Some(100_000_000));
        let e = AxonFile::parse(path, &good.replace("id = 7", "id = 0")).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (2, "axon.id"));
        let e = AxonFile::parse(path, &good.replace("id = 7\n", "")).unwrap_err();
        assert_eq!(e.key, "axon.id");
        let e = AxonFile::parse(path, &good.replace("hello_ms = 10", "hello_ms = 0")).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (3, "axon.hello_ms"));
        let e = AxonFile::parse(path, &good.replace("\"p2\"", "\"p1\"")).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (9, "port[1].name"));
        let many: String = (0..16)
            .map(|i| format!("[[port]]\nname = \"q{i}\"\n"))
            .collect();
        let e = AxonFile::parse(path, &format!("[axon]\nid = 1\n{many}")).unwrap_err();
        assert_eq!(e.key, "port");
        let e = AxonFile::parse(path, &good.replace("hello_ms", "helo_ms")).unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        let dhcp = format!("{good}\n[dhcp]\nserver = \"10.7.0.251\"\npool = \"10.7.0.101-10.7.0.110\"\nprefix_len = 24\n");
        let a = AxonFile::parse(path, &dhcp).unwrap();
        let d = a.cfg.dhcp.unwrap();
        assert_eq!(
            (d.first, d.last),
            (Ipv4Addr::new(10, 7, 0, 101), Ipv4Addr::new(10, 7, 0, 110))
        );
        assert_eq!(d.mask, Ipv4Addr::new(255, 255, 255, 0));
        let e = AxonFile::parse(path, &dhcp.replace("10.7.0.101-", "10.7.0.111-")).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (14, "dhcp.pool"));
        let e = AxonFile::parse(path, &dhcp.replace("\"10.7.0.251\"", "\"x\"")).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (13, "dhcp.server"));
    }

    /// The same for the Axons' configs (one with DHCP and shaped ports).
    #[test]
    fn an_axons_shown_config_loads_to_the_same() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files: Vec<_> = ["labs/axon/line", "labs/axon/ring"]
            .iter()
            .flat_map(|d| std::fs::read_dir(root.join(d)).unwrap())
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        assert!(!files.is_empty());
        let extra = "\n[dhcp]\nserver = \"10.7.0.251\"\npool = \"10.7.0.101-10.7.0.110\"\nprefix_len = 24\nrouter = \"10.7.0.254\"\n";
        for path in files {
            let text = std::fs::read_to_string(&path).unwrap();
            let texts = if text.contains("[dhcp]") {
                vec![text]
            } else {
                vec![text.clone(), text + extra]
            };
            for text in texts {
                let shown = crate::showconfig::assert_round_trip(
                    &path,
                    &text,
                    AxonFile::parse,
                    AxonFile::shown,
                );
                assert!(
                    shown.contains("dead_intervals = ") && shown.contains("[[port]]"),
                    "{shown}"
                );
            }
        }
    }
}
