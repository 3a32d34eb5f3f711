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
//! rules are compiled into the program (only those that can match an IPv4 frame, in their
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
    detached_xdp, filled_array, mac_u64, percpu_sum, stats_map, tx_map, Asm, Detached, FrameLen, ADD_K, AND_K,
    ADD_X, ADJUST_HEAD, BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_ARRAY_OF_MAPS, BPF_MAP_TYPE_PERCPU_ARRAY, CALL, EXIT,
    IN_BYTES, JA, JEQ32_K, JEQ_K, JGE_K, JGT_X, JLT_K, JNE32_K, JNE_K, JNE_X, KTIME_GET_NS, LDX_B,
    LDX_DW, LDX_H, LDX_W, LD_IMM64, LSH_K, MAP_LOOKUP, MOV_K, MOV_X, OR_X, OUT_BYTES, REDIRECT_MAP,
    RSH_K, RSH_X, STATS, STX_DW, STX_H, STX_W, SUB_K, SUB_X, TO_BE,
};
use crate::xdp::{map_create, map_update};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, OwnedFd};

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
const MOD_X: u8 = 0x9f;
const JEQ_X: u8 = 0x1d;
const MUL_X: u8 = 0x2f;
const XOR_X: u8 = 0xaf;

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

    /// The XDP program of one port: the fast path, and every other frame to the AF_XDP
    /// socket of its receive queue in the socket map `xsk`.
    pub fn program(&self, f: &LbProgramFacts, xsk: i32) -> io::Result<OwnedFd> {
        crate::xsk::load_xdp(&self.code(f, xsk), "tessera_lb")
    }

    /// [`LbFastPath::program`]'s instructions.
    fn code(&self, f: &LbProgramFacts, xsk: i32) -> Vec<u8> {
        program(
            f,
            [
                self.state.as_raw_fd(),
                self.tx.as_raw_fd(),
                self.stats.as_raw_fd(),
                self.counts.as_raw_fd(),
                self.deadline.as_raw_fd(),
                xsk,
            ],
        )
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

/// `dst = value` (a 64-bit immediate).
fn imm64(a: &mut Asm, dst: u8, value: u64) {
    a.i(LD_IMM64, dst, 0, 0, value as u32 as i32)
        .i(0, 0, 0, 0, (value >> 32) as u32 as i32);
}

/// The classifier's key of the IPv4 packet at `o` onto the stack: -88 the protocol, -96
/// the TCP or UDP ports as one big-endian word (or all ones: none), -104 whether it is to
/// the router (to the port's address, at -56, or to 224.0.0.0/24). `p` prefixes labels.
fn key(a: &mut Asm, o: i16, p: &str) {
    let l = |s: &str| format!("{p}_{s}");
    a.i(LDX_B, 1, 7, o + 9, 0)
        .i(STX_DW, 10, 1, -88, 0)
        .i(MOV_K, 2, 0, 0, 0)
        .i(LDX_W, 1, 7, o + 16, 0)
        .i(TO_BE, 1, 0, 0, 32)
        .i(LDX_DW, 3, 10, -56, 0)
        .j(JEQ_K, 3, 0, 0, &l("mc"))
        .j(JEQ_X, 1, 3, 0, &l("ours"))
        .label(&l("mc"))
        .i(RSH_K, 1, 0, 0, 8)
        .j(JNE_K, 1, 0, 0xe0_00_00, &l("router_done"))
        .label(&l("ours"))
        .i(MOV_K, 2, 0, 0, 1)
        .label(&l("router_done"))
        .i(STX_DW, 10, 2, -104, 0)
        .i(MOV_K, 2, 0, 0, -1)
        .i(LDX_DW, 1, 10, -88, 0)
        .j(JEQ_K, 1, 0, 6, &l("l4"))
        .j(JNE_K, 1, 0, 17, &l("ports_done"))
        .label(&l("l4"))
        .i(MOV_X, 3, 7, 0, 0)
        .i(ADD_K, 3, 0, 0, (o + 24) as i32)
        .j(JGT_X, 3, 8, 0, &l("ports_done"))
        .i(LDX_W, 2, 7, o + 20, 0)
        .i(TO_BE, 2, 0, 0, 32)
        .label(&l("ports_done"))
        .i(STX_DW, 10, 2, -96, 0);
}

/// The rules of one side, in order, on the key of [`key`]: the first that matches goes to
/// `fast` if its verdict is `verdict`, else to user space; no match, to user space.
fn rules(a: &mut Asm, rules: &[LbRule], external: bool, verdict: LbVerdict, fast: &str, p: &str) {
    for (i, r) in rules.iter().filter(|r| r.external == external).enumerate() {
        let next = format!("{p}_rule{i}");
        if let Some(proto) = r.protocol {
            a.i(LDX_DW, 1, 10, -88, 0)
                .j(JNE_K, 1, 0, proto as i32, &next);
        }
        if let Some(port) = r.port {
            let hit = format!("{p}_rule{i}_port");
            a.i(LDX_DW, 1, 10, -96, 0)
                .j(JEQ_K, 1, 0, -1, &next)
                .i(MOV_X, 2, 1, 0, 0)
                .i(RSH_K, 2, 0, 0, 16)
                .j(JEQ_K, 2, 0, port as i32, &hit)
                .i(AND_K, 1, 0, 0, 0xffff)
                .j(JNE_K, 1, 0, port as i32, &next)
                .label(&hit);
        }
        if let Some(t) = r.to_router {
            a.i(LDX_DW, 1, 10, -104, 0).j(JNE_K, 1, 0, t as i32, &next);
        }
        a.j(
            JA,
            0,
            0,
            0,
            if r.verdict == verdict { fast } else { "slow" },
        );
        if r.protocol.is_none() && r.port.is_none() && r.to_router.is_none() {
            // It always matches: the rules after it are never tried (and the verifier
            // refuses code that cannot be reached).
            return;
        }
        a.label(&next);
    }
    a.j(JA, 0, 0, 0, "slow");
}

/// Checks of an IPv4 packet at `o` in a frame at r7..r8: version 4 without options, not a
/// fragment, its total length (left in r9) exactly the rest of the frame.
pub(super) fn plain_ipv4(a: &mut Asm, o: i16) {
    a.i(LDX_B, 1, 7, o, 0)
        .j(JNE_K, 1, 0, 0x45, "slow")
        .i(LDX_H, 1, 7, o + 6, 0)
        .i(AND_K, 1, 0, 0, 0xff3f) // MF and offset (0x3fff, read little-endian)
        .j(JNE_K, 1, 0, 0, "slow")
        .i(LDX_H, 9, 7, o + 2, 0)
        .i(TO_BE, 9, 0, 0, 16)
        .i(MOV_X, 1, 8, 0, 0)
        .i(SUB_X, 1, 7, 0, 0)
        .i(SUB_K, 1, 0, 0, o as i32)
        .j(JNE_X, 1, 9, 0, "slow");
}

/// `r0` = the state's word whose index is in register `r1` (the state in r6), or to
/// `slow`.
fn word(a: &mut Asm) {
    a.i(STX_W, 10, 1, -8, 0)
        .i(MOV_X, 2, 10, 0, 0)
        .i(ADD_K, 2, 0, 0, -8)
        .i(MOV_X, 1, 6, 0, 0)
        .i(CALL, 0, 0, 0, MAP_LOOKUP)
        .j(JEQ_K, 0, 0, 0, "slow");
}

/// `r1` = the 16-bit entry `r1` of the packed entries from word `base` (the state in r6),
/// or to `slow`.
fn packed(a: &mut Asm, base: u32) {
    a.i(MOV_X, 2, 1, 0, 0)
        .i(AND_K, 2, 0, 0, 3)
        .i(LSH_K, 2, 0, 0, 4)
        .i(STX_DW, 10, 2, -120, 0)
        .i(RSH_K, 1, 0, 0, 2)
        .i(ADD_K, 1, 0, 0, base as i32);
    word(a);
    a.i(LDX_DW, 1, 0, 0, 0)
        .i(LDX_DW, 2, 10, -120, 0)
        .i(RSH_X, 1, 2, 0, 0)
        .i(AND_K, 1, 0, 0, 0xffff);
}

/// The program's fast part (after its prologue; a port beyond [`MAX_PORTS`] has none):
/// balance or int-to-ext, each frame it cannot take to `slow`.
fn fast_part(a: &mut Asm, f: &LbProgramFacts, [state, tx, stats, counts]: [i32; 4]) {
    let mac = mac_u64(&f.mac);
    let me = f.port as i32;
    // The state, and this port's words in it.
    a.i(MOV_K, 1, 0, 0, 0)
        .i(STX_W, 10, 1, -8, 0)
        .i(MOV_X, 2, 10, 0, 0)
        .i(ADD_K, 2, 0, 0, -8)
        .map(1, state)
        .i(CALL, 0, 0, 0, MAP_LOOKUP)
        .j(JEQ_K, 0, 0, 0, "slow")
        .i(MOV_X, 6, 0, 0, 0)
        .i(MOV_K, 1, 0, 0, PORT_BASE as i32 + 2 * me);
    word(a);
    a.i(LDX_DW, 1, 0, 0, 0).i(STX_DW, 10, 1, -48, 0).i(
        MOV_K,
        1,
        0,
        0,
        PORT_BASE as i32 + 2 * me + 1,
    );
    word(a);
    a.i(LDX_DW, 1, 0, 0, 0)
        .i(STX_DW, 10, 1, -56, 0)
        .i(LDX_DW, 1, 10, -48, 0)
        .i(RSH_K, 1, 0, 0, 60)
        .j(JEQ_K, 1, 0, ROLE_EXTERNAL as i32, "external")
        .j(JEQ_K, 1, 0, ROLE_INTERNAL as i32, "internal")
        .j(JA, 0, 0, 0, "slow");

    // From outside: balance.
    a.label("external");
    if f.mac[0] & 1 == 1 {
        a.j(JA, 0, 0, 0, "slow");
    }
    a.i(LDX_W, 1, 7, 0, 0)
        .j(JNE32_K, 1, 0, mac as u32 as i32, "slow") // not to our MAC
        .i(LDX_H, 1, 7, 4, 0)
        .j(JNE32_K, 1, 0, (mac >> 32) as u16 as i32, "slow")
        .i(LDX_H, 1, 7, 12, 0)
        .j(JEQ_K, 1, 0, 0xdd86, "ext6") // IPv6 (0x86dd, read little-endian)
        .j(JNE_K, 1, 0, 0x0008, "slow"); // not IPv4 (tagged ones are dropped in user space)
    plain_ipv4(a, 14);
    key(a, 14, "ext");
    rules(a, &f.rules, true, LbVerdict::Balance, "balance", "ext");
    a.label("balance")
        .i(LDX_B, 1, 7, 30, 0)
        .j(JGE_K, 1, 0, 224, "maybe_slow") // multicast; class E unless broadcast
        .j(JA, 0, 0, 0, "unicast")
        .label("maybe_slow")
        .j(JLT_K, 1, 0, 240, "slow")
        .i(LDX_W, 1, 7, 30, 0)
        .j(JEQ32_K, 1, 0, -1, "slow")
        .label("unicast");
    // A TCP or UDP checksum left to offload: user space fills it in. Goes on at "lookup".
    offload_check(a);
    // The flow hash: routes::flow_hash, step for step.
    a.label("lookup")
        .i(LDX_W, 1, 7, 26, 0)
        .i(TO_BE, 1, 0, 0, 32)
        .i(LSH_K, 1, 0, 0, 32)
        .i(LDX_W, 2, 7, 30, 0)
        .i(TO_BE, 2, 0, 0, 32)
        .i(OR_X, 1, 2, 0, 0)
        .i(LDX_B, 3, 7, 23, 0)
        .i(MOV_X, 2, 3, 0, 0)
        .i(LSH_K, 2, 0, 0, 17)
        .i(XOR_X, 1, 2, 0, 0)
        .j(JEQ_K, 3, 0, 6, "hash_l4")
        .j(JNE_K, 3, 0, 17, "mix")
        .label("hash_l4")
        .i(MOV_X, 3, 7, 0, 0)
        .i(ADD_K, 3, 0, 0, 38)
        .j(JGT_X, 3, 8, 0, "mix")
        .i(LDX_W, 2, 7, 34, 0)
        .i(TO_BE, 2, 0, 0, 32)
        .i(LSH_K, 2, 0, 0, 23) // a 32-bit word rotated left by 23 in 64 bits
        .i(XOR_X, 1, 2, 0, 0)
        .label("mix");
    for (shift, mul) in [(31, 0x7fb5_d329_728e_a185u64), (27, 0x81da_def4_bc2d_d44d)] {
        a.i(MOV_X, 2, 1, 0, 0)
            .i(RSH_K, 2, 0, 0, shift)
            .i(XOR_X, 1, 2, 0, 0);
        imm64(a, 2, mul);
        a.i(MUL_X, 1, 2, 0, 0);
    }
    a.i(MOV_X, 2, 1, 0, 0)
        .i(RSH_K, 2, 0, 0, 33)
        .i(XOR_X, 1, 2, 0, 0)
        .i(LSH_K, 1, 0, 0, 32)
        .i(RSH_K, 1, 0, 0, 32)
        .i(STX_DW, 10, 1, -112, 0)
        // Its slot, and the slot's back-end.
        .i(MOV_K, 1, 0, 0, 0);
    word(a);
    a.i(LDX_DW, 2, 0, 0, 0)
        .j(JEQ_K, 2, 0, 0, "slow") // no table here
        .i(LDX_DW, 1, 10, -112, 0)
        .i(MOD_X, 1, 2, 0, 0);
    packed(a, SLOT_BASE);
    a.j(JGE_K, 1, 0, MAX_ENTRIES as i32, "slow")
        .i(ADD_K, 1, 0, 0, ENTRY_BASE as i32);
    word(a);
    a.i(LDX_DW, 1, 0, 0, 0)
        .i(MOV_X, 2, 1, 0, 0)
        .i(RSH_K, 2, 0, 0, 63)
        .j(JEQ_K, 2, 0, 0, "slow") // not served here
        .i(STX_DW, 10, 1, -112, 0)
        .i(MOV_X, 2, 1, 0, 0)
        .i(RSH_K, 2, 0, 0, 48)
        .i(AND_K, 2, 0, 0, 0xff)
        .i(STX_DW, 10, 2, -40, 0) // egress port
        .i(RSH_K, 1, 0, 0, 56)
        .i(AND_K, 1, 0, 0, 0x7f)
        .i(STX_DW, 10, 1, -64, 0); // counter id
    handoff_room(a, 34, "balance");
    a.i(LDX_DW, 1, 10, -48, 0)
        .i(RSH_K, 1, 0, 0, 48)
        .i(AND_K, 1, 0, 0, 0xfff)
        .i(STX_DW, 10, 1, -80, 0); // the port's VLAN id
                                   // Tagged with it (priority 0, as user space tags), to the back-end's MAC.
    push_tag(a, -80, true);
    a.i(LDX_DW, 1, 10, -112, 0)
        .i(STX_W, 7, 1, 0, 0)
        .i(RSH_K, 1, 0, 0, 32)
        .i(STX_H, 7, 1, 4, 0)
        .i(LDX_DW, 1, 10, -64, 0)
        .count(counts, 1, 0, "counted_id")
        .j(JA, 0, 0, 0, "forward");

    // From inside: out of the external port of the frame's VLAN.
    a.label("internal")
        .i(MOV_X, 1, 7, 0, 0)
        .i(ADD_K, 1, 0, 0, 38)
        .j(JGT_X, 1, 8, 0, "slow")
        .i(LDX_H, 1, 7, 12, 0)
        .j(JNE_K, 1, 0, 0x0081, "slow") // untagged: user space drops it
        .i(LDX_H, 1, 7, 16, 0)
        .j(JEQ_K, 1, 0, 0xdd86, "int6") // IPv6
        .j(JNE_K, 1, 0, 0x0008, "slow"); // not IPv4
    plain_ipv4(a, 18);
    key(a, 18, "int");
    rules(a, &f.rules, false, LbVerdict::IntToExt, "to_ext", "int");
    a.label("to_ext")
        .i(LDX_H, 1, 7, 14, 0)
        .i(TO_BE, 1, 0, 0, 16)
        .i(AND_K, 1, 0, 0, 0xfff);
    packed(a, VLAN_BASE);
    a.j(JGE_K, 1, 0, MAX_PORTS as i32, "slow") // no external port has it
        .i(STX_DW, 10, 1, -40, 0)
        .i(LSH_K, 1, 0, 0, 1)
        .i(ADD_K, 1, 0, 0, PORT_BASE as i32);
    word(a);
    a.i(LDX_DW, 1, 0, 0, 0).i(STX_DW, 10, 1, -48, 0);
    handoff_room(a, 38, "to_ext");
    // The tag comes out: the MACs move up four bytes, the frame starts there.
    pop_tag(a, true);
    reload_frame(a, 14);
    // Our external MAC as the source.
    a.i(LDX_DW, 1, 10, -48, 0)
        .i(STX_W, 7, 1, 6, 0)
        .i(RSH_K, 1, 0, 0, 32)
        .i(STX_H, 7, 1, 10, 0);

    // Count (in here, out there) and send.
    a.label("forward")
        .i(MOV_K, 1, 0, 0, me)
        .count_frame(stats, 1, 0, IN_BYTES, FrameLen::Bounds, "counted_in")
        .i(LDX_DW, 1, 10, -40, 0)
        .count_frame(stats, 1, 16, OUT_BYTES, FrameLen::Bounds, "counted_out");
    handoff_send(a, stats);
    a.i(LDX_DW, 2, 10, -40, 0)
        .map(1, tx)
        .i(MOV_K, 3, 0, 0, 0)
        .i(CALL, 0, 0, 0, REDIRECT_MAP)
        .i(EXIT, 0, 0, 0, 0);

    // IPv6 from outside: balance, with the hash of `flow_hash6`, then on as IPv4.
    a.label("ext6");
    plain_ipv6(a, 14, &f.addrs6, "ext6");
    key6(a, 14, "ext6");
    rules(a, &f.rules6, true, LbVerdict::Balance, "balance6", "ext6");
    a.label("balance6");
    offload_check_for(a, Family::V6, "hash6", "hash6");
    a.label("hash6")
        .i(LDX_DW, 1, 7, 22, 0)
        .i(TO_BE, 1, 0, 0, 64);
    for (off, rot) in [(30i16, 21), (38, 42), (46, 11)] {
        a.i(LDX_DW, 2, 7, off, 0)
            .i(TO_BE, 2, 0, 0, 64)
            .i(MOV_X, 3, 2, 0, 0)
            .i(LSH_K, 3, 0, 0, rot)
            .i(RSH_K, 2, 0, 0, 64 - rot)
            .i(OR_X, 2, 3, 0, 0)
            .i(XOR_X, 1, 2, 0, 0);
    }
    a.i(LDX_W, 2, 7, 14, 0) // the flow label
        .i(TO_BE, 2, 0, 0, 32)
        .i(AND_K, 2, 0, 0, 0xf_ffff)
        .i(LSH_K, 2, 0, 0, 20)
        .i(XOR_X, 1, 2, 0, 0)
        .i(LDX_B, 3, 7, 20, 0) // the next header
        .i(MOV_X, 2, 3, 0, 0)
        .i(LSH_K, 2, 0, 0, 44)
        .i(XOR_X, 1, 2, 0, 0)
        .i(MOV_X, 3, 7, 0, 0)
        .i(ADD_K, 3, 0, 0, 58)
        .j(JGT_X, 3, 8, 0, "mix") // (TCP or UDP here) no ports
        .i(LDX_W, 2, 7, 54, 0)
        .i(TO_BE, 2, 0, 0, 32)
        .i(LSH_K, 2, 0, 0, 23)
        .i(XOR_X, 1, 2, 0, 0)
        .j(JA, 0, 0, 0, "mix");

    // IPv6 from inside: out of the external port of the frame's VLAN, as IPv4.
    a.label("int6");
    plain_ipv6(a, 18, &f.addrs6, "int6");
    key6(a, 18, "int6");
    rules(a, &f.rules6, false, LbVerdict::IntToExt, "to_ext", "int6");
}

/// With the egress port at -40 (the state in r6), its hand-off word to -136 (see
/// [`HANDOFF_BASE`]); where it hands off, room for the hand-off's metadata in front of
/// the frame (refused: to `slow`, the frame untouched yet) and r7 and r8 the frame's
/// bounds again, `len` bytes of it checked. `p` prefixes labels.
fn handoff_room(a: &mut Asm, len: i32, p: &str) {
    let done = format!("{p}_handoff_done");
    a.i(LDX_DW, 1, 10, -40, 0)
        .i(ADD_K, 1, 0, 0, HANDOFF_BASE as i32);
    word(a);
    a.i(LDX_DW, 1, 0, 0, 0)
        .i(STX_DW, 10, 1, -136, 0)
        .j(JEQ_K, 1, 0, 0, &done)
        .handoff_room(super::Ctx::Stack(-72), len)
        .label(&done);
}

/// At `forward`, counted: a frame whose egress hands off (its word at -136, from
/// [`handoff_room`]) gets the hand-off's metadata, is counted as handed off on the egress
/// port (at -40) and goes to this port's tcx hook (`XDP_PASS`); any other goes on.
fn handoff_send(a: &mut Asm, stats: i32) {
    a.i(LDX_DW, 1, 10, -136, 0)
        .j(JEQ_K, 1, 0, 0, "redirect")
        .handoff_pass(
            super::Ctx::Stack(-72),
            -136,
            stats,
            "aborted",
            "lb_handed_off",
        )
        .label("redirect");
}

/// Checks of an IPv6 packet at `o` in a frame at r7..r8 (`p` prefixes labels): version 6,
/// its payload length exactly the rest of the frame (r9 = the packet's length), TCP or UDP
/// right behind the fixed header, to neither a multicast, a link-local nor one of `ours`.
fn plain_ipv6(a: &mut Asm, o: i16, ours: &[Ipv6Addr], p: &str) {
    let l = |s: &str| format!("{p}_{s}");
    a.i(MOV_X, 1, 7, 0, 0)
        .i(ADD_K, 1, 0, 0, (o + 40) as i32)
        .j(JGT_X, 1, 8, 0, "slow")
        .i(LDX_B, 1, 7, o, 0)
        .i(AND_K, 1, 0, 0, 0xf0)
        .j(JNE_K, 1, 0, 0x60, "slow")
        .i(LDX_H, 9, 7, o + 4, 0)
        .i(TO_BE, 9, 0, 0, 16)
        .i(MOV_X, 1, 8, 0, 0)
        .i(SUB_X, 1, 7, 0, 0)
        .i(SUB_K, 1, 0, 0, (o + 40) as i32)
        .j(JNE_X, 1, 9, 0, "slow")
        .i(ADD_K, 9, 0, 0, 40)
        .i(LDX_B, 1, 7, o + 6, 0)
        .j(JEQ_K, 1, 0, 6, &l("l4"))
        .j(JNE_K, 1, 0, 17, "slow")
        .label(&l("l4"))
        .i(LDX_B, 1, 7, o + 24, 0)
        .j(JEQ_K, 1, 0, 0xff, "slow") // multicast
        .j(JNE_K, 1, 0, 0xfe, &l("scope"))
        .i(LDX_B, 1, 7, o + 25, 0)
        .i(AND_K, 1, 0, 0, 0xc0)
        .j(JEQ_K, 1, 0, 0x80, "slow") // link-local
        .label(&l("scope"));
    for (k, addr) in ours.iter().enumerate() {
        let other = l(&format!("not{k}"));
        for (w, word) in addr.octets().chunks_exact(4).enumerate() {
            let le = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
            a.i(LDX_W, 1, 7, o + 24 + 4 * w as i16, 0)
                .j(JNE32_K, 1, 0, le as i32, &other);
        }
        a.j(JA, 0, 0, 0, "slow").label(&other); // to the router
    }
}

/// The classifier's key of the IPv6 packet at `o` (checked by [`plain_ipv6`]) onto the
/// stack, as [`key`] lays it out: the next header, the ports (all ones: none), not to the
/// router (frames to it are user space's already).
fn key6(a: &mut Asm, o: i16, p: &str) {
    let done = format!("{p}_ports_done");
    a.i(LDX_B, 1, 7, o + 6, 0)
        .i(STX_DW, 10, 1, -88, 0)
        .i(MOV_K, 2, 0, 0, 0)
        .i(STX_DW, 10, 2, -104, 0)
        .i(MOV_K, 2, 0, 0, -1)
        .i(MOV_X, 3, 7, 0, 0)
        .i(ADD_K, 3, 0, 0, (o + 44) as i32)
        .j(JGT_X, 3, 8, 0, &done)
        .i(LDX_W, 2, 7, o + 40, 0)
        .i(TO_BE, 2, 0, 0, 32)
        .label(&done)
        .i(STX_DW, 10, 2, -96, 0);
}

/// Stack: -8 a 32-bit key, -32 the receive queue, -40 the egress port, -48 the port's
/// state word (later the egress port's), -56 its address, -64 the back-end's counter id,
/// -72 the context, -80 the VLAN id to tag with, -88 to -104 the classifier's key, -112
/// the flow hash and then the back-end's word, -120 a shift, -136 the egress port's
/// hand-off word ([`HANDOFF_BASE`]). Registers: r6 the context,
/// then the state; r7 and r8 the frame's bounds; r9 the total length.
fn program(f: &LbProgramFacts, [state, tx, stats, counts, deadline, xsk]: [i32; 6]) -> Vec<u8> {
    let mut a = Asm::new();
    let me = f.port as i32;
    a.i(MOV_X, 6, 1, 0, 0)
        .i(LDX_W, 1, 6, 16, 0) // rx_queue_index
        .i(STX_DW, 10, 1, -32, 0)
        .i(STX_DW, 10, 6, -72, 0)
        .i(LDX_W, 7, 6, 0, 0)
        .i(LDX_W, 8, 6, 4, 0)
        .i(MOV_X, 1, 7, 0, 0)
        .i(ADD_K, 1, 0, 0, 34)
        .j(JGT_X, 1, 8, 0, "slow");
    if (f.port as usize) < MAX_PORTS {
        // Past the deadline of an LB that handed its fast path over: user space's.
        a.i(MOV_K, 1, 0, 0, 0)
            .lookup(0, deadline, 1)
            .i(LDX_DW, 1, 0, 0, 0)
            .j(JEQ_K, 1, 0, 0, "in_time")
            .i(STX_DW, 10, 1, -128, 0)
            .i(CALL, 0, 0, 0, KTIME_GET_NS)
            .i(LDX_DW, 1, 10, -128, 0)
            .j(JGT_X, 0, 1, 0, "slow")
            .label("in_time");
        fast_part(&mut a, f, [state, tx, stats, counts]);
    }
    // Everything else: to the port's socket.
    a.slow_to_socket(stats, xsk, me);
    if (f.port as usize) < MAX_PORTS {
        // What cannot happen (a four-byte move of the frame's start refused).
        a.label("aborted").i(MOV_K, 0, 0, 0, 0).i(EXIT, 0, 0, 0, 0);
    }
    a.finish()
}

/// Takes the 802.1Q tag out of the frame at r7 (XDP, at least 18 bytes checked): the MACs
/// move up four bytes and the frame starts there (`bpf_xdp_adjust_head` on the context in
/// r6, or with `ctx_on_stack` at -72); a refusal goes to `aborted`. The caller reloads the
/// frame's bounds.
fn pop_tag(a: &mut Asm, ctx_on_stack: bool) {
    for off in [8i16, 4, 0] {
        a.i(LDX_W, 1, 7, off, 0).i(STX_W, 7, 1, off + 4, 0);
    }
    if ctx_on_stack {
        a.i(LDX_DW, 1, 10, -72, 0);
    } else {
        a.i(MOV_X, 1, 6, 0, 0);
    }
    a.i(MOV_K, 2, 0, 0, 4)
        .i(CALL, 0, 0, 0, ADJUST_HEAD)
        .j(JNE_K, 0, 0, 0, "aborted");
}

/// After a move of the frame's start (XDP): r6 the context again (from -72), r7 and r8 the
/// frame's new bounds, at least `len` bytes of it checked (else `aborted`).
fn reload_frame(a: &mut Asm, len: i32) {
    a.i(LDX_DW, 6, 10, -72, 0)
        .i(LDX_W, 7, 6, 0, 0)
        .i(LDX_W, 8, 6, 4, 0)
        .i(MOV_X, 1, 7, 0, 0)
        .i(ADD_K, 1, 0, 0, len)
        .j(JGT_X, 1, 8, 0, "aborted");
}

/// Puts an 802.1Q tag in front of the frame (XDP): four bytes more at its start
/// (`bpf_xdp_adjust_head` on the context at -72; r6, r7 and r8 then the context and the
/// frame's new bounds), the MACs moved down to them, 0x8100, and the tag control
/// information from the stack slot `tci` (its low 16 bits; byte-swapped first with `swap`,
/// for a VLAN id held in host order).
fn push_tag(a: &mut Asm, tci: i16, swap: bool) {
    a.i(LDX_DW, 1, 10, -72, 0)
        .i(MOV_K, 2, 0, 0, -4)
        .i(CALL, 0, 0, 0, ADJUST_HEAD)
        .j(JNE_K, 0, 0, 0, "aborted");
    reload_frame(a, 18);
    for off in [0i16, 4, 8] {
        a.i(LDX_W, 1, 7, off + 4, 0).i(STX_W, 7, 1, off, 0);
    }
    a.i(MOV_K, 1, 0, 0, 0x0081)
        .i(STX_H, 7, 1, 12, 0)
        .i(LDX_DW, 1, 10, tci, 0);
    if swap {
        a.i(TO_BE, 1, 0, 0, 16);
    }
    a.i(STX_H, 7, 1, 14, 0);
}

/// Goes to `slow` when the frame is TCP or UDP with its checksum left to offload (the field
/// holds just the pseudo-header sum), else on at `lookup`. r9 holds the IP packet's length.
fn offload_check(a: &mut Asm) {
    offload_check_for(a, Family::V4, "lookup", "lookup");
}

/// The IP header an offload check reads.
#[derive(Clone, Copy, PartialEq)]
enum Family {
    V4,
    V6,
}

/// [`offload_check`] for `family` (IPv4 without options, or IPv6 without extension
/// headers): TCP or UDP with a checksum left to offload goes to `slow`, with a complete
/// one on at `next`; another protocol on at `other`.
fn offload_check_for(a: &mut Asm, family: Family, next: &str, other: &str) {
    // Where the protocol, the transport header and the addresses are; the header's length.
    let (proto, l4, addrs, header, sfx) = match family {
        Family::V4 => (23i16, 34i16, 26i16..34, 20, ""),
        Family::V6 => (20, 54, 22..54, 40, "6"),
    };
    let l = |name: &str| format!("{name}{sfx}");
    a.i(LDX_B, 3, 7, proto, 0)
        .i(MOV_K, 4, 0, 0, 0)
        .j(JEQ_K, 3, 0, 6, &l("tcp"))
        .j(JEQ_K, 3, 0, 17, &l("udp"))
        .j(JA, 0, 0, 0, other)
        .label(&l("tcp"))
        .i(MOV_X, 1, 7, 0, 0)
        .i(ADD_K, 1, 0, 0, (l4 + 18) as i32)
        .j(JGT_X, 1, 8, 0, "slow")
        .i(LDX_H, 4, 7, l4 + 16, 0)
        .j(JA, 0, 0, 0, &l("pseudo"))
        .label(&l("udp"))
        .i(MOV_X, 1, 7, 0, 0)
        .i(ADD_K, 1, 0, 0, (l4 + 8) as i32)
        .j(JGT_X, 1, 8, 0, "slow")
        .i(LDX_H, 4, 7, l4 + 6, 0)
        .label(&l("pseudo"))
        // In the little-endian reading of the words: addresses, protocol << 8, and the
        // byte-swapped transport length.
        .i(MOV_X, 1, 3, 0, 0)
        .i(LSH_K, 1, 0, 0, 8);
    for off in addrs.step_by(2) {
        a.i(LDX_H, 2, 7, off, 0).i(ADD_X, 1, 2, 0, 0);
    }
    a.i(MOV_X, 2, 9, 0, 0)
        .i(SUB_K, 2, 0, 0, header)
        .i(TO_BE, 2, 0, 0, 16)
        .i(ADD_X, 1, 2, 0, 0)
        .fold(1, 2)
        .j(JNE_X, 1, 4, 0, next)
        .j(JA, 0, 0, 0, "slow");
}

