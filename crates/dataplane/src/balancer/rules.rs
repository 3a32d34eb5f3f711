//! The LB's classification rules: which module handles a frame (by port, EtherType, IP
//! protocol and destination), the defaults, and their order from most to least specific.

use super::*;

/// Which module handles a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    ExternalArp,
    InternalArp,
    ExternalNd,
    InternalNd,
    VirtualCp,
    Balance,
    Dist,
    IntToExt,
    /// Dropped and counted as `classify_no_rule`.
    Drop,
}

/// A classifier rule: every field that is set must match. The more fields set, the more
/// specific the rule, and the earlier it is tried.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub name: String,
    pub from: PortRole,
    #[serde(default)]
    pub ethertype: Option<u16>,
    /// ARP operation: 1 request, 2 reply.
    #[serde(default)]
    pub arp_op: Option<u16>,
    /// IPv4 protocol number, or IPv6 next header (of the fixed header).
    #[serde(default)]
    pub protocol: Option<u8>,
    /// ICMPv6 type (right behind the IPv6 header): 133 router solicitation, 135 neighbor
    /// solicitation, 136 neighbor advertisement...
    #[serde(default)]
    pub icmp6_type: Option<u8>,
    /// TCP or UDP port, matched against the source and the destination port.
    #[serde(default)]
    pub port: Option<u16>,
    /// To the router itself: IPv4 to the address of the port it arrived on or to a
    /// link-local multicast group (224.0.0.0/24, where OSPF and RIP speak); IPv6 to one of
    /// the port's addresses, its link-local address, or ff02::/16 (OSPFv3, RIPng). Without
    /// it a rule for BGP would also catch BGP sessions between outside routers that merely
    /// cross this one.
    #[serde(default)]
    pub to_router: Option<bool>,
    pub action: Action,
}

impl Rule {
    pub(super) fn specificity(&self) -> usize {
        self.ethertype.is_some() as usize
            + self.arp_op.is_some() as usize
            + self.protocol.is_some() as usize
            + self.icmp6_type.is_some() as usize
            + self.port.is_some() as usize
            + self.to_router.is_some() as usize
    }

    #[inline]
    pub(super) fn matches(&self, k: &Key) -> bool {
        self.from == k.from
            && self.ethertype.is_none_or(|t| t == k.ethertype)
            && self.arp_op.is_none_or(|o| Some(o) == k.arp_op)
            && self.protocol.is_none_or(|p| Some(p) == k.protocol)
            && self.icmp6_type.is_none_or(|t| Some(t) == k.icmp6_type)
            && self
                .port
                .is_none_or(|p| k.ports.is_some_and(|(s, d)| s == p || d == p))
            && self.to_router.is_none_or(|t| t == k.to_router)
    }
}

/// What the classifier looks at, extracted once per frame.
#[derive(Debug, Clone, Copy)]
pub(super) struct Key {
    pub(super) from: PortRole,
    pub(super) ethertype: u16,
    pub(super) arp_op: Option<u16>,
    pub(super) protocol: Option<u8>,
    pub(super) icmp6_type: Option<u8>,
    pub(super) ports: Option<(u16, u16)>,
    pub(super) to_router: bool,
}

/// The built-in rules: the design's classifier.
pub fn default_rules() -> Vec<Rule> {
    let r = |name: &str, from, ethertype, arp_op, protocol, port, action| Rule {
        name: name.to_string(),
        from,
        ethertype,
        arp_op,
        protocol,
        icmp6_type: None,
        port,
        // Control and management traffic is what is addressed to the router.
        to_router: (action == VirtualCp).then_some(true),
        action,
    };
    use Action::*;
    use PortRole::*;
    let (ip, ip6, arpt, d) = (
        Some(ethertype::IPV4),
        Some(ethertype::IPV6),
        Some(ethertype::ARP),
        Some(dist::ETHERTYPE),
    );
    // Neighbour discovery from outside, by ICMPv6 type.
    let nd = |name: &str, t: u8, action| Rule {
        icmp6_type: Some(t),
        protocol: Some(ipv6::next_header::ICMPV6),
        ..r(name, External, ip6, None, None, None, action)
    };
    vec![
        r(
            "ext-arp-request",
            External,
            arpt,
            Some(1),
            None,
            None,
            ExternalArp,
        ),
        r(
            "ext-arp-reply",
            External,
            arpt,
            Some(2),
            None,
            None,
            InternalArp,
        ),
        r("ospf", External, ip, None, Some(89), None, VirtualCp),
        r(
            "rip",
            External,
            ip,
            None,
            Some(protocol::UDP),
            Some(520),
            VirtualCp,
        ),
        r(
            "bgp",
            External,
            ip,
            None,
            Some(protocol::TCP),
            Some(179),
            VirtualCp,
        ),
        r(
            "snmp",
            External,
            ip,
            None,
            Some(protocol::UDP),
            Some(161),
            VirtualCp,
        ),
        r(
            "snmp-trap",
            External,
            ip,
            None,
            Some(protocol::UDP),
            Some(162),
            VirtualCp,
        ),
        // The same over IPv6 (OSPFv3 to ff02::5/6 or the router's link-local address,
        // RIPng, BGP): the Virtual-CP's TAP has the port's MAC and so its link-local one.
        r("ospf6", External, ip6, None, Some(89), None, VirtualCp),
        r(
            "ripng",
            External,
            ip6,
            None,
            Some(protocol::UDP),
            Some(521),
            VirtualCp,
        ),
        r(
            "bgp6",
            External,
            ip6,
            None,
            Some(protocol::TCP),
            Some(179),
            VirtualCp,
        ),
        r("ext-ip", External, ip, None, None, None, Balance),
        nd("ext-nd-solicit", icmpv6::kind::NEIGHBOR_SOLICIT, ExternalNd),
        nd("ext-nd-advert", icmpv6::kind::NEIGHBOR_ADVERT, InternalNd),
        nd("ext-router-solicit", icmpv6::kind::ROUTER_SOLICIT, Drop),
        r("ext-ip6", External, ip6, None, None, None, Balance),
        r("ext-dist", External, d, None, None, None, Drop),
        r("int-dist", Internal, d, None, None, None, Dist),
        r("int-arp", Internal, arpt, None, None, None, InternalArp),
        r("int-other", Internal, None, None, None, None, IntToExt),
    ]
}

/// Orders rules from most to least specific (stable: equal ones keep their order).
pub fn order_rules(mut rules: Vec<Rule>) -> Vec<Rule> {
    rules.sort_by_key(|r| std::cmp::Reverse(r.specificity()));
    rules
}
