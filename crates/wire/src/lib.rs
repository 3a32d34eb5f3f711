//! Packet formats: typed zero-copy views over byte buffers, and plain `Repr` builders.
//!
//! Every view follows one contract: `View::new_checked(buf)` validates the lengths once and
//! returns an error that says which layer, what was needed and what was there; after that, no
//! accessor panics, whatever the bytes hold. Setters exist where the buffer is mutable, so the
//! fast path edits headers in place. Everything that builds packets (the control side, the
//! generator, ICMP errors) fills a `Repr` and `emit`s it.
//!
//! This is the only crate that knows header offsets.
#![forbid(unsafe_code)]

/// Growing and editing a frame's bytes in place (`Vec<u8>` and the dataplane's buffers).
pub use pktbuf::Splice;

pub mod arp;
pub mod axon;
pub mod checksum;
pub mod dhcp;
pub mod dist;
pub mod ethernet;
pub mod fpm;
pub mod frame;
pub mod fuzzing;
pub mod icmp;
pub mod icmpv6;
pub mod ipfix;
pub mod ipv4;
pub mod ipv6;
pub mod mac;
pub mod ospf;
pub mod probe;
pub mod star;
pub mod tcp;
pub mod transport;
pub mod udp;

pub use mac::MacAddr;

/// A buffer too short for what a header says or needs.
///
/// `need` and `have` are byte counts at `layer`; carried by every per-layer error enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncated {
    pub need: usize,
    pub have: usize,
}

impl core::fmt::Display for Truncated {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "need {} bytes, have {}", self.need, self.have)
    }
}

#[inline]
pub(crate) fn need(buf: &[u8], need: usize) -> Result<(), Truncated> {
    if buf.len() < need {
        Err(Truncated {
            need,
            have: buf.len(),
        })
    } else {
        Ok(())
    }
}

#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}
