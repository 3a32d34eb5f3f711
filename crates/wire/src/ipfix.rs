//! IPFIX (RFC 7011) as Tessera exports flows: messages with the two templates of its flow
//! records (IPv4 and IPv6) and their data records, with the IANA information elements
//! (RFC 7012's registry); and a decoder of any IPFIX message, templates first, which the
//! tests and the fuzz target use to read back what the encoder wrote.
//!
//! ```text
//! message header (16 bytes): version 10 | length | export time | sequence | domain
//! set header (4 bytes): set id (2: templates; 256 and up: data of that template) | length
//! template record: template id | field count | (element id, length) per field
//! ```
//!
//! Counts in the records are the sampled counts scaled by the sampling interval
//! (`octetDeltaCount`, `packetDeltaCount`: what crossed the router, estimated), and every
//! record says the interval it was sampled at (`samplingPacketInterval`, RFC 5477), so a
//! collector may undo the scaling.

use crate::{be16, be32, need, put16, Truncated};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const VERSION: u16 = 10;
pub const HEADER_LEN: usize = 16;
pub const SET_HEADER_LEN: usize = 4;
/// The set id of template sets.
pub const TEMPLATE_SET: u16 = 2;
/// The templates of Tessera's records.
pub const TEMPLATE4: u16 = 256;
pub const TEMPLATE6: u16 = 257;
/// Bytes a message may take (an IPv4 UDP datagram under a 1,500-byte MTU).
pub const MAX_MESSAGE: usize = 1_472;

/// IANA information element ids of Tessera's records.
pub mod ie {
    pub const OCTET_DELTA_COUNT: u16 = 1;
    pub const PACKET_DELTA_COUNT: u16 = 2;
    pub const PROTOCOL_IDENTIFIER: u16 = 4;
    pub const TCP_CONTROL_BITS: u16 = 6;
    pub const SOURCE_TRANSPORT_PORT: u16 = 7;
    pub const SOURCE_IPV4_ADDRESS: u16 = 8;
    pub const INGRESS_INTERFACE: u16 = 10;
    pub const DESTINATION_TRANSPORT_PORT: u16 = 11;
    pub const DESTINATION_IPV4_ADDRESS: u16 = 12;
    pub const EGRESS_INTERFACE: u16 = 14;
    pub const IP_NEXT_HOP_IPV4_ADDRESS: u16 = 15;
    pub const SOURCE_IPV6_ADDRESS: u16 = 27;
    pub const DESTINATION_IPV6_ADDRESS: u16 = 28;
    pub const ICMP_TYPE_CODE_IPV4: u16 = 32;
    pub const IP_NEXT_HOP_IPV6_ADDRESS: u16 = 62;
    pub const FORWARDING_STATUS: u16 = 89;
    pub const FLOW_END_REASON: u16 = 136;
    pub const ICMP_TYPE_CODE_IPV6: u16 = 139;
    pub const FLOW_START_MILLISECONDS: u16 = 152;
    pub const FLOW_END_MILLISECONDS: u16 = 153;
    pub const SAMPLING_PACKET_INTERVAL: u16 = 305;
}

/// `forwardingStatus` (RFC 7270, 4.12; IANA's registry of its reason codes): the status
/// in the top two bits, a reason below.
pub mod status {
    /// Forwarded, reason unknown.
    pub const FORWARDED: u8 = 64;
    /// Dropped, reason unknown.
    pub const DROPPED: u8 = 128;
    /// Dropped: an access list denied it ("ACL deny").
    pub const DROPPED_ACL_DENY: u8 = 129;
    /// Dropped: no route ("Unroutable").
    pub const DROPPED_UNROUTABLE: u8 = 131;
    /// Dropped: its TTL or hop limit ran out ("Bad TTL").
    pub const DROPPED_BAD_TTL: u8 = 137;
    /// Dropped: a reverse-path check ("RPF").
    pub const DROPPED_RPF: u8 = 140;
    /// Consumed: for the router itself.
    pub const CONSUMED: u8 = 192;
}

/// `flowEndReason` (RFC 5102): why a record was exported.
pub mod end_reason {
    pub const IDLE_TIMEOUT: u8 = 1;
    pub const ACTIVE_TIMEOUT: u8 = 2;
    pub const END_OF_FLOW: u8 = 3;
    pub const FORCED_END: u8 = 4;
}

/// One flow record as Tessera exports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct FlowRecord {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub protocol: u8,
    pub src_port: u16,
    pub dst_port: u16,
    /// ICMP or ICMPv6 type << 8 | code (0 for other protocols).
    pub icmp_type_code: u16,
    pub tcp_flags: u16,
    pub ingress: u32,
    pub egress: u32,
    /// The next hop (of the family of `src`; unspecified where none).
    pub next_hop: IpAddr,
    pub octets: u64,
    pub packets: u64,
    pub start_ms: u64,
    pub end_ms: u64,
    pub status: u8,
    pub end_reason: u8,
    pub sampling: u32,
}

/// The fields of a template: (element id, length).
fn fields(v6: bool) -> [(u16, u16); 17] {
    let (a, hop, icmp) = if v6 {
        (16, ie::IP_NEXT_HOP_IPV6_ADDRESS, ie::ICMP_TYPE_CODE_IPV6)
    } else {
        (4, ie::IP_NEXT_HOP_IPV4_ADDRESS, ie::ICMP_TYPE_CODE_IPV4)
    };
    let (src, dst) = if v6 {
        (ie::SOURCE_IPV6_ADDRESS, ie::DESTINATION_IPV6_ADDRESS)
    } else {
        (ie::SOURCE_IPV4_ADDRESS, ie::DESTINATION_IPV4_ADDRESS)
    };
    [
        (src, a),
        (dst, a),
        (ie::PROTOCOL_IDENTIFIER, 1),
        (ie::SOURCE_TRANSPORT_PORT, 2),
        (ie::DESTINATION_TRANSPORT_PORT, 2),
        (icmp, 2),
        (ie::TCP_CONTROL_BITS, 2),
        (ie::INGRESS_INTERFACE, 4),
        (ie::EGRESS_INTERFACE, 4),
        (hop, a),
        (ie::OCTET_DELTA_COUNT, 8),
        (ie::PACKET_DELTA_COUNT, 8),
        (ie::FLOW_START_MILLISECONDS, 8),
        (ie::FLOW_END_MILLISECONDS, 8),
        (ie::FORWARDING_STATUS, 1),
        (ie::FLOW_END_REASON, 1),
        (ie::SAMPLING_PACKET_INTERVAL, 4),
    ]
}

/// Bytes of one data record of the template.
pub fn record_len(v6: bool) -> usize {
    fields(v6).iter().map(|(_, l)| *l as usize).sum()
}

/// The template set (both templates).
pub fn template_set() -> Vec<u8> {
    let mut b = vec![0u8; SET_HEADER_LEN];
    for (id, v6) in [(TEMPLATE4, false), (TEMPLATE6, true)] {
        let f = fields(v6);
        b.extend(id.to_be_bytes());
        b.extend((f.len() as u16).to_be_bytes());
        for (e, l) in f {
            b.extend(e.to_be_bytes());
            b.extend(l.to_be_bytes());
        }
    }
    let n = b.len() as u16;
    put16(&mut b, 0, TEMPLATE_SET);
    put16(&mut b, 2, n);
    b
}

fn put_addr(b: &mut Vec<u8>, a: IpAddr, v6: bool) {
    match (a, v6) {
        (IpAddr::V4(a), false) => b.extend(a.octets()),
        (IpAddr::V6(a), true) => b.extend(a.octets()),
        (IpAddr::V4(a), true) => b.extend(a.to_ipv6_mapped().octets()),
        (IpAddr::V6(_), false) => b.extend([0; 4]),
    }
}

impl FlowRecord {
    pub fn is_v6(&self) -> bool {
        self.src.is_ipv6()
    }

    /// The data record (the template of its family).
    pub fn emit(&self, b: &mut Vec<u8>) {
        let v6 = self.is_v6();
        put_addr(b, self.src, v6);
        put_addr(b, self.dst, v6);
        b.push(self.protocol);
        b.extend(self.src_port.to_be_bytes());
        b.extend(self.dst_port.to_be_bytes());
        b.extend(self.icmp_type_code.to_be_bytes());
        b.extend(self.tcp_flags.to_be_bytes());
        b.extend(self.ingress.to_be_bytes());
        b.extend(self.egress.to_be_bytes());
        put_addr(b, self.next_hop, v6);
        for v in [self.octets, self.packets, self.start_ms, self.end_ms] {
            b.extend(v.to_be_bytes());
        }
        b.push(self.status);
        b.push(self.end_reason);
        b.extend(self.sampling.to_be_bytes());
    }

    /// The data record of its family's template read back from the first
    /// [`record_len`]`(v6)` bytes of `b` (None: too short): the inverse of [`FlowRecord::emit`].
    pub fn parse(b: &[u8], v6: bool) -> Option<FlowRecord> {
        let b = b.get(..record_len(v6))?;
        let a = if v6 { 16 } else { 4 };
        let addr = |at: usize| -> IpAddr {
            if v6 {
                let mut o = [0u8; 16];
                o.copy_from_slice(&b[at..at + 16]);
                IpAddr::V6(Ipv6Addr::from(o))
            } else {
                IpAddr::V4(Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3]))
            }
        };
        let u64_at = |at: usize| (be32(b, at) as u64) << 32 | be32(b, at + 4) as u64;
        let at = 2 * a;
        let hop = at + 17;
        let c = hop + a;
        Some(FlowRecord {
            src: addr(0),
            dst: addr(a),
            protocol: b[at],
            src_port: be16(b, at + 1),
            dst_port: be16(b, at + 3),
            icmp_type_code: be16(b, at + 5),
            tcp_flags: be16(b, at + 7),
            ingress: be32(b, at + 9),
            egress: be32(b, at + 13),
            next_hop: addr(hop),
            octets: u64_at(c),
            packets: u64_at(c + 8),
            start_ms: u64_at(c + 16),
            end_ms: u64_at(c + 24),
            status: b[c + 32],
            end_reason: b[c + 33],
            sampling: be32(b, c + 34),
        })
    }

    /// The record of `template` read back from a decoded data record's fields.
    pub fn from_fields(template: u16, f: &[(u16, Vec<u8>)]) -> Option<FlowRecord> {
        let get = |id: u16| f.iter().find(|(e, _)| *e == id).map(|(_, v)| v.as_slice());
        let uint = |id: u16| -> Option<u64> {
            let v = get(id)?;
            (v.len() <= 8).then(|| v.iter().fold(0u64, |a, b| a << 8 | *b as u64))
        };
        let v6 = match template {
            TEMPLATE4 => false,
            TEMPLATE6 => true,
            _ => return None,
        };
        let addr = |id: u16| -> Option<IpAddr> {
            let v = get(id)?;
            Some(if v6 {
                IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(v).ok()?))
            } else {
                IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(v).ok()?))
            })
        };
        let (src, dst, hop, icmp) = if v6 {
            (
                ie::SOURCE_IPV6_ADDRESS,
                ie::DESTINATION_IPV6_ADDRESS,
                ie::IP_NEXT_HOP_IPV6_ADDRESS,
                ie::ICMP_TYPE_CODE_IPV6,
            )
        } else {
            (
                ie::SOURCE_IPV4_ADDRESS,
                ie::DESTINATION_IPV4_ADDRESS,
                ie::IP_NEXT_HOP_IPV4_ADDRESS,
                ie::ICMP_TYPE_CODE_IPV4,
            )
        };
        Some(FlowRecord {
            src: addr(src)?,
            dst: addr(dst)?,
            protocol: uint(ie::PROTOCOL_IDENTIFIER)? as u8,
            src_port: uint(ie::SOURCE_TRANSPORT_PORT)? as u16,
            dst_port: uint(ie::DESTINATION_TRANSPORT_PORT)? as u16,
            icmp_type_code: uint(icmp)? as u16,
            tcp_flags: uint(ie::TCP_CONTROL_BITS)? as u16,
            ingress: uint(ie::INGRESS_INTERFACE)? as u32,
            egress: uint(ie::EGRESS_INTERFACE)? as u32,
            next_hop: addr(hop)?,
            octets: uint(ie::OCTET_DELTA_COUNT)?,
            packets: uint(ie::PACKET_DELTA_COUNT)?,
            start_ms: uint(ie::FLOW_START_MILLISECONDS)?,
            end_ms: uint(ie::FLOW_END_MILLISECONDS)?,
            status: uint(ie::FORWARDING_STATUS)? as u8,
            end_reason: uint(ie::FLOW_END_REASON)? as u8,
            sampling: uint(ie::SAMPLING_PACKET_INTERVAL)? as u32,
        })
    }
}

/// Writes messages of `records` (with the template set first where `templates`), each at
/// most [`MAX_MESSAGE`] bytes: (message, records in it). `seq` is the number of data
/// records sent before in this domain (RFC 7011 3.1), advanced here.
pub fn messages(
    domain: u32,
    export_secs: u32,
    seq: &mut u32,
    templates: bool,
    records: &[FlowRecord],
) -> Vec<(Vec<u8>, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut with_templates = templates;
    while i < records.len() || with_templates {
        let mut m = vec![0u8; HEADER_LEN];
        if with_templates {
            m.extend(template_set());
            with_templates = false;
        }
        let first = i;
        while i < records.len() {
            let v6 = records[i].is_v6();
            let id = if v6 { TEMPLATE6 } else { TEMPLATE4 };
            let rl = record_len(v6);
            if m.len() + SET_HEADER_LEN + rl > MAX_MESSAGE {
                break;
            }
            // One set of the records of this family that follow.
            let at = m.len();
            m.extend([0; SET_HEADER_LEN]);
            while i < records.len() && records[i].is_v6() == v6 && m.len() + rl <= MAX_MESSAGE {
                records[i].emit(&mut m);
                i += 1;
            }
            let n = (m.len() - at) as u16;
            put16(&mut m, at, id);
            put16(&mut m, at + 2, n);
        }
        let n = m.len() as u16;
        put16(&mut m, 0, VERSION);
        put16(&mut m, 2, n);
        m[4..8].copy_from_slice(&export_secs.to_be_bytes());
        m[8..12].copy_from_slice(&seq.to_be_bytes());
        m[12..16].copy_from_slice(&domain.to_be_bytes());
        *seq = seq.wrapping_add((i - first) as u32);
        out.push((m, i - first));
    }
    out
}

/// What is wrong with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    Truncated(Truncated),
    BadVersion(u16),
    /// A length that does not fit: the message's, a set's, a template's.
    BadLength(&'static str),
    /// A data set of a template this decoder has not seen.
    UnknownTemplate(u16),
}

/// A decoded message: its header, the templates it defined, and its data records, each
/// as (template id, fields as (element id, bytes)).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decoded {
    pub export_secs: u32,
    pub seq: u32,
    pub domain: u32,
    pub templates: Vec<(u16, Vec<(u16, u16)>)>,
    pub records: Vec<(u16, Fields)>,
}

/// A data record's fields: (element id, bytes).
pub type Fields = Vec<(u16, Vec<u8>)>;

/// Templates learned, by (domain, template id).
pub type Templates = std::collections::HashMap<(u32, u16), Vec<(u16, u16)>>;

/// Decodes one message, learning its templates into `known` and decoding its data sets
/// with them. Enterprise-specific fields are read with their enterprise number skipped;
/// variable-length fields (length 65535) are read as RFC 7011 7 says. Never panics.
pub fn decode(b: &[u8], known: &mut Templates) -> Result<Decoded, Error> {
    need(b, HEADER_LEN).map_err(Error::Truncated)?;
    let version = be16(b, 0);
    if version != VERSION {
        return Err(Error::BadVersion(version));
    }
    let len = be16(b, 2) as usize;
    if len < HEADER_LEN || len > b.len() {
        return Err(Error::BadLength("message"));
    }
    let mut d = Decoded {
        export_secs: be32(b, 4),
        seq: be32(b, 8),
        domain: be32(b, 12),
        ..Default::default()
    };
    let mut at = HEADER_LEN;
    while at < len {
        if at + SET_HEADER_LEN > len {
            return Err(Error::BadLength("set header"));
        }
        let (id, sl) = (be16(b, at), be16(b, at + 2) as usize);
        if sl < SET_HEADER_LEN || at + sl > len {
            return Err(Error::BadLength("set"));
        }
        let set = &b[at + SET_HEADER_LEN..at + sl];
        match id {
            TEMPLATE_SET => {
                let mut p = 0;
                while p + 4 <= set.len() {
                    let (tid, n) = (be16(set, p), be16(set, p + 2) as usize);
                    p += 4;
                    let mut f = Vec::with_capacity(n.min(64));
                    for _ in 0..n {
                        if p + 4 > set.len() {
                            return Err(Error::BadLength("template"));
                        }
                        let (e, l) = (be16(set, p), be16(set, p + 2));
                        p += 4;
                        if e & 0x8000 != 0 {
                            if p + 4 > set.len() {
                                return Err(Error::BadLength("template"));
                            }
                            p += 4;
                        }
                        f.push((e & 0x7fff, l));
                    }
                    known.insert((d.domain, tid), f.clone());
                    d.templates.push((tid, f));
                }
            }
            3 => {} // options templates: not read
            id if id >= 256 => {
                let t = known
                    .get(&(d.domain, id))
                    .ok_or(Error::UnknownTemplate(id))?
                    .clone();
                let min: usize = t
                    .iter()
                    .map(|(_, l)| if *l == 0xffff { 1 } else { *l as usize })
                    .sum();
                let mut p = 0;
                while min > 0 && p + min <= set.len() {
                    let mut fs = Vec::with_capacity(t.len());
                    for (e, l) in &t {
                        let l = if *l == 0xffff {
                            let s = *set.get(p).ok_or(Error::BadLength("field"))? as usize;
                            p += 1;
                            if s == 255 {
                                need(set, p + 2).map_err(Error::Truncated)?;
                                let s = be16(set, p) as usize;
                                p += 2;
                                s
                            } else {
                                s
                            }
                        } else {
                            *l as usize
                        };
                        let v = set.get(p..p + l).ok_or(Error::BadLength("field"))?;
                        fs.push((*e, v.to_vec()));
                        p += l;
                    }
                    d.records.push((id, fs));
                }
            }
            _ => return Err(Error::BadLength("set id")),
        }
        at += sl;
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rec(v6: bool, i: u64) -> FlowRecord {
        let (src, dst, hop): (IpAddr, IpAddr, IpAddr) = if v6 {
            (
                "2001:db8:1::10".parse().unwrap(),
                "2001:db8:2::10".parse().unwrap(),
                "fe80::1".parse().unwrap(),
            )
        } else {
            (
                [10, 1, 0, 10].into(),
                [10, 2, 0, i as u8].into(),
                [10, 2, 0, 1].into(),
            )
        };
        FlowRecord {
            src,
            dst,
            protocol: 6,
            src_port: 40000 + i as u16,
            dst_port: 5201,
            icmp_type_code: 0,
            tcp_flags: 0x1b,
            ingress: 1,
            egress: 2,
            next_hop: hop,
            octets: 1_000_000 * i,
            packets: 1000 * i,
            start_ms: 1_700_000_000_000,
            end_ms: 1_700_000_001_000 + i,
            status: status::FORWARDED,
            end_reason: end_reason::IDLE_TIMEOUT,
            sampling: 100,
        }
    }

    #[test]
    fn records_come_back_through_the_decoder_over_several_messages() {
        let records: Vec<FlowRecord> = (0..60).map(|i| rec(i % 7 == 3, i)).collect();
        let mut seq = 5;
        let ms = messages(77, 1_700_000_000, &mut seq, true, &records);
        assert!(ms.len() > 1, "{} messages", ms.len());
        assert_eq!(seq, 65);
        let mut known = Templates::new();
        let mut back = Vec::new();
        let mut expect_seq = 5;
        for (m, n) in &ms {
            assert!(m.len() <= MAX_MESSAGE);
            let d = decode(m, &mut known).unwrap();
            assert_eq!((d.domain, d.seq, d.records.len()), (77, expect_seq, *n));
            expect_seq += *n as u32;
            for (t, f) in &d.records {
                back.push(FlowRecord::from_fields(*t, f).unwrap());
            }
        }
        assert_eq!(back, records);
        // Without the templates, data sets cannot be read.
        assert!(matches!(
            decode(&ms[1].0, &mut Templates::new()),
            Err(Error::UnknownTemplate(TEMPLATE4 | TEMPLATE6))
        ));
        // A templates-only message.
        let t = messages(1, 0, &mut 0, true, &[]);
        assert_eq!(t.len(), 1);
        assert_eq!(decode(&t[0].0, &mut known).unwrap().templates.len(), 2);
    }

    proptest! {
        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..400)) {
            let mut known = Templates::new();
            let _ = decode(&b, &mut known);
        }

        /// The fuzz target's round trip (crate::fuzzing::ipfix) on any bytes: records
        /// cut from them, encoded over as many messages as they take, decoded the same.
        #[test]
        fn any_records_round_trip(b in proptest::collection::vec(any::<u8>(), 0..6000)) {
            crate::fuzzing::ipfix(&b);
        }
    }
}
