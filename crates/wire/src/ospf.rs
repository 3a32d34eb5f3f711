//! OSPFv2 (RFC 2328): what the Virtual-CP sends on the router's behalf, no more. Today
//! that is the Grace-LSA of graceful restart (RFC 3623), in a Link State Update to
//! AllSPFRouters: a standby controller that takes over announces to the router's OSPF
//! neighbours that its routing suite restarts ("switch to a redundant control
//! processor"), so that they keep the adjacency and their routes through the router while
//! its new OSPF process resynchronises (docs/virtual-cp.md). Builders only: nothing here
//! parses bytes from the network.

use crate::{checksum, ethernet, ipv4, MacAddr};
use std::net::Ipv4Addr;

/// IP protocol number of OSPF.
pub const PROTOCOL: u8 = 89;
/// AllSPFRouters.
pub const ALL_SPF_ROUTERS: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 5);
/// OSPF packet type 4: Link State Update.
pub const LS_UPDATE: u8 = 4;
/// LSA type 9: link-local opaque.
pub const LSA_OPAQUE_LINK: u8 = 9;
/// Opaque type 3: Grace-LSA.
pub const OPAQUE_GRACE: u8 = 3;
/// OSPF header length (with the 8-byte authentication field).
pub const HEADER_LEN: usize = 24;
/// LSA header length.
pub const LSA_HEADER_LEN: usize = 20;
/// The smallest LS sequence number (RFC 2328, 12.1.6).
pub const INITIAL_SEQUENCE: u32 = 0x8000_0001;

/// Why the router restarts (RFC 3623, Appendix A, TLV 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RestartReason {
    Unknown = 0,
    SoftwareRestart = 1,
    SoftwareReload = 2,
    SwitchToRedundant = 3,
}

/// A Grace-LSA for one interface of the restarting router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grace {
    pub router_id: Ipv4Addr,
    pub area: Ipv4Addr,
    /// The restarting router's address on the interface (TLV 3, required on broadcast
    /// networks); also the packet's source address.
    pub interface_addr: Ipv4Addr,
    /// Seconds the neighbours keep helping.
    pub grace_period: u32,
    pub reason: RestartReason,
    /// LS sequence number: above any Grace-LSA of this router the neighbours still hold.
    pub sequence: u32,
}

impl Grace {
    /// The LSA (header and body) with its Fletcher checksum.
    pub fn lsa(&self) -> Vec<u8> {
        let mut l = vec![0u8; LSA_HEADER_LEN];
        // Age 1; options: E (external routing) and O (opaque capable).
        l[0..2].copy_from_slice(&1u16.to_be_bytes());
        l[2] = 0x42;
        l[3] = LSA_OPAQUE_LINK;
        l[4] = OPAQUE_GRACE; // link-state id: opaque type 3, opaque id 0
        l[8..12].copy_from_slice(&self.router_id.octets());
        l[12..16].copy_from_slice(&self.sequence.to_be_bytes());
        // TLVs: grace period, restart reason (padded to 4), interface address.
        l.extend_from_slice(&[0, 1, 0, 4]);
        l.extend_from_slice(&self.grace_period.to_be_bytes());
        l.extend_from_slice(&[0, 2, 0, 1, self.reason as u8, 0, 0, 0]);
        l.extend_from_slice(&[0, 3, 0, 4]);
        l.extend_from_slice(&self.interface_addr.octets());
        let len = l.len() as u16;
        l[18..20].copy_from_slice(&len.to_be_bytes());
        let c = fletcher(&l[2..], 14);
        l[16..18].copy_from_slice(&c.to_be_bytes());
        l
    }

    /// The OSPF Link State Update carrying the LSA, with its checksum (no authentication).
    pub fn packet(&self) -> Vec<u8> {
        let lsa = self.lsa();
        let mut p = vec![0u8; HEADER_LEN + 4];
        p[0] = 2;
        p[1] = LS_UPDATE;
        p[4..8].copy_from_slice(&self.router_id.octets());
        p[8..12].copy_from_slice(&self.area.octets());
        p[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&1u32.to_be_bytes());
        p.extend_from_slice(&lsa);
        let len = p.len() as u16;
        p[2..4].copy_from_slice(&len.to_be_bytes());
        // The checksum covers the packet without the 8-byte authentication field.
        let mut covered = p[..16].to_vec();
        covered.extend_from_slice(&p[HEADER_LEN..]);
        let c = checksum::checksum(&covered);
        p[12..14].copy_from_slice(&c.to_be_bytes());
        p
    }

    /// The whole Ethernet frame, untagged, from `src_mac` to AllSPFRouters' group MAC:
    /// what the router's OSPF process would write on that interface.
    pub fn frame(&self, src_mac: MacAddr) -> Vec<u8> {
        let ospf = self.packet();
        let mut f = vec![0u8; 14 + ipv4::MIN_HEADER_LEN];
        f[0..6].copy_from_slice(&[0x01, 0x00, 0x5e, 0x00, 0x00, 0x05]);
        f[6..12].copy_from_slice(&src_mac.0);
        f[12..14].copy_from_slice(&ethernet::ethertype::IPV4.to_be_bytes());
        let ip = ipv4::Repr {
            src: self.interface_addr,
            dst: ALL_SPF_ROUTERS,
            protocol: PROTOCOL,
            ttl: 1,
            tos: 0xc0,
            ident: 0,
            dont_frag: false,
            more_frags: false,
            frag_offset: 0,
            payload_len: ospf.len(),
        };
        // Cannot fail: the buffer holds the header, and the packet is far below 64 KiB.
        let _ = ip.emit(&mut f[14..]);
        f.extend_from_slice(&ospf);
        f
    }
}

/// The ISO 8473 (Fletcher) checksum OSPF puts in an LSA: over `data` (the LSA from its
/// options byte on), with the two checksum bytes at `at` (zero while computing).
pub fn fletcher(data: &[u8], at: usize) -> u16 {
    let (mut c0, mut c1) = (0i64, 0i64);
    for (i, &b) in data.iter().enumerate() {
        let b = if i == at || i == at + 1 { 0 } else { b };
        c0 = (c0 + b as i64) % 255;
        c1 = (c1 + c0) % 255;
    }
    let n = data.len() as i64;
    let mut x = ((n - at as i64 - 1) * c0 - c1) % 255;
    if x <= 0 {
        x += 255;
    }
    let mut y = 510 - c0 - x;
    if y > 255 {
        y -= 255;
    }
    ((x as u16) << 8) | (y as u16 & 0xff)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grace() -> Grace {
        Grace {
            router_id: Ipv4Addr::new(10, 255, 0, 1),
            area: Ipv4Addr::UNSPECIFIED,
            interface_addr: Ipv4Addr::new(10, 2, 0, 1),
            grace_period: 120,
            reason: RestartReason::SwitchToRedundant,
            sequence: INITIAL_SEQUENCE,
        }
    }

    /// A receiver's check (RFC 905 Annex B): both running sums over the LSA, checksum
    /// included, are zero.
    fn fletcher_ok(data: &[u8]) -> bool {
        let (mut c0, mut c1) = (0u32, 0u32);
        for &b in data {
            c0 = (c0 + b as u32) % 255;
            c1 = (c1 + c0) % 255;
        }
        c0 == 0 && c1 == 0
    }

    #[test]
    fn grace_lsa_layout_and_checksum() {
        let l = grace().lsa();
        assert_eq!(l.len(), 20 + 8 + 8 + 8);
        assert_eq!(u16::from_be_bytes([l[18], l[19]]) as usize, l.len());
        assert_eq!(&l[3..8], &[9, 3, 0, 0, 0]);
        assert_eq!(&l[8..12], &[10, 255, 0, 1]);
        assert_eq!(&l[12..16], &[0x80, 0, 0, 1]);
        assert!(fletcher_ok(&l[2..]), "{l:02x?}");
        // Another sequence number, another checksum, still valid.
        let mut g = grace();
        g.sequence += 7;
        let l2 = g.lsa();
        assert_ne!(l[16..18], l2[16..18]);
        assert!(fletcher_ok(&l2[2..]));
        // TLVs: 120 s, reason 3, the interface address.
        assert_eq!(&l[20..28], &[0, 1, 0, 4, 0, 0, 0, 120]);
        assert_eq!(&l[28..33], &[0, 2, 0, 1, 3]);
        assert_eq!(&l[36..44], &[0, 3, 0, 4, 10, 2, 0, 1]);
    }

    #[test]
    fn fletcher_is_valid_for_another_lsa() {
        // A router-LSA from its options byte (router 1.1.1.1, seq 0x80000001, one stub
        // link 10.0.0.0/24 metric 10), checked by the receiver's rule.
        let mut data = vec![
            0x02, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x80, 0x00, 0x00, 0x01,
            0x00, 0x00, 0x00, 0x24, 0x00, 0x00, 0x00, 0x01, 0x0a, 0x00, 0x00, 0x00, 0xff, 0xff,
            0xff, 0x00, 0x03, 0x00, 0x00, 0x0a,
        ];
        let c = fletcher(&data, 14);
        data[14..16].copy_from_slice(&c.to_be_bytes());
        assert!(fletcher_ok(&data));
    }

    #[test]
    fn packet_and_frame() {
        let p = grace().packet();
        assert_eq!(p[0..2], [2, LS_UPDATE]);
        assert_eq!(u16::from_be_bytes([p[2], p[3]]) as usize, p.len());
        let mut covered = p[..16].to_vec();
        covered.extend_from_slice(&p[HEADER_LEN..]);
        assert_eq!(
            checksum::checksum(&covered),
            0,
            "a valid checksum sums to zero"
        );
        let f = grace().frame(MacAddr([2, 0, 0, 0, 0x0b, 2]));
        let ip = ipv4::Packet::new_checked(&f[14..]).unwrap();
        assert_eq!(ip.protocol(), PROTOCOL);
        assert_eq!(ip.dst(), ALL_SPF_ROUTERS);
        assert_eq!(ip.ttl(), 1);
        assert_eq!(&f[14 + 20..], &p[..]);
    }
}
