//! The layer-2 load balancer (LB) of a multistage router.
//!
//! An LB faces the outside on its external ports and the back-end forwarders on its internal
//! ports (the interconnection). Every frame is classified by the first matching rule of a
//! rule list ordered from most to least specific; the rule names the module that handles it:
//!
//! | from | frame | module | what it does |
//! |---|---|---|---|
//! | external | ARP request | external ARP | answers for the port's router address itself |
//! | external | ARP reply | internal ARP | broadcasts it to the back-ends, tagged with the port's VLAN |
//! | external | neighbor solicitation | external ND | answers for the port's router IPv6 addresses itself |
//! | external | neighbor advertisement | internal ND | broadcasts it to the back-ends, tagged with the port's VLAN |
//! | external | router solicitation | - | dropped: the LB sends no router advertisements |
//! | external | OSPF, RIP, BGP, SNMP to the router; OSPFv3, RIPng, BGP over IPv6 to it | Virtual-CP | to the MAC of the back-end hosting the control plane |
//! | external | other IPv4, other IPv6 | balance | to a back-end picked by the balancing table, tagged |
//! | external | DIST | - | dropped: `dist_not_internal` (DIST is accepted only inside) |
//! | internal | DIST | DIST | applies ports, balance and virtual-cp messages; hellos keep back-ends live |
//! | internal | ARP | internal ARP | untagged, our external MAC as sender, out of the VLAN's port |
//! | internal | other | int-to-ext | untagged, our external MAC as source (and in neighbour discovery's link-layer options), out of the VLAN's port |
//!
//! Frames that match no rule are dropped (`classify_no_rule`). Frames into the
//! interconnection keep the external sender's MAC as source, so that the switch learns where
//! each external host is and the back-ends' frames to it are not flooded. The LB never
//! touches the IP header: the back-end decrements the TTL, once per trip through the router.

pub mod table;

use crate::buf::{Pkt, Pool, TxQueues};
use crate::counters::{Counters, Drop, Event, Scope};
use crate::routes::flow_hash;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};
pub use table::{BalanceTable, Mode};
use wire::dist::{self, PortRole};
use wire::ethernet::{self, ethertype};
use wire::icmpv6;
use wire::ipv4::protocol;
use wire::{arp, ipv6, MacAddr};

mod reports;
mod rules;
pub mod spare;
use rules::Key;
pub use rules::{default_rules, order_rules, Action, Rule};
pub use spare::{SpareConfig, SpareState};

const ETH: usize = ethernet::HEADER_LEN;

/// One port of the LB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbPort {
    pub name: String,
    pub mac: MacAddr,
    pub role: PortRole,
    /// External ports: the VLAN id that carries this port's traffic on the interconnection.
    pub vlan: u16,
    /// External ports: the router's address on this network (answered by external ARP).
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
    /// External ports: the router's IPv6 addresses on this network and their prefix
    /// lengths (answered by external ND, with the port's link-local address, which comes
    /// from its MAC; the hellos carry them to the Virtual-CP's TAPs).
    pub addrs6: Vec<(Ipv6Addr, u8)>,
    pub speed_mbps: u32,
}

impl LbPort {
    /// One of the router's IPv6 addresses on this port (its link-local one included).
    fn is_ours6(&self, a: Ipv6Addr) -> bool {
        self.addrs6.iter().any(|x| x.0 == a)
            || (!self.addrs6.is_empty() && a == ipv6::link_local_of(self.mac))
    }
}

/// LB settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BalancerConfig {
    pub mode: Mode,
    /// Between the LB's own hellos.
    pub hello_interval: Duration,
    /// A back-end leaves the table when no hello came for this long. `None`: 2.5 times the
    /// interval it advertises (or the LB's own interval before its first hello).
    pub hello_timeout: Option<Duration>,
    /// The back-end hosting the control plane, and the port that reaches it.
    pub virtual_cp: Option<(MacAddr, u16)>,
    pub rules: Vec<Rule>,
    /// `[spare]`: another LB serves the same external network (see [`spare`]).
    pub spare: Option<SpareConfig>,
}

impl Default for BalancerConfig {
    fn default() -> Self {
        BalancerConfig {
            mode: Mode::Maglev,
            hello_interval: Duration::from_millis(100),
            hello_timeout: None,
            virtual_cp: None,
            rules: default_rules(),
            spare: None,
        }
    }
}

/// Something the control side should log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogEvent {
    /// A back-end left the table: no hello within its timeout.
    Down(MacAddr),
    /// A back-end returned with its hellos.
    Up(MacAddr),
    /// A back-end's hellos say it holds no table from the controller yet (it started, or
    /// restarted): it gets no flows until they say it does.
    Waiting { mac: MacAddr, incarnation: u64 },
    /// A DIST message from `from` could not be applied.
    Rejected { from: MacAddr, error: String },
}

/// What the first worker of an LB publishes to the others whenever it changes: the ports,
/// the settings and the table (whose per-back-end packet counts each worker keeps for
/// itself).
#[derive(Debug, Clone)]
pub struct LbState {
    pub ports: Vec<LbPort>,
    pub cfg: BalancerConfig,
    pub table: BalanceTable,
    /// The standby of a spare pair: it balances and sends out nothing.
    pub standby: bool,
}

/// Messages one worker may hold for another; more wait (packet counts) or are dropped
/// and counted (DIST frames: `dist_queue_full`; the sender repeats hellos and the
/// controller its messages).
const SHARE_QUEUE: usize = 1024;

/// Packets a worker sent to each back-end since it last handed its counts over.
type Counts = Vec<(MacAddr, u64)>;

/// How the workers of one LB share it (see [`Balancer::connect_workers`]). The first
/// worker holds the state: it checks and applies every DIST frame, runs the back-ends'
/// timeouts, sends the hellos and reports, and answers the control socket. The others
/// balance with its latest state.
#[derive(Debug, Default)]
struct LbShare {
    /// Another worker's: where it hands its DIST frames and its packet counts per back-end.
    to_lead: Option<(SyncSender<Pkt>, SyncSender<Counts>)>,
    /// Another worker's: the first worker's publications.
    from_lead: Option<Receiver<Arc<LbState>>>,
    /// The first worker's: what the others handed it.
    from_others: Option<(Receiver<Pkt>, Receiver<Counts>)>,
    /// The first worker's: where it publishes.
    to_others: Vec<SyncSender<Arc<LbState>>>,
    /// The first worker's: every worker's counters (its own first), whose sum its hellos
    /// and reports carry.
    group: Vec<Arc<Counters>>,
    /// The first worker's: the state's version, and the version last published.
    version: u64,
    published: u64,
}

/// The LB's state and its per-packet path.
pub struct Balancer {
    pub ports: Vec<LbPort>,
    /// VLAN id -> external port, `u16::MAX` for none.
    vlan_port: Vec<u16>,
    pub table: BalanceTable,
    pub cfg: BalancerConfig,
    pub counters: Arc<Counters>,
    pub pool: Pool,
    next_hello: Instant,
    seq: u32,
    /// DIST authentication.
    pub dist_auth: crate::report::DistAuth,
    /// What happened since the caller last took these (bounded: the oldest are dropped).
    pub log: Vec<(Instant, LogEvent)>,
    /// Counter reports to the controller (see [`crate::report::counter_reports`]).
    pub report: crate::report::Reporter,
    /// The LB's workers (see [`Balancer::connect_workers`]).
    share: LbShare,
    /// This process's incarnation, which its hellos carry (docs/dist.md, "Incarnations").
    pub incarnation: u64,
    /// The active controller heard: the LB is under a controller, and gives flows only to
    /// back-ends whose hellos say they hold its table.
    pub controller: Option<MacAddr>,
    /// A balance message was applied in this incarnation (the hellos' table flag).
    pub balanced: bool,
    /// The pair, where this LB is one of two serving one external network (first worker).
    pub spare: Option<SpareState>,
    /// The filters of the external ports (docs/filters.md), shared by the workers.
    pub filters: crate::acl::FilterShare,
    /// The standby of such a pair: every frame dropped (`lb_standby`) but DIST from the
    /// interconnection and the other LB's hellos from outside; its fast path suspended.
    pub standby: bool,
    /// The router's filters from the controller (first worker): the set being received,
    /// the link to the thread that applies sets, and answers to send.
    pub filter_input: crate::acl::remote::FilterInput,
    filter_answers: Vec<(MacAddr, dist::FiltersAck)>,
}

impl Balancer {
    pub fn new(ports: Vec<LbPort>, mut cfg: BalancerConfig, now: Instant) -> Balancer {
        let counters = Arc::new(Counters::for_role(
            ports.iter().map(|p| p.name.clone()).collect(),
            Scope::Balancer,
        ));
        cfg.rules = order_rules(std::mem::take(&mut cfg.rules));
        let mut b = Balancer {
            ports,
            vlan_port: vec![u16::MAX; 4096],
            table: BalanceTable::new(cfg.mode),
            cfg,
            counters,
            pool: Pool::new(),
            next_hello: now,
            seq: 0,
            dist_auth: Default::default(),
            log: Vec::new(),
            report: Default::default(),
            share: LbShare::default(),
            incarnation: dist::new_incarnation(),
            controller: None,
            balanced: false,
            spare: None,
            standby: false,
            filters: Default::default(),
            filter_input: Default::default(),
            filter_answers: Vec::new(),
        };
        if let Some(c) = b.cfg.spare.clone() {
            b.spare = Some(SpareState::new(c, now));
            b.standby = true;
        }
        b.index_vlans();
        b
    }

    /// Another worker of this LB: the same ports, settings and table, its own buffers and
    /// counters. Join the workers with [`Balancer::connect_workers`].
    pub fn worker(&self, now: Instant) -> Balancer {
        let mut b = Balancer::new(self.ports.clone(), self.cfg.clone(), now);
        b.filters = self.filters.clone();
        b.table = self.table.clone();
        b.table.entries.iter_mut().for_each(|e| e.packets = 0);
        b
    }

    /// Joins the workers of one LB: the first takes the DIST frames the others receive and
    /// their packet counts, and publishes its state to them whenever it changes; its hellos
    /// and reports carry the counters of all.
    pub fn connect_workers(workers: &mut [Balancer]) {
        if workers.len() < 2 {
            return;
        }
        let (dist_tx, dist_rx) = std::sync::mpsc::sync_channel(SHARE_QUEUE);
        let (counts_tx, counts_rx) = std::sync::mpsc::sync_channel(SHARE_QUEUE);
        let group = workers.iter().map(|w| w.counters.clone()).collect();
        let mut to_others = Vec::new();
        for w in workers[1..].iter_mut() {
            let (tx, rx) = std::sync::mpsc::sync_channel(SHARE_QUEUE);
            to_others.push(tx);
            w.share.to_lead = Some((dist_tx.clone(), counts_tx.clone()));
            w.share.from_lead = Some(rx);
        }
        let lead = &mut workers[0].share;
        lead.from_others = Some((dist_rx, counts_rx));
        lead.to_others = to_others;
        lead.group = group;
    }

    /// The state changed: the other workers get it at the first worker's next pass.
    fn changed(&mut self) {
        self.share.version += 1;
    }

    /// A number that changes whenever the LB's ports, settings or table change (what a
    /// fast path publishes from them).
    pub fn state_version(&self) -> u64 {
        self.share.version
    }

    /// Adds packets sent to back-ends elsewhere (another worker, the fast path) to their
    /// counts.
    pub fn add_counts(&mut self, counts: &[(MacAddr, u64)]) {
        for &(mac, n) in counts {
            if let Some(e) = self.table.entries.iter_mut().find(|e| e.mac == mac) {
                e.packets += n;
            }
        }
    }

    /// Takes what the other workers handed over (first worker) or the first worker's
    /// latest state (the others). Called after every pass over the ports.
    pub fn sync(&mut self, now: Instant) {
        if let Some((dist, counts)) = self.share.from_others.take() {
            for p in dist.try_iter() {
                self.dist_input(p, now);
            }
            for c in counts.try_iter() {
                self.add_counts(&c);
            }
            self.share.from_others = Some((dist, counts));
            self.publish();
        }
        let Some(from) = &self.share.from_lead else {
            return;
        };
        let Some(state) = from.try_iter().last() else {
            return;
        };
        // Counts not yet handed over stay with their back-ends.
        let mine = self.counts();
        self.ports = state.ports.clone();
        self.cfg = state.cfg.clone();
        self.table = state.table.clone();
        self.standby = state.standby;
        for e in &mut self.table.entries {
            e.packets = mine.iter().find(|m| m.0 == e.mac).map_or(0, |m| m.1);
        }
        self.index_vlans();
    }

    /// This worker's packet counts per back-end, where not zero.
    fn counts(&self) -> Counts {
        self.table
            .entries
            .iter()
            .filter(|e| e.packets > 0)
            .map(|e| (e.mac, e.packets))
            .collect()
    }

    /// The first worker: its state to the others, if it changed since the last time.
    fn publish(&mut self) {
        if self.share.to_others.is_empty() || self.share.version == self.share.published {
            return;
        }
        let mut table = self.table.clone();
        table.entries.iter_mut().for_each(|e| e.packets = 0);
        let state = Arc::new(LbState {
            ports: self.ports.clone(),
            cfg: self.cfg.clone(),
            table,
            standby: self.standby,
        });
        // A full queue: the worker is far behind; it takes the next publication.
        if self
            .share
            .to_others
            .iter()
            .all(|t| t.try_send(state.clone()).is_ok())
        {
            self.share.published = self.share.version;
        }
    }

    /// Another worker: its packet counts per back-end to the first (kept if the queue is full).
    fn hand_counts(&mut self) {
        let c = self.counts();
        let Some((_, counts)) = &self.share.to_lead else {
            return;
        };
        if !c.is_empty() && counts.try_send(c).is_ok() {
            self.table.entries.iter_mut().for_each(|e| e.packets = 0);
        }
    }

    /// The counters of this LB: of every worker, summed, on the first.
    fn group_counters(&self) -> crate::counters::Snapshot {
        crate::counters::Snapshot::sum(&self.share.group)
            .unwrap_or_else(|| self.counters.snapshot())
    }

    fn index_vlans(&mut self) {
        self.vlan_port.fill(u16::MAX);
        for (i, p) in self.ports.iter().enumerate() {
            if p.role == PortRole::External && (1..4095).contains(&p.vlan) {
                self.vlan_port[p.vlan as usize] = i as u16;
            }
        }
    }

    /// Replaces the classifier rules (the built-in ones and the configured, as
    /// [`BalancerConfig::rules`] holds them), put in the classifier's order; the other
    /// workers follow.
    pub fn set_rules(&mut self, rules: Vec<Rule>) {
        self.cfg.rules = order_rules(rules);
        self.changed();
    }

    /// Adds, re-weighs or (weight 0) removes back-ends, and rebuilds the table. A flush
    /// empties the table first; a back-end it names again keeps what its hellos said
    /// (live or not, waiting for a table, its incarnation) and its packet count.
    pub fn set_backends(&mut self, entries: &[(MacAddr, u16, u16)], flush: bool, now: Instant) {
        let old = if flush {
            std::mem::take(&mut self.table.entries)
        } else {
            Vec::new()
        };
        for &(mac, port, weight) in entries {
            self.table.set(mac, port, weight, now);
            if let (Some(o), Some(e)) = (
                old.iter().find(|o| o.mac == mac),
                self.table.entries.iter_mut().find(|e| e.mac == mac),
            ) {
                (e.live, e.seen, e.interval, e.packets) = (o.live, o.seen, o.interval, o.packets);
                (e.incarnation, e.waiting) = (o.incarnation, o.waiting);
            }
        }
        self.table.rebuild();
        self.changed();
    }

    #[inline]
    fn drop_pkt(&mut self, p: Pkt, why: Drop) {
        self.counters.count(why);
        self.pool.put(p);
    }

    fn key(&self, port: usize, ethertype: u16, payload: &[u8]) -> Key {
        let me = &self.ports[port];
        let mut k = Key {
            from: me.role,
            ethertype,
            arp_op: None,
            protocol: None,
            icmp6_type: None,
            ports: None,
            to_router: false,
        };
        match ethertype {
            ethertype::ARP if payload.len() >= 8 => {
                k.arp_op = Some(u16::from_be_bytes([payload[6], payload[7]]))
            }
            ethertype::IPV4 if payload.len() >= 20 && payload[0] >> 4 == 4 => {
                let ihl = (payload[0] & 0x0f) as usize * 4;
                let proto = payload[9];
                k.protocol = Some(proto);
                let dst = Ipv4Addr::new(payload[16], payload[17], payload[18], payload[19]);
                k.to_router =
                    (dst == me.addr && !dst.is_unspecified()) || u32::from(dst) >> 8 == 0xe0_00_00;
                let first = u16::from_be_bytes([payload[6], payload[7]]) & 0x1fff == 0;
                if first && matches!(proto, protocol::TCP | protocol::UDP) {
                    if let Some(p) = payload.get(ihl..ihl + 4) {
                        k.ports = Some((
                            u16::from_be_bytes([p[0], p[1]]),
                            u16::from_be_bytes([p[2], p[3]]),
                        ));
                    }
                }
            }
            ethertype::IPV6 if payload.len() >= ipv6::HEADER_LEN && payload[0] >> 4 == 6 => {
                let next = payload[6];
                k.protocol = Some(next);
                let mut d = [0u8; 16];
                d.copy_from_slice(&payload[24..40]);
                let dst = Ipv6Addr::from(d);
                // To one of its addresses, or to a link-local multicast group (ff02::/16,
                // where OSPFv3 and RIPng speak).
                k.to_router = me.is_ours6(dst) || (d[0] == 0xff && d[1] & 0x0f == 2);
                let upper = &payload[ipv6::HEADER_LEN..];
                match next {
                    ipv6::next_header::ICMPV6 => k.icmp6_type = upper.first().copied(),
                    protocol::TCP | protocol::UDP if upper.len() >= 4 => {
                        k.ports = Some((
                            u16::from_be_bytes([upper[0], upper[1]]),
                            u16::from_be_bytes([upper[2], upper[3]]),
                        ));
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        k
    }

    /// Runs one received frame through the LB. Frames to send land in `tx` (one queue per
    /// port).
    pub fn process(&mut self, p: Pkt, now: Instant, tx: &mut TxQueues) {
        let port = p.meta.rx_port;
        if !self.counters.count_rx(port, p.data.len()) {
            return self.drop_pkt(p, Drop::EthTruncated);
        }
        let Ok(eth) = ethernet::Frame::new_checked(&p.data[..]) else {
            return self.drop_pkt(p, Drop::EthTruncated);
        };
        let me = &self.ports[port as usize];
        let from = me.role;
        if from == PortRole::External && !eth.dst().is_multicast() && eth.dst() != me.mac {
            return self.drop_pkt(p, Drop::NotOurMac);
        }
        let vid = eth.vlan();
        if self.standby {
            // DIST from inside as always; from outside, the active LB's hellos (checked as
            // DIST); nothing else.
            if eth.ethertype() == dist::ETHERTYPE && vid.is_none() {
                return self.dist_input(p, now);
            }
            return self.drop_pkt(p, Drop::LbStandby);
        }
        if from == PortRole::External && vid.is_some() {
            // Outside, the router's ports are untagged; inside, tags carry the port.
            return self.drop_pkt(p, Drop::VlanNotConfigured);
        }
        let k = self.key(port as usize, eth.ethertype(), eth.payload());
        let action = self
            .cfg
            .rules
            .iter()
            .find(|r| r.matches(&k))
            .map(|r| r.action);
        if matches!(action, Some(Action::Balance | Action::VirtualCp))
            && !self.filtered(port, &p.data[ETH..], k.ethertype, true, p.data.len())
        {
            return self.drop_pkt(p, Drop::AclDeny);
        }
        match action {
            Some(Action::Balance) => self.balance(p, now, tx),
            Some(Action::ExternalArp) => self.external_arp(p, tx),
            Some(Action::InternalArp) if from == PortRole::External => self.arp_reply_in(p, tx),
            Some(Action::ExternalNd) => self.external_nd(p, tx),
            Some(Action::InternalNd) if from == PortRole::External => self.nd_advert_in(p, tx),
            Some(Action::InternalArp) | Some(Action::InternalNd) | Some(Action::IntToExt) => {
                self.int_to_ext(p, k, vid, tx)
            }
            Some(Action::VirtualCp) => self.virtual_cp(p, tx),
            Some(Action::Dist) => self.dist_input(p, now),
            Some(Action::Drop) | None => {
                let why = if k.ethertype == dist::ETHERTYPE && from == PortRole::External {
                    Drop::DistNotInternal
                } else {
                    Drop::ClassifyNoRule
                };
                self.drop_pkt(p, why)
            }
        }
    }

    /// Whether the IPv4 or IPv6 packet `ip` (of a frame of `bytes`) passes the access list of
    /// external port `port`: `acl_in` where it comes in (`inward`), `acl_out` where it
    /// leaves. Other frames, and neighbour discovery, pass. Counted per rule and port.
    fn filtered(&self, port: u16, ip: &[u8], ethertype: u16, inward: bool, bytes: usize) -> bool {
        let f = self.filters.peek();
        let b = f.binding(port);
        let Some(list) = (if inward { b.acl_in } else { b.acl_out }) else {
            return true;
        };
        let key = match ethertype {
            ethertype::IPV4 => crate::acl::Key::of_ipv4(ip),
            ethertype::IPV6 => crate::acl::Key::of_ipv6(ip),
            _ => return true,
        };
        let Some(key) = key else { return true };
        if key.protocol == 58 && key.icmp.is_some_and(|(t, _)| (133..=137).contains(&t)) {
            return true;
        }
        // Lists with `reject` are refused on an LB by its config: deny or permit here.
        if f.decide(list, &key, bytes).action == crate::acl::Action::Permit {
            return true;
        }
        if let Some(d) = f.drops.get(port as usize) {
            if inward { &d.acl_in } else { &d.acl_out }.add(1, bytes as u64);
        }
        false
    }

    /// Balance: to a back-end, tagged with the ingress port's VLAN.
    fn balance(&mut self, mut p: Pkt, now: Instant, tx: &mut TxQueues) {
        let _ = now;
        let port = p.meta.rx_port as usize;
        let six = u16::from_be_bytes([p.data[12], p.data[13]]) == ethertype::IPV6;
        let ip = &p.data[ETH..];
        if six {
            if ip.len() < ipv6::HEADER_LEN {
                return self.drop_pkt(p, Drop::Ip6Malformed);
            }
            if p.data[0] & 1 == 1 || ip[24] == 0xff {
                return self.drop_pkt(p, Drop::BalanceIp6Multicast);
            }
        } else {
            if ip.len() < 20 {
                return self.drop_pkt(p, Drop::Ip4Truncated);
            }
            let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
            if p.data[0] & 1 == 1 || dst.is_multicast() || dst.is_broadcast() {
                return self.drop_pkt(p, Drop::BalanceIp4Broadcast);
            }
        }
        let hash = match (self.table.mode, six) {
            (Mode::RoundRobin, _) => 0,
            (_, true) => crate::routes::flow_hash6(ip),
            (_, false) => flow_hash(ip),
        };
        let Some(i) = self.table.pick(hash) else {
            return self.drop_pkt(p, Drop::BalanceNoBackend);
        };
        self.complete_checksum(&mut p);
        let e = &self.table.entries[i];
        let (mac, out) = (e.mac, e.port);
        p.data[0..6].copy_from_slice(&mac.0);
        ethernet::push_vlan(&mut p.data, self.ports[port].vlan);
        self.counters.event(Event::Balanced);
        tx.push(out, p);
    }

    /// A frame whose sender left the TCP/UDP checksum to offload gets it filled in here:
    /// past this port nobody knows it is missing.
    #[inline]
    fn complete_checksum(&mut self, p: &mut Pkt) {
        if crate::buf::complete_offloaded_checksum(p) {
            self.counters.event(Event::ChecksumFilled);
        }
    }

    /// External ARP: answer requests for the router's address on this port.
    fn external_arp(&mut self, mut p: Pkt, tx: &mut TxQueues) {
        let port = p.meta.rx_port;
        let Ok(a) = arp::Packet::new_checked(&p.data[ETH..]) else {
            return self.drop_pkt(p, Drop::ArpMalformed);
        };
        let r = arp::Repr::parse(&a);
        let me = &self.ports[port as usize];
        if r.target_ip != me.addr || me.addr.is_unspecified() || r.sender_mac.is_multicast() {
            return self.drop_pkt(p, Drop::ExtArpNotForUs);
        }
        let reply = arp::Repr {
            operation: arp::Operation::Reply,
            sender_mac: me.mac,
            sender_ip: me.addr,
            target_mac: r.sender_mac,
            target_ip: r.sender_ip,
        };
        let eth = ethernet::Repr {
            dst: r.sender_mac,
            src: me.mac,
            vlan: None,
            ethertype: ethertype::ARP,
        };
        p.data.truncate(ETH + arp::PACKET_LEN);
        if eth.emit(&mut p.data).is_ok() && reply.emit(&mut p.data[ETH..]).is_ok() {
            self.counters.event(Event::ExtArpRepliesSent);
            tx.push(port, p);
        } else {
            self.drop_pkt(p, Drop::ArpMalformed);
        }
    }

    /// External ND: answer neighbor solicitations for the router's IPv6 addresses on this
    /// port (RFC 4861 7.2.4: a solicited advertisement with the router flag and our MAC).
    fn external_nd(&mut self, mut p: Pkt, tx: &mut TxQueues) {
        let port = p.meta.rx_port;
        let frame_src = MacAddr::from_slice(&p.data[6..12]);
        let Some((src, hops, r)) = parse_nd(&p.data[ETH..]) else {
            return self.drop_pkt(p, Drop::LbNdMalformed);
        };
        let me = &self.ports[port as usize];
        let icmpv6::Repr::NeighborSolicit { target, options } = r else {
            return self.drop_pkt(p, Drop::LbNdMalformed);
        };
        let unspecified = src.is_unspecified();
        if hops != 255 || !me.is_ours6(target) || (unspecified && options.source_lladdr.is_some()) {
            return self.drop_pkt(p, Drop::ExtNdNotForUs);
        }
        let mac = me.mac;
        let (to, to_mac, na) =
            icmpv6::answer_solicit(src, options.source_lladdr, frame_src, target, mac);
        p.data.clear();
        p.data.resize(ETH + ipv6::HEADER_LEN + na.buffer_len(), 0);
        let eth = ethernet::Repr {
            dst: to_mac,
            src: mac,
            vlan: None,
            ethertype: ethertype::IPV6,
        };
        if eth.emit(&mut p.data).is_ok()
            && icmpv6::emit_packet(&mut p.data[ETH..], target, to, 255, &na).is_ok()
        {
            self.counters.event(Event::ExtNdAdvertsSent);
            tx.push(port, p);
        } else {
            self.drop_pkt(p, Drop::LbNdMalformed);
        }
    }

    /// Internal ND, inward: a neighbor advertisement from outside (an answer to a
    /// back-end's solicitation, or news) goes to every back-end, tagged with this port's
    /// VLAN.
    fn nd_advert_in(&mut self, p: Pkt, tx: &mut TxQueues) {
        let vlan = self.ports[p.meta.rx_port as usize].vlan;
        self.broadcast_inside(p, vlan, Event::IntNdAdvertsIn, tx);
    }

    /// Broadcasts `p` to the back-ends on every internal port, tagged with `vlan`.
    fn broadcast_inside(&mut self, mut p: Pkt, vlan: u16, e: Event, tx: &mut TxQueues) {
        p.data[0..6].copy_from_slice(&MacAddr::BROADCAST.0);
        ethernet::push_vlan(&mut p.data, vlan);
        let internal: Vec<u16> = self.internal_ports().collect();
        let Some((&last, rest)) = internal.split_last() else {
            return self.drop_pkt(p, Drop::ClassifyNoRule);
        };
        for &i in rest {
            let mut c = self.pool.get();
            c.data.extend_from_slice(&p.data);
            tx.push(i, c);
        }
        self.counters.event(e);
        tx.push(last, p);
    }

    /// Internal ARP, inward: a reply for the router's address goes to every back-end
    /// (broadcast on each internal port, tagged with this port's VLAN).
    fn arp_reply_in(&mut self, mut p: Pkt, tx: &mut TxQueues) {
        let port = p.meta.rx_port as usize;
        let Ok(a) = arp::Packet::new_checked(&p.data[ETH..]) else {
            return self.drop_pkt(p, Drop::ArpMalformed);
        };
        let r = arp::Repr::parse(&a);
        let me = &self.ports[port];
        if r.target_ip != me.addr || me.addr.is_unspecified() {
            return self.drop_pkt(p, Drop::IntArpNotForUs);
        }
        let vlan = me.vlan;
        p.data.truncate(ETH + arp::PACKET_LEN);
        self.broadcast_inside(p, vlan, Event::IntArpRepliesIn, tx);
    }

    fn internal_ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.ports
            .iter()
            .enumerate()
            .filter(|(_, p)| p.role == PortRole::Internal)
            .map(|(i, _)| i as u16)
    }

    /// Int-to-ext and internal ARP, outward: by VLAN id to an external port, untagged, our
    /// external MAC as source (and as ARP sender for our address).
    fn int_to_ext(&mut self, mut p: Pkt, k: Key, vid: Option<u16>, tx: &mut TxQueues) {
        let out = vid.map(|v| self.vlan_port[v as usize]).unwrap_or(u16::MAX);
        if out == u16::MAX {
            return self.drop_pkt(p, Drop::ClassifyVlanUnknown);
        }
        ethernet::pop_vlan(&mut p.data);
        if !self.filtered(out, &p.data[ETH..], k.ethertype, false, p.data.len()) {
            return self.drop_pkt(p, Drop::AclDeny);
        }
        let ext = &self.ports[out as usize];
        p.data[6..12].copy_from_slice(&ext.mac.0);
        if k.ethertype == ethertype::ARP {
            let (mac, addr) = (ext.mac, ext.addr);
            let Ok(mut a) = arp::Packet::new_checked(&mut p.data[ETH..]) else {
                return self.drop_pkt(p, Drop::ArpMalformed);
            };
            if a.sender_ip() == addr {
                a.set_sender_mac(mac);
            }
            self.counters.event(Event::IntArpRequestsOut);
        } else if k.ethertype == ethertype::IPV6
            && matches!(
                k.icmp6_type,
                Some(icmpv6::kind::NEIGHBOR_SOLICIT | icmpv6::kind::NEIGHBOR_ADVERT)
            )
        {
            // Hosts outside must learn the router's addresses at the LB's MAC, not at the
            // back-end's: the link-layer options say ours.
            if !set_nd_lladdr(&mut p.data[ETH..], ext.mac) {
                return self.drop_pkt(p, Drop::LbNdMalformed);
            }
            self.counters.event(Event::IntNdOut);
        } else {
            self.counters.event(Event::IntToExt);
        }
        tx.push(out, p);
    }

    /// Virtual-CP redirect: routing and management packets to the control plane's host,
    /// tagged with the ingress port's VLAN.
    fn virtual_cp(&mut self, mut p: Pkt, tx: &mut TxQueues) {
        let Some((mac, out)) = self.cfg.virtual_cp else {
            return self.drop_pkt(p, Drop::VcpUnknown);
        };
        let vlan = self.ports[p.meta.rx_port as usize].vlan;
        self.complete_checksum(&mut p);
        p.data[0..6].copy_from_slice(&mac.0);
        ethernet::push_vlan(&mut p.data, vlan);
        self.counters.event(Event::VcpRedirected);
        tx.push(out, p);
    }

    fn dist_input(&mut self, p: Pkt, now: Instant) {
        if let Some((to_lead, _)) = &self.share.to_lead {
            // The first worker checks and applies every DIST frame (one replay window per
            // sender, one state).
            return match to_lead.try_send(p) {
                Ok(()) => self.counters.event(Event::DistHandedToLead),
                Err(TrySendError::Full(p) | TrySendError::Disconnected(p)) => {
                    self.drop_pkt(p, Drop::DistQueueFull)
                }
            };
        }
        if let Err(d) = self.dist_auth.check(&p.data) {
            return self.drop_pkt(p, d);
        }
        let r = match dist::Repr::parse(&p.data[ETH..]) {
            Ok(r) => r,
            Err(dist::Error::BadVersion(_)) => return self.drop_pkt(p, Drop::DistBadVersion),
            Err(_) => return self.drop_pkt(p, Drop::DistMalformed),
        };
        let src = MacAddr::from_slice(&p.data[6..12]);
        let outside = self
            .ports
            .get(p.meta.rx_port as usize)
            .is_some_and(|x| x.role == PortRole::External);
        if outside {
            // From outside only the other LB of a spare pair, authenticated: its hellos.
            return match &r.msg {
                dist::Message::Hello(h)
                    if self.dist_auth.enabled() && self.is_peer_hello(h, src) =>
                {
                    self.pool.put(p);
                    self.counters.event(Event::DistHellosReceived);
                    self.peer_hello(h, now);
                }
                _ => self.drop_pkt(p, Drop::DistNotInternal),
            };
        }
        self.pool.put(p);
        self.counters.event(Event::DistReceived);
        match self.apply(&r.msg, src, now) {
            Ok(()) => {}
            Err(error) => {
                self.counters.count(Drop::DistRejected);
                self.note(now, LogEvent::Rejected { from: src, error });
            }
        }
    }

    /// Applies a DIST message from `src` (also the control socket's way in).
    pub fn apply(&mut self, m: &dist::Message, src: MacAddr, now: Instant) -> Result<(), String> {
        match m {
            dist::Message::Hello(h) => {
                self.counters.event(Event::DistHellosReceived);
                if h.element == dist::ElementKind::Controller && h.active {
                    self.controller = Some(src);
                }
                if self.is_peer_hello(h, src) {
                    self.peer_hello(h, now);
                    return Ok(());
                }
                let interval = Duration::from_millis(h.interval_ms.max(1) as u64);
                // Under a controller, a back-end that holds none of its tables yet (just
                // started or restarted) gets no flows: they would find no routes.
                let waiting = self.controller.is_some()
                    && h.element == dist::ElementKind::Forwarder
                    && h.state.is_some_and(|s| !s.table);
                let mut changed = false;
                let mut notes = Vec::new();
                for e in &mut self.table.entries {
                    if e.mac == src || h.ports.iter().any(|p| p.mac == e.mac) {
                        e.seen = now;
                        e.interval = Some(interval);
                        if let Some(st) = h.state {
                            e.incarnation = st.incarnation;
                        }
                        if waiting && (e.live || !e.waiting) {
                            e.live = false;
                            changed = true;
                            self.counters.event(Event::BackendWaiting);
                            notes.push(LogEvent::Waiting {
                                mac: e.mac,
                                incarnation: e.incarnation,
                            });
                        } else if !waiting && !e.live {
                            e.live = true;
                            changed = true;
                            self.counters.event(Event::BackendUp);
                            notes.push(LogEvent::Up(e.mac));
                        }
                        e.waiting = waiting;
                    }
                }
                if changed {
                    self.table.rebuild();
                    self.changed();
                }
                for n in notes {
                    self.note(now, n);
                }
                Ok(())
            }
            dist::Message::Balance { flush, entries } => {
                for e in entries {
                    self.internal_port(e.port)?;
                }
                let es: Vec<(MacAddr, u16, u16)> = entries
                    .iter()
                    .map(|e| (e.mac, e.port as u16, e.weight))
                    .collect();
                self.set_backends(&es, *flush, now);
                self.balanced = true;
                self.counters.event(Event::DistBalanceApplied);
                Ok(())
            }
            dist::Message::Ports { ports } => {
                for c in ports {
                    let Some(_) = self.ports.get(c.index as usize) else {
                        return Err(format!("no port {}", c.index));
                    };
                    if c.role == PortRole::External && !(1..4095).contains(&c.vlan) {
                        return Err(format!(
                            "external port {} needs a VLAN id of 1 to 4094",
                            c.index
                        ));
                    }
                }
                let mut next = self.ports.clone();
                for c in ports {
                    let p = &mut next[c.index as usize];
                    p.role = c.role;
                    p.vlan = if c.role == PortRole::External {
                        c.vlan
                    } else {
                        0
                    };
                    p.addr = c.addr;
                    p.prefix_len = c.prefix_len;
                }
                let ext: Vec<u16> = next
                    .iter()
                    .filter(|p| p.role == PortRole::External)
                    .map(|p| p.vlan)
                    .collect();
                if (1..ext.len()).any(|i| ext[..i].contains(&ext[i])) {
                    return Err("two external ports with one VLAN id".into());
                }
                self.ports = next;
                self.index_vlans();
                self.changed();
                self.counters.event(Event::DistPortsApplied);
                Ok(())
            }
            dist::Message::VirtualCp { mac, port } => {
                self.internal_port(*port)?;
                self.cfg.virtual_cp = Some((*mac, *port as u16));
                self.changed();
                self.counters.event(Event::DistVcpApplied);
                Ok(())
            }
            dist::Message::Filters(c) => {
                use crate::acl::remote::Taken;
                match self.filter_input.take(src, c) {
                    Taken::Waiting => {}
                    Taken::Handed => self.counters.event(Event::DistFilterSets),
                    Taken::Answer(a) => self.filter_answers.push((src, a)),
                    Taken::Refused(_) => self.counters.count(Drop::DistFiltersRefused),
                }
                Ok(())
            }
            // Routes and their acknowledgements are between the controller and the
            // back-ends; an LB sees them only when the interconnection floods them.
            // Counter reports, filter answers and flow records are for the controller;
            // the back-ends sample flows, not the LBs.
            dist::Message::Routes(_)
            | dist::Message::FibAck(_)
            | dist::Message::Counters(_)
            | dist::Message::FiltersAck(_)
            | dist::Message::FlowConfig(_)
            | dist::Message::FlowRecords(_) => Ok(()),
        }
    }

    fn note(&mut self, now: Instant, e: LogEvent) {
        if self.log.len() >= 1024 {
            self.log.remove(0);
        }
        self.log.push((now, e));
    }

    fn internal_port(&self, i: u8) -> Result<(), String> {
        match self.ports.get(i as usize) {
            Some(p) if p.role == PortRole::Internal => Ok(()),
            Some(p) => Err(format!("port {i} ({}) is not internal", p.name)),
            None => Err(format!("no port {i}")),
        }
    }

    /// The LB starts hearing its ports: every back-end's hello clock starts now, and so
    /// does the wait for the other LB of a spare pair. A configured back-end starts live,
    /// and the time the ports took to open (hundreds of milliseconds on a loaded machine)
    /// must not count as hellos it failed to send; nor may it make a restarted standby
    /// think the active LB gone and take the network over at its first poll.
    pub fn start_clocks(&mut self, now: Instant) {
        for e in &mut self.table.entries {
            e.seen = now;
        }
        if let Some(s) = &mut self.spare {
            s.started = now;
        }
    }

    /// Timers: back-ends whose hellos stopped leave the table; the LB's own hellos go out.
    /// Another worker only hands its packet counts to the first.
    pub fn poll(&mut self, now: Instant, tx: &mut TxQueues) {
        if self.share.to_lead.is_some() {
            return self.hand_counts();
        }
        let mut changed = false;
        let mut downs = Vec::new();
        for e in &mut self.table.entries {
            let timeout = self
                .cfg
                .hello_timeout
                .unwrap_or_else(|| e.interval.unwrap_or(self.cfg.hello_interval).mul_f64(2.5));
            if e.live && now.saturating_duration_since(e.seen) > timeout {
                e.live = false;
                changed = true;
                self.counters.event(Event::BackendDown);
                downs.push(e.mac);
            }
        }
        if changed {
            self.table.rebuild();
            self.changed();
        }
        self.publish();
        for m in downs {
            self.note(now, LogEvent::Down(m));
        }
        self.spare_poll(now, tx);
        if now >= self.next_hello {
            self.next_hello = now + self.cfg.hello_interval;
            let h = self.hello();
            self.send_hellos(&h, tx);
        }
        if let Some(name) = self.report.due(now) {
            self.send_reports(&name, tx);
        }
        self.send_filter_answers(tx);
    }

    /// This LB's hello.
    pub fn hello(&mut self) -> dist::Repr {
        self.seq = self.seq.wrapping_add(1);
        let ports = self
            .ports
            .iter()
            .take(255)
            .map(|p| dist::HelloPort {
                mac: p.mac,
                addr: p.addr,
                prefix_len: p.prefix_len,
                role: p.role,
                vlan: p.vlan,
                speed_mbps: p.speed_mbps,
            })
            .collect();
        // The router's IPv6 addresses on the listed ports, as many as a hello holds.
        let addrs6 =
            crate::report::hello_addrs6(self.ports.iter().map(|p| p.addrs6.iter().copied()));
        let mut msg = crate::report::hello(
            dist::ElementKind::Balancer,
            self.cfg.hello_interval,
            self.group_counters().totals(),
            ports,
            addrs6,
            Some(self.hello_state()),
        );
        // Of a spare pair: its rank, and whether it is the active one (a restart that
        // resumes says so: the other, standby, must not take the network from it).
        if let (dist::Message::Hello(h), Some(s)) = (&mut msg, &self.spare) {
            h.priority = s.cfg.priority;
            h.active = s.active || s.resuming;
        }
        dist::Repr { seq: self.seq, msg }
    }

    /// What this LB's hellos say of it: its incarnation, and its balancing table (entries
    /// and Virtual-CP) as a digest the controller compares with what it sent.
    pub fn hello_state(&self) -> dist::HelloState {
        dist::HelloState {
            incarnation: self.incarnation,
            table: self.balanced,
            epoch: 0,
            version: 0,
            routes: self.table.entries.len() as u32,
            digest: self.table_digest(),
        }
    }

    /// [`dist::balance_digest`] of the table and Virtual-CP.
    pub fn table_digest(&self) -> u64 {
        dist::balance_digest(
            self.table
                .entries
                .iter()
                .map(|e| (e.mac, e.port as u8, e.weight)),
            self.cfg.virtual_cp.map(|(m, p)| (m, p as u8)),
        )
    }

    fn send_hellos(&mut self, h: &dist::Repr, tx: &mut TxQueues) {
        // The active LB of a spare pair: its hellos out of the external ports too, from
        // the shared MAC, where the standby watches them.
        if self.spare.as_ref().is_some_and(|s| s.active) {
            for (i, port) in self.ports.iter().enumerate() {
                if port.role != PortRole::External {
                    continue;
                }
                if let Ok(mut f) = h.to_frame(port.mac, MacAddr::BROADCAST) {
                    self.dist_auth.seal(&mut f);
                    let mut p = self.pool.get();
                    p.data.extend_from_slice(&f);
                    self.counters.event(Event::DistHellosSent);
                    tx.push(i as u16, p);
                }
            }
        }
        for i in self.internal_ports().collect::<Vec<_>>() {
            if let Ok(mut f) = h.to_frame(self.ports[i as usize].mac, MacAddr::BROADCAST) {
                self.dist_auth.seal(&mut f);
                let mut p = self.pool.get();
                p.data.extend_from_slice(&f);
                self.counters.event(Event::DistHellosSent);
                tx.push(i, p);
            }
        }
    }
}

/// A neighbour discovery message right behind an IPv6 header (checksum checked): its
/// source, hop limit and message.
fn parse_nd(ip: &[u8]) -> Option<(Ipv6Addr, u8, icmpv6::Repr<'static>)> {
    let p = ipv6::Packet::new_checked(ip).ok()?;
    if p.next_header() != ipv6::next_header::ICMPV6 {
        return None;
    }
    let u = p.upper().ok()?;
    if !p.verify_upper_checksum(&u) {
        return None;
    }
    let m = icmpv6::Packet::new_checked(p.payload()).ok()?;
    let r = match icmpv6::Repr::parse(&m).ok()? {
        icmpv6::Repr::NeighborSolicit { target, options } => {
            icmpv6::Repr::NeighborSolicit { target, options }
        }
        _ => return None,
    };
    Some((p.src(), p.hop_limit(), r))
}

/// Writes `mac` into the link-layer address options of the neighbor solicitation or
/// advertisement behind the IPv6 header `ip`, and its checksum again. False if the message
/// is not one.
fn set_nd_lladdr(ip: &mut [u8], mac: MacAddr) -> bool {
    let Ok(p) = ipv6::Packet::new_checked(&*ip) else {
        return false;
    };
    let (src, dst, total) = (p.src(), p.dst(), p.total_len());
    let msg_at = ipv6::HEADER_LEN;
    // Type, code, checksum, flags, target: 24 bytes, then the options.
    let mut at = msg_at + 24;
    if total < at {
        return false;
    }
    while at + 8 <= total {
        let len = ip[at + 1] as usize * 8;
        if len == 0 || at + len > total {
            return false;
        }
        if matches!(ip[at], 1 | 2) && len == 8 {
            ip[at + 2..at + 8].copy_from_slice(&mac.0);
        }
        at += len;
    }
    let msg = &mut ip[msg_at..total];
    msg[2..4].fill(0);
    let s = wire::checksum::pseudo_header6(src, dst, ipv6::next_header::ICMPV6, msg.len() as u32)
        + wire::checksum::sum(msg);
    let c = !wire::checksum::fold(s);
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    true
}

#[cfg(test)]
mod tests;
