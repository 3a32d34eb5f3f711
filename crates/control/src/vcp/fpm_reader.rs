//! Routes from a routing suite over FPM (zebra's `dplane_fpm_nl`): the reader thread, its
//! state (connections, the settle time that ends a resend, link-local next hops and their
//! external networks) and what a standby does with the table when it takes over.

use super::*;

/// What the FPM reader has counted.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FpmStats {
    pub connected: bool,
    pub connections: u64,
    pub frames: u64,
    pub messages: u64,
    pub route_adds: u64,
    pub route_deletes: u64,
    pub nexthops: u64,
    /// Frames or messages that did not parse (skipped; the stream goes on).
    pub malformed: u64,
    /// Routes not taken, by reason.
    /// IPv6 routes whose gateways are all link-local on interfaces that are no TAP
    /// `vlan<ID>` (the back-ends have no such link; docs/virtual-cp.md).
    pub skipped_ipv6: u64,
    pub skipped_other_table: u64,
    pub skipped_not_unicast: u64,
    /// Routes with no gateway (connected networks: the back-ends have their own).
    pub skipped_no_gateway: u64,
    /// Routes through a next-hop object zebra has not sent (held until it comes).
    pub unknown_nexthop: u64,
    /// Routes removed by the sweep after a reconnection (zebra no longer has them).
    pub swept: u64,
    /// Routes from zebra held now.
    pub routes: u64,
    /// Routes marked stale by the last reconnection and not yet resent.
    pub stale: u64,
    /// Removals zebra sent while its resend after a reconnection was unsettled (a delete,
    /// or a route with no usable gateway yet, of a route the table held before it): kept
    /// as they were and marked stale instead, so that the sweep removes them only if zebra
    /// has not sent them again.
    pub deferred_removals: u64,
    /// Milliseconds from the first message of the current connection to the last.
    pub last_burst_ms: u64,
}

#[derive(Debug, Clone)]
struct Nh {
    gateway: Option<std::net::IpAddr>,
    /// The gateway's interface (a TAP `vlan<ID>` for the router's external networks).
    ifindex: u32,
    group: Vec<u32>,
}

fn is_link_local(a: &std::net::IpAddr) -> bool {
    matches!(a, std::net::IpAddr::V6(v) if v.segments()[0] & 0xffc0 == 0xfe80)
}

/// zebra's view, as its FPM stream tells it, and what it makes of the [`Fib`].
#[derive(Default)]
pub struct FpmState {
    nexthops: HashMap<u32, Nh>,
    pub(super) routes: HashMap<Net, RouteVia>,
    /// Routes of the table (either family) that zebra has not sent again yet.
    stale: HashSet<Net>,
    /// The VLAN of each TAP (`vlan<ID>`) by interface index, learnt from the interface's
    /// name when a link-local gateway first names it.
    scopes: HashMap<u32, u16>,
    /// From a reconnection or takeover until the sweep: the routes the table held when
    /// zebra's resend began (their removals wait for it to settle).
    held: HashSet<Net>,
    pub stats: FpmStats,
}

impl FpmState {
    /// Tells which VLAN the interface `ifindex` is (what [`FpmState::resolve`] otherwise
    /// learns from the name of a TAP `vlan<ID>`).
    pub fn set_scope(&mut self, ifindex: u32, vlan: u16) {
        self.scopes.insert(ifindex, vlan);
    }

    /// The VLAN of the TAP with index `ifindex`, if it is one.
    fn scope(&mut self, ifindex: u32) -> Option<u16> {
        if let Some(&v) = self.scopes.get(&ifindex) {
            return Some(v);
        }
        let name = io::netdev::ifname(ifindex)?;
        let v: u16 = name.strip_prefix("vlan")?.parse().ok()?;
        if !(1..=4094).contains(&v) {
            return None;
        }
        self.scopes.insert(ifindex, v);
        Some(v)
    }

    /// A route's gateways, each with its interface (0 where none is known).
    fn hops(&self, via: &RouteVia) -> Vec<(std::net::IpAddr, u32)> {
        match via {
            RouteVia::Inline {
                gateways,
                ifindexes,
                ..
            } => gateways
                .iter()
                .zip(ifindexes.iter().chain(std::iter::repeat(&0)))
                .map(|(g, i)| (*g, *i))
                .collect(),
            RouteVia::Object(id) => {
                let Some(nh) = self.nexthops.get(id) else {
                    return Vec::new();
                };
                let hop = |n: &Nh| n.gateway.map(|g| (g, n.ifindex));
                if nh.group.is_empty() {
                    hop(nh).into_iter().collect()
                } else {
                    nh.group
                        .iter()
                        .filter_map(|m| self.nexthops.get(m).and_then(hop))
                        .collect()
                }
            }
        }
    }

    /// The gateways of a route (none for a connected or unknown next hop). An IPv6
    /// link-local gateway names its interface; on a TAP `vlan<ID>` it is distributed with
    /// that VLAN written in it (`wire::ipv6::scoped_link_local`: a routes message names
    /// no interface), so that a back-end resolves it on that VLAN. One on any other
    /// interface is left out: the back-ends have no such link.
    pub(super) fn resolve(&mut self, via: &RouteVia) -> Option<Gateways> {
        let mut g = Vec::new();
        for (a, ifindex) in self.hops(via) {
            match a {
                std::net::IpAddr::V6(v) if is_link_local(&a) => {
                    if wire::ipv6::link_local_scope(v).is_some() {
                        // Scoped already (a route kept across a reconnection).
                        g.push(a);
                    } else if let Some(vlan) = self.scope(ifindex) {
                        g.push(wire::ipv6::scoped_link_local(v, vlan).into());
                    }
                }
                _ => g.push(a),
            }
        }
        (!g.is_empty()).then(|| gateways(g))
    }

    /// Whether a route's gateways are all IPv6 link-local ones (see [`FpmState::resolve`]).
    fn link_local_only(&self, via: &RouteVia) -> bool {
        let h = self.hops(via);
        !h.is_empty() && h.iter().all(|(a, _)| is_link_local(a))
    }

    /// A new connection: zebra will send its whole table again. What it held is kept
    /// (the back-ends go on forwarding) but marked stale until resent.
    pub fn connection(&mut self) {
        self.stale = self.routes.keys().copied().collect();
        self.held = self.stale.clone();
        // The new zebra numbers its next-hop objects afresh, and may give an old id to
        // another object: routes held through objects keep the gateways they had.
        let objects: Vec<(Net, RouteVia)> = self
            .routes
            .iter()
            .filter(|(_, v)| matches!(v, RouteVia::Object(_)))
            .map(|(p, v)| (*p, v.clone()))
            .collect();
        let frozen: Vec<(Net, RouteVia)> = objects
            .into_iter()
            .map(|(p, v)| {
                let gateways = self.resolve(&v).map(|g| g.to_vec()).unwrap_or_default();
                (
                    p,
                    RouteVia::Inline {
                        ifindexes: vec![0; gateways.len()],
                        gateways,
                        direct: 0,
                    },
                )
            })
            .collect();
        self.routes.extend(frozen);
        self.nexthops.clear();
        self.stats.connections += 1;
        self.stats.stale = self.stale.len() as u64;
    }

    /// A takeover: `fib` holds the mirrored table, `own` the new controller's routes
    /// (config and zebra), which go over it; mirrored routes not among them are stale
    /// until the stream settles.
    pub fn adopt(&mut self, fib: &mut Fib, own: Vec<(Net, Gateways)>) {
        let mine: HashSet<Net> = own.iter().map(|(p, _)| *p).collect();
        self.stale = fib
            .prefixes()
            .filter(|p| !mine.contains(p))
            .copied()
            .collect();
        self.held = fib.prefixes().copied().collect();
        for (p, g) in own {
            fib.set(p, Some(g));
        }
        self.stats.stale = self.stale.len() as u64;
    }

    /// The resend has settled: routes still stale are gone from zebra.
    pub fn sweep(&mut self, fib: &mut Fib) {
        self.held.clear();
        for p in std::mem::take(&mut self.stale) {
            self.routes.remove(&p);
            fib.set(p, None);
            self.stats.swept += 1;
        }
        self.stats.stale = 0;
        self.stats.routes = self.routes.len() as u64;
    }

    /// Applies the messages of one FPM frame. Changes of one prefix within a frame (a
    /// delete then a new route: zebra's replace) reach the table as one change.
    pub fn frame(&mut self, msgs: Vec<fpm::Message>, fib: &mut Fib) {
        self.stats.frames += 1;
        let mut touched: Vec<Net> = Vec::new();
        let mut nh_changed: HashSet<u32> = HashSet::new();
        for m in msgs {
            self.stats.messages += 1;
            match m {
                fpm::Message::Nexthop(n) => {
                    self.stats.nexthops += 1;
                    nh_changed.insert(n.id);
                    if n.add && !n.blackhole {
                        self.nexthops.insert(
                            n.id,
                            Nh {
                                gateway: n.gateway,
                                ifindex: n.ifindex,
                                group: n.group,
                            },
                        );
                    } else {
                        self.nexthops.remove(&n.id);
                    }
                }
                fpm::Message::Route(r) => {
                    if !matches!(r.family, fpm::Family::Ipv4 | fpm::Family::Ipv6) {
                        continue;
                    }
                    if r.table != 254 {
                        self.stats.skipped_other_table += 1;
                        continue;
                    }
                    let p = Net::new(r.dst, r.dst_len);
                    if r.add && r.rtype != fpm::nl::RTN_UNICAST {
                        self.stats.skipped_not_unicast += 1;
                        continue;
                    }
                    self.stale.remove(&p);
                    if r.add {
                        self.stats.route_adds += 1;
                        self.routes.insert(p, r.via);
                    } else {
                        self.stats.route_deletes += 1;
                        self.routes.remove(&p);
                    }
                    touched.push(p);
                }
                fpm::Message::Other(_) => {}
            }
        }
        if !nh_changed.is_empty() {
            let uses = |v: &RouteVia| match v {
                RouteVia::Object(id) => {
                    nh_changed.contains(id)
                        || self
                            .nexthops
                            .get(id)
                            .is_some_and(|n| n.group.iter().any(|m| nh_changed.contains(m)))
                }
                RouteVia::Inline { .. } => false,
            };
            touched.extend(self.routes.iter().filter(|(_, v)| uses(v)).map(|(p, _)| *p));
        }
        touched.sort_unstable_by_key(|p| p.sort_key());
        touched.dedup();
        for p in touched {
            let want = match self.routes.get(&p).cloned() {
                None => None,
                Some(v) => {
                    let g = self.resolve(&v);
                    if g.is_none() {
                        match v {
                            RouteVia::Object(_) if !self.has_object(&v) => {
                                self.stats.unknown_nexthop += 1
                            }
                            _ if self.link_local_only(&v) => self.stats.skipped_ipv6 += 1,
                            _ => self.stats.skipped_no_gateway += 1,
                        }
                    }
                    g
                }
            };
            // While zebra resends after a restart, its daemons relearn: a route the table
            // held before that it deletes, or sends before its gateway resolves, is a
            // transient of the restart. The table keeps it as it was (the back-ends go on
            // forwarding it), and the sweep removes it if zebra has not sent it again with
            // a gateway by then.
            if want.is_none() && self.held.contains(&p) && fib.get(p).is_some() {
                self.stale.insert(p);
                self.stats.deferred_removals += 1;
                continue;
            }
            fib.set(p, want);
        }
        self.stats.routes = self.routes.len() as u64;
        self.stats.stale = self.stale.len() as u64;
    }

    fn has_object(&self, v: &RouteVia) -> bool {
        match v {
            RouteVia::Object(id) => self.nexthops.contains_key(id),
            RouteVia::Inline { .. } => true,
        }
    }
}

/// A standby that has just become active: the table of its new epoch is its mirror of
/// the old active controller's (what the back-ends hold, so they go on forwarding the same
/// routes), with its own table over it (`fib`: its config's routes and what its zebra has
/// sent). Mirrored routes it does not have are stale until zebra's stream settles and then
/// swept, as after a zebra reconnection: its routing suite re-learns them meanwhile.
pub fn take_over(c: &mut Controller, fpm: &mut FpmState, fib: &mut Fib, resettle: &AtomicBool) {
    let t = Instant::now();
    let epoch = unix_secs()
        .max(c.mirror.epoch.saturating_add(1))
        .max(fib.epoch().saturating_add(1));
    let mut new = Fib::new(epoch, LOG_CAP);
    for (p, g) in c.mirror.routes() {
        new.set(*p, Some(g.clone()));
    }
    let mirrored = new.len();
    let own: Vec<(Net, Gateways)> = fib
        .prefixes()
        .filter_map(|p| fib.get(*p).map(|g| (*p, g.clone())))
        .collect();
    fpm.adopt(&mut new, own);
    tracing::warn!(
        epoch,
        mirrored,
        routes = new.len(),
        stale = fpm.stats.stale,
        ms = t.elapsed().as_millis() as u64,
        "took over: new epoch from the mirrored table"
    );
    *fib = new;
    c.hold = None;
    c.takeover_pending = false;
    resettle.store(true, Ordering::Relaxed);
}

/// Seconds since the Unix epoch (a new controller epoch), at least 1.
pub(super) fn unix_secs() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(1)
        .max(1)
}

/// The shared state of a running controller.
pub struct Shared {
    pub fib: Mutex<Fib>,
    pub fpm: Mutex<FpmState>,
    /// Set once zebra's first resend has arrived (see [`Controller::hold`]).
    pub fpm_synced: Arc<AtomicBool>,
    /// Set by a takeover ([`take_over`]): the FPM reader starts its settle time again and
    /// then sweeps the routes zebra has not sent.
    pub resettle: AtomicBool,
}

/// Quiet on the first FPM connection after which zebra's initial resend is taken as whole.
pub const FPM_INITIAL_QUIET: Duration = Duration::from_secs(1);

/// Serves one FPM connection at a time on `listener`; a new connection replaces the old.
/// Returns when `stop` is set.
pub fn serve_fpm(
    listener: TcpListener,
    shared: Arc<Shared>,
    settle: Duration,
    stop: Arc<AtomicBool>,
) {
    listener.set_nonblocking(true).ok();
    let mut conn: Option<std::net::TcpStream> = None;
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut chunk = vec![0u8; 1 << 16];
    let mut last_msg = Instant::now();
    let mut first_msg: Option<Instant> = None;
    let mut swept = true;
    while !stop.load(Ordering::Relaxed) {
        if shared.resettle.swap(false, Ordering::Relaxed) {
            swept = false;
            last_msg = Instant::now();
        }
        if let Ok((s, peer)) = listener.accept() {
            tracing::info!(%peer, "FPM connection: marking routes stale until zebra resends them");
            s.set_nonblocking(false).ok();
            s.set_read_timeout(Some(Duration::from_millis(50))).ok();
            conn = Some(s);
            buf.clear();
            if let Ok(mut f) = shared.fpm.lock() {
                f.connection();
                f.stats.connected = true;
            }
            last_msg = Instant::now();
            first_msg = None;
            swept = false;
        }
        let Some(s) = conn.as_mut() else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        match s.read(&mut chunk) {
            Ok(0) => {
                tracing::warn!(
                    "FPM connection closed; routes kept until zebra reconnects and resends"
                );
                conn = None;
                if let Ok(mut f) = shared.fpm.lock() {
                    f.stats.connected = false;
                }
                continue;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => {
                tracing::warn!(error = %e, "FPM connection failed");
                conn = None;
                continue;
            }
        }
        let mut at = 0;
        let mut frames = Vec::new();
        let mut broken = false;
        loop {
            match fpm::split_frame(&buf[at..]) {
                Ok(Some((len, payload))) => {
                    frames.push(fpm::messages(payload));
                    at += len;
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::error!(error = %e, "FPM stream cannot be resynchronised: closing the connection");
                    broken = true;
                    break;
                }
            }
        }
        buf.drain(..at);
        if !frames.is_empty() {
            let now = Instant::now();
            last_msg = now;
            let first = *first_msg.get_or_insert(now);
            if let (Ok(mut f), Ok(mut fib)) = (shared.fpm.lock(), shared.fib.lock()) {
                for fr in frames {
                    match fr {
                        Ok(msgs) => f.frame(msgs, &mut fib),
                        Err(e) => {
                            f.stats.malformed += 1;
                            tracing::warn!(error = %e, "FPM frame skipped");
                        }
                    }
                }
                f.stats.last_burst_ms = now.duration_since(first).as_millis() as u64;
            }
        }
        if broken {
            conn = None;
            if let Ok(mut f) = shared.fpm.lock() {
                f.stats.malformed += 1;
                f.stats.connected = false;
            }
            continue;
        }
        if first_msg.is_some()
            && last_msg.elapsed() >= FPM_INITIAL_QUIET
            && !shared.fpm_synced.swap(true, Ordering::Relaxed)
        {
            tracing::info!("zebra's first resend is in: distribution may start");
        }
        if !swept && last_msg.elapsed() >= settle {
            swept = true;
            if let (Ok(mut f), Ok(mut fib)) = (shared.fpm.lock(), shared.fib.lock()) {
                let n = f.stale.len();
                f.sweep(&mut fib);
                tracing::info!(swept = n, routes = fib.len(), "FPM resend settled");
            }
        }
    }
}
