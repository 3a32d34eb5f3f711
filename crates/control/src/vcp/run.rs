//! The controller's run loop: its port on the interconnection, the control socket's
//! commands, and the counters each element last reported.

use super::*;

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

/// The routes a controller's config file gives (`[[route]]`, then `routes_file`, whose
/// routes win for the same prefix), as its table starts with them and as `reload` reads
/// them again.
pub(super) fn config_table(cfg: &ControllerFile) -> Result<HashMap<Net, Gateways>, String> {
    let mut table: HashMap<Net, Gateways> = cfg.routes.iter().cloned().collect();
    if let Some(file) = &cfg.routes_file {
        let t = Instant::now();
        if cfg.routes_file_via.is_empty() {
            crate::routes::load_lines(file, |l, _| {
                match l {
                    crate::routes::Line::V4(p, vias) => {
                        table.insert(p.into(), gateways(vias.iter().copied()))
                    }
                    crate::routes::Line::V6(p, vias) => {
                        table.insert(p.into(), gateways(vias.iter().copied()))
                    }
                };
                Ok(())
            })
            .map_err(|e| e.to_string())?;
        } else {
            let via = gateways(cfg.routes_file_via.clone());
            crate::tables::read(file, |p, _| {
                table.insert(p.into(), via.clone());
            })?;
        }
        tracing::info!(file = %file.display(), routes = table.len(), ms = t.elapsed().as_millis() as u64, "routes file read");
    }
    Ok(table)
}

/// The config file as the controller runs it: its text and its routes (as `reload`
/// compares them), and the file as parsed (for `config`).
pub(super) type Configured = (String, HashMap<Net, Gateways>, ControllerFile);

/// What `reload` may change in place: the config's routes, and where `/metrics` is
/// served (`[metrics] listen`).
const RELOADABLE: [&str; 7] = [
    "route",
    "routes_file",
    "routes_file_via",
    "metrics",
    "acl",
    "interface",
    "flow_export",
];

/// `reload`: reads the config file again and applies its routes to the table: a route it
/// no longer gives is withdrawn (where the table still holds it as the config set it: a
/// routing suite's or `route-add`'s route for the prefix stays), a new or changed one is
/// set. Any other changed key is refused by name; a bad file changes nothing.
pub(super) fn reload(
    path: &Path,
    configured: &Mutex<Configured>,
    fib: &Mutex<Fib>,
    metrics: Option<&crate::metrics::MetricsSlot>,
    ctl: &Mutex<Controller>,
) -> Result<Value, String> {
    let text = read(path).map_err(|e| e.to_string())?;
    let cfg = ControllerFile::parse(path, &text).map_err(|e| e.to_string())?;
    let mut last = configured.lock().map_err(|_| "poisoned")?;
    if let Some(k) = crate::run::changed_key_outside(&last.0, &text, &RELOADABLE).or_else(|| {
        metrics
            .and_then(|m| m.refused(&cfg.metrics))
            .map(str::to_string)
    }) {
        return Err(format!(
            "{}: {k}: changes only with a restart; nothing reloaded",
            path.display()
        ));
    }
    // `[flow_export]` changes in place; added or removed, it needs a restart.
    if ctl.lock().map_err(|_| "poisoned")?.flows.is_some() != cfg.flow_export.is_some() {
        return Err(format!(
            "{}: key `flow_export` added or removed, which needs a restart; nothing reloaded",
            path.display()
        ));
    }
    let table = config_table(&cfg)?;
    let mut fib = fib.lock().map_err(|_| "poisoned")?;
    let (mut set, mut withdrawn) = (0, 0);
    for (p, g) in &last.1 {
        if !table.contains_key(p) && fib.get(*p) == Some(g) {
            fib.set(*p, None);
            withdrawn += 1;
        }
    }
    for (p, g) in &table {
        if last.1.get(p) != Some(g) && fib.set(*p, Some(g.clone())) {
            set += 1;
        }
    }
    let moved = match metrics {
        Some(m) => m.reload(&cfg.metrics).map_err(|e| {
            format!(
                "{}: routes reloaded; [metrics] not moved: {e}",
                path.display()
            )
        }),
        None => Ok(false),
    };
    // Lock order everywhere: fpm, then fib, then the controller.
    let (filters_changed, filters_version) = {
        let mut c = ctl.lock().map_err(|_| "poisoned")?;
        let changed = c.filters.replace(cfg.filters.clone());
        if let (Some(f), Some(fe)) = (c.flows.as_mut(), cfg.flow_export.as_ref()) {
            f.reload(fe);
        }
        (changed, c.filters.version)
    };
    *last = (text, table, cfg);
    moved?;
    tracing::info!(file = %path.display(), set, withdrawn, version = fib.version(), filters_changed, "config reloaded");
    Ok(
        json!({"reloaded": true, "set": set, "withdrawn": withdrawn, "version": fib.version(), "count": fib.len(), "filters_changed": filters_changed, "filters_version": filters_version}),
    )
}

/// Runs the controller on `port` until `stop` is set.
pub fn run<P: Port>(
    cfg: &ControllerFile,
    mut port: P,
    mac: MacAddr,
    control: Option<&Path>,
    stop: Arc<AtomicBool>,
) -> Result<(), String> {
    // The interconnection port's link going down or coming up, logged once.
    crate::statelog::watch_links(vec![port.name().to_string()], stop.clone())
        .map_err(|e| format!("links: {e}"))?;
    let epoch = unix_secs();
    let mut fib = Fib::new(epoch, LOG_CAP);
    // The routes of the config file (`[[route]]`, `routes_file`), as `reload` compares them.
    let configured = config_table(cfg)?;
    for (p, g) in &configured {
        fib.set(*p, Some(g.clone()));
    }
    let configured = Arc::new(Mutex::new((
        std::fs::read_to_string(&cfg.path).unwrap_or_default(),
        configured,
        cfg.clone(),
    )));
    tracing::info!(epoch, routes = fib.len(), "controller table ready");
    let shared = Arc::new(Shared {
        fib: Mutex::new(fib),
        fpm: Mutex::new(FpmState::default()),
        fpm_synced: Arc::new(AtomicBool::new(false)),
        resettle: AtomicBool::new(false),
    });
    let mut c = controller(cfg, mac, &shared);
    if let Some(fe) = &cfg.flow_export {
        let export = crate::flows::remote::RouterExport::start(fe, stop.clone())?;
        tracing::info!(collector = %fe.collector, sampling = fe.sampling, "the router's flow export");
        c.flows = Some(super::flows::RouterFlows::new(export));
    }
    let ctl = Arc::new(Mutex::new(c));
    let view = metrics_view(cfg, control, &ctl, &shared);
    let metrics = crate::metrics::MetricsSlot::start(&cfg.metrics, &view)?;
    let _fpm = match cfg.fpm_listen {
        Some(addr) => {
            let l = TcpListener::bind(addr).map_err(|e| format!("FPM listen on {addr}: {e}"))?;
            tracing::info!(%addr, "listening for FPM");
            let (sh, st, settle) = (shared.clone(), stop.clone(), cfg.fpm_settle);
            Some(std::thread::spawn(move || serve_fpm(l, sh, settle, st)))
        }
        None => None,
    };
    let handler: crate::ctlsock::Handler = {
        let (sh, c, path) = (shared.clone(), ctl.clone(), cfg.path.clone());
        let metrics = metrics.clone();
        Arc::new(move |cmd: &str, req: &Value| {
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
                    "router" => {
                        let c = c.lock().map_err(|_| "poisoned")?;
                        let mut v = crate::metrics::router_json(&c.router_view());
                        v["interfaces"] = c.router_interfaces();
                        v["flow_export"] = c.flows.as_ref().map_or(Value::Null, |f| f.json());
                        Ok(v)
                    }
                    "counters" => serde_json::to_value(&c.lock().map_err(|_| "poisoned")?.stats).map_err(|e| e.to_string()),
                    "routes" => Ok(json!({"count": sh.fib.lock().map_err(|_| "poisoned")?.len()})),
                    "route-add" | "route-del" => route_command(&sh.fib, cmd, req),
                    "drain" | "undrain" => c.lock().map_err(|_| "poisoned")?.drain_command(cmd, req, now),
                    "reload" => reload(&path, &configured, &sh.fib, Some(&metrics), &c),
                    "acl" => {
                        let c = c.lock().map_err(|_| "poisoned")?;
                        let name = |m: &MacAddr| c.reports.get(m).map(|r| r.element.clone());
                        Ok(c.filters.json(&c.elements, name))
                    }
                    "config" => Ok(json!({"toml": configured.lock().map_err(|_| "poisoned")?.2.shown()})),
                    other => Err(format!("unknown command {other:?}; try fib, elements, router, counters, routes, route-add, route-del, drain, undrain, reload, config, acl")),
                }
        })
    };
    // SIGHUP reloads, as `tessera reload` does.
    crate::run::reload_on_sighup(handler.clone(), stop.clone())?;
    let _server = match control {
        Some(path) => Some(crate::ctlsock::serve(path, handler).map_err(|e| e.to_string())?),
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

/// The controller as `cfg` makes it: its hello interval, priority, takeover actions and
/// DIST keys; where FPM feeds it, distribution held until zebra has resent its table (at
/// most `[fpm] settle_ms`).
fn controller(cfg: &ControllerFile, mac: MacAddr, shared: &Shared) -> Controller {
    let mut c = Controller::new(mac, cfg.hello_interval, cfg.configure_lbs, Instant::now());
    c.terminate = cfg.terminate;
    c.priority = cfg.priority;
    c.ospf_grace = cfg.ospf_grace;
    c.on_active = cfg.on_active.clone();
    c.on_standby = cfg.on_standby.clone();
    if cfg.fpm_listen.is_some() {
        c.settle = Some(cfg.fpm_settle);
        c.hold = Some((shared.fpm_synced.clone(), c.started + cfg.fpm_settle));
    }
    c.guard = cfg.dist.guard();
    c.signer = cfg.dist.signer();
    c.filters = FilterDist::new(cfg.filters.clone());
    c
}

/// What `/metrics` shows of the controller: the router view it keeps, and its own gauges.
fn metrics_view(
    cfg: &ControllerFile,
    control: Option<&Path>,
    ctl: &Arc<Mutex<Controller>>,
    shared: &Arc<Shared>,
) -> crate::metrics::Source {
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
        let mut own = c.own_gauges(&name, &fib);
        // The router's flow export (`samples`: the records the back-ends sent).
        own.flow_export = c.flows.as_ref().map(|f| f.export.export.json());
        v.push(own);
        v
    })
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
