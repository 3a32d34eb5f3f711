//! ARP for IPv4 over Ethernet (RFC 826).
//!
//! ```text
//!  0     2     4    5    6    8      14     18     24     28
//!  |htype|ptype|hlen|plen| op | sha  | spa  | tha  | tpa  |
//! ```

use crate::{be16, need, put16, MacAddr, Truncated};
use std::net::Ipv4Addr;

pub const PACKET_LEN: usize = 28;

mod field {
    use core::ops::Range;
    pub const HTYPE: usize = 0;
    pub const PTYPE: usize = 2;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: usize = 6;
    pub const SHA: Range<usize> = 8..14;
    pub const SPA: Range<usize> = 14..18;
    pub const THA: Range<usize> = 18..24;
    pub const TPA: Range<usize> = 24..28;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    Truncated(Truncated),
    /// Not Ethernet (1) / IPv4 (0x0800) with 6- and 4-byte addresses.
    Unsupported {
        htype: u16,
        ptype: u16,
        hlen: u8,
        plen: u8,
    },
    /// Neither request (1) nor reply (2).
    BadOperation(u16),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated(t) => write!(f, "arp: {t}"),
            Error::Unsupported {
                htype,
                ptype,
                hlen,
                plen,
            } => write!(
                f,
                "arp: unsupported htype {htype} ptype {ptype:#06x} hlen {hlen} plen {plen}"
            ),
            Error::BadOperation(op) => write!(f, "arp: unknown operation {op}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Request,
    Reply,
}

/// A view of an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_checked(buf: T) -> Result<Self, Error> {
        let b = buf.as_ref();
        need(b, PACKET_LEN).map_err(Error::Truncated)?;
        let (htype, ptype, hlen, plen) = (
            be16(b, field::HTYPE),
            be16(b, field::PTYPE),
            b[field::HLEN],
            b[field::PLEN],
        );
        if htype != 1 || ptype != 0x0800 || hlen != 6 || plen != 4 {
            return Err(Error::Unsupported {
                htype,
                ptype,
                hlen,
                plen,
            });
        }
        match be16(b, field::OPER) {
            1 | 2 => Ok(Packet { buf }),
            op => Err(Error::BadOperation(op)),
        }
    }

    pub fn operation(&self) -> Operation {
        if be16(self.buf.as_ref(), field::OPER) == 1 {
            Operation::Request
        } else {
            Operation::Reply
        }
    }

    pub fn sender_mac(&self) -> MacAddr {
        MacAddr::from_slice(&self.buf.as_ref()[field::SHA])
    }

    pub fn sender_ip(&self) -> Ipv4Addr {
        ip(&self.buf.as_ref()[field::SPA])
    }

    pub fn target_mac(&self) -> MacAddr {
        MacAddr::from_slice(&self.buf.as_ref()[field::THA])
    }

    pub fn target_ip(&self) -> Ipv4Addr {
        ip(&self.buf.as_ref()[field::TPA])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_sender_mac(&mut self, m: MacAddr) {
        self.buf.as_mut()[field::SHA].copy_from_slice(&m.0);
    }
}

fn ip(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

/// An ARP packet to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub operation: Operation,
    pub sender_mac: MacAddr,
    pub sender_ip: Ipv4Addr,
    pub target_mac: MacAddr,
    pub target_ip: Ipv4Addr,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            operation: p.operation(),
            sender_mac: p.sender_mac(),
            sender_ip: p.sender_ip(),
            target_mac: p.target_mac(),
            target_ip: p.target_ip(),
        }
    }

    /// Appends the packet to `buf` in an Ethernet frame from its sender's MAC to `eth_dst`.
    pub fn append_frame<B: crate::Splice + ?Sized>(&self, eth_dst: MacAddr, buf: &mut B) {
        let at = buf.len();
        buf.resize(at + crate::ethernet::HEADER_LEN + PACKET_LEN, 0);
        let eth = crate::ethernet::Repr {
            dst: eth_dst,
            src: self.sender_mac,
            vlan: None,
            ethertype: crate::ethernet::ethertype::ARP,
        };
        // The buffer holds both headers: neither can fail.
        let _ = eth.emit(&mut buf[at..]);
        let _ = self.emit(&mut buf[at + crate::ethernet::HEADER_LEN..]);
    }

    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        need(buf, PACKET_LEN).map_err(Error::Truncated)?;
        put16(buf, field::HTYPE, 1);
        put16(buf, field::PTYPE, 0x0800);
        buf[field::HLEN] = 6;
        buf[field::PLEN] = 4;
        put16(
            buf,
            field::OPER,
            if self.operation == Operation::Request {
                1
            } else {
                2
            },
        );
        buf[field::SHA].copy_from_slice(&self.sender_mac.0);
        buf[field::SPA].copy_from_slice(&self.sender_ip.octets());
        buf[field::THA].copy_from_slice(&self.target_mac.0);
        buf[field::TPA].copy_from_slice(&self.target_ip.octets());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rejects_other_hardware() {
        let mut b = [0u8; 28];
        Repr {
            operation: Operation::Request,
            sender_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            sender_ip: Ipv4Addr::new(10, 0, 0, 1),
            target_mac: MacAddr::ZERO,
            target_ip: Ipv4Addr::new(10, 0, 0, 2),
        }
        .emit(&mut b)
        .unwrap();
        b[1] = 6; // IEEE 802 hardware
        assert!(matches!(
            Packet::new_checked(&b[..]),
            Err(Error::Unsupported { htype: 6, .. })
        ));
        b[1] = 1;
        b[7] = 9;
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            Error::BadOperation(9)
        );
    }

    proptest! {
        #[test]
        fn roundtrip(req in any::<bool>(), sm in any::<[u8; 6]>(), si in any::<u32>(),
                     tm in any::<[u8; 6]>(), ti in any::<u32>()) {
            let r = Repr {
                operation: if req { Operation::Request } else { Operation::Reply },
                sender_mac: MacAddr(sm), sender_ip: si.into(),
                target_mac: MacAddr(tm), target_ip: ti.into(),
            };
            let mut b = [0u8; 28];
            r.emit(&mut b).unwrap();
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&b[..]).unwrap()), r);
        }
    }
}
