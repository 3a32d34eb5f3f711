//! ICMPv4 (RFC 792), with the error rules of RFC 1812 section 4.3.
//!
//! ```text
//!  0      1      2          4
//!  | type | code | checksum | rest of header (4) | data ...
//! ```

use crate::checksum;
use crate::{be16, need, put16, Truncated};

pub const HEADER_LEN: usize = 8;

/// Message types this project builds or answers.
pub mod kind {
    pub const ECHO_REPLY: u8 = 0;
    pub const DST_UNREACHABLE: u8 = 3;
    pub const REDIRECT: u8 = 5;
    pub const ECHO_REQUEST: u8 = 8;
    pub const TIME_EXCEEDED: u8 = 11;
    pub const PARAM_PROBLEM: u8 = 12;
}

/// Codes of destination unreachable.
pub mod unreachable {
    pub const NET: u8 = 0;
    pub const HOST: u8 = 1;
    pub const PROTOCOL: u8 = 2;
    pub const PORT: u8 = 3;
    pub const FRAG_NEEDED: u8 = 4;
    pub const SOURCE_ROUTE_FAILED: u8 = 5;
    /// Communication administratively prohibited (RFC 1812 5.2.7.1): a filter refused it.
    pub const ADMIN_PROHIBITED: u8 = 13;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    Truncated(Truncated),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated(t) => write!(f, "icmp: {t}"),
        }
    }
}

/// True for the query types (echo, timestamp, information, address mask, router
/// advertisement/solicitation). Everything else is treated as an error message, about which
/// no ICMP error may be sent (RFC 1812 4.3.2.7); unknown types are treated the same way, to
/// be safe.
pub fn is_query(msg_type: u8) -> bool {
    matches!(msg_type, 0 | 8 | 9 | 10 | 13 | 14 | 15 | 16 | 17 | 18)
}

/// A view of an ICMP message (the IP payload).
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

    /// Echo identifier (bytes 4..6 of an echo message).
    pub fn echo_ident(&self) -> u16 {
        be16(self.buf.as_ref(), 4)
    }

    /// Echo sequence number (bytes 6..8 of an echo message).
    pub fn echo_seq(&self) -> u16 {
        be16(self.buf.as_ref(), 6)
    }

    /// Next-hop MTU of a fragmentation-needed message (RFC 1191).
    pub fn next_hop_mtu(&self) -> u16 {
        be16(self.buf.as_ref(), 6)
    }

    pub fn data(&self) -> &[u8] {
        &self.buf.as_ref()[HEADER_LEN..]
    }

    pub fn verify_checksum(&self) -> bool {
        checksum::fold(checksum::sum(self.buf.as_ref())) == 0xffff
    }
}

/// An ICMP message to emit. `data` is the echo payload, or the quoted datagram of an error.
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
        next_hop_mtu: u16,
        data: &'a [u8],
    },
    TimeExceeded {
        code: u8,
        data: &'a [u8],
    },
    ParamProblem {
        pointer: u8,
        data: &'a [u8],
    },
    Other {
        msg_type: u8,
        code: u8,
        rest: [u8; 4],
        data: &'a [u8],
    },
}

impl<'a> Repr<'a> {
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &'a Packet<&'a T>) -> Repr<'a> {
        let b = p.buf.as_ref();
        let data = &b[HEADER_LEN..];
        match (p.msg_type(), p.code()) {
            (kind::ECHO_REQUEST, 0) => Repr::EchoRequest {
                ident: p.echo_ident(),
                seq: p.echo_seq(),
                data,
            },
            (kind::ECHO_REPLY, 0) => Repr::EchoReply {
                ident: p.echo_ident(),
                seq: p.echo_seq(),
                data,
            },
            (kind::DST_UNREACHABLE, code) => Repr::DstUnreachable {
                code,
                next_hop_mtu: p.next_hop_mtu(),
                data,
            },
            (kind::TIME_EXCEEDED, code) => Repr::TimeExceeded { code, data },
            (kind::PARAM_PROBLEM, 0) => Repr::ParamProblem {
                pointer: b[4],
                data,
            },
            (msg_type, code) => Repr::Other {
                msg_type,
                code,
                rest: [b[4], b[5], b[6], b[7]],
                data,
            },
        }
    }

    fn data(&self) -> &'a [u8] {
        match *self {
            Repr::EchoRequest { data, .. }
            | Repr::EchoReply { data, .. }
            | Repr::DstUnreachable { data, .. }
            | Repr::TimeExceeded { data, .. }
            | Repr::ParamProblem { data, .. }
            | Repr::Other { data, .. } => data,
        }
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.data().len()
    }

    /// Writes the message with its checksum into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        let len = self.buffer_len();
        need(buf, len).map_err(Error::Truncated)?;
        let (t, c, rest): (u8, u8, [u8; 4]) = match *self {
            Repr::EchoRequest { ident, seq, .. } => (kind::ECHO_REQUEST, 0, words(ident, seq)),
            Repr::EchoReply { ident, seq, .. } => (kind::ECHO_REPLY, 0, words(ident, seq)),
            Repr::DstUnreachable {
                code, next_hop_mtu, ..
            } => (kind::DST_UNREACHABLE, code, words(0, next_hop_mtu)),
            Repr::TimeExceeded { code, .. } => (kind::TIME_EXCEEDED, code, [0; 4]),
            Repr::ParamProblem { pointer, .. } => (kind::PARAM_PROBLEM, 0, [pointer, 0, 0, 0]),
            Repr::Other {
                msg_type,
                code,
                rest,
                ..
            } => (msg_type, code, rest),
        };
        buf[0] = t;
        buf[1] = c;
        put16(buf, 2, 0);
        buf[4..8].copy_from_slice(&rest);
        buf[HEADER_LEN..len].copy_from_slice(self.data());
        let sum = checksum::checksum(&buf[..len]);
        put16(buf, 2, sum);
        Ok(())
    }
}

fn words(a: u16, b: u16) -> [u8; 4] {
    let (a, b) = (a.to_be_bytes(), b.to_be_bytes());
    [a[0], a[1], b[0], b[1]]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn frag_needed_carries_mtu() {
        let quoted = [0x45u8; 28];
        let r = Repr::DstUnreachable {
            code: unreachable::FRAG_NEEDED,
            next_hop_mtu: 1400,
            data: &quoted,
        };
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b).unwrap();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.next_hop_mtu(), 1400);
        assert_eq!(Repr::parse(&p), r);
    }

    #[test]
    fn query_types() {
        assert!(is_query(kind::ECHO_REQUEST) && is_query(kind::ECHO_REPLY));
        assert!(!is_query(kind::DST_UNREACHABLE) && !is_query(kind::TIME_EXCEEDED));
        assert!(!is_query(200));
    }

    proptest! {
        #[test]
        fn echo_roundtrip(req in any::<bool>(), ident in any::<u16>(), seq in any::<u16>(),
                          data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let r = if req { Repr::EchoRequest { ident, seq, data: &data } }
                    else { Repr::EchoReply { ident, seq, data: &data } };
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut b).unwrap();
            let p = Packet::new_checked(&b[..]).unwrap();
            prop_assert!(p.verify_checksum());
            prop_assert_eq!(Repr::parse(&p), r);
        }
    }
}
