//! IPv4 (RFC 791), with options.
//!
//! ```text
//!  0       1       2       3
//!  |ver|ihl|  tos  |   total length |
//!  |  identification |flg| frag off |
//!  |  ttl  | proto |   checksum     |
//!  |          source address        |
//!  |       destination address      |
//!  |   options (ihl*4 - 20 bytes)   |
//! ```

use crate::checksum;
use crate::{be16, need, put16, Truncated};
use std::net::Ipv4Addr;

pub const MIN_HEADER_LEN: usize = 20;
pub const MAX_HEADER_LEN: usize = 60;

/// IP protocol numbers this project knows by name.
pub mod protocol {
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = crate::transport::TCP;
    pub const UDP: u8 = crate::transport::UDP;
}

/// Option types that matter to a router.
pub mod option {
    pub const END: u8 = 0;
    pub const NOP: u8 = 1;
    pub const LSRR: u8 = 131;
    pub const SSRR: u8 = 137;
    pub const RR: u8 = 7;
    /// Internet Timestamp.
    pub const TS: u8 = 68;
    /// Bit 7 of the type: copy the option into every fragment.
    pub const COPIED: u8 = 0x80;
}

mod field {
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LENGTH: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLG_OFF: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
}

const DF: u16 = 0x4000;
const MF: u16 = 0x2000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    Truncated(Truncated),
    BadVersion(u8),
    /// IHL below 5 (in 32-bit words).
    BadHeaderLen(u8),
    /// Total length smaller than the header.
    BadTotalLen {
        total: u16,
        header: usize,
    },
    /// An option whose length runs past the header or is below 2; `at` is its offset.
    BadOption {
        at: usize,
    },
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated(t) => write!(f, "ipv4: {t}"),
            Error::BadVersion(v) => write!(f, "ipv4: version {v}"),
            Error::BadHeaderLen(ihl) => write!(f, "ipv4: header length {ihl} words"),
            Error::BadTotalLen { total, header } => {
                write!(f, "ipv4: total length {total} below header length {header}")
            }
            Error::BadOption { at } => write!(f, "ipv4: malformed option at byte {at}"),
        }
    }
}

/// A view of an IPv4 packet. The buffer may be longer than the packet (link padding):
/// `total_len()` says where the packet ends and `payload()` stops there.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks version, IHL, total length against the buffer. Does not check the checksum
    /// or options; see [`Packet::verify_checksum`] and [`Packet::check_options`].
    pub fn new_checked(buf: T) -> Result<Self, Error> {
        let b = buf.as_ref();
        need(b, MIN_HEADER_LEN).map_err(Error::Truncated)?;
        let version = b[field::VER_IHL] >> 4;
        if version != 4 {
            return Err(Error::BadVersion(version));
        }
        let ihl = b[field::VER_IHL] & 0x0f;
        if ihl < 5 {
            return Err(Error::BadHeaderLen(ihl));
        }
        let header = ihl as usize * 4;
        let total = be16(b, field::LENGTH);
        if (total as usize) < header {
            return Err(Error::BadTotalLen { total, header });
        }
        need(b, total as usize).map_err(Error::Truncated)?;
        Ok(Packet { buf })
    }

    /// A view of a bare header (no payload), as the fragmenter builds them. Checks only
    /// that the buffer is at least 20 bytes and as long as its IHL says.
    pub fn new_checked_header(buf: T) -> Result<Self, Error> {
        let b = buf.as_ref();
        need(b, MIN_HEADER_LEN).map_err(Error::Truncated)?;
        need(b, (b[0] & 0x0f) as usize * 4).map_err(Error::Truncated)?;
        Ok(Packet { buf })
    }

    pub fn into_inner(self) -> T {
        self.buf
    }

    pub fn header_len(&self) -> usize {
        (self.buf.as_ref()[field::VER_IHL] & 0x0f) as usize * 4
    }

    pub fn tos(&self) -> u8 {
        self.buf.as_ref()[field::TOS]
    }

    pub fn total_len(&self) -> usize {
        be16(self.buf.as_ref(), field::LENGTH) as usize
    }

    pub fn ident(&self) -> u16 {
        be16(self.buf.as_ref(), field::IDENT)
    }

    pub fn dont_frag(&self) -> bool {
        be16(self.buf.as_ref(), field::FLG_OFF) & DF != 0
    }

    pub fn more_frags(&self) -> bool {
        be16(self.buf.as_ref(), field::FLG_OFF) & MF != 0
    }

    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> usize {
        (be16(self.buf.as_ref(), field::FLG_OFF) & 0x1fff) as usize * 8
    }

    /// Part of a fragmented datagram (offset non-zero or more fragments follow).
    pub fn is_fragment(&self) -> bool {
        be16(self.buf.as_ref(), field::FLG_OFF) & (MF | 0x1fff) != 0
    }

    pub fn ttl(&self) -> u8 {
        self.buf.as_ref()[field::TTL]
    }

    pub fn protocol(&self) -> u8 {
        self.buf.as_ref()[field::PROTOCOL]
    }

    pub fn checksum(&self) -> u16 {
        be16(self.buf.as_ref(), field::CHECKSUM)
    }

    pub fn src(&self) -> Ipv4Addr {
        addr(self.buf.as_ref(), field::SRC)
    }

    pub fn dst(&self) -> Ipv4Addr {
        addr(self.buf.as_ref(), field::DST)
    }

    /// The header checksum is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::fold(checksum::sum(&self.buf.as_ref()[..self.header_len()])) == 0xffff
    }

    pub fn header(&self) -> &[u8] {
        &self.buf.as_ref()[..self.header_len()]
    }

    pub fn options(&self) -> &[u8] {
        &self.buf.as_ref()[MIN_HEADER_LEN..self.header_len()]
    }

    /// Validates the option list's structure and returns whether a source-route option
    /// (LSRR or SSRR) is present.
    pub fn check_options(&self) -> Result<bool, Error> {
        let mut source_route = false;
        for opt in Options::new(self.options()) {
            let (at, ty, _) = opt?;
            let _ = at;
            if ty == option::LSRR || ty == option::SSRR {
                source_route = true;
            }
        }
        Ok(source_route)
    }

    /// The payload, up to the total length (link padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[self.header_len()..self.total_len()]
    }

    /// The packet, header and payload, without link padding.
    pub fn packet(&self) -> &[u8] {
        &self.buf.as_ref()[..self.total_len()]
    }
}

/// Iterates options as `(offset_in_options, type, bytes)`; yields an error once on a
/// malformed option and then stops.
pub struct Options<'a> {
    b: &'a [u8],
    at: usize,
    done: bool,
}

impl<'a> Options<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        Options {
            b,
            at: 0,
            done: false,
        }
    }
}

impl<'a> Iterator for Options<'a> {
    type Item = Result<(usize, u8, &'a [u8]), Error>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.at >= self.b.len() {
            return None;
        }
        let at = self.at;
        let ty = self.b[at];
        match ty {
            option::END => {
                self.done = true;
                None
            }
            option::NOP => {
                self.at += 1;
                Some(Ok((at, ty, &self.b[at..at + 1])))
            }
            _ => {
                let len = match self.b.get(at + 1) {
                    Some(&l) if l >= 2 && at + l as usize <= self.b.len() => l as usize,
                    _ => {
                        self.done = true;
                        return Some(Err(Error::BadOption {
                            at: MIN_HEADER_LEN + at,
                        }));
                    }
                };
                self.at += len;
                Some(Ok((at, ty, &self.b[at..at + len])))
            }
        }
    }
}

fn addr(b: &[u8], at: usize) -> Ipv4Addr {
    Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3])
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Decrements the TTL by one and updates the checksum incrementally (RFC 1624).
    /// The caller has checked that the TTL is above 1.
    pub fn decrement_ttl(&mut self) {
        let b = self.buf.as_mut();
        let old = be16(b, field::TTL);
        b[field::TTL] = b[field::TTL].saturating_sub(1);
        let new = be16(b, field::TTL);
        let c = checksum::update16(be16(b, field::CHECKSUM), old, new);
        put16(b, field::CHECKSUM, c);
    }

    pub fn set_total_len(&mut self, len: u16) {
        put16(self.buf.as_mut(), field::LENGTH, len);
    }

    /// Sets the DF, MF flags and the offset (in bytes, a multiple of 8).
    pub fn set_frag(&mut self, dont_frag: bool, more_frags: bool, offset: usize) {
        let mut v = ((offset / 8) as u16) & 0x1fff;
        if dont_frag {
            v |= DF;
        }
        if more_frags {
            v |= MF;
        }
        put16(self.buf.as_mut(), field::FLG_OFF, v);
    }

    pub fn set_ttl(&mut self, ttl: u8) {
        self.buf.as_mut()[field::TTL] = ttl;
    }

    pub fn set_src(&mut self, a: Ipv4Addr) {
        self.buf.as_mut()[field::SRC..field::SRC + 4].copy_from_slice(&a.octets());
    }

    pub fn set_dst(&mut self, a: Ipv4Addr) {
        self.buf.as_mut()[field::DST..field::DST + 4].copy_from_slice(&a.octets());
    }

    /// Recomputes the header checksum from scratch.
    /// Processes the Record Route and Timestamp options as a router forwarding the
    /// datagram out of the interface whose address is `out`, at `ts_ms` (milliseconds
    /// since midnight UT), as RFC 791 and RFC 1812 (5.2.4, 5.3.13) ask: Record Route gets
    /// `out` at its pointer, which advances by 4, unless the option is full. Timestamp
    /// gets `ts_ms` (flag 0), `out` and `ts_ms` (flag 1), or `ts_ms` after the next
    /// prespecified address if that address is `out` (flag 3); a full one counts in its
    /// overflow field instead. Returns true if any option changed (then the caller
    /// recomputes the header checksum), or the offset in the header of the byte a
    /// parameter problem points at: a pointer out of its range, an unknown timestamp
    /// flag, an overflow count that overflows.
    pub fn update_options(&mut self, out: Ipv4Addr, ts_ms: u32) -> Result<bool, usize> {
        let hlen = self.header_len();
        let b = &mut self.buf.as_mut()[MIN_HEADER_LEN..hlen];
        let spans: Vec<(usize, u8, usize)> = Options::new(b)
            .map_while(|o| o.ok())
            .map(|(at, ty, bytes)| (at, ty, bytes.len()))
            .collect();
        let mut changed = false;
        for (at, ty, len) in spans {
            let o = &mut b[at..at + len];
            let bad = |i: usize| MIN_HEADER_LEN + at + i;
            match ty {
                option::RR => {
                    let ptr = *o.get(2).ok_or(bad(1))? as usize;
                    if len < 3 || ptr < 4 {
                        return Err(bad(2));
                    }
                    if ptr + 3 <= len {
                        o[ptr - 1..ptr + 3].copy_from_slice(&out.octets());
                        o[2] = (ptr + 4) as u8;
                        changed = true;
                    }
                }
                option::TS => {
                    if len < 4 {
                        return Err(bad(1));
                    }
                    let (ptr, oflw, flg) = (o[2] as usize, o[3] >> 4, o[3] & 0x0f);
                    let size = match flg {
                        0 => 4,
                        1 | 3 => 8,
                        _ => return Err(bad(3)),
                    };
                    if ptr < 5 {
                        return Err(bad(2));
                    }
                    if ptr + size - 1 > len {
                        // Full: count the hop in the overflow field.
                        if oflw == 15 {
                            return Err(bad(3));
                        }
                        o[3] = ((oflw + 1) << 4) | flg;
                        changed = true;
                        continue;
                    }
                    let ts = ts_ms.to_be_bytes();
                    match flg {
                        0 => o[ptr - 1..ptr + 3].copy_from_slice(&ts),
                        1 => {
                            o[ptr - 1..ptr + 3].copy_from_slice(&out.octets());
                            o[ptr + 3..ptr + 7].copy_from_slice(&ts);
                        }
                        _ => {
                            if o[ptr - 1..ptr + 3] != out.octets() {
                                continue;
                            }
                            o[ptr + 3..ptr + 7].copy_from_slice(&ts);
                        }
                    }
                    o[2] = (ptr + size) as u8;
                    changed = true;
                }
                _ => {}
            }
        }
        Ok(changed)
    }

    pub fn fill_checksum(&mut self) {
        let h = self.header_len();
        let b = self.buf.as_mut();
        put16(b, field::CHECKSUM, 0);
        let c = checksum::checksum(&b[..h]);
        put16(b, field::CHECKSUM, c);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (h, t) = (self.header_len(), self.total_len());
        &mut self.buf.as_mut()[h..t]
    }

    /// Whether the TCP or UDP checksum field holds just the pseudo-header sum, as a sender
    /// that left the checksum to offload writes it (Linux's CHECKSUM_PARTIAL). A complete
    /// checksum equals it only by chance (about 1 in 65,536), and then
    /// [`Packet::fill_transport_checksum`] writes the same value back, so a receiver that
    /// cannot be told which frames are partial may fill in every frame this says yes to.
    pub fn transport_checksum_looks_partial(&self) -> bool {
        let Some(at) = self.transport_checksum_at() else {
            return false;
        };
        let p = self.payload();
        let field = u16::from_be_bytes([p[at], p[at + 1]]);
        let pseudo = checksum::fold(checksum::pseudo_header(
            self.src(),
            self.dst(),
            self.protocol(),
            p.len() as u16,
        ));
        field == pseudo
    }

    /// Where the TCP or UDP checksum field sits in the payload of an unfragmented packet
    /// whose transport header fits; `None` for other protocols, fragments or short ones.
    fn transport_checksum_at(&self) -> Option<usize> {
        if self.is_fragment() {
            return None;
        }
        let at = crate::transport::checksum_at(self.protocol())?;
        let n = self.payload().len();
        (n >= at + 2 && n <= u16::MAX as usize).then_some(at)
    }

    /// Computes the TCP or UDP checksum of an unfragmented packet from scratch. Used for
    /// packets whose sender left the checksum to offload (only the pseudo-header sum is
    /// there). Returns false (and changes nothing) for other protocols, fragments, or a
    /// transport header that does not fit.
    pub fn fill_transport_checksum(&mut self) -> bool {
        let Some(at) = self.transport_checksum_at() else {
            return false;
        };
        let (src, dst, proto) = (self.src(), self.dst(), self.protocol());
        let p = self.payload_mut();
        p[at] = 0;
        p[at + 1] = 0;
        let s = checksum::pseudo_header(src, dst, proto, p.len() as u16) + checksum::sum(p);
        let mut c = !checksum::fold(s);
        if proto == protocol::UDP && c == 0 {
            c = 0xffff;
        }
        put16(p, at, c);
        true
    }
}

/// An IPv4 header without options, to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub protocol: u8,
    pub ttl: u8,
    pub tos: u8,
    pub ident: u16,
    pub dont_frag: bool,
    pub more_frags: bool,
    /// In bytes, a multiple of 8.
    pub frag_offset: usize,
    pub payload_len: usize,
}

impl Repr {
    /// Reads a header (options are not part of the `Repr`).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            src: p.src(),
            dst: p.dst(),
            protocol: p.protocol(),
            ttl: p.ttl(),
            tos: p.tos(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            more_frags: p.more_frags(),
            frag_offset: p.frag_offset(),
            payload_len: p.total_len() - p.header_len(),
        }
    }

    pub const fn header_len(&self) -> usize {
        MIN_HEADER_LEN
    }

    /// Writes the 20-byte header with its checksum.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        need(buf, MIN_HEADER_LEN).map_err(Error::Truncated)?;
        let total = MIN_HEADER_LEN + self.payload_len;
        if total > u16::MAX as usize {
            return Err(Error::BadTotalLen {
                total: u16::MAX,
                header: total,
            });
        }
        buf[field::VER_IHL] = 0x45;
        buf[field::TOS] = self.tos;
        put16(buf, field::LENGTH, total as u16);
        put16(buf, field::IDENT, self.ident);
        let mut p = Packet {
            buf: &mut buf[..MIN_HEADER_LEN],
        };
        p.set_frag(self.dont_frag, self.more_frags, self.frag_offset);
        let b = p.buf;
        b[field::TTL] = self.ttl;
        b[field::PROTOCOL] = self.protocol;
        b[field::SRC..field::SRC + 4].copy_from_slice(&self.src.octets());
        b[field::DST..field::DST + 4].copy_from_slice(&self.dst.octets());
        put16(b, field::CHECKSUM, 0);
        let c = checksum::checksum(&b[..MIN_HEADER_LEN]);
        put16(b, field::CHECKSUM, c);
        Ok(())
    }
}

/// `a` is in `net/len`.
#[inline]
pub fn in_prefix(a: Ipv4Addr, net: Ipv4Addr, len: u8) -> bool {
    let m = mask(len);
    u32::from(a) & m == u32::from(net) & m
}

/// The netmask of a prefix length (0..=32).
#[inline]
pub fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len.min(32) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A header with `opts` (a multiple of 4 bytes) and no payload.
    fn with_opts(opts: &[u8]) -> Vec<u8> {
        let h = MIN_HEADER_LEN + opts.len();
        let mut b = vec![0u8; h];
        b[0] = 0x40 | (h / 4) as u8;
        b[3] = h as u8;
        b[8] = 64;
        b[9] = 1;
        b[12..16].copy_from_slice(&[10, 0, 0, 1]);
        b[16..20].copy_from_slice(&[10, 0, 1, 1]);
        b[20..].copy_from_slice(opts);
        b
    }

    #[test]
    fn record_route_and_timestamp_as_a_router_fills_them() {
        let out = Ipv4Addr::new(10, 9, 0, 1);
        // Record route with room for two addresses (ping -R writes nine).
        let mut b = with_opts(&[7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        assert_eq!(p.update_options(out, 5), Ok(true));
        assert_eq!(p.update_options(Ipv4Addr::new(10, 8, 0, 1), 5), Ok(true));
        // Full: forwarded unchanged.
        assert_eq!(p.update_options(Ipv4Addr::new(10, 7, 0, 1), 5), Ok(false));
        assert_eq!(&b[20..32], &[7, 11, 12, 10, 9, 0, 1, 10, 8, 0, 1, 0]);
        // Timestamps only (flag 0), one slot, then the overflow count.
        let mut b = with_opts(&[68, 8, 5, 0x00, 0, 0, 0, 0]);
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        assert_eq!(p.update_options(out, 0x0102_0304), Ok(true));
        assert_eq!(p.update_options(out, 9), Ok(true));
        assert_eq!(&b[20..28], &[68, 8, 9, 0x10, 1, 2, 3, 4]);
        // Address and timestamp (flag 1).
        let mut b = with_opts(&[68, 12, 5, 0x01, 0, 0, 0, 0, 0, 0, 0, 0]);
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        assert_eq!(p.update_options(out, 7), Ok(true));
        assert_eq!(&b[20..32], &[68, 12, 13, 0x01, 10, 9, 0, 1, 0, 0, 0, 7]);
        // Prespecified (flag 3): only where the next address is ours.
        let mut b = with_opts(&[68, 12, 5, 0x03, 10, 9, 0, 1, 0, 0, 0, 0]);
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        assert_eq!(p.update_options(Ipv4Addr::new(10, 8, 0, 1), 7), Ok(false));
        assert_eq!(p.update_options(out, 7), Ok(true));
        assert_eq!(&b[20..32], &[68, 12, 13, 0x03, 10, 9, 0, 1, 0, 0, 0, 7]);
        // The overflow count overflows, a pointer below its minimum, an unknown flag:
        // parameter problem at the byte at fault.
        for (opts, at) in [
            (vec![68, 4, 5, 0xf0], 23),
            (vec![68, 8, 4, 0x00, 0, 0, 0, 0], 22),
            (vec![68, 8, 5, 0x02, 0, 0, 0, 0], 23),
            (vec![7, 7, 3, 0, 0, 0, 0, 0], 22),
        ] {
            let mut b = with_opts(&opts);
            let mut p = Packet::new_checked(&mut b[..]).unwrap();
            assert_eq!(p.update_options(out, 1), Err(at), "{opts:?}");
        }
    }

    #[rustfmt::skip]
    const WITH_OPTIONS: [u8; 28] = [
        0x46, 0x00, 0x00, 0x1c,     // v4, ihl 6, total 28
        0x12, 0x34, 0x40, 0x00,     // ident, DF
        0x40, 0x11, 0x00, 0x00,     // ttl 64, udp, checksum (filled below)
        10, 0, 0, 1,                // src
        10, 0, 1, 1,                // dst
        0x94, 0x04, 0x00, 0x00,     // router alert (copied), len 4, value 0
        0x00, 0x00, 0xaa, 0xbb,     // payload
    ];

    fn packet() -> Vec<u8> {
        let mut v = WITH_OPTIONS.to_vec();
        Packet::new_checked(&mut v[..]).unwrap().fill_checksum();
        v
    }

    #[test]
    fn options_and_fields() {
        let v = packet();
        let p = Packet::new_checked(&v[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.payload(), &[0x00, 0x00, 0xaa, 0xbb]);
        assert!(p.dont_frag() && !p.is_fragment());
        assert_eq!(p.check_options(), Ok(false));
        let opts: Vec<_> = Options::new(p.options()).map(|o| o.unwrap().1).collect();
        assert_eq!(opts, vec![0x94]);
    }

    #[test]
    fn malformed_option_found() {
        let mut v = packet();
        v[21] = 9; // router alert length runs past the header
        let p = Packet::new_checked(&v[..]).unwrap();
        assert_eq!(p.check_options(), Err(Error::BadOption { at: 20 }));
        v[21] = 1; // below 2
        let p = Packet::new_checked(&v[..]).unwrap();
        assert_eq!(p.check_options(), Err(Error::BadOption { at: 20 }));
    }

    #[test]
    fn header_errors() {
        let mut v = packet();
        v[0] = 0x65;
        assert_eq!(
            Packet::new_checked(&v[..]).unwrap_err(),
            Error::BadVersion(6)
        );
        v[0] = 0x44;
        assert_eq!(
            Packet::new_checked(&v[..]).unwrap_err(),
            Error::BadHeaderLen(4)
        );
        v[0] = 0x46;
        v[3] = 0x14; // total 20 < header 24
        assert_eq!(
            Packet::new_checked(&v[..]).unwrap_err(),
            Error::BadTotalLen {
                total: 20,
                header: 24
            }
        );
        v[3] = 0x40; // total 64 > buffer 28
        assert_eq!(
            Packet::new_checked(&v[..]).unwrap_err(),
            Error::Truncated(Truncated { need: 64, have: 28 })
        );
    }

    #[test]
    fn padding_is_not_payload() {
        let mut v = packet();
        v.extend_from_slice(&[0u8; 18]);
        let p = Packet::new_checked(&v[..]).unwrap();
        assert_eq!(p.payload().len(), 4);
        assert_eq!(p.packet().len(), 28);
    }

    /// A UDP datagram's checksum field: complete, or only the pseudo-header sum (as a
    /// sender that left it to offload writes it); filling in recovers the complete one, and
    /// filling in a complete one changes nothing.
    #[test]
    fn partial_transport_checksums_are_recognised_and_filled() {
        let mut v = vec![
            0x45,
            0,
            0,
            32,
            0,
            1,
            0,
            0,
            64,
            protocol::UDP,
            0,
            0,
            10,
            1,
            0,
            10,
            10,
            3,
            0,
            10,
        ];
        v.extend([0x30, 0x39, 0x04, 0xd2, 0, 12, 0, 0, b'p', b'i', b'n', b'g']);
        let mut p = Packet::new_checked(&mut v[..]).unwrap();
        p.fill_checksum();
        assert!(p.fill_transport_checksum());
        let complete = p.payload()[6..8].to_vec();
        assert!(!p.transport_checksum_looks_partial());
        let pseudo = checksum::fold(checksum::pseudo_header(p.src(), p.dst(), protocol::UDP, 12));
        p.payload_mut()[6..8].copy_from_slice(&pseudo.to_be_bytes());
        assert!(p.transport_checksum_looks_partial());
        assert!(p.fill_transport_checksum());
        assert_eq!(p.payload()[6..8], complete[..]);
        assert!(p.fill_transport_checksum());
        assert_eq!(p.payload()[6..8], complete[..]);
        // Not for fragments or other protocols.
        p.set_frag(false, true, 0);
        assert!(!p.transport_checksum_looks_partial());
    }

    proptest! {
        #[test]
        fn ttl_decrement_keeps_checksum_valid(ttl in 2u8.., tos in any::<u8>(), id in any::<u16>(),
                                              src in any::<u32>(), dst in any::<u32>()) {
            let r = Repr { src: src.into(), dst: dst.into(), protocol: 17, ttl, tos, ident: id,
                           dont_frag: false, more_frags: false, frag_offset: 0, payload_len: 0 };
            let mut b = [0u8; 20];
            r.emit(&mut b).unwrap();
            let mut p = Packet::new_checked(&mut b[..]).unwrap();
            p.decrement_ttl();
            prop_assert!(p.verify_checksum());
            prop_assert_eq!(p.ttl(), ttl - 1);
        }

        #[test]
        fn roundtrip(src in any::<u32>(), dst in any::<u32>(), proto in any::<u8>(), ttl in any::<u8>(),
                     tos in any::<u8>(), ident in any::<u16>(), df in any::<bool>(), mf in any::<bool>(),
                     off in 0usize..8192, len in 0usize..100) {
            let r = Repr { src: src.into(), dst: dst.into(), protocol: proto, ttl, tos, ident,
                           dont_frag: df, more_frags: mf, frag_offset: off * 8, payload_len: len };
            let mut b = vec![0u8; 20 + len];
            r.emit(&mut b).unwrap();
            let p = Packet::new_checked(&b[..]).unwrap();
            prop_assert!(p.verify_checksum());
            prop_assert_eq!(Repr::parse(&p), r);
        }
    }
}
