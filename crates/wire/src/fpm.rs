//! FPM, the Forwarding Plane Manager stream of a routing suite (FRR's zebra with the
//! `dplane_fpm_nl` module): frames over TCP, each carrying one or more netlink messages.
//!
//! ```text
//!  0         1         2                   4
//!  +---------+---------+-------------------+
//!  | version |  type   |  length (BE, all) |   FPM header; version 1, type 1 = netlink
//!  +---------+---------+-------------------+
//!  | netlink messages (host byte order: little-endian here), 4-byte aligned   ...
//! ```
//!
//! Each netlink message is a `nlmsghdr` (length, type, flags, sequence, port id) followed
//! by, for routes, an `rtmsg` and attributes, and for next-hop objects (zebra sends routes
//! by next-hop group id by default), an `nhmsg` and attributes. This module reads the parts
//! a forwarding table needs: IPv4 and IPv6 routes with their gateways, next-hop objects and
//! groups; every other message is reported by its type and skipped. Nothing here panics,
//! whatever the bytes; a malformed message is an error that names what was wrong.

use crate::Truncated;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Bytes of the FPM header.
pub const FPM_HEADER_LEN: usize = 4;
/// The FPM version this module reads.
pub const FPM_VERSION: u8 = 1;
/// FPM message type: netlink.
pub const FPM_NETLINK: u8 = 1;
/// The largest FPM frame (the length field is 16 bits).
pub const FPM_MAX_LEN: usize = u16::MAX as usize;

const NLMSG_HEADER_LEN: usize = 16;
const RTMSG_LEN: usize = 12;
const NHMSG_LEN: usize = 8;

/// Netlink message types.
pub mod nl {
    pub const RTM_NEWROUTE: u16 = 24;
    pub const RTM_DELROUTE: u16 = 25;
    pub const RTM_NEWNEXTHOP: u16 = 104;
    pub const RTM_DELNEXTHOP: u16 = 105;
    pub const NLM_F_REPLACE: u16 = 0x100;
    pub const AF_INET: u8 = 2;
    pub const AF_INET6: u8 = 10;
    // Route attributes.
    pub const RTA_DST: u16 = 1;
    pub const RTA_OIF: u16 = 4;
    pub const RTA_GATEWAY: u16 = 5;
    pub const RTA_PRIORITY: u16 = 6;
    pub const RTA_MULTIPATH: u16 = 9;
    pub const RTA_TABLE: u16 = 15;
    pub const RTA_NH_ID: u16 = 30;
    // Next-hop attributes.
    pub const NHA_ID: u16 = 1;
    pub const NHA_GROUP: u16 = 2;
    pub const NHA_BLACKHOLE: u16 = 3;
    pub const NHA_OIF: u16 = 5;
    pub const NHA_GATEWAY: u16 = 6;
    // Route types (rtm_type).
    pub const RTN_UNICAST: u8 = 1;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    Truncated(Truncated),
    /// An FPM header of another version or type.
    BadHeader {
        version: u8,
        kind: u8,
    },
    /// An FPM length shorter than its own header.
    BadLength(usize),
    /// A netlink message or attribute whose length runs past its container or below its header.
    BadNetlinkLength {
        at: usize,
        length: usize,
    },
    /// A field holds a value the format does not allow.
    BadField {
        field: &'static str,
        value: u32,
    },
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated(t) => write!(f, "fpm: {t}"),
            Error::BadHeader { version, kind } => write!(
                f,
                "fpm: header of version {version}, type {kind}; this reader takes version 1, type 1 (netlink)"
            ),
            Error::BadLength(n) => write!(f, "fpm: frame length {n} is shorter than its header"),
            Error::BadNetlinkLength { at, length } => {
                write!(f, "fpm: netlink length {length} at byte {at} does not fit")
            }
            Error::BadField { field, value } => write!(f, "fpm: {field} = {value} is not allowed"),
        }
    }
}

/// Splits the first FPM frame off a byte stream: `Ok(None)` until a whole frame is there,
/// else the frame's length (header included) and its netlink payload.
pub fn split_frame(stream: &[u8]) -> Result<Option<(usize, &[u8])>, Error> {
    if stream.len() < FPM_HEADER_LEN {
        return Ok(None);
    }
    let (version, kind) = (stream[0], stream[1]);
    if version != FPM_VERSION || kind != FPM_NETLINK {
        return Err(Error::BadHeader { version, kind });
    }
    let len = u16::from_be_bytes([stream[2], stream[3]]) as usize;
    if len < FPM_HEADER_LEN {
        return Err(Error::BadLength(len));
    }
    if stream.len() < len {
        return Ok(None);
    }
    Ok(Some((len, &stream[FPM_HEADER_LEN..len])))
}

/// A route's or next hop's address family: IPv4 and IPv6 are read whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    Ipv4,
    Ipv6,
    Other(u8),
}

/// Where a route's packets go, as the message gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteVia {
    /// Gateways given inline (`RTA_GATEWAY`, or each hop of `RTA_MULTIPATH`), and the
    /// interface each is on (`ifindexes[i]` for `gateways[i]`: `RTA_OIF`, or the hop's
    /// `rtnh_ifindex`; 0 where none is given), which an IPv6 link-local gateway needs;
    /// hops that name only an interface are counted in `direct`.
    Inline {
        gateways: Vec<IpAddr>,
        ifindexes: Vec<u32>,
        direct: u32,
    },
    /// A next-hop object or group sent before (`RTA_NH_ID`).
    Object(u32),
}

/// A route message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// `RTM_NEWROUTE` (true) or `RTM_DELROUTE`.
    pub add: bool,
    pub family: Family,
    /// The destination (0.0.0.0 for a family other than IPv4 and IPv6), host bits as sent.
    pub dst: IpAddr,
    pub dst_len: u8,
    /// `RTA_TABLE` if present, else the `rtmsg` table byte.
    pub table: u32,
    pub protocol: u8,
    /// `rtm_type`: 1 unicast; others (blackhole, unreachable, local...) are not forwarded.
    pub rtype: u8,
    pub metric: u32,
    pub via: RouteVia,
}

/// A next-hop object message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nexthop {
    /// `RTM_NEWNEXTHOP` (true) or `RTM_DELNEXTHOP`.
    pub add: bool,
    pub id: u32,
    pub family: Family,
    /// The gateway of a single next hop (IPv4 or IPv6).
    pub gateway: Option<IpAddr>,
    /// Its interface (`NHA_OIF`; 0 if not given).
    pub ifindex: u32,
    /// The member ids of a group (empty for a single next hop).
    pub group: Vec<u32>,
    pub blackhole: bool,
}

/// One netlink message of an FPM frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Route(Route),
    Nexthop(Nexthop),
    /// Any other netlink message type, skipped.
    Other(u16),
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Walks netlink attributes: calls `f(type, payload)` for each.
fn attrs(
    b: &[u8],
    base: usize,
    mut f: impl FnMut(u16, &[u8]) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut at = 0;
    while at + 4 <= b.len() {
        let len = le16(b, at) as usize;
        if len < 4 || at + len > b.len() {
            return Err(Error::BadNetlinkLength {
                at: base + at,
                length: len,
            });
        }
        f(le16(b, at + 2) & 0x3fff, &b[at + 4..at + len])?;
        at += align4(len);
    }
    Ok(())
}

fn u32_attr(field: &'static str, v: &[u8]) -> Result<u32, Error> {
    if v.len() < 4 {
        return Err(Error::BadField {
            field,
            value: v.len() as u32,
        });
    }
    Ok(le32(v, 0))
}

fn ip_attr(field: &'static str, v: &[u8]) -> Result<Ipv4Addr, Error> {
    if v.len() < 4 {
        return Err(Error::BadField {
            field,
            value: v.len() as u32,
        });
    }
    Ok(Ipv4Addr::new(v[0], v[1], v[2], v[3]))
}

fn ip6_attr(field: &'static str, v: &[u8]) -> Result<Ipv6Addr, Error> {
    if v.len() < 16 {
        return Err(Error::BadField {
            field,
            value: v.len() as u32,
        });
    }
    let mut o = [0u8; 16];
    o.copy_from_slice(&v[..16]);
    Ok(Ipv6Addr::from(o))
}

/// An address of `fam` (IPv4 or IPv6) from an attribute.
fn addr_attr(fam: Family, field: &'static str, v: &[u8]) -> Result<IpAddr, Error> {
    match fam {
        Family::Ipv6 => ip6_attr(field, v).map(IpAddr::V6),
        _ => ip_attr(field, v).map(IpAddr::V4),
    }
}

fn family(f: u8) -> Family {
    match f {
        nl::AF_INET => Family::Ipv4,
        nl::AF_INET6 => Family::Ipv6,
        o => Family::Other(o),
    }
}

/// Parses every netlink message of an FPM frame's payload.
pub fn messages(payload: &[u8]) -> Result<Vec<Message>, Error> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + NLMSG_HEADER_LEN <= payload.len() {
        let len = le32(payload, at) as usize;
        if len < NLMSG_HEADER_LEN || len > payload.len() - at {
            return Err(Error::BadNetlinkLength { at, length: len });
        }
        let kind = le16(payload, at + 4);
        let body = &payload[at + NLMSG_HEADER_LEN..at + len];
        let base = at + NLMSG_HEADER_LEN;
        out.push(match kind {
            nl::RTM_NEWROUTE | nl::RTM_DELROUTE => {
                Message::Route(route(body, base, kind == nl::RTM_NEWROUTE)?)
            }
            nl::RTM_NEWNEXTHOP | nl::RTM_DELNEXTHOP => {
                Message::Nexthop(nexthop(body, base, kind == nl::RTM_NEWNEXTHOP)?)
            }
            other => Message::Other(other),
        });
        at += align4(len);
    }
    if at < payload.len() && payload.len() - at >= 4 {
        return Err(Error::Truncated(Truncated {
            need: NLMSG_HEADER_LEN,
            have: payload.len() - at,
        }));
    }
    Ok(out)
}

fn route(b: &[u8], base: usize, add: bool) -> Result<Route, Error> {
    crate::need(b, RTMSG_LEN).map_err(Error::Truncated)?;
    let fam = family(b[0]);
    let dst_len = b[1];
    let max = match fam {
        Family::Ipv6 => 128,
        _ => 32,
    };
    if dst_len > max {
        return Err(Error::BadField {
            field: "rtm_dst_len",
            value: dst_len as u32,
        });
    }
    let mut r = Route {
        add,
        family: fam,
        dst: match fam {
            Family::Ipv6 => Ipv6Addr::UNSPECIFIED.into(),
            _ => Ipv4Addr::UNSPECIFIED.into(),
        },
        dst_len,
        table: b[4] as u32,
        protocol: b[5],
        rtype: b[7],
        metric: 0,
        via: RouteVia::Inline {
            gateways: Vec::new(),
            ifindexes: Vec::new(),
            direct: 0,
        },
    };
    let known = matches!(fam, Family::Ipv4 | Family::Ipv6);
    let mut gateways = Vec::new();
    // The hops' interfaces; `RTA_GATEWAY`'s is `RTA_OIF`, which may come after it.
    let mut ifindexes = Vec::new();
    let mut top_level = None;
    let mut direct = 0u32;
    let mut oif = None;
    let mut nh_id = None;
    attrs(&b[RTMSG_LEN..], base + RTMSG_LEN, |t, v| {
        match t {
            nl::RTA_DST if known => r.dst = addr_attr(fam, "RTA_DST", v)?,
            nl::RTA_GATEWAY if known => {
                top_level = Some(gateways.len());
                gateways.push(addr_attr(fam, "RTA_GATEWAY", v)?);
                ifindexes.push(0);
            }
            nl::RTA_OIF => oif = Some(u32_attr("RTA_OIF", v)?),
            nl::RTA_PRIORITY => r.metric = u32_attr("RTA_PRIORITY", v)?,
            nl::RTA_TABLE => r.table = u32_attr("RTA_TABLE", v)?,
            nl::RTA_NH_ID => nh_id = Some(u32_attr("RTA_NH_ID", v)?),
            nl::RTA_MULTIPATH if known => {
                // struct rtnexthop { u16 len; u8 flags; u8 hops; i32 ifindex; } + attributes
                let mut at = 0;
                while at + 8 <= v.len() {
                    let len = le16(v, at) as usize;
                    if len < 8 || at + len > v.len() {
                        return Err(Error::BadNetlinkLength {
                            at: at + base,
                            length: len,
                        });
                    }
                    let mut gw = None;
                    attrs(&v[at + 8..at + len], base, |t, v| {
                        if t == nl::RTA_GATEWAY {
                            gw = Some(addr_attr(fam, "RTA_GATEWAY", v)?);
                        }
                        Ok(())
                    })?;
                    match gw {
                        Some(g) => {
                            gateways.push(g);
                            ifindexes.push(le32(v, at + 4));
                        }
                        None => direct += 1,
                    }
                    at += align4(len);
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    r.via = match nh_id {
        Some(id) => RouteVia::Object(id),
        None => {
            if gateways.is_empty() && direct == 0 && oif.is_some() {
                direct = 1;
            }
            if let (Some(i), Some(oif)) = (top_level, oif) {
                ifindexes[i] = oif;
            }
            RouteVia::Inline {
                gateways,
                ifindexes,
                direct,
            }
        }
    };
    Ok(r)
}

fn nexthop(b: &[u8], base: usize, add: bool) -> Result<Nexthop, Error> {
    crate::need(b, NHMSG_LEN).map_err(Error::Truncated)?;
    let fam = family(b[0]);
    let mut n = Nexthop {
        add,
        id: 0,
        family: fam,
        gateway: None,
        ifindex: 0,
        group: Vec::new(),
        blackhole: false,
    };
    attrs(&b[NHMSG_LEN..], base + NHMSG_LEN, |t, v| {
        match t {
            nl::NHA_ID => n.id = u32_attr("NHA_ID", v)?,
            nl::NHA_GATEWAY if matches!(fam, Family::Ipv4 | Family::Ipv6) => {
                n.gateway = Some(addr_attr(fam, "NHA_GATEWAY", v)?)
            }
            nl::NHA_OIF => n.ifindex = u32_attr("NHA_OIF", v)?,
            nl::NHA_BLACKHOLE => n.blackhole = true,
            nl::NHA_GROUP => {
                // struct nexthop_grp { u32 id; u8 weight; u8 resvd1; u16 resvd2; }
                if v.len() % 8 != 0 {
                    return Err(Error::BadField {
                        field: "NHA_GROUP",
                        value: v.len() as u32,
                    });
                }
                n.group = v.chunks_exact(8).map(|c| le32(c, 0)).collect();
            }
            _ => {}
        }
        Ok(())
    })?;
    Ok(n)
}

/// Builders of FPM frames, for tests, fuzz seeds and `tessera` tools that feed a controller.
pub mod build {
    use super::*;

    fn attr(out: &mut Vec<u8>, t: u16, v: &[u8]) {
        out.extend_from_slice(&((4 + v.len()) as u16).to_le_bytes());
        out.extend_from_slice(&t.to_le_bytes());
        out.extend_from_slice(v);
        while !out.len().is_multiple_of(4) {
            out.push(0);
        }
    }

    fn nlmsg(kind: u16, flags: u16, body: &[u8]) -> Vec<u8> {
        let mut m = Vec::with_capacity(NLMSG_HEADER_LEN + body.len());
        m.extend_from_slice(&((NLMSG_HEADER_LEN + body.len()) as u32).to_le_bytes());
        m.extend_from_slice(&kind.to_le_bytes());
        m.extend_from_slice(&flags.to_le_bytes());
        m.extend_from_slice(&[0; 8]);
        m.extend_from_slice(body);
        m
    }

    /// An IPv4 route message: new (with gateways inline, one or `RTA_MULTIPATH`, or by
    /// next-hop id) or deleted.
    pub fn route(
        add: bool,
        dst: Ipv4Addr,
        len: u8,
        gateways: &[Ipv4Addr],
        nh_id: Option<u32>,
    ) -> Vec<u8> {
        let g: Vec<(Vec<u8>, u32)> = gateways.iter().map(|g| (g.octets().to_vec(), 2)).collect();
        any_route(add, nl::AF_INET, &dst.octets(), len, &g, nh_id)
    }

    /// An IPv6 route message, as [`route`].
    pub fn route6(
        add: bool,
        dst: Ipv6Addr,
        len: u8,
        gateways: &[Ipv6Addr],
        nh_id: Option<u32>,
    ) -> Vec<u8> {
        let g: Vec<(Vec<u8>, u32)> = gateways.iter().map(|g| (g.octets().to_vec(), 2)).collect();
        any_route(add, nl::AF_INET6, &dst.octets(), len, &g, nh_id)
    }

    /// An IPv6 route through gateways on the interfaces named (gateway, ifindex), as zebra
    /// sends one through link-local next hops.
    pub fn route6_on(add: bool, dst: Ipv6Addr, len: u8, hops: &[(Ipv6Addr, u32)]) -> Vec<u8> {
        let g: Vec<(Vec<u8>, u32)> = hops
            .iter()
            .map(|(g, i)| (g.octets().to_vec(), *i))
            .collect();
        any_route(add, nl::AF_INET6, &dst.octets(), len, &g, None)
    }

    fn any_route(
        add: bool,
        family: u8,
        dst: &[u8],
        len: u8,
        gateways: &[(Vec<u8>, u32)],
        nh_id: Option<u32>,
    ) -> Vec<u8> {
        let mut b = vec![family, len, 0, 0, 254, 196, 0, nl::RTN_UNICAST, 0, 0, 0, 0];
        attr(&mut b, nl::RTA_DST, dst);
        attr(&mut b, nl::RTA_PRIORITY, &20u32.to_le_bytes());
        if let Some(id) = nh_id {
            attr(&mut b, nl::RTA_NH_ID, &id.to_le_bytes());
        } else if let [(g, ifindex)] = gateways {
            attr(&mut b, nl::RTA_GATEWAY, g);
            attr(&mut b, nl::RTA_OIF, &ifindex.to_le_bytes());
        } else if gateways.len() > 1 {
            let mut mp = Vec::new();
            for (g, ifindex) in gateways {
                mp.extend_from_slice(&(12 + g.len() as u16).to_le_bytes());
                mp.extend_from_slice(&[0, 0]);
                mp.extend_from_slice(&ifindex.to_le_bytes());
                attr(&mut mp, nl::RTA_GATEWAY, g);
            }
            attr(&mut b, nl::RTA_MULTIPATH, &mp);
        }
        let (kind, flags) = if add {
            (nl::RTM_NEWROUTE, 0x0501)
        } else {
            (nl::RTM_DELROUTE, 0x0001)
        };
        nlmsg(kind, flags, &b)
    }

    /// A next-hop object: a single gateway, or a group of other objects.
    pub fn nexthop(add: bool, id: u32, gateway: Option<IpAddr>, group: &[u32]) -> Vec<u8> {
        let family = match gateway {
            Some(IpAddr::V6(_)) => nl::AF_INET6,
            _ => nl::AF_INET,
        };
        let mut b = vec![family, 0, 11, 0, 0, 0, 0, 0];
        attr(&mut b, nl::NHA_ID, &id.to_le_bytes());
        if let Some(g) = gateway {
            match g {
                IpAddr::V4(g) => attr(&mut b, nl::NHA_GATEWAY, &g.octets()),
                IpAddr::V6(g) => attr(&mut b, nl::NHA_GATEWAY, &g.octets()),
            }
            attr(&mut b, nl::NHA_OIF, &3u32.to_le_bytes());
        }
        if !group.is_empty() {
            let mut v = Vec::new();
            for m in group {
                v.extend_from_slice(&m.to_le_bytes());
                v.extend_from_slice(&[0; 4]);
            }
            attr(&mut b, nl::NHA_GROUP, &v);
        }
        let (kind, flags) = if add {
            (nl::RTM_NEWNEXTHOP, 0x0501)
        } else {
            (nl::RTM_DELNEXTHOP, 0x0001)
        };
        nlmsg(kind, flags, &b)
    }

    /// One FPM frame around netlink messages.
    pub fn frame(messages: &[Vec<u8>]) -> Vec<u8> {
        let len = FPM_HEADER_LEN + messages.iter().map(|m| align4(m.len())).sum::<usize>();
        let mut f = vec![FPM_VERSION, FPM_NETLINK];
        f.extend_from_slice(&(len as u16).to_be_bytes());
        for m in messages {
            f.extend_from_slice(m);
            while f.len() % 4 != 0 {
                f.push(0);
            }
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What zebra 8.4 (`dplane_fpm_nl`, defaults) sent, captured in the lab, for static
    /// routes 192.0.2.0/24 via 10.9.0.2 and 198.51.100.0/24 via 10.9.0.2 and 10.9.0.3 on a
    /// connected 10.9.0.0/24: next-hop objects (IPv4, IPv6, a group) first, then routes by
    /// next-hop id, one netlink message per FPM frame.
    const CAPTURED: [&str; 10] = [
        "010100343000000068000105000000000e40c2ac02000b00000000000800010008000000080006000a0900030800050003000000",
        "0101002c2800000068000105000000000e40c2ac0a000b0000000000080001000a0000000800050002000000",
        "0101002c2800000068000105000000000e40c2ac02000b000000000008000100020000000800050003000000",
        "0101002c2800000068000105000000000e40c2ac0a000b0000000000080001000c0000000800050003000000",
        "010100343000000068000105000000000e40c2ac02000b00000000000800010006000000080006000a0900020800050003000000",
        "010100383400000068000105000000000e40c2ac00000b000000000008000100070000001400020006000000000000000800000000000000",
        "010100383400000018000105000000000e40c2ac02180000fe02000100000000080001000a090000080006001400000008001e0002000000",
        "010100383400000018000105000000000e40c2ac02180000fec400010000000008000100c0000200080006001400000008001e0006000000",
        "010100383400000018000105000000000e40c2ac02180000fec400010000000008000100c6336400080006001400000008001e0007000000",
        "010100444000000018000104000000000e40c2ac0a400000fe0200010000000014000100fe800000000000000000000000000000080006001400000008001e000a000000",
    ];

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn all(stream: &[u8]) -> Vec<Message> {
        let mut out = Vec::new();
        let mut at = 0;
        while let Some((len, payload)) = split_frame(&stream[at..]).unwrap() {
            out.extend(messages(payload).unwrap());
            at += len;
        }
        assert_eq!(at, stream.len());
        out
    }

    #[test]
    fn reads_what_zebra_sent() {
        let m = all(&hex(&CAPTURED.concat()));
        assert_eq!(m.len(), 10);
        assert_eq!(
            m[0],
            Message::Nexthop(Nexthop {
                add: true,
                id: 8,
                family: Family::Ipv4,
                gateway: Some(Ipv4Addr::new(10, 9, 0, 3).into()),
                ifindex: 3,
                group: vec![],
                blackhole: false,
            })
        );
        assert!(matches!(&m[1], Message::Nexthop(n) if n.family == Family::Ipv6 && n.id == 10));
        assert!(matches!(&m[5], Message::Nexthop(n) if n.id == 7 && n.group == vec![6, 8]));
        let Message::Route(r) = &m[6] else { panic!() };
        assert_eq!(
            (r.dst, r.protocol, &r.via),
            (Ipv4Addr::new(10, 9, 0, 0).into(), 2, &RouteVia::Object(2))
        );
        let Message::Route(r) = &m[7] else {
            panic!("{:?}", m[7])
        };
        assert_eq!(
            (r.add, r.family, r.dst, r.dst_len, r.table, r.protocol, r.metric, &r.via),
            (
                true,
                Family::Ipv4,
                IpAddr::from(Ipv4Addr::new(192, 0, 2, 0)),
                24,
                254,
                196,
                20,
                &RouteVia::Object(6)
            )
        );
        let Message::Route(r) = &m[8] else { panic!() };
        assert_eq!(
            (r.dst, r.via.clone()),
            (Ipv4Addr::new(198, 51, 100, 0).into(), RouteVia::Object(7))
        );
        assert!(matches!(&m[9], Message::Route(r) if r.family == Family::Ipv6 && r.dst_len == 64));
        // zebra's IPv6 route and next hop, read whole.
        let Message::Route(r) = &m[9] else { panic!() };
        assert!(r.dst.is_ipv6(), "{r:?}");
        let Message::Nexthop(n) = &m[1] else { panic!() };
        assert!(n.gateway.is_none_or(|g| g.is_ipv6()), "{n:?}");
    }

    #[test]
    fn ipv6_builders_round_trip() {
        let g = |s: &str| -> Ipv6Addr { s.parse().unwrap() };
        let f = build::frame(&[
            build::nexthop(true, 9, Some(g("2001:db8:2::9").into()), &[]),
            build::route6(true, g("2001:db8:99::"), 48, &[g("2001:db8:2::9")], None),
            build::route6(
                true,
                g("2001:db8:98::"),
                48,
                &[g("2001:db8:1::5"), g("2001:db8:2::5")],
                None,
            ),
            build::route6(true, g("2001:db8:97::"), 64, &[], Some(9)),
            build::route6(false, g("2001:db8:99::"), 48, &[], None),
        ]);
        let m = all(&f);
        assert_eq!(m.len(), 5);
        let Message::Nexthop(n) = &m[0] else { panic!() };
        assert_eq!(
            (n.family, n.gateway),
            (Family::Ipv6, Some(g("2001:db8:2::9").into()))
        );
        let Message::Route(r) = &m[1] else { panic!() };
        assert_eq!(
            (r.add, r.family, r.dst, r.dst_len, &r.via),
            (
                true,
                Family::Ipv6,
                IpAddr::from(g("2001:db8:99::")),
                48,
                &RouteVia::Inline {
                    gateways: vec![g("2001:db8:2::9").into()],
                    ifindexes: vec![2],
                    direct: 0
                }
            )
        );
        let Message::Route(r) = &m[2] else { panic!() };
        assert_eq!(
            r.via,
            RouteVia::Inline {
                gateways: vec![g("2001:db8:1::5").into(), g("2001:db8:2::5").into()],
                ifindexes: vec![2, 2],
                direct: 0
            }
        );
        assert!(matches!(&m[3], Message::Route(r) if r.via == RouteVia::Object(9)));
        assert!(matches!(&m[4], Message::Route(r) if !r.add && r.dst_len == 48));
    }

    /// Link-local gateways come with their interfaces: `RTA_OIF` beside `RTA_GATEWAY`
    /// (either order), each multipath hop's `rtnh_ifindex`, a next-hop object's `NHA_OIF`.
    #[test]
    fn gateways_come_with_their_interfaces() {
        let g = |s: &str| -> Ipv6Addr { s.parse().unwrap() };
        let f = build::frame(&[
            build::route6_on(true, g("2001:db8:99::"), 48, &[(g("fe80::b1"), 7)]),
            build::route6_on(
                true,
                g("2001:db8:98::"),
                48,
                &[(g("fe80::b1"), 7), (g("fe80::a1"), 9)],
            ),
        ]);
        let m = all(&f);
        let via = |i: usize| match &m[i] {
            Message::Route(r) => r.via.clone(),
            o => panic!("{o:?}"),
        };
        assert_eq!(
            via(0),
            RouteVia::Inline {
                gateways: vec![g("fe80::b1").into()],
                ifindexes: vec![7],
                direct: 0
            }
        );
        assert_eq!(
            via(1),
            RouteVia::Inline {
                gateways: vec![g("fe80::b1").into(), g("fe80::a1").into()],
                ifindexes: vec![7, 9],
                direct: 0
            }
        );
        // RTA_OIF before RTA_GATEWAY.
        let mut b = vec![
            nl::AF_INET6,
            48,
            0,
            0,
            254,
            196,
            0,
            nl::RTN_UNICAST,
            0,
            0,
            0,
            0,
        ];
        for (t, v) in [
            (nl::RTA_DST, g("2001:db8:97::").octets().to_vec()),
            (nl::RTA_OIF, 5u32.to_le_bytes().to_vec()),
            (nl::RTA_GATEWAY, g("fe80::c1").octets().to_vec()),
        ] {
            b.extend_from_slice(&(4 + v.len() as u16).to_le_bytes());
            b.extend_from_slice(&t.to_le_bytes());
            b.extend_from_slice(&v);
        }
        let r = route(&b, 0, true).unwrap();
        assert_eq!(
            r.via,
            RouteVia::Inline {
                gateways: vec![g("fe80::c1").into()],
                ifindexes: vec![5],
                direct: 0
            }
        );
        let n = all(&build::frame(&[build::nexthop(
            true,
            4,
            Some(g("fe80::b1").into()),
            &[],
        )]));
        assert!(matches!(&n[0], Message::Nexthop(n) if n.ifindex == 3));
    }

    #[test]
    fn builders_round_trip() {
        let g = |d| Ipv4Addr::new(10, 1, 0, d);
        let f = build::frame(&[
            build::nexthop(true, 5, Some(g(2).into()), &[]),
            build::nexthop(true, 6, None, &[5, 7]),
            build::route(false, Ipv4Addr::new(192, 0, 2, 0), 24, &[], None),
            build::route(true, Ipv4Addr::new(192, 0, 2, 0), 24, &[g(2), g(3)], None),
            build::route(true, Ipv4Addr::new(203, 0, 113, 0), 25, &[g(4)], None),
            build::route(true, Ipv4Addr::new(198, 51, 100, 0), 24, &[], Some(6)),
        ]);
        let m = all(&f);
        assert_eq!(m.len(), 6);
        assert!(
            matches!(&m[1], Message::Nexthop(n) if n.group == vec![5, 7] && n.gateway.is_none())
        );
        assert!(matches!(&m[2], Message::Route(r) if !r.add && r.dst_len == 24));
        assert!(
            matches!(&m[3], Message::Route(r) if r.via == RouteVia::Inline { gateways: vec![g(2).into(), g(3).into()], ifindexes: vec![2, 2], direct: 0 })
        );
        assert!(
            matches!(&m[4], Message::Route(r) if r.via == RouteVia::Inline { gateways: vec![g(4).into()], ifindexes: vec![2], direct: 0 } && r.dst_len == 25)
        );
        // A stream cut anywhere waits for the rest.
        for cut in 0..f.len() {
            assert_eq!(split_frame(&f[..cut]).unwrap(), None);
        }
    }

    #[test]
    fn rejects_what_is_wrong() {
        assert!(matches!(
            split_frame(&[2, 1, 0, 8]),
            Err(Error::BadHeader { .. })
        ));
        assert!(matches!(
            split_frame(&[1, 1, 0, 2]),
            Err(Error::BadLength(2))
        ));
        let mut m = build::route(
            true,
            Ipv4Addr::new(192, 0, 2, 0),
            24,
            &[Ipv4Addr::LOCALHOST],
            None,
        );
        m[0] = 200; // netlink length past the payload
        assert!(matches!(messages(&m), Err(Error::BadNetlinkLength { .. })));
        let mut m = build::route(true, Ipv4Addr::new(192, 0, 2, 0), 24, &[], None);
        m[NLMSG_HEADER_LEN + 1] = 33;
        assert!(matches!(
            messages(&m),
            Err(Error::BadField {
                field: "rtm_dst_len",
                ..
            })
        ));
        let mut m = build::route(true, Ipv4Addr::new(192, 0, 2, 0), 24, &[], None);
        m[NLMSG_HEADER_LEN + RTMSG_LEN] = 2; // attribute length below its header
        assert!(matches!(messages(&m), Err(Error::BadNetlinkLength { .. })));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = messages(&b);
            let _ = split_frame(&b);
        }
    }
}
