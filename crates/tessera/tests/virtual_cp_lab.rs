//! The Virtual-CP of labs/virtual-cp.toml: `tessera controller` with FRR (zebra, staticd,
//! bgpd) in its namespace, an outside router running BIRD 2, and three back-ends that must
//! all hold the controller's table.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

const LAB: &str = "labs/virtual-cp.toml";
const BACKENDS: [&str; 3] = ["r1", "r2", "r3"];

fn show(lab: &TestLab, what: &str, element: &str) -> Value {
    lab.show_json(what, element)
}

/// True when the controller holds `routes` routes and every back-end acknowledged its
/// version with the same route count and digest.
fn consistent(fib: &Value, routes: u64) -> bool {
    let b = fib["backends"].as_array().unwrap();
    fib["routes"] == routes
        && b.len() == BACKENDS.len()
        && b.iter().all(|x| {
            x["consistent"] == true && x["routes"] == routes && x["digest"] == fib["digest"]
        })
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < timeout, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    t.elapsed()
}

fn need_routing_suites() {
    let bird = std::process::Command::new("bird").arg("--version").output();
    assert!(
        Path::new("/usr/lib/frr/zebra").exists() && bird.is_ok(),
        "this test needs FRR and BIRD 2 (Debian's frr and bird2): `bash scripts/setup` installs them"
    );
}

#[test]
fn routes_from_frr_and_an_outside_bird_reach_every_back_end() {
    need_routing_suites();
    let lab = TestLab::up(repo_path(LAB), &[]);
    // staticd's two routes, resolved over the TAPs the controller presents, reach zebra,
    // the controller (FPM) and every back-end.
    let fib = || show(&lab, "fib", "vcp");
    wait_until(
        "static routes on every back-end",
        Duration::from_secs(30),
        || consistent(&fib(), 2),
    );
    let f = fib();
    assert_eq!(f["fpm"]["connected"], true, "{f}");
    assert!(
        f["fpm"]["skipped_no_gateway"].as_u64().unwrap() >= 2,
        "connected networks: {f}"
    );
    for r in BACKENDS {
        let b = show(&lab, "fib", r);
        assert_eq!(
            (b["epoch"].clone(), b["digest"].clone()),
            (f["epoch"].clone(), f["digest"].clone()),
            "{r}: {b}"
        );
    }
    // The controller found every element and set the LBs' tables: three live back-ends,
    // weighted by their link speed.
    let elements = show(&lab, "elements", "vcp");
    assert_eq!(elements.as_array().unwrap().len(), 5, "{elements}");
    let bal = show(&lab, "balance", "lba");
    let entries = bal["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 3, "{bal}");
    assert!(entries.iter().all(|e| e["live"] == true), "{bal}");

    // An outside router: BIRD 2 on a1 (AS 65001) peers with the router (AS 65000) through
    // LB A's Virtual-CP redirect and the controller's TAP, and announces 192.0.2.0/24.
    lab.sh("a1", &["ip", "addr", "add", "192.0.2.1/32", "dev", "lo"]);
    let run = Path::new(lab::topology::RUN_DIR).join(&lab.name);
    let ctl = run.join("bird-a1.ctl").to_string_lossy().into_owned();
    let conf = repo_path("labs/virtual-cp/bird-a1.conf");
    lab.sh(
        "a1",
        &[
            "bird",
            "-c",
            &conf.to_string_lossy(),
            "-s",
            &ctl,
            "-P",
            &run.join("bird-a1.pid").to_string_lossy(),
        ],
    );
    let took = wait_until(
        "BIRD's route on every back-end",
        Duration::from_secs(60),
        || consistent(&fib(), 3),
    );
    eprintln!("BGP session up and 192.0.2.0/24 on every back-end {took:?} after BIRD started");
    let birdc = |args: &[&str]| {
        let o = std::process::Command::new("birdc")
            .args(["-s", &ctl])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert!(birdc(&["show", "protocols"]).contains("Established"));
    // The outside router sees one neighbour, and learns the router's routes from it.
    let routes = birdc(&["show", "route"]);
    assert!(
        routes.contains("198.51.100.0/24") && routes.contains("via 10.1.0.1"),
        "{routes}"
    );

    // A host behind the other network reaches it through the router: one TTL decrement.
    let out = lab.sh(
        "b1",
        &["ping", "-c", "3", "-i", "0.2", "-W", "2", "192.0.2.1"],
    );
    assert!(out.contains("ttl=63"), "{out}");

    // Withdrawn by the peer: gone from every back-end.
    birdc(&["disable", "static1"]);
    let took = wait_until(
        "the withdrawal on every back-end",
        Duration::from_secs(10),
        || consistent(&fib(), 2) && BACKENDS.iter().all(|r| show(&lab, "fib", r)["routes"] == 2),
    );
    eprintln!("withdrawal: gone from every back-end {took:?} after `birdc disable`");
    let out = lab.exec("b1", &["ping", "-c", "1", "-W", "1", "192.0.2.1"]);
    assert!(!out.status.success(), "no route any more");

    // A route added on the controller itself goes the same way.
    let o = lab.tessera(&[
        "route",
        "add",
        "100.64.0.0/10",
        "--via",
        "10.1.0.10",
        "--control",
        &lab.control("vcp").to_string_lossy(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    wait_until(
        "a controller route on every back-end",
        Duration::from_secs(10),
        || consistent(&fib(), 3),
    );

    // zebra restarts: it reconnects to FPM and resends; the controller keeps every route
    // meanwhile (the back-ends go on forwarding) and the table never changes.
    let before = fib();
    let pid_file = run.join("frr-vcp/zebra.pid");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let argv: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    // SAFETY: kill(2) on the zebra this lab started (its pid file).
    unsafe { libc::kill(pid, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(500));
    let argv: Vec<&str> = argv.iter().map(|a| a.as_str()).collect();
    lab.sh("vcp", &argv);
    let mut versions = std::collections::BTreeSet::new();
    wait_until(
        "zebra's resend after its restart",
        Duration::from_secs(40),
        || {
            let f = fib();
            versions.insert(f["version"].as_u64().unwrap());
            f["fpm"]["connections"] == 2 && f["fpm"]["connected"] == true && f["fpm"]["stale"] == 0
        },
    );
    let after = fib();
    assert_eq!(
        versions.into_iter().collect::<Vec<_>>(),
        vec![before["version"].as_u64().unwrap()],
        "the table changed while zebra restarted: {before} -> {after}"
    );
    assert!(consistent(&after, 3), "{after}");

    // Nothing was malformed or lost for good on the way.
    let c = show(&lab, "counters", "vcp");
    assert_eq!(c["dist_malformed"], 0, "{c}");
    assert!(
        c["tap_in"].as_u64().unwrap() > 0 && c["tap_out"].as_u64().unwrap() > 0,
        "{c}"
    );
    for r in BACKENDS {
        let k = lab.counters(r);
        assert_eq!(drop_count(&k, "dist_malformed"), 0, "{r}");
        assert_eq!(drop_count(&k, "dist_queue_full"), 0, "{r}");
    }
}
