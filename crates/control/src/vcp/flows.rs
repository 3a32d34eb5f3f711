//! The router's flow export at the controller (docs/flows.md, "In the multistage
//! router"): the active controller tells the back-ends the rate and timeouts of its
//! `[flow_export]` (DIST FLOW_CONFIG, every second and at once on a change), takes the
//! flows they ended (FLOW_RECORDS) and exports them as the router through
//! crate::flows::remote's [`RouterExport`]. The router's interface indexes are the VLAN
//! ids of its external networks (`show router`'s `interfaces`).

use super::*;
use crate::flows::remote::RouterExport;

/// How often the active controller repeats FLOW_CONFIG.
pub const FLOW_CONFIG_EVERY: Duration = Duration::from_secs(1);

/// The controller's flow export.
pub struct RouterFlows {
    pub export: RouterExport,
    next_config: Option<Instant>,
}

impl RouterFlows {
    pub fn new(export: RouterExport) -> RouterFlows {
        RouterFlows {
            export,
            next_config: None,
        }
    }

    /// A reloaded `[flow_export]`: applied, and told the back-ends at once.
    pub fn reload(&mut self, cfg: &crate::config::FlowExportConfig) {
        self.export.export.reload(cfg);
        self.next_config = None;
    }

    /// `show router`'s `flow_export`: the exporter's counters, with the records the
    /// back-ends sent as `records_received`.
    pub fn json(&self) -> Value {
        let mut v = self.export.export.json();
        if let Some(o) = v.as_object_mut() {
            let received = o.remove("samples").unwrap_or(json!(0));
            o.insert("records_received".into(), received);
            for k in [
                "samples_lost",
                "ring_overruns",
                "cache_full",
                "flows_active",
            ] {
                o.remove(k);
            }
        }
        v
    }
}

impl Controller {
    /// The active controller's FLOW_CONFIG to every element, when due.
    pub(super) fn flows_tick(&mut self, now: Instant, out: &mut Vec<Vec<u8>>) {
        let Some(f) = self.flows.as_mut() else {
            return;
        };
        if f.next_config.is_some_and(|t| now < t) {
            return;
        }
        f.next_config = Some(now + FLOW_CONFIG_EVERY);
        let c = f.export.flow_config();
        if let Some(frame) = self.frame(dist::Message::FlowConfig(c), MacAddr::BROADCAST) {
            self.stats.flow_configs_sent += 1;
            out.push(frame);
        }
    }

    /// Flows a back-end ended: exported where this controller is active and exports
    /// flows; counted and dropped otherwise.
    pub(super) fn flow_records(&mut self, src: MacAddr, records: Vec<wire::ipfix::FlowRecord>) {
        let n = records.len() as u64;
        let known = self
            .elements
            .get(&src)
            .is_some_and(|e| e.kind == ElementKind::Forwarder);
        match self.flows.as_ref() {
            Some(f) if known && self.role == Role::Active => {
                self.stats.flow_records_received += n;
                f.export.take(records);
            }
            _ => self.stats.flow_records_ignored += n,
        }
    }

    /// `show router`'s `interfaces`: the router's external interfaces as the LBs' hellos
    /// give them, by the VLAN id of each network, which is also the interface index its
    /// flow records carry.
    pub fn router_interfaces(&self) -> Value {
        let mut m = serde_json::Map::new();
        for e in self.elements.values() {
            if e.kind != ElementKind::Balancer {
                continue;
            }
            for p in &e.ports {
                if p.role == dist::PortRole::External && p.vlan != 0 {
                    m.insert(
                        format!("vlan{}", p.vlan),
                        json!({
                            "index": p.vlan,
                            "address": format!("{}/{}", p.addr, p.prefix_len),
                            "mac": p.mac.to_string(),
                        }),
                    );
                }
            }
        }
        Value::Object(m)
    }
}
