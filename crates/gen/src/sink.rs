//! `tessera sink`: receives on an interface and accounts for test traffic per flow.
//!
//! Per flow: packets, bytes, loss, reordering, duplicates, one-way latency (kernel receive
//! time minus the send time in the packet, both CLOCK_REALTIME), and the rate in each
//! interval of `interval` length, with mean, min, max and variance over the complete
//! intervals. Loss is `expected - (packets - duplicates)`, where `expected` is the count in
//! the generator's end marker when one arrived, else the highest sequence number plus one
//! (which cannot see loss at the tail). Duplicates are detected within a window of the
//! last 65,536 sequence numbers; an older packet counts as reordered only.

use crate::Stats;
use dataplane::port::Port;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use wire::probe::Probe;

const WINDOW: u64 = 1 << 16;

#[derive(Debug, Clone)]
pub struct SinkConfig {
    pub iface: String,
    pub duration: f64,
    pub interval_ms: f64,
    pub port: u16,
    /// Drop test traffic (UDP to `port`) arriving on the interface in an nftables netdev
    /// ingress chain, after packet sockets have seen it, for the duration of the run: the
    /// host's own stack then spends nothing on it (on a veth that work would run on the
    /// sender's CPU and cap the generator). ARP and everything else pass.
    pub drop: bool,
    /// Receive on an AF_XDP socket ([`io::XdpPort::open_stamped`]) instead of the
    /// AF_PACKET ring: UDP frames are stamped in the XDP hook and copied to the socket
    /// without a socket buffer, so that receiving costs the sending side's core (a veth
    /// receives on the sender's CPU) as little as the kernel allows; ARP and the rest go
    /// to the host's stack. `drop` is then moot: UDP never reaches the stack.
    pub xdp: bool,
    /// Only count: an XDP program counts the generator's data frames and drops them in
    /// the hook ([`io::fastpath::count::CountSink`]), with no socket and no copy, the
    /// least a receiver can spend per frame. The report has `received` and `bytes`, but
    /// no flows, loss, reordering or latency. `xdp` and `drop` are then moot.
    pub count: bool,
    /// More intervals for the rate statistics (milliseconds, each a multiple of
    /// `interval_ms`): per flow, `rates` lists the statistics for every interval.
    pub more_intervals_ms: Vec<f64>,
    /// Write `flow,seq,rx_ns` of each received test packet to this CSV file (a
    /// sequence-number trace), up to `trace_max` packets.
    pub trace: Option<std::path::PathBuf>,
    pub trace_max: u64,
}

/// An nftables netdev ingress chain dropping UDP to one port on one interface, over IPv4
/// and IPv6 (an IPv6 frame let through costs the host's stack a route lookup and a port
/// unreachable each, on the sending core on a veth); removed when dropped. The table is
/// named after the sink's PID, so that several sinks never collide.
struct IngressDrop {
    table: String,
}

impl IngressDrop {
    fn install(iface: &str, port: u16) -> Result<IngressDrop, String> {
        let table = format!("tessera_sink_{}", std::process::id());
        let rules = format!(
            "table netdev {table} {{\n chain ingress {{\n  type filter hook ingress device \"{iface}\" priority 0; policy accept;\n  ip protocol udp udp dport {port} drop\n  ip6 nexthdr udp udp dport {port} drop\n }}\n}}\n"
        );
        let mut child = std::process::Command::new("nft")
            .args(["-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("--drop needs nft (apt-get install nftables): {e}"))?;
        use std::io::Write;
        child
            .stdin
            .take()
            .ok_or("nft: no stdin")?
            .write_all(rules.as_bytes())
            .map_err(|e| e.to_string())?;
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "nft: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(IngressDrop { table })
    }
}

impl Drop for IngressDrop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("nft")
            .args(["delete", "table", "netdev", &self.table])
            .output();
    }
}

/// What one flow received.
#[derive(Debug, Clone)]
pub struct Flow {
    pub packets: u64,
    pub bytes: u64,
    pub reordered: u64,
    pub duplicates: u64,
    pub expected: Option<u64>,
    max_seq: Option<u64>,
    seen: Vec<u64>,
    pub latency: Stats,
    /// Packets per interval, from the flow's own first packet (so that a flow that starts
    /// later than another has no partial interval at its start).
    pub intervals: Vec<u64>,
    t0: Option<u64>,
}

impl Default for Flow {
    fn default() -> Self {
        Flow {
            packets: 0,
            bytes: 0,
            reordered: 0,
            duplicates: 0,
            expected: None,
            max_seq: None,
            seen: vec![0; (WINDOW / 64) as usize],
            latency: Stats::default(),
            intervals: Vec::new(),
            t0: None,
        }
    }
}

impl Flow {
    fn bit(&mut self, s: u64) -> (usize, u64) {
        let i = s % WINDOW;
        ((i / 64) as usize, 1 << (i % 64))
    }

    /// Accounts one data packet with sequence `s`.
    pub fn data(&mut self, s: u64, bytes: usize) {
        self.packets += 1;
        self.bytes += bytes as u64;
        match self.max_seq {
            None => self.max_seq = Some(s),
            Some(m) if s > m => {
                // Forget the window positions the sequence jumped over.
                if s - m >= WINDOW {
                    self.seen.fill(0);
                } else {
                    for x in m + 1..s {
                        let (w, b) = self.bit(x);
                        self.seen[w] &= !b;
                    }
                }
                self.max_seq = Some(s);
            }
            Some(m) => {
                if m - s >= WINDOW {
                    self.reordered += 1;
                    return;
                }
                let (w, b) = self.bit(s);
                if self.seen[w] & b != 0 {
                    self.duplicates += 1;
                } else {
                    self.reordered += 1;
                    self.seen[w] |= b;
                }
                return;
            }
        }
        let (w, b) = self.bit(s);
        self.seen[w] |= b;
    }

    pub fn lost(&self) -> u64 {
        let expected = self.expected.unwrap_or(self.max_seq.map_or(0, |m| m + 1));
        expected.saturating_sub(self.packets - self.duplicates)
    }
}

/// Interval-rate statistics over the complete intervals of `counts` (the last is partial).
fn interval_stats(counts: &[u64], interval_s: f64) -> Stats {
    coarse_stats(counts, interval_s, 1)
}

/// Rate statistics over intervals of `k` consecutive counts of `interval_s` each, over the
/// complete ones (the last count is partial, and so is a group that would include it).
fn coarse_stats(counts: &[u64], interval_s: f64, k: usize) -> Stats {
    let mut s = Stats::default();
    let k = k.max(1);
    let full = counts.len().saturating_sub(1);
    for g in counts[..full].chunks_exact(k) {
        s.add(g.iter().sum::<u64>() as f64 / (interval_s * k as f64));
    }
    s
}

/// A sequence-number trace being written.
#[derive(Debug)]
struct Trace {
    out: std::io::BufWriter<std::fs::File>,
    left: u64,
}

/// Accounting for all flows; fed frame by frame.
#[derive(Debug, Default)]
pub struct Sink {
    pub flows: BTreeMap<u16, Flow>,
    pub other: u64,
    /// Frames the sink's own socket dropped (its ring full, or no free buffer), by the
    /// kernel's reason: they reached the sink's interface, and the sink fell behind.
    pub socket_drops: BTreeMap<&'static str, u64>,
    /// One-way latency of every probe of every flow, for percentiles.
    pub latency: crate::Histogram,
    t0: Option<u64>,
    interval_ns: u64,
    /// Coarser intervals, as multiples of `interval_ns`.
    more: Vec<usize>,
    /// All flows' packets per interval, from the first packet of any flow.
    total: Vec<u64>,
    trace: Option<Trace>,
    port: u16,
}

impl Sink {
    pub fn new(interval_ms: f64, port: u16) -> Sink {
        Sink {
            interval_ns: (interval_ms * 1e6).max(1.0) as u64,
            port,
            ..Default::default()
        }
    }

    /// Accounts one received frame (its bytes and kernel receive time).
    pub fn frame(&mut self, f: &[u8], rx_ns: u64) {
        let Some(p) = self.probe(f) else {
            self.other += 1;
            return;
        };
        let flow = self.flows.entry(p.flow).or_default();
        if p.end {
            flow.expected = Some(p.seq);
            return;
        }
        flow.data(p.seq, f.len() + 4);
        flow.latency.add(rx_ns.saturating_sub(p.sent_ns) as f64);
        self.latency.add(rx_ns.saturating_sub(p.sent_ns));
        let t0 = *flow.t0.get_or_insert(rx_ns);
        let i = (rx_ns.saturating_sub(t0) / self.interval_ns) as usize;
        if flow.intervals.len() <= i {
            flow.intervals.resize(i + 1, 0);
        }
        flow.intervals[i] += 1;
        let t0 = *self.t0.get_or_insert(rx_ns);
        let i = (rx_ns.saturating_sub(t0) / self.interval_ns) as usize;
        if self.total.len() <= i {
            self.total.resize(i + 1, 0);
        }
        self.total[i] += 1;
        if let Some(t) = &mut self.trace {
            if t.left > 0 {
                use std::io::Write;
                t.left -= 1;
                let _ = writeln!(t.out, "{},{},{rx_ns}", p.flow, p.seq);
            }
        }
    }

    /// Also reports rates over intervals `k` times the base interval, for each `k`.
    pub fn with_more_intervals(mut self, k: &[usize]) -> Sink {
        self.more = k.iter().copied().filter(|&k| k > 1).collect();
        self
    }

    /// Writes a sequence-number trace (`flow,seq,rx_ns`) of up to `max` packets to `path`.
    pub fn with_trace(mut self, path: &std::path::Path, max: u64) -> Result<Sink, String> {
        let f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut out = std::io::BufWriter::new(f);
        use std::io::Write;
        writeln!(out, "flow,seq,rx_ns").map_err(|e| format!("{}: {e}", path.display()))?;
        self.trace = Some(Trace { out, left: max });
        Ok(self)
    }

    /// Flushes the trace file, if any.
    pub fn finish(&mut self) -> Result<(), String> {
        if let Some(t) = &mut self.trace {
            use std::io::Write;
            t.out.flush().map_err(|e| format!("trace: {e}"))?;
        }
        Ok(())
    }

    /// The probe of a test frame: UDP to the sink's port over IPv4 or IPv6, unfragmented.
    fn probe(&self, f: &[u8]) -> Option<Probe> {
        let e = wire::ethernet::Frame::new_checked(f).ok()?;
        let udp = match e.ethertype() {
            wire::ethernet::ethertype::IPV4 => {
                let ip = wire::ipv4::Packet::new_checked(e.payload()).ok()?;
                if ip.protocol() != wire::ipv4::protocol::UDP || ip.is_fragment() {
                    return None;
                }
                e.payload().get(ip.header_len()..ip.total_len())?
            }
            wire::ethernet::ethertype::IPV6 => {
                let ip = wire::ipv6::Packet::new_checked(e.payload()).ok()?;
                let u = ip.upper().ok()?;
                if u.protocol != wire::ipv6::next_header::UDP || u.fragment.is_some() {
                    return None;
                }
                e.payload().get(u.offset..ip.total_len())?
            }
            _ => return None,
        };
        let u = wire::udp::Packet::new_checked(udp).ok()?;
        if u.dst_port() != self.port {
            return None;
        }
        Probe::parse(u.payload())
    }

    pub fn summary(&self, duration_s: f64) -> Value {
        let iv = self.interval_ns as f64 / 1e9;
        let flows: Vec<Value> = self
            .flows
            .iter()
            .map(|(id, f)| {
                let rates: Vec<Value> = std::iter::once(1)
                    .chain(self.more.iter().copied())
                    .map(|k| {
                        json!({"interval_ms": iv * 1e3 * k as f64,
                               "rate_pps": coarse_stats(&f.intervals, iv, k).json()})
                    })
                    .collect();
                json!({
                    "flow": id, "packets": f.packets, "bytes": f.bytes, "lost": f.lost(),
                    "reordered": f.reordered, "duplicates": f.duplicates, "expected": f.expected,
                    "end_marker_seen": f.expected.is_some(),
                    "latency_ns": f.latency.json(), "rate_pps": interval_stats(&f.intervals, iv).json(),
                    "rates": rates,
                })
            })
            .collect();
        let sum = |g: fn(&Flow) -> u64| -> u64 { self.flows.values().map(g).sum() };
        json!({
            "received": sum(|f| f.packets),
            "lost": sum(|f| f.lost()),
            "reordered": sum(|f| f.reordered),
            "duplicates": sum(|f| f.duplicates),
            "other_frames": self.other,
            "socket_dropped": self.socket_drops.values().sum::<u64>(),
            "socket_drops": self.socket_drops,
            "latency_ns_percentiles": self.latency.json(),
            "duration_s": duration_s,
            "interval_ms": iv * 1e3,
            "rate_pps": interval_stats(&self.total, iv).json(),
            "flows": flows,
        })
    }
}

/// How a drain ends (`drain` set: the senders are done): once nothing has arrived for
/// this long, what was on its way has arrived.
pub const DRAIN_QUIET: Duration = Duration::from_millis(50);
/// A drain's bound, however busy the interface stays.
pub const DRAIN_MAX: Duration = Duration::from_millis(200);

/// When a run ends: at once when `stop` is set; when `drain` is set, once nothing has
/// arrived for [`DRAIN_QUIET`] (counted from the drain's start at the earliest), or
/// [`DRAIN_MAX`] after it began. With [`Ending::points`], a drain ends a point instead:
/// its summary goes to the callback, and the sink goes on with a new point.
pub struct Ending<'a> {
    stop: &'a AtomicBool,
    drain: &'a AtomicBool,
    began: Option<Instant>,
    last_rx: Option<Instant>,
    points: Option<&'a mut dyn FnMut(&Value)>,
}

impl<'a> Ending<'a> {
    pub fn new(stop: &'a AtomicBool, drain: &'a AtomicBool) -> Ending<'a> {
        Ending {
            stop,
            drain,
            began: None,
            last_rx: None,
            points: None,
        }
    }

    /// Points (`tessera sink --points`): each drain ends one, whose summary goes to
    /// `each`; the run ends on `stop` or at its duration.
    pub fn points(mut self, each: &'a mut dyn FnMut(&Value)) -> Ending<'a> {
        self.points = Some(each);
        self
    }

    /// After the receive loop: true when a point ended (its summary `v` was handed on,
    /// the drain is over) and the run goes on; false when the run ends.
    fn next_point(&mut self, v: &Value) -> bool {
        let Some(each) = self.points.as_mut() else {
            return false;
        };
        if self.stop.load(Ordering::Relaxed) || !self.drain.load(Ordering::Relaxed) {
            return false;
        }
        each(v);
        self.drain.store(false, Ordering::Relaxed);
        self.began = None;
        self.last_rx = None;
        true
    }

    /// Whether the run is over, told whether frames arrived since the last call.
    fn over(&mut self, arrived: bool) -> bool {
        let now = Instant::now();
        if arrived {
            self.last_rx = Some(now);
        }
        if self.stop.load(Ordering::Relaxed) {
            return true;
        }
        if !self.drain.load(Ordering::Relaxed) {
            return false;
        }
        let began = *self.began.get_or_insert(now);
        let quiet_since = self.last_rx.map_or(began, |t| t.max(began));
        now - quiet_since >= DRAIN_QUIET || now - began >= DRAIN_MAX
    }
}

/// Receives for the configured duration (or until `stop`) and returns the summary.
pub fn run(cfg: &SinkConfig, stop: &AtomicBool, ready: impl FnOnce()) -> Result<Value, String> {
    run_then(
        cfg,
        &mut Ending::new(stop, &AtomicBool::new(false)),
        ready,
        |_| {},
    )
}

/// As [`run`]; `done` gets the summary before the port closes and the ingress drop is
/// removed (an AF_PACKET socket's close waits out RCU grace periods, `nft` runs once
/// more: 40-90 ms here), so that whoever waits for it need not wait for those too.
pub fn run_then(
    cfg: &SinkConfig,
    ending: &mut Ending,
    ready: impl FnOnce(),
    done: impl FnOnce(&Value),
) -> Result<Value, String> {
    if !(1.0..=1000.0).contains(&cfg.interval_ms) {
        return Err(format!("--interval {}: use 1 to 1000 ms", cfg.interval_ms));
    }
    if cfg.count {
        return count_then(cfg, ending, ready, done);
    }
    let (mut xdp, mut packet) = (None, None);
    if cfg.xdp {
        xdp = Some(
            // A deep ring (8,192 frames, 64 MiB of buffers): the sink process waits for a
            // core behind the kernel's receive threads, and what arrives meanwhile waits.
            io::XdpPort::open_stamped(
                &cfg.iface,
                io::XskConfig {
                    rx: 8192,
                    ..Default::default()
                },
            )
            .map_err(|e| format!("--xdp: {e}"))?,
        );
    } else {
        // Blocks: at the rates a sink takes, a wake-up per block costs less than one per
        // frame, and the kernel's receive timestamps do not depend on when we read them.
        packet = Some(
            io::AfPacket::open(
                &cfg.iface,
                io::RingConfig {
                    rx_ring: io::RxRing::Blocks,
                    ..Default::default()
                },
            )
            .map_err(|e| e.to_string())?,
        );
    }
    let _drop = if cfg.drop && !cfg.xdp {
        Some(IngressDrop::install(&cfg.iface, cfg.port)?)
    } else {
        None
    };
    let mut more = Vec::new();
    for &m in &cfg.more_intervals_ms {
        let k = m / cfg.interval_ms;
        if !(k >= 1.0 && (k - k.round()).abs() < 1e-9 && m <= 10_000.0) {
            return Err(format!(
                "--intervals {m}: each interval must be a multiple of the first ({} ms), at most 10000 ms",
                cfg.interval_ms
            ));
        }
        more.push(k.round() as usize);
    }
    let mut sink = Sink::new(cfg.interval_ms, cfg.port).with_more_intervals(&more);
    if let Some(t) = &cfg.trace {
        sink = sink.with_trace(t, cfg.trace_max)?;
    }
    ready();
    let began = Instant::now();
    let end = Duration::from_secs_f64(cfg.duration.max(0.0));
    loop {
        let port: &mut dyn Port = match (&mut xdp, &mut packet) {
            (Some(x), _) => x,
            (None, p) => p.as_mut().ok_or("no port")?,
        };
        let mut v = receive(port, &mut sink, ending, began + end)?;
        if let Some(x) = &xdp {
            // Frames whose receive time is when they were read, not the XDP hook's (since
            // the run began).
            v["unstamped_frames"] = x.unstamped().into();
        }
        if !(Instant::now() < began + end && ending.next_point(&v)) {
            done(&v);
            return Ok(v);
        }
        sink = Sink::new(cfg.interval_ms, cfg.port).with_more_intervals(&more);
    }
}

/// Receives into `sink` until `ending` says the run or the point is over or `until` has
/// passed; returns the summary.
fn receive(
    port: &mut dyn Port,
    sink: &mut Sink,
    ending: &mut Ending,
    until: Instant,
) -> Result<Value, String> {
    let mut pool = dataplane::Pool::new();
    let mut batch = Vec::with_capacity(512);
    let mut pfd = libc::pollfd {
        fd: port.poll_fd().unwrap_or(-1),
        events: libc::POLLIN,
        revents: 0,
    };
    let start = Instant::now();
    let mut n = 0;
    while Instant::now() < until && !ending.over(n > 0) {
        let mut oversize = 0;
        n = port
            .recv(&mut pool, &mut batch, 256, &mut oversize)
            .map_err(|e| e.to_string())?;
        sink.other += oversize;
        for p in batch.drain(..) {
            sink.frame(&p.data, p.meta.rx_ns);
            pool.put(p);
        }
        if n == 0 {
            // SAFETY: pfd is a valid pollfd for the duration of the call.
            unsafe { libc::poll(&mut pfd, 1, 5) };
        }
    }
    port.take_backend_drops(&mut |why, n| *sink.socket_drops.entry(why.name()).or_default() += n);
    sink.finish()?;
    Ok(sink.summary(start.elapsed().as_secs_f64()))
}

/// [`run_then`] with `count`: the counting program on the interface until the run ends.
fn count_then(
    cfg: &SinkConfig,
    ending: &mut Ending,
    ready: impl FnOnce(),
    done: impl FnOnce(&Value),
) -> Result<Value, String> {
    let c =
        io::fastpath::count::CountSink::attach(&cfg.iface).map_err(|e| format!("--count: {e}"))?;
    ready();
    let began = Instant::now();
    let end = Duration::from_secs_f64(cfg.duration.max(0.0));
    // The counts at the start of the point.
    let (mut base, mut base_bytes) = (0, 0);
    loop {
        let start = Instant::now();
        let mut seen = base;
        loop {
            let (received, _) = c.counts();
            if began.elapsed() >= end || ending.over(received != seen) {
                break;
            }
            seen = received;
            std::thread::sleep(Duration::from_millis(2));
        }
        let (received, bytes) = c.counts();
        let secs = start.elapsed().as_secs_f64();
        let v = json!({
            "mode": "count",
            "received": received - base,
            "bytes": bytes - base_bytes,
            "socket_dropped": 0,
            "duration_s": secs,
            "rate_pps": (received - base) as f64 / secs.max(1e-9),
            "native": c.native(),
        });
        if !(began.elapsed() < end && ending.next_point(&v)) {
            done(&v);
            return Ok(v);
        }
        (base, base_bytes) = (received, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_ends_after_a_quiet_spell_or_at_its_bound() {
        let (stop, drain) = (AtomicBool::new(false), AtomicBool::new(false));
        let mut e = Ending::new(&stop, &drain);
        assert!(!e.over(true));
        // No drain asked: the run goes on, frames or not.
        std::thread::sleep(DRAIN_QUIET * 2);
        assert!(!e.over(false));
        drain.store(true, Ordering::Relaxed);
        // Quiet is counted from the drain's start, not from the last frame before it.
        assert!(!e.over(false));
        std::thread::sleep(DRAIN_QUIET + Duration::from_millis(5));
        assert!(e.over(false));
        // Frames arriving all along: the bound ends it.
        let mut e = Ending::new(&stop, &drain);
        let t = Instant::now();
        while !e.over(true) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(t.elapsed() >= DRAIN_MAX, "{:?}", t.elapsed());
        // Stop ends it at once.
        drain.store(false, Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
        assert!(Ending::new(&stop, &drain).over(true));
    }

    #[test]
    fn with_points_a_drain_ends_a_point_and_a_stop_the_run() {
        let (stop, drain) = (AtomicBool::new(false), AtomicBool::new(false));
        let seen = std::cell::RefCell::new(Vec::new());
        let mut each = |v: &Value| seen.borrow_mut().push(v.clone());
        let mut e = Ending::new(&stop, &drain).points(&mut each);
        // Ended by its duration (no drain): the run is over.
        assert!(!e.next_point(&json!(0)));
        drain.store(true, Ordering::Relaxed);
        assert!(e.next_point(&json!(1)));
        // The drain is consumed: the next point runs until the next one.
        assert!(!drain.load(Ordering::Relaxed));
        assert!(!e.over(false));
        stop.store(true, Ordering::Relaxed);
        drain.store(true, Ordering::Relaxed);
        assert!(!e.next_point(&json!(2)));
        assert_eq!(*seen.borrow(), vec![json!(1)]);
    }

    fn flow(seqs: &[u64]) -> Flow {
        let mut f = Flow::default();
        for &s in seqs {
            f.data(s, 64);
        }
        f
    }

    #[test]
    fn loss_reordering_and_duplicates() {
        let f = flow(&[0, 1, 2, 3, 4]);
        assert_eq!((f.lost(), f.reordered, f.duplicates), (0, 0, 0));
        let f = flow(&[0, 2, 1, 3]);
        assert_eq!((f.lost(), f.reordered, f.duplicates), (0, 1, 0));
        let f = flow(&[0, 1, 1, 2, 0]);
        assert_eq!((f.lost(), f.reordered, f.duplicates), (0, 0, 2));
        let mut f = flow(&[0, 1, 3, 6]);
        assert_eq!(f.lost(), 3);
        // The end marker reveals loss at the tail.
        f.expected = Some(10);
        assert_eq!(f.lost(), 6);
        // Far jumps clear the window: an old sequence number is not a false duplicate.
        let f = flow(&[0, WINDOW + 5, 5 + 2 * WINDOW, WINDOW + 5]);
        assert_eq!((f.duplicates, f.reordered), (0, 1));
    }

    #[test]
    fn interval_rates_exclude_the_partial_last_interval() {
        let mut s = Sink::new(100.0, 1234);
        let f = wire::frame::UdpFrame {
            payload: &[0; 18],
            ..Default::default()
        };
        let mut buf = f.to_vec();
        let t0 = 1_000_000_000_000u64;
        // 10 packets in each of 3 intervals, 1 in the 4th.
        for i in 0..31u64 {
            Probe {
                end: false,
                flow: 7,
                seq: i,
                sent_ns: t0 + i * 10_000_000 - 1000,
            }
            .emit(&mut buf[42..])
            .unwrap();
            s.frame(&buf, t0 + i * 10_000_000);
        }
        let v = s.summary(0.31);
        assert_eq!(v["received"], 31);
        let r = &v["flows"][0]["rate_pps"];
        assert_eq!(
            (r["n"].as_u64(), r["mean"].as_f64(), r["variance"].as_f64()),
            (Some(3), Some(100.0), Some(0.0))
        );
        assert_eq!(v["flows"][0]["latency_ns"]["mean"].as_f64(), Some(1000.0));
        s.frame(&[0u8; 10], 0);
        assert_eq!(s.other, 1);
    }

    #[test]
    fn the_generators_ipv6_frames_are_counted() {
        use crate::generator::{fill_udp6, template, udp6_base, Destinations, GenConfig};
        let cfg = GenConfig {
            iface: "x".into(),
            dst_mac: wire::MacAddr([2, 0, 0, 0, 0, 9]),
            src: "2001:db8:3::10"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .into(),
            dst: Destinations::One(
                "2001:db8:1::10"
                    .parse::<std::net::Ipv6Addr>()
                    .unwrap()
                    .into(),
            ),
            flows: 1,
            flow_base: 0,
            size: crate::generator::MIN_SIZE6,
            rate: crate::rate::Rate::Pps(1000.0),
            duration: Some(1.0),
            count: None,
            dst_port: 1234,
            seed: 1,
            xdp: false,
            sleep_us: 0,
        };
        let mut f = template(
            &cfg,
            wire::MacAddr([2, 0, 0, 0, 0, 1]),
            0,
            "2001:db8:1::10"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .into(),
        );
        let mut s = Sink::new(100.0, 1234);
        for seq in 0..3 {
            Probe {
                end: false,
                flow: 4,
                seq,
                sent_ns: 1_000_000 + seq,
            }
            .emit(&mut f[62..])
            .unwrap();
            fill_udp6(&mut f, udp6_base(&cfg));
            s.frame(&f, 2_000_000 + seq);
        }
        // Another port, and a first fragment: not test frames.
        let mut other = f.clone();
        other[14 + 40 + 3] ^= 1;
        s.frame(&other, 0);
        let v = s.summary(1.0);
        assert_eq!((v["received"].as_u64(), s.other), (Some(3), 1), "{v}");
        assert_eq!(v["flows"][0]["flow"], 4);
    }

    #[test]
    fn coarser_intervals_and_a_late_flow() {
        let dir = std::env::temp_dir().join(format!("tessera-sink-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let trace = dir.join("trace.csv");
        let mut s = Sink::new(1.0, 1234)
            .with_more_intervals(&[10])
            .with_trace(&trace, 5)
            .unwrap();
        let f = wire::frame::UdpFrame {
            payload: &[0; 18],
            ..Default::default()
        };
        let mut buf = f.to_vec();
        let t0 = 1_000_000_000_000u64;
        // Flow 1: 2 packets per ms from t0 for 25 ms; flow 2: 1 per ms, starting 0.5 ms
        // later (its intervals start at its own first packet).
        let mut send = |s: &mut Sink, flow: u16, seq: u64, t: u64| {
            Probe {
                end: false,
                flow,
                seq,
                sent_ns: t,
            }
            .emit(&mut buf[42..])
            .unwrap();
            s.frame(&buf, t);
        };
        for i in 0..50u64 {
            send(&mut s, 1, i, t0 + i * 500_000);
        }
        for i in 0..25u64 {
            send(&mut s, 2, i, t0 + 500_000 + i * 1_000_000);
        }
        s.finish().unwrap();
        let v = s.summary(0.025);
        let rates = |f: usize, k: usize| v["flows"][f]["rates"][k]["rate_pps"].clone();
        // 1 ms: 24 complete intervals (the 25th is partial), 2000 and 1000 pps, no variance.
        assert_eq!(rates(0, 0)["n"], 24);
        assert_eq!(rates(0, 0)["min"].as_f64(), Some(2000.0));
        assert_eq!(rates(1, 0)["n"], 24);
        assert_eq!(rates(1, 0)["min"].as_f64(), Some(1000.0));
        // 10 ms: two complete groups of ten.
        assert_eq!(
            v["flows"][0]["rates"][1]["interval_ms"].as_f64(),
            Some(10.0)
        );
        assert_eq!(rates(0, 1)["n"], 2);
        assert_eq!(rates(0, 1)["mean"].as_f64(), Some(2000.0));
        assert_eq!(rates(1, 1)["variance"].as_f64(), Some(0.0));
        let t = std::fs::read_to_string(&trace).unwrap();
        assert_eq!(t.lines().count(), 6, "header and 5 packets: {t}");
        assert_eq!(t.lines().nth(1), Some(format!("1,0,{t0}").as_str()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
