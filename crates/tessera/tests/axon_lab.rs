//! `tessera axon` in labs/axon-ring.toml: three Axons in a ring (which no learning switch
//! could run without a spanning tree), two hosts on each. The hosts get their addresses
//! from their Axons by DHCP (Debian's dhclient), the Axons find each other, hosts resolve
//! each other by ARP through them (Axon-ARP), ping and TCP work across the ring,
//! a host reaches only what it resolved, and cutting a ring link moves the routes that
//! used it onto the way round.

mod common;

use common::*;
use std::time::{Duration, Instant};

const LAB: &str = "labs/axon-ring.toml";

fn paths(lab: &TestLab, axon: &str) -> Vec<(u64, usize)> {
    lab.show_json("routes", axon)["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["axon"].as_u64().unwrap(),
                p["ports"].as_array().unwrap().len(),
            )
        })
        .collect()
}

/// A host's IPv4 address on eth0, as dhclient configured it.
fn addr(lab: &TestLab, host: &str) -> String {
    let out = lab.sh(host, &["ip", "-4", "-o", "addr", "show", "eth0"]);
    out.split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .and_then(|a| a.split('/').next())
        .unwrap_or_else(|| panic!("{host} has no address: {out}"))
        .to_string()
}

#[test]
fn hosts_talk_across_a_ring_of_axons_and_routes_move_off_a_cut_link() {
    let lab = TestLab::up(repo_path(LAB), &[]);
    // The bootstrap: every Axon sees two neighbours and a one-hop path to each other.
    let t0 = Instant::now();
    loop {
        let ok = ["ax1", "ax2", "ax3"]
            .iter()
            .all(|a| paths(&lab, a).iter().filter(|p| p.1 == 1).count() == 2);
        if ok {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "topology: {:?}",
            paths(&lab, "ax1")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let interfaces = lab.show_json("interfaces", "ax1");
    let kinds: Vec<&str> = interfaces
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["host", "host", "axon", "axon"], "{interfaces}");
    // Every host has a lease from its own Axon's pool.
    for (host, axon, lo, hi) in [
        ("h1", "ax1", 101, 110),
        ("h2", "ax1", 101, 110),
        ("h3", "ax2", 111, 120),
        ("h4", "ax2", 111, 120),
        ("h5", "ax3", 121, 130),
        ("h6", "ax3", 121, 130),
    ] {
        let a = addr(&lab, host);
        let last: u32 = a.rsplit('.').next().unwrap().parse().unwrap();
        assert!(
            a.starts_with("10.7.0.") && (lo..=hi).contains(&last),
            "{host}: {a}"
        );
        let leases = lab.show_json("leases", axon);
        assert!(
            leases
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l["ip"] == a.as_str() && l["bound"] == true),
            "{axon}: {leases}"
        );
    }
    let ip = |h: &str| addr(&lab, h);
    // Hosts on every Axon reach each other; an Axon is a switch: the TTL is untouched.
    for (src, dst) in [
        ("h1", "h2"),
        ("h1", "h3"),
        ("h1", "h5"),
        ("h4", "h6"),
        ("h6", "h2"),
    ] {
        let dst = ip(dst);
        let out = lab.sh(src, &["ping", "-c", "2", "-i", "0.2", "-W", "2", &dst]);
        assert!(out.contains(" 0% packet loss"), "{src} -> {dst}: {out}");
        assert!(out.contains("ttl=64"), "{src} -> {dst}: {out}");
    }
    let hosts = lab.show_json("hosts", "ax1");
    assert_eq!(hosts.as_array().unwrap().len(), 2, "{hosts}");
    // TCP across the ring, over 100 Mbit/s links.
    // (The helper waits until the server listens: a fixed 400 ms was once too short on
    // a loaded machine, and the client's refusal left the server waiting for ever.)
    let j = lab.iperf3("h2", "h5", &ip("h5"), &["-t", "2"]);
    let mbps = j["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap()
        / 1e6;
    assert!(
        (10.0..=101.0).contains(&mbps),
        "TCP h2 -> h5: {mbps} Mbit/s"
    );
    // A host reaches only what it resolved: h1 never asked for h4.
    let h4 = lab.mac("h4", "eth0");
    let h1 = lab.mac("h1", "eth0");
    let frame = format!(
        "{} {} 0800 {}",
        h4.replace(':', ""),
        h1.replace(':', ""),
        "00".repeat(46)
    );
    let before = drop_count(&lab.counters("ax1"), "axon_no_route");
    let out = lab.exec("h1", &[exe(), "inject", "--iface", "eth0", "--hex", &frame]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        drop_count(&lab.counters("ax1"), "axon_no_route"),
        before + 1
    );
    // Probes: ax1 times its round trips to ax2 and ax3, hop by hop, and the Ethernet
    // segments to its two hosts (ether-probes, answered by the hosts' kernels).
    let t0 = Instant::now();
    loop {
        let p = lab.show_json("probes", "ax1");
        let axons = p["axons"].as_array().map_or(0, |a| {
            a.iter()
                .filter(|x| x["round_trip_us"].as_f64().is_some_and(|r| r > 0.0))
                .count()
        });
        let segments = p["segments"].as_array().map_or(0, |a| {
            a.iter()
                .filter(|x| x["round_trip_us"].as_f64().is_some_and(|r| r > 0.0))
                .count()
        });
        if axons == 2 && segments == 2 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "probes: {p}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Cut the ring link ax1-ax3: ax1's path to ax3 goes round by ax2, h1's route to h5
    // with it, and h1 still reaches h5.
    let cut = Instant::now();
    lab.exec("ax1", &["ip", "link", "set", "ax1-a3", "down"]);
    loop {
        if paths(&lab, "ax1").contains(&(3, 2)) {
            break;
        }
        assert!(
            cut.elapsed() < Duration::from_secs(5),
            "{:?}",
            paths(&lab, "ax1")
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("ax1's path to ax3 moved {:?} after the cut", cut.elapsed());
    let routes = lab.show_json("routes", "ax1");
    let to_h5 = routes["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["dst_ip"] == ip("h5").as_str())
        .unwrap_or_else(|| panic!("{routes}"));
    assert_eq!(to_h5["path"].as_array().unwrap().len(), 3, "{to_h5}");
    let out = lab.sh(
        "h1",
        &["ping", "-c", "5", "-i", "0.1", "-W", "2", &ip("h5")],
    );
    assert!(out.contains(" 0% packet loss"), "after the cut: {out}");
    let c = lab.counters("ax1");
    assert!(event_count(&c, "axon_neighbour_down") >= 1, "{c}");
    assert_eq!(drop_count(&c, "axon_malformed"), 0, "{c}");
}

/// The ring with IPv6 beside IPv4: each host also gets 2001:db8:7::N/64. Hosts find each
/// other by neighbour discovery, which the Axons carry as they carry ARP (Axon-ARP with
/// IPv6 addresses): ping6 works across the ring with no hop-limit decrement (the Axons
/// are a switch), the Axons know the hosts by their IPv6 addresses, and TCP over IPv6
/// runs.
#[test]
fn hosts_find_each_other_by_neighbour_discovery_across_the_ring() {
    let dir = std::env::temp_dir().join(format!("tessera-axon6-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("axon/ring")).unwrap();
    for n in 1..=3 {
        let f = format!("axon/ring/ax{n}.toml");
        std::fs::copy(repo_path(&format!("labs/{f}")), dir.join(&f)).unwrap();
    }
    let mut topo = std::fs::read_to_string(repo_path(LAB)).unwrap();
    for n in 1..=6 {
        let (from, to) = (
            format!("name = \"h{n}\"\ninterfaces = [{{ name = \"eth0\", dhcp = true }}]"),
            format!(
                "name = \"h{n}\"\ninterfaces = [{{ name = \"eth0\", dhcp = true, address6 = \"2001:db8:7::{n}/64\" }}]"
            ),
        );
        assert!(topo.contains(&from), "h{n}");
        topo = topo.replace(&from, &to);
    }
    std::fs::write(dir.join("lab.toml"), topo).unwrap();
    let lab = TestLab::up(dir.join("lab.toml"), &[]);
    for (src, dst) in [("h1", 2), ("h1", 3), ("h1", 5), ("h4", 6), ("h6", 2)] {
        let dst = format!("2001:db8:7::{dst}");
        let out = lab.sh(
            src,
            &["ping", "-6", "-c", "2", "-i", "0.2", "-W", "2", &dst],
        );
        assert!(out.contains(" 0% packet loss"), "{src} -> {dst}: {out}");
        assert!(out.contains("ttl=64"), "{src} -> {dst}: {out}");
    }
    let hosts = lab.show_json("hosts", "ax1").to_string();
    assert!(
        hosts.contains("2001:db8:7::1") && hosts.contains("2001:db8:7::2"),
        "{hosts}"
    );
    let routes = lab.show_json("routes", "ax1").to_string();
    assert!(routes.contains("2001:db8:7::5"), "{routes}");
    let j = lab.iperf3("h2", "h5", "2001:db8:7::5", &["-6", "-t", "1"]);
    let out = j.to_string();
    let mbps = j["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0)
        / 1e6;
    assert!(
        (5.0..=101.0).contains(&mbps),
        "TCP over IPv6 h2 -> h5: {mbps} Mbit/s: {out}"
    );
    // `tessera reload`: ax1's links at 200 Mbit/s, in place; a changed hello interval is
    // refused by name and changes nothing; the hosts still reach each other.
    let file = dir.join("axon/ring/ax1.toml");
    let original = std::fs::read_to_string(&file).unwrap();
    let ctl = lab.control("ax1");
    let reload = || lab.tessera(&["reload", "--control", ctl.to_str().unwrap()]);
    std::fs::write(&file, original.replace("100_000_000", "200_000_000")).unwrap();
    let o = reload();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // `tessera show config`: the reloaded capacity, every default, and a file that
    // `tessera check` takes.
    let shown = lab.shown_config("ax1", "axon");
    for line in [
        "capacity_bps = 200000000",
        "dead_intervals = 3",
        "hello_ms = 20",
    ] {
        assert!(shown.contains(line), "{line}: {shown}");
    }
    std::fs::write(&file, original.replace("hello_ms = 20", "hello_ms = 30")).unwrap();
    let o = reload();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("axon.hello_ms"),
        "{err}"
    );
    let out = lab.sh(
        "h1",
        &[
            "ping",
            "-6",
            "-c",
            "2",
            "-i",
            "0.2",
            "-W",
            "2",
            "2001:db8:7::5",
        ],
    );
    assert!(out.contains(" 0% packet loss"), "{out}");
    assert_eq!(
        lab.log_lines("ax1", &["config reloaded"]).len(),
        1,
        "{}",
        lab.log("ax1")
    );
    drop(lab);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Three Axons in a line with unshaped links (tests/labs/axon-transit.toml): every frame
/// between h1 and h3 passes through ax2. On AF_XDP its ports' programs send those frames
/// on to the next Axon themselves (the fast path, on by default): ping and TCP work, the
/// programs' counts in `show interfaces` and `show counters` hold the frames, the host
/// port sends none in the fast path, and a capture on ax2 sees frames that would take it
/// (the fast path suspended while it runs, then back). On AF_PACKET the Axon runs without
/// (its programs are XDP's) and says why, and the hosts see no difference.
#[test]
fn frames_passing_through_an_axon_take_its_fast_path() {
    let lab = TestLab::up(test_path("labs/axon-transit.toml"), &[]);
    let kinds = || -> Vec<String> {
        lab.show_json("interfaces", "ax2")
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["kind"].as_str().unwrap().to_string())
            .collect()
    };
    let t0 = Instant::now();
    while kinds() != ["host", "axon", "axon"] {
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", kinds());
        std::thread::sleep(Duration::from_millis(100));
    }
    let ping = |n: &str, size: &str| {
        let out = lab.sh(
            "h1",
            &[
                "ping", "-c", n, "-i", "0.05", "-s", size, "-W", "2", "10.7.0.3",
            ],
        );
        assert!(out.contains(" 0% packet loss"), "h1 -> h3: {out}");
        assert!(out.contains("ttl=64"), "h1 -> h3: {out}");
    };
    ping("3", "56");
    let port = |name: &str| lab.port_fast("ax2", name);
    if io_backend() == "packet" {
        for p in ["ax2-h2", "ax2-a1", "ax2-a3"] {
            let f = port(p);
            assert_eq!(f["on"], false, "{f}");
            assert!(f["why"].as_str().unwrap().contains("packet"), "{f}");
        }
        let j = lab.iperf3("h1", "h3", "10.7.0.3", &["-t", "1"]);
        assert!(
            j["end"]["sum_received"]["bytes"].as_f64().unwrap() > 1e6,
            "{j}"
        );
        return;
    }
    ping("20", "56");
    let j = lab.iperf3("h1", "h3", "10.7.0.3", &["-t", "1"]);
    assert!(
        j["end"]["sum_received"]["bytes"].as_f64().unwrap() > 1e6,
        "{j}"
    );
    let (a1, a3, h2) = (port("ax2-a1"), port("ax2-a3"), port("ax2-h2"));
    assert_eq!(
        (a1["on"].clone(), a1["egress"].clone()),
        (true.into(), "xdp".into()),
        "{a1}"
    );
    assert_eq!(a3["egress"], "xdp", "{a3}");
    // The 20 pings' requests one way and their replies the other, at least; TCP both.
    assert!(a1["forwarded_in"].as_u64().unwrap() >= 20, "{a1}");
    assert!(a3["forwarded_out"].as_u64().unwrap() >= 20, "{a3}");
    assert!(a3["forwarded_in"].as_u64().unwrap() >= 20, "{a3}");
    assert!(a1["forwarded_out"].as_u64().unwrap() >= 20, "{a1}");
    // Hellos and the links' floods are user space's.
    assert!(a1["to_user_space"].as_u64().unwrap() > 0, "{a1}");
    // The host port: its program runs, but nothing leaves by it in the fast path (the
    // Axon header comes off in user space).
    assert_eq!(
        (h2["on"].clone(), h2["egress"].clone()),
        (true.into(), "user space".into()),
        "{h2}"
    );
    assert!(
        h2["egress_why"].as_str().unwrap().contains("host port"),
        "{h2}"
    );
    assert_eq!(h2["forwarded_out"], 0, "{h2}");
    let c = lab.counters("ax2");
    assert!(c["fast_path"]["forwarded"].as_u64().unwrap() >= 80, "{c}");
    // A capture of large frames on ax2's link to ax3: the pings' frames (which the fast
    // path would take) reach it, in both directions.
    let dir = std::env::temp_dir().join(format!("tessera-axcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ax2.pcap");
    let ctl = lab.control("ax2");
    let cap = std::process::Command::new(exe())
        .args(["capture", "--control", ctl.to_str().unwrap()])
        .args([
            "--port",
            "ax2-a3",
            "--filter",
            "greater 1000",
            "--count",
            "4",
            "-w",
        ])
        .arg(&file)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    ping("4", "1200");
    let o = cap.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("4 frames (2 received, 2 sent)"), "{err}");
    // The capture over, frames take the fast path again.
    let before = port("ax2-a1")["forwarded_in"].as_u64().unwrap();
    let t0 = Instant::now();
    while port("ax2-a1")["egress_why"].is_string() && t0.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(50));
    }
    ping("10", "56");
    let after = port("ax2-a1")["forwarded_in"].as_u64().unwrap();
    assert!(after >= before + 10, "{before} -> {after}");
    // ax2 restarted under a stream from h1 to h3: its fast path is handed over to its
    // next start (the links pinned, the neighbours its programs sent to taken over), and
    // its last hellos ask ax1 and ax3 to hold it meanwhile: nothing is lost.
    let mac = lab.mac("h3", "eth0");
    let (sent, got) = stream_across(&lab, ("h1", "10.7.0.1"), ("h3", "10.7.0.3", &mac), || {
        lab.element("stop", "ax2");
        lab.element("start", "ax2");
    });
    let log = lab.logs("ax2");
    assert!(sent > 50_000, "sent {sent}");
    assert_eq!(
        got,
        sent,
        "lost {} of {sent} across ax2's restart\n{log}",
        sent.saturating_sub(got)
    );
    assert!(
        log.contains("taking over from this Axon's last start"),
        "{log}"
    );
    drop(lab);
    let _ = std::fs::remove_dir_all(&dir);
}
