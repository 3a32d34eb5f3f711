//! The IPv4 forwarder role: RFC 1812 forwarding between Ethernet ports.
//!
//! Per frame, in order:
//!
//! | node | reads | writes | drops (see [`Drop`]) |
//! |---|---|---|---|
//! | eth-input | `rx_port`, frame | `iface`, 802.1Q tag removed | `eth_*`: short, other station's MAC, VLAN not configured, other EtherType; `dist_*` |
//! | arp | frame | neighbour table | `arp_malformed`, `arp_not_for_us` |
//! | ip4-input | frame | frame (link padding trimmed) | `ip4_truncated` ... `ip4_bad_options`, martians, broadcasts |
//! | ip4-local | frame | - | `local_*` (echo requests are answered) |
//! | ip4-lookup | dst address | next hop | `ip4_ttl_expired`, `ip4_no_route` |
//! | ip4-rewrite | `csum_partial`, `csum_unknown` | L4 checksum, TTL, IP checksum, MACs | `ip4_frag_needed`, `ip4_frag_failed` |
//! | neighbour-output | next hop | MACs | `arp_queue_full`, `arp_resolution_failed` |
//!
//! ICMP errors (time exceeded, net/host unreachable, fragmentation needed, parameter
//! problem) are rate limited with a token bucket and never sent about ICMP errors,
//! non-first fragments, link or IP broadcasts and multicasts, or invalid sources
//! (RFC 1812 4.3.2.7). They quote as much of the datagram as fits in 576 bytes (4.3.2.3).

use crate::buf::{Pkt, Pool, TxQueues};
use crate::counters::{Counters, Drop, Event};
use crate::frag;
pub use crate::iface::{Iface, Vlan};
use crate::neighbour::{Enqueued, Expired, NeighbourConfig, Neighbours};
use crate::reasm::{Outcome, ReasmConfig, Reassembly};
use crate::routes::{flow_hash, pick, RouteReaders, RouteTable};
pub use crate::routes::{NextHop, RouteError};
use fib::poptrie::{Poptrie, NO_ROUTE};
use fib::Prefix;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::ethernet::{self, ethertype};
use wire::icmp::{self, unreachable};
use wire::ipv4::{self, protocol};
use wire::{arp, MacAddr};

const ETH: usize = ethernet::HEADER_LEN;

/// Forwarder tunables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ForwarderConfig {
    /// ICMP errors per second, across all ports (token bucket rate). 0 sends none.
    pub icmp_errors_per_sec: u32,
    /// Token bucket depth: errors that may go out back to back.
    pub icmp_burst: u32,
    pub neighbour: NeighbourConfig,
}

impl Default for ForwarderConfig {
    fn default() -> Self {
        ForwarderConfig {
            icmp_errors_per_sec: 100,
            icmp_burst: 50,
            neighbour: NeighbourConfig::default(),
        }
    }
}

/// An ICMP error to send about a received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IcmpError {
    TimeExceeded,
    /// Fragment reassembly time exceeded (code 1).
    ReasmTimeExceeded,
    Unreachable(u8),
    FragNeeded(u16),
    ParamProblem(u8),
}

/// How a back-end's worker hands the controller's route messages to the thread that owns
/// the route writer, and sends what that thread answers. Route changes are applied off the
/// worker, so a full table never stalls forwarding; a full queue is a counted drop
/// (`dist_queue_full`), which the controller's retransmission repairs.
pub struct FibLink {
    /// Route messages and the MAC of the controller that sent them.
    pub to_writer: std::sync::mpsc::SyncSender<(MacAddr, wire::dist::RouteBatch)>,
    /// Whole Ethernet frames (acknowledgements) to send out of the internal port.
    pub from_writer: std::sync::mpsc::Receiver<Vec<u8>>,
    /// The table the writer holds, as the hellos carry it (their state block; the
    /// incarnation is the back-end's own, [`Forwarder::set_incarnation`]).
    pub table: Arc<std::sync::Mutex<wire::dist::HelloState>>,
    /// IPv6 route changes, for the IPv6 table this worker holds: each message in order,
    /// in one publication ([`Forwarder::apply_routes6`]).
    pub routes6: std::sync::mpsc::Receiver<Vec<(fib::Prefix6, Option<Vec<std::net::Ipv6Addr>>)>>,
}

/// The back-end role: hellos out of the internal port.
#[derive(Debug, Clone)]
struct Backend {
    internal: u16,
    interval: Duration,
    next: Instant,
    seq: u32,
    /// The first worker: it sends the hellos and counter reports, holds the link to the
    /// route writer and takes every DIST frame; the other workers hand it theirs.
    lead: bool,
    /// This process's incarnation and the table its hellos last carried.
    state: wire::dist::HelloState,
}

/// DIST frames a back-end's other workers may hold for its first; more are dropped and
/// counted (`dist_queue_full`), as when the route writer's queue is full.
const DIST_HAND_QUEUE: usize = 1024;

/// How the workers of a back-end share its DIST role (see [`Forwarder::connect_workers`]).
#[derive(Debug, Default)]
struct DistShare {
    /// Another worker's: where it hands the DIST frames it receives.
    to_lead: Option<std::sync::mpsc::SyncSender<Pkt>>,
    /// The first worker's: the frames the others handed it.
    from_others: Option<std::sync::mpsc::Receiver<Pkt>>,
    /// The first worker's: every worker's counters (its own first), whose sum its hellos
    /// and reports carry.
    group: Vec<Arc<Counters>>,
}

/// A neighbour one worker learned: (port, address, MAC).
type Learned = (u16, std::net::IpAddr, MacAddr);

/// How many learned neighbours may wait for a sibling worker; more are not sent (that
/// worker then resolves the neighbour itself if it needs it).
const PEER_QUEUE: usize = 4096;

/// A worker's links to its sibling workers: each neighbour it learns from ARP goes to
/// every other one, so a next hop resolved by one worker is known to all (an ARP reply
/// reaches only the worker whose queue the neighbour's flow hashes to).
struct Peers {
    to: Vec<std::sync::mpsc::SyncSender<Learned>>,
    from: std::sync::mpsc::Receiver<Learned>,
}

/// A star router's forwarder: the other forwarders' networks behind the internal port.
#[derive(Debug, Clone)]
struct Star {
    internal: u16,
    /// Longest prefixes first.
    members: Vec<StarNetwork>,
}

/// A network of a star's member: the network, that member's internal MAC, its port on
/// the network.
pub type StarNetwork = (Prefix, MacAddr, u8);

impl Star {
    fn member_for(&self, hop: Ipv4Addr) -> Option<(MacAddr, u8)> {
        self.members
            .iter()
            .find(|(p, _, _)| p.contains(hop))
            .map(|(_, m, port)| (*m, *port))
    }
}

/// The FIB and the next-hop groups of one publication.
type Snapshot = (Arc<Poptrie>, Arc<Vec<Box<[NextHop]>>>);

/// The forwarder's state and its per-packet path.
pub struct Forwarder {
    /// The interfaces; a [`NextHop::port`], a neighbour's port and [`Meta::iface`] index
    /// this list. Untagged interfaces are the ports, in order; sub-interfaces follow them
    /// or not, in any order.
    ///
    /// [`Meta::iface`]: crate::buf::Meta::iface
    pub ifaces: Vec<Iface>,
    /// The port of each interface.
    port_of: Vec<u16>,
    /// The untagged interface of each port.
    untagged: Vec<u16>,
    /// (port, VLAN id, interface) of each sub-interface.
    subifs: Vec<(u16, u16, u16)>,
    backend: Option<Backend>,
    /// The back-end's link to its route writer (see [`FibLink`]).
    fib_link: Option<FibLink>,
    /// Flow sampling, where flows are exported (crate::flows).
    sampler: Option<crate::flows::Sampler>,
    /// A back-end's first worker, where the controller drives its flow export.
    pub flow_remote: Option<crate::flows::FlowRemoteLink>,
    /// A back-end's first worker: the router's filters from the controller (the set being
    /// received, the link to the thread that applies sets) and answers to send.
    pub filter_input: crate::acl::remote::FilterInput,
    filter_answers: Vec<(MacAddr, wire::dist::FiltersAck)>,
    /// DIST authentication of a back-end.
    pub dist_auth: crate::report::DistAuth,
    /// The route writer, while this forwarder owns it (see [`Forwarder::take_routes`]).
    routes: Option<RouteTable>,
    readers: RouteReaders,
    /// The FIB and group snapshots of the current batch.
    snap: Option<Snapshot>,
    /// The next-hop groups (their address) whose gateways [`Forwarder::resolve_gateways`]
    /// last asked for.
    gateways_resolved: usize,
    pub neighbours: Neighbours,
    pub counters: Arc<Counters>,
    cfg: ForwarderConfig,
    icmp_tokens: f64,
    icmp_refill: Instant,
    ident: u16,
    pub pool: Pool,
    expired: Expired,
    peers: Option<Peers>,
    /// Datagrams addressed to the router, being reassembled.
    reasm: Reassembly,
    star: Option<Star>,
    /// The source of the ICMP error being made, when not the receiving interface's.
    icmp_from: Option<Ipv4Addr>,
    /// A back-end's counter reports to the controller.
    pub report: crate::report::Reporter,
    /// IPv6, once [`Forwarder::enable_ipv6`] turned it on (every worker: siblings share the
    /// first one's table and groups, see `Six::for_worker`).
    six: Option<Box<ip6::Six>>,
    /// The IPv6 table snapshot of the current batch (as `snap` for IPv4).
    snap6: Option<ip6::Snapshot6>,
    /// A back-end's DIST role shared between its workers.
    dist_share: DistShare,
    /// The filters, shared by the workers (filter.rs).
    filters: crate::acl::FilterShare,
    /// The filters of the current batch.
    filt: Option<Arc<crate::acl::Filters>>,
}

impl Forwarder {
    /// A forwarder over `ifaces` with their connected routes. Each untagged interface is a
    /// port (numbered in order); each sub-interface rides on its parent's port. A
    /// sub-interface whose parent is not an untagged interface is never used.
    pub fn new(ifaces: Vec<Iface>, cfg: ForwarderConfig, now: Instant) -> Forwarder {
        let mut untagged = Vec::new();
        let mut port_of = vec![u16::MAX; ifaces.len()];
        for (i, ifc) in ifaces.iter().enumerate() {
            if ifc.vlan.is_none() {
                port_of[i] = untagged.len() as u16;
                untagged.push(i as u16);
            }
        }
        let mut subifs = Vec::new();
        for (i, ifc) in ifaces.iter().enumerate() {
            if let Some(v) = ifc.vlan {
                let parent_port = port_of.get(v.parent as usize).copied().unwrap_or(u16::MAX);
                if parent_port != u16::MAX && ifaces[v.parent as usize].vlan.is_none() {
                    port_of[i] = parent_port;
                    subifs.push((parent_port, v.id, i as u16));
                }
            }
        }
        let counters = Arc::new(Counters::new(
            untagged
                .iter()
                .map(|&i| ifaces[i as usize].name.clone())
                .collect(),
        ));
        let (table, readers) = RouteTable::new(&ifaces);
        Forwarder {
            ifaces,
            port_of,
            untagged,
            subifs,
            backend: None,
            fib_link: None,
            sampler: None,
            flow_remote: None,
            filter_input: Default::default(),
            filter_answers: Vec::new(),
            dist_auth: Default::default(),
            routes: Some(table),
            readers,
            snap: None,
            gateways_resolved: 0,
            neighbours: Neighbours::new(cfg.neighbour),
            counters,
            cfg,
            icmp_tokens: cfg.icmp_burst as f64,
            icmp_refill: now,
            ident: 1,
            pool: Pool::new(),
            expired: Expired::default(),
            peers: None,
            reasm: Reassembly::new(ReasmConfig::default()),
            star: None,
            icmp_from: None,
            report: Default::default(),
            six: None,
            snap6: None,
            dist_share: DistShare::default(),
            filters: Default::default(),
            filt: None,
        }
    }

    /// Makes this forwarder a member of a star router (docs/star.md): `internal` (an
    /// untagged interface) is its port on the star's switch; `members` are the networks
    /// of the star's forwarders (network, that forwarder's internal MAC, its port index
    /// on the network). Those of this forwarder (its own internal MAC) are skipped; the
    /// others become reachable through the internal port as if connected, and packets to
    /// them cross the switch with a star header to the forwarder that faces them.
    pub fn set_star(&mut self, internal: u16, members: &[(Prefix, MacAddr, u8)]) {
        let own = self.ifaces.get(internal as usize).map(|i| i.mac);
        let mut m: Vec<(Prefix, MacAddr, u8)> = members
            .iter()
            .copied()
            .filter(|(_, mac, _)| Some(*mac) != own)
            .collect();
        m.sort_by_key(|(p, _, _)| std::cmp::Reverse(p.len()));
        for (p, _, _) in &m {
            let p = *p;
            self.with_routes(|t| t.add_connected(p, internal));
        }
        self.star = Some(Star {
            internal,
            members: m,
        });
    }

    /// Of a star member ([`Forwarder::set_star`]): its internal interface and the other
    /// members' networks (network, that member's internal MAC, its port index on the
    /// network), longest prefixes first.
    pub fn star_members(&self) -> Option<(u16, &[StarNetwork])> {
        self.star.as_ref().map(|s| (s.internal, &s.members[..]))
    }

    /// Another worker of this forwarder: the same interfaces, configuration and routes
    /// (read from the same publications), with its own neighbour table, buffers, ICMP
    /// budget and counters. It holds no route writer; of a back-end, it sends no hellos
    /// and hands the DIST frames it receives to the first worker. Join the workers with
    /// [`Forwarder::connect_workers`].
    pub fn worker(&self, now: Instant) -> Forwarder {
        let counters = Arc::new(Counters::new(self.counters.port_names.clone()));
        // Its own fragment identifications: another start per worker.
        let seed = (Arc::as_ptr(&counters) as usize as u32) << 8 | 1;
        Forwarder {
            ifaces: self.ifaces.clone(),
            port_of: self.port_of.clone(),
            untagged: self.untagged.clone(),
            subifs: self.subifs.clone(),
            backend: self.backend.as_ref().map(|b| Backend {
                lead: false,
                ..b.clone()
            }),
            sampler: self.sampler.clone(),
            flow_remote: None,
            fib_link: None,
            filter_input: Default::default(),
            filter_answers: Vec::new(),
            dist_auth: Default::default(),
            routes: None,
            readers: self.readers.clone(),
            snap: None,
            gateways_resolved: 0,
            neighbours: Neighbours::new(self.cfg.neighbour),
            counters,
            cfg: self.cfg,
            icmp_tokens: self.cfg.icmp_burst as f64,
            icmp_refill: now,
            ident: 1,
            pool: Pool::new(),
            expired: Expired::default(),
            peers: None,
            reasm: Reassembly::new(ReasmConfig::default()),
            star: self.star.clone(),
            icmp_from: None,
            report: Default::default(),
            six: self.six.as_ref().map(|s| Box::new(s.for_worker(seed))),
            snap6: None,
            dist_share: DistShare::default(),
            filters: self.filters.clone(),
            filt: None,
        }
    }

    /// Joins the workers of one forwarder: each shares what it learns of its neighbours
    /// with the others ([`Forwarder::take_news`]), and the ICMP error budget is split
    /// between them so that together they send no more than one forwarder would. Of a
    /// back-end, the first worker takes the DIST frames the others receive and reports
    /// the counters of all.
    pub fn connect_workers(workers: &mut [Forwarder]) {
        let n = workers.len();
        if n < 2 {
            return;
        }
        if workers[0].backend.is_some() {
            let (to_lead, from_others) = std::sync::mpsc::sync_channel(DIST_HAND_QUEUE);
            let group = workers.iter().map(|w| w.counters.clone()).collect();
            for w in workers[1..].iter_mut() {
                w.dist_share.to_lead = Some(to_lead.clone());
            }
            workers[0].dist_share.from_others = Some(from_others);
            workers[0].dist_share.group = group;
        }
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..n)
            .map(|_| std::sync::mpsc::sync_channel::<Learned>(PEER_QUEUE))
            .unzip();
        for (i, (w, from)) in workers.iter_mut().zip(rxs).enumerate() {
            let to = txs
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, t)| t.clone())
                .collect();
            w.peers = Some(Peers { to, from });
            w.cfg.icmp_errors_per_sec = (w.cfg.icmp_errors_per_sec / n as u32).max(1);
            w.cfg.icmp_burst = (w.cfg.icmp_burst / n as u32).max(1);
            w.icmp_tokens = w.icmp_tokens.min(w.cfg.icmp_burst as f64);
        }
    }

    /// Takes the neighbours sibling workers learned, and sends what was waiting for them.
    pub fn take_news(&mut self, now: Instant, tx: &mut TxQueues) {
        if let Some(from) = self.dist_share.from_others.take() {
            for p in from.try_iter() {
                self.dist_input(p, true);
            }
            self.dist_share.from_others = Some(from);
        }
        let Some(peers) = self.peers.take() else {
            return;
        };
        while let Ok((port, ip, mac)) = peers.from.try_recv() {
            if (port as usize) >= self.ifaces.len() {
                continue;
            }
            match ip {
                std::net::IpAddr::V4(ip) => {
                    for mut w in self.neighbours.learn(port, ip, mac, now, true) {
                        self.set_macs(&mut w, port, mac);
                        self.output(port, w, tx);
                    }
                }
                std::net::IpAddr::V6(ip) => self.learn6(port, ip, mac, true, false, now, tx),
            }
        }
        self.peers = Some(peers);
    }

    /// Makes this forwarder a back-end of a multistage router: it sends DIST hellos out of
    /// interface `internal` (an untagged one) every `hello_interval` and accepts DIST there.
    pub fn set_backend(&mut self, internal: u16, hello_interval: Duration, now: Instant) {
        self.backend = Some(Backend {
            internal,
            interval: hello_interval,
            next: now,
            seq: 0,
            lead: true,
            state: wire::dist::HelloState {
                incarnation: wire::dist::new_incarnation(),
                ..Default::default()
            },
        });
    }

    /// Sets the incarnation a back-end's hellos carry (a new one at every start by
    /// default; docs/dist.md, "Incarnations").
    pub fn set_incarnation(&mut self, incarnation: u64) {
        if let Some(b) = self.backend.as_mut() {
            b.state.incarnation = incarnation;
        }
    }

    /// A back-end's incarnation.
    pub fn incarnation(&self) -> Option<u64> {
        self.backend.as_ref().map(|b| b.state.incarnation)
    }

    /// The internal port of a back-end (None if this forwarder is not one).
    pub fn backend_internal(&self) -> Option<u16> {
        self.backend.as_ref().map(|b| b.internal)
    }

    /// Connects a back-end to its route writer (see [`FibLink`]).
    pub fn set_fib_link(&mut self, link: FibLink) {
        self.fib_link = Some(link);
    }

    /// How long the run loop may wait between [`Forwarder::poll`] calls: [`POLL_INTERVAL`],
    /// or less for a back-end whose hellos are due more often, and at most
    /// [`WRITER_POLL_INTERVAL`] for one with a route writer, whose acknowledgements pace
    /// the controller.
    pub fn poll_interval(&self) -> Duration {
        let d = match &self.backend {
            Some(b) => POLL_INTERVAL.min(b.interval / 4),
            None => POLL_INTERVAL,
        };
        match &self.fib_link {
            Some(_) => d.min(WRITER_POLL_INTERVAL),
            None => d,
        }
    }

    /// Number of ports (untagged interfaces).
    pub fn port_count(&self) -> usize {
        self.untagged.len()
    }

    /// The port of interface `iface`.
    pub fn port_of(&self, iface: u16) -> Option<u16> {
        self.port_of
            .get(iface as usize)
            .copied()
            .filter(|&p| p != u16::MAX)
    }

    /// The route writer, while this forwarder owns it.
    pub fn routes(&self) -> Option<&RouteTable> {
        self.routes.as_ref()
    }

    /// Hands the route writer to the caller (a control thread that loads and changes routes
    /// while this forwarder forwards). Afterwards the route methods here return errors.
    pub fn take_routes(&mut self) -> Option<RouteTable> {
        self.routes.take()
    }

    /// Runs `f` on the route writer, after letting go of this forwarder's snapshot (the
    /// writer waits for readers to release the copy it edits).
    fn with_routes<T>(&mut self, f: impl FnOnce(&mut RouteTable) -> T) -> Option<T> {
        self.snap = None;
        self.routes.as_mut().map(f)
    }

    /// The port whose connected network holds `gw` (the longest, if several).
    pub fn port_for_gateway(&self, gw: Ipv4Addr) -> Option<u16> {
        crate::routes::port_for_gateway(&crate::routes::connected(&self.ifaces), gw).or_else(|| {
            let s = self.star.as_ref()?;
            s.member_for(gw).map(|_| s.internal)
        })
    }

    /// Adds or replaces a route through gateway `via`.
    pub fn add_route(&mut self, prefix: Prefix, via: Ipv4Addr) -> Result<(), RouteError> {
        self.add_route_ecmp(prefix, &[via])
    }

    /// Adds or replaces a route through several gateways (ECMP).
    pub fn add_route_ecmp(&mut self, prefix: Prefix, vias: &[Ipv4Addr]) -> Result<(), RouteError> {
        self.with_routes(|t| t.add(prefix, vias))
            .unwrap_or(Err(RouteError::NoNextHop))
    }

    /// Replaces all routes but the connected ones, published at once.
    pub fn replace_routes(
        &mut self,
        routes: Vec<(Prefix, Vec<Ipv4Addr>)>,
    ) -> Result<usize, RouteError> {
        self.with_routes(|t| t.replace(routes))
            .unwrap_or(Err(RouteError::NoNextHop))
    }

    /// Removes a route; true if it was there.
    pub fn remove_route(&mut self, prefix: Prefix) -> bool {
        self.with_routes(|t| t.remove(prefix)).unwrap_or(false)
    }

    /// Number of routes in the published table.
    pub fn route_count(&mut self) -> usize {
        self.load_snapshot();
        self.snap.as_ref().map(|s| s.0.len()).unwrap_or(0)
    }

    fn load_snapshot(&mut self) {
        if self.snap.is_none() {
            // FIB first, then groups: groups are published before any FIB that uses them.
            let fib = self.readers.fib.load_full();
            let groups = self.readers.groups.load_full();
            self.snap = Some((fib, groups));
        }
    }

    /// An identity of the FIB snapshot in use (its address), to observe publications.
    pub fn snapshot_id(&mut self) -> usize {
        self.load_snapshot();
        self.snap
            .as_ref()
            .map(|s| Arc::as_ptr(&s.0) as usize)
            .unwrap_or(0)
    }

    /// Ends a batch: lets go of the table snapshot, so the route writer can reuse it.
    pub fn end_batch(&mut self) {
        self.snap = None;
        self.snap6 = None;
        self.filt = None;
    }

    /// A hint for a frame that [`Forwarder::process`] will see soon: starts loading the
    /// FIB's `dir` entry (`near == false`, several frames ahead) or node (`near`, a few
    /// frames ahead) for its IPv4 destination, so that the lookup finds them in the cache.
    /// Changes nothing; frames that are not IPv4 are left alone.
    #[inline]
    pub fn prefetch(&mut self, p: &Pkt, near: bool) {
        let Some(a) = ipv4_dst(&p.data) else {
            return;
        };
        self.load_snapshot();
        if let Some((fib, _)) = &self.snap {
            if near {
                fib.prefetch_node(a);
            } else {
                fib.prefetch_dir(a);
            }
        }
    }

    /// The next hop for a packet to `dst` whose IPv4 bytes are `ip` (for the ECMP hash).
    #[inline]
    fn next_hop(&mut self, dst: Ipv4Addr, ip: &[u8]) -> Option<NextHop> {
        self.load_snapshot();
        let (fib, groups) = self.snap.as_ref()?;
        let g = fib.lookup_raw(u32::from(dst));
        if g == NO_ROUTE {
            return None;
        }
        let group = groups.get(g as usize)?;
        Some(if group.len() == 1 {
            group[0]
        } else {
            pick(group, flow_hash(ip))
        })
    }

    /// The next hop for `dst`, as the data plane would choose it for a flow hashing to 0.
    pub fn route(&mut self, dst: Ipv4Addr) -> Option<NextHop> {
        self.load_snapshot();
        let (fib, groups) = self.snap.as_ref()?;
        let g = fib.lookup_raw(u32::from(dst));
        (g != NO_ROUTE)
            .then(|| groups.get(g as usize).map(|gr| pick(gr, 0)))
            .flatten()
    }

    #[inline]
    fn drop_pkt(&mut self, p: Pkt, why: Drop) {
        self.counters.count(why);
        self.pool.put(p);
    }

    /// Runs one received frame through the forwarder. Frames to send land in `tx`.
    pub fn process(&mut self, mut p: Pkt, now: Instant, tx: &mut TxQueues) {
        let port = p.meta.rx_port;
        if !self.counters.count_rx(port, p.data.len()) {
            return self.drop_pkt(p, Drop::EthTruncated);
        }
        let Ok(eth) = ethernet::Frame::new_checked(&p.data[..]) else {
            return self.drop_pkt(p, Drop::EthTruncated);
        };
        let dst = eth.dst();
        let l2_group = dst.is_multicast();
        let vid = eth.vlan();
        let ethertype = eth.ethertype();
        let ifx = match vid {
            None => self.untagged[port as usize],
            Some(v) => match self.subifs.iter().find(|s| s.0 == port && s.1 == v) {
                Some(s) => s.2,
                None => return self.drop_pkt(p, Drop::VlanNotConfigured),
            },
        };
        if !l2_group && dst != self.ifaces[ifx as usize].mac {
            return self.drop_pkt(p, Drop::NotOurMac);
        }
        if vid.is_some() {
            ethernet::pop_vlan(&mut p.data);
        }
        p.meta.iface = ifx;
        match ethertype {
            ethertype::IPV4 => self.ip4_input(p, l2_group, now, tx),
            ethertype::ARP => self.arp_input(p, now, tx),
            ethertype::IPV6 => self.ip6_input(p, l2_group, now, tx),
            wire::dist::ETHERTYPE => self.dist_input(p, vid.is_none()),
            wire::star::ETHERTYPE => self.star_input(p, vid.is_none(), now, tx),
            _ => self.drop_pkt(p, Drop::EthertypeUnsupported),
        }
    }

    /// Queues a frame for interface `iface`: tagged if it is a sub-interface, on its port.
    #[inline]
    fn output(&self, iface: u16, mut p: Pkt, tx: &mut TxQueues) {
        let ifc = &self.ifaces[iface as usize];
        if let Some(v) = ifc.vlan {
            ethernet::push_vlan(&mut p.data, v.id);
        }
        tx.push(self.port_of[iface as usize], p);
    }

    /// Timers: ARP retries, probes and failures. Call every few tens of milliseconds.
    pub fn poll(&mut self, now: Instant, tx: &mut TxQueues) {
        self.send_hello(now, tx);
        self.resolve_gateways(now, tx);
        self.send_writer_frames(tx);
        let (frags, firsts) = self.reasm.expire(now);
        if frags > 0 {
            self.counters.count_n(Drop::ReasmTimeout, frags);
        }
        // Time exceeded (fragment reassembly) from the address the datagram was sent to,
        // about each whose first fragment came (RFC 1122 3.3.2, RFC 792).
        for f in firsts {
            if f.first().is_some_and(|b| b >> 4 == 6) {
                self.reasm_timeout6(&f, now, tx);
                continue;
            }
            let Ok(ip) = ipv4::Packet::new_checked(&f[..]) else {
                continue;
            };
            let to = ip.dst();
            let port = self
                .ifaces
                .iter()
                .position(|i| i.v4() == Some(to))
                .unwrap_or(0) as u16;
            let e = IcmpError::ReasmTimeExceeded;
            self.icmp_error_from(&f, port, Some(to), e, now, tx);
        }
        let mut ex = std::mem::take(&mut self.expired);
        self.neighbours.expire(now, &mut ex);
        for (port, ip) in ex.requests.drain(..) {
            self.send_arp_request(port, ip, tx);
        }
        for p in ex.failed.drain(..) {
            if p.data.len() > ETH {
                let in_port = p.meta.iface;
                self.icmp_error_from(
                    &p.data[ETH..],
                    in_port,
                    p.meta.error_src,
                    IcmpError::Unreachable(unreachable::HOST),
                    now,
                    tx,
                );
            }
            self.drop_pkt(p, Drop::ArpFailed);
        }
        self.expired = ex;
        self.poll6(now, tx);
    }

    fn is_local(&self, a: Ipv4Addr) -> bool {
        self.ifaces.iter().any(|i| i.v4() == Some(a))
    }

    /// The IPv4 address the router sources packets from on `port`: the port's own, or on
    /// an IPv6-only interface the first interface's that has one.
    pub(crate) fn source_v4(&self, port: u16) -> Option<Ipv4Addr> {
        self.ifaces
            .get(port as usize)
            .and_then(Iface::v4)
            .or_else(|| self.ifaces.iter().find_map(Iface::v4))
    }

    fn is_directed_broadcast(&self, a: Ipv4Addr) -> bool {
        self.ifaces.iter().any(|i| i.broadcast() == Some(a))
    }

    fn ip4_input(&mut self, mut p: Pkt, l2_group: bool, now: Instant, tx: &mut TxQueues) {
        let in_port = p.meta.iface;
        let ip = match ipv4::Packet::new_checked(&p.data[ETH..]) {
            Ok(ip) => ip,
            Err(e) => {
                let why = match e {
                    ipv4::Error::Truncated(_) => Drop::Ip4Truncated,
                    ipv4::Error::BadVersion(_) => Drop::Ip4BadVersion,
                    ipv4::Error::BadHeaderLen(_) => Drop::Ip4BadHeaderLen,
                    ipv4::Error::BadTotalLen { .. } => Drop::Ip4BadTotalLen,
                    ipv4::Error::BadOption { .. } => Drop::Ip4BadOptions,
                };
                return self.drop_pkt(p, why);
            }
        };
        if !ip.verify_checksum() {
            return self.drop_pkt(p, Drop::Ip4BadChecksum);
        }
        let (src, dst, ttl, total, df) =
            (ip.src(), ip.dst(), ip.ttl(), ip.total_len(), ip.dont_frag());
        let options = ip.check_options();
        p.data.truncate(ETH + total);
        match options {
            Ok(false) => {}
            Ok(true) => {
                let e = IcmpError::Unreachable(unreachable::SOURCE_ROUTE_FAILED);
                self.icmp_error(&p.data[ETH..], l2_group, in_port, e, now, tx);
                return self.drop_pkt(p, Drop::Ip4SourceRoute);
            }
            Err(e) => {
                let at = match e {
                    ipv4::Error::BadOption { at } => at as u8,
                    _ => 20,
                };
                self.icmp_error(
                    &p.data[ETH..],
                    l2_group,
                    in_port,
                    IcmpError::ParamProblem(at),
                    now,
                    tx,
                );
                return self.drop_pkt(p, Drop::Ip4BadOptions);
            }
        }
        if martian_source(src) || self.is_local(src) || self.is_directed_broadcast(src) {
            return self.drop_pkt(p, Drop::Ip4MartianSource);
        }
        let v = self.filter_in(&p.data[ETH..], false, in_port, p.data.len());
        if v != filter::Verdict::Pass {
            return self.filtered4(p, v, l2_group, now, tx);
        }
        if dst.is_broadcast() {
            return self.drop_pkt(p, Drop::Ip4Broadcast);
        }
        if dst.is_multicast() {
            return self.drop_pkt(p, Drop::Ip4Multicast);
        }
        if self.is_local(dst) {
            return self.ip4_local(p, now, tx);
        }
        if l2_group {
            return self.drop_pkt(p, Drop::Ip4L2Multicast);
        }
        if martian_destination(dst) {
            return self.drop_pkt(p, Drop::Ip4MartianDestination);
        }
        if self.is_directed_broadcast(dst) {
            return self.drop_pkt(p, Drop::Ip4Broadcast);
        }
        if ttl <= 1 {
            self.icmp_error(
                &p.data[ETH..],
                false,
                in_port,
                IcmpError::TimeExceeded,
                now,
                tx,
            );
            self.sample_dropped(&p, false, wire::ipfix::status::DROPPED_BAD_TTL);
            return self.drop_pkt(p, Drop::Ip4TtlExpired);
        }
        let Some(nh) = self.next_hop(dst, &p.data[ETH..]) else {
            let e = IcmpError::Unreachable(unreachable::NET);
            self.icmp_error(&p.data[ETH..], false, in_port, e, now, tx);
            self.sample_dropped(&p, false, wire::ipfix::status::DROPPED_UNROUTABLE);
            return self.drop_pkt(p, Drop::Ip4NoRoute);
        };
        let v = self.filter_out(&p.data[ETH..], false, nh.port, p.data.len());
        if v != filter::Verdict::Pass {
            return self.filtered4(p, v, false, now, tx);
        }
        let mtu = self.out_mtu(nh.port);
        if total > mtu && df {
            let e = IcmpError::FragNeeded(mtu.min(u16::MAX as usize) as u16);
            self.icmp_error(&p.data[ETH..], false, in_port, e, now, tx);
            return self.drop_pkt(p, Drop::Ip4FragNeeded);
        }
        // Record Route and Timestamp (RFC 1812 5.3.13): our outgoing interface's address.
        let mut options_changed = false;
        if p.data.len() > ETH + ipv4::MIN_HEADER_LEN && p.data[ETH] & 0x0f > 5 {
            let out = self.source_v4(nh.port).unwrap_or(Ipv4Addr::UNSPECIFIED);
            let ts_ms = (wire::dist::auth::now_ns() / 1_000_000 % 86_400_000) as u32;
            let r = match ipv4::Packet::new_checked(&mut p.data[ETH..]) {
                Ok(mut ipm) => ipm.update_options(out, ts_ms),
                Err(_) => return self.drop_pkt(p, Drop::Ip4Truncated),
            };
            match r {
                Ok(changed) => options_changed = changed,
                Err(at) => {
                    let e = IcmpError::ParamProblem(at.min(255) as u8);
                    self.icmp_error(&p.data[ETH..], false, in_port, e, now, tx);
                    return self.drop_pkt(p, Drop::Ip4BadOptions);
                }
            }
        }
        // ip4-rewrite. The view is valid: the header was checked above and only trimmed
        // link padding since.
        let Ok(mut ipm) = ipv4::Packet::new_checked(&mut p.data[ETH..]) else {
            return self.drop_pkt(p, Drop::Ip4Truncated);
        };
        if (p.meta.csum_partial || (p.meta.csum_unknown && ipm.transport_checksum_looks_partial()))
            && ipm.fill_transport_checksum()
        {
            self.counters.event(Event::ChecksumFilled);
        }
        ipm.decrement_ttl();
        if options_changed {
            ipm.fill_checksum();
            self.counters.event(Event::OptionsUpdated);
        }
        self.counters.event(Event::Forwarded);
        let hop = nh.via.unwrap_or(dst);
        self.sample_forwarded(&p, false, nh.port, hop.into());
        if total > mtu {
            self.fragment_out(p, nh.port, hop, mtu, now, tx);
        } else {
            self.neighbour_output(p, nh.port, hop, now, tx);
        }
    }

    fn fragment_out(
        &mut self,
        p: Pkt,
        port: u16,
        hop: Ipv4Addr,
        mtu: usize,
        now: Instant,
        tx: &mut TxQueues,
    ) {
        let mut frags = Vec::new();
        let pool = &mut self.pool;
        let r = frag::fragment(&p.data[ETH..], mtu, |h, d| {
            let mut f = pool.get();
            f.meta = p.meta;
            f.data.extend_from_slice(&p.data[..ETH]);
            f.data.extend_from_slice(h);
            f.data.extend_from_slice(d);
            frags.push(f);
        });
        match r {
            Ok(n) => {
                self.counters.event(Event::Fragmented);
                self.counters.event_n(Event::FragmentsMade, n as u64);
                self.pool.put(p);
                for f in frags {
                    self.neighbour_output(f, port, hop, now, tx);
                }
            }
            Err(_) => {
                for f in frags {
                    self.pool.put(f);
                }
                self.drop_pkt(p, Drop::Ip4FragFailed)
            }
        }
    }

    /// The IP MTU of the path out of `port`: the interface's, less the star header on a
    /// star's internal port.
    fn out_mtu(&self, port: u16) -> usize {
        let mtu = self.ifaces[port as usize].mtu;
        match &self.star {
            Some(s) if s.internal == port => mtu.saturating_sub(wire::star::HEADER_LEN),
            _ => mtu,
        }
    }

    /// A packet another forwarder of the star looked up: out of the port and to the
    /// neighbour its header names, with no lookup and no TTL decrement here.
    fn star_input(&mut self, mut p: Pkt, untagged: bool, now: Instant, tx: &mut TxQueues) {
        let Some(internal) = self.star.as_ref().map(|s| s.internal) else {
            return self.drop_pkt(p, Drop::StarNotInternal);
        };
        if !untagged || p.meta.iface != internal {
            return self.drop_pkt(p, Drop::StarNotInternal);
        }
        if p.data.get(ETH) == Some(&wire::star::VERSION6) {
            return self.star_input6(p, now, tx);
        }
        let Ok(h) = wire::star::Header::parse(&p.data[ETH..]) else {
            return self.drop_pkt(p, Drop::StarMalformed);
        };
        let port = h.port as u16;
        if port as usize >= self.ifaces.len() || port == internal {
            return self.drop_pkt(p, Drop::StarMalformed);
        }
        p.data.remove_at(ETH, wire::star::HEADER_LEN);
        let Ok(ip) = ipv4::Packet::new_checked(&p.data[ETH..]) else {
            return self.drop_pkt(p, Drop::StarMalformed);
        };
        let (total, df) = (ip.total_len(), ip.dont_frag());
        p.data.truncate(ETH + total);
        self.counters.event(Event::StarReceived);
        p.meta.error_src = Some(h.ingress);
        // The egress port's acl_out, here where the port is (the ingress member applied
        // its own lists and reverse-path check).
        match self.filter_out(&p.data[ETH..], false, port, p.data.len()) {
            filter::Verdict::Pass => {}
            filter::Verdict::Drop(d) => return self.drop_pkt(p, d),
            filter::Verdict::Reject => {
                let e = IcmpError::Unreachable(unreachable::ADMIN_PROHIBITED);
                let in_port = p.meta.iface;
                self.icmp_error_from(&p.data[ETH..], in_port, Some(h.ingress), e, now, tx);
                return self.drop_pkt(p, Drop::AclReject);
            }
        }
        let mtu = self.ifaces[port as usize].mtu;
        if total > mtu && df {
            let e = IcmpError::FragNeeded(mtu.min(u16::MAX as usize) as u16);
            let in_port = p.meta.iface;
            self.icmp_error_from(&p.data[ETH..], in_port, Some(h.ingress), e, now, tx);
            return self.drop_pkt(p, Drop::Ip4FragNeeded);
        }
        if total > mtu {
            self.fragment_out(p, port, h.next_hop, mtu, now, tx);
        } else {
            self.neighbour_output(p, port, h.next_hop, now, tx);
        }
    }

    /// Hands a looked-up packet to the star's forwarder that faces `hop`'s network.
    fn star_output(&mut self, p: Pkt, member: (MacAddr, u8), hop: Ipv4Addr, tx: &mut TxQueues) {
        let ingress = p
            .meta
            .error_src
            .or_else(|| self.ifaces.get(p.meta.iface as usize).map(|i| i.addr))
            .unwrap_or(Ipv4Addr::UNSPECIFIED);
        let h = wire::star::Header {
            port: member.1,
            next_hop: hop,
            ingress,
        };
        self.star_send(p, member.0, &h.to_bytes(), tx);
    }

    /// Sends a packet across the star's switch to the member at `to`, behind `header` (a
    /// star header of either version).
    fn star_send(&mut self, mut p: Pkt, to: MacAddr, header: &[u8], tx: &mut TxQueues) {
        let Some(internal) = self.star.as_ref().map(|s| s.internal) else {
            return self.drop_pkt(p, Drop::StarNotInternal);
        };
        p.data.insert_at(ETH, header);
        let eth = ethernet::Repr {
            dst: to,
            src: self.ifaces[internal as usize].mac,
            vlan: None,
            ethertype: wire::star::ETHERTYPE,
        };
        let _ = eth.emit(&mut p.data[..]);
        self.counters.event(Event::StarSent);
        self.output(internal, p, tx);
    }

    /// Sets the MACs and queues the frame, or holds it while the next hop resolves.
    fn neighbour_output(
        &mut self,
        mut p: Pkt,
        port: u16,
        hop: Ipv4Addr,
        now: Instant,
        tx: &mut TxQueues,
    ) {
        if let Some(s) = &self.star {
            if port == s.internal {
                if let Some(m) = s.member_for(hop) {
                    return self.star_output(p, m, hop, tx);
                }
            }
        }
        match self.neighbours.lookup(port, hop, now) {
            Some((mac, probe)) => {
                if probe {
                    self.send_arp_request(port, hop, tx);
                }
                self.set_macs(&mut p, port, mac);
                self.output(port, p, tx);
            }
            None => match self.neighbours.enqueue(port, hop, now, p) {
                Enqueued::NewRequest => {
                    self.counters.event(Event::ArpQueued);
                    self.send_arp_request(port, hop, tx);
                }
                Enqueued::Queued => self.counters.event(Event::ArpQueued),
                Enqueued::Full(p) => self.drop_pkt(p, Drop::ArpQueueFull),
                Enqueued::TableFull(p) => self.drop_pkt(p, Drop::ArpTableFull),
            },
        }
    }

    fn set_macs(&self, p: &mut Pkt, port: u16, dst: MacAddr) {
        self.set_macs_of(p, port, dst, ethertype::IPV4);
    }

    /// Writes the Ethernet header of a frame of `ethertype` from `port` to `dst`.
    fn set_macs_of(&self, p: &mut Pkt, port: u16, dst: MacAddr, ethertype: u16) {
        let r = ethernet::Repr {
            dst,
            src: self.ifaces[port as usize].mac,
            vlan: None,
            ethertype,
        };
        // Every frame here has at least an Ethernet header: received ones were checked,
        // made ones reserve it.
        let _ = r.emit(&mut p.data[..]);
    }
}

/// The IPv4 destination of an untagged or 802.1Q-tagged frame, unchecked beyond its
/// place in the frame (a hint only; [`Forwarder::process`] validates).
#[inline]
fn ipv4_dst(d: &[u8]) -> Option<u32> {
    let eth = ethernet::Frame::new_checked(d).ok()?;
    if eth.ethertype() != ethertype::IPV4 {
        return None;
    }
    Some(u32::from_be_bytes(
        eth.payload().get(16..20)?.try_into().ok()?,
    ))
}

/// Fills `out` with a reserved Ethernet header, an IPv4 header and the ICMP message.
fn build_ip(
    out: &mut Pkt,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    tos: u8,
    ident: u16,
    msg: &icmp::Repr,
) -> bool {
    let len = msg.buffer_len();
    out.data.resize(ETH + ipv4::MIN_HEADER_LEN + len, 0);
    let ip = ipv4::Repr {
        src,
        dst,
        protocol: protocol::ICMP,
        ttl: 64,
        tos,
        ident,
        dont_frag: false,
        more_frags: false,
        frag_offset: 0,
        payload_len: len,
    };
    ip.emit(&mut out.data[ETH..]).is_ok()
        && msg
            .emit(&mut out.data[ETH + ipv4::MIN_HEADER_LEN..])
            .is_ok()
}

/// Sources a router must not accept (RFC 1812 5.3.7): 0/8, 127/8, multicast, class E and
/// limited broadcast.
pub fn martian_source(a: Ipv4Addr) -> bool {
    let o = a.octets()[0];
    o == 0 || o == 127 || o >= 224
}

/// Destinations never forwarded: 0/8, 127/8 and class E (240/4, broadcast excluded).
pub fn martian_destination(a: Ipv4Addr) -> bool {
    let o = a.octets()[0];
    o == 0 || o == 127 || (o >= 240 && !a.is_broadcast())
}

/// How long a back-end's acknowledgement waits at most for the worker to send it.
pub const WRITER_POLL_INTERVAL: Duration = Duration::from_millis(2);

/// How long between [`Forwarder::poll`] calls the run loop should wait at most.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

mod backend;
mod filter;
mod ip6;
mod local;
mod sampling;
pub use ip6::{Hop6, RouteChanges6};

#[cfg(test)]
mod tests;
