//! Longest-prefix-match structures for IPv4 and IPv6 forwarding tables (IPv6: [`v6`]).
//!
//! [`Lpm`] is the interface of the control side. [`BinaryTrie`] is the reference: one node
//! per prefix bit, obviously correct, the table the control side edits, and what every
//! faster structure is compiled from and checked against. [`Poptrie`] is the data plane's
//! structure; [`table::FibWriter`] publishes it loss-free while routes change. [`Dir24`]
//! (DIR-24-8, the design of DPDK's rte_lpm) is kept as a measured contender.
//!
//! # Why Poptrie
//!
//! Measured with `tessera bench fib --dpdk` on this machine kind (2 vCPUs of an AMD EPYC
//! in a VM, 512 KiB L2 per core, 32 MB L3 shared with the host's other tenants), on
//! `ipv4-bgp-2023` (901,899 prefixes, 16 next hops), 4 Mi lookups per workload, batches
//! of 256 (millions of lookups per second). The first nine rows come from one run, with
//! DPDK 22.11 (Debian's libdpdk-dev) on 2 MiB huge pages; the others from earlier runs,
//! as noted:
//!
//! | structure | build | memory | random-prefix single / batched | uniform single / batched |
//! |---|---|---|---|---|
//! | **Poptrie18, top nodes of leafvec and 16-bit leaves only** | **35 ms** | **3.6 MB (4.0 B/prefix)** | **205 / 283** | **232 / 354** |
//! | DPDK rte_lpm (`rte_lpm_lookup` / `rte_lpm_lookup_bulk`) | 136.5 s | 75.0 MB | 68 / 128 | 52 / 95 |
//! | DPDK rte_lpm, `rte_lpm_lookupx4` | - | - | - / 120 | - / 57 |
//! | DPDK rte_fib, DIR24_8 (single: a bulk lookup of one) | 282 ms | - | 26 / 135 | 21 / 98 |
//! | DIR-24-8 (ours) | 95 ms | 67.6 MB (75 B/prefix) | 84 / 127 | 61 / 81 |
//! | DIR-24-8 (ours), first table in huge pages | - | 67.6 MB | 97 / 162 | 64 / 80 |
//! | `ip_network_table-deps-treebitmap` 0.5 | 60 ms | - | 4.8 / - | 8.2 / - |
//! | reference binary trie | - | 25 MB | 1.4 / - | 3.4 / - |
//! | Poptrie18, 24-byte nodes, 16-bit leaves, every slot a node (earlier runs) | 31 ms | 4.7 MB (5.2 B/prefix) | 172 / 272 | 198 / 319 |
//! | Poptrie18, 32-bit leaves, every slot a node (earlier run) | 29 ms | 6.5 MB (7.3 B/prefix) | 156 / 255 | 200 / 316 |
//! | Poptrie18, leaves beside their node (earlier runs) | 28 ms | 6.5 MB | 136 / 203 | 189 / 187 |
//! | Poptrie18 as in the paper, staged batch (earlier runs) | 29 ms | 6.5 MB | 63 / 77 | 116 / 121 |
//! | Poptrie16 as in the paper (earlier runs) | 56 ms | 11.0 MB (12.1 B/prefix) | 25 / 37 | 64 / 60 |
//!
//! The machine is shared and noisy: the reference trie, which does little but wait for
//! memory, runs at 1.0 to 3.5 M/s on the full table depending on the neighbours, and
//! everything else moves with it. So compare rows of one run. Poptrie's batched
//! random-prefix rate as a multiple of DPDK's in the same run, three runs with huge pages
//! (Poptrie at 307, 283 and 293 M/s): rte_lpm 1.94, 2.21 and 2.04 times (its
//! `lookupx4` 2.12 and 2.37 times), rte_fib 1.72, 2.10 and 1.90 times; one run on
//! ordinary pages: rte_lpm 2.81 times, rte_fib 2.91 times. DPDK's rte_fib reached its
//! figure given for this machine kind (180 M/s) in one run (179); rte_lpm stayed at
//! 128-159 M/s against the 225 given. Earlier runs without DPDK: 177-301 M/s for
//! Poptrie, 1.9-2.5 times our DIR-24-8 and 1.5-2.05 times it with huge pages.
//!
//! Poptrie18 meets the memory and build goals (4.0 bytes per prefix, 35-60 ms), updates a
//! slot at a time (200,000-320,000 single updates/s and 400,000-750,000/s in batches of
//! 1,000, each published atomically). DIR-24-8 needs one load for most addresses, but its 64 MiB
//! first table misses in every cache and in the TLB, and is ten times the memory goal.
//! With transparent huge pages forced on for the whole machine (an experiment, `echo
//! always > /sys/kernel/mm/transparent_hugepage/enabled`), DIR-24-8 did 224 M/s batched,
//! which is the figure given for DPDK's rte_lpm on this machine kind; Poptrie gained
//! nothing from huge pages (tried again with the arena and `dir` of the 24-byte-node form
//! in huge pages advised by `madvise`: 1.01 times in a quiet run, within the noise).
//!
//! What made the difference, in the order found (random-prefix batched, M/s):
//! - 77 -> 125: nodes and leaves in one arena, each node's leaves right behind it, so that
//!   the leaf is usually in the cache line of its node; two cache misses per lookup
//!   instead of three.
//! - 125 -> 155: a batch that does not branch on an address's own state.
//! - 155 -> 200: the POPCNT instruction. Rust's default x86-64 target has none, and the
//!   emulated population count is about 15 instructions; the project now builds for
//!   x86-64-v2 (`.cargo/config.toml`). x86-64-v3 (AVX2, BMI2) gained nothing more.
//! - about 200 -> 250: fewer instructions per address, 51 -> 30 in the batch's steady
//!   loop (read in the assembly). Every `dir` slot names a node: a slot that no prefix
//!   longer than /18 reaches names the shared end node of its value, so there is no
//!   "ended in dir" test and no select (the compiler had turned that select back into a
//!   branch, mispredicted on real tables). The common step reads the arena without bounds
//!   checks, made safe by checking every top node once when it is laid out. The position
//!   below `dir` is never computed (shift counts are taken modulo 64), and the deep walk
//!   is out of line. Measured against the previous code alternately, same table, same
//!   hour: 218-228 against 188-197.
//! - 16-bit leaves, two to a word, as in the paper (values are next-hop groups, far fewer
//!   than 65,534): 7.3 -> 5.2 bytes per prefix, and twice as many leaves in a node's
//!   cache lines. Alternating with the 32-bit build: 251 and 269 against 236 and 242 M/s
//!   batched, 169-173 against 128-151 single.
//! - Top nodes that are only their leafvec and leaves: a position with longer prefixes
//!   below it holds the leaf [`poptrie::CHILD`] instead of being tested in `vector`, and
//!   `vector` and `base1` move behind the leaves, where only the rare deep lookup reads
//!   them; `base0` is implicit (the leaves follow the header). The common lookup is then
//!   three dependent loads (`dir`, leafvec, leaf) and 28 instructions per address in the
//!   batch's steady loop (32 before, read in the same build), and the table shrinks from
//!   5.2 to 4.0 bytes per prefix. Against the previous code in one process (a
//!   throwaway harness holding both, each pass after a warm-up pass, medians of 11
//!   alternating passes, two runs): batched random-prefix 1.14 and 1.18 times, single
//!   1.23 and 1.28, uniform 1.16, one address 1.25 and 1.28; 1.2-1.26 times at 10,
//!   1,000 and 10,000 synthetic prefixes.
//!
//! Tried and dropped, alternating with the kept code in one process: prefetch distances
//! from 16/4 to 96/32 (32/8 stays; longer ones lose up to 20%, and with the smaller top
//! nodes 24/6 to 48/16 are within the noise); without the prefetch of the node's second
//! cache line (0.97 times on random-prefix, 1.1 times where the table is hot); a
//! four-stage pipeline that prefetches the exact leaf line (0.95 times); prefetching a
//! third line (0.8 times). Packing top nodes into cache lines so that half of all lookups
//! need one node line, not two, with the second prefetch landing in the node's own line
//! for those (a node placed in the first 16 bytes of a line fits it): 5.1 MB against 3.6
//! for the same nodes laid out end to end, and 0.92-0.96 times their rate. The fully
//! expanded form (64 leaves per top node, DIR-18-6, no popcount): 1.4 times faster where
//! the table is hot, but 7.8 MB, and 0.6-0.8 times as fast on the full table (0.9 with
//! huge pages). A `dir` of 16-bit offsets from a base per 64 slots (512 KiB instead of 1
//! MiB) with the top nodes copied, in slot order, into an arena of their own: 0.96-1.02
//! times on random-prefix, 0.6-0.9 times elsewhere (two more loads per address).
//! Node prefetches as NTA or T1 instead of T0, and the batch loop unrolled by two: within
//! the noise or slower.
//!
//! Where the time goes now: the memory system. Random loads over a buffer of the
//! structure's size run at about 640-850 million per second on this machine kind from 1
//! to 6 MB, 580-650 at 8 MB and 130-300 from 12 MB up (the share of the L3 this VM
//! gets); `bench fib` reports this as `memory_probe`. A lookup reads two or three cache
//! lines (`dir` and one or two of its node's), so 250-300 M/s on the full table is near
//! what the memory gives, while tables that stay in the L1 and L2 caches run at 400-490.
//!
//! Growth, `tessera bench fib --growth --table FILE` (all tables in one process, 11
//! alternating rounds, medians, batched random-prefix): with `ipv4-bgp-2023`, three
//! runs, 475-490 M/s at 10 prefixes, 406-423 at 1,000 (0.86 times), 305-316 at 10,000
//! (0.62-0.67), 234-269 at 167,000 (0.49-0.57) and 248-255 on the full table (0.52-0.53). With the
//! other real tables, one run each, as a ratio of the 10-prefix table in the same run:
//! 2002 (112,986 prefixes) 0.92, 2008 (270,849) 0.39, 2010 (318,457) 0.58, 2014
//! (512,621) 0.61, 2021 (886,117) 0.49. From 10,000 prefixes to the full table the rate
//! holds within 0.8 times; the step is from tables that fit the first-level cache to
//! tables that do not. 2008 is low because 3.9% of its prefixes are longer than /24
//! (0.1% in 2023, none in 2010): a random-prefix lookup goes below the top node several
//! times as often, and each such lookup pays a mispredicted branch and a node that was
//! not prefetched.
//!
//! Growth against DPDK, `bench fib --growth --dpdk` (same tables, same 11 alternating
//! rounds, medians, batched random-prefix, DPDK on huge pages), as a ratio of each
//! structure's 10-prefix rate: Poptrie 501 M/s at 10 prefixes, then 0.87, 0.77, 0.59 and
//! 0.58 (293 M/s on the full table); rte_lpm 1,069 M/s at 10, then 0.62, 0.23, 0.13 and
//! 0.13 (143); rte_fib 796 M/s at 10, then 0.86, 0.41, 0.17 and 0.19 (154). All three
//! slow where the table leaves the caches; Poptrie slows least.
//!
//! Against the goals of issue 3: memory (4.0 of at most 8 bytes per prefix) and build
//! time (35-60 ms of at most one second) are met. The rate goal, 1.5 times rte_lpm's
//! batched random-prefix rate, is met as measured in the same run (1.94-2.21 times
//! rte_lpm on huge pages, three runs); in absolute terms Poptrie ran at 177-307 M/s,
//! against the 337 M/s that 1.5 times the 225 given for rte_lpm would be, while
//! rte_lpm itself ran at 128-159 here. Lookups that do not slow from 10 to 900,000
//! prefixes are not met: the full table runs at 0.52-0.58 times the 10-prefix rate. A
//! 10-prefix table lives in the L1 cache and a full one cannot (every published design
//! needs megabytes, the L2 is 512 KiB), and the full-table rate is near what random
//! cache-line loads give here (`memory_probe`); a layout that reads fewer lines (a
//! 16-bit `dir` of 256 KiB that stays in the L2, with 256-position top nodes down to /24,
//! 3.3 MB; a throwaway prototype with a three-stage pipeline) ran at 0.55-0.77 times
//! Poptrie18. What does not slow is the forwarder: `bench pipeline` forwards 64-byte
//! packets as fast with the full table as with 10 prefixes, within the noise (10.3-11.5
//! Mpps for both in quiet runs; 5.5-9.5 for both in three noisy runs of a later session).
#![deny(unsafe_code)]

use std::net::Ipv4Addr;

pub mod dir24;
pub mod poptrie;
pub mod table;
pub mod v6;
pub use dir24::Dir24;
pub use poptrie::Poptrie;
pub use table::{FibReader, FibReader6, FibWriter, FibWriter6};
pub use v6::{BinaryTrie6, Poptrie6, Prefix6};

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
