//! The filters of one element as it runs: its access lists with every rule's counters,
//! which list each interface applies in and out, and its reverse-path checks.
//!
//! One [`Filters`] is shared by the element's workers and swapped whole on a reload
//! ([`FilterShare`]), so a packet sees one version of every list. Counters belong to a
//! rule, not to a version: a reload that keeps a rule (the same list name, the same
//! fields and action, wherever it moved in the list) keeps its counts
//! ([`Filters::new`] with the previous version).

use super::{tss, Acl, Action, Decision, Key};
use arc_swap::ArcSwap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// `urpf` of an interface (RFC 3704).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Urpf {
    #[default]
    Off,
    /// The source's best route must leave by the interface the packet came in on.
    Strict,
    /// The source must have a route (the default route only with `urpf_allow_default`).
    Loose,
}

impl Urpf {
    pub fn parse(s: &str) -> Result<Urpf, String> {
        match s {
            "off" => Ok(Urpf::Off),
            "strict" => Ok(Urpf::Strict),
            "loose" => Ok(Urpf::Loose),
            _ => Err(format!(
                "{s:?} is no reverse-path mode: \"strict\", \"loose\" or \"off\""
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Urpf::Off => "off",
            Urpf::Strict => "strict",
            Urpf::Loose => "loose",
        }
    }
}

/// What one interface applies: lists by their index in [`Filters::lists`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Binding {
    pub acl_in: Option<usize>,
    pub acl_out: Option<usize>,
    pub urpf: Urpf,
    /// Loose (and strict) checks count the default route as a route.
    pub urpf_allow_default: bool,
}

impl Binding {
    pub fn is_set(&self) -> bool {
        self.acl_in.is_some() || self.acl_out.is_some() || self.urpf != Urpf::Off
    }
}

/// Packets and bytes, written by any worker.
#[derive(Debug, Default)]
pub struct Count {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
}

impl Count {
    #[inline]
    pub fn add(&self, packets: u64, bytes: u64) {
        self.packets.fetch_add(packets, Relaxed);
        self.bytes.fetch_add(bytes, Relaxed);
    }

    pub fn get(&self) -> (u64, u64) {
        (self.packets.load(Relaxed), self.bytes.load(Relaxed))
    }
}

/// A list as it runs: the rules and a counter per rule and one for its default (last).
#[derive(Debug)]
pub struct List {
    pub acl: Acl,
    pub counts: Vec<Arc<Count>>,
}

/// Per interface, the drops its filters made: denied or rejected in, out; failed the
/// strict or the loose reverse-path check.
#[derive(Debug, Default)]
pub struct IfaceDrops {
    pub acl_in: Count,
    pub acl_out: Count,
    pub urpf: Count,
}

/// The filters of an element.
#[derive(Debug, Default)]
pub struct Filters {
    pub lists: Vec<List>,
    /// Per interface (the element's interface indexes), what it applies.
    pub bindings: Vec<Binding>,
    /// The interfaces' names, in the same order (for `show acl`).
    pub names: Vec<String>,
    pub drops: Vec<Arc<IfaceDrops>>,
    /// The version: a new one per reload that changed anything.
    pub version: u64,
}

impl Filters {
    /// The filters of `lists` bound as `bindings` (per interface, named `names`), keeping
    /// the counters of `previous` where a rule (or a default, or an interface) is the same.
    pub fn new(
        lists: Vec<Acl>,
        bindings: Vec<Binding>,
        names: Vec<String>,
        previous: Option<&Filters>,
    ) -> Filters {
        let old_list =
            |name: &str| previous.and_then(|p| p.lists.iter().find(|l| l.acl.name == name));
        let lists = lists
            .into_iter()
            .map(|acl| {
                let old = old_list(&acl.name);
                let mut taken = vec![false; old.map_or(0, |o| o.acl.rules.len())];
                let mut counts: Vec<Arc<Count>> = acl
                    .rules
                    .iter()
                    .map(|r| {
                        // The same rule, the first not yet taken.
                        old.and_then(|o| {
                            let i = o
                                .acl
                                .rules
                                .iter()
                                .enumerate()
                                .position(|(i, x)| x == r && !taken[i])?;
                            taken[i] = true;
                            Some(o.counts[i].clone())
                        })
                        .unwrap_or_default()
                    })
                    .collect();
                counts.push(match old {
                    Some(o) if o.acl.default == acl.default => o.counts[o.acl.rules.len()].clone(),
                    _ => Arc::default(),
                });
                List { acl, counts }
            })
            .collect();
        let drops = names
            .iter()
            .map(|n| {
                previous
                    .and_then(|p| {
                        p.names
                            .iter()
                            .position(|x| x == n)
                            .map(|i| p.drops[i].clone())
                    })
                    .unwrap_or_default()
            })
            .collect();
        Filters {
            lists,
            bindings,
            names,
            drops,
            version: previous.map_or(1, |p| p.version + 1),
        }
    }

    /// Whether `other` has other lists or bindings (counters and versions aside).
    pub fn differs(&self, other: &Filters) -> bool {
        self.bindings != other.bindings
            || self
                .lists
                .iter()
                .map(|l| &l.acl)
                .ne(other.lists.iter().map(|l| &l.acl))
    }

    /// Whether any interface filters anything.
    pub fn any(&self) -> bool {
        self.bindings.iter().any(Binding::is_set)
    }

    /// The binding of interface `iface` (none past the list).
    #[inline]
    pub fn binding(&self, iface: u16) -> Binding {
        self.bindings
            .get(iface as usize)
            .copied()
            .unwrap_or_default()
    }

    /// List `list`'s decision on `k`, counted with `bytes`.
    pub fn decide(&self, list: usize, k: &Key, bytes: usize) -> Decision {
        let Some(l) = self.lists.get(list) else {
            return Decision {
                rule: None,
                action: Action::Permit,
            };
        };
        let d = l.acl.decide(k);
        let i = d.rule.unwrap_or(l.acl.rules.len());
        l.counts[i].add(1, bytes as u64);
        d
    }

    /// The counters' slots of every list for the fast path: list k's rule i is slot
    /// `base + (the rules and defaults of the lists before it) + i`, its default after its
    /// rules.
    pub fn slots(&self, base: u32) -> Vec<Vec<u32>> {
        let mut next = base;
        self.lists
            .iter()
            .map(|l| {
                let n = l.acl.rules.len() as u32 + 1;
                let s = (next..next + n).collect();
                next += n;
                s
            })
            .collect()
    }

    /// The lists compiled for the fast path (see [`tss::Tables::compile`]).
    pub fn compile(&self, tag_base: u32, slot_base: u32) -> Result<tss::Tables, String> {
        let acls: Vec<&Acl> = self.lists.iter().map(|l| &l.acl).collect();
        tss::Tables::compile(&acls, &self.slots(slot_base), tag_base)
    }
}

/// The element's current filters, read by every worker per batch and swapped whole.
#[derive(Debug, Clone, Default)]
pub struct FilterShare(Arc<ArcSwap<Filters>>);

impl FilterShare {
    pub fn new(f: Filters) -> FilterShare {
        FilterShare(Arc::new(ArcSwap::from_pointee(f)))
    }

    pub fn load(&self) -> Arc<Filters> {
        self.0.load_full()
    }

    /// The filters as they are now, for one packet's use (no reference count taken).
    #[inline]
    pub fn peek(&self) -> arc_swap::Guard<Arc<Filters>> {
        self.0.load()
    }

    /// Makes `f` the filters of every worker from their next batch on.
    pub fn store(&self, f: Filters) {
        self.0.store(Arc::new(f));
    }
}
