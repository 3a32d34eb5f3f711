//! Whole frames for tests, benchmarks and generators: a UDP datagram in IPv4 in Ethernet,
//! with both checksums filled.

use crate::{ethernet, ipv4, udp, MacAddr};
use std::net::Ipv4Addr;

/// A UDP/IPv4 frame to build. `Default` gives a valid frame between documentation
/// addresses (TTL 64, ports 1024 -> 1234, no payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpFrame<'a> {
    pub eth_dst: MacAddr,
    pub eth_src: MacAddr,
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub src_port: u16,
    pub dst_port: u16,
    pub ttl: u8,
    pub ident: u16,
    pub dont_frag: bool,
    pub payload: &'a [u8],
}

impl Default for UdpFrame<'_> {
    fn default() -> Self {
        UdpFrame {
            eth_dst: MacAddr([2, 0, 0, 0, 0, 1]),
            eth_src: MacAddr([2, 0, 0, 0, 0, 2]),
            src: Ipv4Addr::new(192, 0, 2, 1),
            dst: Ipv4Addr::new(198, 51, 100, 1),
            src_port: 1024,
            dst_port: 1234,
            ttl: 64,
            ident: 0,
            dont_frag: false,
            payload: &[],
        }
    }
}

impl UdpFrame<'_> {
    /// Bytes of the frame (without the FCS).
    pub fn len(&self) -> usize {
        ethernet::HEADER_LEN + ipv4::MIN_HEADER_LEN + udp::HEADER_LEN + self.payload.len()
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// Writes the frame at the start of `buf`; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, crate::Truncated> {
        let len = self.len();
        crate::need(buf, len)?;
        let l3 = ethernet::HEADER_LEN;
        let l4 = l3 + ipv4::MIN_HEADER_LEN;
        let eth = ethernet::Repr {
            dst: self.eth_dst,
            src: self.eth_src,
            vlan: None,
            ethertype: ethernet::ethertype::IPV4,
        };
        let ip = ipv4::Repr {
            src: self.src,
            dst: self.dst,
            protocol: ipv4::protocol::UDP,
            ttl: self.ttl,
            tos: 0,
            ident: self.ident,
            dont_frag: self.dont_frag,
            more_frags: false,
            frag_offset: 0,
            payload_len: udp::HEADER_LEN + self.payload.len(),
        };
        buf[l4 + udp::HEADER_LEN..len].copy_from_slice(self.payload);
        let udp = udp::Repr {
            src_port: self.src_port,
            dst_port: self.dst_port,
            payload_len: self.payload.len(),
        };
        let too_long = crate::Truncated {
            need: len,
            have: u16::MAX as usize,
        };
        eth.emit(buf).map_err(|_| too_long)?;
        ip.emit(&mut buf[l3..]).map_err(|_| too_long)?;
        udp.emit(&mut buf[l4..], self.src, self.dst)
            .map_err(|_| too_long)?;
        Ok(len)
    }

    /// The frame as a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len()];
        // The buffer is exactly `len()` bytes; only an over-long payload fails.
        let n = self.emit(&mut v).unwrap_or(0);
        v.truncate(n);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_a_valid_frame() {
        let f = UdpFrame {
            payload: b"hello",
            ttl: 9,
            ..Default::default()
        }
        .to_vec();
        assert_eq!(f.len(), 14 + 20 + 8 + 5);
        let e = ethernet::Frame::new_checked(&f[..]).unwrap();
        let p = ipv4::Packet::new_checked(e.payload()).unwrap();
        assert!(p.verify_checksum() && p.ttl() == 9);
        let u = udp::Packet::new_checked(p.payload()).unwrap();
        assert!(u.verify_checksum(p.src(), p.dst()));
        assert_eq!(u.payload(), b"hello");
        assert!(UdpFrame::default().emit(&mut [0u8; 20]).is_err());
    }
}
