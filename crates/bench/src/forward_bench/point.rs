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

/// How long a sink may run past a point's duration (a cap: it is stopped when the
/// generators are done).
const SINK_SPARE_S: f64 = 30.0;
/// How long the sinks keep receiving after the generators have ended.
pub(crate) const SINK_DRAIN: std::time::Duration = std::time::Duration::from_millis(200);

/// One measurement point in a lab: sinks (on `eth0` of each node of `sinks`) and
/// generators (`gens`: source node, destination arguments, rate) for `secs` seconds.
///
/// Every frame the generators send counts: the sinks run until the generators have ended
/// and a short drain has passed, then are told to stop (SIGINT) and report. (A sink with
/// a fixed duration cut off the tail of a generator that took long to start, such as one
/// drawing its destinations from a full table: a few milliseconds of frames counted lost
/// at every rate.) The sinks receive as `sink` says.
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
    let exe = exe.to_string_lossy().to_string();
    // A cap only: the sinks are stopped once the generators are done.
    let sink_secs = format!("{}", secs + SINK_SPARE_S);
    let mut sink_procs = Vec::new();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    for s in sinks {
        // In the node's namespace, on its CPUs where it names some (`cpus`).
        let mut c = lab
            .command(
                s,
                &[
                    exe.as_str(),
                    "sink",
                    "--iface",
                    "eth0",
                    "--duration",
                    &sink_secs,
                    sink.arg(),
                    "--json",
                ],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        // `ip netns exec` runs the sink in its own process: the PID is the sink's.
        watch_sink(&mut c, ready_tx.clone());
        sink_procs.push(c);
    }
    // Each sink says when it receives; the generators start after that (or after 5 s).
    let t = std::time::Instant::now();
    for _ in sinks {
        let left = std::time::Duration::from_secs(5).saturating_sub(t.elapsed());
        if ready_rx.recv_timeout(left).is_err() {
            break;
        }
    }
    let mut gen_procs = Vec::new();
    let mut spawn_error = None;
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
            Ok(g) => gen_procs.push(g),
            Err(e) => {
                spawn_error = Some(format!("gen: {e}"));
                break;
            }
        }
    }
    let mut p = Point::default();
    let mut gen_error = spawn_error;
    // (Neither generator holds its interface past its report: the XDP one runs its
    // program from a test run, attached nowhere.)
    for g in gen_procs {
        match report_of(g, "gen", false) {
            Ok(v) => {
                p.offered_pps += v["achieved_pps"].as_f64().unwrap_or(0.0);
                p.sent += v["sent"].as_u64().unwrap_or(0);
            }
            Err(e) => gen_error = gen_error.or(Some(e)),
        }
    }
    // What is still on its way arrives within the drain; then the sinks stop and report
    // (on every path: a sink left running would hold its namespace).
    std::thread::sleep(SINK_DRAIN);
    for s in &sink_procs {
        // SAFETY: kill(2) on a child of ours that has not been reaped yet.
        unsafe { libc::kill(s.id() as libc::pid_t, libc::SIGINT) };
    }
    if let Some(e) = gen_error {
        for s in sink_procs {
            let _ = s.wait_with_output();
        }
        return Err(e);
    }
    for s in sink_procs {
        // A sink on AF_XDP (or counting) holds its interface's XDP program until it
        // exits: the next point's sink could not attach before.
        let v = report_of(s, "sink", sink != SinkKind::AfPacket)?;
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
    Ok(p)
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
