//! `tessera gen` and `tessera sink` between real interfaces in namespaces.

mod common;

use common::*;
use serde_json::Value;

fn run_pair(lab: &TestLab, gen_args: &[&str], sink_secs: &str) -> (Value, Value) {
    run_pair_with(lab, gen_args, sink_secs, &[], || {})
}

/// As [`run_pair`], with `sink_args` added to the sink's and `meanwhile` run after the
/// sink started, before the generator.
fn run_pair_with(
    lab: &TestLab,
    gen_args: &[&str],
    sink_secs: &str,
    sink_args: &[&str],
    meanwhile: impl FnOnce(),
) -> (Value, Value) {
    let bmac = lab.mac("b", "eth0");
    let ns_b = format!("ts-{}-b", lab.name);
    let sink = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns_b,
            exe(),
            "sink",
            "--iface",
            "eth0",
            "--duration",
            sink_secs,
            "--interval",
            "100",
            "--json",
        ])
        .args(sink_args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    meanwhile();
    let mut args = vec![
        exe(),
        "gen",
        "--iface",
        "eth0",
        "--dst-mac",
        &bmac,
        "--src",
        "10.9.0.1",
        "--dst",
        "10.9.0.2",
        "--json",
    ];
    args.extend_from_slice(gen_args);
    let g = lab.sh("a", &args);
    let s = sink.wait_with_output().unwrap();
    assert!(
        s.status.success(),
        "sink: {}",
        String::from_utf8_lossy(&s.stderr)
    );
    (
        serde_json::from_str(&g).unwrap(),
        serde_json::from_slice(&s.stdout).unwrap(),
    )
}

#[test]
fn counts_rates_and_intervals_are_exact() {
    let lab = TestLab::up(test_path("labs/pair.toml"), &[]);
    let (g, s) = run_pair(
        &lab,
        &[
            "--flows", "3", "--size", "64", "--rate", "20kpps", "--count", "30000",
        ],
        "3",
    );
    let sent = g["sent"].as_u64().unwrap();
    assert_eq!(sent, 30_000);
    // Every packet is accounted for: received plus reported loss is what was sent.
    assert_eq!(
        s["received"].as_u64().unwrap() + s["lost"].as_u64().unwrap(),
        sent,
        "{s}"
    );
    assert_eq!(
        (s["duplicates"].as_u64(), s["reordered"].as_u64()),
        (Some(0), Some(0)),
        "{s}"
    );
    let flows = s["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 3);
    for f in flows {
        assert_eq!(
            f["expected"], 10_000,
            "end markers carry each flow's count: {f}"
        );
        assert!(f["latency_ns"]["mean"].as_f64().unwrap() > 0.0);
    }
    // Achieved rate against the target, from the generator's own clock.
    let pps = g["achieved_pps"].as_f64().unwrap();
    assert!(
        (pps - 20_000.0).abs() / 20_000.0 < 0.02,
        "achieved {pps} pps"
    );
    // The sink's interval rates (100 ms) agree with it; 1.5 s of traffic gives 14 full intervals.
    let r = &s["rate_pps"];
    assert!(r["n"].as_u64().unwrap() >= 13, "{r}");
    assert!(
        (r["mean"].as_f64().unwrap() - 20_000.0).abs() / 20_000.0 < 0.05,
        "{r}"
    );
}

#[test]
fn traffic_to_another_port_is_not_counted() {
    // The generator sends to UDP port 4321; the sink counts port 1234 only: nothing is
    // received as test traffic (end markers included), every frame is counted as other.
    let lab = TestLab::up(test_path("labs/pair.toml"), &[]);
    let (g, s) = run_pair(
        &lab,
        &[
            "--size", "128", "--rate", "5kpps", "--count", "2000", "--port", "4321",
        ],
        "2",
    );
    assert_eq!(g["sent"], 2000);
    assert_eq!(s["received"], 0);
    assert!(s["other_frames"].as_u64().unwrap() >= 2000, "{s}");
}

#[test]
fn xdp_generator_counts_rate_and_sequence() {
    let lab = TestLab::up(test_path("labs/pair.toml"), &[]);
    let bmac = lab.mac("b", "eth0");
    // Without NAPI on the peer, a veth drops XDP frames: the generator says so. (The lab
    // turns GRO on at the hosts, for the elements' fast paths: off here.)
    lab.sh("b", &["ethtool", "-K", "eth0", "gro", "off"]);
    let o = lab.exec(
        "a",
        &xdp_gen_to_b(&bmac, &["--rate", "10kpps", "--count", "1000", "--json"]),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("gro on"), "{err}");
    lab.sh("b", &["ethtool", "-K", "eth0", "gro", "on"]);
    let (g, s) = run_pair(
        &lab,
        &[
            "--xdp",
            "--flows",
            "3",
            "--rate",
            "40kpps",
            "--duration",
            "1.5",
        ],
        // The sink runs for a fixed time from its start; the generator's own start (the
        // XDP program's load and test runs) can take a second or more while the other
        // tests of this file load both cores, and a sink that stops first misses the
        // last frames and the end markers (seen once in CI with a 3-second sink).
        "5",
    );
    let sent = g["sent"].as_u64().unwrap();
    let skipped = g["skipped"].as_u64().unwrap();
    // Paced in the kernel from the start: 1.5 s at 40 kpps is 60,000 frames (one more if
    // the last falls on the deadline), sent or skipped for being too late (the core was
    // busy elsewhere for more than 192 intervals), which must be rare: at most 2%. (A
    // fresh-clone CI run on a busy host once skipped 638, 1.06%, while the other tests of
    // this file ran beside it; the bound was 1% then.)
    assert!((60_000..=60_001).contains(&(sent + skipped)), "{g}");
    assert!(skipped < 1_200, "{g}");
    // The interface counted them (and perhaps a frame of the host's own, like ARP).
    let tx = g["tx_packets"].as_u64().unwrap();
    assert!((sent..sent + 10).contains(&tx), "{g}");
    assert_eq!(
        s["received"].as_u64().unwrap() + s["lost"].as_u64().unwrap(),
        sent,
        "{s}"
    );
    assert_eq!(
        (s["duplicates"].as_u64(), s["reordered"].as_u64()),
        (Some(0), Some(0)),
        "{s}"
    );
    let per_flow: Vec<u64> = g["per_flow_sent"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(per_flow.iter().sum::<u64>(), sent);
    let flows = s["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 3);
    for (f, n) in flows.iter().zip(&per_flow) {
        assert_eq!(
            f["expected"], *n,
            "end markers carry each flow's count: {f}"
        );
        let lat = f["latency_ns"]["mean"].as_f64().unwrap();
        assert!(lat > 0.0 && lat < 1e9, "send times are CLOCK_REALTIME: {f}");
    }
    // The schedule kept the rate: every frame that fell due, sent or skipped, over the
    // run's time, within 1% of what was asked. What was sent (`achieved_pps`) is that less
    // the skipped frames: up to 2% less, as above (a fresh-clone CI run: 39,559 pps sent,
    // 1.1% under, with fewer than 2% skipped; the bound was 1% on it then).
    let secs = g["duration_s"].as_f64().unwrap();
    let scheduled = (sent + skipped - 1) as f64 / secs;
    assert!(
        (scheduled - 40_000.0).abs() / 40_000.0 < 0.01,
        "scheduled {scheduled} pps: {g}"
    );
    let pps = g["achieved_pps"].as_f64().unwrap();
    assert!(
        (0.98 * 40_000.0..=1.01 * 40_000.0).contains(&pps),
        "achieved {pps} pps: {g}"
    );

    // Many destinations: every frame goes to an address of the prefixes, with a valid
    // header checksum (tcpdump -v flags a bad one), and they are spread over the prefixes.
    let text = xdp_to_prefixes(
        &lab,
        &bmac,
        "10.9.0.1",
        "10.9.0.0/24\n192.0.2.0/25\n198.51.100.7/32\n",
        &["-v", "udp dst port 1234"],
        3000,
    );
    // tcpdump -v prints two lines a packet: the IP header, then "src > dst: UDP ...".
    let dsts: Vec<std::net::Ipv4Addr> = text
        .lines()
        .filter_map(|l| l.trim().split_once(" > ")?.1.split_once(": UDP"))
        .map(|(d, _)| d.rsplit_once('.').unwrap().0.parse().unwrap())
        .collect();
    assert!(dsts.len() >= 3000, "{} captured:\n{text}", dsts.len());
    assert!(!text.contains("bad cksum"), "{text}");
    let within = |a: &std::net::Ipv4Addr, p: [u8; 4], len: u32| {
        u32::from(*a) >> (32 - len) == u32::from_be_bytes(p) >> (32 - len)
    };
    let mut per = [0usize; 3];
    for a in &dsts[..3000] {
        let k = [
            ([10, 9, 0, 0], 24),
            ([192, 0, 2, 0], 25),
            ([198, 51, 100, 7], 32),
        ]
        .iter()
        .position(|(p, l)| within(a, *p, *l))
        .unwrap_or_else(|| panic!("{a} is in none of the prefixes"));
        per[k] += 1;
    }
    // A prefix drawn at random per frame: about 1,000 each.
    assert!(per.iter().all(|&n| (800..1200).contains(&n)), "{per:?}");
    let mut distinct = dsts[..3000].to_vec();
    distinct.sort();
    distinct.dedup();
    assert!(
        distinct.len() > 300,
        "{} distinct destinations",
        distinct.len()
    );

    // The same over IPv6: the program writes each frame's destination (its upper half).
    let text = xdp_to_prefixes(
        &lab,
        &bmac,
        "2001:db8:9::1",
        "2001:db8:100::/40\n2001:db8:7:8::/64\n",
        &["ip6 and udp dst port 1234"],
        2000,
    );
    // "IP6 SRC.PORT > DST.PORT: UDP, length N"
    let dsts: Vec<std::net::Ipv6Addr> = text
        .lines()
        .filter_map(|l| l.split_once(" > ")?.1.split_once(": UDP"))
        .map(|(d, _)| d.rsplit_once('.').unwrap().0.parse().unwrap())
        .collect();
    assert!(dsts.len() >= 2000, "{} captured:\n{text}", dsts.len());
    let prefixes: Vec<fib::Prefix6> = ["2001:db8:100::/40", "2001:db8:7:8::/64"]
        .iter()
        .map(|p| p.parse().unwrap())
        .collect();
    let mut per = [0usize; 2];
    for a in &dsts[..2000] {
        let k = prefixes
            .iter()
            .position(|p| p.contains(*a))
            .unwrap_or_else(|| panic!("{a} is in none of the prefixes"));
        per[k] += 1;
    }
    assert!(per.iter().all(|&n| (800..1200).contains(&n)), "{per:?}");
}

/// A generator held off its core for far longer than the slack (stopped by a signal,
/// here) skips the frames it missed and counts them, and its schedule keeps its phase:
/// sent and skipped together are exactly the frames due by the deadline. (A schedule
/// that restarted from the late frame's time lost up to an interval at each skip; a CI
/// run numbered 58,961 sent and 1,037 skipped of 60,000 so.)
#[test]
fn a_stalled_xdp_generator_counts_every_frame_it_skipped() {
    let lab = TestLab::up(test_path("labs/pair.toml"), &[]);
    let bmac = lab.mac("b", "eth0");
    let tx = || -> u64 {
        lab.sh("a", &["cat", "/sys/class/net/eth0/statistics/tx_packets"])
            .trim()
            .parse()
            .unwrap()
    };
    let tx0 = tx();
    let child = lab.spawn(
        "a",
        &xdp_gen_to_b(&bmac, &["--rate", "40kpps", "--duration", "1.5", "--json"]),
    );
    // `ip netns exec` execs the command: the child's PID is the generator's.
    let pid = child.id() as libc::pid_t;
    let started = std::time::Instant::now();
    while tx() < tx0 + 2_000 {
        assert!(started.elapsed().as_secs() < 20, "the generator never sent");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // Eight stops of 20 ms (800 frames each at 40 kpps, over four times the slack).
    for _ in 0..8 {
        // SAFETY: kill(2) on the PID of a child this test started and has not reaped.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        std::thread::sleep(std::time::Duration::from_millis(20));
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };
        std::thread::sleep(std::time::Duration::from_millis(30));
    }
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let g: Value = serde_json::from_slice(&o.stdout).unwrap();
    let (sent, skipped) = (g["sent"].as_u64().unwrap(), g["skipped"].as_u64().unwrap());
    assert!((60_000..=60_001).contains(&(sent + skipped)), "{g}");
    assert!(
        skipped >= 8 * (800 - 192) / 2,
        "the stops skipped frames: {g}"
    );
}

/// `tessera gen --xdp` from a's eth0 to b (`bmac`, 10.9.0.2), with `rest` added.
fn xdp_gen_to_b<'a>(bmac: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut v = xdp_gen_from_a(bmac, &["--src", "10.9.0.1", "--dst", "10.9.0.2"]);
    v.extend_from_slice(rest);
    v
}

/// `tessera gen --xdp` from a's eth0 to the MAC `bmac`, with `rest` added.
fn xdp_gen_from_a<'a>(bmac: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![exe(), "gen", "--xdp", "--iface", "eth0", "--dst-mac", bmac];
    v.extend_from_slice(rest);
    v
}

/// Pings b from a twice with a's neighbour table flushed first: ping's output.
fn ping_afresh(lab: &TestLab) -> String {
    lab.sh("a", &["ip", "neigh", "flush", "dev", "eth0"]);
    lab.sh(
        "a",
        &["ping", "-c", "2", "-i", "0.2", "-W", "1", "10.9.0.2"],
    )
}

#[test]
fn the_xdp_sink_counts_and_stamps_and_leaves_arp_to_the_host() {
    let lab = TestLab::up(test_path("labs/pair.toml"), &[]);
    let mut pinged = String::new();
    let (g, s) = run_pair_with(
        &lab,
        &["--flows", "2", "--rate", "20kpps", "--duration", "1"],
        "4",
        &["--xdp"],
        // ARP goes to the host's stack, not to the sink: a fresh neighbour resolves.
        || pinged = ping_afresh(&lab),
    );
    assert!(pinged.contains("2 received"), "{pinged}");
    let sent = g["sent"].as_u64().unwrap();
    assert!(sent >= 19_000, "{g}");
    assert_eq!(s["received"].as_u64(), Some(sent), "{s}");
    assert_eq!(s["lost"].as_u64(), Some(0), "{s}");
    assert_eq!(s["socket_dropped"].as_u64(), Some(0), "{s}");
    assert_eq!(s["unstamped_frames"].as_u64(), Some(0), "{s}");
    assert_eq!(s["flows"].as_array().unwrap().len(), 2, "{s}");
    // Receive times come from the XDP hook (CLOCK_REALTIME, as the send times): one-way
    // latency over one veth is positive and well under a millisecond at the median.
    let l = &s["latency_ns_percentiles"];
    let p50 = l["p50"].as_u64().unwrap();
    assert!(p50 > 0 && p50 < 1_000_000, "{s}");
    // The sink's program leaves with it.
    let links = lab.sh("b", &["ip", "link", "show", "eth0"]);
    assert!(!links.contains("xdp"), "{links}");
}

#[test]
fn the_counting_sink_counts_every_data_frame_and_leaves_arp_to_the_host() {
    let lab = TestLab::up(test_path("labs/pair.toml"), &[]);
    let mut pinged = String::new();
    let (g, s) = run_pair_with(
        &lab,
        &[
            "--xdp", "--flows", "3", "--rate", "50kpps", "--count", "40000",
        ],
        "3",
        &["--count"],
        // ARP passes the program to the host's stack: a fresh neighbour resolves, and the
        // pings are not counted (ICMP).
        || pinged = ping_afresh(&lab),
    );
    assert!(pinged.contains("2 received"), "{pinged}");
    assert_eq!(g["sent"].as_u64(), Some(40_000), "{g}");
    assert_eq!(s["mode"], "count", "{s}");
    assert_eq!(s["received"].as_u64(), Some(40_000), "{s}");
    assert_eq!(s["bytes"].as_u64(), Some(40_000 * 60), "{s}");
    // The program leaves with the sink.
    let links = lab.sh("b", &["ip", "link", "show", "eth0"]);
    assert!(!links.contains("xdp"), "{links}");
}

/// Runs the XDP generator on a (`src` of the prefixes' family) to `count` destinations
/// drawn from `prefixes` (a table's text), while tcpdump on b prints what arrives
/// (`tcpdump_args`: options, then the filter); returns tcpdump's output.
fn xdp_to_prefixes(
    lab: &TestLab,
    bmac: &str,
    src: &str,
    prefixes: &str,
    tcpdump_args: &[&str],
    count: usize,
) -> String {
    let dir = std::env::temp_dir().join(format!("ts-xdp-{}-{count}", lab.name));
    std::fs::create_dir_all(&dir).unwrap();
    let pfx = dir.join("prefixes.txt");
    std::fs::write(&pfx, prefixes).unwrap();
    let n = count.to_string();
    let cap = std::process::Command::new("timeout")
        .args(["10", "ip", "netns", "exec", &format!("ts-{}-b", lab.name)])
        .args(["tcpdump", "-nn", "-c", &n, "-i", "eth0"])
        .args(tcpdump_args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let size = if src.contains(':') { "84" } else { "64" };
    let out = lab.sh(
        "a",
        &xdp_gen_from_a(
            bmac,
            &[
                "--src",
                src,
                "--dst-prefixes",
                pfx.to_str().unwrap(),
                "--size",
                size,
                "--rate",
                "20kpps",
                "--count",
                &n,
                "--json",
            ],
        ),
    );
    let _ = std::fs::remove_dir_all(&dir);
    let g: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(g["sent"], count, "{g}");
    String::from_utf8_lossy(&cap.wait_with_output().unwrap().stdout).into_owned()
}

/// `sink --points`: one sink for several measurement points, each ended by SIGUSR1 (the
/// generator is done) with its own summary line once what was on its way has arrived;
/// the counts start again from zero at each point. On the AF_XDP sink and the counting
/// one.
#[test]
fn a_sink_with_points_reports_each_point_apart() {
    use std::io::BufRead;
    let lab = TestLab::up(test_path("labs/pair.toml"), &[]);
    let bmac = lab.mac("b", "eth0");
    let ns_b = format!("ts-{}-b", lab.name);
    for kind in ["--xdp", "--count"] {
        let mut sink = std::process::Command::new("ip")
            .args(["netns", "exec", &ns_b, exe(), "sink", "--iface", "eth0"])
            .args(["--duration", "60", kind, "--json", "--points"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(sink.stdout.take().unwrap()).lines();
        std::thread::sleep(std::time::Duration::from_millis(500));
        for count in ["3000", "5000"] {
            let g = lab.sh(
                "a",
                &[
                    exe(),
                    "gen",
                    "--iface",
                    "eth0",
                    "--dst-mac",
                    &bmac,
                    "--src",
                    "10.9.0.1",
                    "--dst",
                    "10.9.0.2",
                    "--rate",
                    "20kpps",
                    "--count",
                    count,
                    "--json",
                ],
            );
            let g: Value = serde_json::from_str(&g).unwrap();
            let t = std::time::Instant::now();
            // SAFETY: kill(2) on our own child, not reaped.
            unsafe { libc::kill(sink.id() as libc::pid_t, libc::SIGUSR1) };
            let line = lines.next().expect("a line per point").unwrap();
            let took = t.elapsed();
            let s: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(s["received"], g["sent"], "{kind} {count}: {s}");
            assert_eq!(g["sent"].as_u64(), Some(count.parse().unwrap()), "{g}");
            // Quiet for 50 ms ends the drain; 200 ms at the latest.
            assert!(
                took >= std::time::Duration::from_millis(45)
                    && took < std::time::Duration::from_secs(2),
                "{kind}: the point's summary came {took:?} after SIGUSR1"
            );
        }
        // SIGINT ends the run, with the (empty) point it was in.
        // SAFETY: as above.
        unsafe { libc::kill(sink.id() as libc::pid_t, libc::SIGINT) };
        let rest: Vec<String> = lines.map(Result::unwrap).collect();
        let last: Value = serde_json::from_str(&rest.join("\n")).unwrap();
        assert_eq!(last["received"].as_u64(), Some(0), "{kind}: {last}");
        assert!(sink.wait().unwrap().success(), "{kind}");
    }
}
