//! Poptrie (Asai and Ohara, SIGCOMM 2015): a compressed multiway trie for IPv4 LPM.
//!
//! The top 18 bits index a direct-pointing array `dir` (1 MiB): each entry is either a
//! leaf (a value with [`LEAF`] set) or the index of an internal node. Internal nodes consume
//! 6 bits each (18 + 6 + 6 + 6 covers 32; the last stride is padded with zeros). A node
//! holds two 64-bit vectors: `vector` marks the positions that are internal children,
//! stored contiguously from `base1`, and `leafvec` marks where a run of equal leaves starts
//! (leaf compression), the runs stored contiguously from `base0`. A child's index is a
//! population count of the vector below its position, so a lookup is at most four
//! dependent loads (dir, then up to three nodes) plus one leaf load.
//!
//! The structure is compiled from a [`BinaryTrie`] (the control side's table) and never
//! changed in place; see [`crate::table`] for updates.

use crate::{BinaryTrie, Lpm};
use std::net::Ipv4Addr;

/// Marks a direct-pointing entry as a leaf.
pub const LEAF: u32 = 1 << 31;
/// The value of "no route" in leaves; values must be below it.
pub const NO_ROUTE: u32 = LEAF - 1;

const STRIDE: u32 = 6;
/// Bits resolved by the direct-pointing array (Poptrie18 of the paper).
pub const DIR_BITS: u32 = 18;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
struct Node {
    vector: u64,
    leafvec: u64,
    base0: u32,
    base1: u32,
}

/// A compiled, read-only LPM table.
#[derive(Debug, Clone)]
pub struct Poptrie {
    dir: Box<[u32]>,
    nodes: Vec<Node>,
    leaves: Vec<u32>,
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

/// Bits `0..=v` set.
#[inline(always)]
fn upto(v: u32) -> u64 {
    u64::MAX >> (63 - v)
}

impl Poptrie {
    /// Compiles the table from a binary trie. Values must be below [`NO_ROUTE`].
    pub fn build(t: &BinaryTrie) -> Poptrie {
        let mut p = Poptrie {
            dir: vec![LEAF | NO_ROUTE; 1 << DIR_BITS].into_boxed_slice(),
            nodes: Vec::new(),
            leaves: Vec::new(),
            count: t.len(),
        };
        p.fill_dir(t, 0, 0, 0, NO_ROUTE);
        p.nodes.shrink_to_fit();
        p.leaves.shrink_to_fit();
        p
    }

    fn fill_dir(&mut self, t: &BinaryTrie, n: usize, depth: u32, bits: u32, inh: u32) {
        let node = t.nodes[n];
        let inh = if node.value != crate::NONE {
            node.value
        } else {
            inh
        };
        if depth == DIR_BITS {
            self.dir[bits as usize] = if t.has_children(n) {
                let slot = self.nodes.len();
                self.nodes.push(Node::default());
                self.build_node(t, slot, n, inh);
                slot as u32
            } else {
                LEAF | inh
            };
            return;
        }
        for b in 0..2u32 {
            let nb = (bits << 1) | b;
            match node.child[b as usize] {
                crate::NONE => {
                    let span = 1usize << (DIR_BITS - depth - 1);
                    let from = (nb as usize) * span;
                    self.dir[from..from + span].fill(LEAF | inh);
                }
                c => self.fill_dir(t, c as usize, depth + 1, nb, inh),
            }
        }
    }

    /// Builds the node for trie node `n` (whose value is already folded into `inh`) into
    /// `self.nodes[slot]`.
    fn build_node(&mut self, t: &BinaryTrie, slot: usize, n: usize, inh: u32) {
        // The 64 positions: the trie node there (if it has deeper prefixes) and the value
        // of the longest prefix covering the position.
        let mut kids = [(crate::NONE, NO_ROUTE); 64];
        expand(t, n, 0, 0, inh, &mut kids);
        let mut vector = 0u64;
        let mut leafvec = 0u64;
        let base0 = self.leaves.len() as u32;
        let mut last = None;
        for (v, &(k, val)) in kids.iter().enumerate() {
            if k != crate::NONE {
                vector |= 1 << v;
            } else if last != Some(val) {
                leafvec |= 1 << v;
                self.leaves.push(val);
                last = Some(val);
            }
        }
        let base1 = self.nodes.len() as u32;
        let m = vector.count_ones() as usize;
        self.nodes.resize(self.nodes.len() + m, Node::default());
        self.nodes[slot] = Node {
            vector,
            leafvec,
            base0,
            base1,
        };
        let mut i = 0;
        for &(k, val) in kids.iter() {
            if k != crate::NONE {
                self.build_node(t, base1 as usize + i, k as usize, val);
                i += 1;
            }
        }
    }

    /// Recompiles the subtree of one direct-pointing slot (a /18) from `t`, appending its nodes and leaves (the
    /// old ones become garbage until the next full build).
    pub fn rebuild_slot(&mut self, t: &BinaryTrie, slot: u32) {
        let mut n = 0usize;
        let mut inh = match t.nodes[0].value {
            crate::NONE => NO_ROUTE,
            v => v,
        };
        for i in 0..DIR_BITS {
            let bit = ((slot >> (DIR_BITS - 1 - i)) & 1) as usize;
            match t.nodes[n].child[bit] {
                crate::NONE => {
                    self.dir[slot as usize] = LEAF | inh;
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
        self.dir[slot as usize] = if t.has_children(n) {
            let idx = self.nodes.len();
            self.nodes.push(Node::default());
            self.build_node(t, idx, n, inh);
            idx as u32
        } else {
            LEAF | inh
        };
        self.count = t.len();
    }

    /// The raw value for `a`: [`NO_ROUTE`] when no prefix matches.
    #[inline(always)]
    pub fn lookup_raw(&self, a: u32) -> u32 {
        let d = self.dir[(a >> (32 - DIR_BITS)) as usize];
        if d & LEAF != 0 {
            return d & !LEAF;
        }
        let a = (a as u64) << 32;
        let mut idx = d as usize;
        let mut shift = DIR_BITS;
        loop {
            let n = self.nodes[idx];
            let v = ((a << shift) >> (64 - STRIDE)) as u32;
            if n.vector & (1 << v) != 0 {
                idx = (n.base1 + (n.vector & upto(v)).count_ones() - 1) as usize;
                shift += STRIDE;
            } else {
                return self.leaves[(n.base0 + (n.leafvec & upto(v)).count_ones() - 1) as usize];
            }
        }
    }

    /// Looks up `addrs` into `out` (same length). Works through up to 256 addresses at a
    /// time in stages: each stage issues a prefetch for every address's next load before
    /// the following stage reads any of them, so the cache misses of different addresses
    /// overlap instead of queueing behind each other.
    pub fn lookup_batch_raw(&self, addrs: &[u32], out: &mut [u32]) {
        const B: usize = 256;
        let top = 32 - DIR_BITS;
        for (a, o) in addrs.chunks(B).zip(out.chunks_mut(B)) {
            for &x in a {
                prefetch(&self.dir[(x >> top) as usize]);
            }
            let mut idx = [0u32; B];
            let mut pending = [0u16; B];
            let mut np = 0;
            for (i, &x) in a.iter().enumerate() {
                let d = self.dir[(x >> top) as usize];
                if d & LEAF != 0 {
                    o[i] = d & !LEAF;
                } else {
                    idx[i] = d;
                    pending[np] = i as u16;
                    np += 1;
                    prefetch(&self.nodes[d as usize]);
                }
            }
            // Walk the nodes one level per pass; lanes that reach a leaf record its index.
            let mut leaf_at = [0u32; B];
            let mut leafy = [0u16; B];
            let mut nl = 0;
            let mut shift = DIR_BITS;
            while np > 0 {
                let mut k = 0;
                for j in 0..np {
                    let i = pending[j] as usize;
                    let n = self.nodes[idx[i] as usize];
                    let v = ((((a[i] as u64) << 32) << shift) >> (64 - STRIDE)) as u32;
                    if n.vector & (1 << v) != 0 {
                        let c = n.base1 + (n.vector & upto(v)).count_ones() - 1;
                        idx[i] = c;
                        pending[k] = i as u16;
                        k += 1;
                        prefetch(&self.nodes[c as usize]);
                    } else {
                        let l = n.base0 + (n.leafvec & upto(v)).count_ones() - 1;
                        leaf_at[i] = l;
                        leafy[nl] = i as u16;
                        nl += 1;
                        prefetch(&self.leaves[l as usize]);
                    }
                }
                np = k;
                shift += STRIDE;
            }
            for &i in &leafy[..nl] {
                o[i as usize] = self.leaves[leaf_at[i as usize] as usize];
            }
        }
    }

    /// Bytes of the direct-pointing array, nodes and leaves.
    pub fn memory_bytes(&self) -> usize {
        self.dir.len() * 4
            + self.nodes.capacity() * std::mem::size_of::<Node>()
            + self.leaves.capacity() * 4
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
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
