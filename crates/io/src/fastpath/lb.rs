//! The LB's fast path: the load balancer's two common cases run in the XDP program of
//! each port, before any socket sees the frame.
//!
//! - **Balance** (from an external port): an untagged, unfragmented IPv4 packet without
//!   options, of exactly the frame's length, to the port's own MAC and not to a multicast
//!   or the broadcast address, whose first matching classifier rule balances it, whose TCP
//!   or UDP checksum is not left to offload, and whose flow hash (the user-space
//!   `flow_hash`, computed alike) lands on a table slot of a back-end: its destination MAC
//!   becomes the back-end's, it is tagged with the port's VLAN id and leaves by the
//!   back-end's port.
//! - **Int-to-ext** (from an internal port): an IPv4 packet as above, tagged with the VLAN
//!   id of an external port, whose first matching rule sends it outward: the tag comes
//!   out, the source MAC becomes the external port's and it leaves there.
//!
//! IPv6 too, for TCP and UDP: an IPv6 packet of exactly the frame's length whose next
//! header is TCP or UDP (no extension header), to neither a multicast, a link-local nor
//! one of the port's own addresses, is balanced (its flow hash the user-space
//! `flow_hash6`, computed alike) or sent outward as IPv4 is, under the rules that may
//! match such a frame ([`LbProgramFacts::rules6`]).
//!
//! Every other frame (ARP, neighbour discovery and all ICMPv6, DIST, the Virtual-CP's
//! traffic, anything a rule does not balance, fragments, options, the round-robin mode) goes to the port's
//! AF_XDP socket and the user-space LB, which stays the one source of truth: the classifier
//! rules are told to the program at load (`bpf/lb.bpf.c`'s read-only global: those that
//! can match an IPv4 frame, and those that can match an IPv6 TCP or UDP one, in their
//! order), and the state the rules and the table read (the ports' roles, VLAN ids and
//! addresses, the back-ends and the table's slots) is published by the LB's first worker
//! whenever it changes, by replacing the one entry of an array of maps, as the
//! forwarder's table is.
//!
//! Maps: `lb state` (the array of maps; its table is an array of u64 words laid out as
//! [`PORT_BASE`], [`VLAN_BASE`], [`ENTRY_BASE`], [`SLOT_BASE`] say), `tx ports` (a device
//! map of the ports' interfaces), `stats` (per CPU and port: frames the fast path took in,
//! left to user space, sent out; as the forwarder's) and `lb counts` (per CPU and back-end
//! counter id: frames balanced to it, which the first worker adds to the table's counts)
//! and `lb deadline` (one word: the time, `bpf_ktime_get_ns`, after which the program
//! balances and sends out nothing, 0 for none: an LB that hands its fast path over to its
//! next start keeps it ahead while it runs, [`LbFastPath::beat`], so that a fast path left
//! behind by an LB that never comes back stops on its own).

use super::{
    detached_xdp, filled_array, mac_u64, percpu_sum, stats_map, tx_map, Detached,
    BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_ARRAY_OF_MAPS, BPF_MAP_TYPE_PERCPU_ARRAY, STATS,
};
use crate::bpfsys::{map_create, map_update};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// Word 0 of the state: the table's slot count (0: nothing is balanced here).
/// Then two words per port from here: `role << 60 | vlan << 48 | MAC`, and its IPv4
/// address (host order).
pub const PORT_BASE: u32 = 1;
/// Ports the fast path serves (an LB with more leaves everything to user space).
pub const MAX_PORTS: usize = 64;
/// VLAN id -> external port, four 16-bit entries to a word (`0xffff`: none).
pub const VLAN_BASE: u32 = PORT_BASE + 2 * MAX_PORTS as u32;
/// Per back-end (the table's entry index): `1 << 63 | id << 56 | port << 48 | MAC`, or 0.
pub const ENTRY_BASE: u32 = VLAN_BASE + 4096 / 4;
/// Back-ends the fast path serves.
pub const MAX_ENTRIES: usize = 4096;
/// Per port: 0 where frames leave it redirected in XDP, or `1 << 32 | ifindex` where its
/// device takes none and they go through the hand-off to tcx ([`crate::handoff`]).
pub const HANDOFF_BASE: u32 = ENTRY_BASE + MAX_ENTRIES as u32;
/// The table's slots (entry indices), four 16-bit entries to a word.
pub const SLOT_BASE: u32 = HANDOFF_BASE + MAX_PORTS as u32;
/// Counter ids for back-ends (`lb counts` entries).
pub const MAX_IDS: usize = 128;

const ROLE_EXTERNAL: u64 = 1;
const ROLE_INTERNAL: u64 = 2;

/// What a classifier rule does with an IPv4 frame, as the fast path sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LbVerdict {
    /// From an external port: balance it.
    Balance,
    /// From an internal port: out of the external port of its VLAN.
    IntToExt,
    /// Anything else: user space.
    Slow,
}

/// A classifier rule that may match an IPv4 frame: every field that is set must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbRule {
    /// From an external port (else from an internal one).
    pub external: bool,
    pub protocol: Option<u8>,
    /// Matched against the source and the destination port of TCP and UDP.
    pub port: Option<u16>,
    pub to_router: Option<bool>,
    pub verdict: LbVerdict,
}

/// One port as the published state describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbPortState {
    pub mac: [u8; 6],
    pub external: bool,
    pub internal: bool,
    /// External ports: the VLAN id of the port's traffic inside.
    pub vlan: u16,
    /// The router's address on the port's network (unspecified: none).
    pub addr: Ipv4Addr,
}

/// One back-end as the published state describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LbEntry {
    pub mac: [u8; 6],
    /// The LB port that reaches it.
    pub port: u16,
    /// Its counter in `lb counts` (`None`: frames to it are user space's).
    pub id: Option<u8>,
}

/// What one port's program must know besides the maps.
#[derive(Debug, Clone)]
pub struct LbProgramFacts {
    pub port: u32,
    pub mac: [u8; 6],
    /// The rules that may match an IPv4 frame, in the classifier's order.
    pub rules: Vec<LbRule>,
    /// The rules that may match an IPv6 TCP or UDP frame, in the classifier's order.
    pub rules6: Vec<LbRule>,
    /// The router's IPv6 addresses on the port (its link-local one included): frames to
    /// them are user space's.
    pub addrs6: Vec<Ipv6Addr>,
}

/// The maps of one LB's fast path.
pub struct LbFastPath {
    state: OwnedFd,
    tx: OwnedFd,
    stats: OwnedFd,
    counts: OwnedFd,
    deadline: OwnedFd,
    nports: u32,
    /// Per port, whether its device takes frames redirected in XDP (see
    /// [`LbFastPath::set_egress`]).
    egress: Vec<std::sync::atomic::AtomicBool>,
    /// Bumped at each change of `egress` or `suspended`: the state must be published again.
    egress_version: std::sync::atomic::AtomicU64,
    /// Every frame to user space ([`LbFastPath::suspend`]).
    suspended: std::sync::atomic::AtomicBool,
    /// Whether every port's tcx hook runs the hand-off ([`LbFastPath::set_handoff`]).
    handoff: std::sync::atomic::AtomicBool,
    /// The ports' interface indexes, in port order.
    ifindexes: Vec<u32>,
    /// The external ports' filters (`bpf/acl.h`; ports are the LB's interfaces, in order).
    pub acl: std::sync::Mutex<super::acl::AclMaps>,
}

impl LbFastPath {
    /// Says whether every port's tcx ingress hook runs the hand-off ([`crate::handoff`]):
    /// then a port whose device takes no frames redirected in XDP gets its frames through
    /// it (from the next [`LbFastPath::publish`]), else from user space.
    pub fn set_handoff(&self, on: bool) {
        use std::sync::atomic::Ordering;
        if self.handoff.swap(on, Ordering::Relaxed) != on {
            self.egress_version.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How frames bound out of each port leave it.
    pub fn egress_modes(&self) -> Vec<super::EgressMode> {
        use super::EgressMode;
        use std::sync::atomic::Ordering;
        let suspended = self.suspended.load(Ordering::Relaxed);
        let handoff = self.handoff.load(Ordering::Relaxed);
        self.egress
            .iter()
            .map(|e| match (suspended, e.load(Ordering::Relaxed), handoff) {
                (true, ..) => EgressMode::UserSpace,
                (false, true, _) => EgressMode::Xdp,
                (false, false, true) => EgressMode::Tcx,
                (false, false, false) => EgressMode::UserSpace,
            })
            .collect()
    }

    /// Whether port `port`'s device takes frames redirected in XDP (`crate::egress`).
    /// Where it does not, the next [`LbFastPath::publish`] leaves every frame bound there
    /// to user space: back-ends behind it have no entry, and its external VLAN none.
    pub fn set_egress(&self, port: u32, ok: bool) {
        use std::sync::atomic::Ordering;
        if let Some(e) = self.egress.get(port as usize) {
            if e.swap(ok, Ordering::Relaxed) != ok {
                self.egress_version.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Per port, whether frames may leave by it in the fast path.
    pub fn egress(&self) -> Vec<bool> {
        self.egress_modes()
            .into_iter()
            .map(|m| m != super::EgressMode::UserSpace)
            .collect()
    }

    /// With `on`, the next [`LbFastPath::publish`] leaves every frame to user space (while
    /// a capture runs, so that it sees every frame); without, the fast path works again.
    pub fn suspend(&self, on: bool) {
        use std::sync::atomic::Ordering;
        if self.suspended.swap(on, Ordering::Relaxed) != on {
            self.egress_version.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether [`LbFastPath::suspend`] holds the programs.
    pub fn suspended(&self) -> bool {
        self.suspended.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Changes whenever [`LbFastPath::set_egress`] changes a port.
    pub fn egress_version(&self) -> u64 {
        self.egress_version
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Creates the maps for the ports whose interfaces are `ifnames` (an empty state:
    /// everything goes to user space until [`LbFastPath::publish`]).
    pub fn new(ifnames: &[String]) -> io::Result<LbFastPath> {
        let n = ifnames.len() as u32;
        let template = filled_array(1, "lb template", |_| {})?;
        let state = map_create(
            BPF_MAP_TYPE_ARRAY_OF_MAPS,
            4,
            4,
            1,
            0,
            template.as_raw_fd(),
            "lb state",
        )?;
        drop(template);
        let tx = tx_map(ifnames)?;
        let ifindexes = ifnames
            .iter()
            .map(|i| crate::netdev::ifindex(i).map(|x| x as u32))
            .collect::<io::Result<Vec<u32>>>()?;
        let stats = stats_map(n)?;
        let counts = map_create(
            BPF_MAP_TYPE_PERCPU_ARRAY,
            4,
            8,
            MAX_IDS as u32,
            0,
            0,
            "lb counts",
        )?;
        let deadline = map_create(BPF_MAP_TYPE_ARRAY, 4, 8, 1, 0, 0, "lb deadline")?;
        let me = LbFastPath {
            state,
            tx,
            stats,
            counts,
            deadline,
            nports: n,
            egress: (0..n)
                .map(|_| std::sync::atomic::AtomicBool::new(true))
                .collect(),
            egress_version: std::sync::atomic::AtomicU64::new(0),
            suspended: std::sync::atomic::AtomicBool::new(false),
            handoff: std::sync::atomic::AtomicBool::new(false),
            ifindexes,
            acl: std::sync::Mutex::new(super::acl::AclMaps::new(n)?),
        };
        me.publish(&[], &[], &[])?;
        Ok(me)
    }

    /// Publishes the LB's state: its ports (in port order), its back-ends (in the table's
    /// entry order) and the table's slots (entry indices; empty: nothing is balanced in
    /// the fast path, as in the round-robin mode).
    pub fn publish(
        &self,
        ports: &[LbPortState],
        entries: &[LbEntry],
        slots: &[u16],
    ) -> io::Result<()> {
        let usable =
            ports.len() <= MAX_PORTS && ports.len() as u32 <= self.nports && !self.suspended();
        let slots = if usable && entries.len() <= MAX_ENTRIES && slots.len() < 1 << 31 {
            slots
        } else {
            &[]
        };
        let words = SLOT_BASE + slots.len().div_ceil(4) as u32;
        let modes = self.egress_modes();
        let out_ok = |port: usize| modes.get(port) != Some(&super::EgressMode::UserSpace);
        let inner = filled_array(words, "lb table", |w| {
            w[0] = slots.len() as u64;
            let none = 0xffffu64;
            w[VLAN_BASE as usize..ENTRY_BASE as usize]
                .fill(none | none << 16 | none << 32 | none << 48);
            if !usable {
                return;
            }
            let mut vlan = |v: u16, port: usize| {
                let (i, s) = (VLAN_BASE as usize + v as usize / 4, (v % 4) * 16);
                w[i] = w[i] & !(0xffff << s) | (port as u64) << s;
            };
            for (i, p) in ports.iter().enumerate() {
                if p.external && (1..4095).contains(&p.vlan) && out_ok(i) {
                    vlan(p.vlan, i);
                }
            }
            for (i, p) in ports.iter().enumerate() {
                let role = if p.external {
                    ROLE_EXTERNAL
                } else if p.internal {
                    ROLE_INTERNAL
                } else {
                    0
                };
                w[PORT_BASE as usize + 2 * i] =
                    role << 60 | ((p.vlan & 0xfff) as u64) << 48 | mac_u64(&p.mac);
                w[PORT_BASE as usize + 2 * i + 1] = u32::from(p.addr) as u64;
            }
            for (i, e) in entries.iter().enumerate() {
                w[ENTRY_BASE as usize + i] = match e.id {
                    Some(id)
                        if (id as usize) < MAX_IDS
                            && (e.port as u32) < self.nports
                            && out_ok(e.port as usize) =>
                    {
                        1 << 63 | (id as u64) << 56 | (e.port as u64) << 48 | mac_u64(&e.mac)
                    }
                    _ => 0,
                };
            }
            for (i, m) in modes.iter().enumerate().take(MAX_PORTS) {
                if *m == super::EgressMode::Tcx {
                    let ifindex = self.ifindexes.get(i).copied().unwrap_or(0);
                    w[HANDOFF_BASE as usize + i] = 1 << 32 | ifindex as u64;
                }
            }
            for (k, c) in slots.chunks(4).enumerate() {
                w[SLOT_BASE as usize + k] =
                    c.iter().rev().fold(0u64, |acc, &e| acc << 16 | e as u64);
            }
        })?;
        let fd = inner.as_raw_fd() as u32;
        // Replacing the entry returns after every program that may still read the old
        // state has finished.
        map_update(&self.state, &0u32, &fd)
            .map_err(|e| io::Error::new(e.kind(), format!("publish LB state: {e}")))
    }

    /// Per port, summed over CPUs: frames the fast path took in, left to user space, sent
    /// out.
    pub fn stats(&self) -> Vec<[u64; STATS]> {
        (0..self.nports)
            .map(|p| percpu_sum(&self.stats, p))
            .collect()
    }

    /// Per counter id below `n`, frames balanced to its back-end since the start, summed
    /// over CPUs.
    pub fn counts(&self, n: usize) -> Vec<u64> {
        (0..n.min(MAX_IDS) as u32)
            .map(|i| percpu_sum::<1>(&self.counts, i)[0])
            .collect()
    }

    /// The XDP program of one port, loaded (`bpf/lb.bpf.c`, sharing the LB's maps): the
    /// fast path, and every other frame to the AF_XDP socket of its receive queue in the
    /// socket map `xsk`.
    pub fn program(&self, f: &LbProgramFacts, xsk: i32) -> io::Result<OwnedFd> {
        let config = config(f)?;
        // SAFETY: `xsk` is the port's socket map, open for the whole call (the caller's).
        let xsk = unsafe { BorrowedFd::borrow_raw(xsk) };
        let acl = self.acl.lock().unwrap_or_else(|e| e.into_inner());
        let mut reuse = vec![
            ("lb_state", self.state.as_fd()),
            ("tx_ports", self.tx.as_fd()),
            ("stats", self.stats.as_fd()),
            ("lb_counts", self.counts.as_fd()),
            ("lb_deadline", self.deadline.as_fd()),
            ("xsks", xsk),
        ];
        reuse.extend(acl.fds());
        let obj = crate::bpfobj::load(
            OBJECT,
            "the LB's fast path",
            crate::bpfobj::Load {
                name: "lb",
                config: Some(crate::bpfobj::config_bytes(&*config)),
                reuse: &reuse,
                ..Default::default()
            },
        )?;
        obj.prog("tessera_lb")
    }

    /// Keeps the programs' deadline `grace` ahead of now (`bpf_ktime_get_ns`'s clock,
    /// CLOCK_MONOTONIC): past it, they balance and send out nothing.
    pub fn beat(&self, grace: std::time::Duration) -> io::Result<()> {
        let deadline = super::monotonic_ns() + grace.as_nanos() as u64;
        map_update(&self.deadline, &0u32, &deadline)
    }

    /// The program of a port, loaded (with an empty socket map) and not attached.
    pub fn detached(&self, f: &LbProgramFacts) -> io::Result<Detached> {
        detached_xdp(|xsk| self.program(f, xsk))
    }
}

/// The LB's fast path, as clang made it from `bpf/lb.bpf.c`.
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/lb.bpf.o"));

/// Rules per list (a side and a family) and IPv6 addresses of the port a program takes
/// at most (`lb.bpf.c`'s `MAX_RULES`, `MAX_ADDRS6`).
pub const MAX_RULES: usize = 128;
pub const MAX_ADDRS6: usize = 64;

/// `lb_rule.flags`: the fields that are set, and the fast path's verdict.
const R_PROTOCOL: u32 = 1;
const R_PORT: u32 = 2;
const R_TO_ROUTER: u32 = 4;
const R_FAST: u32 = 8;

/// A rule as the program reads it (`struct lb_rule`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Rule {
    flags: u32,
    protocol: u32,
    port: u32,
    to_router: u32,
}

/// The program's read-only global (`struct lb_config` of `bpf/lb.bpf.c`): the port, its
/// MAC, the rule lists (from outside and from inside, IPv4 then IPv6), the port's IPv6
/// addresses.
#[repr(C)]
#[derive(Clone, Copy)]
struct LbConfig {
    mac: u64,
    port: u32,
    nrules: [u32; 4],
    naddrs6: u32,
    rules: [[Rule; MAX_RULES]; 4],
    addrs6: [[u8; 16]; MAX_ADDRS6],
}

/// Port `f`'s configuration: each list holds the rules of one side (from outside they
/// balance, from inside they send outward; any other verdict is user space's), in order.
fn config(f: &LbProgramFacts) -> io::Result<Box<LbConfig>> {
    let mut c = Box::new(LbConfig {
        mac: mac_u64(&f.mac),
        port: f.port,
        nrules: [0; 4],
        naddrs6: 0,
        rules: [[Rule::default(); MAX_RULES]; 4],
        addrs6: [[0; 16]; MAX_ADDRS6],
    });
    let lists = [
        (&f.rules, true, LbVerdict::Balance),
        (&f.rules, false, LbVerdict::IntToExt),
        (&f.rules6, true, LbVerdict::Balance),
        (&f.rules6, false, LbVerdict::IntToExt),
    ];
    for (k, (rules, external, fast)) in lists.into_iter().enumerate() {
        let side: Vec<&LbRule> = rules.iter().filter(|r| r.external == external).collect();
        if side.len() > MAX_RULES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "LB fast path of port {}: {} rules on one side, the program takes at most {MAX_RULES}",
                    f.port,
                    side.len()
                ),
            ));
        }
        for (slot, r) in c.rules[k].iter_mut().zip(&side) {
            let mut flags = 0;
            if r.protocol.is_some() {
                flags |= R_PROTOCOL;
            }
            if r.port.is_some() {
                flags |= R_PORT;
            }
            if r.to_router.is_some() {
                flags |= R_TO_ROUTER;
            }
            if r.verdict == fast {
                flags |= R_FAST;
            }
            *slot = Rule {
                flags,
                protocol: u32::from(r.protocol.unwrap_or(0)),
                port: u32::from(r.port.unwrap_or(0)),
                to_router: u32::from(r.to_router.unwrap_or(false)),
            };
        }
        c.nrules[k] = side.len() as u32;
    }
    if f.addrs6.len() > MAX_ADDRS6 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "LB fast path of port {}: {} IPv6 addresses, the program takes at most {MAX_ADDRS6}",
                f.port,
                f.addrs6.len()
            ),
        ));
    }
    for (slot, a) in c.addrs6.iter_mut().zip(&f.addrs6) {
        *slot = a.octets();
    }
    c.naddrs6 = f.addrs6.len() as u32;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The program passes the verifier with its lists at their longest (rules on each
    /// side and family, the port's IPv6 addresses), and says so clearly when one is
    /// longer. Needs root (BPF).
    #[test]
    fn program_loads_with_its_lists_at_their_longest() {
        let fp = LbFastPath::new(&["lo".to_string()]).unwrap();
        let rule = |i: usize, external: bool| LbRule {
            external,
            protocol: Some(if i.is_multiple_of(2) { 6 } else { 17 }),
            port: Some(i as u16),
            to_router: Some(i.is_multiple_of(3)),
            verdict: if external {
                LbVerdict::Balance
            } else {
                LbVerdict::IntToExt
            },
        };
        let side = |external| (0..MAX_RULES).map(move |i| rule(i, external));
        let rules: Vec<LbRule> = side(true).chain(side(false)).collect();
        let mut f = LbProgramFacts {
            port: 0,
            mac: [2, 0, 0, 0, 0, 1],
            rules: rules.clone(),
            rules6: rules,
            addrs6: (0..MAX_ADDRS6 as u128).map(Ipv6Addr::from).collect(),
        };
        fp.detached(&f).unwrap();
        // Lists walked in the program's own loop (up to 32 rules), at their longest.
        let short = |external| (0..32).map(move |i| rule(i, external));
        let mut g = f.clone();
        g.rules = short(true).chain(short(false)).collect();
        g.rules6 = g.rules.clone();
        fp.detached(&g).unwrap();
        f.rules6.push(rule(0, true));
        let e = fp.detached(&f).err().expect("one rule too many");
        assert!(e.to_string().contains("at most 128"), "{e}");
    }
}
