//! What the controller shows: `tessera show fib` and `show elements`, and the router view
//! of every element's counters (with its own gauges) that `show counters` and `/metrics`
//! serve.

use super::*;

impl Controller {
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
                filters: None,
                flow_export: None,
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
            filters: None,
            flow_export: None,
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
                            "mac": p.mac.to_string(), "address": (!p.addr.is_unspecified()).then(|| format!("{}/{}", p.addr, p.prefix_len)),
                            "addresses6": e.addrs6.iter().filter(|a| a.port as usize == i).map(|a| format!("{}/{}", a.addr, a.prefix_len)).collect::<Vec<_>>(),
                            "role": format!("{:?}", p.role).to_lowercase(), "vlan": p.vlan, "speed_mbps": p.speed_mbps,
                        })).collect::<Vec<_>>(),
                    })
                })
                .collect(),
        )
    }
}
