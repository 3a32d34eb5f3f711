//! `tessera bench contend` end to end on a 100 Mbit/s port with short points: the study's
//! table, a 2 x 2 grid with its plots, sequence-number traces and the TCP runs through a
//! delay line, for our fair switch and for a Linux bridge shaped by tbf.

mod common;

use common::*;
use serde_json::Value;

#[test]
fn contend_bench_writes_the_table_grid_traces_and_tcp() {
    // The lab helpers' setup: root and tools present, stale labs swept.
    drop(TestLab::up(test_path("labs/pair.toml"), &[]));
    // The bridge does not depend on our packet I/O backend: it runs in the first pass
    // (AF_XDP) only; our switch runs in both.
    let bridge = io_backend() != "packet";
    let devices = if bridge {
        "switch-fair,bridge-tbf"
    } else {
        "switch-fair"
    };
    let n = if bridge { 2 } else { 1 };
    let out = std::env::temp_dir().join(format!("tessera-bc-{}", std::process::id()));
    let o = std::process::Command::new(exe())
        .args([
            "bench",
            "contend",
            "--only",
            devices,
            "--port-mbps",
            "100",
            "--seconds",
            "1",
            "--grid-step",
            "50",
            "--grid-seconds",
            "0.4",
            "--tcp-seconds",
            "2",
            "--rtt",
            "20",
            "--cc",
            "cubic",
            "--io",
            io_backend(),
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let table = v["table"].as_array().unwrap();
    assert_eq!(table.len(), 4 * n, "{err}");
    for row in table {
        let flows = row["flows"].as_array().unwrap();
        assert_eq!(flows.len(), 2, "{row}");
        for f in flows {
            assert!(f["sent"].as_u64().unwrap() > 1000, "{f}");
            let r = &f["rate_100ms_mbps"];
            assert!(r["intervals"].as_u64().unwrap() >= 5, "{f}");
            assert!(
                f["rate_1ms_mbps"]["intervals"].as_u64().unwrap() >= 500,
                "{f}"
            );
            // The port carries at most its rate (plus a little for bursts from the buffer
            // at the edges of an interval).
            assert!(r["mean"].as_f64().unwrap() <= 110.0, "{f}");
            if row["device"] == "switch-fair" {
                // Deficit round robin over two inputs: neither starves. Measured
                // 99-100% of the fair share at 100 Mbit/s.
                let share = f["min_100ms_over_fair_share"].as_f64().unwrap();
                assert!(share >= 0.45, "{row}");
            }
        }
    }
    // 2 x 2 grid points per device.
    assert_eq!(v["grid"].as_array().unwrap().len(), 4 * n);
    // Per device: one congestion control, with and without SACK, one round-trip time.
    let tcp = v["tcp"].as_array().unwrap();
    assert_eq!(tcp.len(), 2 * n, "{err}");
    for r in tcp {
        // The delay line adds 20 ms to the round trip.
        let rtt = r["ping_rtt_ms"].as_f64().unwrap();
        assert!((19.0..200.0).contains(&rtt), "{r}");
        assert!(r["total_mbps"].as_f64().unwrap() > 1.0, "{r}");
    }
    let mut files = vec![
        "results.json",
        "table.md",
        "grid-switch-fair-ratio.png",
        "grid-switch-fair-stddev.png",
        "trace-switch-fair-100+100.png",
        "traces/switch-fair-80+60.csv",
    ];
    if bridge {
        files.extend(["grid-bridge-tbf-ratio.png", "traces/bridge-tbf-80+60.csv"]);
    }
    for f in files {
        let m = std::fs::metadata(out.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(m.len() > 100, "{f} is nearly empty");
    }
    let md = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert!(md.contains("| switch-fair | 100+100 | 1 |"), "{md}");
    assert!(md.contains("| switch-fair | cubic | 20"), "{md}");
    let _ = std::fs::remove_dir_all(&out);
}
