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

/// A rule of few values per field, so that random keys hit it often.
fn arb_rule() -> impl Strategy<Value = Rule> {
    let net4 = (
        0u8..3,
        prop_oneof![Just(0u8), Just(8), Just(16), Just(24), Just(32)],
    )
        .prop_map(|(b, l)| Net::V4(fib::Prefix::new(Ipv4Addr::new(10, b, 0, 1), l)));
    let net6 = (
        0u16..3,
        prop_oneof![Just(0u8), Just(32), Just(48), Just(128)],
    )
        .prop_map(|(b, l)| {
            Net::V6(fib::Prefix6::new(
                Ipv6Addr::new(0x2001, 0xdb8, b, 0, 0, 0, 0, 1),
                l,
            ))
        });
    let ports = (0u16..40, 0u16..40).prop_map(|(a, b)| (a.min(b), a.max(b)));
    (
        prop_oneof![
            Just(Action::Permit),
            Just(Action::Deny),
            Just(Action::Reject)
        ],
        proptest::option::of(prop_oneof![Just(1u8), Just(6), Just(17), Just(58)]),
        any::<bool>(),
        proptest::option::of(net4),
        proptest::option::of(net6),
        proptest::option::of(ports.clone()),
        proptest::option::of(ports),
        proptest::option::of(0u8..3),
        proptest::option::of((0u8..4, 0u8..4)),
        proptest::option::of(0u8..2),
        proptest::option::of(any::<bool>()),
    )
        .prop_map(
            |(action, protocol, six, n4, n6, sp, dp, icmp, flags, dscp, frag)| {
                let mut r = Rule::any(action);
                r.protocol = protocol;
                if six {
                    r.src = n6;
                } else {
                    r.dst = n4;
                }
                if matches!(protocol, Some(6 | 17)) {
                    r.src_port = sp;
                    r.dst_port = dp;
                }
                if matches!(protocol, Some(1 | 58)) {
                    r.icmp_type = icmp;
                    r.icmp_code = icmp.map(|_| 0);
                    if (protocol == Some(1)) == six {
                        r.src = None;
                        r.dst = None;
                    }
                }
                if protocol == Some(6) {
                    r.tcp_flags = flags.map(|(m, v)| (m << 1, (v & m) << 1));
                }
                r.dscp = dscp;
                r.fragment = frag;
                r
            },
        )
}

fn arb_key() -> impl Strategy<Value = Key> {
    (
        any::<bool>(),
        0u8..3,
        0u8..3,
        prop_oneof![Just(1u8), Just(6), Just(17), Just(58), Just(47)],
        0u16..40,
        0u16..40,
        0u8..8,
        0u8..2,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(six, a, b, protocol, sp, dp, flags, dscp, frag, l4)| {
            let (src, dst) = if six {
                (
                    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, a as u16, 0, 0, 0, 0, 9)),
                    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, b as u16, 0, 0, 0, 0, 1)),
                )
            } else {
                (
                    IpAddr::V4(Ipv4Addr::new(10, a, 0, 9)),
                    IpAddr::V4(Ipv4Addr::new(10, b, 0, 1)),
                )
            };
            let mut k = Key::addresses(src, dst, protocol);
            k.dscp = dscp;
            k.fragment = frag;
            if l4 {
                match protocol {
                    6 | 17 => k.ports = Some((sp, dp)),
                    1 | 58 => k.icmp = Some(((sp % 3) as u8, 0)),
                    _ => {}
                }
                if protocol == 6 {
                    k.tcp_flags = Some(flags << 1);
                }
            }
            k
        })
}

#[test]
fn port_ranges_split_into_the_blocks_that_cover_them_exactly() {
    for (a, b) in [
        (0, 65535),
        (22, 22),
        (1000, 2000),
        (1, 65534),
        (0, 0),
        (65535, 65535),
    ] {
        let bl = tss::blocks(a, b);
        assert!(bl.len() <= 30, "{a}-{b}: {}", bl.len());
        for p in [
            0u16, 1, 21, 22, 23, 999, 1000, 1500, 2000, 2001, 65534, 65535,
        ] {
            let inside = bl.iter().any(|&(v, m)| p & m == v);
            assert_eq!(inside, a <= p && p <= b, "{a}-{b} at {p}");
        }
    }
    assert_eq!(tss::blocks(0, 65535), vec![(0, 0)]);
}

proptest! {
    /// The tuple-space search decides as the reference does, on every key.
    #[test]
    fn the_tuple_search_decides_as_the_reference(
        rules in proptest::collection::vec(arb_rule(), 0..12),
        keys in proptest::collection::vec(arb_key(), 1..24),
        default in prop_oneof![Just(Action::Permit), Just(Action::Deny)],
    ) {
        let acl = Acl { name: "x".into(), default, rules };
        let other = Acl { name: "y".into(), default: Action::Permit, rules: vec![] };
        let slots = vec![vec![7], (100..100 + acl.rules.len() as u32 + 1).collect()];
        let t = tss::Tables::compile(&[&other, &acl], &slots, 16).unwrap();
        for k in &keys {
            let want = acl.decide(k);
            let got = t.lookup(1, &tss::key_bytes(k), 16);
            match (want.rule, got) {
                (Some(i), Ok(h)) => {
                    prop_assert_eq!(h.prio as usize, i, "{:?} {:?}", k, acl.rules);
                    prop_assert_eq!(h.slot, 100 + i as u32);
                    prop_assert_eq!(h.action, want.action);
                }
                (None, Err(a)) => prop_assert_eq!(a, default),
                (w, g) => prop_assert!(false, "reference {:?}, tuples {:?}; {:?} {:?}", w, g, k, acl.rules),
            }
            prop_assert_eq!(t.lookup(0, &tss::key_bytes(k), 16), Err(Action::Permit));
        }
    }
}

#[test]
fn a_reload_keeps_the_counts_of_the_rules_it_keeps() {
    let mut ssh = rule(Action::Deny);
    ssh.protocol = Some(6);
    ssh.dst_port = Some((22, 22));
    let mut web = rule(Action::Permit);
    web.protocol = Some(6);
    web.dst_port = Some((80, 80));
    let acl = |rules: Vec<Rule>| Acl {
        name: "edge".into(),
        default: Action::Permit,
        rules,
    };
    let names = vec!["r0".to_string()];
    let b = vec![Binding::default()];
    let one = Filters::new(
        vec![acl(vec![ssh.clone(), web.clone()])],
        b.clone(),
        names.clone(),
        None,
    );
    let k = Key {
        ports: Some((1, 22)),
        ..Key::addresses("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), 6)
    };
    assert_eq!(one.decide(0, &k, 60).rule, Some(0));
    one.drops[0].urpf.add(1, 60);
    // web moves up, ssh stays: ssh keeps its count; a new rule starts at zero.
    let mut dns = rule(Action::Permit);
    dns.protocol = Some(17);
    let two = Filters::new(vec![acl(vec![web, dns, ssh])], b, names, Some(&one));
    assert_eq!(two.lists[0].counts[2].get(), (1, 60));
    assert_eq!(two.lists[0].counts[1].get(), (0, 0));
    assert_eq!(two.drops[0].urpf.get(), (1, 60));
    assert_eq!(two.version, one.version + 1);
    assert_eq!(two.slots(5), vec![vec![5, 6, 7, 8]]);
}
