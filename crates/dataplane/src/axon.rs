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

mod hosts;
mod restart;

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
    /// Kept until then without hellos: the neighbour said it restarts (its last hello's
    /// hold), and its fast path forwards on meanwhile.
    pub held_until: Option<Instant>,
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
    /// Said to the neighbours in the last hellos, as the Axon stops ([`Axon::farewell`]):
    /// keep me this long (it hands its fast path over to its next start).
    pub farewell_hold: Option<Duration>,
    /// A start that took a predecessor's fast path over: the ports its neighbours were
    /// on, and until when at most this Axon floods no links before it hears them all
    /// again ([`Axon::settle`]).
    settle: Option<(Vec<usize>, Instant)>,
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
            seq: restart::first_seq(),
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
            farewell_hold: None,
            settle: None,
            topology_changed_at: None,
            scratch: Vec::new(),
            cfg,
        }
    }

    /// Applies reloaded ports in place: each port's capacity, buffer and delay (and its
    /// pacer's, where host ports are paced). The ports (names, order) cannot change, nor,
    /// with `pace_hosts`, whether a port has a capacity (whether it has a pacer): the
    /// error names the key, and nothing changes.
    pub fn reconfigure_ports(&mut self, ports: Vec<PortConfig>) -> Result<(), String> {
        let names = |v: &[PortConfig]| v.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        if names(&ports) != names(&self.cfg.ports) {
            return Err(
                "port: the ports (their names and order) change only with a restart".into(),
            );
        }
        if self.cfg.pace_hosts {
            if let Some(i) = (0..ports.len()).find(|&i| {
                ports[i].capacity_bps.is_some() != self.cfg.ports[i].capacity_bps.is_some()
            }) {
                return Err(format!(
                    "port[{i}].capacity_bps: with pace_hosts, setting or removing it changes the port's pacer: changes only with a restart"
                ));
            }
        }
        let n = ports.len();
        for (o, p) in self.out.iter_mut().zip(&ports) {
            o.reshape(p, n + 1, Mode::Fair);
        }
        for (pacer, p) in self.pacers.iter_mut().zip(&ports) {
            if let Some((o, _)) = pacer {
                o.reshape(p, 1, Mode::Fifo);
            }
        }
        self.cfg.ports = ports;
        Ok(())
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

    /// The MAC of the neighbour Axon's port heard on `port`, if one is.
    pub fn neighbour_mac(&self, port: usize) -> Option<MacAddr> {
        self.neigh.get(port).copied().flatten().map(|n| n.mac)
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
                Ok(Msg::Hello { id, port, hold_ms }) if id != self.cfg.id => {
                    let hold = Duration::from_millis(hold_ms.into());
                    self.hello_from(input, (id, port), outer_src, hold, now)
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

    /// A hello on `port` from Axon `id` by its port `their_port`; `hold`: it asks to be
    /// kept that long without hellos (it restarts), else nothing.
    fn hello_from(
        &mut self,
        port: usize,
        (id, their_port): (u32, u8),
        mac: MacAddr,
        hold: Duration,
        now: Instant,
    ) {
        let held_until = (!hold.is_zero()).then(|| now + hold);
        match &mut self.neigh[port] {
            Some(n) if n.id == id && n.port == their_port => {
                n.seen = now;
                n.mac = mac;
                n.held_until = held_until;
            }
            slot => {
                *slot = Some(Neighbour {
                    id,
                    port: their_port,
                    mac,
                    seen: now,
                    since: now,
                    held_until,
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

    /// A hello out of `port`, asking the neighbours to hold this Axon `hold_ms` (0: none).
    fn hello(&mut self, port: usize, hold_ms: u32) -> Pkt {
        let mut c = self.pool.get();
        self.outer(&mut c.data, MacAddr::BROADCAST, port);
        let _ = axon::append(&mut c.data, Kind::Hello, &[], &[]);
        Msg::Hello {
            id: self.cfg.id,
            port: port as u8,
            hold_ms,
        }
        .emit(&mut c.data);
        c
    }

    /// Hellos, link floods, neighbour deaths, path computation, and what every output
    /// port's schedule allows by now.
    pub fn poll(&mut self, now: Instant, tx: &mut TxQueues) {
        if now >= self.next_hello {
            self.next_hello = now + self.cfg.hello;
            for port in 0..self.cfg.ports.len() {
                let c = self.hello(port, 0);
                let cp = self.cfg.ports.len();
                self.enqueue(port, c, cp);
            }
            let dead = self.cfg.hello * self.cfg.dead;
            let mut lost = false;
            for n in self.neigh.iter_mut() {
                let gone = |x: Neighbour| {
                    now.duration_since(x.seen) > dead && x.held_until.is_none_or(|h| now > h)
                };
                if n.is_some_and(gone) {
                    *n = None;
                    lost = true;
                    self.counters.event(Event::AxonNeighbourDown);
                }
            }
            if lost {
                self.topology_changed(now);
            }
        }
        if self.settling(now) {
            // A restart's first links would say "none" and move the others' paths off
            // this Axon, which its fast path still carries: none flooded yet.
        } else if self.changed {
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
mod tests;
