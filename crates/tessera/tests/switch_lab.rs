//! `tessera switch` in labs/switch.toml: two switches, fair and FIFO, each with two senders
//! into one receiver whose port is a 20 Mbit/s bottleneck. Hosts find each other through
//! the learning switch; a small flow beside a large one gets what it sends through the
//! fair switch and loses much of it through the FIFO one.

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;

const LAB: &str = "labs/switch.toml";

/// The tests of this file measure rates through the switches (losses, TCP throughput):
/// one at a time, so that none takes the CPUs from another's flows.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs two UDP flows of iperf3 for `secs` seconds into `receiver` (10.x.0.9): `big` Mbit/s
/// from `a1` and `small` Mbit/s from `a2`; returns the share of each flow's datagrams lost.
/// iperf3 paces every 50 us (its default, 1 ms, sends the big flow in bursts that leave
/// the FIFO room between them: measured, the small flow then lost 0.3% through FIFO).
fn contend(
    lab: &TestLab,
    net: u8,
    hosts: [&str; 3],
    big: u32,
    small: u32,
    secs: u32,
) -> (f64, f64) {
    let [a1, a2, r] = hosts;
    let dst = format!("10.{net}.0.9");
    let mut servers = [
        lab.spawn(r, &["iperf3", "-s", "-1", "-p", "5201"]),
        lab.spawn(r, &["iperf3", "-s", "-1", "-p", "5202"]),
    ];
    for (port, s) in [5201, 5202].into_iter().zip(servers.iter_mut()) {
        let listening = lab.wait_listening(r, port, Duration::from_secs(10), || {
            s.try_wait().ok().flatten().is_some()
        });
        assert!(listening, "iperf3 -s -p {port} on {r} does not listen");
    }
    let t = secs.to_string();
    let (bb, sb) = (format!("{big}M"), format!("{small}M"));
    let clients = [(a1, "5201", &bb), (a2, "5202", &sb)].map(|(host, port, rate)| {
        lab.spawn(
            host,
            &[
                "iperf3",
                "-c",
                &dst,
                "-p",
                port,
                "-u",
                "-b",
                rate,
                "-l",
                "1400",
                "-t",
                &t,
                "--pacing-timer",
                "50",
                "-J",
            ],
        )
    });
    let mut lost = Vec::new();
    for c in clients {
        let out = c.wait_with_output().unwrap();
        let j: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("iperf3: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        let lost_percent = j["end"]["sum"]["lost_percent"].as_f64();
        lost.push(lost_percent.unwrap_or_else(|| panic!("iperf3 gave no loss: {j}")) / 100.0);
    }
    for s in servers.iter_mut() {
        let _ = s.wait();
    }
    (lost[0], lost[1])
}

#[test]
fn fair_switch_serves_the_small_flow_fifo_does_not() {
    let _one = one_at_a_time();
    let lab = TestLab::up(repo_path(LAB), &[]);
    // Learning: the hosts reach each other (ARP floods, answers go straight back), and
    // each switch learns the three MACs on their ports.
    for (src, dst) in [
        ("fa1", "10.5.0.9"),
        ("fa2", "10.5.0.1"),
        ("qa1", "10.6.0.9"),
        ("qa2", "10.6.0.1"),
    ] {
        let out = lab.sh(src, &["ping", "-c", "2", "-i", "0.2", "-W", "2", dst]);
        assert!(out.contains(" 0% packet loss"), "{src} -> {dst}: {out}");
    }
    for (sw, n) in [("swf", 3), ("swq", 3)] {
        let macs = lab.show_json("macs", sw);
        assert_eq!(macs.as_array().unwrap().len(), n, "{sw}: {macs}");
    }
    // 40 and 5 Mbit/s into 20: the fair switch gives the small flow what it sends (its
    // demand is under half the port); FIFO does not protect it.
    let (big, small) = contend(&lab, 5, ["fa1", "fa2", "fr"], 40, 5, 4);
    eprintln!(
        "fair: 40 Mbit/s flow lost {:.1}%, 5 Mbit/s flow lost {:.1}%",
        big * 100.0,
        small * 100.0
    );
    assert!(
        small < 0.05,
        "fair: the small flow lost {:.1}%",
        small * 100.0
    );
    assert!(
        big > 0.4,
        "fair: the port is 20 Mbit/s, the big flow lost only {:.1}%",
        big * 100.0
    );
    let (qbig, qsmall) = contend(&lab, 6, ["qa1", "qa2", "qr"], 40, 5, 4);
    eprintln!(
        "fifo: 40 Mbit/s flow lost {:.1}%, 5 Mbit/s flow lost {:.1}%",
        qbig * 100.0,
        qsmall * 100.0
    );
    assert!(
        qsmall > 0.25,
        "fifo: the small flow lost only {:.1}%",
        qsmall * 100.0
    );
    // Every drop is counted as the output queue's.
    for sw in ["swf", "swq"] {
        let c = lab.counters(sw);
        assert!(drop_count(&c, "switch_buffer_full") > 0, "{sw}: {c}");
        assert_eq!(drop_count(&c, "switch_bad_source"), 0, "{sw}");
    }
}

/// With its fast path, the FIFO switch forwards known unicast between its two unshaped
/// ports in XDP (`show interfaces`: `fast_path`), leaves the rest to user space (the
/// broadcast ARP, and every frame for the 20 Mbit/s port, which must be queued), and the
/// hosts see no difference: pings both ways and to the shaped port, TCP between the
/// unshaped ones.
#[test]
fn the_switch_fast_path_takes_known_unicast_between_unshaped_ports() {
    let _one = one_at_a_time();
    // AF_XDP: the switch's fast path is an XDP program.
    let lab = TestLab::up(repo_path(LAB), &["--io", "xdp", "--fast-path"]);
    for (src, dst) in [
        ("qa1", "10.6.0.2"),
        ("qa2", "10.6.0.1"),
        ("qa1", "10.6.0.9"),
    ] {
        let out = lab.sh(src, &["ping", "-c", "3", "-i", "0.2", "-W", "2", dst]);
        assert!(out.contains(" 0% packet loss"), "{src} -> {dst}: {out}");
    }
    // The table is copied into the program's map every 100 ms: later frames take it.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = lab.sh(
        "qa1",
        &["ping", "-c", "20", "-i", "0.05", "-W", "2", "10.6.0.2"],
    );
    assert!(out.contains(" 0% packet loss"), "{out}");
    let j = lab.iperf3("qa2", "qa1", "10.6.0.1", &["-t", "1"]);
    assert!(
        j["end"]["sum_received"]["bytes"].as_f64().unwrap() > 1e6,
        "{j}"
    );
    let ifs = lab.show_json("interfaces", "swq");
    let port = |n: &str| fast_path_of(&ifs, n);
    let (p1, p2, pr) = (port("swq-1"), port("swq-2"), port("swq-r"));
    assert_eq!(p1["on"], true, "{ifs}");
    assert_eq!(
        (p1["egress"].clone(), pr["egress"].clone()),
        ("xdp".into(), "user space".into()),
        "{ifs}"
    );
    // The 20 pings' requests at least, and TCP both ways.
    assert!(p1["forwarded_in"].as_u64().unwrap() >= 20, "{ifs}");
    assert!(p2["forwarded_out"].as_u64().unwrap() >= 20, "{ifs}");
    assert!(p2["forwarded_in"].as_u64().unwrap() > 0, "{ifs}");
    // Nothing leaves by the shaped port in the fast path; the ARP went to user space.
    assert_eq!(pr["forwarded_out"], 0, "{ifs}");
    assert!(p1["to_user_space"].as_u64().unwrap() > 0, "{ifs}");
    // `show counters` has the programs' frames too, per port and in all.
    let c = lab.counters("swq");
    assert_eq!(drop_count(&c, "switch_bad_source"), 0, "{c}");
    let fp = &c["fast_path"];
    assert!(fp["forwarded"].as_u64().unwrap() >= 40, "{c}");
    // Read after `show interfaces`: as many, or more if a frame passed in between.
    let later = fp["interfaces"]["swq-1"]["rx_forwarded"].as_u64().unwrap();
    assert!(later >= p1["forwarded_in"].as_u64().unwrap(), "{c}");
    // qa1's link as a container's (GRO off, no XDP: its veth takes no XDP frames): the
    // switch sends it its frames through the hand-off to tcx, and pings still cross.
    lab.sh("qa1", &["ethtool", "-K", "eth0", "gro", "off"]);
    let t = std::time::Instant::now();
    while lab.port_fast("swq", "swq-1")["egress"] != "tcx" && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let handed = || {
        lab.port_fast("swq", "swq-1")["handed_to_tcx"]
            .as_u64()
            .unwrap()
    };
    let before = handed();
    let out = lab.sh(
        "qa2",
        &["ping", "-c", "20", "-i", "0.05", "-W", "2", "10.6.0.1"],
    );
    assert!(out.contains(" 0% packet loss"), "{out}");
    let p1 = lab.port_fast("swq", "swq-1");
    assert_eq!(p1["egress"], "tcx", "{p1}");
    assert!(handed() - before >= 20, "{p1}");
    // TCP to the plain host; then the switch restarted under a stream to it: its fast
    // path is handed over to the next start (the links pinned, the learned addresses
    // taken over before the new programs replace the old ones), and nothing is lost.
    let j = lab.iperf3("qa2", "qa1", "10.6.0.1", &["-t", "1"]);
    assert!(
        j["end"]["sum_received"]["bytes"].as_f64().unwrap() > 1e6,
        "{j}"
    );
    let mac = lab.mac("qa1", "eth0");
    let (sent, got) = stream_across(&lab, ("qa2", "10.6.0.2"), ("qa1", "10.6.0.1", &mac), || {
        lab.element("stop", "swq");
        lab.element("start", "swq");
    });
    let log = lab.logs("swq");
    assert!(sent > 50_000, "sent {sent}");
    assert_eq!(
        got,
        sent,
        "lost {} of {sent} across the restart\n{log}",
        sent.saturating_sub(got)
    );
    assert!(
        log.contains("taking over from this switch's last start"),
        "{log}"
    );
    // The stream left by the plain host's port through the hand-off, after the restart.
    assert!(handed() > 10_000, "{}", lab.port_fast("swq", "swq-1"));
}

/// `tessera reload` (and SIGHUP) on a switch: a port's capacity changes in place (TCP
/// through the 20 Mbit/s port gets well over 20 once it is 200), a port no longer shaped
/// joins the fast path, and shaped again leaves it; a broken file and a change of mode
/// are refused with the key, and change nothing.
#[test]
fn a_switch_reloads_its_ports_shaping_in_place() {
    let _one = one_at_a_time();
    let dir = std::env::temp_dir().join(format!("tessera-swreload-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("switch")).unwrap();
    for f in ["switch.toml", "switch/fair.toml", "switch/fifo.toml"] {
        std::fs::copy(repo_path(&format!("labs/{f}")), dir.join(f)).unwrap();
    }
    let lab = TestLab::up(dir.join("switch.toml"), &["--io", "xdp", "--fast-path"]);
    let file = dir.join("switch/fifo.toml");
    let original = std::fs::read_to_string(&file).unwrap();
    let ctl = lab.control("swq");
    let reload = || lab.tessera(&["reload", "--control", ctl.to_str().unwrap()]);
    let mbps = || {
        let j = lab.iperf3("qa1", "qr", "10.6.0.9", &["-t", "1"]);
        j["end"]["sum_received"]["bits_per_second"]
            .as_f64()
            .unwrap()
            / 1e6
    };
    let egress_r = || {
        lab.show_json("interfaces", "swq")
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "swq-r")
            .unwrap()["fast_path"]["egress"]
            .clone()
    };
    let shaped = mbps();
    assert!(shaped < 21.0, "{shaped} Mbit/s through a 20 Mbit/s port");
    assert_eq!(egress_r(), "user space");
    std::fs::write(
        &file,
        original.replace("capacity_bps = 20_000_000", "capacity_bps = 200_000_000"),
    )
    .unwrap();
    let o = reload();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let shown = lab.tessera(&["show", "config", "--control", ctl.to_str().unwrap()]);
    let shown = String::from_utf8_lossy(&shown.stdout).to_string();
    assert!(shown.contains("capacity_bps = 200000000"), "{shown}");
    let faster = mbps();
    assert!(
        faster > 40.0,
        "{faster} Mbit/s after the reload to 200 Mbit/s (before: {shaped})"
    );
    // No capacity: the port joins the fast path.
    std::fs::write(&file, original.replace("capacity_bps = 20_000_000\n", "")).unwrap();
    let o = reload();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(egress_r(), "xdp", "{}", lab.show_json("interfaces", "swq"));
    // A broken file, a change of mode: refused, named, nothing changed.
    std::fs::write(
        &file,
        original.replace("capacity_bps = 20_000_000", "capacity_bps = \"x\""),
    )
    .unwrap();
    let o = reload();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("fifo.toml:") && err.contains("capacity_bps"),
        "{err}"
    );
    std::fs::write(
        &file,
        original.replace("mode = \"fifo\"", "mode = \"fair\""),
    )
    .unwrap();
    let o = reload();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("switch.mode"), "{err}");
    assert_eq!(egress_r(), "xdp");
    // SIGHUP: back to the original, shaped port.
    std::fs::write(&file, &original).unwrap();
    let pid = lab.node("swq")["pid"].as_i64().unwrap() as i32;
    // SAFETY: the lab started this process for this test.
    unsafe { libc::kill(pid, libc::SIGHUP) };
    let t = std::time::Instant::now();
    while egress_r() != "user space" && t.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(egress_r(), "user space", "{}", lab.logs("swq"));
    assert_eq!(
        lab.log_lines("swq", &["config reloaded"]).len(),
        3,
        "{}",
        lab.log("swq")
    );
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Hosts as containers have them (`lab up --hosts container`: a new veth's checksum
/// offload, TSO and GSO on) through the switch on AF_PACKET ports, in user space: they
/// send socket buffers of many segments, which the port's ring cannot take
/// (`rx_oversize`); at the first, an XDP program that passes every frame on goes into
/// the port's driver hook (`io::afpacket::AfPacket::whole_frames`), so that the kernel
/// takes the host's software segmentation away and it sends frames no larger than the
/// MTU. Without it TCP ran at 0.24 Mbit/s (2026-12-02).
#[test]
fn container_hosts_send_tcp_through_a_switch_on_af_packet_ports() {
    let lab = TestLab::up(repo_path(LAB), &["--hosts", "container", "--io", "packet"]);
    let tso = lab.sh("fa1", &["ethtool", "-k", "eth0"]);
    assert!(tso.contains("tx-checksumming: on"), "{tso}");
    let p = lab.sh(
        "fa1",
        &["ping", "-c", "2", "-i", "0.2", "-W", "2", "10.5.0.2"],
    );
    assert!(p.contains("2 received"), "{p}");
    let v = lab.iperf3("fa1", "fa2", "10.5.0.2", &["-t", "1"]);
    let got = v["end"]["sum_received"]["bytes"].as_u64().unwrap();
    assert!(got > 20_000_000, "{got} bytes in a second");
    // The first such buffers are dropped, and then the program goes on the port.
    let c = lab.counters("swf");
    let over = drop_count(&c, "rx_oversize");
    assert!((1..=200).contains(&over), "{over} oversize: {c}");
    let links = lab.sh("swf", &["ip", "-d", "link", "show"]);
    assert!(links.contains("prog/xdp"), "{links}");
}
