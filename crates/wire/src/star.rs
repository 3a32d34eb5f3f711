//! The star router's header: what the forwarder where a packet enters hands the egress
//! forwarder across the star's switch, so that the egress forwarder sends the packet on
//! without a second route lookup and without a second TTL decrement (docs/star.md).
//!
//! After an Ethernet header of EtherType [`ETHERTYPE`] (untagged), 12 bytes, then the
//! IPv4 packet, TTL already decremented:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 1 | version, [`VERSION`] |
//! | 1 | 1 | egress port: the index of the egress forwarder's port to send the packet out of |
//! | 2 | 2 | reserved, 0 |
//! | 4 | 4 | next hop: the neighbour on that port to send it to |
//! | 8 | 4 | the address of the router's interface where the packet entered: the source of any ICMP error the egress forwarder sends about it, as a single router's would be |
//!
//! An IPv6 packet (hop limit already decremented) has version [`VERSION6`] and 36 bytes
//! ([`Header6`]): version, egress port, 2 reserved, then the next hop and the ingress
//! address, 16 bytes each.

use crate::Truncated;
use core::net::{Ipv4Addr, Ipv6Addr};

/// EtherType of star frames (0x88b5 is DIST, 0x88b6 the Axon's).
pub const ETHERTYPE: u16 = 0x88b7;
pub const VERSION: u8 = 1;
pub const HEADER_LEN: usize = 12;
/// The version of a header before an IPv6 packet.
pub const VERSION6: u8 = 2;
pub const HEADER6_LEN: usize = 36;

/// A parsed star header before an IPv6 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header6 {
    pub port: u8,
    pub next_hop: Ipv6Addr,
    pub ingress: Ipv6Addr,
}

impl Header6 {
    /// Parses the header at the start of `b` (the Ethernet payload).
    pub fn parse(b: &[u8]) -> Result<Header6, Error> {
        if b.len() < HEADER6_LEN {
            return Err(Error::Truncated(Truncated {
                need: HEADER6_LEN,
                have: b.len(),
            }));
        }
        if b[0] != VERSION6 {
            return Err(Error::BadVersion(b[0]));
        }
        let at = |i: usize| {
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[i..i + 16]);
            Ipv6Addr::from(o)
        };
        Ok(Header6 {
            port: b[1],
            next_hop: at(4),
            ingress: at(20),
        })
    }

    /// The header's 36 bytes.
    pub fn to_bytes(&self) -> [u8; HEADER6_LEN] {
        let mut b = [0u8; HEADER6_LEN];
        b[0] = VERSION6;
        b[1] = self.port;
        b[4..20].copy_from_slice(&self.next_hop.octets());
        b[20..36].copy_from_slice(&self.ingress.octets());
        b
    }
}

/// A parsed star header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub port: u8,
    pub next_hop: Ipv4Addr,
    pub ingress: Ipv4Addr,
}

/// Why a star header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    Truncated(Truncated),
    BadVersion(u8),
}

impl Header {
    /// Parses the header at the start of `b` (the Ethernet payload).
    pub fn parse(b: &[u8]) -> Result<Header, Error> {
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated(Truncated {
                need: HEADER_LEN,
                have: b.len(),
            }));
        }
        if b[0] != VERSION {
            return Err(Error::BadVersion(b[0]));
        }
        Ok(Header {
            port: b[1],
            next_hop: Ipv4Addr::new(b[4], b[5], b[6], b[7]),
            ingress: Ipv4Addr::new(b[8], b[9], b[10], b[11]),
        })
    }

    /// The header's 12 bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = VERSION;
        b[1] = self.port;
        b[4..8].copy_from_slice(&self.next_hop.octets());
        b[8..12].copy_from_slice(&self.ingress.octets());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips(port: u8, a: [u8; 4], b: [u8; 4]) {
            let h = Header { port, next_hop: a.into(), ingress: b.into() };
            prop_assert_eq!(Header::parse(&h.to_bytes()), Ok(h));
        }

        #[test]
        fn round_trips6(port: u8, a: [u8; 16], b: [u8; 16]) {
            let h = Header6 { port, next_hop: a.into(), ingress: b.into() };
            prop_assert_eq!(Header6::parse(&h.to_bytes()), Ok(h));
            prop_assert_eq!(Header::parse(&h.to_bytes()), Err(Error::BadVersion(VERSION6)));
        }

        #[test]
        fn parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = Header::parse(&b);
            let _ = Header6::parse(&b);
        }
    }

    #[test]
    fn rejects_short_and_unknown() {
        assert!(matches!(Header::parse(&[1; 11]), Err(Error::Truncated(_))));
        assert_eq!(Header::parse(&[2; 12]), Err(Error::BadVersion(2)));
        assert!(matches!(Header6::parse(&[2; 35]), Err(Error::Truncated(_))));
        assert_eq!(Header6::parse(&[1; 36]), Err(Error::BadVersion(1)));
    }
}
