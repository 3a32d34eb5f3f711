//! The elements' run loop over real (or in-memory) ports, and the forwarder's wiring.
//!
//! One worker thread owns the ports and the element ([`Element`]: a [`Forwarder`] or an
//! LB): it receives a batch from every port, runs each frame through the element, transmits
//! each port's queue in one call, runs the element's timers at least every
//! [`Element::poll_interval`], and sleeps in `poll(2)` on the ports' sockets when nothing
//! arrives. ARP, ICMP for the router and DIST run inline in the worker.
//!
//! The control socket runs on its own thread. It owns the route writer ([`RouteTable`]):
//! `reload-routes`, `route-add` and `route-del` change routes there while the worker
//! forwards, and each change is published atomically (see `fib::table`). It reads the
//! shared counters directly and asks the worker through a channel only for state the worker
//! owns (neighbours).

use crate::config::ForwarderFile;
use crate::ctlsock;
use dataplane::element::Element;
use dataplane::forwarder::{Forwarder, Iface, Vlan};
use dataplane::port::Port;
use dataplane::routes::RouteTable;
use dataplane::{Drop, TxQueues};
use fib::Prefix;
use serde_json::{json, Value};
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use wire::MacAddr;

mod commands;
use commands::*;
pub use commands::{changed_key, changed_key_outside, ip_vias_of};

/// Frames taken from one port per pass.
pub const BATCH: usize = 256;

/// A control-socket command for the worker: the command, the request, where to answer.
pub type Query = (String, Value, mpsc::Sender<Value>);

/// What the control thread uses to ask the worker (see [`ask_worker`]).
pub type Asker = Mutex<mpsc::Sender<Query>>;

/// What an element's fast path has done, as `counters` shows it (`fast_path`).
pub type FastCounters = std::sync::Arc<dyn Fn() -> Value + Send + Sync>;

/// The servers an element keeps while it runs.
/// (`/metrics`: its slot, which the element's `reload` moves.)
pub type Servers = (
    Option<crate::ctlsock::Server>,
    Arc<crate::metrics::MetricsSlot>,
);

/// Serves an element's control socket at `path` (if any): `counters`, `describe` and
/// `router` (its view as a router of one, every port external) from `counters`; each of
/// `worker` asked of the element's run loop through the returned receiver (which
/// [`run_element`] takes); and `/metrics` where `metrics` says. If `worker` holds
/// `reload`, SIGHUP asks for it too. `fast_path`, where the
/// element has one, gives the `fast_path` part of its `counters` (its programs' frames).
/// Keep the servers while the element runs.
pub fn serve_element(
    path: Option<&std::path::Path>,
    counters: std::sync::Arc<dataplane::Counters>,
    worker: &'static [&'static str],
    metrics: &crate::metrics::MetricsConfig,
    role: &'static str,
    fast_path: Option<FastCounters>,
) -> Result<(Servers, mpsc::Receiver<Query>), String> {
    let (qtx, qrx) = mpsc::channel::<Query>();
    let view = crate::metrics::element_source(
        vec![counters.clone()],
        crate::metrics::element_name(metrics, path, role),
        role,
        counters.port_names.clone(),
    );
    let ms = crate::metrics::MetricsSlot::start(metrics, &view)?;
    let asker: Asker = Mutex::new(qtx);
    let handler: crate::ctlsock::Handler =
        std::sync::Arc::new(move |cmd: &str, req: &Value| match cmd {
            "counters" => {
                let mut v = serde_json::to_value(counters.snapshot()).map_err(|e| e.to_string())?;
                if let Some(f) = &fast_path {
                    v["fast_path"] = f();
                }
                Ok(v)
            }
            "describe" => {
                serde_json::to_value(dataplane::counters::descriptions_for(counters.role))
                    .map_err(|e| e.to_string())
            }
            "router" => Ok(crate::metrics::router_json(&view())),
            // A reload the worker refuses is the command's error (`tessera reload` exits 1).
            "reload" if worker.contains(&"reload") => {
                let v = ask_worker(&asker, cmd, req)?;
                match v["error"].as_str() {
                    Some(e) => Err(e.to_string()),
                    None => Ok(v),
                }
            }
            c if worker.contains(&c) || c == "capture-start" || c == "capture-stop" => {
                ask_worker(&asker, cmd, req)
            }
            other => Err(format!(
                "unknown command {other:?}; try counters, describe, router, {}",
                worker.join(", ")
            )),
        });
    // An element that reloads its config does so on SIGHUP too, as `tessera reload`.
    if worker.contains(&"reload") {
        reload_on_sighup(handler.clone(), Arc::new(AtomicBool::new(false)))?;
    }
    let Some(path) = path else {
        return Ok(((None, ms), qrx));
    };
    let server = crate::ctlsock::serve(path, handler).map_err(|e| e.to_string())?;
    Ok(((Some(server), ms), qrx))
}

/// Asks the worker a question and waits (2 s at most) for the answer.
pub fn ask_worker(asker: &Asker, cmd: &str, req: &Value) -> Result<Value, String> {
    let (tx, rx) = mpsc::channel();
    asker
        .lock()
        .map_err(|_| "worker gone")?
        .send((cmd.to_string(), req.clone(), tx))
        .map_err(|_| "worker gone")?;
    rx.recv_timeout(Duration::from_secs(2))
        .map_err(|_| "worker did not answer".to_string())
}

/// A port as the system reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub mac: MacAddr,
    pub mtu: usize,
    pub speed_mbps: u32,
}

impl Link {
    /// A link with an MTU of 1500 and no known speed.
    pub fn new(mac: MacAddr) -> Link {
        Link {
            mac,
            mtu: 1500,
            speed_mbps: 0,
        }
    }
}

/// The IPv4 static routes and routes-file routes of a configuration (see
/// [`config_routes_all`]).
pub fn config_routes(
    cfg: &ForwarderFile,
    port_for: impl Fn(Ipv4Addr) -> Option<u16>,
) -> Result<Vec<(Prefix, Vec<Ipv4Addr>)>, String> {
    config_routes_all(cfg, port_for).map(|r| r.0)
}

/// IPv4 routes: (prefix, gateways).
pub type Routes4 = Vec<(Prefix, Vec<Ipv4Addr>)>;
/// IPv6 routes: (prefix, gateways).
pub type Routes6 = Vec<(fib::Prefix6, Vec<std::net::Ipv6Addr>)>;

/// The static routes and the routes file of a configuration, IPv4 and IPv6, each gateway
/// checked against the interfaces; errors name the file and line. With `routes_file_via`,
/// the file's IPv4 routes go through its IPv4 gateways and its IPv6 routes through its
/// IPv6 gateway (a family without a gateway there is skipped).
pub fn config_routes_all(
    cfg: &ForwarderFile,
    port_for: impl Fn(Ipv4Addr) -> Option<u16>,
) -> Result<(Routes4, Routes6), String> {
    // A star member's gateways may be on another member's network too.
    let on_net6 = |a: std::net::Ipv6Addr| {
        cfg.interfaces.iter().any(|i| {
            i.addrs6
                .iter()
                .any(|&(n, l)| fib::Prefix6::new(n, l).contains(a))
        }) || cfg
            .star
            .iter()
            .flat_map(|s| s.members6.iter())
            .any(|m| m.0.contains(a))
    };
    let mut routes6: Routes6 = cfg
        .routes6
        .iter()
        .map(|r| (r.prefix, r.via.clone()))
        .collect();
    let mut routes = Vec::with_capacity(cfg.routes.len());
    for r in &cfg.routes {
        if let Some(gw) = r.via.iter().find(|v| port_for(**v).is_none()) {
            return Err(format!(
                "{}:{}: route {}: gateway {gw} is not on any interface's network",
                cfg.path.display(),
                r.line,
                r.prefix
            ));
        }
        routes.push((r.prefix, r.via.clone()));
    }
    let via_given = !cfg.routes_file_via.is_empty() || !cfg.routes_file_via6.is_empty();
    if let (Some(file), true) = (&cfg.routes_file, via_given) {
        let t = Instant::now();
        let (via, via6) = (&cfg.routes_file_via, &cfg.routes_file_via6);
        let st = crate::tables::read_routes(file, |r| match r {
            crate::tables::Route::V4(p, _) if !via.is_empty() => {
                routes.push((p, via.clone()));
                true
            }
            crate::tables::Route::V6(p, _) if !via6.is_empty() => {
                routes6.push((p, via6.clone()));
                true
            }
            _ => false,
        })?;
        tracing::info!(routes = st.routes, skipped = st.skipped, mrt = st.mrt, file = %file.display(), ms = t.elapsed().as_millis() as u64, "table read");
    } else if let Some(file) = &cfg.routes_file {
        let t = Instant::now();
        let n = crate::routes::load_lines(file, |l, _| match l {
            crate::routes::Line::V4(p, vias) => match vias.iter().find(|v| port_for(**v).is_none())
            {
                Some(gw) => Err(format!("gateway {gw} is not on any interface's network")),
                None => {
                    routes.push((p, vias.to_vec()));
                    Ok(())
                }
            },
            crate::routes::Line::V6(p, vias) => match vias.iter().find(|v| !on_net6(**v)) {
                Some(gw) => Err(format!(
                    "gateway {gw} is on none of the interfaces' IPv6 networks"
                )),
                None => {
                    routes6.push((p, vias.to_vec()));
                    Ok(())
                }
            },
        })
        .map_err(|e| e.to_string())?;
        tracing::info!(routes = n, file = %file.display(), ms = t.elapsed().as_millis() as u64, "routes file read");
    }
    Ok((routes, routes6))
}

/// Builds the forwarder from its configuration and its ports (`links`: one per untagged
/// interface, in order; sub-interfaces share their parent's), and loads static routes and
/// the routes file in one publication.
pub fn build(cfg: &ForwarderFile, links: &[Link]) -> Result<Forwarder, String> {
    let mut phys = links.iter();
    let mut of_iface: Vec<Link> = Vec::with_capacity(cfg.interfaces.len());
    for i in &cfg.interfaces {
        let l = match i.vlan {
            None => *phys
                .next()
                .ok_or_else(|| format!("no port for interface {}", i.name))?,
            Some((parent, _)) => of_iface[parent],
        };
        of_iface.push(l);
    }
    let ifaces = cfg
        .interfaces
        .iter()
        .zip(&of_iface)
        .map(|(i, l)| Iface {
            mtu: i.mtu.unwrap_or(l.mtu),
            vlan: i.vlan.map(|(parent, id)| Vlan {
                parent: parent as u16,
                id,
            }),
            speed_mbps: l.speed_mbps,
            ..Iface::new(&i.name, l.mac, i.addr, i.prefix_len)
        })
        .collect();
    let now = Instant::now();
    let mut f = Forwarder::new(ifaces, cfg.tuning, now);
    if let Some(b) = &cfg.backend {
        f.set_backend(
            b.internal as u16,
            Duration::from_millis(b.hello_interval_ms),
            now,
        );
    }
    if cfg.backend.is_some() {
        f.dist_auth = dataplane::element::DistAuth {
            guard: cfg.dist.guard(),
            signer: Arc::new(cfg.dist.signer()),
        };
    }
    if let Some(s) = &cfg.star {
        f.set_star(s.internal as u16, &s.members);
    }
    f.set_filters(dataplane::acl::FilterShare::new(cfg.filters(None)));
    let (routes, routes6) = config_routes_all(cfg, |gw| f.port_for_gateway(gw))?;
    f.replace_routes(routes).map_err(|e| e.to_string())?;
    for (i, ifc) in cfg.interfaces.iter().zip(&f.ifaces) {
        if !i.addrs6.is_empty() && ifc.mtu < wire::ipv6::MIN_MTU {
            return Err(format!(
                "interface {}: MTU {} is below IPv6's minimum of {} (RFC 8200 5): no IPv6 \
                 address on it",
                i.name,
                ifc.mtu,
                wire::ipv6::MIN_MTU
            ));
        }
    }
    // IPv6 on wherever an interface has an IPv6 address, or none at all (an unnumbered
    // link: its link-local address).
    if cfg
        .interfaces
        .iter()
        .any(|i| !i.addrs6.is_empty() || i.v4().is_none())
    {
        f.enable_ipv6(cfg.interfaces.iter().map(|i| i.addrs6.clone()).collect());
        let ra: Vec<bool> = cfg
            .interfaces
            .iter()
            .map(|i| i.router_advertisements)
            .collect();
        f.set_router_advertisements(&ra, now);
        if let Some(s) = &cfg.star {
            f.set_star6(&s.members6);
        }
        // Gateways were checked against the interfaces' IPv6 networks above.
        f.replace_routes6(routes6)
            .map_err(|e| format!("{}: {e}", cfg.path.display()))?;
    }
    Ok(f)
}

/// Runs the forwarder until `stop` is set: one worker per element of `ports` (the ports
/// it owns: one share of every interface's queues), the first on this thread and answering
/// the control socket's questions, the others on threads of their own (see
/// [`Forwarder::worker`]). `cfg` is what `reload-routes` reads again. Returns the
/// counters of all workers, summed, as they stood at the end.
pub fn run<P: Port + Send>(
    mut f: Forwarder,
    mut ports: Vec<Vec<P>>,
    cfg: Option<&ForwarderFile>,
    control: Option<&Path>,
    stop: Arc<AtomicBool>,
    fast: Option<crate::fast::ForwarderFast>,
    fast_off: Option<String>,
) -> Result<dataplane::counters::Snapshot, String> {
    if ports.is_empty() {
        return Err("no worker".into());
    }
    let now = Instant::now();
    // Flow export: every worker samples (they take the first's sampler).
    let flows = start_flow_export(&mut f, cfg, fast.as_ref(), &stop)?;
    let mut others: Vec<Forwarder> = (1..ports.len()).map(|_| f.worker(now)).collect();
    if !others.is_empty() {
        let mut all = vec![f];
        all.append(&mut others);
        Forwarder::connect_workers(&mut all);
        f = all.remove(0);
        others = all;
    }
    if let Some(fl) = &fast {
        fl.fold_into(&f.counters);
    }
    let all_counters: Vec<Arc<dataplane::Counters>> = std::iter::once(f.counters.clone())
        .chain(others.iter().map(|w| w.counters.clone()))
        .collect();
    let counters = f.counters.clone();
    let at_end = all_counters.clone();
    // Each port's link going down or coming up, logged once (crate::statelog).
    let mut names: Vec<String> = ports[0].iter().map(|p| p.name().to_string()).collect();
    names.dedup();
    crate::statelog::watch_links(names, stop.clone()).map_err(|e| format!("links: {e}"))?;
    // The router view of this element: a lone forwarder's ports all face the outside; a
    // back-end's face the inside of a multistage router.
    let metrics_cfg = cfg.map(|c| c.metrics.clone()).unwrap_or_default();
    let role = if f.backend_internal().is_some() {
        "backend"
    } else {
        "forwarder"
    };
    let name = crate::metrics::element_name(&metrics_cfg, control, role);
    if f.backend_internal().is_some() {
        // A back-end reports its counters to the controller under this name.
        f.report.name = Some(name.clone());
    }
    let external: Vec<String> = if f.backend_internal().is_some() {
        Vec::new()
    } else {
        counters.port_names.clone()
    };
    let view = crate::metrics::element_source(all_counters.clone(), name, role, external);
    let view = with_filters(view, &f, fast.as_ref())?;
    let view = crate::flows::view_with(view, flows.clone());
    let metrics = crate::metrics::MetricsSlot::start(&metrics_cfg, &view)?;
    let (qtx, qrx) = mpsc::channel::<Query>();
    let routes = Arc::new(Mutex::new(
        f.take_routes()
            .ok_or("the forwarder's routes are already taken")?,
    ));
    let busy = cfg.is_some_and(|c| c.io.busy_poll);
    let io = cfg.map(|c| c.io).unwrap_or_default();
    let cfg = cfg.cloned();
    let ipv6 = f.ipv6_enabled();
    let pending6: Arc<Pending6> = Arc::new(Mutex::new(None));
    let pending6w = pending6.clone();
    if let Some(fl) = &fast {
        let t = routes.lock().map_err(|_| "route table poisoned")?;
        fl.publish(&t)?;
    }
    let fast6 = fast.clone();
    // A back-end takes routes from the controller on a thread of its own (see distrib).
    let writer = start_writer(&mut f, &routes, fast.as_ref(), &stop)?;
    let running = Arc::new(Mutex::new(cfg.clone()));
    let held = crate::remote_filters::HeldShare::default();
    if writer.is_some() {
        filters_from_controller(&mut f, &running, fast.as_ref(), &held, &stop)?;
    }
    let ctl = Control {
        // The config file as this forwarder started from it, for `reload` to compare with.
        started_text: cfg
            .as_ref()
            .and_then(|c| std::fs::read_to_string(&c.path).ok()),
        running,
        held,
        cfg,
        asker: Mutex::new(qtx),
        counters: counters.clone(),
        all_counters,
        metrics: metrics.clone(),
        view,
        routes,
        fast: fast.clone(),
        fast_off,
        pending6,
        writer,
        ipv6,
        filters: f.filter_share().clone(),
        flows,
    };
    let handler: ctlsock::Handler = Arc::new(move |cmd: &str, req: &Value| ctl.handle(cmd, req));
    // SIGHUP reloads, as `tessera reload` does.
    reload_on_sighup(handler.clone(), stop.clone())?;
    let _server = match control {
        Some(path) => Some(ctlsock::serve(path, handler).map_err(|e| e.to_string())?),
        None => None,
    };
    let tick = lead_tick(fast);
    let mine = ports.remove(0);
    std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for (i, (w, ports)) in others.into_iter().zip(ports).enumerate() {
            let stop = stop.clone();
            let h = std::thread::Builder::new()
                .name(format!("worker-{}", i + 1))
                .spawn_scoped(scope, move || {
                    // Nobody asks the other workers anything: they follow the first's
                    // captures.
                    let r = enter_worker(&io, i + 1).and_then(|()| {
                        run_element(w, ports, stop.clone(), None, answer, |_| {}, busy)
                    });
                    // One worker failing ends them all: the forwarder is one process.
                    stop.store(true, Ordering::Relaxed);
                    r
                })
                .map_err(|e| e.to_string())?;
            handles.push(h);
        }
        // An IPv6 route command's changes go to the fast path at once (the control thread
        // waits for them to be written before it answers).
        let fast6 = fast6.clone();
        let answer = move |f: &mut Forwarder, cmd: &str, req: &Value| {
            let v = answer6(f, cmd, req, &pending6w);
            if let (Some(fl), "route-add" | "route-del" | "reload-routes6") = (&fast6, cmd) {
                fl.sync_routes6(f);
            }
            v
        };
        let r = enter_worker(&io, 0)
            .and_then(|()| run_element(f, mine, stop.clone(), Some(qrx), answer, tick, busy));
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.join().map_err(|_| "a worker panicked".to_string())??;
        }
        r
    })?;
    dataplane::counters::Snapshot::sum(&at_end).ok_or_else(|| "no worker".into())
}

/// A back-end's route writer (the controller's table comes to it over DIST), started on
/// a thread of its own; None for a forwarder that is not a back-end.
/// Starts the flow export of the file's `[flow_export]`, if it has one (crate::flows): the
/// exporter's thread, the sampler of the worker `f` (which the other workers copy), and the
/// fast path's samples.
fn start_flow_export(
    f: &mut Forwarder,
    file: Option<&ForwarderFile>,
    fast: Option<&crate::fast::ForwarderFast>,
    stop: &Arc<AtomicBool>,
) -> Result<Option<crate::flows::FlowExport>, String> {
    let own = file.and_then(|c| c.flow_export.clone());
    // A back-end without a `[flow_export]` of its own exports for the router, as its
    // controller says (crate::flows::remote).
    let internal = f.backend_internal().filter(|_| own.is_none());
    if own.is_none() && internal.is_none() {
        return Ok(None);
    }
    let (tx, rx) = mpsc::sync_channel(65_536);
    let fast = fast.cloned();
    let more = move |share: &Arc<dataplane::flows::SamplerShare>,
                     stats: &Arc<crate::flows::ExportStats>| {
        crate::fast::flow_samples(fast.as_ref(), share.clone(), stats.clone())
    };
    let export = match (own, internal) {
        (Some(cfg), _) => {
            tracing::info!(collector = %cfg.collector, sampling = cfg.sampling, "flow export");
            crate::flows::start(cfg, rx, more, stop.clone())?
        }
        (None, Some(internal)) => {
            let (frames_tx, frames) = mpsc::sync_channel(256);
            let remote = Arc::new(dataplane::flows::FlowRemote::default());
            let to = crate::flows::remote::ToController {
                remote: remote.clone(),
                frames: frames_tx,
                signer: f.dist_auth.signer.clone(),
                mac: f.ifaces[internal as usize].mac,
                vlans: f
                    .ifaces
                    .iter()
                    .map(|i| i.vlan.map_or(0, |v| v.id))
                    .collect(),
            };
            f.flow_remote = Some(dataplane::flows::FlowRemoteLink { remote, frames });
            crate::flows::remote::start_for_controller(to, rx, more, stop.clone())?
        }
        (None, None) => return Ok(None),
    };
    let seed = wire::dist::new_incarnation();
    f.set_sampler(Some(dataplane::flows::Sampler::new(
        export.sampler.clone(),
        tx,
        seed,
    )));
    Ok(Some(export))
}

/// A back-end takes the router's filters from the controller too (its reverse-path
/// checks; docs/filters.md): the first worker `f` hands whole sets to a thread that merges
/// them with the file `running`'s filters and installs them (`held` keeps the set).
fn filters_from_controller(
    f: &mut Forwarder,
    running: &Arc<Mutex<Option<ForwarderFile>>>,
    fast: Option<&crate::fast::ForwarderFast>,
    held: &crate::remote_filters::HeldShare,
    stop: &Arc<AtomicBool>,
) -> Result<(), String> {
    let (link, fctl) = dataplane::acl::remote::FilterLink::pair();
    f.filter_input.link = Some(link);
    let (r, share, fl) = (running.clone(), f.filter_share().clone(), fast.cloned());
    let apply = move |set: Option<&crate::config::RouterFilters>| {
        commands::apply_filters(&r, &share, fl.as_ref(), set).map(|_| ())
    };
    crate::remote_filters::serve(fctl, held.clone(), apply, stop.clone())
        .map_err(|e| e.to_string())?;
    Ok(())
}

fn start_writer(
    f: &mut Forwarder,
    routes: &Arc<Mutex<RouteTable>>,
    fast: Option<&crate::fast::ForwarderFast>,
    stop: &Arc<AtomicBool>,
) -> Result<Option<Arc<Mutex<crate::distrib::Writer>>>, String> {
    let Some(internal) = f.backend_internal() else {
        return Ok(None);
    };
    let (to_writer, rx) = mpsc::sync_channel(WRITER_QUEUE);
    let (tx, from_writer) = mpsc::channel();
    let (tx6, routes6) = mpsc::channel();
    let mut writer = crate::distrib::Writer::with_nets6(f.networks6(), f.vlans6());
    writer.incarnation = f.incarnation().unwrap_or_else(wire::dist::new_incarnation);
    tracing::info!(incarnation = %format!("{:016x}", writer.incarnation), "back-end starts: no table until the controller's");
    let table = Arc::new(Mutex::new(writer.hello_state()));
    f.set_fib_link(dataplane::forwarder::FibLink {
        to_writer,
        from_writer,
        routes6,
        table: table.clone(),
    });
    let w = Arc::new(Mutex::new(writer));
    let mac = f.ifaces[internal as usize].mac;
    let (w2, r2, fl, st) = (w.clone(), routes.clone(), fast.cloned(), stop.clone());
    let signer = f.dist_auth.signer.clone();
    std::thread::Builder::new()
        .name("route-writer".into())
        .spawn(move || route_writer(rx, tx, tx6, w2, table, r2, fl, mac, signer, st))
        .map_err(|e| e.to_string())?;
    Ok(Some(w))
}

/// What the first worker does on each pass besides frames: logs its neighbours' changes
/// and keeps the fast path's IPv6 routes and neighbours in step with its own (every
/// [`STATS_INTERVAL`]), and the fast path off while a capture runs.
fn lead_tick(fast: Option<crate::fast::ForwarderFast>) -> impl FnMut(&mut Forwarder) {
    let mut synced = Instant::now();
    let mut captured = false;
    let mut neighbour_log = crate::statelog::NeighbourLog::default();
    move |f: &mut Forwarder| {
        if neighbour_log.due(Instant::now()) {
            neighbour_log.observe(resolved_neighbours(f));
        }
        if let Some(fl) = &fast {
            // A capture's start or end: one atomic load per pass until then.
            if crate::capturing::capture_under_way() != captured {
                captured = !captured;
                fl.follow_capture();
            }
            if synced.elapsed() >= STATS_INTERVAL {
                synced = Instant::now();
                fl.sync_routes6(f);
                fl.sync_neighbours(f);
            }
        }
    }
}

/// The forwarder's neighbours with a known MAC (IPv4 and IPv6), as the log names them.
fn resolved_neighbours(f: &Forwarder) -> Vec<crate::statelog::Neighbour> {
    let port = |i: u16| {
        f.ifaces
            .get(i as usize)
            .map_or_else(|| i.to_string(), |c| c.name.clone())
    };
    f.neighbours
        .entries()
        .into_iter()
        .filter(|e| e.3 != dataplane::neighbour::State::Incomplete)
        .map(|(p, ip, mac, _)| crate::statelog::Neighbour {
            port: port(p),
            addr: ip.into(),
            mac,
        })
        .chain(
            f.neighbours6()
                .into_iter()
                .map(|(p, ip, mac)| crate::statelog::Neighbour {
                    port: port(p),
                    addr: ip.into(),
                    mac,
                }),
        )
        .collect()
}

/// `view` with the filters' counts of `f` added (`show acl`'s answer, for `/metrics`); the
/// fast path, if any, told `f`'s filters, and its filter drops folded into `f`'s counters.
fn with_filters(
    view: crate::metrics::Source,
    f: &Forwarder,
    fast: Option<&crate::fast::ForwarderFast>,
) -> Result<crate::metrics::Source, String> {
    let share = f.filter_share().clone();
    let fast = fast.cloned();
    if let Some(fl) = &fast {
        fl.set_filters(&share.load(), None)?;
        let fl2 = fl.clone();
        f.counters.fold_fast_drops(Arc::new(move || {
            let [deny, strict, loose] = fl2.filter_drops();
            vec![
                (dataplane::counters::Drop::AclDeny, deny),
                (dataplane::counters::Drop::UrpfStrict, strict),
                (dataplane::counters::Drop::UrpfLoose, loose),
            ]
        }));
    }
    Ok(crate::filters::view_with(view, share, move |fl| {
        fast.as_ref().map(|x| x.filter_counts(fl))
    }))
}

/// On SIGHUP, asks `handler` to `reload` and logs the outcome, until `stop`.
pub fn reload_on_sighup(handler: ctlsock::Handler, stop: Arc<AtomicBool>) -> Result<(), String> {
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP])
        .map_err(|e| format!("SIGHUP: {e}"))?;
    std::thread::Builder::new()
        .name("reload".into())
        .spawn(move || {
            for _ in signals.forever() {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                match handler("reload", &json!({})) {
                    Ok(v) => tracing::info!(answer = %v, "SIGHUP: reloaded"),
                    Err(e) => tracing::warn!(error = %e, "SIGHUP: not reloaded"),
                }
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// The `counters` answer of an element of several workers (`all`, the first's first):
/// their sum and, with more than one, each worker's share (received, sent, dropped), to
/// see how the queues spread the load. One read of each gives both.
pub(crate) fn workers_counters(all: &[Arc<dataplane::Counters>]) -> Result<Value, String> {
    let parts: Vec<_> = all.iter().map(|w| w.snapshot()).collect();
    let shares: Vec<Value> = parts
        .iter()
        .map(|w| {
            let (rx, tx, dropped) = w.totals();
            json!({"rx_packets": rx, "tx_packets": tx, "dropped": dropped})
        })
        .collect();
    let sum = dataplane::counters::Snapshot::sum_of(parts).ok_or("no worker")?;
    let mut v = serde_json::to_value(sum).map_err(|e| e.to_string())?;
    if shares.len() > 1 {
        v["workers"] = Value::Array(shares);
    }
    Ok(v)
}

/// Readies the calling thread to run worker `index` of an element: pinned to its CPU
/// (`[io] cpus`, see [`io::placement::plan`]) and at its priority (`[io] priority`).
pub(crate) fn enter_worker(io: &crate::config::IoConfig, index: usize) -> Result<(), String> {
    if let Some(c) = &io.cpus {
        let (w, _) = io::placement::plan(c, io.workers, 0);
        if let Some(&cpu) = w.get(index) {
            io::placement::pin(0, &[cpu])
                .map_err(|e| format!("[io] cpus = \"{c}\": worker {index} on CPU {cpu}: {e}"))?;
        }
    }
    set_priority(io.priority)
}

/// Keeps the whole process to `[io] cpus` (every thread started after this inherits it),
/// once the config is read and before any thread starts: an error if this machine lacks
/// one of them.
pub fn place_process(io: &crate::config::IoConfig) -> Result<(), String> {
    let Some(c) = &io.cpus else {
        return Ok(());
    };
    let missing = c.missing();
    if !missing.is_empty() {
        return Err(format!(
            "[io] cpus = \"{c}\": this machine has no CPU {} (online: {})",
            io::placement::CpuList::of(&missing),
            io::placement::CpuList::of(&io::placement::online_cpus())
        ));
    }
    io::placement::pin(0, &c.cpus()).map_err(|e| format!("[io] cpus = \"{c}\": {e}"))
}

/// Moves the receive work of the element's ports (`names`) into NAPI threads of their own
/// and pins them as `[io] cpus` plans, once the ports are open (a veth runs NAPI only once
/// an XDP program or GRO is on). What could not be threaded (an interface that runs no
/// NAPI: its receive work stays with its sender) is logged, not an error. Returns the
/// workers' CPUs and, per port, its NAPI threads and theirs (also logged, "placed").
pub fn place_ports(io: &crate::config::IoConfig, names: &[&str]) -> Value {
    let Some(c) = &io.cpus else {
        return Value::Null;
    };
    let mut found: Vec<(String, Vec<io::placement::Napi>)> = Vec::new();
    for &n in names {
        match io::placement::threaded_napis(n, Duration::from_millis(500)) {
            Ok(v) => found.push((n.to_string(), v)),
            Err(e) => {
                tracing::warn!(interface = n, error = %e, "[io] cpus: its receive work could not be moved to threads of its own");
                found.push((n.to_string(), Vec::new()));
            }
        }
    }
    let threads: usize = found
        .iter()
        .map(|(_, v)| v.iter().filter(|n| n.pid.is_some()).count())
        .sum();
    let (workers, napi_cpus) = io::placement::plan(c, io.workers, threads);
    let mut k = 0;
    let mut ports = Vec::new();
    for (name, v) in &found {
        let mut list = Vec::new();
        for n in v {
            let Some(pid) = n.pid else { continue };
            let cpu = napi_cpus[k];
            k += 1;
            match io::placement::pin(pid, &[cpu]) {
                Ok(()) => list.push(json!({"napi_id": n.id, "pid": pid, "cpu": cpu})),
                Err(e) => {
                    tracing::warn!(interface = %name, pid, cpu, error = %e, "[io] cpus: a NAPI thread could not be pinned")
                }
            }
        }
        if list.is_empty() {
            tracing::warn!(interface = %name, "[io] cpus: no NAPI thread (a veth runs NAPI only with an XDP program or GRO on): its receive work runs on the sender's CPU");
        }
        ports.push(json!({"interface": name, "napi": list}));
    }
    let v = json!({"cpus": c.to_string(), "workers": workers, "ports": ports});
    tracing::info!(cpus = %c, workers = ?workers, napi = %serde_json::to_string(&v["ports"]).unwrap_or_default(), "placed");
    v
}

/// Runs the calling thread (a worker) at SCHED_FIFO `priority` (`[io] priority`); nothing
/// without one.
pub(crate) fn set_priority(priority: Option<u8>) -> Result<(), String> {
    let Some(p) = priority else {
        return Ok(());
    };
    let param = libc::sched_param {
        sched_priority: p as i32,
    };
    // SAFETY: sched_setscheduler(2) on the calling thread (0) with a valid param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        return Err(format!(
            "[io] priority = {p}: SCHED_FIFO refused: {} (it needs CAP_SYS_NICE)",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Routes messages a back-end's worker may hold for its writer.
const WRITER_QUEUE: usize = 4096;
/// How often a back-end acknowledges with nothing new (its digest, for the controller's check).
const ACK_INTERVAL: Duration = Duration::from_millis(500);

/// A back-end's route writer: applies the controller's messages (in order, each in one
/// publication), republishes the fast path's table, and acknowledges through the worker.
#[allow(clippy::too_many_arguments)]
fn route_writer(
    rx: mpsc::Receiver<(MacAddr, wire::dist::RouteBatch)>,
    to_worker: mpsc::Sender<Vec<u8>>,
    routes6: mpsc::Sender<Vec<(fib::Prefix6, Option<Vec<std::net::Ipv6Addr>>)>>,
    writer: Arc<Mutex<crate::distrib::Writer>>,
    table: Arc<Mutex<wire::dist::HelloState>>,
    routes: Arc<Mutex<RouteTable>>,
    fast: Option<crate::fast::ForwarderFast>,
    mac: MacAddr,
    signer: Arc<wire::dist::auth::Signer>,
    stop: Arc<AtomicBool>,
) {
    let mut seq = 0u32;
    let mut table_log = crate::statelog::TableLog::default();
    while !stop.load(Ordering::Relaxed) {
        let first = match rx.recv_timeout(ACK_INTERVAL) {
            Ok(m) => Some(m),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        let (Ok(mut w), Ok(mut t)) = (writer.lock(), routes.lock()) else {
            return;
        };
        if let Some((from, b)) = first {
            w.accept(from, &b, &t);
            // Take what else is queued: one publication and one acknowledgement cover it.
            for _ in 0..1024 {
                match rx.try_recv() {
                    Ok((from, b)) => {
                        w.accept(from, &b, &t);
                    }
                    Err(_) => break,
                }
            }
        }
        let changed = w.flush(&mut t);
        // IPv6 changes go to the worker that holds the IPv6 table, before the
        // acknowledgement that covers them (the worker takes both in that order).
        let six = w.take_routes6();
        if !six.is_empty() && routes6.send(six).is_err() {
            return;
        }
        if changed {
            if let Some(fl) = &fast {
                if let Err(e) = fl.publish(&t) {
                    tracing::warn!(error = %e, "fast path not republished");
                }
            }
        }
        drop(t);
        // What the hellos carry from now on (the worker reads it for each hello).
        if let Ok(mut st) = table.lock() {
            *st = w.hello_state();
            table_log.installed(Some(*st), Instant::now());
        }
        let Some(ctl) = w.controller else { continue };
        seq = seq.wrapping_add(1);
        let ack = wire::dist::Repr {
            seq,
            msg: wire::dist::Message::FibAck(w.ack()),
        };
        drop(w);
        if let Ok(mut frame) = ack.to_frame(mac, ctl) {
            let _ = signer.seal(&mut frame, wire::dist::auth::now_ns());
            if to_worker.send(frame).is_err() {
                return;
            }
        }
    }
}

/// The worker loop: runs `e` over `ports` until `stop` is set. The first worker of an
/// element gets the control thread's questions on `queries` and answers them with `answer`
/// between passes; the others (`None`) follow its captures (crate::capturing). `tick` runs
/// after every [`Element::poll`]. With `busy_poll` the loop never sleeps in `poll(2)`.
pub fn run_element<E: Element, P: Port>(
    mut e: E,
    mut ports: Vec<P>,
    stop: Arc<AtomicBool>,
    queries: Option<mpsc::Receiver<Query>>,
    mut answer: impl FnMut(&mut E, &str, &Value) -> Value,
    mut tick: impl FnMut(&mut E),
    busy_poll: bool,
) -> Result<(), String> {
    let counters = e.counters().clone();
    let mut tx = TxQueues::new(ports.len());
    let mut batch = Vec::with_capacity(BATCH * 2);
    let infos: Vec<(String, dataplane::port::PortInfo)> = ports
        .iter()
        .map(|p| (p.name().to_string(), p.info()))
        .collect();
    let mut pfds: Vec<libc::pollfd> = ports
        .iter()
        .flat_map(|p| p.poll_fds())
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let interval = e.poll_interval();
    let wait_ms = interval.as_millis().clamp(1, 10) as i32;
    // A `tessera capture` under way (see dataplane::capture).
    let mut cap: Option<dataplane::capture::Capture> = None;
    let mut capturing = crate::capturing::CaptureFlag::default();
    let mut follower = queries.is_none().then(crate::capturing::Follower::default);
    let mut cap_ts = 0u64;
    let mut last_poll = Instant::now();
    let mut last_stats = last_poll;
    while !stop.load(Ordering::Relaxed) {
        let mut got = 0;
        for (i, port) in ports.iter_mut().enumerate() {
            let mut oversize = 0;
            let n = port
                .recv(e.pool(), &mut batch, BATCH, &mut oversize)
                .map_err(|e| e.to_string())?;
            if oversize > 0 {
                counters.count_n(Drop::RxOversize, oversize);
            }
            got += n;
            if let Some(c) = &mut cap {
                cap_ts = wire::dist::auth::now_ns();
                for p in batch.iter() {
                    c.offer(i as u16, dataplane::capture::RECEIVED, cap_ts, &p.data);
                }
            }
            dataplane::element::process_batch(
                &mut e,
                &mut batch,
                i as u16,
                Instant::now(),
                &mut tx,
            );
        }
        let now = Instant::now();
        if now.duration_since(last_poll) >= interval {
            last_poll = now;
            e.poll(now, &mut tx);
            tick(&mut e);
            if let Some(f) = &mut follower {
                if let Some(c) = f.changed() {
                    cap = c;
                    capturing.set(cap.is_some());
                }
            }
            while let Some(Ok((cmd, req, reply))) = queries.as_ref().map(|q| q.try_recv()) {
                if cmd == "capture-start" || cmd == "capture-stop" {
                    let _ = reply.send(capture_command(&mut cap, &cmd, &req, &infos));
                    capturing.set(cap.is_some());
                    continue;
                }
                let mut v = answer(&mut e, &cmd, &req);
                if cmd == "interfaces" {
                    with_port_info(&mut v, &infos);
                }
                let _ = reply.send(v);
            }
            if now.duration_since(last_stats) >= STATS_INTERVAL {
                last_stats = now;
                for p in ports.iter_mut() {
                    p.take_backend_drops(&mut |d, n| counters.count_n(d, n));
                    p.take_backend_events(&mut |e, n| counters.event_n(e, n));
                }
            }
        }
        e.sync(now, &mut tx);
        if let Some(c) = &mut cap {
            if cap_ts == 0 {
                cap_ts = wire::dist::auth::now_ns();
            }
            for (i, q) in tx.queues.iter().enumerate() {
                for p in q {
                    c.offer(i as u16, dataplane::capture::SENT, cap_ts, &p.data);
                }
            }
            c.flush();
            cap_ts = 0;
            if let Some(f) = &mut follower {
                f.report(c);
            }
            if c.done {
                if follower.is_none() {
                    let (captured, lost) = crate::capturing::followers_totals();
                    tracing::info!(
                        captured = c.captured + captured,
                        lost = c.dropped + lost,
                        "capture ended"
                    );
                    crate::capturing::order(None);
                }
                cap = None;
                capturing.set(false);
            }
        }
        flush(&mut ports, &mut tx, &mut e)?;
        e.end_batch();
        if got == 0 && busy_poll {
            std::hint::spin_loop();
        } else if got == 0 && e.busy() {
            // Frames due before a sleep would end (a shaped output queue): poll again,
            // giving the core to others meanwhile.
            std::thread::yield_now();
        } else if got == 0 && !pfds.is_empty() {
            // SAFETY: pfds is a valid array of pollfd for the duration of the call.
            unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, wait_ms) };
        } else if got == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // The first worker's last word (an active LB of a spare pair tells the other to take
    // over), out before the ports close.
    if queries.is_some() {
        e.leave(Instant::now(), &mut tx);
        flush(&mut ports, &mut tx, &mut e)?;
    }
    for p in ports.iter_mut() {
        p.take_backend_drops(&mut |d, n| counters.count_n(d, n));
        p.take_backend_events(&mut |e, n| counters.event_n(e, n));
    }
    Ok(())
}

/// `capture-start` (`path`: the reader's datagram socket; optional `port` name, `filter`
/// as [[code, jt, jf, k], ...] of classic BPF, `count`) and `capture-stop`, run by the
/// worker itself for any element.
fn capture_command(
    cap: &mut Option<dataplane::capture::Capture>,
    cmd: &str,
    req: &Value,
    infos: &[(String, dataplane::port::PortInfo)],
) -> Value {
    use dataplane::capture::{check, Capture, Insn};
    let err = |m: String| json!({"error": m});
    if cmd == "capture-stop" {
        crate::capturing::order(None);
        let (captured, lost) = crate::capturing::followers_totals();
        return match cap.take() {
            Some(c) => json!({"captured": c.captured + captured, "lost": c.dropped + lost}),
            None => json!({"captured": 0, "lost": 0, "note": "no capture was under way"}),
        };
    }
    if cap.as_ref().is_some_and(|c| !c.reader_gone()) {
        return err("a capture is already under way on this element".into());
    }
    let Some(path) = req["path"].as_str() else {
        return err("capture-start needs \"path\"".into());
    };
    let port = match req["port"].as_str() {
        None => None,
        Some(n) => match infos.iter().position(|(name, _)| name == n) {
            Some(i) => Some(i as u16),
            None => {
                let names: Vec<&str> = infos.iter().map(|(n, _)| n.as_str()).collect();
                return err(format!(
                    "no port {n:?}; this element has {}",
                    names.join(", ")
                ));
            }
        },
    };
    let filter = match req["filter"].as_array() {
        None => None,
        Some(list) => {
            let mut prog = Vec::with_capacity(list.len());
            for i in list {
                let f: Vec<u64> = i
                    .as_array()
                    .map(|a| a.iter().filter_map(|v| v.as_u64()).collect())
                    .unwrap_or_default();
                match Insn::from_fields(&f) {
                    Some(ins) => prog.push(ins),
                    None => return err(format!("filter instruction {i} is not [code, jt, jf, k]")),
                }
            }
            if let Err(e) = check(&prog) {
                return err(format!("filter: {e}"));
            }
            Some(prog)
        }
    };
    let count = req["count"].as_u64().filter(|&n| n > 0);
    match Capture::new(path.into(), port, filter.clone(), count) {
        Ok(c) => {
            tracing::info!(path, port = ?req["port"].as_str(), ?count, "capture started");
            *cap = Some(c);
            // The element's other workers capture their frames too.
            crate::capturing::order(Some(crate::capturing::CaptureSpec {
                path: path.into(),
                port,
                filter,
                count,
            }));
            json!({"started": true})
        }
        Err(e) => err(format!("capture socket: {e}")),
    }
}

/// How often the worker reads the kernel's drop statistics of its ports.
const STATS_INTERVAL: Duration = Duration::from_millis(100);

/// Adds each port's backend and mode to the `interfaces` answer (`infos`: by port name;
/// a VLAN sub-interface shows its parent's).
fn with_port_info(v: &mut Value, infos: &[(String, dataplane::port::PortInfo)]) {
    let Value::Array(list) = v else { return };
    for i in list.iter_mut() {
        let name = i["parent"]
            .as_str()
            .or_else(|| i["name"].as_str())
            .unwrap_or_default()
            .to_string();
        if let Some((_, info)) = infos.iter().find(|(n, _)| *n == name) {
            i["backend"] = json!(info.backend);
            i["io_mode"] = json!(info.mode);
        }
    }
}

fn flush<P: Port, E: Element>(ports: &mut [P], tx: &mut TxQueues, e: &mut E) -> Result<(), String> {
    let counters = e.counters().clone();
    for (i, q) in tx.queues.iter_mut().enumerate() {
        if q.is_empty() {
            continue;
        }
        match ports[i].send(q, e.pool()) {
            Ok(r) => {
                let pc = &counters.ports[i];
                pc.tx_packets.add(r.sent as u64);
                pc.tx_bytes.add(r.sent_bytes as u64);
                if r.ring_full > 0 {
                    counters.count_n(Drop::TxRingFull, r.ring_full as u64);
                }
            }
            Err(err) => {
                counters.count_n(Drop::TxError, q.len().max(1) as u64);
                for p in q.drain(..) {
                    e.pool().put(p);
                }
                tracing::warn!(port = %ports[i].name(), error = %err, "transmit failed");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
