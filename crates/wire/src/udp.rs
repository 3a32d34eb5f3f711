//! UDP (RFC 768).
//!
//! ```text
//!  0        2        4        6        8
//!  | sport  | dport  | length | csum   | payload ...
//! ```

use crate::checksum;
use crate::{be16, need, put16, Truncated};
use std::net::{Ipv4Addr, Ipv6Addr};

pub const HEADER_LEN: usize = 8;
/// Offset of the checksum within the UDP header.
pub const CHECKSUM_AT: usize = crate::transport::UDP_CHECKSUM_AT;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    Truncated(Truncated),
    /// The length field is below 8.
    BadLength(u16),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated(t) => write!(f, "udp: {t}"),
            Error::BadLength(l) => write!(f, "udp: length field {l} below 8"),
        }
    }
}

/// A view of a UDP datagram; the buffer is the IP payload.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_checked(buf: T) -> Result<Self, Error> {
        let b = buf.as_ref();
        need(b, HEADER_LEN).map_err(Error::Truncated)?;
        let len = be16(b, 4);
        if (len as usize) < HEADER_LEN {
            return Err(Error::BadLength(len));
        }
        need(b, len as usize).map_err(Error::Truncated)?;
        Ok(Packet { buf })
    }

    pub fn src_port(&self) -> u16 {
        be16(self.buf.as_ref(), 0)
    }

    pub fn dst_port(&self) -> u16 {
        be16(self.buf.as_ref(), 2)
    }

    pub fn len(&self) -> usize {
        be16(self.buf.as_ref(), 4) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == HEADER_LEN
    }

    pub fn checksum(&self) -> u16 {
        be16(self.buf.as_ref(), CHECKSUM_AT)
    }

    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[HEADER_LEN..self.len()]
    }

    /// Checksum verification; a zero checksum means "none" and passes.
    pub fn verify_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let d = &self.buf.as_ref()[..self.len()];
        let s = checksum::pseudo_header(src, dst, crate::transport::UDP, d.len() as u16)
            + checksum::sum(d);
        checksum::fold(s) == 0xffff
    }

    /// Checksum verification over IPv6, where the checksum is mandatory: zero fails
    /// (RFC 8200 8.1).
    pub fn verify_checksum6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        let d = &self.buf.as_ref()[..self.len()];
        self.checksum() != 0
            && checksum::fold(
                checksum::pseudo_header6(src, dst, crate::transport::UDP, d.len() as u32)
                    + checksum::sum(d),
            ) == 0xffff
    }
}

/// A UDP header to emit in front of a payload already in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src_port: u16,
    pub dst_port: u16,
    pub payload_len: usize,
}

impl Repr {
    /// Writes the header at the start of `buf` (whose payload follows it) and fills the
    /// checksum over header and payload.
    pub fn emit(&self, buf: &mut [u8], src: Ipv4Addr, dst: Ipv4Addr) -> Result<(), Error> {
        self.emit_with(buf, |len| {
            checksum::pseudo_header(src, dst, crate::transport::UDP, len as u16)
        })
    }

    /// As [`Repr::emit`], with the IPv6 pseudo header.
    pub fn emit6(&self, buf: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr) -> Result<(), Error> {
        self.emit_with(buf, |len| {
            checksum::pseudo_header6(src, dst, crate::transport::UDP, len as u32)
        })
    }

    /// Writes the header with the checksum over `pseudo(length)` and the datagram.
    fn emit_with(&self, buf: &mut [u8], pseudo: impl FnOnce(usize) -> u32) -> Result<(), Error> {
        let len = HEADER_LEN + self.payload_len;
        need(buf, len).map_err(Error::Truncated)?;
        if len > u16::MAX as usize {
            return Err(Error::BadLength(u16::MAX));
        }
        put16(buf, 0, self.src_port);
        put16(buf, 2, self.dst_port);
        put16(buf, 4, len as u16);
        put16(buf, CHECKSUM_AT, 0);
        let s = pseudo(len) + checksum::sum(&buf[..len]);
        // Zero means "no checksum": a computed zero is sent as its other form.
        let c = match !checksum::fold(s) {
            0 => 0xffff,
            c => c,
        };
        put16(buf, CHECKSUM_AT, c);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn roundtrip(sp in any::<u16>(), dp in any::<u16>(), src in any::<u32>(), dst in any::<u32>(),
                     data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut b = vec![0u8; 8 + data.len()];
            b[8..].copy_from_slice(&data);
            Repr { src_port: sp, dst_port: dp, payload_len: data.len() }
                .emit(&mut b, src.into(), dst.into()).unwrap();
            let p = Packet::new_checked(&b[..]).unwrap();
            prop_assert!(p.verify_checksum(src.into(), dst.into()));
            prop_assert_eq!((p.src_port(), p.dst_port(), p.payload()), (sp, dp, &data[..]));
        }

        #[test]
        fn roundtrip6(sp in any::<u16>(), dp in any::<u16>(), src in any::<u128>(), dst in any::<u128>(),
                      data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut b = vec![0u8; 8 + data.len()];
            b[8..].copy_from_slice(&data);
            Repr { src_port: sp, dst_port: dp, payload_len: data.len() }
                .emit6(&mut b, src.into(), dst.into()).unwrap();
            let p = Packet::new_checked(&b[..]).unwrap();
            prop_assert!(p.verify_checksum6(src.into(), dst.into()));
            prop_assert!(p.checksum() != 0);
            prop_assert_eq!(p.payload(), &data[..]);
        }
    }

    #[test]
    fn bad_length() {
        let b = [0, 1, 0, 2, 0, 7, 0, 0];
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            Error::BadLength(7)
        );
    }
}
