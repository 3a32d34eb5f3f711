use super::*;

#[test]
fn a_reload_takes_routes_and_names_any_other_changed_key() {
    let a = "routes_file = \"r.txt\"\n[[interface]]\nname = \"a\"\naddress = \"10.0.0.1/24\"\n\n[[route]]\nprefix = \"10.9.0.0/16\"\nvia = \"10.0.0.2\"\n";
    assert_eq!(changed_key(a, a), None);
    assert_eq!(changed_key(a, &a.replace("10.0.0.2", "10.0.0.3")), None);
    assert_eq!(changed_key(a, &a.replace("r.txt", "s.txt")), None);
    assert_eq!(changed_key(a, &format!("# a comment\n{a}")), None);
    assert_eq!(
        changed_key(a, &a.replace("10.0.0.1/24", "10.0.0.1/16")).as_deref(),
        Some("interface[0].address")
    );
    assert_eq!(
        changed_key(a, &format!("{a}[io]\nworkers = 2\n")).as_deref(),
        Some("io")
    );
    assert_eq!(
        changed_key(a, &a.replace("name = \"a\"", "name = \"a\"\nmtu = 9000")).as_deref(),
        Some("interface[0].mtu")
    );
}

/// The example of the documentation, verbatim, with the routes file it names.
#[test]
fn documented_example_builds_a_forwarder() {
    let dir = std::env::temp_dir().join(format!("tessera-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = r#"routes_file = "routes.txt"   # optional; one "PREFIX NEXTHOP" per line, e.g. "198.51.100.0/24 10.2.0.2"

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
    std::fs::write(dir.join("r.toml"), cfg).unwrap();
    std::fs::write(dir.join("routes.txt"), "198.51.100.0/24 10.2.0.2\n").unwrap();
    let file = ForwarderFile::load(&dir.join("r.toml")).unwrap();
    let macs = [
        Link::new(MacAddr([2, 0, 0, 0, 0, 1])),
        Link::new(MacAddr([2, 0, 0, 0, 0, 2])),
    ];
    let mut f = build(&file, &macs).unwrap();
    assert_eq!(f.route_count(), 4);
    let hop = f.route("198.51.100.9".parse().unwrap()).unwrap();
    assert_eq!((hop.port, hop.via), (1, Some("10.2.0.2".parse().unwrap())));
    assert_eq!(f.route("10.3.200.1".parse().unwrap()).unwrap().port, 1);
    // A route file line whose gateway is on no network is an error naming the line.
    std::fs::write(
        dir.join("routes.txt"),
        "198.51.100.0/24 10.2.0.2\n192.0.2.0/24 10.9.0.1\n",
    )
    .unwrap();
    let e = build(&file, &macs).err().unwrap();
    assert!(e.contains("routes.txt:2:") && e.contains("10.9.0.1"), "{e}");
    // A real table (here MRT, gzip-compressed) through a chosen gateway.
    let mut mrt = Vec::new();
    crate::tables::mrt::write_rib_ipv4(
        &mut mrt,
        0,
        "1.0.0.0/24".parse().unwrap(),
        Some("192.0.2.9".parse().unwrap()),
    );
    crate::tables::mrt::write_rib_ipv4(&mut mrt, 1, "8.8.8.0/24".parse().unwrap(), None);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &mrt).unwrap();
    std::fs::write(dir.join("rib.gz"), gz.finish().unwrap()).unwrap();
    std::fs::write(
        dir.join("r.toml"),
        cfg.replace(
            "routes_file = \"routes.txt\"",
            "routes_file = \"rib.gz\"\nroutes_file_via = \"10.1.0.7\"",
        ),
    )
    .unwrap();
    let file = ForwarderFile::load(&dir.join("r.toml")).unwrap();
    let mut f = build(&file, &macs).unwrap();
    assert_eq!(f.route_count(), 5);
    assert_eq!(
        f.route("8.8.8.8".parse().unwrap()).unwrap().via,
        Some("10.1.0.7".parse().unwrap())
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
/// IPv6 routes come from the routes file as IPv4 ones do: text lines with IPv6 next
/// hops, or any table through an IPv6 gateway named in `routes_file_via`; the worker
/// answers IPv6 route commands.
#[test]
fn ipv6_routes_come_from_routes_files_and_commands() {
    let dir = std::env::temp_dir().join(format!("tessera-routes6-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = r#"routes_file = "routes.txt"

[[interface]]
name = "r-eth0"
address = ["10.1.0.1/24", "2001:db8:1::1/64"]

[[interface]]
name = "r-eth1"
address = ["10.2.0.1/24", "2001:db8:2::1/64"]

[[route]]
prefix = "2001:db8:3::/48"
via = "2001:db8:2::2"
"#;
    std::fs::write(dir.join("r.toml"), cfg).unwrap();
    std::fs::write(
        dir.join("routes.txt"),
        "198.51.100.0/24 10.2.0.2\n2001:db8:100::/40 2001:db8:1::7\n",
    )
    .unwrap();
    let file = ForwarderFile::load(&dir.join("r.toml")).unwrap();
    let macs = [
        Link::new(MacAddr([2, 0, 0, 0, 0, 1])),
        Link::new(MacAddr([2, 0, 0, 0, 0, 2])),
    ];
    let mut f = build(&file, &macs).unwrap();
    let a6 = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap();
    let hop = f.route6(a6("2001:db8:1ff::1")).unwrap();
    assert_eq!((hop.iface, hop.via), (0, Some(a6("2001:db8:1::7"))));
    assert_eq!(f.route6(a6("2001:db8:3::9")).unwrap().iface, 1);
    // Two connected prefixes, the static route, the file's route.
    assert_eq!(f.route_count6(), 4);
    assert!(f.route("198.51.100.1".parse().unwrap()).is_some());
    // A gateway on none of the IPv6 networks, or two of them: errors naming the line.
    for (line, what) in [
        ("2001:db8:100::/40 2001:db8:9::1\n", "2001:db8:9::1"),
        (
            "2001:db8:100::/40 2001:db8:1::7 2001:db8:8::8\n",
            "2001:db8:8::8",
        ),
    ] {
        std::fs::write(
            dir.join("routes.txt"),
            format!("10.9.0.0/16 10.2.0.2\n{line}"),
        )
        .unwrap();
        let e = build(&file, &macs).err().unwrap();
        assert!(e.contains("routes.txt:2:") && e.contains(what), "{e}");
    }
    // A table of both families through one gateway of each.
    std::fs::write(
        dir.join("t.txt"),
        "1.0.0.0/24\n2001:db8:200::/48\n2001:db8:300::/48\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("r.toml"),
        cfg.replace(
            "routes_file = \"routes.txt\"",
            "routes_file = \"t.txt\"\nroutes_file_via = [\"10.1.0.7\", \"2001:db8:2::7\"]",
        ),
    )
    .unwrap();
    let file = ForwarderFile::load(&dir.join("r.toml")).unwrap();
    let mut f = build(&file, &macs).unwrap();
    assert_eq!(f.route_count6(), 5);
    assert_eq!(
        f.route6(a6("2001:db8:300::1")).unwrap().via,
        Some(a6("2001:db8:2::7"))
    );
    // The worker's commands: a reload takes what the control thread read, routes are
    // added and removed (never a connected prefix).
    let pending: Pending6 = Mutex::new(Some(vec![(
        fib::Prefix6::parse_strict("2001:db8:400::/48").unwrap(),
        vec![a6("2001:db8:1::9")],
    )]));
    let v = answer6(&mut f, "reload-routes6", &json!({}), &pending);
    assert_eq!(v["routes6"], 3, "{v}");
    assert!(f.route6(a6("2001:db8:300::1")).is_none());
    assert!(pending.lock().unwrap().is_none());
    let add = json!({"prefix": "2001:db8:500::/48", "via": ["2001:db8:2::5"]});
    assert_eq!(answer6(&mut f, "route-add", &add, &pending)["count6"], 4);
    assert_eq!(f.route6(a6("2001:db8:500::1")).unwrap().iface, 1);
    let bad = json!({"prefix": "2001:db8:500::/48", "via": "2001:db8:7::5"});
    let e = answer6(&mut f, "route-add", &bad, &pending);
    assert!(
        e["error"].as_str().unwrap().contains("2001:db8:7::5"),
        "{e}"
    );
    let del = json!({"prefix": "2001:db8:500::/48"});
    assert_eq!(
        answer6(&mut f, "route-del", &del, &pending)["removed"],
        true
    );
    let conn = json!({"prefix": "2001:db8:1::/64"});
    assert_eq!(
        answer6(&mut f, "route-del", &conn, &pending)["removed"],
        false
    );
    assert_eq!(
        answer6(&mut f, "routes6", &json!({}), &pending)["count6"],
        3
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
