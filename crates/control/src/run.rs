//! The forwarder element's run loop over real (or in-memory) ports.
//!
//! One worker thread owns the ports and the [`Forwarder`]: it receives a batch from every
//! port, runs each frame through the forwarder, transmits each port's queue in one call,
//! runs the neighbour timers every [`POLL_INTERVAL`], lets go of its route snapshot after
//! every pass, and sleeps in `poll(2)` on the ports' sockets when nothing arrives. ARP and
//! ICMP for the router run inline in the worker.
//!
//! The control socket runs on its own thread. It owns the route writer ([`RouteTable`]):
//! `reload-routes`, `route-add` and `route-del` change routes there while the worker
//! forwards, and each change is published atomically (see `fib::table`). It reads the
//! shared counters directly and asks the worker through a channel only for state the worker
//! owns (neighbours).

use crate::config::ForwarderFile;
use crate::ctlsock;
use dataplane::forwarder::{Forwarder, Iface, POLL_INTERVAL};
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

/// Frames taken from one port per pass.
pub const BATCH: usize = 256;

type Query = (String, mpsc::Sender<Value>);

/// The static routes and the routes file of a configuration, each gateway checked against
/// the interfaces; errors name the file and line.
pub fn config_routes(
    cfg: &ForwarderFile,
    port_for: impl Fn(Ipv4Addr) -> Option<u16>,
) -> Result<Vec<(Prefix, Vec<Ipv4Addr>)>, String> {
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
    if let (Some(file), false) = (&cfg.routes_file, cfg.routes_file_via.is_empty()) {
        let t = Instant::now();
        let via = &cfg.routes_file_via;
        let st = crate::tables::read(file, |p, _| routes.push((p, via.clone())))?;
        tracing::info!(routes = st.routes, skipped = st.skipped, mrt = st.mrt, file = %file.display(), ms = t.elapsed().as_millis() as u64, "table read");
    } else if let Some(file) = &cfg.routes_file {
        let t = Instant::now();
        let n = crate::routes::load(file, |p, vias, _| {
            match vias.iter().find(|v| port_for(**v).is_none()) {
                Some(gw) => Err(format!("gateway {gw} is not on any interface's network")),
                None => {
                    routes.push((p, vias.to_vec()));
                    Ok(())
                }
            }
        })
        .map_err(|e| e.to_string())?;
        tracing::info!(routes = n, file = %file.display(), ms = t.elapsed().as_millis() as u64, "routes file read");
    }
    Ok(routes)
}

/// Builds the forwarder from its configuration, with the given ports' MACs and MTUs, and
/// loads static routes and the routes file in one publication.
pub fn build(cfg: &ForwarderFile, macs: &[MacAddr], mtus: &[usize]) -> Result<Forwarder, String> {
    let ifaces = cfg
        .interfaces
        .iter()
        .zip(macs.iter().zip(mtus))
        .map(|(i, (mac, mtu))| Iface {
            name: i.name.clone(),
            mac: *mac,
            mtu: i.mtu.unwrap_or(*mtu),
            addr: i.addr,
            prefix_len: i.prefix_len,
        })
        .collect();
    let mut f = Forwarder::new(ifaces, cfg.tuning, Instant::now());
    let routes = config_routes(cfg, |gw| f.port_for_gateway(gw))?;
    f.replace_routes(routes).map_err(|e| e.to_string())?;
    Ok(f)
}

/// Answers a control-socket command that needs the worker's own state.
fn answer(f: &mut Forwarder, cmd: &str) -> Value {
    match cmd {
        "neighbours" => Value::Array(
            f.neighbours
                .entries()
                .into_iter()
                .map(|(port, ip, mac, state)| {
                    json!({"interface": f.ifaces[port as usize].name, "address": ip.to_string(), "mac": mac.to_string(), "state": format!("{state:?}").to_lowercase()})
                })
                .collect(),
        ),
        "interfaces" => Value::Array(
            f.ifaces
                .iter()
                .map(|i| json!({"name": i.name, "mac": i.mac.to_string(), "mtu": i.mtu, "address": format!("{}/{}", i.addr, i.prefix_len)}))
                .collect(),
        ),
        _ => Value::Null,
    }
}

/// Route commands, run on the control thread against the route writer.
fn route_command(
    routes: &Mutex<RouteTable>,
    cfg: Option<&ForwarderFile>,
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
            let vias: Vec<Ipv4Addr> = match &req["via"] {
                Value::String(s) => vec![s
                    .parse()
                    .map_err(|_| format!("via {s:?} is not an IPv4 address"))?],
                Value::Array(a) => a
                    .iter()
                    .map(|v| {
                        v.as_str()
                            .and_then(|s| s.parse().ok())
                            .ok_or(format!("via {v} is not an IPv4 address"))
                    })
                    .collect::<Result<_, _>>()?,
                _ => return Err("missing \"via\" (an address or a list)".into()),
            };
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
            let routes = config_routes(&cfg, |gw| t.port_for_gateway(gw))?;
            let n = t.replace(routes).map_err(|e| e.to_string())?;
            let ms = time.elapsed().as_millis() as u64;
            tracing::info!(routes = n, ms, "routes reloaded");
            Ok(json!({"routes": n, "count": t.len(), "ms": ms}))
        }
        _ => Err(format!("unknown command {cmd:?}")),
    }
}

/// Runs the forwarder over `ports` until `stop` is set. `cfg` is what `reload-routes`
/// reads again.
pub fn run<P: Port>(
    mut f: Forwarder,
    mut ports: Vec<P>,
    cfg: Option<&ForwarderFile>,
    control: Option<&Path>,
    stop: Arc<AtomicBool>,
) -> Result<(), String> {
    let counters = f.counters.clone();
    let (qtx, qrx) = mpsc::channel::<Query>();
    let routes = Arc::new(Mutex::new(
        f.take_routes()
            .ok_or("the forwarder's routes are already taken")?,
    ));
    let cfg = cfg.cloned();
    let _server = match control {
        Some(path) => {
            let qtx = Mutex::new(qtx);
            let c = counters.clone();
            let handler: ctlsock::Handler = Arc::new(move |cmd: &str, req: &Value| {
                match cmd {
                "counters" => serde_json::to_value(c.snapshot()).map_err(|e| e.to_string()),
                "describe" => serde_json::to_value(dataplane::counters::descriptions()).map_err(|e| e.to_string()),
                "neighbours" | "interfaces" => {
                    let (tx, rx) = mpsc::channel();
                    qtx.lock().map_err(|_| "worker gone")?.send((cmd.to_string(), tx)).map_err(|_| "worker gone")?;
                    rx.recv_timeout(Duration::from_secs(2)).map_err(|_| "worker did not answer".to_string())
                }
                "routes" | "route-add" | "route-del" | "reload-routes" => route_command(&routes, cfg.as_ref(), cmd, req),
                other => Err(format!(
                    "unknown command {other:?}; try counters, describe, interfaces, neighbours, routes, route-add, route-del, reload-routes"
                )),
            }
            });
            Some(ctlsock::serve(path, handler).map_err(|e| e.to_string())?)
        }
        None => None,
    };
    let mut tx = TxQueues::new(ports.len());
    let mut batch = Vec::with_capacity(BATCH * 2);
    let mut pfds: Vec<libc::pollfd> = ports
        .iter()
        .filter_map(|p| p.poll_fd())
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let mut last_poll = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let mut got = 0;
        for (i, port) in ports.iter_mut().enumerate() {
            let mut oversize = 0;
            let n = port
                .recv(&mut f.pool, &mut batch, BATCH, &mut oversize)
                .map_err(|e| e.to_string())?;
            if oversize > 0 {
                counters.count_n(Drop::RxOversize, oversize);
            }
            got += n;
            let now = Instant::now();
            for mut p in batch.drain(..) {
                p.meta.rx_port = i as u16;
                f.process(p, now, &mut tx);
            }
        }
        let now = Instant::now();
        if now.duration_since(last_poll) >= POLL_INTERVAL {
            last_poll = now;
            f.poll(now, &mut tx);
            while let Ok((cmd, reply)) = qrx.try_recv() {
                let _ = reply.send(answer(&mut f, &cmd));
            }
        }
        flush(&mut ports, &mut tx, &mut f)?;
        // Let go of the route snapshot so that the route writer can reuse it.
        f.end_batch();
        if got == 0 && !pfds.is_empty() {
            // SAFETY: pfds is a valid array of pollfd for the duration of the call.
            unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, 10) };
        } else if got == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    Ok(())
}

fn flush<P: Port>(ports: &mut [P], tx: &mut TxQueues, f: &mut Forwarder) -> Result<(), String> {
    let counters = f.counters.clone();
    for (i, q) in tx.queues.iter_mut().enumerate() {
        if q.is_empty() {
            continue;
        }
        match ports[i].send(q, &mut f.pool) {
            Ok(r) => {
                let pc = &counters.ports[i];
                pc.tx_packets.add(r.sent as u64);
                pc.tx_bytes.add(r.sent_bytes as u64);
                if r.ring_full > 0 {
                    counters.count_n(Drop::TxRingFull, r.ring_full as u64);
                }
            }
            Err(e) => {
                counters.count_n(Drop::TxError, q.len().max(1) as u64);
                for p in q.drain(..) {
                    f.pool.put(p);
                }
                tracing::warn!(port = %ports[i].name(), error = %e, "transmit failed");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the documentation, verbatim, with the routes file it names.
    #[test]
    fn documented_example_builds_a_forwarder() {
        let dir = std::env::temp_dir().join(format!("tessera-example-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = r#"routes_file = "routes.txt"   # optional; one "PREFIX NEXTHOP" per line, e.g. "198.51.100.0/24 10.2.0.2"

[[interface]]
name = "r-eth0"
address = "10.1.0.1/24"

[[interface]]
name = "r-eth1"
address = "10.2.0.1/24"

[[route]]
prefix = "10.3.0.0/16"
via = "10.2.0.2"
"#;
        std::fs::write(dir.join("r.toml"), cfg).unwrap();
        std::fs::write(dir.join("routes.txt"), "198.51.100.0/24 10.2.0.2\n").unwrap();
        let file = ForwarderFile::load(&dir.join("r.toml")).unwrap();
        let macs = [MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2])];
        let mut f = build(&file, &macs, &[1500, 1500]).unwrap();
        assert_eq!(f.route_count(), 4);
        let hop = f.route("198.51.100.9".parse().unwrap()).unwrap();
        assert_eq!((hop.port, hop.via), (1, Some("10.2.0.2".parse().unwrap())));
        assert_eq!(f.route("10.3.200.1".parse().unwrap()).unwrap().port, 1);
        // A route file line whose gateway is on no network is an error naming the line.
        std::fs::write(
            dir.join("routes.txt"),
            "198.51.100.0/24 10.2.0.2\n192.0.2.0/24 10.9.0.1\n",
        )
        .unwrap();
        let e = build(&file, &macs, &[1500, 1500]).err().unwrap();
        assert!(e.contains("routes.txt:2:") && e.contains("10.9.0.1"), "{e}");
        // A real table (here MRT, gzip-compressed) through a chosen gateway.
        let mut mrt = Vec::new();
        crate::tables::mrt::write_rib_ipv4(
            &mut mrt,
            0,
            "1.0.0.0/24".parse().unwrap(),
            Some("192.0.2.9".parse().unwrap()),
        );
        crate::tables::mrt::write_rib_ipv4(&mut mrt, 1, "8.8.8.0/24".parse().unwrap(), None);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &mrt).unwrap();
        std::fs::write(dir.join("rib.gz"), gz.finish().unwrap()).unwrap();
        std::fs::write(
            dir.join("r.toml"),
            cfg.replace(
                "routes_file = \"routes.txt\"",
                "routes_file = \"rib.gz\"\nroutes_file_via = \"10.1.0.7\"",
            ),
        )
        .unwrap();
        let file = ForwarderFile::load(&dir.join("r.toml")).unwrap();
        let mut f = build(&file, &macs, &[1500, 1500]).unwrap();
        assert_eq!(f.route_count(), 5);
        assert_eq!(
            f.route("8.8.8.8".parse().unwrap()).unwrap().via,
            Some("10.1.0.7".parse().unwrap())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
