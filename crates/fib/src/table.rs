//! Loss-free updates: a writer that owns the route set and publishes compiled snapshots.
//!
//! The writer keeps the reference trie (the control-side table) and two compiled tables:
//! the published one, which readers load, and a spare. An update changes the trie, then
//! brings the spare up to date by recompiling only what changed since the spare was last
//! current (for IPv4's [`Poptrie`] the direct-pointing slots, /18s, a prefix covers; for
//! IPv6's [`Poptrie6`] the node a prefix ends in, in place), and
//! publishes it with one atomic pointer swap; the previous snapshot becomes
//! the spare. Before touching the spare, the writer waits until no reader still holds it
//! (readers hold a snapshot for one batch). Readers therefore never block and never see a
//! half-applied change: each lookup sees either the old or the new table.
//!
//! Recompiled slots leave their old nodes behind; when the garbage reaches the size of the
//! live structure, the spare is rebuilt from scratch instead. One [`Writer`] serves both
//! address families through [`Family`].

use crate::poptrie::Poptrie;
use crate::v6::{BinaryTrie6, Poptrie6, Prefix6};
use crate::{BinaryTrie, Lpm, Prefix};
use arc_swap::ArcSwap;
use std::sync::Arc;

/// An address family's tables, as the writer needs them.
pub trait Family {
    type Prefix: Copy;
    /// The control side's table.
    type Rib;
    /// The compiled table readers look up in.
    type Table: Clone;
    /// A part of the compiled table to recompile.
    type Change: Copy + Ord;
    fn insert(rib: &mut Self::Rib, p: Self::Prefix, v: u32) -> Option<u32>;
    fn remove(rib: &mut Self::Rib, p: Self::Prefix) -> Option<u32>;
    fn build(rib: &Self::Rib) -> Self::Table;
    /// The parts to recompile when `p` changed.
    fn changes(p: Self::Prefix, out: &mut Vec<Self::Change>);
    /// Recompiles one part of `t` from `rib`.
    fn rebuild(t: &mut Self::Table, rib: &Self::Rib, c: Self::Change);
    fn arena_words(t: &Self::Table) -> usize;
}

/// IPv4: [`BinaryTrie`] compiled to [`Poptrie`].
pub enum V4 {}
/// IPv6: [`BinaryTrie6`] compiled to [`Poptrie6`].
pub enum V6 {}

impl Family for V4 {
    type Prefix = Prefix;
    type Rib = BinaryTrie;
    type Table = Poptrie;
    /// A direct-pointing slot (/18).
    type Change = u32;
    fn insert(rib: &mut BinaryTrie, p: Prefix, v: u32) -> Option<u32> {
        rib.insert(p, v)
    }
    fn remove(rib: &mut BinaryTrie, p: Prefix) -> Option<u32> {
        rib.remove(p)
    }
    fn build(rib: &BinaryTrie) -> Poptrie {
        Poptrie::build(rib)
    }
    fn changes(p: Prefix, out: &mut Vec<u32>) {
        let bits = crate::poptrie::DIR_BITS;
        let first = p.bits() >> (32 - bits);
        let n = 1 << bits.saturating_sub(p.len() as u32);
        out.extend(first..first + n);
    }
    fn rebuild(t: &mut Poptrie, rib: &BinaryTrie, slot: u32) {
        t.rebuild_slot(rib, slot)
    }
    fn arena_words(t: &Poptrie) -> usize {
        t.arena_words()
    }
}

impl Family for V6 {
    type Prefix = Prefix6;
    type Rib = BinaryTrie6;
    type Table = Poptrie6;
    /// The prefix itself: [`Poptrie6::rebuild_prefix`].
    type Change = Prefix6;
    fn insert(rib: &mut BinaryTrie6, p: Prefix6, v: u32) -> Option<u32> {
        rib.insert(p, v)
    }
    fn remove(rib: &mut BinaryTrie6, p: Prefix6) -> Option<u32> {
        rib.remove(p)
    }
    fn build(rib: &BinaryTrie6) -> Poptrie6 {
        Poptrie6::build(rib)
    }
    fn changes(p: Prefix6, out: &mut Vec<Prefix6>) {
        out.push(p)
    }
    fn rebuild(t: &mut Poptrie6, rib: &BinaryTrie6, p: Prefix6) {
        t.rebuild_prefix(rib, p)
    }
    fn arena_words(t: &Poptrie6) -> usize {
        t.arena_words()
    }
}

/// Changes to the spare beyond which it is compiled whole instead: a full IPv6 table
/// builds in about 45 ms, about as long as 11,000 changes recompiled one by one (a
/// snapshot of a whole table, say, arriving at a back-end).
pub const FULL_BUILD_AFTER: usize = 8192;

/// What readers hold: load a snapshot with `load_full()` once per batch.
pub type Reader<F> = Arc<ArcSwap<<F as Family>::Table>>;
/// The IPv4 readers' handle.
pub type FibReader = Reader<V4>;
/// The IPv4 writer.
pub type FibWriter = Writer<V4>;
/// The IPv6 readers' handle.
pub type FibReader6 = Reader<V6>;
/// The IPv6 writer.
pub type FibWriter6 = Writer<V6>;

/// The control side of a forwarding table.
pub struct Writer<F: Family> {
    rib: F::Rib,
    shared: Reader<F>,
    /// The unpublished copy; `None` only inside `publish`.
    spare: Option<Arc<F::Table>>,
    /// Parts changed since the spare was last current.
    spare_dirty: Vec<F::Change>,
    /// The spare is stale everywhere (after a bulk load): rebuild it whole.
    spare_stale: bool,
    /// Parts changed by the update being applied.
    dirty: Vec<F::Change>,
    /// Node count right after the last full build, to measure garbage against.
    built_words: usize,
    pub full_builds: u64,
}

impl<F: Family> Writer<F> {
    /// Compiles `rib` and returns the writer with the readers' handle.
    pub fn new(rib: F::Rib) -> (Writer<F>, Reader<F>) {
        let p = F::build(&rib);
        let built_words = F::arena_words(&p);
        let shared = Arc::new(ArcSwap::from_pointee(p.clone()));
        let w = Writer {
            rib,
            shared: shared.clone(),
            spare: Some(Arc::new(p)),
            spare_dirty: Vec::new(),
            spare_stale: false,
            dirty: Vec::new(),
            built_words,
            full_builds: 1,
        };
        (w, shared)
    }

    pub fn reader(&self) -> Reader<F> {
        self.shared.clone()
    }

    pub fn rib(&self) -> &F::Rib {
        &self.rib
    }

    /// Applies a batch of changes (`Some(value)` adds or replaces, `None` withdraws) and
    /// publishes once. Returns how many changed the table.
    pub fn apply(&mut self, changes: impl IntoIterator<Item = (F::Prefix, Option<u32>)>) -> usize {
        let mut n = 0;
        for (p, v) in changes {
            let changed = match v {
                Some(v) => F::insert(&mut self.rib, p, v) != Some(v),
                None => F::remove(&mut self.rib, p).is_some(),
            };
            if changed {
                F::changes(p, &mut self.dirty);
                n += 1;
            }
        }
        if n > 0 {
            self.publish();
        }
        n
    }

    pub fn insert(&mut self, p: F::Prefix, v: u32) -> bool {
        self.apply([(p, Some(v))]) == 1
    }

    pub fn remove(&mut self, p: F::Prefix) -> bool {
        self.apply([(p, None)]) == 1
    }

    /// Replaces the whole table (a bulk load): compiled from scratch, published at once.
    pub fn replace(&mut self, rib: F::Rib) {
        self.rib = rib;
        let p = F::build(&self.rib);
        self.built_words = F::arena_words(&p);
        self.full_builds += 1;
        self.spare = Some(self.shared.swap(Arc::new(p)));
        self.spare_dirty.clear();
        self.spare_stale = true;
        self.dirty.clear();
    }

    fn publish(&mut self) {
        // Wait until no reader holds the spare (readers hold a snapshot for one batch).
        let Some(mut arc) = self.spare.take() else {
            return;
        };
        let spare = loop {
            if let Some(s) = Arc::get_mut(&mut arc) {
                break s;
            }
            std::thread::yield_now();
        };
        self.dirty.sort_unstable();
        self.dirty.dedup();
        let many = self.dirty.len() + self.spare_dirty.len() > FULL_BUILD_AFTER;
        let full =
            self.spare_stale || many || F::arena_words(spare) > 2 * self.built_words + 4096 * 6;
        if full {
            *spare = F::build(&self.rib);
            self.built_words = F::arena_words(spare);
            self.full_builds += 1;
            self.spare_stale = false;
        } else {
            let mut todo: Vec<F::Change> = self.spare_dirty.clone();
            todo.extend_from_slice(&self.dirty);
            todo.sort_unstable();
            todo.dedup();
            for c in todo {
                F::rebuild(spare, &self.rib, c);
            }
        }
        self.spare = Some(self.shared.swap(arc));
        self.spare_dirty = std::mem::take(&mut self.dirty);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn every_published_snapshot_matches_the_reference(
            ops in proptest::collection::vec((any::<u32>(), 0u8..=32, proptest::option::of(0u32..20)), 1..120),
            probes in proptest::collection::vec(any::<u32>(), 60),
        ) {
            let (mut w, r) = FibWriter::new(BinaryTrie::new());
            let mut added: Vec<Prefix> = Vec::new();
            for (i, (a, l, v)) in ops.into_iter().enumerate() {
                // Withdraw something that exists half the time.
                let p = match (v, added.get(i % (added.len().max(1)))) {
                    (None, Some(&q)) if i % 2 == 0 => q,
                    _ => Prefix::new(a.into(), l),
                };
                w.apply([(p, v)]);
                if v.is_some() { added.push(p); }
                let snap = r.load_full();
                for &x in probes.iter().chain(added.iter().map(|p| p.bits()).collect::<Vec<_>>().iter()) {
                    prop_assert_eq!(snap.lookup(x.into()), w.rib().lookup(x.into()));
                }
            }
        }
    }

    proptest! {
        #[test]
        fn every_published_ipv6_snapshot_matches_the_reference(
            base in any::<u128>(),
            ops in proptest::collection::vec((any::<u128>(), 0u8..=128, proptest::option::of(0u32..20)), 1..80),
            probes in proptest::collection::vec(any::<u128>(), 40),
        ) {
            let (mut w, r) = FibWriter6::new(BinaryTrie6::new());
            let mut added: Vec<Prefix6> = Vec::new();
            // Prefixes share their top 16 to 24 bits half the time, so that slots are
            // recompiled with nodes below them.
            let spread = |x: u128, i: usize| if i.is_multiple_of(2) { base ^ (x >> 20) } else { x };
            for (i, (a, l, v)) in ops.into_iter().enumerate() {
                let p = match (v, added.get(i % (added.len().max(1)))) {
                    (None, Some(&q)) if i % 2 == 0 => q,
                    _ => Prefix6::new(spread(a, i).into(), l),
                };
                w.apply([(p, v)]);
                if v.is_some() { added.push(p); }
                let snap = r.load_full();
                let addrs: Vec<u128> = probes.iter().enumerate().map(|(i, &x)| spread(x, i))
                    .chain(added.iter().map(|p| p.bits())).collect();
                for x in addrs {
                    prop_assert_eq!(snap.lookup(x.into()), w.rib().lookup(x.into()));
                }
            }
        }
    }

    #[test]
    fn garbage_triggers_a_full_build() {
        let (mut w, r) = FibWriter::new(BinaryTrie::new());
        for i in 0..5000u32 {
            w.insert(
                Prefix::new((0x0a00_0000 | (i % 64) << 8).into(), 24),
                i % 7 + 1,
            );
        }
        assert!(w.full_builds > 1);
        assert_eq!(
            r.load_full().lookup("10.0.5.1".parse().unwrap()),
            w.rib().lookup("10.0.5.1".parse().unwrap())
        );
    }
}
