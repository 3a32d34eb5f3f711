//! DIR-24-8 (Gupta, Lin and McKeown, INFOCOM 1998; the design of DPDK's rte_lpm): a table
//! of 2^24 entries indexed by the top 24 bits, and groups of 256 entries for the last 8
//! bits of longer prefixes. One memory access for prefixes up to /24, two beyond; 64 MiB
//! for the first table whatever the route count. Kept as a measured contender of
//! [`crate::Poptrie`] (see `tessera bench fib`).

use crate::BinaryTrie;
use std::net::Ipv4Addr;

const EXT: u32 = 1 << 31;

/// A compiled, read-only DIR-24-8 table. Values must be below [`crate::poptrie::NO_ROUTE`]
/// (the table could hold more, but `lookup_raw` answers as Poptrie does).
#[derive(Debug, Clone)]
pub struct Dir24 {
    tbl24: Vec<u32>,
    tbl8: Vec<u32>,
}

impl Dir24 {
    /// Compiles from a binary trie: shorter prefixes first, so longer ones overwrite them.
    pub fn build(t: &BinaryTrie) -> Dir24 {
        Dir24::build_in(t, Vec::new())
    }

    /// As [`Dir24::build`], with the first table in `tbl24`, an empty vector whose capacity
    /// is used if it suffices: a caller can prepare that memory (ask the kernel for huge
    /// pages, as DPDK's rte_lpm has them) before the table first touches it.
    pub fn build_in(t: &BinaryTrie, mut tbl24: Vec<u32>) -> Dir24 {
        let mut routes = t.iter();
        routes.sort_by_key(|(p, _)| p.len());
        tbl24.clear();
        tbl24.resize(1 << 24, 0);
        let mut d = Dir24 {
            tbl24,
            tbl8: Vec::new(),
        };
        for (p, v) in routes {
            let v = v + 1; // 0 means no route
            if p.len() <= 24 {
                let first = (p.bits() >> 8) as usize;
                let n = 1usize << (24 - p.len());
                d.tbl24[first..first + n].fill(v);
            } else {
                let i = (p.bits() >> 8) as usize;
                let e = d.tbl24[i];
                let g = if e & EXT != 0 {
                    (e & !EXT) as usize
                } else {
                    let g = d.tbl8.len() / 256;
                    d.tbl8.extend(std::iter::repeat_n(e, 256));
                    d.tbl24[i] = EXT | g as u32;
                    g
                };
                let first = g * 256 + (p.bits() & 0xff) as usize;
                let n = 1usize << (32 - p.len());
                d.tbl8[first..first + n].fill(v);
            }
        }
        d
    }

    #[inline(always)]
    fn raw(&self, a: u32) -> u32 {
        let e = self.tbl24[(a >> 8) as usize];
        if e & EXT == 0 {
            e
        } else {
            self.tbl8[((e & !EXT) as usize) * 256 + (a & 0xff) as usize]
        }
    }

    pub fn lookup(&self, a: Ipv4Addr) -> Option<u32> {
        self.raw(u32::from(a)).checked_sub(1)
    }

    /// Value or [`crate::poptrie::NO_ROUTE`], as `Poptrie::lookup_raw`.
    #[inline(always)]
    pub fn lookup_raw(&self, a: u32) -> u32 {
        self.raw(a)
            .checked_sub(1)
            .unwrap_or(crate::poptrie::NO_ROUTE)
    }

    /// Looks up `addrs` into `out`, prefetching every first-level entry of a block of 64
    /// addresses before reading any of them.
    pub fn lookup_batch_raw(&self, addrs: &[u32], out: &mut [u32]) {
        for (a, o) in addrs.chunks(64).zip(out.chunks_mut(64)) {
            for &x in a {
                crate::poptrie::prefetch(&self.tbl24[(x >> 8) as usize]);
            }
            for (x, y) in a.iter().zip(o.iter_mut()) {
                *y = self.lookup_raw(*x);
            }
        }
    }

    /// The first table (2^24 entries) and the groups of 256 entries for longer prefixes,
    /// as laid out: 0 is no route, `v + 1` is value `v`, and bit 31 set names a group (the
    /// other bits its index). For compilers into other layouts (the XDP fast path's).
    pub fn tables(&self) -> (&[u32], &[u32]) {
        (&self.tbl24, &self.tbl8)
    }

    pub fn memory_bytes(&self) -> usize {
        (self.tbl24.capacity() + self.tbl8.capacity()) * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Lpm, Prefix};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn matches_the_reference(rules in proptest::collection::vec((any::<u32>(), 0u8..=32, 0u32..50), 0..100),
                                 probes in proptest::collection::vec(any::<u32>(), 200)) {
            let mut t = BinaryTrie::new();
            for (a, l, v) in &rules {
                t.insert(Prefix::new((*a).into(), *l), *v);
            }
            let d = Dir24::build(&t);
            let addrs: Vec<u32> = probes.into_iter().chain(rules.iter().flat_map(|r| [r.0 & crate::mask(r.1), r.0 | !crate::mask(r.1)])).collect();
            for a in addrs {
                prop_assert_eq!(d.lookup(a.into()), t.lookup(a.into()));
            }
        }
    }
}
