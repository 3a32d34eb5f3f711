//! IPv4 fragmentation (RFC 791 section 3.2, RFC 1812 section 5.2.6), and IPv6 fragmentation
//! of the router's own packets (RFC 8200 section 4.5; routers never fragment what they
//! forward).

use wire::ipv4::{self, option, Options};

/// Why a packet could not be fragmented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FragError {
    /// The MTU leaves fewer than 8 data bytes after the header.
    MtuTooSmall,
    /// Not a well-formed IPv4 packet.
    Malformed,
}

/// Splits the IPv4 packet `ip` (exactly its total length) into fragments of at most `mtu`
/// bytes, calling `emit(header, data)` for each in order. The first fragment carries every
/// option; later ones only the options with the copied flag. Offsets build on the packet's
/// own offset, and the last fragment keeps the packet's MF flag, so fragments of fragments
/// are right. Returns the number of fragments.
pub fn fragment(
    ip: &[u8],
    mtu: usize,
    mut emit: impl FnMut(&[u8], &[u8]),
) -> Result<usize, FragError> {
    let p = ipv4::Packet::new_checked(ip).map_err(|_| FragError::Malformed)?;
    let hlen = p.header_len();
    let base = p.frag_offset();
    let last_mf = p.more_frags();
    let data = p.payload();

    // Header of the later fragments: the fixed part plus copied options, padded to 4 bytes.
    let mut later = [0u8; ipv4::MAX_HEADER_LEN];
    later[..ipv4::MIN_HEADER_LEN].copy_from_slice(&ip[..ipv4::MIN_HEADER_LEN]);
    let mut later_len = ipv4::MIN_HEADER_LEN;
    for o in Options::new(p.options()) {
        let (_, ty, bytes) = o.map_err(|_| FragError::Malformed)?;
        if ty & option::COPIED != 0 {
            later[later_len..later_len + bytes.len()].copy_from_slice(bytes);
            later_len += bytes.len();
        }
    }
    later_len = later_len.div_ceil(4) * 4;
    later[0] = 0x40 | (later_len / 4) as u8;

    let mut first = [0u8; ipv4::MAX_HEADER_LEN];
    first[..hlen].copy_from_slice(&ip[..hlen]);

    if mtu < hlen + 8 || mtu < later_len + 8 {
        return Err(FragError::MtuTooSmall);
    }
    let mut pos = 0usize;
    let mut n = 0usize;
    while pos < data.len() || (n == 0 && data.is_empty()) {
        let h: &mut [u8] = if n == 0 {
            &mut first[..hlen]
        } else {
            &mut later[..later_len]
        };
        let room = (mtu - h.len()) & !7;
        let chunk = room.min(data.len() - pos);
        let last = pos + chunk == data.len();
        let hl = h.len();
        let mut v = ipv4::Packet::new_checked_header(&mut *h).map_err(|_| FragError::Malformed)?;
        v.set_total_len((hl + chunk) as u16);
        v.set_frag(false, !last || last_mf, base + pos);
        v.fill_checksum();
        emit(h, &data[pos..pos + chunk]);
        pos += chunk;
        n += 1;
        if data.is_empty() {
            break;
        }
    }
    Ok(n)
}

/// Splits the IPv6 packet `ip` (exactly its length), which the router made and which has
/// no extension header, into fragments of at most `mtu` bytes with fragment headers of
/// identification `ident`, calling `emit(header, data)` for each in order (`header`: the
/// fixed header and the fragment header). Returns the number of fragments.
pub fn fragment6(
    ip: &[u8],
    mtu: usize,
    ident: u32,
    mut emit: impl FnMut(&[u8], &[u8]),
) -> Result<usize, FragError> {
    use wire::ipv6;
    let p = ipv6::Packet::new_checked(ip).map_err(|_| FragError::Malformed)?;
    if ipv6::is_extension(p.next_header()) {
        return Err(FragError::Malformed);
    }
    let hl = ipv6::HEADER_LEN + 8;
    if mtu < hl + 8 {
        return Err(FragError::MtuTooSmall);
    }
    let data = p.payload();
    let mut h = [0u8; ipv6::HEADER_LEN + 8];
    h[..ipv6::HEADER_LEN].copy_from_slice(&ip[..ipv6::HEADER_LEN]);
    h[6] = ipv6::next_header::FRAGMENT;
    h[ipv6::HEADER_LEN] = p.next_header();
    h[ipv6::HEADER_LEN + 4..].copy_from_slice(&ident.to_be_bytes());
    let room = (mtu - hl) & !7;
    let mut n = 0;
    for (i, chunk) in data.chunks(room).enumerate() {
        let off = i * room;
        let more = off + chunk.len() < data.len();
        h[4..6].copy_from_slice(&((8 + chunk.len()) as u16).to_be_bytes());
        let w = off as u16 | more as u16;
        h[ipv6::HEADER_LEN + 2..ipv6::HEADER_LEN + 4].copy_from_slice(&w.to_be_bytes());
        emit(&h, chunk);
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::ipv4::{Packet, Repr};

    fn packet(payload: usize, options: &[u8], mf: bool, off: usize) -> Vec<u8> {
        let hlen = 20 + options.len();
        let mut b = vec![0u8; hlen + payload];
        Repr {
            src: [10, 0, 0, 1].into(),
            dst: [10, 0, 1, 1].into(),
            protocol: 17,
            ttl: 9,
            tos: 0,
            ident: 77,
            dont_frag: false,
            more_frags: mf,
            frag_offset: off,
            payload_len: payload,
        }
        .emit(&mut b)
        .unwrap();
        b[0] = 0x40 | (hlen / 4) as u8;
        b[2..4].copy_from_slice(&((hlen + payload) as u16).to_be_bytes());
        b[20..hlen].copy_from_slice(options);
        for (i, x) in b[hlen..].iter_mut().enumerate() {
            *x = i as u8;
        }
        Packet::new_checked(&mut b[..]).unwrap().fill_checksum();
        b
    }

    /// Fragments, then checks every fragment and reassembles the payload.
    fn split(ip: &[u8], mtu: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        fragment(ip, mtu, |h, d| out.push([h, d].concat())).unwrap();
        out
    }

    #[test]
    fn splits_at_multiples_of_eight_and_reassembles() {
        let ip = packet(1000, &[], false, 0);
        let frags = split(&ip, 300);
        assert_eq!(frags.len(), 4); // 280 + 280 + 280 + 160
        let mut data = vec![0u8; 1000];
        for (i, f) in frags.iter().enumerate() {
            let p = Packet::new_checked(&f[..]).unwrap();
            assert!(p.verify_checksum());
            assert!(f.len() <= 300);
            assert_eq!(p.more_frags(), i < 3);
            assert_eq!(p.ident(), 77);
            data[p.frag_offset()..p.frag_offset() + p.payload().len()].copy_from_slice(p.payload());
        }
        assert_eq!(&data[..], &ip[20..]);
    }

    #[test]
    fn copied_options_only_after_the_first() {
        // Record route (not copied, 8 bytes) then router alert (copied, 4 bytes).
        let opts = [7, 7, 4, 0, 0, 0, 0, 0x01, 0x94, 0x04, 0, 0];
        let ip = packet(100, &opts, false, 0);
        let frags = split(&ip, 80);
        let p0 = Packet::new_checked(&frags[0][..]).unwrap();
        let p1 = Packet::new_checked(&frags[1][..]).unwrap();
        assert_eq!(p0.header_len(), 32);
        assert_eq!(p1.header_len(), 24);
        assert_eq!(p1.options(), &[0x94, 0x04, 0, 0]);
        assert!(p1.verify_checksum());
    }

    #[test]
    fn fragment_of_a_fragment_keeps_offset_and_mf() {
        let ip = packet(64, &[], true, 800);
        let frags = split(&ip, 60);
        let last = Packet::new_checked(&frags[frags.len() - 1][..]).unwrap();
        let first = Packet::new_checked(&frags[0][..]).unwrap();
        assert_eq!(first.frag_offset(), 800);
        assert!(last.more_frags(), "the original MF stays on the last piece");
    }

    #[test]
    fn tiny_mtu_is_an_error() {
        let ip = packet(100, &[], false, 0);
        assert_eq!(fragment(&ip, 27, |_, _| {}), Err(FragError::MtuTooSmall));
    }
    #[test]
    fn ipv6_fragments_reassemble_to_the_packet() {
        use crate::reasm::{Outcome, ReasmConfig, Reassembly};
        use wire::ipv6;
        let payload: Vec<u8> = (0..3008u32).map(|i| (i * 7) as u8).collect();
        let mut ip = vec![0u8; 40 + payload.len()];
        ip[0] = 0x60;
        ip[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
        ip[6] = ipv6::next_header::ICMPV6;
        ip[7] = 64;
        ip[8] = 0x20;
        ip[24] = 0x20;
        ip[40..].copy_from_slice(&payload);
        let mut frags = Vec::new();
        let n = fragment6(&ip, 1500, 77, |h, d| frags.push([h, d].concat())).unwrap();
        assert_eq!((n, frags.len()), (3, 3));
        assert!(frags.iter().all(|f| f.len() <= 1500));
        assert!(frags[..2].iter().all(|f| (f.len() - 48) % 8 == 0));
        let mut r = Reassembly::new(ReasmConfig::default());
        let now = std::time::Instant::now();
        let mut out = None;
        for f in frags.iter().rev() {
            let p = ipv6::Packet::new_checked(&f[..]).unwrap();
            assert_eq!(p.total_len(), f.len());
            if let Outcome::Complete(d, 3) = r.add6(f, now) {
                out = Some(d);
            }
        }
        assert_eq!(out.as_deref(), Some(&ip[..]));
        assert_eq!(
            fragment6(&ip, 55, 1, |_, _| {}),
            Err(FragError::MtuTooSmall)
        );
    }
}
