//! The forwarder's control-socket commands as its worker answers them (show, routes and
//! their IPv6 counterparts), and what a reload may change in place.

use super::*;

/// Answers IPv6 route commands on the worker that holds the IPv6 table (its route writer
/// lives there), and the rest as [`answer`] does. `reload-routes6` takes the routes the
/// control thread read into `pending6`.
pub(super) fn answer6(f: &mut Forwarder, cmd: &str, req: &Value, pending6: &Pending6) -> Value {
    let r = match cmd {
        "reload-routes6" => {
            let routes = pending6.lock().ok().and_then(|mut p| p.take());
            match routes {
                Some(r) if f.ipv6_enabled() || !r.is_empty() => {
                    let t = Instant::now();
                    f.replace_routes6(r)
                        .map(|n| {
                            let ms = t.elapsed().as_millis() as u64;
                            tracing::info!(routes = n, ms, "IPv6 routes reloaded");
                            json!({"routes6": n, "ms6": ms})
                        })
                        .map_err(|e| e.to_string())
                }
                _ => Ok(json!({})),
            }
        }
        "routes6" => Ok(json!({"count6": f.route_count6()})),
        "route-add" | "route-del" => (|| {
            let p = req["prefix"].as_str().ok_or("missing \"prefix\"")?;
            let prefix = fib::Prefix6::parse_strict(p).map_err(|e| format!("prefix {p:?}: {e}"))?;
            if cmd == "route-del" {
                let removed = f.remove_route6(prefix);
                return Ok(json!({"removed": removed, "count6": f.route_count6()}));
            }
            let texts: Vec<&Value> = match &req["via"] {
                Value::Array(a) if !a.is_empty() => a.iter().collect(),
                v @ Value::String(_) => vec![v],
                _ => return Err("missing \"via\" (an address or a list)".into()),
            };
            let vias = texts
                .iter()
                .map(|v| {
                    v.as_str()
                        .and_then(|t| t.parse::<std::net::Ipv6Addr>().ok())
                        .ok_or_else(|| format!("via {v} is not an IPv6 address"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            f.add_route6(prefix, &vias).map_err(|e| e.to_string())?;
            Ok(json!({"count6": f.route_count6()}))
        })(),
        _ => return answer(f, cmd, req),
    };
    r.unwrap_or_else(|e| json!({"error": e}))
}

/// A worker's answer, its `"error"` an error.
pub(super) fn worker_result(v: Result<Value, String>) -> Result<Value, String> {
    let v = v?;
    match v["error"].as_str() {
        Some(e) => Err(e.to_string()),
        None => Ok(v),
    }
}

/// Answers a control-socket command that needs the worker's own state.
pub(super) fn answer(f: &mut Forwarder, cmd: &str, _req: &Value) -> Value {
    match cmd {
        "neighbours" => Value::Array(
            f.neighbours
                .entries()
                .into_iter()
                .map(|(port, ip, mac, state)| {
                    json!({"interface": f.ifaces[port as usize].name, "address": ip.to_string(), "mac": mac.to_string(), "state": format!("{state:?}").to_lowercase()})
                })
                .chain(f.neighbours6().into_iter().map(|(i, ip, mac)| {
                    json!({"interface": f.ifaces[i as usize].name, "address": ip.to_string(), "mac": mac.to_string(), "state": "reachable"})
                }))
                .collect(),
        ),
        "interfaces" => Value::Array(
            f.ifaces
                .iter()
                .enumerate()
                .map(|(ix, i)| {
                    let mut v = json!({"name": i.name, "mac": i.mac.to_string(), "mtu": i.mtu, "address": i.v4().map(|a| format!("{a}/{}", i.prefix_len))});
                    if let Some(a) = f.addresses6(ix) {
                        v["addresses6"] = json!(a);
                    }
                    if let Some(vl) = i.vlan {
                        v["vlan"] = json!(vl.id);
                        v["parent"] = json!(f.ifaces[vl.parent as usize].name);
                    }
                    v
                })
                .collect(),
        ),
        _ => Value::Null,
    }
}

/// The gateways of a `route-add` request: `"via"`, an address or a list.
pub(crate) fn vias_of(req: &Value) -> Result<Vec<Ipv4Addr>, String> {
    match &req["via"] {
        Value::String(s) => Ok(vec![s
            .parse()
            .map_err(|_| format!("via {s:?} is not an IPv4 address"))?]),
        Value::Array(a) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .and_then(|s| s.parse().ok())
                    .ok_or(format!("via {v} is not an IPv4 address"))
            })
            .collect(),
        _ => Err("missing \"via\" (an address or a list)".into()),
    }
}

/// The `via` of a route command: an address of either family, or a list of them.
pub fn ip_vias_of(req: &Value) -> Result<Vec<std::net::IpAddr>, String> {
    let texts: Vec<&Value> = match &req["via"] {
        Value::Array(a) if !a.is_empty() => a.iter().collect(),
        v @ Value::String(_) => vec![v],
        _ => return Err("missing \"via\" (an address or a list)".into()),
    };
    texts
        .iter()
        .map(|v| {
            v.as_str()
                .and_then(|s| s.parse().ok())
                .ok_or(format!("via {v} is not an IP address"))
        })
        .collect()
}

/// IPv6 routes read by `reload-routes` on the control thread, for the worker to take.
pub(super) type Pending6 = Mutex<Option<Routes6>>;

/// Route commands, run on the control thread against the route writer.
pub(super) fn route_command(
    routes: &Mutex<RouteTable>,
    cfg: Option<&ForwarderFile>,
    fast: Option<&crate::fast::ForwarderFast>,
    pending6: &Pending6,
    cmd: &str,
    req: &Value,
) -> Result<Value, String> {
    let r = route_change(routes, cfg, pending6, cmd, req)?;
    if let (Some(fl), false) = (fast, cmd == "routes") {
        let t = routes.lock().map_err(|_| "route table poisoned")?;
        fl.publish(&t)?;
    }
    Ok(r)
}

pub(super) fn route_change(
    routes: &Mutex<RouteTable>,
    cfg: Option<&ForwarderFile>,
    pending6: &Pending6,
    cmd: &str,
    req: &Value,
) -> Result<Value, String> {
    let mut t = routes.lock().map_err(|_| "route table poisoned")?;
    let prefix = || -> Result<Prefix, String> {
        let p = req["prefix"].as_str().ok_or("missing \"prefix\"")?;
        Prefix::parse_strict(p).map_err(|e| format!("prefix {p:?}: {e}"))
    };
    match cmd {
        "routes" => Ok(json!({"count": t.len()})),
        "route-add" => {
            let vias = vias_of(req)?;
            t.add(prefix()?, &vias).map_err(|e| e.to_string())?;
            Ok(json!({"count": t.len()}))
        }
        "route-del" => {
            let removed = t.remove(prefix()?);
            Ok(json!({"removed": removed, "count": t.len()}))
        }
        "reload-routes" => {
            let cfg = cfg.ok_or("no configuration to reload from")?;
            let time = Instant::now();
            let cfg = ForwarderFile::load(&cfg.path).map_err(|e| e.to_string())?;
            let (routes, routes6) = config_routes_all(&cfg, |gw| t.port_for_gateway(gw))?;
            let n = t.replace(routes).map_err(|e| e.to_string())?;
            *pending6.lock().map_err(|_| "poisoned")? = Some(routes6);
            let ms = time.elapsed().as_millis() as u64;
            tracing::info!(routes = n, ms, "routes reloaded");
            Ok(json!({"routes": n, "count": t.len(), "ms": ms}))
        }
        _ => Err(format!("unknown command {cmd:?}")),
    }
}

/// The keys a forwarder's `reload` applies in place: its routes (`route`, `routes_file`,
/// `routes_file_via`, and what the routes file holds), where `/metrics` is served
/// (`[metrics] listen`), its filters (`[[acl]]`, and `acl_in`, `acl_out`, `urpf`,
/// `urpf_allow_default` of an `[[interface]]`) and `[flow_export]` (its collector, rate and
/// timeouts; adding or removing the table needs a restart). Anything else needs a restart.
pub(super) const RELOADABLE: [&str; 6] = [
    "route",
    "routes_file",
    "routes_file_via",
    "metrics",
    "acl",
    "flow_export",
];

/// The first key, outside [`RELOADABLE`], whose value differs between two versions of a
/// config file (as TOML; dotted, with array indices: `interface[1].address`), if any.
pub fn changed_key(old: &str, new: &str) -> Option<String> {
    changed_key_outside(old, new, &RELOADABLE)
}

/// As [`changed_key`], with `reloadable` the top-level keys a reload may change.
pub fn changed_key_outside(old: &str, new: &str, reloadable: &[&str]) -> Option<String> {
    fn walk(
        path: &str,
        a: Option<&toml::Value>,
        b: Option<&toml::Value>,
        reloadable: &[&str],
    ) -> Option<String> {
        use toml::Value;
        match (a, b) {
            (Some(Value::Table(x)), Some(Value::Table(y))) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                keys.into_iter().find_map(|k| {
                    if path.is_empty() && reloadable.contains(&k.as_str()) {
                        return None;
                    }
                    if reloadable.contains(&"acl")
                        && path.starts_with("interface[")
                        && crate::config::RELOADABLE_IN_INTERFACE.contains(&k.as_str())
                    {
                        return None;
                    }
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(&p, x.get(k), y.get(k), reloadable)
                })
            }
            (Some(Value::Array(x)), Some(Value::Array(y))) => (0..x.len().max(y.len()))
                .find_map(|i| walk(&format!("{path}[{i}]"), x.get(i), y.get(i), reloadable)),
            (a, b) if a == b => None,
            _ => Some(path.to_string()),
        }
    }
    let parse = |s: &str| s.parse::<toml::Table>().ok().map(toml::Value::Table);
    walk("", parse(old).as_ref(), parse(new).as_ref(), reloadable)
}

/// What the forwarder's control thread answers commands from (`tessera show`, `route`,
/// `reload`...): its config, routes, fast path, workers and metrics.
pub(super) struct Control {
    /// The config as this forwarder started from it, and that file's text: `reload`
    /// compares the file with it.
    pub(super) cfg: Option<ForwarderFile>,
    pub(super) started_text: Option<String>,
    /// The config as the forwarder runs it (the last one a reload applied), for `config`.
    pub(super) running: Arc<Mutex<Option<ForwarderFile>>>,
    /// The router's filters from the controller (a back-end's), merged again on a reload.
    pub(super) held: crate::remote_filters::HeldShare,
    /// Asks the first worker (neighbours, interfaces, captures, IPv6 routes).
    pub(super) asker: Asker,
    pub(super) counters: Arc<dataplane::Counters>,
    /// Every worker's counters.
    pub(super) all_counters: Vec<Arc<dataplane::Counters>>,
    pub(super) metrics: Arc<crate::metrics::MetricsSlot>,
    pub(super) view: crate::metrics::Source,
    pub(super) routes: Arc<Mutex<RouteTable>>,
    pub(super) fast: Option<crate::fast::ForwarderFast>,
    /// Why the fast path is off, where it is.
    pub(super) fast_off: Option<String>,
    pub(super) pending6: Arc<Pending6>,
    /// A back-end's route writer (the controller's table).
    pub(super) writer: Option<Arc<Mutex<crate::distrib::Writer>>>,
    pub(super) ipv6: bool,
    /// The filters the workers apply (a reload swaps them).
    pub(super) filters: dataplane::acl::FilterShare,
    /// Flow export, where `[flow_export]` set it up.
    pub(super) flows: Option<crate::flows::FlowExport>,
}

/// Installs the filters of the forwarder's file `running` merged with the router's `set`
/// (remote_filters::merged), checked for the fast path first: whether they changed. An
/// error changes nothing.
pub(super) fn apply_filters(
    running: &Mutex<Option<ForwarderFile>>,
    share: &dataplane::acl::FilterShare,
    fast: Option<&crate::fast::ForwarderFast>,
    set: Option<&crate::config::RouterFilters>,
) -> Result<bool, String> {
    let local = running
        .lock()
        .map_err(|_| "poisoned")?
        .as_ref()
        .map(crate::remote_filters::Local::of_forwarder)
        .unwrap_or_default();
    crate::remote_filters::install(&local, share, set, fast)
}

impl Control {
    /// A reload's `[flow_export]`: refused where it was added or removed (checked before
    /// anything changes); changed in place where `apply`.
    fn reload_flow_export(&self, loaded: &ForwarderFile, apply: bool) -> Result<(), String> {
        // A back-end that exports for the router (as its controller says) has no table.
        let own = self.flows.as_ref().filter(|f| f.to_controller.is_none());
        match (own, &loaded.flow_export) {
            (Some(fx), Some(cfg)) if apply => fx.reload(cfg),
            (Some(_), Some(_)) => {}
            (None, None) => {}
            _ => {
                return Err(format!(
                "{}: key `flow_export` added or removed, which needs a restart; nothing changed",
                loaded.path.display()
            ))
            }
        }
        Ok(())
    }

    /// Answers command `cmd` with its request `req`.
    pub(super) fn handle(&self, cmd: &str, req: &Value) -> Result<Value, String> {
        match cmd {
            "config" => match self.running.lock().map_err(|_| "poisoned")?.as_ref() {
                Some(c) => Ok(json!({ "toml": crate::showconfig::forwarder(c) })),
                None => Err("this forwarder runs without a config file".into()),
            },
            // Re-reads the config file: the routes change in place (as route reload);
            // any other change is refused with its key; a file that does not load
            // changes nothing and says why (file, line, key).
            "reload" => {
                let Some(c) = self.cfg.as_ref() else {
                    return Err("no configuration to reload from".into());
                };
                let text = std::fs::read_to_string(&c.path)
                    .map_err(|e| format!("{}: {e}", c.path.display()))?;
                let loaded = ForwarderFile::load(&c.path).map_err(|e| format!("{e}; nothing changed"))?;
                if let Some(key) = self.started_text
                    .as_deref()
                    .and_then(|old| changed_key(old, &text))
                    .or_else(|| self.metrics.refused(&loaded.metrics).map(str::to_string))
                {
                    return Err(format!(
                        "{}: key `{key}` changed, which needs a restart (a reload changes the routes and [metrics] listen: {}); nothing changed",
                        c.path.display(),
                        RELOADABLE.join(", ")
                    ));
                }
                self.reload_flow_export(&loaded, false)?;
                // The filters first (with the router's from the controller): checked for
                // the fast path before anything changes.
                let held = self.held.lock().map_err(|_| "poisoned")?;
                let changed_filters = apply_filters(
                    &Mutex::new(Some(loaded.clone())),
                    &self.filters,
                    self.fast.as_ref(),
                    held.set.as_ref(),
                )
                .map_err(|e| format!("{}: {e}; nothing changed", c.path.display()))?;
                drop(held);
                if changed_filters {
                    tracing::info!(lists = loaded.acls.len(), "filters reloaded");
                }
                let mut v = route_command(&self.routes, self.cfg.as_ref(), self.fast.as_ref(), &self.pending6, "reload-routes", req)?;
                v["filters_changed"] = json!(changed_filters);
                let w = worker_result(ask_worker(&self.asker, "reload-routes6", req))?;
                if let Some(fl) = &self.fast {
                    fl.wait_routes6(Duration::from_secs(30));
                }
                if let (Value::Object(a), Value::Object(b)) = (&mut v, w) {
                    a.extend(b);
                }
                v["reloaded"] = json!(true);
                // Where /metrics is served (an address that cannot be opened leaves it
                // where it was, and says so after the routes it did apply).
                if let Err(e) = self.metrics.reload(&loaded.metrics) {
                    return Err(format!("{}: routes reloaded; [metrics] not moved: {e}", c.path.display()));
                }
                v["metrics"] = json!(self.metrics.addr().map(|a| a.to_string()));
                self.reload_flow_export(&loaded, true)?;
                if let Ok(mut r) = self.running.lock() {
                    *r = Some(loaded);
                }
                tracing::info!(file = %c.path.display(), "config reloaded");
                Ok(v)
            }
            "acl" => {
                let f = self.filters.load();
                let mut v = crate::filters::show(&f, self.fast.as_ref().map(|fl| fl.filter_counts(&f)));
                v["from_controller"] = self.held.lock().map_err(|_| "poisoned")?.json();
                Ok(v)
            }
            "counters" => {
                let mut v = workers_counters(&self.all_counters)?;
                if let Some(fl) = &self.fast {
                    v["fast_path"] = fl.counters();
                }
                if let Some(fx) = &self.flows {
                    v["flow_export"] = fx.json();
                }
                Ok(v)
            }
            "describe" => serde_json::to_value(dataplane::counters::descriptions_for(self.counters.role)).map_err(|e| e.to_string()),
            "router" => Ok(crate::metrics::router_json(&(self.view)())),
            "interfaces" => {
                let mut v = ask_worker(&self.asker, cmd, req)?;
                let off = self.fast_off.as_deref().unwrap_or("the fast path is off");
                crate::fast::decorate_interfaces(
                    &mut v,
                    |n| self.fast.as_ref().and_then(|fl| fl.port_fast(n)),
                    off,
                );
                Ok(v)
            }
            "neighbours" | "capture-start" | "capture-stop" => ask_worker(&self.asker, cmd, req),
            "fib" => match &self.writer {
                Some(w) => {
                    let w = w.lock().map_err(|_| "writer poisoned")?;
                    Ok(json!({
                        "role": "backend",
                        "epoch": w.epoch,
                        "version": w.version,
                        "routes": w.len(),
                        "routes6": w.counts().1,
                        "digest": format!("{:016x}", w.digest()),
                        "controller": w.controller.map(|m| m.to_string()),
                        "incarnation": format!("{:016x}", w.incarnation),
                        "writer": w.stats,
                    }))
                }
                None => Err("this forwarder is not a back-end: it takes no routes from a controller".into()),
            },
            "route-add" | "route-del" if req["prefix"].as_str().is_some_and(|p| p.contains(':')) => {
                let v = worker_result(ask_worker(&self.asker, cmd, req));
                if let Some(fl) = &self.fast {
                    fl.wait_routes6(Duration::from_secs(10));
                }
                v
            }
            "routes" | "route-add" | "route-del" | "reload-routes" => {
                let mut v = route_command(&self.routes, self.cfg.as_ref(), self.fast.as_ref(), &self.pending6, cmd, req)?;
                let more = match cmd {
                    "reload-routes" => Some("reload-routes6"),
                    "routes" if self.ipv6 => Some("routes6"),
                    _ => None,
                };
                if let Some(m) = more {
                    let w = worker_result(ask_worker(&self.asker, m, req))?;
                    if let Some(fl) = &self.fast {
                        fl.wait_routes6(Duration::from_secs(30));
                    }
                    if let (Value::Object(a), Value::Object(b)) = (&mut v, w) {
                        a.extend(b);
                    }
                }
                Ok(v)
            }
            other => Err(format!(
                "unknown command {other:?}; try counters, describe, router, interfaces, neighbours, fib, routes, route-add, route-del, reload-routes, reload, config"
            )),
        }
    }
}
