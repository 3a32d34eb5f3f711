//! The multistage router of labs/multistage.toml (two LBs, three back-ends, a bridge) with
//! real hosts: one router from outside, DIST, the Virtual-CP, weights and failover.

mod common;
#[path = "multistage_lab/flows.rs"]
mod flows;

use common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};
use wire::ethernet::{self, ethertype};
use wire::ipv4;

const LAB: &str = "labs/multistage.toml";
const BACKENDS: [&str; 3] = [
    "02:00:00:00:01:01",
    "02:00:00:00:01:02",
    "02:00:00:00:01:03",
];

fn lab() -> TestLab {
    TestLab::up(repo_path(LAB), &[])
}

fn ask(lab: &TestLab, element: &str, what: &str) -> Value {
    lab.show_json(what, element)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// An IPv4 frame from a1 to the LB with `proto` and `payload`.
fn ip_frame(dst_mac: &str, src_mac: &str, dst: &str, proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + payload.len()];
    ethernet::Repr {
        dst: dst_mac.parse().unwrap(),
        src: src_mac.parse().unwrap(),
        vlan: None,
        ethertype: ethertype::IPV4,
    }
    .emit(&mut f)
    .unwrap();
    ipv4::Repr {
        src: "10.1.0.10".parse().unwrap(),
        dst: dst.parse().unwrap(),
        protocol: proto,
        ttl: 1,
        tos: 0xc0,
        ident: 1,
        dont_frag: false,
        more_frags: false,
        frag_offset: 0,
        payload_len: payload.len(),
    }
    .emit(&mut f[14..])
    .unwrap();
    f[34..].copy_from_slice(payload);
    f
}

/// Sends a DIST message from `node`'s eth0, unsealed.
fn dist_send(lab: &TestLab, node: &str, msg: &Value) -> Value {
    dist_send_sealed(lab, node, msg, None)
}

/// Sends a DIST message from `node`'s eth0, sealed under the key in `key` if given. The
/// answer holds the frame sent, in hex ("frame").
fn dist_send_sealed(lab: &TestLab, node: &str, msg: &Value, key: Option<&Path>) -> Value {
    let msg = msg.to_string();
    let mut argv = vec![exe(), "dist", "send", "--iface", "eth0", "--json", &msg];
    let key = key.map(|k| k.to_string_lossy().into_owned());
    if let Some(k) = &key {
        argv.extend(["--key-file", k]);
    }
    let out = lab.sh(node, &argv);
    serde_json::from_str(&out).unwrap()
}

/// Sends a whole frame (hex) from `node`'s eth0, as it is.
fn frame_send(lab: &TestLab, node: &str, frame: &str) {
    lab.sh(
        node,
        &[exe(), "dist", "send", "--iface", "eth0", "--frame", frame],
    );
}

#[test]
fn hosts_see_one_router() {
    let lab = lab();
    let lba_ext = lab.mac("lba", "lba-ext");
    // Ping through: one TTL decrement over LB, back-end, LB.
    let out = lab.sh(
        "a1",
        &["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.2.0.10"],
    );
    assert!(
        out.contains("3 received") && out.contains("ttl=63"),
        "{out}"
    );
    // The router's address answers ARP with the LB's MAC, and answers ping.
    let neigh = lab.sh("a1", &["ip", "neigh", "show", "10.1.0.1"]);
    assert!(neigh.contains(&lba_ext), "{neigh}");
    let out = lab.sh(
        "b1",
        &["ping", "-c", "2", "-i", "0.2", "-W", "2", "10.2.0.1"],
    );
    assert!(out.contains("2 received"), "{out}");
    // One hop: TTL 1 expires at the router, reported from its address on network A.
    let o = lab.exec(
        "a1",
        &["ping", "-c", "1", "-t", "1", "-W", "2", "10.2.0.10"],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("From 10.1.0.1") && out.contains("Time to live exceeded"),
        "{out}"
    );
    // TCP, from a host that leaves its checksums to offload, as a veth may (the lab's
    // wire-like links carry them complete): the LB completes them.
    lab.sh("a1", &["ethtool", "-K", "eth0", "tx", "on"]);
    let v = lab.iperf3("a1", "b1", "10.2.0.10", &["-t", "2", "-P", "2"]);
    let bps = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap();
    eprintln!(
        "TCP a1 -> b1 through the multistage router: {:.3} Gbit/s",
        bps / 1e9
    );
    assert!(bps > 1e6, "{bps}");
    let c = lab.counters("lba");
    assert!(event_count(&c, "ext_arp_replies_sent") >= 1);
    assert!(event_count(&c, "balance_packets") > 1000);
    assert!(
        event_count(&c, "ip4_checksum_filled") > 1000,
        "TCP offload-partial checksums completed"
    );
    let forwarded: Vec<u64> = ["r1", "r2", "r3"]
        .iter()
        .map(|r| forwarded4(&lab.counters(r)))
        .collect();
    eprintln!("forwarded by r1, r2, r3: {forwarded:?}");
    assert!(
        forwarded.iter().filter(|&&f| f > 0).count() >= 2,
        "{forwarded:?}"
    );

    // A spoofed DIST message from outside is dropped and counted; the table stays.
    let before = drop_count(&lab.counters("lba"), "dist_not_internal");
    dist_send(
        &lab,
        "a1",
        &json!({"type": "balance", "flush": true, "entries": []}),
    );
    dist_send(
        &lab,
        "a1",
        &json!({"type": "virtual-cp", "mac": "02:00:00:00:66:66", "port": 1}),
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        drop_count(&lab.counters("lba"), "dist_not_internal"),
        before + 2
    );
    let t = ask(&lab, "lba", "balance");
    assert_eq!(t["entries"].as_array().unwrap().len(), 3, "{t}");
    assert_eq!(t["virtual_cp"]["mac"], "02:00:00:00:0c:01");
    let out = lab.sh("a1", &["ping", "-c", "1", "-W", "2", "10.2.0.10"]);
    assert!(out.contains("1 received"), "{out}");

    // Routing-protocol packets reach the Virtual-CP's host: OSPF to 224.0.0.5 and BGP to
    // the router's address, tagged with network A's VLAN.
    let a1 = lab.mac("a1", "eth0");
    let ospf = ip_frame(
        "01:00:5e:00:00:05",
        &a1,
        "224.0.0.5",
        89,
        &[2, 1, 0, 44, 0, 0, 0, 0],
    );
    let mut syn = [0u8; 20];
    syn[0..2].copy_from_slice(&40000u16.to_be_bytes());
    syn[2..4].copy_from_slice(&179u16.to_be_bytes());
    syn[12] = 5 << 4;
    syn[13] = 0x02;
    let bgp = ip_frame(&lba_ext, &a1, "10.1.0.1", 6, &syn);
    let ns = format!("ts-{}-vcp", lab.name);
    let cap = std::process::Command::new("timeout")
        .args([
            "5",
            "ip",
            "netns",
            "exec",
            &ns,
            "tcpdump",
            "-c",
            "2",
            "-eni",
            "eth0",
            "vlan 10 and (ip proto 89 or tcp port 179)",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    for f in [&ospf, &bgp] {
        lab.sh(
            "a1",
            &[exe(), "inject", "--iface", "eth0", "--hex", &hex(f)],
        );
    }
    let cap = cap.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&cap.stdout);
    assert!(
        text.contains("OSPF") || text.contains("proto OSPF") || text.contains("224.0.0.5"),
        "{text}"
    );
    assert!(text.contains("10.1.0.1.179"), "{text}");
    assert!(
        text.lines().all(|l| l.contains("> 02:00:00:00:0c:01")),
        "to the Virtual-CP's MAC: {text}"
    );
    assert_eq!(event_count(&lab.counters("lba"), "vcp_redirected"), 2);

    // Every element says hello on the interconnection.
    let out = lab.sh(
        "vcp",
        &[
            exe(),
            "dist",
            "listen",
            "--iface",
            "eth0",
            "--count",
            "20",
            "--duration",
            "5",
        ],
    );
    let hellos: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (kind, src) in [
        ("balancer", "02:00:00:00:0a:01"),
        ("balancer", "02:00:00:00:0b:01"),
        ("forwarder", BACKENDS[0]),
    ] {
        assert!(
            hellos
                .iter()
                .any(|h| h["type"] == "hello" && h["element"] == kind && h["src"] == src),
            "no hello from {kind} {src}: {out}"
        );
    }
}

/// Runs `tessera sink` in b1 while `gen` runs in a1 (and `during` beside it); returns
/// (gen, sink) summaries. The generator starts when the sink says it receives; the sink
/// stops 300 ms after both the generator and `during` are done.
fn traffic(lab: &TestLab, gen_args: &[&str], during: impl FnOnce()) -> (Value, Value) {
    let ns = format!("ts-{}-b1", lab.name);
    let mut sink = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns,
            exe(),
            "sink",
            "--iface",
            "eth0",
            // A cap: it is stopped below.
            "--duration",
            "120",
            "--drop",
            "--json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let err = sink.stderr.take().unwrap();
    let said = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        for line in std::io::BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            if line.contains("sink: receiving") {
                let _ = ready_tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    assert!(
        ready_rx.recv_timeout(Duration::from_secs(10)).is_ok(),
        "the sink in b1 did not start receiving within 10 s"
    );
    let lba_ext = lab.mac("lba", "lba-ext");
    let ns_a = format!("ts-{}-a1", lab.name);
    let mut args = vec![
        "netns",
        "exec",
        &ns_a,
        exe(),
        "gen",
        "--iface",
        "eth0",
        "--dst-mac",
        &lba_ext,
        "--src",
        "10.1.0.10",
        "--dst",
        "10.2.0.10",
        "--json",
    ];
    args.extend_from_slice(gen_args);
    let gen = std::process::Command::new("ip")
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    during();
    let g = gen.wait_with_output().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on a child of ours that has not been reaped yet.
    unsafe { libc::kill(sink.id() as libc::pid_t, libc::SIGINT) };
    let s = sink.wait_with_output().unwrap();
    let said = said.join().unwrap();
    assert!(
        g.status.success(),
        "gen: {}",
        String::from_utf8_lossy(&g.stderr)
    );
    assert!(s.status.success(), "sink: {said}");
    (
        serde_json::from_slice(&g.stdout).unwrap(),
        serde_json::from_slice(&s.stdout).unwrap(),
    )
}

fn packets_per_backend(t: &Value) -> Vec<u64> {
    BACKENDS
        .iter()
        .map(|m| {
            t["entries"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["mac"] == *m)
                .map(|e| e["packets"].as_u64().unwrap())
                .unwrap_or(0)
        })
        .collect()
}

#[test]
fn weights_and_failover() {
    let lab = lab();
    // Resolve b1 first, so no test packet waits for ARP.
    lab.sh(
        "a1",
        &["ping", "-c", "2", "-i", "0.2", "-W", "2", "10.2.0.10"],
    );
    // Weights 1:2:1, sent from inside (the Virtual-CP's host) to both LBs.
    let entries: Vec<Value> = BACKENDS
        .iter()
        .zip([1, 2, 1])
        .map(|(m, w)| json!({"mac": m, "port": 1, "weight": w}))
        .collect();
    dist_send_sealed(
        &lab,
        "vcp",
        &json!({"type": "balance", "flush": true, "entries": entries}),
        Some(&lab.dist_key()),
    );
    std::thread::sleep(Duration::from_millis(200));
    let t0 = packets_per_backend(&ask(&lab, "lba", "balance"));
    // 60,000 flows, two packets each.
    let (g, s) = traffic(
        &lab,
        &["--flows", "60000", "--rate", "40kpps", "--count", "120000"],
        || {},
    );
    let t1 = packets_per_backend(&ask(&lab, "lba", "balance"));
    let d: Vec<u64> = t1.iter().zip(&t0).map(|(a, b)| a - b).collect();
    let total: u64 = d.iter().sum();
    let shares: Vec<f64> = d.iter().map(|x| *x as f64 / total as f64).collect();
    eprintln!(
        "weights 1:2:1: packets {d:?}, shares {shares:?}; sink received {} of {}, reordered {}",
        s["received"], g["sent"], s["reordered"]
    );
    assert!(total >= 120_000, "{d:?}");
    for (got, want) in shares.iter().zip([0.25, 0.5, 0.25]) {
        assert!(
            (got - want).abs() < 0.01,
            "shares {shares:?}, want 25/50/25 within 1%"
        );
    }
    assert_eq!(s["reordered"], 0, "hashing never reorders a flow");

    // Failover: r2 (half the flows) stops one second into a 3-second run.
    let r2_before = packets_per_backend(&ask(&lab, "lba", "balance"))[1];
    let rate = 30_000.0;
    let flows = 60.0;
    let stopped = std::cell::Cell::new(None);
    let (g, s) = traffic(
        &lab,
        &["--flows", "60", "--rate", "30kpps", "--duration", "3"],
        || {
            std::thread::sleep(Duration::from_millis(1000));
            let t = Instant::now();
            lab.element("stop", "r2");
            stopped.set(Some(t.elapsed()));
        },
    );
    let lost: Vec<u64> = s["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["lost"].as_u64().unwrap())
        .filter(|&l| l > 0)
        .collect();
    let per_flow_ms = 1000.0 * flows / rate;
    let worst = lost.iter().max().copied().unwrap_or(0) as f64 * per_flow_ms;
    let mean = lost.iter().sum::<u64>() as f64 / lost.len().max(1) as f64 * per_flow_ms;
    eprintln!(
        "failover: {} of {} flows lost packets ({} packets of {} sent); outage per flow: mean {mean:.0} ms, worst {worst:.0} ms (hello interval 100 ms); lab stop took {:?}",
        lost.len(), flows, s["lost"], g["sent"], stopped.get().unwrap()
    );
    // r2 carried flows until it stopped. Its fast path (XDP or tcx) outlives it for a
    // hand-over ([io] restart_grace_s) and forwards what still reaches it, so that
    // stopping it may lose nothing.
    let r2_during = packets_per_backend(&ask(&lab, "lba", "balance"))[1] - r2_before;
    assert!(r2_during > 1000, "r2 carried {r2_during} packets");
    assert!(
        worst <= 300.0,
        "traffic moved after {worst} ms, more than three hello intervals"
    );
    let c = lab.counters("lba");
    assert_eq!(
        event_count(&c, "balance_backend_down") - event_count(&c, "balance_backend_up"),
        1
    );
    let t = ask(&lab, "lba", "balance");
    assert_eq!(t["live"], 2, "{t}");
    // r2 returns with its hellos.
    lab.element("start", "r2");
    let until = Instant::now() + Duration::from_secs(3);
    while ask(&lab, "lba", "balance")["live"] != 3 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(ask(&lab, "lba", "balance")["live"], 3);
    let out = lab.sh(
        "a1",
        &["ping", "-c", "2", "-i", "0.2", "-W", "2", "10.2.0.10"],
    );
    assert!(out.contains("2 received"), "{out}");
}

/// DIST is authenticated in this lab (`dist_key = true`): what is unsealed, sealed under
/// another key, or a replay of a genuine message is dropped and counted, from outside and
/// from the interconnection, and changes nothing; a genuine message still applies.
#[test]
fn forged_and_replayed_dist_is_dropped() {
    let lab = lab();
    let key = lab.dist_key();
    let other = std::env::temp_dir().join(format!("{}-other.key", lab.name));
    let o = lab.tessera(&["dist", "keygen", "--out", &other.to_string_lossy()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let entries = |w: [u16; 3]| -> Value {
        let e: Vec<Value> = BACKENDS
            .iter()
            .zip(w)
            .map(|(m, w)| json!({"mac": m, "port": 1, "weight": w}))
            .collect();
        json!({"type": "balance", "flush": true, "entries": e})
    };
    let weights = |lab: &TestLab| -> Vec<u64> {
        ask(lab, "lba", "balance")["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["weight"].as_u64().unwrap())
            .collect()
    };
    let drops = |lab: &TestLab, el: &str| -> [u64; 4] {
        let c = lab.counters(el);
        [
            "dist_unauthenticated",
            "dist_forged",
            "dist_replayed",
            "dist_not_internal",
        ]
        .map(|r| drop_count(&c, r))
    };
    let settle = || std::thread::sleep(Duration::from_millis(300));
    assert_eq!(weights(&lab), [1, 1, 1]);
    // Every element's hellos are sealed and accepted: nothing dropped so far.
    assert_eq!(drops(&lab, "lba"), [0; 4]);
    assert_eq!(drops(&lab, "lbb"), [0; 4]);

    // A genuine message (the lab's key) applies: weights 1:2:1. Keep its frame.
    let a = dist_send_sealed(&lab, "vcp", &entries([1, 2, 1]), Some(&key));
    settle();
    assert_eq!(weights(&lab), [1, 2, 1]);
    let a_frame = a["frame"].as_str().unwrap().to_string();
    // From the interconnection: unsealed, then sealed under another key. Dropped.
    dist_send(&lab, "vcp", &entries([3, 3, 3]));
    dist_send_sealed(&lab, "vcp", &entries([4, 4, 4]), Some(&other));
    settle();
    assert_eq!(weights(&lab), [1, 2, 1], "table unchanged");
    assert_eq!(drops(&lab, "lba"), [1, 1, 0, 0]);
    // The genuine frame altered in one byte of its body (a weight): forged.
    let mut altered = a_frame.clone();
    let at = 2 * (14 + 8 + 4 + 9);
    altered.replace_range(at..at + 2, "07");
    frame_send(&lab, "vcp", &altered);
    // The genuine frame again, after a newer genuine one: a replay, dropped.
    dist_send_sealed(&lab, "vcp", &entries([2, 1, 1]), Some(&key));
    settle();
    assert_eq!(weights(&lab), [2, 1, 1]);
    frame_send(&lab, "vcp", &a_frame);
    settle();
    assert_eq!(weights(&lab), [2, 1, 1], "the replay changed nothing");
    assert_eq!(drops(&lab, "lba"), [1, 2, 1, 0]);
    assert_eq!(
        drops(&lab, "lbb"),
        [1, 2, 1, 0],
        "lbb saw the same broadcasts"
    );
    // From outside: the genuine frame replayed by a host on net A is refused at the port.
    frame_send(&lab, "a1", &a_frame);
    settle();
    assert_eq!(drops(&lab, "lba")[3], 1);
    assert_eq!(weights(&lab), [2, 1, 1]);

    // A back-end: routes from a forger (unsealed, or under another key) never reach its
    // route writer, and its table stays as it was.
    let r1 = BACKENDS[0];
    let routes = json!({"type": "routes", "epoch": 9, "version": 1, "base": 0,
        "snapshot": true, "last": true,
        "routes": [{"prefix": "0.0.0.0", "len": 0, "via": ["10.1.0.66"]}]});
    let before = ask(&lab, "r1", "routes");
    // r1 saw the broadcasts above as well.
    let c0 = lab.counters("r1");
    assert_eq!(drop_count(&c0, "dist_unauthenticated"), 1);
    assert_eq!(drop_count(&c0, "dist_forged"), 2);
    assert_eq!(drop_count(&c0, "dist_replayed"), 1);
    for k in [None, Some(other.as_path())] {
        let o = lab.sh(
            "vcp",
            &[
                exe(),
                "dist",
                "send",
                "--iface",
                "eth0",
                "--dst",
                r1,
                "--json",
                &routes.to_string(),
            ]
            .into_iter()
            .chain(
                k.map(|k| ["--key-file", k.to_str().unwrap()])
                    .into_iter()
                    .flatten(),
            )
            .collect::<Vec<_>>(),
        );
        assert_eq!(serde_json::from_str::<Value>(&o).unwrap()["sent"], 1, "{o}");
    }
    settle();
    let c = lab.counters("r1");
    assert_eq!(drop_count(&c, "dist_unauthenticated"), 2);
    assert_eq!(drop_count(&c, "dist_forged"), 3);
    assert_eq!(event_count(&c, "dist_routes_received"), 0);
    assert_eq!(ask(&lab, "r1", "routes"), before, "r1's table unchanged");
    assert_eq!(ask(&lab, "r1", "fib")["version"], 0);
    let _ = std::fs::remove_file(&other);
}

/// `tessera lab export`: the lab's namespaces and links with no element started, then
/// each element started by hand from the exported configuration (its own directory, the
/// shared DIST key named by `[dist] key_file`): the same router comes up, one TTL
/// decrement from network A to network B, DIST authenticated.
#[test]
fn exported_configs_bring_the_same_router_up() {
    let elements = ["r1", "r2", "r3", "lba", "lbb"]; // back-ends first, as `lab up` does
    let roles: Vec<String> = elements.iter().map(|e| format!("{e}=external")).collect();
    let mut args = Vec::new();
    for r in &roles {
        args.extend(["--role", r.as_str()]);
    }
    let lab = TestLab::up(repo_path(LAB), &args);
    let out = std::env::temp_dir().join(format!("tessera-export-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let o = lab.tessera(&[
        "lab",
        "export",
        repo_path(LAB).to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(readme.contains("`tessera-balancer@lba`"), "{readme}");
    let mut children = Vec::new();
    for e in elements {
        let role = if e.starts_with("lb") {
            "balancer"
        } else {
            "forwarder"
        };
        let cfg = out.join(e).join(format!("{e}.toml"));
        let text = std::fs::read_to_string(&cfg).unwrap();
        assert!(text.contains("key_file = \"dist.key\""), "{text}");
        let sock = out.join(format!("{e}.sock"));
        let io = io_backend();
        let child = lab.spawn(
            e,
            &[
                exe(),
                role,
                "--config",
                cfg.to_str().unwrap(),
                "--control",
                sock.to_str().unwrap(),
                "--io",
                io,
            ],
        );
        children.push(child);
        let t = std::time::Instant::now();
        while control::ctlsock::request(&sock, "counters").is_err() {
            assert!(t.elapsed() < Duration::from_secs(15), "{e} did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // The LBs see three live back-ends (authenticated hellos), and hosts see one router.
    let lba = out.join("lba.sock");
    let t = std::time::Instant::now();
    loop {
        let b = control::ctlsock::request(&lba, "balance").unwrap();
        let live = b["entries"]
            .as_array()
            .map_or(0, |e| e.iter().filter(|x| x["live"] == true).count());
        if live == 3 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{b}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The first packets across set off a chain of resolutions (a1 and b1 for the router,
    // each back-end for both hosts, through the LBs); under the full suite's load one
    // first ping was lost to it once. Resolution has tests of its own: this one checks the
    // exported configs, so the neighbours are resolved first.
    let _ = lab.exec(
        "a1",
        &["ping", "-c", "2", "-i", "0.2", "-W", "2", "10.2.0.10"],
    );
    let p = lab.sh(
        "a1",
        &["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.2.0.10"],
    );
    assert!(
        p.contains("3 received") && p.matches("ttl=63").count() == 3,
        "{p}"
    );
    let c = control::ctlsock::request(&lba, "counters").unwrap();
    assert_eq!(drop_count(&c, "dist_unauthenticated"), 0, "{c}");
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
    drop(lab);
    std::fs::remove_dir_all(&out).unwrap();
}

/// Ping a1 to b1 through the router: three answers, one TTL decrement.
fn ping_through(lab: &TestLab) {
    let out = lab.sh(
        "a1",
        &["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.2.0.10"],
    );
    assert!(
        out.contains("3 received") && out.matches("ttl=63").count() == 3,
        "{out}"
    );
}

/// A directory of this test (`tag`) with the lab's element configs, an `[io]` section
/// with `io(element)` added where it gives one (the caller writes `lab.toml`).
fn lab_copy(tag: &str, io: impl Fn(&str) -> Option<&'static str>) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-ms-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("multistage")).unwrap();
    for e in ["lba", "lbb", "r1", "r2", "r3"] {
        let mut c =
            std::fs::read_to_string(repo_path(&format!("labs/multistage/{e}.toml"))).unwrap();
        if let Some(line) = io(e) {
            c.push_str(&format!("\n[io]\n{line}\n"));
        }
        std::fs::write(dir.join(format!("multistage/{e}.toml")), c).unwrap();
    }
    dir
}

/// The multistage lab with every element (LBs and back-ends) at `[io] workers = 2` on
/// two-queue links: the LBs see three live back-ends (the first workers' hellos,
/// authenticated, whichever worker they reach), hosts see one router, and flows spread
/// over both workers of each LB and over the back-ends' second workers.
#[test]
fn elements_with_two_workers() {
    // User space's workers: the fast path (on by default) would forward most frames itself.
    let dir = lab_copy("workers", |_| Some("workers = 2\nfast_path = false"));
    let mut topo = std::fs::read_to_string(repo_path(LAB)).unwrap();
    for a in [
        "b = \"lba:lba-ext\"",
        "b = \"lbb:lbb-ext\"",
        "a = \"lba:lba-int\"",
        "a = \"lbb:lbb-int\"",
        "a = \"r1:r1-int\"",
        "a = \"r2:r2-int\"",
        "a = \"r3:r3-int\"",
    ] {
        assert!(topo.contains(a), "{a}");
        topo = topo.replace(a, &format!("{a}\nqueues = 2"));
    }
    std::fs::write(dir.join("lab.toml"), topo).unwrap();
    let lab = TestLab::up(dir.join("lab.toml"), &[]);
    let live = || {
        ask(&lab, "lba", "balance")["entries"]
            .as_array()
            .map_or(0, |e| e.iter().filter(|x| x["live"] == true).count())
    };
    let t = Instant::now();
    while live() < 3 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{}",
            ask(&lab, "lba", "balance")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    ping_through(&lab);
    // Sixteen UDP flows at 10 Mbit/s each: the hosts' kernels spread them over the LBs'
    // two queues, the LBs over the back-ends, and the bridge's veths over each back-end's
    // two queues, all by their hash, and every flow carries the same share. (Sixteen TCP
    // flows did not: through user-space workers some flows back off for most of a
    // 2-second run, and a CI run's back-ends' second workers took 675 frames so.)
    lab.iperf3(
        "a1",
        "b1",
        "10.2.0.10",
        &["-u", "-b", "10M", "-t", "2", "-P", "16"],
    );
    let workers = |e: &str| -> Vec<u64> {
        let c = lab.counters(e);
        let w = c["workers"]
            .as_array()
            .unwrap_or_else(|| panic!("{e}: {c}"));
        assert_eq!(w.len(), 2, "{e}: {c}");
        w.iter()
            .map(|x| x["rx_packets"].as_u64().unwrap())
            .collect()
    };
    for lb in ["lba", "lbb"] {
        let rx = workers(lb);
        // Each worker carried a real share (16 flows all on one queue: 1 in 32,768).
        assert!(rx.iter().all(|n| *n > 1000), "{lb}: {rx:?}");
    }
    let second: u64 = ["r1", "r2", "r3"].iter().map(|r| workers(r)[1]).sum();
    assert!(
        second > 1000,
        "the back-ends' second workers took {second} frames"
    );
    // The LB's table counts every worker's packets (handed to the first every 10 ms):
    // all that were balanced before, at least.
    let c = lab.counters("lba");
    std::thread::sleep(Duration::from_millis(100));
    let balanced: u64 = packets_per_backend(&ask(&lab, "lba", "balance"))
        .iter()
        .sum();
    let before = event_count(&c, "balance_packets");
    assert!(
        before > 1000 && balanced >= before,
        "{balanced} in the table: {c}"
    );
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every element with its fast path: the back-ends' (from their configs: XDP on AF_XDP
/// ports, tcx on AF_PACKET ones, both serving their VLAN sub-interfaces) and, on AF_XDP
/// ports, the LBs' (`lab up --fast-path`: balance outward
/// in, int-to-ext back out). With `--fast-path` on AF_XDP the lab turns GRO on on the
/// switch's ports, so that their veths take what an XDP program redirects to them; the
/// hosts are left as containers have them (`--hosts plain`: GRO off, no XDP), so the
/// LBs send outward through their hand-off to tcx (the other multistage tests run with
/// the hosts' GRO on, where the LBs redirect to them in XDP). Hosts see one router (one
/// TTL decrement), TCP goes through, and what the LBs' fast paths balanced reaches `show
/// balance`.
#[test]
fn elements_with_the_fast_path() {
    let lbs = io_backend() != "packet";
    let dir = lab_copy("fast", |e| e.starts_with('r').then_some("fast_path = true"));
    std::fs::copy(repo_path(LAB), dir.join("lab.toml")).unwrap();
    let lab = TestLab::up(dir.join("lab.toml"), &["--fast-path", "--hosts", "plain"]);
    // On AF_PACKET ports the fast path is tcx's (socket buffers): GRO stays off.
    let gro = format!(
        "generic-receive-offload: {}",
        if lbs { "on" } else { "off" }
    );
    let ports = lab.sh("ic", &["ls", "/sys/class/net"]);
    for p in ports.split_whitespace().filter(|p| p.starts_with('p')) {
        let k = lab.sh("ic", &["ethtool", "-k", p]);
        assert!(k.contains(&gro), "{p}: {k}");
    }
    for h in ["a1", "b1"] {
        let k = lab.sh(h, &["ethtool", "-k", "eth0"]);
        assert!(k.contains("generic-receive-offload: off"), "{h}: {k}");
    }
    ping_through(&lab);
    let p = lab.sh(
        "a1",
        &[
            "ping",
            "-q",
            "-c",
            "200",
            "-i",
            "0.005",
            "-W",
            "2",
            "10.2.0.10",
        ],
    );
    assert!(p.contains(" 200 received"), "{p}");
    lab.iperf3("a1", "b1", "10.2.0.10", &["-t", "1", "-P", "4"]);
    let fast: u64 = ["r1", "r2", "r3"]
        .iter()
        .map(|r| lab.counters(r)["fast_path"]["forwarded"].as_u64().unwrap())
        .sum();
    // Every frame through a back-end is tagged both ways (VLAN 10 or 20 from an LB, the
    // other one to the next): in XDP or, on AF_PACKET ports, in tcx.
    assert!(
        fast > 1000,
        "the back-ends' fast paths forwarded {fast} frames"
    );
    // The LBs' first workers add what their fast paths balanced every 100 ms.
    std::thread::sleep(Duration::from_millis(300));
    for (lb, ext, int, out) in [
        ("lba", "lba-ext", "lba-int", 200),
        ("lbb", "lbb-ext", "lbb-int", 1000),
    ] {
        let c = lab.counters(lb);
        if !lbs {
            assert!(c["fast_path"].is_null(), "{lb}: {c}");
            continue;
        }
        let fp = &c["fast_path"]["interfaces"];
        let (balanced, outward) = (
            fp[ext]["rx_forwarded"].as_u64().unwrap(),
            fp[int]["rx_forwarded"].as_u64().unwrap(),
        );
        // The echo requests (a1 to lba) and replies (b1 to lbb) are balanced there; TCP's
        // segments with checksums left to offload are user space's.
        assert!(
            balanced >= 200,
            "{lb} balanced {balanced} in its fast path: {c}"
        );
        assert!(
            outward >= out,
            "{lb} sent {outward} outward in its fast path: {c}"
        );
        // Outward to a plain host: every one through the hand-off to tcx.
        let handed = fp[ext]["tx_handed_to_tcx"].as_u64().unwrap();
        assert!(handed >= out, "{lb} handed {handed} to tcx: {c}");
        assert_eq!(lab.port_fast(lb, ext)["egress"], "tcx", "{lb}");
        let counted: u64 = ask(&lab, lb, "balance")["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["packets"].as_u64().unwrap())
            .sum();
        assert!(
            counted >= balanced + event_count(&c, "balance_packets"),
            "{lb}: show balance counts {counted}: {c}"
        );
    }
    if lbs {
        // LB B, which sends the stream out to b1 through its hand-off, restarted under
        // it: its programs and the hand-off's link outlive the process, and nothing is
        // lost.
        let (g, s) = traffic(&lab, &["--rate", "20kpps", "--duration", "3"], || {
            std::thread::sleep(Duration::from_millis(800));
            lab.element("stop", "lbb");
            lab.element("start", "lbb");
        });
        let sent = g["sent"].as_u64().unwrap();
        let got = s["received"].as_u64().unwrap();
        eprintln!("lbb restarted under a stream to a plain host: sent {sent}, received {got}");
        assert!(sent > 30_000, "{g}");
        assert_eq!(got, sent, "lost {}: {s}", sent.saturating_sub(got));
        assert_eq!(lab.port_fast("lbb", "lbb-ext")["egress"], "tcx");
    }
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `tessera reload` and SIGHUP on an LB: a changed `[[backend]]` weight is applied in
/// place under traffic, without a lost packet (the table rebuilt, the fast path's state
/// published again), and so are changed `[[rule]]`s (the fast path's programs replaced
/// on every port); a file that does not load changes nothing and says the line and key;
/// a changed key a reload cannot apply is refused by name; the LB runs on throughout.
#[test]
fn an_lb_reloads_its_backends_without_losing_a_packet() {
    let dir = lab_copy("lb-reload", |_| None);
    std::fs::write(
        dir.join("lab.toml"),
        std::fs::read_to_string(repo_path(LAB)).unwrap(),
    )
    .unwrap();
    let lab = TestLab::up(dir.join("lab.toml"), &[]);
    lab.sh(
        "a1",
        &["ping", "-c", "2", "-i", "0.2", "-W", "2", "10.2.0.10"],
    );
    let file = dir.join("multistage/lba.toml");
    let original = std::fs::read_to_string(&file).unwrap();
    let r2 = "mac = \"02:00:00:00:01:02\"\ninterface = \"lba-int\"";
    assert!(original.contains(r2));
    let weights = |lab: &TestLab| -> Vec<u64> {
        BACKENDS
            .iter()
            .map(|m| {
                ask(lab, "lba", "balance")["entries"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|e| e["mac"] == *m)
                    .map_or(0, |e| e["weight"].as_u64().unwrap())
            })
            .collect()
    };
    assert_eq!(weights(&lab), [1, 1, 1]);
    let ctl = lab.control("lba");
    let reload = || lab.tessera(&["reload", "--control", ctl.to_str().unwrap()]);
    let (g, s) = traffic(
        &lab,
        &["--flows", "60", "--rate", "20kpps", "--duration", "2"],
        || {
            std::thread::sleep(Duration::from_millis(700));
            std::fs::write(&file, original.replace(r2, &format!("{r2}\nweight = 3"))).unwrap();
            let o = reload();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        },
    );
    assert_eq!(weights(&lab), [1, 3, 1]);
    // `tessera show config`: the reloaded weight, and the defaults.
    let o = lab.tessera(&["show", "config", "--control", ctl.to_str().unwrap()]);
    let shown = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success() && shown.contains("weight = 3") && shown.contains("mode = \"maglev\""),
        "{shown}"
    );
    eprintln!(
        "reload under traffic: sent {}, received {}, lost {}",
        g["sent"], s["received"], s["lost"]
    );
    assert_eq!(s["lost"], 0, "{s}");
    // A broken file: nothing changes, the line and key are named.
    std::fs::write(
        &file,
        original.replace(r2, &format!("{r2}\nweight = \"x\"")),
    )
    .unwrap();
    let o = reload();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("lba.toml:") && err.contains("weight"),
        "{err}"
    );
    assert_eq!(weights(&lab), [1, 3, 1]);
    // A key a reload cannot change: refused by name.
    std::fs::write(
        &file,
        original.replace("mode = \"maglev\"", "mode = \"hash\""),
    )
    .unwrap();
    let o = reload();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("balance.mode"), "{err}");
    // The classifier's rules in place: a rule that the traffic does not match, added
    // under it, loses nothing; then one that drops it (UDP to port 1234 from outside):
    // nothing more gets through, in user space and in the fast path's programs alike
    // (replaced on every port); removed again, the traffic flows.
    let base = original.replace(r2, &format!("{r2}\nweight = 3"));
    let rule = |name: &str, port: u16, action: &str| {
        format!("\n[[rule]]\nname = \"{name}\"\nfrom = \"external\"\nethertype = 0x0800\nprotocol = 17\nport = {port}\naction = \"{action}\"\n")
    };
    let (g, s) = traffic(
        &lab,
        &["--flows", "60", "--rate", "20kpps", "--duration", "2"],
        || {
            std::thread::sleep(Duration::from_millis(700));
            std::fs::write(
                &file,
                format!("{base}{}", rule("dns-to-cp", 53, "virtual-cp")),
            )
            .unwrap();
            let o = reload();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let v: Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(v["rules_changed"], true, "{v}");
        },
    );
    eprintln!(
        "rules reloaded under traffic: sent {}, received {}, lost {}",
        g["sent"], s["received"], s["lost"]
    );
    assert_eq!(s["lost"], 0, "{s}");
    assert!(ask(&lab, "lba", "rules").to_string().contains("dns-to-cp"));
    std::fs::write(&file, format!("{base}{}", rule("no-1234", 1234, "drop"))).unwrap();
    let o = reload();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dropped = drop_count(&lab.counters("lba"), "classify_no_rule");
    let (g, s) = traffic(&lab, &["--rate", "5kpps", "--duration", "0.5"], || {});
    assert_eq!(s["received"], 0, "{s}");
    let sent = g["sent"].as_u64().unwrap();
    let c = lab.counters("lba");
    assert!(
        drop_count(&c, "classify_no_rule") >= dropped + sent,
        "{sent} sent: {c}"
    );
    std::fs::write(&file, &base).unwrap();
    let o = reload();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(weights(&lab), [1, 3, 1]);
    let (g, s) = traffic(&lab, &["--rate", "5kpps", "--duration", "0.5"], || {});
    assert_eq!(s["received"], g["sent"], "{s}");
    if io_backend() != "packet" {
        let replaced = lab.log_lines("lba", &["classifier rules replaced"]);
        assert_eq!(replaced.len(), 3, "{replaced:?}");
        assert!(
            replaced.iter().all(|l| l.contains("programs=2")),
            "{replaced:?}"
        );
    }
    // SIGHUP: back to the original weights.
    std::fs::write(&file, &original).unwrap();
    let pid = lab.node("lba")["pid"].as_i64().unwrap() as i32;
    // SAFETY: the lab started this process for this test.
    unsafe { libc::kill(pid, libc::SIGHUP) };
    let t = Instant::now();
    while weights(&lab) != [1, 1, 1] && t.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(weights(&lab), [1, 1, 1], "{}", lab.logs("lba"));
    assert!(lab.logs("lba").contains("config reloaded"));
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Each state change an operator cares about is logged once (docs/operate.md, "Logs"): a
/// port's link down and up again, neighbours learned, a back-end dead and live again at
/// the LBs, a config reloaded.
#[test]
fn state_changes_are_logged_once_each() {
    let lab = lab();
    let wait = |what: &str, f: &dyn Fn() -> bool| {
        let t = Instant::now();
        while !f() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "waited 10 s for {what}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // Neighbours: the back-end that carries a1's ping to b1 learns b1, once.
    lab.sh(
        "a1",
        &["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.2.0.10"],
    );
    let learned = || -> Vec<usize> {
        ["r1", "r2", "r3"]
            .iter()
            .map(|r| {
                lab.log_lines(r, &["neighbours learned", "10.2.0.10 "])
                    .len()
            })
            .collect()
    };
    wait("a back-end's neighbours learned", &|| {
        learned().iter().sum::<usize>() > 0
    });
    assert!(
        learned().iter().all(|&n| n <= 1),
        "{learned:?}",
        learned = learned()
    );

    // A port's link: a1 takes its end down, so lba's external port loses its carrier;
    // then up again. One line each, at the change.
    let down = || lab.log_lines("lba", &["port down", "port=lba-ext", "at_start=false"]);
    let up = || lab.log_lines("lba", &["port up", "port=lba-ext"]);
    assert!(down().is_empty() && up().is_empty(), "{}", lab.log("lba"));
    lab.sh("a1", &["ip", "link", "set", "eth0", "down"]);
    wait("lba's port down", &|| !down().is_empty());
    lab.sh("a1", &["ip", "link", "set", "eth0", "up"]);
    wait("lba's port up", &|| !up().is_empty());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!((down().len(), up().len()), (1, 1), "{}", lab.log("lba"));

    // A back-end dead, then live again: each LB says so once per change (a configured
    // back-end starts live, so there is no line before).
    let r2 = BACKENDS[1];
    let dead = |lb: &str| lab.log_lines(lb, &["back-end down", r2]);
    let live = |lb: &str| lab.log_lines(lb, &["back-end up", r2]);
    lab.element("stop", "r2");
    wait("r2 dead at both LBs", &|| {
        !dead("lba").is_empty() && !dead("lbb").is_empty()
    });
    lab.element("start", "r2");
    wait("r2 live again at both LBs", &|| {
        !live("lba").is_empty() && !live("lbb").is_empty()
    });
    std::thread::sleep(Duration::from_millis(500));
    for lb in ["lba", "lbb"] {
        assert_eq!((dead(lb).len(), live(lb).len()), (1, 1), "{}", lab.log(lb));
    }

    // A reload: one line.
    let ctl = lab.control("r1");
    let o = lab.tessera(&["reload", "--control", ctl.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        lab.log_lines("r1", &["config reloaded"]).len(),
        1,
        "{}",
        lab.log("r1")
    );
}

/// `spare.role` of an LB of labs/multistage-ha.toml.
fn spare_role(lab: &TestLab, lb: &str) -> String {
    ask(lab, lb, "balance")["spare"]["role"]
        .as_str()
        .unwrap_or("?")
        .to_string()
}

/// An LB's machine fails: its process killed at once and its links down (its fast path,
/// which outlives the process for a hand-over, with them).
fn fail_lb(lab: &TestLab, lb: &str) {
    let pid = std::fs::read_to_string(
        Path::new(lab::topology::RUN_DIR)
            .join(&lab.name)
            .join(format!("{lb}.pid")),
    )
    .unwrap();
    assert!(std::process::Command::new("kill")
        .args(["-KILL", pid.trim()])
        .status()
        .unwrap()
        .success());
    let ns = format!("ts-{}-{lb}", lab.name);
    for ifname in [format!("{lb}-ext"), format!("{lb}-int")] {
        assert!(std::process::Command::new("ip")
            .args(["-n", &ns, "link", "set", &ifname, "down"])
            .status()
            .unwrap()
            .success());
    }
}

/// labs/multistage-ha.toml: a spare LB beside each active one. The higher-ranked LB of
/// each pair is active, the other standby; under a 10 kpps stream from a1 to b1, network
/// B's active LB fails (the egress side: the standby's probes must teach the
/// interconnection where b1 is), then network A's (the ingress side: its gratuitous ARP
/// must teach network A's switch where the router's MAC is): each takeover loses at most
/// three hello intervals of the stream (100 ms each: 3,000 frames).
#[test]
fn a_spare_lb_takes_over_within_three_hello_intervals() {
    let lab = TestLab::up(repo_path("labs/multistage-ha.toml"), &[]);
    let t = Instant::now();
    let want = [
        ("lba", "active"),
        ("lba2", "standby"),
        ("lbb", "active"),
        ("lbb2", "standby"),
    ];
    while want.iter().any(|(lb, r)| spare_role(&lab, lb) != *r) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "roles: {:?}",
            want.map(|(lb, _)| (lb, spare_role(&lab, lb)))
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    ping_through(&lab);
    // A rolling upgrade of the LBs under the stream (`lab upgrade --only balancer`): the
    // standbys first, then the active ones, each pair settled (one active, each hearing
    // the other) before the next.
    let steps = std::cell::RefCell::new(String::new());
    let said = std::cell::RefCell::new(String::new());
    let (g, s) = traffic(
        &lab,
        &["--flows", "60", "--rate", "10kpps", "--duration", "4"],
        || {
            std::thread::sleep(Duration::from_millis(500));
            let o = lab.tessera(&[
                "lab",
                "upgrade",
                &lab.file.to_string_lossy(),
                "--name",
                &lab.name,
                "--only",
                "balancer",
            ]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            *steps.borrow_mut() = String::from_utf8_lossy(&o.stdout).into_owned();
            *said.borrow_mut() = String::from_utf8_lossy(&o.stderr).into_owned();
        },
    );
    let lost = g["sent"].as_u64().unwrap() - s["received"].as_u64().unwrap();
    eprintln!("LBs upgraded under 10 kpps: {lost} lost");
    // Each active LB, stopping, tells its spare (a last hello), which takes over at its
    // next poll; on AF_XDP the LB's programs forward what still reaches it until it exits,
    // and its next start begins standby (the hand-over withdrawn), as a restarted standby's
    // does. 2026-11-27: AF_PACKET 154-310 lost in eight runs (3,840-5,388 when the spare
    // waited 2.5 hello intervals), AF_XDP 0-78 in four (880-2,517 when restarted LBs
    // resumed). Bound: one hello interval for each of the two takeovers.
    assert!(
        lost <= 2 * 1_000,
        "{lost} lost; the upgrade's steps: {}\n{}\n{}\n{}",
        steps.borrow(),
        said.borrow(),
        ["ic", "neta", "netb"]
            .map(|sw| format!(
                "--- switch {sw}: {}",
                String::from_utf8_lossy(
                    &lab.exec(sw, &["bridge", "fdb", "show", "br", "br0", "dynamic"])
                        .stdout
                )
            ))
            .join("\n"),
        ["lba", "lba2", "lbb", "lbb2"]
            .map(|lb| format!(
                "--- {lb}: {}\n{}\n{}",
                ask(&lab, lb, "balance")["spare"],
                ask(&lab, lb, "counters"),
                lab.log(lb)
            ))
            .join("\n")
    );
    let v: Value = serde_json::from_str(&steps.borrow()).unwrap();
    let order: Vec<(&str, &str)> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["element"].as_str().unwrap(),
                s["spare"]["was"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        order,
        [
            ("lba2", "standby"),
            ("lbb2", "standby"),
            ("lba", "active"),
            ("lbb", "active")
        ],
        "{v}"
    );
    // Each pair has one active LB again: the spare, told by the active LB as it stopped;
    // the restarted one stands by.
    for (a, b) in [("lba", "lba2"), ("lbb", "lbb2")] {
        let before = lab.last_log(a);
        assert!(
            before.contains("a last hello"),
            "{a} stopped without telling its spare:\n{before}"
        );
        let roles = (spare_role(&lab, a), spare_role(&lab, b));
        assert_eq!(roles, ("standby".into(), "active".into()), "{a}, {b}");
    }
    for pair in [("lbb", "lbb2"), ("lba", "lba2")] {
        let (failed, spare) = if spare_role(&lab, pair.0) == "active" {
            pair
        } else {
            (pair.1, pair.0)
        };
        let took = |c: &Value| {
            (
                event_count(c, "spare_takeovers"),
                event_count(c, "spare_announced"),
                event_count(c, "spare_probes"),
            )
        };
        let before = took(&ask(&lab, spare, "counters"));
        let (g, s) = traffic(
            &lab,
            &["--flows", "60", "--rate", "10kpps", "--duration", "4"],
            || {
                std::thread::sleep(Duration::from_millis(1500));
                fail_lb(&lab, failed);
            },
        );
        let sent = g["sent"].as_u64().unwrap();
        let received = s["received"].as_u64().unwrap();
        let lost = sent.saturating_sub(received);
        eprintln!("{failed} failed: {lost} of {sent} lost");
        assert!(sent > 30_000, "{g}");
        assert!(lost <= 3_000, "{failed} failed: {lost} of {sent} lost; {s}");
        let b = ask(&lab, spare, "balance");
        assert_eq!(b["spare"]["role"], "active", "{b}");
        let after = took(&ask(&lab, spare, "counters"));
        // One takeover, announced, every other address of its /24 asked for its MAC.
        assert_eq!(after.0 - before.0, 1, "{b}");
        assert!(after.1 > before.1);
        assert_eq!(
            after.2 - before.2,
            253,
            "{}\n{}",
            ask(&lab, spare, "counters"),
            lab.log(spare)
        );
    }
    ping_through(&lab);
}
