//! DIST, the protocol that joins the elements of a multistage router (version 1).
//!
//! DIST messages travel in Ethernet frames of EtherType [`ETHERTYPE`] (0x88b5, the IEEE 802
//! "local experimental" type) on the interconnection, untagged. All integers are big-endian.
//! The format is specified in `docs/dist.md`; this module is its only implementation.
//!
//! ```text
//!  0       1       2               4                               8
//!  +-------+-------+---------------+-------------------------------+
//!  |version| type  |    length     |            sequence           |  header (8 bytes)
//!  +-------+-------+---------------+-------------------------------+
//!  |  body: `length` bytes, laid out by `type` (hello, ports, balance, virtual-cp)   ...
//! ```
//!
//! The top bit of `type` ([`auth::FLAG`]) marks a sealed message: an authentication trailer
//! follows the body ([`auth`]). Bytes after the body and trailer (Ethernet padding) are
//! ignored. A parser error says what was wrong
//! and never panics, whatever the bytes.

pub mod auth;

use crate::{be16, be32, need, put16, MacAddr, Truncated};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

mod codec;
mod filters;
mod flows;
pub use filters::{
    ack_reason, filter_chunks, filters_digest, FilterChunk, FilterInbox, FiltersAck, FiltersStatus,
    FILTERS_CHUNK, MAX_FILTERS_TEXT,
};
pub use flows::{flow_record_groups, FlowConfig, FLOW_CONFIG_LEN, FLOW_RECORDS_MAX};

/// The EtherType of DIST frames.
pub const ETHERTYPE: u16 = 0x88b5;
/// The version this module speaks.
pub const VERSION: u8 = 1;
pub const HEADER_LEN: usize = 8;

/// Message types.
pub mod kind {
    pub const HELLO: u8 = 1;
    pub const PORTS: u8 = 2;
    pub const BALANCE: u8 = 3;
    pub const VIRTUAL_CP: u8 = 4;
    pub const ROUTES: u8 = 5;
    pub const FIB_ACK: u8 = 6;
    pub const COUNTERS: u8 = 7;
    pub const FILTERS: u8 = 8;
    pub const FILTERS_ACK: u8 = 9;
    pub const FLOW_CONFIG: u8 = 10;
    pub const FLOW_RECORDS: u8 = 11;
}

/// Bytes of one port in a hello.
pub const HELLO_PORT_LEN: usize = 18;
/// Bytes of one IPv6 port address in a hello (after the ports).
pub const HELLO_ADDR6_LEN: usize = 18;
/// Bytes of a hello before its ports.
pub const HELLO_FIXED_LEN: usize = 32;
/// Hello flag (byte 5 of the body): the sending controller is the active one.
pub const HELLO_ACTIVE: u8 = 0x01;
/// Hello flag: a state block ([`HELLO_STATE_LEN`] bytes: the sender's incarnation and the
/// table it holds) follows the IPv6 addresses.
pub const HELLO_STATE: u8 = 0x02;
/// Hello flag (with [`HELLO_STATE`]): the sender holds a table a controller gave it in
/// this incarnation (a back-end: a whole snapshot applied; a standby controller: its
/// mirror; an LB: a balancing table). LBs under a controller give flows only to
/// back-ends that set it.
pub const HELLO_TABLE: u8 = 0x04;
/// Bytes of a hello's state block.
pub const HELLO_STATE_LEN: usize = 32;
/// Bytes of one entry of a ports message.
pub const PORT_CONFIG_LEN: usize = 10;
/// Bytes of one entry of a balance message.
pub const BALANCE_ENTRY_LEN: usize = 10;
/// Bytes of a balance message before its entries.
pub const BALANCE_FIXED_LEN: usize = 4;
/// Bytes of a virtual-cp message.
pub const VIRTUAL_CP_LEN: usize = 8;

/// Flag of a balance message: empty the table before adding the entries.
pub const BALANCE_FLUSH: u8 = 0x01;
/// Bytes of a routes message before its entries.
pub const ROUTES_FIXED_LEN: usize = 16;
/// Bytes of an IPv4 route entry before its gateways.
pub const ROUTE_ENTRY_FIXED_LEN: usize = 6;
/// Bytes of an IPv6 route entry before its gateways.
pub const ROUTE_ENTRY6_FIXED_LEN: usize = 18;
/// Bit of a route entry's gateway-count byte: an IPv6 entry (16-byte prefix and gateways).
pub const ROUTE_IPV6: u8 = 0x80;
/// Most gateways one route entry carries (an ECMP group).
pub const MAX_GATEWAYS: usize = 16;
/// Flag of a routes message: a part of a snapshot (the whole table), not a delta.
pub const ROUTES_SNAPSHOT: u8 = 0x01;
/// Flag of a routes message: the last part of a snapshot.
pub const ROUTES_LAST: u8 = 0x02;
/// Bytes of a fib-ack message.
pub const FIB_ACK_LEN: usize = 44;
/// Bytes of a fib-ack message without the sender's incarnation (read as incarnation 0).
pub const FIB_ACK_LEN_V0: usize = 36;
/// The longest name (element, port or counter) a counters message carries.
pub const MAX_NAME: usize = 64;
/// Kinds of named counts in a counters message.
pub const COUNT_DROP: u8 = 1;
pub const COUNT_EVENT: u8 = 2;
/// Flag of a port in a counters message: it faces the outside of the router.
pub const PORT_EXTERNAL: u8 = 0x01;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    Truncated(Truncated),
    /// A version other than [`VERSION`].
    BadVersion(u8),
    /// A message type this version does not define.
    UnknownType(u8),
    /// The body is shorter or longer than its own counts say.
    BadLength {
        kind: u8,
        length: usize,
    },
    /// A field holds a value the format does not allow.
    BadField {
        field: &'static str,
        value: u32,
    },
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated(t) => write!(f, "dist: {t}"),
            Error::BadVersion(v) => write!(f, "dist: version {v}, this element speaks {VERSION}"),
            Error::UnknownType(t) => write!(f, "dist: unknown message type {t}"),
            Error::BadLength { kind, length } => {
                write!(
                    f,
                    "dist: message type {kind}: body of {length} bytes does not match its counts"
                )
            }
            Error::BadField { field, value } => write!(f, "dist: {field} = {value} is not allowed"),
        }
    }
}

/// What a port is to the router: facing the outside, or the interconnection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum PortRole {
    Internal,
    External,
}

impl PortRole {
    fn code(self) -> u8 {
        match self {
            PortRole::Internal => 0,
            PortRole::External => 1,
        }
    }

    fn from_code(c: u8) -> Result<PortRole, Error> {
        match c {
            0 => Ok(PortRole::Internal),
            1 => Ok(PortRole::External),
            v => Err(Error::BadField {
                field: "role",
                value: v as u32,
            }),
        }
    }
}

/// What kind of element sent a hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum ElementKind {
    Balancer,
    Forwarder,
    /// The Virtual-CP (`tessera controller`).
    Controller,
}

impl ElementKind {
    fn code(self) -> u8 {
        match self {
            ElementKind::Balancer => 1,
            ElementKind::Forwarder => 2,
            ElementKind::Controller => 3,
        }
    }
}

/// One port as a hello advertises it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct HelloPort {
    pub mac: MacAddr,
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
    pub role: PortRole,
    /// 802.1Q VLAN id of the port (a sub-interface, or an LB's external port); 0 for none.
    #[cfg_attr(feature = "serde", serde(default))]
    pub vlan: u16,
    /// Link speed in Mbit/s; 0 when unknown.
    #[cfg_attr(feature = "serde", serde(default))]
    pub speed_mbps: u32,
}

/// An IPv6 address of one of the ports a hello lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct HelloAddr6 {
    /// The port's index in the hello's port list.
    pub port: u8,
    pub addr: Ipv6Addr,
    pub prefix_len: u8,
}

/// The periodic "I am alive" of an element, with its ports and traffic counters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct Hello {
    pub element: ElementKind,
    /// Milliseconds between this element's hellos (receivers derive timeouts from it).
    pub interval_ms: u16,
    #[cfg_attr(feature = "serde", serde(default))]
    pub rx_packets: u64,
    #[cfg_attr(feature = "serde", serde(default))]
    pub tx_packets: u64,
    #[cfg_attr(feature = "serde", serde(default))]
    pub dropped: u64,
    /// A controller's election priority (higher wins; 0 from other elements).
    #[cfg_attr(feature = "serde", serde(default))]
    pub priority: u8,
    /// A controller that is the active one (docs/dist.md, "Controller election").
    #[cfg_attr(feature = "serde", serde(default))]
    pub active: bool,
    #[cfg_attr(feature = "serde", serde(default))]
    pub ports: Vec<HelloPort>,
    /// The ports' IPv6 addresses (an LB's external ports: the router's addresses there).
    #[cfg_attr(feature = "serde", serde(default))]
    pub addrs6: Vec<HelloAddr6>,
    /// Which process sends it and what table it holds (docs/dist.md, "Incarnations").
    #[cfg_attr(feature = "serde", serde(default))]
    pub state: Option<HelloState>,
}

/// The state block of a hello: the sender's incarnation and the table it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct HelloState {
    /// A number the element's process chose at its start ([`new_incarnation`]): a new one
    /// means a new process, whose tables start empty.
    pub incarnation: u64,
    /// It holds a table a controller gave it in this incarnation ([`HELLO_TABLE`]).
    #[cfg_attr(feature = "serde", serde(default))]
    pub table: bool,
    /// A back-end's or standby's distributed table: its epoch and version (0 for an LB).
    #[cfg_attr(feature = "serde", serde(default))]
    pub epoch: u32,
    #[cfg_attr(feature = "serde", serde(default))]
    pub version: u32,
    /// Routes held (an LB: balancing-table entries).
    #[cfg_attr(feature = "serde", serde(default))]
    pub routes: u32,
    /// [`table_digest`] of the routes held (an LB: [`balance_digest`] of its table).
    #[cfg_attr(feature = "serde", serde(default))]
    pub digest: u64,
}

/// A new incarnation number for this process: non-zero, and different at every start
/// (the clock's nanoseconds, the process id and a counter, mixed).
pub fn new_incarnation() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    let v = mix(mix(t ^ ((std::process::id() as u64) << 32)) ^ n);
    v.max(1)
}

/// The digest of an LB's balancing table and Virtual-CP, as its hello carries it: the XOR
/// over the entries of `mix(mac << 16 | port << 8 | 1) ^ weight`, mixed once more, and
/// of `mix(mac << 16 | port << 8 | 2)` for the Virtual-CP (independent of order).
pub fn balance_digest(
    entries: impl IntoIterator<Item = (MacAddr, u8, u16)>,
    virtual_cp: Option<(MacAddr, u8)>,
) -> u64 {
    let key = |m: MacAddr, port: u8, kind: u64| {
        let mut v = 0u64;
        for b in m.0 {
            v = v << 8 | b as u64;
        }
        v << 16 | (port as u64) << 8 | kind
    };
    let mut d = 0;
    for (m, port, weight) in entries {
        d ^= mix(mix(key(m, port, 1)) ^ weight as u64);
    }
    if let Some((m, port)) = virtual_cp {
        d ^= mix(key(m, port, 2));
    }
    d
}

/// Configuration of one port of the receiving element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct PortConfig {
    /// The port's index in the receiving element's configuration (0-based).
    pub index: u8,
    pub role: PortRole,
    /// VLAN id of an external port on the interconnection (1..4094); 0 for internal ports.
    #[cfg_attr(feature = "serde", serde(default))]
    pub vlan: u16,
    /// The router's address on an external port; 0.0.0.0/0 for none.
    #[cfg_attr(feature = "serde", serde(default = "unspecified"))]
    pub addr: Ipv4Addr,
    #[cfg_attr(feature = "serde", serde(default))]
    pub prefix_len: u8,
}

#[cfg(feature = "serde")]
fn unspecified() -> Ipv4Addr {
    Ipv4Addr::UNSPECIFIED
}

/// One entry of a balancing table: a back-end, the LB port that reaches it, its weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct BalanceEntry {
    pub mac: MacAddr,
    /// Index of the LB's internal port that reaches the back-end.
    pub port: u8,
    /// Relative share of traffic, 1..65535; 0 removes the entry.
    pub weight: u16,
}

/// One route of a routes message: a prefix and its gateways; no gateway withdraws it.
/// IPv4 or IPv6; the gateways are of the prefix's family.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct RouteEntry {
    pub prefix: IpAddr,
    pub len: u8,
    /// The gateways (ECMP when several, at most [`MAX_GATEWAYS`]); empty withdraws.
    #[cfg_attr(feature = "serde", serde(default))]
    pub via: Vec<IpAddr>,
}

impl RouteEntry {
    /// Bytes of the entry in a routes message.
    pub fn wire_len(&self) -> usize {
        match self.prefix {
            IpAddr::V4(_) => ROUTE_ENTRY_FIXED_LEN + 4 * self.via.len(),
            IpAddr::V6(_) => ROUTE_ENTRY6_FIXED_LEN + 16 * self.via.len(),
        }
    }
}

/// Route changes from the controller to one back-end: a delta that takes the back-end's
/// table from version `base` to `version`, or one part of a snapshot of `version`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct RouteBatch {
    /// The controller's epoch: a new controller (or a restart) opens a new one.
    pub epoch: u32,
    /// The table's version once this message is applied (the controller's change count).
    pub version: u32,
    /// A delta: the version it applies to. A snapshot part: its index, from 0.
    pub base: u32,
    #[cfg_attr(feature = "serde", serde(default))]
    pub snapshot: bool,
    /// The last part of a snapshot.
    #[cfg_attr(feature = "serde", serde(default))]
    pub last: bool,
    #[cfg_attr(feature = "serde", serde(default))]
    pub routes: Vec<RouteEntry>,
}

/// A back-end's state of its distributed table, sent to the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct FibAck {
    pub epoch: u32,
    /// The highest version applied.
    pub version: u32,
    /// The epoch and version of the snapshot being received, if one is.
    #[cfg_attr(feature = "serde", serde(default))]
    pub snap_epoch: u32,
    #[cfg_attr(feature = "serde", serde(default))]
    pub snap_version: u32,
    /// Parts of that snapshot received so far (0 when none is under way).
    #[cfg_attr(feature = "serde", serde(default))]
    pub parts: u32,
    /// Distributed routes held (the table the digest covers).
    #[cfg_attr(feature = "serde", serde(default))]
    pub routes: u32,
    /// Of those, routes the back-end could not install: a gateway on none of its networks.
    #[cfg_attr(feature = "serde", serde(default))]
    pub unresolved: u32,
    /// [`table_digest`] of the routes held.
    #[cfg_attr(feature = "serde", serde(default))]
    pub digest: u64,
    /// The sender's incarnation ([`HelloState::incarnation`]; 0 from an element that
    /// predates it).
    #[cfg_attr(feature = "serde", serde(default))]
    pub incarnation: u64,
}

/// splitmix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The digest of one IPv4 route: a 64-bit mix of its prefix (host bits cleared), length
/// and gateways (in ascending order, without duplicates).
pub fn route_digest(prefix: Ipv4Addr, len: u8, via: &[Ipv4Addr]) -> u64 {
    let mask = if len == 0 {
        0
    } else {
        u32::MAX << (32 - len.min(32))
    };
    let mut h = mix(((u32::from(prefix) & mask) as u64) << 8 | len as u64);
    for g in via {
        h = mix(h ^ u32::from(*g) as u64);
    }
    h
}

/// The digest of one IPv6 route: as [`route_digest`], each 128-bit address mixed in as
/// its high then its low 64 bits, the length with bit 8 set (so that no IPv6 route
/// shares the first step of an IPv4 one).
pub fn route_digest6(prefix: Ipv6Addr, len: u8, via: &[Ipv6Addr]) -> u64 {
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len.min(128) as u32)
    };
    let wide = |h: u64, a: u128| mix(mix(h ^ (a >> 64) as u64) ^ a as u64);
    let mut h = wide(mix(0x100 | len as u64), u128::from(prefix) & mask);
    for g in via {
        h = wide(h, u128::from(*g));
    }
    h
}

/// The digest of a route of either family: [`route_digest`] or [`route_digest6`]
/// (gateways of the other family are left out; a route never has them).
pub fn route_digest_any(prefix: IpAddr, len: u8, via: &[IpAddr]) -> u64 {
    match prefix {
        IpAddr::V4(p) => {
            let v: Vec<Ipv4Addr> = via.iter().filter_map(|g| v4(*g)).collect();
            route_digest(p, len, &v)
        }
        IpAddr::V6(p) => {
            let v: Vec<Ipv6Addr> = via.iter().filter_map(|g| v6(*g)).collect();
            route_digest6(p, len, &v)
        }
    }
}

fn v4(a: IpAddr) -> Option<Ipv4Addr> {
    match a {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(_) => None,
    }
}

fn v6(a: IpAddr) -> Option<Ipv6Addr> {
    match a {
        IpAddr::V6(a) => Some(a),
        IpAddr::V4(_) => None,
    }
}

/// The digest of a table: the XOR of its routes' digests ([`route_digest_any`]), so that
/// it does not depend on order and follows each change in O(1) (XOR out the old, XOR in
/// the new).
pub fn table_digest<'a>(routes: impl IntoIterator<Item = (IpAddr, u8, &'a [IpAddr])>) -> u64 {
    routes
        .into_iter()
        .fold(0, |d, (p, l, v)| d ^ route_digest_any(p, l, v))
}

/// The body of a DIST message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)
)]
pub enum Message {
    Hello(Hello),
    /// Sets the role, VLAN id and address of ports of the receiver.
    Ports {
        ports: Vec<PortConfig>,
    },
    /// Changes the balancing table: optionally empties it, then adds, re-weighs or (weight 0)
    /// removes the entries.
    Balance {
        #[cfg_attr(feature = "serde", serde(default))]
        flush: bool,
        entries: Vec<BalanceEntry>,
    },
    /// Names the back-end that hosts the control plane, and the LB port that reaches it.
    VirtualCp {
        mac: MacAddr,
        port: u8,
    },
    /// Route changes for one back-end, from the controller.
    Routes(RouteBatch),
    /// A back-end's acknowledgement of routes, and the digest of its table.
    FibAck(FibAck),
    /// An element's counters (absolute values), for the controller's view of the router.
    Counters(CounterReport),
    /// A chunk of the router's filters, from the controller to an LB or a back-end.
    Filters(FilterChunk),
    /// An element's answer to a whole filter set.
    FiltersAck(FiltersAck),
    /// The flow sampling the controller asks of the back-ends.
    FlowConfig(FlowConfig),
    /// Flows a back-end ended, with the router's interfaces (VLAN ids), for the
    /// controller to export.
    FlowRecords(Vec<crate::ipfix::FlowRecord>),
}

/// An element's counters: its name, its ports' traffic, and named drop and event counts.
/// Values are absolute, so a report may be split over several messages (each names
/// what it carries) and a lost one is repaired by the next.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct CounterReport {
    /// The element's name (its `[metrics] element`, or its control socket's name).
    pub element: String,
    #[cfg_attr(feature = "serde", serde(default))]
    pub ports: Vec<PortCounts>,
    /// (reason, frames dropped).
    #[cfg_attr(feature = "serde", serde(default))]
    pub drops: Vec<(String, u64)>,
    /// (event, count).
    #[cfg_attr(feature = "serde", serde(default))]
    pub events: Vec<(String, u64)>,
}

/// One port's traffic in a counters message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct PortCounts {
    pub name: String,
    #[cfg_attr(feature = "serde", serde(default))]
    pub external: bool,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
}

impl CounterReport {
    fn body_len(&self) -> usize {
        1 + self.element.len()
            + 1
            + self
                .ports
                .iter()
                .map(|p| 2 + p.name.len() + 32)
                .sum::<usize>()
            + 2
            + self
                .drops
                .iter()
                .chain(&self.events)
                .map(|(n, _)| 2 + n.len() + 8)
                .sum::<usize>()
    }
}

/// A name of a counters message: 1 to [`MAX_NAME`] printable ASCII characters.
fn check_name(field: &'static str, n: &str) -> Result<(), Error> {
    if n.is_empty() || n.len() > MAX_NAME || !n.bytes().all(|b| (0x21..0x7f).contains(&b)) {
        return Err(Error::BadField {
            field,
            value: n.len() as u32,
        });
    }
    Ok(())
}

/// Reads a length-prefixed name at `*at` of `body`, advancing `*at`.
fn take_name(
    body: &[u8],
    at: &mut usize,
    field: &'static str,
    bad: Error,
) -> Result<String, Error> {
    let n = *body.get(*at).ok_or(bad)? as usize;
    let b = body.get(*at + 1..*at + 1 + n).ok_or(bad)?;
    let s = std::str::from_utf8(b).map_err(|_| Error::BadField {
        field,
        value: n as u32,
    })?;
    check_name(field, s)?;
    *at += 1 + n;
    Ok(s.to_string())
}

fn put_name(body: &mut [u8], at: &mut usize, n: &str) {
    body[*at] = n.len() as u8;
    body[*at + 1..*at + 1 + n.len()].copy_from_slice(n.as_bytes());
    *at += 1 + n.len();
}

/// A whole DIST message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Repr {
    /// The sender's message counter (receivers may use it to spot loss; not required).
    #[cfg_attr(feature = "serde", serde(default))]
    pub seq: u32,
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub msg: Message,
}

fn ip(b: &[u8], at: usize) -> Ipv4Addr {
    Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3])
}

fn be64(b: &[u8], at: usize) -> u64 {
    (be32(b, at) as u64) << 32 | be32(b, at + 4) as u64
}

fn ip6(b: &[u8], at: usize) -> Ipv6Addr {
    let mut o = [0u8; 16];
    o.copy_from_slice(&b[at..at + 16]);
    Ipv6Addr::from(o)
}

fn prefix_len6(v: u8) -> Result<u8, Error> {
    if v > 128 {
        return Err(Error::BadField {
            field: "prefix_len",
            value: v as u32,
        });
    }
    Ok(v)
}

fn prefix_len(v: u8) -> Result<u8, Error> {
    if v > 32 {
        return Err(Error::BadField {
            field: "prefix_len",
            value: v as u32,
        });
    }
    Ok(v)
}

fn vlan(v: u16) -> Result<u16, Error> {
    if v > 4094 {
        return Err(Error::BadField {
            field: "vlan",
            value: v as u32,
        });
    }
    Ok(v)
}

impl Message {
    /// Bytes of the message's body (what follows the DIST header).
    pub fn body_len_public(&self) -> usize {
        self.body_len()
    }

    pub fn kind(&self) -> u8 {
        match self {
            Message::Hello(_) => kind::HELLO,
            Message::Ports { .. } => kind::PORTS,
            Message::Balance { .. } => kind::BALANCE,
            Message::VirtualCp { .. } => kind::VIRTUAL_CP,
            Message::Routes(_) => kind::ROUTES,
            Message::FibAck(_) => kind::FIB_ACK,
            Message::Counters(_) => kind::COUNTERS,
            Message::Filters(_) => kind::FILTERS,
            Message::FiltersAck(_) => kind::FILTERS_ACK,
            Message::FlowConfig(_) => kind::FLOW_CONFIG,
            Message::FlowRecords(_) => kind::FLOW_RECORDS,
        }
    }

    /// The name used in counters and JSON.
    pub fn name(&self) -> &'static str {
        match self {
            Message::Hello(_) => "hello",
            Message::Ports { .. } => "ports",
            Message::Balance { .. } => "balance",
            Message::VirtualCp { .. } => "virtual-cp",
            Message::Routes(_) => "routes",
            Message::FibAck(_) => "fib-ack",
            Message::Counters(_) => "counters",
            Message::Filters(_) => "filters",
            Message::FiltersAck(_) => "filters-ack",
            Message::FlowConfig(_) => "flow-config",
            Message::FlowRecords(_) => "flow-records",
        }
    }

    fn body_len(&self) -> usize {
        match self {
            Message::Hello(h) => {
                HELLO_FIXED_LEN
                    + h.ports.len() * HELLO_PORT_LEN
                    + h.addrs6.len() * HELLO_ADDR6_LEN
                    + if h.state.is_some() {
                        HELLO_STATE_LEN
                    } else {
                        0
                    }
            }
            Message::Ports { ports } => 1 + ports.len() * PORT_CONFIG_LEN,
            Message::Balance { entries, .. } => {
                BALANCE_FIXED_LEN + entries.len() * BALANCE_ENTRY_LEN
            }
            Message::VirtualCp { .. } => VIRTUAL_CP_LEN,
            Message::Routes(b) => {
                ROUTES_FIXED_LEN + b.routes.iter().map(RouteEntry::wire_len).sum::<usize>()
            }
            Message::FibAck(_) => FIB_ACK_LEN,
            Message::Counters(c) => c.body_len(),
            Message::Filters(c) => filters::FILTERS_FIXED_LEN + c.data.len(),
            Message::FiltersAck(a) => filters::FILTERS_ACK_FIXED_LEN + a.reason.len(),
            Message::FlowConfig(_) => FLOW_CONFIG_LEN,
            Message::FlowRecords(rs) => flows::records_len(rs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn mac(i: u8) -> MacAddr {
        MacAddr([2, 0, 0, 0, 0, i])
    }

    fn samples() -> Vec<Repr> {
        vec![
            Repr {
                seq: 7,
                msg: Message::Hello(Hello {
                    element: ElementKind::Forwarder,
                    interval_ms: 100,
                    rx_packets: 1 << 40,
                    tx_packets: 3,
                    dropped: 4,
                    priority: 0,
                    active: false,
                    ports: vec![HelloPort {
                        mac: mac(1),
                        addr: Ipv4Addr::new(10, 1, 0, 1),
                        prefix_len: 24,
                        role: PortRole::External,
                        vlan: 10,
                        speed_mbps: 10_000,
                    }],
                    addrs6: vec![HelloAddr6 {
                        port: 0,
                        addr: "2001:db8:1::1".parse().unwrap(),
                        prefix_len: 64,
                    }],
                    state: None,
                }),
            },
            Repr {
                seq: 0,
                msg: Message::Ports {
                    ports: vec![PortConfig {
                        index: 1,
                        role: PortRole::Internal,
                        vlan: 0,
                        addr: Ipv4Addr::UNSPECIFIED,
                        prefix_len: 0,
                    }],
                },
            },
            Repr {
                seq: u32::MAX,
                msg: Message::Balance {
                    flush: true,
                    entries: vec![
                        BalanceEntry {
                            mac: mac(2),
                            port: 1,
                            weight: 2,
                        },
                        BalanceEntry {
                            mac: mac(3),
                            port: 1,
                            weight: 0,
                        },
                    ],
                },
            },
            Repr {
                seq: 1,
                msg: Message::VirtualCp {
                    mac: mac(9),
                    port: 1,
                },
            },
            Repr {
                seq: 2,
                msg: Message::Routes(RouteBatch {
                    epoch: 3,
                    version: 12,
                    base: 10,
                    snapshot: false,
                    last: false,
                    routes: vec![
                        RouteEntry {
                            prefix: Ipv4Addr::new(198, 51, 100, 0).into(),
                            len: 24,
                            via: vec![
                                Ipv4Addr::new(10, 1, 0, 2).into(),
                                Ipv4Addr::new(10, 2, 0, 2).into(),
                            ],
                        },
                        RouteEntry {
                            prefix: Ipv4Addr::new(192, 0, 2, 0).into(),
                            len: 24,
                            via: vec![],
                        },
                        RouteEntry {
                            prefix: "2001:db8:100::".parse().unwrap(),
                            len: 40,
                            via: vec!["2001:db8:1::2".parse().unwrap()],
                        },
                    ],
                }),
            },
            Repr {
                seq: 3,
                msg: Message::FibAck(FibAck {
                    epoch: 3,
                    version: 12,
                    snap_epoch: 4,
                    snap_version: 30,
                    parts: 2,
                    routes: 1,
                    unresolved: 0,
                    digest: 0x0123_4567_89ab_cdef,
                    incarnation: 0xfeed_f00d_0000_0001,
                }),
            },
            Repr {
                seq: 4,
                msg: Message::Hello(Hello {
                    element: ElementKind::Controller,
                    interval_ms: 100,
                    rx_packets: 0,
                    tx_packets: 0,
                    dropped: 0,
                    priority: 0,
                    active: false,
                    ports: vec![],
                    addrs6: vec![],
                    state: Some(HelloState {
                        incarnation: 0x1122_3344_5566_7788,
                        table: true,
                        epoch: 5,
                        version: 9,
                        routes: 6,
                        digest: 0xdead_beef_0000_0042,
                    }),
                }),
            },
            Repr {
                seq: 9,
                msg: Message::Counters(CounterReport {
                    element: "lba".into(),
                    ports: vec![PortCounts {
                        name: "lba-ext".into(),
                        external: true,
                        rx_packets: 10,
                        rx_bytes: 640,
                        tx_packets: 9,
                        tx_bytes: 576,
                    }],
                    drops: vec![("eth_not_our_mac".into(), 3)],
                    events: vec![("dist_received".into(), u64::MAX)],
                }),
            },
        ]
    }

    #[test]
    fn round_trips_and_layout() {
        for r in samples() {
            let f = r.to_frame(mac(1), MacAddr::BROADCAST).unwrap();
            assert!(f.len() >= 60);
            assert_eq!(&f[12..14], &[0x88, 0xb5]);
            assert_eq!(Repr::parse(&f[14..]).unwrap(), r, "{r:?}");
        }
        // The balance example of docs/dist.md, byte for byte.
        let b = &samples()[2];
        let mut buf = vec![0; b.buffer_len()];
        b.emit(&mut buf).unwrap();
        #[rustfmt::skip]
        let want = [
            1, 3, 0, 24, 0xff, 0xff, 0xff, 0xff,        // version 1, balance, 24 bytes, seq
            1, 0, 0, 2,                                 // flush, reserved, 2 entries
            2, 0, 0, 0, 0, 2, 1, 0, 0, 2,               // mac, port 1, reserved, weight 2
            2, 0, 0, 0, 0, 3, 1, 0, 0, 0,               // weight 0: remove
        ];
        assert_eq!(buf, want);
        // A hello's IPv6 addresses: their count in byte 6, after the ports (port index,
        // prefix length, address).
        let h = &samples()[0];
        let mut buf = vec![0; h.buffer_len()];
        h.emit(&mut buf).unwrap();
        assert_eq!(buf.len(), HEADER_LEN + HELLO_FIXED_LEN + 18 + 18);
        assert_eq!(buf[HEADER_LEN + 6], 1);
        let a6 = &buf[HEADER_LEN + HELLO_FIXED_LEN + 18..];
        assert_eq!(&a6[..4], &[0, 64, 0x20, 0x01]);
        assert_eq!(a6[17], 1);
    }

    #[test]
    fn hello_state_and_ack_incarnation_layout() {
        // A hello's state block follows its addresses; flags 0x02 (block) | 0x04 (table).
        let r = &samples()[6];
        let f = r.to_frame(mac(1), MacAddr::BROADCAST).unwrap();
        let body = &f[14 + HEADER_LEN..];
        assert_eq!(body[5], HELLO_STATE | HELLO_TABLE);
        assert_eq!(be16(&f, 14 + 2) as usize, HELLO_FIXED_LEN + HELLO_STATE_LEN);
        let st = &body[HELLO_FIXED_LEN..];
        assert_eq!(be64(st, 0), 0x1122_3344_5566_7788);
        assert_eq!((be32(st, 8), be32(st, 12), be32(st, 16)), (5, 9, 6));
        assert_eq!(be64(st, 24), 0xdead_beef_0000_0042);
        // Without the flag the block's bytes make the length wrong.
        let mut b = f[14..14 + HEADER_LEN + HELLO_FIXED_LEN + HELLO_STATE_LEN].to_vec();
        b[HEADER_LEN + 5] = 0;
        assert!(matches!(Repr::parse(&b), Err(Error::BadLength { .. })));
        // An acknowledgement of 36 bytes (before incarnations) reads as incarnation 0.
        let a = &samples()[5];
        let mut b = vec![0; a.buffer_len()];
        a.emit(&mut b).unwrap();
        assert_eq!(b.len(), HEADER_LEN + FIB_ACK_LEN);
        assert_eq!(be64(&b, HEADER_LEN + 36), 0xfeed_f00d_0000_0001);
        let mut old = b[..HEADER_LEN + FIB_ACK_LEN_V0].to_vec();
        old[2..4].copy_from_slice(&(FIB_ACK_LEN_V0 as u16).to_be_bytes());
        let Message::FibAck(o) = Repr::parse(&old).unwrap().msg else {
            panic!("not an ack");
        };
        let Message::FibAck(n) = &a.msg else {
            unreachable!()
        };
        assert_eq!(
            o,
            FibAck {
                incarnation: 0,
                ..*n
            }
        );
        // Incarnations differ from one call (one start) to the next; never 0.
        let (x, y) = (new_incarnation(), new_incarnation());
        assert!(x != y && x != 0 && y != 0);
        // The balancing-table digest ignores order and sees every field.
        let e = [(mac(2), 1, 3), (mac(3), 1, 1)];
        let d = balance_digest(e, Some((mac(9), 1)));
        assert_eq!(d, balance_digest([e[1], e[0]], Some((mac(9), 1))));
        assert_ne!(d, balance_digest(e, None));
        assert_ne!(d, balance_digest([(mac(2), 1, 2), e[1]], Some((mac(9), 1))));
        assert_ne!(d, balance_digest([(mac(2), 0, 3), e[1]], Some((mac(9), 1))));
    }

    #[test]
    fn rejects_what_is_wrong() {
        let good = {
            let r = &samples()[0];
            let mut b = vec![0; r.buffer_len()];
            r.emit(&mut b).unwrap();
            b
        };
        let mut b = good.clone();
        b[0] = 2;
        assert_eq!(Repr::parse(&b), Err(Error::BadVersion(2)));
        let mut b = good.clone();
        b[1] = 99;
        assert_eq!(Repr::parse(&b), Err(Error::UnknownType(99)));
        assert!(matches!(
            Repr::parse(&good[..good.len() - 1]),
            Err(Error::Truncated(_))
        ));
        let mut b = good.clone();
        b[HEADER_LEN + 1] = 2; // two ports announced, one present
        assert!(matches!(Repr::parse(&b), Err(Error::BadLength { .. })));
        let mut b = good.clone();
        b[HEADER_LEN + HELLO_FIXED_LEN + 11] = 7; // role
        assert_eq!(
            Repr::parse(&b),
            Err(Error::BadField {
                field: "role",
                value: 7
            })
        );
        let mut b = good.clone();
        b[HEADER_LEN + HELLO_FIXED_LEN + 10] = 33; // prefix length
        assert!(matches!(Repr::parse(&b), Err(Error::BadField { .. })));
        let a6 = HEADER_LEN + HELLO_FIXED_LEN + HELLO_PORT_LEN;
        let mut b = good.clone();
        b[HEADER_LEN + 6] = 2; // two IPv6 addresses announced, one present
        assert!(matches!(Repr::parse(&b), Err(Error::BadLength { .. })));
        let mut b = good.clone();
        b[a6] = 1; // the address of a port the hello does not list
        assert!(matches!(
            Repr::parse(&b),
            Err(Error::BadField {
                field: "hello address port",
                ..
            })
        ));
        let mut b = good;
        b[a6 + 1] = 129; // an IPv6 prefix length
        assert!(matches!(Repr::parse(&b), Err(Error::BadField { .. })));
        // Routes: an entry that claims more gateways than the body holds, too many
        // gateways, and bytes left over after the last entry.
        let r = &samples()[4];
        let mut good = vec![0; r.buffer_len()];
        r.emit(&mut good).unwrap();
        let first = HEADER_LEN + ROUTES_FIXED_LEN;
        let third = first + ROUTE_ENTRY_FIXED_LEN + 8 + ROUTE_ENTRY_FIXED_LEN;
        let mut b = good.clone();
        b[third + 1] = ROUTE_IPV6 | 2; // the IPv6 entry: 2 gateways, one there
        assert!(matches!(Repr::parse(&b), Err(Error::BadLength { .. })));
        let mut b = good.clone();
        b[third] = 129; // an IPv6 prefix length
        assert!(matches!(
            Repr::parse(&b),
            Err(Error::BadField {
                field: "prefix_len",
                ..
            })
        ));
        let mut b = good.clone();
        b[third] = 33; // fine for IPv6
        assert!(Repr::parse(&b).is_ok());
        // An entry whose gateways are of the other family cannot be sent.
        let mut mixed = r.clone();
        if let Message::Routes(b) = &mut mixed.msg {
            b.routes[0].via.push("2001:db8::1".parse().unwrap());
        }
        assert!(matches!(
            mixed.validate(),
            Err(Error::BadField {
                field: "gateway_family",
                ..
            })
        ));
        let mut b = good.clone();
        b[first + 1] = 17;
        assert!(matches!(
            Repr::parse(&b),
            Err(Error::BadField {
                field: "gateways",
                ..
            })
        ));
        let mut b = good.clone();
        b[HEADER_LEN + 15] = 2; // two entries announced, three present
        assert!(matches!(Repr::parse(&b), Err(Error::BadLength { .. })));
    }

    #[test]
    fn counters_names_are_checked() {
        let mut r = samples().pop().unwrap();
        let Message::Counters(c) = &mut r.msg else {
            panic!("the last sample is a counters message")
        };
        c.drops.push(("two words".into(), 1));
        assert!(matches!(
            r.validate(),
            Err(Error::BadField {
                field: "counter",
                ..
            })
        ));
        let r = samples().pop().unwrap();
        let mut b = vec![0; r.buffer_len()];
        r.emit(&mut b).unwrap();
        let mut bad = b.clone();
        bad[HEADER_LEN] = 60; // the element's name runs past the body
        assert!(Repr::parse(&bad).is_err());
        let mut bad = b.clone();
        bad[HEADER_LEN + 1] = b' '; // a space in the name
        assert!(matches!(
            Repr::parse(&bad),
            Err(Error::BadField {
                field: "element",
                ..
            })
        ));
        let mut bad = b;
        let n = bad.len();
        bad[n - 8 - 1 - 13 - 1] = 3; // the last count's kind
        assert!(matches!(
            Repr::parse(&bad),
            Err(Error::BadField {
                field: "count kind",
                ..
            })
        ));
    }

    proptest! {
        #[test]
        fn parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(r) = Repr::parse(&b) {
                let mut out = vec![0; r.buffer_len()];
                r.emit(&mut out).unwrap();
                prop_assert_eq!(Repr::parse(&out).unwrap(), r);
            }
        }

        #[test]
        fn balance_round_trips(flush: bool, seq: u32, es in proptest::collection::vec((any::<[u8; 6]>(), any::<u8>(), any::<u16>()), 0..150)) {
            let r = Repr { seq, msg: Message::Balance { flush, entries: es.iter().map(|(m, p, w)| BalanceEntry { mac: MacAddr(*m), port: *p, weight: *w }).collect() } };
            let mut out = vec![0; r.buffer_len()];
            r.emit(&mut out).unwrap();
            prop_assert_eq!(Repr::parse(&out).unwrap(), r);
        }
    }
}
