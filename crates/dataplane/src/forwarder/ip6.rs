//! IPv6 forwarding (RFC 8200, RFC 4443, RFC 4861): the forwarder's path for EtherType
//! 0x86dd once [`Forwarder::enable_ipv6`] gave it addresses.
//!
//! A packet to forward is checked (version, length, a source that is not multicast),
//! must not leave its scope (link-local and multicast destinations stay on their link; a
//! link-local or unspecified source cannot be forwarded, and gets destination unreachable
//! "beyond scope of source address"), gets time exceeded at hop limit 1, destination
//! unreachable without a route, packet too big where it does not fit the outgoing link
//! (routers do not fragment IPv6), and otherwise leaves with its hop limit decremented
//! after neighbour discovery of its next hop (a bounded queue per neighbour, as for
//! ARP). Errors follow RFC 4443 2.4 (`wire::icmpv6::error_allowed`) and share the ICMP
//! error rate limit with IPv4. Addressed to the router (one of its addresses, the link-local
//! address of the receiving interface, all-nodes, all-routers or one of its
//! solicited-node groups): neighbor solicitations for its addresses are answered,
//! advertisements and solicitations teach neighbours, echo requests are answered. Router
//! advertisements are off by default; on an interface where they are turned on
//! ([`Forwarder::set_router_advertisements`]) the router advertises itself as a default
//! router with the interface's first /64 for SLAAC (RFC 4861 6.2, RFC 4862): at once,
//! then every 16 s three times, then every 200 s, and in answer to solicitations (at most
//! one every 3 s, all to all-nodes).
//!
//! The table is a [`fib::FibWriter6`] (Poptrie6, published loss-free) whose values index
//! next-hop groups (one hop for a plain route, several for ECMP: a flow, by the hash of
//! its addresses, flow label, protocol and ports, always takes the same one); connected
//! prefixes come from the interfaces' addresses.

use super::*;
use crate::neighbour::KeyHasher;
use arc_swap::ArcSwap;
use fib::{FibReader6, FibWriter6, Prefix6};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::net::Ipv6Addr;
use wire::icmpv6::{self, ErrorKind, NdOptions};
use wire::ipv6::{self, is_link_local, next_header};

mod local;

/// A next hop of an IPv6 route: the interface, and the gateway (none for a connected
/// prefix: the destination itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Hop6 {
    pub iface: u16,
    pub via: Option<Ipv6Addr>,
}

/// A neighbour being resolved or resolved.
#[derive(Debug)]
struct Neighbour6 {
    mac: Option<MacAddr>,
    /// Resolved: when it goes stale (and is resolved again). Resolving: when to solicit
    /// again.
    deadline: Instant,
    tries: u8,
    queue: Vec<Pkt>,
}

/// The forwarder's IPv6 state.
pub struct Six {
    /// Each interface's addresses with their prefix lengths (its link-local address first).
    pub addrs: Vec<Vec<(Ipv6Addr, u8)>>,
    /// The route writer: the first worker's (the others read what it publishes).
    writer: Option<FibWriter6>,
    reader: FibReader6,
    /// Next-hop groups, indexed by the table's values; append-only (a group is never
    /// removed, so a value in any snapshot keeps its meaning), and published before any
    /// table that uses a new one, so that a reader that loads the table, then the groups,
    /// finds every group it needs.
    groups: Groups6,
    neighbours: HashMap<(u16, Ipv6Addr), Neighbour6, BuildHasherDefault<KeyHasher>>,
    queued: usize,
    /// Identification of the next fragmented packet the router sends.
    frag_ident: u32,
    /// The global addresses of `addrs`, as words.
    global: Vec<u128>,
    /// Each interface's VLAN id (0: untagged): where a link-local next hop from the
    /// control plane, which names its VLAN ([`ipv6::link_local_scope`]), is. (A scope of
    /// [`ipv6::IFACE_SCOPE`] and above names the interface by its index instead.)
    vlans: Vec<u16>,
    /// Router advertisements, per interface.
    ra: Vec<Ra>,
    /// A star member's view of the other members' IPv6 networks: the internal port, and
    /// (network, that member's internal MAC, its port there), longest prefixes first.
    star: Option<(u16, Vec<StarMember6>)>,
    /// The prefixes whose routes changed since [`Forwarder::take_route_changes6`] last
    /// took them (for those who copy the routes, as the fast path); `None`: all of them
    /// (at the start, after a bulk load, or after more changes than are worth a list).
    changed: Option<Vec<Prefix6>>,
    /// The group of the default route (::/0), `u32::MAX` without one; shared by the
    /// workers. Groups made for the default route are its alone (`default_groups`), so a
    /// lookup that finds it found no route but the default.
    pub(super) default6: Arc<std::sync::atomic::AtomicU32>,
    default_groups: Vec<u32>,
}

/// At most this many changed prefixes are listed; past it, all the routes count as changed.
const CHANGES_LISTED: usize = 100_000;

/// IPv6 route changes, as [`Forwarder::take_route_changes6`] gives them.
#[derive(Debug, Clone, PartialEq)]
pub enum RouteChanges6 {
    /// Every route (prefix, next hops; several: ECMP).
    All(Vec<(Prefix6, Vec<Hop6>)>),
    /// The changed prefixes, each with its next hops now (`None`: removed).
    Some(Vec<(Prefix6, Option<Vec<Hop6>>)>),
}

impl Six {
    /// Notes that the routes of `prefixes` changed.
    fn changed(&mut self, prefixes: impl IntoIterator<Item = Prefix6>) {
        if let Some(l) = self.changed.as_mut() {
            l.extend(prefixes);
            if l.len() > CHANGES_LISTED {
                self.changed = None;
            }
        }
    }
}

/// Another star member's IPv6 network: (network, that member's internal MAC, its port
/// index there).
type StarMember6 = (Prefix6, MacAddr, u8);

/// An interface's router advertisements.
#[derive(Debug, Clone, Copy, Default)]
struct Ra {
    on: bool,
    /// When the next one is due.
    next: Option<Instant>,
    sent: u32,
    last: Option<Instant>,
}

/// RFC 4861 10: the first advertisements come faster (MAX_INITIAL_RTR_ADVERT_INTERVAL,
/// MAX_INITIAL_RTR_ADVERTISEMENTS); then one per interval between the defaults' 200 and
/// 600 s; never two multicast ones closer than MIN_DELAY_BETWEEN_RAS.
const RA_INITIAL: Duration = Duration::from_secs(16);
const RA_INITIAL_COUNT: u32 = 3;
const RA_INTERVAL: Duration = Duration::from_secs(200);
const RA_MIN_DELAY: Duration = Duration::from_secs(3);
/// AdvDefaultLifetime (3 x MaxRtrAdvInterval), AdvValidLifetime and AdvPreferredLifetime.
const RA_ROUTER_LIFETIME: u16 = 1800;
const RA_VALID: u32 = 2_592_000;
const RA_PREFERRED: u32 = 604_800;

/// Next-hop groups shared by the workers.
type Groups6 = Arc<ArcSwap<Vec<Box<[Hop6]>>>>;

/// A worker's view of the IPv6 routes for one batch: the table, then its groups.
pub(super) type Snapshot6 = (Arc<fib::Poptrie6>, Arc<Vec<Box<[Hop6]>>>);

/// Solicited-node, all-nodes and all-routers groups.
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);

impl Six {
    fn hop_id(&mut self, h: Hop6) -> u32 {
        // A single hop always finds or makes its group: the bound is on groups of several.
        self.group_id(&[h]).unwrap_or(0)
    }

    /// The value of the group of `hops` (sorted, without repeats), made if new.
    fn group_id(&mut self, hops: &[Hop6]) -> Result<u32, RouteError> {
        self.group_id_of(hops, false)
    }

    /// As [`Six::group_id`]; `default`: of the default route, a group of its own.
    fn group_id_of(&mut self, hops: &[Hop6], default: bool) -> Result<u32, RouteError> {
        let mut g = hops.to_vec();
        g.sort();
        g.dedup();
        if g.is_empty() {
            return Err(RouteError::NoNextHop);
        }
        let groups = self.groups.load();
        if let Some(i) = groups
            .iter()
            .enumerate()
            .position(|(i, x)| **x == g[..] && self.default_groups.contains(&(i as u32)) == default)
        {
            return Ok(i as u32);
        }
        if groups.len() > fib::poptrie::MAX_VALUE as usize {
            return Err(RouteError::TooManyGroups);
        }
        let mut more = Vec::clone(&groups);
        more.push(g.into_boxed_slice());
        let id = more.len() as u32 - 1;
        self.groups.store(Arc::new(more));
        if default {
            self.default_groups.push(id);
        }
        Ok(id)
    }

    /// A sibling worker's IPv6 state: the same addresses, table and groups (read only),
    /// neighbours of its own, router advertisements answered but not sent unasked (the
    /// first worker sends those).
    pub(super) fn for_worker(&self, seed: u32) -> Six {
        Six {
            addrs: self.addrs.clone(),
            writer: None,
            reader: self.reader.clone(),
            groups: self.groups.clone(),
            neighbours: HashMap::default(),
            queued: 0,
            frag_ident: seed,
            global: self.global.clone(),
            vlans: self.vlans.clone(),
            ra: self
                .ra
                .iter()
                .map(|r| Ra {
                    on: r.on,
                    ..Ra::default()
                })
                .collect(),
            star: self.star.clone(),
            changed: None,
            default6: self.default6.clone(),
            default_groups: Vec::new(),
        }
    }

    /// The star member that faces `hop`'s network, if another does.
    fn star_member(&self, iface: u16, hop: Ipv6Addr) -> Option<(MacAddr, u8)> {
        let (internal, members) = self.star.as_ref()?;
        if *internal != iface {
            return None;
        }
        members
            .iter()
            .find(|(p, _, _)| p.contains(hop))
            .map(|(_, m, port)| (*m, *port))
    }

    /// The group of the route to `prefix` through `vias`, each on a connected prefix, or
    /// link-local with the VLAN of one of our interfaces written in it (as the control
    /// plane sends them).
    /// The default route's group is its own, and noted in `default6`.
    fn group_via_of(&mut self, prefix: Prefix6, vias: &[Ipv6Addr]) -> Result<u32, RouteError> {
        let mut hops = Vec::with_capacity(vias.len());
        for &via in vias {
            let hop = match (ipv6::link_local_iface(via), ipv6::link_local_scope(via)) {
                // Scoped to an interface by its index (a forwarder's own config).
                (Some((ll, i)), _) => (i < self.vlans.len()).then_some(Hop6 {
                    iface: i as u16,
                    via: Some(ll),
                }),
                (None, Some((ll, vlan))) => {
                    self.vlans.iter().position(|&v| v == vlan).map(|i| Hop6 {
                        iface: i as u16,
                        via: Some(ll),
                    })
                }
                (None, None) => self.iface_for(via).map(|iface| Hop6 {
                    iface,
                    via: Some(via),
                }),
            };
            hops.push(hop.ok_or(RouteError::Gateway6Unreachable(via))?);
        }
        let default = prefix.len() == 0;
        let g = self.group_id_of(&hops, default)?;
        if default {
            self.default6.store(g, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(g)
    }

    /// The interface whose connected prefix holds `a` (a star member: the internal port
    /// for the other members' networks).
    fn iface_for(&self, a: Ipv6Addr) -> Option<u16> {
        self.addrs
            .iter()
            .position(|l| {
                l.iter()
                    .any(|&(x, len)| !is_link_local(x) && Prefix6::new(x, len).contains(a))
            })
            .map(|i| i as u16)
            .or_else(|| {
                let (internal, members) = self.star.as_ref()?;
                members.iter().any(|m| m.0.contains(a)).then_some(*internal)
            })
    }

    /// Our address on `iface` to send from towards `to`: one whose prefix holds `to`, else
    /// a global one, else (an unnumbered link) the router's first global address on
    /// another interface, else the link-local one (for link-local `to`, the link-local
    /// one).
    fn source_for(&self, iface: u16, to: Ipv6Addr) -> Ipv6Addr {
        let l = &self.addrs[iface as usize];
        let ll = l[0].0;
        if is_link_local(to) {
            return ll;
        }
        l.iter()
            .find(|&&(x, len)| !is_link_local(x) && Prefix6::new(x, len).contains(to))
            .or_else(|| l.iter().find(|&&(x, _)| !is_link_local(x)))
            .map(|a| a.0)
            .or_else(|| self.global.first().map(|&g| Ipv6Addr::from(g)))
            .unwrap_or(ll)
    }

    /// What [`Six::source_for`] chooses from on `iface` for a `to` that is not
    /// link-local: the first of the interface's global addresses whose prefix holds `to`,
    /// else the fallback.
    fn source_choices(&self, iface: u16) -> (Vec<(Prefix6, Ipv6Addr)>, Ipv6Addr) {
        let l = &self.addrs[iface as usize];
        let global: Vec<(Prefix6, Ipv6Addr)> = l
            .iter()
            .filter(|x| !is_link_local(x.0))
            .map(|&(x, len)| (Prefix6::new(x, len), x))
            .collect();
        let fallback = global
            .first()
            .map(|g| g.1)
            .or_else(|| self.global.first().map(|&g| Ipv6Addr::from(g)))
            .unwrap_or(l[0].0);
        (global, fallback)
    }

    /// The connected prefixes, each with its next hop's value.
    fn connected(&mut self) -> Vec<(Prefix6, u32)> {
        let mut out = Vec::new();
        for (i, l) in self.addrs.clone().iter().enumerate() {
            for &(a, len) in l.iter().filter(|x| !is_link_local(x.0)) {
                let v = self.hop_id(Hop6 {
                    iface: i as u16,
                    via: None,
                });
                out.push((Prefix6::new(a, len), v));
            }
        }
        if let Some((internal, members)) = self.star.clone() {
            let v = self.hop_id(Hop6 {
                iface: internal,
                via: None,
            });
            out.extend(members.iter().map(|m| (m.0, v)));
        }
        out
    }

    fn is_ours(&self, iface: u16, a: Ipv6Addr) -> bool {
        self.addrs[iface as usize].iter().any(|x| x.0 == a)
    }

    /// One of the router's global addresses (on any interface). Asked of every packet's
    /// source and destination: a flat list of words.
    #[inline]
    fn is_ours_anywhere(&self, a: Ipv6Addr) -> bool {
        let a = u128::from(a);
        self.global.contains(&a)
    }

    /// A group the router listens to on `iface`.
    fn listens(&self, iface: u16, g: Ipv6Addr) -> bool {
        g == ALL_NODES
            || g == ALL_ROUTERS
            || self.addrs[iface as usize]
                .iter()
                .any(|x| ipv6::solicited_node(x.0) == g)
    }
}

impl Forwarder {
    /// Turns IPv6 on: `addrs[i]` are interface `i`'s global addresses with prefix lengths
    /// (each interface also gets its EUI-64 link-local address), and their prefixes become
    /// connected routes.
    pub fn enable_ipv6(&mut self, addrs: Vec<Vec<(Ipv6Addr, u8)>>) {
        let mut all: Vec<Vec<(Ipv6Addr, u8)>> = self
            .ifaces
            .iter()
            .map(|i| vec![(ipv6::link_local_of(i.mac), 64)])
            .collect();
        for (l, extra) in all.iter_mut().zip(addrs) {
            l.extend(extra);
        }
        let (writer, reader) = FibWriter6::new(fib::BinaryTrie6::new());
        let global = all
            .iter()
            .flatten()
            .filter(|x| !is_link_local(x.0))
            .map(|x| u128::from(x.0))
            .collect();
        let six = Six {
            addrs: all,
            writer: Some(writer),
            reader,
            groups: Arc::new(ArcSwap::from_pointee(Vec::new())),
            neighbours: HashMap::default(),
            queued: 0,
            frag_ident: 1,
            global,
            vlans: self
                .ifaces
                .iter()
                .map(|i| i.vlan.map_or(0, |v| v.id))
                .collect(),
            ra: vec![Ra::default(); self.ifaces.len()],
            star: None,
            changed: None,
            default6: Arc::new(std::sync::atomic::AtomicU32::new(u32::MAX)),
            default_groups: Vec::new(),
        };
        self.six = Some(Box::new(six));
        let _ = self.replace_routes6(Vec::new());
    }

    /// Makes this star member (after [`Forwarder::set_star`] and
    /// [`Forwarder::enable_ipv6`]) reach the other members' IPv6 networks (network, that
    /// member's internal MAC, its port index there; this member's own are skipped) through
    /// the internal port, as connected: packets to them cross the switch with an IPv6 star
    /// header ([`wire::star::Header6`]). Takes effect at the next load of the IPv6 routes.
    pub fn set_star6(&mut self, members: &[(Prefix6, MacAddr, u8)]) {
        let Some(internal) = self.star.as_ref().map(|s| s.internal) else {
            return;
        };
        let own = self.ifaces.get(internal as usize).map(|i| i.mac);
        let Some(six) = self.six.as_mut() else {
            return;
        };
        let mut m: Vec<(Prefix6, MacAddr, u8)> = members
            .iter()
            .copied()
            .filter(|(_, mac, _)| Some(*mac) != own)
            .collect();
        m.sort_by_key(|(p, _, _)| std::cmp::Reverse(p.len()));
        six.star = Some((internal, m));
    }

    /// The IPv6 MTU of the path out of `port`: the interface's, less the IPv6 star header
    /// on a star's internal port.
    fn out_mtu6(&self, port: u16) -> usize {
        let mtu = self.ifaces[port as usize].mtu;
        match &self.star {
            Some(s) if s.internal == port => mtu.saturating_sub(wire::star::HEADER6_LEN),
            _ => mtu,
        }
    }

    /// An IPv6 packet another forwarder of the star looked up: out of the port and to the
    /// neighbour its header names, with no lookup and no hop-limit decrement here; too big
    /// for that port, packet too big from the address where it entered the router.
    pub(super) fn star_input6(&mut self, mut p: Pkt, now: Instant, tx: &mut TxQueues) {
        let Ok(h) = wire::star::Header6::parse(&p.data[ETH..]) else {
            return self.drop_pkt(p, Drop::StarMalformed);
        };
        let port = h.port as u16;
        let internal = self.star.as_ref().map_or(u16::MAX, |s| s.internal);
        if port as usize >= self.ifaces.len() || port == internal || self.six.is_none() {
            return self.drop_pkt(p, Drop::StarMalformed);
        }
        p.data.remove_at(ETH, wire::star::HEADER6_LEN);
        let Ok(ip) = ipv6::Packet::new_checked(&p.data[ETH..]) else {
            return self.drop_pkt(p, Drop::StarMalformed);
        };
        let total = ip.total_len();
        p.data.truncate(ETH + total);
        self.counters.event(Event::StarReceived);
        // The egress port's acl_out (as for IPv4, star_input).
        match self.filter_out(&p.data[ETH..], true, port, p.data.len()) {
            super::filter::Verdict::Pass => {}
            super::filter::Verdict::Drop(d) => return self.drop_pkt(p, d),
            super::filter::Verdict::Reject => {
                let e = ErrorKind::Unreachable(icmpv6::unreachable::ADMIN);
                let in_if = p.meta.iface;
                self.icmp6_error_from(&p.data[ETH..], in_if, Some(h.ingress), e, now, tx);
                return self.drop_pkt(p, Drop::AclReject);
            }
        }
        let mtu = self.ifaces[port as usize].mtu;
        if total > mtu {
            let e = ErrorKind::PacketTooBig(mtu as u32);
            let in_if = p.meta.iface;
            self.icmp6_error_from(&p.data[ETH..], in_if, Some(h.ingress), e, now, tx);
            return self.drop_pkt(p, Drop::Ip6TooBig);
        }
        self.neighbour_output6(p, port, h.next_hop, now, tx);
    }

    /// Hands a looked-up IPv6 packet to the star's forwarder that faces `hop`'s network.
    fn star_output6(&mut self, p: Pkt, member: (MacAddr, u8), hop: Ipv6Addr, tx: &mut TxQueues) {
        let src =
            ipv6::Packet::new_checked(&p.data[ETH..]).map_or(Ipv6Addr::UNSPECIFIED, |ip| ip.src());
        let ingress = self
            .six
            .as_ref()
            .map_or(Ipv6Addr::UNSPECIFIED, |s| s.source_for(p.meta.iface, src));
        let h = wire::star::Header6 {
            port: member.1,
            next_hop: hop,
            ingress,
        };
        self.star_send(p, member.0, &h.to_bytes(), tx);
    }

    /// Replaces the IPv6 routes with `routes` (prefix, gateways in connected prefixes;
    /// several make an ECMP route), compiled from scratch and published at once: a bulk
    /// load. Connected prefixes stay (and win over a route to the same prefix). Returns the
    /// prefixes in the table.
    pub fn replace_routes6(
        &mut self,
        routes: Vec<(Prefix6, Vec<Ipv6Addr>)>,
    ) -> Result<usize, RouteError> {
        // The writer waits for readers to let go of the table it reuses: this thread's
        // batch snapshot first.
        self.snap6 = None;
        let six = self.six.as_mut().ok_or(RouteError::Ipv6Off)?;
        let mut rib = fib::BinaryTrie6::new();
        six.default6
            .store(u32::MAX, std::sync::atomic::Ordering::Relaxed);
        for (p, vias) in routes {
            let v = six.group_via_of(p, &vias)?;
            rib.insert(p, v);
        }
        for (p, v) in six.connected() {
            rib.insert(p, v);
        }
        six.changed = None;
        let w = six.writer.as_mut().ok_or(RouteError::Ipv6Off)?;
        w.replace(rib);
        Ok(w.rib().len())
    }

    /// Removes an IPv6 route (never a connected prefix); true if it was there.
    pub fn remove_route6(&mut self, prefix: Prefix6) -> bool {
        self.snap6 = None;
        let Some(six) = self.six.as_mut() else {
            return false;
        };
        if six.connected().iter().any(|c| c.0 == prefix) {
            return false;
        }
        six.changed([prefix]);
        if prefix.len() == 0 {
            six.default6
                .store(u32::MAX, std::sync::atomic::Ordering::Relaxed);
        }
        six.writer.as_mut().is_some_and(|w| w.remove(prefix))
    }

    /// Applies IPv6 route changes in order (a later change of a prefix wins) in one
    /// publication: `Some` adds or replaces the route through those gateways, `None`
    /// removes it. Connected prefixes are left alone, as is a route whose gateways are on
    /// none of our networks (the route writer has checked that already). Returns the
    /// changes applied and those skipped.
    pub fn apply_routes6(
        &mut self,
        changes: Vec<(Prefix6, Option<Vec<Ipv6Addr>>)>,
    ) -> (usize, usize) {
        self.snap6 = None;
        let Some(six) = self.six.as_mut() else {
            return (0, changes.len());
        };
        let connected: Vec<Prefix6> = six.connected().into_iter().map(|c| c.0).collect();
        let mut out = Vec::with_capacity(changes.len());
        let mut skipped = 0;
        for (p, vias) in changes {
            if connected.contains(&p) {
                skipped += 1;
                continue;
            }
            if p.len() == 0 && vias.is_none() {
                six.default6
                    .store(u32::MAX, std::sync::atomic::Ordering::Relaxed);
            }
            match vias.map(|v| six.group_via_of(p, &v)).transpose() {
                Ok(v) => out.push((p, v)),
                Err(_) => skipped += 1,
            }
        }
        let n = out.len();
        six.changed(out.iter().map(|c| c.0));
        match six.writer.as_mut() {
            Some(w) => {
                w.apply(out);
                (n, skipped)
            }
            None => (0, n + skipped),
        }
    }

    /// The VLANs of our sub-interfaces, where link-local next hops can be (none with IPv6
    /// off).
    pub fn vlans6(&self) -> Vec<u16> {
        self.six.as_ref().map_or_else(Vec::new, |s| {
            s.vlans.iter().copied().filter(|&v| v != 0).collect()
        })
    }

    /// Our IPv6 networks: the prefixes of the interfaces' global addresses.
    pub fn networks6(&self) -> Vec<Prefix6> {
        self.six.as_ref().map_or_else(Vec::new, |s| {
            s.addrs
                .iter()
                .flatten()
                .filter(|x| !is_link_local(x.0))
                .map(|&(a, len)| Prefix6::new(a, len))
                .collect()
        })
    }

    /// Prefixes in the IPv6 table, connected ones included (0 with IPv6 off).
    pub fn route_count6(&self) -> usize {
        self.six
            .as_ref()
            .and_then(|s| s.writer.as_ref())
            .map_or(0, |w| w.rib().len())
    }

    /// Adds (or replaces) an IPv6 route through `vias` (several: ECMP), each in a
    /// connected prefix.
    pub fn add_route6(&mut self, prefix: Prefix6, vias: &[Ipv6Addr]) -> Result<(), RouteError> {
        self.snap6 = None;
        let six = self.six.as_mut().ok_or(RouteError::Ipv6Off)?;
        let v = six.group_via_of(prefix, vias)?;
        six.changed([prefix]);
        six.writer
            .as_mut()
            .ok_or(RouteError::Ipv6Off)?
            .insert(prefix, v);
        Ok(())
    }

    /// The next hops of `dst` (several for an ECMP route), if any route holds it.
    pub fn route6_group(&self, dst: Ipv6Addr) -> Option<Vec<Hop6>> {
        let six = self.six.as_ref()?;
        let v = six.reader.load().lookup(dst)?;
        six.groups.load().get(v as usize).map(|g| g.to_vec())
    }

    /// The next hop of `dst` (an ECMP route's first), if any route holds it.
    pub fn route6(&self, dst: Ipv6Addr) -> Option<Hop6> {
        self.route6_group(dst)?.first().copied()
    }

    /// The next hop of the packet `ip` to `dst`, on the batch's snapshot of the table
    /// (loaded once per batch, let go by `end_batch`); an ECMP route picks by the flow.
    #[inline]
    fn lookup6(&mut self, dst: Ipv6Addr, ip: &[u8]) -> Option<Hop6> {
        let six = self.six.as_ref()?;
        // The table first, then the groups (published before any table using them).
        let (t, groups) = self
            .snap6
            .get_or_insert_with(|| (six.reader.load_full(), six.groups.load_full()));
        let v = t.lookup(dst)?;
        match groups.get(v as usize)?.as_ref() {
            [one] => Some(*one),
            many => {
                Some(many[crate::routes::pick_index(many.len(), crate::routes::flow_hash6(ip))])
            }
        }
    }

    /// Turns router advertisements on for the interfaces where `on` is true (each needs a
    /// /64 among its addresses: the prefix advertised for SLAAC); the first go at `now`.
    pub fn set_router_advertisements(&mut self, on: &[bool], now: Instant) {
        let Some(six) = self.six.as_mut() else {
            return;
        };
        for (r, &on) in six.ra.iter_mut().zip(on) {
            *r = Ra {
                on,
                next: on.then_some(now),
                ..Ra::default()
            };
        }
    }

    /// Sends a router advertisement out of `iface` to all-nodes, and schedules the next.
    fn send_ra(&mut self, iface: u16, now: Instant, tx: &mut TxQueues) {
        let i = iface as usize;
        let (mac, mtu) = (self.ifaces[i].mac, self.ifaces[i].mtu);
        let Some(six) = self.six.as_mut() else {
            return;
        };
        let r = &mut six.ra[i];
        r.sent += 1;
        r.last = Some(now);
        r.next = Some(
            now + if r.sent < RA_INITIAL_COUNT {
                RA_INITIAL
            } else {
                RA_INTERVAL
            },
        );
        let l = &six.addrs[i];
        let prefix = l
            .iter()
            .find(|&&(a, len)| len == 64 && !is_link_local(a))
            .map(|&(a, len)| icmpv6::PrefixInfo {
                prefix: Prefix6::new(a, len).addr(),
                len,
                on_link: true,
                autonomous: true,
                valid_lifetime: RA_VALID,
                preferred_lifetime: RA_PREFERRED,
            });
        let ra = icmpv6::Repr::RouterAdvert {
            hop_limit: 64,
            managed: false,
            other: false,
            router_lifetime: RA_ROUTER_LIFETIME,
            reachable_time: 0,
            retrans_timer: 0,
            options: NdOptions {
                source_lladdr: Some(mac),
                mtu: Some(mtu as u32),
                prefix,
                ..NdOptions::default()
            },
        };
        let ll = l[0].0;
        self.send6(
            iface,
            ll,
            ALL_NODES,
            ipv6::multicast_mac(ALL_NODES),
            255,
            &ra,
            tx,
        );
        self.counters.event(Event::Nd6RouterAdvertsSent);
    }

    /// Whether [`Forwarder::enable_ipv6`] turned IPv6 on.
    pub fn ipv6_enabled(&self) -> bool {
        self.six.is_some()
    }

    /// Of a star member with IPv6 ([`Forwarder::set_star6`]): the other members' IPv6
    /// networks (network, that member's internal MAC, its port index there), longest
    /// prefixes first.
    pub fn star_members6(&self) -> Option<&[(Prefix6, MacAddr, u8)]> {
        self.six.as_ref()?.star.as_ref().map(|(_, m)| &m[..])
    }

    /// How interface `i` chooses the address it answers from (ICMPv6 errors, a star
    /// header's ingress) towards an address that is not link-local: (its global addresses
    /// with their prefixes, the first whose prefix holds that address), else the fallback.
    /// None with IPv6 off or no such interface.
    pub fn source_choices6(&self, i: usize) -> Option<(Vec<(Prefix6, Ipv6Addr)>, Ipv6Addr)> {
        let six = self.six.as_ref()?;
        (i < six.addrs.len()).then(|| six.source_choices(i as u16))
    }

    /// Interface `i`'s IPv6 addresses as `ADDRESS/LENGTH`, link-local first.
    pub fn addresses6(&self, i: usize) -> Option<Vec<String>> {
        let l = self.six.as_ref()?.addrs.get(i)?;
        Some(l.iter().map(|(a, n)| format!("{a}/{n}")).collect())
    }

    /// The router's global IPv6 addresses (none with IPv6 off).
    pub fn global6(&self) -> Vec<Ipv6Addr> {
        self.six.as_ref().map_or_else(Vec::new, |s| {
            s.global.iter().map(|&a| Ipv6Addr::from(a)).collect()
        })
    }

    /// The IPv6 routes that changed since the last call: all of them the first time, after
    /// a bulk load or after very many changes. `None` with IPv6 off and in a worker
    /// without the route writer. (A star member's routes to the other members' networks
    /// are connected ones out of the internal port.)
    pub fn take_route_changes6(&mut self) -> Option<RouteChanges6> {
        let six = self.six.as_mut()?;
        let w = six.writer.as_ref()?;
        let groups = six.groups.load();
        let hops = |v: u32| groups.get(v as usize).map_or_else(Vec::new, |g| g.to_vec());
        let changes = match six.changed.replace(Vec::new()) {
            None => RouteChanges6::All(
                w.rib()
                    .iter()
                    .into_iter()
                    .map(|(p, v)| (p, hops(v)))
                    .collect(),
            ),
            Some(mut l) => {
                l.sort_unstable();
                l.dedup();
                RouteChanges6::Some(
                    l.into_iter()
                        .map(|p| (p, w.rib().get(p).map(hops)))
                        .collect(),
                )
            }
        };
        Some(changes)
    }

    /// Resolved IPv6 neighbours: (interface, address, MAC).
    pub fn neighbours6(&self) -> Vec<(u16, Ipv6Addr, MacAddr)> {
        let mut v: Vec<_> = self
            .six
            .iter()
            .flat_map(|s| s.neighbours.iter())
            .filter_map(|(&(i, a), n)| n.mac.map(|m| (i, a, m)))
            .collect();
        v.sort();
        v
    }

    pub(super) fn ip6_input(
        &mut self,
        mut p: Pkt,
        l2_group: bool,
        now: Instant,
        tx: &mut TxQueues,
    ) {
        let Some(six) = self.six.as_ref() else {
            return self.drop_pkt(p, Drop::EthertypeUnsupported);
        };
        let in_if = p.meta.iface;
        let Ok(ip) = ipv6::Packet::new_checked(&p.data[ETH..]) else {
            return self.drop_pkt(p, Drop::Ip6Malformed);
        };
        let (src, dst, hops, total) = (ip.src(), ip.dst(), ip.hop_limit(), ip.total_len());
        p.data.truncate(ETH + total);
        if src.is_multicast() || six.is_ours_anywhere(src) {
            return self.drop_pkt(p, Drop::Ip6BadSource);
        }
        let v = self.filter_in(&p.data[ETH..], true, in_if, p.data.len());
        if v != super::filter::Verdict::Pass {
            return self.filtered6(p, v, now, tx);
        }
        let Some(six) = self.six.as_ref() else {
            return self.drop_pkt(p, Drop::EthertypeUnsupported);
        };
        if six.is_ours(in_if, dst)
            || six.is_ours_anywhere(dst)
            || (dst.is_multicast() && six.listens(in_if, dst))
        {
            return self.ip6_local(p, now, tx);
        }
        if dst.is_multicast() || l2_group {
            return self.drop_pkt(p, Drop::Ip6Multicast);
        }
        if is_link_local(dst) {
            return self.drop_pkt(p, Drop::Ip6BeyondScope);
        }
        if is_link_local(src) || src.is_unspecified() {
            let e = ErrorKind::Unreachable(icmpv6::unreachable::BEYOND_SCOPE);
            self.icmp6_error(&p.data[ETH..], in_if, e, now, tx);
            return self.drop_pkt(p, Drop::Ip6BeyondScope);
        }
        if hops <= 1 {
            let e = ErrorKind::TimeExceeded(icmpv6::time_exceeded::HOP_LIMIT);
            self.icmp6_error(&p.data[ETH..], in_if, e, now, tx);
            self.sample_dropped(&p, true, wire::ipfix::status::DROPPED_BAD_TTL);
            return self.drop_pkt(p, Drop::Ip6HopLimitExceeded);
        }
        let Some(hop) = self.lookup6(dst, &p.data[ETH..]) else {
            let e = ErrorKind::Unreachable(icmpv6::unreachable::NO_ROUTE);
            self.icmp6_error(&p.data[ETH..], in_if, e, now, tx);
            self.sample_dropped(&p, true, wire::ipfix::status::DROPPED_UNROUTABLE);
            return self.drop_pkt(p, Drop::Ip6NoRoute);
        };
        let v = self.filter_out(&p.data[ETH..], true, hop.iface, p.data.len());
        if v != super::filter::Verdict::Pass {
            return self.filtered6(p, v, now, tx);
        }
        let mtu = self.out_mtu6(hop.iface);
        if total > mtu {
            let e = ErrorKind::PacketTooBig(mtu as u32);
            self.icmp6_error(&p.data[ETH..], in_if, e, now, tx);
            return self.drop_pkt(p, Drop::Ip6TooBig);
        }
        // A sender that left its TCP or UDP checksum to offload (veth does): complete it,
        // as for IPv4.
        if crate::buf::complete_offloaded_checksum(&mut p) {
            self.counters.event(Event::ChecksumFilled);
        }
        p.data[ETH + 7] = hops - 1;
        self.counters.event(Event::Forwarded6);
        let next = hop.via.unwrap_or(dst);
        self.sample_forwarded(&p, true, hop.iface, next.into());
        self.neighbour_output6(p, hop.iface, next, now, tx);
    }

    /// The interfaces of the IPv6 route of `a` and whether it is the default route's.
    pub(super) fn urpf_group6(&self, a: Ipv6Addr) -> Option<(Vec<u16>, bool)> {
        let six = self.six.as_ref()?;
        let v = six.reader.load().lookup(a)?;
        let d = v == six.default6.load(std::sync::atomic::Ordering::Relaxed);
        let g = six.groups.load();
        Some((g.get(v as usize)?.iter().map(|h| h.iface).collect(), d))
    }

    /// Acts on a verdict other than pass about the IPv6 packet in `p`.
    fn filtered6(&mut self, p: Pkt, v: super::filter::Verdict, now: Instant, tx: &mut TxQueues) {
        use super::filter::Verdict;
        match v {
            Verdict::Pass => {}
            Verdict::Drop(d) => {
                let why = super::filter::flow_status(d);
                let (ip, len, at) = (&p.data[ETH..], p.data.len(), p.meta.iface);
                self.sample(ip, true, at, None, None, len, why);
                self.drop_pkt(p, d)
            }
            Verdict::Reject => {
                let e = ErrorKind::Unreachable(icmpv6::unreachable::ADMIN);
                self.icmp6_error(&p.data[ETH..], p.meta.iface, e, now, tx);
                self.drop_pkt(p, Drop::AclReject)
            }
        }
    }

    /// A fragment addressed to the router: the whole packet once reassembled. RFC 8200
    /// 4.5: a fragment with M set whose length is not a multiple of 8, or that reaches past
    /// 65,535 bytes, gets parameter problem.
    fn reassemble6(
        &mut self,
        mut p: Pkt,
        f: ipv6::Fragment,
        now: Instant,
        tx: &mut TxQueues,
    ) -> Option<Pkt> {
        let total = ipv6::Packet::new_checked(&p.data[ETH..]).ok()?.total_len();
        let len = total - (f.at + 8);
        let pointer = if f.more && !len.is_multiple_of(8) {
            Some(4)
        } else if f.offset as usize + len > 65535 {
            Some(f.at as u32 + 2)
        } else {
            None
        };
        if let Some(pointer) = pointer {
            let e = ErrorKind::ParamProblem {
                code: icmpv6::param_problem::HEADER_FIELD,
                pointer,
            };
            self.icmp6_error(&p.data[ETH..ETH + total], p.meta.iface, e, now, tx);
            self.drop_pkt(p, Drop::ReasmMalformed);
            return None;
        }
        match self.reasm.add6(&p.data[ETH..ETH + total], now) {
            Outcome::Held => {
                self.pool.put(p);
                None
            }
            Outcome::Dropped(why, n) => {
                self.counters.count_n(why, n);
                self.pool.put(p);
                None
            }
            Outcome::Complete(d, _) => {
                self.counters.event(Event::Reassembled6);
                p.data.truncate(ETH);
                p.data.extend_from_slice(&d);
                Some(p)
            }
        }
    }

    /// Time exceeded (fragment reassembly) about `first`, the first fragment of a packet
    /// that did not complete in time (RFC 8200 4.5), to its source.
    pub(super) fn reasm_timeout6(&mut self, first: &[u8], now: Instant, tx: &mut TxQueues) {
        let Ok(ip) = ipv6::Packet::new_checked(first) else {
            return;
        };
        let in_if = self.route6(ip.src()).map_or(0, |h| h.iface);
        let e = ErrorKind::TimeExceeded(icmpv6::time_exceeded::REASSEMBLY);
        self.icmp6_error(first, in_if, e, now, tx);
    }

    /// Neighbour discovery's timers: solicit again, or give up on a neighbour (its queued
    /// packets get address unreachable); forget resolved ones long stale.
    pub(super) fn poll6(&mut self, now: Instant, tx: &mut TxQueues) {
        let n = self.cfg.neighbour;
        let due: Vec<u16> = self.six.as_ref().map_or(Vec::new(), |s| {
            (0..s.ra.len())
                .filter(|&i| s.ra[i].on && s.ra[i].next.is_some_and(|t| t <= now))
                .map(|i| i as u16)
                .collect()
        });
        for i in due {
            self.send_ra(i, now, tx);
        }
        let Some(six) = self.six.as_mut() else {
            return;
        };
        let mut again = Vec::new();
        let mut failed = Vec::new();
        six.neighbours.retain(|&(iface, ip), e| {
            if now < e.deadline {
                return true;
            }
            if e.mac.is_some() {
                // Stale and unused for a reachable time more: forgotten.
                return now < e.deadline + Duration::from_secs(n.reachable_secs);
            }
            if e.tries < n.max_tries {
                e.tries += 1;
                e.deadline = now + Duration::from_millis(n.retry_ms);
                again.push((iface, ip));
                return true;
            }
            failed.append(&mut e.queue);
            false
        });
        six.queued -= failed.len();
        for (iface, ip) in again {
            self.send_ns(iface, ip, tx);
        }
        for p in failed {
            if p.data.len() > ETH {
                let e = ErrorKind::Unreachable(icmpv6::unreachable::ADDRESS);
                self.icmp6_error(&p.data[ETH..], p.meta.iface, e, now, tx);
            }
            self.drop_pkt(p, Drop::Nd6Failed);
        }
    }
}

/// Writes a reserved Ethernet header and an IPv6 packet carrying `msg` into `out`.
fn build_ip6(
    out: &mut Pkt,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    msg: &icmpv6::Repr,
) -> bool {
    out.data.clear();
    out.data
        .resize(ETH + ipv6::HEADER_LEN + msg.buffer_len(), 0);
    icmpv6::emit_packet(&mut out.data[ETH..], src, dst, hop_limit, msg).is_ok()
}
