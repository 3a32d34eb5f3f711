//! The route table: the control side of the FIB, with ECMP next-hop groups.
//!
//! A route maps a prefix to a *group* of next hops (one for a plain route, several for
//! ECMP). The LPM structure stores group ids; groups live in an append-only table that is
//! published before any FIB snapshot that uses a new group, so a reader that loads the FIB
//! and then the groups always finds the group it needs. The [`RouteTable`] is the only
//! writer and may live on another thread than the workers, which hold [`RouteReaders`].

use crate::iface::Iface;
use arc_swap::ArcSwap;
use fib::{BinaryTrie, FibReader, FibWriter, Lpm, Prefix};
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;

/// Where a route sends packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NextHop {
    pub port: u16,
    /// The gateway; `None` for a connected network (the destination is the next hop).
    pub via: Option<Ipv4Addr>,
}

pub type Groups = Arc<ArcSwap<Vec<Box<[NextHop]>>>>;

/// What a worker holds to read routes.
#[derive(Clone)]
pub struct RouteReaders {
    pub fib: FibReader,
    pub groups: Groups,
    /// The group of the default route (0.0.0.0/0), `u32::MAX` without one. That group is
    /// the default route's alone (another route through the same gateways has another),
    /// so a lookup that finds it found no route but the default (the loose reverse-path
    /// check asks).
    pub default_group: Arc<AtomicU32>,
}

/// Why a route could not be added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteError {
    /// The gateway is on none of the connected networks.
    GatewayUnreachable(Ipv4Addr),
    NoNextHop,
    TooManyGroups,
    /// An IPv6 gateway on none of the connected IPv6 networks.
    Gateway6Unreachable(std::net::Ipv6Addr),
    /// An IPv6 route to a forwarder without IPv6 addresses.
    Ipv6Off,
}

impl core::fmt::Display for RouteError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RouteError::GatewayUnreachable(a) => {
                write!(f, "gateway {a} is not on any interface's network")
            }
            RouteError::Gateway6Unreachable(a) => {
                write!(f, "gateway {a} is not on any interface's IPv6 network")
            }
            RouteError::Ipv6Off => f.write_str("no interface has an IPv6 address"),
            RouteError::NoNextHop => f.write_str("a route needs at least one next hop"),
            RouteError::TooManyGroups => write!(
                f,
                "too many distinct next-hop groups (at most {})",
                fib::poptrie::MAX_VALUE + 1
            ),
        }
    }
}

/// Connected networks of the interfaces: (prefix, port), for gateway resolution.
pub(crate) fn connected(ifaces: &[Iface]) -> Vec<(Prefix, u16)> {
    ifaces
        .iter()
        .enumerate()
        .filter_map(|(p, i)| Some((i.net()?, p as u16)))
        .collect()
}

/// The port of the longest connected network holding `gw`.
pub fn port_for_gateway(connected: &[(Prefix, u16)], gw: Ipv4Addr) -> Option<u16> {
    connected
        .iter()
        .filter(|(p, _)| p.contains(gw))
        .max_by_key(|(p, _)| p.len())
        .map(|c| c.1)
}

/// The writer of routes.
pub struct RouteTable {
    connected: Vec<(Prefix, u16)>,
    fib: FibWriter,
    groups: Vec<Box<[NextHop]>>,
    /// Groups by their hops and whether they are the default route's.
    group_ids: HashMap<(Box<[NextHop]>, bool), u32>,
    published: Groups,
    default_group: Arc<AtomicU32>,
}

impl RouteTable {
    /// A table holding the connected routes of `ifaces`.
    pub fn new(ifaces: &[Iface]) -> (RouteTable, RouteReaders) {
        let (fib, reader) = FibWriter::new(BinaryTrie::new());
        let published: Groups = Arc::new(ArcSwap::from_pointee(Vec::new()));
        let default_group = Arc::new(AtomicU32::new(u32::MAX));
        let mut t = RouteTable {
            connected: connected(ifaces),
            fib,
            groups: Vec::new(),
            group_ids: HashMap::new(),
            published: published.clone(),
            default_group: default_group.clone(),
        };
        let rib = t.connected_rib();
        t.publish_groups();
        t.fib.replace(rib);
        (
            t,
            RouteReaders {
                fib: reader,
                groups: published,
                default_group,
            },
        )
    }

    fn connected_rib(&mut self) -> BinaryTrie {
        let mut rib = BinaryTrie::new();
        for (p, port) in self.connected.clone() {
            if let Ok(g) = self.group(&[NextHop { port, via: None }], p.is_default()) {
                rib.insert(p, g);
            }
        }
        rib
    }

    /// The port whose connected network holds `gw` (the longest, if several).
    /// Every route (connected ones included) as a trie of next-hop group ids, and the
    /// groups: what a compiler of the table into another layout needs.
    pub fn snapshot(&self) -> (&BinaryTrie, &[Box<[NextHop]>]) {
        (self.fib.rib(), &self.groups)
    }

    /// Adds a network reached through `port` as if connected to it (a star router's other
    /// forwarders' networks, behind its internal port), and republishes the table.
    pub fn add_connected(&mut self, prefix: Prefix, port: u16) {
        self.connected.push((prefix, port));
        let rib = self.connected_rib();
        let mut all = self.fib.rib().clone();
        for (p, g) in rib.iter() {
            all.insert(p, g);
        }
        self.publish_groups();
        self.fib.replace(all);
    }

    /// True if `prefix` is the network of one of the interfaces.
    pub fn is_connected(&self, prefix: Prefix) -> bool {
        self.connected.iter().any(|c| c.0 == prefix)
    }

    pub fn port_for_gateway(&self, gw: Ipv4Addr) -> Option<u16> {
        port_for_gateway(&self.connected, gw)
    }

    /// The id of the group of next hops through gateways `vias` (resolved to ports).
    /// Of the route to `prefix`: the default route's group is its own.
    fn group_for(&mut self, prefix: Prefix, vias: &[Ipv4Addr]) -> Result<u32, RouteError> {
        let mut hops = Vec::with_capacity(vias.len());
        for &v in vias {
            let port = self
                .port_for_gateway(v)
                .ok_or(RouteError::GatewayUnreachable(v))?;
            hops.push(NextHop { port, via: Some(v) });
        }
        let g = self.group(&hops, prefix.is_default())?;
        if prefix.is_default() {
            self.default_group.store(g, Relaxed);
        }
        Ok(g)
    }

    fn group(&mut self, hops: &[NextHop], default: bool) -> Result<u32, RouteError> {
        if hops.is_empty() {
            return Err(RouteError::NoNextHop);
        }
        let mut key: Vec<NextHop> = hops.to_vec();
        key.sort();
        key.dedup();
        let key = (key.into_boxed_slice(), default);
        if let Some(&id) = self.group_ids.get(&key) {
            return Ok(id);
        }
        let id = self.groups.len() as u32;
        if id > fib::poptrie::MAX_VALUE {
            return Err(RouteError::TooManyGroups);
        }
        self.groups.push(key.0.clone());
        self.group_ids.insert(key, id);
        Ok(id)
    }

    /// Publishes the group table if it grew (before any FIB that uses the new groups).
    fn publish_groups(&mut self) {
        if self.published.load().len() != self.groups.len() {
            self.published.store(Arc::new(self.groups.clone()));
        }
    }

    /// Adds or replaces a route through one gateway, or several (ECMP).
    pub fn add(&mut self, prefix: Prefix, vias: &[Ipv4Addr]) -> Result<(), RouteError> {
        let g = self.group_for(prefix, vias)?;
        self.publish_groups();
        self.fib.apply([(prefix, Some(g))]);
        Ok(())
    }

    /// Applies many changes with one publication: `Some(vias)` adds or replaces, `None`
    /// withdraws.
    pub fn apply(
        &mut self,
        changes: impl IntoIterator<Item = (Prefix, Option<Vec<Ipv4Addr>>)>,
    ) -> Result<usize, RouteError> {
        let mut resolved = Vec::new();
        for (p, v) in changes {
            resolved.push((
                p,
                match v {
                    Some(vias) => Some(self.group_for(p, &vias)?),
                    None => {
                        if p.is_default() {
                            self.default_group.store(u32::MAX, Relaxed);
                        }
                        None
                    }
                },
            ));
        }
        self.publish_groups();
        Ok(self.fib.apply(resolved))
    }

    /// Withdraws a route; connected routes cannot be withdrawn. True if it was there.
    pub fn remove(&mut self, prefix: Prefix) -> bool {
        if self.connected.iter().any(|c| c.0 == prefix) {
            return false;
        }
        if prefix.is_default() {
            self.default_group.store(u32::MAX, Relaxed);
        }
        self.fib.apply([(prefix, None)]) == 1
    }

    /// Replaces every route but the connected ones (a full-table load), published at once.
    pub fn replace(
        &mut self,
        routes: impl IntoIterator<Item = (Prefix, Vec<Ipv4Addr>)>,
    ) -> Result<usize, RouteError> {
        let mut rib = BinaryTrie::new();
        let mut n = 0;
        self.default_group.store(u32::MAX, Relaxed);
        for (p, vias) in routes {
            let g = self.group_for(p, &vias)?;
            rib.insert(p, g);
            n += 1;
        }
        let conn = self.connected_rib();
        for (p, g) in conn.iter() {
            rib.insert(p, g);
        }
        self.publish_groups();
        self.fib.replace(rib);
        Ok(n)
    }

    pub fn len(&self) -> usize {
        self.fib.rib().len()
    }

    /// The group of the default route (`u32::MAX`: none); see [`RouteReaders::default_group`].
    pub fn default_group(&self) -> u32 {
        self.default_group.load(Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.fib.rib().is_empty()
    }
}

/// Picks one next hop of a group by a flow hash, stable per flow.
#[inline]
pub fn pick(group: &[NextHop], hash: u32) -> NextHop {
    group[pick_index(group.len(), hash)]
}

/// The member of a group of `n` a flow of `hash` takes.
#[inline]
pub fn pick_index(n: usize, hash: u32) -> usize {
    ((hash as u64 * n as u64) >> 32) as usize
}

/// The flow hash: source, destination, protocol and, for unfragmented TCP and UDP, the
/// ports (a 5-tuple); a 3-tuple otherwise, so every fragment of a datagram hashes alike.
#[inline]
pub fn flow_hash(ip: &[u8]) -> u32 {
    let Ok(p) = wire::ipv4::Packet::new_checked(ip) else {
        return 0;
    };
    let mut h = (u32::from(p.src()) as u64) << 32 | u32::from(p.dst()) as u64;
    h ^= (p.protocol() as u64) << 17;
    if !p.is_fragment() && matches!(p.protocol(), 6 | 17) {
        if let Some(ports) = p.payload().get(..4) {
            h ^= (u32::from_be_bytes([ports[0], ports[1], ports[2], ports[3]]) as u64)
                .rotate_left(23);
        }
    }
    h = (h ^ (h >> 31)).wrapping_mul(0x7fb5_d329_728e_a185);
    h = (h ^ (h >> 27)).wrapping_mul(0x81da_def4_bc2d_d44d);
    (h ^ (h >> 33)) as u32
}

/// The flow hash of an IPv6 packet: source, destination, flow label, next header and, for
/// TCP and UDP right behind the fixed header, the ports (RFC 6438: the flow label
/// identifies a flow as well as the 5-tuple; a packet with extension headers hashes
/// without ports, so every fragment of one hashes alike).
#[inline]
pub fn flow_hash6(ip: &[u8]) -> u32 {
    let Some(h) = ip.get(..wire::ipv6::HEADER_LEN) else {
        return 0;
    };
    let w = |i: usize| u64::from_be_bytes(h[i..i + 8].try_into().unwrap_or([0; 8]));
    let label = (u32::from_be_bytes([h[0], h[1], h[2], h[3]]) & 0xf_ffff) as u64;
    let next = h[6];
    let mut x = w(8) ^ w(16).rotate_left(21) ^ w(24).rotate_left(42) ^ w(32).rotate_left(11);
    x ^= label << 20 ^ (next as u64) << 44;
    if matches!(next, 6 | 17) {
        if let Some(ports) = ip.get(wire::ipv6::HEADER_LEN..wire::ipv6::HEADER_LEN + 4) {
            x ^= (u32::from_be_bytes([ports[0], ports[1], ports[2], ports[3]]) as u64)
                .rotate_left(23);
        }
    }
    x = (x ^ (x >> 31)).wrapping_mul(0x7fb5_d329_728e_a185);
    x = (x ^ (x >> 27)).wrapping_mul(0x81da_def4_bc2d_d44d);
    (x ^ (x >> 33)) as u32
}
