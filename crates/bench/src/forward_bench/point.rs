//! One measurement point in a lab: sinks started, generators run, their reports read.

use serde_json::Value;
use std::path::Path;
use std::process::Stdio;

/// One measurement: what was offered and what came out.
#[derive(Debug, Clone, Default)]
pub(crate) struct Point {
    pub offered_pps: f64,
    pub forwarded_pps: f64,
    pub sent: u64,
    pub received: u64,
    /// Sent, and neither received nor dropped by a sink's own socket.
    pub lost: u64,
    /// Frames that reached a sink's interface but that its socket dropped (the sink fell
    /// behind): forwarded by the router, so neither received nor lost.
    pub sink_dropped: u64,
    /// One-way latency percentiles, nanoseconds (the worst of the sinks): p50, p99, max.
    pub latency_ns: [u64; 3],
}

/// How the sinks receive (`--sink`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkKind {
    /// The AF_PACKET ring, test traffic dropped after it (`sink --drop`).
    AfPacket,
    /// An AF_XDP socket, frames stamped in the XDP hook (`sink --xdp`).
    Xdp,
    /// An XDP program that counts UDP frames and drops them (`sink --count`): no flows,
    /// no latency, the least a receiver spends per frame.
    Count,
}

impl SinkKind {
    /// The name `--sink` takes and the results record.
    pub fn name(self) -> &'static str {
        match self {
            SinkKind::AfPacket => "afpacket",
            SinkKind::Xdp => "xdp",
            SinkKind::Count => "count",
        }
    }

    /// The kind `--sink NAME` names.
    pub fn parse(name: &str) -> Result<SinkKind, String> {
        match name {
            "afpacket" => Ok(SinkKind::AfPacket),
            "xdp" => Ok(SinkKind::Xdp),
            "count" => Ok(SinkKind::Count),
            _ => Err(format!("--sink {name}: use xdp, afpacket or count")),
        }
    }

    /// The kind that measures latency: a counting sink takes no receive times, so the
    /// AF_XDP one stands in for it.
    pub fn with_latency(self) -> SinkKind {
        match self {
            SinkKind::Count => SinkKind::Xdp,
            k => k,
        }
    }

    fn arg(self) -> &'static str {
        match self {
            SinkKind::AfPacket => "--drop",
            SinkKind::Xdp => "--xdp",
            SinkKind::Count => "--count",
        }
    }
}

/// Tells a sink that the generators have ended (SIGUSR1): it reports once nothing more
/// has arrived for [`gen::sink::DRAIN_QUIET`], [`gen::sink::DRAIN_MAX`] at the latest (a
/// fixed 200 ms before 2026-11-29: what is still on its way is in a queue that empties
/// without pause, and a pause of its length ends it here).
pub(crate) fn drain(sink: &std::process::Child) {
    // SAFETY: kill(2) on a child of ours that has not been reaped yet.
    unsafe { libc::kill(sink.id() as libc::pid_t, libc::SIGUSR1) };
}

/// One measurement point in a lab: sinks (on `eth0` of each node of `sinks`) and
/// generators (`gens`: source node, destination arguments, rate) for `secs` seconds.
///
/// Every frame the generators send counts: the sinks run until the generators have ended
/// and what was on its way has arrived ([`drain`]), then report. (A sink with a fixed
/// duration cut off the tail of a generator that took long to start, such as one drawing
/// its destinations from a full table: a few milliseconds of frames counted lost at every
/// rate.) The sinks receive as `sink` says; each is started for the point and ends with
/// it ([`KeptSinks::point`] keeps them across points).
pub(crate) fn lab_point(
    lab: &lab::Lab,
    exe: &Path,
    secs: f64,
    size: usize,
    gens: &[(&str, Vec<String>, String)],
    sinks: &[&str],
    sink: SinkKind,
) -> Result<Point, String> {
    if crate::interrupted() {
        return Err("interrupted".into());
    }
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let mut procs = Vec::new();
    for s in sinks {
        let mut c = start_sink(lab, exe, s, secs + SINK_SPARE_S, sink, false)?;
        watch_sink(&mut c, ready_tx.clone());
        procs.push(c);
    }
    wait_ready(&ready_rx, sinks.len());
    let offered = run_generators(lab, exe, secs, size, gens);
    let mut reports = Vec::new();
    for s in &procs {
        match offered {
            Ok(_) => drain(s),
            // SAFETY: kill(2) on a child of ours that has not been reaped yet.
            Err(_) => unsafe {
                libc::kill(s.id() as libc::pid_t, libc::SIGINT);
            },
        }
    }
    let offered = match offered {
        Ok(o) => o,
        Err(e) => {
            for s in procs {
                let _ = s.wait_with_output();
            }
            return Err(e);
        }
    };
    for s in procs {
        // A sink on AF_XDP (or counting) holds its interface's XDP program until it
        // exits: the next point's sink could not attach before.
        reports.push(report_of(s, "sink", sink != SinkKind::AfPacket)?);
    }
    Ok(point_of(offered, &reports))
}

/// How long a sink may run past a point's duration (a cap: it is stopped when the
/// generators are done).
const SINK_SPARE_S: f64 = 30.0;

/// `tessera sink` on `node`'s `eth0`, in its namespace (on its CPUs where it names some:
/// `cpus`), for at most `secs`; with `--points` when `points`. `ip netns exec` runs the
/// sink in its own process: the PID is the sink's.
fn start_sink(
    lab: &lab::Lab,
    exe: &Path,
    node: &str,
    secs: f64,
    sink: SinkKind,
    points: bool,
) -> Result<std::process::Child, String> {
    let exe = exe.to_string_lossy();
    let secs = secs.to_string();
    let mut args = vec![
        exe.as_ref(),
        "sink",
        "--iface",
        "eth0",
        "--duration",
        &secs,
        sink.arg(),
        "--json",
    ];
    if points {
        args.push("--points");
    }
    lab.command(node, &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("sink on {node}: {e}"))
}

/// Waits until `n` sinks have said that they receive (5 s at most: the generators start
/// then anyway, and the point counts what was lost).
fn wait_ready(ready: &std::sync::mpsc::Receiver<()>, n: usize) {
    let t = std::time::Instant::now();
    for _ in 0..n {
        let left = std::time::Duration::from_secs(5).saturating_sub(t.elapsed());
        if ready.recv_timeout(left).is_err() {
            break;
        }
    }
}

/// What the generators offered: (packets per second, frames sent).
fn run_generators(
    lab: &lab::Lab,
    exe: &Path,
    secs: f64,
    size: usize,
    gens: &[(&str, Vec<String>, String)],
) -> Result<(f64, u64), String> {
    let exe = exe.to_string_lossy().to_string();
    let mut procs = Vec::new();
    let mut error = None;
    for (node, dst, rate) in gens {
        let mut args: Vec<String> =
            vec![exe.clone(), "gen".into(), "--iface".into(), "eth0".into()];
        args.extend(dst.iter().cloned());
        args.extend([
            "--size".into(),
            size.to_string(),
            "--rate".into(),
            rate.clone(),
            "--duration".into(),
            secs.to_string(),
            "--json".into(),
        ]);
        match lab
            .command(node, &args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(g) => procs.push(g),
            Err(e) => {
                error = Some(format!("gen: {e}"));
                break;
            }
        }
    }
    let (mut pps, mut sent) = (0.0, 0);
    // (Neither generator holds its interface past its report: the XDP one runs its
    // program from a test run, attached nowhere.)
    for g in procs {
        match report_of(g, "gen", false) {
            Ok(v) => {
                pps += v["achieved_pps"].as_f64().unwrap_or(0.0);
                sent += v["sent"].as_u64().unwrap_or(0);
            }
            Err(e) => error = error.or(Some(e)),
        }
    }
    match error {
        Some(e) => Err(e),
        None => Ok((pps, sent)),
    }
}

/// The point from what the generators offered and the sinks' reports.
fn point_of((offered_pps, sent): (f64, u64), reports: &[Value]) -> Point {
    let mut p = Point {
        offered_pps,
        sent,
        ..Point::default()
    };
    for v in reports {
        p.received += v["received"].as_u64().unwrap_or(0);
        p.sink_dropped += v["socket_dropped"].as_u64().unwrap_or(0);
        let l = &v["latency_ns_percentiles"];
        for (k, q) in ["p50", "p99", "max"].into_iter().enumerate() {
            p.latency_ns[k] = p.latency_ns[k].max(l[q].as_u64().unwrap_or(0));
        }
    }
    let arrived = p.received + p.sink_dropped;
    p.lost = p.sent.saturating_sub(arrived);
    // Forwarded rate: the offered rate scaled by the share that arrived.
    p.forwarded_pps = if p.sent > 0 {
        p.offered_pps * arrived.min(p.sent) as f64 / p.sent as f64
    } else {
        0.0
    };
    p
}

/// Sinks kept running across the points of one lab (`tessera sink --points`), one per
/// node: a sink's start (an AF_XDP one's 64 MiB of buffers and its XDP program, the
/// process and its namespace) took a quarter of a second of every point here, more than
/// the traffic of a `--quick` point. A point that asks a node for a sink of another kind
/// replaces the one there. Dropped, it stops them (what the lab's teardown would do).
pub(crate) struct KeptSinks {
    lab: lab::Lab,
    exe: std::path::PathBuf,
    running: std::cell::RefCell<std::collections::BTreeMap<String, Kept>>,
}

struct Kept {
    kind: SinkKind,
    child: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
    said: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Kept {
    /// SIGINT, then reaped: it holds its interface's XDP program until it exits.
    fn stop(mut self) {
        // SAFETY: kill(2) on a child of ours that has not been reaped yet.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let _ = self.child.wait();
    }
}

impl KeptSinks {
    /// Sinks for the points of `lab`, with the binary `exe`; none started yet.
    pub(crate) fn new(lab: &lab::Lab, exe: &Path) -> KeptSinks {
        KeptSinks {
            lab: lab.clone(),
            exe: exe.to_path_buf(),
            running: Default::default(),
        }
    }

    /// As [`lab_point`], with the sinks kept.
    pub(crate) fn point(
        &self,
        secs: f64,
        size: usize,
        gens: &[(&str, Vec<String>, String)],
        sinks: &[&str],
        sink: SinkKind,
    ) -> Result<Point, String> {
        if crate::interrupted() {
            return Err("interrupted".into());
        }
        let (lab, exe) = (&self.lab, self.exe.as_path());
        let mut running = self.running.borrow_mut();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let mut starting = 0;
        for &node in sinks {
            if running.get(node).is_some_and(|k| k.kind == sink) {
                continue;
            }
            if let Some(k) = running.remove(node) {
                k.stop();
            }
            // A day: a cap, for a bench that dies without stopping it (the lab's
            // teardown ends it too).
            let mut child = start_sink(lab, exe, node, 86_400.0, sink, true)?;
            let said = watch_sink(&mut child, ready_tx.clone());
            let out = child.stdout.take().ok_or("sink: no standard output")?;
            running.insert(
                node.to_string(),
                Kept {
                    kind: sink,
                    child,
                    out: std::io::BufReader::new(out),
                    said,
                },
            );
            starting += 1;
        }
        wait_ready(&ready_rx, starting);
        let offered = match run_generators(lab, exe, secs, size, gens) {
            Ok(o) => o,
            Err(e) => {
                // The sinks' points would mix with the next: these end here.
                for node in sinks {
                    if let Some(k) = running.remove(*node) {
                        k.stop();
                    }
                }
                return Err(e);
            }
        };
        for node in sinks {
            drain(&running[*node].child);
        }
        let mut reports = Vec::new();
        for &node in sinks {
            let k = running.get_mut(node).ok_or("sink gone")?;
            let mut line = String::new();
            use std::io::BufRead;
            let read = k.out.read_line(&mut line);
            match read
                .map_err(|e| e.to_string())
                .and_then(|_| serde_json::from_str::<Value>(&line).map_err(|e| e.to_string()))
            {
                Ok(v) => reports.push(v),
                Err(e) => {
                    let k = running.remove(node).ok_or("sink gone")?;
                    let said = k.said.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    k.stop();
                    return Err(format!("sink on {node}: {e}: {said}"));
                }
            }
        }
        Ok(point_of(offered, &reports))
    }
}

impl Drop for KeptSinks {
    fn drop(&mut self) {
        for (_, k) in std::mem::take(self.running.get_mut()) {
            k.stop();
        }
    }
}

/// Reads a sink's error output in the background: `ready` gets a message when it says it
/// receives; returns what it said (for a failure's message).
pub(crate) fn watch_sink(
    sink: &mut std::process::Child,
    ready: std::sync::mpsc::Sender<()>,
) -> std::sync::Arc<std::sync::Mutex<String>> {
    let said = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    if let Some(err) = sink.stderr.take() {
        let said = said.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if line.contains("sink: receiving") {
                    let _ = ready.send(());
                }
                let mut s = said.lock().unwrap_or_else(|e| e.into_inner());
                s.push_str(&line);
                s.push('\n');
            }
        });
    }
    said
}

/// The JSON report of our `gen` or `sink` (`what`), read as soon as it is out: they close
/// their standard output once they have written it, before their sockets and programs
/// (an AF_PACKET socket's close waits out RCU grace periods: 40-90 ms a process here, on
/// every point). The rest of the child's exit is reaped in the background, or waited for
/// with `wait_exit`.
pub(crate) fn report_of(
    mut c: std::process::Child,
    what: &str,
    wait_exit: bool,
) -> Result<Value, String> {
    use std::io::Read;
    let mut out = Vec::new();
    if let Some(mut o) = c.stdout.take() {
        o.read_to_end(&mut out)
            .map_err(|e| format!("{what}: {e}"))?;
    }
    match serde_json::from_slice::<Value>(&out) {
        Ok(v) if wait_exit => {
            c.wait_with_output().map_err(|e| format!("{what}: {e}"))?;
            Ok(v)
        }
        Ok(v) => {
            std::thread::spawn(move || c.wait_with_output());
            Ok(v)
        }
        Err(e) => {
            let o = c.wait_with_output().map_err(|e| format!("{what}: {e}"))?;
            Err(format!(
                "{what}: {e}: {}",
                String::from_utf8_lossy(&o.stderr)
            ))
        }
    }
}
