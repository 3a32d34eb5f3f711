//! The header of Tessera's test traffic, carried as the UDP payload.
//!
//! ```text
//!  0       2       4                 10                18
//!  | magic | flow  | sequence (48)   | send time (64)   | padding ...
//! ```
//!
//! 18 bytes: exactly the UDP payload of a 64-byte frame. `magic` is [`DATA`] for a test
//! packet, or [`END`] for the marker a generator sends when it stops, whose sequence field
//! is the number of data packets it sent on that flow (so a sink can count tail loss). The
//! send time is nanoseconds of CLOCK_REALTIME.

use crate::{be16, need, put16, Truncated};

pub const LEN: usize = 18;
pub const DATA: u16 = 0x7e55;
pub const END: u16 = 0x7e5e;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    pub end: bool,
    pub flow: u16,
    /// 48 bits are kept.
    pub seq: u64,
    pub sent_ns: u64,
}

impl Probe {
    /// Reads a probe from a UDP payload; `None` if it is not test traffic.
    pub fn parse(b: &[u8]) -> Option<Probe> {
        need(b, LEN).ok()?;
        let end = match be16(b, 0) {
            DATA => false,
            END => true,
            _ => return None,
        };
        let mut s = [0u8; 8];
        s[2..].copy_from_slice(&b[4..10]);
        let mut t = [0u8; 8];
        t.copy_from_slice(&b[10..18]);
        Some(Probe {
            end,
            flow: be16(b, 2),
            seq: u64::from_be_bytes(s),
            sent_ns: u64::from_be_bytes(t),
        })
    }

    pub fn emit(&self, b: &mut [u8]) -> Result<(), Truncated> {
        need(b, LEN)?;
        put16(b, 0, if self.end { END } else { DATA });
        put16(b, 2, self.flow);
        b[4..10].copy_from_slice(&self.seq.to_be_bytes()[2..]);
        b[10..18].copy_from_slice(&self.sent_ns.to_be_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn roundtrip(end in any::<bool>(), flow in any::<u16>(), seq in 0u64..(1 << 48), ts in any::<u64>()) {
            let p = Probe { end, flow, seq, sent_ns: ts };
            let mut b = [0u8; LEN];
            p.emit(&mut b).unwrap();
            prop_assert_eq!(Probe::parse(&b), Some(p));
        }
    }

    #[test]
    fn other_payloads_are_not_probes() {
        assert_eq!(Probe::parse(&[0u8; 18]), None);
        assert_eq!(Probe::parse(&[0x7e, 0x55]), None);
    }
}
