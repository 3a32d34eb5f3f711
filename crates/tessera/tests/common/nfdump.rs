//! A real IPFIX collector for the flow export tests: nfdump's `nfcapd` in a lab node's
//! namespace, stopped and read back with `nfdump`.

use super::TestLab;
use std::time::{Duration, Instant};

/// nfcapd in `node`'s namespace, listening on `addr`:`port`, writing to `dir`; stopped
/// (SIGTERM: its last file closed) by [`flows`].
pub fn collector(
    lab: &TestLab,
    node: &str,
    addr: &str,
    port: u16,
    dir: &std::path::Path,
) -> std::process::Child {
    lab.sh(node, &["ip", "link", "set", "lo", "up"]);
    let port = port.to_string();
    let child = lab.spawn(
        node,
        &[
            "nfcapd",
            "-b",
            addr,
            "-p",
            &port,
            "-w",
            dir.to_str().unwrap(),
            "-t",
            "60",
        ],
    );
    std::thread::sleep(Duration::from_millis(500));
    child
}

/// One flow as nfdump lists it.
#[derive(Debug)]
pub struct Flow {
    pub src: String,
    pub dst: String,
    pub sport: u16,
    pub dport: u16,
    pub proto: String,
    pub bytes: u64,
    pub packets: u64,
    pub input: u32,
    pub output: u32,
    /// The exporter's address, as the collector saw it.
    pub exporter: String,
}

/// Stops the collector and lists what it wrote.
pub fn flows(mut nfcapd: std::process::Child, dir: &std::path::Path) -> Vec<Flow> {
    // SIGTERM to `ip netns exec`'s child: nfcapd is the process itself (exec).
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &nfcapd.id().to_string()])
        .status();
    let t = Instant::now();
    while nfcapd.try_wait().unwrap().is_none() {
        assert!(t.elapsed() < Duration::from_secs(10), "nfcapd did not stop");
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = std::process::Command::new("nfdump")
        .args(["-R", dir.to_str().unwrap(), "-q", "-N", "-o"])
        .arg("fmt:%sa|%da|%sp|%dp|%pr|%byt|%pkt|%in|%out|%ra")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "nfdump: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    text.lines()
        .filter(|l| l.contains('|'))
        .map(|l| {
            let f: Vec<&str> = l.split('|').map(str::trim).collect();
            // ICMP's "port" is type.code ("8.0"): its type.
            let n = |i: usize| {
                let v = f[i].split('.').next().unwrap_or("");
                v.parse::<u64>().unwrap_or_else(|_| panic!("{l}"))
            };
            Flow {
                src: f[0].into(),
                dst: f[1].into(),
                sport: n(2) as u16,
                dport: n(3) as u16,
                proto: f[4].into(),
                bytes: n(5),
                packets: n(6),
                input: n(7) as u32,
                output: n(8) as u32,
                exporter: f.get(9).copied().unwrap_or("").into(),
            }
        })
        .collect()
}

/// The bytes iperf3 sent (its report's), and the bytes of the flows from `src` to
/// `dst`'s port 5201.
pub fn iperf3_bytes(
    report: &serde_json::Value,
    flows: &[Flow],
    src: &str,
    dst: &str,
) -> (u64, u64) {
    let sent = report["end"]["sum_sent"]["bytes"].as_u64().unwrap();
    let seen = flows
        .iter()
        .filter(|f| f.src == src && f.dst == dst && f.dport == 5201)
        .map(|f| f.bytes)
        .sum();
    (sent, seen)
}
