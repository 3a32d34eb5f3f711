//! Access lists (docs: issue 60): named, ordered lists of rules, each matching any of a
//! packet's source and destination prefix (IPv4 or IPv6), protocol, TCP or UDP port
//! ranges, ICMP or ICMPv6 type and code, TCP flags, DSCP and whether it is a fragment,
//! with an action (`permit`, `deny`, `reject`) and a final action for a packet no rule
//! matches.
//!
//! This module holds the model, the parsers of the rules' fields as a config file writes
//! them (`"22"`, `"1000-2000"`, `"tcp"`, `"syn,!ack"`: each error says what was wrong),
//! the key a packet is matched on ([`Key::of_ipv4`], [`Key::of_ipv6`], from untrusted
//! bytes, never panicking) and the reference matcher ([`Acl::decide`]: the first rule in
//! order that matches). It is the one definition of what a rule means: the elements and
//! their fast paths are checked against it.
//!
//! What a packet's fields are when it has none: a fragment other than the first has no
//! transport header, so a rule that names ports, TCP flags or an ICMP type or code never
//! matches it (as in the filters of the routers operators know); a rule with `fragment =
//! true` matches fragments (the first and the others), `false` whole packets.

use fib::{Prefix, Prefix6};
use std::net::IpAddr;

mod filters;
pub mod remote;
pub mod tss;
pub use filters::{Binding, Count, FilterShare, Filters, IfaceDrops, List, Urpf};

/// What a rule does with a packet it matches, or a list with one no rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Permit,
    /// Dropped and counted.
    Deny,
    /// Dropped, counted, and answered with an ICMP or ICMPv6 administratively-prohibited
    /// error (rate limited as the router's other errors).
    Reject,
}

impl Action {
    /// `"permit"`, `"deny"` or `"reject"`.
    pub fn parse(s: &str) -> Result<Action, String> {
        match s {
            "permit" => Ok(Action::Permit),
            "deny" => Ok(Action::Deny),
            "reject" => Ok(Action::Reject),
            _ => Err(format!(
                "{s:?} is no action: \"permit\", \"deny\" or \"reject\""
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Permit => "permit",
            Action::Deny => "deny",
            Action::Reject => "reject",
        }
    }
}

/// A source or destination network of either family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Net {
    V4(Prefix),
    V6(Prefix6),
}

impl Net {
    /// A prefix as written (`"10.0.0.0/8"`, `"2001:db8::/32"`; an address alone is its
    /// host route), host bits clear.
    pub fn parse(s: &str) -> Result<Net, String> {
        let s = s.trim();
        let with_len = if s.contains('/') {
            s.to_string()
        } else if s.contains(':') {
            format!("{s}/128")
        } else {
            format!("{s}/32")
        };
        if with_len.contains(':') {
            Prefix6::parse_strict(&with_len)
                .map(Net::V6)
                .map_err(|e| format!("{s:?}: {e}"))
        } else {
            Prefix::parse_strict(&with_len)
                .map(Net::V4)
                .map_err(|e| format!("{s:?}: {e}"))
        }
    }

    fn contains(&self, a: IpAddr) -> bool {
        match (self, a) {
            (Net::V4(p), IpAddr::V4(a)) => p.contains(a),
            (Net::V6(p), IpAddr::V6(a)) => p.contains(a),
            _ => false,
        }
    }

    fn is_v6(&self) -> bool {
        matches!(self, Net::V6(_))
    }
}

/// TCP flags' bits as the header holds them (FIN 0x01 to CWR 0x80).
const TCP_FLAGS: [(&str, u8); 8] = [
    ("fin", 0x01),
    ("syn", 0x02),
    ("rst", 0x04),
    ("psh", 0x08),
    ("ack", 0x10),
    ("urg", 0x20),
    ("ece", 0x40),
    ("cwr", 0x80),
];

/// A protocol by name (`tcp`, `udp`, `icmp`, `icmpv6`, `gre`, `esp`, `ah`, `sctp`,
/// `ospf`) or number (0-255).
pub fn parse_protocol(s: &str) -> Result<u8, String> {
    let named = [
        ("icmp", 1),
        ("tcp", 6),
        ("udp", 17),
        ("gre", 47),
        ("esp", 50),
        ("ah", 51),
        ("icmpv6", 58),
        ("ospf", 89),
        ("sctp", 132),
    ];
    let t = s.trim().to_ascii_lowercase();
    if let Some(&(_, n)) = named.iter().find(|(name, _)| *name == t) {
        return Ok(n);
    }
    t.parse::<u8>().map_err(|_| {
        format!("{s:?} is no protocol: a name (tcp, udp, icmp, icmpv6, gre, esp, ah, ospf, sctp) or a number 0-255")
    })
}

/// A port range: `"N"` or `"A-B"` (A <= B, 0-65535).
pub fn parse_ports(s: &str) -> Result<(u16, u16), String> {
    let port = |t: &str| {
        t.trim()
            .parse::<u16>()
            .map_err(|_| format!("{s:?}: {t:?} is no port (0-65535)"))
    };
    match s.split_once('-') {
        None => port(s).map(|p| (p, p)),
        Some((a, b)) => {
            let (a, b) = (port(a)?, port(b)?);
            if a > b {
                return Err(format!("{s:?}: the range's first port is above its last"));
            }
            Ok((a, b))
        }
    }
}

/// TCP flags that must be set or clear: `"syn"`, `"syn,!ack"` (names: fin, syn, rst,
/// psh, ack, urg, ece, cwr; `!` for clear). (mask, value): the bits looked at, and what
/// they must be.
pub fn parse_tcp_flags(s: &str) -> Result<(u8, u8), String> {
    let (mut mask, mut value) = (0u8, 0u8);
    for part in s.split(',') {
        let t = part.trim().to_ascii_lowercase();
        let (clear, name) = match t.strip_prefix('!') {
            Some(n) => (true, n.trim()),
            None => (false, t.as_str()),
        };
        let Some(&(_, bit)) = TCP_FLAGS.iter().find(|(n, _)| *n == name) else {
            return Err(format!(
                "{s:?}: {part:?} is no TCP flag (fin, syn, rst, psh, ack, urg, ece, cwr; \"!\" before one for clear)"
            ));
        };
        if mask & bit != 0 {
            return Err(format!("{s:?}: {name} is named twice"));
        }
        mask |= bit;
        if !clear {
            value |= bit;
        }
    }
    Ok((mask, value))
}

/// TCP flags as [`parse_tcp_flags`] reads them: `"syn,!ack"`.
pub fn tcp_flags_text(mask: u8, value: u8) -> String {
    TCP_FLAGS
        .iter()
        .filter(|(_, b)| mask & b != 0)
        .map(|(n, b)| format!("{}{n}", if value & b == 0 { "!" } else { "" }))
        .collect::<Vec<_>>()
        .join(",")
}

/// One rule: every field that is set must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub action: Action,
    pub protocol: Option<u8>,
    pub src: Option<Net>,
    pub dst: Option<Net>,
    pub src_port: Option<(u16, u16)>,
    pub dst_port: Option<(u16, u16)>,
    pub icmp_type: Option<u8>,
    pub icmp_code: Option<u8>,
    /// (mask, value) of the TCP flags.
    pub tcp_flags: Option<(u8, u8)>,
    /// The DSCP (0-63).
    pub dscp: Option<u8>,
    /// A fragment (`true`) or a whole packet (`false`).
    pub fragment: Option<bool>,
}

impl Rule {
    /// A rule that matches every packet.
    pub fn any(action: Action) -> Rule {
        Rule {
            action,
            protocol: None,
            src: None,
            dst: None,
            src_port: None,
            dst_port: None,
            icmp_type: None,
            icmp_code: None,
            tcp_flags: None,
            dscp: None,
            fragment: None,
        }
    }

    /// Whether the rule's fields agree with one another: both prefixes of one family,
    /// ports only with TCP, UDP or SCTP, flags only with TCP, an ICMP type or code only
    /// with ICMP (IPv4 prefixes or none) or ICMPv6 (IPv6 prefixes or none), a DSCP below
    /// 64. The error names the field.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if let (Some(s), Some(d)) = (&self.src, &self.dst) {
            if s.is_v6() != d.is_v6() {
                return Err(("dst", "src and dst are of different families".into()));
            }
        }
        let six = self.src.or(self.dst).map(|n| n.is_v6());
        let ports = self.src_port.is_some() || self.dst_port.is_some();
        if ports && !matches!(self.protocol, Some(6 | 17 | 132)) {
            let key = if self.src_port.is_some() {
                "src_port"
            } else {
                "dst_port"
            };
            return Err((
                key,
                "ports need protocol = \"tcp\", \"udp\" or \"sctp\"".into(),
            ));
        }
        if self.tcp_flags.is_some() && self.protocol != Some(6) {
            return Err(("tcp_flags", "TCP flags need protocol = \"tcp\"".into()));
        }
        if self.icmp_type.is_some() || self.icmp_code.is_some() {
            let key = if self.icmp_type.is_some() {
                "icmp_type"
            } else {
                "icmp_code"
            };
            match (self.protocol, six) {
                (Some(1), None | Some(false)) | (Some(58), None | Some(true)) => {}
                _ => return Err((
                    key,
                    "an ICMP type or code needs protocol = \"icmp\" (IPv4) or \"icmpv6\" (IPv6)"
                        .into(),
                )),
            }
        }
        if let Some(d) = self.dscp {
            if d > 63 {
                return Err(("dscp", format!("{d} is no DSCP (0-63)")));
            }
        }
        Ok(())
    }

    /// Whether the rule matches the packet whose key is `k`.
    pub fn matches(&self, k: &Key) -> bool {
        let opt = |want: Option<u8>, have: u8| want.is_none_or(|w| w == have);
        if !opt(self.protocol, k.protocol) || !opt(self.dscp, k.dscp) {
            return false;
        }
        if self.fragment.is_some_and(|f| f != k.fragment) {
            return false;
        }
        if self.src.is_some_and(|n| !n.contains(k.src))
            || self.dst.is_some_and(|n| !n.contains(k.dst))
        {
            return false;
        }
        let in_range = |r: Option<(u16, u16)>, have: Option<u16>| match (r, have) {
            (None, _) => true,
            (Some((a, b)), Some(p)) => a <= p && p <= b,
            (Some(_), None) => false,
        };
        if !in_range(self.src_port, k.ports.map(|p| p.0))
            || !in_range(self.dst_port, k.ports.map(|p| p.1))
        {
            return false;
        }
        if let Some((mask, value)) = self.tcp_flags {
            match k.tcp_flags {
                Some(f) if f & mask == value => {}
                _ => return false,
            }
        }
        let icmp = |want: Option<u8>, have: Option<u8>| want.is_none() || want == have;
        icmp(self.icmp_type, k.icmp.map(|i| i.0)) && icmp(self.icmp_code, k.icmp.map(|i| i.1))
    }
}

/// A named list: its rules in order and what a packet none matches gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    pub name: String,
    /// `Permit` or `Deny`.
    pub default: Action,
    pub rules: Vec<Rule>,
}

/// What a list decided: the rule that matched (`None`: the list's default) and its
/// action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub rule: Option<usize>,
    pub action: Action,
}

impl Acl {
    /// The first rule in order that matches `k`, or the list's default.
    pub fn decide(&self, k: &Key) -> Decision {
        match self.rules.iter().position(|r| r.matches(k)) {
            Some(i) => Decision {
                rule: Some(i),
                action: self.rules[i].action,
            },
            None => Decision {
                rule: None,
                action: self.default,
            },
        }
    }
}

/// What a rule looks at in a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// The transport protocol (IPv6: the upper layer past the extension headers; a
    /// fragment other than the first: its fragmentable part's first header).
    pub protocol: u8,
    pub dscp: u8,
    /// MF set or an offset (IPv4), or a fragment header (IPv6).
    pub fragment: bool,
    /// (source, destination) of TCP, UDP or SCTP, where the header is there.
    pub ports: Option<(u16, u16)>,
    pub tcp_flags: Option<u8>,
    /// (type, code) of ICMP (IPv4) or ICMPv6 (IPv6), where the header is there.
    pub icmp: Option<(u8, u8)>,
}

/// The transport fields of `l4` (the upper layer's bytes) for `protocol`; none for a
/// fragment other than the first, or where the header is cut short.
fn transport(k: &mut Key, l4: &[u8], icmp: u8, first: bool) {
    if !first {
        return;
    }
    let be16 = |i: usize| u16::from_be_bytes([l4[i], l4[i + 1]]);
    match k.protocol {
        6 | 17 | 132 if l4.len() >= 4 => {
            k.ports = Some((be16(0), be16(2)));
            if k.protocol == 6 && l4.len() >= 14 {
                k.tcp_flags = Some(l4[13]);
            }
        }
        p if p == icmp && l4.len() >= 2 => k.icmp = Some((l4[0], l4[1])),
        _ => {}
    }
}

impl Key {
    /// The key of an IPv4 packet (its header checked; the transport fields where they are
    /// there), or `None` for bytes that are no IPv4 packet.
    pub fn of_ipv4(ip: &[u8]) -> Option<Key> {
        let p = wire::ipv4::Packet::new_checked(ip).ok()?;
        let mut k = Key {
            src: IpAddr::V4(p.src()),
            dst: IpAddr::V4(p.dst()),
            protocol: p.protocol(),
            dscp: p.tos() >> 2,
            fragment: p.is_fragment(),
            ports: None,
            tcp_flags: None,
            icmp: None,
        };
        transport(&mut k, p.payload(), 1, p.frag_offset() == 0);
        Some(k)
    }

    /// The key of an IPv6 packet (its extension headers walked to the upper layer), or
    /// `None` for bytes that are no IPv6 packet or whose extension headers are malformed.
    pub fn of_ipv6(ip: &[u8]) -> Option<Key> {
        let p = wire::ipv6::Packet::new_checked(ip).ok()?;
        let u = p.upper().ok()?;
        let mut k = Key {
            src: IpAddr::V6(p.src()),
            dst: IpAddr::V6(p.dst()),
            protocol: u.protocol,
            dscp: p.traffic_class() >> 2,
            fragment: u.fragment.is_some(),
            ports: None,
            tcp_flags: None,
            icmp: None,
        };
        let first = u.fragment.is_none_or(|f| f.offset == 0);
        let l4 = p.packet().get(u.offset..).unwrap_or(&[]);
        transport(&mut k, l4, 58, first);
        Some(k)
    }

    /// A key with addresses alone (no transport fields), for tests and tools.
    pub fn addresses(src: IpAddr, dst: IpAddr, protocol: u8) -> Key {
        Key {
            src,
            dst,
            protocol,
            dscp: 0,
            fragment: false,
            ports: None,
            tcp_flags: None,
            icmp: None,
        }
    }
}

#[cfg(test)]
mod tests;
