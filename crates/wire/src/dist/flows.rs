//! FLOW_CONFIG and FLOW_RECORDS: the multistage router's flow export (docs/flows.md, "In
//! the multistage router"; docs/dist.md, types 10 and 11). The controller tells the
//! back-ends at what rate to sample and when to end a flow; each back-end keeps the flows
//! it forwards and sends the ended ones to the controller, with the router's interfaces
//! (the VLAN ids of the external networks) in place of its own, and the controller exports
//! them as the router.
//!
//! ```text
//! FLOW_CONFIG (type 10): interval u32 (1 in N packets; 0: off) | active_timeout_s u16 |
//!                        idle_timeout_s u16
//! FLOW_RECORDS (type 11): count u8 | reserved u8 | count × (family u8 (4 or 6) |
//!                         the IPFIX data record of that family, wire::ipfix)
//! ```

use super::*;
use crate::ipfix::{record_len, FlowRecord};

/// Bytes of a FLOW_CONFIG body.
pub const FLOW_CONFIG_LEN: usize = 8;
/// Record bytes one FLOW_RECORDS message carries at most (frames stay under 1,500 bytes
/// with the header and the authentication trailer).
pub const FLOW_RECORDS_MAX: usize = 1_200;

/// What the controller asks of the back-ends' flow sampling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct FlowConfig {
    /// Sample 1 in this many packets; 0: sample nothing.
    pub interval: u32,
    pub active_timeout_s: u16,
    pub idle_timeout_s: u16,
}

impl FlowConfig {
    pub(super) fn emit(&self, body: &mut [u8]) {
        body[0..4].copy_from_slice(&self.interval.to_be_bytes());
        put16(body, 4, self.active_timeout_s);
        put16(body, 6, self.idle_timeout_s);
    }

    pub(super) fn parse(body: &[u8], bad: Error) -> Result<Message, Error> {
        if body.len() != FLOW_CONFIG_LEN {
            return Err(bad);
        }
        let c = FlowConfig {
            interval: be32(body, 0),
            active_timeout_s: be16(body, 4),
            idle_timeout_s: be16(body, 6),
        };
        c.check()?;
        Ok(Message::FlowConfig(c))
    }

    pub(super) fn check(&self) -> Result<(), Error> {
        for (field, v) in [
            ("active_timeout_s", self.active_timeout_s),
            ("idle_timeout_s", self.idle_timeout_s),
        ] {
            if v == 0 {
                return Err(Error::BadField { field, value: 0 });
            }
        }
        Ok(())
    }
}

/// Bytes of one record in a FLOW_RECORDS body (with its family byte).
fn wire_len(r: &FlowRecord) -> usize {
    1 + record_len(r.is_v6())
}

/// Bytes of a FLOW_RECORDS body.
pub(super) fn records_len(rs: &[FlowRecord]) -> usize {
    2 + rs.iter().map(wire_len).sum::<usize>()
}

pub(super) fn check_records(rs: &[FlowRecord]) -> Result<(), Error> {
    if rs.len() > 255 || records_len(rs) > u16::MAX as usize {
        return Err(Error::BadField {
            field: "flow records",
            value: rs.len() as u32,
        });
    }
    for r in rs {
        // The router's interfaces: VLAN ids (0 for none).
        vlan(u16::try_from(r.ingress).unwrap_or(u16::MAX))?;
        vlan(u16::try_from(r.egress).unwrap_or(u16::MAX))?;
        if [r.dst, r.next_hop].iter().any(|a| a.is_ipv6() != r.is_v6()) {
            return Err(Error::BadField {
                field: "flow record family",
                value: 0,
            });
        }
    }
    Ok(())
}

pub(super) fn emit_records(rs: &[FlowRecord], body: &mut [u8]) {
    body[0] = rs.len() as u8;
    body[1] = 0;
    let mut b = Vec::with_capacity(body.len());
    for r in rs {
        b.push(if r.is_v6() { 6 } else { 4 });
        r.emit(&mut b);
    }
    body[2..2 + b.len()].copy_from_slice(&b);
}

pub(super) fn parse_records(body: &[u8], bad: Error) -> Result<Message, Error> {
    let n = *body.first().ok_or(bad)? as usize;
    let mut at = 2;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let v6 = match body.get(at) {
            Some(4) => false,
            Some(6) => true,
            Some(v) => {
                return Err(Error::BadField {
                    field: "flow record family",
                    value: *v as u32,
                })
            }
            None => return Err(bad),
        };
        let r = FlowRecord::parse(body.get(at + 1..).ok_or(bad)?, v6).ok_or(bad)?;
        at += 1 + record_len(v6);
        out.push(r);
    }
    if at != body.len() {
        return Err(bad);
    }
    check_records(&out)?;
    Ok(Message::FlowRecords(out))
}

/// `records` in groups that each fit one FLOW_RECORDS message.
pub fn flow_record_groups(records: &[FlowRecord]) -> Vec<&[FlowRecord]> {
    let mut out = Vec::new();
    let (mut start, mut len) = (0, 0);
    for (i, r) in records.iter().enumerate() {
        if i > start && (len + wire_len(r) > FLOW_RECORDS_MAX || i - start == 255) {
            out.push(&records[start..i]);
            (start, len) = (i, 0);
        }
        len += wire_len(r);
    }
    if start < records.len() {
        out.push(&records[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(i: u32, v6: bool) -> FlowRecord {
        let (src, dst, hop): (IpAddr, IpAddr, IpAddr) = if v6 {
            (
                "2001:db8::1".parse().unwrap(),
                "2001:db8:2::10".parse().unwrap(),
                "::".parse().unwrap(),
            )
        } else {
            (
                "10.1.0.10".parse().unwrap(),
                "10.2.0.10".parse().unwrap(),
                "10.2.0.10".parse().unwrap(),
            )
        };
        FlowRecord {
            src,
            dst,
            protocol: 6,
            src_port: 40_000 + i as u16,
            dst_port: 5201,
            icmp_type_code: 0,
            tcp_flags: 0x1b,
            ingress: 10,
            egress: 20,
            next_hop: hop,
            octets: 1_000 * u64::from(i),
            packets: u64::from(i),
            start_ms: 1_700_000_000_000,
            end_ms: 1_700_000_001_000 + u64::from(i),
            status: crate::ipfix::status::FORWARDED,
            end_reason: crate::ipfix::end_reason::IDLE_TIMEOUT,
            sampling: 100,
        }
    }

    #[test]
    fn records_go_in_groups_that_fit_a_frame_and_read_back() {
        let rs: Vec<FlowRecord> = (0..100).map(|i| record(i, i % 3 == 0)).collect();
        let groups = flow_record_groups(&rs);
        assert!(groups.len() > 1);
        let mut back = Vec::new();
        for g in groups {
            let r = Repr {
                seq: 1,
                msg: Message::FlowRecords(g.to_vec()),
            };
            let f = r
                .to_frame(MacAddr([2, 0, 0, 0, 0, 1]), MacAddr::BROADCAST)
                .unwrap();
            assert!(f.len() + auth::TRAILER_LEN <= 14 + 1_500, "{}", f.len());
            match Repr::parse(&f[14..]).unwrap().msg {
                Message::FlowRecords(x) => back.extend(x),
                m => panic!("{m:?}"),
            }
        }
        assert_eq!(back, rs);
        let c = Repr {
            seq: 2,
            msg: Message::FlowConfig(FlowConfig {
                interval: 100,
                active_timeout_s: 60,
                idle_timeout_s: 15,
            }),
        };
        let f = c
            .to_frame(MacAddr([2, 0, 0, 0, 0, 1]), MacAddr::BROADCAST)
            .unwrap();
        assert_eq!(Repr::parse(&f[14..]).unwrap(), c);
    }

    #[test]
    fn a_record_with_an_interface_that_is_no_vlan_is_malformed() {
        let mut r = record(1, false);
        r.egress = 5000;
        let m = Repr {
            seq: 1,
            msg: Message::FlowRecords(vec![r]),
        };
        assert!(m
            .to_frame(MacAddr([2, 0, 0, 0, 0, 1]), MacAddr::BROADCAST)
            .is_err());
    }
}
