//! Placement (`cpus` on lab nodes, an element's `[io] cpus`) and `tessera bench scale
//! --quick` end to end.

mod common;

use common::*;

/// An element kept to CPU 1 runs every thread there and, on AF_XDP ports (whose XDP
/// program gives a veth NAPI), its ports' receive work in NAPI threads pinned there; a host
/// kept to CPU 0 runs what `lab exec` starts there. On AF_PACKET ports with GRO off there
/// is no NAPI to move: `lab show` and the element's log say so. It still forwards.
#[test]
fn elements_and_hosts_run_on_their_cpus() {
    let lab = TestLab::up(test_path("labs/placed.toml"), &[]);
    let out = lab.tessera(&[
        "lab",
        "exec",
        &lab.file.to_string_lossy(),
        "--name",
        &lab.name,
        "a",
        "--",
        "grep",
        "Cpus_allowed_list",
        "/proc/self/status",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .nth(1),
        Some("0"),
        "{out:?}"
    );
    lab.sh(
        "a",
        &["ping", "-c", "2", "-i", "0.2", "-W", "2", "10.2.0.10"],
    );
    let r = lab.node("r");
    let pl = &r["placement"];
    assert_eq!(pl["cpus"], "1", "{r}");
    let threads = pl["threads"].as_array().unwrap();
    assert!(!threads.is_empty(), "{r}");
    for t in threads {
        assert_eq!(t["cpus"], "1", "thread {t} of {r}");
    }
    for port in ["r-eth0", "r-eth1"] {
        let napi = pl["napi"][port].as_array().unwrap();
        if io_backend() == "packet" {
            assert!(napi.is_empty(), "{port}: {r}");
        } else {
            assert!(!napi.is_empty(), "{port} has no NAPI: {r}");
            for n in napi {
                assert_eq!(n["cpus"], "1", "{port}: {r}");
            }
        }
    }
    let log = lab.logs("r");
    assert!(log.contains("placed"), "{log}");
    if io_backend() == "packet" {
        assert!(log.contains("no NAPI thread"), "{log}");
    }
    // The host without cpus: no placement of its own, its interface without NAPI.
    let b = lab.node("b");
    assert!(b["placement"]["cpus"].is_null(), "{b}");
}

#[test]
fn quick_scale_bench_writes_results_placement_and_a_plot() {
    // The lab helpers' setup: root and tools present, stale labs swept.
    drop(TestLab::up(test_path("labs/pair.toml"), &[]));
    let out = std::env::temp_dir().join(format!("tessera-scale-{}", std::process::id()));
    let o = std::process::Command::new(exe())
        .args([
            "bench",
            "scale",
            "--ports",
            "1",
            "--backends",
            "1,2",
            "--quick",
            "--only",
            "multistage,forwarder,star",
            "--spread",
            "--seconds",
            "0.3",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let brief: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let cores = std::thread::available_parallelism().unwrap().get() as u64;
    // `--spread`: the table's prefixes through the receiving network's host, and the
    // sender's destinations drawn from them.
    assert_eq!(v["destinations"], "table", "{brief}");
    let routes = std::fs::read_to_string(out.join("table-10-spread.txt")).unwrap();
    assert_eq!(routes.lines().count(), 10, "{routes}");
    assert!(
        routes.lines().all(|l| l.ends_with(" 10.2.0.10")),
        "{routes}"
    );
    let dsts = std::fs::read_to_string(out.join("table-10-spread-to2.txt")).unwrap();
    assert_eq!(dsts.lines().count(), 10, "{dsts}");
    assert_eq!(v["cores"].as_u64(), Some(cores), "{brief}");
    assert!(
        v["multistage_over_single"].as_f64().unwrap() > 0.0,
        "{brief}"
    );
    // The single forwarder, a multistage router per number of back-ends and the star of
    // two members, each placed or saying why not.
    let placement = v["placement"].as_array().unwrap();
    assert_eq!(placement.len(), 4, "{brief}");
    for p in placement {
        let need = match p["contender"].as_str().unwrap() {
            "multistage N=1" => 2 * 2 + 3,
            "multistage N=2" => 2 * 2 + 4,
            "star (2 members)" => 2 * 2 + 3,
            _ => 2 * 2 + 1,
        };
        assert_eq!(p["placed"], cores >= need, "{p}");
        let note = p["note"].as_str().unwrap();
        assert!(
            note.starts_with(if cores >= need {
                "placed"
            } else {
                "not placed"
            }),
            "{p}"
        );
    }
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 4, "{brief}");
    for r in results {
        assert!(r["peak_pps"].as_f64().unwrap() > 1000.0, "{}", r["label"]);
        assert!(r["model_pps"].as_f64().unwrap() > 0.0, "{}", r["label"]);
        assert!(r["over_single"].as_f64().unwrap() > 0.0, "{}", r["label"]);
        // Every point says which of the lab's interfaces dropped frames in it (`drops`:
        // `node:ifname` and how many, none where nothing dropped).
        for p in r["points"].as_array().unwrap() {
            for (at, n) in p["drops"].as_object().unwrap() {
                let (node, ifname) = at.split_once(':').unwrap();
                assert!(
                    ["h", "lb", "r", "s", "ic"]
                        .iter()
                        .any(|k| node.starts_with(k)),
                    "{p}"
                );
                assert!(!ifname.is_empty() && n.as_u64().unwrap() > 0, "{p}");
            }
        }
    }
    // NAPI threads at real-time priority unless `--rt-napi false`.
    assert_eq!(v["rt_napi"], true, "{brief}");
    // Every element of the router of two back-ends was measured, with its NAPI threads;
    // the back-ends' shares add up to the whole, the LBs' to two (in and out).
    let two = results
        .iter()
        .find(|r| r["label"] == "multistage N=2")
        .unwrap();
    let elements = two["elements"].as_array().unwrap();
    let names: Vec<&str> = elements
        .iter()
        .map(|e| e["element"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["lb1", "lb2", "r1", "r2"], "{two}");
    for e in elements {
        assert!(e["napi_threads"].as_u64().unwrap() > 0, "{e}");
        assert!(e["fast_path_packets"].as_u64().unwrap() > 0, "{e}");
    }
    let share = |p: &str| -> f64 {
        elements
            .iter()
            .filter(|e| e["element"].as_str().unwrap().starts_with(p))
            .map(|e| e["share"].as_f64().unwrap())
            .sum()
    };
    assert!((share("r") - 1.0).abs() < 0.01, "{two}");
    assert!((share("lb") - 2.0).abs() < 0.01, "{two}");
    // Both back-ends got flows.
    for e in elements
        .iter()
        .filter(|e| e["element"].as_str().unwrap().starts_with('r'))
    {
        assert!(e["share"].as_f64().unwrap() > 0.1, "{two}");
    }
    // The star: both members measured, their fast paths carrying the frames; each frame
    // crosses both (in at one, out at the other), so their shares add up to two.
    let star = results.iter().find(|r| r["contender"] == "star").unwrap();
    let members = star["elements"].as_array().unwrap();
    let names: Vec<&str> = members
        .iter()
        .map(|e| e["element"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["s1", "s2"], "{star}");
    for e in members {
        assert!(e["fast_path_packets"].as_u64().unwrap() > 0, "{e}");
    }
    let shares: f64 = members.iter().map(|e| e["share"].as_f64().unwrap()).sum();
    assert!((shares - 2.0).abs() < 0.01, "{star}");
    assert_eq!(star["interconnect"]["kind"], "switch", "{star}");
    assert!(
        v["model"]["predicted"].as_array().unwrap().len() >= 4,
        "{}",
        v["model"]
    );
    let png = std::fs::read(out.join("scale-64B-10-prefixes.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(!String::from_utf8_lossy(
        &std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout
    )
    .contains(&format!("sc{}", std::process::id())));
    std::fs::remove_dir_all(&out).unwrap();
}
