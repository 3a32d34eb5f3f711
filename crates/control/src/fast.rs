//! The forwarder's XDP fast path (see `io::fastpath`), kept in step with the forwarder:
//! the control thread compiles the route table into the fast path's table after every
//! change, and the worker writes its resolved neighbours into the fast path's map.

use dataplane::forwarder::{Forwarder, Iface};
use dataplane::neighbour::State;
use dataplane::routes::RouteTable;
use io::fastpath::{FastPath, FastPort, Hop, ProgramFacts};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A forwarder's fast path and how its interfaces map to ports.
#[derive(Clone)]
pub struct FastLink {
    pub fp: Arc<Mutex<FastPath>>,
    /// Per forwarder interface, its port if the fast path serves it (untagged ones).
    pub port_of_iface: Vec<Option<u16>>,
    /// Port names, in port order.
    pub names: Vec<String>,
}

impl FastLink {
    /// Creates the fast path's maps for `ifaces` (a forwarder's; untagged ones are its
    /// ports, in order).
    pub fn new(ifaces: &[Iface]) -> Result<FastLink, String> {
        let mut port_of_iface = Vec::with_capacity(ifaces.len());
        let mut ports = Vec::new();
        for i in ifaces {
            if i.vlan.is_some() {
                port_of_iface.push(None);
            } else {
                port_of_iface.push(Some(ports.len() as u16));
                ports.push(FastPort {
                    ifname: i.name.clone(),
                    mac: i.mac.0,
                    mtu: i.mtu.min(u16::MAX as usize) as u16,
                });
            }
        }
        let fp = FastPath::new(&ports).map_err(|e| format!("fast path: {e}"))?;
        Ok(FastLink {
            fp: Arc::new(Mutex::new(fp)),
            port_of_iface,
            names: ports.into_iter().map(|p| p.ifname).collect(),
        })
    }

    /// What port `port`'s program needs to know of the forwarder.
    pub fn facts(ifaces: &[Iface], port: u32, mac: [u8; 6]) -> ProgramFacts {
        let mut special = Vec::new();
        for i in ifaces {
            special.push(i.addr);
            special.extend(i.broadcast());
        }
        special.sort();
        special.dedup();
        ProgramFacts { port, mac, special }
    }

    /// Compiles the route table into the fast path's layout and publishes it.
    pub fn publish(&self, t: &RouteTable) -> Result<(), String> {
        let time = Instant::now();
        let (rib, groups) = t.snapshot();
        let d = fib::Dir24::build(rib);
        let (t24, t8) = d.tables();
        let hops: Vec<Hop> = groups
            .iter()
            .map(|g| match &g[..] {
                [h] => match self.port_of_iface.get(h.port as usize).copied().flatten() {
                    Some(port) => Hop::Port {
                        port,
                        gateway: h.via,
                    },
                    None => Hop::Slow,
                },
                _ => Hop::Slow,
            })
            .collect();
        self.fp
            .lock()
            .map_err(|_| "fast path poisoned")?
            .publish(t24, t8, &hops)
            .map_err(|e| format!("fast path: {e}"))?;
        tracing::debug!(
            routes = t.len(),
            ms = time.elapsed().as_millis() as u64,
            "fast path table published"
        );
        Ok(())
    }

    /// Writes the forwarder's resolved neighbours into the fast path.
    pub fn sync_neighbours(&self, f: &Forwarder) {
        let resolved: Vec<_> = f
            .neighbours
            .entries()
            .into_iter()
            .filter(|e| matches!(e.3, State::Reachable | State::Probe))
            .filter_map(|(i, ip, mac, _)| {
                let port = self.port_of_iface.get(i as usize).copied().flatten()?;
                Some((port, ip, mac.0))
            })
            .collect();
        if let Ok(mut fp) = self.fp.lock() {
            if let Err(e) = fp.set_neighbours(resolved) {
                tracing::warn!(error = %e, "fast path: neighbour map");
            }
        }
    }

    /// The fast path's counters, as `show counters` prints them under `fast_path`.
    pub fn counters(&self) -> Value {
        let Ok(fp) = self.fp.lock() else {
            return Value::Null;
        };
        let st = fp.stats();
        let mut per = serde_json::Map::new();
        for (name, s) in self.names.iter().zip(&st) {
            per.insert(
                name.clone(),
                json!({"rx_forwarded": s[0], "to_user_space": s[1], "tx_forwarded": s[2]}),
            );
        }
        json!({
            "forwarded": st.iter().map(|s| s[0]).sum::<u64>(),
            "to_user_space": st.iter().map(|s| s[1]).sum::<u64>(),
            "interfaces": per,
        })
    }
}
