//! The neighbour table: IPv4-to-MAC bindings per port (ARP, RFC 826), with a bounded queue
//! of packets waiting for resolution.
//!
//! States: `Incomplete` (request sent, packets queue), `Reachable` (confirmed within
//! `reachable`), `Probe` (past `reachable`: still used, a request is out; removed if
//! `max_tries` requests go unanswered). An incomplete entry that fails hands its queue back
//! so the caller can send host unreachable.

use crate::buf::Pkt;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use wire::MacAddr;

/// Tunables, with the defaults a LAN router uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct NeighbourConfig {
    /// Seconds an answered entry is used before it is re-probed.
    pub reachable_secs: u64,
    /// Milliseconds between ARP requests for one address.
    pub retry_ms: u64,
    /// Requests sent before giving up.
    pub max_tries: u8,
    /// Packets held per unresolved neighbour.
    pub queue_len: usize,
    /// Entries the table holds at most; resolving a new address beyond that is refused.
    pub max_entries: usize,
    /// Packets held across all unresolved neighbours.
    pub max_queued: usize,
}

impl Default for NeighbourConfig {
    fn default() -> Self {
        NeighbourConfig {
            reachable_secs: 30,
            retry_ms: 1000,
            max_tries: 3,
            queue_len: 64,
            max_entries: 16384,
            max_queued: 4096,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Incomplete,
    Reachable,
    Probe,
}

#[derive(Debug)]
pub struct Entry {
    pub mac: MacAddr,
    pub state: State,
    tries: u8,
    /// Incomplete/Probe: when to retry. Reachable: when it goes stale.
    deadline: Instant,
    queue: Vec<Pkt>,
}

/// A multiply-shift hasher for the small fixed-size keys of this table (SipHash's
/// DoS-resistance buys nothing against keys the router itself bounds).
#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Eight bytes at a time (an IPv6 address is two words).
        let mut c = bytes.chunks_exact(8);
        for w in &mut c {
            let mut a = [0u8; 8];
            a.copy_from_slice(w);
            self.write_u64(u64::from_le_bytes(a));
        }
        for b in c.remainder() {
            self.write_u64(*b as u64);
        }
    }
    fn write_u16(&mut self, n: u16) {
        self.write_u64(n as u64)
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64)
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(29) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type Key = (u16, u32);

/// What [`Neighbours::enqueue`] did with a packet.
#[derive(Debug)]
pub enum Enqueued {
    /// A new entry: the caller sends the first request.
    NewRequest,
    Queued,
    /// The queue (the entry's, or all entries' together) was full; the packet comes back.
    Full(Pkt),
    /// The table is full; no new entry was made and the packet comes back.
    TableFull(Pkt),
}

#[derive(Debug, Default)]
pub struct Expired {
    /// (port, address) to send a request for.
    pub requests: Vec<(u16, Ipv4Addr)>,
    /// Packets whose next hop never answered.
    pub failed: Vec<Pkt>,
}

#[derive(Debug)]
pub struct Neighbours {
    pub cfg: NeighbourConfig,
    map: HashMap<Key, Entry, BuildHasherDefault<KeyHasher>>,
    /// Packets held in all queues.
    queued: usize,
}

impl Neighbours {
    pub fn new(cfg: NeighbourConfig) -> Self {
        Neighbours {
            cfg,
            map: HashMap::default(),
            queued: 0,
        }
    }

    fn reachable(&self) -> Duration {
        Duration::from_secs(self.cfg.reachable_secs)
    }

    fn retry(&self) -> Duration {
        Duration::from_millis(self.cfg.retry_ms)
    }

    /// The MAC for `ip` on `port` if known. The bool is true when the entry just went stale
    /// and the caller should send a probe.
    #[inline]
    pub fn lookup(&mut self, port: u16, ip: Ipv4Addr, now: Instant) -> Option<(MacAddr, bool)> {
        let retry = self.retry();
        let e = self.map.get_mut(&(port, u32::from(ip)))?;
        match e.state {
            State::Incomplete => None,
            State::Probe => Some((e.mac, false)),
            State::Reachable => {
                if now >= e.deadline {
                    e.state = State::Probe;
                    e.tries = 1;
                    e.deadline = now + retry;
                    Some((e.mac, true))
                } else {
                    Some((e.mac, false))
                }
            }
        }
    }

    pub fn contains(&self, port: u16, ip: Ipv4Addr) -> bool {
        self.map.contains_key(&(port, u32::from(ip)))
    }

    /// Holds `pkt` until `ip` resolves.
    pub fn enqueue(&mut self, port: u16, ip: Ipv4Addr, now: Instant, pkt: Pkt) -> Enqueued {
        let (qlen, retry) = (self.cfg.queue_len, self.retry());
        let all_full = self.queued >= self.cfg.max_queued;
        let table_full = self.map.len() >= self.cfg.max_entries;
        match self.map.get_mut(&(port, u32::from(ip))) {
            Some(e) => {
                if e.queue.len() >= qlen || all_full {
                    Enqueued::Full(pkt)
                } else {
                    e.queue.push(pkt);
                    self.queued += 1;
                    Enqueued::Queued
                }
            }
            None if table_full => Enqueued::TableFull(pkt),
            None => {
                let mut queue = Vec::new();
                if qlen > 0 && !all_full {
                    queue.push(pkt);
                    self.queued += 1;
                } else {
                    return Enqueued::Full(pkt);
                }
                self.map.insert(
                    (port, u32::from(ip)),
                    Entry {
                        mac: MacAddr::ZERO,
                        state: State::Incomplete,
                        tries: 1,
                        deadline: now + retry,
                        queue,
                    },
                );
                Enqueued::NewRequest
            }
        }
    }

    /// Starts resolving `ip` on `port` with no packet waiting (a route's gateway, before
    /// traffic needs it): true if a request should go out now (no entry yet, and room
    /// for one); retries and failure then run as for any incomplete entry.
    pub fn resolve(&mut self, port: u16, ip: Ipv4Addr, now: Instant) -> bool {
        let key = (port, u32::from(ip));
        if self.map.contains_key(&key) || self.map.len() >= self.cfg.max_entries {
            return false;
        }
        let retry = self.retry();
        self.map.insert(
            key,
            Entry {
                mac: MacAddr::ZERO,
                state: State::Incomplete,
                tries: 1,
                deadline: now + retry,
                queue: Vec::new(),
            },
        );
        true
    }

    /// Records `ip` at `mac` on `port`: creates the entry if `create`, else only updates an
    /// existing one (RFC 826's merge rule). Returns packets that were waiting for it.
    pub fn learn(
        &mut self,
        port: u16,
        ip: Ipv4Addr,
        mac: MacAddr,
        now: Instant,
        create: bool,
    ) -> Vec<Pkt> {
        let until = now + self.reachable();
        let key = (port, u32::from(ip));
        let table_full = self.map.len() >= self.cfg.max_entries;
        match self.map.get_mut(&key) {
            Some(e) => {
                e.mac = mac;
                e.state = State::Reachable;
                e.tries = 0;
                e.deadline = until;
                self.queued -= e.queue.len();
                std::mem::take(&mut e.queue)
            }
            None if create && table_full => Vec::new(),
            None if create => {
                self.map.insert(
                    key,
                    Entry {
                        mac,
                        state: State::Reachable,
                        tries: 0,
                        deadline: until,
                        queue: Vec::new(),
                    },
                );
                Vec::new()
            }
            None => Vec::new(),
        }
    }

    /// Retries, probes and failures due at `now`.
    pub fn expire(&mut self, now: Instant, out: &mut Expired) {
        let (max, retry) = (self.cfg.max_tries, self.retry());
        let queued = &mut self.queued;
        self.map.retain(|&(port, ip), e| {
            if e.state == State::Reachable || now < e.deadline {
                return true;
            }
            if e.tries >= max {
                *queued -= e.queue.len();
                out.failed.append(&mut e.queue);
                return false;
            }
            e.tries += 1;
            e.deadline = now + retry;
            out.requests.push((port, Ipv4Addr::from(ip)));
            true
        });
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Packets waiting for resolution, across all entries.
    pub fn queued(&self) -> usize {
        self.queued
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// (port, address, mac, state) of every entry, for `show`.
    pub fn entries(&self) -> Vec<(u16, Ipv4Addr, MacAddr, State)> {
        let mut v: Vec<_> = self
            .map
            .iter()
            .map(|(&(p, ip), e)| (p, Ipv4Addr::from(ip), e.mac, e.state))
            .collect();
        v.sort_by_key(|e| (e.0, e.1));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_queue_and_fail() {
        let cfg = NeighbourConfig {
            queue_len: 2,
            max_tries: 2,
            ..Default::default()
        };
        let mut n = Neighbours::new(cfg);
        let t0 = Instant::now();
        let ip = Ipv4Addr::new(10, 0, 0, 2);
        assert!(n.lookup(0, ip, t0).is_none());
        assert!(matches!(
            n.enqueue(0, ip, t0, Pkt::new()),
            Enqueued::NewRequest
        ));
        assert!(matches!(n.enqueue(0, ip, t0, Pkt::new()), Enqueued::Queued));
        assert!(matches!(
            n.enqueue(0, ip, t0, Pkt::new()),
            Enqueued::Full(_)
        ));
        let mut ex = Expired::default();
        n.expire(t0 + Duration::from_millis(1001), &mut ex);
        assert_eq!(ex.requests, vec![(0, ip)]);
        assert!(ex.failed.is_empty());
        n.expire(t0 + Duration::from_millis(2002), &mut ex);
        assert_eq!(ex.failed.len(), 2);
        assert!(n.is_empty());
    }

    #[test]
    fn table_and_queues_are_bounded() {
        let cfg = NeighbourConfig {
            max_entries: 3,
            max_queued: 5,
            queue_len: 2,
            ..Default::default()
        };
        let mut n = Neighbours::new(cfg);
        let t0 = Instant::now();
        let ip = |i: u8| Ipv4Addr::new(10, 0, 0, i);
        let mut held = 0;
        for i in 1..=3 {
            for _ in 0..2 {
                if matches!(
                    n.enqueue(0, ip(i), t0, Pkt::new()),
                    Enqueued::NewRequest | Enqueued::Queued
                ) {
                    held += 1;
                }
            }
        }
        assert_eq!((held, n.queued()), (5, 5), "the global cap holds");
        assert!(matches!(
            n.enqueue(0, ip(4), t0, Pkt::new()),
            Enqueued::TableFull(_)
        ));
        assert_eq!(n.len(), 3);
        assert_eq!(
            n.learn(0, ip(1), MacAddr([2, 0, 0, 0, 0, 1]), t0, false)
                .len(),
            2
        );
        assert_eq!(n.queued(), 3);
        let mut ex = Expired::default();
        n.expire(t0 + Duration::from_secs(10), &mut ex);
        n.expire(t0 + Duration::from_secs(20), &mut ex);
        n.expire(t0 + Duration::from_secs(30), &mut ex);
        assert_eq!((ex.failed.len(), n.queued()), (3, 0));
    }

    #[test]
    fn learn_flushes_and_goes_stale() {
        let mut n = Neighbours::new(NeighbourConfig::default());
        let t0 = Instant::now();
        let ip = Ipv4Addr::new(10, 0, 0, 2);
        let mac = MacAddr([2, 0, 0, 0, 0, 2]);
        n.enqueue(1, ip, t0, Pkt::new());
        assert_eq!(n.learn(1, ip, mac, t0, false).len(), 1);
        assert_eq!(n.lookup(1, ip, t0), Some((mac, false)));
        // Past the reachable time: still used, one probe asked for.
        let stale = t0 + Duration::from_secs(31);
        assert_eq!(n.lookup(1, ip, stale), Some((mac, true)));
        assert_eq!(n.lookup(1, ip, stale), Some((mac, false)));
        // Unanswered probes remove it.
        let mut ex = Expired::default();
        for s in 1..=3 {
            n.expire(stale + Duration::from_secs(s), &mut ex);
        }
        assert!(!n.contains(1, ip));
        // Not created by a mere update.
        assert!(n.learn(1, ip, mac, t0, false).is_empty());
        assert!(!n.contains(1, ip));
    }
}
