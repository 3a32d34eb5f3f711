//! The forwarder's XDP fast path (see `io::fastpath`), kept in step with the forwarder:
//! the control thread compiles the IPv4 route table into the fast path's table after
//! every change; the worker holding the IPv6 route writer hands its IPv6 route changes to
//! a thread that compiles and publishes the IPv6 table; the worker writes its resolved
//! neighbours (both families) into the fast path's maps.

use dataplane::forwarder::{Forwarder, Hop6, Iface, RouteChanges6};
use dataplane::neighbour::State;
use dataplane::routes::RouteTable;
use io::fastpath::{FastPort, ForwarderFastPath, Hop, ProgramFacts, Routes6};
use serde_json::{json, Value};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;

/// What the fast path's filters counted: per list, per rule and the default, (packets,
/// bytes); per interface, (packets, bytes) denied in, denied out, failed a reverse-path
/// check.
pub type FilterCounts = (Vec<Vec<(u64, u64)>>, Vec<[(u64, u64); 3]>);

/// A forwarder's fast path and how its interfaces map to ports.
#[derive(Clone)]
pub struct ForwarderFast {
    pub fp: Arc<Mutex<ForwarderFastPath>>,
    /// Per forwarder interface, its port and VLAN id (0: untagged) if the fast path
    /// serves it (see [`ForwarderFast::ports_of`]).
    pub port_of_iface: Vec<Option<(u16, u16)>>,
    /// Port names, in port order.
    pub names: Vec<String>,
    /// Every interface's name (ports and sub-interfaces), in the forwarder's order.
    pub iface_names: Vec<String>,
    /// The IPv6 routes (written apart from the rest of the fast path).
    routes6: Arc<Mutex<Routes6>>,
    /// Hands IPv6 route changes to the thread that writes them (started with the first).
    tx6: Arc<Mutex<Option<mpsc::Sender<RouteChanges6>>>>,
    /// IPv6 route changes handed to that thread, and written by it
    /// ([`ForwarderFast::wait_routes6`]).
    sent6: Arc<std::sync::atomic::AtomicU64>,
    written6: Arc<std::sync::atomic::AtomicU64>,
    /// Whether each port's device takes frames redirected in XDP ([`ForwarderFast::watch_egress`]).
    pub egress: Arc<std::sync::OnceLock<io::egress::EgressWatch>>,
    /// Set when this start took a predecessor's fast path over ([`ForwarderFast::adopt`]): the
    /// neighbours it read.
    taken_over: Arc<std::sync::OnceLock<usize>>,
    /// A back-end's ports whose predecessor's programs still run in their pinned links
    /// ([`ForwarderFast::defer_takeover`]).
    deferred: Arc<Mutex<Vec<Arc<dyn io::pin::TakeOver>>>>,
}

impl ForwarderFast {
    /// A back-end that hands its fast path over: the predecessor's programs forward on in
    /// the ports' pinned links (`atts`), with its table and neighbours, for `wait` after
    /// this start opened its ports, then this start's take them
    /// ([`ForwarderFast::take_over_deferred`]). Meanwhile the LBs hear this start's hellos: under
    /// a controller they give it no flows until it holds the controller's table, so the
    /// flows the predecessor still forwards move to the other back-ends first; without
    /// one, this start forwards with its config's routes, as the predecessor did. (While
    /// deferred, this start receives nothing: the links' programs are the predecessor's.)
    pub fn defer_takeover(&self, atts: Vec<Arc<dyn io::pin::TakeOver>>, wait: std::time::Duration) {
        if let Ok(mut d) = self.deferred.lock() {
            *d = atts;
        }
        let me = self.clone();
        let _ = std::thread::Builder::new()
            .name("fast-path-takeover".into())
            .spawn(move || {
                std::thread::sleep(wait);
                me.take_over_deferred();
            });
    }

    /// This start's programs take the links a predecessor's still ran in (once; nothing
    /// where none did).
    pub fn take_over_deferred(&self) {
        let atts = match self.deferred.lock() {
            Ok(mut d) => std::mem::take(&mut *d),
            Err(_) => return,
        };
        let mut taken = 0;
        for a in atts {
            match a.take_over() {
                Ok(true) => taken += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "fast path: the predecessor's program not replaced")
                }
            }
        }
        if taken > 0 {
            tracing::info!(
                ports = taken,
                "fast path: taken over from this back-end's last start"
            );
        }
    }

    /// Creates the fast path's maps for `ifaces` (a forwarder's; untagged ones are its
    /// ports, in order).
    pub fn new(ifaces: &[Iface]) -> Result<ForwarderFast, String> {
        Self::on_devices(ifaces, None)
    }

    /// As [`ForwarderFast::new`], with the device map naming `device` for every port instead of
    /// the ports' own interfaces (for checking verdicts without the interfaces).
    pub fn on_devices(ifaces: &[Iface], device: Option<&str>) -> Result<ForwarderFast, String> {
        let port_of_iface = Self::ports_of(ifaces);
        let ports = ifaces
            .iter()
            .filter(|i| i.vlan.is_none())
            .map(|i| FastPort {
                ifname: device.unwrap_or(&i.name).to_string(),
                mac: i.mac.0,
                mtu: i.mtu.min(u16::MAX as usize) as u16,
            })
            .collect::<Vec<_>>();
        let fp = ForwarderFastPath::new(&ports).map_err(|e| format!("fast path: {e}"))?;
        Ok(ForwarderFast {
            routes6: fp.routes6(),
            tx6: Arc::default(),
            sent6: Arc::default(),
            written6: Arc::default(),
            egress: Arc::default(),
            taken_over: Arc::default(),
            deferred: Arc::default(),
            fp: Arc::new(Mutex::new(fp)),
            port_of_iface,
            iface_names: ifaces.iter().map(|i| i.name.clone()).collect(),
            names: ifaces
                .iter()
                .filter(|i| i.vlan.is_none())
                .map(|i| i.name.clone())
                .collect(),
        })
    }

    /// Per interface, the port and VLAN id (0: untagged) the fast path sends out of: the
    /// untagged interfaces are the ports, in order; a sub-interface rides on its parent's
    /// port where the fast path's checks (the port's MTU and MAC) are its own too, and is
    /// left to user space otherwise (`None`).
    fn ports_of(ifaces: &[Iface]) -> Vec<Option<(u16, u16)>> {
        let mut out = Vec::with_capacity(ifaces.len());
        let mut n = 0u16;
        for i in ifaces {
            out.push(i.vlan.is_none().then(|| {
                n += 1;
                (n - 1, 0)
            }));
        }
        for (k, i) in ifaces.iter().enumerate() {
            let Some(v) = i.vlan else { continue };
            let (Some(parent), Some(Some((port, 0)))) = (
                ifaces.get(v.parent as usize),
                out.get(v.parent as usize).copied(),
            ) else {
                continue;
            };
            if parent.mtu == i.mtu && parent.mac == i.mac && (1..4095).contains(&v.id) {
                out[k] = Some((port, v.id));
            }
        }
        out
    }

    /// Checks now whether each port's device takes frames redirected in XDP, and follows
    /// it until `stop`: a port that does not is no frame's way out in XDP (its frames go
    /// through the hand-off to tcx, `io::handoff`, or to user space where the ports have
    /// none), until it does (see `io::egress`).
    pub fn watch_egress(&self, stop: Arc<std::sync::atomic::AtomicBool>) {
        let fp = self.fp.clone();
        let w = io::egress::EgressWatch::start(&self.names, stop, move |port, ok| {
            if let Ok(fp) = fp.lock() {
                if let Err(e) = fp.set_egress(port as u32, ok) {
                    tracing::warn!(port, error = %e, "fast path: ports map");
                }
            }
        });
        let _ = self.egress.set(w);
    }

    /// The pin directory of the first port (where an element's maps for its successor
    /// live: [`io::pin`]), if pins are possible here; `create` makes it.
    fn pin_dir(&self, create: bool) -> Option<std::path::PathBuf> {
        let ifindex = io::netdev::ifindex(self.names.first()?).ok()? as u32;
        io::pin::dir(ifindex, create)
    }

    /// Takes over what a predecessor's fast path left pinned (see
    /// [`ForwarderFast::hand_over`]): its resolved neighbours become this forwarder's, so that
    /// the programs made now forward to them from their first frame, as the predecessor's
    /// did. Returns how many.
    pub fn adopt(&self, f: &mut Forwarder) -> usize {
        let Some(dir) = self.pin_dir(false).filter(|d| d.join("neigh").exists()) else {
            return 0;
        };
        let now = Instant::now();
        let ports: Vec<u32> = self
            .names
            .iter()
            .map(|n| io::netdev::ifindex(n).map_or(0, |i| i as u32))
            .collect();
        let mut n = 0;
        for (ifindex, vlan, ip, mac) in ForwarderFastPath::pinned_neighbours(&dir) {
            let Some(port) = ports.iter().position(|&i| i == ifindex) else {
                continue;
            };
            let Some(iface) = self
                .port_of_iface
                .iter()
                .position(|p| *p == Some((port as u16, vlan)))
            else {
                continue;
            };
            f.neighbours
                .learn(iface as u16, ip, wire::MacAddr(mac), now, true);
            n += 1;
        }
        let _ = self.taken_over.set(n);
        n
    }

    /// Hands the fast path over to the element's next start: its maps pinned for the
    /// successor ([`ForwarderFast::adopt`]), and, while this element runs (until `stop`), the
    /// programs' deadline kept `grace` ahead ([`ForwarderFastPath::beat`]), so that they forward
    /// for at most `grace` after this element is gone unless a successor takes them over.
    /// The links themselves are pinned as the ports open ([`io::pin::enable`]).
    pub fn hand_over(&self, grace: std::time::Duration, stop: Arc<std::sync::atomic::AtomicBool>) {
        if !any_link_pinned(&self.names) {
            return;
        }
        if let (Some(dir), Ok(fp)) = (self.pin_dir(true), self.fp.lock()) {
            if let Err(e) = fp.pin(&dir) {
                tracing::warn!(error = %e, "fast path: maps not pinned for a successor");
            }
        }
        let fp = self.fp.clone();
        keep_beating(stop, move || fp.lock().map_or(Ok(()), |fp| fp.beat(grace)));
    }

    /// While a capture runs on the element ([`crate::capturing::capture_under_way`]), the
    /// programs forward nothing: every frame goes to user space, where the capture sees
    /// it. Called by the worker after every poll.
    pub fn follow_capture(&self) {
        let want = crate::capturing::capture_under_way();
        let Ok(fp) = self.fp.lock() else { return };
        if fp.suspended() != want {
            match fp.suspend(want) {
                Ok(()) => tracing::info!(
                    suspended = want,
                    "fast path: {}",
                    if want {
                        "a capture runs: every frame through user space"
                    } else {
                        "the capture ended: forwarding again"
                    }
                ),
                Err(e) => tracing::warn!(error = %e, "fast path: ports map"),
            }
        }
    }

    /// Has `counters` (the first worker's) count the fast path's frames and bytes in its
    /// ports' receive and send counts (see `dataplane::Counters::fold_fast_path`).
    pub fn fold_into(&self, counters: &dataplane::Counters) {
        fold(counters, &self.names, {
            let fp = self.fp.clone();
            move || fp.lock().map(|f| f.stats()).unwrap_or_default()
        });
    }

    /// Per port: how frames bound out of it leave (XDP, tcx or user space), why not in
    /// XDP where an XDP program could send them, and how often its device changed.
    pub fn egress_of(&self) -> Vec<(io::fastpath::EgressMode, Option<String>, u64)> {
        use io::fastpath::EgressMode;
        let (modes, xdp) = self
            .fp
            .lock()
            .map(|f| (f.egress_modes(), f.runs_xdp()))
            .unwrap_or_default();
        let watched = self.egress.get().map(|w| w.ports()).unwrap_or_default();
        (0..self.names.len())
            .map(|i| {
                let mode = modes.get(i).copied().unwrap_or(EgressMode::Xdp);
                let w = watched.get(i);
                // Why frames do not leave by it in XDP, where an XDP program would send
                // them: its device refuses them (then tcx, through the hand-off, or user
                // space where the ports have none). Where the fast path runs in tcx alone
                // (AF_PACKET ports), every device takes its socket buffers: no why.
                let why = w
                    .filter(|_| xdp && mode != EgressMode::Xdp)
                    .and_then(|p| p.egress.why())
                    .map(|why| egress_why(mode, why));
                (mode, why, w.map_or(0, |p| p.changes))
            })
            .collect()
    }

    /// How interface `name` (a port or a sub-interface) stands with the fast path.
    pub fn port_fast(&self, name: &str) -> Option<PortFast> {
        let i = self.iface_names.iter().position(|n| n == name)?;
        let Some((port, _)) = self.port_of_iface.get(i).copied().flatten() else {
            return Some(PortFast::Off(
                "a sub-interface whose MTU or MAC is not its port's, or a VLAN id out of range: user space serves it".into(),
            ));
        };
        let (stats, suspended) = {
            let fp = self.fp.lock().ok()?;
            (fp.stats(), fp.suspended())
        };
        let (egress, mut egress_why, egress_changes) = self.egress_of().get(port as usize)?.clone();
        if suspended {
            egress_why = Some(SUSPENDED.into());
        }
        Some(PortFast::On {
            stats: *stats.get(port as usize)?,
            egress,
            egress_why,
            egress_changes,
        })
    }

    /// What port `port`'s program needs to know of the forwarder (with no limit on the
    /// frames it hands user space: the element sets its `[io] slow_path_limit`).
    pub fn facts(f: &Forwarder, port: u32, mac: [u8; 6]) -> ProgramFacts {
        let ifaces = &f.ifaces[..];
        let mut special = Vec::new();
        for i in ifaces {
            special.extend(i.v4());
            special.extend(i.broadcast());
        }
        special.sort();
        special.dedup();
        // The VLAN ids of the port's sub-interfaces that the fast path serves.
        let served = Self::ports_of(ifaces);
        let tagged = served.iter().flatten().any(|&(_, v)| v != 0);
        let mut vlans: Vec<u16> = served
            .into_iter()
            .flatten()
            .filter(|&(p, v)| p as u32 == port && v != 0)
            .map(|(_, v)| v)
            .collect();
        vlans.sort_unstable();
        vlans.dedup();
        ProgramFacts {
            port,
            mac,
            special,
            vlans,
            tagged,
            ipv6: f.ipv6_enabled(),
            special6: f.global6(),
            // The element sets its config's ([io] slow_path_limit).
            slow_path_limit: 0,
            star: Self::star_facts(f, port),
        }
    }

    /// What port `port`'s program needs to know of a star member: the internal port, the
    /// other members' networks, the port's own address, the untagged ports a star header
    /// may name. None where the forwarder is not a member, or its internal interface is
    /// not a port the fast path serves untagged.
    fn star_facts(f: &Forwarder, port: u32) -> Option<io::fastpath::StarFacts> {
        let (internal, members) = f.star_members()?;
        let served = Self::ports_of(&f.ifaces);
        let Some((internal, 0)) = served.get(internal as usize).copied().flatten() else {
            return None;
        };
        let untagged = |k: usize| served[k].filter(|&(_, v)| v == 0).map(|(p, _)| p);
        let bits6 = |p: fib::Prefix6| {
            let mask = match p.len() {
                0 => 0,
                n => u128::MAX << (128 - u32::from(n)),
            };
            (p.addr().octets(), mask.to_be_bytes())
        };
        let iface = (0..f.ifaces.len()).find(|&k| untagged(k) == Some(port as u16));
        let ingress = iface.and_then(|k| f.ifaces[k].v4()).map_or(0, u32::from);
        let (ingress6, ingress6_else) = iface.and_then(|k| f.source_choices6(k)).map_or(
            (Vec::new(), [0; 16]),
            |(l, fallback)| {
                let l = l
                    .into_iter()
                    .map(|(p, a)| {
                        let (net, mask) = bits6(p);
                        (net, mask, a.octets())
                    })
                    .collect();
                (l, fallback.octets())
            },
        );
        Some(io::fastpath::StarFacts {
            internal: u32::from(internal),
            members6: f
                .star_members6()
                .unwrap_or(&[])
                .iter()
                .map(|&(p, mac, port)| {
                    let (net, mask) = bits6(p);
                    (net, mask, mac.0, port)
                })
                .collect(),
            ingress6,
            ingress6_else,
            members: members
                .iter()
                .map(|(p, mac, port)| {
                    let mask = if p.len() == 0 {
                        0
                    } else {
                        u32::MAX << (32 - u32::from(p.len()))
                    };
                    (u32::from(p.addr()), mask, mac.0, *port)
                })
                .collect(),
            ingress,
            ports: (0..f.ifaces.len().min(256))
                .filter_map(|k| untagged(k).map(|p| (k as u8, u32::from(p))))
                .filter(|&(_, p)| p != u32::from(internal))
                .collect(),
        })
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
                [h] => fast_hop(&self.port_of_iface, h.port, h.via),
                _ => Hop::Slow,
            })
            .collect();
        let mut fp = self.fp.lock().map_err(|_| "fast path poisoned")?;
        fp.publish(t24, t8, &hops)
            .map_err(|e| format!("fast path: {e}"))?;
        // The loose reverse-path check's default route (the table's entry is the group).
        if let Ok(mut a) = fp.acl.lock() {
            a.set_default4(t.default_group())
                .map_err(|e| format!("fast path: filters: {e}"))?;
        }
        drop(fp);
        tracing::debug!(
            routes = t.len(),
            ms = time.elapsed().as_millis() as u64,
            "fast path table published"
        );
        Ok(())
    }

    /// Whether the fast path takes `f` (its lists within the bounds); the error says which.
    pub fn check_filters(&self, f: &dataplane::acl::Filters) -> Result<(), String> {
        io::fastpath::acl::AclMaps::check(f)
    }

    /// Makes `f` the fast path's filters, the counts of `old`'s lists (the filters in use
    /// until now) kept in its rules' counters.
    pub fn set_filters(
        &self,
        f: &dataplane::acl::Filters,
        old: Option<&dataplane::acl::Filters>,
    ) -> Result<(), String> {
        let fp = self.fp.lock().map_err(|_| "fast path poisoned")?;
        let mut a = fp.acl.lock().map_err(|_| "fast path poisoned")?;
        a.write(f, &self.port_of_iface, old)
    }

    /// Per list of `f` (the filters in use), per rule and the default, what the fast path
    /// counted; and per interface of the forwarder, (packets, bytes) it dropped: denied in,
    /// denied out, failed a reverse-path check.
    pub fn filter_counts(&self, f: &dataplane::acl::Filters) -> FilterCounts {
        let Ok(fp) = self.fp.lock() else {
            return (Vec::new(), Vec::new());
        };
        let Ok(a) = fp.acl.lock() else {
            return (Vec::new(), Vec::new());
        };
        let ports = a.drops();
        let subifs = a.subif_drops();
        let three = |d: &[(u64, u64); 4]| [d[0], d[1], (d[2].0 + d[3].0, d[2].1 + d[3].1)];
        let per_iface = self
            .port_of_iface
            .iter()
            .enumerate()
            .map(|(i, p)| match p {
                Some((port, 0)) => ports.get(*port as usize).map_or([(0, 0); 3], three),
                Some(_) => subifs
                    .iter()
                    .find(|(s, _)| *s == i)
                    .map_or([(0, 0); 3], |(_, d)| three(d)),
                None => [(0, 0); 3],
            })
            .collect();
        (a.rule_counts(f), per_iface)
    }

    /// The fast path's filter drops by counter: `acl_deny`, `urpf_strict`, `urpf_loose`.
    pub fn filter_drops(&self) -> [u64; 3] {
        let Ok(fp) = self.fp.lock() else {
            return [0; 3];
        };
        let Ok(a) = fp.acl.lock() else {
            return [0; 3];
        };
        let subifs = a.subif_drops().into_iter().map(|(_, d)| d);
        a.drops()
            .into_iter()
            .chain(subifs)
            .fold([0; 3], |mut s, d| {
                s[0] += d[0].0 + d[1].0;
                s[1] += d[2].0;
                s[2] += d[3].0;
                s
            })
    }

    /// Takes the forwarder's IPv6 route changes and has a thread of its own write them to
    /// the fast path, in order: a full table is 160,000 writes, which the worker must not
    /// wait for. Until a change is written, its frames take the route before it (in the
    /// fast path) or go to user space, which has the change already.
    pub fn sync_routes6(&self, f: &mut Forwarder) {
        let Some(c) = f.take_route_changes6() else {
            return;
        };
        if matches!(&c, RouteChanges6::Some(l) if l.is_empty()) {
            return;
        }
        let Ok(mut tx) = self.tx6.lock() else {
            return;
        };
        let tx = tx.get_or_insert_with(|| {
            let (tx, rx) = mpsc::channel::<RouteChanges6>();
            let (routes6, ports) = (self.routes6.clone(), self.port_of_iface.clone());
            let written = self.written6.clone();
            let spawned = std::thread::Builder::new()
                .name("fast-path-ipv6".into())
                .spawn(move || {
                    for c in rx {
                        write_routes6(&routes6, &ports, c);
                        written.fetch_add(1, std::sync::atomic::Ordering::Release);
                    }
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "fast path: no thread for the IPv6 routes");
            }
            tx
        });
        if tx.send(c).is_ok() {
            self.sent6
                .fetch_add(1, std::sync::atomic::Ordering::Release);
        }
    }

    /// Waits (up to `limit`) until every IPv6 route change handed over so far is in the
    /// fast path's table: a `route add` or `route del` answers once the fast path follows
    /// it, as an IPv4 one does.
    pub fn wait_routes6(&self, limit: std::time::Duration) {
        use std::sync::atomic::Ordering;
        let target = self.sent6.load(Ordering::Acquire);
        let t = Instant::now();
        while self.written6.load(Ordering::Acquire) < target && t.elapsed() < limit {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// As [`ForwarderFast::sync_routes6`], written before it returns (for tests).
    pub fn sync_routes6_now(&self, f: &mut Forwarder) {
        if let Some(c) = f.take_route_changes6() {
            write_routes6(&self.routes6, &self.port_of_iface, c);
        }
    }

    /// Writes the forwarder's resolved neighbours (IPv4 and IPv6) into the fast path.
    pub fn sync_neighbours(&self, f: &Forwarder) {
        let resolved: Vec<_> = f
            .neighbours
            .entries()
            .into_iter()
            .filter(|e| matches!(e.3, State::Reachable | State::Probe))
            .filter_map(|(i, ip, mac, _)| {
                let (port, vlan) = self.port_of_iface.get(i as usize).copied().flatten()?;
                Some((port, vlan, ip, mac.0))
            })
            .collect();
        let resolved6: Vec<_> = f
            .neighbours6()
            .into_iter()
            .filter_map(|(i, ip, mac)| {
                let (port, vlan) = self.port_of_iface.get(i as usize).copied().flatten()?;
                Some((port, vlan, ip, mac.0))
            })
            .collect();
        if let Ok(mut fp) = self.fp.lock() {
            if let Err(e) = fp.set_neighbours(resolved) {
                tracing::warn!(error = %e, "fast path: neighbour map");
            }
            if let Err(e) = fp.set_neighbours6(resolved6) {
                tracing::warn!(error = %e, "fast path: IPv6 neighbour map");
            }
        }
    }

    /// The fast path's counters, as `show counters` prints them under `fast_path`.
    pub fn counters(&self) -> Value {
        let Ok(fp) = self.fp.lock() else {
            return Value::Null;
        };
        let mut v = stats_json(&self.names, &fp.stats());
        if let Some(n) = self.taken_over.get() {
            // This start took a predecessor's fast path over: the counts start again here.
            v["taken_over"] = json!({ "neighbours": n });
        }
        v
    }
}

/// Where a single next hop out of forwarder interface `iface` (through `via`, or to the
/// destination itself) sends frames in the fast path: its port and VLAN id, or user space
/// for an interface the fast path does not serve.
fn fast_hop<A>(ports: &[Option<(u16, u16)>], iface: u16, via: Option<A>) -> Hop<A> {
    match ports.get(iface as usize).copied().flatten() {
        Some((port, vlan)) => Hop::Port {
            port,
            vlan,
            gateway: via,
        },
        None => Hop::Slow,
    }
}

/// Writes IPv6 route changes to the fast path's table. A route that is ECMP, or out of an
/// interface the fast path does not serve, sends its frames to user space.
fn write_routes6(routes6: &Mutex<Routes6>, ports: &[Option<(u16, u16)>], c: RouteChanges6) {
    let hop = |hops: &[Hop6]| match hops {
        [h] => fast_hop(ports, h.iface, h.via),
        _ => Hop::Slow,
    };
    let time = Instant::now();
    let Ok(mut r) = routes6.lock() else {
        return;
    };
    let result = match c {
        RouteChanges6::All(l) => r.replace(l.iter().map(|(p, h)| (p.addr(), p.len(), hop(h)))),
        RouteChanges6::Some(l) => r.apply(
            l.iter()
                .map(|(p, h)| (p.addr(), p.len(), h.as_deref().map(hop))),
        ),
    };
    match result {
        Ok(()) => tracing::debug!(
            routes = r.len(),
            ms = time.elapsed().as_millis() as u64,
            "fast path IPv6 table written"
        ),
        Err(e) => tracing::warn!(error = %e, "fast path: IPv6 table"),
    }
}

/// Whether a link of the element's ports (`names`: XDP on AF_XDP ports, tcx on AF_PACKET
/// ones) is pinned for its next start: with none, there is nothing to hand over, and no
/// deadline to keep; it says so.
/// Removes the pins of the links of interfaces `names` (XDP and tcx): this process's
/// programs end with it, and its next start finds nothing to take over.
pub fn unpin_links(names: &[String]) {
    for n in names {
        let Some(d) = io::netdev::ifindex(n)
            .ok()
            .and_then(|i| io::pin::dir(i as u32, false))
        else {
            continue;
        };
        for l in LINK_PINS {
            let _ = std::fs::remove_file(d.join(l));
        }
    }
}

/// The names of a port's pinned links in its pin directory (io::pin).
const LINK_PINS: [&str; 3] = ["link-drv", "link-skb", "link-tcx"];

pub fn any_link_pinned(names: &[String]) -> bool {
    let pinned = names.iter().any(|n| {
        io::netdev::ifindex(n)
            .ok()
            .and_then(|i| io::pin::dir(i as u32, false))
            .is_some_and(|d| LINK_PINS.iter().any(|l| d.join(l).exists()))
    });
    if !pinned {
        tracing::info!("fast path: no link pinned: not handed over to the next start");
    }
    pinned
}

/// The pin directory of the first of an element's ports `names` (where a predecessor's
/// maps are, or a successor's will be; `create`: made if missing). None off a BPF
/// filesystem.
pub fn first_port_pin_dir(names: &[String], create: bool) -> Option<std::path::PathBuf> {
    let i = io::netdev::ifindex(names.first()?).ok()?;
    io::pin::dir(i as u32, create)
}

/// Where an element's ports `names` have their links pinned, has `pin` pin the maps its
/// successor reads in the first port's pin directory (a failure logged, naming `what`);
/// false where no link is pinned (nothing is handed over).
pub fn pin_for_successor(
    names: &[String],
    what: &str,
    pin: impl FnOnce(&std::path::Path) -> std::io::Result<()>,
) -> bool {
    if !any_link_pinned(names) {
        return false;
    }
    if let Some(dir) = first_port_pin_dir(names, true) {
        if let Err(e) = pin(&dir) {
            tracing::warn!(error = %e, "{what} fast path: maps not pinned for a successor");
        }
    }
    true
}

/// Moves the programs' deadline ahead with `beat` now and every 100 ms until `stop`, on a
/// thread of its own: a fast path handed over forwards on for its grace after the element
/// is gone, and no longer unless a successor takes it over.
pub fn keep_beating(
    stop: Arc<std::sync::atomic::AtomicBool>,
    beat: impl Fn() -> std::io::Result<()> + Send + 'static,
) {
    let beat = move || {
        if let Err(e) = beat() {
            tracing::warn!(error = %e, "fast path: deadline");
        }
    };
    beat();
    let _ = std::thread::Builder::new()
        .name("fast-path-beat".into())
        .spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(100));
                beat();
            }
        });
}

/// Why frames do not leave by a shaped port of a switch or an Axon in the fast path.
pub const SHAPED: &str =
    "a shaped or delayed port (capacity_bps, delay_ms): its queue is user space's";

/// Why frames do not leave by any port in the fast path while a capture runs.
pub const SUSPENDED: &str =
    "a capture is under way: every frame goes through user space, where it sees them";

/// An element's fast path as `show interfaces` reports it for each port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortFast {
    /// The port's program carries it: its frames in, to user space and out, and whether
    /// frames may leave by it in the fast path (and why not, and how often that changed).
    On {
        stats: [u64; io::fastpath::STATS],
        egress: io::fastpath::EgressMode,
        egress_why: Option<String>,
        egress_changes: u64,
    },
    /// It does not; why.
    Off(String),
}

impl PortFast {
    pub fn json(&self) -> Value {
        match self {
            PortFast::On {
                stats,
                egress,
                egress_why,
                egress_changes,
            } => {
                let mut v = json!({
                    "on": true, "egress": egress.as_str(), "egress_changes": egress_changes,
                    "forwarded_in": stats[0], "to_user_space": stats[1], "forwarded_out": stats[2],
                    "forwarded_in_bytes": stats[3], "forwarded_out_bytes": stats[4],
                    "shed": stats[5], "shed_bytes": stats[6], "handed_to_tcx": stats[7],
                });
                if let Some(w) = egress_why {
                    v["egress_why"] = json!(w);
                }
                v
            }
            PortFast::Off(why) => json!({"on": false, "why": why}),
        }
    }
}

/// A port's `fast_path` in `show interfaces` of an element whose programs forward between
/// its own ports (a switch, an Axon): `off`, why the port's program does not carry it;
/// else its counts (`stats`), whether frames may leave by it now (`egress`) and, if not,
/// why: the element's own reason (`held`: a capture, a shaped port, ...) or its device's
/// (`watched`).
pub fn port_fast(
    off: Option<&String>,
    stats: Option<&[u64; io::fastpath::STATS]>,
    egress: Option<io::fastpath::EgressMode>,
    held: Option<String>,
    watched: Option<&io::egress::PortEgress>,
) -> PortFast {
    let mode = egress.unwrap_or(io::fastpath::EgressMode::UserSpace);
    match (off, stats) {
        (Some(why), _) => PortFast::Off(why.clone()),
        (None, Some(st)) => PortFast::On {
            stats: *st,
            egress: mode,
            egress_why: held.or_else(|| {
                watched
                    .and_then(|p| p.egress.why())
                    .map(|why| egress_why(mode, why))
            }),
            egress_changes: watched.map_or(0, |p| p.changes),
        },
        (None, None) => PortFast::Off("[io] fast_path = false".into()),
    }
}

/// Why frames bound out of a port leave it as `mode` says, where its device takes no
/// frames redirected in XDP (`why`, the egress watch's words).
pub fn egress_why(mode: io::fastpath::EgressMode, why: &str) -> String {
    match mode {
        io::fastpath::EgressMode::Tcx => format!("{why}; handed to tcx, which sends them"),
        _ => format!("{why}; no hand-off to tcx here (a kernel before 6.6): user space sends them"),
    }
}

/// How frames leave by a port of an element whose programs are XDP's (a switch, an Axon):
/// not at all in the fast path where `held` (a capture, a shaped port), redirected in XDP
/// where its device takes them (`xdp`), else through the hand-off to tcx where the ports
/// run it (`handoff`).
pub fn egress_mode(held: bool, xdp: bool, handoff: bool) -> Option<io::fastpath::EgressMode> {
    use io::fastpath::EgressMode;
    match (held, xdp) {
        (true, _) => None,
        (false, true) => Some(EgressMode::Xdp),
        (false, false) => handoff.then_some(EgressMode::Tcx),
    }
}

/// Adds `fast_path` to each entry of an `interfaces` answer whose `name` `of` knows
/// (entries it does not know, such as sub-interfaces the fast path does not serve, get
/// `on: false` with `other`'s reason).
pub fn decorate_interfaces(v: &mut Value, of: impl Fn(&str) -> Option<PortFast>, other: &str) {
    for p in v.as_array_mut().into_iter().flatten() {
        let name = p["name"].as_str().unwrap_or_default().to_string();
        p["fast_path"] = of(&name)
            .unwrap_or_else(|| PortFast::Off(other.to_string()))
            .json();
    }
}

/// Has `counters` count a fast path's frames and bytes (its ports named `names`, in port
/// order; `stats` reads them) in its ports' receive and send counts.
pub fn fold(
    counters: &dataplane::Counters,
    names: &[String],
    stats: impl Fn() -> Vec<[u64; io::fastpath::STATS]> + Send + Sync + 'static,
) {
    let ports = names
        .iter()
        .map(|n| {
            counters
                .port_names
                .iter()
                .position(|p| p == n)
                .unwrap_or(usize::MAX)
        })
        .collect();
    counters.fold_fast_path(
        ports,
        Arc::new(move || {
            stats()
                .iter()
                .map(|s| [s[0], s[3], s[2], s[4], s[5], s[6]])
                .collect()
        }),
    );
}

/// A fast path's counters per port (named `names`, in port order) as `show counters`
/// prints them under `fast_path`: frames it took in, left to user space, sent out.
pub fn stats_json(names: &[String], st: &[[u64; io::fastpath::STATS]]) -> Value {
    let mut per = serde_json::Map::new();
    for (name, s) in names.iter().zip(st) {
        per.insert(
            name.clone(),
            json!({"rx_forwarded": s[0], "to_user_space": s[1], "tx_forwarded": s[2],
                "rx_forwarded_bytes": s[3], "tx_forwarded_bytes": s[4], "shed": s[5],
                "shed_bytes": s[6], "tx_handed_to_tcx": s[7]}),
        );
    }
    json!({
        "forwarded": st.iter().map(|s| s[0]).sum::<u64>(),
        "to_user_space": st.iter().map(|s| s[1]).sum::<u64>(),
        "shed": st.iter().map(|s| s[5]).sum::<u64>(),
        "interfaces": per,
    })
}

#[cfg(test)]
mod tests;

/// The fast path's flow samples (its ring buffer), as the exporter polls them: each call
/// writes the sampler's interval to the programs where it changed, reads what the ring
/// holds and hands each sample over as user space's are (interfaces by the forwarder's
/// indexes), and counts what the ring had no room for. Without a fast path: nothing.
pub fn flow_samples(
    fast: Option<&ForwarderFast>,
    share: Arc<dataplane::flows::SamplerShare>,
    stats: Arc<crate::flows::ExportStats>,
) -> Result<crate::flows::MoreSamples, String> {
    use std::sync::atomic::Ordering::Relaxed;
    let Some(fl) = fast.cloned() else {
        return Ok(Box::new(|_| {}));
    };
    let got: Arc<Mutex<Vec<io::fastpath::flows::RawSample>>> = Arc::default();
    let rb = {
        let fp = fl.fp.lock().map_err(|_| "fast path poisoned")?;
        let g = got.clone();
        fp.flows
            .reader(move |s| {
                if let Ok(mut g) = g.lock() {
                    if g.len() < 65_536 {
                        g.push(s);
                    }
                }
            })
            .map_err(|e| e.to_string())?
    };
    let mut interval = None;
    Ok(Box::new(
        move |take: &mut dyn FnMut(dataplane::flows::Sample)| {
            let n = share.interval.load(Relaxed);
            if let Ok(fp) = fl.fp.lock() {
                if interval != Some(n) && fp.flows.set_interval(n).is_ok() {
                    interval = Some(n);
                }
                stats.ring_overruns.store(fp.flows.lost(), Relaxed);
            }
            rb.poll();
            let taken: Vec<_> = got
                .lock()
                .map(|mut g| g.drain(..).collect())
                .unwrap_or_default();
            for r in taken {
                if let Some(s) = fl.sample_of(&r) {
                    take(s);
                }
            }
        },
    ))
}

impl ForwarderFast {
    /// A fast path's sample as user space's: the key read back, the ports and VLAN ids
    /// made the forwarder's interfaces.
    fn sample_of(&self, r: &io::fastpath::flows::RawSample) -> Option<dataplane::flows::Sample> {
        let iface = |port: u32, vlan: u16| {
            self.port_of_iface
                .iter()
                .position(|p| *p == Some((port as u16, vlan)))
                .map(|i| i as u16)
        };
        let key = dataplane::acl::tss::key_of_bytes(&r.key);
        let next_hop = match key.src {
            std::net::IpAddr::V6(_) => std::net::IpAddr::from(r.next_hop),
            std::net::IpAddr::V4(_) => {
                std::net::IpAddr::from([r.next_hop[0], r.next_hop[1], r.next_hop[2], r.next_hop[3]])
            }
        };
        Some(dataplane::flows::Sample {
            key,
            ingress: iface(r.in_port, r.in_vlan)?,
            egress: r.out.and_then(|(p, v)| iface(p, v)),
            next_hop: r.out.map(|_| next_hop),
            bytes: r.len,
            status: r.status,
            interval: r.interval.max(1),
        })
    }
}
