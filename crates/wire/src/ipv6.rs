//! IPv6 (RFC 8200): the fixed header, and the walk over extension headers to the upper
//! layer.
//!
//! ```text
//!  0        1        2        3        4
//!  | ver/tc/flow label (4)             |
//!  | payload len     | next   | hops   |
//!  | source (16) ...                   |
//!  | destination (16) ...              |
//!  | extension headers ... | upper layer ...
//! ```
//!
//! [`Packet::upper`] walks the extension headers that RFC 8200 and its successors define
//! (hop-by-hop, routing, fragment, destination options, authentication, mobility, HIP,
//! shim6), at most [`MAX_EXTENSIONS`] of them, each bounds-checked, and says where the
//! upper layer starts, what it is, and what the walk met on the way (a fragment header,
//! a hop-by-hop header). An ESP header ends the walk: what follows is encrypted.

use crate::checksum;
use crate::{be16, be32, need, put16, Truncated};
use std::net::Ipv6Addr;

pub const HEADER_LEN: usize = 40;
/// The smallest MTU every IPv6 link has (RFC 8200 section 5).
pub const MIN_MTU: usize = 1280;
/// Extension headers a walk follows before it gives up (each is at least 8 bytes; real
/// packets carry a few).
pub const MAX_EXTENSIONS: usize = 16;

/// Next-header values.
pub mod next_header {
    pub const HOP_BY_HOP: u8 = 0;
    pub const TCP: u8 = crate::transport::TCP;
    pub const UDP: u8 = crate::transport::UDP;
    pub const ROUTING: u8 = 43;
    pub const FRAGMENT: u8 = 44;
    pub const ESP: u8 = 50;
    pub const AUTH: u8 = 51;
    pub const ICMPV6: u8 = 58;
    pub const NONE: u8 = 59;
    pub const DST_OPTS: u8 = 60;
    pub const MOBILITY: u8 = 135;
    pub const HIP: u8 = 139;
    pub const SHIM6: u8 = 140;
}

mod field {
    pub const PAYLOAD_LEN: usize = 4;
    pub const NEXT: usize = 6;
    pub const HOPS: usize = 7;
    pub const SRC: core::ops::Range<usize> = 8..24;
    pub const DST: core::ops::Range<usize> = 24..40;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    Truncated(Truncated),
    /// The version field is not 6.
    BadVersion(u8),
    /// An extension header runs past the packet, at this offset from the IPv6 header.
    BadExtension(usize),
    /// More than [`MAX_EXTENSIONS`] extension headers.
    TooManyExtensions,
    /// A hop-by-hop header that is not the first (RFC 8200 4.1), at this offset.
    MisplacedHopByHop(usize),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated(t) => write!(f, "ipv6: {t}"),
            Error::BadVersion(v) => write!(f, "ipv6: version {v}"),
            Error::BadExtension(at) => {
                write!(
                    f,
                    "ipv6: extension header at byte {at} runs past the packet"
                )
            }
            Error::TooManyExtensions => {
                write!(f, "ipv6: more than {MAX_EXTENSIONS} extension headers")
            }
            Error::MisplacedHopByHop(at) => {
                write!(f, "ipv6: hop-by-hop header at byte {at}, not first")
            }
        }
    }
}

/// A fragment header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment {
    /// Offset of this fragment's data in the original, in bytes (a multiple of 8).
    pub offset: u16,
    pub more: bool,
    pub ident: u32,
    /// Where the fragment header starts, from the start of the IPv6 header.
    pub at: usize,
    /// Where the next-header byte that names the fragment header lies (the fixed header's
    /// or the extension header's before it): reassembly writes the fragmentable part's
    /// protocol there.
    pub next_at: usize,
}

/// Where a walk over the extension headers ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upper {
    /// The upper-layer protocol ([`next_header::NONE`], or [`next_header::ESP`] where the
    /// walk stopped at encryption).
    pub protocol: u8,
    /// Where the upper layer starts, from the start of the IPv6 header.
    pub offset: usize,
    pub fragment: Option<Fragment>,
    pub hop_by_hop: bool,
    /// Extension headers passed.
    pub extensions: usize,
}

/// True for the next-header values the walk steps over.
pub fn is_extension(nh: u8) -> bool {
    use next_header::*;
    matches!(
        nh,
        HOP_BY_HOP | ROUTING | FRAGMENT | DST_OPTS | AUTH | MOBILITY | HIP | SHIM6
    )
}

/// A view of an IPv6 packet. `new_checked` requires the fixed header and the payload the
/// header announces; bytes past it (Ethernet padding) are ignored.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_checked(buf: T) -> Result<Self, Error> {
        let b = buf.as_ref();
        need(b, HEADER_LEN).map_err(Error::Truncated)?;
        if b[0] >> 4 != 6 {
            return Err(Error::BadVersion(b[0] >> 4));
        }
        need(b, HEADER_LEN + be16(b, field::PAYLOAD_LEN) as usize).map_err(Error::Truncated)?;
        Ok(Packet { buf })
    }

    pub fn into_inner(self) -> T {
        self.buf
    }

    pub fn traffic_class(&self) -> u8 {
        (be16(self.buf.as_ref(), 0) >> 4) as u8
    }

    pub fn flow_label(&self) -> u32 {
        be32(self.buf.as_ref(), 0) & 0xf_ffff
    }

    pub fn payload_len(&self) -> usize {
        be16(self.buf.as_ref(), field::PAYLOAD_LEN) as usize
    }

    /// Header and payload: the packet's length without any padding behind it.
    pub fn total_len(&self) -> usize {
        HEADER_LEN + self.payload_len()
    }

    pub fn next_header(&self) -> u8 {
        self.buf.as_ref()[field::NEXT]
    }

    pub fn hop_limit(&self) -> u8 {
        self.buf.as_ref()[field::HOPS]
    }

    pub fn src(&self) -> Ipv6Addr {
        addr(&self.buf.as_ref()[field::SRC])
    }

    pub fn dst(&self) -> Ipv6Addr {
        addr(&self.buf.as_ref()[field::DST])
    }

    /// The payload the header announces (extension headers included).
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[HEADER_LEN..self.total_len()]
    }

    /// The packet without padding.
    pub fn packet(&self) -> &[u8] {
        &self.buf.as_ref()[..self.total_len()]
    }

    /// Walks the extension headers to the upper layer. The walk ends at the fragment header
    /// of a fragment that is not the first (its data belongs to the middle of the original
    /// packet): `protocol` is then the fragmentable part's first header and `offset` the
    /// fragment's data.
    pub fn upper(&self) -> Result<Upper, Error> {
        use next_header::*;
        let b = self.packet();
        let mut u = Upper {
            protocol: self.next_header(),
            offset: HEADER_LEN,
            fragment: None,
            hop_by_hop: false,
            extensions: 0,
        };
        let mut next_at = field::NEXT;
        while is_extension(u.protocol) {
            if u.extensions == MAX_EXTENSIONS {
                return Err(Error::TooManyExtensions);
            }
            let at = u.offset;
            if at + 8 > b.len() {
                return Err(Error::BadExtension(at));
            }
            let len = match u.protocol {
                FRAGMENT => 8,
                AUTH => (b[at + 1] as usize + 2) * 4,
                _ => (b[at + 1] as usize + 1) * 8,
            };
            if at + len > b.len() {
                return Err(Error::BadExtension(at));
            }
            match u.protocol {
                HOP_BY_HOP if at != HEADER_LEN => return Err(Error::MisplacedHopByHop(at)),
                HOP_BY_HOP => u.hop_by_hop = true,
                FRAGMENT => {
                    let w = be16(b, at + 2);
                    u.fragment = Some(Fragment {
                        offset: w & !7,
                        more: w & 1 != 0,
                        ident: be32(b, at + 4),
                        at,
                        next_at,
                    });
                }
                _ => {}
            }
            u.protocol = b[at];
            u.offset = at + len;
            u.extensions += 1;
            next_at = at;
            if u.fragment.is_some_and(|f| f.offset != 0) {
                break;
            }
        }
        Ok(u)
    }

    /// Checks the upper-layer checksum (ICMPv6, UDP, TCP) over the upper layer at
    /// `offset`, with the pseudo header of RFC 8200 8.1. Other protocols pass.
    pub fn verify_upper_checksum(&self, u: &Upper) -> bool {
        use next_header::*;
        let Some(data) = self.packet().get(u.offset..) else {
            return false;
        };
        match u.protocol {
            ICMPV6 | TCP => {}
            // A zero UDP checksum is not allowed over IPv6 (RFC 8200 8.1).
            UDP => {
                if data.len() < 8 || be16(data, 6) == 0 {
                    return false;
                }
            }
            _ => return true,
        }
        let s = checksum::pseudo_header6(self.src(), self.dst(), u.protocol, data.len() as u32)
            + checksum::sum(data);
        checksum::fold(s) == 0xffff
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Where the TCP or UDP checksum field sits (from the start of the IPv6 header) in an
    /// unfragmented packet whose transport header fits; `None` otherwise.
    fn transport_checksum_at(&self) -> Option<(usize, Upper)> {
        let u = self.upper().ok()?;
        if u.fragment.is_some() {
            return None;
        }
        let at = crate::transport::checksum_at(u.protocol)?;
        (u.offset + at + 2 <= self.total_len()).then_some((u.offset + at, u))
    }

    /// True if the TCP or UDP checksum field holds only the pseudo-header sum: what a
    /// Linux sender leaves for checksum offload (as IPv4's `transport_checksum_looks_partial`).
    pub fn transport_checksum_looks_partial(&self) -> bool {
        let Some((at, u)) = self.transport_checksum_at() else {
            return false;
        };
        let b = self.packet();
        let len = (b.len() - u.offset) as u32;
        be16(b, at)
            == checksum::fold(checksum::pseudo_header6(
                self.src(),
                self.dst(),
                u.protocol,
                len,
            ))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Computes the TCP or UDP checksum in full (for a packet whose sender left it to
    /// offload). False for other packets, which are left alone.
    pub fn fill_transport_checksum(&mut self) -> bool {
        let Some((at, u)) = self.transport_checksum_at() else {
            return false;
        };
        let (src, dst) = (self.src(), self.dst());
        let end = self.total_len();
        let b = &mut self.buf.as_mut()[..end];
        b[at] = 0;
        b[at + 1] = 0;
        let upper = &b[u.offset..];
        let s = checksum::pseudo_header6(src, dst, u.protocol, upper.len() as u32)
            + checksum::sum(upper);
        let c = match !checksum::fold(s) {
            0 if u.protocol == next_header::UDP => 0xffff,
            c => c,
        };
        put16(b, at, c);
        true
    }

    pub fn set_hop_limit(&mut self, h: u8) {
        self.buf.as_mut()[field::HOPS] = h;
    }

    pub fn set_src(&mut self, a: Ipv6Addr) {
        self.buf.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }

    pub fn set_dst(&mut self, a: Ipv6Addr) {
        self.buf.as_mut()[field::DST].copy_from_slice(&a.octets());
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.total_len();
        &mut self.buf.as_mut()[HEADER_LEN..end]
    }
}

fn addr(b: &[u8]) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[..16]);
    Ipv6Addr::from(a)
}

/// An IPv6 header to emit in front of `payload_len` bytes already in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub next_header: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
    pub payload_len: usize,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            src: p.src(),
            dst: p.dst(),
            next_header: p.next_header(),
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
            payload_len: p.payload_len(),
        }
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the fixed header into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        need(buf, HEADER_LEN).map_err(Error::Truncated)?;
        let len = u16::try_from(self.payload_len).map_err(|_| {
            Error::Truncated(Truncated {
                need: self.payload_len,
                have: u16::MAX as usize,
            })
        })?;
        let w0 = 6 << 28 | (self.traffic_class as u32) << 20 | (self.flow_label & 0xf_ffff);
        buf[..4].copy_from_slice(&w0.to_be_bytes());
        put16(buf, field::PAYLOAD_LEN, len);
        buf[field::NEXT] = self.next_header;
        buf[field::HOPS] = self.hop_limit;
        buf[field::SRC].copy_from_slice(&self.src.octets());
        buf[field::DST].copy_from_slice(&self.dst.octets());
        Ok(())
    }
}

/// Address scopes a router must not forward beyond (RFC 4291 2.5.6, 2.7; RFC 4007).
pub fn is_link_local(a: Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

/// A link-local address with the VLAN of the link it is on written into its second 16-bit
/// group: `fe80:VLAN::IID`, the form in which the router's control plane hands link-local
/// next hops to its back-ends (a route names no interface; BSD kernels keep a link-local
/// address's scope the same way). RFC 4291 2.5.6 leaves those bits zero on the wire, so
/// the form cannot be mistaken for an address a host uses.
pub fn scoped_link_local(a: Ipv6Addr, vlan: u16) -> Ipv6Addr {
    let mut s = a.segments();
    s[1] = vlan;
    Ipv6Addr::from(s)
}

/// The link-local address and VLAN of a [`scoped_link_local`] address; `None` for any
/// other address (a link-local one with no VLAN written in it included).
pub fn link_local_scope(a: Ipv6Addr) -> Option<(Ipv6Addr, u16)> {
    let s = a.segments();
    if !is_link_local(a) || s[1] == 0 {
        return None;
    }
    Some((scoped_link_local(a, 0), s[1]))
}

/// Scopes above the VLAN ids (1 to 4094) name an interface of the element by its index
/// instead: `IFACE_SCOPE + index`, the form a forwarder's own config gives a link-local
/// next hop on an untagged interface in (`via = "fe80::2%r2-eth0"`).
pub const IFACE_SCOPE: u16 = 0x1000;

/// A link-local address scoped to interface `index` of the element (see [`IFACE_SCOPE`]);
/// `None` for an index that does not fit.
pub fn iface_scoped_link_local(a: Ipv6Addr, index: usize) -> Option<Ipv6Addr> {
    let scope = IFACE_SCOPE.checked_add(u16::try_from(index).ok()?)?;
    Some(scoped_link_local(a, scope))
}

/// The link-local address and interface index of an [`iface_scoped_link_local`] address;
/// `None` for any other (a VLAN-scoped one included).
pub fn link_local_iface(a: Ipv6Addr) -> Option<(Ipv6Addr, usize)> {
    match link_local_scope(a) {
        Some((ll, scope)) if scope >= IFACE_SCOPE => Some((ll, (scope - IFACE_SCOPE) as usize)),
        _ => None,
    }
}

/// The solicited-node multicast address of `a` (RFC 4291 2.7.1): ff02::1:ffXX:XXXX.
pub fn solicited_node(a: Ipv6Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | o[13] as u16,
        (o[14] as u16) << 8 | o[15] as u16,
    )
}

/// The Ethernet multicast address of an IPv6 multicast address (RFC 2464 7): 33:33 and
/// its last 32 bits.
pub fn multicast_mac(a: Ipv6Addr) -> crate::MacAddr {
    let o = a.octets();
    crate::MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
}

/// The modified EUI-64 link-local address of a MAC (RFC 4291 appendix A).
pub fn link_local_of(mac: crate::MacAddr) -> Ipv6Addr {
    let m = mac.0;
    Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        m[0] ^ 2,
        m[1],
        m[2],
        0xff,
        0xfe,
        m[3],
        m[4],
        m[5],
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_link_local_next_hop_carries_its_vlan() {
        let ll: Ipv6Addr = "fe80::a8bb:ccff:fe00:10".parse().unwrap();
        let scoped = scoped_link_local(ll, 20);
        assert_eq!(
            scoped,
            "fe80:14::a8bb:ccff:fe00:10".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(link_local_scope(scoped), Some((ll, 20)));
        // No VLAN written, or not link-local: no scope.
        assert_eq!(link_local_scope(ll), None);
        assert_eq!(link_local_scope("2001:14::1".parse().unwrap()), None);
    }

    fn packet(next: u8, payload: &[u8]) -> Vec<u8> {
        let r = Repr {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            next_header: next,
            hop_limit: 64,
            traffic_class: 0x12,
            flow_label: 0xabcde,
            payload_len: payload.len(),
        };
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b).unwrap();
        b[HEADER_LEN..].copy_from_slice(payload);
        b
    }

    #[test]
    fn header_roundtrip_and_extension_walk() {
        // Hop-by-hop (8 bytes, pad), destination options (16 bytes), fragment, UDP.
        let mut pl = vec![next_header::DST_OPTS, 0, 1, 4, 0, 0, 0, 0];
        pl.extend_from_slice(&[next_header::FRAGMENT, 1, 1, 12]);
        pl.extend_from_slice(&[0; 12]);
        pl.extend_from_slice(&[next_header::UDP, 0, 0x05, 0x01, 0xde, 0xad, 0xbe, 0xef]);
        pl.extend_from_slice(&[0; 8]);
        let b = packet(next_header::HOP_BY_HOP, &pl);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(
            (p.traffic_class(), p.flow_label(), p.hop_limit()),
            (0x12, 0xabcde, 64)
        );
        assert_eq!(Repr::parse(&p).payload_len, pl.len());
        let u = p.upper().unwrap();
        assert_eq!(u.protocol, next_header::UDP);
        assert_eq!(u.offset, HEADER_LEN + 8 + 16 + 8);
        assert!(u.hop_by_hop);
        assert_eq!(u.extensions, 3);
        assert_eq!(
            u.fragment,
            Some(Fragment {
                offset: 0x500,
                more: true,
                ident: 0xdeadbeef,
                at: HEADER_LEN + 24,
                next_at: HEADER_LEN + 8,
            })
        );
    }

    #[test]
    fn malformed_walks_are_errors() {
        // A destination options header that says it is longer than the packet.
        let b = packet(
            next_header::DST_OPTS,
            &[next_header::UDP, 5, 0, 0, 0, 0, 0, 0],
        );
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper(), Err(Error::BadExtension(HEADER_LEN)));
        // Hop-by-hop after another header.
        let b = packet(
            next_header::DST_OPTS,
            &[0, 0, 0, 0, 0, 0, 0, 0, 59, 0, 0, 0, 0, 0, 0, 0],
        );
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper(), Err(Error::MisplacedHopByHop(HEADER_LEN + 8)));
        // A chain of 17 destination options headers.
        let mut pl = Vec::new();
        for _ in 0..17 {
            pl.extend_from_slice(&[next_header::DST_OPTS, 0, 1, 4, 0, 0, 0, 0]);
        }
        let b = packet(next_header::DST_OPTS, &pl);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper(), Err(Error::TooManyExtensions));
        // Version 4, and a payload length past the buffer.
        let mut b = packet(next_header::NONE, &[]);
        b[0] = 0x45;
        assert!(matches!(
            Packet::new_checked(&b[..]),
            Err(Error::BadVersion(4))
        ));
        let mut b = packet(next_header::NONE, &[]);
        b[5] = 1;
        assert!(matches!(
            Packet::new_checked(&b[..]),
            Err(Error::Truncated(_))
        ));
    }

    #[test]
    fn addresses() {
        let a: Ipv6Addr = "2001:db8::1:2345:6789".parse().unwrap();
        assert_eq!(
            solicited_node(a),
            "ff02::1:ff45:6789".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            multicast_mac(solicited_node(a)),
            crate::MacAddr([0x33, 0x33, 0xff, 0x45, 0x67, 0x89])
        );
        let mac = crate::MacAddr([0x02, 0x00, 0x5e, 0x10, 0x20, 0x30]);
        assert_eq!(
            link_local_of(mac),
            "fe80::5eff:fe10:2030".parse::<Ipv6Addr>().unwrap()
        );
        assert!(is_link_local("fe80::1".parse().unwrap()));
        assert!(!is_link_local("fec0::1".parse().unwrap()));
    }

    #[test]
    fn partial_checksums_are_completed() {
        // A UDP datagram whose checksum field holds the pseudo-header sum only.
        let mut udp = [0x13u8, 0x88, 0, 53, 0, 12, 0, 0, 1, 2, 3, 4];
        let mut b = packet(next_header::UDP, &udp);
        let (src, dst): (Ipv6Addr, Ipv6Addr) = (
            "2001:db8::1".parse().unwrap(),
            "2001:db8::2".parse().unwrap(),
        );
        let partial = checksum::fold(checksum::pseudo_header6(src, dst, next_header::UDP, 12));
        b[HEADER_LEN + 6..HEADER_LEN + 8].copy_from_slice(&partial.to_be_bytes());
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        assert!(p.transport_checksum_looks_partial());
        assert!(p.fill_transport_checksum());
        assert!(!p.transport_checksum_looks_partial());
        let u = p.upper().unwrap();
        assert!(p.verify_upper_checksum(&u));
        // ICMPv6 is not touched.
        udp[0] = 128;
        let mut b = packet(next_header::ICMPV6, &udp);
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        assert!(!p.fill_transport_checksum());
    }

    proptest! {
        #[test]
        fn any_bytes_walk_without_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(p) = Packet::new_checked(&data[..]) {
                if let Ok(u) = p.upper() {
                    prop_assert!(u.offset <= p.total_len());
                    let _ = p.verify_upper_checksum(&u);
                }
            }
        }
    }
}
