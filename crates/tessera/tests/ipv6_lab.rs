//! IPv6 through the router, between real Linux hosts: neighbour discovery, ping6 with one
//! hop-limit decrement, time exceeded from the router, echo to the router (also in
//! fragments), traceroute6,
//! TCP over IPv6; then the same lab with the Linux kernel as the router (the contender forwards
//! IPv6 too).

mod common;
use common::*;

fn ping6(lab: &TestLab, from: &str, args: &[&str]) -> (bool, String) {
    let mut argv = vec!["ping", "-6", "-n", "-c", "2", "-i", "0.2", "-W", "2"];
    argv.extend(args);
    let o = lab.exec(from, &argv);
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

/// [`ping6`] to `dst`, tried up to ten times 300 ms apart (a multistage router's back-ends
/// say hello before the LBs balance to them).
fn ping6_soon(lab: &TestLab, from: &str, dst: &str) -> (bool, String) {
    let mut tries = 0;
    loop {
        let (ok, out) = ping6(lab, from, &[dst]);
        tries += 1;
        if ok || tries == 10 {
            return (ok, out);
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

#[test]
fn hosts_ping_and_talk_tcp_over_ipv6_through_the_router() {
    let lab = TestLab::up(test_path("labs/dual-stack.toml"), &[]);
    // `lab show` lists the IPv6 addresses too, hosts' and the router's.
    let h1 = lab.node("h1")["interfaces"][0]["addresses"].to_string();
    assert!(
        h1.contains("2001:db8:1::10/64") && !h1.contains("fe80"),
        "{h1}"
    );
    let r = lab.node("r")["interfaces"].to_string();
    assert!(
        r.contains("2001:db8:1::1/64") && r.contains("2001:db8:2::1/64"),
        "{r}"
    );
    // Across the router: one hop-limit decrement (64 at the sender).
    let (ok, out) = ping6(&lab, "h1", &["2001:db8:2::10"]);
    assert!(ok, "{out}");
    assert!(out.contains("ttl=63"), "{out}");
    // Hop limit 1: time exceeded from the router's address on h1's network.
    let (ok, out) = ping6(&lab, "h1", &["-t", "1", "2001:db8:2::10"]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("From 2001:db8:1::1") && out.contains("Time exceeded"),
        "{out}"
    );
    // No route: destination unreachable from the router.
    let (ok, out) = ping6(&lab, "h1", &["2001:db8:77::1"]);
    assert!(!ok && out.contains("From 2001:db8:1::1"), "{out}");
    // The router's own addresses answer, on either side.
    for a in ["2001:db8:1::1", "2001:db8:2::1"] {
        let (ok, out) = ping6(&lab, "h1", &[a]);
        assert!(ok && out.contains("ttl=64"), "{a}: {out}");
    }
    // An echo request that arrives in fragments is reassembled and answered, the reply
    // (larger than the link) in fragments of the router's own.
    let (ok, out) = ping6(&lab, "h1", &["-s", "3000", "2001:db8:1::1"]);
    assert!(ok && out.contains("3008 bytes from 2001:db8:1::1"), "{out}");
    // IPv6 routes from the routes file, `route add`, `route del` and `route reload`: h2
    // holds 2001:db8:88::1 (the file's network) and 2001:db8:77::1 (none yet).
    lab.sh(
        "h2",
        &["ip", "-6", "addr", "add", "2001:db8:88::1/128", "dev", "lo"],
    );
    lab.sh(
        "h2",
        &["ip", "-6", "addr", "add", "2001:db8:77::1/128", "dev", "lo"],
    );
    let (ok, out) = ping6(&lab, "h1", &["2001:db8:88::1"]);
    assert!(ok && out.contains("ttl=63"), "{out}");
    let sock = lab.control("r");
    let sock = sock.to_str().unwrap();
    let route = |args: &[&str]| {
        let mut a = vec!["route"];
        a.extend(args);
        a.extend(["--control", sock]);
        let o = lab.tessera(&a);
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.status.success(),
            "{args:?}: {text} {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_str::<serde_json::Value>(&text).unwrap()
    };
    let v = route(&["add", "2001:db8:77::/48", "--via", "2001:db8:2::10"]);
    assert_eq!(v["count6"], 5, "{v}");
    let (ok, out) = ping6(&lab, "h1", &["2001:db8:77::1"]);
    assert!(ok && out.contains("ttl=63"), "{out}");
    let v = lab.show_json("routes", "r");
    assert_eq!(
        (v["count6"].as_u64(), v["count"].as_u64()),
        (Some(5), Some(3)),
        "{v}"
    );
    let v = route(&["del", "2001:db8:77::/48"]);
    assert_eq!(v["removed"], true, "{v}");
    let (ok, out) = ping6(&lab, "h1", &["2001:db8:77::1"]);
    assert!(!ok && out.contains("From 2001:db8:1::1"), "{out}");
    let v = route(&["reload"]);
    assert_eq!(v["routes6"], 4, "{v}");
    let (ok, out) = ping6(&lab, "h1", &["2001:db8:88::1"]);
    assert!(ok, "{out}");
    // traceroute6 shows the router, then the host.
    let o = lab.exec(
        "h1",
        &[
            "traceroute",
            "-6",
            "-n",
            "-q",
            "1",
            "-w",
            "2",
            "-m",
            "5",
            "2001:db8:2::10",
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let hops: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("1 "))
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert_eq!(hops, ["2001:db8:1::1", "2001:db8:2::10"], "{out}");
    // TCP over IPv6.
    lab.iperf3("h1", "h2", "2001:db8:2::10", &["-6", "-t", "1"]);
    let c = lab.counters("r");
    // By user space or the fast path (on by default; IPv6 in XDP and tcx alike).
    let by_fast = event_count(&c, "fast_path_forwarded");
    assert!(event_count(&c, "ip6_forwarded") + by_fast > 10, "{c}");
    assert!(event_count(&c, "nd6_adverts_sent") >= 1, "{c}");
    assert!(event_count(&c, "ip6_reassembled") >= 2, "{c}");
    assert!(event_count(&c, "ip6_fragments_made") >= 6, "{c}");
    assert!(drop_count(&c, "ip6_hop_limit_exceeded") >= 2, "{c}");
    assert_eq!(drop_count(&c, "ip6_malformed"), 0, "{c}");
    let n = lab.show_json("neighbours", "r");
    let n = n.to_string();
    assert!(
        n.contains("2001:db8:1::10") && n.contains("2001:db8:2::10"),
        "{n}"
    );
    drop(lab);

    let lab = TestLab::up(test_path("labs/dual-stack.toml"), &["--role", "r=linux"]);
    let (ok, out) = ping6(&lab, "h1", &["2001:db8:2::10"]);
    assert!(
        ok && out.contains("ttl=63"),
        "the kernel as the router: {out}"
    );
    // The kernel got the routes file's IPv6 route too.
    lab.sh(
        "h2",
        &["ip", "-6", "addr", "add", "2001:db8:88::1/128", "dev", "lo"],
    );
    let (ok, out) = ping6(&lab, "h1", &["2001:db8:88::1"]);
    assert!(ok, "the kernel as the router, the file's route: {out}");
}

/// An IPv6-only link between two forwarders (no IPv4 address on either end), and an
/// IPv6-only host behind the second (labs/v6-only.toml): ping6 and TCP across both, the
/// second router's ICMPv6 from its address on the IPv6-only link, its interfaces shown
/// with no IPv4 address, and its shown config loading again. Then the link unnumbered:
/// routes through link-local next hops.
#[test]
fn an_ipv6_only_link_between_two_forwarders_carries_ping6_and_tcp() {
    let lab = TestLab::up(test_path("labs/v6-only.toml"), &[]);
    let (ok, out) = ping6(&lab, "h1", &["2001:db8:2::10"]);
    assert!(ok && out.contains("ttl=62"), "{out}");
    // Hop limit 2: time exceeded from r2, sourced from its address on the IPv6-only link.
    let (ok, out) = ping6(&lab, "h1", &["-t", "2", "2001:db8:2::10"]);
    assert!(
        !ok && out.contains("From 2001:db8:12::2") && out.contains("Time exceeded"),
        "{out}"
    );
    // Each end of the link answers; r1 still answers over IPv4 on h1's network.
    for a in ["2001:db8:12::1", "2001:db8:12::2"] {
        let (ok, out) = ping6(&lab, "h1", &[a]);
        assert!(ok, "{a}: {out}");
    }
    let o = lab.exec(
        "h1",
        &["ping", "-n", "-c", "2", "-i", "0.2", "-W", "2", "10.1.0.1"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    // TCP over IPv6 through both.
    lab.iperf3("h1", "h2", "2001:db8:2::10", &["-6", "-t", "1"]);
    let c = lab.counters("r2");
    let by_fast = event_count(&c, "fast_path_forwarded");
    assert!(event_count(&c, "ip6_forwarded") + by_fast > 10, "{c}");
    assert_eq!(drop_count(&c, "ip6_malformed"), 0, "{c}");
    // No IPv4 address on r2's interfaces, and r1's IPv6-only one.
    let i = lab.show_json("interfaces", "r2");
    for port in i.as_array().unwrap() {
        assert!(port["address"].is_null(), "{i}");
        assert!(!port["addresses6"].as_array().unwrap().is_empty(), "{i}");
    }
    let i = lab.show_json("interfaces", "r1");
    assert_eq!(i[0]["address"], "10.1.0.1/24", "{i}");
    assert!(
        i[1]["address"].is_null() && i[1]["name"] == "r1-eth1",
        "{i}"
    );
    // The running config, shown, is r2's again (and `tessera check` takes it).
    let shown = lab.shown_config("r2", "forwarder");
    assert!(
        shown.contains("address = [\"2001:db8:12::2/64\"]") && !shown.contains("0.0.0.0"),
        "{shown}"
    );
    drop(lab);

    // The same link unnumbered: no address on either end (`address = []`), each router's
    // route through the other's link-local address, named with its interface.
    let dir = std::env::temp_dir().join(format!("tessera-v6u-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("v6-only")).unwrap();
    for (f, addr, via, ll) in [
        (
            "r1",
            "2001:db8:12::1/64",
            "2001:db8:12::2",
            "fe80::ff:fe00:1202%r1-eth1",
        ),
        (
            "r2",
            "2001:db8:12::2/64",
            "2001:db8:12::1",
            "fe80::ff:fe00:1201%r2-eth0",
        ),
    ] {
        let t = std::fs::read_to_string(test_path(&format!("labs/v6-only/{f}.toml"))).unwrap();
        let (a, v) = (format!("address = \"{addr}\""), format!("via = \"{via}\""));
        assert!(t.contains(&a) && t.contains(&v), "{f}");
        let t = t
            .replace(&a, "address = []")
            .replace(&v, &format!("via = \"{ll}\""));
        std::fs::write(dir.join(format!("v6-only/{f}.toml")), t).unwrap();
    }
    std::fs::copy(test_path("labs/v6-only.toml"), dir.join("lab.toml")).unwrap();
    let lab = TestLab::up(dir.join("lab.toml"), &[]);
    let (ok, out) = ping6(&lab, "h1", &["2001:db8:2::10"]);
    assert!(ok && out.contains("ttl=62"), "{out}");
    // r2 has no address on the link it heard the packet on: time exceeded comes from its
    // global address on its other interface.
    let (ok, out) = ping6(&lab, "h1", &["-t", "2", "2001:db8:2::10"]);
    assert!(
        !ok && out.contains("From 2001:db8:2::1") && out.contains("Time exceeded"),
        "{out}"
    );
    lab.iperf3("h1", "h2", "2001:db8:2::10", &["-6", "-t", "1"]);
    let i = lab.show_json("interfaces", "r2");
    assert!(i[0]["address"].is_null(), "{i}");
    let shown = lab.shown_config("r2", "forwarder");
    assert!(shown.contains("fe80::ff:fe00:1201%r2-eth0"), "{shown}");
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// SLAAC: a host with no IPv6 address configures one from the router's advertisements
/// (and takes the router as its default), then reaches a host behind it.
#[test]
fn a_host_configures_itself_from_the_routers_advertisements() {
    let lab = TestLab::up(test_path("labs/slaac.toml"), &[]);
    let addr = lab.sh(
        "h1",
        &["ip", "-6", "addr", "show", "dev", "eth0", "scope", "global"],
    );
    // The EUI-64 interface identifier from h1's MAC, in the advertised /64.
    let mac = lab.mac("h1", "eth0");
    let m: Vec<u8> = mac
        .split(':')
        .map(|x| u8::from_str_radix(x, 16).unwrap())
        .collect();
    // Written as `ip` writes it (RFC 5952), whatever groups are zero.
    let want = std::net::Ipv6Addr::new(
        0x2001,
        0xdb8,
        1,
        0,
        ((m[0] ^ 2) as u16) << 8 | m[1] as u16,
        (m[2] as u16) << 8 | 0xff,
        0xfe00 | m[3] as u16,
        (m[4] as u16) << 8 | m[5] as u16,
    )
    .to_string();
    assert!(addr.contains(&want), "{want} in {addr}");
    let routes = lab.sh("h1", &["ip", "-6", "route", "show", "default"]);
    assert!(
        routes.contains("via fe80::") && routes.contains("proto ra"),
        "{routes}"
    );
    let (ok, out) = ping6(&lab, "h1", &["2001:db8:2::10"]);
    assert!(ok && out.contains("ttl=63"), "{out}");
    let c = lab.counters("r");
    assert!(event_count(&c, "nd6_router_adverts_sent") >= 1, "{c}");
    // None on h2's network, where they are off.
    let r2 = lab.sh("h2", &["ip", "-6", "route", "show", "default"]);
    assert!(!r2.contains("proto ra"), "{r2}");
}

/// `[io] workers = 2` over two-queue links, over IPv6: both workers carry flows, a
/// neighbour one resolves is known to the other, the counters sum.
#[test]
fn two_workers_forward_ipv6() {
    let dir = std::env::temp_dir().join(format!("tessera-w6-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("dual-stack")).unwrap();
    for f in ["dual-stack/r.toml", "dual-stack/routes.txt"] {
        let text = std::fs::read_to_string(test_path(&format!("labs/{f}"))).unwrap();
        let text = if f.ends_with(".toml") {
            // User space's workers: the fast path (on by default) would forward the flows.
            format!("{text}\n[io]\nworkers = 2\nfast_path = false\n")
        } else {
            text
        };
        std::fs::write(dir.join(f), text).unwrap();
    }
    let mut topo = std::fs::read_to_string(test_path("labs/dual-stack.toml")).unwrap();
    for i in 0..2 {
        let b = format!("b = \"r:r-eth{i}\"");
        topo = topo.replace(&b, &format!("{b}\nqueues = 2"));
    }
    std::fs::write(dir.join("lab.toml"), topo).unwrap();
    let lab = TestLab::up(dir.join("lab.toml"), &[]);
    let (ok, out) = ping6(&lab, "h1", &["2001:db8:2::10"]);
    assert!(ok && out.contains("ttl=63"), "{out}");
    // Sixteen TCP flows: the sender's kernel spreads them over both queues by their hash.
    lab.iperf3("h1", "h2", "2001:db8:2::10", &["-6", "-t", "2", "-P", "16"]);
    let c = lab.counters("r");
    let w = c["workers"].as_array().unwrap_or_else(|| panic!("{c}"));
    assert_eq!(w.len(), 2, "{c}");
    assert!(
        w.iter().all(|x| x["rx_packets"].as_u64().unwrap() > 1000),
        "{c}"
    );
    assert!(event_count(&c, "ip6_forwarded") > 1000, "{c}");
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The router with `[io] fast_path = true` forwards IPv6 in its fast path too (XDP: the
/// hosts' echoes and replies never reach user space once the neighbours are known); what
/// the fast path leaves to user space still works: time exceeded, echo to the router, TCP
/// (whose checksums the hosts leave to offload, so XDP leaves it to user space, where
/// tcx's fast path, with AF_PACKET, forwards it with its socket buffer's state).
#[test]
fn ipv6_through_the_fast_path() {
    let dir = std::env::temp_dir().join(format!("tessera-f6-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("dual-stack")).unwrap();
    for f in ["dual-stack/r.toml", "dual-stack/routes.txt"] {
        let text = std::fs::read_to_string(test_path(&format!("labs/{f}"))).unwrap();
        let text = if f.ends_with(".toml") {
            format!("{text}\n[io]\nfast_path = true\n")
        } else {
            text
        };
        std::fs::write(dir.join(f), text).unwrap();
    }
    std::fs::copy(test_path("labs/dual-stack.toml"), dir.join("lab.toml")).unwrap();
    let lab = TestLab::up(dir.join("lab.toml"), &[]);
    // A veth takes XDP-redirected frames only when its peer runs NAPI.
    for h in ["h1", "h2"] {
        lab.sh(h, &["ethtool", "-K", "eth0", "gro", "on"]);
    }
    let (ok, out) = ping6(&lab, "h1", &["2001:db8:2::10"]);
    assert!(ok && out.contains("ttl=63"), "{out}");
    std::thread::sleep(std::time::Duration::from_millis(300)); // neighbours reach the fast path
    let fwd = |lab: &TestLab| {
        lab.counters("r")["fast_path"]["forwarded"]
            .as_u64()
            .unwrap()
    };
    let before = fwd(&lab);
    let (ok, out) = ping6(&lab, "h1", &["-c", "5", "-i", "0.1", "2001:db8:2::10"]);
    assert!(ok && out.matches("ttl=63").count() == 5, "{out}");
    // Five echoes and five replies, none through user space, on either hook.
    assert_eq!(fwd(&lab) - before, 10, "{}", lab.counters("r"));
    let (ok, out) = ping6(&lab, "h1", &["-t", "1", "2001:db8:2::10"]);
    assert!(!ok && out.contains("Time exceeded"), "{out}");
    let (ok, out) = ping6(&lab, "h1", &["2001:db8:2::1"]);
    assert!(ok && out.contains("ttl=64"), "{out}");
    let before = fwd(&lab);
    lab.iperf3("h1", "h2", "2001:db8:2::10", &["-6", "-n", "20M"]);
    if io_backend() == "packet" {
        let taken = fwd(&lab) - before;
        assert!(
            taken > 1000,
            "tcx forwarded {taken} of TCP's frames: {}",
            lab.counters("r")
        );
    }
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The multistage lab (labs/multistage.toml) made dual-stack in `dir`: the router is
/// 2001:db8:1::1 and 2001:db8:2::1 beside its IPv4 addresses, a1 and b1 are ...::10 with
/// default routes through it. Returns the topology's text, to be edited further.
fn dual_stack_multistage(dir: &std::path::Path) -> String {
    std::fs::create_dir_all(dir.join("multistage")).unwrap();
    let six = |t: String| {
        t.replace(
            "address = \"10.1.0.1/24\"",
            "address = [\"10.1.0.1/24\", \"2001:db8:1::1/64\"]",
        )
        .replace(
            "address = \"10.2.0.1/24\"",
            "address = [\"10.2.0.1/24\", \"2001:db8:2::1/64\"]",
        )
    };
    for f in ["lba", "lbb", "r1", "r2", "r3"] {
        let t = std::fs::read_to_string(repo_path(&format!("labs/multistage/{f}.toml"))).unwrap();
        std::fs::write(dir.join(format!("multistage/{f}.toml")), six(t)).unwrap();
    }
    let mut topo = std::fs::read_to_string(repo_path("labs/multistage.toml")).unwrap();
    for (n, h) in [(1, "a1"), (2, "b1")] {
        topo = topo
            .replace(
                &format!("address = \"10.{n}.0.10/24\" }}"),
                &format!("address = \"10.{n}.0.10/24\", address6 = \"2001:db8:{n}::10/64\" }}"),
            )
            .replace(
                &format!("routes = [\"default via 10.{n}.0.1\"]"),
                &format!("routes = [\"default via 10.{n}.0.1\", \"default via 2001:db8:{n}::1\"]"),
            );
        assert!(topo.contains(&format!("2001:db8:{n}::10")), "{h}");
    }
    topo
}

/// The three back-ends' neighbour entries for `address`.
fn backends_resolving(lab: &TestLab, address: &str) -> Vec<serde_json::Value> {
    ["r1", "r2", "r3"]
        .iter()
        .flat_map(|r| {
            lab.show_json("neighbours", r)
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|n| n["address"] == address)
        .collect()
}

/// `topo` (from [`dual_stack_multistage`]) with a controller (config
/// `multistage/vcp.toml`, then the element's further lines `element_extra`) in place of the
/// plain vcp host, a loopback on b1 with IPv4 198.51.100.1/32 and IPv6 `loopback6`, and
/// the further replacements `more`.
fn with_controller(
    mut topo: String,
    element_extra: &str,
    loopback6: &str,
    more: &[(&str, &str)],
) -> String {
    let controller = format!(
        "[[element]]\nname = \"vcp\"\nrole = \"controller\"\nconfig = \"multistage/vcp.toml\"\n{element_extra}"
    );
    let lo = format!(
        "address6 = \"2001:db8:2::10/64\" }},\n  {{ name = \"lo\", address = \"198.51.100.1/32\", address6 = \"{loopback6}\" }}"
    );
    let mut all = vec![
        (
            "[[host]]\nname = \"vcp\"\ninterfaces = [{ name = \"eth0\", address = \"10.255.0.100/24\" }]\n",
            controller.as_str(),
        ),
        ("a = \"vcp:eth0\"", "a = \"vcp:vcp-int\""),
        ("address6 = \"2001:db8:2::10/64\" }", lo.as_str()),
    ];
    all.extend_from_slice(more);
    for (from, to) in all {
        assert!(topo.contains(from), "{from}");
        topo = topo.replace(from, to);
    }
    topo
}

/// The multistage router (labs/multistage.toml: LB, three back-ends, LB) made dual-stack:
/// hosts on either side ping each other over IPv6 with one hop-limit decrement (the LBs
/// answer neighbour discovery for the router and balance the rest, the back-ends forward),
/// the router's own address answers, and TCP runs over IPv6.
#[test]
fn ipv6_through_the_multistage_router() {
    let dir = std::env::temp_dir().join(format!("tessera-ms6-{}", std::process::id()));
    let topo = dual_stack_multistage(&dir);
    std::fs::write(dir.join("lab.toml"), topo).unwrap();
    let lab = TestLab::up(dir.join("lab.toml"), &[]);
    // The back-ends say hello before the LBs balance to them.
    let (ok, out) = ping6_soon(&lab, "a1", "2001:db8:2::10");
    assert!(ok && out.contains("ttl=63"), "{out}");
    for a in ["2001:db8:1::1", "2001:db8:2::1"] {
        let (ok, out) = ping6(&lab, "a1", &[a]);
        assert!(ok && out.contains("ttl=64"), "{a}: {out}");
    }
    lab.iperf3("a1", "b1", "2001:db8:2::10", &["-6", "-t", "1"]);
    let c = lab.counters("lba");
    assert!(event_count(&c, "ext_nd_adverts_sent") >= 1, "{c}");
    // TCP over IPv6 is the LB's fast path's on AF_XDP ports (the lab's hosts send complete
    // checksums), user space's on AF_PACKET ones.
    if io_backend() == "packet" {
        assert!(event_count(&c, "balance_packets") > 100, "{c}");
    } else {
        let fast = c["fast_path"]["forwarded"].as_u64().unwrap_or(0);
        assert!(fast > 100, "{c}");
    }
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The multistage router with network B IPv6 only: lbb's external interface and the
/// back-ends' VLAN 20 sub-interfaces carry 2001:db8:2::1/64 alone, and b1 has no IPv4
/// address. a1 (dual-stack) reaches b1 over IPv6 through the LBs and the back-ends (ping6
/// and TCP); IPv4 to network A still works; the LB shows no IPv4 address for network B.
#[test]
fn an_ipv6_only_network_through_the_multistage_router() {
    let dir = std::env::temp_dir().join(format!("tessera-ms6o-{}", std::process::id()));
    let mut topo = dual_stack_multistage(&dir);
    for f in ["lbb", "r1", "r2", "r3"] {
        let path = dir.join(format!("multistage/{f}.toml"));
        let t = std::fs::read_to_string(&path).unwrap();
        let from = "address = [\"10.2.0.1/24\", \"2001:db8:2::1/64\"]";
        assert!(t.contains(from), "{f}");
        std::fs::write(&path, t.replace(from, "address = \"2001:db8:2::1/64\"")).unwrap();
    }
    for (from, to) in [
        ("address = \"10.2.0.10/24\", address6", "address6"),
        ("routes = [\"default via 10.2.0.1\", ", "routes = ["),
    ] {
        assert!(topo.contains(from), "{from}");
        topo = topo.replace(from, to);
    }
    std::fs::write(dir.join("lab.toml"), topo).unwrap();
    let lab = TestLab::up(dir.join("lab.toml"), &[]);
    let (ok, out) = ping6_soon(&lab, "a1", "2001:db8:2::10");
    assert!(ok && out.contains("ttl=63"), "{out}");
    let (ok, out) = ping6(&lab, "a1", &["2001:db8:2::1"]);
    assert!(ok, "{out}");
    lab.iperf3("a1", "b1", "2001:db8:2::10", &["-6", "-t", "1"]);
    let o = lab.exec("a1", &["ping", "-n", "-c", "1", "-W", "2", "10.1.0.1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let i = lab.show_json("interfaces", "lbb");
    let ext = i
        .as_array()
        .and_then(|a| a.iter().find(|p| p["role"] == "external"))
        .cloned()
        .unwrap_or_default();
    assert!(ext["address"].is_null() && ext["name"].is_string(), "{i}");
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// IPv6 routes from the Virtual-CP: the multistage lab's plain vcp host becomes a
/// controller (`tessera controller`) whose config holds two IPv6 routes and an IPv4 one;
/// it distributes them over DIST to the three back-ends, which install them (the IPv6 ones
/// in the IPv6 table of their worker) and acknowledge the controller's digest. a1 then
/// reaches b1's loopback addresses behind those routes, over either family. One IPv6
/// route goes through b1's link-local address on VLAN 20 (`fe80::b1%vlan20`, as OSPFv3
/// gives routes): the back-ends resolve it on that VLAN.
#[test]
fn ipv6_routes_from_the_controller_reach_every_back_end() {
    let dir = std::env::temp_dir().join(format!("tessera-ms6c-{}", std::process::id()));
    let topo = with_controller(dual_stack_multistage(&dir), "", "2001:db8:99::1/128", &[]);
    std::fs::write(
        dir.join("multistage/vcp.toml"),
        r#"[controller]
interface = "vcp-int"
hello_interval_ms = 200
# The LBs keep their own (dual-stack) configuration; no TAPs, no routing suite.
configure_lbs = false
terminate = false

[[route]]
prefix = "2001:db8:99::/64"
via = "2001:db8:2::10"

[[route]]
prefix = "2001:db8:98::/64"
via = "fe80::b1%vlan20"

[[route]]
prefix = "198.51.100.0/24"
via = "10.2.0.10"
"#,
    )
    .unwrap();
    std::fs::write(dir.join("lab.toml"), topo).unwrap();
    let lab = TestLab::up(dir.join("lab.toml"), &[]);
    // Every back-end holds the controller's table (both routes, the same digest).
    let mut tries = 0;
    let fib = loop {
        let fib = lab.show_json("fib", "vcp");
        let backends = fib["backends"].as_array().cloned().unwrap_or_default();
        let done = backends.len() == 3
            && backends
                .iter()
                .all(|b| b["consistent"] == true && b["routes"] == 3);
        tries += 1;
        if done || tries == 50 {
            break fib;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(
        fib["backends"].as_array().map(|b| b.len()),
        Some(3),
        "{fib}"
    );
    for b in fib["backends"].as_array().unwrap() {
        assert!(b["consistent"] == true && b["routes"] == 3, "{fib}");
    }
    for r in ["r1", "r2", "r3"] {
        let f = lab.show_json("fib", r);
        assert_eq!(f["routes6"], 2, "{r}: {f}");
        // The worker took the IPv6 routes into its table.
        let c = lab.counters(r);
        assert_eq!(event_count(&c, "dist_routes6_applied"), 2, "{r}: {c}");
    }
    let (ok, out) = ping6(&lab, "a1", &["2001:db8:99::1"]);
    assert!(ok && out.contains("ttl=63"), "{out}");
    // b1's link-local next hop (no duplicate address detection: usable at once).
    for argv in [
        [
            "ip",
            "-6",
            "addr",
            "add",
            "fe80::b1/64",
            "dev",
            "eth0",
            "nodad",
        ],
        [
            "ip",
            "-6",
            "addr",
            "add",
            "2001:db8:98::1/128",
            "dev",
            "lo",
            "nodad",
        ],
    ] {
        lab.sh("b1", &argv);
    }
    // The back-end that a1's flow is balanced to resolves it on VLAN 20's sub-interface.
    let (ok, out) = ping6(&lab, "a1", &["2001:db8:98::1"]);
    assert!(ok && out.contains("ttl=63"), "{out}");
    let resolved = backends_resolving(&lab, "fe80::b1");
    assert!(!resolved.is_empty(), "no back-end resolved fe80::b1");
    assert!(
        resolved.iter().all(|n| n["interface"] == "ext-b"),
        "{resolved:?}"
    );
    let o = lab.exec(
        "a1",
        &[
            "ping",
            "-n",
            "-c",
            "2",
            "-i",
            "0.2",
            "-W",
            "2",
            "198.51.100.1",
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.contains("ttl=63"), "{out}");
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The star router (labs/star.toml: four forwarders on a switch) made dual-stack: each
/// member's network gets a /64 beside its IPv4 one, and every member names the others'
/// IPv6 networks too; s3's network is IPv6 only (no IPv4 address on its interface, an
/// IPv6-only host h3). A packet between two networks is looked up once, at the member
/// where it enters (hop limit 63 at the far host), and crosses the switch with an IPv6
/// star header; the routes file's IPv6 route (through h4) works from every network.
#[test]
fn ipv6_through_the_star_router() {
    let dir = std::env::temp_dir().join(format!("tessera-star6-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("star")).unwrap();
    let v4 = |n: u32| {
        if n == 3 {
            String::new()
        } else {
            format!("\"10.{n}.0.1/24\", ")
        }
    };
    for n in 1..=4 {
        let mut t = std::fs::read_to_string(repo_path(&format!("labs/star/s{n}.toml"))).unwrap();
        let (from, to) = (
            format!("address = \"10.{n}.0.1/24\""),
            format!("address = [{}\"2001:db8:{n}::1/64\"]", v4(n)),
        );
        assert!(t.contains(&from), "s{n}");
        t = t.replace(&from, &to);
        for m in 1..=4 {
            let net4 = if m == 3 {
                String::new()
            } else {
                format!("{{ prefix = \"10.{m}.0.0/24\", port = 0 }}, ")
            };
            let (from, to) = (
                format!("{{ prefix = \"10.{m}.0.0/24\", port = 0 }}"),
                format!("{net4}{{ prefix = \"2001:db8:{m}::/64\", port = 0 }}"),
            );
            assert!(t.contains(&from), "s{n}, member {m}");
            t = t.replace(&from, &to);
        }
        std::fs::write(dir.join(format!("star/s{n}.toml")), t).unwrap();
    }
    let routes = std::fs::read_to_string(repo_path("labs/star/routes.txt")).unwrap();
    std::fs::write(
        dir.join("star/routes.txt"),
        format!("{routes}2001:db8:99::/48 2001:db8:4::10\n"),
    )
    .unwrap();
    let mut topo = std::fs::read_to_string(repo_path("labs/star.toml")).unwrap();
    for n in 1..=4 {
        let (a4, r4) = if n == 3 {
            (String::new(), String::new())
        } else {
            (
                format!("address = \"10.{n}.0.10/24\", "),
                format!("\"default via 10.{n}.0.1\", "),
            )
        };
        for (from, to) in [
            (
                format!("address = \"10.{n}.0.10/24\" }}"),
                format!("{a4}address6 = \"2001:db8:{n}::10/64\" }}"),
            ),
            (
                format!("routes = [\"default via 10.{n}.0.1\"]"),
                format!("routes = [{r4}\"default via 2001:db8:{n}::1\"]"),
            ),
        ] {
            assert!(topo.contains(&from), "{from}");
            topo = topo.replace(&from, &to);
        }
    }
    std::fs::write(dir.join("lab.toml"), topo).unwrap();
    let lab = TestLab::up(dir.join("lab.toml"), &[]);
    lab.sh(
        "h4",
        &["ip", "-6", "addr", "add", "2001:db8:99::1/128", "dev", "lo"],
    );
    for (a, to) in [
        (1, "2001:db8:3::10"),
        (3, "2001:db8:1::10"),
        (2, "2001:db8:4::10"),
        (1, "2001:db8:99::1"),
    ] {
        let (ok, out) = ping6(&lab, &format!("h{a}"), &[to]);
        assert!(
            ok && out.matches("ttl=63").count() == 2,
            "h{a} -> {to}: {out}"
        );
    }
    // Twelve packets crossed the switch at s1 (h1 to h3, h3 to h1 and h1 to h4's
    // loopback: two echo requests and two replies each), in user space (`star_sent`,
    // `star_received`) or, with AF_XDP, in the fast path (the star's IPv6 frames too):
    // then most of them (a packet that waits for its neighbour is user space's).
    let c = lab.counters("s1");
    let fast = event_count(&c, "fast_path_forwarded");
    let crossed = event_count(&c, "star_sent") + event_count(&c, "star_received") + fast;
    assert!(crossed >= 12, "{c}");
    if io_backend() != "packet" {
        assert!(fast >= 8, "{c}");
    }
    // The router's own addresses answer, each from its member.
    let (ok, out) = ping6(&lab, "h1", &["2001:db8:1::1"]);
    assert!(ok && out.contains("ttl=64"), "{out}");
    // IPv4 between the dual-stack networks still crosses the star; s3 has no IPv4
    // address to show.
    let o = lab.exec("h1", &["ping", "-n", "-c", "1", "-W", "2", "10.2.0.10"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let i = lab.show_json("interfaces", "s3");
    assert!(i[0]["address"].is_null() && i[0]["name"] == "s3-ext", "{i}");
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The dual-stack multistage router with a controller running zebra (FPM to the
/// controller) and `daemon` (FRR's, with `vcp_conf`), and b1 running zebra and `daemon`
/// (with `b1_conf`) with `loopback6` on its loopback; up, with its directory.
fn frr_lab(
    tag: &str,
    daemon: &str,
    vcp_conf: &str,
    b1_conf: &str,
    loopback6: &str,
) -> (TestLab, std::path::PathBuf) {
    assert!(
        std::path::Path::new(&format!("/usr/lib/frr/{daemon}")).exists(),
        "this test needs FRR (Debian's frr): `bash scripts/setup` installs it"
    );
    let dir = std::env::temp_dir().join(format!("tessera-{tag}-{}", std::process::id()));
    let b1_routes = "routes = [\"default via 10.2.0.1\", \"default via 2001:db8:2::1\"]";
    let topo = with_controller(
        dual_stack_multistage(&dir),
        &format!("frr = {{ zebra = \"multistage/vcp-zebra.conf\", {daemon} = \"multistage/vcp-{daemon}.conf\" }}\n"),
        loopback6,
        &[(
            b1_routes,
            &format!("{b1_routes}\nfrr = {{ zebra = \"multistage/b1-zebra.conf\", {daemon} = \"multistage/b1-{daemon}.conf\" }}"),
        )],
    );
    let files = [
        (
            "vcp.toml".to_string(),
            "[controller]\ninterface = \"vcp-int\"\nhello_interval_ms = 200\n# The LBs keep their own (dual-stack) configuration.\nconfigure_lbs = false\n\n[fpm]\nlisten = \"127.0.0.1:2620\"\n",
        ),
        (
            "vcp-zebra.conf".to_string(),
            "hostname vcp\nfpm address 127.0.0.1 port 2620\ninterface vlan20\n no link-detect\n",
        ),
        (format!("vcp-{daemon}.conf"), vcp_conf),
        ("b1-zebra.conf".to_string(), "hostname b1\n"),
        (format!("b1-{daemon}.conf"), b1_conf),
    ];
    for (name, text) in files {
        std::fs::write(dir.join("multistage").join(name), text).unwrap();
    }
    std::fs::write(dir.join("lab.toml"), topo).unwrap();
    (TestLab::up(dir.join("lab.toml"), &[]), dir)
}

/// Waits (60 s at most) until the controller has a route from zebra and every back-end
/// holds an IPv6 route and is consistent with it; the controller's `show fib`.
fn route_on_every_back_end(lab: &TestLab, what: &str) -> serde_json::Value {
    let t = std::time::Instant::now();
    loop {
        let fib = lab.show_json("fib", "vcp");
        let backends = fib["backends"].as_array().cloned().unwrap_or_default();
        if fib["fpm"]["route_adds"].as_u64().unwrap_or(0) > 0
            && backends.len() == 3
            && backends.iter().all(|b| b["consistent"] == true)
            && ["r1", "r2", "r3"]
                .iter()
                .all(|r| lab.show_json("fib", r)["routes6"].as_u64().unwrap_or(0) >= 1)
        {
            eprintln!(
                "{what} on every back-end {:?} after the lab came up",
                t.elapsed()
            );
            return fib;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(60),
            "{what} did not reach every back-end in 60 s: {fib}\nTAP: {}\nroutes: {}",
            lab.sh("vcp", &["ip", "-6", "addr", "show", "dev", "vlan20"]),
            lab.sh("vcp", &["ip", "-6", "route"])
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// a1 pings `dst` (five tries): through the router, with one hop-limit decrement.
fn a1_reaches_through_the_router(lab: &TestLab, dst: &str) {
    let mut tries = 0;
    let (ok, out) = loop {
        let (ok, out) = ping6(lab, "a1", &[dst]);
        tries += 1;
        if ok || tries == 5 {
            break (ok, out);
        }
    };
    assert!(ok && out.contains("ttl=63"), "{out}");
}

/// OSPFv3 with the Virtual-CP: the dual-stack multistage router gets a controller with
/// zebra and ospf6d in its namespace (the TAP vlan20 stands for the network to b1), and
/// b1 runs ospf6d too, announcing its loopback 2001:db8:77::1/128. The adjacency forms
/// across the LB (OSPFv3 to ff02::5 and to the router's link-local address goes to the
/// controller), zebra's route through b1's link-local address reaches the controller
/// over FPM with its interface, goes to the back-ends with VLAN 20 written in it, and a1
/// pings the loopback through the router. Short timers on both sides, as in
/// labs/virtual-cp's OSPFv2 (a retransmit interval of 1 s: the adjacency is full a second
/// after the election, not five).
#[test]
fn ospfv3_routes_through_link_local_next_hops_reach_the_back_ends() {
    let (lab, dir) = frr_lab(
        "ospf6",
        "ospf6d",
        "hostname vcp\ninterface vlan20\n ipv6 ospf6 area 0.0.0.0\n ipv6 ospf6 hello-interval 1\n ipv6 ospf6 dead-interval 4\n ipv6 ospf6 retransmit-interval 1\nrouter ospf6\n ospf6 router-id 10.255.0.1\n",
        "hostname b1\ninterface eth0\n ipv6 ospf6 area 0.0.0.0\n ipv6 ospf6 hello-interval 1\n ipv6 ospf6 dead-interval 4\n ipv6 ospf6 retransmit-interval 1\ninterface lo\n ipv6 ospf6 area 0.0.0.0\n ipv6 ospf6 passive\nrouter ospf6\n ospf6 router-id 10.2.0.10\n",
        "2001:db8:77::1/128",
    );
    let loopback: fib::Prefix6 = "2001:db8:77::1/128".parse().unwrap();
    // The route reaches every back-end, through b1's link-local address on VLAN 20.
    let b1_ll = {
        let out = lab.sh(
            "b1",
            &[
                "ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", "link",
            ],
        );
        let a = out
            .split_whitespace()
            .skip_while(|w| *w != "inet6")
            .nth(1)
            .unwrap_or_else(|| panic!("no link-local address on b1: {out}"));
        a.split('/')
            .next()
            .unwrap()
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
    };
    let scoped = wire::ipv6::scoped_link_local(b1_ll, 20);
    let fib = route_on_every_back_end(&lab, "OSPFv3's route");
    let routes = lab.sh("vcp", &["ip", "-6", "route", "show", &loopback.to_string()]);
    assert!(
        routes.contains("via fe80::") && routes.contains("vlan20"),
        "{routes}"
    );
    for r in ["r1", "r2", "r3"] {
        let c = lab.counters(r);
        assert!(event_count(&c, "dist_routes6_applied") >= 1, "{r}: {c}");
    }
    assert_eq!(fib["fpm"]["skipped_ipv6"], 0, "{fib}");
    // a1 reaches the loopback through the router (one hop-limit decrement), and the
    // back-end that forwards resolves b1's link-local address on VLAN 20.
    a1_reaches_through_the_router(&lab, "2001:db8:77::1");
    let resolved = backends_resolving(&lab, &b1_ll.to_string());
    assert!(
        !resolved.is_empty() && resolved.iter().all(|n| n["interface"] == "ext-b"),
        "{resolved:?} (the route's gateway: {scoped})"
    );
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// BGP over IPv6 between the router's global address and an outside router, the way most
/// IPv6 peerings are set up: the LB's hellos carry its external ports' IPv6 addresses, so
/// the Virtual-CP's TAP for network B holds 2001:db8:2::1/64, b1's session to that address
/// reaches the controller's bgpd, and b1's route goes to every back-end.
#[test]
fn bgp_over_ipv6_to_the_routers_global_address_reaches_the_back_ends() {
    let (lab, dir) = frr_lab(
        "bgp6",
        "bgpd",
        "hostname vcp\nrouter bgp 65000\n bgp router-id 10.255.0.1\n no bgp ebgp-requires-policy\n no bgp default ipv4-unicast\n neighbor 2001:db8:2::10 remote-as 65002\n neighbor 2001:db8:2::10 timers connect 1\n address-family ipv6 unicast\n  neighbor 2001:db8:2::10 activate\n exit-address-family\n",
        "hostname b1\nrouter bgp 65002\n bgp router-id 10.2.0.10\n no bgp ebgp-requires-policy\n no bgp default ipv4-unicast\n neighbor 2001:db8:2::1 remote-as 65000\n neighbor 2001:db8:2::1 timers connect 1\n address-family ipv6 unicast\n  neighbor 2001:db8:2::1 activate\n  network 2001:db8:77::2/128\n exit-address-family\n",
        "2001:db8:77::2/128",
    );
    let fib = route_on_every_back_end(&lab, "b1's BGP route");
    assert_eq!(fib["fpm"]["skipped_ipv6"], 0, "{fib}");
    let tap = lab.sh("vcp", &["ip", "-6", "addr", "show", "dev", "vlan20"]);
    assert!(tap.contains("2001:db8:2::1/64"), "{tap}");
    let route = lab.sh("vcp", &["ip", "-6", "route", "show", "2001:db8:77::2"]);
    assert!(route.contains("vlan20"), "{route}");
    a1_reaches_through_the_router(&lab, "2001:db8:77::2");
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}
