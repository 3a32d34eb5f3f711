//! ICMPv6 (RFC 4443) and Neighbor Discovery (RFC 4861): router solicitation and
//! advertisement, neighbor solicitation and advertisement, with their options.
//!
//! ```text
//!  0      1      2          4
//!  | type | code | checksum | message body ...
//! ```
//!
//! The checksum covers the IPv6 pseudo header, so verifying and emitting take the
//! addresses. ND options are parsed strictly: an option of length zero, or one that runs
//! past the message, is an error (RFC 4861 4.6 says to discard such a packet).

use crate::checksum;
use crate::ipv6::next_header;
use crate::{be16, be32, need, put16, MacAddr, Truncated};
use std::net::Ipv6Addr;

pub const HEADER_LEN: usize = 4;

/// Message types.
pub mod kind {
    pub const DST_UNREACHABLE: u8 = 1;
    pub const PACKET_TOO_BIG: u8 = 2;
    pub const TIME_EXCEEDED: u8 = 3;
    pub const PARAM_PROBLEM: u8 = 4;
    pub const ECHO_REQUEST: u8 = 128;
    pub const ECHO_REPLY: u8 = 129;
    pub const ROUTER_SOLICIT: u8 = 133;
    pub const ROUTER_ADVERT: u8 = 134;
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    pub const NEIGHBOR_ADVERT: u8 = 136;
    pub const REDIRECT: u8 = 137;
}

/// Codes of destination unreachable.
pub mod unreachable {
    pub const NO_ROUTE: u8 = 0;
    pub const ADMIN: u8 = 1;
    pub const BEYOND_SCOPE: u8 = 2;
    pub const ADDRESS: u8 = 3;
    pub const PORT: u8 = 4;
}

/// Codes of time exceeded.
pub mod time_exceeded {
    pub const HOP_LIMIT: u8 = 0;
    pub const REASSEMBLY: u8 = 1;
}

/// Codes of parameter problem.
pub mod param_problem {
    pub const HEADER_FIELD: u8 = 0;
    pub const NEXT_HEADER: u8 = 1;
    pub const OPTION: u8 = 2;
}

/// ND option types.
pub mod option {
    pub const SOURCE_LLADDR: u8 = 1;
    pub const TARGET_LLADDR: u8 = 2;
    pub const PREFIX_INFO: u8 = 3;
    pub const MTU: u8 = 5;
}

/// True for error messages (types 0 to 127, RFC 4443 2.1): no ICMPv6 error is ever sent
/// about one (RFC 4443 2.4 e.1).
pub fn is_error(msg_type: u8) -> bool {
    msg_type < 128
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    Truncated(Truncated),
    /// An ND option of length zero or running past the message, at this offset.
    BadOption(usize),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated(t) => write!(f, "icmpv6: {t}"),
            Error::BadOption(at) => write!(f, "icmpv6: bad ND option at byte {at}"),
        }
    }
}

/// A view of an ICMPv6 message (the upper layer of an IPv6 packet).
#[derive(Debug, Clone, Copy)]
pub struct Packet<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_checked(buf: T) -> Result<Self, Error> {
        need(buf.as_ref(), HEADER_LEN).map_err(Error::Truncated)?;
        Ok(Packet { buf })
    }

    pub fn msg_type(&self) -> u8 {
        self.buf.as_ref()[0]
    }

    pub fn code(&self) -> u8 {
        self.buf.as_ref()[1]
    }

    pub fn checksum(&self) -> u16 {
        be16(self.buf.as_ref(), 2)
    }

    /// The message after type, code and checksum.
    pub fn body(&self) -> &[u8] {
        &self.buf.as_ref()[HEADER_LEN..]
    }

    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        let b = self.buf.as_ref();
        let s = checksum::pseudo_header6(src, dst, next_header::ICMPV6, b.len() as u32)
            + checksum::sum(b);
        checksum::fold(s) == 0xffff
    }
}

/// A prefix information option (RFC 4861 4.6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixInfo {
    pub prefix: Ipv6Addr,
    pub len: u8,
    pub on_link: bool,
    pub autonomous: bool,
    pub valid_lifetime: u32,
    pub preferred_lifetime: u32,
}

/// The ND options this project reads and writes. Others are skipped; of several prefix
/// information options the first is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NdOptions {
    pub source_lladdr: Option<MacAddr>,
    pub target_lladdr: Option<MacAddr>,
    pub mtu: Option<u32>,
    pub prefix: Option<PrefixInfo>,
}

impl NdOptions {
    /// Parses the options in `b`, which starts `at` bytes into the message (for errors).
    pub fn parse(b: &[u8], at: usize) -> Result<NdOptions, Error> {
        let mut o = NdOptions::default();
        let mut i = 0;
        while i < b.len() {
            let len = *b.get(i + 1).ok_or(Error::BadOption(at + i))? as usize * 8;
            if len == 0 || i + len > b.len() {
                return Err(Error::BadOption(at + i));
            }
            let v = &b[i..i + len];
            match v[0] {
                option::SOURCE_LLADDR | option::TARGET_LLADDR if len == 8 => {
                    let m = MacAddr([v[2], v[3], v[4], v[5], v[6], v[7]]);
                    if v[0] == option::SOURCE_LLADDR {
                        o.source_lladdr = Some(m);
                    } else {
                        o.target_lladdr = Some(m);
                    }
                }
                option::MTU if len == 8 => o.mtu = Some(be32(v, 4)),
                option::PREFIX_INFO if len == 32 && o.prefix.is_none() => {
                    let mut p = [0u8; 16];
                    p.copy_from_slice(&v[16..32]);
                    o.prefix = Some(PrefixInfo {
                        prefix: Ipv6Addr::from(p),
                        len: v[2],
                        on_link: v[3] & 0x80 != 0,
                        autonomous: v[3] & 0x40 != 0,
                        valid_lifetime: be32(v, 4),
                        preferred_lifetime: be32(v, 8),
                    });
                }
                _ => {}
            }
            i += len;
        }
        Ok(o)
    }

    pub fn buffer_len(&self) -> usize {
        8 * (self.source_lladdr.is_some() as usize
            + self.target_lladdr.is_some() as usize
            + self.mtu.is_some() as usize)
            + 32 * self.prefix.is_some() as usize
    }

    fn emit(&self, b: &mut [u8]) {
        let mut i = 0;
        for (t, m) in [
            (option::SOURCE_LLADDR, self.source_lladdr),
            (option::TARGET_LLADDR, self.target_lladdr),
        ] {
            if let Some(m) = m {
                b[i] = t;
                b[i + 1] = 1;
                b[i + 2..i + 8].copy_from_slice(&m.0);
                i += 8;
            }
        }
        if let Some(mtu) = self.mtu {
            b[i..i + 4].copy_from_slice(&[option::MTU, 1, 0, 0]);
            b[i + 4..i + 8].copy_from_slice(&mtu.to_be_bytes());
            i += 8;
        }
        if let Some(p) = self.prefix {
            b[i] = option::PREFIX_INFO;
            b[i + 1] = 4;
            b[i + 2] = p.len;
            b[i + 3] = (p.on_link as u8) << 7 | (p.autonomous as u8) << 6;
            b[i + 4..i + 8].copy_from_slice(&p.valid_lifetime.to_be_bytes());
            b[i + 8..i + 12].copy_from_slice(&p.preferred_lifetime.to_be_bytes());
            b[i + 12..i + 16].fill(0);
            b[i + 16..i + 32].copy_from_slice(&p.prefix.octets());
        }
    }
}

/// An ICMPv6 message to emit or as parsed. `data` is the echo payload, or the quoted
/// packet of an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repr<'a> {
    EchoRequest {
        ident: u16,
        seq: u16,
        data: &'a [u8],
    },
    EchoReply {
        ident: u16,
        seq: u16,
        data: &'a [u8],
    },
    DstUnreachable {
        code: u8,
        data: &'a [u8],
    },
    PacketTooBig {
        mtu: u32,
        data: &'a [u8],
    },
    TimeExceeded {
        code: u8,
        data: &'a [u8],
    },
    ParamProblem {
        code: u8,
        pointer: u32,
        data: &'a [u8],
    },
    RouterSolicit {
        options: NdOptions,
    },
    RouterAdvert {
        hop_limit: u8,
        managed: bool,
        other: bool,
        router_lifetime: u16,
        reachable_time: u32,
        retrans_timer: u32,
        options: NdOptions,
    },
    NeighborSolicit {
        target: Ipv6Addr,
        options: NdOptions,
    },
    NeighborAdvert {
        router: bool,
        solicited: bool,
        override_: bool,
        target: Ipv6Addr,
        options: NdOptions,
    },
    Other {
        msg_type: u8,
        code: u8,
        body: &'a [u8],
    },
}

fn addr_at(b: &[u8], at: usize) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[at..at + 16]);
    Ipv6Addr::from(a)
}

impl<'a> Repr<'a> {
    /// Parses a message. ND messages with code 0 and their fixed part are parsed with
    /// their options; shorter ones, or other codes, are `Other` (RFC 4861 says to drop
    /// them; the caller decides).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &'a Packet<&'a T>) -> Result<Repr<'a>, Error> {
        let b: &'a [u8] = p.buf.as_ref();
        let body = &b[HEADER_LEN..];
        let w = |at: usize| body.get(at..at + 4).map(|_| be32(body, at));
        let (t, c) = (p.msg_type(), p.code());
        Ok(match (t, c) {
            (kind::ECHO_REQUEST | kind::ECHO_REPLY, 0) if body.len() >= 4 => {
                let (ident, seq, data) = (be16(body, 0), be16(body, 2), &body[4..]);
                if t == kind::ECHO_REQUEST {
                    Repr::EchoRequest { ident, seq, data }
                } else {
                    Repr::EchoReply { ident, seq, data }
                }
            }
            (kind::DST_UNREACHABLE, code) if body.len() >= 4 => Repr::DstUnreachable {
                code,
                data: &body[4..],
            },
            (kind::PACKET_TOO_BIG, 0) if body.len() >= 4 => Repr::PacketTooBig {
                mtu: be32(body, 0),
                data: &body[4..],
            },
            (kind::TIME_EXCEEDED, code) if body.len() >= 4 => Repr::TimeExceeded {
                code,
                data: &body[4..],
            },
            (kind::PARAM_PROBLEM, code) if body.len() >= 4 => Repr::ParamProblem {
                code,
                pointer: be32(body, 0),
                data: &body[4..],
            },
            (kind::ROUTER_SOLICIT, 0) if body.len() >= 4 => Repr::RouterSolicit {
                options: NdOptions::parse(&body[4..], 8)?,
            },
            (kind::ROUTER_ADVERT, 0) if body.len() >= 12 => Repr::RouterAdvert {
                hop_limit: body[0],
                managed: body[1] & 0x80 != 0,
                other: body[1] & 0x40 != 0,
                router_lifetime: be16(body, 2),
                reachable_time: w(4).unwrap_or(0),
                retrans_timer: w(8).unwrap_or(0),
                options: NdOptions::parse(&body[12..], 16)?,
            },
            (kind::NEIGHBOR_SOLICIT, 0) if body.len() >= 20 => Repr::NeighborSolicit {
                target: addr_at(body, 4),
                options: NdOptions::parse(&body[20..], 24)?,
            },
            (kind::NEIGHBOR_ADVERT, 0) if body.len() >= 20 => Repr::NeighborAdvert {
                router: body[0] & 0x80 != 0,
                solicited: body[0] & 0x40 != 0,
                override_: body[0] & 0x20 != 0,
                target: addr_at(body, 4),
                options: NdOptions::parse(&body[20..], 24)?,
            },
            (msg_type, code) => Repr::Other {
                msg_type,
                code,
                body,
            },
        })
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
            + match self {
                Repr::EchoRequest { data, .. }
                | Repr::EchoReply { data, .. }
                | Repr::DstUnreachable { data, .. }
                | Repr::PacketTooBig { data, .. }
                | Repr::TimeExceeded { data, .. }
                | Repr::ParamProblem { data, .. } => 4 + data.len(),
                Repr::RouterSolicit { options } => 4 + options.buffer_len(),
                Repr::RouterAdvert { options, .. } => 12 + options.buffer_len(),
                Repr::NeighborSolicit { options, .. } | Repr::NeighborAdvert { options, .. } => {
                    20 + options.buffer_len()
                }
                Repr::Other { body, .. } => body.len(),
            }
    }

    /// Writes the message into the start of `buf`, with its checksum for `src` and `dst`.
    pub fn emit(&self, buf: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr) -> Result<(), Error> {
        let len = self.buffer_len();
        need(buf, len).map_err(Error::Truncated)?;
        let b = &mut buf[..len];
        b.fill(0);
        let (t, c) = match *self {
            Repr::EchoRequest { ident, seq, data } | Repr::EchoReply { ident, seq, data } => {
                put16(b, 4, ident);
                put16(b, 6, seq);
                b[8..].copy_from_slice(data);
                let t = if matches!(self, Repr::EchoRequest { .. }) {
                    kind::ECHO_REQUEST
                } else {
                    kind::ECHO_REPLY
                };
                (t, 0)
            }
            Repr::DstUnreachable { code, data } => {
                b[8..].copy_from_slice(data);
                (kind::DST_UNREACHABLE, code)
            }
            Repr::PacketTooBig { mtu, data } => {
                b[4..8].copy_from_slice(&mtu.to_be_bytes());
                b[8..].copy_from_slice(data);
                (kind::PACKET_TOO_BIG, 0)
            }
            Repr::TimeExceeded { code, data } => {
                b[8..].copy_from_slice(data);
                (kind::TIME_EXCEEDED, code)
            }
            Repr::ParamProblem {
                code,
                pointer,
                data,
            } => {
                b[4..8].copy_from_slice(&pointer.to_be_bytes());
                b[8..].copy_from_slice(data);
                (kind::PARAM_PROBLEM, code)
            }
            Repr::RouterSolicit { options } => {
                options.emit(&mut b[8..]);
                (kind::ROUTER_SOLICIT, 0)
            }
            Repr::RouterAdvert {
                hop_limit,
                managed,
                other,
                router_lifetime,
                reachable_time,
                retrans_timer,
                options,
            } => {
                b[4] = hop_limit;
                b[5] = (managed as u8) << 7 | (other as u8) << 6;
                put16(b, 6, router_lifetime);
                b[8..12].copy_from_slice(&reachable_time.to_be_bytes());
                b[12..16].copy_from_slice(&retrans_timer.to_be_bytes());
                options.emit(&mut b[16..]);
                (kind::ROUTER_ADVERT, 0)
            }
            Repr::NeighborSolicit { target, options } => {
                b[8..24].copy_from_slice(&target.octets());
                options.emit(&mut b[24..]);
                (kind::NEIGHBOR_SOLICIT, 0)
            }
            Repr::NeighborAdvert {
                router,
                solicited,
                override_,
                target,
                options,
            } => {
                b[4] = (router as u8) << 7 | (solicited as u8) << 6 | (override_ as u8) << 5;
                b[8..24].copy_from_slice(&target.octets());
                options.emit(&mut b[24..]);
                (kind::NEIGHBOR_ADVERT, 0)
            }
            Repr::Other {
                msg_type,
                code,
                body,
            } => {
                b[4..].copy_from_slice(body);
                (msg_type, code)
            }
        };
        b[0] = t;
        b[1] = c;
        let s =
            checksum::pseudo_header6(src, dst, next_header::ICMPV6, len as u32) + checksum::sum(b);
        put16(b, 2, !checksum::fold(s));
        Ok(())
    }
}

/// An ICMPv6 error to originate about a received packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Unreachable(u8),
    PacketTooBig(u32),
    TimeExceeded(u8),
    ParamProblem { code: u8, pointer: u32 },
}

/// Why no error may be sent about a packet (RFC 4443 2.4 (e)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suppressed {
    /// The packet is itself an ICMPv6 error, or a redirect (e.1, e.2).
    AboutError,
    /// Sent to an IPv6 multicast address, or as a link-layer multicast or broadcast
    /// (e.3 to e.5), and the error is not one of the two that may answer those.
    Multicast,
    /// The source does not name one node: unspecified, multicast or loopback (e.6).
    Source,
    /// The packet is not an IPv6 packet whose header can be read.
    Malformed,
}

/// Whether an error of `kind` may be sent about `packet` (an IPv6 packet as received),
/// `l2_group` if it came in a link-layer multicast or broadcast frame. Packet too big
/// and parameter problem code 2 about an option whose type says "report even if
/// multicast" (high bits 10) may answer a multicast (RFC 4443 2.4 (e.3)). A non-first
/// fragment's upper layer is unknown and is not taken for an ICMPv6 error.
/// The all-nodes group.
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// A router's answer to a neighbor solicitation for its address `target` (RFC 4861 7.2.4):
/// a solicited advertisement with the router flag and `mac`, to the soliciting address at
/// the MAC it gave (`source_lladdr`, else the frame's source `frame_src`), or unsolicited
/// to all-nodes when it came from the unspecified address. Returns the destination, its
/// MAC and the message.
pub fn answer_solicit(
    src: Ipv6Addr,
    source_lladdr: Option<MacAddr>,
    frame_src: MacAddr,
    target: Ipv6Addr,
    mac: MacAddr,
) -> (Ipv6Addr, MacAddr, Repr<'static>) {
    let unspecified = src.is_unspecified();
    let (to, to_mac) = if unspecified {
        (ALL_NODES, crate::ipv6::multicast_mac(ALL_NODES))
    } else {
        (src, source_lladdr.unwrap_or(frame_src))
    };
    let na = Repr::NeighborAdvert {
        router: true,
        solicited: !unspecified,
        override_: true,
        target,
        options: NdOptions {
            target_lladdr: Some(mac),
            ..NdOptions::default()
        },
    };
    (to, to_mac, na)
}

pub fn error_allowed(packet: &[u8], kind: ErrorKind, l2_group: bool) -> Result<(), Suppressed> {
    let p = crate::ipv6::Packet::new_checked(packet).map_err(|_| Suppressed::Malformed)?;
    let src = p.src();
    if src.is_unspecified() || src.is_multicast() || src.is_loopback() {
        return Err(Suppressed::Source);
    }
    let multicast_ok = match kind {
        ErrorKind::PacketTooBig(_) => true,
        ErrorKind::ParamProblem {
            code: param_problem::OPTION,
            pointer,
        } => packet.get(pointer as usize).is_some_and(|t| t >> 6 == 0b10),
        _ => false,
    };
    if (p.dst().is_multicast() || l2_group) && !multicast_ok {
        return Err(Suppressed::Multicast);
    }
    if let Ok(u) = p.upper() {
        let first = u.fragment.is_none_or(|f| f.offset == 0);
        if u.protocol == next_header::ICMPV6 && first {
            let t = packet.get(u.offset).copied();
            if t.is_none_or(|t| is_error(t) || t == kind::REDIRECT) {
                return Err(Suppressed::AboutError);
            }
        }
    }
    Ok(())
}

/// The IPv6 packet of an ICMPv6 error of `kind` about `packet`, from `src` to the
/// packet's source, quoting as much of it as keeps the error within the minimum IPv6 MTU
/// (RFC 4443 2.4 (c)). Call [`error_allowed`] first. `None` if `packet` is not a
/// readable IPv6 packet.
pub fn build_error(
    packet: &[u8],
    kind: ErrorKind,
    src: Ipv6Addr,
    hop_limit: u8,
) -> Option<Vec<u8>> {
    use crate::ipv6;
    let p = ipv6::Packet::new_checked(packet).ok()?;
    let dst = p.src();
    let room = ipv6::MIN_MTU - ipv6::HEADER_LEN - HEADER_LEN - 4;
    let data = &p.packet()[..p.total_len().min(room)];
    let msg = match kind {
        ErrorKind::Unreachable(code) => Repr::DstUnreachable { code, data },
        ErrorKind::PacketTooBig(mtu) => Repr::PacketTooBig { mtu, data },
        ErrorKind::TimeExceeded(code) => Repr::TimeExceeded { code, data },
        ErrorKind::ParamProblem { code, pointer } => Repr::ParamProblem {
            code,
            pointer,
            data,
        },
    };
    let mut out = vec![0u8; ipv6::HEADER_LEN + msg.buffer_len()];
    emit_packet(&mut out, src, dst, hop_limit, &msg).ok()?;
    Some(out)
}

/// Writes an IPv6 packet from `src` to `dst` carrying `msg` into the start of `buf`
/// (which needs 40 bytes and the message's [`Repr::buffer_len`]).
pub fn emit_packet(
    buf: &mut [u8],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    msg: &Repr,
) -> Result<(), Error> {
    use crate::ipv6;
    let ip = ipv6::Repr {
        src,
        dst,
        next_header: next_header::ICMPV6,
        hop_limit,
        traffic_class: 0,
        flow_label: 0,
        payload_len: msg.buffer_len(),
    };
    need(buf, ip.buffer_len()).map_err(Error::Truncated)?;
    ip.emit(buf).map_err(|_| {
        Error::Truncated(Truncated {
            need: ip.buffer_len(),
            have: buf.len(),
        })
    })?;
    msg.emit(&mut buf[ipv6::HEADER_LEN..], src, dst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn a(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    fn roundtrip(r: Repr) {
        let (src, dst) = (a("fe80::1"), a("ff02::1:ff00:2"));
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b, src, dst).unwrap();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum(src, dst));
        assert!(
            !p.verify_checksum(src, a("ff02::2")),
            "the pseudo header counts"
        );
        assert_eq!(Repr::parse(&p).unwrap(), r);
    }

    #[test]
    fn nd_messages_roundtrip() {
        let mac = MacAddr([2, 0, 0, 0, 0, 1]);
        roundtrip(Repr::NeighborSolicit {
            target: a("2001:db8::2"),
            options: NdOptions {
                source_lladdr: Some(mac),
                ..Default::default()
            },
        });
        roundtrip(Repr::NeighborAdvert {
            router: true,
            solicited: true,
            override_: false,
            target: a("2001:db8::1"),
            options: NdOptions {
                target_lladdr: Some(mac),
                ..Default::default()
            },
        });
        roundtrip(Repr::RouterSolicit {
            options: NdOptions::default(),
        });
        roundtrip(Repr::RouterAdvert {
            hop_limit: 64,
            managed: false,
            other: true,
            router_lifetime: 1800,
            reachable_time: 0,
            retrans_timer: 0,
            options: NdOptions {
                source_lladdr: Some(mac),
                mtu: Some(1500),
                prefix: Some(PrefixInfo {
                    prefix: a("2001:db8:1::"),
                    len: 64,
                    on_link: true,
                    autonomous: true,
                    valid_lifetime: 86400,
                    preferred_lifetime: 14400,
                }),
                ..Default::default()
            },
        });
        roundtrip(Repr::PacketTooBig {
            mtu: 1280,
            data: &[0x60; 48],
        });
        roundtrip(Repr::ParamProblem {
            code: param_problem::NEXT_HEADER,
            pointer: 40,
            data: &[0x60; 48],
        });
    }

    #[test]
    fn bad_options_are_errors() {
        // A neighbor solicitation whose option says length 0.
        let mut b = [0u8; 32];
        b[0] = kind::NEIGHBOR_SOLICIT;
        b[24] = option::SOURCE_LLADDR;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p), Err(Error::BadOption(24)));
        // One that runs past the end.
        b[25] = 2;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p), Err(Error::BadOption(24)));
        assert!(is_error(kind::TIME_EXCEEDED) && !is_error(kind::ECHO_REQUEST));
    }

    fn offending(src: &str, dst: &str, next: u8, upper: &[u8], len: usize) -> Vec<u8> {
        let r = crate::ipv6::Repr {
            src: a(src),
            dst: a(dst),
            next_header: next,
            hop_limit: 1,
            traffic_class: 0,
            flow_label: 0,
            payload_len: len,
        };
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b).unwrap();
        b[40..40 + upper.len()].copy_from_slice(upper);
        b
    }

    #[test]
    fn error_rules_of_rfc_4443() {
        use crate::ipv6::next_header::{DST_OPTS, UDP};
        let te = ErrorKind::TimeExceeded(time_exceeded::HOP_LIMIT);
        let ptb = ErrorKind::PacketTooBig(1280);
        let udp = offending("2001:db8::1", "2001:db8:1::1", UDP, &[0; 8], 8);
        assert_eq!(error_allowed(&udp, te, false), Ok(()));
        assert_eq!(error_allowed(&udp, te, true), Err(Suppressed::Multicast));
        assert_eq!(error_allowed(&udp, ptb, true), Ok(()));
        // About an ICMPv6 error or a redirect: never; about an echo request: yes.
        for (t, want) in [
            (kind::TIME_EXCEEDED, Err(Suppressed::AboutError)),
            (kind::REDIRECT, Err(Suppressed::AboutError)),
            (kind::ECHO_REQUEST, Ok(())),
        ] {
            let p = offending(
                "2001:db8::1",
                "2001:db8:1::1",
                next_header::ICMPV6,
                &[t, 0, 0, 0],
                8,
            );
            assert_eq!(error_allowed(&p, te, false), want, "type {t}");
        }
        // To a multicast group; from the unspecified, a multicast or the loopback address.
        let m = offending("2001:db8::1", "ff0e::1", UDP, &[0; 8], 8);
        assert_eq!(error_allowed(&m, te, false), Err(Suppressed::Multicast));
        assert_eq!(error_allowed(&m, ptb, false), Ok(()));
        for s in ["::", "ff02::1", "::1"] {
            let p = offending(s, "2001:db8:1::1", UDP, &[0; 8], 8);
            assert_eq!(error_allowed(&p, te, false), Err(Suppressed::Source), "{s}");
        }
        // Parameter problem about an unknown option: to a multicast only if its type's
        // high bits are 10.
        let mut opt = vec![UDP, 0, 0x80, 4, 0, 0, 0, 0];
        let pp = ErrorKind::ParamProblem {
            code: param_problem::OPTION,
            pointer: 42,
        };
        let p = offending("2001:db8::1", "ff0e::1", DST_OPTS, &opt, 16);
        assert_eq!(error_allowed(&p, pp, false), Ok(()));
        opt[2] = 0xc0;
        let p = offending("2001:db8::1", "ff0e::1", DST_OPTS, &opt, 16);
        assert_eq!(error_allowed(&p, pp, false), Err(Suppressed::Multicast));
        assert_eq!(
            error_allowed(&[0x60; 10], te, false),
            Err(Suppressed::Malformed)
        );
    }

    #[test]
    fn errors_quote_within_the_minimum_mtu() {
        let big = offending("2001:db8::1", "2001:db8:1::1", 17, &[0; 8], 1400);
        let from = a("2001:db8::fe");
        let e = build_error(&big, ErrorKind::PacketTooBig(1400), from, 64).unwrap();
        assert_eq!(e.len(), crate::ipv6::MIN_MTU);
        let ip = crate::ipv6::Packet::new_checked(&e[..]).unwrap();
        assert_eq!(
            (ip.src(), ip.dst(), ip.hop_limit()),
            (from, a("2001:db8::1"), 64)
        );
        let u = ip.upper().unwrap();
        assert!(ip.verify_upper_checksum(&u));
        let m = Packet::new_checked(&e[u.offset..]).unwrap();
        match Repr::parse(&m).unwrap() {
            Repr::PacketTooBig { mtu, data } => {
                assert_eq!(mtu, 1400);
                assert_eq!(data, &big[..data.len()]);
            }
            r => panic!("{r:?}"),
        }
        let small = offending("2001:db8::1", "2001:db8:1::1", 17, &[0; 8], 8);
        let e = build_error(&small, ErrorKind::TimeExceeded(0), from, 64).unwrap();
        assert_eq!(e.len(), 40 + 8 + small.len());
    }

    proptest! {
        #[test]
        fn echo_roundtrip(req in any::<bool>(), ident in any::<u16>(), seq in any::<u16>(),
                          data in proptest::collection::vec(any::<u8>(), 0..64)) {
            roundtrip(if req { Repr::EchoRequest { ident, seq, data: &data } }
                      else { Repr::EchoReply { ident, seq, data: &data } });
        }

        #[test]
        fn any_bytes_parse_and_reemit(data in proptest::collection::vec(any::<u8>(), 4..120)) {
            let p = Packet::new_checked(&data[..]).unwrap();
            if let Ok(r) = Repr::parse(&p) {
                let mut b = vec![0u8; r.buffer_len()];
                r.emit(&mut b, Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST).unwrap();
                let q = Packet::new_checked(&b[..]).unwrap();
                prop_assert_eq!(Repr::parse(&q).unwrap(), r);
            }
        }
    }
}
