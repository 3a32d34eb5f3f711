//! The filters' maps of the forwarder's fast path (`bpf/acl.h` reads them; docs/filters.md).
//!
//! - `acl_state`: one entry: the generation in use (1 or 2; 0: no interface filters
//!   anything), the number of ports, the IPv4 table's entry of the default route, and the
//!   lists' epoch (one more at every change).
//! - `acl_ports`: per generation and port (`(gen - 1) * ports + port`), the lists of its
//!   untagged interface in and out (plus 1; 0: none), its reverse-path mode, and whether a
//!   sub-interface of the port filters.
//! - `acl_subifs`: per generation, port and VLAN id, the same for every sub-interface of a
//!   port whose sub-interfaces filter, with the index of its drops (the port's count plus
//!   the interface's index, up to [`MAX_SUBIFS`]; past that its frames are user space's).
//! - `acl_lists`, `acl_tuples`, `acl_rules`: the lists compiled by
//!   [`dataplane::acl::tss`], each generation in its own half (lists and tuples) or with its
//!   own tags (rules).
//! - `acl_counts`: per generation and rule (its slot), packets and bytes per CPU.
//! - `acl_drops`: per port (then per sub-interface), denied in, denied out, failed the
//!   strict and the loose reverse-path check, packets and bytes per CPU.
//! - `acl_cache`: per CPU, the lists' last decisions by the packet's key (direct-mapped,
//!   [`CACHE_SIZE`] entries), each good for the epoch it was made in.
//!
//! A change writes the generation not in use, then flips `acl_state`: a frame sees one
//! version of every list. The counts of the generation left are added to the rules'
//! counters in user space (which a reload keeps for the rules it keeps).

use super::{percpu_sum, BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_HASH, BPF_MAP_TYPE_PERCPU_ARRAY};
use crate::bpfsys::{map_create, map_update};
use dataplane::acl::{tss, Filters, Urpf};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

pub const MAX_LISTS: u32 = 64;
pub const MAX_SLOTS: u32 = 65536;
const MAX_TUPLES: u32 = tss::MAX_TUPLES as u32;

const URPF_STRICT: u32 = 1;
const URPF_LOOSE: u32 = 2;
const URPF_ALLOW_DEFAULT: u32 = 4;
const PORT_SUBIF: u32 = 1;
const DROPS_SHIFT: u32 = 8;
/// Interfaces whose sub-interface entries the fast path holds (an interface's index past
/// it leaves its frames to user space).
pub const MAX_SUBIFS: u32 = 1024;
/// Entries of the decision cache per CPU (`bpf/acl.h`'s ACL_CACHE_SIZE), and the bytes
/// of one (struct acl_cached).
pub const CACHE_SIZE: u32 = 4096;
const CACHED_LEN: u32 = 64;

/// `acl_subifs`' key ([`bpf/acl.h`]'s ACL_SUBIF_KEY).
fn subif_key(gen: u32, port: u16, vid: u16) -> u32 {
    (gen << 30) | ((port as u32) << 12) | (vid as u32 & 0xfff)
}

/// The filters' maps and what was written to them.
pub struct AclMaps {
    state: OwnedFd,
    ports: OwnedFd,
    subifs: OwnedFd,
    lists: OwnedFd,
    tuples: OwnedFd,
    rules: OwnedFd,
    counts: OwnedFd,
    drops: OwnedFd,
    cache: OwnedFd,
    nports: u32,
    /// One more at every change of the lists (`acl_state`'s; the decision cache's tag).
    epoch: u32,
    /// The generation in use (0: none yet).
    gen: u32,
    default4: u32,
    /// Per generation, the rules' keys written (to delete when it is written again).
    written: [Vec<[u8; tss::KEY_LEN]>; 2],
    /// Per generation, the slots used.
    slots: [u32; 2],
    /// Per generation, the sub-interfaces' keys written.
    subifs_written: [Vec<u32>; 2],
    /// The sub-interfaces (interface indexes) ever given drops.
    subif_drops: std::collections::BTreeSet<u32>,
}

impl AclMaps {
    pub fn new(nports: u32) -> io::Result<AclMaps> {
        let n = nports.max(1);
        let m = AclMaps {
            state: map_create(BPF_MAP_TYPE_ARRAY, 4, 16, 1, 0, 0, "acl_state")?,
            ports: map_create(BPF_MAP_TYPE_ARRAY, 4, 16, 2 * n, 0, 0, "acl_ports")?,
            subifs: map_create(BPF_MAP_TYPE_HASH, 4, 16, 2 * MAX_SUBIFS, 0, 0, "acl_subifs")?,
            lists: map_create(BPF_MAP_TYPE_ARRAY, 4, 16, 2 * MAX_LISTS, 0, 0, "acl_lists")?,
            tuples: map_create(
                BPF_MAP_TYPE_ARRAY,
                4,
                64,
                2 * MAX_TUPLES,
                0,
                0,
                "acl_tuples",
            )?,
            rules: map_create(
                BPF_MAP_TYPE_HASH,
                tss::KEY_LEN as u32,
                12,
                2 * tss::MAX_ENTRIES as u32,
                0,
                0,
                "acl_rules",
            )?,
            counts: map_create(
                BPF_MAP_TYPE_PERCPU_ARRAY,
                4,
                16,
                2 * MAX_SLOTS,
                0,
                0,
                "acl_counts",
            )?,
            drops: map_create(
                BPF_MAP_TYPE_PERCPU_ARRAY,
                4,
                16,
                4 * (n + MAX_SUBIFS),
                0,
                0,
                "acl_drops",
            )?,
            cache: map_create(
                BPF_MAP_TYPE_PERCPU_ARRAY,
                4,
                CACHED_LEN,
                CACHE_SIZE,
                0,
                0,
                "acl_cache",
            )?,
            nports: n,
            epoch: 1,
            gen: 0,
            default4: u32::MAX,
            written: [Vec::new(), Vec::new()],
            slots: [0, 0],
            subifs_written: [Vec::new(), Vec::new()],
            subif_drops: Default::default(),
        };
        m.write_state(0)?;
        Ok(m)
    }

    /// The maps by the names the program gives them.
    pub fn fds(&self) -> [(&'static str, BorrowedFd<'_>); 9] {
        [
            ("acl_state", self.state.as_fd()),
            ("acl_ports", self.ports.as_fd()),
            ("acl_subifs", self.subifs.as_fd()),
            ("acl_lists", self.lists.as_fd()),
            ("acl_tuples", self.tuples.as_fd()),
            ("acl_rules", self.rules.as_fd()),
            ("acl_counts", self.counts.as_fd()),
            ("acl_drops", self.drops.as_fd()),
            ("acl_cache", self.cache.as_fd()),
        ]
    }

    fn write_state(&self, gen: u32) -> io::Result<()> {
        map_update(
            &self.state,
            &0u32,
            &[gen, self.nports, self.default4, self.epoch],
        )
    }

    /// The IPv4 table's entry (next-hop group) of the default route (`u32::MAX`: none),
    /// for the loose reverse-path check.
    pub fn set_default4(&mut self, group: u32) -> io::Result<()> {
        if group != self.default4 {
            self.default4 = group;
            self.write_state(self.gen)?;
        }
        Ok(())
    }

    /// Whether `f` fits the fast path (its lists compile within the bounds); the error
    /// says which bound.
    pub fn check(f: &Filters) -> Result<(), String> {
        if f.lists.len() > MAX_LISTS as usize {
            return Err(format!(
                "{} access lists; the fast path takes {MAX_LISTS}",
                f.lists.len()
            ));
        }
        let slots: usize = f.lists.iter().map(|l| l.acl.rules.len() + 1).sum();
        if slots > MAX_SLOTS as usize {
            return Err(format!(
                "{slots} rules and defaults in the access lists; the fast path takes {MAX_SLOTS}"
            ));
        }
        f.compile(0, 0).map(|_| ())
    }

    /// Makes `f` the fast path's filters: written to the generation not in use, then
    /// flipped to. `port_of` gives each interface of `f` its (port, VLAN id; 0 untagged).
    /// The counts of the generation left are added to `old`'s counters first. Where no
    /// interface filters anything, the programs skip the filters altogether.
    pub fn write(
        &mut self,
        f: &Filters,
        port_of: &[Option<(u16, u16)>],
        old: Option<&Filters>,
    ) -> Result<(), String> {
        Self::check(f)?;
        let e = |what: &str, err: io::Error| format!("fast path filters: {what}: {err}");
        let next = if self.gen == 1 { 2 } else { 1 };
        let g = (next - 1) as usize;
        let t = f.compile(g as u32 * MAX_TUPLES, g as u32 * MAX_SLOTS)?;
        // Out with what this generation held.
        for k in self.written[g].drain(..) {
            let _ = super::map_delete(&self.rules, &k);
        }
        let zero = vec![[0u64; 2]; super::possible_cpus()];
        let used: u32 = f.lists.iter().map(|l| l.acl.rules.len() as u32 + 1).sum();
        for s in 0..used.max(self.slots[g]) {
            super::map_update_raw(
                &self.counts,
                &(g as u32 * MAX_SLOTS + s),
                zero.as_ptr() as *const u8,
            )
            .map_err(|x| e("counts", x))?;
        }
        self.slots[g] = used;
        for (i, ((mask, first), all)) in t.tuples.iter().zip(&t.all).enumerate() {
            // struct acl_tuple: the mask, the first rule, and for an empty mask what it
            // decides (action, slot, flag).
            let mut v = [0u8; 64];
            v[..tss::KEY_LEN].copy_from_slice(mask);
            v[44..48].copy_from_slice(&first.to_ne_bytes());
            if let Some(h) = all {
                v[48..52].copy_from_slice(&tss::action_code(h.action).to_ne_bytes());
                v[52..56].copy_from_slice(&h.slot.to_ne_bytes());
                v[56..60].copy_from_slice(&1u32.to_ne_bytes());
            }
            map_update(&self.tuples, &(g as u32 * MAX_TUPLES + i as u32), &v)
                .map_err(|x| e("tuples", x))?;
        }
        for (k, h) in &t.entries {
            let v = [h.prio, h.slot, tss::action_code(h.action)];
            map_update(&self.rules, k, &v).map_err(|x| e("rules", x))?;
            self.written[g].push(*k);
        }
        for (i, l) in t.lists.iter().enumerate() {
            let v = [
                l.first,
                l.count,
                tss::action_code(l.default),
                l.default_slot,
            ];
            map_update(&self.lists, &(g as u32 * MAX_LISTS + i as u32), &v)
                .map_err(|x| e("lists", x))?;
        }
        let mut ports = vec![[0u32; 4]; self.nports as usize];
        let code = |b: &dataplane::acl::Binding| {
            [
                b.acl_in.map_or(0, |l| l as u32 + 1),
                b.acl_out.map_or(0, |l| l as u32 + 1),
                match b.urpf {
                    Urpf::Off => 0,
                    Urpf::Strict => URPF_STRICT,
                    Urpf::Loose => URPF_LOOSE,
                } | if b.urpf_allow_default {
                    URPF_ALLOW_DEFAULT
                } else {
                    0
                },
            ]
        };
        for (iface, b) in f.bindings.iter().enumerate() {
            let Some(Some((port, vlan))) = port_of.get(iface) else {
                continue;
            };
            let Some(p) = ports.get_mut(*port as usize) else {
                continue;
            };
            if *vlan != 0 {
                if b.is_set() {
                    p[3] |= PORT_SUBIF;
                }
                continue;
            }
            let [i, o, u] = code(b);
            p[..3].copy_from_slice(&[i, o, u]);
        }
        // Every sub-interface of a port whose sub-interfaces filter has its entry.
        for k in self.subifs_written[g].drain(..) {
            let _ = super::map_delete(&self.subifs, &k);
        }
        for (iface, b) in f.bindings.iter().enumerate() {
            let Some(Some((port, vlan))) = port_of.get(iface) else {
                continue;
            };
            let filtering = ports
                .get(*port as usize)
                .is_some_and(|p| p[3] & PORT_SUBIF != 0);
            if *vlan == 0 || !filtering || iface as u32 >= MAX_SUBIFS {
                continue;
            }
            let [i, o, u] = code(b);
            let drops = self.nports + iface as u32;
            let k = subif_key(next, *port, *vlan);
            map_update(
                &self.subifs,
                &k,
                &[i, o, u, PORT_SUBIF | drops << DROPS_SHIFT],
            )
            .map_err(|x| e("sub-interfaces", x))?;
            self.subifs_written[g].push(k);
            self.subif_drops.insert(iface as u32);
        }
        for (i, p) in ports.iter().enumerate() {
            map_update(&self.ports, &(g as u32 * self.nports + i as u32), p)
                .map_err(|x| e("ports", x))?;
        }
        let left = self.gen;
        self.gen = next;
        // A new epoch: no decision of the lists left is taken from the cache again.
        self.epoch = self.epoch.wrapping_add(1).max(1);
        self.write_state(if f.any() { next } else { 0 })
            .map_err(|x| e("state", x))?;
        // Frames in flight on the generation left finish within microseconds; then its
        // counts go to the rules' counters in user space.
        if let Some(o) = old {
            if left != 0 {
                std::thread::sleep(std::time::Duration::from_millis(5));
                let after = self.counts_of(o, left);
                for (l, c) in o.lists.iter().zip(after) {
                    for (count, (p, b)) in l.counts.iter().zip(c) {
                        count.add(p, b);
                    }
                }
            }
        }
        Ok(())
    }

    /// Per list of `f` (the filters in use), per rule and the default, the packets and
    /// bytes the fast path counted.
    pub fn rule_counts(&self, f: &Filters) -> Vec<Vec<(u64, u64)>> {
        if self.gen == 0 {
            return f
                .lists
                .iter()
                .map(|l| vec![(0, 0); l.counts.len()])
                .collect();
        }
        self.counts_of(f, self.gen)
    }

    fn counts_of(&self, f: &Filters, gen: u32) -> Vec<Vec<(u64, u64)>> {
        let base = (gen - 1) * MAX_SLOTS;
        f.slots(base)
            .into_iter()
            .map(|s| {
                s.into_iter()
                    .map(|k| {
                        let [p, b] = percpu_sum::<2>(&self.counts, k);
                        (p, b)
                    })
                    .collect()
            })
            .collect()
    }

    /// Per port: (packets, bytes) denied in, denied out, failed the strict and the loose
    /// reverse-path check.
    pub fn drops(&self) -> Vec<[(u64, u64); 4]> {
        (0..self.nports).map(|p| self.drops_at(p)).collect()
    }

    /// The same per sub-interface that ever filtered in the fast path: (its interface
    /// index, its drops).
    pub fn subif_drops(&self) -> Vec<(usize, [(u64, u64); 4])> {
        self.subif_drops
            .iter()
            .map(|i| (*i as usize, self.drops_at(self.nports + i)))
            .collect()
    }

    fn drops_at(&self, index: u32) -> [(u64, u64); 4] {
        let mut out = [(0, 0); 4];
        for (k, o) in out.iter_mut().enumerate() {
            let [a, b] = percpu_sum::<2>(&self.drops, index * 4 + k as u32);
            *o = (a, b);
        }
        out
    }
}
