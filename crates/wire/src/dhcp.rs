//! DHCP for IPv4 (RFC 2131, options RFC 2132): the server's side, as an Axon serves its
//! hosts.
//!
//! ```text
//!  0    1     2    3    4      8     10     12     16     20     24     28       44   236   240
//!  | op |htype|hlen|hops| xid  | secs | flags|ciaddr|yiaddr|siaddr|giaddr| chaddr |sname,file| cookie | options
//! ```

use crate::{be16, be32, need, MacAddr, Truncated};
use std::net::Ipv4Addr;

/// The fixed part, up to and including the magic cookie.
pub const FIXED_LEN: usize = 240;
pub const MAGIC: u32 = 0x6382_5363;
pub const SERVER_PORT: u16 = 67;
pub const CLIENT_PORT: u16 = 68;

/// DHCP message types (option 53).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgType {
    Discover = 1,
    Offer = 2,
    Request = 3,
    Decline = 4,
    Ack = 5,
    Nak = 6,
    Release = 7,
    Inform = 8,
}

impl MsgType {
    pub fn from_u8(v: u8) -> Option<MsgType> {
        Some(match v {
            1 => MsgType::Discover,
            2 => MsgType::Offer,
            3 => MsgType::Request,
            4 => MsgType::Decline,
            5 => MsgType::Ack,
            6 => MsgType::Nak,
            7 => MsgType::Release,
            8 => MsgType::Inform,
            _ => return None,
        })
    }
}

mod opt {
    pub const PAD: u8 = 0;
    pub const SUBNET_MASK: u8 = 1;
    pub const ROUTER: u8 = 3;
    pub const REQUESTED_IP: u8 = 50;
    pub const LEASE_TIME: u8 = 51;
    pub const MSG_TYPE: u8 = 53;
    pub const SERVER_ID: u8 = 54;
    pub const RENEWAL: u8 = 58;
    pub const REBINDING: u8 = 59;
    pub const END: u8 = 255;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    Truncated(Truncated),
    /// Not a BOOTREQUEST/BOOTREPLY over Ethernet with 6-byte addresses.
    NotEthernet {
        op: u8,
        htype: u8,
        hlen: u8,
    },
    BadCookie(u32),
    /// An option runs past the end of the packet.
    BadOption(u8),
    /// No message type (option 53), or an unknown one.
    NoMsgType,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated(t) => write!(f, "dhcp: {t}"),
            Error::NotEthernet { op, htype, hlen } => {
                write!(
                    f,
                    "dhcp: op {op} htype {htype} hlen {hlen} is not BOOTP over Ethernet"
                )
            }
            Error::BadCookie(c) => write!(f, "dhcp: magic cookie {c:#010x}"),
            Error::BadOption(o) => write!(f, "dhcp: option {o} runs past the end"),
            Error::NoMsgType => write!(f, "dhcp: no known message type (option 53)"),
        }
    }
}

/// What a server needs from a client's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub msg_type: MsgType,
    pub xid: u32,
    pub flags: u16,
    pub ciaddr: Ipv4Addr,
    pub giaddr: Ipv4Addr,
    pub chaddr: MacAddr,
    /// Option 50.
    pub requested: Option<Ipv4Addr>,
    /// Option 54.
    pub server_id: Option<Ipv4Addr>,
}

impl Request {
    /// Parses a BOOTREQUEST (op 1) carrying a DHCP message.
    pub fn parse(b: &[u8]) -> Result<Request, Error> {
        need(b, FIXED_LEN).map_err(Error::Truncated)?;
        let (op, htype, hlen) = (b[0], b[1], b[2]);
        if op != 1 || htype != 1 || hlen != 6 {
            return Err(Error::NotEthernet { op, htype, hlen });
        }
        let cookie = be32(b, 236);
        if cookie != MAGIC {
            return Err(Error::BadCookie(cookie));
        }
        let mut msg_type = None;
        let mut requested = None;
        let mut server_id = None;
        let mut i = FIXED_LEN;
        while i < b.len() {
            let code = b[i];
            if code == opt::END {
                break;
            }
            if code == opt::PAD {
                i += 1;
                continue;
            }
            let len = *b.get(i + 1).ok_or(Error::BadOption(code))? as usize;
            let v = b.get(i + 2..i + 2 + len).ok_or(Error::BadOption(code))?;
            match (code, len) {
                (opt::MSG_TYPE, 1) => msg_type = MsgType::from_u8(v[0]),
                (opt::REQUESTED_IP, 4) => requested = Some(Ipv4Addr::new(v[0], v[1], v[2], v[3])),
                (opt::SERVER_ID, 4) => server_id = Some(Ipv4Addr::new(v[0], v[1], v[2], v[3])),
                _ => {}
            }
            i += 2 + len;
        }
        Ok(Request {
            msg_type: msg_type.ok_or(Error::NoMsgType)?,
            xid: be32(b, 4),
            flags: be16(b, 10),
            ciaddr: Ipv4Addr::from(be32(b, 12)),
            giaddr: Ipv4Addr::from(be32(b, 24)),
            chaddr: MacAddr::from_slice(&b[28..34]),
            requested,
            server_id,
        })
    }
}

/// A server's reply (OFFER, ACK or NAK).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    pub msg_type: MsgType,
    pub xid: u32,
    pub flags: u16,
    pub ciaddr: Ipv4Addr,
    pub yiaddr: Ipv4Addr,
    pub giaddr: Ipv4Addr,
    pub chaddr: MacAddr,
    pub server_id: Ipv4Addr,
    pub lease_s: u32,
    pub subnet_mask: Ipv4Addr,
    pub router: Option<Ipv4Addr>,
}

impl Reply {
    /// The reply as UDP payload bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut b = vec![0u8; FIXED_LEN];
        b[0] = 2;
        b[1] = 1;
        b[2] = 6;
        b[4..8].copy_from_slice(&self.xid.to_be_bytes());
        b[10..12].copy_from_slice(&self.flags.to_be_bytes());
        b[12..16].copy_from_slice(&self.ciaddr.octets());
        b[16..20].copy_from_slice(&self.yiaddr.octets());
        b[24..28].copy_from_slice(&self.giaddr.octets());
        b[28..34].copy_from_slice(&self.chaddr.0);
        b[236..240].copy_from_slice(&MAGIC.to_be_bytes());
        let mut o = |code: u8, v: &[u8]| {
            b.push(code);
            b.push(v.len() as u8);
            b.extend_from_slice(v);
        };
        o(opt::MSG_TYPE, &[self.msg_type as u8]);
        o(opt::SERVER_ID, &self.server_id.octets());
        if self.msg_type != MsgType::Nak {
            o(opt::LEASE_TIME, &self.lease_s.to_be_bytes());
            o(opt::RENEWAL, &(self.lease_s / 2).to_be_bytes());
            o(opt::REBINDING, &(self.lease_s / 8 * 7).to_be_bytes());
            o(opt::SUBNET_MASK, &self.subnet_mask.octets());
            if let Some(r) = self.router {
                o(opt::ROUTER, &r.octets());
            }
        }
        b.push(opt::END);
        // BOOTP's minimum message (300 bytes), which some clients expect.
        if b.len() < 300 {
            b.resize(300, 0);
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn discover(extra: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; FIXED_LEN];
        b[0] = 1;
        b[1] = 1;
        b[2] = 6;
        b[4..8].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        b[10] = 0x80;
        b[28..34].copy_from_slice(&[2, 0, 0, 0, 0, 7]);
        b[236..240].copy_from_slice(&MAGIC.to_be_bytes());
        b.extend_from_slice(extra);
        b
    }

    #[test]
    fn requests_parse_and_replies_build() {
        let b = discover(&[53, 1, 3, 0, 50, 4, 10, 7, 0, 9, 54, 4, 10, 7, 0, 251, 255]);
        let r = Request::parse(&b).unwrap();
        assert_eq!(r.msg_type, MsgType::Request);
        assert_eq!(r.xid, 0x1234_5678);
        assert_eq!(r.flags, 0x8000);
        assert_eq!(r.chaddr, MacAddr([2, 0, 0, 0, 0, 7]));
        assert_eq!(r.requested, Some(Ipv4Addr::new(10, 7, 0, 9)));
        assert_eq!(r.server_id, Some(Ipv4Addr::new(10, 7, 0, 251)));
        let reply = Reply {
            msg_type: MsgType::Ack,
            xid: r.xid,
            flags: r.flags,
            ciaddr: r.ciaddr,
            yiaddr: Ipv4Addr::new(10, 7, 0, 9),
            giaddr: r.giaddr,
            chaddr: r.chaddr,
            server_id: Ipv4Addr::new(10, 7, 0, 251),
            lease_s: 3600,
            subnet_mask: Ipv4Addr::new(255, 255, 255, 0),
            router: None,
        }
        .to_vec();
        assert_eq!(reply.len(), 300);
        assert_eq!((reply[0], &reply[16..20]), (2, &[10, 7, 0, 9][..]));
        assert_eq!(&reply[240..243], &[53, 1, 5]);
    }

    #[test]
    fn bad_messages_are_errors() {
        assert!(matches!(
            Request::parse(&[1; 100]),
            Err(Error::Truncated(_))
        ));
        assert_eq!(Request::parse(&discover(&[255])), Err(Error::NoMsgType));
        assert_eq!(
            Request::parse(&discover(&[53, 4, 1])),
            Err(Error::BadOption(53))
        );
        assert_eq!(Request::parse(&discover(&[53])), Err(Error::BadOption(53)));
        let mut b = discover(&[53, 1, 1]);
        b[236] = 0;
        assert!(matches!(Request::parse(&b), Err(Error::BadCookie(_))));
        b = discover(&[53, 1, 1]);
        b[0] = 2;
        assert!(matches!(Request::parse(&b), Err(Error::NotEthernet { .. })));
        // Pads and unknown options are skipped.
        assert!(Request::parse(&discover(&[0, 0, 12, 3, b'a', b'b', b'c', 53, 1, 1])).is_ok());
    }
}
