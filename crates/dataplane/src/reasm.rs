//! Reassembly of IPv4 datagrams addressed to the router (RFC 791 section 3.2, RFC 1122
//! 3.3.2), with bounded memory and time.
//!
//! Fragments are kept per (source, destination, protocol, identification). A datagram
//! is complete when its last fragment (MF clear) has given its length and the fragments
//! cover it without a gap. Policy, for a router that must not be a target:
//! - an exact duplicate of a fragment already held is dropped and counted;
//! - a fragment that overlaps another partly, or disagrees on the datagram's length, drops
//!   the whole datagram (as RFC 5722 asks of IPv6; overlaps are an attack, not a network's
//!   doing);
//! - at most [`ReasmConfig::max_datagrams`] datagrams and [`ReasmConfig::max_bytes`] bytes
//!   of fragments are pending; beyond that a new datagram's fragments are dropped;
//! - a datagram not complete [`ReasmConfig::timeout`] after its first fragment arrived is
//!   dropped ([`Reassembly::expire`]), with the count of fragments it held.

use crate::counters::Drop;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use wire::ipv4;

/// Limits of reassembly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReasmConfig {
    pub max_datagrams: usize,
    pub max_bytes: usize,
    pub timeout: Duration,
}

impl Default for ReasmConfig {
    fn default() -> Self {
        ReasmConfig {
            max_datagrams: 64,
            max_bytes: 1 << 20,
            timeout: Duration::from_secs(30),
        }
    }
}

type Key = (Ipv4Addr, Ipv4Addr, u8, u16);

struct Pending {
    /// The first fragment's header (offset 0), once it has come.
    header: Option<Vec<u8>>,
    /// Payload bytes by offset; `held` says which ranges are filled.
    data: Vec<u8>,
    /// Filled (start, end) ranges of the payload, sorted, not overlapping.
    held: Vec<(usize, usize)>,
    /// The payload's length, once the last fragment has come.
    total: Option<usize>,
    deadline: Instant,
    fragments: u64,
}

/// What became of a fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Held; the datagram is not complete yet.
    Held,
    /// The whole datagram (header of the first fragment, flags and offset cleared,
    /// length and checksum set), with the fragments it took.
    Complete(Vec<u8>, u64),
    /// The fragment was dropped for this reason; `n` fragments went with it (the
    /// fragment itself and any of its datagram's held ones).
    Dropped(Drop, u64),
}

/// Datagrams being reassembled.
pub struct Reassembly {
    cfg: ReasmConfig,
    map: HashMap<Key, Pending>,
    bytes: usize,
}

/// The largest IPv4 datagram payload.
const MAX_PAYLOAD: usize = 65535 - ipv4::MIN_HEADER_LEN;

impl Reassembly {
    pub fn new(cfg: ReasmConfig) -> Reassembly {
        Reassembly {
            cfg,
            map: HashMap::new(),
            bytes: 0,
        }
    }

    /// Datagrams pending.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Bytes of fragment payload held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn remove(&mut self, k: &Key) -> u64 {
        match self.map.remove(k) {
            Some(p) => {
                self.bytes -= p.held.iter().map(|(s, e)| e - s).sum::<usize>();
                p.fragments
            }
            None => 0,
        }
    }

    /// Adds a fragment (`ip`: an IPv4 packet, exactly its total length, with MF set or a
    /// non-zero offset).
    pub fn add(&mut self, ip: &[u8], now: Instant) -> Outcome {
        let Ok(p) = ipv4::Packet::new_checked(ip) else {
            return Outcome::Dropped(Drop::ReasmMalformed, 1);
        };
        let key = (p.src(), p.dst(), p.protocol(), p.ident());
        let (off, mf, data) = (p.frag_offset(), p.more_frags(), p.payload());
        let end = off + data.len();
        if end > MAX_PAYLOAD || (mf && data.len() % 8 != 0) || (mf && data.is_empty()) {
            let n = self.remove(&key) + 1;
            return Outcome::Dropped(Drop::ReasmMalformed, n);
        }
        if !self.map.contains_key(&key) {
            if self.map.len() >= self.cfg.max_datagrams {
                return Outcome::Dropped(Drop::ReasmTableFull, 1);
            }
            self.map.insert(
                key,
                Pending {
                    header: None,
                    data: Vec::new(),
                    held: Vec::new(),
                    total: None,
                    deadline: now + self.cfg.timeout,
                    fragments: 0,
                },
            );
        }
        let full = self.bytes + data.len() > self.cfg.max_bytes;
        let e = self.map.get_mut(&key).expect("inserted above");
        // An exact duplicate: dropped, the datagram kept.
        if e.held.contains(&(off, end)) && !data.is_empty() {
            return Outcome::Dropped(Drop::ReasmDuplicate, 1);
        }
        let overlaps = e.held.iter().any(|&(s, t)| off < t && s < end);
        let past_total = e.total.is_some_and(|t| end > t || (!mf && t != end));
        let before_end = !mf && e.held.iter().any(|&(_, t)| t > end);
        if overlaps || past_total || before_end {
            let n = self.remove(&key) + 1;
            let why = if overlaps {
                Drop::ReasmOverlap
            } else {
                Drop::ReasmMalformed
            };
            return Outcome::Dropped(why, n);
        }
        if full {
            return Outcome::Dropped(Drop::ReasmMemory, 1);
        }
        if e.data.len() < end {
            e.data.resize(end, 0);
        }
        e.data[off..end].copy_from_slice(data);
        let at = e.held.partition_point(|&(s, _)| s < off);
        e.held.insert(at, (off, end));
        e.fragments += 1;
        self.bytes += data.len();
        if off == 0 {
            e.header = Some(ip[..p.header_len()].to_vec());
        }
        if !mf {
            e.total = Some(end);
        }
        let complete = match (e.total, &e.header) {
            (Some(t), Some(_)) => {
                let mut reach = 0;
                for &(s, t2) in &e.held {
                    if s > reach {
                        break;
                    }
                    reach = reach.max(t2);
                }
                reach == t
            }
            _ => false,
        };
        if !complete {
            return Outcome::Held;
        }
        let held = self.map.remove(&key).expect("present");
        self.bytes -= held.held.iter().map(|(s, e)| e - s).sum::<usize>();
        let mut out = held.header.expect("checked above");
        let total = held.total.expect("checked above");
        out.extend_from_slice(&held.data[..total]);
        let len = out.len();
        let Ok(mut p) = ipv4::Packet::new_checked_header(&mut out[..]) else {
            return Outcome::Dropped(Drop::ReasmMalformed, held.fragments);
        };
        p.set_total_len(len as u16);
        p.set_frag(p.dont_frag(), false, 0);
        p.fill_checksum();
        Outcome::Complete(out, held.fragments)
    }

    /// Drops the datagrams whose time is up. Returns the fragments they held, and the
    /// first fragment (offset 0) of each that had received it, as it arrived: RFC 1122
    /// (3.3.2) has the host send time exceeded (fragment reassembly) about those.
    pub fn expire(&mut self, now: Instant) -> (u64, Vec<Vec<u8>>) {
        let due: Vec<Key> = self
            .map
            .iter()
            .filter(|(_, p)| now >= p.deadline)
            .map(|(k, _)| *k)
            .collect();
        let mut frags = 0;
        let mut firsts = Vec::new();
        for k in &due {
            if let Some(p) = self.map.get(k) {
                if let (Some(h), Some(&(0, end))) = (&p.header, p.held.first()) {
                    let mut f = h.clone();
                    f.extend_from_slice(&p.data[..end]);
                    firsts.push(f);
                }
            }
            frags += self.remove(k);
        }
        (frags, firsts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fragments of a datagram of `len` payload bytes (bytes i % 251), `size` bytes
    /// of payload each (the last one shorter): (offset, MF, packet).
    fn frags(id: u16, len: usize, size: usize) -> Vec<Vec<u8>> {
        let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let mut out = Vec::new();
        let mut off = 0;
        while off < len {
            let n = size.min(len - off);
            out.push(frag(id, off, off + n < len, &payload[off..off + n]));
            off += n;
        }
        out
    }

    fn frag(id: u16, off: usize, mf: bool, data: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 20 + data.len()];
        b[0] = 0x45;
        b[2..4].copy_from_slice(&((20 + data.len()) as u16).to_be_bytes());
        b[4..6].copy_from_slice(&id.to_be_bytes());
        let v = ((off / 8) as u16) | if mf { 0x2000 } else { 0 };
        b[6..8].copy_from_slice(&v.to_be_bytes());
        b[8] = 64;
        b[9] = 1;
        b[12..16].copy_from_slice(&[10, 1, 0, 10]);
        b[16..20].copy_from_slice(&[10, 1, 0, 1]);
        b[20..].copy_from_slice(data);
        let mut p = ipv4::Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum();
        b
    }

    fn frags_of_first(id: u16) -> Vec<u8> {
        frags(id, 3000, 1000).swap_remove(0)
    }

    fn whole(out: &Outcome) -> Vec<u8> {
        match out {
            Outcome::Complete(d, _) => d.clone(),
            o => panic!("not complete: {o:?}"),
        }
    }

    #[test]
    fn in_order_and_out_of_order_both_complete() {
        let now = Instant::now();
        let mut r = Reassembly::new(ReasmConfig::default());
        let f = frags(7, 3000, 1480);
        assert_eq!(f.len(), 3);
        assert_eq!(r.add(&f[0], now), Outcome::Held);
        assert_eq!(r.add(&f[1], now), Outcome::Held);
        let d = whole(&r.add(&f[2], now));
        let p = ipv4::Packet::new_checked(&d[..]).unwrap();
        assert!(p.verify_checksum() && !p.more_frags() && p.frag_offset() == 0);
        assert_eq!(p.payload().len(), 3000);
        assert!(p
            .payload()
            .iter()
            .enumerate()
            .all(|(i, b)| *b == (i % 251) as u8));
        assert!(r.is_empty() && r.bytes() == 0);
        // Last first, then the middle, then the first.
        let f = frags(8, 3000, 1000);
        assert_eq!(r.add(&f[2], now), Outcome::Held);
        assert_eq!(r.add(&f[1], now), Outcome::Held);
        let d2 = whole(&r.add(&f[0], now));
        let q = ipv4::Packet::new_checked(&d2[..]).unwrap();
        assert!(q.verify_checksum());
        assert_eq!((q.ident(), q.payload()), (8, p.payload()));
    }

    #[test]
    fn duplicates_are_dropped_and_the_datagram_kept() {
        let now = Instant::now();
        let mut r = Reassembly::new(ReasmConfig::default());
        let f = frags(1, 2000, 1000);
        assert_eq!(r.add(&f[0], now), Outcome::Held);
        assert_eq!(r.add(&f[0], now), Outcome::Dropped(Drop::ReasmDuplicate, 1));
        assert!(matches!(r.add(&f[1], now), Outcome::Complete(_, 2)));
    }

    #[test]
    fn overlaps_drop_the_whole_datagram() {
        let now = Instant::now();
        let mut r = Reassembly::new(ReasmConfig::default());
        let f = frags(2, 2000, 1000);
        assert_eq!(r.add(&f[0], now), Outcome::Held);
        // 992..1992 overlaps the first fragment's last 8 bytes.
        let over = frag(2, 992, false, &[0; 1008]);
        assert_eq!(r.add(&over, now), Outcome::Dropped(Drop::ReasmOverlap, 2));
        assert!(r.is_empty() && r.bytes() == 0);
        // A later last fragment that disagrees on the length drops it too.
        let f = frags(3, 3000, 1000);
        assert_eq!(r.add(&f[2], now), Outcome::Held);
        let short_last = frag(3, 1000, false, &[0; 1000]);
        assert_eq!(
            r.add(&short_last, now),
            Outcome::Dropped(Drop::ReasmMalformed, 2)
        );
        // A fragment with MF whose length is not a multiple of 8.
        assert!(matches!(
            r.add(&frag(4, 0, true, &[0; 100]), now),
            Outcome::Dropped(Drop::ReasmMalformed, 1)
        ));
    }

    #[test]
    fn never_completed_datagrams_expire_and_limits_hold() {
        let now = Instant::now();
        let cfg = ReasmConfig {
            max_datagrams: 2,
            max_bytes: 2500,
            timeout: Duration::from_secs(30),
        };
        let mut r = Reassembly::new(cfg);
        assert_eq!(r.add(&frags(1, 3000, 1000)[0], now), Outcome::Held);
        assert_eq!(r.add(&frags(2, 3000, 1000)[0], now), Outcome::Held);
        // A third datagram: the table is full.
        assert_eq!(
            r.add(&frags(3, 3000, 1000)[0], now),
            Outcome::Dropped(Drop::ReasmTableFull, 1)
        );
        // 2,000 bytes held; another 1,000 passes the 2,500-byte cap.
        assert_eq!(
            r.add(&frags(1, 3000, 1000)[1], now),
            Outcome::Dropped(Drop::ReasmMemory, 1)
        );
        assert_eq!(r.expire(now + Duration::from_secs(29)), (0, vec![]));
        let (frags, firsts) = r.expire(now + Duration::from_secs(30));
        assert_eq!((frags, firsts.len()), (2, 2));
        assert!(firsts.contains(&frags_of_first(1)) && firsts.contains(&frags_of_first(2)));
        assert!(r.is_empty() && r.bytes() == 0);
    }
}
