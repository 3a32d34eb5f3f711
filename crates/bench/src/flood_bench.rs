//! `tessera bench flood`: transit forwarding while a flood of packets addressed to the
//! router arrives beside it, for our forwarder (with its fast path shedding the flood at
//! `[io] slow_path_limit`, and with no limit) and the Linux kernel, in one run.
//!
//! Lab: the single-router testbed (labs/single-router.toml, its 10-prefix table). Transit:
//! 64-byte UDP frames from src1 to sink1 at a fixed rate (`gen --xdp`, counted by an
//! AF_XDP sink). Flood: 64-byte UDP frames from src2 to the router's own address on src2's
//! network (10.2.0.1, a closed port: each is an exception the router answers itself, with
//! an ICMP error under its rate limit), from a second XDP generator started before the
//! transit point and stopped after it. For each contender, the flood's rate steps from 0
//! to `--flood`; each step is measured `--repeats` times. What counts: the transit
//! forwarded at each flood rate, as a share of the same contender's without a flood; for
//! our forwarder also what its counters say the flood cost (`slow_path_shed`, `local_udp`:
//! the flood frames that reached user space).

use crate::forward_bench::{lab_mac, lab_point, SinkKind};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;

#[derive(Debug, Clone)]
pub struct FloodOpts {
    pub out: PathBuf,
    /// The tessera binary (runs gen, sink and the lab).
    pub exe: PathBuf,
    /// Seconds per point.
    pub seconds: f64,
    /// The transit traffic's offered rate (frames per second).
    pub transit_pps: f64,
    /// The highest flood rate (frames per second); the steps are 0, a quarter, a half and
    /// all of it.
    pub flood_pps: f64,
    /// Measurements per step.
    pub repeats: usize,
    /// Our forwarder's backend (`auto`, `xdp`, `packet`); none: its config's.
    pub io: Option<String>,
    /// Contenders to measure (empty: all of [`CONTENDERS`]).
    pub only: Vec<String>,
}

/// Our forwarder as configured by default (the fast path, shedding at `[io]
/// slow_path_limit`'s default), the same with `slow_path_limit = 0`, the kernel, and our
/// forwarder with an access list on src2's port that denies the flood, which is then
/// transit to sink2 (`forwarder-acl`: a flood the fast path drops, docs/filters.md).
pub const CONTENDERS: [&str; 4] = ["forwarder", "forwarder-unlimited", "linux", "forwarder-acl"];

/// The router's address the flood is sent to (its interface on src2's network).
const FLOOD_DST: &str = "10.2.0.1";

/// `forwarder-acl`'s flood: to sink2, denied by r-eth1's `acl_in`.
const DENIED_DST: &str = "10.4.0.10";

/// Where `contender`'s flood goes.
fn flood_dst(contender: &str) -> &'static str {
    if contender == "forwarder-acl" {
        DENIED_DST
    } else {
        FLOOD_DST
    }
}

fn write(path: &Path, s: &str) -> Result<(), String> {
    std::fs::write(path, s).map_err(|e| format!("{}: {e}", path.display()))
}

fn sh(prog: &str, args: &[&str]) -> Result<String, String> {
    lab::cmd::run(prog, args)
}

/// The router's counters (`show counters`), or Null for a router without our control
/// socket.
fn counters(l: &lab::Lab, exe: &Path) -> Value {
    let sock = l.control_socket("r");
    std::process::Command::new(exe)
        .args(["show", "counters", "--control"])
        .arg(&sock)
        .stderr(Stdio::null())
        .output()
        .ok()
        .and_then(|o| serde_json::from_slice(&o.stdout).ok())
        .unwrap_or(Value::Null)
}

fn drop_count(c: &Value, name: &str) -> u64 {
    c["drops"][name].as_u64().unwrap_or(0)
}

pub fn run(opts: &FloodOpts, progress: &mut dyn FnMut(&str)) -> Result<Value, String> {
    std::fs::create_dir_all(&opts.out).map_err(|e| format!("{}: {e}", opts.out.display()))?;
    let contenders: Vec<&str> = CONTENDERS
        .iter()
        .copied()
        .filter(|c| opts.only.is_empty() || opts.only.iter().any(|o| o == c))
        .collect();
    if let Some(o) = opts.only.iter().find(|o| !CONTENDERS.contains(&o.as_str())) {
        return Err(format!(
            "--only {o:?}: contenders are {}",
            CONTENDERS.join(", ")
        ));
    }
    let (topo, topo_unlimited, topo_acl) = write_labs(opts)?;
    let floods: Vec<f64> = [0.0, 0.25, 0.5, 1.0]
        .iter()
        .map(|f| (opts.flood_pps * f).round())
        .collect();
    let exe = opts.exe.to_string_lossy().to_string();
    let labname = format!("bfl{}", std::process::id());
    let total = contenders.len() * floods.len() * opts.repeats;
    let mut done = 0;
    let mut rows = Vec::new();
    for contender in &contenders {
        let mut l = lab::Lab::load(
            match *contender {
                "forwarder-unlimited" => &topo_unlimited,
                "forwarder-acl" => &topo_acl,
                _ => &topo,
            },
            Some(&labname),
            opts.exe.clone(),
        )?;
        if *contender == "linux" {
            l.roles.insert("r".into(), "linux".into());
        } else {
            l.io = opts.io.clone();
        }
        l.up()?;
        let r = (|| -> Result<(), String> {
            ready(&l, contender)?;
            let mac_transit = lab_mac(&l, "r", "r-eth0")?;
            let mac_flood = lab_mac(&l, "r", "r-eth1")?;
            for &flood in &floods {
                for rep in 0..opts.repeats {
                    let before = counters(&l, &opts.exe);
                    let mut flooder = start_flood(
                        &l,
                        &exe,
                        &mac_flood,
                        flood_dst(contender),
                        flood,
                        opts.seconds,
                    )?;
                    let p = lab_point(
                        &l,
                        &opts.exe,
                        opts.seconds,
                        64,
                        &[(
                            "src1",
                            vec![
                                "--dst-mac".into(),
                                mac_transit.clone(),
                                "--src".into(),
                                "10.1.0.10".into(),
                                "--dst".into(),
                                "10.3.0.10".into(),
                                "--xdp".into(),
                            ],
                            format!("{:.0}", opts.transit_pps),
                        )],
                        &["sink1"],
                        SinkKind::Xdp,
                    );
                    let flood_sent_pps = match flooder.take() {
                        Some(c) => stop_flood(c)?,
                        None => 0.0,
                    };
                    let p = p?;
                    let after = counters(&l, &opts.exe);
                    let delta = |name: &str| drop_count(&after, name) - drop_count(&before, name);
                    let mut row = json!({
                        "contender": contender, "flood_pps": flood, "flood_sent_pps": flood_sent_pps.round(),
                        "repeat": rep, "transit_offered_pps": p.offered_pps.round(),
                        "transit_forwarded_pps": p.forwarded_pps.round(), "transit_sent": p.sent,
                        "transit_received": p.received, "transit_lost": p.lost,
                        "latency_p99_ns": p.latency_ns[1],
                    });
                    if !after.is_null() {
                        row["slow_path_shed"] = json!(delta("slow_path_shed"));
                        row["local_udp"] = json!(delta("local_udp"));
                        row["acl_deny"] = json!(delta("acl_deny"));
                    }
                    rows.push(row);
                    done += 1;
                    progress(&format!(
                        "[{done}/{total}] {contender}: flood {flood:.0} pps, transit {:.0} of {:.0} pps",
                        p.forwarded_pps, p.offered_pps
                    ));
                }
            }
            Ok(())
        })();
        let _ = l.down();
        r?;
    }
    let summary = summarize(&rows, &contenders, &floods);
    let v = json!({
        "bench": "flood", "seconds_per_point": opts.seconds, "transit_pps": opts.transit_pps,
        "flood_pps": opts.flood_pps, "repeats": opts.repeats, "io": opts.io,
        "summary": summary, "points": rows,
    });
    write(
        &opts.out.join("results.json"),
        &serde_json::to_string_pretty(&v).unwrap_or_default(),
    )?;
    let mut csv = String::from(
        "contender,flood_pps,flood_sent_pps,repeat,transit_offered_pps,transit_forwarded_pps,transit_lost,slow_path_shed,local_udp\n",
    );
    for r in &rows {
        csv += &format!(
            "{},{},{},{},{},{},{},{},{}\n",
            r["contender"].as_str().unwrap_or(""),
            r["flood_pps"],
            r["flood_sent_pps"],
            r["repeat"],
            r["transit_offered_pps"],
            r["transit_forwarded_pps"],
            r["transit_lost"],
            r.get("slow_path_shed").unwrap_or(&json!("")),
            r.get("local_udp").unwrap_or(&json!("")),
        );
    }
    write(&opts.out.join("results.csv"), &csv)?;
    let plots = crate::plot::flood_plot(&opts.out, &v)?;
    let mut v = v;
    v["plots"] = json!(plots);
    Ok(v)
}

/// The single-router lab's files in `--out`: the router's config (one without a slow path
/// limit, one that denies `forwarder-acl`'s flood), its routes, and the lab with each
/// config; the three labs' paths.
fn write_labs(opts: &FloodOpts) -> Result<(PathBuf, PathBuf, PathBuf), String> {
    let base = include_str!("../../../labs/single-router/r.toml");
    write(
        &opts.out.join("routes.txt"),
        include_str!("../../../labs/single-router/routes.txt"),
    )?;
    write(&opts.out.join("r.toml"), base)?;
    write(
        &opts.out.join("r-unlimited.toml"),
        &format!("{base}\n[io]\nslow_path_limit = 0\n"),
    )?;
    let topo_text = include_str!("../../../labs/single-router.toml");
    let topo = opts.out.join("lab.toml");
    write(&topo, &topo_text.replace("single-router/r.toml", "r.toml"))?;
    let topo_unlimited = opts.out.join("lab-unlimited.toml");
    write(
        &topo_unlimited,
        &topo_text.replace("single-router/r.toml", "r-unlimited.toml"),
    )?;
    let acl = base.replace(
        "name = \"r-eth1\"\naddress = \"10.2.0.1/24\"",
        "name = \"r-eth1\"\naddress = \"10.2.0.1/24\"\nacl_in = \"deny-flood\"",
    );
    if acl == base {
        return Err(
            "labs/single-router/r.toml: no r-eth1 at 10.2.0.1/24 for the access list".into(),
        );
    }
    write(
        &opts.out.join("r-acl.toml"),
        &format!(
            "{acl}\n[[acl]]\nname = \"deny-flood\"\ndefault = \"permit\"\n\n[[acl.rule]]\naction = \"deny\"\nprotocol = \"udp\"\ndst = \"{DENIED_DST}/32\"\n"
        ),
    )?;
    let topo_acl = opts.out.join("lab-acl.toml");
    write(
        &topo_acl,
        &topo_text.replace("single-router/r.toml", "r-acl.toml"),
    )?;
    Ok((topo, topo_unlimited, topo_acl))
}

/// The lab made ready: the router's receiving ports run NAPI (the XDP generators'
/// frames), the hosts take frames redirected in XDP, and both paths answer.
fn ready(l: &lab::Lab, contender: &str) -> Result<(), String> {
    // The router's receiving ports run NAPI (the XDP generators' frames), and the
    // hosts take frames redirected in XDP.
    for port in ["r-eth0", "r-eth1"] {
        sh(
            "ip",
            &[
                "netns",
                "exec",
                &l.ns("r"),
                "ethtool",
                "-K",
                port,
                "gro",
                "on",
            ],
        )?;
    }
    for host in ["src1", "src2", "sink1", "sink2"] {
        sh(
            "ip",
            &[
                "netns",
                "exec",
                &l.ns(host),
                "ethtool",
                "-K",
                "eth0",
                "gro",
                "on",
            ],
        )?;
    }
    for (src, dst) in [("src1", "10.3.0.10"), ("src2", flood_dst(contender))] {
        sh(
            "ip",
            &[
                "netns",
                "exec",
                &l.ns(src),
                "ping",
                "-c",
                "2",
                "-i",
                "0.2",
                "-W",
                "1",
                dst,
            ],
        )
        .map_err(|e| format!("{contender}: no answer {src} -> {dst}: {e}"))?;
    }
    Ok(())
}

/// The flood's generator at `flood` packets a second to the router's own address (none
/// for 0), started half a second ahead of the transit traffic.
fn start_flood(
    l: &lab::Lab,
    exe: &str,
    mac_flood: &str,
    dst: &str,
    flood: f64,
    seconds: f64,
) -> Result<Option<std::process::Child>, String> {
    if flood <= 0.0 {
        return Ok(None);
    }
    let c = l
        .command(
            "src2",
            &[
                exe,
                "gen",
                "--iface",
                "eth0",
                "--xdp",
                "--dst-mac",
                mac_flood,
                "--src",
                "10.2.0.10",
                "--dst",
                dst,
                "--size",
                "64",
                "--rate",
                &format!("{flood:.0}"),
                "--duration",
                &format!("{}", seconds + 30.0),
                "--json",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("gen: {e}"))?;
    std::thread::sleep(std::time::Duration::from_millis(500));
    Ok(Some(c))
}

/// Stops the flood's generator: the rate it sent at.
fn stop_flood(c: std::process::Child) -> Result<f64, String> {
    // SAFETY: kill(2) on a child of ours not reaped yet.
    unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGINT) };
    let o = c.wait_with_output().map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_slice(&o.stdout)
        .map_err(|e| format!("flood gen: {e}: {}", String::from_utf8_lossy(&o.stderr)))?;
    Ok(v["achieved_pps"].as_f64().unwrap_or(0.0))
}

/// Per contender and flood rate: the median transit forwarded over the repeats, and its
/// share of the same contender's without a flood.
fn summarize(rows: &[Value], contenders: &[&str], floods: &[f64]) -> Vec<Value> {
    let mut out = Vec::new();
    for c in contenders {
        let median = |flood: f64| -> Option<f64> {
            let mut v: Vec<f64> = rows
                .iter()
                .filter(|r| r["contender"] == *c && r["flood_pps"].as_f64() == Some(flood))
                .filter_map(|r| r["transit_forwarded_pps"].as_f64())
                .collect();
            v.sort_by(f64::total_cmp);
            (!v.is_empty()).then(|| v[v.len() / 2])
        };
        let alone = median(0.0);
        for &f in floods {
            let Some(m) = median(f) else { continue };
            out.push(json!({
                "contender": c, "flood_pps": f, "transit_forwarded_pps": m.round(),
                "share_of_no_flood": alone.filter(|a| *a > 0.0).map(|a| (m / a * 1000.0).round() / 1000.0),
            }));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_takes_medians_and_shares() {
        let row = |c: &str, f: f64, t: f64| json!({"contender": c, "flood_pps": f, "transit_forwarded_pps": t});
        let rows = vec![
            row("forwarder", 0.0, 100.0),
            row("forwarder", 0.0, 90.0),
            row("forwarder", 0.0, 110.0),
            row("forwarder", 10.0, 50.0),
            row("linux", 0.0, 80.0),
        ];
        let s = summarize(&rows, &["forwarder", "linux"], &[0.0, 10.0]);
        assert_eq!(s.len(), 3);
        assert_eq!(s[0]["transit_forwarded_pps"], 100.0);
        assert_eq!(s[1]["share_of_no_flood"], 0.5);
        assert_eq!(s[2]["contender"], "linux");
        assert_eq!(s[2]["share_of_no_flood"], 1.0);
    }
}
