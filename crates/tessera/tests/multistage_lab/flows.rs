//! The multistage router as one exporter (docs/flows.md, "In the multistage router"):
//! the router of labs/multistage.toml with a controller in place of its plain vcp host,
//! `[flow_export]` written once in the controller's file. nfdump's `nfcapd` on host a1
//! collects while ping and iperf3 cross the router from a1 to b1; `nfdump` lists each flow
//! once, with the router's interfaces (the VLAN ids of networks A and B), the router's
//! address on network A as the exporter, and the bytes within 10% of what iperf3 sent.

use super::*;
use serde_json::Value;

/// The lab, its controller exporting to a1 at `sampling`.
fn exporting_lab(sampling: u32) -> (TestLab, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("tessera-ms-flows-{}", std::process::id()));
    let lab = multistage_with_controller(
        &dir,
        &format!(
            "[controller]\ninterface = \"vcp-int\"\nhello_interval_ms = 100\n\n\
             [flow_export]\ncollector = \"10.1.0.10:9995\"\nsampling = {sampling}\n\
             active_timeout_s = 60\nidle_timeout_s = 1\nobservation_domain = 9\n\
             template_interval_s = 1\n"
        ),
    );
    (lab, dir)
}

/// The bytes iperf3's report says it sent, and the bytes of the flows of its data
/// connection (by its source port) that nfdump lists.
fn sent_and_seen(report: &Value, flows: &[nfdump::Flow]) -> (u64, u64) {
    let sent = report["end"]["sum_sent"]["bytes"].as_u64().unwrap();
    let port = report["start"]["connected"][0]["local_port"]
        .as_u64()
        .unwrap();
    let seen = flows
        .iter()
        .filter(|f| f.src == "10.1.0.10" && f.dport == 5201 && u64::from(f.sport) == port)
        .map(|f| f.bytes)
        .sum();
    (sent, seen)
}

#[test]
fn nfcapd_collects_from_the_multistage_router_as_one_exporter() {
    let (lab, dir) = exporting_lab(1);
    let store = dir.join("flows");
    std::fs::create_dir_all(&store).unwrap();
    let nfcapd = nfdump::collector(&lab, "a1", "10.1.0.10", 9995, &store);
    let t = Instant::now();
    while lab
        .exec("a1", &["ping", "-c", "1", "-W", "1", "10.2.0.10"])
        .status
        .code()
        != Some(0)
    {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no path through the router"
        );
    }
    // Five pings of 1,000 bytes (the path's first pings are of 64).
    let o = lab.exec(
        "a1",
        &["ping", "-c", "5", "-i", "0.1", "-s", "1000", "10.2.0.10"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let every = lab.iperf3("a1", "b1", "10.2.0.10", &["-t", "1", "-b", "100M"]);
    // 1 in 100 after a reload of the controller's file: the back-ends take the new rate
    // within a second (and end the first flows meanwhile: idle after 1 s).
    let path = dir.join("multistage/vcp.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("sampling = 1\n", "sampling = 100\n")).unwrap();
    let o = lab.tessera(&["reload", "--control", lab.control("vcp").to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::thread::sleep(Duration::from_millis(1_500));
    let sampling: Vec<Value> = ["r1", "r2", "r3"]
        .iter()
        .map(|r| lab.counters(r)["flow_export"]["sampling"].clone())
        .collect();
    assert_eq!(sampling, [100, 100, 100], "the back-ends' rates");
    let sampled = lab.iperf3("a1", "b1", "10.2.0.10", &["-t", "1"]);
    // Idle after 1 s at the back-ends, then to the controller and on to a1.
    std::thread::sleep(Duration::from_millis(2_500));
    let router = lab.show_json("router", "vcp");
    let got = nfdump::flows(nfcapd, &store);
    let fx = &router["flow_export"];

    // At 1 in 1: the bytes within 10% of iperf3's; the data connection once (one
    // back-end holds it), with the router's interfaces: in by network A (VLAN 10), out by
    // network B (VLAN 20).
    let (sent, seen) = sent_and_seen(&every, &got);
    assert!(
        (seen as f64) > sent as f64 * 0.9 && (seen as f64) < sent as f64 * 1.10,
        "iperf3 sent {sent} bytes; the flows say {seen}\n{got:#?}\n{fx}"
    );
    let port = every["start"]["connected"][0]["local_port"]
        .as_u64()
        .unwrap();
    let tcp: Vec<&nfdump::Flow> = got
        .iter()
        .filter(|f| f.dport == 5201 && u64::from(f.sport) == port)
        .collect();
    assert_eq!(tcp.len(), 1, "{got:#?}");
    let tcp = tcp[0];
    assert!(tcp.proto == "TCP" || tcp.proto == "6", "{tcp:?}");
    assert_eq!((tcp.input, tcp.output), (10, 20), "{tcp:?}");
    // One exporter: the router, from its address on network A.
    assert!(got.iter().all(|f| f.exporter == "10.1.0.1"), "{got:#?}");
    // The return direction, and the five pings of 1,000 bytes (1,042 with their headers),
    // in one flow with the path's first pings of 98 where they came within the idle
    // timeout.
    assert!(got
        .iter()
        .any(|f| f.src == "10.2.0.10" && f.sport == 5201 && (f.input, f.output) == (20, 10)));
    let icmp: Vec<(u64, u64)> = got
        .iter()
        .filter(|f| (f.proto == "ICMP" || f.proto == "1") && f.src == "10.1.0.10")
        .map(|f| (f.packets, f.bytes))
        .collect();
    assert!(
        icmp.iter()
            .any(|&(p, b)| p >= 5 && b == 5 * 1_042 + (p - 5) * 98),
        "{icmp:?}"
    );
    eprintln!("1 in 1: iperf3 sent {sent} bytes, the flows say {seen}; {tcp:?}; {fx}");
    // At 1 in 100: thousands of samples of nearly equal frames, within 15% (several
    // standard errors).
    let (sent, seen) = sent_and_seen(&sampled, &got);
    assert!(
        (seen as f64) > sent as f64 * 0.85 && (seen as f64) < sent as f64 * 1.2,
        "iperf3 sent {sent} bytes; the flows say {seen}\n{got:#?}\n{fx}"
    );
    eprintln!("1 in 100: iperf3 sent {sent} bytes, the flows say {seen}");
    // `show router`: the interfaces by index, the exporter's counters.
    assert_eq!(router["interfaces"]["vlan10"]["index"], 10, "{router}");
    assert_eq!(router["interfaces"]["vlan20"]["index"], 20, "{router}");
    assert!(fx["records_received"].as_u64().unwrap() >= 4, "{fx}");
    assert_eq!(fx["records_lost"], 0, "{fx}");
    assert_eq!(fx["sampling"], 100, "{fx}");
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}
