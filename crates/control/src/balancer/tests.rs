use super::*;

const EXAMPLE: &str = r#"
[[interface]]
name = "lba-ext"
role = "external"
address = "10.1.0.1/24"
vlan = 10

[[interface]]
name = "lba-int"
role = "internal"

[balance]
mode = "hash"

[hello]
interval_ms = 100

[virtual_cp]
mac = "02:00:00:00:0c:01"
interface = "lba-int"

[[backend]]
mac = "02:00:00:00:01:01"
interface = "lba-int"

[[backend]]
mac = "02:00:00:00:01:02"
interface = "lba-int"
weight = 2

[[rule]]
name = "ssh-to-cp"
from = "external"
ethertype = 0x0800
protocol = 6
port = 22
to_router = true
action = "virtual-cp"
"#;

fn parse(s: &str) -> Result<BalancerFile, ConfigError> {
    BalancerFile::parse(Path::new("lb.toml"), s)
}

#[test]
fn the_documented_example_parses() {
    // The module documentation's example, verbatim.
    let doc: String = include_str!("../balancer.rs")
        .lines()
        .skip_while(|l| !l.starts_with("//! ```toml"))
        .skip(1)
        .take_while(|l| !l.starts_with("//! ```"))
        .map(|l| format!("{}\n", l.trim_start_matches("//!").trim_start_matches(' ')))
        .collect();
    let d = parse(&doc).unwrap();
    assert_eq!(d.cfg.mode, Mode::Maglev);
    assert_eq!(d.backends.len(), 1);
    let c = parse(EXAMPLE).unwrap();
    assert_eq!(c.interfaces[0].vlan, 10);
    assert_eq!(c.cfg.mode, Mode::Hash);
    assert_eq!(c.backends[1], ("02:00:00:00:01:02".parse().unwrap(), 1, 2));
    assert_eq!(c.cfg.virtual_cp.unwrap().1, 1);
    assert_eq!(c.cfg.rules[0].name, "ssh-to-cp");
    let macs: Vec<Link> = (0..2)
        .map(|i| Link::new(MacAddr([2, 0, 0, 0, 0xe, i])))
        .collect();
    let b = build(&c, &macs).unwrap();
    assert_eq!(b.table.live(), 2);
    let t = table_json(&b, Instant::now());
    assert_eq!(t["entries"][1]["weight"], 2);
}

#[test]
fn access_lists_on_external_interfaces() {
    let acl = "\n[[acl]]\nname = \"edge\"\n\n[[acl.rule]]\naction = \"deny\"\nprotocol = \"tcp\"\ndst_port = \"23\"\n";
    let with = |iface_keys: &str, list: &str| {
        EXAMPLE.replacen("vlan = 10\n", &format!("vlan = 10\n{iface_keys}"), 1) + list
    };
    let c = parse(&with("acl_in = \"edge\"\n", acl)).unwrap();
    assert_eq!(c.interfaces[0].filter.acl_in.as_deref(), Some("edge"));
    let f = c.filters(None);
    assert_eq!(f.bindings[0].acl_in, Some(0));
    // Shown, and loaded again to the same.
    let shown = c.shown();
    let again = parse(&shown).unwrap_or_else(|e| panic!("{e}\n{shown}"));
    assert_eq!(
        (again.acls, again.interfaces[0].filter.clone()),
        (c.acls.clone(), c.interfaces[0].filter.clone())
    );
    for (keys, list, key, says) in [
        (
            "urpf = \"strict\"\n",
            acl.to_string(),
            "interface[0].urpf",
            "no routes",
        ),
        (
            "acl_in = \"edge\"\n",
            acl.replace("deny", "reject"),
            "interface[0].acl_in",
            "use deny",
        ),
        (
            "acl_in = \"nope\"\n",
            acl.to_string(),
            "interface[0].acl_in",
            "no [[acl]]",
        ),
    ] {
        let e = parse(&with(keys, &list)).unwrap_err();
        assert_eq!(e.key, key, "{e}");
        assert!(e.message.contains(says), "{e}");
    }
    let inside = EXAMPLE.replacen(
        "role = \"internal\"\n",
        "role = \"internal\"\nacl_in = \"edge\"\n",
        1,
    ) + acl;
    let e = parse(&inside).unwrap_err();
    assert!(e.message.contains("only an external interface"), "{e}");
}

#[test]
fn errors_name_line_and_key() {
    let cases = [
        (
            EXAMPLE.replace("vlan = 10", "vlan = 0"),
            6,
            "interface[0].vlan",
            "not 1 to 4094",
        ),
        (
            EXAMPLE.replace("vlan = 10\n", ""),
            3,
            "interface[0].vlan",
            "needs its VLAN",
        ),
        (
            EXAMPLE.replace("role = \"internal\"", "role = \"inside\""),
            10,
            "role",
            "unknown variant",
        ),
        (
            EXAMPLE.replace("mode = \"hash\"", "mode = \"random\""),
            13,
            "mode",
            "unknown variant",
        ),
        (
            EXAMPLE.replace("mac = \"02:00:00:00:01:02\"", "mac = \"02:00:00:00:01\""),
            27,
            "backend[1].mac",
            "MAC address",
        ),
        (
            EXAMPLE.replace("mac = \"02:00:00:00:01:02\"", "mac = \"02:00:00:00:01:01\""),
            27,
            "backend[1].mac",
            "twice",
        ),
        (
            EXAMPLE.replace("weight = 2", "weight = 0"),
            29,
            "backend[1].weight",
            "weight 0",
        ),
        (
            EXAMPLE.replace(
                "interface = \"lba-int\"\n\n[[backend]]",
                "interface = \"lba-ext\"\n\n[[backend]]",
            ),
            24,
            "backend[0].interface",
            "not an internal",
        ),
        (
            EXAMPLE.replace("interval_ms = 100", "interval_ms = 1"),
            16,
            "hello.interval_ms",
            "not 10 to",
        ),
        (
            EXAMPLE.replace("protocol = 6\n", ""),
            31,
            "rule[0].port",
            "needs protocol",
        ),
    ];
    for (src, line, key, msg) in cases {
        let e = parse(&src).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (line, key), "{e}");
        assert!(e.message.contains(msg), "{e}");
    }
    assert!(parse("")
        .unwrap_err()
        .message
        .contains("at least one external"));
}

/// `[spare]`: the other LB's internal MAC and this one's priority; shown, and its
/// errors named by line and key.
#[test]
fn a_spare_pair() {
    let src = format!("{EXAMPLE}\n[spare]\npeer = \"02:00:00:00:0a:02\"\npriority = 200\n");
    let c = parse(&src).unwrap();
    let sp = c.cfg.spare.clone().unwrap();
    assert_eq!(sp.peer.to_string(), "02:00:00:00:0a:02");
    assert_eq!(sp.priority, 200);
    assert!(
        c.shown()
            .contains("[spare]\npeer = \"02:00:00:00:0a:02\"\npriority = 200"),
        "{}",
        c.shown()
    );
    let line = src.lines().count();
    for (bad, key, msg) in [
        ("priority = 0", "spare.priority", "not 1 to 255"),
        ("priority = 300", "priority", "u8"),
    ] {
        let e = parse(&src.replace("priority = 200", bad)).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (line, key), "{e}");
        assert!(e.message.contains(msg), "{e}");
    }
    let e = parse(&src.replace("\"02:00:00:00:0a:02\"", "\"ff:ff:ff:ff:ff:ff\"")).unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (line - 1, "spare.peer"), "{e}");
    let e = parse(&src.replace("priority = 200\n", "")).unwrap_err();
    assert!(e.message.contains("priority"), "{e}");
}

/// An external interface with IPv6 addresses only: no IPv4 address (0.0.0.0 inside),
/// shown without one, and loading again to the same.
#[test]
fn an_ipv6_only_external_interface() {
    let src = EXAMPLE.replace("\"10.1.0.1/24\"", "\"2001:db8:1::1/64\"");
    assert_ne!(src, EXAMPLE);
    let c = parse(&src).unwrap();
    let i = &c.interfaces[0];
    assert!(i.addr.is_unspecified());
    assert_eq!(i.addrs6.len(), 1);
    let shown = c.shown();
    assert!(!shown.contains("0.0.0.0"), "{shown}");
    assert_eq!(format!("{:?}", parse(&shown).unwrap()), format!("{c:?}"));
    let e = parse(&EXAMPLE.replace("\"10.1.0.1/24\"", "[]")).unwrap_err();
    assert_eq!(e.key, "interface[0].address", "{e}");
    assert!(e.message.contains("at least one address"), "{e}");
}

/// The same for the LBs' configs (a rule of their own added to one).
#[test]
fn an_lbs_shown_config_loads_to_the_same() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for f in ["labs/multistage/lba.toml", "labs/multistage/lbb.toml"] {
        let path = root.join(f);
        let text = std::fs::read_to_string(&path).unwrap()
            + "\n[[rule]]\nname = \"ssh-to-cp\"\nfrom = \"external\"\nethertype = 0x0800\nprotocol = 6\nport = 22\nto_router = true\naction = \"virtual-cp\"\n";
        let a = BalancerFile::parse(&path, &text).unwrap_or_else(|e| panic!("{f}: {e}"));
        let shown = a.shown();
        assert!(
            shown.contains("ssh-to-cp") && shown.contains("interval_ms = 100"),
            "{shown}"
        );
        let b = BalancerFile::parse(&path, &shown).unwrap_or_else(|e| panic!("{f}: {e}\n{shown}"));
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "{f}:\n{shown}");
    }
}

/// `[flow_export]` belongs to the controller of a multistage router (its back-ends sample,
/// it exports as the router): an LB's file that has one is refused, saying where it goes.
#[test]
fn flow_export_on_an_lb_is_refused_naming_where_it_belongs() {
    let src = format!("{EXAMPLE}\n[flow_export]\ncollector = \"10.1.0.9:2055\"\n");
    let line = EXAMPLE.lines().count() + 2;
    let e = parse(&src).unwrap_err();
    assert_eq!(e.key, "flow_export", "{e}");
    assert!((line..=line + 1).contains(&e.line), "{e}");
    assert!(e.message.contains("controller's [flow_export]"), "{e}");
}
