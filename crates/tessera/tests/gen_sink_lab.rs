//! `tessera gen` and `tessera sink` between real interfaces in namespaces.

mod common;

use common::*;
use serde_json::Value;

fn run_pair(lab: &TestLab, gen_args: &[&str], sink_secs: &str) -> (Value, Value) {
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
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
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
    // Without NAPI on the peer, a veth drops XDP frames: the generator says so.
    let o = lab.exec(
        "a",
        &[
            exe(),
            "gen",
            "--xdp",
            "--iface",
            "eth0",
            "--dst-mac",
            &bmac,
            "--src",
            "10.9.0.1",
            "--dst",
            "10.9.0.2",
            "--rate",
            "10kpps",
            "--count",
            "1000",
            "--json",
        ],
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
        "3",
    );
    let sent = g["sent"].as_u64().unwrap();
    // Paced in the kernel from the start: 1.5 s at 40 kpps is 60,000 frames (one more if
    // the last falls on the deadline).
    assert!((60_000..=60_001).contains(&sent), "{g}");
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
    let pps = g["achieved_pps"].as_f64().unwrap();
    assert!(
        (pps - 40_000.0).abs() / 40_000.0 < 0.01,
        "achieved {pps} pps"
    );
}
