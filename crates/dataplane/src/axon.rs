//! `tessera axon`: a source-routed Ethernet switch that hosts cannot tell from a learning
//! switch (Foss, "The Axon: a Network Device for Data Centre Networks"; docs/axon.md).
//!
//! Between Axons, frames carry a source route ([`wire::axon`]); only the first Axon on a
//! path looks anything up, in the route memory of the host port the frame came in by (a
//! CAM keyed by destination MAC). All the state for a host lives in the Axon it is plugged
//! into. Any topology, cycles included, can be used: nothing is flooded.
//!
//! - **Ports** start as host ports; a port that hears an Axon hello ([`Msg::Hello`], sent
//!   on every port each hello interval) leads to that Axon until the hellos stop for
//!   `dead` intervals.
//! - **Topology**: each Axon floods its links ([`Msg::Links`]) to every other, hop by hop,
//!   on every change and each second; every Axon computes the shortest path (fewest hops,
//!   ties to the lower port) to every other from the links both ends report, and moves its
//!   routes onto the new paths when the topology changes.
//! - **Routes** are set up by Axon-ARP: a host's ARP request goes to this Axon's control
//!   plane, which asks every Axon ([`Msg::ArpRequest`], one source-routed copy each, itself
//!   included). The Axon that has the target asks it by ARP in the requester's name (so the
//!   target learns the requester's MAC), installs the route back on the target's port when
//!   it answers, and replies ([`Msg::ArpReply`]) by the reverse path the request recorded;
//!   the requester's Axon installs the route on the requester's port and answers its ARP.
//!   ARP requests for a destination a port already has a route to (a unicast refresh, say)
//!   are answered at once.
//!   IPv6 hosts' neighbour solicitations and advertisements take the same way, with IPv6
//!   addresses in the messages: the target is solicited in the requester's name and the
//!   requester gets a solicited advertisement (duplicate address detection is left
//!   unanswered).
//! - **Output ports** keep one queue per input port (the control plane is one more input)
//!   and serve them by deficit round robin, with an optional capacity, buffer and delay:
//!   the switch's ports ([`crate::switch`]).
//!
//! - **DHCP**: an Axon with `[dhcp]` leases addresses from its own pool to its hosts
//!   (and so knows where they are before they speak).
//!
//! Not yet: masqueraded MACs when a route memory is full (the route is
//! not installed, counted), latency probes, pacing a host port for the header's length
//! (self-congestion), spreading paths over redundant links.

use crate::buf::{Buf, Pkt, Pool, TxQueues};
use crate::counters::{Counters, Drop, Event};
use crate::switch::{Mode, OutPort, PortConfig};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::axon::{self, Header, Kind, Msg, CONTROL};
use wire::ethernet::ethertype;
use wire::MacAddr;

/// Ports an Axon has at most (4-bit port numbers; 0xf is the control plane).
pub const MAX_PORTS: usize = 15;

#[derive(Debug, Clone, PartialEq)]
pub struct AxonConfig {
    /// This Axon's id, unique among the Axons that see each other.
    pub id: u32,
    pub ports: Vec<PortConfig>,
    /// The ports' MAC addresses (outer source of Axon frames), in port order.
    pub macs: Vec<MacAddr>,
    pub hello: Duration,
    /// Hello intervals without a hello before a neighbour is dead.
    pub dead: u32,
    /// Routes per host port at most.
    pub cam_size: usize,
    /// Addresses for the hosts, if this Axon serves DHCP.
    pub dhcp: Option<DhcpConfig>,
    /// Probe every other Axon this often (a round trip, timestamps at every hop's input and
    /// output); zero: never.
    pub probe: Duration,
    /// Self-congestion: pace what each host port with a `capacity_bps` sends into the
    /// Axon network at that rate, counting each frame as it travels between Axons (with
    /// the Axon header and the outer Ethernet header), so that a host sending at its line
    /// rate fits links of the same rate. Frames wait in the port's buffer (tail drop
    /// beyond, counted) instead of overrunning the next Axon's queue.
    pub pace_hosts: bool,
    /// Spread routes over equal-cost shortest paths (each route keeps one path, chosen
    /// by a hash of its destination MAC, so a flow is never reordered); otherwise every
    /// route to an Axon takes the control plane's path (ties to the lower port).
    pub spread: bool,
}

/// The last probe that came back from an Axon: when, and its records (this Axon's first,
/// the far Axon's in the middle, this Axon's again last).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeResult {
    pub at: Instant,
    pub seq: u32,
    pub records: Vec<wire::axon::probe::Record>,
}

/// The Ethernet segment between this Axon and one of its hosts, as ether-probes time it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub mac: MacAddr,
    pub port: u8,
    /// When the outstanding probe was sent (0: none outstanding).
    pub sent_ns: u64,
    /// The last round trip measured.
    pub rtt_ns: Option<u64>,
    pub at: Instant,
}

/// CLOCK_REALTIME in nanoseconds (the clock of the kernel's receive timestamps).
use wire::dist::auth::now_ns as realtime_ns;

/// An Axon's DHCP server: a pool of its own (Axons in one subnet have disjoint pools).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DhcpConfig {
    /// The server identifier and the source of the replies.
    pub server: Ipv4Addr,
    pub first: Ipv4Addr,
    pub last: Ipv4Addr,
    pub mask: Ipv4Addr,
    pub lease: Duration,
    pub router: Option<Ipv4Addr>,
}

/// A lease: the address and when it ends (an offer holds the address for a few seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub ip: Ipv4Addr,
    pub until: Instant,
    pub bound: bool,
}

/// How long an offered address is held for the host that was offered it.
const OFFER_HOLD: Duration = Duration::from_secs(10);

/// A route a host port holds: to host `mac` (`ip`) on port `port` of Axon `axon`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub axon: u32,
    pub port: u8,
    pub mac: MacAddr,
    pub ip: IpAddr,
    /// The output ports from this Axon to the host, its own port last; None: the far
    /// Axon cannot be reached now.
    pub path: Option<Vec<u8>>,
    pub installed: Instant,
}

/// A neighbour Axon seen on a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neighbour {
    pub id: u32,
    pub port: u8,
    pub mac: MacAddr,
    pub seen: Instant,
    pub since: Instant,
}

/// A host seen on a host port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host {
    pub mac: MacAddr,
    pub port: u8,
    pub seen: Instant,
}

/// At the target's Axon: an Axon-ARP request waiting for the target's ARP reply.
#[derive(Debug, Clone)]
struct Waiting {
    origin: u32,
    req: u32,
    src_mac: MacAddr,
    src_ip: IpAddr,
    src_port: u8,
    /// The way back to the origin's control plane.
    back: Vec<u8>,
    since: Instant,
}

/// An Axon's link (its port, the neighbour's id, the neighbour's port).
pub type Link = (u8, u32, u8);

/// Another Axon's links as flooded: (seq, links, when received).
type Lsa = (u32, Vec<Link>, Instant);

/// How long an Axon-ARP request waits for the target's ARP reply.
const WAIT: Duration = Duration::from_secs(2);
/// A host's repeated ARP request starts a new Axon-ARP request at most this often.
const ASK_EVERY: Duration = Duration::from_millis(200);
/// Links are flooded again this often even without a change.
const REFRESH: Duration = Duration::from_secs(1);
/// Another Axon's links are forgotten after this long without a refresh.
const LINKS_AGE: Duration = Duration::from_secs(4);

pub struct Axon {
    pub cfg: AxonConfig,
    out: Vec<OutPort>,
    sent: Vec<Pkt>,
    pub pool: Pool,
    pub counters: Arc<Counters>,
    neigh: Vec<Option<Neighbour>>,
    /// Other Axons' links: origin -> (seq, links, when received).
    lsdb: HashMap<u32, Lsa>,
    seq: u32,
    /// Output ports from here to each reachable Axon (not including its control plane).
    paths: BTreeMap<u32, Vec<u8>>,
    /// The two-way links by Axon (port, neighbour), and the hop count from every Axon to
    /// every reachable one: the equal-cost paths routes are spread over.
    adj: HashMap<u32, Vec<(u8, u32)>>,
    hops_to: HashMap<u32, HashMap<u32, u32>>,
    /// Per port: destination MAC -> route.
    cam: Vec<HashMap<MacAddr, Route>>,
    /// Per port: destination address -> the MAC its host was given (ARP answered from it).
    by_ip: Vec<HashMap<IpAddr, MacAddr>>,
    /// Per port: routes beyond the route memory, found by the index their masqueraded MAC
    /// carries ([`masq_mac`]), and the index of each destination MAC.
    masq: Vec<Vec<Route>>,
    masq_index: Vec<HashMap<MacAddr, u32>>,
    hosts: HashMap<IpAddr, Host>,
    waiting: HashMap<(IpAddr, MacAddr), Waiting>,
    asked: HashMap<(u8, IpAddr), Instant>,
    leases: HashMap<MacAddr, Lease>,
    probes: BTreeMap<u32, ProbeResult>,
    segments: HashMap<Ipv4Addr, Segment>,
    /// Per host port, when pacing: a shaper at the port's rate, and the output port of
    /// each frame in it (in order).
    pacers: Vec<Option<(OutPort, VecDeque<u8>)>>,
    next_probe: Instant,
    probe_seq: u32,
    next_hello: Instant,
    next_refresh: Instant,
    next_req: u32,
    changed: bool,
    /// When the topology last changed, and how long the last path computation took.
    pub topology_changed_at: Option<Instant>,
    scratch: Vec<u8>,
}

fn is_group(m: &MacAddr) -> bool {
    m.0[0] & 1 == 1
}

/// Routes per host port beyond the route memory at most (the index takes 24 bits).
pub const MAX_MASQ: usize = 1 << 24;

/// The masqueraded MAC of route `index` of host port `port`: locally administered and
/// unicast (06:a0:..), carrying the route's index, so that a frame to it finds its route
/// without a lookup. A host is given it by ARP when the port's route memory is full.
pub fn masq_mac(port: u8, index: u32) -> MacAddr {
    let i = index.to_be_bytes();
    MacAddr([0x06, 0xa0, port, i[1], i[2], i[3]])
}

/// The port and route index a masqueraded MAC carries.
pub fn masq_of(m: &MacAddr) -> Option<(u8, u32)> {
    (m.0[0] == 0x06 && m.0[1] == 0xa0)
        .then(|| (m.0[2], u32::from_be_bytes([0, m.0[3], m.0[4], m.0[5]])))
}

impl Axon {
    pub fn new(cfg: AxonConfig, counters: Arc<Counters>, now: Instant) -> Axon {
        let n = cfg.ports.len();
        let out = cfg
            .ports
            .iter()
            .map(|p| OutPort::new(p, n + 1, Mode::Fair))
            .collect();
        Axon {
            out,
            sent: Vec::new(),
            pool: Pool::new(),
            counters,
            neigh: vec![None; n],
            lsdb: HashMap::new(),
            seq: 0,
            paths: BTreeMap::new(),
            adj: HashMap::new(),
            hops_to: HashMap::new(),
            cam: (0..n).map(|_| HashMap::new()).collect(),
            by_ip: (0..n).map(|_| HashMap::new()).collect(),
            masq: (0..n).map(|_| Vec::new()).collect(),
            masq_index: (0..n).map(|_| HashMap::new()).collect(),
            hosts: HashMap::new(),
            waiting: HashMap::new(),
            asked: HashMap::new(),
            leases: HashMap::new(),
            probes: BTreeMap::new(),
            segments: HashMap::new(),
            pacers: cfg
                .ports
                .iter()
                .map(|p| {
                    (cfg.pace_hosts && p.capacity_bps.is_some())
                        .then(|| (OutPort::new(p, 1, Mode::Fifo), VecDeque::new()))
                })
                .collect(),
            next_probe: now + cfg.probe,
            probe_seq: 0,
            next_hello: now,
            next_refresh: now + REFRESH,
            next_req: 1,
            changed: true,
            topology_changed_at: None,
            scratch: Vec::new(),
            cfg,
        }
    }

    pub fn neighbours(&self) -> Vec<(u8, Neighbour)> {
        self.neigh
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.map(|n| (i as u8, n)))
            .collect()
    }

    pub fn hosts(&self) -> Vec<(IpAddr, Host)> {
        let mut v: Vec<_> = self.hosts.iter().map(|(a, h)| (*a, *h)).collect();
        v.sort_by_key(|x| x.0);
        v
    }

    /// Every port's routes: (port, route, the masqueraded MAC its host was given, if the
    /// route is beyond the route memory).
    pub fn routes(&self) -> Vec<(u8, Route, Option<MacAddr>)> {
        let mut v: Vec<_> = self
            .cam
            .iter()
            .enumerate()
            .flat_map(|(p, c)| c.values().map(move |r| (p as u8, r.clone(), None)))
            .chain(self.masq.iter().enumerate().flat_map(|(p, m)| {
                m.iter()
                    .enumerate()
                    .map(move |(i, r)| (p as u8, r.clone(), Some(masq_mac(p as u8, i as u32))))
            }))
            .collect();
        v.sort_by_key(|(p, r, _)| (*p, r.ip));
        v
    }

    /// The last probe back from each other Axon.
    pub fn probes(&self) -> Vec<(u32, ProbeResult)> {
        self.probes.iter().map(|(k, v)| (*k, v.clone())).collect()
    }

    /// DHCP leases (and offers): (host MAC, lease).
    pub fn leases(&self) -> Vec<(MacAddr, Lease)> {
        let mut v: Vec<_> = self.leases.iter().map(|(m, l)| (*m, *l)).collect();
        v.sort_by_key(|x| x.1.ip);
        v
    }

    /// Paths to the other Axons: (id, output ports).
    pub fn paths(&self) -> Vec<(u32, Vec<u8>)> {
        self.paths.iter().map(|(k, v)| (*k, v.clone())).collect()
    }

    /// Frames queued per output port.
    pub fn queued(&self) -> Vec<usize> {
        self.out.iter().map(|o| o.queued_frames()).collect()
    }

    fn is_axon_port(&self, port: usize) -> bool {
        self.neigh.get(port).is_some_and(|n| n.is_some())
    }

    pub fn process(&mut self, p: Pkt, now: Instant, _tx: &mut TxQueues) {
        let input = p.meta.rx_port as usize;
        self.counters.count_rx(input as u16, p.data.len());
        if input >= self.cfg.ports.len() {
            return self.pool.put(p);
        }
        let Ok(e) = wire::ethernet::Frame::new_checked(&p.data[..]) else {
            self.counters.count(Drop::EthTruncated);
            return self.pool.put(p);
        };
        if e.outer_ethertype() == axon::ETHERTYPE {
            return self.axon_frame(p, input, now);
        }
        if self.is_axon_port(input) {
            self.counters.count(Drop::AxonPlainOnAxonPort);
            return self.pool.put(p);
        }
        self.host_frame(p, input, now);
    }

    /// A frame with an Axon header, from a neighbour (or a hello on a host port: the
    /// bootstrap).
    fn axon_frame(&mut self, mut p: Pkt, input: usize, now: Instant) {
        let outer_src = MacAddr::from_slice(&p.data[6..12]);
        let Ok(mut h) = Header::new_checked(&mut p.data[14..]) else {
            self.counters.count(Drop::AxonMalformed);
            return self.pool.put(p);
        };
        if h.kind() == Kind::Hello {
            match Msg::parse(h.payload()) {
                Ok(Msg::Hello { id, port }) if id != self.cfg.id => {
                    self.hello_from(input, id, port, outer_src, now)
                }
                Ok(_) => {}
                Err(_) => self.counters.count(Drop::AxonMalformed),
            }
            return self.pool.put(p);
        }
        let Some(out) = h.advance(input as u8) else {
            self.counters.count(Drop::AxonPathEnd);
            return self.pool.put(p);
        };
        if h.kind() == Kind::Probe {
            return self.probe_frame(p, input, out, now);
        }
        if out == CONTROL {
            let kind = h.kind();
            let back = h.reverse();
            let msg = Msg::parse(h.payload());
            self.pool.put(p);
            match (kind, msg) {
                (Kind::Control, Ok(m)) => self.message(m, back, now),
                _ => self.counters.count(Drop::AxonMalformed),
            }
            return;
        }
        let out = out as usize;
        if out >= self.cfg.ports.len() {
            self.counters.count(Drop::AxonBadPort);
            return self.pool.put(p);
        }
        if let Some(n) = self.neigh[out] {
            // On to the next Axon.
            p.data[0..6].copy_from_slice(&n.mac.0);
            p.data[6..12].copy_from_slice(&self.cfg.macs[out].0);
            return self.enqueue(out, p, input);
        }
        if h.kind() != Kind::Data {
            self.counters.count(Drop::AxonBadPort);
            return self.pool.put(p);
        }
        // Out to the host: the host's own frame, without the Axon's header.
        let hlen = h.header_len();
        p.data.remove_at(0, 14 + hlen);
        if p.data.len() < 14 {
            self.counters.count(Drop::EthTruncated);
            return self.pool.put(p);
        }
        self.enqueue(out, p, input);
    }

    /// A probe on its way: this Axon's record goes in; at a control plane it turns back
    /// (the far end) or ends (its origin).
    fn probe_frame(&mut self, mut p: Pkt, input: usize, out: u8, now: Instant) {
        let in_ns = if p.meta.rx_ns != 0 {
            p.meta.rx_ns
        } else {
            realtime_ns()
        };
        let at = 14 + p.data[15] as usize;
        if !wire::axon::probe::push(&mut p.data, at, self.cfg.id, in_ns) {
            self.counters.count(Drop::AxonMalformed);
            return self.pool.put(p);
        }
        if out != CONTROL {
            let out = out as usize;
            match self.neigh.get(out).copied().flatten() {
                Some(n) => {
                    p.data[0..6].copy_from_slice(&n.mac.0);
                    p.data[6..12].copy_from_slice(&self.cfg.macs[out].0);
                    self.enqueue(out, p, input)
                }
                None => {
                    self.counters.count(Drop::AxonBadPort);
                    self.pool.put(p)
                }
            }
            return;
        }
        let Ok(h) = Header::new_checked(&p.data[14..]) else {
            return self.pool.put(p);
        };
        let back = h.reverse();
        let Ok((origin, seq, records)) = wire::axon::probe::parse(&p.data[at..]) else {
            self.counters.count(Drop::AxonMalformed);
            return self.pool.put(p);
        };
        if origin == self.cfg.id {
            // The path back is the way out reversed: the far end's record is the middle.
            if let Some(far) = records.get(records.len() / 2).map(|r| r.axon) {
                self.probes.insert(
                    far,
                    ProbeResult {
                        at: now,
                        seq,
                        records,
                    },
                );
            }
            return self.pool.put(p);
        }
        // The far end: back the way it came, records and all.
        let payload = p.data[at..].to_vec();
        self.pool.put(p);
        if back.last() == Some(&CONTROL) {
            self.send_kind(Kind::Probe, &back[..back.len() - 1], &payload);
        }
    }

    /// Ether-probes: an ARP probe (sender address 0.0.0.0, RFC 5227, which a host answers
    /// without learning anything) to every host this Axon knows, on its port; the reply
    /// times the Ethernet segment between the Axon and the host (send time taken as the
    /// frame is queued: a host port's queue is normally empty).
    fn ether_probes(&mut self, now: Instant) {
        // (ARP probes: the hosts known by their IPv4 addresses.)
        let hosts: Vec<(Ipv4Addr, Host)> = self
            .hosts
            .iter()
            .filter(|(_, h)| !self.is_axon_port(h.port as usize))
            .filter_map(|(a, h)| match a {
                IpAddr::V4(a) => Some((*a, *h)),
                IpAddr::V6(_) => None,
            })
            .collect();
        self.segments
            .retain(|a, _| self.hosts.contains_key(&IpAddr::V4(*a)));
        for (ip, h) in hosts {
            let port = h.port as usize;
            let sent_ns = realtime_ns();
            let s = self.segments.entry(ip).or_insert(Segment {
                mac: h.mac,
                port: h.port,
                sent_ns: 0,
                rtt_ns: None,
                at: now,
            });
            s.mac = h.mac;
            s.port = h.port;
            s.sent_ns = sent_ns;
            let mac = self.cfg.macs[port];
            self.arp_to_host(
                port,
                wire::arp::Operation::Request,
                h.mac,
                mac,
                Ipv4Addr::UNSPECIFIED,
                MacAddr::ZERO,
                ip,
            );
        }
    }

    /// The last ether-probe of each known host: (address, segment).
    pub fn segments(&self) -> Vec<(Ipv4Addr, Segment)> {
        let mut v: Vec<_> = self.segments.iter().map(|(a, s)| (*a, *s)).collect();
        v.sort_by_key(|x| x.0);
        v
    }

    fn hello_from(&mut self, port: usize, id: u32, their_port: u8, mac: MacAddr, now: Instant) {
        match &mut self.neigh[port] {
            Some(n) if n.id == id && n.port == their_port => {
                n.seen = now;
                n.mac = mac;
            }
            slot => {
                *slot = Some(Neighbour {
                    id,
                    port: their_port,
                    mac,
                    seen: now,
                    since: now,
                });
                self.counters.event(Event::AxonNeighbourUp);
                // Hosts no longer live behind this port.
                self.cam[port].clear();
                self.by_ip[port].clear();
                self.masq[port].clear();
                self.masq_index[port].clear();
                self.hosts.retain(|_, h| h.port as usize != port);
                self.topology_changed(now);
            }
        }
    }

    fn topology_changed(&mut self, now: Instant) {
        self.changed = true;
        self.topology_changed_at = Some(now);
    }

    /// A frame from a host.
    fn host_frame(&mut self, mut p: Pkt, input: usize, now: Instant) {
        let dst = MacAddr::from_slice(&p.data[0..6]);
        let src = MacAddr::from_slice(&p.data[6..12]);
        if is_group(&src) {
            self.counters.count(Drop::AxonBadSource);
            return self.pool.put(p);
        }
        let et = wire::ethernet::Frame::new_checked(&p.data[..]).map_or(0, |e| e.ethertype());
        if et == ethertype::ARP {
            return self.arp_from_host(p, input, now);
        }
        if et == ethertype::IPV4 {
            if let Ok(ip) = wire::ipv4::Packet::new_checked_header(&p.data[14..]) {
                let a = ip.src();
                if !a.is_unspecified() && !a.is_broadcast() && !a.is_multicast() {
                    self.learn(a.into(), src, input as u8, now);
                }
                if ip.protocol() == wire::ipv4::protocol::UDP && self.is_dhcp(&p.data[14..]) {
                    return self.dhcp(p, input, now);
                }
            }
        }
        if et == ethertype::IPV6 {
            if let Ok(ip) = wire::ipv6::Packet::new_checked(&p.data[14..]) {
                let a = ip.src();
                if !a.is_unspecified() && !a.is_multicast() {
                    self.learn(a.into(), src, input as u8, now);
                }
                // Neighbour discovery goes to the control plane, as ARP does.
                let t = ip.payload().first().copied();
                if ip.next_header() == wire::ipv6::next_header::ICMPV6
                    && matches!(
                        t,
                        Some(
                            wire::icmpv6::kind::NEIGHBOR_SOLICIT
                                | wire::icmpv6::kind::NEIGHBOR_ADVERT
                        )
                    )
                {
                    return self.nd_from_host(p, input, now);
                }
            }
        }
        if is_group(&dst) {
            self.counters.count(Drop::AxonBroadcast);
            return self.pool.put(p);
        }
        let masq = masq_of(&dst).filter(|(port, _)| *port as usize == input);
        let found = match masq {
            Some((_, i)) => self.masq[input].get(i as usize),
            None => self.cam[input].get(&dst),
        };
        let Some(r) = found else {
            self.counters.count(Drop::AxonNoRoute);
            return self.pool.put(p);
        };
        if masq.is_some() {
            // The host addressed the route's index: the far host expects its own MAC.
            p.data[0..6].copy_from_slice(&r.mac.0);
        }
        let Some(path) = r.path.as_ref() else {
            self.counters.count(Drop::AxonNoPath);
            return self.pool.put(p);
        };
        if r.axon == self.cfg.id {
            let out = r.port as usize;
            return self.enqueue(out, p, input);
        }
        let out = path[0] as usize;
        let Some(n) = self.neigh.get(out).copied().flatten() else {
            self.counters.count(Drop::AxonNoPath);
            return self.pool.put(p);
        };
        if (et == ethertype::IPV4 || et == ethertype::IPV6)
            && crate::buf::complete_offloaded_checksum(&mut p)
        {
            self.counters.event(Event::ChecksumFilled);
        }
        let mut c = self.pool.get();
        c.meta = p.meta;
        self.outer(&mut c.data, n.mac, out);
        if axon::append(&mut c.data, Kind::Data, &path[1..], &[input as u8]).is_none() {
            self.counters.count(Drop::AxonNoPath);
            self.pool.put(c);
            return self.pool.put(p);
        }
        c.data.extend_from_slice(&p.data);
        self.pool.put(p);
        if !self.is_axon_port(input) {
            if let Some((pacer, outs)) = self.pacers.get_mut(input).and_then(|x| x.as_mut()) {
                match pacer.enqueue(c, 0) {
                    Ok(()) => outs.push_back(out as u8),
                    Err(c) => {
                        self.counters.count(Drop::AxonPacedOut);
                        self.pool.put(c);
                    }
                }
                return;
            }
        }
        self.enqueue(out, c, input);
    }

    /// A UDP datagram to the DHCP server port.
    fn is_dhcp(&self, ip: &[u8]) -> bool {
        let Ok(ip) = wire::ipv4::Packet::new_checked(ip) else {
            return false;
        };
        !ip.is_fragment()
            && wire::udp::Packet::new_checked(ip.payload())
                .is_ok_and(|u| u.dst_port() == wire::dhcp::SERVER_PORT)
    }

    /// The DHCP server: DISCOVER gets an OFFER from the pool (the host's lease, the
    /// address it asks for, or the first free one); REQUEST an ACK if this Axon can lease
    /// that address to that host, else a NAK; RELEASE and DECLINE end the lease.
    fn dhcp(&mut self, p: Pkt, input: usize, now: Instant) {
        use wire::dhcp::{MsgType, Reply, Request};
        let req = wire::ipv4::Packet::new_checked(&p.data[14..])
            .ok()
            .and_then(|ip| {
                let u = wire::udp::Packet::new_checked(ip.payload()).ok()?;
                Request::parse(u.payload()).ok()
            });
        self.pool.put(p);
        let Some(r) = req else {
            self.counters.count(Drop::AxonDhcpMalformed);
            return;
        };
        let Some(cfg) = self.cfg.dhcp.clone() else {
            self.counters.count(Drop::AxonDhcpOff);
            return;
        };
        self.leases.retain(|_, l| l.until > now);
        let in_pool = |a: Ipv4Addr| (cfg.first..=cfg.last).contains(&a) && a != cfg.server;
        let taken_by_other = |leases: &HashMap<MacAddr, Lease>, a: Ipv4Addr| {
            leases.iter().any(|(m, l)| l.ip == a && *m != r.chaddr)
        };
        let (msg_type, yiaddr) = match r.msg_type {
            MsgType::Discover => {
                let mine = self.leases.get(&r.chaddr).map(|l| l.ip);
                let wanted = r
                    .requested
                    .filter(|a| in_pool(*a) && !taken_by_other(&self.leases, *a));
                let free = || {
                    let (a, b) = (u32::from(cfg.first), u32::from(cfg.last));
                    (a..=b).map(Ipv4Addr::from).find(|x| {
                        in_pool(*x)
                            && !self.leases.values().any(|l| l.ip == *x)
                            && !self.hosts.contains_key(&IpAddr::V4(*x))
                    })
                };
                let Some(ip) = mine.or(wanted).or_else(free) else {
                    self.counters.count(Drop::AxonDhcpPoolFull);
                    return;
                };
                let bound = self
                    .leases
                    .get(&r.chaddr)
                    .is_some_and(|l| l.bound && l.ip == ip);
                self.leases.insert(
                    r.chaddr,
                    Lease {
                        ip,
                        until: now + if bound { cfg.lease } else { OFFER_HOLD },
                        bound,
                    },
                );
                self.counters.event(Event::AxonDhcpOffers);
                (MsgType::Offer, ip)
            }
            MsgType::Request => {
                if r.server_id.is_some_and(|s| s != cfg.server) {
                    // The host took another server's offer.
                    if self.leases.get(&r.chaddr).is_some_and(|l| !l.bound) {
                        self.leases.remove(&r.chaddr);
                    }
                    self.counters.count(Drop::AxonDhcpIgnored);
                    return;
                }
                let asked = r.requested.unwrap_or(r.ciaddr);
                if in_pool(asked) && !taken_by_other(&self.leases, asked) {
                    self.leases.insert(
                        r.chaddr,
                        Lease {
                            ip: asked,
                            until: now + cfg.lease,
                            bound: true,
                        },
                    );
                    self.learn(asked.into(), r.chaddr, input as u8, now);
                    self.counters.event(Event::AxonDhcpAcks);
                    (MsgType::Ack, asked)
                } else {
                    self.counters.event(Event::AxonDhcpNaks);
                    (MsgType::Nak, Ipv4Addr::UNSPECIFIED)
                }
            }
            MsgType::Release | MsgType::Decline => {
                if self.leases.remove(&r.chaddr).is_none() {
                    self.counters.count(Drop::AxonDhcpIgnored);
                }
                return;
            }
            _ => {
                self.counters.count(Drop::AxonDhcpIgnored);
                return;
            }
        };
        let payload = Reply {
            msg_type,
            xid: r.xid,
            flags: r.flags,
            ciaddr: r.ciaddr,
            yiaddr,
            giaddr: r.giaddr,
            chaddr: r.chaddr,
            server_id: cfg.server,
            lease_s: cfg.lease.as_secs().min(u32::MAX as u64) as u32,
            subnet_mask: cfg.mask,
            router: cfg.router,
        }
        .to_vec();
        // To a host without an address yet (or that asked for broadcast): broadcast.
        let unicast =
            r.flags & 0x8000 == 0 && !r.ciaddr.is_unspecified() && msg_type != MsgType::Nak;
        let frame = wire::frame::UdpFrame {
            eth_dst: if unicast {
                r.chaddr
            } else {
                MacAddr::BROADCAST
            },
            eth_src: self.cfg.macs[input],
            src: cfg.server,
            dst: if unicast {
                r.ciaddr
            } else {
                Ipv4Addr::BROADCAST
            },
            src_port: wire::dhcp::SERVER_PORT,
            dst_port: wire::dhcp::CLIENT_PORT,
            ttl: 64,
            ident: 0,
            dont_frag: false,
            payload: &payload,
        }
        .to_vec();
        let mut c = self.pool.get();
        c.data.extend_from_slice(&frame);
        let cp = self.cfg.ports.len();
        self.enqueue(input, c, cp);
    }

    fn outer(&self, buf: &mut Buf, dst: MacAddr, out: usize) {
        buf.extend_from_slice(&dst.0);
        buf.extend_from_slice(&self.cfg.macs[out].0);
        buf.extend_from_slice(&axon::ETHERTYPE.to_be_bytes());
    }

    fn learn(&mut self, ip: IpAddr, mac: MacAddr, port: u8, now: Instant) {
        self.hosts.insert(
            ip,
            Host {
                mac,
                port,
                seen: now,
            },
        );
    }

    fn arp_from_host(&mut self, p: Pkt, input: usize, now: Instant) {
        let rx_ns = p.meta.rx_ns;
        let parsed =
            wire::arp::Packet::new_checked(&p.data[14..]).map(|a| wire::arp::Repr::parse(&a));
        self.pool.put(p);
        let Ok(a) = parsed else {
            self.counters.count(Drop::ArpMalformed);
            return;
        };
        if is_group(&a.sender_mac) || a.sender_ip.is_unspecified() {
            self.counters.count(Drop::AxonArpIgnored);
            return;
        }
        self.learn(a.sender_ip.into(), a.sender_mac, input as u8, now);
        if a.operation == wire::arp::Operation::Reply {
            if a.target_ip.is_unspecified() && a.target_mac == self.cfg.macs[input] {
                // The answer to an ether-probe: the segment to this host, timed.
                let rx = if rx_ns != 0 { rx_ns } else { realtime_ns() };
                if let Some(s) = self.segments.get_mut(&a.sender_ip) {
                    if s.port as usize == input && s.sent_ns != 0 {
                        s.rtt_ns = Some(rx.saturating_sub(s.sent_ns));
                        s.at = now;
                        s.sent_ns = 0;
                    }
                }
                return;
            }
            // The target answers the ARP this Axon sent in a requester's name.
            match self.waiting.remove(&(a.sender_ip.into(), a.target_mac)) {
                Some(w) => {
                    self.target_answered(w, a.sender_ip.into(), a.sender_mac, input as u8, now)
                }
                None => self.counters.count(Drop::AxonArpIgnored),
            }
            return;
        }
        if a.target_ip == a.sender_ip {
            self.counters.count(Drop::AxonArpIgnored);
            return;
        }
        self.resolve(
            input,
            a.sender_mac,
            a.sender_ip.into(),
            a.target_ip.into(),
            now,
        );
    }

    /// A host's neighbour solicitation or advertisement, taken as its ARP would be: a
    /// solicitation asks for its target (one for duplicate address detection, from the
    /// unspecified address, is left unanswered, so that the address stays the host's); an
    /// advertisement answers the solicitation this Axon sent in a requester's name.
    fn nd_from_host(&mut self, p: Pkt, input: usize, now: Instant) {
        use wire::icmpv6::Repr;
        let eth_dst = MacAddr::from_slice(&p.data[0..6]);
        let eth_src = MacAddr::from_slice(&p.data[6..12]);
        let parsed = (|| {
            let ip = wire::ipv6::Packet::new_checked(&p.data[14..]).ok()?;
            let (src, dst) = (ip.src(), ip.dst());
            let icmp = wire::icmpv6::Packet::new_checked(ip.payload()).ok()?;
            if ip.hop_limit() != 255 || !icmp.verify_checksum(src, dst) {
                return None;
            }
            match Repr::parse(&icmp).ok()? {
                Repr::NeighborSolicit { target, options } => {
                    Some((true, src, target, options.source_lladdr.unwrap_or(eth_src)))
                }
                Repr::NeighborAdvert {
                    target, options, ..
                } => Some((false, src, target, options.target_lladdr.unwrap_or(eth_src))),
                _ => None,
            }
        })();
        self.pool.put(p);
        let Some((solicit, src, target, mac)) = parsed else {
            self.counters.count(Drop::AxonNdMalformed);
            return;
        };
        if target.is_multicast() || is_group(&mac) {
            self.counters.count(Drop::AxonNdMalformed);
            return;
        }
        if !solicit {
            // The advertised address is the host's own.
            self.learn(target.into(), mac, input as u8, now);
            match self.waiting.remove(&(target.into(), eth_dst)) {
                Some(w) => self.target_answered(w, target.into(), mac, input as u8, now),
                None => self.counters.count(Drop::AxonArpIgnored),
            }
            return;
        }
        if src.is_unspecified() || src == target {
            self.counters.count(Drop::AxonArpIgnored);
            return;
        }
        self.learn(src.into(), mac, input as u8, now);
        self.resolve(input, mac, src.into(), target.into(), now);
    }

    /// A host on `input` (`mac`, `ip`) asks for `target` (by ARP or neighbour
    /// solicitation): answered at once where this port has a route to it, else asked of
    /// every Axon (Axon-ARP).
    fn resolve(&mut self, input: usize, mac: MacAddr, ip: IpAddr, target: IpAddr, now: Instant) {
        if let Some(&shown) = self.by_ip[input].get(&target) {
            self.reply_to_host(input, mac, ip, shown, target);
            return;
        }
        if self
            .asked
            .get(&(input as u8, target))
            .is_some_and(|t| now.duration_since(*t) < ASK_EVERY)
        {
            return;
        }
        self.asked.insert((input as u8, target), now);
        let req = self.next_req;
        self.next_req = self.next_req.wrapping_add(1);
        let m = Msg::ArpRequest {
            origin: self.cfg.id,
            req,
            src_mac: mac,
            src_ip: ip,
            src_port: input as u8,
            target,
        };
        self.counters.event(Event::AxonArpRequests);
        let targets: Vec<(u32, Vec<u8>)> = self.paths();
        for (_, path) in targets {
            self.send_control(&path, &m);
        }
        // This Axon may have the target itself.
        self.message(m, vec![CONTROL], now);
    }

    /// Sends `m` to the control plane at the end of `path` (output ports from here).
    fn send_control(&mut self, path: &[u8], m: &Msg) {
        let mut payload = std::mem::take(&mut self.scratch);
        payload.clear();
        m.emit(&mut payload);
        self.send_kind(Kind::Control, path, &payload);
        self.scratch = payload;
    }

    /// Sends a frame of `kind` with `payload` to the control plane at the end of `path`.
    fn send_kind(&mut self, kind: Kind, path: &[u8], payload: &[u8]) {
        let Some((&first, rest)) = path.split_first() else {
            return;
        };
        let out = first as usize;
        let Some(n) = self.neigh.get(out).copied().flatten() else {
            return;
        };
        let mut fwd = rest.to_vec();
        fwd.push(CONTROL);
        let mut c = self.pool.get();
        self.outer(&mut c.data, n.mac, out);
        if axon::append(&mut c.data, kind, &fwd, &[CONTROL]).is_none() {
            return self.pool.put(c);
        }
        c.data.extend_from_slice(payload);
        let cp = self.cfg.ports.len();
        self.enqueue(out, c, cp);
    }

    /// A control message that reached this control plane; `back` leads to its sender's.
    fn message(&mut self, m: Msg, back: Vec<u8>, now: Instant) {
        match m {
            Msg::Hello { .. } => {}
            Msg::Links { origin, seq, links } => {
                if origin == self.cfg.id {
                    return;
                }
                let newer = self
                    .lsdb
                    .get(&origin)
                    .is_none_or(|(s, _, _)| seq != *s && seq.wrapping_sub(*s) < u32::MAX / 2);
                if !newer {
                    return;
                }
                let change = self.lsdb.get(&origin).is_none_or(|(_, l, _)| *l != links);
                self.lsdb.insert(origin, (seq, links.clone(), now));
                if change {
                    self.topology_changed(now);
                }
                // Flood on to every neighbour but the one it came from.
                let from = back.first().copied();
                let m = Msg::Links { origin, seq, links };
                for (port, _) in self.neighbours() {
                    if Some(port) != from {
                        self.send_control(&[port], &m);
                    }
                }
            }
            Msg::ArpRequest {
                origin,
                req,
                src_mac,
                src_ip,
                src_port,
                target,
            } => {
                let w = Waiting {
                    origin,
                    req,
                    src_mac,
                    src_ip,
                    src_port,
                    back,
                    since: now,
                };
                self.waiting.insert((target, src_mac), w);
                // Ask the target in the requester's name: where it is known, on its port;
                // otherwise on every host port (but the requester's own).
                let ports: Vec<usize> = match self.hosts.get(&target) {
                    Some(h) => vec![h.port as usize],
                    None => (0..self.cfg.ports.len())
                        .filter(|&p| !self.is_axon_port(p))
                        .filter(|&p| !(origin == self.cfg.id && p == src_port as usize))
                        .collect(),
                };
                let dst = self.hosts.get(&target).map(|h| h.mac);
                for p in ports {
                    match (src_ip, target) {
                        (IpAddr::V4(src_ip), IpAddr::V4(target)) => self.arp_to_host(
                            p,
                            wire::arp::Operation::Request,
                            dst.unwrap_or(MacAddr::BROADCAST),
                            src_mac,
                            src_ip,
                            dst.unwrap_or(MacAddr::ZERO),
                            target,
                        ),
                        (IpAddr::V6(src_ip), IpAddr::V6(target)) => {
                            self.ns_to_host(p, dst, src_mac, src_ip, target)
                        }
                        _ => self.counters.count(Drop::AxonArpIgnored),
                    }
                }
            }
            Msg::ArpReply {
                origin,
                target_mac,
                target,
                target_port,
                src_mac,
                src_ip,
                ..
            } => {
                let Some(h) = self
                    .hosts
                    .get(&src_ip)
                    .copied()
                    .filter(|h| h.mac == src_mac)
                else {
                    return;
                };
                if let Some(shown) = self.install(
                    h.port as usize,
                    origin,
                    target_port,
                    target_mac,
                    target,
                    now,
                ) {
                    self.reply_to_host(h.port as usize, src_mac, src_ip, shown, target);
                }
            }
        }
    }

    /// At the target's Axon: the target answered; install the route back to the
    /// requester and tell the requester's Axon.
    fn target_answered(&mut self, w: Waiting, ip: IpAddr, mac: MacAddr, port: u8, now: Instant) {
        let shown = self.install(
            port as usize,
            w.origin,
            w.src_port,
            w.src_mac,
            w.src_ip,
            now,
        );
        if let Some(m) = shown.filter(|m| *m != w.src_mac) {
            // The target learnt the requester's own MAC from the ARP asked in its name;
            // the route to it is masqueraded: correct the target's cache.
            match (w.src_ip, ip) {
                (IpAddr::V4(src_ip), IpAddr::V4(ip)) => self.arp_to_host(
                    port as usize,
                    wire::arp::Operation::Reply,
                    mac,
                    m,
                    src_ip,
                    mac,
                    ip,
                ),
                (IpAddr::V6(src_ip), IpAddr::V6(ip)) => {
                    self.na_to_host(port as usize, mac, ip, src_ip, m, false)
                }
                _ => {}
            }
        }
        let m = Msg::ArpReply {
            origin: self.cfg.id,
            req: w.req,
            target_mac: mac,
            target: ip,
            target_port: port,
            src_mac: w.src_mac,
            src_ip: w.src_ip,
        };
        if w.origin == self.cfg.id {
            self.message(m, vec![CONTROL], now);
        } else {
            // By the way the request came: its reverse path ends at the origin's control
            // plane.
            let back = w.back;
            if back.last() == Some(&CONTROL) {
                let path = back[..back.len() - 1].to_vec();
                self.send_control(&path, &m);
            }
        }
    }

    /// Installs a route on host port `port`; returns the MAC its host is to be given (the
    /// far host's, or a masqueraded one when the route memory is full), None if neither
    /// has room.
    fn install(
        &mut self,
        port: usize,
        axon: u32,
        far_port: u8,
        mac: MacAddr,
        ip: IpAddr,
        now: Instant,
    ) -> Option<MacAddr> {
        let path = self.route_path(axon, far_port, &mac);
        let cam = self.cam.get_mut(port)?;
        let route = Route {
            axon,
            port: far_port,
            mac,
            ip,
            path,
            installed: now,
        };
        let shown = if cam.len() < self.cfg.cam_size || cam.contains_key(&mac) {
            if let Some(old) = cam.insert(mac, route) {
                self.by_ip[port].remove(&old.ip);
            }
            mac
        } else {
            let index = match self.masq_index[port].get(&mac) {
                Some(&i) => {
                    let old = std::mem::replace(&mut self.masq[port][i as usize], route);
                    self.by_ip[port].remove(&old.ip);
                    i
                }
                None if self.masq[port].len() < MAX_MASQ => {
                    self.masq[port].push(route);
                    let i = self.masq[port].len() as u32 - 1;
                    self.masq_index[port].insert(mac, i);
                    self.counters.event(Event::AxonRouteMasqueraded);
                    i
                }
                None => {
                    self.counters.count(Drop::AxonCamFull);
                    return None;
                }
            };
            masq_mac(port as u8, index)
        };
        self.by_ip[port].insert(ip, shown);
        self.counters.event(Event::AxonRouteSetups);
        Some(shown)
    }

    #[allow(clippy::too_many_arguments)]
    fn arp_to_host(
        &mut self,
        port: usize,
        op: wire::arp::Operation,
        eth_dst: MacAddr,
        sender_mac: MacAddr,
        sender_ip: Ipv4Addr,
        target_mac: MacAddr,
        target_ip: Ipv4Addr,
    ) {
        let mut c = self.pool.get();
        wire::arp::Repr {
            operation: op,
            sender_mac,
            sender_ip,
            target_mac,
            target_ip,
        }
        .append_frame(eth_dst, &mut c.data);
        let cp = self.cfg.ports.len();
        self.enqueue(port, c, cp);
    }

    /// Tells the host (`host_mac`, `host_ip`) on `port` that `ip` is at `mac`: an ARP
    /// reply, or a solicited neighbour advertisement.
    fn reply_to_host(
        &mut self,
        port: usize,
        host_mac: MacAddr,
        host_ip: IpAddr,
        mac: MacAddr,
        ip: IpAddr,
    ) {
        self.counters.event(Event::AxonArpAnswered);
        match (host_ip, ip) {
            (IpAddr::V4(host_ip), IpAddr::V4(ip)) => self.arp_to_host(
                port,
                wire::arp::Operation::Reply,
                host_mac,
                mac,
                ip,
                host_mac,
                host_ip,
            ),
            (IpAddr::V6(host_ip), IpAddr::V6(ip)) => {
                self.na_to_host(port, host_mac, host_ip, ip, mac, true)
            }
            _ => {}
        }
    }

    /// A neighbour solicitation for `target` on host port `port`, in the name of
    /// `src_mac`/`src_ip`: to the target's MAC where it is known, else to its
    /// solicited-node group.
    fn ns_to_host(
        &mut self,
        port: usize,
        dst: Option<MacAddr>,
        src_mac: MacAddr,
        src_ip: Ipv6Addr,
        target: Ipv6Addr,
    ) {
        let group = wire::ipv6::solicited_node(target);
        let (eth_dst, ip_dst) = match dst {
            Some(m) => (m, target),
            None => (wire::ipv6::multicast_mac(group), group),
        };
        let ns = wire::icmpv6::Repr::NeighborSolicit {
            target,
            options: wire::icmpv6::NdOptions {
                source_lladdr: Some(src_mac),
                ..Default::default()
            },
        };
        self.icmp6_to_host(port, eth_dst, src_mac, src_ip, ip_dst, &ns);
    }

    /// A neighbour advertisement to `dst_mac`/`dst_ip` on host port `port`: `target`
    /// is at `mac` (solicited or not; override set).
    fn na_to_host(
        &mut self,
        port: usize,
        dst_mac: MacAddr,
        dst_ip: Ipv6Addr,
        target: Ipv6Addr,
        mac: MacAddr,
        solicited: bool,
    ) {
        let na = wire::icmpv6::Repr::NeighborAdvert {
            router: false,
            solicited,
            override_: true,
            target,
            options: wire::icmpv6::NdOptions {
                target_lladdr: Some(mac),
                ..Default::default()
            },
        };
        self.icmp6_to_host(port, dst_mac, mac, target, dst_ip, &na);
    }

    /// An ICMPv6 frame (hop limit 255, as neighbour discovery needs) out of host port
    /// `port`.
    fn icmp6_to_host(
        &mut self,
        port: usize,
        eth_dst: MacAddr,
        eth_src: MacAddr,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        msg: &wire::icmpv6::Repr,
    ) {
        let mut c = self.pool.get();
        c.data.clear();
        c.data.extend_from_slice(&eth_dst.0);
        c.data.extend_from_slice(&eth_src.0);
        c.data.extend_from_slice(&ethertype::IPV6.to_be_bytes());
        c.data
            .resize(wire::ethernet::HEADER_LEN + 40 + msg.buffer_len(), 0);
        if wire::icmpv6::emit_packet(&mut c.data[14..], src, dst, 255, msg).is_err() {
            return self.pool.put(c);
        }
        let cp = self.cfg.ports.len();
        self.enqueue(port, c, cp);
    }

    fn enqueue(&mut self, o: usize, p: Pkt, input: usize) {
        match self.out.get_mut(o).map(|q| q.enqueue(p, input)) {
            Some(Ok(())) => {}
            Some(Err(p)) => {
                self.counters.count(Drop::AxonBufferFull);
                self.pool.put(p);
            }
            None => self.counters.count(Drop::AxonBadPort),
        }
    }

    /// This Axon's links, as it floods them.
    fn my_links(&self) -> Vec<(u8, u32, u8)> {
        self.neighbours()
            .into_iter()
            .map(|(p, n)| (p, n.id, n.port))
            .collect()
    }

    fn flood_links(&mut self) {
        self.seq = self.seq.wrapping_add(1);
        let m = Msg::Links {
            origin: self.cfg.id,
            seq: self.seq,
            links: self.my_links(),
        };
        for (port, _) in self.neighbours() {
            self.send_control(&[port], &m);
        }
    }

    /// Shortest paths (fewest hops, ties to the lower port) over the links both ends
    /// report; then every route onto its new path.
    fn compute_paths(&mut self) {
        self.counters.event(Event::AxonTopologyRuns);
        let me = self.cfg.id;
        let mut links: HashMap<u32, Vec<(u8, u32, u8)>> = self
            .lsdb
            .iter()
            .map(|(o, (_, l, _))| (*o, l.clone()))
            .collect();
        links.insert(me, self.my_links());
        let two_way = |a: u32, pa: u8, b: u32, pb: u8| {
            links
                .get(&b)
                .is_some_and(|l| l.iter().any(|&(p, n, np)| p == pb && n == a && np == pa))
        };
        let mut paths: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
        let mut queue = VecDeque::from([me]);
        let mut seen = std::collections::HashSet::from([me]);
        while let Some(a) = queue.pop_front() {
            let mut ls = links.get(&a).cloned().unwrap_or_default();
            ls.sort();
            for (p, b, pb) in ls {
                if seen.contains(&b) || !two_way(a, p, b, pb) {
                    continue;
                }
                seen.insert(b);
                let mut path = paths.get(&a).cloned().unwrap_or_default();
                path.push(p);
                if path.len() < axon::MAX_HOPS {
                    paths.insert(b, path);
                    queue.push_back(b);
                }
            }
        }
        self.paths = paths;
        // The two-way graph, and hop counts to every Axon from every Axon (a BFS from
        // each: the networks an Axon builds are small).
        let mut adj: HashMap<u32, Vec<(u8, u32)>> = HashMap::new();
        for (&a, ls) in &links {
            let mut v: Vec<(u8, u32)> = ls
                .iter()
                .filter(|&&(p, b, pb)| two_way(a, p, b, pb))
                .map(|&(p, b, _)| (p, b))
                .collect();
            v.sort();
            adj.insert(a, v);
        }
        let mut hops_to = HashMap::new();
        for &x in self.paths.keys() {
            let mut d: HashMap<u32, u32> = HashMap::from([(x, 0)]);
            let mut q = VecDeque::from([x]);
            while let Some(a) = q.pop_front() {
                let da = d[&a];
                for &(_, b) in adj.get(&a).into_iter().flatten() {
                    if let std::collections::hash_map::Entry::Vacant(e) = d.entry(b) {
                        e.insert(da + 1);
                        q.push_back(b);
                    }
                }
            }
            hops_to.insert(x, d);
        }
        self.adj = adj;
        self.hops_to = hops_to;
        let mut cam_paths = Vec::new();
        for (p, c) in self.cam.iter().enumerate() {
            for r in c.values().filter(|r| r.axon != me) {
                cam_paths.push((p, r.mac, self.route_path(r.axon, r.port, &r.mac)));
            }
        }
        let mut masq_paths = Vec::new();
        for (p, m) in self.masq.iter().enumerate() {
            for (i, r) in m.iter().enumerate().filter(|(_, r)| r.axon != me) {
                masq_paths.push((p, i, self.route_path(r.axon, r.port, &r.mac)));
            }
        }
        for (p, mac, path) in cam_paths {
            if let Some(r) = self.cam[p].get_mut(&mac) {
                r.path = path;
            }
        }
        for (p, i, path) in masq_paths {
            self.masq[p][i].path = path;
        }
    }

    /// The output ports from here to host port `far_port` of Axon `axon`: spread over the
    /// equal-cost shortest paths by a hash of the destination `mac` (the same route, the
    /// same path), or the control plane's path.
    fn route_path(&self, axon: u32, far_port: u8, mac: &MacAddr) -> Option<Vec<u8>> {
        if axon == self.cfg.id {
            return Some(vec![far_port]);
        }
        let mut path = if self.cfg.spread {
            let d = self.hops_to.get(&axon)?;
            // FNV-1a of the MAC: a few bits of choice per hop.
            let mut h = mac.0.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ *b as u64).wrapping_mul(0x100_0000_01b3)
            });
            let mut at = self.cfg.id;
            let mut path = Vec::new();
            while at != axon {
                let here = *d.get(&at)?;
                let next: Vec<(u8, u32)> = self
                    .adj
                    .get(&at)?
                    .iter()
                    .copied()
                    .filter(|(_, b)| d.get(b).is_some_and(|x| *x + 1 == here))
                    .collect();
                let &(p, b) = next.get((h % next.len().max(1) as u64) as usize)?;
                h = h.rotate_right(17) ^ (h >> 7);
                path.push(p);
                at = b;
                if path.len() >= axon::MAX_HOPS {
                    return None;
                }
            }
            path
        } else {
            self.paths.get(&axon)?.clone()
        };
        path.push(far_port);
        Some(path)
    }

    /// Hellos, link floods, neighbour deaths, path computation, and what every output
    /// port's schedule allows by now.
    pub fn poll(&mut self, now: Instant, tx: &mut TxQueues) {
        if now >= self.next_hello {
            self.next_hello = now + self.cfg.hello;
            for port in 0..self.cfg.ports.len() {
                let mut c = self.pool.get();
                self.outer(&mut c.data, MacAddr::BROADCAST, port);
                let _ = axon::append(&mut c.data, Kind::Hello, &[], &[]);
                Msg::Hello {
                    id: self.cfg.id,
                    port: port as u8,
                }
                .emit(&mut c.data);
                let cp = self.cfg.ports.len();
                self.enqueue(port, c, cp);
            }
            let dead = self.cfg.hello * self.cfg.dead;
            let mut lost = false;
            for n in self.neigh.iter_mut() {
                if n.is_some_and(|x| now.duration_since(x.seen) > dead) {
                    *n = None;
                    lost = true;
                    self.counters.event(Event::AxonNeighbourDown);
                }
            }
            if lost {
                self.topology_changed(now);
            }
        }
        if self.changed {
            self.changed = false;
            self.flood_links();
            self.compute_paths();
            self.next_refresh = now + REFRESH;
        } else if now >= self.next_refresh {
            self.next_refresh = now + REFRESH;
            self.flood_links();
            let before = self.lsdb.len();
            self.lsdb
                .retain(|_, (_, _, t)| now.duration_since(*t) < LINKS_AGE);
            if self.lsdb.len() != before {
                self.compute_paths();
            }
            self.waiting
                .retain(|_, w| now.duration_since(w.since) < WAIT);
            self.asked.retain(|_, t| now.duration_since(*t) < ASK_EVERY);
        }
        if !self.cfg.probe.is_zero() && now >= self.next_probe {
            self.next_probe = now + self.cfg.probe;
            self.probe_seq = self.probe_seq.wrapping_add(1);
            let mut payload = wire::axon::probe::new(self.cfg.id, self.probe_seq);
            // This Axon's own record: it leaves now (stamped by the output port).
            wire::axon::probe::push(&mut payload, 0, self.cfg.id, realtime_ns());
            for (_, path) in self.paths() {
                self.send_kind(Kind::Probe, &path, &payload);
            }
            self.ether_probes(now);
        }
        // Paced host frames due now go on to their output ports.
        for input in 0..self.pacers.len() {
            let Some((pacer, outs)) = self.pacers[input].as_mut() else {
                continue;
            };
            pacer.dequeue(now, &mut self.sent);
            let due: Vec<(u8, Pkt)> = self
                .sent
                .drain(..)
                .map(|p| (outs.pop_front().unwrap_or(u8::MAX), p))
                .collect();
            for (out, p) in due {
                self.enqueue(out as usize, p, input);
            }
        }
        let mut stamp = 0;
        for (i, o) in self.out.iter_mut().enumerate() {
            o.dequeue(now, &mut self.sent);
            for mut p in self.sent.drain(..) {
                if p.data.len() > 16
                    && p.data[12..14] == axon::ETHERTYPE.to_be_bytes()
                    && p.data[14] == Kind::Probe as u8
                {
                    if stamp == 0 {
                        stamp = realtime_ns();
                    }
                    let at = 14 + p.data[15] as usize;
                    wire::axon::probe::stamp_out(&mut p.data, at, stamp);
                }
                tx.push(i as u16, p);
            }
        }
    }

    /// Frames wait in a queue: the run loop must not sleep.
    pub fn busy(&self) -> bool {
        self.out.iter().any(|o| o.queued()) || self.pacers.iter().flatten().any(|(p, _)| p.queued())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::Scope;

    fn axon(id: u32, ports: usize, now: Instant) -> Axon {
        let cfg = AxonConfig {
            id,
            ports: (0..ports)
                .map(|i| PortConfig {
                    name: format!("a{id}p{i}"),
                    capacity_bps: None,
                    buffer_bytes: 1 << 20,
                    delay: Duration::ZERO,
                })
                .collect(),
            macs: (0..ports)
                .map(|i| MacAddr([2, 0xa, 0, 0, id as u8, i as u8]))
                .collect(),
            hello: Duration::from_millis(20),
            dead: 3,
            cam_size: 16,
            dhcp: None,
            probe: Duration::from_millis(100),
            pace_hosts: false,
            spread: true,
        };
        let names = cfg.ports.iter().map(|p| p.name.clone()).collect();
        Axon::new(cfg, Arc::new(Counters::for_role(names, Scope::Axon)), now)
    }

    /// Axons joined by links (axon, port) <-> (axon, port), hosts on other ports; frames
    /// move between them as the wires would.
    struct Net {
        axons: Vec<Axon>,
        wires: Vec<((usize, u16), (usize, u16))>,
        /// What left towards hosts: (axon, port, frame).
        to_hosts: Vec<(usize, u16, Vec<u8>)>,
        now: Instant,
    }

    impl Net {
        fn step(&mut self) {
            self.now += Duration::from_millis(5);
            for _ in 0..20 {
                let mut moved = false;
                for i in 0..self.axons.len() {
                    let mut tx = TxQueues::new(self.axons[i].cfg.ports.len());
                    self.axons[i].poll(self.now, &mut tx);
                    for (port, p) in tx.drain_all() {
                        moved = true;
                        let peer = self.wires.iter().find_map(|&(a, b)| {
                            if a == (i, port) {
                                Some(b)
                            } else if b == (i, port) {
                                Some(a)
                            } else {
                                None
                            }
                        });
                        match peer {
                            Some((j, q)) => {
                                let mut p = p;
                                p.meta.rx_port = q;
                                let mut tx2 = TxQueues::new(0);
                                self.axons[j].process(p, self.now, &mut tx2);
                            }
                            None => self.to_hosts.push((i, port, p.data.to_vec())),
                        }
                    }
                }
                if !moved {
                    break;
                }
            }
        }

        /// Host `h` (MAC 02::h, 10.0.0.h) on port 2 of Axon `a` asks by ARP for host `t`
        /// on port 2 of Axon `b`, which answers the ARP its Axon asks in h's name.
        fn resolve(&mut self, a: usize, h: u8, b: usize, t: u8) {
            let (hm, tm) = (MacAddr([2, 0, 0, 0, 0, h]), MacAddr([2, 0, 0, 0, 0, t]));
            let (hi, ti) = ([10, 0, 0, h], [10, 0, 0, t]);
            let req = arp(wire::arp::Operation::Request, hm, hi, MacAddr::ZERO, ti);
            self.host_sends(a, 2, req);
            self.step();
            self.host_sends(b, 2, arp(wire::arp::Operation::Reply, tm, ti, hm, hi));
            self.step();
        }

        fn host_sends(&mut self, axon: usize, port: u16, frame: Vec<u8>) {
            let mut p = Pkt::new();
            p.data = frame.into();
            p.meta.rx_port = port;
            let mut tx = TxQueues::new(0);
            self.axons[axon].process(p, self.now, &mut tx);
        }
    }

    fn arp(
        op: wire::arp::Operation,
        smac: MacAddr,
        sip: [u8; 4],
        tmac: MacAddr,
        tip: [u8; 4],
    ) -> Vec<u8> {
        let dst = if op == wire::arp::Operation::Request {
            MacAddr::BROADCAST
        } else {
            tmac
        };
        let mut f = Vec::new();
        wire::arp::Repr {
            operation: op,
            sender_mac: smac,
            sender_ip: sip.into(),
            target_mac: tmac,
            target_ip: tip.into(),
        }
        .append_frame(dst, &mut f);
        f
    }

    /// An ND frame (`repr`) from `smac`/`src` to `dmac`/`dst`, at `hop` hops.
    fn nd(
        dmac: MacAddr,
        smac: MacAddr,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        hop: u8,
        repr: &wire::icmpv6::Repr,
    ) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 40 + repr.buffer_len()];
        f[0..6].copy_from_slice(&dmac.0);
        f[6..12].copy_from_slice(&smac.0);
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        wire::icmpv6::emit_packet(&mut f[14..], src, dst, hop, repr).unwrap();
        f
    }

    /// What an ND frame says: (Ethernet destination, IPv6 source and destination, type,
    /// target, source or target link-layer address, solicited), its hop limit 255 and
    /// checksum checked.
    #[allow(clippy::type_complexity)]
    fn nd_of(
        f: &[u8],
    ) -> Option<(
        MacAddr,
        Ipv6Addr,
        Ipv6Addr,
        u8,
        Ipv6Addr,
        Option<MacAddr>,
        bool,
    )> {
        use wire::icmpv6::Repr;
        if f[12..14] != [0x86, 0xdd] {
            return None;
        }
        let ip = wire::ipv6::Packet::new_checked(&f[14..]).ok()?;
        let icmp = wire::icmpv6::Packet::new_checked(ip.payload()).ok()?;
        assert_eq!(ip.hop_limit(), 255);
        assert!(icmp.verify_checksum(ip.src(), ip.dst()));
        let (t, target, ll, sol) = match Repr::parse(&icmp).ok()? {
            Repr::NeighborSolicit { target, options } => {
                (135, target, options.source_lladdr, false)
            }
            Repr::NeighborAdvert {
                target,
                options,
                solicited,
                ..
            } => (136, target, options.target_lladdr, solicited),
            _ => return None,
        };
        Some((
            MacAddr::from_slice(&f[0..6]),
            ip.src(),
            ip.dst(),
            t,
            target,
            ll,
            sol,
        ))
    }

    fn ring() -> Net {
        let now = Instant::now();
        // Three Axons in a ring on ports 0 and 1; a host on port 2 of each.
        Net {
            axons: (1..=3).map(|id| axon(id, 3, now)).collect(),
            wires: vec![((0, 0), (1, 1)), ((1, 0), (2, 1)), ((2, 0), (0, 1))],
            to_hosts: Vec::new(),
            now,
        }
    }

    /// Neighbour discovery is Axon-ARP over IPv6: h1's solicitation for h3 reaches
    /// h3's Axon, which solicits h3 in h1's name (to its solicited-node group, h3 not yet
    /// known there); h3's advertisement installs the routes on both sides and h1 is
    /// answered by its own Axon. Duplicate address detection is left unanswered, a
    /// solicitation that fails RFC 4861's checks is counted, a later solicitation (the
    /// host's reachability check) is answered at once, and data flows.
    #[test]
    fn hosts_find_each_other_by_neighbour_discovery() {
        use wire::icmpv6::{NdOptions, Repr};
        let mut n = ring();
        for _ in 0..10 {
            n.step();
        }
        let h1 = MacAddr([2, 0, 0, 0, 0, 1]);
        let h3 = MacAddr([2, 0, 0, 0, 0, 3]);
        let a1: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let a3: Ipv6Addr = "2001:db8::3".parse().unwrap();
        let group = wire::ipv6::solicited_node(a3);
        let ns = |ll: Option<MacAddr>| Repr::NeighborSolicit {
            target: a3,
            options: NdOptions {
                source_lladdr: ll,
                ..NdOptions::default()
            },
        };
        let gmac = wire::ipv6::multicast_mac(group);
        // Duplicate address detection (from ::) and a solicitation at hop limit 64: no
        // answer, each counted.
        n.to_hosts.clear();
        n.host_sends(
            0,
            2,
            nd(gmac, h1, Ipv6Addr::UNSPECIFIED, group, 255, &ns(None)),
        );
        n.host_sends(0, 2, nd(gmac, h1, a1, group, 64, &ns(Some(h1))));
        n.step();
        assert!(n.to_hosts.iter().all(|(_, _, f)| nd_of(f).is_none()));
        assert_eq!(n.axons[0].counters.drops(Drop::AxonArpIgnored), 1);
        assert_eq!(n.axons[0].counters.drops(Drop::AxonNdMalformed), 1);
        // The real one.
        n.host_sends(0, 2, nd(gmac, h1, a1, group, 255, &ns(Some(h1))));
        n.step();
        let asks: Vec<_> = n
            .to_hosts
            .iter()
            .filter(|(a, p, _)| *a == 2 && *p == 2)
            .filter_map(|(_, _, f)| nd_of(f))
            .collect();
        assert_eq!(asks, vec![(gmac, a1, group, 135, a3, Some(h1), false)]);
        n.to_hosts.clear();
        let na = Repr::NeighborAdvert {
            router: false,
            solicited: true,
            override_: true,
            target: a3,
            options: NdOptions {
                target_lladdr: Some(h3),
                ..NdOptions::default()
            },
        };
        n.host_sends(2, 2, nd(h1, h3, a3, a1, 255, &na));
        n.step();
        let answers: Vec<_> = n
            .to_hosts
            .iter()
            .filter(|(a, p, _)| *a == 0 && *p == 2)
            .filter_map(|(_, _, f)| nd_of(f))
            .collect();
        assert_eq!(answers, vec![(h1, a3, a1, 136, a3, Some(h3), true)]);
        assert_eq!(n.axons[0].routes().len(), 1);
        assert_eq!(n.axons[2].routes().len(), 1);
        assert_eq!(n.axons[0].routes()[0].1.ip, IpAddr::V6(a3));
        assert_eq!(n.axons[2].routes()[0].1.ip, IpAddr::V6(a1));
        // h1 checks h3 is still there (a unicast solicitation): answered by axon 1 alone.
        n.to_hosts.clear();
        n.host_sends(0, 2, nd(h3, h1, a1, a3, 255, &ns(Some(h1))));
        n.step();
        let all: Vec<_> = n
            .to_hosts
            .iter()
            .filter(|(_, _, f)| nd_of(f).is_some())
            .collect();
        assert_eq!(all.len(), 1);
        assert_eq!((all[0].0, all[0].1), (0, 2));
        // Data: an IPv6 frame from h1 reaches h3 unchanged.
        let data = nd(
            h3,
            h1,
            a1,
            a3,
            64,
            &Repr::EchoRequest {
                ident: 1,
                seq: 1,
                data: b"x",
            },
        );
        n.to_hosts.clear();
        n.host_sends(0, 2, data.clone());
        n.step();
        assert!(n
            .to_hosts
            .iter()
            .any(|(a, p, f)| *a == 2 && *p == 2 && *f == data));
    }

    #[test]
    fn a_ring_finds_its_topology_and_sets_routes_up_by_axon_arp() {
        let mut n = ring();
        for _ in 0..10 {
            n.step();
        }
        for a in &n.axons {
            assert_eq!(a.neighbours().len(), 2, "axon {}", a.cfg.id);
            assert_eq!(a.paths().len(), 2, "axon {}: {:?}", a.cfg.id, a.paths());
            assert!(a.paths().iter().all(|(_, p)| p.len() == 1));
        }
        // Host h1 (on axon 1) asks for h3 (on axon 3).
        let h1 = MacAddr([2, 0, 0, 0, 0, 1]);
        let h3 = MacAddr([2, 0, 0, 0, 0, 3]);
        n.to_hosts.clear();
        n.host_sends(
            0,
            2,
            arp(
                wire::arp::Operation::Request,
                h1,
                [10, 0, 0, 1],
                MacAddr::ZERO,
                [10, 0, 0, 3],
            ),
        );
        n.step();
        // Axon 3 asks its host port in h1's name (hellos aside).
        let asks: Vec<_> = n
            .to_hosts
            .iter()
            .filter(|(a, p, f)| *a == 2 && *p == 2 && f[12..14] == [0x08, 0x06])
            .collect();
        assert_eq!(asks.len(), 1, "{:?}", n.to_hosts.len());
        let ask =
            wire::arp::Repr::parse(&wire::arp::Packet::new_checked(&asks[0].2[14..]).unwrap());
        assert_eq!(
            (ask.sender_mac, ask.target_ip),
            (h1, Ipv4Addr::new(10, 0, 0, 3))
        );
        n.to_hosts.clear();
        n.host_sends(
            2,
            2,
            arp(
                wire::arp::Operation::Reply,
                h3,
                [10, 0, 0, 3],
                h1,
                [10, 0, 0, 1],
            ),
        );
        n.step();
        // h1 gets its answer from axon 1.
        let replies: Vec<_> = n
            .to_hosts
            .iter()
            .filter(|(a, p, f)| *a == 0 && *p == 2 && f[12..14] == [0x08, 0x06])
            .collect();
        assert_eq!(replies.len(), 1);
        let r =
            wire::arp::Repr::parse(&wire::arp::Packet::new_checked(&replies[0].2[14..]).unwrap());
        assert_eq!(
            (r.sender_mac, r.sender_ip),
            (h3, Ipv4Addr::new(10, 0, 0, 3))
        );
        assert_eq!(n.axons[0].routes().len(), 1);
        assert_eq!(n.axons[2].routes().len(), 1);
        // Data both ways, unchanged at the far end.
        let mut data = vec![0u8; 60];
        data[0..6].copy_from_slice(&h3.0);
        data[6..12].copy_from_slice(&h1.0);
        data[12..14].copy_from_slice(&[0x88, 0x88]);
        data[20] = 0x5a;
        n.to_hosts.clear();
        n.host_sends(0, 2, data.clone());
        n.step();
        let got: Vec<_> = n
            .to_hosts
            .iter()
            .filter(|(_, _, f)| f[12..14] == [0x88, 0x88])
            .collect();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].0, got[0].1), (2, 2));
        assert_eq!(got[0].2, data);
        // Cut the direct link 1-3: the route moves to the way round by 2.
        n.wires.retain(|w| *w != ((2, 0), (0, 1)));
        for _ in 0..30 {
            n.step();
        }
        let r = &n.axons[0].routes()[0].1;
        assert_eq!(r.path.as_ref().map(|p| p.len()), Some(3), "{r:?}");
        n.to_hosts.clear();
        n.host_sends(0, 2, data.clone());
        n.step();
        let got: Vec<_> = n
            .to_hosts
            .iter()
            .filter(|(_, _, f)| f[12..14] == [0x88, 0x88])
            .collect();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].2, data);
        // No route, no frame: a host reaches only what it resolved.
        let mut other = data.clone();
        other[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
        n.host_sends(0, 2, other);
        assert_eq!(n.axons[0].counters.drops(Drop::AxonNoRoute), 1);
    }

    #[test]
    fn beyond_a_full_route_memory_hosts_get_masqueraded_macs() {
        let mut n = ring();
        n.axons[0].cfg.cam_size = 1;
        for _ in 0..10 {
            n.step();
        }
        let h1 = MacAddr([2, 0, 0, 0, 0, 1]);
        // Two hosts behind port 2 of axon 3; h1 resolves both.
        let mut given = Vec::new();
        for t in [3u8, 4] {
            n.to_hosts.clear();
            n.resolve(0, 1, 2, t);
            let r = n
                .to_hosts
                .iter()
                .filter(|(a, p, f)| *a == 0 && *p == 2 && f[12..14] == [0x08, 0x06])
                .map(|(_, _, f)| {
                    wire::arp::Repr::parse(&wire::arp::Packet::new_checked(&f[14..]).unwrap())
                })
                .find(|r| r.operation == wire::arp::Operation::Reply)
                .unwrap();
            given.push(r.sender_mac);
        }
        assert_eq!(given[0], MacAddr([2, 0, 0, 0, 0, 3]));
        assert_eq!(given[1], masq_mac(2, 0));
        assert_eq!(masq_of(&given[1]), Some((2, 0)));
        assert_eq!(n.axons[0].counters.events(Event::AxonRouteMasqueraded), 1);
        // A frame to the masqueraded MAC reaches h4 addressed to h4's own MAC.
        let mut data = vec![0u8; 60];
        data[0..6].copy_from_slice(&given[1].0);
        data[6..12].copy_from_slice(&h1.0);
        data[12..14].copy_from_slice(&[0x88, 0x88]);
        n.to_hosts.clear();
        n.host_sends(0, 2, data);
        n.step();
        let got: Vec<_> = n
            .to_hosts
            .iter()
            .filter(|(_, _, f)| f[12..14] == [0x88, 0x88])
            .collect();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].0, got[0].1), (2, 2));
        assert_eq!(&got[0].2[0..6], &[2, 0, 0, 0, 0, 4]);
        // Another port's index is no route.
        let mut stray = vec![0u8; 60];
        stray[0..6].copy_from_slice(&masq_mac(1, 0).0);
        stray[6..12].copy_from_slice(&h1.0);
        n.host_sends(0, 2, stray);
        assert_eq!(n.axons[0].counters.drops(Drop::AxonNoRoute), 1);
    }

    #[test]
    fn probes_go_round_trip_and_collect_every_hop() {
        let mut n = ring();
        for _ in 0..40 {
            n.step();
        }
        let probes = n.axons[0].probes();
        assert_eq!(probes.len(), 2, "{probes:?}");
        for (far, r) in probes {
            let ids: Vec<u32> = r.records.iter().map(|x| x.axon).collect();
            assert_eq!(ids, vec![1, far, 1], "{r:?}");
            for (i, x) in r.records.iter().enumerate() {
                assert!(x.in_ns > 0, "{r:?}");
                if i + 1 < r.records.len() {
                    assert!(x.out_ns >= x.in_ns, "{r:?}");
                    assert!(r.records[i + 1].in_ns >= x.out_ns, "{r:?}");
                }
            }
        }
    }

    #[test]
    fn a_paced_host_port_holds_frames_back_and_loses_none() {
        let now = Instant::now();
        let mut paced = axon(1, 3, now);
        paced.cfg.ports[2].capacity_bps = Some(10_000_000);
        paced.cfg.pace_hosts = true;
        let paced = Axon::new(paced.cfg.clone(), paced.counters.clone(), now);
        let mut n = Net {
            axons: vec![paced, axon(2, 3, now), axon(3, 3, now)],
            wires: vec![((0, 0), (1, 1)), ((1, 0), (2, 1)), ((2, 0), (0, 1))],
            to_hosts: Vec::new(),
            now,
        };
        for _ in 0..10 {
            n.step();
        }
        let h1 = MacAddr([2, 0, 0, 0, 0, 1]);
        let h3 = MacAddr([2, 0, 0, 0, 0, 3]);
        n.resolve(0, 1, 2, 3);
        n.step();
        // 20 frames of 1000 bytes at once: at 10 Mbit/s each takes 0.83 ms of the wire with
        // its Axon headers; one leaves per 5 ms step of this harness, none is lost.
        let mut data = vec![0u8; 1000];
        data[0..6].copy_from_slice(&h3.0);
        data[6..12].copy_from_slice(&h1.0);
        data[12..14].copy_from_slice(&[0x88, 0x88]);
        n.to_hosts.clear();
        for _ in 0..20 {
            n.host_sends(0, 2, data.clone());
        }
        n.step();
        let count = |n: &Net| {
            n.to_hosts
                .iter()
                .filter(|(_, _, f)| f[12..14] == [0x88, 0x88])
                .count()
        };
        assert!(count(&n) < 5, "{} frames passed at once", count(&n));
        for _ in 0..40 {
            n.step();
        }
        assert_eq!(count(&n), 20);
        assert_eq!(n.axons[0].counters.drops(Drop::AxonPacedOut), 0);
    }

    #[test]
    fn routes_spread_over_equal_paths_in_a_ring_of_four() {
        let now = Instant::now();
        // 1 - 2 - 3 - 4 - 1 on ports 0 and 1; hosts on port 2. From Axon 1, Axon 3 is two
        // hops away either way round.
        let mut n = Net {
            axons: (1..=4).map(|id| axon(id, 3, now)).collect(),
            wires: vec![
                ((0, 0), (1, 1)),
                ((1, 0), (2, 1)),
                ((2, 0), (3, 1)),
                ((3, 0), (0, 1)),
            ],
            to_hosts: Vec::new(),
            now,
        };
        for _ in 0..20 {
            n.step();
        }
        assert_eq!(n.axons[0].paths().len(), 3);
        for t in 10..26u8 {
            n.resolve(0, 1, 2, t);
        }
        let routes = n.axons[0].routes();
        assert_eq!(routes.len(), 16);
        let first: std::collections::BTreeSet<u8> = routes
            .iter()
            .map(|(_, r, _)| r.path.as_ref().unwrap()[0])
            .collect();
        assert_eq!(first.len(), 2, "{routes:?}");
        assert!(routes
            .iter()
            .all(|(_, r, _)| r.path.as_ref().unwrap().len() == 3));
        // Data to every one of them arrives, by whichever way.
        n.to_hosts.clear();
        for t in 10..26u8 {
            let mut data = vec![0u8; 60];
            data[0..6].copy_from_slice(&[2, 0, 0, 0, 0, t]);
            data[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
            data[12..14].copy_from_slice(&[0x88, 0x88]);
            n.host_sends(0, 2, data);
        }
        n.step();
        let got = n
            .to_hosts
            .iter()
            .filter(|(a, p, f)| *a == 2 && *p == 2 && f[12..14] == [0x88, 0x88])
            .count();
        assert_eq!(got, 16);
    }
}
