//! Loss-free updates: a writer that owns the route set and publishes compiled snapshots.
//!
//! The writer keeps the reference trie (the control-side table) and two compiled tables:
//! the published one, which readers load, and a spare. An update changes the trie, then
//! brings the spare up to date by recompiling only the direct-pointing slots (/18s for
//! IPv4's [`Poptrie`], /16s for IPv6's [`Poptrie6`]) changed since the spare was last
//! current, and publishes it with one atomic pointer swap; the previous snapshot becomes
//! the spare. Before touching the spare, the writer waits until no reader still holds it
//! (readers hold a snapshot for one batch). Readers therefore never block and never see a
//! half-applied change: each lookup sees either the old or the new table.
//!
//! Recompiled slots leave their old nodes behind; when the garbage reaches the size of the
//! live structure, the spare is rebuilt from scratch instead. One [`Writer`] serves both
//! address families through [`Family`].

use crate::poptrie::Poptrie;
use crate::v6::{BinaryTrie6, Poptrie6, Prefix6, DIR6_BITS};
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
    /// Bits of the compiled table's direct-pointing array.
    const DIR_BITS: u32;
    fn insert(rib: &mut Self::Rib, p: Self::Prefix, v: u32) -> Option<u32>;
    fn remove(rib: &mut Self::Rib, p: Self::Prefix) -> Option<u32>;
    fn build(rib: &Self::Rib) -> Self::Table;
    fn rebuild_slot(t: &mut Self::Table, rib: &Self::Rib, slot: u32);
    fn arena_words(t: &Self::Table) -> usize;
    /// The first direct-pointing slot `p` covers, and how many.
    fn slots(p: Self::Prefix) -> (u32, u32);
}

/// IPv4: [`BinaryTrie`] compiled to [`Poptrie`].
pub enum V4 {}
/// IPv6: [`BinaryTrie6`] compiled to [`Poptrie6`].
pub enum V6 {}

fn slots_of(top: u32, len: u32, bits: u32) -> (u32, u32) {
    let n = if len >= bits { 1 } else { 1 << (bits - len) };
    (top, n)
}

impl Family for V4 {
    type Prefix = Prefix;
    type Rib = BinaryTrie;
    type Table = Poptrie;
    const DIR_BITS: u32 = crate::poptrie::DIR_BITS;
    fn insert(rib: &mut BinaryTrie, p: Prefix, v: u32) -> Option<u32> {
        rib.insert(p, v)
    }
    fn remove(rib: &mut BinaryTrie, p: Prefix) -> Option<u32> {
        rib.remove(p)
    }
    fn build(rib: &BinaryTrie) -> Poptrie {
        Poptrie::build(rib)
    }
    fn rebuild_slot(t: &mut Poptrie, rib: &BinaryTrie, slot: u32) {
        t.rebuild_slot(rib, slot)
    }
    fn arena_words(t: &Poptrie) -> usize {
        t.arena_words()
    }
    fn slots(p: Prefix) -> (u32, u32) {
        slots_of(
            p.bits() >> (32 - Self::DIR_BITS),
            p.len() as u32,
            Self::DIR_BITS,
        )
    }
}

impl Family for V6 {
    type Prefix = Prefix6;
    type Rib = BinaryTrie6;
    type Table = Poptrie6;
    const DIR_BITS: u32 = DIR6_BITS;
    fn insert(rib: &mut BinaryTrie6, p: Prefix6, v: u32) -> Option<u32> {
        rib.insert(p, v)
    }
    fn remove(rib: &mut BinaryTrie6, p: Prefix6) -> Option<u32> {
        rib.remove(p)
    }
    fn build(rib: &BinaryTrie6) -> Poptrie6 {
        Poptrie6::build(rib)
    }
    fn rebuild_slot(t: &mut Poptrie6, rib: &BinaryTrie6, slot: u32) {
        t.rebuild_slot(rib, slot)
    }
    fn arena_words(t: &Poptrie6) -> usize {
        t.arena_words()
    }
    fn slots(p: Prefix6) -> (u32, u32) {
        let top = (p.bits() >> (128 - Self::DIR_BITS)) as u32;
        slots_of(top, p.len() as u32, Self::DIR_BITS)
    }
}

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
    /// Slots changed since the spare was last current.
    spare_dirty: Vec<u32>,
    /// Slots changed by the update being applied.
    dirty: Vec<u32>,
    marked: Vec<u64>,
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
            dirty: Vec::new(),
            marked: vec![0; 1 << (F::DIR_BITS - 6)],
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

    fn mark(&mut self, p: F::Prefix) {
        let (first, n) = F::slots(p);
        for s in first..first + n {
            let (w, b) = ((s >> 6) as usize, s & 63);
            if self.marked[w] & (1 << b) == 0 {
                self.marked[w] |= 1 << b;
                self.dirty.push(s);
            }
        }
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
                self.mark(p);
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
        // The spare is stale everywhere: rebuild it fully on the next publish.
        self.spare_dirty.push(u32::MAX);
        self.dirty.clear();
        self.marked.iter_mut().for_each(|w| *w = 0);
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
        let full = self.spare_dirty.first() == Some(&u32::MAX)
            || F::arena_words(spare) > 2 * self.built_words + 4096 * 6;
        if full {
            *spare = F::build(&self.rib);
            self.built_words = F::arena_words(spare);
            self.full_builds += 1;
        } else {
            for &s in self.spare_dirty.iter().chain(&self.dirty) {
                F::rebuild_slot(spare, &self.rib, s);
            }
        }
        self.spare = Some(self.shared.swap(arc));
        for &s in &self.dirty {
            self.marked[(s >> 6) as usize] &= !(1 << (s & 63));
        }
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
            let spread = |x: u128, i: usize| if i % 2 == 0 { base ^ (x >> 20) } else { x };
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
