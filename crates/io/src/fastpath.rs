//! The fast path: the forwarder's common case run inside the kernel, in the program of
//! each port, before any socket sees the frame: its XDP program on AF_XDP ports, its tcx
//! ingress program on AF_PACKET ones ([`Hook`]).
//!
//! Names: each element's fast path is `<element>FastPath` here (its maps and programs:
//! [`ForwarderFastPath`], [`lb::LbFastPath`], [`axon::AxonFastPath`],
//! [`l2::SwitchFastPath`]), and `<element>Fast` in `control` (the handle the element keeps
//! it in step with: `ForwarderFast`, `LbFast`, `AxonFast`, `SwitchFast`).
//!
//! A frame takes the fast path when it is an unfragmented IPv4 packet without options, to
//! the port's own MAC, of exactly the frame's length, with a valid header checksum, a TTL
//! above 1, a source and a destination that are neither martian nor the router's own (nor
//! a connected network's broadcast address), in XDP a TCP or UDP checksum that is not left
//! to offload (in tcx the socket buffer keeps that state and takes it along), and a route
//! whose next-hop group is a single next hop on a port's interface whose MTU it fits, whose
//! neighbour is resolved. The program then rewrites the MACs, decrements the TTL with the
//! RFC 1624 checksum update the user-space path uses, counts it and redirects it out of the
//! egress port (XDP: through a device map; tcx: `bpf_redirect`).
//!
//! In XDP, 802.1Q sub-interfaces too (a back-end's external networks): a frame tagged with
//! one of the port's VLAN ids loses its tag first (the MACs move up four bytes and
//! `bpf_xdp_adjust_head` starts the frame there), runs as an untagged one, and out of a
//! sub-interface gets the egress VLAN's tag (priority 0, as user space tags); on its way to
//! user space it gets its own tag back, byte for byte. Ingress and egress may each be
//! tagged or not. In tcx a sub-interface is user space's. Every other frame goes to
//! the port's sockets (XDP: the AF_XDP socket of its queue; tcx: marked
//! [`TO_USER_SPACE_MARK`] and received again, for the packet socket, which takes only
//! marked frames), to the user-space element, which stays the one source of truth:
//! ARP, ICMP errors, options, fragments, ECMP, unresolved next hops, everything.
//!
//! In XDP, IPv6 too: a packet of exactly the frame's length whose next header is TCP, UDP
//! or ICMPv6, with a hop limit above 1, a source and a destination neither multicast,
//! link-local, in ::/8 nor the router's own, a TCP or UDP checksum not left to offload,
//! and a single-next-hop route in `fib6` out of a port whose MTU it fits, to a resolved
//! neighbour: the MACs rewritten, the hop limit decremented, out as IPv4 goes.
//!
//! Maps (one set per element, shared by its ports' programs):
//!
//! - `fib`: an array of maps with one entry, the current table: an array of u64 (`BPF_F_MMAPABLE`,
//!   written through a memory mapping) laid out as [`NH_BASE`] DIR-24-8 first-level words
//!   (four 16-bit entries each), then [`NH_SLOTS`] next-hop words, then the 256-entry groups
//!   of longer prefixes (64 words each). A 16-bit entry is a next-hop index, or `0x8000 |
//!   group`. A next-hop word is `vlan << 48 | port << 32 | gateway` (gateway 0: the
//!   destination is on the connected network; `vlan` 0: the port's untagged interface),
//!   or [`NH_SLOW`]. The control thread compiles a new table after each
//!   route change and publishes it by replacing the one entry; the kernel waits for every
//!   program that may still read the old table before the update returns, so no frame sees
//!   half a table.
//! - `neigh`: a hash of `(vlan << 16 | port) << 32 | address` to the neighbour's MAC, kept
//!   by the worker from its neighbour table (`vlan` 0: the port's untagged interface).
//! - `ports`: per port, its MAC (low 48 bits) and IP MTU (high 16 bits), then its interface
//!   index (low 32 bits; [`PORT_HANDOFF`] above them where the device takes no frames
//!   redirected in XDP and the XDP program hands them to tcx, [`crate::handoff`]), then the time (`bpf_ktime_get_ns`) after which the program forwards nothing
//!   out of it (0: none): an element that hands its fast path over to its next start
//!   ([`ForwarderFastPath::beat`]) keeps that time a few seconds ahead while it runs, so that a fast
//!   path left behind by an element that never comes back stops on its own.
//! - `tx`: a device map of the ports' interfaces.
//! - `stats`: per CPU and port, frames forwarded in (received), sent to user space, and
//!   forwarded out (sent).
//! - `fib6`: an array of maps with one entry, the current IPv6 table: Poptrie6's records
//!   ([`fib::Poptrie6::records`]: `dir`, quarters, leaves, three words each; where the
//!   leaves start in `dir`'s first record), published whole as `fib` is ([`Routes6`]).
//! - `hops6`: the IPv6 hops the leaves name: the gateway, the port, the VLAN id and flags
//!   (to user space; connected). It only grows.
//! - `neigh6`: a hash of `vlan << 16 | port` and an address to the neighbour's MAC.

pub mod acl;
pub mod axon;
pub mod count;
pub mod flows;
pub mod l2;
pub mod lb;
pub mod stats;

use crate::bpfsys::{map_create, map_delete, map_update, map_update_raw};
use crate::xsk::Hook;
use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

mod program;

mod detached;
pub use detached::{At, Detached, Verdict};

const BPF_MAP_TYPE_HASH: u32 = 1;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
const BPF_MAP_TYPE_ARRAY_OF_MAPS: u32 = 12;
const BPF_MAP_TYPE_DEVMAP: u32 = 14;

const BPF_F_MMAPABLE: u32 = 1 << 10;
const BPF_F_INNER_MAP: u32 = 1 << 12;
const XDP_PASS: i32 = 2;
/// XDP_REDIRECT, XDP_DROP.
const XDP_REDIRECT: u32 = 4;
const XDP_DROP: u32 = 1;

/// First-level words of the table (2^24 entries, four to a word).
pub const NH_BASE: u32 = 1 << 22;
/// Next-hop words (indices 0 to 0x7fff).
pub const NH_SLOTS: u32 = 1 << 15;
/// Where the groups of longer prefixes start.
pub const TBL8_BASE: u32 = NH_BASE + NH_SLOTS;
/// A next-hop word that sends the frame to user space.
pub const NH_SLOW: u64 = 1 << 63;
/// The next-hop index of destinations without a route (a slow word).
const NO_ROUTE: u16 = 0x7ffe;
/// The next-hop index of anything the fast path does not take (a slow word).
const SLOW: u16 = 0x7fff;

/// Per port and CPU: frames the fast path forwarded in, sent to user space, forwarded out,
/// then the bytes of the frames forwarded in and out (an Ethernet frame's length as the
/// program holds it when it counts: without an 802.1Q tag in the forwarder's program,
/// whose tags come off before and go on after), then the frames shed on their way to user
/// space ([`ProgramFacts::slow_path_limit`]) and their bytes, then the frames sent out
/// of the port through the hand-off to tcx ([`crate::handoff`]; counted in "forwarded out"
/// too).
pub const STATS: usize = 8;
/// In the second word of a `ports` entry (the interface index in the low 32 bits): the
/// device takes no frames redirected in XDP, and the XDP program hands those bound out of
/// it to the tcx hook ([`crate::handoff`]).
pub const PORT_HANDOFF: u64 = 1 << 32;
/// In the second word of a `ports` entry, with [`PORT_HANDOFF`] (or alone, for the tcx
/// fast path of AF_PACKET ports): the device is a veth whose peer lives in another
/// network namespace and runs no NAPI (so no XDP program: the device refuses XDP frames,
/// [`crate::egress`]), and frames handed to tcx leave by `bpf_redirect_peer`, straight
/// into the peer's ingress, not through the veth's transmit and the peer's backlog queue.
pub const PORT_PEER: u64 = 1 << 33;
/// [`ProgramFacts::slow_path_limit`]'s default: frames per second per port and receiving
/// CPU.
pub const SLOW_PATH_LIMIT: u32 = 20_000;

/// In the tcx hook, the mark of a frame left to user space: the program marks it and
/// receives it again on its port; the port's packet socket takes only frames with this
/// mark, and the program drops them when they come by again.
pub const TO_USER_SPACE_MARK: u32 = 0x7e55_0001;

/// The kernel's numbers for tcx programs' verdicts (for the test runs).
const TCX_DROP: i32 = 2;
const TCX_REDIRECT: u32 = 7;
/// `__sk_buff`'s mark's offset, and its size (for the test runs).
const SKB_MARK: i16 = 8;
const SKB_SIZE: usize = 192;
/// `struct xdp_md`'s size.
const XDP_MD_SIZE: usize = 24;

/// Where a next-hop group sends frames, as the fast path sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hop<A = Ipv4Addr> {
    /// One next hop on a port's interface: its untagged one (`vlan` 0) or the 802.1Q
    /// sub-interface `vlan` (XDP only: the tcx program leaves those to user space);
    /// `gateway` (`None`: the destination itself).
    Port {
        port: u16,
        vlan: u16,
        gateway: Option<A>,
    },
    /// Anything else (ECMP, a sub-interface whose MTU is not its port's): user space
    /// decides.
    Slow,
}

/// The maps of one element's fast path.
pub struct ForwarderFastPath {
    fib: OwnedFd,
    neigh: OwnedFd,
    /// IPv6: the routes (the kernel's longest-prefix-match trie, written under a lock of
    /// its own) and the neighbours.
    routes6: Arc<Mutex<Routes6>>,
    neigh6: OwnedFd,
    ports: OwnedFd,
    tx: OwnedFd,
    stats: OwnedFd,
    /// Per port and CPU, the token bucket of the frames it sends to user space for
    /// exceptions: credit (ns), the time of the last frame (ns).
    police: OwnedFd,
    nports: u32,
    /// Per port, its `ports` entry as made (MAC, MTU, interface index).
    port_words: Vec<[u64; 2]>,
    /// Per port, whether its device is a veth whose peer lives in another namespace
    /// ([`PORT_PEER`]).
    peers: Vec<bool>,
    /// Per port, whether its device takes frames redirected in XDP ([`ForwarderFastPath::set_egress`]).
    egress: Vec<std::sync::atomic::AtomicBool>,
    /// Whether an XDP program has been made: only then does a port's egress matter (tcx
    /// redirects socket buffers, which every device takes).
    xdp: std::sync::atomic::AtomicBool,
    /// Whether every port's tcx hook runs the hand-off ([`ForwarderFastPath::set_handoff`]).
    handoff: std::sync::atomic::AtomicBool,
    /// Every frame to user space ([`ForwarderFastPath::suspend`]).
    suspended: std::sync::atomic::AtomicBool,
    /// The time after which the programs forward nothing ([`ForwarderFastPath::beat`]; 0: none).
    deadline: std::sync::atomic::AtomicU64,
    /// The ports' interface indices, in port order.
    ifindexes: Vec<u32>,
    /// Neighbours as last written to `neigh`.
    neigh_written: HashMap<u64, u64>,
    /// IPv6 neighbours as last written to `neigh6`.
    neigh6_written: HashMap<Key6, u64>,
    /// Frames the fast path forwarded, per port, as last read (for counters).
    pub last: Vec<[u64; STATS]>,
    /// The filters' maps.
    pub acl: Mutex<acl::AclMaps>,
    /// Flow sampling's maps (docs/flows.md).
    pub flows: flows::FlowMaps,
}

/// The IPv6 routes of a fast path: the table in the layout of [`fib::Poptrie6`] (records of
/// three words: `dir`, then quarters, then leaves; [`fib::Poptrie6::records`]), rebuilt
/// after each batch of changes and published by replacing the one entry of an array of
/// maps, as IPv4's table is (a frame sees one table or the other); the values are indices
/// into `hops6`, which only grows, so that any table's values keep their meaning.
pub struct Routes6 {
    fib6: OwnedFd,
    hops: OwnedFd,
    /// Every hop written to `hops6`, by its index.
    hop_ids: HashMap<Route6, u16>,
    /// The routes: prefix to hop index.
    rib: fib::BinaryTrie6,
    nports: u32,
}

/// Hops `hops6` holds at most; the first is the one that sends frames to user space.
const HOPS6: u32 = 1 << 15;

impl Routes6 {
    fn new(nports: u32) -> io::Result<Routes6> {
        let template = filled_records(1, 3, "fib6 template", |_| {})?;
        let fib6 = map_create(
            BPF_MAP_TYPE_ARRAY_OF_MAPS,
            4,
            4,
            1,
            0,
            template.as_raw_fd(),
            "fib6",
        )?;
        let hops = map_create(BPF_MAP_TYPE_ARRAY, 4, 24, HOPS6, 0, 0, "hops6")?;
        let mut slow = [0u8; 24];
        slow[20..].copy_from_slice(&ROUTE6_SLOW.to_ne_bytes());
        map_update(&hops, &0u32, &slow)?;
        let mut r = Routes6 {
            fib6,
            hops,
            hop_ids: HashMap::from([(slow, 0)]),
            rib: fib::BinaryTrie6::new(),
            nports,
        };
        r.publish()?;
        Ok(r)
    }

    /// The index in `hops6` of `hop` (written there first if new; the slow hop when full).
    fn hop_id(&mut self, hop: Hop<Ipv6Addr>) -> io::Result<u32> {
        let mut v = [0u8; 24];
        let flags = match hop {
            Hop::Port {
                port,
                vlan,
                gateway,
            } if (port as u32) < self.nports && vlan < 4095 => {
                v[16..18].copy_from_slice(&port.to_ne_bytes());
                v[18..20].copy_from_slice(&vlan.to_ne_bytes());
                match gateway {
                    Some(g) => {
                        v[..16].copy_from_slice(&g.octets());
                        0
                    }
                    None => ROUTE6_CONNECTED,
                }
            }
            _ => ROUTE6_SLOW,
        };
        v[20..].copy_from_slice(&flags.to_ne_bytes());
        if let Some(&id) = self.hop_ids.get(&v) {
            return Ok(id as u32);
        }
        let id = self.hop_ids.len() as u32;
        if id >= HOPS6 {
            return Ok(0);
        }
        map_update(&self.hops, &id, &v)?;
        self.hop_ids.insert(v, id as u16);
        Ok(id)
    }

    /// Compiles the routes and publishes the table.
    fn publish(&mut self) -> io::Result<()> {
        let (records, _, leaves) = fib::Poptrie6::build(&self.rib).records();
        let inner = filled_records(records.len() as u32, 3, "fib6 table", |w| {
            for (r, chunk) in records.iter().zip(w.chunks_exact_mut(3)) {
                chunk.copy_from_slice(r);
            }
            // Where the leaves start, in `dir`'s first record (its other words are free).
            w[1] = leaves as u64;
        })?;
        let fd = inner.as_raw_fd() as u32;
        map_update(&self.fib6, &0u32, &fd)
            .map_err(|e| io::Error::new(e.kind(), format!("publish fib6 table: {e}")))
    }

    /// Makes `routes` (prefix, length, where it sends frames) the table's content.
    pub fn replace(
        &mut self,
        routes: impl IntoIterator<Item = (Ipv6Addr, u8, Hop<Ipv6Addr>)>,
    ) -> io::Result<()> {
        let mut rib = fib::BinaryTrie6::new();
        for (a, len, hop) in routes {
            rib.insert(fib::Prefix6::new(a, len), self.hop_id(hop)?);
        }
        self.rib = rib;
        self.publish()
    }

    /// Applies changes in order, then publishes: a route (prefix, length) is set (`Some`)
    /// or removed.
    pub fn apply(
        &mut self,
        changes: impl IntoIterator<Item = (Ipv6Addr, u8, Option<Hop<Ipv6Addr>>)>,
    ) -> io::Result<()> {
        for (a, len, hop) in changes {
            let p = fib::Prefix6::new(a, len);
            match hop {
                Some(h) => {
                    let id = self.hop_id(h)?;
                    self.rib.insert(p, id);
                }
                None => {
                    self.rib.remove(p);
                }
            }
        }
        self.publish()
    }

    /// Routes in the table.
    pub fn len(&self) -> usize {
        self.rib.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rib.is_empty()
    }
}

/// A port of the fast path: its interface, MAC and IP MTU.
#[derive(Debug, Clone)]
pub struct FastPort {
    pub ifname: String,
    pub mac: [u8; 6],
    pub mtu: u16,
}

/// What the program of one port must know besides the maps.
#[derive(Debug, Clone)]
pub struct ProgramFacts {
    /// The port's index among the element's ports.
    pub port: u32,
    pub mac: [u8; 6],
    /// Addresses the fast path never forwards from or to: the router's own and the
    /// connected networks' broadcast addresses.
    pub special: Vec<Ipv4Addr>,
    /// The VLAN ids of the port's sub-interfaces: frames tagged with one of them take the
    /// fast path too (XDP only).
    pub vlans: Vec<u16>,
    /// The element has sub-interfaces the fast path serves, on any port: next hops may
    /// carry a VLAN id. Without any, the program has none of the tagging work.
    pub tagged: bool,
    /// The fast path forwards IPv6 too (XDP only): the element has IPv6 on.
    pub ipv6: bool,
    /// The router's own global IPv6 addresses, which the fast path never forwards from or
    /// to (link-local and multicast ones it never forwards at all).
    pub special6: Vec<Ipv6Addr>,
    /// Frames per second (per receiving CPU) the program hands user space for the router
    /// itself to answer: packets to or from the router's own or a broadcast address, with a
    /// martian address or a bad header checksum, whose TTL or hop limit expires, without a
    /// route, or to a neighbour not resolved. The excess is dropped before the copy and
    /// counted ([`STATS`]'s shed frames), in bursts of a tenth of a second's worth at most,
    /// so that a flood of them costs the fast path little. Frames user space forwards (the
    /// ones the fast path does not carry: ARP and other EtherTypes, options, fragments,
    /// ECMP, too big for the egress MTU) and link-layer multicast are never shed. 0: no
    /// limit.
    pub slow_path_limit: u32,
    /// The element is a member of a star router (docs/star.md): what the program needs to
    /// send packets across the star's switch and to take them off it (XDP only).
    pub star: Option<StarFacts>,
}

/// The star header's version for IPv4 and its length (`wire::star`'s `VERSION` and
/// `HEADER_LEN`), and for IPv6 (`VERSION6`, `HEADER6_LEN`; control's tests hold them
/// equal).
pub const STAR_VERSION: u8 = 1;
pub const STAR_HEADER_LEN: usize = 12;
pub const STAR_VERSION6: u8 = 2;
pub const STAR_HEADER6_LEN: usize = 36;

/// A star member's fast path (XDP): an IPv4 or IPv6 packet whose next hop lies on
/// another member's network leaves by the internal port with the star header (version 1
/// or 2) in front, to that member; a star frame to this member on its internal port loses
/// its header and leaves by the port the header names, to the neighbour it names, with no
/// lookup and no TTL or hop-limit decrement, as user space does (`dataplane::forwarder`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StarFacts {
    /// The fast path's index of the internal port (the star's switch).
    pub internal: u32,
    /// The other members' networks, longest prefixes first: (network, mask, the member's
    /// internal MAC, its port index on the network), numbers in host order.
    pub members: Vec<(u32, u32, [u8; 6], u8)>,
    /// The IPv4 address of this port's interface (host order; 0 for none), the star
    /// header's ingress address for packets that enter here.
    pub ingress: u32,
    /// The forwarder's interface indices (as star headers name ports) of its untagged
    /// ports other than the internal one, and each one's fast-path port.
    pub ports: Vec<(u8, u32)>,
    /// The other members' IPv6 networks, longest prefixes first: (network, mask, the
    /// member's internal MAC, its port index on the network), in network order. Empty:
    /// IPv6 packets stay on this side of the switch, or go across through user space.
    pub members6: Vec<StarMember6>,
    /// The IPv6 address of this port's interface that the star header names as where a
    /// packet entered: of (network, mask, address), the first whose network holds the
    /// packet's source, else `ingress6_else` (network order; as user space chooses).
    pub ingress6: Vec<([u8; 16], [u8; 16], [u8; 16])>,
    pub ingress6_else: [u8; 16],
}

/// Another star member's IPv6 network: (network, mask, the member's internal MAC, its
/// port index on the network), addresses in network order.
pub type StarMember6 = ([u8; 16], [u8; 16], [u8; 6], u8);

/// A key of `neigh6`: `vlan << 16 | port`, then an address in network order.
type Key6 = [u8; 20];

/// A value of `hops6`: the gateway (network order), the port, the VLAN id (0: untagged)
/// and flags ([`ROUTE6_SLOW`], [`ROUTE6_CONNECTED`]), the numbers in host order.
type Route6 = [u8; 24];
/// The route's frames go to user space.
const ROUTE6_SLOW: u32 = 1;
/// The destination is on the connected network: its neighbour is the destination itself.
const ROUTE6_CONNECTED: u32 = 2;

fn key6(word: u32, a: Ipv6Addr) -> Key6 {
    let mut k = [0u8; 20];
    k[..4].copy_from_slice(&word.to_ne_bytes());
    k[4..].copy_from_slice(&a.octets());
    k
}

/// Makes `map`'s content `now`, given what was last written to it (`written`): writes what
/// changed or is new, then deletes what is gone. Each write replaces one element whole.
fn write_diff<K, V>(
    map: &OwnedFd,
    written: &mut HashMap<K, V>,
    now: HashMap<K, V>,
) -> io::Result<()>
where
    K: std::hash::Hash + Eq,
    V: PartialEq,
{
    for (k, v) in &now {
        if written.get(k) != Some(v) {
            map_update(map, k, v)?;
        }
    }
    for k in written.keys() {
        if !now.contains_key(k) {
            let _ = map_delete(map, k);
        }
    }
    *written = now;
    Ok(())
}

/// The `stats` map of a fast path of `n` ports: per CPU and port, frames taken in, left to
/// user space, sent out ([`STATS`] counters).
fn stats_map(n: u32) -> io::Result<OwnedFd> {
    map_create(
        BPF_MAP_TYPE_PERCPU_ARRAY,
        4,
        (8 * STATS) as u32,
        n.max(1),
        0,
        0,
        "stats",
    )
}

/// A device map of the interfaces `ifnames`, port `i` at key `i` (`tx ports`).
fn tx_map(ifnames: &[String]) -> io::Result<OwnedFd> {
    let n = ifnames.len() as u32;
    let tx = map_create(BPF_MAP_TYPE_DEVMAP, 4, 4, n.max(1), 0, 0, "tx ports")?;
    for (i, name) in ifnames.iter().enumerate() {
        let ifindex = crate::netdev::ifindex(name)? as u32;
        map_update(&tx, &(i as u32), &ifindex)
            .map_err(|e| io::Error::new(e.kind(), format!("{name}: device map: {e}")))?;
    }
    Ok(tx)
}

/// An XDP program that `prog` loads for a socket map, with an empty socket map of its own
/// and attached nowhere: for [`Detached::run`].
fn detached_xdp(prog: impl FnOnce(i32) -> io::Result<OwnedFd>) -> io::Result<Detached> {
    let xsk = map_create(crate::xsk::BPF_MAP_TYPE_XSKMAP, 4, 4, 1, 0, 0, "XSKMAP")?;
    Ok(Detached {
        prog: prog(xsk.as_raw_fd())?,
        at: At::Xdp,
        _xsk: Some(xsk),
    })
}

/// Now on `bpf_ktime_get_ns`'s clock (CLOCK_MONOTONIC), in nanoseconds: what the
/// programs' deadlines are written in.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) into a timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn mac_u64(m: &[u8; 6]) -> u64 {
    let mut b = [0u8; 8];
    b[..6].copy_from_slice(m);
    u64::from_le_bytes(b)
}

impl ForwarderFastPath {
    /// Creates the maps for `ports` (an empty table: everything goes to user space until
    /// [`ForwarderFastPath::publish`]).
    pub fn new(ports: &[FastPort]) -> io::Result<ForwarderFastPath> {
        let n = ports.len() as u32;
        let template = map_create(
            BPF_MAP_TYPE_ARRAY,
            4,
            8,
            TBL8_BASE,
            BPF_F_MMAPABLE | BPF_F_INNER_MAP,
            0,
            "fib template",
        )?;
        let fib = map_create(
            BPF_MAP_TYPE_ARRAY_OF_MAPS,
            4,
            4,
            1,
            0,
            template.as_raw_fd(),
            "fib",
        )?;
        drop(template);
        let neigh = map_create(BPF_MAP_TYPE_HASH, 8, 8, 65536, 0, 0, "neighbours")?;
        let routes6 = Routes6::new(n)?;
        let neigh6 = map_create(BPF_MAP_TYPE_HASH, 20, 8, 65536, 0, 0, "neighbours6")?;
        let pmap = map_create(BPF_MAP_TYPE_ARRAY, 4, 24, n.max(1), 0, 0, "ports")?;
        let tx = map_create(BPF_MAP_TYPE_DEVMAP, 4, 4, n.max(1), 0, 0, "tx ports")?;
        let stats = stats_map(n)?;
        let police = map_create(BPF_MAP_TYPE_PERCPU_ARRAY, 4, 16, n.max(1), 0, 0, "police")?;
        let mut ifindexes = Vec::with_capacity(ports.len());
        let mut port_words = Vec::with_capacity(ports.len());
        let mut peers = Vec::with_capacity(ports.len());
        for (i, p) in ports.iter().enumerate() {
            let k = i as u32;
            let ifindex = crate::netdev::ifindex(&p.ifname)? as u32;
            ifindexes.push(ifindex);
            let v = [mac_u64(&p.mac) | (p.mtu as u64) << 48, ifindex as u64];
            port_words.push(v);
            peers.push(crate::netdev::veth_peer_elsewhere(&p.ifname));
            map_update(&pmap, &k, &[v[0], v[1], 0])?;
            map_update(&tx, &k, &ifindex)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: device map: {e}", p.ifname)))?;
        }
        let mut me = ForwarderFastPath {
            fib,
            neigh,
            routes6: Arc::new(Mutex::new(routes6)),
            neigh6,
            neigh6_written: HashMap::new(),
            ports: pmap,
            tx,
            stats,
            police,
            nports: n,
            egress: (0..ports.len())
                .map(|_| std::sync::atomic::AtomicBool::new(true))
                .collect(),
            port_words,
            peers,
            xdp: std::sync::atomic::AtomicBool::new(false),
            handoff: std::sync::atomic::AtomicBool::new(false),
            suspended: std::sync::atomic::AtomicBool::new(false),
            deadline: std::sync::atomic::AtomicU64::new(0),
            ifindexes,
            neigh_written: HashMap::new(),
            last: vec![[0; STATS]; ports.len()],
            acl: Mutex::new(acl::AclMaps::new(n)?),
            flows: flows::FlowMaps::new()?,
        };
        me.publish(&[0u32; 0], &[], &[])?;
        Ok(me)
    }

    /// Compiles and publishes a table: `tbl24` and `tbl8` in the encoding of
    /// `fib::Dir24::tables` (0: no route; `v + 1`: value `v`; bit 31: a group), and `hops`,
    /// where each value (a next-hop group) sends frames. An empty `tbl24` publishes a table
    /// that sends everything to user space.
    pub fn publish(&mut self, tbl24: &[u32], tbl8: &[u32], hops: &[Hop]) -> io::Result<()> {
        let groups = (tbl8.len() / 256).min(0x7fff) as u32;
        let entries = TBL8_BASE + groups * 64;
        let inner = filled_array(entries, "fib table", |words| {
            let entry = |e: u32| -> u16 {
                if e & (1 << 31) != 0 {
                    let g = e & !(1 << 31);
                    if g < groups {
                        0x8000 | g as u16
                    } else {
                        SLOW
                    }
                } else if e == 0 {
                    NO_ROUTE
                } else if e - 1 < SLOW as u32 - 1 {
                    (e - 1) as u16
                } else {
                    SLOW
                }
            };
            // Four 16-bit entries to a word, the first in the low bits.
            let pack = |words: &mut [u64], entries: &[u32]| {
                for (w, c) in words.iter_mut().zip(entries.chunks_exact(4)) {
                    *w = c
                        .iter()
                        .rev()
                        .fold(0u64, |acc, &e| acc << 16 | entry(e) as u64);
                }
            };
            if tbl24.len() == 1 << 24 {
                pack(&mut words[..NH_BASE as usize], tbl24);
            } else {
                let w = NO_ROUTE as u64;
                words[..NH_BASE as usize].fill(w | w << 16 | w << 32 | w << 48);
            }
            for (i, w) in words[NH_BASE as usize..TBL8_BASE as usize]
                .iter_mut()
                .enumerate()
            {
                *w = match hops.get(i) {
                    Some(Hop::Port {
                        port,
                        vlan,
                        gateway,
                    }) if (*port as u32) < self.nports && *vlan < 4095 => {
                        (*vlan as u64) << 48
                            | (*port as u64) << 32
                            | gateway.map(u32::from).unwrap_or(0) as u64
                    }
                    _ => NH_SLOW,
                };
            }
            pack(&mut words[TBL8_BASE as usize..], tbl8);
        })?;
        let key = 0u32;
        let fd = inner.as_raw_fd() as u32;
        // Replacing the entry of an array of maps returns after every program that may
        // still hold the old table has finished.
        map_update(&self.fib, &key, &fd)
            .map_err(|e| io::Error::new(e.kind(), format!("publish fib table: {e}")))
    }

    /// Makes `neigh` the neighbour map's content: (port, VLAN id or 0, address, MAC) of
    /// resolved neighbours on fast-path ports. Writes only what changed.
    pub fn set_neighbours(
        &mut self,
        resolved: impl IntoIterator<Item = (u16, u16, Ipv4Addr, [u8; 6])>,
    ) -> io::Result<()> {
        let now: HashMap<u64, u64> = resolved
            .into_iter()
            .filter(|(p, v, _, _)| (*p as u32) < self.nports && *v < 4095)
            .map(|(p, v, a, m)| {
                (
                    ((v as u64) << 16 | p as u64) << 32 | u32::from(a) as u64,
                    mac_u64(&m),
                )
            })
            .collect();
        write_diff(&self.neigh, &mut self.neigh_written, now)
    }

    /// The IPv6 route table, to write apart from the rest of the fast path (a long write
    /// holds up nothing else, the neighbours' sync included).
    pub fn routes6(&self) -> Arc<Mutex<Routes6>> {
        self.routes6.clone()
    }

    /// As [`ForwarderFastPath::set_neighbours`], for IPv6.
    pub fn set_neighbours6(
        &mut self,
        resolved: impl IntoIterator<Item = (u16, u16, Ipv6Addr, [u8; 6])>,
    ) -> io::Result<()> {
        let now = resolved
            .into_iter()
            .filter(|(p, v, _, _)| (*p as u32) < self.nports && *v < 4095)
            .map(|(p, v, a, m)| (key6((v as u32) << 16 | p as u32, a), mac_u64(&m)))
            .collect();
        write_diff(&self.neigh6, &mut self.neigh6_written, now)
    }

    /// Per port, the counters summed over CPUs: forwarded in, sent to user space,
    /// forwarded out.
    pub fn stats(&self) -> Vec<[u64; STATS]> {
        (0..self.nports)
            .map(|p| percpu_sum(&self.stats, p))
            .collect()
    }

    /// Whether port `port`'s device takes frames redirected in XDP (see [`crate::egress`]).
    /// Where it does not, and an XDP program of this fast path may redirect to it, the
    /// frames bound there are handed to the tcx hook of the port they came in by, where
    /// every port runs the hand-off ([`ForwarderFastPath::set_handoff`]; its `ports` entry carries
    /// [`PORT_HANDOFF`]); else its entry carries an MTU of 0: no frame fits it, so the
    /// programs leave every frame bound there to user space, which sends it through its
    /// socket.
    pub fn set_egress(&self, port: u32, ok: bool) -> io::Result<()> {
        use std::sync::atomic::Ordering;
        if let Some(e) = self.egress.get(port as usize) {
            e.store(ok, Ordering::Relaxed);
            self.write_port(port)?;
        }
        Ok(())
    }

    /// Says whether every port's tcx ingress hook runs the hand-off ([`crate::handoff`]):
    /// only then may an XDP program hand frames to it (a frame passed with the hand-off's
    /// metadata to a hook without it would be the kernel stack's, which drops it).
    pub fn set_handoff(&self, on: bool) -> io::Result<()> {
        use std::sync::atomic::Ordering;
        if self.handoff.swap(on, Ordering::Relaxed) != on {
            for p in 0..self.nports {
                self.write_port(p)?;
            }
        }
        Ok(())
    }

    /// Whether frames bound out of each port take the fast path (false: user space sends
    /// them, as [`ForwarderFastPath::set_egress`] and [`ForwarderFastPath::suspend`] say).
    pub fn egress(&self) -> Vec<bool> {
        self.egress_modes()
            .into_iter()
            .map(|m| m != EgressMode::UserSpace)
            .collect()
    }

    /// How frames bound out of each port leave it.
    pub fn egress_modes(&self) -> Vec<EgressMode> {
        use std::sync::atomic::Ordering;
        let xdp = self.xdp.load(Ordering::Relaxed);
        let handoff = self.handoff.load(Ordering::Relaxed);
        let suspended = self.suspended.load(Ordering::Relaxed);
        self.egress
            .iter()
            .map(
                |e| match (suspended, xdp, e.load(Ordering::Relaxed), handoff) {
                    (true, ..) => EgressMode::UserSpace,
                    (false, false, ..) => EgressMode::Tcx,
                    (false, true, true, _) => EgressMode::Xdp,
                    (false, true, false, true) => EgressMode::Tcx,
                    (false, true, false, false) => EgressMode::UserSpace,
                },
            )
            .collect()
    }

    /// With `on`, the programs forward nothing: every frame goes to user space (while a
    /// capture runs, so that it sees every frame); without, they forward again.
    pub fn suspend(&self, on: bool) -> io::Result<()> {
        use std::sync::atomic::Ordering;
        if self.suspended.swap(on, Ordering::Relaxed) != on {
            for p in 0..self.nports {
                self.write_port(p)?;
            }
        }
        Ok(())
    }

    /// Whether an XDP program of this fast path was made (its ports are AF_XDP's).
    pub fn runs_xdp(&self) -> bool {
        self.xdp.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether [`ForwarderFastPath::suspend`] holds the programs.
    pub fn suspended(&self) -> bool {
        self.suspended.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn write_port(&self, port: u32) -> io::Result<()> {
        let Some(&[word, ifindex]) = self.port_words.get(port as usize) else {
            return Ok(());
        };
        let xdp = self.xdp.load(std::sync::atomic::Ordering::Relaxed);
        // Only while the peer runs no NAPI (the device refuses XDP frames): then it runs no
        // XDP program either, which a frame moved into its ingress would pass by.
        let refused = self
            .egress
            .get(port as usize)
            .is_some_and(|e| !e.load(std::sync::atomic::Ordering::Relaxed));
        let peer = match self.peers.get(port as usize) {
            Some(true) if refused => PORT_PEER,
            _ => 0,
        };
        let (word, ifindex) = match self.egress_modes().get(port as usize) {
            Some(EgressMode::UserSpace) => (word & ((1 << 48) - 1), ifindex),
            Some(EgressMode::Tcx) if xdp => (word, ifindex | PORT_HANDOFF | peer),
            Some(EgressMode::Tcx) => (word, ifindex | peer),
            _ => (word, ifindex),
        };
        let deadline = self.deadline.load(std::sync::atomic::Ordering::Relaxed);
        map_update(&self.ports, &port, &[word, ifindex, deadline])
    }

    /// The programs forward for `grace` more from now (`CLOCK_MONOTONIC`, the programs'
    /// clock), then nothing until the next beat: an element that hands its fast path over
    /// calls this every so often while it runs. A successor that takes the programs over
    /// makes maps of its own, without a deadline until it beats.
    pub fn beat(&self, grace: std::time::Duration) -> io::Result<()> {
        self.deadline.store(
            monotonic_ns() + grace.as_nanos() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        for p in 0..self.nports {
            self.write_port(p)?;
        }
        Ok(())
    }

    /// Pins the maps a successor reads (`ports`, `neigh`) in `dir` ([`crate::pin`]).
    pub fn pin(&self, dir: &std::path::Path) -> io::Result<()> {
        crate::pin::pin(&self.ports, &dir.join("ports"))?;
        crate::pin::pin(&self.neigh, &dir.join("neigh"))
    }

    /// The neighbours a predecessor's fast path pinned in `dir` (see [`ForwarderFastPath::pin`]):
    /// (interface index, VLAN id, address, MAC). Empty where there are none.
    pub fn pinned_neighbours(dir: &std::path::Path) -> Vec<(u32, u16, Ipv4Addr, [u8; 6])> {
        let (Ok(ports), Ok(neigh)) = (
            crate::pin::get(&dir.join("ports")),
            crate::pin::get(&dir.join("neigh")),
        ) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut key: Option<u64> = None;
        let mut next = 0u64;
        while crate::bpfsys::map_next_key(&neigh, key.as_ref(), &mut next) {
            key = Some(next);
            let mut mac = 0u64;
            if crate::bpfsys::map_lookup(&neigh, &next, &mut mac).is_err() {
                continue;
            }
            let port = (next >> 32) as u32 & 0xffff;
            let vlan = (next >> 48) as u16;
            let mut words = [0u64; 3];
            if crate::bpfsys::map_lookup(&ports, &port, &mut words).is_err() || words[1] == 0 {
                continue;
            }
            let m = mac.to_le_bytes();
            out.push((
                words[1] as u32,
                vlan,
                Ipv4Addr::from(next as u32),
                [m[0], m[1], m[2], m[3], m[4], m[5]],
            ));
        }
        out
    }

    /// The program of one port for `hook`, loaded (`bpf/forward.bpf.c`, sharing the
    /// element's maps): the fast path, and every other frame to the port's sockets (XDP:
    /// the socket map, by receive queue; tcx: marked and received again).
    pub fn program(&self, f: &ProgramFacts, hook: Hook) -> io::Result<OwnedFd> {
        use std::os::fd::AsFd;
        if matches!(hook, Hook::Xdp(_))
            && !self.xdp.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            for p in 0..self.nports {
                if let Err(e) = self.write_port(p) {
                    tracing::warn!(port = p, error = %e, "fast path: ports map");
                }
            }
        }
        let me = self.ifindexes.get(f.port as usize).copied().unwrap_or(0);
        let config = program::config(f, hook, me)?;
        let routes6 = self.routes6.lock().unwrap_or_else(|e| e.into_inner());
        let acl = self.acl.lock().unwrap_or_else(|e| e.into_inner());
        let mut maps = vec![
            ("fib", self.fib.as_fd()),
            ("neigh", self.neigh.as_fd()),
            ("fib6", routes6.fib6.as_fd()),
            ("hops6", routes6.hops.as_fd()),
            ("neigh6", self.neigh6.as_fd()),
            ("ports", self.ports.as_fd()),
            ("tx_ports", self.tx.as_fd()),
            ("stats", self.stats.as_fd()),
            ("police", self.police.as_fd()),
        ];
        maps.extend(acl.fds());
        maps.extend(self.flows.fds());
        program::load(&config, hook, &maps)
    }
}

/// How frames bound out of a port leave it, as `show interfaces` says (`egress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EgressMode {
    /// Redirected in XDP (through the device map).
    Xdp,
    /// Sent from the tcx hook with `bpf_redirect`: the fast path runs in tcx (AF_PACKET
    /// ports), or its XDP program hands them to tcx ([`crate::handoff`]).
    Tcx,
    /// Through user space (a capture under way, or a device that takes no XDP frames
    /// where the hand-off is not there).
    UserSpace,
}

impl EgressMode {
    pub fn as_str(self) -> &'static str {
        match self {
            EgressMode::Xdp => "xdp",
            EgressMode::Tcx => "tcx",
            EgressMode::UserSpace => "user space",
        }
    }
}

/// The entry `key` of a per-CPU array of `N` u64 counters, summed over CPUs (zeros if
/// the map cannot be read).
fn percpu_sum<const N: usize>(map: &OwnedFd, key: u32) -> [u64; N] {
    let mut v = vec![0u64; N * possible_cpus()];
    let mut s = [0u64; N];
    if crate::bpfsys::map_lookup_raw(map, &key, v.as_mut_ptr() as *mut u8).is_ok() {
        for c in v.chunks_exact(N) {
            for (a, b) in s.iter_mut().zip(c) {
                *a += b;
            }
        }
    }
    s
}

/// A new array of `entries` u64 words (`BPF_F_MMAPABLE`, fit to be the inner map of an
/// array of maps), written by `fill` through a memory mapping.
fn filled_array(entries: u32, name: &str, fill: impl FnOnce(&mut [u64])) -> io::Result<OwnedFd> {
    filled_records(entries, 1, name, fill)
}

/// As [`filled_array`], with values of `words` 64-bit words each (the slice given to
/// `fill` holds `entries * words` words, value after value).
fn filled_records(
    entries: u32,
    words: u32,
    name: &str,
    fill: impl FnOnce(&mut [u64]),
) -> io::Result<OwnedFd> {
    let inner = map_create(
        BPF_MAP_TYPE_ARRAY,
        4,
        8 * words,
        entries,
        BPF_F_MMAPABLE | BPF_F_INNER_MAP,
        0,
        name,
    )?;
    let n = entries as usize * words as usize;
    let len = (n * 8).next_multiple_of(4096);
    // SAFETY: maps the array we just created (BPF_F_MMAPABLE), read-write, shared.
    let m = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            inner.as_raw_fd(),
            0,
        )
    };
    if m == libc::MAP_FAILED {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("mmap {name}: {e}")));
    }
    // SAFETY: the mapping holds `n` u64 words (values of 8-byte multiples lie back to
    // back) and is ours until munmap below.
    fill(unsafe { std::slice::from_raw_parts_mut(m as *mut u64, n) });
    // SAFETY: m/len came from mmap above; the slice given to `fill` is gone.
    unsafe { libc::munmap(m, len) };
    Ok(inner)
}

/// CPUs the kernel sizes per-CPU maps for.
fn possible_cpus() -> usize {
    // "0-1", "0", "0-3,5"
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| {
            s.trim()
                .split(',')
                .map(|r| match r.split_once('-') {
                    Some((a, b)) => b
                        .parse::<usize>()
                        .ok()
                        .map(|b| b + 1)
                        .filter(|_| a.parse::<usize>().is_ok()),
                    None => r.parse::<usize>().ok().map(|x| x + 1),
                })
                .try_fold(0usize, |m, x| x.map(|x| m.max(x)))
        })
        .unwrap_or(1)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fast path of one port on `lo` (MAC 02:00:00:00:00:01), and its program's facts.
    fn one_port(slow_path_limit: u32) -> (ForwarderFastPath, ProgramFacts) {
        let fp = ForwarderFastPath::new(&[FastPort {
            ifname: "lo".into(),
            mac: [2, 0, 0, 0, 0, 1],
            mtu: 1500,
        }])
        .unwrap();
        let facts = ProgramFacts {
            port: 0,
            mac: [2, 0, 0, 0, 0, 1],
            special: vec![Ipv4Addr::new(10, 0, 0, 1)],
            vlans: Vec::new(),
            tagged: false,
            ipv6: true,
            special6: vec!["2001:db8::1".parse().unwrap()],
            star: None,
            slow_path_limit,
        };
        (fp, facts)
    }

    /// The program of each hook passes the verifier, and a frame the fast path cannot take
    /// (an ARP request) goes to user space; in tcx, marked, and dropped when it comes back
    /// with its mark. Needs root (BPF).
    #[test]
    fn program_loads_and_leaves_arp_to_user_space() {
        let (fp, facts) = one_port(0);
        let mut arp = vec![0xffu8; 6];
        arp.extend([2, 0, 0, 0, 0, 2, 0x08, 0x06]);
        arp.resize(60, 0);
        for at in [At::Xdp, At::Tc] {
            let d = fp.detached(&facts, at).unwrap();
            let (v, out) = d.run(&arp).unwrap();
            assert_eq!(v, Verdict::ToUserSpace, "{at:?}");
            assert_eq!(out, arp);
        }
        let d = fp.detached(&facts, At::Tc).unwrap();
        let (v, _) = d.run_marked(&arp, TO_USER_SPACE_MARK).unwrap();
        assert_eq!(v, Verdict::Drop);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(possible_cpus() >= cpus, "{} < {cpus}", possible_cpus());
    }

    /// The program passes the verifier with every list it is told at its longest (the
    /// router's addresses, VLAN ids, a star's members, ports and networks), and says so
    /// clearly when one is longer. Needs root (BPF).
    #[test]
    fn program_loads_with_its_lists_at_their_longest() {
        use program::*;
        let (fp, mut facts) = one_port(20_000);
        facts.special = (0..MAX_SPECIAL as u32).map(Ipv4Addr::from).collect();
        facts.special6 = (0..MAX_SPECIAL6 as u128).map(Ipv6Addr::from).collect();
        facts.vlans = (1..4095).collect();
        facts.tagged = true;
        for at in [At::Xdp, At::Tc] {
            fp.detached(&facts, at).unwrap();
        }
        let star = StarFacts {
            internal: 0,
            members: (0..MAX_MEMBERS as u32)
                .map(|i| (i << 8, !0xff, [2, 0, 0, 0, 0, i as u8], 1))
                .collect(),
            ingress: 0x0a00_0001,
            ports: (0..MAX_STAR_PORTS as u32).map(|i| (i as u8, 0)).collect(),
            members6: (0..MAX_MEMBERS as u128)
                .map(|i| ((i << 64).to_be_bytes(), [0xff; 16], [2, 0, 0, 0, 0, 1], 1))
                .collect(),
            ingress6: (0..MAX_INGRESS6 as u128)
                .map(|i| (i.to_be_bytes(), [0xff; 16], i.to_be_bytes()))
                .collect(),
            ingress6_else: [0; 16],
        };
        facts.vlans.clear();
        facts.tagged = false;
        facts.star = Some(star);
        for at in [At::Xdp, At::Tc] {
            fp.detached(&facts, at).unwrap();
        }
        facts.special.push(Ipv4Addr::new(10, 9, 9, 9));
        let e = fp
            .detached(&facts, At::Xdp)
            .err()
            .expect("one address too many");
        assert!(e.to_string().contains("at most 512"), "{e}");
    }

    /// Over `slow_path_limit`, frames the router would answer itself (here: TTL 1, and an
    /// IPv6 hop limit of 1) are dropped before they reach user space and counted as shed,
    /// frames and bytes; frames user space forwards (ARP here) never are. With a limit of 1
    /// a second, each CPU's bucket lets one frame through, and the test's frames all come
    /// within that second. Needs root (BPF).
    #[test]
    fn frames_over_the_slow_path_limit_are_shed_and_counted() {
        let mut ttl1 = vec![2u8, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00, 0x45, 0];
        ttl1.extend([0, 46, 0, 0, 0, 0, 1, 17, 0, 0, 10, 1, 0, 10, 10, 2, 0, 10]);
        ttl1.resize(60, 0);
        let mut hop1 = vec![
            2u8, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd, 0x60, 0, 0, 0,
        ];
        hop1.extend([0, 8, 17, 1]);
        hop1.extend("2001:db8:1::10".parse::<Ipv6Addr>().unwrap().octets());
        hop1.extend("2001:db8:2::10".parse::<Ipv6Addr>().unwrap().octets());
        hop1.resize(14 + 40 + 8, 0);
        let mut arp = vec![0xffu8; 6];
        arp.extend([2, 0, 0, 0, 0, 2, 0x08, 0x06]);
        arp.resize(60, 0);
        let cases = [(At::Xdp, &ttl1), (At::Tc, &ttl1), (At::Xdp, &hop1)];
        for (at, frame) in cases {
            let (fp, facts) = one_port(1);
            let d = fp.detached(&facts, at).unwrap();
            let (mut passed, mut shed) = (0, 0);
            for _ in 0..10 {
                match d.run(frame).unwrap().0 {
                    Verdict::ToUserSpace => passed += 1,
                    Verdict::Drop => shed += 1,
                    v => panic!("{at:?}: {v:?}"),
                }
                let (v, _) = d.run(&arp).unwrap();
                assert_eq!(v, Verdict::ToUserSpace, "{at:?}: ARP is never shed");
            }
            assert!(
                (1..=possible_cpus()).contains(&passed),
                "{at:?}: {passed} passed"
            );
            assert_eq!(passed + shed, 10);
            let st = fp.stats()[0];
            assert_eq!(st[1], passed as u64 + 10, "{at:?}: to user space");
            assert_eq!(st[5], shed as u64, "{at:?}: shed");
            assert_eq!(st[6], (shed * frame.len()) as u64, "{at:?}: shed bytes");
        }
    }
}
