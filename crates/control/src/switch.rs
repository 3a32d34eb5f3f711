//! `tessera switch`: its configuration file and its run loop (docs/switch.md).
//!
//! ```toml
//! [switch]
//! mode = "fair"                  # "fair": a queue per input port, deficit round robin;
//!                                # "fifo": one queue per output port, in arrival order
//! ageing_s = 300                 # learned MACs are forgotten after this long unseen
//!
//! [[port]]
//! name = "sw-p1"
//! capacity_bps = 1_000_000_000   # optional: output rate counted on the wire (frame, FCS,
//!                                # preamble, gap); without it, as fast as the port takes
//! buffer_bytes = 262_144         # output buffer (default 256 KiB): the FIFO's whole queue,
//!                                # or shared equally by the input queues in fair mode
//! delay_ms = 25.0                # optional: added delay after the queue (a link's)
//!
//! [io]                           # as for every element
//! backend = "auto"
//! ```

use crate::config::{from_toml, line_of, read, ConfigError, IoConfig, RawIo};
use crate::run::run_element;
use dataplane::port::Port;
use dataplane::switch::{Mode, PortConfig, Switch, SwitchConfig};
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toml::Spanned;

/// Default `buffer_bytes` of a port.
pub const DEFAULT_BUFFER: usize = 256 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    switch: Option<RawSwitch>,
    #[serde(default)]
    port: Vec<RawPort>,
    io: Option<RawIo>,
    metrics: Option<crate::config::RawMetrics>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSwitch {
    mode: Option<Spanned<String>>,
    ageing_s: Option<Spanned<i64>>,
}

/// A `[[port]]` of a switch or an Axon.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPort {
    name: Spanned<String>,
    capacity_bps: Option<Spanned<i64>>,
    buffer_bytes: Option<Spanned<i64>>,
    delay_ms: Option<Spanned<f64>>,
}

/// The switch's configuration.
#[derive(Debug, Clone)]
pub struct SwitchFile {
    pub path: PathBuf,
    pub cfg: SwitchConfig,
    pub io: IoConfig,
    pub metrics: crate::metrics::MetricsConfig,
}

impl SwitchFile {
    pub fn load(path: &Path) -> Result<SwitchFile, ConfigError> {
        Self::parse(path, &read(path)?)
    }

    pub fn parse(path: &Path, src: &str) -> Result<SwitchFile, ConfigError> {
        let err = |at: usize, key: &str, message: String| ConfigError {
            file: path.into(),
            line: line_of(src, at),
            key: key.into(),
            message,
        };
        let raw: Raw = from_toml(path, src)?;
        let mut mode = Mode::Fair;
        let mut ageing = Duration::from_secs(300);
        if let Some(s) = &raw.switch {
            if let Some(m) = &s.mode {
                mode = match m.get_ref().as_str() {
                    "fair" => Mode::Fair,
                    "fifo" => Mode::Fifo,
                    other => {
                        return Err(err(
                            m.span().start,
                            "switch.mode",
                            format!("{other:?}: use \"fair\" or \"fifo\""),
                        ))
                    }
                };
            }
            if let Some(a) = &s.ageing_s {
                if !(1..=1_000_000).contains(a.get_ref()) {
                    return Err(err(
                        a.span().start,
                        "switch.ageing_s",
                        "must be 1 to 1000000".into(),
                    ));
                }
                ageing = Duration::from_secs(*a.get_ref() as u64);
            }
        }
        if raw.port.len() < 2 {
            return Err(err(
                0,
                "port",
                "a switch needs at least two [[port]]s".into(),
            ));
        }
        let ports = parse_ports(path, src, &raw.port)?;
        Ok(SwitchFile {
            path: path.into(),
            cfg: SwitchConfig {
                ports,
                mode,
                ageing,
            },
            io: IoConfig::from_raw(path, src, raw.io.as_ref())?,
            metrics: crate::config::RawMetrics::check(path, src, raw.metrics.as_ref())?,
        })
    }
}

/// The `[[port]]`s of a switch or an Axon: names, capacities, buffers, delays.
pub(crate) fn parse_ports(
    path: &Path,
    src: &str,
    raw: &[RawPort],
) -> Result<Vec<PortConfig>, ConfigError> {
    let err = |at: usize, key: &str, message: String| ConfigError {
        file: path.into(),
        line: line_of(src, at),
        key: key.into(),
        message,
    };
    let mut ports = Vec::new();
    for (i, p) in raw.iter().enumerate() {
        let key = |k: &str| format!("port[{i}].{k}");
        crate::config::check_ifname(p.name.get_ref())
            .map_err(|m| err(p.name.span().start, &key("name"), m))?;
        if ports
            .iter()
            .any(|q: &PortConfig| q.name == *p.name.get_ref())
        {
            return Err(err(
                p.name.span().start,
                &key("name"),
                format!("{:?} is named twice", p.name.get_ref()),
            ));
        }
        let capacity_bps = match &p.capacity_bps {
            Some(c) if !(1_000..=400_000_000_000).contains(c.get_ref()) => {
                return Err(err(
                    c.span().start,
                    &key("capacity_bps"),
                    "must be 1000 (1 kbit/s) to 400000000000 (400 Gbit/s)".into(),
                ))
            }
            Some(c) => Some(*c.get_ref() as u64),
            None => None,
        };
        let buffer_bytes = match &p.buffer_bytes {
            Some(b) if !(1_518..=1_073_741_824).contains(b.get_ref()) => {
                return Err(err(
                    b.span().start,
                    &key("buffer_bytes"),
                    "must be 1518 (one frame) to 1073741824 (1 GiB)".into(),
                ))
            }
            Some(b) => *b.get_ref() as usize,
            None => DEFAULT_BUFFER,
        };
        let delay = match &p.delay_ms {
            Some(d) if !(0.0..=10_000.0).contains(d.get_ref()) => {
                return Err(err(
                    d.span().start,
                    &key("delay_ms"),
                    "must be 0 to 10000".into(),
                ))
            }
            Some(d) => Duration::from_secs_f64(d.get_ref() / 1000.0),
            None => Duration::ZERO,
        };
        ports.push(PortConfig {
            name: p.name.get_ref().clone(),
            capacity_bps,
            buffer_bytes,
            delay,
        });
    }
    Ok(ports)
}

fn answer(s: &mut Switch, cmd: &str, _req: &Value) -> Value {
    let now = Instant::now();
    match cmd {
        "macs" => Value::Array(
            s.macs(now)
                .into_iter()
                .map(|(m, p, age)| json!({"mac": m.to_string(), "port": s.cfg.ports[p as usize].name, "age_s": (age * 10.0).round() / 10.0}))
                .collect(),
        ),
        "interfaces" => {
            let queued = s.queued();
            Value::Array(
                s.cfg
                    .ports
                    .iter()
                    .zip(queued)
                    .map(|(p, q)| {
                        json!({
                            "name": p.name,
                            "capacity_bps": p.capacity_bps,
                            "buffer_bytes": p.buffer_bytes,
                            "delay_ms": p.delay.as_secs_f64() * 1000.0,
                            "queued_frames": q,
                            "mode": match s.cfg.mode { Mode::Fair => "fair", Mode::Fifo => "fifo" },
                        })
                    })
                    .collect(),
            )
        }
        _ => Value::Null,
    }
}

/// The switch's fast path (`[io] fast_path`, docs/switch.md): its maps, kept in step with
/// the learned table by the run loop.
pub struct SwitchFast {
    pub fp: io::fastpath::l2::SwitchFastPath,
    /// Per port: frames may leave there in the fast path (no capacity, no delay).
    pub eligible: Vec<bool>,
    /// Per port: its device takes frames redirected in XDP (`io::egress`).
    pub egress: Vec<bool>,
    /// Every frame through user space, while a capture runs.
    pub suspended: bool,
    /// Every port's tcx hook runs the hand-off (`io::handoff`): a port whose device takes
    /// no XDP frames gets its frames through it.
    pub handoff: bool,
    synced: Instant,
    /// The ports' interfaces, in port order.
    names: Vec<String>,
    /// Handed over to the next start: the programs' deadline is kept this far ahead while
    /// the switch runs ([`SwitchFast::hand_over`]).
    grace: Option<Duration>,
}

/// How often the learned table is copied into the fast path's map.
const FAST_SYNC: Duration = Duration::from_millis(100);

impl SwitchFast {
    /// The maps for the switch's ports, open in the kernel already (their interfaces).
    pub fn new(cfg: &SwitchConfig) -> Result<SwitchFast, String> {
        let names: Vec<String> = cfg.ports.iter().map(|p| p.name.clone()).collect();
        let eligible: Vec<bool> = cfg
            .ports
            .iter()
            .map(|p| p.capacity_bps.is_none() && p.delay.is_zero())
            .collect();
        let fp = io::fastpath::l2::SwitchFastPath::new(&names, &eligible)
            .map_err(|e| format!("switch fast path: {e}"))?;
        // As the devices are now, and the hand-off taken as there (the ports' opening
        // attaches it before their programs; the switch says so once they are open): a
        // restart's programs, which take a predecessor's links at once, send every frame
        // the right way from the first.
        let egress = names
            .iter()
            .map(|n| io::egress::xdp_egress(n).ok())
            .collect();
        let f = SwitchFast {
            fp,
            egress,
            suspended: false,
            handoff: true,
            eligible,
            synced: Instant::now(),
            names,
            grace: None,
        };
        for p in 0..f.eligible.len() {
            f.write_port(p);
        }
        Ok(f)
    }

    /// What a predecessor's fast path had learned, handed over across a restart (pinned
    /// beside its links): taken into `s`'s table and this fast path's map before the
    /// ports open, so that the programs that replace the predecessor's in its links
    /// forward from their first frame what it forwarded. `None`: nothing was handed over.
    pub fn adopt(&mut self, s: &mut Switch) -> Option<usize> {
        let dir = crate::fast::first_port_pin_dir(&self.names, false)
            .filter(|d| d.join("switch-macs").exists())?;
        let ifindexes: Vec<u32> = self
            .names
            .iter()
            .map(|n| io::netdev::ifindex(n).map_or(0, |i| i as u32))
            .collect();
        let learned: Vec<(wire::MacAddr, u16)> =
            io::fastpath::l2::SwitchFastPath::pinned_macs(&dir)
                .into_iter()
                .filter_map(|(mac, ifindex)| {
                    let port = ifindexes.iter().position(|&i| i == ifindex)?;
                    Some((wire::MacAddr(mac), port as u16))
                })
                .collect();
        let n = s.adopt(&learned, Instant::now());
        self.publish(s);
        Some(n)
    }

    /// Hands the fast path over to the switch's next start, where its links are pinned
    /// (`io::pin::enable`, as the ports opened): the learned table and the ports' words
    /// pinned beside them for the successor ([`SwitchFast::adopt`]), and, while the switch
    /// runs, the programs' deadline kept `grace` ahead ([`run`]), so that they forward for
    /// at most `grace` after the switch is gone unless a successor takes them over.
    pub fn hand_over(&mut self, grace: Duration) -> bool {
        let fp = &self.fp;
        let handed = crate::fast::pin_for_successor(&self.names, "switch", |d| fp.pin(d));
        if handed {
            self.grace = Some(grace);
        }
        handed
    }

    /// Whether port `port`'s device takes frames redirected in XDP: frames leave by it
    /// in the fast path only if it does (and the port is unshaped).
    pub fn set_egress(&mut self, port: usize, ok: bool) {
        if let Some(e) = self.egress.get_mut(port) {
            *e = ok;
            self.write_port(port);
        }
    }

    /// Says whether every port's tcx hook runs the hand-off to tcx.
    pub fn set_handoff(&mut self, on: bool) {
        self.handoff = on;
        for p in 0..self.eligible.len() {
            self.write_port(p);
        }
    }

    /// How frames leave by `port` in the fast path now (`None`: they do not).
    pub fn egress_now(&self, port: usize) -> Option<io::fastpath::EgressMode> {
        crate::fast::egress_mode(
            self.suspended || !self.eligible[port],
            self.egress[port],
            self.handoff,
        )
    }

    fn write_port(&self, port: usize) {
        if let Err(e) = self.fp.set_port(port as u32, self.egress_now(port)) {
            tracing::warn!(port, error = %e, "switch fast path: ports map");
        }
    }

    /// While a capture runs on the switch, no frame leaves in the fast path: every one
    /// goes through user space, where the capture sees it.
    fn follow_capture(&mut self) {
        let want = crate::capturing::capture_under_way();
        if self.suspended != want {
            self.suspended = want;
            for p in 0..self.eligible.len() {
                self.write_port(p);
            }
            tracing::info!(
                suspended = want,
                "switch fast path: a capture started or ended"
            );
        }
    }

    /// Copies the learned table into the fast path's map (every 100 ms at most).
    fn sync(&mut self, s: &Switch) {
        self.follow_capture();
        let now = Instant::now();
        if now.duration_since(self.synced) < FAST_SYNC {
            return;
        }
        self.synced = now;
        self.publish(s);
    }

    /// Copies the learned table into the fast path's map now.
    fn publish(&mut self, s: &Switch) {
        let table: Vec<([u8; 6], u16)> = s
            .macs(Instant::now())
            .into_iter()
            .map(|(m, p, _)| (m.0, p))
            .collect();
        if let Err(e) = self.fp.sync(&table) {
            tracing::warn!(error = %e, "switch fast path: the learned table could not be copied");
        }
    }
}

/// Runs the switch over `ports` (in the config's order) until `stop` is set; with `fast`,
/// its ports' programs forward known unicast between unshaped ports themselves (else
/// `fast_off` says why not).
/// Runs the switch `s` (from `file`) over `ports` until `stop`. `reload` (the control
/// socket's, or SIGHUP) reads `file` again and applies what can change in place.
pub fn run<P: Port>(
    s: Switch,
    ports: Vec<P>,
    control: Option<&Path>,
    stop: Arc<AtomicBool>,
    file: &SwitchFile,
    fast: Option<SwitchFast>,
    fast_off: std::collections::HashMap<String, String>,
) -> Result<(), String> {
    let (io, metrics) = (file.io, &file.metrics);
    // Shared with the control socket's thread, which reads the programs' counters.
    let fast = fast.map(|f| Arc::new(std::sync::Mutex::new(f)));
    // Handed over: the deadline kept ahead while the switch runs.
    if let Some(f) = &fast {
        if let Some(grace) = f.lock().ok().and_then(|g| g.grace) {
            let f = f.clone();
            crate::fast::keep_beating(stop.clone(), move || {
                f.lock().map_or(Ok(()), |f| f.fp.beat(grace))
            });
        }
    }
    let names: Vec<String> = s.cfg.ports.iter().map(|p| p.name.clone()).collect();
    // Each port's link going down or coming up, logged once (crate::statelog).
    crate::statelog::watch_links(names.clone(), stop.clone()).map_err(|e| format!("links: {e}"))?;
    if let Some(f) = &fast {
        let f = f.clone();
        crate::fast::fold(&s.counters, &names, move || {
            f.lock().map(|f| f.fp.stats()).unwrap_or_default()
        });
    }
    let fast_counters: Option<crate::run::FastCounters> = fast.clone().map(|f| {
        Arc::new(move || match f.lock() {
            Ok(f) => crate::fast::stats_json(&names, &f.fp.stats()),
            Err(_) => Value::Null,
        }) as crate::run::FastCounters
    });
    let (servers, qrx) = crate::run::serve_element(
        control,
        s.counters.clone(),
        &["interfaces", "macs", "reload", "config"],
        metrics,
        "switch",
        fast_counters,
    )?;
    crate::run::set_priority(io.priority)?;
    let tick = |s: &mut Switch| {
        if let Some(f) = &fast {
            if let Ok(mut f) = f.lock() {
                f.sync(s);
            }
        }
    };
    // Each port's device is watched: frames leave by it in the fast path only while it
    // takes frames redirected in XDP.
    let watch = fast.clone().map(|f| {
        let names: Vec<String> = s.cfg.ports.iter().map(|p| p.name.clone()).collect();
        io::egress::EgressWatch::start(&names, stop.clone(), move |port, ok| {
            if let Ok(mut f) = f.lock() {
                f.set_egress(port, ok);
            }
        })
    });
    // The file as the switch runs it, for `reload` to compare with.
    let mut running = std::fs::read_to_string(&file.path).unwrap_or_default();
    // `show interfaces`: each port's fast-path frames beside its queue.
    let answer = |s: &mut Switch, cmd: &str, req: &Value| {
        if cmd == "reload" {
            return match reload(s, fast.as_deref(), &file.path, &mut running, &servers.1) {
                Ok(v) => v,
                Err(e) => json!({ "error": e }),
            };
        }
        if cmd == "config" {
            // The file as last loaded or reloaded, with its defaults.
            return match SwitchFile::parse(&file.path, &running) {
                Ok(f) => json!({ "toml": crate::showconfig::switch(&f.cfg, &f.io, &f.metrics) }),
                Err(e) => json!({ "error": e.to_string() }),
            };
        }
        let mut v = answer(s, cmd, req);
        if cmd == "interfaces" {
            let f = fast.as_ref().and_then(|f| f.lock().ok());
            let stats = f.as_ref().map(|f| f.fp.stats()).unwrap_or_default();
            let watched = watch.as_ref().map(|w| w.ports()).unwrap_or_default();
            for (i, p) in v.as_array_mut().into_iter().flatten().enumerate() {
                let w = watched.get(i);
                let off = p["name"].as_str().and_then(|n| fast_off.get(n));
                let held = f.as_ref().and_then(|f| {
                    if f.suspended {
                        Some(crate::fast::SUSPENDED.into())
                    } else {
                        (!f.eligible[i]).then(|| crate::fast::SHAPED.into())
                    }
                });
                let egress = f.as_ref().and_then(|f| f.egress_now(i));
                p["fast_path"] = crate::fast::port_fast(off, stats.get(i), egress, held, w).json();
            }
        }
        v
    };
    run_element(s, ports, stop, Some(qrx), answer, tick, io.busy_poll)
}

/// What `reload` may change in place: every port's `capacity_bps`, `buffer_bytes` and
/// `delay_ms`, `[switch] ageing_s`, and `[metrics] listen`. Anything else is refused with
/// its key.
const RELOADABLE: [&str; 3] = ["port", "switch", "metrics"];

/// `reload`: reads `path` again; applies what can change in place to the running switch
/// and to its fast path (a port shaped or delayed now, or no longer, leaves the fast path
/// or joins it). A bad file, or a change that needs a restart, changes nothing and says
/// why (the file, line and key).
fn reload(
    s: &mut Switch,
    fast: Option<&std::sync::Mutex<SwitchFast>>,
    path: &Path,
    running: &mut String,
    metrics: &crate::metrics::MetricsSlot,
) -> Result<Value, String> {
    let text = read(path).map_err(|e| e.to_string())?;
    let new = SwitchFile::parse(path, &text).map_err(|e| e.to_string())?;
    if let Some(k) = crate::run::changed_key_outside(running, &text, &RELOADABLE)
        .or_else(|| metrics.refused(&new.metrics).map(str::to_string))
    {
        return Err(format!(
            "{}: {k}: changes only with a restart; nothing reloaded",
            path.display()
        ));
    }
    s.reconfigure(new.cfg.clone())
        .map_err(|e| format!("{}: {e}; nothing reloaded", path.display()))?;
    if let Some(f) = fast {
        if let Ok(mut f) = f.lock() {
            for (i, p) in new.cfg.ports.iter().enumerate() {
                let ok = p.capacity_bps.is_none() && p.delay.is_zero();
                if f.eligible.get(i).is_some_and(|e| *e != ok) {
                    f.eligible[i] = ok;
                    f.write_port(i);
                }
            }
        }
    }
    *running = text;
    metrics.reload(&new.metrics).map_err(|e| {
        format!(
            "{}: ports reloaded; [metrics] not moved: {e}",
            path.display()
        )
    })?;
    tracing::info!(file = %path.display(), "config reloaded");
    Ok(json!({ "reloaded": true }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_and_errors_name_line_and_key() {
        let path = Path::new("sw.toml");
        let good = "[switch]\nmode = \"fifo\"\n\n[[port]]\nname = \"p1\"\ncapacity_bps = 1_000_000_000\ndelay_ms = 25.0\n\n[[port]]\nname = \"p2\"\n";
        let s = SwitchFile::parse(path, good).unwrap();
        assert_eq!(s.cfg.mode, Mode::Fifo);
        assert_eq!(s.cfg.ports[0].capacity_bps, Some(1_000_000_000));
        assert_eq!(s.cfg.ports[0].delay, Duration::from_millis(25));
        assert_eq!(s.cfg.ports[1].buffer_bytes, DEFAULT_BUFFER);
        let e = SwitchFile::parse(path, &good.replace("\"fifo\"", "\"wfq\"")).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (2, "switch.mode"));
        let e = SwitchFile::parse(path, &good.replace("1_000_000_000", "0")).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (6, "port[0].capacity_bps"));
        let e = SwitchFile::parse(path, &good.replace("\"p2\"", "\"p1\"")).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (10, "port[1].name"));
        let e =
            SwitchFile::parse(path, &good.replace("delay_ms = 25.0", "delay = 25")).unwrap_err();
        assert_eq!(e.line, 7, "{e}");
        assert!(SwitchFile::parse(path, "[[port]]\nname = \"p1\"\n").is_err());
    }
}
