//! Flow export (docs/flows.md): `[flow_export]` in a forwarder's file, the flow cache that
//! the samples (from user space, crate::flows in dataplane, and from the fast path's ring
//! buffer) feed, and the exporter that ages flows out and sends them to an IPFIX
//! collector over UDP (wire::ipfix).
//!
//! ```toml
//! [flow_export]
//! collector = "10.9.0.10:4739"  # ADDR:PORT, IPv4 or IPv6, UDP
//! sampling = 100                # 1 in N packets, at random, per port; 1: every packet
//! active_timeout_s = 60         # a flow still going is exported this often
//! idle_timeout_s = 15           # a flow silent this long is exported and forgotten
//! observation_domain = 1        # IPFIX observation domain id
//! template_interval_s = 30      # the templates go again this often (and on start)
//! ```

pub mod remote;

pub use crate::config::FlowExportConfig;
use dataplane::flows::{Sample, SamplerShare};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use wire::ipfix::{self, FlowRecord};

/// The flows the cache holds at most; a new flow past it exports the oldest first.
pub const MAX_FLOWS: usize = 65_536;

/// A flow's key: what the records tell apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FlowKey {
    src: IpAddr,
    dst: IpAddr,
    protocol: u8,
    ports: (u16, u16),
    icmp: u16,
    ingress: u16,
    /// Forwarded, or dropped (and why): one flow each.
    status: u8,
}

#[derive(Debug, Clone)]
struct Flow {
    first_ms: u64,
    last_ms: u64,
    last: Instant,
    /// When it was last exported (or began).
    since: Instant,
    packets: u64,
    bytes: u64,
    tcp_flags: u16,
    egress: Option<u16>,
    next_hop: Option<IpAddr>,
    interval: u32,
}

/// The exporter's counters (`show counters` `flow_export`, `/metrics`).
#[derive(Debug, Default)]
pub struct ExportStats {
    pub samples: AtomicU64,
    pub flows_exported: AtomicU64,
    pub messages_sent: AtomicU64,
    /// Records not sent: the collector's socket refused them (unreachable, down).
    pub records_lost: AtomicU64,
    /// Flows exported early because the cache was full.
    pub cache_full: AtomicU64,
    /// Samples the fast path's ring buffer could not take (read from the program's count).
    pub ring_overruns: AtomicU64,
    pub flows_active: AtomicU64,
}

/// The flow cache.
#[derive(Debug, Default)]
pub struct FlowCache {
    flows: HashMap<FlowKey, Flow>,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl FlowCache {
    /// Takes sample `s` at `now` (`ms`: the wall clock's milliseconds); a full cache
    /// first gives up its oldest flow, returned to be exported.
    pub fn add(&mut self, s: &Sample, now: Instant, ms: u64) -> Option<FlowRecord> {
        let k = &s.key;
        let key = FlowKey {
            src: k.src,
            dst: k.dst,
            protocol: k.protocol,
            ports: k.ports.unwrap_or((0, 0)),
            icmp: k.icmp.map_or(0, |(t, c)| u16::from(t) << 8 | u16::from(c)),
            ingress: s.ingress,
            status: s.status,
        };
        let mut out = None;
        if !self.flows.contains_key(&key) && self.flows.len() >= MAX_FLOWS {
            if let Some(oldest) = self
                .flows
                .iter()
                .min_by_key(|(_, f)| f.last)
                .map(|(k, _)| *k)
            {
                let f = self.flows.remove(&oldest).expect("present");
                out = Some(record(&oldest, &f, ipfix::end_reason::FORCED_END));
            }
        }
        let f = self.flows.entry(key).or_insert_with(|| Flow {
            first_ms: ms,
            last_ms: ms,
            last: now,
            since: now,
            packets: 0,
            bytes: 0,
            tcp_flags: 0,
            egress: s.egress,
            next_hop: s.next_hop,
            interval: s.interval,
        });
        f.last_ms = ms;
        f.last = now;
        f.packets += u64::from(s.interval);
        f.bytes += u64::from(s.bytes) * u64::from(s.interval);
        f.tcp_flags |= u16::from(k.tcp_flags.unwrap_or(0));
        f.egress = s.egress.or(f.egress);
        f.next_hop = s.next_hop.or(f.next_hop);
        f.interval = s.interval;
        out
    }

    /// The flows due at `now`: idle ones (forgotten) and active ones past the active
    /// timeout (their counts start again); every flow where `all` (a stop).
    pub fn due(&mut self, cfg: &FlowExportConfig, now: Instant, all: bool) -> Vec<FlowRecord> {
        let mut out = Vec::new();
        self.flows.retain(|k, f| {
            if all {
                out.push(record(k, f, ipfix::end_reason::FORCED_END));
                return false;
            }
            if now.saturating_duration_since(f.last) >= cfg.idle_timeout {
                out.push(record(k, f, ipfix::end_reason::IDLE_TIMEOUT));
                return false;
            }
            if now.saturating_duration_since(f.since) >= cfg.active_timeout {
                out.push(record(k, f, ipfix::end_reason::ACTIVE_TIMEOUT));
                f.since = now;
                f.first_ms = f.last_ms;
                f.packets = 0;
                f.bytes = 0;
                f.tcp_flags = 0;
            }
            true
        });
        out
    }

    pub fn len(&self) -> usize {
        self.flows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }
}

/// A flow's record. Interfaces are the element's interface indexes plus one (0: none),
/// as `show interfaces` lists them.
fn record(k: &FlowKey, f: &Flow, end_reason: u8) -> FlowRecord {
    let unspecified = if k.src.is_ipv6() {
        IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
    };
    FlowRecord {
        src: k.src,
        dst: k.dst,
        protocol: k.protocol,
        src_port: k.ports.0,
        dst_port: k.ports.1,
        icmp_type_code: k.icmp,
        tcp_flags: f.tcp_flags,
        ingress: u32::from(k.ingress) + 1,
        egress: f.egress.map_or(0, |e| u32::from(e) + 1),
        next_hop: f
            .next_hop
            .filter(|h| h.is_ipv6() == k.src.is_ipv6())
            .unwrap_or(unspecified),
        octets: f.bytes,
        packets: f.packets,
        start_ms: f.first_ms,
        end_ms: f.last_ms,
        status: k.status,
        end_reason,
        sampling: f.interval,
    }
}

/// Where an exporter's records go instead of a collector (a back-end's: to the
/// controller over DIST): how many of them were taken.
pub type Relay = Box<dyn FnMut(&[FlowRecord]) -> usize + Send>;

/// The exporter: the cache, the socket, the sequence and when the templates went.
pub struct Exporter {
    pub cfg: FlowExportConfig,
    pub cache: FlowCache,
    /// Where set, records go there, not to `cfg.collector`.
    pub relay: Option<Relay>,
    sock: Option<UdpSocket>,
    seq: u32,
    templates_at: Option<Instant>,
    pub stats: Arc<ExportStats>,
}

impl Exporter {
    pub fn new(cfg: FlowExportConfig, stats: Arc<ExportStats>) -> Exporter {
        Exporter {
            cfg,
            cache: FlowCache::default(),
            relay: None,
            sock: None,
            seq: 0,
            templates_at: None,
            stats,
        }
    }

    /// A new `[flow_export]` (a reload): a new collector gets the templates at once.
    pub fn reconfigure(&mut self, cfg: FlowExportConfig) {
        if cfg.collector != self.cfg.collector
            || cfg.observation_domain != self.cfg.observation_domain
        {
            self.sock = None;
            self.templates_at = None;
        }
        self.cfg = cfg;
    }

    /// Takes the settings in `config` where a reload changed them.
    pub fn follow(&mut self, config: &Mutex<FlowExportConfig>) {
        if let Ok(c) = config.lock() {
            if *c != self.cfg {
                self.reconfigure(c.clone());
            }
        }
    }

    /// Sends `records` (with the templates where due); a socket that fails costs the
    /// records, counted.
    pub fn send(&mut self, records: &[FlowRecord], now: Instant) {
        if let Some(relay) = self.relay.as_mut() {
            if records.is_empty() {
                return;
            }
            let taken = relay(records) as u64;
            self.stats.flows_exported.fetch_add(taken, Relaxed);
            self.stats
                .records_lost
                .fetch_add(records.len() as u64 - taken, Relaxed);
            return;
        }
        let templates = self
            .templates_at
            .is_none_or(|t| now.saturating_duration_since(t) >= self.cfg.template_interval);
        if records.is_empty() && !templates {
            return;
        }
        if self.sock.is_none() {
            let any: SocketAddr = if self.cfg.collector.is_ipv6() {
                "[::]:0".parse().expect("an address")
            } else {
                "0.0.0.0:0".parse().expect("an address")
            };
            self.sock = UdpSocket::bind(any).ok();
        }
        let secs = (unix_ms() / 1000) as u32;
        let domain = self.cfg.observation_domain;
        for (m, n) in ipfix::messages(domain, secs, &mut self.seq, templates, records) {
            let sent = self
                .sock
                .as_ref()
                .is_some_and(|s| s.send_to(&m, self.cfg.collector).is_ok());
            if sent {
                self.stats.messages_sent.fetch_add(1, Relaxed);
                self.stats.flows_exported.fetch_add(n as u64, Relaxed);
            } else {
                self.stats.records_lost.fetch_add(n as u64, Relaxed);
            }
        }
        if templates {
            self.templates_at = Some(now);
        }
    }

    /// Takes a sample.
    pub fn take(&mut self, s: &Sample, now: Instant, ms: u64) {
        self.stats.samples.fetch_add(1, Relaxed);
        if let Some(r) = self.cache.add(s, now, ms) {
            self.stats.cache_full.fetch_add(1, Relaxed);
            self.send(&[r], now);
        }
    }

    /// Exports what is due (everything where `all`).
    pub fn tick(&mut self, now: Instant, all: bool) {
        let due = self.cache.due(&self.cfg, now, all);
        self.send(&due, now);
        self.stats
            .flows_active
            .store(self.cache.len() as u64, Relaxed);
    }
}

/// The running export of an element: its settings (a reload replaces them) and counters.
#[derive(Clone)]
pub struct FlowExport {
    pub config: Arc<Mutex<FlowExportConfig>>,
    pub sampler: Arc<SamplerShare>,
    pub stats: Arc<ExportStats>,
    /// A back-end's export for the controller (remote): what the controller last said.
    pub to_controller: Option<Arc<dataplane::flows::FlowRemote>>,
}

impl FlowExport {
    /// The settings and counters of an export that starts with `cfg`.
    pub fn new(cfg: &FlowExportConfig) -> FlowExport {
        let export = FlowExport {
            config: Arc::new(Mutex::new(cfg.clone())),
            sampler: Arc::new(SamplerShare::default()),
            stats: Arc::new(ExportStats::default()),
            to_controller: None,
        };
        export.sampler.interval.store(cfg.sampling, Relaxed);
        export
    }

    /// `show counters`' `flow_export`.
    pub fn json(&self) -> Value {
        let s = &self.stats;
        let cfg = self.config.lock().map(|c| c.clone()).ok();
        // A back-end of a multistage router exports to the controller that drives it.
        let collector = match &self.to_controller {
            Some(r) => r
                .heard
                .lock()
                .ok()
                .and_then(|h| *h)
                .map(|(mac, _, _)| format!("controller {mac}")),
            None => cfg.as_ref().map(|c| c.collector.to_string()),
        };
        json!({
            "collector": collector,
            "sampling": self.sampler.interval.load(Relaxed),
            "samples": s.samples.load(Relaxed),
            "samples_lost": self.sampler.lost.load(Relaxed),
            "flows_active": s.flows_active.load(Relaxed),
            "flows_exported": s.flows_exported.load(Relaxed),
            "messages_sent": s.messages_sent.load(Relaxed),
            "records_lost": s.records_lost.load(Relaxed),
            "cache_full": s.cache_full.load(Relaxed),
            "ring_overruns": s.ring_overruns.load(Relaxed),
        })
    }

    /// Applies a reloaded `[flow_export]`.
    pub fn reload(&self, cfg: &FlowExportConfig) {
        self.sampler.interval.store(cfg.sampling, Relaxed);
        if let Ok(mut c) = self.config.lock() {
            *c = cfg.clone();
        }
    }
}

/// Starts the exporter's thread: samples from `rx` (and from what `more` makes of the
/// sampler's settings and the counters, polled each pass: the fast path's ring buffer)
/// into the cache, flows out every 100 ms, until `stop`
/// (then every flow goes).
pub fn start(
    cfg: FlowExportConfig,
    rx: Receiver<Sample>,
    more: impl FnOnce(&Arc<SamplerShare>, &Arc<ExportStats>) -> Result<MoreSamples, String>,
    stop: Arc<AtomicBool>,
) -> Result<FlowExport, String> {
    let export = FlowExport::new(&cfg);
    let more = more(&export.sampler, &export.stats)?;
    let config = export.config.clone();
    // A reload's settings, taken at the next pass.
    let refresh: Refresh = Box::new(move |e: &mut Exporter| e.follow(&config));
    let e = Exporter::new(cfg, export.stats.clone());
    spawn(e, export.sampler.clone(), rx, more, refresh, stop)?;
    Ok(export)
}

/// What the exporter's thread does with its settings each 100 ms.
pub(crate) type Refresh = Box<dyn FnMut(&mut Exporter) + Send>;

/// The exporter's thread: `e` takes the samples of `rx` and `more`, and ages its flows
/// out every 100 ms (after `refresh`), until `stop` (then every flow goes). While
/// `sampler` samples nothing (a back-end no controller asks for flows) it wakes only for
/// those 100 ms passes, not every 5 ms.
pub(crate) fn spawn(
    mut e: Exporter,
    sampler: Arc<SamplerShare>,
    rx: Receiver<Sample>,
    mut more: MoreSamples,
    mut refresh: Refresh,
    stop: Arc<AtomicBool>,
) -> Result<(), String> {
    std::thread::Builder::new()
        .name("flow-export".into())
        .spawn(move || {
            let mut next = Instant::now();
            loop {
                let stopping = stop.load(Relaxed);
                let (now, ms) = (Instant::now(), unix_ms());
                let wait = match sampler.interval.load(Relaxed) {
                    0 => next
                        .saturating_duration_since(now)
                        .max(Duration::from_millis(1)),
                    _ => Duration::from_millis(5),
                };
                if let Ok(s) = rx.recv_timeout(wait) {
                    e.take(&s, now, ms);
                    for s in rx.try_iter().take(65_536) {
                        e.take(&s, now, ms);
                    }
                }
                more(&mut |s| e.take(&s, now, ms));
                if now >= next || stopping {
                    refresh(&mut e);
                    e.tick(now, stopping);
                    next = now + Duration::from_millis(100);
                }
                if stopping {
                    return;
                }
            }
        })
        .map_err(|e| format!("flow export: {e}"))?;
    Ok(())
}

/// Where samples come from besides user space's queue (the fast path's ring buffer):
/// called each pass of the exporter with what takes a sample.
pub type MoreSamples = Box<dyn FnMut(&mut dyn FnMut(Sample)) + Send>;

/// `view` with the exporter's counters on its element (for `/metrics`), where it exports.
pub fn view_with(
    view: crate::metrics::Source,
    export: Option<FlowExport>,
) -> crate::metrics::Source {
    let Some(export) = export else { return view };
    Arc::new(move || {
        let mut v = view();
        if let Some(e) = v.first_mut() {
            e.flow_export = Some(export.json());
        }
        v
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::acl::Key;

    fn cfg() -> FlowExportConfig {
        FlowExportConfig {
            collector: "127.0.0.1:4739".parse().unwrap(),
            sampling: 10,
            active_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(15),
            observation_domain: 7,
            template_interval: Duration::from_secs(30),
        }
    }

    fn sample(dport: u16, bytes: u32) -> Sample {
        let mut ip = vec![
            0x45, 0, 0, 40, 0, 0, 0, 0, 64, 6, 0, 0, 10, 1, 0, 10, 10, 2, 0, 10,
        ];
        ip.extend(40000u16.to_be_bytes());
        ip.extend(dport.to_be_bytes());
        ip.extend([0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x18, 0, 0, 0, 0, 0, 0]);
        Sample {
            key: Key::of_ipv4(&ip).unwrap(),
            ingress: 0,
            egress: Some(1),
            next_hop: Some([10, 2, 0, 10].into()),
            bytes,
            status: ipfix::status::FORWARDED,
            interval: 10,
        }
    }

    #[test]
    fn flows_add_up_scaled_and_age_out_by_their_timeouts() {
        let c = cfg();
        let mut cache = FlowCache::default();
        let t = Instant::now();
        for i in 0..5 {
            cache.add(
                &sample(5201, 100),
                t + Duration::from_secs(i),
                1000 + i * 1000,
            );
        }
        cache.add(&sample(22, 60), t, 1000);
        assert_eq!(cache.len(), 2);
        assert!(cache.due(&c, t + Duration::from_secs(10), false).is_empty());
        // Port 22's flow went quiet at t: idle at t + 15 s.
        let due = cache.due(&c, t + Duration::from_secs(15), false);
        assert_eq!(due.len(), 1);
        assert_eq!(
            (due[0].dst_port, due[0].packets, due[0].octets),
            (22, 10, 600)
        );
        assert_eq!(due[0].end_reason, ipfix::end_reason::IDLE_TIMEOUT);
        // The other one, active at t + 60 s: exported, kept, counted from zero.
        cache.add(&sample(5201, 100), t + Duration::from_secs(59), 60_000);
        let due = cache.due(&c, t + Duration::from_secs(60), false);
        assert_eq!(due.len(), 1);
        let r = &due[0];
        assert_eq!((r.packets, r.octets, r.tcp_flags), (60, 6000, 0x18));
        assert_eq!(
            (r.ingress, r.egress, r.start_ms, r.end_ms),
            (1, 2, 1000, 60_000)
        );
        assert_eq!(r.end_reason, ipfix::end_reason::ACTIVE_TIMEOUT);
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.due(&c, t + Duration::from_secs(61), true).len(), 1);
        assert!(cache.is_empty());
    }

    #[test]
    fn the_exporter_sends_templates_and_records_a_decoder_reads() {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut c = cfg();
        c.collector = sock.local_addr().unwrap();
        let stats = Arc::new(ExportStats::default());
        let mut e = Exporter::new(c, stats.clone());
        let t = Instant::now();
        for p in 0..3 {
            e.take(&sample(5000 + p, 100), t, 1000);
        }
        e.tick(t, true);
        let mut known = ipfix::Templates::new();
        let mut buf = [0u8; 2048];
        let n = sock.recv(&mut buf).unwrap();
        let d = ipfix::decode(&buf[..n], &mut known).unwrap();
        assert_eq!((d.domain, d.templates.len(), d.records.len()), (7, 2, 3));
        assert_eq!(stats.flows_exported.load(Relaxed), 3);
        // A collector that is not there costs the records, counted.
        drop(sock);
        let mut c = cfg();
        c.collector = "127.0.0.1:9".parse().unwrap();
        let mut e = Exporter::new(c, stats.clone());
        e.take(&sample(1, 1), t, 1);
        e.tick(t, true);
        assert_eq!(
            stats.flows_exported.load(Relaxed) + stats.records_lost.load(Relaxed),
            4
        );
    }
}
