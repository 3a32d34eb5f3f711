//! Flow export with a real collector (docs/flows.md): nfdump's `nfcapd` collects what the
//! forwarder of labs/single-router.toml exports while iperf3 and ping cross it, and
//! `nfdump` lists the flows with their addresses, ports, protocol and interfaces, and the
//! bytes within 10% of what iperf3 sent at `sampling = 1`; a reload to 1 in 100 keeps
//! the bytes within the sampling error. The collector listens on the forwarder's own
//! loopback (its namespace's), where the exporter's socket reaches it.

use super::*;

/// The single-router lab with r exporting flows to 127.0.0.1:9995 at `sampling`.
fn exporting_lab(tag: &str, sampling: u32) -> (TestLab, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("tessera-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("flows")).unwrap();
    let r = std::fs::read_to_string(repo_path("labs/single-router/r.toml")).unwrap();
    std::fs::write(dir.join("r.toml"), format!("{r}\n{}", table(sampling))).unwrap();
    std::fs::copy(
        repo_path("labs/single-router/routes.txt"),
        dir.join("routes.txt"),
    )
    .unwrap();
    let topo = std::fs::read_to_string(repo_path("labs/single-router.toml"))
        .unwrap()
        .replace("single-router/r.toml", "r.toml");
    std::fs::write(dir.join("lab.toml"), topo).unwrap();
    (TestLab::up(dir.join("lab.toml"), &[]), dir)
}

fn table(sampling: u32) -> String {
    format!(
        "[flow_export]\ncollector = \"127.0.0.1:9995\"\nsampling = {sampling}\nactive_timeout_s = 2\nidle_timeout_s = 1\nobservation_domain = 5\ntemplate_interval_s = 1\n"
    )
}

/// nfcapd in r's namespace, on its loopback.
fn collector(lab: &TestLab, dir: &std::path::Path) -> std::process::Child {
    nfdump::collector(lab, "r", "127.0.0.1", 9995, dir)
}

fn iperf3_bytes(report: &serde_json::Value, flows: &[nfdump::Flow]) -> (u64, u64) {
    nfdump::iperf3_bytes(report, flows, "10.1.0.10", "10.3.0.10")
}

#[test]
fn nfcapd_collects_what_crosses_the_forwarder() {
    let (lab, dir) = exporting_lab("flows", 1);
    let store = dir.join("flows");
    let nfcapd = collector(&lab, &store);
    let o = lab.exec("src1", &["ping", "-c", "5", "-i", "0.1", "10.3.0.10"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    // At 300 Mbit/s: every packet sampled is some 26,000 a second, which the exporter
    // keeps up with beside the other tests of this binary on two cores (at iperf3's full
    // rate, 400,000 a second, a CI run lost a tenth of them to a full ring).
    let report = lab.iperf3("src1", "sink1", "10.3.0.10", &["-t", "2", "-b", "300M"]);
    // Idle after 1 s, exported at the next pass.
    std::thread::sleep(Duration::from_secs(3));
    let c = lab.counters("r");
    let got = nfdump::flows(nfcapd, &store);
    let (sent, seen) = iperf3_bytes(&report, &got);
    // Within 10% (TCP/IP and Ethernet headers are some 4-5% over the payload iperf3
    // counts).
    assert!(
        (seen as f64) > sent as f64 * 0.9 && (seen as f64) < sent as f64 * 1.10,
        "iperf3 sent {sent} bytes; the flows say {seen}\n{got:#?}\n{}",
        c["flow_export"]
    );
    // The data connection (iperf3 opens a control connection too).
    let tcp = got
        .iter()
        .filter(|f| f.dport == 5201 && f.src == "10.1.0.10")
        .max_by_key(|f| f.bytes)
        .unwrap();
    assert!(tcp.proto == "TCP" || tcp.proto == "6", "{tcp:?}");
    assert!(tcp.sport > 1024 && tcp.packets > 100, "{tcp:?}");
    // Interfaces: r-eth0 (1) in, r-eth2 (3) out.
    assert_eq!((tcp.input, tcp.output), (1, 3), "{tcp:?}");
    // The return direction, and the pings (ICMP echo request 8/0, reply 0/0).
    assert!(got
        .iter()
        .any(|f| f.src == "10.3.0.10" && f.sport == 5201 && f.input == 3));
    let icmp: u64 = got
        .iter()
        .filter(|f| (f.proto == "ICMP" || f.proto == "1") && f.src == "10.1.0.10")
        .map(|f| f.packets)
        .sum();
    assert_eq!(icmp, 5, "{got:#?}");
    assert_eq!(c["flow_export"]["records_lost"], 0, "{c}");

    // 1 in 100 after a reload: the bytes within the sampling error.
    let store = dir.join("flows100");
    std::fs::create_dir_all(&store).unwrap();
    let nfcapd = collector(&lab, &store);
    let path = dir.join("r.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("sampling = 1\n", "sampling = 100\n")).unwrap();
    let o = lab.tessera(&["reload", "--control", lab.control("r").to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report = lab.iperf3("src1", "sink1", "10.3.0.10", &["-t", "2"]);
    std::thread::sleep(Duration::from_secs(3));
    let got = nfdump::flows(nfcapd, &store);
    let (sent, seen) = iperf3_bytes(&report, &got);
    let c = lab.counters("r");
    assert_eq!(c["flow_export"]["sampling"], 100, "{c}");
    // Thousands of samples of nearly equal frames: within 15% (several standard errors).
    assert!(
        (seen as f64) > sent as f64 * 0.85 && (seen as f64) < sent as f64 * 1.2,
        "iperf3 sent {sent} bytes; the flows say {seen}\n{got:#?}\n{}",
        c["flow_export"]
    );
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}
