//! The Axon header (Foss, "The Axon: a Network Device for Data Centre Networks"): a source
//! route of 4-bit output-port numbers that each Axon on the path reads and shifts out, while
//! it records the port the frame came in by, so that the far end holds the way back.
//!
//! Between Axons the header travels in an Ethernet frame of its own EtherType
//! ([`ETHERTYPE`], IEEE's local experimental 0x88b6; DIST has 0x88b5), so that any Ethernet port and NIC
//! carries it and tcpdump shows it (the thesis's point-to-point links carried it bare):
//!
//! ```text
//!  outer Ethernet (14) | type | hlen | fwd | rev | path nibbles ... | payload
//!                        0      1      2     3     4 .. hlen
//! ```
//!
//! `path` holds `rev + fwd` nibbles, high nibble first: the reverse path in nibbles
//! `0..rev` (the most recent hop last, at `rev - 1`), then the forward path in `rev..rev +
//! fwd` (the next hop first, at `rev`). A hop reads nibble `rev` as its output port and
//! writes its input port there: the forward path shrinks by one as the reverse grows by
//! one, in place. `hlen` is `4 + ceil((rev + fwd) / 2)`; an odd count leaves the last
//! nibble zero. Port [`CONTROL`] (0xf) is an Axon's own control plane. The payload of a
//! data frame is the host's Ethernet frame.

use crate::{be32, need, MacAddr, Splice, Truncated};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The outer Ethernet type of Axon frames.
pub const ETHERTYPE: u16 = 0x88b6;
/// The port number of an Axon's control plane.
pub const CONTROL: u8 = 0xf;
/// Hops a path holds at most (forward and reverse together).
pub const MAX_HOPS: usize = 32;
/// The fixed part of the header.
pub const FIXED_LEN: usize = 4;

/// What an Axon frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A host's Ethernet frame.
    Data = 0,
    /// A message between control planes.
    Control = 1,
    /// A latency probe: timestamps appended at each hop.
    Probe = 2,
    /// A neighbour's hello (one hop, no path): the bootstrap exchange.
    Hello = 3,
}

impl Kind {
    pub fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            0 => Kind::Data,
            1 => Kind::Control,
            2 => Kind::Probe,
            3 => Kind::Hello,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    Truncated(Truncated),
    UnknownKind(u8),
    /// `hlen` does not match the hop counts, or the path is longer than [`MAX_HOPS`].
    BadLength {
        hlen: u8,
        fwd: u8,
        rev: u8,
    },
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated(t) => write!(f, "axon: {t}"),
            Error::UnknownKind(k) => write!(f, "axon: unknown type {k}"),
            Error::BadLength { hlen, fwd, rev } => write!(
                f,
                "axon: header length {hlen} does not fit {fwd} forward and {rev} reverse hops (at most {MAX_HOPS})"
            ),
        }
    }
}

/// The header length for `hops` nibbles.
pub const fn header_len(hops: usize) -> usize {
    FIXED_LEN + hops.div_ceil(2)
}

/// A view of an Axon header and what follows it.
#[derive(Debug, Clone, Copy)]
pub struct Header<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    pub fn new_checked(buf: T) -> Result<Self, Error> {
        let b = buf.as_ref();
        need(b, FIXED_LEN).map_err(Error::Truncated)?;
        Kind::from_u8(b[0]).ok_or(Error::UnknownKind(b[0]))?;
        let (hlen, fwd, rev) = (b[1], b[2], b[3]);
        let hops = fwd as usize + rev as usize;
        if hops > MAX_HOPS || hlen as usize != header_len(hops) {
            return Err(Error::BadLength { hlen, fwd, rev });
        }
        need(b, hlen as usize).map_err(Error::Truncated)?;
        Ok(Header { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }

    pub fn kind(&self) -> Kind {
        Kind::from_u8(self.b()[0]).unwrap_or(Kind::Data)
    }

    pub fn header_len(&self) -> usize {
        self.b()[1] as usize
    }

    /// Forward hops left.
    pub fn fwd(&self) -> u8 {
        self.b()[2]
    }

    /// Reverse hops recorded.
    pub fn rev(&self) -> u8 {
        self.b()[3]
    }

    fn nibble(&self, i: usize) -> u8 {
        let byte = self.b()[FIXED_LEN + i / 2];
        if i.is_multiple_of(2) {
            byte >> 4
        } else {
            byte & 0xf
        }
    }

    /// The output port at this hop (None: the forward path is used up).
    pub fn next_hop(&self) -> Option<u8> {
        (self.fwd() > 0).then(|| self.nibble(self.rev() as usize))
    }

    /// The forward hops left, next first.
    pub fn forward(&self) -> Vec<u8> {
        let rev = self.rev() as usize;
        (rev..rev + self.fwd() as usize)
            .map(|i| self.nibble(i))
            .collect()
    }

    /// The way back: the recorded input ports, most recent first (the output port at each
    /// Axon on the way back, starting with the last one this frame passed).
    pub fn reverse(&self) -> Vec<u8> {
        (0..self.rev() as usize)
            .rev()
            .map(|i| self.nibble(i))
            .collect()
    }

    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    /// One hop: returns the output port and records `input` in its place (None, and no
    /// change, if the forward path is used up).
    pub fn advance(&mut self, input: u8) -> Option<u8> {
        let out = self.next_hop()?;
        let i = self.rev() as usize;
        let b = self.buf.as_mut();
        let at = FIXED_LEN + i / 2;
        b[at] = if i.is_multiple_of(2) {
            (b[at] & 0x0f) | (input & 0xf) << 4
        } else {
            (b[at] & 0xf0) | (input & 0xf)
        };
        b[2] -= 1;
        b[3] += 1;
        Some(out)
    }
}

/// An Axon header to build: a fresh route (`reverse` empty) or one with hops recorded.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Repr {
    pub kind: Option<Kind>,
    /// Output ports, next first.
    pub forward: Vec<u8>,
    /// Recorded input ports, most recent first (as [`Header::reverse`] gives them).
    pub reverse: Vec<u8>,
}

impl Repr {
    pub fn new(kind: Kind, forward: &[u8]) -> Repr {
        Repr {
            kind: Some(kind),
            forward: forward.to_vec(),
            reverse: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        header_len(self.forward.len() + self.reverse.len())
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// Writes the header at the start of `buf` (at least [`Repr::len`] bytes); None if
    /// the path is too long or a port does not fit in 4 bits.
    pub fn emit(&self, buf: &mut [u8]) -> Option<usize> {
        emit(
            buf,
            self.kind.unwrap_or(Kind::Data),
            &self.forward,
            &self.reverse,
        )
    }
}

/// Appends a header of `kind` with `forward` (next hop first) and `reverse` (most recent
/// first) to `buf`, without building a [`Repr`] (the per-frame path); None, and `buf`
/// unchanged, if the path is too long or a port does not fit in 4 bits.
pub fn append<B: Splice + ?Sized>(
    buf: &mut B,
    kind: Kind,
    forward: &[u8],
    reverse: &[u8],
) -> Option<usize> {
    let at = buf.len();
    buf.resize(at + header_len(forward.len() + reverse.len()), 0);
    let n = emit(&mut buf[at..], kind, forward, reverse);
    if n.is_none() {
        buf.truncate(at);
    }
    n
}

/// Writes a header at the start of `buf`; see [`Repr::emit`].
fn emit(buf: &mut [u8], kind: Kind, forward: &[u8], reverse: &[u8]) -> Option<usize> {
    let hops = forward.len() + reverse.len();
    let len = header_len(hops);
    if hops > MAX_HOPS || buf.len() < len || forward.iter().chain(reverse).any(|p| *p > 0xf) {
        return None;
    }
    buf[0] = kind as u8;
    buf[1] = len as u8;
    buf[2] = forward.len() as u8;
    buf[3] = reverse.len() as u8;
    buf[FIXED_LEN..len].fill(0);
    for (i, &p) in reverse.iter().rev().chain(forward).enumerate() {
        buf[FIXED_LEN + i / 2] |= if i % 2 == 0 { p << 4 } else { p };
    }
    Some(len)
}

/// A message between Axons' control planes (the payload of a [`Kind::Hello`] or
/// [`Kind::Control`] frame). Axons are named by a 32-bit id; hosts by MAC and IPv4 or
/// IPv6 address. An Axon-ARP message of IPv6 addresses (neighbour discovery's) has types
/// of its own (5 and 6) with 16-byte addresses; the target's family decides, and the
/// requester's address is of the same family (another is sent as the unspecified one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// Sent on every port at each hello interval: who is there, and by which of its ports.
    /// `hold_ms`: 0 in every hello but an Axon's last before a restart, which asks its
    /// neighbours to keep it that long without hellos (its fast path forwards on
    /// meanwhile). Four bytes after the port; a hello without them (an older Axon's)
    /// holds nothing.
    Hello { id: u32, port: u8, hold_ms: u32 },
    /// An Axon's links, flooded to all: (its port, the neighbour's id, the neighbour's
    /// port), at most 15. A higher `seq` replaces a lower one.
    Links {
        origin: u32,
        seq: u32,
        links: Vec<(u8, u32, u8)>,
    },
    /// Axon-ARP: host `src_mac`/`src_ip` on port `src_port` of Axon `origin` asks where
    /// `target` is.
    ArpRequest {
        origin: u32,
        req: u32,
        src_mac: MacAddr,
        src_ip: IpAddr,
        src_port: u8,
        target: IpAddr,
    },
    /// The answer: `target` is `target_mac` on port `target_port` of Axon `origin`.
    ArpReply {
        origin: u32,
        req: u32,
        target_mac: MacAddr,
        target: IpAddr,
        target_port: u8,
        src_mac: MacAddr,
        src_ip: IpAddr,
    },
}

/// A control message that is not one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgError {
    Truncated(Truncated),
    UnknownType(u8),
    TooManyLinks(u8),
    BadPort(u8),
}

impl core::fmt::Display for MsgError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            MsgError::Truncated(t) => write!(f, "axon message: {t}"),
            MsgError::UnknownType(t) => write!(f, "axon message: unknown type {t}"),
            MsgError::TooManyLinks(n) => write!(f, "axon message: {n} links (at most 15)"),
            MsgError::BadPort(p) => write!(f, "axon message: port {p} (at most 14)"),
        }
    }
}

mod msg {
    pub const HELLO: u8 = 1;
    pub const LINKS: u8 = 2;
    pub const ARP_REQUEST: u8 = 3;
    pub const ARP_REPLY: u8 = 4;
    pub const ND_REQUEST: u8 = 5;
    pub const ND_REPLY: u8 = 6;
}

/// `a` as an IPv4 address (an IPv6 one as 0.0.0.0).
fn octets4(a: IpAddr) -> [u8; 4] {
    match a {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(_) => [0; 4],
    }
}

/// `a` as an IPv6 address (an IPv4 one as ::).
fn octets6(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V6(a) => a.octets(),
        IpAddr::V4(_) => [0; 16],
    }
}

fn port(p: u8) -> Result<u8, MsgError> {
    if p < CONTROL {
        Ok(p)
    } else {
        Err(MsgError::BadPort(p))
    }
}

impl Msg {
    pub fn parse(b: &[u8]) -> Result<Msg, MsgError> {
        let t = |n: usize| need(b, n).map_err(MsgError::Truncated);
        t(1)?;
        let mac = |at: usize| MacAddr::from_slice(&b[at..at + 6]);
        let ip = |at: usize| IpAddr::V4(Ipv4Addr::from(be32(b, at)));
        let ip6 = |at: usize| {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[at..at + 16]);
            IpAddr::V6(Ipv6Addr::from(a))
        };
        Ok(match b[0] {
            msg::HELLO => {
                t(6)?;
                Msg::Hello {
                    id: be32(b, 1),
                    port: port(b[5])?,
                    hold_ms: if b.len() >= 10 { be32(b, 6) } else { 0 },
                }
            }
            msg::LINKS => {
                t(10)?;
                let n = b[9];
                if n > 15 {
                    return Err(MsgError::TooManyLinks(n));
                }
                t(10 + 6 * n as usize)?;
                let mut links = Vec::with_capacity(n as usize);
                for i in 0..n as usize {
                    let at = 10 + 6 * i;
                    links.push((port(b[at])?, be32(b, at + 1), port(b[at + 5])?));
                }
                Msg::Links {
                    origin: be32(b, 1),
                    seq: be32(b, 5),
                    links,
                }
            }
            msg::ARP_REQUEST => {
                t(24)?;
                Msg::ArpRequest {
                    origin: be32(b, 1),
                    req: be32(b, 5),
                    src_mac: mac(9),
                    src_ip: ip(15),
                    src_port: port(b[19])?,
                    target: ip(20),
                }
            }
            msg::ARP_REPLY => {
                t(30)?;
                Msg::ArpReply {
                    origin: be32(b, 1),
                    req: be32(b, 5),
                    target_mac: mac(9),
                    target: ip(15),
                    target_port: port(b[19])?,
                    src_mac: mac(20),
                    src_ip: ip(26),
                }
            }
            msg::ND_REQUEST => {
                t(48)?;
                Msg::ArpRequest {
                    origin: be32(b, 1),
                    req: be32(b, 5),
                    src_mac: mac(9),
                    src_ip: ip6(15),
                    src_port: port(b[31])?,
                    target: ip6(32),
                }
            }
            msg::ND_REPLY => {
                t(54)?;
                Msg::ArpReply {
                    origin: be32(b, 1),
                    req: be32(b, 5),
                    target_mac: mac(9),
                    target: ip6(15),
                    target_port: port(b[31])?,
                    src_mac: mac(32),
                    src_ip: ip6(38),
                }
            }
            other => return Err(MsgError::UnknownType(other)),
        })
    }

    /// Appends the message to `out`.
    pub fn emit<B: Splice + ?Sized>(&self, out: &mut B) {
        match self {
            Msg::Hello { id, port, hold_ms } => {
                out.push(msg::HELLO);
                out.extend_from_slice(&id.to_be_bytes());
                out.push(*port);
                out.extend_from_slice(&hold_ms.to_be_bytes());
            }
            Msg::Links { origin, seq, links } => {
                out.push(msg::LINKS);
                out.extend_from_slice(&origin.to_be_bytes());
                out.extend_from_slice(&seq.to_be_bytes());
                let n = links.len().min(15);
                out.push(n as u8);
                for (p, id, np) in &links[..n] {
                    out.push(*p);
                    out.extend_from_slice(&id.to_be_bytes());
                    out.push(*np);
                }
            }
            Msg::ArpRequest {
                origin,
                req,
                src_mac,
                src_ip,
                src_port,
                target,
            } => {
                let six = target.is_ipv6();
                out.push(if six {
                    msg::ND_REQUEST
                } else {
                    msg::ARP_REQUEST
                });
                out.extend_from_slice(&origin.to_be_bytes());
                out.extend_from_slice(&req.to_be_bytes());
                out.extend_from_slice(&src_mac.0);
                if six {
                    out.extend_from_slice(&octets6(*src_ip));
                    out.push(*src_port);
                    out.extend_from_slice(&octets6(*target));
                } else {
                    out.extend_from_slice(&octets4(*src_ip));
                    out.push(*src_port);
                    out.extend_from_slice(&octets4(*target));
                }
            }
            Msg::ArpReply {
                origin,
                req,
                target_mac,
                target,
                target_port,
                src_mac,
                src_ip,
            } => {
                let six = target.is_ipv6();
                out.push(if six { msg::ND_REPLY } else { msg::ARP_REPLY });
                out.extend_from_slice(&origin.to_be_bytes());
                out.extend_from_slice(&req.to_be_bytes());
                out.extend_from_slice(&target_mac.0);
                if six {
                    out.extend_from_slice(&octets6(*target));
                } else {
                    out.extend_from_slice(&octets4(*target));
                }
                out.push(*target_port);
                out.extend_from_slice(&src_mac.0);
                if six {
                    out.extend_from_slice(&octets6(*src_ip));
                } else {
                    out.extend_from_slice(&octets4(*src_ip));
                }
            }
        }
    }
}

/// A latency probe's payload: `origin` (u32), `seq` (u32), the record count (u8), then per
/// hop a record: the Axon's id (u32), when the probe came in and when it left (u64 ns,
/// CLOCK_REALTIME, 0 until stamped). Each Axon the probe passes appends its record; its
/// output port stamps the departure as the frame leaves.
pub mod probe {
    use crate::{be32, need, Truncated};

    pub const HEADER_LEN: usize = 9;
    pub const RECORD_LEN: usize = 20;
    /// Records a probe carries at most.
    pub const MAX_RECORDS: usize = 40;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Record {
        pub axon: u32,
        pub in_ns: u64,
        pub out_ns: u64,
    }

    /// A new probe's payload, without records.
    pub fn new(origin: u32, seq: u32) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER_LEN + 4 * RECORD_LEN);
        v.extend_from_slice(&origin.to_be_bytes());
        v.extend_from_slice(&seq.to_be_bytes());
        v.push(0);
        v
    }

    fn be64(b: &[u8], at: usize) -> u64 {
        u64::from_be_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]))
    }

    /// (origin, seq, records) of a probe's payload.
    pub fn parse(b: &[u8]) -> Result<(u32, u32, Vec<Record>), Truncated> {
        need(b, HEADER_LEN)?;
        let n = (b[8] as usize).min(MAX_RECORDS);
        need(b, HEADER_LEN + n * RECORD_LEN)?;
        let recs = (0..n)
            .map(|i| {
                let at = HEADER_LEN + i * RECORD_LEN;
                Record {
                    axon: be32(b, at),
                    in_ns: be64(b, at + 4),
                    out_ns: be64(b, at + 12),
                }
            })
            .collect();
        Ok((be32(b, 0), be32(b, 4), recs))
    }

    /// Appends a record to the probe whose payload starts at `at` in `frame` (which ends
    /// with it); false if the payload is malformed or full.
    pub fn push<B: crate::Splice + ?Sized>(
        frame: &mut B,
        at: usize,
        axon: u32,
        in_ns: u64,
    ) -> bool {
        let Some(p) = frame.get(at..) else {
            return false;
        };
        let Ok((_, _, recs)) = parse(p) else {
            return false;
        };
        if recs.len() >= MAX_RECORDS || p.len() != HEADER_LEN + recs.len() * RECORD_LEN {
            return false;
        }
        frame[at + 8] += 1;
        frame.extend_from_slice(&axon.to_be_bytes());
        frame.extend_from_slice(&in_ns.to_be_bytes());
        frame.extend_from_slice(&0u64.to_be_bytes());
        true
    }

    /// Stamps the departure time in the last record, if it has none yet.
    pub fn stamp_out(frame: &mut [u8], at: usize, out_ns: u64) {
        let Some(n) = frame.get(at + 8).map(|n| *n as usize) else {
            return;
        };
        if n == 0 || frame.len() != at + HEADER_LEN + n * RECORD_LEN {
            return;
        }
        let o = frame.len() - 8;
        if frame[o..].iter().all(|b| *b == 0) {
            frame[o..].copy_from_slice(&out_ns.to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn probes_collect_records() {
        let mut f = vec![0u8; 10];
        f.extend_from_slice(&probe::new(7, 3));
        assert!(probe::push(&mut f, 10, 1, 100));
        probe::stamp_out(&mut f, 10, 150);
        probe::stamp_out(&mut f, 10, 999);
        assert!(probe::push(&mut f, 10, 2, 200));
        probe::stamp_out(&mut f, 10, 260);
        let (o, s, r) = probe::parse(&f[10..]).unwrap();
        assert_eq!((o, s, r.len()), (7, 3, 2));
        assert_eq!((r[0].axon, r[0].in_ns, r[0].out_ns), (1, 100, 150));
        assert_eq!((r[1].axon, r[1].in_ns, r[1].out_ns), (2, 200, 260));
        // A payload that does not end the frame, or a bad count, takes no record.
        f.push(0);
        assert!(!probe::push(&mut f, 10, 3, 300));
        assert!(probe::parse(&[0, 0, 0, 1, 0, 0, 0, 1, 5]).is_err());
    }

    #[test]
    fn messages_round_trip() {
        let m = MacAddr([2, 0, 0, 0, 0, 1]);
        for msg in [
            Msg::Hello {
                id: 7,
                port: 3,
                hold_ms: 0,
            },
            Msg::Hello {
                id: 7,
                port: 3,
                hold_ms: 5000,
            },
            Msg::Links {
                origin: 1,
                seq: 9,
                links: vec![(0, 2, 1), (1, 3, 0)],
            },
            Msg::ArpRequest {
                origin: 1,
                req: 5,
                src_mac: m,
                src_ip: Ipv4Addr::new(10, 0, 0, 1).into(),
                src_port: 2,
                target: Ipv4Addr::new(10, 0, 0, 9).into(),
            },
            Msg::ArpRequest {
                origin: 1,
                req: 6,
                src_mac: m,
                src_ip: "2001:db8::1".parse().unwrap(),
                src_port: 2,
                target: "fe80::9".parse().unwrap(),
            },
            Msg::ArpReply {
                origin: 3,
                req: 6,
                target_mac: MacAddr([2, 0, 0, 0, 0, 9]),
                target: "fe80::9".parse().unwrap(),
                target_port: 4,
                src_mac: m,
                src_ip: "2001:db8::1".parse().unwrap(),
            },
            Msg::ArpReply {
                origin: 3,
                req: 5,
                target_mac: MacAddr([2, 0, 0, 0, 0, 9]),
                target: Ipv4Addr::new(10, 0, 0, 9).into(),
                target_port: 4,
                src_mac: m,
                src_ip: Ipv4Addr::new(10, 0, 0, 1).into(),
            },
        ] {
            let mut b = Vec::new();
            msg.emit(&mut b);
            assert_eq!(Msg::parse(&b), Ok(msg.clone()));
            // (A hello's hold is optional: cut off, it holds nothing.)
            let whole = if matches!(msg, Msg::Hello { .. }) {
                6
            } else {
                b.len()
            };
            for cut in 0..whole {
                assert!(Msg::parse(&b[..cut]).is_err(), "{msg:?} cut at {cut}");
            }
        }
        assert_eq!(Msg::parse(&[9]), Err(MsgError::UnknownType(9)));
        assert_eq!(Msg::parse(&[1, 0, 0, 0, 1, 15]), Err(MsgError::BadPort(15)));
        // An older Axon's hello (no hold): read as holding nothing.
        assert_eq!(
            Msg::parse(&[1, 0, 0, 0, 7, 3]),
            Ok(Msg::Hello {
                id: 7,
                port: 3,
                hold_ms: 0
            })
        );
    }

    #[test]
    fn a_frame_walks_its_path_and_records_the_way_back() {
        let r = Repr::new(Kind::Data, &[3, 1, 0xf]);
        let mut b = vec![0u8; r.len() + 2];
        assert_eq!(r.emit(&mut b), Some(6));
        b[6..].copy_from_slice(&[0xaa, 0xbb]);
        let mut h = Header::new_checked(&mut b[..]).unwrap();
        assert_eq!((h.kind(), h.fwd(), h.rev()), (Kind::Data, 3, 0));
        assert_eq!(h.advance(5), Some(3));
        assert_eq!(h.advance(2), Some(1));
        assert_eq!(h.forward(), vec![0xf]);
        assert_eq!(h.advance(7), Some(0xf));
        assert_eq!(h.advance(7), None);
        // The way back: 7 at the last Axon, 2 at the one before, 5 at the first.
        assert_eq!(h.reverse(), vec![7, 2, 5]);
        assert_eq!(h.payload(), &[0xaa, 0xbb]);
    }

    #[test]
    fn bad_headers_are_errors() {
        assert!(matches!(
            Header::new_checked(&[0u8, 4, 0][..]),
            Err(Error::Truncated(_))
        ));
        assert_eq!(
            Header::new_checked(&[9u8, 4, 0, 0][..]).unwrap_err(),
            Error::UnknownKind(9)
        );
        assert!(matches!(
            Header::new_checked(&[0u8, 5, 3, 0, 0][..]),
            Err(Error::BadLength { .. })
        ));
        assert!(matches!(
            Header::new_checked(&[0u8, 6, 3, 0, 0][..]),
            Err(Error::Truncated(_))
        ));
        assert!(matches!(
            Header::new_checked(&[0u8, 24, 20, 20, 0][..]),
            Err(Error::BadLength { .. })
        ));
        assert_eq!(Repr::new(Kind::Data, &[16]).emit(&mut [0; 8]), None);
    }

    proptest! {
        #[test]
        fn build_parse_walk(fwd in proptest::collection::vec(0u8..16, 0..=16),
                            inputs in proptest::collection::vec(0u8..16, 16)) {
            let r = Repr::new(Kind::Control, &fwd);
            let mut b = vec![0u8; r.len()];
            prop_assert_eq!(r.emit(&mut b), Some(r.len()));
            let mut h = Header::new_checked(&mut b[..]).unwrap();
            prop_assert_eq!(h.forward(), fwd.clone());
            let mut walked = Vec::new();
            for &i in inputs.iter().take(fwd.len()) {
                walked.push(h.advance(i).unwrap());
            }
            prop_assert_eq!(walked, fwd.clone());
            prop_assert_eq!(h.next_hop(), None);
            let back: Vec<u8> = inputs.iter().take(fwd.len()).rev().copied().collect();
            prop_assert_eq!(h.reverse(), back.clone());
            // A header rebuilt from what was parsed is the same bytes.
            let again = Repr { kind: Some(Kind::Control), forward: h.forward(), reverse: back };
            let mut c = vec![0u8; again.len()];
            again.emit(&mut c).unwrap();
            prop_assert_eq!(&c[..], &b[..]);
        }

        #[test]
        fn any_bytes_parse_or_err(data in proptest::collection::vec(any::<u8>(), 0..40), input in 0u8..16) {
            let mut d = data.clone();
            if let Ok(mut h) = Header::new_checked(&mut d[..]) {
                let _ = (h.forward(), h.reverse(), h.payload().len());
                let fwd = h.fwd();
                let out = h.advance(input);
                prop_assert_eq!(out.is_some(), fwd > 0);
            }
        }
    }
}
