//! IPv6 longest-prefix match: [`Prefix6`], the reference [`BinaryTrie6`] and the data
//! plane's [`Poptrie6`].
//!
//! # Why this layout
//!
//! A full IPv6 table (`ipv6-bgp-2023`, 160,147 prefixes) is almost all /29 to /48: 47% are
//! /48, 14% /32, 9% /44, 8% /40, and a few hundred run from /49 to /128. Keys are 128 bits,
//! so no direct-pointing array reaches the common lengths (a 24-bit one is 64 MiB, as in
//! DPDK's rte_lpm6 and rte_fib6, which then walk 8-bit tables, one load per byte past /24).
//!
//! Poptrie6 is an IPv6 form of Poptrie (Asai and Ohara, SIGCOMM 2015): a 16-bit
//! direct-pointing array `dir` (256 KiB, which stays in the L2 cache), then nodes of 8-bit
//! stride, so that below `dir` every step resolves one byte of the address and a /48 is
//! four nodes down. A node is four quarters of 64 positions, each as a node of the paper
//! (24 bytes): `vector` marks the positions that are internal children, `leafvec` where a
//! run of equal leaves starts, and `base1`/`base0` say where the quarter's first child and
//! first run are among the node's children (contiguous) and leaves (16-bit, in an array of
//! their own). A lookup reads one quarter per step; a child's or a leaf's place is a
//! population count below its position. A `dir` entry is a node, or ([`DIR_LEAF`] set) the
//! index of its leaf.
//!
//! The structure is compiled from a [`BinaryTrie6`] (the control side's table) and never
//! changed in place; [`crate::table::Writer`] publishes it loss-free. An update
//! recompiles the node its prefix ends in and copies the nodes above it
//! ([`Poptrie6::rebuild_prefix`]): on `ipv6-bgp-2023`, 4,486 single updates/s and 33,810/s
//! in batches of 1,000 (withdraw and re-add, each published), where recompiling the whole
//! /16 of each update gave 168 and 15,458 in the same session. The copies of a wide node's
//! block of children are garbage that brings a full rebuild every few hundred updates
//! (21 in that run).
//!
//! Measured with `tessera bench fib --dpdk --table ../shared/data/ipv6-bgp-2023.txt.gz`
//! (DPDK 22.11 on 2 MiB huge pages, 4 Mi lookups per workload, M lookups/s; one run with
//! the software-pipelined batch that preceded the kept one):
//!
//! | structure | build | memory | random-prefix single / batched | uniform single / batched |
//! |---|---|---|---|---|
//! | **Poptrie6, 8-bit strides** | 45 ms | 4.4 MB (27.4 B/prefix) | **25.1 / 21.8** | 436 / 235 |
//! | DPDK rte_lpm6 | 48 ms | 76,448 8-bit tables | 20.2 / 24.7 | 48 / 76 |
//! | DPDK rte_fib6 (TRIE, 4-byte next hops) | 333 ms | 395,739 8-bit tables | 20.6 / 29.4 | 48 / 94 |
//! | reference binary trie | - | - | 2.9 / - | 31 / - |
//!
//! Single lookups beat both DPDK structures (1.2-1.4 times in every run); batched ones do
//! not (0.74-0.91 times rte_fib6's batched rate). Tried for the batch, each in a run with
//! DPDK: a software pipeline (the `dir` entry 16 addresses ahead and the first node 8
//! ahead prefetched; 21.8-27.0 against 25.1-29.4 single); 16 addresses walked side by
//! side in rounds without data-dependent branches (17.7-18.4); and the kept one,
//! asynchronous memory access chaining over [`LANES`] lanes (19.8 against 21.3 single and
//! rte_fib6's 24.6 in a noisier run). Which bound holds shows on synthetic tables
//! (`bench fib --synthetic N --ipv6`, one run): with 1,000 prefixes (0.6 MB, in the L2
//! cache) single lookups run at 42 M/s and the chained batch at 23, its instructions and
//! one mispredicted branch per address; with 160,000 random prefixes (38 MB, nodes
//! rarely shared) the batch runs 2.6 times single (11.1 against 4.3), its misses
//! overlapped. Also tried since: 16 lanes (22.1-22.2 against 26.2-28.0 single, two runs),
//! and every address through a fixed six node steps without a data-dependent branch
//! (15.3-16.1; 27 M/s where the table is hot, against 63 single: each step's
//! instructions cost more than the mispredictions they remove). The real table (4.4 MB,
//! top nodes shared and hot) sits between: single
//! lookups are bound by their chain of five or six dependent loads, the batch by its
//! instructions. Six-bit strides (the paper's) gave 18.9 B/prefix and 23.2 / 24.1 in one
//! run. Fewer dependent steps per address (a wider first level below `dir`) and a batch
//! step with fewer instructions are what is left to try for issue 18's 1.5 times.

use crate::poptrie::{MAX_VALUE, NO_ROUTE};
use std::net::Ipv6Addr;

/// An IPv6 prefix with its host bits cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix6 {
    addr: u128,
    len: u8,
}

/// The netmask of a prefix length (0..=128).
#[inline]
pub fn mask6(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - len.min(128) as u32)
    }
}

impl Prefix6 {
    /// A prefix from an address and length, clearing host bits.
    pub fn new(addr: Ipv6Addr, len: u8) -> Prefix6 {
        let len = len.min(128);
        Prefix6 {
            addr: u128::from(addr) & mask6(len),
            len,
        }
    }

    /// Parses `addr/len`, or a bare address as a /128. Host bits must be clear.
    pub fn parse_strict(s: &str) -> Result<Prefix6, crate::PrefixError> {
        use crate::PrefixError;
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, l.parse::<u8>().map_err(|_| PrefixError::BadLength)?),
            None => (s, 128),
        };
        if l > 128 {
            return Err(PrefixError::BadLength);
        }
        let a: Ipv6Addr = a.parse().map_err(|_| PrefixError::BadAddress)?;
        let p = Prefix6::new(a, l);
        if u128::from(a) != p.addr {
            return Err(PrefixError::HostBitsSet);
        }
        Ok(p)
    }

    pub fn addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.addr)
    }

    pub fn bits(&self) -> u128 {
        self.addr
    }

    #[expect(
        clippy::len_without_is_empty,
        reason = "the prefix length, not a collection size"
    )]
    pub fn len(&self) -> u8 {
        self.len
    }

    pub fn contains(&self, a: Ipv6Addr) -> bool {
        u128::from(a) & mask6(self.len) == self.addr
    }
}

impl core::str::FromStr for Prefix6 {
    type Err = crate::PrefixError;
    /// As [`Prefix6::parse_strict`].
    fn from_str(s: &str) -> Result<Prefix6, crate::PrefixError> {
        Prefix6::parse_strict(s)
    }
}

impl core::fmt::Display for Prefix6 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}/{}", self.addr(), self.len)
    }
}

const NONE: u32 = u32::MAX;

/// The bit of `a` at depth `i` (0 is the most significant).
#[inline(always)]
fn bit(a: u128, i: u32) -> usize {
    ((a >> (127 - i)) & 1) as usize
}

/// The reference structure for IPv6: a binary trie, one level per bit, nodes in an arena
/// of `[left, right, value]` triples. Lookup walks at most 128 nodes. Removal leaves empty
/// nodes in place; the arena only grows.
#[derive(Clone)]
pub struct BinaryTrie6 {
    nodes: Vec<[u32; 3]>,
    count: usize,
}

impl Default for BinaryTrie6 {
    fn default() -> Self {
        Self::new()
    }
}

impl BinaryTrie6 {
    pub fn new() -> Self {
        BinaryTrie6 {
            nodes: vec![[NONE; 3]],
            count: 0,
        }
    }

    /// Bytes held by the node arena.
    pub fn memory_bytes(&self) -> usize {
        self.nodes.capacity() * 12
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The node of prefix `p`, if the path to it exists.
    fn find(&self, p: Prefix6) -> Option<usize> {
        (0..p.len as u32).try_fold(0usize, |n, i| {
            let c = self.nodes[n][bit(p.addr, i)];
            (c != NONE).then_some(c as usize)
        })
    }

    /// The value of the longest prefix containing `a`.
    pub fn lookup(&self, a: Ipv6Addr) -> Option<u32> {
        let a = u128::from(a);
        let mut n = 0usize;
        let mut best = self.nodes[0][2];
        for i in 0..128 {
            let c = self.nodes[n][bit(a, i)];
            if c == NONE {
                break;
            }
            n = c as usize;
            if self.nodes[n][2] != NONE {
                best = self.nodes[n][2];
            }
        }
        (best != NONE).then_some(best)
    }

    /// Adds or replaces a prefix; returns the value it replaced.
    pub fn insert(&mut self, p: Prefix6, value: u32) -> Option<u32> {
        assert!(value != NONE, "value u32::MAX is reserved");
        let mut n = 0usize;
        for i in 0..p.len as u32 {
            let b = bit(p.addr, i);
            if self.nodes[n][b] == NONE {
                self.nodes[n][b] = self.nodes.len() as u32;
                self.nodes.push([NONE; 3]);
            }
            n = self.nodes[n][b] as usize;
        }
        let old = core::mem::replace(&mut self.nodes[n][2], value);
        if old == NONE {
            self.count += 1;
        }
        (old != NONE).then_some(old)
    }

    /// Removes a prefix; returns its value.
    pub fn remove(&mut self, p: Prefix6) -> Option<u32> {
        let n = self.find(p)?;
        let old = core::mem::replace(&mut self.nodes[n][2], NONE);
        if old != NONE {
            self.count -= 1;
        }
        (old != NONE).then_some(old)
    }

    /// The exact-match value of a prefix.
    pub fn get(&self, p: Prefix6) -> Option<u32> {
        let v = self.nodes[self.find(p)?][2];
        (v != NONE).then_some(v)
    }

    /// Every (prefix, value), in address order with shorter prefixes first.
    pub fn iter(&self) -> Vec<(Prefix6, u32)> {
        let mut out = Vec::with_capacity(self.count);
        let mut stack = vec![(0usize, 0u128, 0u8)];
        while let Some((n, addr, len)) = stack.pop() {
            let [l, r, v] = self.nodes[n];
            if v != NONE {
                out.push((Prefix6 { addr, len }, v));
            }
            if r != NONE {
                stack.push((r as usize, addr | 1 << (127 - len as u32), len + 1));
            }
            if l != NONE {
                stack.push((l as usize, addr, len + 1));
            }
        }
        out
    }

    fn has_children(&self, n: usize) -> bool {
        self.nodes[n][0] != NONE || self.nodes[n][1] != NONE
    }

    /// The positions `bits` levels below node `n` (or below a missing node, `n == NONE`),
    /// in address order: a leaf with the value of the longest prefix covering it
    /// (`inherited` if none below `n` does), or a child where longer prefixes lie below.
    fn expand(&self, n: u32, bits: u32, inherited: u32, out: &mut Vec<Slot>) {
        if n == NONE {
            out.extend(std::iter::repeat_n(Slot::Leaf(inherited), 1 << bits));
            return;
        }
        let [l, r, v] = self.nodes[n as usize];
        let inh = if v != NONE { v } else { inherited };
        if bits == 0 {
            out.push(if self.has_children(n as usize) {
                Slot::Child(n, inh)
            } else {
                Slot::Leaf(inh)
            });
            return;
        }
        self.expand(l, bits - 1, inh, out);
        self.expand(r, bits - 1, inh, out);
    }

    /// Slot `slot` of the top `DIR6_BITS` bits, as [`BinaryTrie6::expand`] gives it.
    fn dir_slot(&self, slot: u32) -> Slot {
        let a = (slot as u128) << (128 - DIR6_BITS);
        let mut n = 0u32;
        let mut inh = NONE;
        for i in 0..DIR6_BITS {
            let [_, _, v] = self.nodes[n as usize];
            if v != NONE {
                inh = v;
            }
            n = self.nodes[n as usize][bit(a, i)];
            if n == NONE {
                return Slot::Leaf(inh);
            }
        }
        let mut out = Vec::with_capacity(1);
        self.expand(n, 0, inh, &mut out);
        out[0]
    }
}

impl BinaryTrie6 {
    /// The trie node `depth` bits down the path of `a`, with the value the prefixes above
    /// it give (`NONE` for none); `None` if the path ends sooner.
    fn node_at(&self, a: u128, depth: u32) -> Option<(u32, u32)> {
        let mut n = 0u32;
        let mut inh = NONE;
        for i in 0..depth {
            let [_, _, v] = self.nodes[n as usize];
            if v != NONE {
                inh = v;
            }
            n = self.nodes[n as usize][bit(a, i)];
            if n == NONE {
                return None;
            }
        }
        Some((n, inh))
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Slot {
    /// The value (`NONE` for no route).
    Leaf(u32),
    /// A trie node with prefixes below it, and the value inherited at it.
    Child(u32, u32),
}

/// Bits resolved by the direct-pointing array.
pub const DIR6_BITS: u32 = 16;
/// Bits resolved by each node below `dir`.
const STRIDE: u32 = 8;
/// Addresses in flight in [`Poptrie6::lookup_batch_raw`].
pub const LANES: usize = 8;
/// A `dir` entry with this bit set resolves there: its low bits index the leaf array.
/// Otherwise it is a node's index.
pub const DIR_LEAF: u32 = 1 << 31;

/// A quarter of a node: 64 of its 256 positions, 24 bytes. `vector` marks the positions
/// that are children and `leafvec` where a run of leaves starts; `base1` and `base0` are
/// where this quarter's first child and first run are, counted over the whole node
/// (so a quarter whose first positions continue the previous quarter's run finds it at
/// `base0 - 1`).
#[derive(Clone, Copy, Debug, Default)]
struct Quarter {
    vector: u64,
    leafvec: u64,
    base1: u32,
    base0: u32,
}

/// Bits `0..=v` set.
#[inline(always)]
fn upto(v: u32) -> u64 {
    u64::MAX >> (63 - v)
}

/// The 8-bit chunk of `a` that starts `off` bits from the top (`off` at most 120).
#[inline(always)]
fn chunk(a: u128, off: u32) -> u32 {
    ((a << off) >> (128 - STRIDE)) as u32
}

fn leaf16(v: u32) -> u16 {
    if v == NONE {
        NO_ROUTE as u16
    } else {
        assert!(v <= MAX_VALUE, "value {v} does not fit a 16-bit leaf");
        v as u16
    }
}

/// A compiled, read-only IPv6 LPM table.
#[derive(Debug, Clone)]
pub struct Poptrie6 {
    dir: Box<[u32]>,
    /// Nodes, four quarters each; node `n` is `quarters[4n..4n + 4]`.
    quarters: Vec<Quarter>,
    leaves: Vec<u16>,
    /// The leaf index of each value that `dir` resolves directly.
    dir_leaves: std::collections::HashMap<u16, u32>,
    count: usize,
}

impl Poptrie6 {
    /// Compiles `t`.
    pub fn build(t: &BinaryTrie6) -> Poptrie6 {
        let mut p = Poptrie6 {
            dir: vec![0; 1 << DIR6_BITS].into_boxed_slice(),
            // Node 0 is never named (a `dir` entry of 0 would be ambiguous to read).
            quarters: vec![Quarter::default(); 4],
            leaves: Vec::new(),
            dir_leaves: Default::default(),
            count: t.len(),
        };
        let mut slots = Vec::with_capacity(1 << DIR6_BITS);
        t.expand(0, DIR6_BITS, NONE, &mut slots);
        for (i, s) in slots.into_iter().enumerate() {
            p.set_slot(t, i, s);
        }
        p
    }

    /// Recompiles `dir` slot `slot` (a /16) from `t`, appending its nodes; the old ones
    /// stay behind as garbage.
    pub fn rebuild_slot(&mut self, t: &BinaryTrie6, slot: u32) {
        self.count = t.len();
        let s = t.dir_slot(slot);
        self.set_slot(t, slot as usize, s);
    }

    /// Recompiles what a change of prefix `p` in `t` touches: the node that `p` ends in
    /// (the deepest node on its path that exists, if the path ends sooner) with all below
    /// it, then copies of the nodes above it, each parent with its block of children
    /// copied so that they stay contiguous, up to a new `dir` entry. A prefix shorter than
    /// the `dir` slots, or in a slot without nodes, recompiles its slots. The old nodes
    /// stay behind as garbage.
    pub fn rebuild_prefix(&mut self, t: &BinaryTrie6, p: Prefix6) {
        self.count = t.len();
        let (a, len) = (p.bits(), p.len() as u32);
        let slot = (a >> (128 - DIR6_BITS)) as u32;
        let top = self.dir[slot as usize];
        if len < DIR6_BITS || top & DIR_LEAF != 0 {
            let n = 1u32 << DIR6_BITS.saturating_sub(len);
            for s in slot..slot + n {
                self.rebuild_slot(t, s);
            }
            return;
        }
        // The nodes on the path, each with the offset of the bits it resolves.
        let mut path = vec![(top, DIR6_BITS)];
        loop {
            let (g, off) = path[path.len() - 1];
            if off + STRIDE >= len {
                break;
            }
            let c = chunk(a, off);
            let q = self.quarters[(4 * g + (c >> 6)) as usize];
            let v = c & 63;
            if q.vector >> v & 1 == 0 {
                break;
            }
            path.push((
                q.base1 + (q.vector & upto(v)).count_ones() - 1,
                off + STRIDE,
            ));
        }
        let Some((mut old, off)) = path.pop() else {
            return;
        };
        let Some((n, inh)) = t.node_at(a, off) else {
            // Cannot happen (a node is compiled from a trie node, and trie nodes stay);
            // the slot is recompiled whole if it does.
            return self.rebuild_slot(t, slot);
        };
        let mut new = (self.quarters.len() / 4) as u32;
        self.quarters.extend([Quarter::default(); 4]);
        self.build_node(t, new as usize, n, inh);
        while let Some((parent, _)) = path.pop() {
            let pq = 4 * parent as usize;
            let first = self.quarters[pq].base1;
            let count: u32 = self.quarters[pq..pq + 4]
                .iter()
                .map(|q| q.vector.count_ones())
                .sum();
            let moved = (self.quarters.len() / 4) as u32;
            self.quarters
                .extend_from_within(4 * first as usize..4 * (first + count) as usize);
            let at = 4 * (moved + old - first) as usize;
            self.quarters
                .copy_within(4 * new as usize..4 * new as usize + 4, at);
            let copy = (self.quarters.len() / 4) as u32;
            self.quarters.extend_from_within(pq..pq + 4);
            for q in &mut self.quarters[4 * copy as usize..] {
                q.base1 = q.base1.wrapping_add(moved).wrapping_sub(first);
            }
            (old, new) = (parent, copy);
        }
        self.dir[slot as usize] = new;
    }

    fn set_slot(&mut self, t: &BinaryTrie6, i: usize, s: Slot) {
        self.dir[i] = match s {
            Slot::Leaf(v) => {
                let v = leaf16(v);
                let leaves = &mut self.leaves;
                DIR_LEAF
                    | *self.dir_leaves.entry(v).or_insert_with(|| {
                        leaves.push(v);
                        leaves.len() as u32 - 1
                    })
            }
            Slot::Child(n, inh) => {
                let at = self.quarters.len() / 4;
                self.quarters.extend([Quarter::default(); 4]);
                self.build_node(t, at, n, inh);
                at as u32
            }
        };
    }

    /// Fills node `at` with the 256 positions below trie node `n`; its children follow,
    /// contiguous, each filled in turn (depth first).
    fn build_node(&mut self, t: &BinaryTrie6, at: usize, n: u32, inh: u32) {
        let mut slots = Vec::with_capacity(1 << STRIDE);
        t.expand(n, STRIDE, inh, &mut slots);
        let first = self.quarters.len() / 4;
        let mut children = Vec::new();
        let mut prev = None;
        let mut q = [Quarter::default(); 4];
        for (pos, s) in slots.iter().enumerate() {
            let (qi, v) = (pos / 64, pos % 64);
            if v == 0 {
                q[qi].base1 = (first + children.len()) as u32;
                q[qi].base0 = self.leaves.len() as u32;
            }
            match *s {
                Slot::Child(c, ci) => {
                    q[qi].vector |= 1 << v;
                    children.push((c, ci));
                }
                Slot::Leaf(x) => {
                    // A run starts at the first leaf and wherever the value changes
                    // (child positions in between do not break a run).
                    if prev != Some(x) {
                        q[qi].leafvec |= 1 << v;
                        self.leaves.push(leaf16(x));
                        prev = Some(x);
                    }
                }
            }
        }
        self.quarters[4 * at..4 * at + 4].copy_from_slice(&q);
        self.quarters
            .resize(4 * (first + children.len()), Quarter::default());
        for (k, (c, ci)) in children.into_iter().enumerate() {
            self.build_node(t, first + k, c, ci);
        }
    }

    /// The value for `a` ([`NO_ROUTE`] if none).
    #[inline]
    pub fn lookup_raw(&self, a: u128) -> u32 {
        let mut e = self.dir[(a >> (128 - DIR6_BITS)) as usize];
        let mut off = DIR6_BITS;
        while e & DIR_LEAF == 0 {
            let c = chunk(a, off);
            let q = &self.quarters[(4 * e + (c >> 6)) as usize];
            let v = c & 63;
            if q.vector & (1 << v) != 0 {
                e = q.base1 + (q.vector & upto(v)).count_ones() - 1;
                off += STRIDE;
            } else {
                let i = q.base0 + (q.leafvec & upto(v)).count_ones() - 1;
                return self.leaves[i as usize] as u32;
            }
        }
        self.leaves[(e & !DIR_LEAF) as usize] as u32
    }

    /// Looks up every address of `addrs` into `out` (same length), [`LANES`] at a time
    /// side by side: each lane moves its address one step (a node, or its leaf) per turn
    /// and prefetches what that address reads next, and a lane whose address has its
    /// leaf takes the next address at once (asynchronous memory access chaining), so that
    /// a cache miss of one address waits while the others work.
    pub fn lookup_batch_raw(&self, addrs: &[u128], out: &mut [u32]) {
        /// A lane with nothing to do (the input ran out).
        const IDLE: u32 = u32::MAX;
        let n = addrs.len().min(out.len());
        let mut state = [IDLE; LANES];
        let mut rest = [0u128; LANES];
        let mut index = [0usize; LANES];
        let mut next = 0;
        let mut busy = 0;
        let quarters = self.quarters.as_ptr();
        let leaves = self.leaves.as_ptr();
        // Starts address `i` in lane `l`: its `dir` entry, and a prefetch of what follows.
        let start = |i: usize, l: usize, state: &mut [u32; LANES], rest: &mut [u128; LANES]| {
            let a = addrs[i];
            let e = self.dir[(a >> (128 - DIR6_BITS)) as usize];
            state[l] = e;
            rest[l] = a << DIR6_BITS;
            let q = (4 * e as usize) | (rest[l] >> 126) as usize;
            let p = if e & DIR_LEAF != 0 {
                leaves.wrapping_add((e & !DIR_LEAF) as usize) as *const u8
            } else {
                quarters.wrapping_add(q) as *const u8
            };
            prefetch_ptr(p);
        };
        for (l, ix) in index.iter_mut().enumerate().take(n) {
            start(l, l, &mut state, &mut rest);
            *ix = l;
            next += 1;
            busy += 1;
        }
        while busy > 0 {
            for l in 0..LANES {
                let s = state[l];
                if s & DIR_LEAF != 0 {
                    if s == IDLE {
                        continue;
                    }
                    out[index[l]] = self.leaves[(s & !DIR_LEAF) as usize] as u32;
                    if next < n {
                        start(next, l, &mut state, &mut rest);
                        index[l] = next;
                        next += 1;
                    } else {
                        state[l] = IDLE;
                        busy -= 1;
                    }
                    continue;
                }
                let c = (rest[l] >> (128 - STRIDE)) as u32;
                let q = self.quarters[(4 * s + (c >> 6)) as usize];
                let v = c & 63;
                let m = upto(v);
                let child = q.base1 + (q.vector & m).count_ones() - 1;
                let leaf = q.base0 + (q.leafvec & m).count_ones();
                let is_child = q.vector >> v & 1 != 0;
                rest[l] <<= STRIDE;
                let to_child =
                    quarters.wrapping_add((4 * child as usize) | (rest[l] >> 126) as usize);
                let to_leaf = leaves.wrapping_add(leaf as usize - 1);
                prefetch_ptr(if is_child {
                    to_child as *const u8
                } else {
                    to_leaf as *const u8
                });
                state[l] = if is_child {
                    child
                } else {
                    (leaf - 1) | DIR_LEAF
                };
            }
        }
    }

    /// The value of the longest prefix containing `a`.
    pub fn lookup(&self, a: Ipv6Addr) -> Option<u32> {
        let v = self.lookup_raw(a.into());
        (v != NO_ROUTE).then_some(v)
    }

    /// Bytes of `dir`, nodes and leaves.
    pub fn memory_bytes(&self) -> usize {
        self.dir.len() * 4 + self.quarters.len() * 24 + self.leaves.len() * 2
    }

    /// Size of the arena in 4-byte words (nodes and leaves), garbage included.
    pub fn arena_words(&self) -> usize {
        self.quarters.len() * 6 + self.leaves.len().div_ceil(2)
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// Asks the CPU to start loading the cache line at `p`, which may be any address: a
/// prefetch is a hint that never faults and is never dereferenced.
#[inline(always)]
#[allow(unsafe_code)]
fn prefetch_ptr(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint to the memory system; it cannot fault, whatever the
    // address, and does not dereference the pointer in the language's sense.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> Prefix6 {
        Prefix6::parse_strict(s).unwrap()
    }

    #[test]
    fn longest_match_wins_in_both_structures() {
        let mut t = BinaryTrie6::new();
        t.insert(p("::/0"), 1);
        t.insert(p("2001:db8::/32"), 2);
        t.insert(p("2001:db8:1::/48"), 3);
        t.insert(p("2001:db8:1:2::/64"), 4);
        t.insert(p("2001:db8:1:2::1/128"), 5);
        t.insert(p("2001:db8:1:2::fe/127"), 6);
        let pop = Poptrie6::build(&t);
        for (a, want) in [
            ("3000::1", 1),
            ("2001:db8:ffff::1", 2),
            ("2001:db8:1:ffff::1", 3),
            ("2001:db8:1:2::2", 4),
            ("2001:db8:1:2::1", 5),
            ("2001:db8:1:2::ff", 6),
            ("2001:db8:1:2::fe", 6),
            ("2001:db8:1:2::fd", 4),
        ] {
            let a: Ipv6Addr = a.parse().unwrap();
            assert_eq!(t.lookup(a), Some(want), "trie at {a}");
            assert_eq!(pop.lookup(a), Some(want), "poptrie at {a}");
        }
        assert_eq!(t.remove(p("::/0")), Some(1));
        assert_eq!(Poptrie6::build(&t).lookup("3000::1".parse().unwrap()), None);
        assert_eq!(t.len(), 5);
        assert_eq!(t.get(p("2001:db8:1::/48")), Some(3));
    }

    #[test]
    fn parse_errors() {
        use crate::PrefixError;
        assert_eq!(
            Prefix6::parse_strict("2001:db8::1/32"),
            Err(PrefixError::HostBitsSet)
        );
        assert_eq!(
            Prefix6::parse_strict("2001:db8::/129"),
            Err(PrefixError::BadLength)
        );
        assert_eq!(
            Prefix6::parse_strict("10.0.0.0/8"),
            Err(PrefixError::BadAddress)
        );
        assert_eq!(p("::1").len(), 128);
        assert_eq!(p("2001:db8::/32").to_string(), "2001:db8::/32");
    }

    /// Prefix by prefix updates (path copying) give the table a full build gives, on
    /// prefixes that share nodes at every depth from /16 to /72.
    #[test]
    fn updates_in_place_match_a_full_build() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut t = BinaryTrie6::new();
        let mut pop = Poptrie6::build(&t);
        let mut live: Vec<Prefix6> = Vec::new();
        for round in 0..3000 {
            // Few distinct bits per byte, so that paths share their nodes.
            let mut a = 0x2001_0db8u128 << 96;
            for byte in 4..9 {
                a |= ((rnd() % 3) as u128 * 0x55) << (120 - 8 * byte);
            }
            if round % 97 == 0 {
                a = (rnd() as u128 % 4) << 124 | 1 << 125; // elsewhere, short
            }
            let len = [16, 20, 24, 32, 33, 40, 47, 48, 56, 64, 72][rnd() as usize % 11];
            let p = Prefix6::new(a.into(), len);
            if rnd() % 3 == 0 && !live.is_empty() {
                let q = live.swap_remove(rnd() as usize % live.len());
                t.remove(q);
                pop.rebuild_prefix(&t, q);
            } else {
                t.insert(p, (rnd() % 50) as u32);
                live.push(p);
                pop.rebuild_prefix(&t, p);
            }
            if round % 100 == 99 {
                let full = Poptrie6::build(&t);
                for q in &live {
                    for x in [q.bits(), q.bits() | !mask6(q.len()), q.bits() ^ 1 << 70] {
                        let want = t.lookup(x.into());
                        assert_eq!(pop.lookup(x.into()), want, "updated, at {q}");
                        assert_eq!(full.lookup(x.into()), want, "built, at {q}");
                    }
                }
            }
        }
    }

    fn scan(rules: &[(Prefix6, u32)], a: Ipv6Addr) -> Option<u32> {
        rules
            .iter()
            .filter(|(p, _)| p.contains(a))
            .max_by_key(|(p, _)| p.len())
            .map(|r| r.1)
    }

    /// Addresses near the prefixes: prefixes of random lengths share leading bits, so
    /// that nodes at every depth and runs of leaves are exercised.
    fn near(base: u128, x: u128, l: u8) -> u128 {
        base ^ (x >> l.min(127))
    }

    proptest! {
        #[test]
        fn trie_and_poptrie_match_a_linear_scan(
            base in any::<u128>(),
            rules in proptest::collection::vec((any::<u128>(), 0u8..=128, 0u32..1000), 0..60),
            probes in proptest::collection::vec((any::<u128>(), 0u8..=128), 60)
        ) {
            let mut t = BinaryTrie6::new();
            let mut set = std::collections::BTreeMap::new();
            for (x, l, v) in rules {
                let pf = Prefix6::new(near(base, x, l / 2).into(), l);
                t.insert(pf, v);
                set.insert(pf, v);
            }
            let flat: Vec<_> = set.into_iter().collect();
            prop_assert_eq!(t.len(), flat.len());
            prop_assert_eq!(t.iter(), flat.clone());
            let pop = Poptrie6::build(&t);
            let addrs: Vec<u128> = probes
                .iter()
                .map(|&(x, l)| near(base, x, l))
                .chain(flat.iter().map(|r| r.0.bits()))
                .chain(flat.iter().map(|r| r.0.bits() | !mask6(r.0.len())))
                .collect();
            let mut out = vec![0; addrs.len()];
            pop.lookup_batch_raw(&addrs, &mut out);
            for (&a, &o) in addrs.iter().zip(&out) {
                let want = scan(&flat, a.into());
                prop_assert_eq!(t.lookup(a.into()), want);
                prop_assert_eq!(pop.lookup(a.into()), want);
                prop_assert_eq!(o, want.unwrap_or(NO_ROUTE));
            }
        }
    }
}
