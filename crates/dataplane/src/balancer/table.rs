//! The balancing table: which back-end gets a packet from outside.
//!
//! Three modes, chosen by configuration:
//!
//! - `round-robin`: weighted round robin per packet. The order is the "smooth" weighted
//!   round robin sequence, so the entries are interleaved (weights 1:2:1 give B A C B, not
//!   A B B C) and every cycle of `sum(weights)` packets gives each back-end exactly its
//!   weight. Packets of one flow may take different back-ends, so a flow can be reordered.
//! - `hash`: the flow hash (addresses, protocol, ports) indexes a table of 65,536 or more
//!   slots filled with that same sequence, so each back-end holds exactly its share of the
//!   slots and a flow always takes the same back-end: never reordered. A change of
//!   back-ends moves most flows.
//! - `maglev`: the same, but the slots are filled the Maglev way (Eisenbud et al., NSDI
//!   2016): each back-end has its own permutation of a prime-sized table and takes turns, in
//!   proportion to its weight, claiming its next free preferred slot. When a back-end leaves,
//!   the flows that were on it move, and few others do.
//!
//! An entry is live while its back-end's hellos arrive; only live entries get traffic.

use std::time::{Duration, Instant};
use wire::MacAddr;

/// How packets are spread over the back-ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    RoundRobin,
    Hash,
    #[default]
    Maglev,
}

/// Slots of the Maglev lookup table (a prime, as the algorithm needs).
pub const MAGLEV_SIZE: usize = 65_537;
/// Slots of the hash table at least (a multiple of the weight cycle).
pub const HASH_MIN_SIZE: usize = 65_536;
/// The longest weight cycle kept; larger weight sums are scaled down to fit.
pub const MAX_CYCLE: usize = 1 << 20;

/// One back-end in the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub mac: MacAddr,
    /// The LB port that reaches the back-end.
    pub port: u16,
    pub weight: u16,
    /// Gets traffic (its hellos arrive, or it has not had time to send one yet).
    pub live: bool,
    /// When the last hello came, or when the entry was added.
    pub seen: Instant,
    /// The hello interval the back-end advertises, once it has sent a hello.
    pub interval: Option<Duration>,
    /// Packets sent to this back-end.
    pub packets: u64,
    /// The incarnation its last hello carried (0: none yet, or an element without one).
    pub incarnation: u64,
    /// Its last hello said it holds no table from a controller yet: not live while the LB
    /// is under a controller (docs/dist.md, "Incarnations").
    pub waiting: bool,
}

/// The table and the lookup structure built from its live entries.
#[derive(Debug, Clone)]
pub struct BalanceTable {
    pub mode: Mode,
    pub entries: Vec<Entry>,
    /// Round robin: the interleaved cycle of entry indices.
    cycle: Vec<u16>,
    cursor: usize,
    /// Hash and Maglev: slot -> entry index.
    slots: Vec<u16>,
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The smooth weighted round robin sequence over `weights` (index, weight): each step every
/// entry gains its weight, the richest is chosen and pays the total. One full cycle.
pub fn smooth_cycle(weights: &[(u16, u64)]) -> Vec<u16> {
    let total: u64 = weights.iter().map(|w| w.1).sum();
    let mut credit = vec![0i64; weights.len()];
    let mut out = Vec::with_capacity(total as usize);
    for _ in 0..total {
        let mut best = 0;
        for (i, (_, w)) in weights.iter().enumerate() {
            credit[i] += *w as i64;
            if credit[i] > credit[best] {
                best = i;
            }
        }
        credit[best] -= total as i64;
        out.push(weights[best].0);
    }
    out
}

/// A 64-bit mix of a MAC address and a seed (for Maglev's offset and skip).
fn mac_hash(m: MacAddr, seed: u64) -> u64 {
    let mut h = seed ^ u64::from_be_bytes([0, 0, m.0[0], m.0[1], m.0[2], m.0[3], m.0[4], m.0[5]]);
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The Maglev lookup table over (index, MAC, weight) of live entries.
pub fn maglev(backends: &[(u16, MacAddr, u16)], size: usize) -> Vec<u16> {
    let mut slots = vec![u16::MAX; size];
    if backends.is_empty() {
        return slots;
    }
    let m = size as u64;
    let perm: Vec<(u64, u64)> = backends
        .iter()
        .map(|b| {
            (
                mac_hash(b.1, 0x6d61_676c_6576_3031) % m,
                mac_hash(b.1, 0x736b_6970_7365_6564) % (m - 1) + 1,
            )
        })
        .collect();
    let max_w = backends.iter().map(|b| b.2).max().unwrap_or(1).max(1) as f64;
    let mut next = vec![0u64; backends.len()];
    let mut credit = vec![0f64; backends.len()];
    let mut filled = 0;
    while filled < size {
        for (i, b) in backends.iter().enumerate() {
            credit[i] += b.2 as f64 / max_w;
            while credit[i] >= 1.0 && filled < size {
                credit[i] -= 1.0;
                // The next free slot on this back-end's permutation.
                loop {
                    let (off, skip) = perm[i];
                    let c = ((off + next[i] * skip) % m) as usize;
                    next[i] += 1;
                    if slots[c] == u16::MAX {
                        slots[c] = b.0;
                        filled += 1;
                        break;
                    }
                }
            }
        }
    }
    slots
}

impl BalanceTable {
    pub fn new(mode: Mode) -> BalanceTable {
        BalanceTable {
            mode,
            entries: Vec::new(),
            cycle: Vec::new(),
            cursor: 0,
            slots: Vec::new(),
        }
    }

    /// Adds a back-end, or changes its port and weight; weight 0 removes it. Call
    /// [`BalanceTable::rebuild`] after a set of changes.
    pub fn set(&mut self, mac: MacAddr, port: u16, weight: u16, now: Instant) {
        match self.entries.iter().position(|e| e.mac == mac) {
            Some(i) if weight == 0 => {
                self.entries.remove(i);
            }
            Some(i) => {
                self.entries[i].port = port;
                self.entries[i].weight = weight;
            }
            None if weight == 0 => {}
            None => self.entries.push(Entry {
                mac,
                port,
                weight,
                live: true,
                seen: now,
                interval: None,
                packets: 0,
                incarnation: 0,
                waiting: false,
            }),
        }
    }

    /// Rebuilds the lookup structure from the live entries.
    pub fn rebuild(&mut self) {
        let live: Vec<(u16, u64)> = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.live && e.weight > 0)
            .map(|(i, e)| (i as u16, e.weight as u64))
            .collect();
        self.cycle.clear();
        self.slots.clear();
        self.cursor = 0;
        if live.is_empty() {
            return;
        }
        match self.mode {
            Mode::RoundRobin | Mode::Hash => {
                let g = live.iter().fold(0, |g, w| gcd(g, w.1));
                let mut w: Vec<(u16, u64)> = live.iter().map(|&(i, x)| (i, x / g)).collect();
                let total: u64 = w.iter().map(|x| x.1).sum();
                if total as usize > MAX_CYCLE {
                    // Scale down (approximately) to keep the cycle bounded.
                    let f = total as f64 / MAX_CYCLE as f64;
                    for x in &mut w {
                        x.1 = ((x.1 as f64 / f).round() as u64).max(1);
                    }
                }
                self.cycle = smooth_cycle(&w);
                if self.mode == Mode::Hash {
                    let n = self.cycle.len();
                    let reps = HASH_MIN_SIZE.div_ceil(n);
                    self.slots = self.cycle.repeat(reps);
                    self.cycle.clear();
                }
            }
            Mode::Maglev => {
                let b: Vec<(u16, MacAddr, u16)> = live
                    .iter()
                    .map(|&(i, _)| {
                        let e = &self.entries[i as usize];
                        (i, e.mac, e.weight)
                    })
                    .collect();
                self.slots = maglev(&b, MAGLEV_SIZE);
            }
        }
    }

    /// The entry for the next packet of a flow with hash `hash`; `None` if no entry is live.
    #[inline]
    pub fn pick(&mut self, hash: u32) -> Option<usize> {
        let i = match self.mode {
            Mode::RoundRobin => {
                let i = *self.cycle.get(self.cursor)?;
                self.cursor += 1;
                if self.cursor == self.cycle.len() {
                    self.cursor = 0;
                }
                i
            }
            Mode::Hash | Mode::Maglev => {
                if self.slots.is_empty() {
                    return None;
                }
                self.slots[hash as usize % self.slots.len()]
            }
        };
        let e = self.entries.get_mut(i as usize)?;
        e.packets += 1;
        Some(i as usize)
    }

    /// The hash and Maglev modes' slots (entry indices; a flow's hash modulo their number
    /// picks one); empty in the round-robin mode and when no entry is live.
    pub fn slots(&self) -> &[u16] {
        &self.slots
    }

    /// Number of live entries.
    pub fn live(&self) -> usize {
        self.entries.iter().filter(|e| e.live).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(i: usize) -> MacAddr {
        MacAddr([2, 0xbe, 0, 0, (i >> 8) as u8, i as u8])
    }

    fn table(mode: Mode, weights: &[u16]) -> BalanceTable {
        let now = Instant::now();
        let mut t = BalanceTable::new(mode);
        for (i, w) in weights.iter().enumerate() {
            t.set(mac(i), 1, *w, now);
        }
        t.rebuild();
        t
    }

    /// A well-mixed 32-bit hash of flow number `i`, as the data plane's flow hash gives.
    fn flow(i: u64) -> u32 {
        let mut h = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h = (h ^ (h >> 31)).wrapping_mul(0x7fb5_d329_728e_a185);
        (h ^ (h >> 29)) as u32
    }

    fn shares(t: &mut BalanceTable, n: u64, hash: impl Fn(u64) -> u32) -> Vec<f64> {
        let mut c = vec![0u64; t.entries.len()];
        for i in 0..n {
            c[t.pick(hash(i)).unwrap()] += 1;
        }
        c.iter().map(|x| *x as f64 / n as f64).collect()
    }

    #[test]
    fn round_robin_is_exact_and_interleaved() {
        // Interleaved: equal weights alternate, and a back-end of weight 2 in 4 never
        // takes more than two packets in a row.
        let mut t = table(Mode::RoundRobin, &[4, 4]);
        let seq: Vec<usize> = (0..16).map(|_| t.pick(0).unwrap()).collect();
        assert!(seq.windows(2).all(|w| w[0] != w[1]), "{seq:?}");
        let mut t = table(Mode::RoundRobin, &[1, 2, 1]);
        let seq: Vec<usize> = (0..16).map(|_| t.pick(0).unwrap()).collect();
        assert!(
            seq.windows(3).all(|w| !(w[0] == w[1] && w[1] == w[2])),
            "{seq:?}"
        );
        assert!(
            seq.windows(4)
                .all(|w| w.iter().filter(|&&i| i == 1).count() == 2),
            "{seq:?}"
        );
        let mut t = table(Mode::RoundRobin, &[1, 2, 1]);
        let s = shares(&mut t, 100_000, |_| 0);
        assert_eq!(s, vec![0.25, 0.5, 0.25]);
        // Large, coprime weights still give exact shares over whole cycles.
        let mut t = table(Mode::RoundRobin, &[1000, 999, 1]);
        let s = shares(&mut t, 2000 * 50, |_| 0);
        assert_eq!(s, vec![0.5, 0.4995, 0.0005]);
    }

    #[test]
    fn weights_1_2_1_give_25_50_25_within_one_percent_in_every_mode() {
        for mode in [Mode::RoundRobin, Mode::Hash, Mode::Maglev] {
            let mut t = table(mode, &[1, 2, 1]);
            let s = shares(&mut t, 200_000, flow);
            for (got, want) in s.iter().zip([0.25, 0.5, 0.25]) {
                assert!(
                    (got - want).abs() < 0.01,
                    "{mode:?}: shares {s:?}, want 25/50/25"
                );
            }
            let packets: Vec<u64> = t.entries.iter().map(|e| e.packets).collect();
            assert_eq!(packets.iter().sum::<u64>(), 200_000);
        }
    }

    #[test]
    fn hashing_keeps_each_flow_on_one_backend() {
        for mode in [Mode::Hash, Mode::Maglev] {
            let mut t = table(mode, &[1, 2, 1]);
            for f in 0..10_000 {
                let first = t.pick(flow(f));
                for _ in 0..3 {
                    assert_eq!(t.pick(flow(f)), first);
                }
            }
        }
    }

    #[test]
    fn maglev_moves_few_other_flows_when_a_backend_leaves() {
        let flows = 100_000u64;
        for n in 3..=16 {
            let mut t = table(Mode::Maglev, &vec![1; n]);
            let before: Vec<MacAddr> = (0..flows)
                .map(|f| {
                    let i = t.pick(flow(f)).unwrap();
                    t.entries[i].mac
                })
                .collect();
            let gone = mac(n / 2);
            t.entries.retain(|e| e.mac != gone);
            t.rebuild();
            let (mut others, mut moved) = (0u64, 0u64);
            for (f, was) in before.iter().enumerate() {
                let i = t.pick(flow(f as u64)).unwrap();
                let now = t.entries[i].mac;
                assert_ne!(now, gone);
                if *was != gone {
                    others += 1;
                    moved += (now != *was) as u64;
                }
            }
            let frac = moved as f64 / others as f64;
            eprintln!(
                "maglev N = {n}: {:.3}% of the other flows moved",
                frac * 100.0
            );
            assert!(
                frac <= 0.02,
                "N = {n}: {:.2}% of the other flows moved",
                frac * 100.0
            );
        }
    }

    #[test]
    fn dead_entries_get_nothing_and_return() {
        let mut t = table(Mode::Maglev, &[1, 1, 1]);
        t.entries[1].live = false;
        t.rebuild();
        assert!((0..10_000).all(|f| t.pick(flow(f)) != Some(1)));
        t.entries[1].live = true;
        t.rebuild();
        assert!((0..10_000).any(|f| t.pick(flow(f)) == Some(1)));
        for e in &mut t.entries {
            e.live = false;
        }
        t.rebuild();
        assert_eq!(t.pick(1), None);
        let mut t = table(Mode::RoundRobin, &[]);
        assert_eq!(t.pick(1), None);
        // Weight 0 removes.
        let mut t = table(Mode::Hash, &[1, 1]);
        t.set(mac(0), 1, 0, Instant::now());
        t.rebuild();
        assert_eq!(t.entries.len(), 1);
        assert!((0..1000).all(|f| t.pick(flow(f)) == Some(0)));
    }
}
