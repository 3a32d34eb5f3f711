use super::*;
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};

/// An IPv4 packet from `src` to `dst` of `protocol` with `l4` behind its header; `frag`:
/// (MF, offset in 8-byte units); `tos` the DSCP << 2.
fn ipv4(
    src: [u8; 4],
    dst: [u8; 4],
    protocol: u8,
    l4: &[u8],
    frag: (bool, u16),
    tos: u8,
) -> Vec<u8> {
    let total = 20 + l4.len();
    let flags = (u16::from(frag.0) << 13) | frag.1;
    let mut ip = vec![0x45, tos, (total >> 8) as u8, total as u8, 0, 1];
    ip.extend(flags.to_be_bytes());
    ip.extend([64, protocol, 0, 0]);
    ip.extend(src);
    ip.extend(dst);
    ip.extend(l4);
    wire::ipv4::Packet::new_checked(&mut ip[..])
        .unwrap()
        .fill_checksum();
    ip
}

/// A TCP header from `sport` to `dport` with `flags`.
fn tcp(sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    let mut t = sport.to_be_bytes().to_vec();
    t.extend(dport.to_be_bytes());
    t.extend([0; 8]);
    t.extend([0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    t
}

/// An IPv6 packet from `src` to `dst` with next header `next` and `payload` behind.
fn ipv6(src: &str, dst: &str, next: u8, payload: &[u8]) -> Vec<u8> {
    let mut ip = vec![0x60, 0, 0, 0];
    ip.extend((payload.len() as u16).to_be_bytes());
    ip.extend([next, 64]);
    ip.extend(src.parse::<Ipv6Addr>().unwrap().octets());
    ip.extend(dst.parse::<Ipv6Addr>().unwrap().octets());
    ip.extend(payload);
    ip
}

fn rule(action: Action) -> Rule {
    Rule::any(action)
}

#[test]
fn fields_parse_as_a_config_writes_them_and_say_what_is_wrong() {
    assert_eq!(parse_ports("22"), Ok((22, 22)));
    assert_eq!(parse_ports("1000-2000"), Ok((1000, 2000)));
    assert_eq!(parse_ports(" 1 - 2 "), Ok((1, 2)));
    assert!(parse_ports("2000-1000")
        .unwrap_err()
        .contains("above its last"));
    assert!(parse_ports("70000").unwrap_err().contains("no port"));
    assert!(parse_ports("ssh").is_err());
    assert_eq!(parse_protocol("tcp"), Ok(6));
    assert_eq!(parse_protocol("ICMPv6"), Ok(58));
    assert_eq!(parse_protocol("47"), Ok(47));
    assert!(parse_protocol("256").unwrap_err().contains("no protocol"));
    assert_eq!(parse_tcp_flags("syn"), Ok((0x02, 0x02)));
    assert_eq!(parse_tcp_flags("syn,!ack"), Ok((0x12, 0x02)));
    assert!(parse_tcp_flags("syn,syn").unwrap_err().contains("twice"));
    assert!(parse_tcp_flags("nope").unwrap_err().contains("no TCP flag"));
    assert_eq!(Action::parse("reject"), Ok(Action::Reject));
    assert!(Action::parse("drop").unwrap_err().contains("no action"));
    assert_eq!(
        Net::parse("10.2.0.0/24"),
        Ok(Net::V4(Prefix::new(Ipv4Addr::new(10, 2, 0, 0), 24)))
    );
    assert_eq!(
        Net::parse("10.2.0.7"),
        Ok(Net::V4(Prefix::new(Ipv4Addr::new(10, 2, 0, 7), 32)))
    );
    assert!(matches!(Net::parse("2001:db8::/32"), Ok(Net::V6(_))));
    assert!(Net::parse("10.2.0.1/24").is_err(), "host bits set");
    assert!(Net::parse("ten").is_err());
}

#[test]
fn a_rule_whose_fields_disagree_is_refused_naming_the_field() {
    let mut r = rule(Action::Deny);
    r.dst_port = Some((22, 22));
    assert_eq!(r.check().unwrap_err().0, "dst_port");
    r.protocol = Some(6);
    assert!(r.check().is_ok());
    r.tcp_flags = Some((2, 2));
    r.protocol = Some(17);
    assert_eq!(r.check().unwrap_err().0, "tcp_flags");
    let mut r = rule(Action::Deny);
    r.protocol = Some(1);
    r.icmp_type = Some(8);
    assert!(r.check().is_ok());
    r.src = Some(Net::parse("2001:db8::/32").unwrap());
    assert_eq!(r.check().unwrap_err().0, "icmp_type");
    r.protocol = Some(58);
    assert!(r.check().is_ok());
    r.dst = Some(Net::parse("10.0.0.0/8").unwrap());
    assert_eq!(r.check().unwrap_err().0, "dst");
    let mut r = rule(Action::Deny);
    r.dscp = Some(64);
    assert_eq!(r.check().unwrap_err().0, "dscp");
}

/// The list of the example: SSH to 10.2.0.0/24 denied, the rest permitted; then
/// each field on its own.
#[test]
fn the_first_matching_rule_decides_and_the_default_takes_the_rest() {
    let mut ssh = rule(Action::Deny);
    ssh.protocol = Some(6);
    ssh.dst = Some(Net::parse("10.2.0.0/24").unwrap());
    ssh.dst_port = Some((22, 22));
    let acl = Acl {
        name: "edge-in".into(),
        default: Action::Permit,
        rules: vec![ssh],
    };
    let k = |dst: [u8; 4], dport: u16| {
        Key::of_ipv4(&ipv4(
            [10, 1, 0, 10],
            dst,
            6,
            &tcp(40000, dport, 2),
            (false, 0),
            0,
        ))
        .unwrap()
    };
    assert_eq!(
        acl.decide(&k([10, 2, 0, 7], 22)),
        Decision {
            rule: Some(0),
            action: Action::Deny
        }
    );
    assert_eq!(acl.decide(&k([10, 2, 0, 7], 80)).rule, None);
    assert_eq!(acl.decide(&k([10, 3, 0, 7], 22)).action, Action::Permit);
    // A fragment other than the first has no ports: a port rule never matches it; the
    // first fragment has them.
    let later = ipv4([10, 1, 0, 10], [10, 2, 0, 7], 6, &[0; 16], (false, 8), 0);
    assert_eq!(acl.decide(&Key::of_ipv4(&later).unwrap()).rule, None);
    let first = ipv4(
        [10, 1, 0, 10],
        [10, 2, 0, 7],
        6,
        &tcp(1, 22, 2),
        (true, 0),
        0,
    );
    let kf = Key::of_ipv4(&first).unwrap();
    assert!(kf.fragment);
    assert_eq!(acl.decide(&kf).rule, Some(0));
    let mut frags = rule(Action::Deny);
    frags.fragment = Some(true);
    assert!(frags.matches(&Key::of_ipv4(&later).unwrap()));
    assert!(!frags.matches(&k([10, 2, 0, 7], 22)));
    // Source ports, ranges, flags, DSCP, ICMP.
    let mut r = rule(Action::Deny);
    r.protocol = Some(6);
    r.src_port = Some((40000, 40010));
    r.tcp_flags = Some(parse_tcp_flags("syn,!ack").unwrap());
    assert!(r.matches(&k([1, 2, 3, 4], 1)));
    let synack = ipv4(
        [10, 1, 0, 10],
        [1, 2, 3, 4],
        6,
        &tcp(40000, 1, 0x12),
        (false, 0),
        0,
    );
    assert!(!r.matches(&Key::of_ipv4(&synack).unwrap()));
    let mut d = rule(Action::Deny);
    d.dscp = Some(46);
    let ef = ipv4([1, 1, 1, 1], [2, 2, 2, 2], 17, &[0; 8], (false, 0), 46 << 2);
    assert!(d.matches(&Key::of_ipv4(&ef).unwrap()));
    assert!(!d.matches(&k([1, 2, 3, 4], 1)));
    let mut echo = rule(Action::Reject);
    echo.protocol = Some(1);
    echo.icmp_type = Some(8);
    echo.icmp_code = Some(0);
    let ping = ipv4(
        [1, 1, 1, 1],
        [2, 2, 2, 2],
        1,
        &[8, 0, 0, 0, 0, 1, 0, 1],
        (false, 0),
        0,
    );
    assert!(echo.matches(&Key::of_ipv4(&ping).unwrap()));
    let reply = ipv4(
        [1, 1, 1, 1],
        [2, 2, 2, 2],
        1,
        &[0, 0, 0, 0, 0, 1, 0, 1],
        (false, 0),
        0,
    );
    assert!(!echo.matches(&Key::of_ipv4(&reply).unwrap()));
}

#[test]
fn ipv6_rules_match_ipv6_packets_past_their_extension_headers() {
    let mut r = rule(Action::Deny);
    r.protocol = Some(6);
    r.src = Some(Net::parse("2001:db8:1::/48").unwrap());
    r.dst_port = Some((22, 22));
    let p = ipv6("2001:db8:1::10", "2001:db8:2::7", 6, &tcp(40000, 22, 2));
    let k = Key::of_ipv6(&p).unwrap();
    assert!(r.matches(&k));
    // Behind a hop-by-hop header (8 bytes, next header TCP).
    let mut hbh = vec![6, 0, 1, 4, 0, 0, 0, 0];
    hbh.extend(tcp(40000, 22, 2));
    let p = ipv6("2001:db8:1::10", "2001:db8:2::7", 0, &hbh);
    assert!(r.matches(&Key::of_ipv6(&p).unwrap()));
    // An IPv4 rule never matches an IPv6 packet, nor the other way.
    let mut v4 = rule(Action::Deny);
    v4.src = Some(Net::parse("0.0.0.0/0").unwrap());
    assert!(!v4.matches(&k));
    let four = ipv4(
        [10, 1, 0, 10],
        [10, 2, 0, 7],
        6,
        &tcp(1, 22, 2),
        (false, 0),
        0,
    );
    assert!(!r.matches(&Key::of_ipv4(&four).unwrap()));
    // A fragment other than the first (fragment header, offset 8): no ports.
    let mut frag = vec![6, 0, 0, 8 << 3, 0, 0, 0, 1];
    frag.extend([0; 16]);
    let p = ipv6("2001:db8:1::10", "2001:db8:2::7", 44, &frag);
    let k = Key::of_ipv6(&p).unwrap();
    assert!(k.fragment && k.ports.is_none(), "{k:?}");
    assert!(!r.matches(&k));
    // ICMPv6 echo request.
    let mut echo = rule(Action::Reject);
    echo.protocol = Some(58);
    echo.icmp_type = Some(128);
    let p = ipv6(
        "2001:db8:1::10",
        "2001:db8:2::7",
        58,
        &[128, 0, 0, 0, 0, 1, 0, 1],
    );
    assert!(echo.matches(&Key::of_ipv6(&p).unwrap()));
}

proptest! {
    /// Any bytes: a key or none, never a panic; and a list decides on every key.
    #[test]
    fn keys_of_any_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
        let acl = Acl {
            name: "x".into(),
            default: Action::Deny,
            rules: vec![{
                let mut r = Rule::any(Action::Permit);
                r.protocol = Some(6);
                r.dst_port = Some((0, 1023));
                r
            }],
        };
        for k in [Key::of_ipv4(&bytes), Key::of_ipv6(&bytes)].into_iter().flatten() {
            let d = acl.decide(&k);
            prop_assert!(d.rule.is_none() || d.action == Action::Permit);
        }
    }
}
