//! The multistage router as one exporter (docs/flows.md, "In the multistage router"):
//! the controller's `[flow_export]` drives every back-end's sampling with DIST
//! FLOW_CONFIG; each back-end keeps the flows it forwards (a flow balanced over one
//! back-end is in one cache) and sends the ended ones to the controller in FLOW_RECORDS,
//! with the router's interfaces (the VLAN id of each external network) in place of its
//! own; the controller exports them as the router: one observation domain, one
//! sequence, from its own address.

use super::*;
use dataplane::flows::FlowRemote;
use std::sync::mpsc::{Receiver, SyncSender};
use wire::dist::{self, FlowConfig};
use wire::MacAddr;

/// A back-end stops sampling when it has heard no FLOW_CONFIG for this long (the
/// controller sends one every second): an export no controller asks for ends by itself.
pub const CONFIG_LIFETIME: Duration = Duration::from_millis(3_500);

/// What a back-end's exporter needs to send its records to the controller.
pub struct ToController {
    pub remote: Arc<FlowRemote>,
    /// Frames for the first worker to send out of the internal port.
    pub frames: SyncSender<Vec<u8>>,
    pub signer: Arc<wire::dist::auth::Signer>,
    /// The internal port's MAC.
    pub mac: MacAddr,
    /// The VLAN id of each interface of the back-end (0: untagged), by its index.
    pub vlans: Vec<u16>,
}

/// The settings a back-end's exporter starts with: nothing sampled until the controller
/// says a rate.
fn placeholder() -> FlowExportConfig {
    FlowExportConfig {
        collector: SocketAddr::from(([0, 0, 0, 0], 0)),
        sampling: 0,
        active_timeout: Duration::from_secs(60),
        idle_timeout: Duration::from_secs(15),
        observation_domain: 0,
        template_interval: Duration::from_secs(30),
    }
}

/// Starts a back-end's exporter for the controller: samples from `rx` and `more` as a
/// forwarder's, at the rate and timeouts of the controller's last FLOW_CONFIG (none
/// heard for [`CONFIG_LIFETIME`]: nothing sampled), ended flows to the controller.
pub fn start_for_controller(
    to: ToController,
    rx: Receiver<Sample>,
    more: impl FnOnce(&Arc<SamplerShare>, &Arc<ExportStats>) -> Result<MoreSamples, String>,
    stop: Arc<AtomicBool>,
) -> Result<FlowExport, String> {
    let cfg = placeholder();
    let mut export = FlowExport::new(&cfg);
    export.to_controller = Some(to.remote.clone());
    let more = more(&export.sampler, &export.stats)?;
    let (remote, sampler, config) = (
        to.remote.clone(),
        export.sampler.clone(),
        export.config.clone(),
    );
    let refresh: Refresh = Box::new(move |e: &mut Exporter| {
        let heard = remote.heard.lock().ok().and_then(|h| *h);
        let live = heard.filter(|(_, _, at)| at.elapsed() < CONFIG_LIFETIME);
        sampler
            .interval
            .store(live.map_or(0, |(_, c, _)| c.interval), Relaxed);
        let Some((_, c, _)) = live else { return };
        let mut cfg = e.cfg.clone();
        cfg.sampling = c.interval;
        cfg.active_timeout = Duration::from_secs(c.active_timeout_s.into());
        cfg.idle_timeout = Duration::from_secs(c.idle_timeout_s.into());
        if cfg != e.cfg {
            if let Ok(mut s) = config.lock() {
                *s = cfg.clone();
            }
            e.reconfigure(cfg);
        }
    });
    let mut e = Exporter::new(cfg, export.stats.clone());
    e.relay = Some(relay(to));
    spawn(e, export.sampler.clone(), rx, more, refresh, stop)?;
    Ok(export)
}

/// The back-end's relay: records with the router's interfaces, in FLOW_RECORDS frames
/// to the controller that last spoke; what a full queue or no controller leaves is lost
/// (counted by the exporter).
fn relay(to: ToController) -> Relay {
    let mut seq = 0u32;
    Box::new(move |records: &[FlowRecord]| {
        let Some((controller, _, _)) = to.remote.heard.lock().ok().and_then(|h| *h) else {
            return 0;
        };
        let vlan = |i: u32| match i {
            0 => 0,
            i => u32::from(to.vlans.get(i as usize - 1).copied().unwrap_or(0)),
        };
        let mapped: Vec<FlowRecord> = records
            .iter()
            .map(|r| FlowRecord {
                ingress: vlan(r.ingress),
                egress: vlan(r.egress),
                ..r.clone()
            })
            .collect();
        let mut taken = 0;
        for g in dist::flow_record_groups(&mapped) {
            seq = seq.wrapping_add(1);
            let m = dist::Repr {
                seq,
                msg: dist::Message::FlowRecords(g.to_vec()),
            };
            let Ok(mut f) = m.to_frame(to.mac, controller) else {
                continue;
            };
            let _ = to.signer.seal(&mut f, dist::auth::now_ns());
            if to.frames.try_send(f).is_ok() {
                taken += g.len();
            }
        }
        taken
    })
}

/// The controller's side: the router's exporter. Records come whole from the back-ends
/// (through [`RouterExport::take`]); a thread sends them to the collector, with the
/// templates on start and on their timer.
pub struct RouterExport {
    pub export: FlowExport,
    records: SyncSender<Vec<FlowRecord>>,
}

impl RouterExport {
    pub fn start(cfg: &FlowExportConfig, stop: Arc<AtomicBool>) -> Result<RouterExport, String> {
        let export = FlowExport::new(cfg);
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<FlowRecord>>(1_024);
        let mut e = Exporter::new(cfg.clone(), export.stats.clone());
        let config = export.config.clone();
        std::thread::Builder::new()
            .name("flow-export".into())
            .spawn(move || loop {
                let stopping = stop.load(Relaxed);
                if let Ok(rs) = rx.recv_timeout(Duration::from_millis(100)) {
                    let mut all = rs;
                    for more in rx.try_iter().take(1_024) {
                        all.extend(more);
                    }
                    e.send(&all, Instant::now());
                }
                e.follow(&config);
                // The templates when due.
                e.send(&[], Instant::now());
                if stopping {
                    return;
                }
            })
            .map_err(|e| format!("flow export: {e}"))?;
        Ok(RouterExport {
            export,
            records: tx,
        })
    }

    /// Takes records a back-end sent (its interfaces already the router's); false when
    /// the exporter's queue is full (they are lost, counted).
    pub fn take(&self, records: Vec<FlowRecord>) -> bool {
        let n = records.len() as u64;
        self.export.stats.samples.fetch_add(n, Relaxed);
        match self.records.try_send(records) {
            Ok(()) => true,
            Err(_) => {
                self.export.stats.records_lost.fetch_add(n, Relaxed);
                false
            }
        }
    }

    /// The FLOW_CONFIG the back-ends get.
    pub fn flow_config(&self) -> FlowConfig {
        let c = self.export.config.lock().map(|c| c.clone()).ok();
        let secs = |d: Duration| d.as_secs().clamp(1, u16::MAX as u64) as u16;
        c.map_or(FlowConfig::default(), |c| FlowConfig {
            interval: c.sampling,
            active_timeout_s: secs(c.active_timeout),
            idle_timeout_s: secs(c.idle_timeout),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backends_records_reach_the_controller_with_the_routers_interfaces() {
        let remote = Arc::new(FlowRemote::default());
        let (tx, rx) = std::sync::mpsc::sync_channel(8);
        let to = ToController {
            remote: remote.clone(),
            frames: tx,
            signer: Arc::new(wire::dist::auth::Signer::new(None)),
            mac: MacAddr([2, 0, 0, 0, 1, 1]),
            // r1-int, then the sub-interfaces of VLANs 10 and 20.
            vlans: vec![0, 10, 20],
        };
        let mut relay = relay(to);
        let r = FlowRecord {
            src: "10.1.0.10".parse().unwrap(),
            dst: "10.2.0.10".parse().unwrap(),
            protocol: 17,
            src_port: 1,
            dst_port: 2,
            icmp_type_code: 0,
            tcp_flags: 0,
            ingress: 2,
            egress: 3,
            next_hop: "10.2.0.10".parse().unwrap(),
            octets: 100,
            packets: 1,
            start_ms: 1,
            end_ms: 2,
            status: ipfix::status::FORWARDED,
            end_reason: ipfix::end_reason::IDLE_TIMEOUT,
            sampling: 1,
        };
        // No controller heard: nothing taken.
        assert_eq!(relay(std::slice::from_ref(&r)), 0);
        let controller = MacAddr([2, 0, 0, 0, 0, 0x64]);
        *remote.heard.lock().unwrap() = Some((controller, FlowConfig::default(), Instant::now()));
        assert_eq!(relay(&vec![r.clone(); 40]), 40);
        let mut got = Vec::new();
        for f in rx.try_iter() {
            assert_eq!(&f[0..6], &controller.0);
            match dist::Repr::parse(&f[14..]).unwrap().msg {
                dist::Message::FlowRecords(rs) => got.extend(rs),
                m => panic!("{m:?}"),
            }
        }
        assert_eq!(got.len(), 40);
        assert_eq!((got[0].ingress, got[0].egress), (10, 20));
    }
}
