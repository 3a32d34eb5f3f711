//! TCP headers (RFC 9293), as far as a router and its tests need them.
//!
//! ```text
//!  0       2       4        8        12          13      14      16     18
//!  | sport | dport |  seq   |  ack   |off|rsvd| flags | window | csum | urg |
//! ```

use crate::checksum;
use crate::{be16, be32, need, Truncated};
use std::net::{Ipv4Addr, Ipv6Addr};

pub const MIN_HEADER_LEN: usize = 20;
/// Offset of the checksum within the TCP header.
pub const CHECKSUM_AT: usize = crate::transport::TCP_CHECKSUM_AT;

pub mod flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    Truncated(Truncated),
    /// Data offset below 5 words.
    BadDataOffset(u8),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated(t) => write!(f, "tcp: {t}"),
            Error::BadDataOffset(o) => write!(f, "tcp: data offset {o} words"),
        }
    }
}

/// A view of a TCP segment; the buffer is the IP payload.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_checked(buf: T) -> Result<Self, Error> {
        let b = buf.as_ref();
        need(b, MIN_HEADER_LEN).map_err(Error::Truncated)?;
        let off = b[12] >> 4;
        if off < 5 {
            return Err(Error::BadDataOffset(off));
        }
        need(b, off as usize * 4).map_err(Error::Truncated)?;
        Ok(Packet { buf })
    }

    pub fn src_port(&self) -> u16 {
        be16(self.buf.as_ref(), 0)
    }

    pub fn dst_port(&self) -> u16 {
        be16(self.buf.as_ref(), 2)
    }

    pub fn seq(&self) -> u32 {
        be32(self.buf.as_ref(), 4)
    }

    pub fn ack(&self) -> u32 {
        be32(self.buf.as_ref(), 8)
    }

    pub fn header_len(&self) -> usize {
        (self.buf.as_ref()[12] >> 4) as usize * 4
    }

    pub fn flags(&self) -> u8 {
        self.buf.as_ref()[13]
    }

    pub fn window(&self) -> u16 {
        be16(self.buf.as_ref(), 14)
    }

    pub fn checksum(&self) -> u16 {
        be16(self.buf.as_ref(), CHECKSUM_AT)
    }

    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[self.header_len()..]
    }

    /// Verifies the checksum over the whole buffer (the segment as the IP header bounds it).
    pub fn verify_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        let d = self.buf.as_ref();
        if d.len() > u16::MAX as usize {
            return false;
        }
        let s = checksum::pseudo_header(src, dst, crate::transport::TCP, d.len() as u16)
            + checksum::sum(d);
        checksum::fold(s) == 0xffff
    }

    /// As [`Packet::verify_checksum`], over IPv6 (RFC 8200 8.1).
    pub fn verify_checksum6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        let d = self.buf.as_ref();
        let s = checksum::pseudo_header6(src, dst, crate::transport::TCP, d.len() as u32)
            + checksum::sum(d);
        checksum::fold(s) == 0xffff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_offset_checked() {
        let mut b = [0u8; 24];
        b[12] = 0x40;
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            Error::BadDataOffset(4)
        );
        b[12] = 0x70; // 28 bytes of header in a 24-byte buffer
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            Error::Truncated(Truncated { need: 28, have: 24 })
        );
        b[12] = 0x60;
        b[13] = flags::SYN | flags::ACK;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(
            (p.header_len(), p.flags(), p.payload().len()),
            (24, 0x12, 0)
        );
    }
}
