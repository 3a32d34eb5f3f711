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
