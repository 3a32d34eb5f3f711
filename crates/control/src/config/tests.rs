use super::*;

const EXAMPLE: &str = r#"
[[interface]]
name = "r-eth0"
address = "10.1.0.1/24"

[[interface]]
name = "r-eth1"
address = "10.2.0.1/24"

[[route]]
prefix = "10.3.0.0/16"
via = "10.2.0.2"
"#;

fn parse(s: &str) -> Result<ForwarderFile, ConfigError> {
    ForwarderFile::parse(Path::new("r.toml"), s)
}

#[test]
fn the_documented_example_parses() {
    let c = parse(EXAMPLE).unwrap();
    assert_eq!(c.interfaces.len(), 2);
    assert_eq!(c.interfaces[1].addr, Ipv4Addr::new(10, 2, 0, 1));
    assert_eq!(c.routes[0].prefix.to_string(), "10.3.0.0/16");
    assert_eq!(c.routes[0].via, vec![Ipv4Addr::new(10, 2, 0, 2)]);
    let ecmp = parse(&EXAMPLE.replace("via = \"10.2.0.2\"", "via = [\"10.2.0.2\", \"10.2.0.3\"]"))
        .unwrap();
    assert_eq!(ecmp.routes[0].via.len(), 2);
    assert_eq!(c.routes[0].line, 11);
    assert_eq!(c.tuning, ForwarderConfig::default());
    assert_eq!(c.io, IoConfig::default());
    let io = parse(&format!(
        "{EXAMPLE}\n[io]\nbackend = \"packet\"\nbusy_poll = true\n"
    ))
    .unwrap()
    .io;
    assert_eq!((io.backend, io.busy_poll), (io::Backend::Packet, true));
    assert_eq!(io.packet_ring, io::RxRing::Frames);
    let io = parse(&format!("{EXAMPLE}\n[io]\npacket_ring = \"blocks\"\n"))
        .unwrap()
        .io;
    assert_eq!((io.packet_ring, io.workers), (io::RxRing::Blocks, 1));
    assert!(io.shared_umem);
    assert_eq!(io.slow_path_limit, io::fastpath::SLOW_PATH_LIMIT);
    let io = parse(&format!("{EXAMPLE}\n[io]\nslow_path_limit = 0\n"))
        .unwrap()
        .io;
    assert_eq!(io.slow_path_limit, 0);
    let io = parse(&format!("{EXAMPLE}\n[io]\nshared_umem = false\n"))
        .unwrap()
        .io;
    assert!(!io.shared_umem);
    let io = parse(&format!("{EXAMPLE}\n[io]\nworkers = 2\n"))
        .unwrap()
        .io;
    assert_eq!(io.workers, 2);
    assert_eq!(io.priority, None);
    let io = parse(&format!("{EXAMPLE}\n[io]\npriority = 60\n"))
        .unwrap()
        .io;
    assert_eq!(io.priority, Some(60));
    let io = parse(&format!("{EXAMPLE}\n[io]\ncpus = \"4-5,7\"\n"))
        .unwrap()
        .io;
    assert_eq!(io.cpus.map(|c| c.cpus()), Some(vec![4, 5, 7]));
    let m = parse(&format!(
        "{EXAMPLE}\n[metrics]\nlisten = \"127.0.0.1:9100\"\nelement = \"r1\"\n"
    ))
    .unwrap()
    .metrics;
    assert_eq!(m.listen, Some("127.0.0.1:9100".parse().unwrap()));
    assert_eq!(m.element.as_deref(), Some("r1"));
}

/// `address` takes a list with IPv6 prefixes; `[[route]]` takes IPv6 prefixes through
/// a gateway on one of them.
#[test]
fn ipv6_addresses_and_routes() {
    let src = EXAMPLE
        .replace("\"10.2.0.1/24\"", "[\"10.2.0.1/24\", \"2001:db8:2::1/64\"]")
        .replace("prefix = \"10.3.0.0/16\"", "prefix = \"2001:db8:3::/48\"")
        .replace("via = \"10.2.0.2\"", "via = \"2001:db8:2::2\"");
    let c = parse(&src).unwrap();
    assert_eq!(c.interfaces[1].addr, Ipv4Addr::new(10, 2, 0, 1));
    assert_eq!(
        c.interfaces[1].addrs6,
        vec![("2001:db8:2::1".parse().unwrap(), 64)]
    );
    assert!(c.interfaces[0].addrs6.is_empty());
    assert_eq!(c.routes6.len(), 1);
    assert_eq!(c.routes6[0].prefix.to_string(), "2001:db8:3::/48");
    assert_eq!(
        c.routes6[0].via,
        ["2001:db8:2::2".parse::<std::net::Ipv6Addr>().unwrap()]
    );
    assert_eq!(c.routes6[0].line, 11);
}

/// Each bad file gives an error with the right line and key.
#[test]
fn an_ipv6_only_interface_has_no_ipv4_network() {
    let c = parse(
        r#"
[[interface]]
name = "r-eth0"
address = "10.1.0.1/24"

[[interface]]
name = "r-eth1"
address = "2001:db8:12::1/64"

[[route]]
prefix = "2001:db8:2::/64"
via = "2001:db8:12::2"
"#,
    )
    .unwrap();
    let i = &c.interfaces[1];
    assert_eq!((i.v4(), i.net()), (None, None));
    assert_eq!(i.addresses(), ["2001:db8:12::1/64"]);
    assert_eq!(c.interfaces[0].addresses(), ["10.1.0.1/24"]);
    assert_eq!(c.routes6.len(), 1);
}

/// An unnumbered link (`address = []`: IPv6 link-local only) and a route through a
/// link-local gateway named with its interface; the errors such gateways get.
#[test]
fn a_link_local_gateway_names_its_interface() {
    let src = r#"
[[interface]]
name = "r-eth0"
address = "2001:db8:1::1/64"

[[interface]]
name = "r-eth1"
address = []

[[route]]
prefix = "2001:db8:2::/64"
via = "fe80::2%r-eth1"
"#;
    let c = parse(src).unwrap();
    assert_eq!(c.interfaces[1].addresses(), Vec::<String>::new());
    let via = c.routes6[0].via[0];
    assert_eq!(
        wire::ipv6::link_local_scope(via),
        Some(("fe80::2".parse().unwrap(), wire::ipv6::IFACE_SCOPE + 1))
    );
    // Shown as written, and loaded again to the same.
    let shown = crate::showconfig::forwarder(&c);
    assert!(shown.contains("\"fe80::2%r-eth1\""), "{shown}");
    assert_eq!(parse(&shown).unwrap().routes6[0].via, c.routes6[0].via);
    for (via, msg) in [
        ("fe80::2", "name its interface"),
        ("fe80::2%r-eth9", "none of the interfaces"),
        ("2001:db8:1::2%r-eth0", "only a link-local gateway"),
    ] {
        let e = parse(&src.replace("fe80::2%r-eth1", via)).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (12, "route[0].via"), "{e}");
        assert!(e.message.contains(msg), "{via}: {e}");
    }
}

#[test]
fn errors_name_line_and_key() {
    let cases = [
            (
                EXAMPLE.replace("10.2.0.1/24", "10.2.0.1/33"),
                8,
                "interface[1].address",
                "prefix length",
            ),
            (
                EXAMPLE.replace("10.2.0.1/24", "10.2.0.300/24"),
                8,
                "interface[1].address",
                "not an IPv4",
            ),
            (
                EXAMPLE.replace("10.3.0.0/16", "10.3.0.1/16"),
                11,
                "route[0].prefix",
                "host bits",
            ),
            (
                EXAMPLE.replace("\"10.2.0.1/24\"", "[\"10.2.0.1/24\", \"2001:db8::1/129\"]"),
                8,
                "interface[1].address",
                "not 1 to 128",
            ),
            (
                EXAMPLE.replace("\"10.2.0.1/24\"", "[\"10.2.0.1/24\", \"fe80::1/64\"]"),
                8,
                "interface[1].address",
                "link-local address comes from the MAC",
            ),
            (
                EXAMPLE.replace("\"10.2.0.1/24\"", "\"0.0.0.0/24\""),
                8,
                "interface[1].address",
                "0.0.0.0 is no interface's address",
            ),
            (
                // An IPv6-only interface has no IPv4 network for a gateway to be on.
                EXAMPLE.replace("\"10.2.0.1/24\"", "[\"2001:db8::1/64\"]"),
                12,
                "route[0].via",
                "on none of the interfaces' networks",
            ),
            (
                EXAMPLE.replace("\"10.2.0.1/24\"", "[\"10.2.0.1/24\", \"10.9.0.1/24\"]"),
                8,
                "interface[1].address",
                "more than one IPv4",
            ),
            (
                EXAMPLE.replace("prefix = \"10.3.0.0/16\"", "prefix = \"2001:db8:3::/48\""),
                12,
                "route[0].via",
                "not an IPv6 address",
            ),
            (
                EXAMPLE
                    .replace("\"10.2.0.1/24\"", "[\"10.2.0.1/24\", \"2001:db8:2::1/64\"]")
                    .replace("prefix = \"10.3.0.0/16\"", "prefix = \"2001:db8:3::/48\"")
                    .replace("via = \"10.2.0.2\"", "via = \"2001:db8:9::2\""),
                12,
                "route[0].via",
                "none of the interfaces' IPv6 networks",
            ),
            (
                EXAMPLE.replace("via = \"10.2.0.2\"", "via = \"192.0.2.1\""),
                12,
                "route[0].via",
                "none of the interfaces",
            ),
            (
                EXAMPLE.replace("address = \"10.1.0.1/24\"", "adress = \"10.1.0.1/24\""),
                4,
                "adress",
                "unknown field",
            ),
            (
                EXAMPLE.replace("name = \"r-eth1\"", "name = 5"),
                7,
                "name",
                "invalid type",
            ),
            (
                EXAMPLE.replace("name = \"r-eth1\"", "name = \"r-eth0\""),
                7,
                "interface[1].name",
                "twice",
            ),
            (
                format!("{EXAMPLE}\n[tuning]\nicmp_burst = \"x\"\n"),
                15,
                "icmp_burst",
                "invalid type",
            ),
            (
                format!("{EXAMPLE}\n[io]\nbackend = \"dpdk\"\n"),
                15,
                "io.backend",
                "is not \"auto\", \"xdp\" or \"packet\"",
            ),
            (
                format!("{EXAMPLE}\n[io]\nbusy_poll = 1\n"),
                15,
                "busy_poll",
                "invalid type",
            ),
            (
                format!("{EXAMPLE}\n[io]\nslow_path_limit = -1\n"),
                15,
                "io.slow_path_limit",
                "frames per second",
            ),
            (
                format!("{EXAMPLE}\n[io]\nshared_umem = \"yes\"\n"),
                15,
                "shared_umem",
                "invalid type",
            ),
            (
                format!("{EXAMPLE}\n[io]\npacket_ring = \"v3\"\n"),
                15,
                "io.packet_ring",
                "is not \"frames\" or \"blocks\"",
            ),
            (
                format!("{EXAMPLE}\n[io]\nworkers = 0\n"),
                15,
                "io.workers",
                "from 1 to 64",
            ),
            (
                format!("{EXAMPLE}\n[io]\npriority = 100\n"),
                15,
                "io.priority",
                "from 1 to 99",
            ),
            (
                format!("{EXAMPLE}\n[io]\npriority = 0\n"),
                15,
                "io.priority",
                "from 1 to 99",
            ),
            (
                format!("{EXAMPLE}\n[io]\ncpus = \"5-4\"\n"),
                15,
                "io.cpus",
                "from the lower CPU to the higher",
            ),
            (
                format!("{EXAMPLE}\n[io]\ncpus = \"x\"\n"),
                15,
                "io.cpus",
                "not a CPU number",
            ),
            (
                format!("{EXAMPLE}\n[star]\ninternal = \"nope\"\n"),
                15,
                "star.internal",
                "is not an untagged interface",
            ),
            (
                format!("{EXAMPLE}\n[star]\ninternal = \"r-eth0\"\n[[star.member]]\nmac = \"02:00:00:00:05:01\"\nnetworks = [{{ prefix = \"10.1.0.0/24\", port = 300 }}]\n"),
                18,
                "star.member[0].networks[0].port",
                "is not a port index",
            ),
            (
                format!("{EXAMPLE}\n[star]\ninternal = \"r-eth0\"\n[[star.member]]\nmac = \"02:00:00:00:05:01\"\nnetworks = [{{ prefix = \"fd00:1::/64\", port = 255 }}]\n"),
                18,
                "star.member[0].networks[0].port",
                "is not a port index",
            ),
            (
                format!("{EXAMPLE}\n[star]\ninternal = \"r-eth0\"\n[[star.member]]\nmac = \"02:00:00:00:05:01\"\nnetworks = [{{ prefix = \"fd00:1::1/64\", port = 1 }}]\n"),
                18,
                "star.member[0].networks[0].prefix",
                "host bits",
            ),
            (
                format!("{EXAMPLE}\n[metrics]\nlisten = \"9100\"\n"),
                15,
                "metrics.listen",
                "is not ADDR:PORT",
            ),
            (
                format!("{EXAMPLE}\n[io]\nworker = 2\n"),
                15,
                "worker",
                "unknown field",
            ),
        ];
    for (src, line, key, msg) in cases {
        let e = parse(&src).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (line, key), "{e}");
        assert!(e.message.contains(msg), "{e}");
        assert!(
            e.to_string()
                .starts_with(&format!("r.toml:{line}: key `{key}`")),
            "{e}"
        );
    }
    assert!(parse("").unwrap_err().message.contains("no [[interface]]"));
}

const BACKEND: &str = r#"
[[interface]]
name = "r1-int"
address = "10.255.0.11/24"

[[interface]]
name = "ext-a"
parent = "r1-int"
vlan = 10
address = "10.1.0.1/24"

[backend]
internal = "r1-int"
hello_interval_ms = 200
"#;

/// `[dist]`: a key file relative to the config file; errors name the line and key.
#[test]
fn dist_key_file() {
    let dir = std::env::temp_dir().join(format!("tessera-dist-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("r.toml");
    std::fs::write(dir.join("good.key"), format!("{}\n", "a1".repeat(32))).unwrap();
    std::fs::write(dir.join("short.key"), "a1a1a1").unwrap();
    let at = |tail: &str| ForwarderFile::parse(&cfg, &format!("{EXAMPLE}\n[dist]\n{tail}"));
    let c = at("key_file = \"good.key\"\nmax_age_s = 5\n").unwrap();
    assert!(c.dist.key().is_some());
    assert_eq!(c.dist.max_age, std::time::Duration::from_secs(5));
    assert!(
        !format!("{:?}", c.dist).contains("a1a1"),
        "Debug hides the key"
    );
    assert!(parse(EXAMPLE).unwrap().dist.key().is_none());
    let line = EXAMPLE.lines().count() + 3;
    for (tail, want) in [
        ("key_file = \"nope.key\"", "cannot read"),
        ("key_file = \"short.key\"", "at least 16 bytes"),
    ] {
        let e = at(tail).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (line, "dist.key_file"), "{e}");
        assert!(e.message.contains(want), "{e}");
    }
    let e = at("key = \"00\"").unwrap_err();
    assert!(e.message.contains("unknown field"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn backend_sub_interfaces() {
    let c = parse(BACKEND).unwrap();
    assert_eq!(c.interfaces[1].vlan, Some((0, 10)));
    assert_eq!(
        c.backend,
        Some(BackendConfig {
            internal: 0,
            hello_interval_ms: 200
        })
    );
    let cases = [
        (
            BACKEND.replace("vlan = 10", "vlan = 4095"),
            9,
            "interface[1].vlan",
            "not 1 to 4094",
        ),
        (
            BACKEND.replace("parent = \"r1-int\"", "parent = \"nope\""),
            8,
            "interface[1].parent",
            "not an untagged interface",
        ),
        (
            BACKEND.replace("vlan = 10\n", ""),
            8,
            "interface[1].parent",
            "needs `vlan`",
        ),
        (
            BACKEND.replace("internal = \"r1-int\"", "internal = \"ext-a\""),
            13,
            "backend.internal",
            "not an untagged",
        ),
        (
            BACKEND.replace("= 200", "= 5"),
            14,
            "backend.hello_interval_ms",
            "not 10 to",
        ),
    ];
    for (src, line, key, msg) in cases {
        let e = parse(&src).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (line, key), "{e}");
        assert!(e.message.contains(msg), "{e}");
    }
}

const ACL: &str = r#"
[[acl]]
name = "edge-in"
default = "permit"

[[acl.rule]]
action = "deny"
protocol = "tcp"
src = "0.0.0.0/0"
dst = "10.2.0.0/24"
dst_port = "22"

[[acl.rule]]
action = "reject"
protocol = "udp"
dst_port = 5000

[[acl.rule]]
action = "permit"
protocol = "icmp"
icmp_type = 8
icmp_code = 0
dscp = 46

[[acl.rule]]
action = "deny"
protocol = "tcp"
tcp_flags = "syn,!ack"
src = "2001:db8::/32"
fragment = false

[[interface]]
name = "r0"
address = "10.1.0.1/24"
acl_in = "edge-in"
urpf = "strict"

[[interface]]
name = "r1"
address = "10.2.0.1/24"
acl_out = "edge-in"
urpf = "loose"
urpf_allow_default = true
"#;

#[test]
fn access_lists_and_reverse_path_checks_parse() {
    use dataplane::acl::{Action, Urpf};
    let c = parse(ACL).unwrap();
    assert_eq!(c.acls.len(), 1);
    let a = &c.acls[0];
    assert_eq!(
        (a.name.as_str(), a.default, a.rules.len()),
        ("edge-in", Action::Permit, 4)
    );
    assert_eq!(a.rules[0].dst_port, Some((22, 22)));
    assert_eq!(a.rules[1].action, Action::Reject);
    assert_eq!(a.rules[1].dst_port, Some((5000, 5000)));
    assert_eq!((a.rules[2].icmp_type, a.rules[2].dscp), (Some(8), Some(46)));
    assert_eq!(a.rules[3].tcp_flags, Some((0x12, 0x02)));
    assert_eq!(a.rules[3].fragment, Some(false));
    let f = &c.interfaces[0].filter;
    assert_eq!(
        (f.acl_in.as_deref(), f.urpf),
        (Some("edge-in"), Urpf::Strict)
    );
    let f = &c.interfaces[1].filter;
    assert_eq!(
        (f.acl_out.as_deref(), f.urpf, f.urpf_allow_default),
        (Some("edge-in"), Urpf::Loose, true)
    );
    let b = c.filters(None);
    assert_eq!(b.bindings[0].acl_in, Some(0));
    assert!(b.any());
    // Shown, and loaded again to the same lists and keys.
    let shown = crate::showconfig::forwarder(&c);
    let again = parse(&shown).unwrap_or_else(|e| panic!("{e}\n{shown}"));
    assert_eq!(again.acls, c.acls, "{shown}");
    assert_eq!(
        again
            .interfaces
            .iter()
            .map(|i| &i.filter)
            .collect::<Vec<_>>(),
        c.interfaces.iter().map(|i| &i.filter).collect::<Vec<_>>()
    );
}

#[test]
fn a_bad_access_list_is_refused_naming_line_and_key() {
    let bad = |from: &str, to: &str, line: usize, key: &str, says: &str| {
        let text = ACL.replacen(from, to, 1);
        assert_ne!(text, ACL, "{from:?} is not in the example");
        let e = parse(&text).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (line, key), "{e}");
        assert!(e.message.contains(says), "{e}");
    };
    bad(
        "dst_port = \"22\"",
        "dst_port = \"22-2\"",
        11,
        "acl[0].rule[0].dst_port",
        "above its last",
    );
    bad(
        "action = \"deny\"",
        "action = \"drop\"",
        7,
        "acl[0].rule[0].action",
        "no action",
    );
    bad(
        "protocol = \"tcp\"",
        "protocol = \"tcpp\"",
        8,
        "acl[0].rule[0].protocol",
        "no protocol",
    );
    bad(
        "dst = \"10.2.0.0/24\"",
        "dst = \"2001:db8::/32\"",
        10,
        "acl[0].rule[0].dst",
        "different families",
    );
    bad(
        "protocol = \"udp\"",
        "protocol = \"gre\"",
        16,
        "acl[0].rule[1].dst_port",
        "ports need",
    );
    bad(
        "dscp = 46",
        "dscp = 64",
        23,
        "acl[0].rule[2].dscp",
        "not 0 to 63",
    );
    bad(
        "tcp_flags = \"syn,!ack\"",
        "tcp_flags = \"syn,nope\"",
        28,
        "acl[0].rule[3].tcp_flags",
        "no TCP flag",
    );
    bad(
        "default = \"permit\"",
        "default = \"reject\"",
        4,
        "acl[0].default",
        "\"permit\" or \"deny\"",
    );
    bad(
        "acl_in = \"edge-in\"",
        "acl_in = \"edge\"",
        35,
        "interface[0].acl_in",
        "no [[acl]] is named",
    );
    bad(
        "urpf = \"strict\"",
        "urpf = \"on\"",
        36,
        "interface[0].urpf",
        "no reverse-path mode",
    );
    bad(
        "name = \"edge-in\"",
        "name = \"edge-in\"\nfoo = 1",
        4,
        "foo",
        "unknown field",
    );
}
