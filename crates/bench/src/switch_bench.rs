//! `tessera bench switch`: our switch's forwarding rate against the Linux bridge's, in
//! one run (issue 16). One generator into one sink through each device under test: the
//! generator straight into the sink (its ceiling), a Linux bridge, and `tessera switch`
//! (fair and FIFO, no shaping: what the switch itself forwards), at the generator's
//! highest rate, for each frame size. For our switch, the CPU seconds it used and so its
//! frames per CPU-second; the bridge forwards inside the kernel's receive path, charged
//! to whichever core sent the frame, so it has no such figure of its own.

use crate::forward_bench::{lab_mac, lab_point, SinkKind};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

pub struct SwitchOpts {
    pub exe: PathBuf,
    pub out: PathBuf,
    pub seconds: f64,
    pub sizes: Vec<usize>,
    /// Our switch's packet I/O backends, one pass each (empty: the config's default).
    pub io: Vec<String>,
}

fn write(path: &Path, s: &str) -> Result<(), String> {
    std::fs::write(path, s).map_err(|e| format!("{}: {e}", path.display()))
}

const HOSTS: &str = "[[host]]\nname = \"src1\"\ninterfaces = [{ name = \"eth0\", address = \"10.9.0.1/24\" }]\n[[host]]\nname = \"sink1\"\ninterfaces = [{ name = \"eth0\", address = \"10.9.0.2/24\" }]\n";

/// The topology of one device under test: "direct", "bridge", "switch-fair",
/// "switch-fifo".
fn topology(dut: &str, dir: &Path) -> Result<PathBuf, String> {
    let t = dir.join(format!("{dut}.toml"));
    let body = match dut {
        "direct" => "[[link]]\na = \"src1:eth0\"\nb = \"sink1:eth0\"\n".to_string(),
        "bridge" => "[[switch]]\nname = \"sw\"\n[[link]]\na = \"src1:eth0\"\nb = \"sw\"\n[[link]]\na = \"sink1:eth0\"\nb = \"sw\"\n".to_string(),
        _ => {
            let mode = dut.trim_start_matches("switch-");
            write(
                &dir.join(format!("{dut}-sw.toml")),
                &format!("[switch]\nmode = \"{mode}\"\n[[port]]\nname = \"sw-a\"\n[[port]]\nname = \"sw-b\"\n"),
            )?;
            format!("[[element]]\nname = \"sw\"\nrole = \"switch\"\nconfig = \"{dut}-sw.toml\"\n[[link]]\na = \"src1:eth0\"\nb = \"sw:sw-a\"\n[[link]]\na = \"sink1:eth0\"\nb = \"sw:sw-b\"\n")
        }
    };
    write(&t, &format!("name = \"x\"\n{HOSTS}{body}"))?;
    Ok(t)
}

/// CPU seconds the process `pid` has used (0 if it is gone).
fn cpu_seconds(pid: i32) -> f64 {
    crate::process_cpu_seconds(pid).unwrap_or(0.0)
}

pub fn run(opts: &SwitchOpts, progress: &mut dyn FnMut(&str)) -> Result<Value, String> {
    std::fs::create_dir_all(&opts.out).map_err(|e| format!("{}: {e}", opts.out.display()))?;
    let sizes = if opts.sizes.is_empty() {
        vec![64, 1470]
    } else {
        opts.sizes.clone()
    };
    if let Some(b) = sizes.iter().find(|b| !(64..=1518).contains(*b)) {
        return Err(format!("--sizes {b}: frames are 64 to 1518 bytes"));
    }
    let ios: Vec<Option<String>> = if opts.io.is_empty() {
        vec![None]
    } else {
        opts.io.iter().cloned().map(Some).collect()
    };
    let mut duts: Vec<(String, Option<String>)> =
        vec![("direct".into(), None), ("bridge".into(), None)];
    for io in &ios {
        for mode in ["fair", "fifo"] {
            duts.push((format!("switch-{mode}"), io.clone()));
        }
    }
    let mut rows = Vec::new();
    for (dut, io) in &duts {
        let topo = topology(dut, &opts.out)?;
        let name = format!("bs{}", std::process::id());
        let mut l = lab::Lab::load(&topo, Some(&name), opts.exe.clone())?;
        l.io = io.clone();
        l.up()?;
        let label = match io {
            Some(b) => format!("{dut}-{b}"),
            None => dut.clone(),
        };
        let r = (|| -> Result<(), String> {
            let mac = lab_mac(&l, "sink1", "eth0")?;
            for &size in &sizes {
                let pid = std::fs::read_to_string(l.run_dir().join("sw.pid"))
                    .ok()
                    .and_then(|s| s.trim().parse::<i32>().ok());
                let cpu0 = pid.map(cpu_seconds);
                let dst = vec![
                    "--dst-mac".to_string(),
                    mac.clone(),
                    "--src".into(),
                    "10.9.0.1".into(),
                    "--dst".into(),
                    "10.9.0.2".into(),
                ];
                let p = lab_point(
                    &l,
                    &opts.exe,
                    opts.seconds,
                    size,
                    &[("src1", dst, "max".into())],
                    &["sink1"],
                    SinkKind::AfPacket,
                )?;
                let cpu = match (pid, cpu0) {
                    (Some(pid), Some(c0)) => Some(cpu_seconds(pid) - c0),
                    _ => None,
                };
                let forwarded = p.forwarded_pps;
                let per_cpu = cpu.filter(|c| *c > 0.0).map(|c| p.received as f64 / c);
                progress(&format!(
                    "{label} {size} B: offered {:.0} pps, forwarded {forwarded:.0} pps{}",
                    p.offered_pps,
                    per_cpu.map_or(String::new(), |x| format!(", {x:.0} frames per CPU-second"))
                ));
                rows.push(json!({
                    "device": label, "frame_bytes": size, "offered_pps": p.offered_pps.round(),
                    "sent": p.sent, "received": p.received, "forwarded_pps": forwarded.round(),
                    "switch_cpu_s": cpu, "frames_per_cpu_second": per_cpu.map(|x| x.round()),
                }));
            }
            Ok(())
        })();
        let _ = l.down();
        r?;
    }
    let v = json!({"bench": "switch", "seconds_per_point": opts.seconds, "points": rows});
    write(
        &opts.out.join("results.json"),
        &serde_json::to_string_pretty(&v).unwrap_or_default(),
    )?;
    Ok(v)
}
