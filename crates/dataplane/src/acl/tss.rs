//! The access lists compiled for the fast path: a tuple-space search (Srinivasan,
//! Suri and Varghese, 1999; the classifier of Open vSwitch and of VPP's ACL plugin).
//!
//! Every rule is a mask over a fixed 44-byte key ([`KEY_LEN`], `struct acl_key` in
//! `crates/io/bpf/acl.h`) and the values its fields must have under that mask. A port
//! range that is not a power-of-two block becomes the few blocks that cover it (at most 30
//! for 16 bits), so one rule may give several entries. Rules of one list whose masks are
//! the same form a *tuple*: one hash lookup finds, among all of them, the first rule whose
//! masked values are the packet's masked key. A list's decision is the first rule over all
//! its tuples; the tuples are walked in the order of their first rule, and the walk stops
//! at a tuple whose first rule comes after the best found so far.
//!
//! Why this structure: its cost per packet grows with the number of distinct masks in a
//! list (a list of 10,000 host routes with one port each is one tuple), not with the
//! number of rules; it needs one hash map and two arrays, which XDP and tcx programs have;
//! and an update rewrites entries, not a decision tree. A list whose rules use many
//! different masks (every prefix length with every port block) walks many tuples: the
//! cost grows with them ([`Tables::tuples`] says how many; `tessera show acl` prints it).
//!
//! [`Tables::lookup`] walks the tables as the programs do; the tests check it against
//! [`super::Acl::decide`].

use super::{Acl, Action, Key, Net, Rule};
use std::collections::HashMap;
use std::net::IpAddr;

/// The key's length in bytes: the tuple's tag (4), source and destination (16 + 16),
/// protocol, DSCP, flags, TCP flags (4), source and destination port (2 + 2).
pub const KEY_LEN: usize = 44;

/// The key's flag bits.
pub const F_V6: u8 = 1;
pub const F_FRAGMENT: u8 = 2;
pub const F_PORTS: u8 = 4;
pub const F_ICMP: u8 = 8;
pub const F_TCP_FLAGS: u8 = 16;

const SRC: usize = 4;
const DST: usize = 20;
const PROTO: usize = 36;
const DSCP: usize = 37;
const FLAGS: usize = 38;
const TCP_FLAGS: usize = 39;
const SPORT: usize = 40;
const DPORT: usize = 42;

/// The most tuples one list may have in the fast path, and in all lists together; a
/// list past them is refused with an error that says so.
pub const MAX_TUPLES_PER_LIST: usize = 256;
pub const MAX_TUPLES: usize = 1024;
/// The most entries (rules after their port ranges are split) of all lists.
pub const MAX_ENTRIES: usize = 131_072;

/// The key [`key_bytes`] wrote (or a program built), read back: the flow export reads
/// the fast path's samples so.
pub fn key_of_bytes(b: &[u8; KEY_LEN]) -> Key {
    let flags = b[FLAGS];
    let (src, dst) = if flags & F_V6 != 0 {
        let a = |at: usize| IpAddr::from(<[u8; 16]>::try_from(&b[at..at + 16]).unwrap_or([0; 16]));
        (a(SRC), a(DST))
    } else {
        let a = |at: usize| IpAddr::from(<[u8; 4]>::try_from(&b[at..at + 4]).unwrap_or([0; 4]));
        (a(SRC), a(DST))
    };
    let be = |at: usize| u16::from_be_bytes([b[at], b[at + 1]]);
    Key {
        src,
        dst,
        protocol: b[PROTO],
        dscp: b[DSCP],
        fragment: flags & F_FRAGMENT != 0,
        ports: (flags & F_PORTS != 0).then(|| (be(SPORT), be(DPORT))),
        tcp_flags: (flags & F_TCP_FLAGS != 0).then_some(b[TCP_FLAGS]),
        icmp: (flags & F_ICMP != 0).then(|| (be(SPORT) as u8, be(DPORT) as u8)),
    }
}

/// A packet's key as the programs build it: the tag zero, IPv4 addresses in the first
/// four bytes of their fields, ports and ICMP type and code in network order.
pub fn key_bytes(k: &Key) -> [u8; KEY_LEN] {
    let mut b = [0u8; KEY_LEN];
    let mut flags = 0;
    match (k.src, k.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            b[SRC..SRC + 4].copy_from_slice(&s.octets());
            b[DST..DST + 4].copy_from_slice(&d.octets());
        }
        (s, d) => {
            flags |= F_V6;
            if let (IpAddr::V6(s), IpAddr::V6(d)) = (s, d) {
                b[SRC..SRC + 16].copy_from_slice(&s.octets());
                b[DST..DST + 16].copy_from_slice(&d.octets());
            }
        }
    }
    b[PROTO] = k.protocol;
    b[DSCP] = k.dscp;
    if k.fragment {
        flags |= F_FRAGMENT;
    }
    if let Some((s, d)) = k.ports {
        flags |= F_PORTS;
        b[SPORT..SPORT + 2].copy_from_slice(&s.to_be_bytes());
        b[DPORT..DPORT + 2].copy_from_slice(&d.to_be_bytes());
    }
    if let Some((t, c)) = k.icmp {
        flags |= F_ICMP;
        b[SPORT..SPORT + 2].copy_from_slice(&u16::from(t).to_be_bytes());
        b[DPORT..DPORT + 2].copy_from_slice(&u16::from(c).to_be_bytes());
    }
    if let Some(f) = k.tcp_flags {
        flags |= F_TCP_FLAGS;
        b[TCP_FLAGS] = f;
    }
    b[FLAGS] = flags;
    b
}

/// The blocks `(value, mask)` whose union is the range `a..=b` of 16-bit values.
pub fn blocks(a: u16, b: u16) -> Vec<(u16, u16)> {
    let (mut lo, hi) = (a as u32, b as u32);
    let mut out = Vec::new();
    while lo <= hi {
        // The largest aligned block that starts at lo and ends by hi.
        let mut size = if lo == 0 {
            1 << 16
        } else {
            lo & lo.wrapping_neg()
        };
        while lo + size - 1 > hi {
            size >>= 1;
        }
        out.push((lo as u16, !(size - 1) as u16));
        lo += size;
    }
    out
}

fn set_prefix(value: &mut [u8], mask: &mut [u8], bytes: &[u8], len: u8) {
    for (i, (&v, (vo, mo))) in bytes
        .iter()
        .zip(value.iter_mut().zip(mask.iter_mut()))
        .enumerate()
    {
        let bits = (len as usize).saturating_sub(i * 8).min(8);
        let m = if bits == 0 { 0 } else { 0xffu8 << (8 - bits) };
        *mo = m;
        *vo = v & m;
    }
}

/// The (value, mask) pairs of one rule: one per pair of port blocks.
pub fn entries_of(r: &Rule) -> Vec<([u8; KEY_LEN], [u8; KEY_LEN])> {
    let (mut v, mut m) = ([0u8; KEY_LEN], [0u8; KEY_LEN]);
    let mut family = None;
    for (net, at) in [(r.src, SRC), (r.dst, DST)] {
        match net {
            Some(Net::V4(p)) => {
                family = Some(false);
                let o = p.addr().octets();
                set_prefix(&mut v[at..at + 4], &mut m[at..at + 4], &o, p.len());
            }
            Some(Net::V6(p)) => {
                family = Some(true);
                let o = p.addr().octets();
                set_prefix(&mut v[at..at + 16], &mut m[at..at + 16], &o, p.len());
            }
            None => {}
        }
    }
    let mut fm = 0u8;
    let mut fv = 0u8;
    if let Some(six) = family {
        fm |= F_V6;
        if six {
            fv |= F_V6;
        }
    }
    if let Some(p) = r.protocol {
        m[PROTO] = 0xff;
        v[PROTO] = p;
    }
    if let Some(d) = r.dscp {
        m[DSCP] = 0xff;
        v[DSCP] = d;
    }
    if let Some(f) = r.fragment {
        fm |= F_FRAGMENT;
        if f {
            fv |= F_FRAGMENT;
        }
    }
    if let Some((mask, value)) = r.tcp_flags {
        fm |= F_TCP_FLAGS;
        fv |= F_TCP_FLAGS;
        m[TCP_FLAGS] = mask;
        v[TCP_FLAGS] = value;
    }
    let mut sports = vec![(0u16, 0u16)];
    let mut dports = vec![(0u16, 0u16)];
    if r.src_port.is_some() || r.dst_port.is_some() {
        fm |= F_PORTS;
        fv |= F_PORTS;
        if let Some((a, b)) = r.src_port {
            sports = blocks(a, b);
        }
        if let Some((a, b)) = r.dst_port {
            dports = blocks(a, b);
        }
    }
    if r.icmp_type.is_some() || r.icmp_code.is_some() {
        fm |= F_ICMP;
        fv |= F_ICMP;
        if let Some(t) = r.icmp_type {
            sports = vec![(t as u16, 0xffff)];
        }
        if let Some(c) = r.icmp_code {
            dports = vec![(c as u16, 0xffff)];
        }
    }
    m[FLAGS] = fm;
    v[FLAGS] = fv;
    let mut out = Vec::with_capacity(sports.len() * dports.len());
    for &(sv, sm) in &sports {
        for &(dv, dm) in &dports {
            let (mut v, mut m) = (v, m);
            m[SPORT..SPORT + 2].copy_from_slice(&sm.to_be_bytes());
            v[SPORT..SPORT + 2].copy_from_slice(&(sv & sm).to_be_bytes());
            m[DPORT..DPORT + 2].copy_from_slice(&dm.to_be_bytes());
            v[DPORT..DPORT + 2].copy_from_slice(&(dv & dm).to_be_bytes());
            out.push((v, m));
        }
    }
    out
}

/// What an entry says: the rule's place in its list, its counters' slot, its action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit {
    pub prio: u32,
    pub slot: u32,
    pub action: Action,
}

/// One list's tuples (a range of [`Tables::tuples`]) and its default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListEntry {
    pub first: u32,
    pub count: u32,
    pub default: Action,
    pub default_slot: u32,
}

/// Every list compiled: what the programs' maps hold.
#[derive(Debug, Clone, Default)]
pub struct Tables {
    /// (mask, the first rule of the tuple), in the order a list walks them.
    pub tuples: Vec<([u8; KEY_LEN], u32)>,
    /// Per tuple, what it decides where its mask is empty (it matches every packet: no
    /// lookup needed, and no later tuple can come first).
    pub all: Vec<Option<Hit>>,
    pub lists: Vec<ListEntry>,
    /// Masked keys (their tag the tuple's index) and what they hit.
    pub entries: HashMap<[u8; KEY_LEN], Hit>,
}

/// `action` as the programs read it: 0 permit, 1 deny, 2 reject.
pub fn action_code(a: Action) -> u32 {
    match a {
        Action::Permit => 0,
        Action::Deny => 1,
        Action::Reject => 2,
    }
}

impl Tables {
    /// The lists compiled, their rules' counters in `slots` (per list, one per rule and
    /// one for the default, last); `tag_base` is added to every tuple's index (a
    /// generation's tuples apart from the other's). An error names the list and the
    /// bound it is past.
    pub fn compile(lists: &[&Acl], slots: &[Vec<u32>], tag_base: u32) -> Result<Tables, String> {
        let mut t = Tables::default();
        for (li, acl) in lists.iter().enumerate() {
            // The list's masks, in the order of their first rule.
            let mut masks: Vec<([u8; KEY_LEN], u32)> = Vec::new();
            let mut at: HashMap<[u8; KEY_LEN], usize> = HashMap::new();
            let mut rule_entries = Vec::new();
            for (ri, r) in acl.rules.iter().enumerate() {
                for (v, m) in entries_of(r) {
                    let k = *at.entry(m).or_insert_with(|| {
                        masks.push((m, ri as u32));
                        masks.len() - 1
                    });
                    rule_entries.push((k, v, ri));
                }
            }
            if masks.len() > MAX_TUPLES_PER_LIST {
                return Err(format!(
                    "access list {:?} has {} distinct masks (prefix lengths, port blocks, fields); the fast path takes {MAX_TUPLES_PER_LIST}",
                    acl.name,
                    masks.len()
                ));
            }
            let first = t.tuples.len() as u32;
            t.tuples.extend(masks.iter().copied());
            let slot = |i: usize| slots.get(li).and_then(|s| s.get(i)).copied().unwrap_or(0);
            for (k, mut v, ri) in rule_entries {
                let tag = tag_base + first + k as u32;
                v[..4].copy_from_slice(&tag.to_le_bytes());
                // The first rule of a masked key wins: later ones never match first.
                t.entries.entry(v).or_insert(Hit {
                    prio: ri as u32,
                    slot: slot(ri),
                    action: acl.rules[ri].action,
                });
            }
            for (k, (m, _)) in masks.iter().enumerate() {
                let tag = tag_base + first + k as u32;
                let mut key = [0u8; KEY_LEN];
                key[..4].copy_from_slice(&tag.to_le_bytes());
                let empty = m[4..].iter().all(|&b| b == 0);
                t.all.push(if empty {
                    t.entries.get(&key).copied()
                } else {
                    None
                });
            }
            t.lists.push(ListEntry {
                first: tag_base + first,
                count: masks.len() as u32,
                default: acl.default,
                default_slot: slot(acl.rules.len()),
            });
        }
        if t.tuples.len() > MAX_TUPLES {
            return Err(format!(
                "the access lists have {} tuples (distinct masks per list) together; the fast path takes {MAX_TUPLES}",
                t.tuples.len()
            ));
        }
        if t.entries.len() > MAX_ENTRIES {
            return Err(format!(
                "the access lists have {} entries (rules, their port ranges split into blocks); the fast path takes {MAX_ENTRIES}",
                t.entries.len()
            ));
        }
        Ok(t)
    }

    /// List `list`'s decision for the key `k` (from [`key_bytes`]), walked as the
    /// programs walk it: `Err(default)` where no rule matched. `tag_base` as compiled.
    pub fn lookup(&self, list: usize, k: &[u8; KEY_LEN], tag_base: u32) -> Result<Hit, Action> {
        let l = self.lists[list];
        let mut best: Option<Hit> = None;
        for i in l.first..l.first + l.count {
            let (mask, first_rule) = &self.tuples[(i - tag_base) as usize];
            if best.is_some_and(|b| b.prio <= *first_rule) {
                break;
            }
            if let Some(h) = self.all[(i - tag_base) as usize] {
                // Matches every packet, and comes before every tuple after it.
                best = Some(h);
                break;
            }
            let mut m = [0u8; KEY_LEN];
            for (o, (a, b)) in m.iter_mut().zip(k.iter().zip(mask.iter())) {
                *o = a & b;
            }
            m[..4].copy_from_slice(&i.to_le_bytes());
            if let Some(h) = self.entries.get(&m) {
                if best.is_none_or(|b| h.prio < b.prio) {
                    best = Some(*h);
                }
            }
        }
        best.ok_or(l.default)
    }
}

/// A list of `n` rules for measurements (`tessera bench forward --acl-rules`): `n - 1`
/// that deny TCP to one port of a network in 100.64.0.0/10 (of `masks` distinct prefix
/// lengths, /32 down, so the list has `masks` tuples of denials), which no UDP packet
/// matches, then one that permits everything: every UDP packet walks the whole list.
pub fn measurement_list(n: usize, masks: usize) -> Acl {
    let masks = masks.clamp(1, 16);
    let mut rules: Vec<Rule> = (0..n.saturating_sub(1))
        .map(|i| {
            let len = 32 - (i % masks) as u8;
            let a = 0x6440_0000u32 | ((i as u32).wrapping_mul(2_654_435_761) & 0x003f_ffff);
            let mut r = Rule::any(Action::Deny);
            r.protocol = Some(6);
            r.dst = Some(Net::V4(fib::Prefix::new(a.into(), len)));
            r.dst_port = Some((1 + (i % 1000) as u16, 1 + (i % 1000) as u16));
            r
        })
        .collect();
    if n > 0 {
        rules.push(Rule::any(Action::Permit));
    }
    Acl {
        name: format!("measure-{n}"),
        default: Action::Deny,
        rules,
    }
}
