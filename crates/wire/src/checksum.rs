//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).

use std::net::{Ipv4Addr, Ipv6Addr};

/// One's-complement sum of `data` as big-endian 16-bit words, not folded.
///
/// An odd trailing byte is padded with zero, as RFC 1071 says.
#[inline]
pub fn sum(data: &[u8]) -> u32 {
    // Sum 32-bit words into a 64-bit accumulator; fold once at the end.
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        acc += u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as u64;
    }
    let rest = chunks.remainder();
    let mut i = 0;
    while i + 1 < rest.len() {
        acc += (u16::from_be_bytes([rest[i], rest[i + 1]]) as u64) << 16 >> 16;
        i += 2;
    }
    if i < rest.len() {
        acc += (rest[i] as u64) << 8;
    }
    // Fold 64 -> 32 without losing carries.
    let mut s = (acc & 0xffff_ffff) + (acc >> 32);
    s = (s & 0xffff_ffff) + (s >> 32);
    let s = s as u32;
    (s & 0xffff) + (s >> 16)
}

/// Folds a 32-bit sum to 16 bits with end-around carry.
#[inline]
pub fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// The checksum field value for `data` (whose checksum field must be zero or be included).
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(data))
}

/// The sum of the IPv4 pseudo header used by UDP and TCP.
#[inline]
pub fn pseudo_header(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, length: u16) -> u32 {
    let s = u32::from(src);
    let d = u32::from(dst);
    (s >> 16) + (s & 0xffff) + (d >> 16) + (d & 0xffff) + protocol as u32 + length as u32
}

/// The sum of the IPv6 pseudo header of RFC 8200 8.1 (ICMPv6, UDP and TCP over IPv6):
/// source, destination, upper-layer length (32 bits) and next header.
#[inline]
pub fn pseudo_header6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, length: u32) -> u32 {
    let mut s = sum(&src.octets()) + sum(&dst.octets());
    s += (length >> 16) + (length & 0xffff) + next_header as u32;
    s
}

/// RFC 1624 eqn. 3: the new checksum after one 16-bit word changes from `old` to `new`.
///
/// `HC' = ~(~HC + ~m + m')`. Never produces 0xffff from a valid header (the -0 problem of
/// RFC 1141 is what eqn. 3 avoids).
#[inline]
pub fn update16(hc: u16, old: u16, new: u16) -> u16 {
    let s = (!hc as u32) + (!old as u32) + new as u32;
    !fold(s)
}

/// RFC 1624 for a 32-bit field (for example an address) changing from `old` to `new`.
#[inline]
pub fn update32(hc: u16, old: u32, new: u32) -> u16 {
    let hc = update16(hc, (old >> 16) as u16, (new >> 16) as u16);
    update16(hc, old as u16, new as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive(data: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for c in data.chunks(2) {
            let w = if c.len() == 2 {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                (c[0] as u16) << 8
            };
            s += w as u32;
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3 example: sum of 0001 f203 f4f5 f6f7 is ddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&d)), 0xddf2);
    }

    proptest! {
        #[test]
        fn matches_naive(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            prop_assert_eq!(checksum(&data), naive(&data));
        }

        #[test]
        fn incremental_matches_full(mut data in proptest::collection::vec(any::<u8>(), 20..60),
                                    at in 0usize..9, new in any::<u16>()) {
            // Treat bytes 10..12 as the checksum field of a header.
            data[10] = 0; data[11] = 0;
            let at = if at == 5 { 4 } else { at } * 2; // any word but the checksum's
            let c = checksum(&data);
            data[10..12].copy_from_slice(&c.to_be_bytes());
            let old = u16::from_be_bytes([data[at], data[at + 1]]);
            data[at..at + 2].copy_from_slice(&new.to_be_bytes());
            let inc = update16(c, old, new);
            data[10] = 0; data[11] = 0;
            let full = checksum(&data);
            // One's complement has two zeros; both must verify. Compare by verification.
            data[10..12].copy_from_slice(&inc.to_be_bytes());
            prop_assert_eq!(fold(sum(&data)), 0xffff, "inc {:04x} full {:04x}", inc, full);
        }
    }
}
