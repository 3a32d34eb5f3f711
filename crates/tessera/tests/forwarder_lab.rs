//! `tessera forwarder` with real Linux hosts in network namespaces.

mod common;

use common::*;
use std::time::{Duration, Instant};

#[path = "forwarder_lab/flows.rs"]
mod flows;

fn single() -> TestLab {
    TestLab::up(repo_path("labs/single-router.toml"), &[])
}

/// A copy of the single-router lab in a temporary directory named after `tag`:
/// `r.toml` as `edit_r` makes it, `routes.txt`, and `lab.toml` as `edit_topo` makes it.
/// Returns the directory; the lab file is `lab.toml` in it.
fn single_copy(
    tag: &str,
    edit_r: impl Fn(String) -> String,
    edit_topo: impl Fn(String) -> String,
) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let r = std::fs::read_to_string(repo_path("labs/single-router/r.toml")).unwrap();
    std::fs::write(dir.join("r.toml"), edit_r(r)).unwrap();
    let routes = std::fs::read_to_string(repo_path("labs/single-router/routes.txt")).unwrap();
    std::fs::write(dir.join("routes.txt"), routes).unwrap();
    let topo = std::fs::read_to_string(repo_path("labs/single-router.toml"))
        .unwrap()
        .replace("single-router/r.toml", "r.toml");
    std::fs::write(dir.join("lab.toml"), edit_topo(topo)).unwrap();
    dir
}

/// The argv of `tessera gen --xdp` from `src` (on `src`'s network) to `dst` through the
/// router's port whose MAC is `rmac`, at `rate` for `secs` seconds, with a JSON summary.
fn xdp_gen<'a>(
    rmac: &'a str,
    src: &'a str,
    dst: &'a str,
    rate: &'a str,
    secs: &'a str,
) -> Vec<&'a str> {
    vec![
        common::exe(),
        "gen",
        "--xdp",
        "--iface",
        "eth0",
        "--dst-mac",
        rmac,
        "--src",
        src,
        "--dst",
        dst,
        "--rate",
        rate,
        "--duration",
        secs,
        "--json",
    ]
}

fn out(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn arp_and_ping_through_the_router() {
    let lab = single();
    let p = lab.sh(
        "src1",
        &["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.3.0.10"],
    );
    assert!(p.contains("3 received"), "{p}");
    // The sink's reply left it with TTL 64 and crossed one router.
    assert_eq!(p.matches("ttl=63").count(), 3, "{p}");
    // The router answers ping for its addresses, on any interface, with its own TTL.
    let p = lab.sh("src1", &["ping", "-c", "1", "-W", "2", "10.4.0.1"]);
    assert!(p.contains("ttl=64"), "{p}");
    // ARP was answered by the forwarder: src1 holds r-eth0's MAC for its gateway.
    let neigh = lab.sh("src1", &["ip", "neigh", "show", "10.1.0.1"]);
    assert!(neigh.contains(&lab.mac("r", "r-eth0")), "{neigh}");
    let c = lab.counters("r");
    // At least src1 asked; sink1 may have learned r-eth2 from the router's own request.
    assert!(event_count(&c, "arp_replies_sent") >= 1, "{c}");
    assert!(forwarded4(&c) >= 6, "{c}");
    assert!(event_count(&c, "icmp_echo_replies_sent") >= 1, "{c}");
    assert!(
        c["interfaces"]["r-eth2"]["tx_packets"].as_u64().unwrap() >= 3,
        "{c}"
    );
    // Routes from the routes file (203.0.113.128/25 via sink2) and from the config
    // (198.51.100.0/24 via sink1) are used: the datagrams leave by the right interface.
    // (The sinks drop them: the addresses are not theirs.)
    let tx = |c: &serde_json::Value, i: &str| c["interfaces"][i]["tx_packets"].as_u64().unwrap();
    let before = lab.counters("r");
    lab.exec(
        "src1",
        &["ping", "-c", "2", "-i", "0.2", "-W", "1", "203.0.113.130"],
    );
    lab.exec("src1", &["ping", "-c", "1", "-W", "1", "198.51.100.7"]);
    let after = lab.counters("r");
    // r-eth3 also sent the ARP request for sink2, its first use as a next hop.
    let arp = event_count(&after, "arp_requests_sent") - event_count(&before, "arp_requests_sent");
    assert_eq!(
        tx(&after, "r-eth3") - tx(&before, "r-eth3"),
        2 + arp,
        "{after}"
    );
    assert_eq!(tx(&after, "r-eth2") - tx(&before, "r-eth2"), 1, "{after}");
    let routes = lab.tessera(&[
        "show",
        "routes",
        "--control",
        lab.control("r").to_str().unwrap(),
    ]);
    assert!(
        out(&routes).contains("\"count\": 7"),
        "4 connected + 1 static + 2 from the file: {}",
        out(&routes)
    );
    // The router's neighbour table learned the hosts it talked to.
    let o = lab.tessera(&[
        "show",
        "neighbours",
        "--control",
        lab.control("r").to_str().unwrap(),
    ]);
    assert!(out(&o).contains("10.3.0.10"), "{}", out(&o));
}

/// The kernel's IPv4 input counter (`Ip: InReceives` of /proc/net/snmp) in `node`.
fn kernel_ip_in_receives(lab: &TestLab, node: &str) -> u64 {
    let snmp = lab.sh(node, &["cat", "/proc/net/snmp"]);
    let mut ip = snmp.lines().filter(|l| l.starts_with("Ip:"));
    let (names, values) = (ip.next().unwrap(), ip.next().unwrap());
    let at = names
        .split_whitespace()
        .position(|n| n == "InReceives")
        .unwrap();
    values.split_whitespace().nth(at).unwrap().parse().unwrap()
}

/// The element's ports keep the kernel's own stack off what they receive, on either
/// backend: AF_XDP takes every frame before the kernel builds a socket buffer, and an
/// AF_PACKET port ends each frame in a tcx ingress program once its socket has the copy.
/// Before the latter, every frame the forwarder forwarded on AF_PACKET also went through
/// the kernel's IPv4 input in the router's namespace (counted as an address error).
#[test]
fn the_kernel_stack_in_the_routers_namespace_sees_none_of_its_frames() {
    let lab = single();
    let before = kernel_ip_in_receives(&lab, "r");
    let p = lab.sh(
        "src1",
        &["ping", "-c", "5", "-i", "0.2", "-W", "2", "10.3.0.10"],
    );
    assert!(p.contains("5 received"), "{p}");
    let p = lab.sh(
        "src1",
        &["ping", "-c", "2", "-i", "0.2", "-W", "2", "10.1.0.1"],
    );
    assert!(p.contains("2 received"), "{p}");
    let c = lab.counters("r");
    assert!(forwarded4(&c) >= 10, "{c}");
    assert_eq!(kernel_ip_in_receives(&lab, "r"), before, "{c}");
}

#[test]
fn icmp_errors_reach_the_sender() {
    let lab = single();
    let p = out(&lab.exec(
        "src1",
        &["ping", "-c", "1", "-W", "2", "-t", "1", "10.3.0.10"],
    ));
    assert!(
        p.contains("From 10.1.0.1") && p.contains("Time to live exceeded"),
        "{p}"
    );
    let p = out(&lab.exec("src1", &["ping", "-c", "1", "-W", "2", "192.0.2.1"]));
    assert!(
        p.contains("From 10.1.0.1") && p.contains("Destination Net Unreachable"),
        "{p}"
    );
    // Nobody has 10.3.0.99: three ARP requests, then host unreachable.
    let p = out(&lab.exec("src1", &["ping", "-c", "1", "-W", "6", "10.3.0.99"]));
    assert!(
        p.contains("From 10.1.0.1") && p.contains("Destination Host Unreachable"),
        "{p}"
    );
    // UDP to the router itself: port unreachable, seen by the sender's socket as refused.
    let o = lab.exec(
        "src1",
        &[
            "bash",
            "-c",
            "exec 3<>/dev/udp/10.1.0.1/9; echo x >&3; sleep 0.3; echo y >&3",
        ],
    );
    assert!(out(&o).contains("Connection refused"), "{}", out(&o));
    let c = lab.counters("r");
    assert_eq!(drop_count(&c, "ip4_ttl_expired"), 1);
    assert_eq!(drop_count(&c, "ip4_no_route"), 1);
    assert_eq!(drop_count(&c, "arp_resolution_failed"), 1);
    assert!(drop_count(&c, "local_udp") >= 1);
    assert_eq!(
        event_count(&c, "icmp_errors_sent"),
        3 + drop_count(&c, "local_udp")
    );
}

#[test]
fn fragments_or_refuses_by_the_df_bit() {
    let lab = TestLab::up(test_path("labs/switched.toml"), &[]);
    // Across the Linux bridge first: both hosts reach the router and each other.
    assert!(lab
        .sh("h1", &["ping", "-c", "1", "-W", "2", "10.1.0.12"])
        .contains("1 received"));
    assert!(lab
        .sh("h2", &["ping", "-c", "1", "-W", "2", "10.2.0.20"])
        .contains("ttl=63"));
    // 1428-byte datagrams with DF towards a link of MTU 1000: fragmentation needed. (From
    // h2: h1's kernel would then cache the path MTU and fragment by itself below.)
    let p = out(&lab.exec(
        "h2",
        &[
            "ping",
            "-c",
            "1",
            "-W",
            "2",
            "-M",
            "do",
            "-s",
            "1400",
            "10.2.0.20",
        ],
    ));
    assert!(p.contains("Frag needed") && p.contains("mtu = 1000"), "{p}");
    // Without DF the router fragments; the far host reassembles and answers.
    let p = lab.sh(
        "h1",
        &[
            "ping",
            "-c",
            "2",
            "-W",
            "2",
            "-M",
            "dont",
            "-s",
            "1400",
            "10.2.0.20",
        ],
    );
    assert!(p.contains("2 received"), "{p}");
    let c = lab.counters("r");
    assert_eq!(drop_count(&c, "ip4_frag_needed"), 1);
    assert_eq!(event_count(&c, "ip4_fragmented"), 2);
    assert_eq!(event_count(&c, "ip4_fragments_made"), 4);
    let show = lab.node("sw");
    assert_eq!(show["kind"], "switch");
}

#[test]
fn bad_checksum_is_dropped_and_counted() {
    use wire::MacAddr;
    let lab = single();
    // Learn each other's MACs first (and prove the path works).
    lab.sh("src1", &["ping", "-c", "1", "-W", "2", "10.3.0.10"]);
    let eth_dst: MacAddr = lab.mac("r", "r-eth0").parse().unwrap();
    let eth_src: MacAddr = lab.mac("src1", "eth0").parse().unwrap();
    let (src, dst) = ("10.1.0.10".parse().unwrap(), "10.3.0.10".parse().unwrap());
    let mut f = wire::frame::UdpFrame {
        eth_dst,
        eth_src,
        src,
        dst,
        src_port: 4000,
        ident: 1,
        payload: &[0; 18],
        ..Default::default()
    }
    .to_vec();
    let good: String = f.iter().map(|b| format!("{b:02x}")).collect();
    f[24] ^= 0x5a; // corrupt the IP header checksum
    let bad: String = f.iter().map(|b| format!("{b:02x}")).collect();
    let before = lab.counters("r");
    lab.sh(
        "src1",
        &[
            exe(),
            "inject",
            "--iface",
            "eth0",
            "--hex",
            &bad,
            "--count",
            "3",
        ],
    );
    lab.sh(
        "src1",
        &[exe(), "inject", "--iface", "eth0", "--hex", &good],
    );
    let forwarded = |c: &serde_json::Value| forwarded4(c) - forwarded4(&before);
    let t = Instant::now();
    let mut after = lab.counters("r");
    while (drop_count(&after, "ip4_bad_checksum") < 3 || forwarded(&after) < 2)
        && t.elapsed() < Duration::from_secs(3)
    {
        std::thread::sleep(Duration::from_millis(50));
        after = lab.counters("r");
    }
    assert_eq!(
        drop_count(&after, "ip4_bad_checksum") - drop_count(&before, "ip4_bad_checksum"),
        3
    );
    // Forwarded: the good copy, and sink1's port unreachable about it on the way back.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(forwarded(&lab.counters("r")), 2);
}

#[test]
fn tcp_through_the_router() {
    let lab = single();
    // The lab's links carry complete checksums, as wires do; this host leaves its TCP
    // checksums to offload, as a veth may: the router must complete them (in user space:
    // the XDP fast path leaves such frames to it; in tcx the socket buffer keeps that
    // state, and the fast path forwards them as they are), or the sink would drop every
    // segment and receive nothing.
    lab.sh("src1", &["ethtool", "-K", "eth0", "tx", "on"]);
    let c0 = lab.counters("r");
    lab.iperf3("src1", "sink1", "10.3.0.10", &["-t", "2"]);
    let c = lab.counters("r");
    if io_backend() == "packet" {
        let fast = |c: &serde_json::Value| c["fast_path"]["forwarded"].as_u64().unwrap();
        assert!(fast(&c) - fast(&c0) > 1000, "{c}");
    } else {
        assert!(event_count(&c, "ip4_checksum_filled") > 100, "{c}");
    }
    assert_eq!(
        drop_count(&c, "rx_oversize"),
        0,
        "no superframes on wire-like links"
    );
}

#[test]
fn sigterm_stops_cleanly() {
    let lab = single();
    let pid = lab.node("r")["pid"].as_i64().unwrap() as i32;
    let sock = lab.control("r");
    assert!(sock.exists());
    // SAFETY: the lab started this process for this test.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let t = Instant::now();
    while lab::cmd::alive(pid) && t.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!lab::cmd::alive(pid), "still running 3 s after SIGTERM");
    assert!(!sock.exists(), "control socket left behind");
    let log = std::fs::read_to_string(sock.with_file_name("r.log")).unwrap();
    assert!(log.contains("forwarder stopped"), "{log}");
    // And it starts again.
    let o = lab.tessera(&[
        "lab",
        "start",
        lab.file.to_str().unwrap(),
        "--name",
        &lab.name,
        "r",
    ]);
    assert!(o.status.success(), "{}", out(&o));
    assert!(lab
        .sh("src1", &["ping", "-c", "1", "-W", "2", "10.4.0.10"])
        .contains("1 received"));
}

#[test]
fn linux_kernel_contender_runs_the_same_topology() {
    let lab = TestLab::up(repo_path("labs/single-router.toml"), &["--role", "r=linux"]);
    let p = lab.sh(
        "src2",
        &["ping", "-c", "2", "-i", "0.2", "-W", "2", "10.4.0.10"],
    );
    assert_eq!(p.matches("ttl=63").count(), 2, "{p}");
    assert_eq!(lab.node("r")["role"], "linux");
}

#[test]
fn lab_show_lists_every_node() {
    let lab = single();
    let v = lab.show();
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 5);
    for n in nodes {
        assert!(
            n["name"].is_string() && n["kind"].is_string() && n["namespace"].is_string(),
            "{n}"
        );
        for i in n["interfaces"].as_array().unwrap() {
            assert!(
                i["name"].is_string()
                    && i["mac"].as_str().unwrap().len() == 17
                    && i["addresses"].is_array(),
                "{i}"
            );
        }
    }
    let r = lab.node("r");
    assert_eq!(r["kind"], "element");
    let eth0 = r["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "r-eth0")
        .unwrap();
    assert_eq!(eth0["addresses"], serde_json::json!(["10.1.0.1/24"]));
    let src = lab.node("src1");
    assert_eq!(
        src["interfaces"][0]["addresses"],
        serde_json::json!(["10.1.0.10/24"])
    );
    // Offloads are off on host links.
    let k = lab.sh("src1", &["ethtool", "-k", "eth0"]);
    assert!(
        k.contains("tcp-segmentation-offload: off")
            && k.contains("generic-segmentation-offload: off"),
        "{k}"
    );
}

/// Real hosts ping through the forwarder every 10 ms while it reloads a 200,000-route table
/// three times and takes single route changes: not one echo is lost.
#[test]
fn reload_and_route_changes_while_forwarding() {
    reload_while_forwarding(false);
}

/// The same with the fast path forwarding the echoes (XDP on AF_XDP ports, tcx on
/// AF_PACKET ones: the backend under test): each reload compiles and publishes the fast
/// path's table too, and not one echo is lost.
#[test]
fn reload_and_route_changes_while_the_fast_path_forwards() {
    reload_while_forwarding(true);
}

fn reload_while_forwarding(fast: bool) {
    let dir = std::env::temp_dir().join(format!("tessera-reload-{}-{}", std::process::id(), fast));
    std::fs::create_dir_all(&dir).unwrap();
    let table = bench::table::synthetic(200_000, 11);
    let text: String = table.routes.iter().map(|(p, _)| format!("{p}\n")).collect();
    std::fs::write(dir.join("table.txt"), text).unwrap();
    let r = std::fs::read_to_string(repo_path("labs/single-router/r.toml")).unwrap();
    let r = r.replace(
        "routes_file = \"routes.txt\"",
        "routes_file = \"table.txt\"\nroutes_file_via = \"10.4.0.10\"",
    );
    let r = if fast {
        format!("{r}\n[io]\nfast_path = true\n")
    } else {
        r
    };
    std::fs::write(dir.join("r.toml"), r).unwrap();
    let topo = std::fs::read_to_string(repo_path("labs/single-router.toml"))
        .unwrap()
        .replace("single-router/r.toml", "r.toml");
    std::fs::write(dir.join("lab.toml"), topo).unwrap();
    let lab = TestLab::up(dir.join("lab.toml"), &[]);
    if fast {
        // The hosts' veths take frames the router redirects in XDP.
        for h in ["src1", "sink1"] {
            lab.sh(h, &["ethtool", "-K", "eth0", "gro", "on"]);
        }
    }
    let sock = lab.control("r");
    let sock = sock.to_str().unwrap();
    let routes = |lab: &TestLab| -> serde_json::Value {
        serde_json::from_slice(&lab.tessera(&["show", "routes", "--control", sock]).stdout).unwrap()
    };
    assert_eq!(routes(&lab)["count"], 200_000 + 4 + 1);
    let pinger = {
        let ns = format!("ts-{}-src1", lab.name);
        std::thread::spawn(move || {
            std::process::Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &ns,
                    "ping",
                    "-c",
                    "300",
                    "-i",
                    "0.01",
                    "-W",
                    "1",
                    "10.3.0.10",
                ])
                .output()
                .unwrap()
        })
    };
    let mut reload_ms = Vec::new();
    for _ in 0..3 {
        let o = lab.tessera(&["route", "reload", "--control", sock]);
        assert!(o.status.success(), "{}", out(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["routes"], 200_001);
        reload_ms.push(v["ms"].as_u64().unwrap());
    }
    let o = lab.tessera(&[
        "route",
        "add",
        "192.0.2.0/24",
        "--via",
        "10.3.0.10",
        "--via",
        "10.4.0.10",
        "--control",
        sock,
    ]);
    assert!(o.status.success(), "{}", out(&o));
    let o = lab.tessera(&["route", "del", "192.0.2.0/24", "--control", sock]);
    assert!(out(&o).contains("\"removed\": true"), "{}", out(&o));
    let p = pinger.join().unwrap();
    let p = String::from_utf8_lossy(&p.stdout).into_owned();
    eprintln!(
        "reloads took {reload_ms:?} ms; {}",
        p.lines().rev().nth(1).unwrap_or("")
    );
    assert!(p.contains("300 received"), "{p}");
    if fast {
        // The echoes and their replies took the fast path (the first ones resolved the
        // neighbours in user space).
        let fp = &lab.counters("r")["fast_path"];
        assert!(fp["forwarded"].as_u64().unwrap() >= 500, "{fp}");
    }
    // A bad gateway is refused with a clear error, and nothing changes.
    let o = lab.tessera(&[
        "route",
        "add",
        "192.0.2.0/24",
        "--via",
        "172.16.0.1",
        "--control",
        sock,
    ]);
    assert!(
        !o.status.success() && out(&o).contains("172.16.0.1"),
        "{}",
        out(&o)
    );
    assert_eq!(routes(&lab)["count"], 200_000 + 4 + 1);
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every port runs on the backend the tests asked for, says so in `show interfaces`, and
/// the kernel's ring drop counters are named in `show counters`.
#[test]
fn ports_report_their_backend() {
    let lab = single();
    let o = lab.tessera(&[
        "show",
        "interfaces",
        "--control",
        lab.control("r").to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 4, "{v}");
    let want = match io_backend() {
        "packet" => "packet",
        // auto takes AF_XDP on this kernel: a fallback here is a failure to see.
        _ => "xdp",
    };
    for i in list {
        assert_eq!(i["backend"], want, "{v}");
        let mode = i["io_mode"].as_str().unwrap();
        match want {
            // veth has no zero-copy; the program attaches to its own XDP hook.
            "xdp" => assert!(mode.starts_with("copy, native XDP"), "{v}"),
            // The fast path's tcx program (on by default), which also keeps the kernel's
            // stack off the port, is in place.
            _ => assert_eq!(mode, "TPACKET_V2 frame ring, fast path (tcx)", "{v}"),
        }
    }
    let c = lab.counters("r");
    for d in ["rx_ring_full", "xsk_rx_dropped", "xsk_invalid_descs"] {
        assert_eq!(drop_count(&c, d), 0, "{c}");
    }
}

/// On AF_XDP the ports of a worker share one UMEM (`[io] shared_umem`, the default): a
/// forwarded frame leaves from the UMEM frame it arrived in, without a copy in user space
/// (`xsk_tx_in_place`), as do replies made from a received frame (ARP); frames the router
/// builds from nothing (its ARP requests) are copied in (`xsk_tx_copied`). With
/// `shared_umem = false` each port has its own UMEM, frames are copied in and out, and
/// every frame sent is a copy. AF_PACKET ports count neither.
#[test]
fn forwarded_frames_leave_from_the_umem_frame_they_arrived_in() {
    for shared in [true, false] {
        let dir = single_copy(
            &format!("umem-{shared}"),
            // User space's path: the fast path would forward these frames itself.
            |r| format!("{r}\n[io]\nshared_umem = {shared}\nfast_path = false\n"),
            |t| t,
        );
        let lab = TestLab::up(dir.join("lab.toml"), &[]);
        let p = lab.sh(
            "src1",
            &["ping", "-c", "5", "-i", "0.1", "-W", "2", "10.3.0.10"],
        );
        assert!(p.contains("5 received"), "{p}");
        // The workers add the ports' counts to the element's every 100 ms.
        std::thread::sleep(Duration::from_millis(300));
        let c = lab.counters("r");
        let (forwarded, in_place, copied) = (
            event_count(&c, "ip4_forwarded"),
            event_count(&c, "xsk_tx_in_place"),
            event_count(&c, "xsk_tx_copied"),
        );
        assert!(forwarded >= 10, "{c}");
        let mode = lab.show_json("interfaces", "r")[0]["io_mode"]
            .as_str()
            .unwrap()
            .to_string();
        match (io_backend(), shared) {
            ("packet", _) => {
                assert_eq!((in_place, copied), (0, 0), "{c}");
                assert!(!mode.contains("UMEM"), "{mode}");
            }
            (_, true) => {
                assert!(in_place >= forwarded, "{c}");
                // The router's ARP request for the sink, built from nothing. (Its ARP
                // reply to src1 is made from the request, in place.)
                assert!(copied >= 1, "{c}");
                assert!(mode.ends_with("UMEM shared by 4 sockets"), "{mode}");
            }
            (_, false) => {
                assert_eq!(in_place, 0, "{c}");
                assert!(copied >= forwarded, "{c}");
                assert!(!mode.contains("UMEM"), "{mode}");
            }
        }
        assert_eq!(event_count(&c, "xsk_rx_copied"), 0, "{c}");
        // Down before its file goes (`lab down` reads it).
        drop(lab);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Offered more than it can forward (the XDP generator at full speed for two seconds),
/// the router sheds the excess and keeps every buffer: afterwards it forwards as before.
/// (A receive frame lost from the AF_XDP ring, or a slot from the AF_PACKET ring, would
/// show as a router that stops receiving.)
#[test]
fn forwards_after_overload() {
    // User space's overload: the fast path would forward the flood itself.
    let lab = TestLab::up(
        repo_path("labs/single-router.toml"),
        &["--fast-path", "false"],
    );
    lab.sh(
        "src1",
        &["ping", "-c", "2", "-i", "0.2", "-W", "2", "10.3.0.10"],
    );
    // The router's first veth must take XDP frames: GRO makes it run NAPI on AF_PACKET
    // too (with AF_XDP its own program already does).
    lab.sh("r", &["ethtool", "-K", "r-eth0", "gro", "on"]);
    let rmac = lab.mac("r", "r-eth0");
    let g = lab.exec(
        "src1",
        &xdp_gen(&rmac, "10.1.0.10", "10.3.0.10", "max", "2"),
    );
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let sent = serde_json::from_slice::<serde_json::Value>(&g.stdout).unwrap()["sent"]
        .as_u64()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300)); // the kernel's drop counts, read every 100 ms
    let c = lab.counters("r");
    let forwarded = event_count(&c, "ip4_forwarded");
    assert!(
        forwarded > 10_000,
        "sent {sent}, forwarded {forwarded}: {c}"
    );
    // What was not received was shed at the input rings and counted there: the socket's
    // ring, or on AF_PACKET the receiving veth's own queue when it overflows (its
    // statistics). (Measured: both backends' counts add up to what was sent, to the frame,
    // the pings and ARP aside.)
    let rx = c["interfaces"]["r-eth0"]["rx_packets"].as_u64().unwrap();
    let shed = drop_count(&c, "rx_ring_full") + drop_count(&c, "xsk_rx_dropped");
    let device = drop_count(&c, "device_rx_dropped");
    assert!(
        (rx + shed + device) as f64 >= 0.99 * sent as f64,
        "sent {sent}, received {rx}, shed and counted {shed} at the socket, {device} at the device: {c}"
    );
    let p = lab.sh(
        "src1",
        &["ping", "-c", "5", "-i", "0.2", "-W", "2", "10.3.0.10"],
    );
    assert!(p.contains("5 received"), "{p}");
}

/// With the fast path on (XDP on AF_XDP ports, tcx on AF_PACKET ones: the backend under
/// test), a route deleted while frames flow is no longer followed by the fast path: the
/// router answers net unreachable, as the user-space path says. TCP goes through too; in
/// tcx, with the checksums the hosts leave to offload, by the fast path.
#[test]
fn the_fast_path_follows_route_changes() {
    let dir = single_copy("fast", |r| format!("{r}\n[io]\nfast_path = true\n"), |t| t);
    let lab = TestLab::up(dir.join("lab.toml"), &[]);
    for h in ["src1", "sink1"] {
        // GRO on (the lab does it too, the fast path being on), and TCP checksums left
        // to offload, as a veth may (the lab's wire-like links carry them complete).
        lab.sh(h, &["ethtool", "-K", "eth0", "gro", "on", "tx", "on"]);
    }
    let stack_before = kernel_ip_in_receives(&lab, "r");
    let sock = lab.control("r");
    let sock = sock.to_str().unwrap();
    let o = lab.tessera(&["show", "interfaces", "--control", sock]);
    assert!(out(&o).contains("fast path"), "{}", out(&o));
    let p = lab.sh(
        "src1",
        &["ping", "-c", "5", "-i", "0.2", "-W", "2", "10.3.0.10"],
    );
    assert!(
        p.contains("5 received") && p.matches("ttl=63").count() == 5,
        "{p}"
    );
    std::thread::sleep(Duration::from_millis(300)); // neighbours reach the fast path
    let fwd = |lab: &TestLab| {
        lab.counters("r")["fast_path"]["forwarded"]
            .as_u64()
            .unwrap()
    };
    let before = fwd(&lab);
    lab.sh(
        "src1",
        &["ping", "-c", "5", "-i", "0.1", "-W", "2", "10.3.0.10"],
    );
    // Five echoes and five replies, none through user space.
    assert_eq!(fwd(&lab) - before, 10, "{}", lab.counters("r"));
    // 198.51.100.0/24 goes to sink1 (which does not answer for it): the fast path sends it.
    let tx2 = |lab: &TestLab| {
        lab.counters("r")["fast_path"]["interfaces"]["r-eth2"]["tx_forwarded"]
            .as_u64()
            .unwrap()
    };
    let t0 = tx2(&lab);
    lab.exec(
        "src1",
        &["ping", "-c", "3", "-i", "0.1", "-W", "1", "198.51.100.7"],
    );
    assert_eq!(tx2(&lab) - t0, 3, "{}", lab.counters("r"));
    let o = lab.tessera(&["route", "del", "198.51.100.0/24", "--control", sock]);
    assert!(out(&o).contains("\"removed\": true"), "{}", out(&o));
    let p = lab.exec(
        "src1",
        &["ping", "-c", "3", "-i", "0.1", "-W", "1", "198.51.100.7"],
    );
    let p = String::from_utf8_lossy(&p.stdout).into_owned();
    assert!(p.contains("Destination Net Unreachable"), "{p}");
    assert_eq!(tx2(&lab) - t0, 3, "{}", lab.counters("r"));
    // TCP: the hosts leave their checksums to offload. An XDP frame has lost that state,
    // so the XDP fast path leaves such frames to user space, which completes them; in
    // tcx the socket buffer keeps it, and the fast path forwards them as they are.
    let before = fwd(&lab);
    let c0 = lab.counters("r");
    lab.iperf3("src1", "sink1", "10.3.0.10", &["-n", "20M"]);
    let c = lab.counters("r");
    let filled = event_count(&c, "ip4_checksum_filled") - event_count(&c0, "ip4_checksum_filled");
    if common::io_backend() == "packet" {
        assert!(fwd(&lab) - before > 10_000, "{c}");
        assert!(filled < 100, "{c}");
    } else {
        assert!(filled > 10_000, "{c}");
    }
    // Frames left to user space (ARP, echoes to the router) reach the element's socket,
    // and none of the port's frames reaches the kernel's stack (in tcx: a frame left to
    // user space comes back marked after the socket took it, and ends there).
    let p = lab.sh(
        "src1",
        &["ping", "-c", "2", "-i", "0.2", "-W", "2", "10.1.0.1"],
    );
    assert!(p.contains("2 received"), "{p}");
    assert_eq!(kernel_ip_in_receives(&lab, "r"), stack_before);
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `backend = "auto"` takes AF_XDP where it can and falls back per port, saying why: a
/// two-queue link gets a socket on each queue; a link whose MTU is above what an AF_XDP
/// frame holds gets AF_PACKET and a log line. Frames cross between the two kinds.
#[test]
fn auto_backend_serves_every_queue_and_falls_back_per_port() {
    let dir = single_copy(
        "auto",
        |r| r,
        |t| {
            t.replace("b = \"r:r-eth0\"", "b = \"r:r-eth0\"\nqueues = 2")
                .replace("b = \"r:r-eth2\"", "b = \"r:r-eth2\"\nmtu = 4000")
        },
    );
    let lab = TestLab::up(dir.join("lab.toml"), &["--io", "auto"]);
    let o = lab.tessera(&[
        "show",
        "interfaces",
        "--control",
        lab.control("r").to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let port = |n: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(port("r-eth0")["backend"], "xdp", "{v}");
    // The AF_XDP ports' four sockets (two queues, one, one) share one UMEM
    // (`[io] shared_umem`, on by default).
    assert!(
        port("r-eth0")["io_mode"]
            .as_str()
            .unwrap()
            .contains("2 queues, UMEM shared by 4 sockets"),
        "{v}"
    );
    assert_eq!(port("r-eth1")["backend"], "xdp", "{v}");
    assert_eq!(port("r-eth2")["backend"], "packet", "{v}");
    let log = std::fs::read_to_string(
        std::path::Path::new(lab::topology::RUN_DIR)
            .join(&lab.name)
            .join("r.log"),
    )
    .unwrap();
    assert!(
        log.contains("AF_XDP unavailable") && log.contains("r-eth2") && log.contains("MTU 4000"),
        "{log}"
    );
    let p = lab.sh(
        "src1",
        &["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.3.0.10"],
    );
    assert!(p.contains("3 received"), "{p}");
    // TCP both ways across an AF_XDP port and an AF_PACKET one.
    lab.iperf3("src1", "sink1", "10.3.0.10", &["-t", "1"]);
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The lab of `single-router.toml` with a forwarder of `[io] workers = 2` over two-queue
/// links, and `extra` in its `[io]`.
fn two_worker_lab(tag: &str, extra: &str) -> (TestLab, std::path::PathBuf) {
    let extra = extra.to_string();
    let dir = single_copy(
        tag,
        // User space's workers: the fast path (on by default) would forward the flows.
        move |r| format!("{r}\n[io]\nworkers = 2\nfast_path = false\n{extra}"),
        |mut t| {
            for i in 0..4 {
                let b = format!("b = \"r:r-eth{i}\"");
                t = t.replace(&b, &format!("{b}\nqueues = 2"));
            }
            t
        },
    );
    (TestLab::up(dir.join("lab.toml"), &[]), dir)
}

/// `[io] workers = 2` over two-queue links: each worker owns one queue of every port (one
/// socket of a fanout group on AF_PACKET), both carry flows, a next hop resolved by one is
/// known to the other, `show counters` sums the two, and a capture sees both workers'
/// frames.
#[test]
fn two_workers_share_the_flows() {
    let (lab, dir) = two_worker_lab("workers", "");
    let p = lab.sh(
        "src1",
        &["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.3.0.10"],
    );
    // Every echo twice, on AF_PACKET, was the two workers' sockets in two fanout groups:
    // on a freshly booted machine the kernel names the first new group 0, which the
    // opening took for "make a new group" (io's test
    // `the_workers_packet_sockets_make_one_group_even_group_0`). The counters say which
    // worker took what.
    assert!(
        p.contains("3 received") && p.matches("ttl=63").count() == 3,
        "{p}\nthe router's counters: {}",
        lab.counters("r")
    );
    // Sixteen TCP flows: the senders' kernels spread them over both queues by their hash.
    lab.iperf3("src1", "sink1", "10.3.0.10", &["-t", "2", "-P", "16"]);
    let c = lab.counters("r");
    let w = c["workers"].as_array().unwrap_or_else(|| panic!("{c}"));
    assert_eq!(w.len(), 2, "{c}");
    let rx: Vec<u64> = w
        .iter()
        .map(|x| x["rx_packets"].as_u64().unwrap())
        .collect();
    // Each worker carried a real share (16 flows all on one queue: 1 in 32,768).
    assert!(rx.iter().all(|n| *n > 1000), "{c}");
    // The summed counters are the workers' sum, in one answer even while frames still
    // arrive (the flows' last retransmissions and closing handshakes may: CI once saw
    // 132 frames land between two separate reads of the sum and the shares).
    let total: u64 = c["interfaces"]
        .as_object()
        .unwrap()
        .values()
        .map(|i| i["rx_packets"].as_u64().unwrap())
        .sum();
    assert_eq!(total, rx.iter().sum::<u64>(), "{c}");
    assert!(event_count(&c, "ip4_forwarded") > 1000, "{c}");
    // `tessera capture` sees every worker's frames: over sixteen flows (both workers'
    // queues), the TCP it captured arriving on r-eth0, with what it lost at the element,
    // is at least what r-eth0 received between two reads inside the capture (the first
    // worker's alone would be about half).
    let ctl = lab.control("r");
    let cap = std::process::Command::new(exe())
        .args(["capture", "--control", ctl.to_str().unwrap()])
        .args(["--port", "r-eth0", "--filter", "tcp", "-w"])
        .arg(dir.join("workers.pcap"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let rx0 = |lab: &TestLab| {
        lab.counters("r")["interfaces"]["r-eth0"]["rx_packets"]
            .as_u64()
            .unwrap()
    };
    let per_worker = |lab: &TestLab| -> Vec<u64> {
        lab.counters("r")["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["rx_packets"].as_u64().unwrap())
            .collect()
    };
    let (before, workers_before) = (rx0(&lab), per_worker(&lab));
    lab.iperf3("src1", "sink1", "10.3.0.10", &["-t", "1", "-P", "16"]);
    let during = rx0(&lab) - before;
    let shares: Vec<u64> = per_worker(&lab)
        .iter()
        .zip(&workers_before)
        .map(|(a, b)| a - b)
        .collect();
    // Both workers took a real share of what the capture had to see.
    assert!(shares.iter().all(|&n| n > 200), "{shares:?}");
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: this test started the capture process.
    unsafe { libc::kill(cap.id() as i32, libc::SIGINT) };
    let o = cap.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{err}");
    let number = |after: &str| -> u64 {
        err.split(after)
            .nth(1)
            .and_then(|r| r.trim_start().split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {after:?} in {err}"))
    };
    let received = number("frames (");
    let lost = number("lost at the element:");
    eprintln!(
        "capture over two workers (their shares {shares:?}): {received} received, {lost} lost at the element; r-eth0 received {during}"
    );
    assert!(
        during > 1000 && received + lost + 50 >= during,
        "captured {received} received and lost {lost} of {during} frames r-eth0 received: {err}"
    );
    let o = lab.tessera(&[
        "show",
        "interfaces",
        "--control",
        lab.control("r").to_str().unwrap(),
    ]);
    let i = String::from_utf8_lossy(&o.stdout);
    match io_backend() {
        "packet" => assert!(i.contains("fanout by flow hash"), "{i}"),
        _ => assert!(i.contains("1 queue"), "{i}"),
    }
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `[io] priority = 10`: the forwarder's two workers run at SCHED_FIFO 10, its other
/// threads (control socket) do not. Without load: busy real-time workers would take the
/// CPUs from whatever runs beside this test.
#[test]
fn workers_run_at_the_real_time_priority_they_are_given() {
    let (lab, dir) = two_worker_lab("priority", "priority = 10\n");
    let p = lab.sh("src1", &["ping", "-c", "1", "-W", "2", "10.3.0.10"]);
    assert!(p.contains("1 received"), "{p}");
    // The forwarder of this lab: the `tessera` process whose command line names a file
    // of this test's directory. Its two workers (the main thread and `worker-1`) run at
    // SCHED_FIFO 10; its other threads (control socket) do not.
    let pids = std::process::Command::new("pgrep")
        .args(["-f", dir.to_str().unwrap()])
        .output()
        .unwrap();
    let pid = String::from_utf8_lossy(&pids.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "tessera")
                && std::fs::read(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains("forwarder"))
        })
        .expect("the lab's forwarder");
    let ps = std::process::Command::new("ps")
        .args(["-L", "-o", "cls=,rtprio=,comm=", "-p", &pid])
        .output()
        .unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout).to_string();
    let fifo: Vec<&str> = ps
        .lines()
        .filter(|l| l.split_whitespace().take(2).eq(["FF", "10"]))
        .collect();
    assert_eq!(fifo.len(), 2, "{ps}");
    assert!(fifo.iter().any(|l| l.contains("worker-1")), "{ps}");
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `[metrics] listen`: `/metrics`, scraped in the router's namespace, parses with the
/// Prometheus client's own text parser; every drop counter of `show counters` appears
/// with its value, the router totals equal the sums over the element's ports and
/// reasons, and `show router` and `tessera top` agree with them. A reload moves it.
#[test]
fn metrics_are_served_to_prometheus() {
    let dir = single_copy(
        "metrics",
        |r| format!("{r}\n[metrics]\nlisten = \"127.0.0.1:9100\"\n"),
        |t| t,
    );
    let lab = TestLab::up(dir.join("lab.toml"), &[]);
    let p = lab.sh(
        "src1",
        &["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.3.0.10"],
    );
    assert!(p.contains("3 received"), "{p}");
    // A drop: no route to 192.0.2.1 (net unreachable).
    let o = lab.exec("src1", &["ping", "-c", "1", "-W", "1", "192.0.2.1"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("Net Unreachable"));
    // Python's prometheus_client parses the exposition; print "name labels value" lines.
    let script = r#"
import json, sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
text = urllib.request.urlopen("http://127.0.0.1:9100/metrics", timeout=5).read().decode()
out = []
for fam in text_string_to_metric_families(text):
    for s in fam.samples:
        out.append({"family": fam.name, "type": fam.type, "name": s.name, "labels": s.labels, "value": s.value})
print(json.dumps(out))
"#;
    let o = lab.exec("r", &["/usr/bin/python3", "-c", script]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let samples: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    let c = lab.counters("r");
    let find = |name: &str, key: &str, val: &str| -> Option<f64> {
        samples
            .iter()
            .find(|s| s["name"] == name && (key.is_empty() || s["labels"][key] == val))
            .map(|s| s["value"].as_f64().unwrap())
    };
    // Every drop reason of the element appears, with the value the control socket gives
    // (the scrape came first, so it is at most what the counters say now).
    let drops = c["drops"].as_object().unwrap();
    assert!(drops.len() > 20, "{c}");
    for (reason, n) in drops {
        let v = find("tessera_dropped_packets_total", "reason", reason)
            .unwrap_or_else(|| panic!("no sample for {reason}: {text}"));
        assert!(v <= n.as_u64().unwrap() as f64, "{reason}");
        let t = find("tessera_router_dropped_packets_total", "reason", reason).unwrap();
        assert_eq!(t, v, "the router's total of {reason} is the element's");
    }
    assert!(find("tessera_dropped_packets_total", "reason", "ip4_no_route").unwrap() >= 1.0);
    // The router's received total is the sum over its (external) ports.
    let rx_sum: f64 = samples
        .iter()
        .filter(|s| s["name"] == "tessera_port_received_packets_total")
        .map(|s| s["value"].as_f64().unwrap())
        .sum();
    assert!(rx_sum >= 4.0, "{text}");
    assert_eq!(
        find("tessera_router_received_packets_total", "", "").unwrap(),
        rx_sum
    );
    let fam = samples
        .iter()
        .find(|s| s["family"] == "tessera_router_received_packets")
        .unwrap();
    assert_eq!(fam["type"], "counter");
    assert_eq!(find("tessera_element_up", "element", "r"), Some(1.0));
    // The same view as JSON, and `tessera top` over it.
    let ctl = lab.control("r");
    let o = lab.tessera(&["show", "router", "--control", ctl.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["total"]["rx_packets"].as_u64().unwrap() >= rx_sum as u64,
        "{v}"
    );
    assert_eq!(v["elements"]["r"]["role"], "forwarder", "{v}");
    assert!(
        v["external_ports"]["r/r-eth0"]["rx_packets"]
            .as_u64()
            .unwrap()
            >= 4
    );
    let mut ping = lab.spawn("src1", &["ping", "-i", "0.05", "-c", "40", "10.3.0.10"]);
    let o = lab.tessera(&[
        "top",
        "--control",
        ctl.to_str().unwrap(),
        "--interval-ms",
        "500",
        "--count",
        "2",
    ]);
    let _ = ping.wait();
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && t.matches("tessera top: router in").count() == 2,
        "{t}"
    );
    let rx = t
        .lines()
        .find(|l| l.starts_with("r/r-eth0"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|x| x.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("{t}"));
    assert!(
        (5.0..100.0).contains(&rx),
        "ping at 20/s shows as {rx} pps: {t}"
    );
    // `tessera reload` moves /metrics to another port in place (the old one closes); a
    // changed `element` label needs a restart and is refused by name.
    let up = |port: &str| {
        let o = lab.exec(
            "r",
            &[
                "/usr/bin/python3",
                "-c",
                &format!("import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/metrics', timeout=2)"),
            ],
        );
        o.status.success()
    };
    let file = dir.join("r.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("127.0.0.1:9100", "127.0.0.1:9101")).unwrap();
    let o = lab.tessera(&["reload", "--control", ctl.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(up("9101") && !up("9100"));
    std::fs::write(
        &file,
        text.replace("127.0.0.1:9100\"", "127.0.0.1:9101\"\nelement = \"other\""),
    )
    .unwrap();
    let o = lab.tessera(&["reload", "--control", ctl.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("metrics.element"),
        "{err}"
    );
    assert!(up("9101"));
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `tessera capture`: with a tcpdump filter and a count, the pcap file that `tcpdump -r`
/// reads holds the echo requests as they arrived on r-eth0 and nothing else; `-w -`
/// pipes into `tcpdump -r -`; a bad filter is an error with tcpdump's reason.
#[test]
fn capture_writes_pcap_that_tcpdump_reads() {
    let lab = single();
    let ctl = lab.control("r");
    let ctl = ctl.to_str().unwrap();
    let dir = std::env::temp_dir().join(format!("tessera-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("r.pcap");
    let cap = std::process::Command::new(exe())
        .args(["capture", "--control", ctl, "--port", "r-eth0"])
        .args([
            "--filter",
            "icmp[icmptype] = icmp-echo",
            "--count",
            "3",
            "-w",
        ])
        .arg(&file)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let p = lab.sh(
        "src1",
        &["ping", "-c", "4", "-i", "0.2", "-W", "2", "10.3.0.10"],
    );
    assert!(p.contains("4 received"), "{p}");
    let o = cap.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("3 frames (3 received, 0 sent)"), "{err}");
    let t = std::process::Command::new("tcpdump")
        .args(["-n", "-r"])
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&t.stdout);
    assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));
    assert_eq!(text.lines().count(), 3, "{text}");
    assert_eq!(
        text.matches("10.1.0.10 > 10.3.0.10: ICMP echo request")
            .count(),
        3,
        "{text}"
    );
    // Every port, both directions, into `tcpdump -r -`: a request in on r-eth0 leaves by
    // r-eth2 and its reply comes back; four frames per ping.
    let pipe = format!(
        "{} capture --control {ctl} --filter icmp --count 4 -w - | tcpdump -n -r - 2>/dev/null",
        exe()
    );
    let cap = std::process::Command::new("sh")
        .args(["-c", &pipe])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    lab.sh("src1", &["ping", "-c", "1", "-W", "2", "10.3.0.10"]);
    let o = cap.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(text.matches("ICMP echo request").count(), 2, "{text}");
    assert_eq!(text.matches("ICMP echo reply").count(), 2, "{text}");
    let o = lab.tessera(&[
        "capture",
        "--control",
        ctl,
        "--filter",
        "no such",
        "-w",
        "-",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("syntax error"));
    let o = lab.tessera(&["capture", "--control", ctl, "--port", "eth9", "-w", "-"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("no port \"eth9\""));
    // The captures saw frames the fast path (on by default) would have forwarded: while
    // one runs, every frame goes through user space. Once they end, the fast path
    // forwards again (the worker follows within a poll).
    std::thread::sleep(Duration::from_millis(200));
    let fwd = |lab: &TestLab| {
        lab.counters("r")["fast_path"]["forwarded"]
            .as_u64()
            .unwrap()
    };
    let before = fwd(&lab);
    let p = lab.sh(
        "src1",
        &["ping", "-c", "3", "-i", "0.1", "-W", "2", "10.3.0.10"],
    );
    assert!(p.contains("3 received"), "{p}");
    assert_eq!(fwd(&lab) - before, 6, "{}", lab.counters("r"));
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What a host sees as the Linux kernel would show it: `ping -R` through the router lists
/// the router's addresses (the outgoing interface's each way), and a ping to the router
/// that arrives in fragments (`-s 3000`) is answered.
#[test]
fn record_route_and_fragmented_pings_to_the_router() {
    let lab = single();
    let p = lab.sh("src1", &["ping", "-R", "-c", "1", "-W", "2", "10.3.0.10"]);
    assert!(p.contains("1 received"), "{p}");
    let rr = p
        .split("RR:")
        .nth(1)
        .unwrap_or_else(|| panic!("no route recorded: {p}"));
    assert!(rr.contains("10.3.0.1") && rr.contains("10.1.0.1"), "{p}");
    let p = lab.sh(
        "src1",
        &[
            "ping", "-s", "3000", "-c", "2", "-i", "0.2", "-W", "2", "10.1.0.1",
        ],
    );
    assert!(p.contains("2 received"), "{p}");
    let c = lab.counters("r");
    assert!(event_count(&c, "ip4_reassembled") >= 2, "{c}");
    assert!(event_count(&c, "ip4_options_updated") >= 2, "{c}");
}

/// The fast path is on by default; where the hosts' links have GRO off (wire-like veths,
/// whose far end then runs no NAPI and would drop every frame an XDP program redirects to
/// it), the router's XDP program hands the frames bound there to its port's tcx hook,
/// which sends them (`egress: "tcx"` in `show interfaces`, with why), so that every ping
/// gets through in the fast path. Once a host turns GRO on, the XDP program redirects to
/// it again (the kernel's notification, or the timed look, tells the router). On
/// AF_PACKET ports the fast path is tcx's, whose socket buffers every veth takes.
#[test]
fn the_default_fast_path_loses_nothing_on_wire_like_links() {
    let dir = single_copy("nohole", |r| r, |t| t);
    let lab = TestLab::up(dir.join("lab.toml"), &[]);
    let xdp = common::io_backend() != "packet";
    for h in ["src1", "sink1"] {
        lab.sh(h, &["ethtool", "-K", "eth0", "gro", "off"]);
    }
    let port = |lab: &TestLab, name: &str| lab.port_fast("r", name);
    let wait_egress = |lab: &TestLab, name: &str, want: &str| {
        let t = std::time::Instant::now();
        loop {
            let p = port(lab, name);
            if p["egress"] == want || t.elapsed() > Duration::from_secs(5) {
                return p;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let p2 = wait_egress(&lab, "r-eth2", "tcx");
    assert_eq!(p2["on"], true, "{p2}");
    assert_eq!(p2["egress"], "tcx", "{p2}");
    if xdp {
        let why = p2["egress_why"].as_str().unwrap_or_default();
        assert!(why.contains("runs no NAPI"), "{p2}");
        assert!(why.contains("handed to tcx"), "{p2}");
    } else {
        // tcx sends socket buffers, which such a device takes: nothing to explain.
        assert!(p2["egress_why"].is_null(), "{p2}");
    }
    // An untouched host (GRO on, as the lab sets it with the fast path on) takes them.
    assert_eq!(
        port(&lab, "r-eth1")["egress"],
        if xdp { "xdp" } else { "tcx" }
    );
    let fast = |lab: &TestLab, what: &str| {
        lab.counters("r")["fast_path"]["interfaces"]["r-eth2"][what]
            .as_u64()
            .unwrap()
    };
    let (tx0, handed0) = (fast(&lab, "tx_forwarded"), fast(&lab, "tx_handed_to_tcx"));
    let p = lab.sh(
        "src1",
        &["ping", "-c", "200", "-i", "0.005", "-W", "2", "10.3.0.10"],
    );
    assert!(p.contains("200 received"), "{p}\n{}", lab.logs("r"));
    // Every request left by the fast path, handed to tcx where the program is XDP's.
    assert!(
        fast(&lab, "tx_forwarded") - tx0 >= 200,
        "{}",
        lab.counters("r")
    );
    let handed = fast(&lab, "tx_handed_to_tcx") - handed0;
    assert_eq!(handed >= 200, xdp, "{}", lab.counters("r"));
    // GRO on at sink1: its veth's peer runs NAPI, and XDP redirects to it again.
    lab.sh("sink1", &["ethtool", "-K", "eth0", "gro", "on"]);
    let p2 = wait_egress(&lab, "r-eth2", if xdp { "xdp" } else { "tcx" });
    if xdp {
        assert_eq!(p2["egress"], "xdp", "{p2}");
        // On at start (the lab's GRO), off, on again.
        assert_eq!(p2["egress_changes"], 2, "{p2}");
    }
    let (before, handed) = (fast(&lab, "tx_forwarded"), fast(&lab, "tx_handed_to_tcx"));
    let p = lab.sh(
        "src1",
        &["ping", "-c", "20", "-i", "0.01", "-W", "2", "10.3.0.10"],
    );
    assert!(p.contains("20 received"), "{p}");
    assert!(
        fast(&lab, "tx_forwarded") - before >= 19,
        "{}",
        lab.counters("r")
    );
    assert_eq!(
        fast(&lab, "tx_handed_to_tcx"),
        handed,
        "{}",
        lab.counters("r")
    );
    if xdp {
        let log = lab.logs("r");
        assert!(log.contains("fast path egress changed"), "{log}");
    }
}

/// Hosts whose links are as a container's (`lab up --hosts plain`: GRO off, no XDP
/// program, so their veths take no frame redirected in XDP): the forwarder's fast path
/// still carries every transit packet (through the hand-off to tcx on AF_XDP ports),
/// TCP crosses it, and a restart under a generator's load loses nothing: the hand-off's
/// link is pinned and taken over as the XDP program's is.
#[test]
fn plain_hosts_keep_the_fast_path_across_a_restart() {
    let lab = TestLab::up(repo_path("labs/single-router.toml"), &["--hosts", "plain"]);
    let p = lab.sh(
        "src1",
        &["ping", "-c", "2", "-i", "0.2", "-W", "2", "10.3.0.10"],
    );
    assert!(p.contains("2 received"), "{p}");
    assert_eq!(lab.port_fast("r", "r-eth2")["egress"], "tcx");
    plain_hosts_go_by_the_fast_path(&lab);
    assert_eq!(lab.port_fast("r", "r-eth2")["egress"], "tcx");
}

/// Plain hosts through the single router's fast path (their neighbours resolved): 100
/// pings and a second of TCP, every packet counted by the fast path (requests in at
/// r-eth0, replies in at r-eth2), then a restart under the XDP generator's 50 kpps,
/// received by an AF_PACKET sink (no XDP on the host), that loses nothing.
fn plain_hosts_go_by_the_fast_path(lab: &TestLab) {
    let forwarded = |lab: &TestLab| {
        lab.counters("r")["fast_path"]["forwarded"]
            .as_u64()
            .unwrap()
    };
    let before = forwarded(lab);
    let p = lab.sh(
        "src1",
        &["ping", "-c", "100", "-i", "0.005", "-W", "2", "10.3.0.10"],
    );
    assert!(p.contains("100 received"), "{p}");
    assert!(forwarded(lab) - before >= 200, "{}", lab.counters("r"));
    let before = forwarded(lab);
    lab.iperf3("src1", "sink1", "10.3.0.10", &["-t", "1"]);
    assert!(forwarded(lab) - before > 1000, "{}", lab.counters("r"));
    let Restarted {
        g, s, sent, got, ..
    } = restart_under_the_xdp_generator(lab, &[]);
    eprintln!("plain hosts, restart under load: sent {sent}, received {got}");
    assert!(sent > 200_000, "{g}");
    assert_eq!(
        got,
        sent,
        "lost {} of {sent} across the restart: {s}\n{}",
        sent.saturating_sub(got),
        lab.logs("r")
    );
}

/// By default (`[io] backend = "auto"`), a forwarder's port whose veth peer runs no NAPI
/// (a plain host's, as a container's is) opens on AF_PACKET with the fast path in tcx, and
/// says why (docs/forwarder.md, "Ports on AF_PACKET by choice"): an XDP program there
/// would have each frame the peer sends copied first. Pings, TCP and a restart under load
/// go by the fast path with nothing lost; a peer that turns GRO on gets an AF_XDP port at
/// the next start, and the link of that port's last (tcx) fast path is ended, not left
/// beside the new one.
#[test]
fn auto_runs_ports_to_plain_hosts_on_af_packet_with_the_fast_path_in_tcx() {
    let lab = TestLab::up(
        repo_path("labs/single-router.toml"),
        &["--hosts", "plain", "--io", "auto"],
    );
    for n in ["r-eth0", "r-eth1", "r-eth2", "r-eth3"] {
        let p = lab.port("r", n);
        assert_eq!(p["backend"], "packet", "{p}");
        let mode = p["io_mode"].as_str().unwrap_or_default();
        assert!(mode.contains("fast path (tcx)"), "{p}");
        assert!(
            mode.contains("AF_PACKET because its veth peer runs no NAPI"),
            "{p}"
        );
    }
    // The first pings resolve both hosts (and the fast path learns them).
    let p = lab.sh(
        "src1",
        &["ping", "-c", "2", "-i", "0.2", "-W", "2", "10.3.0.10"],
    );
    assert!(p.contains("2 received"), "{p}");
    std::thread::sleep(Duration::from_millis(300));
    plain_hosts_go_by_the_fast_path(&lab);
    assert_eq!(lab.port("r", "r-eth0")["backend"], "packet");
    // sink1 turns GRO on: its port is an AF_XDP one from the next start, whose tcx link
    // of the last start is ended.
    let ino = std::process::Command::new("stat")
        .args(["-L", "-c", "%i", &format!("/run/netns/ts-{}-r", lab.name)])
        .output()
        .unwrap();
    let ino = String::from_utf8_lossy(&ino.stdout).into_owned();
    let pins = |port: &str| {
        let ifindex = lab.sh("r", &["cat", &format!("/sys/class/net/{port}/ifindex")]);
        std::path::PathBuf::from(format!(
            "/run/tessera/bpf/net{}/if{}",
            ino.trim(),
            ifindex.trim()
        ))
    };
    assert!(pins("r-eth2").join("link-tcx").exists());
    lab.sh("sink1", &["ethtool", "-K", "eth0", "gro", "on"]);
    lab.element("stop", "r");
    lab.element("start", "r");
    assert_eq!(lab.port("r", "r-eth2")["backend"], "xdp");
    assert_eq!(lab.port("r", "r-eth0")["backend"], "packet");
    assert!(
        !pins("r-eth2").join("link-tcx").exists(),
        "{}",
        lab.logs("r")
    );
    assert!(pins("r-eth0").join("link-tcx").exists());
    let p = lab.sh(
        "src1",
        &["ping", "-c", "20", "-i", "0.01", "-W", "2", "10.3.0.10"],
    );
    assert!(p.contains("20 received"), "{p}");
}

/// `tessera reload` and SIGHUP: the forwarder re-reads its config file; a changed route is
/// followed at once (frames leave by the new next hop's port), a broken file changes
/// nothing and says the line and key, a changed key that needs a restart is refused by
/// name, and the element stays up through all of it.
#[test]
fn reload_and_sighup_reread_the_config() {
    let dir = single_copy("reload-hup", |r| r, |t| t);
    let lab = TestLab::up(dir.join("lab.toml"), &[]);
    let ctl = lab.control("r");
    let ctl = ctl.to_str().unwrap();
    let cfg = dir.join("r.toml");
    let original = std::fs::read_to_string(&cfg).unwrap();
    let tx = |lab: &TestLab, i: &str| {
        lab.counters("r")["interfaces"][i]["tx_packets"]
            .as_u64()
            .unwrap()
    };
    let ping = |lab: &TestLab| {
        lab.exec(
            "src1",
            &["ping", "-c", "3", "-i", "0.1", "-W", "1", "198.51.100.7"],
        );
    };
    // 198.51.100.0/24 goes via sink1, out of r-eth2.
    let before = tx(&lab, "r-eth2");
    ping(&lab);
    assert!(tx(&lab, "r-eth2") - before >= 3, "{}", lab.counters("r"));
    // Now via sink2 (r-eth3): `tessera reload`.
    std::fs::write(
        &cfg,
        original.replace("via = \"10.3.0.10\"", "via = \"10.4.0.10\""),
    )
    .unwrap();
    let o = lab.tessera(&["reload", "--control", ctl]);
    assert!(
        o.status.success() && out(&o).contains("\"reloaded\": true"),
        "{}",
        out(&o)
    );
    let (e2, e3) = (tx(&lab, "r-eth2"), tx(&lab, "r-eth3"));
    ping(&lab);
    assert_eq!(tx(&lab, "r-eth2"), e2, "{}", lab.counters("r"));
    assert!(tx(&lab, "r-eth3") - e3 >= 3, "{}", lab.counters("r"));
    // `tessera show config`: what runs now, defaults filled in, as TOML that loads again
    // to the same config.
    let shown = lab.shown_config("r", "forwarder");
    for line in [
        "via = [\"10.4.0.10\"]",
        "slow_path_limit = 20000",
        "restart_grace_s = 5",
        "icmp_errors_per_sec = 100",
        "reachable_secs = 30",
        "name = \"r-eth3\"",
    ] {
        assert!(shown.contains(line), "{line}: {shown}");
    }
    // A broken file: nothing changes, the error names the line and key.
    std::fs::write(
        &cfg,
        original
            .replace("10.3.0.1/24", "10.3.0.1/33")
            .replace("via = \"10.3.0.10\"", "via = \"10.4.0.10\""),
    )
    .unwrap();
    let o = lab.tessera(&["reload", "--control", ctl]);
    assert!(!o.status.success(), "{}", out(&o));
    assert!(
        out(&o).contains("r.toml:")
            && out(&o).contains("interface[2].address")
            && out(&o).contains("nothing changed"),
        "{}",
        out(&o)
    );
    // A key that needs a restart: refused by name.
    std::fs::write(&cfg, original.replace("10.3.0.1/24", "10.3.0.1/25")).unwrap();
    let o = lab.tessera(&["reload", "--control", ctl]);
    assert!(!o.status.success(), "{}", out(&o));
    assert!(
        out(&o).contains("key `interface[2].address` changed, which needs a restart"),
        "{}",
        out(&o)
    );
    // Still up, still via sink2.
    let e3 = tx(&lab, "r-eth3");
    ping(&lab);
    assert!(tx(&lab, "r-eth3") - e3 >= 3, "{}", lab.counters("r"));
    // SIGHUP, with the original file back: via sink1 again, and the element runs on.
    std::fs::write(&cfg, &original).unwrap();
    let pid = lab.node("r")["pid"].as_i64().expect("r's pid");
    // SAFETY: kill(2) of the element this test's lab started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGHUP) }, 0);
    let t = Instant::now();
    while !lab.logs("r").contains("SIGHUP: reloaded") && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        lab.logs("r").contains("config reloaded"),
        "{}",
        lab.logs("r")
    );
    let e2 = tx(&lab, "r-eth2");
    ping(&lab);
    assert!(tx(&lab, "r-eth2") - e2 >= 3, "{}", lab.counters("r"));
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--log json` (or `TESSERA_LOG_FORMAT=json`, which the elements a lab starts inherit):
/// every log line is one JSON object, the state changes among them.
#[test]
fn logs_in_json_for_log_shippers() {
    let lab = single();
    lab.element("stop", "r");
    let o = std::process::Command::new(exe())
        .env("TESSERA_LOG_FORMAT", "json")
        .args([
            "lab",
            "start",
            lab.file.to_str().unwrap(),
            "--name",
            &lab.name,
            "r",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", out(&o));
    let log = std::fs::read_to_string(lab.control("r").with_file_name("r.log")).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    let running = lines
        .iter()
        .find(|l| l["fields"]["message"] == "forwarder running")
        .unwrap_or_else(|| panic!("{log}"));
    assert_eq!(running["level"], "INFO", "{running}");
    assert_eq!(running["fields"]["fast_path"], true, "{running}");
    assert!(running["timestamp"].is_string(), "{running}");
    assert!(
        lines.iter().any(|l| l["fields"]["message"] == "port open"),
        "{log}"
    );
}

/// A flood of packets addressed to the router, with the fast path on (XDP on AF_XDP ports,
/// tcx on AF_PACKET ones): past `[io] slow_path_limit` the port's program drops them before
/// user space sees them, and counts them: every frame sent is either answered by user
/// space (`local_udp`) or shed (`slow_path_shed`, and the port's `fast_path` `shed`), and
/// the port's receive count holds both. The router answers pings again right after.
#[test]
fn a_flood_to_the_router_is_shed_in_the_fast_path_and_counted() {
    let dir = single_copy(
        "flood",
        |r| format!("{r}\n[io]\nslow_path_limit = 1000\n"),
        |t| t,
    );
    let lab = TestLab::up(dir.join("lab.toml"), &[]);
    lab.sh(
        "src1",
        &["ping", "-c", "2", "-i", "0.2", "-W", "2", "10.1.0.1"],
    );
    // The router's veth takes the XDP generator's frames (GRO: NAPI on AF_PACKET too).
    lab.sh("r", &["ethtool", "-K", "r-eth0", "gro", "on"]);
    let before = lab.counters("r");
    let rmac = lab.mac("r", "r-eth0");
    let g = lab.exec(
        "src1",
        &xdp_gen(&rmac, "10.1.0.10", "10.1.0.1", "100kpps", "1"),
    );
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let sent = serde_json::from_slice::<serde_json::Value>(&g.stdout).unwrap()["sent"]
        .as_u64()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let c = lab.counters("r");
    let d = |name: &str| drop_count(&c, name) - drop_count(&before, name);
    let (shed, answered) = (d("slow_path_shed"), d("local_udp"));
    let at_socket = d("rx_ring_full") + d("xsk_rx_dropped") + d("device_rx_dropped");
    assert!(sent > 50_000, "sent {sent}");
    assert!(shed > sent / 2, "sent {sent}, shed {shed}: {c}");
    // 1,000 a second per receiving CPU, and a tenth of a second's burst each.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    assert!(
        answered + at_socket <= 1_100 * cpus * 2,
        "{answered} + {at_socket} reached user space: {c}"
    );
    // Every frame: shed, answered or dropped at the socket; the generator's end markers
    // (a few frames past `sent`) too.
    let all = shed + answered + at_socket;
    assert!(
        (sent..=sent + 10).contains(&all),
        "sent {sent}, counted {all}: {c}"
    );
    let port = &c["fast_path"]["interfaces"]["r-eth0"];
    assert_eq!(
        port["shed"].as_u64(),
        Some(drop_count(&c, "slow_path_shed")),
        "{c}"
    );
    let rx = |v: &serde_json::Value| v["interfaces"]["r-eth0"]["rx_packets"].as_u64().unwrap();
    assert!(rx(&c) - rx(&before) >= shed + answered, "{c}");
    let p = lab.sh(
        "src1",
        &["ping", "-c", "5", "-i", "0.2", "-W", "2", "10.1.0.1"],
    );
    assert!(p.contains("5 received"), "{p}");
}

/// What [`restart_under_the_xdp_generator`] saw: the generator's and the sink's summaries,
/// frames sent and received (the sink's socket drops included), and how long after the
/// stop began r was stopped and running again.
struct Restarted {
    g: serde_json::Value,
    s: serde_json::Value,
    sent: u64,
    got: u64,
    stopped: Duration,
    restarted: Duration,
}

/// r stopped and started again under the XDP generator's 50 kpps for 5 s from src1 to
/// sink1, whose sink runs with `sink_args` (`--xdp`, or none: the AF_PACKET ring).
fn restart_under_the_xdp_generator(lab: &TestLab, sink_args: &[&str]) -> Restarted {
    // The router's veth takes the XDP generator's frames.
    lab.sh("r", &["ethtool", "-K", "r-eth0", "gro", "on"]);
    std::thread::sleep(Duration::from_millis(300)); // the neighbours reach the fast path
    let rmac = lab.mac("r", "r-eth0");
    let mut argv = vec![common::exe(), "sink", "--iface", "eth0"];
    argv.extend_from_slice(sink_args);
    argv.extend_from_slice(&["--duration", "20", "--json"]);
    let sink = lab.spawn("sink1", &argv);
    std::thread::sleep(Duration::from_millis(700));
    let gen = lab.spawn(
        "src1",
        &xdp_gen(&rmac, "10.1.0.10", "10.3.0.10", "50kpps", "5"),
    );
    std::thread::sleep(Duration::from_millis(1000));
    let t = Instant::now();
    lab.element("stop", "r");
    let stopped = t.elapsed();
    lab.element("start", "r");
    let restarted = t.elapsed();
    let g = gen.wait_with_output().unwrap();
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let g: serde_json::Value = serde_json::from_slice(&g.stdout).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) on the sink we spawned (`ip netns exec` execs it), not yet reaped.
    unsafe { libc::kill(sink.id() as i32, libc::SIGINT) };
    let s = sink.wait_with_output().unwrap();
    let s: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
    let sent = g["sent"].as_u64().unwrap();
    let got = s["received"].as_u64().unwrap() + s["socket_dropped"].as_u64().unwrap_or(0);
    Restarted {
        g,
        s,
        sent,
        got,
        stopped,
        restarted,
    }
}

/// A forwarder restarted under load, with the default config (the fast path, handed over
/// to its next start: `[io] restart_grace_s`), loses none of the frames its fast path
/// forwards: the programs and maps outlive the process, the next start reads what they
/// knew (neighbours), publishes its table and takes the programs over in place, and the
/// stream never notices. On AF_PACKET ports the same holds for the tcx fast path: its
/// link is pinned as the XDP one is.
#[test]
fn a_restart_under_load_loses_nothing_the_fast_path_forwards() {
    let lab = single();
    let p = lab.sh(
        "src1",
        &["ping", "-c", "2", "-i", "0.2", "-W", "2", "10.3.0.10"],
    );
    assert!(p.contains("2 received"), "{p}");
    let Restarted {
        g,
        s,
        sent,
        got,
        stopped,
        restarted,
    } = restart_under_the_xdp_generator(&lab, &["--xdp"]);
    eprintln!(
        "stopped in {stopped:?}, started again after {restarted:?}: sent {sent}, received {got}"
    );
    assert!(sent > 200_000, "{g}");
    assert_eq!(
        got,
        sent,
        "lost {} of {sent} across the restart: {s}\n{}",
        sent.saturating_sub(got),
        lab.logs("r")
    );
    let log = lab.logs("r");
    assert!(
        log.contains("taking over from this forwarder's last start"),
        "{log}"
    );
    // `show counters` says so: its counts start again at this start.
    let c = lab.counters("r");
    assert!(
        c["fast_path"]["taken_over"]["neighbours"].as_u64() >= Some(2),
        "{c}"
    );
    // The new start forwards by its own programs.
    let before = lab.counters("r")["fast_path"]["forwarded"]
        .as_u64()
        .unwrap();
    let p = lab.sh(
        "src1",
        &["ping", "-c", "5", "-i", "0.1", "-W", "2", "10.3.0.10"],
    );
    assert!(p.contains("5 received"), "{p}");
    let after = lab.counters("r")["fast_path"]["forwarded"]
        .as_u64()
        .unwrap();
    assert!(after >= before + 5, "{before} -> {after}");
}

/// Hosts as containers have them (`lab up --hosts container`: a new veth's checksum
/// offload, TSO and GSO on at the hosts): what a host sends over TCP is a socket buffer
/// of many segments, cut into frames only where it leaves a device that cannot take it
/// whole. The fast path in tcx forwards it whole, each segment held to the egress MTU
/// (`bpf_check_mtu` with `BPF_MTU_CHK_SEGS`), over IPv4 and IPv6. Until 2026-12-02 it
/// held the whole buffer to the MTU and left it to user space, whose ring takes no frame
/// that large (`rx_oversize`): TCP crawled at 0.3 Mbit/s.
#[test]
fn container_hosts_send_tcp_in_many_segments_through_the_fast_path() {
    let lab = TestLab::up(
        repo_path("crates/tessera/tests/labs/dual-stack.toml"),
        &["--hosts", "container", "--io", "auto"],
    );
    let tso = lab.sh("h1", &["ethtool", "-k", "eth0"]);
    assert!(tso.contains("tcp-segmentation-offload: on"), "{tso}");
    assert_eq!(lab.port("r", "r-eth0")["backend"], "packet");
    for dst in ["10.2.0.10", "2001:db8:2::10"] {
        let p = lab.sh("h1", &["ping", "-c", "2", "-i", "0.2", "-W", "2", dst]);
        assert!(p.contains("2 received"), "{p}");
    }
    std::thread::sleep(Duration::from_millis(300));
    for (dst, extra) in [("10.2.0.10", None), ("2001:db8:2::10", Some("-6"))] {
        let before = lab.counters("r");
        let mut args = vec!["-t", "1"];
        args.extend(extra);
        let v = lab.iperf3("h1", "h2", dst, &args);
        let got = v["end"]["sum_received"]["bytes"].as_u64().unwrap();
        let after = lab.counters("r");
        let rx = |c: &serde_json::Value, k: &str| {
            c["fast_path"]["interfaces"]["r-eth0"][k].as_u64().unwrap()
        };
        let (frames, bytes) = (
            rx(&after, "rx_forwarded") - rx(&before, "rx_forwarded"),
            rx(&after, "rx_forwarded_bytes") - rx(&before, "rx_forwarded_bytes"),
        );
        eprintln!("{dst}: iperf3 received {got} bytes; the fast path forwarded {frames} buffers, {bytes} bytes");
        assert!(
            bytes >= got,
            "{dst}: {bytes} bytes by the fast path, {got} received\n{after}"
        );
        assert!(
            bytes / frames.max(1) > 1514,
            "{dst}: no buffer of many segments went by the fast path\n{after}"
        );
        assert_eq!(
            drop_count(&after, "rx_oversize"),
            drop_count(&before, "rx_oversize"),
            "{after}"
        );
    }
}
