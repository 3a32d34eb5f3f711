//! Reassembly of datagrams addressed to the router, IPv4 (RFC 791 section 3.2, RFC 1122
//! 3.3.2) and IPv6 (RFC 8200 section 4.5), with bounded memory and time.
//!
//! Fragments are kept per (source, destination, protocol, identification) for IPv4 and
//! per (source, destination, identification) for IPv6, in one table with one budget. A
//! datagram is complete when its last fragment (MF clear) has given its length and the
//! fragments cover it without a gap. Policy, for a router that must not be a target:
//! - an exact duplicate of a fragment already held is dropped and counted;
//! - a fragment that overlaps another partly, or disagrees on the datagram's length, drops
//!   the whole datagram (RFC 5722 asks it of IPv6; overlaps are an attack, not a network's
//!   doing, in either family);
//! - at most [`ReasmConfig::max_datagrams`] datagrams and [`ReasmConfig::max_bytes`] bytes
//!   of fragments are pending; beyond that a new datagram's fragments are dropped;
//! - a datagram not complete [`ReasmConfig::timeout`] after its first fragment arrived is
//!   dropped ([`Reassembly::expire`]), with the count of fragments it held.
//!
//! IPv6 specifics: the unfragmentable part (the fixed header and the extension headers
//! before the fragment header) is taken from the first fragment, and the fragmentable
//! part's protocol is written into the next-header byte that named the fragment header; an
//! atomic fragment (offset 0, M clear, RFC 6946) is its own datagram and never touches the
//! table.

use crate::counters::Drop;
use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};
use wire::{ipv4, ipv6};

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    V4(Ipv4Addr, Ipv4Addr, u8, u16),
    V6(Ipv6Addr, Ipv6Addr, u32),
}

struct Pending {
    /// The header to put before the payload once complete (IPv4: the first fragment's;
    /// IPv6: its unfragmentable part, next header set), once the first fragment has come.
    header: Option<Vec<u8>>,
    /// The first fragment as it arrived, for the time exceeded message.
    first: Option<Vec<u8>>,
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
    /// The whole datagram (IPv4: the first fragment's header, flags and offset cleared,
    /// length and checksum set; IPv6: the unfragmentable part without the fragment header,
    /// payload length set), with the fragments it took.
    Complete(Vec<u8>, u64),
    /// The fragment was dropped for this reason; `n` fragments went with it (the
    /// fragment itself and any of its datagram's held ones).
    Dropped(Drop, u64),
}

/// One fragment, family aside.
struct Part<'a> {
    key: Key,
    off: usize,
    mf: bool,
    data: &'a [u8],
    /// Most payload bytes a datagram of its family can hold.
    max: usize,
}

/// Datagrams being reassembled.
pub struct Reassembly {
    cfg: ReasmConfig,
    map: HashMap<Key, Pending>,
    bytes: usize,
}

/// The largest IPv4 datagram payload.
const MAX_PAYLOAD: usize = 65535 - ipv4::MIN_HEADER_LEN;
/// The largest IPv6 payload (RFC 8200 4.5: a fragment whose offset and length pass it is
/// an error).
const MAX_PAYLOAD6: usize = 65535;

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

    /// Adds an IPv4 fragment (`ip`: an IPv4 packet, exactly its total length, with MF set
    /// or a non-zero offset).
    pub fn add(&mut self, ip: &[u8], now: Instant) -> Outcome {
        let Ok(p) = ipv4::Packet::new_checked(ip) else {
            return Outcome::Dropped(Drop::ReasmMalformed, 1);
        };
        let part = Part {
            key: Key::V4(p.src(), p.dst(), p.protocol(), p.ident()),
            off: p.frag_offset(),
            mf: p.more_frags(),
            data: p.payload(),
            max: MAX_PAYLOAD,
        };
        let header = &ip[..p.header_len()];
        let (mut out, n) = match self.add_part(part, ip, || header.to_vec(), now) {
            Ok(Some(done)) => done,
            Ok(None) => return Outcome::Held,
            Err(o) => return o,
        };
        let len = out.len();
        let Ok(mut p) = ipv4::Packet::new_checked_header(&mut out[..]) else {
            return Outcome::Dropped(Drop::ReasmMalformed, n);
        };
        p.set_total_len(len as u16);
        p.set_frag(p.dont_frag(), false, 0);
        p.fill_checksum();
        Outcome::Complete(out, n)
    }

    /// Adds an IPv6 fragment (`ip`: an IPv6 packet, exactly its length, with a fragment
    /// header).
    pub fn add6(&mut self, ip: &[u8], now: Instant) -> Outcome {
        let Ok(p) = ipv6::Packet::new_checked(ip) else {
            return Outcome::Dropped(Drop::ReasmMalformed, 1);
        };
        let Some(f) = p.upper().ok().and_then(|u| u.fragment) else {
            return Outcome::Dropped(Drop::ReasmMalformed, 1);
        };
        let ip = p.packet();
        let next = ip[f.at];
        // The unfragmentable part, with the fragment header's protocol where it was named.
        let header = || {
            let mut h = ip[..f.at].to_vec();
            h[f.next_at] = next;
            h
        };
        let data = &ip[f.at + 8..];
        if f.offset == 0 && !f.more {
            // An atomic fragment: the packet without its fragment header.
            let mut out = header();
            out.extend_from_slice(data);
            return complete6(out, 1);
        }
        let part = Part {
            key: Key::V6(p.src(), p.dst(), f.ident),
            off: f.offset as usize,
            mf: f.more,
            data,
            max: MAX_PAYLOAD6 - (f.at - ipv6::HEADER_LEN),
        };
        match self.add_part(part, ip, header, now) {
            Ok(Some((out, n))) => complete6(out, n),
            Ok(None) => Outcome::Held,
            Err(o) => o,
        }
    }

    /// Files `part` (of `raw`, the fragment as it arrived; `header` makes the datagram's
    /// header from a first fragment). The whole datagram's header and payload once
    /// complete.
    fn add_part(
        &mut self,
        part: Part,
        raw: &[u8],
        header: impl FnOnce() -> Vec<u8>,
        now: Instant,
    ) -> Result<Option<(Vec<u8>, u64)>, Outcome> {
        let Part {
            key,
            off,
            mf,
            data,
            max,
        } = part;
        let end = off + data.len();
        if end > max || (mf && data.len() % 8 != 0) || (mf && data.is_empty()) {
            let n = self.remove(&key) + 1;
            return Err(Outcome::Dropped(Drop::ReasmMalformed, n));
        }
        if !self.map.contains_key(&key) {
            if self.map.len() >= self.cfg.max_datagrams {
                return Err(Outcome::Dropped(Drop::ReasmTableFull, 1));
            }
            self.map.insert(
                key,
                Pending {
                    header: None,
                    first: None,
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
            return Err(Outcome::Dropped(Drop::ReasmDuplicate, 1));
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
            return Err(Outcome::Dropped(why, n));
        }
        if full {
            return Err(Outcome::Dropped(Drop::ReasmMemory, 1));
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
            e.header = Some(header());
            e.first = Some(raw.to_vec());
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
            return Ok(None);
        }
        let held = self.map.remove(&key).expect("present");
        self.bytes -= held.held.iter().map(|(s, e)| e - s).sum::<usize>();
        let mut out = held.header.expect("checked above");
        let total = held.total.expect("checked above");
        out.extend_from_slice(&held.data[..total]);
        Ok(Some((out, held.fragments)))
    }

    /// Drops the datagrams whose time is up. Returns the fragments they held, and the
    /// first fragment (offset 0) of each that had received it, as it arrived: RFC 1122
    /// (3.3.2) and RFC 8200 (4.5) have the host send time exceeded (fragment reassembly)
    /// about those.
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
            if let Some(f) = self.map.get_mut(k).and_then(|p| p.first.take()) {
                firsts.push(f);
            }
            frags += self.remove(k);
        }
        (frags, firsts)
    }
}

/// Sets the payload length of a reassembled IPv6 datagram.
fn complete6(mut out: Vec<u8>, n: u64) -> Outcome {
    let Some(len) = out
        .len()
        .checked_sub(ipv6::HEADER_LEN)
        .and_then(|l| u16::try_from(l).ok())
    else {
        return Outcome::Dropped(Drop::ReasmMalformed, n);
    };
    out[4..6].copy_from_slice(&len.to_be_bytes());
    Outcome::Complete(out, n)
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
    /// An IPv6 fragment from 2001:db8:1::10 to 2001:db8:1::1, `dst_opts` an 8-byte
    /// destination options header before the fragment header (unfragmentable part).
    fn frag6(id: u32, off: usize, mf: bool, data: &[u8], dst_opts: bool) -> Vec<u8> {
        let ext = if dst_opts { 8 } else { 0 };
        let mut b = vec![0u8; 40 + ext + 8 + data.len()];
        b[0] = 0x60;
        b[4..6].copy_from_slice(&((ext + 8 + data.len()) as u16).to_be_bytes());
        b[6] = if dst_opts { 60 } else { 44 };
        b[7] = 64;
        b[8..24].copy_from_slice(&"2001:db8:1::10".parse::<Ipv6Addr>().unwrap().octets());
        b[24..40].copy_from_slice(&"2001:db8:1::1".parse::<Ipv6Addr>().unwrap().octets());
        if dst_opts {
            // Next: fragment; PadN over the six option bytes.
            b[40..48].copy_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0]);
        }
        let f = 40 + ext;
        b[f] = 58;
        let w = (off as u16) | mf as u16;
        b[f + 2..f + 4].copy_from_slice(&w.to_be_bytes());
        b[f + 4..f + 8].copy_from_slice(&id.to_be_bytes());
        b[f + 8..].copy_from_slice(data);
        b
    }

    fn frags6(id: u32, len: usize, size: usize, dst_opts: bool) -> Vec<Vec<u8>> {
        let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        (0..len)
            .step_by(size)
            .map(|off| {
                let n = size.min(len - off);
                frag6(id, off, off + n < len, &payload[off..off + n], dst_opts)
            })
            .collect()
    }

    #[test]
    fn ipv6_fragments_reassemble_without_their_fragment_header() {
        let now = Instant::now();
        let mut r = Reassembly::new(ReasmConfig::default());
        for dst_opts in [false, true] {
            let f = frags6(0x1234_5678, 3000, 1232, dst_opts);
            assert_eq!(f.len(), 3);
            assert_eq!(r.add6(&f[2], now), Outcome::Held);
            assert_eq!(r.add6(&f[0], now), Outcome::Held);
            let d = whole(&r.add6(&f[1], now));
            let p = ipv6::Packet::new_checked(&d[..]).unwrap();
            let u = p.upper().unwrap();
            assert_eq!((u.protocol, u.fragment), (58, None));
            assert_eq!(p.total_len(), d.len());
            assert_eq!(u.offset, 40 + if dst_opts { 8 } else { 0 });
            assert!(d[u.offset..]
                .iter()
                .enumerate()
                .all(|(i, b)| *b == (i % 251) as u8));
            assert_eq!(d[u.offset..].len(), 3000);
            assert!(r.is_empty() && r.bytes() == 0);
        }
        // An atomic fragment is its own datagram, and leaves a pending one alone.
        let f = frags6(9, 3000, 1232, false);
        assert_eq!(r.add6(&f[0], now), Outcome::Held);
        let d = whole(&r.add6(&frag6(9, 0, false, b"whole", false), now));
        assert_eq!((d.len(), d[6], &d[40..]), (45, 58, &b"whole"[..]));
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn ipv6_duplicates_overlaps_and_limits_as_for_ipv4() {
        let now = Instant::now();
        let mut r = Reassembly::new(ReasmConfig::default());
        let f = frags6(1, 2000, 1000, false);
        assert_eq!(r.add6(&f[0], now), Outcome::Held);
        assert_eq!(
            r.add6(&f[0], now),
            Outcome::Dropped(Drop::ReasmDuplicate, 1)
        );
        assert!(matches!(r.add6(&f[1], now), Outcome::Complete(_, 2)));
        // Overlap (RFC 5722): the whole datagram goes.
        assert_eq!(r.add6(&f[0], now), Outcome::Held);
        let over = frag6(1, 992, false, &[0; 1008], false);
        assert_eq!(r.add6(&over, now), Outcome::Dropped(Drop::ReasmOverlap, 2));
        assert!(r.is_empty() && r.bytes() == 0);
        // IPv4 and IPv6 datagrams with the same numbers are apart.
        assert_eq!(r.add6(&frags6(3, 3000, 1000, false)[0], now), Outcome::Held);
        assert_eq!(r.add(&frags(3, 3000, 1000)[0], now), Outcome::Held);
        assert_eq!(r.len(), 2);
        // Past 65,535 bytes of payload, and M with a length not a multiple of 8.
        let far = frag6(4, 65528, true, &[0; 16], false);
        assert_eq!(r.add6(&far, now), Outcome::Dropped(Drop::ReasmMalformed, 1));
        let odd = frag6(5, 0, true, &[0; 100], false);
        assert_eq!(r.add6(&odd, now), Outcome::Dropped(Drop::ReasmMalformed, 1));
        // Never completed: expired, with the first fragment as it came.
        let (n, firsts) = r.expire(now + Duration::from_secs(30));
        assert_eq!(n, 2);
        assert!(firsts.contains(&frags6(3, 3000, 1000, false)[0]));
        assert!(r.is_empty() && r.bytes() == 0);
    }
}
