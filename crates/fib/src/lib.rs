//! Longest-prefix-match structures for IPv4 forwarding tables.
//!
//! [`Lpm`] is the interface of the control side. [`BinaryTrie`] is the reference: one node
//! per prefix bit, obviously correct, the table the control side edits, and what every
//! faster structure is compiled from and checked against. [`Poptrie`] is the data plane's
//! structure; [`table::FibWriter`] publishes it loss-free while routes change. [`Dir24`]
//! (DIR-24-8, the design of DPDK's rte_lpm) is kept as a measured contender.
//!
//! # Why Poptrie
//!
//! Measured with `tessera bench fib` on this machine kind (2 vCPUs of an AMD EPYC in a
//! VM, 512 KiB L2 per core, 32 MB L3), on `ipv4-bgp-2023` (901,899 prefixes, 16 next hops),
//! one run, 4 Mi lookups per workload (millions of lookups per second):
//!
//! | structure | build | memory | random-prefix single / batched | uniform single / batched |
//! |---|---|---|---|---|
//! | **Poptrie18, node and leaves side by side** | **28 ms** | **6.5 MB (7.3 B/prefix)** | **136 / 203** | **189 / 187** |
//! | Poptrie18 as in the paper (nodes and leaves apart), staged batch | 29 ms | 6.5 MB | 63 / 77 | 116 / 121 |
//! | Poptrie16, as in the paper | 56 ms | 11.0 MB (12.1 B/prefix) | 25 / 37 | 64 / 60 |
//! | DIR-24-8 | 69 ms | 67.6 MB (75 B/prefix) | 153 / 153 | 97 / 111 |
//! | `ip_network_table-deps-treebitmap` 0.5 | 57 ms | - | 15.5 / - | 18.6 / - |
//! | reference binary trie | 67 ms | 25 MB | 3.3 / - | 7.3 / - |
//!
//! (The second and third rows are from earlier runs of the same command, before the
//! changes below.)
//!
//! Poptrie18 meets the memory and build goals (7.3 bytes per prefix, 28 ms), updates a slot
//! at a time (about 200,000 single updates/s and 880,000/s in batches of 1,000, each
//! published atomically), and its batched lookup is 1.3 times DIR-24-8's on random-prefix
//! addresses and 1.7 times on uniform ones. DIR-24-8 needs one load for most addresses, but
//! its 64 MiB first table misses in every cache and in the TLB, and is ten times the
//! memory goal. With transparent huge pages forced on for the whole machine (an experiment,
//! `echo always > /sys/kernel/mm/transparent_hugepage/enabled`), DIR-24-8 did 224 M/s
//! batched, which is the figure given for DPDK's rte_lpm on this machine kind; Poptrie
//! gained nothing from huge pages.
//!
//! What made the difference, in the order found (random-prefix batched, M/s):
//! - 77 -> 125: nodes and leaves in one arena, each node's leaves right behind it, so that
//!   the leaf is usually in the cache line of its node; two cache misses per lookup
//!   instead of three.
//! - 125 -> 155: a batch that never branches on an address's own state (an address that
//!   ends in `dir` walks a dummy node), because those branches are as good as random.
//! - 155 -> 200: the POPCNT instruction. Rust's default x86-64 target has none, and the
//!   emulated population count is about 15 instructions; the project now builds for
//!   x86-64-v2 (`.cargo/config.toml`). x86-64-v3 (AVX2, BMI2) gained nothing more.
//! - The software pipeline of [`Poptrie::lookup_batch_raw`] and the staged batch do the same
//!   on the full table; the pipeline is 1.2 times faster on small tables, so it stayed.
//!
//! Where the time goes now: `bench fib` also reads an array of the structure's size at
//! random places (`memory_probe`): about 540 million chains of two dependent loads per
//! second, against 203 million lookups. The lookup is bound by its own instructions (about
//! 25 per address, plus the pipeline's), not by the memory system; with all of it in the
//! L1 cache (`one`) the batch does 305 M/s.
//!
//! Against the goal of 1.5 times rte_lpm (about 337 M/s batched, random-prefix): not met,
//! 0.9 times rte_lpm's 225. The goal of not slowing as the table grows, batched random-
//! prefix lookups on real tables: 222 M/s at 112,986 prefixes (2002), 214 at 318,457
//! (2010), 202 at 512,621 (2014), 195 at 886,117 (2021), 204 at 901,899 (2023), so flat
//! from a tenth of a full table to a full one; but 305 M/s at 10 prefixes and 251 at
//! 10,000 (synthetic), where everything fits the L1 and L2 caches.
#![deny(unsafe_code)]

use std::net::Ipv4Addr;

pub mod dir24;
pub mod poptrie;
pub mod table;
pub use dir24::Dir24;
pub use poptrie::Poptrie;
pub use table::{FibReader, FibWriter};

/// An IPv4 prefix with its host bits cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix {
    addr: u32,
    len: u8,
}

/// Why a text is not a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrefixError {
    BadAddress,
    BadLength,
    /// Bits set past the length, like `10.0.0.1/8`.
    HostBitsSet,
}

impl core::fmt::Display for PrefixError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            PrefixError::BadAddress => "not an IPv4 address",
            PrefixError::BadLength => "prefix length is not 0 to 32",
            PrefixError::HostBitsSet => "host bits are set past the prefix length",
        })
    }
}

impl Prefix {
    /// A prefix from an address and length, clearing host bits.
    pub fn new(addr: Ipv4Addr, len: u8) -> Prefix {
        let len = len.min(32);
        Prefix {
            addr: u32::from(addr) & mask(len),
            len,
        }
    }

    /// Parses `a.b.c.d/len`, or a bare address as a /32. Host bits must be clear.
    pub fn parse_strict(s: &str) -> Result<Prefix, PrefixError> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, l.parse::<u8>().map_err(|_| PrefixError::BadLength)?),
            None => (s, 32),
        };
        if l > 32 {
            return Err(PrefixError::BadLength);
        }
        let a: Ipv4Addr = a.parse().map_err(|_| PrefixError::BadAddress)?;
        let p = Prefix::new(a, l);
        if u32::from(a) != p.addr {
            return Err(PrefixError::HostBitsSet);
        }
        Ok(p)
    }

    pub fn addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.addr)
    }

    pub fn bits(&self) -> u32 {
        self.addr
    }

    #[expect(
        clippy::len_without_is_empty,
        reason = "the prefix length, not a collection size"
    )]
    pub fn len(&self) -> u8 {
        self.len
    }

    /// True for the default route 0.0.0.0/0.
    pub fn is_default(&self) -> bool {
        self.len == 0
    }

    pub fn contains(&self, a: Ipv4Addr) -> bool {
        u32::from(a) & mask(self.len) == self.addr
    }
}

impl core::str::FromStr for Prefix {
    type Err = PrefixError;
    /// As [`Prefix::parse_strict`].
    fn from_str(s: &str) -> Result<Prefix, PrefixError> {
        Prefix::parse_strict(s)
    }
}

impl core::fmt::Display for Prefix {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}/{}", self.addr(), self.len)
    }
}

/// The netmask of a prefix length (0..=32).
#[inline]
pub fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len.min(32) as u32)
    }
}

/// A longest-prefix-match table from prefixes to values.
pub trait Lpm {
    /// The value of the longest prefix containing `a`.
    fn lookup(&self, a: Ipv4Addr) -> Option<u32>;

    /// Looks up every address of `addrs` into `out` (same length). Structures that can
    /// overlap memory accesses override this.
    fn lookup_batch(&self, addrs: &[Ipv4Addr], out: &mut [Option<u32>]) {
        for (a, o) in addrs.iter().zip(out.iter_mut()) {
            *o = self.lookup(*a);
        }
    }

    /// Adds or replaces a prefix; returns the value it replaced.
    fn insert(&mut self, p: Prefix, value: u32) -> Option<u32>;

    /// Removes a prefix; returns its value.
    fn remove(&mut self, p: Prefix) -> Option<u32>;

    /// The exact-match value of a prefix.
    fn get(&self, p: Prefix) -> Option<u32>;

    /// Number of prefixes.
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

const NONE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Node {
    child: [u32; 2],
    value: u32,
}

/// The reference structure: a binary trie, one level per bit, nodes in an arena.
///
/// Lookup walks at most 32 nodes. Removal leaves empty nodes in place (they are reused by
/// later insertions of the same prefixes); the arena only grows.
#[derive(Clone)]
pub struct BinaryTrie {
    nodes: Vec<Node>,
    count: usize,
}

impl Default for BinaryTrie {
    fn default() -> Self {
        Self::new()
    }
}

impl BinaryTrie {
    pub fn new() -> Self {
        BinaryTrie {
            nodes: vec![Node {
                child: [NONE; 2],
                value: NONE,
            }],
            count: 0,
        }
    }

    fn has_children(&self, n: usize) -> bool {
        let c = self.nodes[n].child;
        c[0] != NONE || c[1] != NONE
    }

    /// Bytes held by the node arena.
    pub fn memory_bytes(&self) -> usize {
        self.nodes.capacity() * core::mem::size_of::<Node>()
    }

    fn find(&self, p: Prefix) -> Option<usize> {
        let mut n = 0usize;
        for i in 0..p.len {
            let bit = (p.addr >> (31 - i)) & 1;
            let c = self.nodes[n].child[bit as usize];
            if c == NONE {
                return None;
            }
            n = c as usize;
        }
        Some(n)
    }

    /// Every (prefix, value), in address order with shorter prefixes first.
    pub fn iter(&self) -> Vec<(Prefix, u32)> {
        let mut out = Vec::with_capacity(self.count);
        let mut stack = vec![(0usize, 0u32, 0u8)];
        while let Some((n, addr, len)) = stack.pop() {
            let node = self.nodes[n];
            if node.value != NONE {
                out.push((Prefix { addr, len }, node.value));
            }
            for bit in [1u32, 0] {
                let c = node.child[bit as usize];
                if c != NONE {
                    stack.push((c as usize, addr | (bit << (31 - len as u32)), len + 1));
                }
            }
        }
        out
    }
}

impl Lpm for BinaryTrie {
    fn lookup(&self, a: Ipv4Addr) -> Option<u32> {
        let a = u32::from(a);
        let mut n = 0usize;
        let mut best = self.nodes[0].value;
        for i in 0..32 {
            let c = self.nodes[n].child[((a >> (31 - i)) & 1) as usize];
            if c == NONE {
                break;
            }
            n = c as usize;
            if self.nodes[n].value != NONE {
                best = self.nodes[n].value;
            }
        }
        (best != NONE).then_some(best)
    }

    fn insert(&mut self, p: Prefix, value: u32) -> Option<u32> {
        assert!(value != NONE, "value u32::MAX is reserved");
        let mut n = 0usize;
        for i in 0..p.len {
            let bit = ((p.addr >> (31 - i)) & 1) as usize;
            let c = self.nodes[n].child[bit];
            n = if c == NONE {
                let id = self.nodes.len() as u32;
                self.nodes.push(Node {
                    child: [NONE; 2],
                    value: NONE,
                });
                self.nodes[n].child[bit] = id;
                id as usize
            } else {
                c as usize
            };
        }
        let old = core::mem::replace(&mut self.nodes[n].value, value);
        if old == NONE {
            self.count += 1;
            None
        } else {
            Some(old)
        }
    }

    fn remove(&mut self, p: Prefix) -> Option<u32> {
        let n = self.find(p)?;
        let old = core::mem::replace(&mut self.nodes[n].value, NONE);
        if old == NONE {
            None
        } else {
            self.count -= 1;
            Some(old)
        }
    }

    fn get(&self, p: Prefix) -> Option<u32> {
        let v = self.nodes[self.find(p)?].value;
        (v != NONE).then_some(v)
    }

    fn len(&self) -> usize {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> Prefix {
        Prefix::parse_strict(s).unwrap()
    }

    #[test]
    fn longest_match_wins() {
        let mut t = BinaryTrie::new();
        t.insert(p("0.0.0.0/0"), 1);
        t.insert(p("10.0.0.0/8"), 2);
        t.insert(p("10.1.0.0/16"), 3);
        t.insert(p("10.1.2.3/32"), 4);
        let l = |t: &BinaryTrie, s: &str| t.lookup(s.parse().unwrap());
        assert_eq!(l(&t, "9.9.9.9"), Some(1));
        assert_eq!(l(&t, "10.200.0.1"), Some(2));
        assert_eq!(l(&t, "10.1.9.9"), Some(3));
        assert_eq!(l(&t, "10.1.2.3"), Some(4));
        assert_eq!(t.remove(p("10.1.0.0/16")), Some(3));
        assert_eq!(l(&t, "10.1.9.9"), Some(2));
        assert_eq!(t.len(), 3);
        assert_eq!(t.remove(p("10.1.0.0/16")), None);
    }

    #[test]
    fn parse_errors() {
        assert_eq!(
            Prefix::parse_strict("10.0.0.1/8"),
            Err(PrefixError::HostBitsSet)
        );
        assert_eq!(
            Prefix::parse_strict("10.0.0.0/33"),
            Err(PrefixError::BadLength)
        );
        assert_eq!(
            Prefix::parse_strict("10.0.0/8"),
            Err(PrefixError::BadAddress)
        );
        assert_eq!(p("10.0.0.1").len(), 32);
    }

    /// Linear scan: the simplest possible LPM, to check the trie against.
    fn scan(rules: &[(Prefix, u32)], a: Ipv4Addr) -> Option<u32> {
        rules
            .iter()
            .filter(|(p, _)| p.contains(a))
            .max_by_key(|(p, _)| p.len())
            .map(|r| r.1)
    }

    proptest! {
        #[test]
        fn trie_matches_linear_scan(
            rules in proptest::collection::vec((any::<u32>(), 0u8..=32, 0u32..1000), 0..60),
            probes in proptest::collection::vec(any::<u32>(), 50)
        ) {
            let mut t = BinaryTrie::new();
            let mut set: std::collections::BTreeMap<Prefix, u32> = Default::default();
            for (a, l, v) in rules {
                let pf = Prefix::new(a.into(), l);
                t.insert(pf, v);
                set.insert(pf, v);
            }
            let flat: Vec<_> = set.into_iter().collect();
            prop_assert_eq!(t.len(), flat.len());
            prop_assert_eq!(t.iter(), flat.clone());
            for a in probes.into_iter().chain(flat.iter().map(|r| r.0.bits())) {
                prop_assert_eq!(t.lookup(a.into()), scan(&flat, a.into()));
            }
        }
    }
}
