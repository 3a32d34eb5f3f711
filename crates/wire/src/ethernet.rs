//! Ethernet II frames and 802.1Q tags.
//!
//! ```text
//!  0      6      12     14
//!  | dst  | src  | type | payload ...
//!                 0x8100 -> | TCI (PCP:3 DEI:1 VID:12) | inner type | payload ...
//! ```

use crate::Splice;
use crate::{be16, need, put16, MacAddr, Truncated};

pub const HEADER_LEN: usize = 14;
pub const VLAN_TAG_LEN: usize = 4;

/// EtherType values this project knows by name.
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    pub const VLAN: u16 = 0x8100;
    pub const IPV6: u16 = 0x86dd;
}

mod field {
    use core::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const TYPE: usize = 12;
    pub const VLAN_TCI: usize = 14;
    pub const VLAN_TYPE: usize = 16;
}

/// Why a buffer is not an Ethernet frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Shorter than the 14-byte header (or 18 with an 802.1Q tag).
    Truncated(Truncated),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated(t) => write!(f, "ethernet: {t}"),
        }
    }
}

/// A view of an Ethernet II frame, with an optional single 802.1Q tag.
#[derive(Debug, Clone, Copy)]
pub struct Frame<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Validates that the header (and the tag, if the type says there is one) fits.
    pub fn new_checked(buf: T) -> Result<Self, Error> {
        let b = buf.as_ref();
        need(b, HEADER_LEN).map_err(Error::Truncated)?;
        if be16(b, field::TYPE) == ethertype::VLAN {
            need(b, HEADER_LEN + VLAN_TAG_LEN).map_err(Error::Truncated)?;
        }
        Ok(Frame { buf })
    }

    pub fn into_inner(self) -> T {
        self.buf
    }

    pub fn dst(&self) -> MacAddr {
        MacAddr::from_slice(&self.buf.as_ref()[field::DST])
    }

    pub fn src(&self) -> MacAddr {
        MacAddr::from_slice(&self.buf.as_ref()[field::SRC])
    }

    /// The outer EtherType (0x8100 for a tagged frame).
    pub fn outer_ethertype(&self) -> u16 {
        be16(self.buf.as_ref(), field::TYPE)
    }

    /// The 802.1Q VLAN id, if the frame is tagged.
    pub fn vlan(&self) -> Option<u16> {
        if self.outer_ethertype() == ethertype::VLAN {
            Some(be16(self.buf.as_ref(), field::VLAN_TCI) & 0x0fff)
        } else {
            None
        }
    }

    /// The EtherType of the payload, behind the tag if there is one.
    pub fn ethertype(&self) -> u16 {
        if self.outer_ethertype() == ethertype::VLAN {
            be16(self.buf.as_ref(), field::VLAN_TYPE)
        } else {
            self.outer_ethertype()
        }
    }

    /// Length of the link header: 14, or 18 when tagged.
    pub fn header_len(&self) -> usize {
        if self.outer_ethertype() == ethertype::VLAN {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    }

    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    pub fn set_dst(&mut self, m: MacAddr) {
        self.buf.as_mut()[field::DST].copy_from_slice(&m.0);
    }

    pub fn set_src(&mut self, m: MacAddr) {
        self.buf.as_mut()[field::SRC].copy_from_slice(&m.0);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let h = self.header_len();
        &mut self.buf.as_mut()[h..]
    }
}

/// An Ethernet header to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub dst: MacAddr,
    pub src: MacAddr,
    /// 802.1Q VLAN id (0..4095) if the frame is to be tagged.
    pub vlan: Option<u16>,
    pub ethertype: u16,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(f: &Frame<T>) -> Repr {
        Repr {
            dst: f.dst(),
            src: f.src(),
            vlan: f.vlan(),
            ethertype: f.ethertype(),
        }
    }

    pub fn header_len(&self) -> usize {
        if self.vlan.is_some() {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Writes the header at the start of `buf`, which must be at least `header_len()` long.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        need(buf, self.header_len()).map_err(Error::Truncated)?;
        buf[field::DST].copy_from_slice(&self.dst.0);
        buf[field::SRC].copy_from_slice(&self.src.0);
        match self.vlan {
            Some(vid) => {
                put16(buf, field::TYPE, ethertype::VLAN);
                put16(buf, field::VLAN_TCI, vid & 0x0fff);
                put16(buf, field::VLAN_TYPE, self.ethertype);
            }
            None => put16(buf, field::TYPE, self.ethertype),
        }
        Ok(())
    }
}

/// Inserts an 802.1Q tag with VLAN id `vid` after the MAC addresses of the frame in `buf`.
/// Returns false (and leaves `buf` alone) if `buf` holds no Ethernet header.
pub fn push_vlan<B: Splice + ?Sized>(buf: &mut B, vid: u16) -> bool {
    if buf.len() < HEADER_LEN {
        return false;
    }
    let tci = (vid & 0x0fff).to_be_bytes();
    let tpid = ethertype::VLAN.to_be_bytes();
    buf.insert_at(field::TYPE, &[tpid[0], tpid[1], tci[0], tci[1]]);
    true
}

/// Removes the 802.1Q tag of the frame in `buf`, returning its VLAN id; `None` (and `buf`
/// untouched) if the frame is not tagged or too short to be.
pub fn pop_vlan<B: Splice + ?Sized>(buf: &mut B) -> Option<u16> {
    if buf.len() < HEADER_LEN + VLAN_TAG_LEN || be16(buf, field::TYPE) != ethertype::VLAN {
        return None;
    }
    let vid = be16(buf, field::VLAN_TCI) & 0x0fff;
    buf.remove_at(field::TYPE, VLAN_TAG_LEN);
    Some(vid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[rustfmt::skip]
    const TAGGED: [u8; 20] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff,   // dst: broadcast
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01,   // src
        0x81, 0x00,                           // 802.1Q
        0x20, 0x0a,                           // PCP 1, VID 10
        0x08, 0x06,                           // ARP
        0xde, 0xad,                           // payload
    ];

    #[test]
    fn tagged_frame() {
        let f = Frame::new_checked(&TAGGED[..]).unwrap();
        assert_eq!(f.vlan(), Some(10));
        assert_eq!(f.ethertype(), ethertype::ARP);
        assert_eq!(f.payload(), &[0xde, 0xad]);
        assert!(f.dst().is_broadcast());
    }

    #[test]
    fn truncated_tag_is_an_error() {
        assert_eq!(
            Frame::new_checked(&TAGGED[..16]).unwrap_err(),
            Error::Truncated(Truncated { need: 18, have: 16 })
        );
        assert!(Frame::new_checked(&TAGGED[..13]).is_err());
    }

    proptest! {
        #[test]
        fn parse_emit_roundtrip(dst in any::<[u8; 6]>(), src in any::<[u8; 6]>(),
                                vlan in proptest::option::of(0u16..4096), et in any::<u16>()) {
            prop_assume!(et != ethertype::VLAN);
            let r = Repr { dst: MacAddr(dst), src: MacAddr(src), vlan, ethertype: et };
            let mut buf = vec![0u8; r.header_len() + 3];
            r.emit(&mut buf).unwrap();
            let f = Frame::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Repr::parse(&f), r);
            prop_assert_eq!(f.payload().len(), 3);
        }
    }

    #[test]
    fn vlan_push_pop_round_trip() {
        let mut f = TAGGED.to_vec();
        let orig = f.clone();
        assert_eq!(
            pop_vlan(&mut f),
            Some(Frame::new_checked(&orig[..]).unwrap().vlan().unwrap())
        );
        assert_eq!(f.len(), orig.len() - 4);
        assert_eq!(pop_vlan(&mut f), None);
        assert!(push_vlan(&mut f, 0x0123 | 0xf000));
        let v = Frame::new_checked(&f[..]).unwrap();
        assert_eq!(v.vlan(), Some(0x123));
        assert_eq!(&f[16..], &orig[16..]);
        assert!(!push_vlan(&mut vec![0; 13], 1));
        assert_eq!(pop_vlan(&mut vec![0x81; 17]), None);
    }
}
