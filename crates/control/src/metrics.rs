//! The router's counters as one view: per external port, per element and in total, as
//! JSON (`tessera show router`) and as Prometheus text exposition over HTTP
//! (`[metrics] listen`, `GET /metrics`).
//!
//! An element serves its own counters as a router of one; the totals are sums over the
//! elements' [`Snapshot`]s, so that a drop reason counted anywhere is visible in the total
//! under the same name.

use dataplane::counters::Snapshot;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One element's counters, and which of its ports face the outside of the router.
#[derive(Debug, Clone)]
pub struct ElementCounters {
    pub name: String,
    /// `forwarder`, `balancer`, `switch`, `axon`, ...
    pub role: String,
    pub counters: Snapshot,
    /// The ports that face external networks (all of a lone element's). The router's
    /// received and sent totals count these only, so a frame crossing the inside of a
    /// multistage router is counted once.
    pub external: Vec<String>,
    /// Gauges of the element's state, by name ([`GAUGES`]), where the view knows them
    /// (the controller's: its own role and table, each back-end's consistency).
    pub gauges: Vec<(&'static str, f64)>,
    /// `show acl`'s answer, for an element with filters (its rules' counts and the
    /// interfaces' filter drops go out as `tessera_acl_*` and `tessera_filter_drops_total`).
    pub filters: Option<serde_json::Value>,
    /// `show counters`' `flow_export`, for an element that exports flows (its counters go
    /// out as `tessera_flow_export_*`).
    pub flow_export: Option<serde_json::Value>,
}

/// The gauges an element may carry, with what they mean.
pub const GAUGES: [(&str, &str); 4] = [
    (
        "tessera_controller_active",
        "1 for the active controller, 0 for one standing by.",
    ),
    (
        "tessera_fib_routes",
        "Routes in the element's table: the controller's, that it distributes; a back-end's, as it acknowledged them.",
    ),
    (
        "tessera_fib_version",
        "Version of that table: the controller's, or the one a back-end acknowledged.",
    ),
    (
        "tessera_fib_consistent",
        "1 while a back-end holds the active controller's current table (epoch, version, digest), else 0.",
    ),
];

/// `[metrics]`: where to serve `/metrics` and under which element name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsConfig {
    /// `listen = "ADDR:PORT"`.
    pub listen: Option<SocketAddr>,
    /// `element = "NAME"`: the `element` label; default: the control socket's file name
    /// without its extension, else the role.
    pub element: Option<String>,
}

/// The element name to report: the configured one, else the control socket's stem, else
/// the role.
pub fn element_name(cfg: &MetricsConfig, control: Option<&std::path::Path>, role: &str) -> String {
    cfg.element
        .clone()
        .or_else(|| {
            control
                .and_then(|p| p.file_stem())
                .map(|s| s.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| role.to_string())
}

/// Totals over the elements: (received, sent) packets and bytes on external ports, and
/// drops by reason.
struct Totals {
    rx_packets: u64,
    rx_bytes: u64,
    tx_packets: u64,
    tx_bytes: u64,
    drops: BTreeMap<String, u64>,
}

fn totals(elements: &[ElementCounters]) -> Totals {
    let mut t = Totals {
        rx_packets: 0,
        rx_bytes: 0,
        tx_packets: 0,
        tx_bytes: 0,
        drops: BTreeMap::new(),
    };
    for e in elements {
        for (name, p) in &e.counters.interfaces {
            if e.external.contains(name) {
                t.rx_packets += p.rx_packets;
                t.rx_bytes += p.rx_bytes;
                t.tx_packets += p.tx_packets;
                t.tx_bytes += p.tx_bytes;
            }
        }
        for (reason, n) in &e.counters.drops {
            *t.drops.entry(reason.clone()).or_default() += n;
        }
    }
    t
}

/// The router view as `tessera show router` prints it.
pub fn router_json(elements: &[ElementCounters]) -> Value {
    let t = totals(elements);
    let mut els = Map::new();
    let mut ports = Map::new();
    for e in elements {
        let dropped: u64 = e.counters.drops.values().sum();
        els.insert(
            e.name.clone(),
            json!({
                "role": e.role,
                "rx_packets": e.counters.interfaces.values().map(|p| p.rx_packets).sum::<u64>(),
                "tx_packets": e.counters.interfaces.values().map(|p| p.tx_packets).sum::<u64>(),
                "dropped": dropped,
                "interfaces": e.counters.interfaces,
                "drops": e.counters.drops,
                "events": e.counters.events,
            }),
        );
        for name in &e.external {
            if let Some(p) = e.counters.interfaces.get(name) {
                ports.insert(format!("{}/{}", e.name, name), json!(p));
            }
        }
    }
    json!({
        "total": {
            "rx_packets": t.rx_packets,
            "rx_bytes": t.rx_bytes,
            "tx_packets": t.tx_packets,
            "tx_bytes": t.tx_bytes,
            "dropped": t.drops.values().sum::<u64>(),
            // The router's filters' drops as one: denied and rejected by its access lists,
            // failed its reverse-path checks, wherever they ran.
            "filtered": dataplane::Drop::FILTERS
                .iter()
                .map(|d| t.drops.get(d.name()).copied().unwrap_or(0))
                .sum::<u64>(),
            "drops": t.drops,
        },
        "external_ports": ports,
        "elements": els,
    })
}

/// What `tessera top` prints: the rates between two router views (`router_json`) taken
/// `secs` apart, per external port and per element, and the drop reasons that grew.
pub fn top_text(prev: &Value, now: &Value, secs: f64) -> String {
    let secs = secs.max(1e-3);
    let rate = |a: &Value, b: &Value| {
        b.as_u64()
            .unwrap_or(0)
            .saturating_sub(a.as_u64().unwrap_or(0)) as f64
            / secs
    };
    let mut o = String::new();
    let t = (&prev["total"], &now["total"]);
    let _ = writeln!(
        o,
        "tessera top: router in {:.0} pps {:.1} Mbit/s, out {:.0} pps {:.1} Mbit/s, dropped {:.0}/s",
        rate(&t.0["rx_packets"], &t.1["rx_packets"]),
        rate(&t.0["rx_bytes"], &t.1["rx_bytes"]) * 8e-6,
        rate(&t.0["tx_packets"], &t.1["tx_packets"]),
        rate(&t.0["tx_bytes"], &t.1["tx_bytes"]) * 8e-6,
        rate(&t.0["dropped"], &t.1["dropped"]),
    );
    let _ = writeln!(
        o,
        "\n{:<28} {:>12} {:>10} {:>12} {:>10}",
        "EXTERNAL PORT", "RX pps", "RX Mbit/s", "TX pps", "TX Mbit/s"
    );
    if let Some(ports) = now["external_ports"].as_object() {
        for (name, p) in ports {
            let q = &prev["external_ports"][name];
            let _ = writeln!(
                o,
                "{:<28} {:>12.0} {:>10.1} {:>12.0} {:>10.1}",
                name,
                rate(&q["rx_packets"], &p["rx_packets"]),
                rate(&q["rx_bytes"], &p["rx_bytes"]) * 8e-6,
                rate(&q["tx_packets"], &p["tx_packets"]),
                rate(&q["tx_bytes"], &p["tx_bytes"]) * 8e-6,
            );
        }
    }
    let _ = writeln!(
        o,
        "\n{:<20} {:<10} {:>12} {:>12} {:>10}",
        "ELEMENT", "ROLE", "RX pps", "TX pps", "DROP/s"
    );
    let mut grew: Vec<(f64, String)> = Vec::new();
    if let Some(els) = now["elements"].as_object() {
        for (name, e) in els {
            let q = &prev["elements"][name];
            let _ = writeln!(
                o,
                "{:<20} {:<10} {:>12.0} {:>12.0} {:>10.0}",
                name,
                e["role"].as_str().unwrap_or(""),
                rate(&q["rx_packets"], &e["rx_packets"]),
                rate(&q["tx_packets"], &e["tx_packets"]),
                rate(&q["dropped"], &e["dropped"]),
            );
            if let Some(d) = e["drops"].as_object() {
                for (reason, v) in d {
                    let r = rate(&q["drops"][reason], v);
                    if r > 0.0 {
                        grew.push((r, format!("{name} {reason}")));
                    }
                }
            }
        }
    }
    if !grew.is_empty() {
        grew.sort_by(|a, b| b.0.total_cmp(&a.0));
        let _ = writeln!(o, "\n{:<48} {:>10}", "DROPS (element reason)", "per s");
        for (r, what) in grew.iter().take(10) {
            let _ = writeln!(o, "{what:<48} {r:>10.0}");
        }
    }
    o
}

/// A label value with `\`, `"` and newlines escaped, as the exposition format asks.
pub(crate) fn label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The Prometheus text exposition (format 0.0.4) of the router's counters.
pub fn exposition(elements: &[ElementCounters]) -> String {
    let mut o = String::new();
    family(
        &mut o,
        "tessera_element_up",
        "gauge",
        "1 for each element whose counters this view holds.",
    );
    for e in elements {
        let _ = writeln!(
            o,
            "tessera_element_up{{element=\"{}\",role=\"{}\"}} 1",
            label(&e.name),
            label(&e.role)
        );
    }
    type PortField = fn(&dataplane::counters::PortSnapshot) -> u64;
    let port_families: [(&str, &str, PortField); 4] = [
        (
            "tessera_port_received_packets_total",
            "Frames received on the port.",
            |p| p.rx_packets,
        ),
        (
            "tessera_port_received_bytes_total",
            "Bytes of the frames received on the port.",
            |p| p.rx_bytes,
        ),
        (
            "tessera_port_sent_packets_total",
            "Frames sent out of the port.",
            |p| p.tx_packets,
        ),
        (
            "tessera_port_sent_bytes_total",
            "Bytes of the frames sent out of the port.",
            |p| p.tx_bytes,
        ),
    ];
    for (name, help, get) in port_families {
        family(&mut o, name, "counter", help);
        for e in elements {
            for (port, p) in &e.counters.interfaces {
                let _ = writeln!(
                    o,
                    "{name}{{element=\"{}\",port=\"{}\",external=\"{}\"}} {}",
                    label(&e.name),
                    label(port),
                    e.external.contains(port),
                    get(p)
                );
            }
        }
    }
    family(
        &mut o,
        "tessera_dropped_packets_total",
        "counter",
        "Frames an element dropped, by reason (`tessera show counters --describe` says what each reason means).",
    );
    for e in elements {
        for (reason, n) in &e.counters.drops {
            let _ = writeln!(
                o,
                "tessera_dropped_packets_total{{element=\"{}\",reason=\"{}\"}} {n}",
                label(&e.name),
                label(reason)
            );
        }
    }
    family(
        &mut o,
        "tessera_events_total",
        "counter",
        "Things an element did (forwarded, ARP, ICMP, DIST...), by event.",
    );
    for e in elements {
        for (event, n) in &e.counters.events {
            let _ = writeln!(
                o,
                "tessera_events_total{{element=\"{}\",event=\"{}\"}} {n}",
                label(&e.name),
                label(event)
            );
        }
    }
    for (name, help) in GAUGES {
        if !elements
            .iter()
            .any(|e| e.gauges.iter().any(|g| g.0 == name))
        {
            continue;
        }
        family(&mut o, name, "gauge", help);
        for e in elements {
            for (_, v) in e.gauges.iter().filter(|g| g.0 == name) {
                let _ = writeln!(
                    o,
                    "{name}{{element=\"{}\",role=\"{}\"}} {v}",
                    label(&e.name),
                    label(&e.role)
                );
            }
        }
    }
    filter_families(elements, &mut o);
    flow_families(elements, &mut o);
    let t = totals(elements);
    for (name, help, v) in [
        (
            "tessera_router_received_packets_total",
            "Frames the router received on its external ports (all elements).",
            t.rx_packets,
        ),
        (
            "tessera_router_received_bytes_total",
            "Bytes the router received on its external ports (all elements).",
            t.rx_bytes,
        ),
        (
            "tessera_router_sent_packets_total",
            "Frames the router sent out of its external ports (all elements).",
            t.tx_packets,
        ),
        (
            "tessera_router_sent_bytes_total",
            "Bytes the router sent out of its external ports (all elements).",
            t.tx_bytes,
        ),
    ] {
        family(&mut o, name, "counter", help);
        let _ = writeln!(o, "{name} {v}");
    }
    family(
        &mut o,
        "tessera_router_dropped_packets_total",
        "counter",
        "Frames dropped anywhere in the router, by reason (the sum over its elements).",
    );
    for (reason, n) in &t.drops {
        let _ = writeln!(
            o,
            "tessera_router_dropped_packets_total{{reason=\"{}\"}} {n}",
            label(reason)
        );
    }
    o
}

/// The flow export's families (`tessera_flow_export_*`) of the elements that export.
fn flow_families(elements: &[ElementCounters], o: &mut String) {
    const FAMILIES: [(&str, &str); 7] = [
        (
            "samples",
            "Packets sampled for the flow cache (fast path and user space).",
        ),
        (
            "samples_lost",
            "Samples user space's queue to the exporter had no room for.",
        ),
        (
            "ring_overruns",
            "Samples the fast path's ring buffer had no room for.",
        ),
        ("flows_exported", "Flow records sent to the collector."),
        (
            "records_lost",
            "Flow records not sent: the collector's socket refused them.",
        ),
        ("messages_sent", "IPFIX messages sent to the collector."),
        (
            "cache_full",
            "Flows exported early because the flow cache was full.",
        ),
    ];
    if !elements.iter().any(|e| e.flow_export.is_some()) {
        return;
    }
    for (k, help) in FAMILIES {
        let name = format!("tessera_flow_export_{k}_total");
        family(o, &name, "counter", help);
        for e in elements {
            if let Some(v) = &e.flow_export {
                let _ = writeln!(
                    o,
                    "{name}{{element=\"{}\"}} {}",
                    label(&e.name),
                    v[k].as_u64().unwrap_or(0)
                );
            }
        }
    }
}

/// The filters' families (`tessera_acl_*`, `tessera_filter_drops_total`) of the elements
/// that filter, from their `show acl` answers.
fn filter_families(elements: &[ElementCounters], o: &mut String) {
    if !elements.iter().any(|e| e.filters.is_some()) {
        return;
    }
    family(
        o,
        "tessera_acl_packets_total",
        "counter",
        "Packets each access list rule (or a list's default, rule=\"default\") decided on.",
    );
    family(
        o,
        "tessera_acl_bytes_total",
        "counter",
        "Bytes each access list rule (or a list's default) decided on.",
    );
    family(
        o,
        "tessera_filter_drops_total",
        "counter",
        "Packets an interface's filters dropped: filter=\"acl_in\", \"acl_out\" or \"urpf\".",
    );
    for e in elements {
        if let Some(v) = &e.filters {
            let labels = format!("element=\"{}\"", label(&e.name));
            filter_lines(v, &labels, o);
        }
    }
}

/// `/metrics` lines of `show acl`'s answer `v`: per rule (and default) packets and bytes,
/// per interface the filters' drops.
fn filter_lines(v: &Value, labels: &str, out: &mut String) {
    let sep = if labels.is_empty() { "" } else { "," };
    for l in v["lists"].as_array().into_iter().flatten() {
        let list = l["name"].as_str().unwrap_or("");
        let mut one = |rule: &str, x: &Value| {
            for k in ["packets", "bytes"] {
                let _ = writeln!(
                    out,
                    "tessera_acl_{k}_total{{{labels}{sep}acl=\"{}\",rule=\"{rule}\"}} {}",
                    label(list),
                    x[k].as_u64().unwrap_or(0)
                );
            }
        };
        for r in l["rules"].as_array().into_iter().flatten() {
            one(&r["rule"].to_string(), r);
        }
        one("default", &l["default"]);
    }
    for i in v["interfaces"].as_array().into_iter().flatten() {
        let n = label(i["name"].as_str().unwrap_or(""));
        for (k, what) in [
            ("denied_in", "acl_in"),
            ("denied_out", "acl_out"),
            ("urpf_dropped", "urpf"),
        ] {
            let _ = writeln!(
                out,
                "tessera_filter_drops_total{{{labels}{sep}interface=\"{n}\",filter=\"{what}\"}} {}",
                i[k].as_u64().unwrap_or(0)
            );
        }
    }
}

/// What the metrics server asks for on each scrape.
pub type Source = Arc<dyn Fn() -> Vec<ElementCounters> + Send + Sync>;

/// The view of one element whose counters are `all` (one per worker, summed).
pub fn element_source(
    all: Vec<Arc<dataplane::Counters>>,
    name: String,
    role: &'static str,
    external: Vec<String>,
) -> Source {
    Arc::new(move || {
        vec![ElementCounters {
            name: name.clone(),
            role: role.into(),
            counters: Snapshot::sum(&all).unwrap_or_else(|| Snapshot {
                interfaces: BTreeMap::new(),
                drops: BTreeMap::new(),
                events: BTreeMap::new(),
            }),
            external: external.clone(),
            gauges: Vec::new(),
            filters: None,
            flow_export: None,
        }]
    })
}

/// Serves `source` at `cfg.listen`, if set.
pub fn serve_if(cfg: &MetricsConfig, source: &Source) -> Result<Option<MetricsServer>, String> {
    match cfg.listen {
        Some(addr) => serve(addr, source.clone())
            .map(Some)
            .map_err(|e| e.to_string()),
        None => Ok(None),
    }
}

/// An element's `/metrics` server as its `[metrics]` says, which a reload moves: a new
/// `listen` opens the new address (the old one closes), none stops serving. The `element`
/// label is the running view's and changes only with a restart.
pub struct MetricsSlot {
    inner: Mutex<(MetricsConfig, Option<MetricsServer>)>,
    source: Source,
}

impl MetricsSlot {
    /// Serves `source` where `cfg` says (nowhere without `listen`).
    pub fn start(cfg: &MetricsConfig, source: &Source) -> Result<Arc<MetricsSlot>, String> {
        let server = serve_if(cfg, source)?;
        Ok(Arc::new(MetricsSlot {
            inner: Mutex::new((cfg.clone(), server)),
            source: source.clone(),
        }))
    }

    /// What a reload to `new` would change that it cannot: the key, or `None`.
    pub fn refused(&self, new: &MetricsConfig) -> Option<&'static str> {
        let g = self.inner.lock().ok()?;
        (g.0.element != new.element).then_some("metrics.element")
    }

    /// Serves where `new` says: whether that changed anything. On an address that cannot
    /// be opened the old one goes on serving, and the error says so.
    pub fn reload(&self, new: &MetricsConfig) -> Result<bool, String> {
        if let Some(k) = self.refused(new) {
            return Err(format!("{k}: changes only with a restart"));
        }
        let mut g = self.inner.lock().map_err(|_| "metrics: poisoned")?;
        if g.0.listen == new.listen {
            return Ok(false);
        }
        let old_addr = g.0.listen;
        let server = match serve_if(new, &self.source) {
            Ok(s) => s,
            // The same port on another address of this machine (say 0.0.0.0 for
            // 127.0.0.1): the old server gives it up first, and takes it back if the new
            // one still cannot open.
            Err(_) if g.1.is_some() => {
                g.1 = None;
                match serve_if(new, &self.source) {
                    Ok(s) => s,
                    Err(e) => {
                        g.1 = serve_if(&g.0, &self.source).ok().flatten();
                        return Err(format!("{e}; still served at {old_addr:?}"));
                    }
                }
            }
            Err(e) => return Err(e),
        };
        g.1 = server;
        g.0 = new.clone();
        tracing::info!(listen = ?new.listen, before = ?old_addr, "metrics moved");
        Ok(true)
    }

    /// The address served now, if any.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.inner.lock().ok()?.1.as_ref().map(|s| s.addr)
    }
}

/// The HTTP server of `/metrics`; it stops when dropped.
pub struct MetricsServer {
    stop: Arc<AtomicBool>,
    pub addr: SocketAddr,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(100));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The largest request head read.
const MAX_REQUEST: usize = 8192;

/// Serves `GET /metrics` at `addr` from `source`, one connection at a time, on a thread.
pub fn serve(addr: SocketAddr, source: Source) -> std::io::Result<MetricsServer> {
    let listener = TcpListener::bind(addr)
        .map_err(|e| std::io::Error::new(e.kind(), format!("[metrics] listen {addr}: {e}")))?;
    let addr = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let thread = std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::Relaxed) {
                    return;
                }
                if let Ok(c) = conn {
                    if let Err(e) = answer(c, &source) {
                        tracing::debug!(error = %e, "metrics request");
                    }
                }
            }
        })?;
    tracing::info!(%addr, "metrics served at /metrics");
    Ok(MetricsServer {
        stop,
        addr,
        thread: Some(thread),
    })
}

fn answer(mut c: TcpStream, source: &Source) -> std::io::Result<()> {
    c.set_read_timeout(Some(Duration::from_secs(2)))?;
    c.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST {
        let n = c.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, ctype, body) = match (method, path) {
        ("GET", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            exposition(&source()),
        ),
        ("GET", "/") => (
            "200 OK",
            "text/plain; charset=utf-8",
            "tessera: the router's counters are at /metrics\n".to_string(),
        ),
        ("GET", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found; try /metrics\n".into(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET\n".into(),
        ),
    };
    let resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    c.write_all(resp.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::counters::PortSnapshot;

    fn el(
        name: &str,
        ports: &[(&str, u64)],
        drops: &[(&str, u64)],
        ext: &[&str],
    ) -> ElementCounters {
        ElementCounters {
            name: name.into(),
            role: "forwarder".into(),
            counters: Snapshot {
                interfaces: ports
                    .iter()
                    .map(|(p, n)| {
                        (
                            p.to_string(),
                            PortSnapshot {
                                rx_packets: *n,
                                rx_bytes: n * 64,
                                tx_packets: *n,
                                tx_bytes: n * 64,
                            },
                        )
                    })
                    .collect(),
                drops: drops.iter().map(|(r, n)| (r.to_string(), *n)).collect(),
                events: [("ip4_forwarded".to_string(), 3)].into_iter().collect(),
            },
            external: ext.iter().map(|s| s.to_string()).collect(),
            gauges: Vec::new(),
            filters: None,
            flow_export: None,
        }
    }

    #[test]
    fn filters_go_out_as_their_families() {
        let mut e = el("r\"1", &[("r-eth0", 1)], &[], &["r-eth0"]);
        e.filters = Some(serde_json::json!({
            "lists": [{ "name": "edge", "rules": [{ "rule": 0, "packets": 5, "bytes": 300 }],
                        "default": { "packets": 2, "bytes": 120 } }],
            "interfaces": [{ "name": "r-eth0", "denied_in": 5, "denied_out": 0, "urpf_dropped": 3 }],
        }));
        let t = exposition(&[e]);
        for line in [
            "# TYPE tessera_acl_packets_total counter",
            "tessera_acl_packets_total{element=\"r\\\"1\",acl=\"edge\",rule=\"0\"} 5",
            "tessera_acl_bytes_total{element=\"r\\\"1\",acl=\"edge\",rule=\"default\"} 120",
            "tessera_filter_drops_total{element=\"r\\\"1\",interface=\"r-eth0\",filter=\"urpf\"} 3",
        ] {
            assert!(t.contains(line), "{line}\n{t}");
        }
        // Without filters, no such family.
        assert!(!exposition(&[el("r", &[], &[], &[])]).contains("tessera_acl"));
    }

    #[test]
    fn totals_count_external_ports_and_every_drop() {
        let es = vec![
            el(
                "lb",
                &[("ext", 10), ("int", 10)],
                &[("a", 1), ("b", 2)],
                &["ext"],
            ),
            el("be1", &[("int", 7)], &[("a", 4)], &[]),
        ];
        let v = router_json(&es);
        assert_eq!(v["total"]["rx_packets"], 10);
        assert_eq!(v["total"]["drops"]["a"], 5);
        assert_eq!(v["total"]["dropped"], 7);
        assert_eq!(v["external_ports"]["lb/ext"]["rx_packets"], 10);
        assert!(v["external_ports"].get("be1/int").is_none());
        let t = exposition(&es);
        assert!(
            t.contains("tessera_router_dropped_packets_total{reason=\"a\"} 5\n"),
            "{t}"
        );
        assert!(
            t.contains("tessera_router_received_packets_total 10\n"),
            "{t}"
        );
        assert!(t.contains(
            "tessera_port_received_packets_total{element=\"be1\",port=\"int\",external=\"false\"} 7\n"
        ));
        // Each family is declared once, before its samples.
        assert_eq!(
            t.matches("# TYPE tessera_dropped_packets_total counter")
                .count(),
            1
        );
    }

    #[test]
    fn top_shows_rates_between_two_views() {
        let a = router_json(&[el("r", &[("eth0", 100)], &[("x", 1)], &["eth0"])]);
        let b = router_json(&[el("r", &[("eth0", 300)], &[("x", 11)], &["eth0"])]);
        let t = top_text(&a, &b, 2.0);
        assert!(t.contains("router in 100 pps"), "{t}");
        assert!(t.contains("r/eth0"), "{t}");
        assert!(
            t.lines().any(|l| l.starts_with("r x") && l.ends_with(" 5")),
            "{t}"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn serves_metrics_over_http() {
        let es = vec![el("r", &[("eth0", 2)], &[("x", 1)], &["eth0"])];
        let s = serve("127.0.0.1:0".parse().unwrap(), Arc::new(move || es.clone())).unwrap();
        let get = |req: &str| {
            let mut c = TcpStream::connect(s.addr).unwrap();
            c.write_all(req.as_bytes()).unwrap();
            let mut r = String::new();
            c.read_to_string(&mut r).unwrap();
            r
        };
        let r = get("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(
            r.contains("tessera_dropped_packets_total{element=\"r\",reason=\"x\"} 1"),
            "{r}"
        );
        assert!(get("GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get("POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        assert!(get("\r\n\r\n").starts_with("HTTP/1.1 405"));
    }

    /// A reload moves `/metrics`: from nowhere to an address, to another (the first
    /// closes), not to a busy one (the old one goes on), never to another `element`
    /// label, and back to nowhere.
    #[test]
    fn a_reload_moves_the_metrics_server() {
        let es = vec![el("r", &[("eth0", 2)], &[], &["eth0"])];
        let source: Source = Arc::new(move || es.clone());
        let free = || {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let scrape = |a: SocketAddr| -> bool {
            let Ok(mut c) = TcpStream::connect(a) else {
                return false;
            };
            c.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
            let mut r = String::new();
            c.read_to_string(&mut r).unwrap();
            r.contains("element=\"r\"")
        };
        let cfg = |listen: Option<SocketAddr>| MetricsConfig {
            listen,
            element: None,
        };
        let slot = MetricsSlot::start(&cfg(None), &source).unwrap();
        assert_eq!(slot.addr(), None);
        let (a, b) = (free(), free());
        assert!(slot.reload(&cfg(Some(a))).unwrap());
        assert!(scrape(a));
        assert!(!slot.reload(&cfg(Some(a))).unwrap(), "nothing changed");
        assert!(slot.reload(&cfg(Some(b))).unwrap());
        assert!(scrape(b) && !scrape(a));
        let busy = TcpListener::bind("127.0.0.1:0").unwrap();
        let e = slot
            .reload(&cfg(Some(busy.local_addr().unwrap())))
            .unwrap_err();
        assert!(e.contains("still served"), "{e}");
        assert_eq!(slot.addr(), Some(b));
        assert!(scrape(b));
        let named = MetricsConfig {
            listen: Some(b),
            element: Some("other".into()),
        };
        assert_eq!(slot.refused(&named), Some("metrics.element"));
        assert!(slot.reload(&named).unwrap_err().contains("metrics.element"));
        assert!(slot.reload(&cfg(None)).unwrap());
        assert!(!scrape(b));
        assert_eq!(slot.addr(), None);
    }
}
