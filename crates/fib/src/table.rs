//! Loss-free updates: a writer that owns the route set and publishes compiled snapshots.
//!
//! The writer keeps the reference [`BinaryTrie`] (the control-side table) and two compiled
//! [`Poptrie`]s: the published one, which readers load, and a spare. An update changes the
//! trie, then brings the spare up to date by recompiling only the direct-pointing slots (/18s) changed since
//! the spare was last current, and publishes it with one atomic pointer swap; the previous
//! snapshot becomes the spare. Before touching the spare, the writer waits until no reader
//! still holds it (readers hold a snapshot for one batch). Readers therefore never block
//! and never see a half-applied change: each lookup sees either the old or the new table.
//!
//! Recompiled slots leave their old nodes behind; when the garbage reaches the size of the
//! live structure, the spare is rebuilt from scratch instead.

use crate::poptrie::Poptrie;
use crate::{BinaryTrie, Lpm, Prefix};
use arc_swap::ArcSwap;
use std::sync::Arc;

/// What readers hold: load a snapshot with `load_full()` once per batch.
pub type FibReader = Arc<ArcSwap<Poptrie>>;

/// The control side of a forwarding table.
pub struct FibWriter {
    rib: BinaryTrie,
    shared: FibReader,
    /// The unpublished copy; `None` only inside `publish`.
    spare: Option<Arc<Poptrie>>,
    /// Slots changed since the spare was last current.
    spare_dirty: Vec<u32>,
    /// Slots changed by the update being applied.
    dirty: Vec<u32>,
    marked: Vec<u64>,
    /// Node count right after the last full build, to measure garbage against.
    built_words: usize,
    pub full_builds: u64,
}

impl FibWriter {
    /// Compiles `rib` and returns the writer with the readers' handle.
    pub fn new(rib: BinaryTrie) -> (FibWriter, FibReader) {
        let p = Poptrie::build(&rib);
        let built_words = p.arena_words();
        let shared = Arc::new(ArcSwap::from_pointee(p.clone()));
        let w = FibWriter {
            rib,
            shared: shared.clone(),
            spare: Some(Arc::new(p)),
            spare_dirty: Vec::new(),
            dirty: Vec::new(),
            marked: vec![0; 1 << (crate::poptrie::DIR_BITS - 6)],
            built_words,
            full_builds: 1,
        };
        (w, shared)
    }

    pub fn reader(&self) -> FibReader {
        self.shared.clone()
    }

    pub fn rib(&self) -> &BinaryTrie {
        &self.rib
    }

    fn mark(&mut self, p: Prefix) {
        let bits = crate::poptrie::DIR_BITS;
        let first = p.bits() >> (32 - bits);
        let n = if p.len() as u32 >= bits {
            1
        } else {
            1u32 << (bits - p.len() as u32)
        };
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
    pub fn apply(&mut self, changes: impl IntoIterator<Item = (Prefix, Option<u32>)>) -> usize {
        let mut n = 0;
        for (p, v) in changes {
            let changed = match v {
                Some(v) => self.rib.insert(p, v) != Some(v),
                None => self.rib.remove(p).is_some(),
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

    pub fn insert(&mut self, p: Prefix, v: u32) -> bool {
        self.apply([(p, Some(v))]) == 1
    }

    pub fn remove(&mut self, p: Prefix) -> bool {
        self.apply([(p, None)]) == 1
    }

    /// Replaces the whole table (a bulk load): compiled from scratch, published at once.
    pub fn replace(&mut self, rib: BinaryTrie) {
        self.rib = rib;
        let p = Poptrie::build(&self.rib);
        self.built_words = p.arena_words();
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
            || spare.arena_words() > 2 * self.built_words + 4096 * 6;
        if full {
            *spare = Poptrie::build(&self.rib);
            self.built_words = spare.arena_words();
            self.full_builds += 1;
        } else {
            for &s in self.spare_dirty.iter().chain(&self.dirty) {
                spare.rebuild_slot(&self.rib, s);
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
