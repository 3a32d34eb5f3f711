//! Poptrie (Asai and Ohara, SIGCOMM 2015): a compressed multiway trie for IPv4 LPM.
//!
//! The top 18 bits index a direct-pointing array `dir` (1 MiB): each entry is the offset
//! of a node in the arena `mem`. A slot that no prefix longer than /18 reaches points to
//! the shared *end node* of its value (no children, one leaf), so that every lookup takes
//! the same steps: `dir`, a node, a leaf.
//! Internal nodes consume 6 bits each (18 + 6 + 6 + 6 covers 32; the last stride is
//! padded with zeros). A node is six 32-bit words: two 64-bit vectors, then `base1` and
//! `base0`. `vector` marks the positions that are internal children, stored contiguously
//! from `base1` (six words each), and `leafvec` marks where a run of equal leaves starts
//! (leaf compression), the runs stored contiguously from `base0`, as 16-bit leaves two
//! to a word (`base0` counts half-words), as in the paper. A child's or a leaf's
//! place is a population count of the vector below its position, so a lookup is at most
//! four dependent loads (dir, then up to three nodes) plus one leaf load.
//!
//! The common step (`dir`, the node it names, one of its leaves) reads the arena without
//! bounds checks: every node that `dir` names is checked once when it is laid out (its
//! words and all the leaves its vectors can select lie inside the arena), and the arena
//! never changes afterwards. Deeper steps are bounds-checked.
//!
//! Unlike the paper, nodes and leaves share one arena, and a node's leaves are laid out
//! right behind it (behind its block of siblings, below the top level). The common lookup
//! of a table full of /19 to /24 prefixes (dir, one node, one leaf) then finds the leaf in
//! the cache line it just loaded for the node, or in the next one: two cache misses in a
//! row instead of three. Measured on `ipv4-bgp-2023` (see the crate docs).
//!
//! The structure is compiled from a [`BinaryTrie`] (the control side's table) and never
//! changed in place; see [`crate::table`] for updates.

use crate::{BinaryTrie, Lpm};
use std::collections::HashMap;
use std::net::Ipv4Addr;

/// The value of "no route" in leaves; values must be below it. Leaves are 16 bits wide,
/// as in the paper: a value names a next hop (or a group of them), and a router has far
/// fewer than 65,535 of those.
pub const NO_ROUTE: u32 = 0xffff;

const STRIDE: u32 = 6;
/// Bits resolved by the direct-pointing array (Poptrie18 of the paper).
pub const DIR_BITS: u32 = 18;
/// Words per node: vector (2), leafvec (2), base1, base0.
const NODE: usize = 6;

/// A compiled, read-only LPM table.
#[derive(Debug, Clone)]
pub struct Poptrie {
    /// A fixed-size array, so that indexing it by the top bits needs no bounds check.
    /// Every entry is a node offset that [`Poptrie::check_top`] accepted.
    dir: Box<[u32; 1 << DIR_BITS]>,
    mem: Vec<u32>,
    /// The end node of each value that some `dir` slot ends with: no children, one leaf.
    ends: HashMap<u32, u32>,
    count: usize,
}

/// Asks the CPU to start loading `r`'s cache line. A hint: it never faults and changes
/// nothing observable.
#[inline(always)]
#[allow(unsafe_code)]
pub(crate) fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint to the memory system; it does not dereference the
    // pointer in the language's sense and cannot fault. `r` is a valid reference anyway.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
            r as *const T as *const i8,
        )
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}

/// Prefetches word `o` of `mem`, or nothing if `o` is out of range (garbage offsets of
/// lanes that do not use them).
#[inline(always)]
#[allow(unsafe_code)]
fn prefetch_at(mem: &[u32], o: u32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as in `prefetch`: a hint that cannot fault whatever the address, and the
    // pointer is never dereferenced.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
            mem.as_ptr().wrapping_add(o as usize) as *const i8,
        )
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (mem, o);
}

/// Leaf `h` of the arena, which holds leaves two to a word (half-word `h` is bytes
/// `2h..2h + 2` of the arena in memory order).
#[inline(always)]
fn leaf_at(mem: &[u32], h: u32) -> u32 {
    let b = mem[(h / 2) as usize].to_ne_bytes();
    let i = (h as usize & 1) * 2;
    u16::from_ne_bytes([b[i], b[i + 1]]) as u32
}

/// Appends `leaves` two to a word, in the order [`leaf_at`] reads them (a zero pad after
/// an odd count); returns the half-word index of the first.
fn push_leaves(mem: &mut Vec<u32>, leaves: &[u16]) -> u32 {
    let at = mem.len() as u32 * 2;
    for pair in leaves.chunks(2) {
        let lo = pair[0].to_ne_bytes();
        let hi = pair.get(1).copied().unwrap_or(0).to_ne_bytes();
        mem.push(u32::from_ne_bytes([lo[0], lo[1], hi[0], hi[1]]));
    }
    at
}

/// Bits `0..=v` set.
#[inline(always)]
fn upto(v: u32) -> u64 {
    u64::MAX >> (63 - v)
}

/// The 6-bit chunk of `a` that starts `shift` bits from the top (zero-padded past bit 32).
#[inline(always)]
fn chunk(a: u32, shift: u32) -> u32 {
    ((((a as u64) << 32) << shift) >> (64 - STRIDE)) as u32
}

/// One node, read from the arena with a single bounds check.
#[derive(Clone, Copy)]
struct Node {
    vector: u64,
    leafvec: u64,
    base1: u32,
    base0: u32,
}

impl Node {
    #[inline(always)]
    fn at(mem: &[u32], o: u32) -> Node {
        let o = o as usize;
        let w: &[u32; NODE] = mem[o..o + NODE].try_into().expect("six words");
        Node {
            vector: w[0] as u64 | (w[1] as u64) << 32,
            leafvec: w[2] as u64 | (w[3] as u64) << 32,
            base1: w[4],
            base0: w[5],
        }
    }

    /// Reads the node at `o` without a bounds check.
    ///
    /// # Safety
    /// `o + NODE <= mem.len()`.
    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn at_unchecked(mem: &[u32], o: u32) -> Node {
        // SAFETY: the caller guarantees the six words are inside `mem`; `[u32; NODE]` has
        // the alignment of `u32`.
        let w = unsafe { (mem.as_ptr().add(o as usize) as *const [u32; NODE]).read() };
        Node {
            vector: w[0] as u64 | (w[1] as u64) << 32,
            leafvec: w[2] as u64 | (w[3] as u64) << 32,
            base1: w[4],
            base0: w[5],
        }
    }

    /// The half-word index of the leaf for position `v`, for a position that is not an
    /// internal child (garbage, but computed without a branch, for one that is).
    #[inline(always)]
    fn leaf(&self, v: u32) -> u32 {
        self.base0
            .wrapping_add((self.leafvec & upto(v)).count_ones())
            .wrapping_sub(1)
    }

    /// Where position `v` leads: `(true, child offset)` or `(false, leaf offset)`,
    /// computed without a branch.
    #[inline(always)]
    fn step(&self, v: u32) -> (bool, u32) {
        let inner = self.vector >> v & 1 != 0;
        let child = self.base1.wrapping_add(
            (self.vector & upto(v))
                .count_ones()
                .wrapping_sub(1)
                .wrapping_mul(NODE as u32),
        );
        (inner, if inner { child } else { self.leaf(v) })
    }
}

/// A node being laid out: its header is written once its leaves are placed.
struct Pending {
    at: usize,
    vector: u64,
    leafvec: u64,
    base0: u32,
    /// Trie node and inherited value of each internal child, in position order.
    kids: Vec<(usize, u32)>,
}

impl Poptrie {
    /// Compiles the table from a binary trie. Values must be below [`NO_ROUTE`].
    pub fn build(t: &BinaryTrie) -> Poptrie {
        let mut p = Poptrie {
            dir: vec![0; 1 << DIR_BITS]
                .into_boxed_slice()
                .try_into()
                .expect("1 << DIR_BITS entries"),
            mem: Vec::new(),
            ends: HashMap::new(),
            count: t.len(),
        };
        let none = p.end(NO_ROUTE);
        p.dir.fill(none);
        p.fill_dir(t, 0, 0, 0, NO_ROUTE);
        p.mem.shrink_to_fit();
        p
    }

    /// The end node of value `v` (a node without children whose one leaf is `v`),
    /// appended the first time it is asked for.
    fn end(&mut self, v: u32) -> u32 {
        if let Some(&o) = self.ends.get(&v) {
            return o;
        }
        let o = self.mem.len() as u32;
        // vector 0, leafvec 1 (one run from position 0), base1 unused, base0 right behind.
        assert!(v <= NO_ROUTE, "value {v} does not fit a 16-bit leaf");
        self.mem
            .extend_from_slice(&[0, 0, 1, 0, 0, 2 * (o + NODE as u32)]);
        push_leaves(&mut self.mem, &[v as u16]);
        self.check_top(o);
        self.ends.insert(v, o);
        o
    }

    /// Checks what the unchecked common step relies on for a node that `dir` names: its
    /// words are inside the arena, and for every position that is not an internal child
    /// the selected leaf (half-word `base0` plus the count of `leafvec` bits up to the
    /// position, minus one) is too. The count is at least one because the first position
    /// that is not a child always starts a run of leaves, and at most the number of runs.
    fn check_top(&self, o: u32) {
        let len = self.mem.len();
        assert!(o as usize + NODE <= len, "node {o} outside the arena");
        let n = Node::at(&self.mem, o);
        if n.vector != u64::MAX {
            assert!(
                n.leafvec >> n.vector.trailing_ones() & 1 == 1,
                "node {o}: the first leaf position starts no run"
            );
            assert!(
                n.base0 as usize + n.leafvec.count_ones() as usize <= 2 * len,
                "node {o}: leaves outside the arena"
            );
        }
    }

    fn fill_dir(&mut self, t: &BinaryTrie, n: usize, depth: u32, bits: u32, inh: u32) {
        let node = t.nodes[n];
        let inh = if node.value != crate::NONE {
            node.value
        } else {
            inh
        };
        if depth == DIR_BITS {
            self.dir[bits as usize] = self.top(t, n, inh);
            return;
        }
        for b in 0..2u32 {
            let nb = (bits << 1) | b;
            match node.child[b as usize] {
                crate::NONE => {
                    let span = 1usize << (DIR_BITS - depth - 1);
                    let from = (nb as usize) * span;
                    let e = self.end(inh);
                    self.dir[from..from + span].fill(e);
                }
                c => self.fill_dir(t, c as usize, depth + 1, nb, inh),
            }
        }
    }

    /// The `dir` entry for trie node `n` at depth [`DIR_BITS`] (its value already folded
    /// into `inh`): the end node of its value, or a node appended with its leaves right
    /// behind it.
    fn top(&mut self, t: &BinaryTrie, n: usize, inh: u32) -> u32 {
        if !t.has_children(n) {
            return self.end(inh);
        }
        let at = self.mem.len();
        self.mem.resize(at + NODE, 0);
        let p = self.leaves(t, at, n, inh);
        self.finish(t, p);
        self.check_top(at as u32);
        at as u32
    }

    /// Expands trie node `n` over one stride and appends its leaves.
    fn leaves(&mut self, t: &BinaryTrie, at: usize, n: usize, inh: u32) -> Pending {
        // The 64 positions: the trie node there (if it has deeper prefixes) and the value
        // of the longest prefix covering the position.
        let mut pos = [(crate::NONE, NO_ROUTE); 64];
        expand(t, n, 0, 0, inh, &mut pos);
        let mut p = Pending {
            at,
            vector: 0,
            leafvec: 0,
            base0: 0,
            kids: Vec::new(),
        };
        let (mut leaves, mut n_leaves) = ([0u16; 64], 0);
        let mut last = None;
        for (v, &(k, val)) in pos.iter().enumerate() {
            if k != crate::NONE {
                p.vector |= 1 << v;
                p.kids.push((k as usize, val));
            } else if last != Some(val) {
                assert!(val <= NO_ROUTE, "value {val} does not fit a 16-bit leaf");
                p.leafvec |= 1 << v;
                leaves[n_leaves] = val as u16;
                n_leaves += 1;
                last = Some(val);
            }
        }
        p.base0 = push_leaves(&mut self.mem, &leaves[..n_leaves]);
        p
    }

    /// Allocates `p`'s children as one block, lays out their leaves behind the block, and
    /// writes `p`'s header; then does the same below each child.
    fn finish(&mut self, t: &BinaryTrie, p: Pending) {
        let base1 = self.mem.len();
        self.mem.resize(base1 + NODE * p.kids.len(), 0);
        self.mem[p.at..p.at + NODE].copy_from_slice(&[
            p.vector as u32,
            (p.vector >> 32) as u32,
            p.leafvec as u32,
            (p.leafvec >> 32) as u32,
            base1 as u32,
            p.base0,
        ]);
        let below: Vec<Pending> = p
            .kids
            .iter()
            .enumerate()
            .map(|(i, &(k, val))| self.leaves(t, base1 + NODE * i, k, val))
            .collect();
        for q in below {
            self.finish(t, q);
        }
    }

    /// Recompiles the subtree of one direct-pointing slot (a /18) from `t`, appending its
    /// nodes and leaves (the old ones become garbage until the next full build).
    pub fn rebuild_slot(&mut self, t: &BinaryTrie, slot: u32) {
        self.count = t.len();
        let mut n = 0usize;
        let mut inh = match t.nodes[0].value {
            crate::NONE => NO_ROUTE,
            v => v,
        };
        for i in 0..DIR_BITS {
            let bit = ((slot >> (DIR_BITS - 1 - i)) & 1) as usize;
            match t.nodes[n].child[bit] {
                crate::NONE => {
                    self.dir[slot as usize] = self.end(inh);
                    return;
                }
                c => {
                    n = c as usize;
                    if t.nodes[n].value != crate::NONE {
                        inh = t.nodes[n].value;
                    }
                }
            }
        }
        self.dir[slot as usize] = self.top(t, n, inh);
    }

    /// The raw value for `a`: [`NO_ROUTE`] when no prefix matches. `dir`, the node it
    /// names, one leaf; deeper nodes only for addresses that a prefix longer than /24 may
    /// cover.
    #[inline(always)]
    #[allow(unsafe_code)]
    pub fn lookup_raw(&self, a: u32) -> u32 {
        let mem = &self.mem[..];
        let o = self.dir[(a >> (32 - DIR_BITS)) as usize];
        // SAFETY: `o` comes from `dir`, and `check_top` accepted every node `dir` names
        // when it was laid out: its six words are inside `mem`, which is never changed
        // or shrunk afterwards (updates only append).
        let node = unsafe { Node::at_unchecked(mem, o) };
        // The position below `dir` is `v = (a >> 8) & 63`; shifts by a u32 count take it
        // modulo 64, as the instructions do, so `v` itself is never computed.
        if node.vector.wrapping_shr(a >> 8) & 1 != 0 {
            return self.deep(a, o);
        }
        // Bits 0..=v of leafvec, counted after shifting the others out (by 63 - v).
        let runs = node.leafvec.wrapping_shl(!(a >> 8)).count_ones() as usize;
        // SAFETY: `v` is not an internal child, so `check_top` guarantees that
        // `1 <= runs` and `base0 + runs - 1 < 2 * mem.len()`: the half-word is inside the
        // arena, and a `u16` needs no more than the `u32` arena's alignment. `leaf_at`
        // reads the same half-word.
        unsafe {
            *(mem.as_ptr() as *const u16).add((node.base0 as usize + runs).wrapping_sub(1)) as u32
        }
    }

    /// The value for `a` below the node at `o`, for an address that a prefix longer than
    /// /24 may cover: rare, and kept out of the common path's code.
    #[cold]
    #[inline(never)]
    fn deep(&self, a: u32, o: u32) -> u32 {
        leaf_at(&self.mem, self.walk(a, o))
    }

    /// Starts loading the `dir` entry for `a`: the first of two hints for a caller that
    /// knows its addresses some time before it looks them up.
    #[inline(always)]
    pub fn prefetch_dir(&self, a: u32) {
        prefetch(&self.dir[(a >> (32 - DIR_BITS)) as usize]);
    }

    /// Starts loading the node that `dir` names for `a` (and the cache line after it,
    /// where its leaves often are). It reads the `dir` entry, so it works best a few
    /// addresses after [`Poptrie::prefetch_dir`] for the same address.
    #[inline(always)]
    pub fn prefetch_node(&self, a: u32) {
        let o = self.dir[(a >> (32 - DIR_BITS)) as usize];
        prefetch_at(&self.mem, o);
        prefetch_at(&self.mem, o.wrapping_add(16));
    }

    /// Looks up `addrs` into `out` (same length).
    ///
    /// A software pipeline over the addresses: while it looks up address `i`, it
    /// prefetches the `dir` entry of address `i + 32` and, reading the `dir` entry of
    /// address `i + 8` (prefetched 24 addresses earlier), that address's node. By the time
    /// an address is looked up, its loads are in the cache or on their way, and the cache
    /// misses of some 30 addresses overlap. Every address takes the same steps (`dir`,
    /// node, leaf; slots without longer prefixes name their value's end node), so nothing
    /// branches on where an address ends, which on real tables is as good as random;
    /// only prefixes longer than /24 take a branch, which is rare and so well predicted.
    ///
    /// Distances measured on `ipv4-bgp-2023` (random-prefix addresses), each against
    /// 32/8 in one process: 16/4 to 32/12 within the noise, 48/16 to 96/32 up to 20%
    /// slower; see the crate docs.
    pub fn lookup_batch_raw(&self, addrs: &[u32], out: &mut [u32]) {
        assert_eq!(addrs.len(), out.len(), "one output per address");
        /// How far ahead `dir` entries and nodes are prefetched.
        const D1: usize = 32;
        const D2: usize = 8;
        for &x in addrs.iter().take(D1) {
            self.prefetch_dir(x);
        }
        for &x in addrs.iter().take(D2) {
            self.prefetch_node(x);
        }
        // While there are addresses D1 ahead (every slice here has `steady` elements, so
        // the loop has no bounds checks) ...
        let far = addrs.get(D1..).unwrap_or(&[]);
        let steady = far.len();
        let near = &addrs.get(D2..).unwrap_or(&[])[..steady];
        let now = &addrs[..steady];
        let early = &mut out[..steady];
        for i in 0..steady {
            self.prefetch_dir(far[i]);
            self.prefetch_node(near[i]);
            early[i] = self.lookup_raw(now[i]);
        }
        // ... then the last ones.
        for i in steady..addrs.len() {
            if let Some(&x) = addrs.get(i + D2) {
                self.prefetch_node(x);
            }
            out[i] = self.lookup_raw(addrs[i]);
        }
    }

    /// The half-word index of the leaf for `a`, from the node at `o` (at depth [`DIR_BITS`]).
    #[inline(always)]
    fn walk(&self, a: u32, mut o: u32) -> u32 {
        let mut shift = DIR_BITS;
        loop {
            let (inner, next) = Node::at(&self.mem, o).step(chunk(a, shift));
            if !inner {
                return next;
            }
            o = next;
            shift += STRIDE;
        }
    }

    /// Bytes of the direct-pointing array, the arena of nodes and leaves, and the map of
    /// end nodes (two words per slot; one entry per distinct value a slot ends with).
    pub fn memory_bytes(&self) -> usize {
        self.dir.len() * 4 + self.mem.capacity() * 4 + self.ends.capacity() * 8
    }

    /// Words in the arena, garbage included (updates measure garbage with it).
    pub fn arena_words(&self) -> usize {
        self.mem.len()
    }

    /// Number of prefixes it was built from.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn lookup(&self, a: Ipv4Addr) -> Option<u32> {
        let v = self.lookup_raw(u32::from(a));
        (v != NO_ROUTE).then_some(v)
    }
}

/// Walks `STRIDE` levels below trie node `n`, filling the 64 positions.
fn expand(t: &BinaryTrie, n: usize, level: u32, pos: usize, inh: u32, out: &mut [(u32, u32); 64]) {
    if level == STRIDE {
        out[pos] = (
            if t.has_children(n) {
                n as u32
            } else {
                crate::NONE
            },
            inh,
        );
        return;
    }
    let node = t.nodes[n];
    for b in 0..2usize {
        let np = (pos << 1) | b;
        match node.child[b] {
            crate::NONE => {
                let span = 1usize << (STRIDE - level - 1);
                out[np * span..(np + 1) * span].fill((crate::NONE, inh));
            }
            c => {
                let cv = t.nodes[c as usize].value;
                let inh = if cv != crate::NONE { cv } else { inh };
                expand(t, c as usize, level + 1, np, inh, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Prefix;
    use proptest::prelude::*;

    fn build(rules: &[(u32, u8, u32)]) -> (BinaryTrie, Poptrie) {
        let mut t = BinaryTrie::new();
        for &(a, l, v) in rules {
            t.insert(Prefix::new(a.into(), l), v);
        }
        let p = Poptrie::build(&t);
        (t, p)
    }

    #[test]
    fn every_depth() {
        let (t, p) = build(&[
            (0, 0, 1),
            (0x0a00_0000, 8, 2),
            (0x0a01_0000, 16, 3),
            (0x0a01_0200, 24, 4),
            (0x0a01_0203, 32, 5),
            (0x0a01_0280, 25, 6),
            (0xc000_0000, 2, 7),
            (0x0a01_0204, 30, 8),
        ]);
        for a in [
            0u32,
            0x0a00_0001,
            0x0a01_0001,
            0x0a01_0201,
            0x0a01_0203,
            0x0a01_0204,
            0x0a01_0207,
            0x0a01_0290,
            0xffff_ffff,
            0xc0a8_0101,
        ] {
            assert_eq!(
                p.lookup(a.into()),
                t.lookup(a.into()),
                "{}",
                Ipv4Addr::from(a)
            );
        }
        let (_, empty) = build(&[]);
        assert_eq!(empty.lookup(Ipv4Addr::new(1, 2, 3, 4)), None);
    }

    proptest! {
        #[test]
        fn matches_the_reference(
            rules in proptest::collection::vec((any::<u32>(), 0u8..=32, 0u32..50), 0..200),
            near in proptest::collection::vec((any::<usize>(), any::<u32>()), 100),
            probes in proptest::collection::vec(any::<u32>(), 100),
        ) {
            let (t, p) = build(&rules);
            // Addresses near prefixes' edges find the bugs; random ones the rest.
            let mut addrs = probes;
            for (i, r) in near {
                if rules.is_empty() { break; }
                let (a, l, _) = rules[i % rules.len()];
                let m = crate::mask(l);
                addrs.push(a & m);
                addrs.push((a & m) | !m);
                addrs.push((a & m) | (r & !m));
                addrs.push(((a & m) | !m).wrapping_add(1));
            }
            let mut out = vec![0; addrs.len()];
            p.lookup_batch_raw(&addrs, &mut out);
            for (a, o) in addrs.iter().zip(out) {
                let want = t.lookup((*a).into());
                prop_assert_eq!(p.lookup((*a).into()), want);
                prop_assert_eq!(o, want.unwrap_or(NO_ROUTE));
            }
        }
    }
}
