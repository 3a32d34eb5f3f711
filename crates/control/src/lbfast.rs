//! The LB's XDP fast path (see `io::fastpath::lb`), kept in step with the LB: its first
//! worker publishes the LB's state (ports, back-ends, table) whenever it changes, and adds
//! the frames the fast path balanced to its back-ends' counts.

use dataplane::balancer::{Action, Balancer};
use io::fastpath::lb::{LbEntry, LbFastPath, LbPortState, LbProgramFacts, LbRule, LbVerdict};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::dist::PortRole;
use wire::ethernet::ethertype;
use wire::MacAddr;

/// An LB's fast path and what its first worker keeps to feed it.
pub struct LbFast {
    pub fp: Arc<LbFastPath>,
    /// Port names, in port order.
    pub names: Vec<String>,
    /// Each back-end's counter in the fast path (given once, kept for the LB's life).
    ids: HashMap<MacAddr, u8>,
    /// The counters as last read.
    last: Vec<u64>,
    /// The LB state's version, the ports' egress version and the filters' version last
    /// published.
    published: Option<(u64, u64, u64)>,
    /// The filters last written to the fast path.
    filters_written: Option<std::sync::Arc<dataplane::acl::Filters>>,
    /// Whether each port's device takes frames redirected in XDP ([`LbFast::watch_egress`]).
    pub egress: Arc<std::sync::OnceLock<io::egress::EgressWatch>>,
    /// When the counters were last read.
    read: Instant,
}

/// How often the first worker reads the fast path's per-back-end counters.
const COUNTS_INTERVAL: Duration = Duration::from_millis(100);

impl LbFast {
    /// Creates the fast path's maps for the ports named `names`, in port order.
    pub fn new(names: &[String]) -> Result<LbFast, String> {
        Self::on_devices(names, None)
    }

    /// As [`LbFast::new`], with the device map naming `device` for every port (for
    /// checking verdicts without the interfaces).
    pub fn on_devices(names: &[String], device: Option<&str>) -> Result<LbFast, String> {
        let devices: Vec<String> = names
            .iter()
            .map(|n| device.unwrap_or(n).to_string())
            .collect();
        let fp = LbFastPath::new(&devices).map_err(|e| format!("fast path: {e}"))?;
        Ok(LbFast {
            fp: Arc::new(fp),
            names: names.to_vec(),
            ids: HashMap::new(),
            last: Vec::new(),
            published: None,
            filters_written: None,
            egress: Arc::default(),
            read: Instant::now()
                .checked_sub(COUNTS_INTERVAL)
                .unwrap_or_else(Instant::now),
        })
    }

    /// Checks now whether each port's device takes frames redirected in XDP, and follows
    /// it until `stop` (see `io::egress`); the first worker publishes each change.
    pub fn watch_egress(&self, stop: Arc<std::sync::atomic::AtomicBool>) {
        let fp = self.fp.clone();
        let w = io::egress::EgressWatch::start(&self.names, stop, move |port, ok| {
            fp.set_egress(port as u32, ok)
        });
        let _ = self.egress.set(w);
    }

    /// Hands the fast path over to the LB's next start: while this LB runs (until `stop`),
    /// the programs' deadline kept `grace` ahead, so that they balance for at most `grace`
    /// after it is gone unless a successor takes them over (its first programs replace
    /// these in their pinned links, [`io::pin::enable`], as the ports open). The successor
    /// needs nothing of these maps: it starts from its config's back-ends and publishes
    /// its own state. False where no link is pinned (nothing is handed over).
    pub fn hand_over(&self, grace: Duration, stop: Arc<std::sync::atomic::AtomicBool>) -> bool {
        if !crate::fast::any_link_pinned(&self.names) {
            return false;
        }
        let fp = self.fp.clone();
        crate::fast::keep_beating(stop, move || fp.beat(grace));
        true
    }

    /// How port `name` stands with the fast path (`None`: not one of its ports).
    pub fn port_fast(
        fp: &LbFastPath,
        names: &[String],
        egress: Option<&io::egress::EgressWatch>,
        name: &str,
    ) -> Option<crate::fast::PortFast> {
        let i = names.iter().position(|n| n == name)?;
        let w = egress.map(|w| w.ports()).unwrap_or_default();
        let mode = fp
            .egress_modes()
            .get(i)
            .copied()
            .unwrap_or(io::fastpath::EgressMode::Xdp);
        Some(crate::fast::PortFast::On {
            stats: *fp.stats().get(i)?,
            egress: mode,
            egress_why: if fp.suspended() {
                Some(crate::fast::SUSPENDED.into())
            } else {
                w.get(i)
                    .and_then(|p| p.egress.why())
                    .map(|why| crate::fast::egress_why(mode, why))
            },
            egress_changes: w.get(i).map_or(0, |p| p.changes),
        })
    }

    /// What port `port`'s program must know of the LB: its MAC and the classifier rules
    /// that may match an IPv4 frame (a rule for another EtherType, an ARP operation or an
    /// ICMPv6 type never does), in order, each with what the fast path does on a match.
    pub fn facts(b: &Balancer, port: u32) -> LbProgramFacts {
        let rules_of = |family: u16| rules_for(&b.cfg.rules, family);
        let me = b.ports.get(port as usize);
        let mut addrs6: Vec<std::net::Ipv6Addr> = me
            .map(|p| p.addrs6.iter().map(|a| a.0).collect())
            .unwrap_or_default();
        if let Some(p) = me.filter(|p| !p.addrs6.is_empty()) {
            addrs6.push(wire::ipv6::link_local_of(p.mac));
        }
        LbProgramFacts {
            port,
            mac: me.map_or([0; 6], |p| p.mac.0),
            rules: rules_of(ethertype::IPV4),
            rules6: rules_of(ethertype::IPV6),
            addrs6,
        }
    }

    /// `facts` with the classifier rules `rules` (in the classifier's order) instead of
    /// its own: a port's next program after a reload that changed them.
    pub fn with_rules(
        facts: &LbProgramFacts,
        rules: &[dataplane::balancer::Rule],
    ) -> LbProgramFacts {
        LbProgramFacts {
            rules: rules_for(rules, ethertype::IPV4),
            rules6: rules_for(rules, ethertype::IPV6),
            ..facts.clone()
        }
    }

    /// Publishes the LB's state to the fast path if it changed since the last time.
    pub fn publish(&mut self, b: &Balancer) -> Result<(), String> {
        let filters = b.filters.load();
        let version = (b.state_version(), self.fp.egress_version(), filters.version);
        if self.published.is_none_or(|p| p.2 != filters.version) {
            // The filters, a generation at a time (the counts of the one left kept in the
            // rules' counters, which `old` shares with these for the rules kept).
            let old = self.filters_written.take();
            if let Err(e) = self.set_filters(&filters, old.as_deref()) {
                tracing::warn!(error = %e, "LB fast path: filters not written");
            }
            self.filters_written = Some(filters.clone());
        }
        if self.published == Some(version) {
            return Ok(());
        }
        let ports: Vec<LbPortState> = b
            .ports
            .iter()
            .map(|p| LbPortState {
                mac: p.mac.0,
                external: p.role == PortRole::External,
                internal: p.role == PortRole::Internal,
                vlan: p.vlan,
                addr: p.addr,
            })
            .collect();
        let entries: Vec<LbEntry> = b
            .table
            .entries
            .iter()
            .map(|e| {
                let next = self.ids.len();
                let id = match self.ids.get(&e.mac) {
                    Some(&id) => Some(id),
                    None if next < io::fastpath::lb::MAX_IDS => {
                        self.ids.insert(e.mac, next as u8);
                        Some(next as u8)
                    }
                    // Out of counters: this back-end's frames stay with user space.
                    None => None,
                };
                LbEntry {
                    mac: e.mac.0,
                    port: e.port,
                    id,
                }
            })
            .collect();
        self.fp
            .publish(&ports, &entries, b.table.slots())
            .map_err(|e| format!("fast path: {e}"))?;
        self.published = Some(version);
        Ok(())
    }

    /// Publishes what changed and adds what the fast path balanced since the last call
    /// to the back-ends' counts (the first worker, after each poll).
    pub fn sync(&mut self, b: &mut Balancer) {
        // While a capture runs, every frame through user space, where it sees them; and
        // while the LB is the standby of a spare pair, where it drops them.
        let capture = crate::capturing::capture_under_way();
        let off = capture || b.standby;
        if self.fp.suspended() != off {
            self.fp.suspend(off);
            tracing::info!(
                suspended = off,
                capture,
                standby = b.standby,
                "LB fast path: a capture or the spare pair's standby state started or ended"
            );
        }
        if let Err(e) = self.publish(b) {
            tracing::warn!(error = %e, "LB fast path not republished");
        }
        if self.read.elapsed() < COUNTS_INTERVAL {
            return;
        }
        self.read = Instant::now();
        let now = self.fp.counts(self.ids.len());
        let mut add = Vec::new();
        for (mac, &id) in &self.ids {
            let (n, was) = (now[id as usize], self.last.get(id as usize).copied());
            let d = n.saturating_sub(was.unwrap_or(0));
            if d > 0 {
                add.push((*mac, d));
            }
        }
        self.last = now;
        b.add_counts(&add);
    }

    /// The fast path's counters, as `show counters` prints them under `fast_path`.
    /// Makes `f` the fast path's filters (the LB's ports are its interfaces, in order);
    /// the counts of `old`'s generation kept in its rules' counters.
    fn set_filters(
        &self,
        f: &dataplane::acl::Filters,
        old: Option<&dataplane::acl::Filters>,
    ) -> Result<(), String> {
        let port_of: Vec<Option<(u16, u16)>> =
            (0..f.bindings.len()).map(|i| Some((i as u16, 0))).collect();
        let mut a = self.fp.acl.lock().map_err(|_| "fast path poisoned")?;
        a.write(f, &port_of, old)
    }

    /// What the LB's fast path counted of `f` (the filters in use): per list and rule, and
    /// per port (denied in, denied out).
    pub fn filter_counts(
        fp: &LbFastPath,
        f: &dataplane::acl::Filters,
    ) -> crate::fast::FilterCounts {
        let Ok(a) = fp.acl.lock() else {
            return Default::default();
        };
        let ports = a
            .drops()
            .into_iter()
            .map(|d| [d[0], d[1], (0, 0)])
            .collect();
        (a.rule_counts(f), ports)
    }

    /// The fast path's denials, for `acl_deny`.
    pub fn filter_denied(fp: &LbFastPath) -> u64 {
        fp.acl
            .lock()
            .map_or(0, |a| a.drops().iter().map(|d| d[0].0 + d[1].0).sum())
    }

    pub fn counters(fp: &LbFastPath, names: &[String]) -> Value {
        crate::fast::stats_json(names, &fp.stats())
    }
}

/// The rules among `rules` that may match a frame of EtherType `family` (a rule for
/// another EtherType, an ARP operation or an ICMPv6 type never does), in order, as the
/// fast path compiles them.
fn rules_for(rules: &[dataplane::balancer::Rule], family: u16) -> Vec<LbRule> {
    rules
        .iter()
        .filter(|r| {
            r.ethertype.is_none_or(|t| t == family) && r.arp_op.is_none() && r.icmp6_type.is_none()
        })
        .map(rule_of)
        .collect()
}

/// A classifier rule as the fast path compiles it.
fn rule_of(r: &dataplane::balancer::Rule) -> LbRule {
    LbRule {
        external: r.from == PortRole::External,
        protocol: r.protocol,
        port: r.port,
        to_router: r.to_router,
        // What `Balancer::process` does with an IP frame on this rule.
        verdict: match (r.from, r.action) {
            (PortRole::External, Action::Balance) => LbVerdict::Balance,
            (PortRole::Internal, Action::IntToExt | Action::InternalArp | Action::InternalNd) => {
                LbVerdict::IntToExt
            }
            _ => LbVerdict::Slow,
        },
    }
}

#[cfg(test)]
mod tests {
    //! The LB's fast path and the user-space LB give the same verdict: whenever the fast
    //! path sends a frame out, the LB sends it out of the same port, byte for byte; every
    //! other frame the fast path leaves untouched to user space. Checked over hand-made
    //! cases (each a reason to leave the fast path) and seeded random mutations of them.
    //! Needs root (BPF), as CI runs it.
    use super::*;
    use dataplane::balancer::{BalancerConfig, LbPort, Rule};
    use dataplane::buf::{Pkt, TxQueues};
    use io::fastpath::{Detached, Verdict};
    use wire::ipv4;

    const EXT_A: [u8; 6] = [2, 0, 0, 0, 0xa, 1];
    const EXT_B: [u8; 6] = [2, 0, 0, 0, 0xb, 1];
    const INT: [u8; 6] = [2, 0, 0, 0, 0xc, 1];
    const HOST: [u8; 6] = [2, 0, 0, 0, 1, 0x10];

    fn be(mac: u8) -> MacAddr {
        MacAddr([2, 0, 0, 0, 0xbe, mac])
    }

    /// An IPv4 packet (protocol `proto`, with 8 bytes of ports and length or more) from
    /// 10.1.0.10 to `dst` in a frame from HOST to `to`, behind `tag` (an 802.1Q tag
    /// control information) if given; checksums complete.
    fn frame(to: [u8; 6], tag: Option<u16>, proto: u8, dst: [u8; 4], ports: (u16, u16)) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend(to);
        f.extend(HOST);
        if let Some(t) = tag {
            f.extend([0x81, 0, (t >> 8) as u8, t as u8]);
        }
        f.extend([0x08, 0x00]);
        let total = 20 + 8 + 10;
        let mut ip = vec![
            0x45,
            0,
            0,
            total as u8,
            0x12,
            0x34,
            0x40,
            0,
            64,
            proto,
            0,
            0,
            10,
            1,
            0,
            10,
        ];
        ip.extend(dst);
        ip.extend(ports.0.to_be_bytes());
        ip.extend(ports.1.to_be_bytes());
        ip.extend([0, 18, 0, 0]);
        ip.extend(0..10u8);
        let at = f.len();
        f.extend(ip);
        fix(&mut f[at..]);
        f
    }

    fn fix(ip: &mut [u8]) {
        if let Ok(mut p) = ipv4::Packet::new_checked(&mut ip[..]) {
            p.fill_checksum();
            if matches!(p.protocol(), 6 | 17) {
                p.fill_transport_checksum();
            }
        } else if ip.len() >= 48 && ip[0] >> 4 == 6 && matches!(ip[6], 6 | 17) {
            fix6(ip);
        }
    }

    /// An IPv6 packet (next header `next`: TCP or UDP with a complete checksum, or
    /// anything else) from 2001:db8:1::10 to `dst` with the ports and 10 bytes more, in a
    /// frame from HOST to `to`, behind `tag` if given.
    fn frame6(to: [u8; 6], tag: Option<u16>, next: u8, dst: &str, ports: (u16, u16)) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend(to);
        f.extend(HOST);
        if let Some(t) = tag {
            f.extend([0x81, 0, (t >> 8) as u8, t as u8]);
        }
        f.extend([0x86, 0xdd]);
        let l4 = if next == 6 { 20 } else { 8 };
        let len = l4 + 10;
        let mut ip = vec![0x60, 0, 0x12, 0x34, 0, len as u8, next, 64];
        ip.extend(
            "2001:db8:1::10"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
        );
        ip.extend(dst.parse::<std::net::Ipv6Addr>().unwrap().octets());
        ip.extend(ports.0.to_be_bytes());
        ip.extend(ports.1.to_be_bytes());
        if next == 6 {
            ip.extend([0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0x10, 0, 0, 0, 0, 0]);
        } else {
            ip.extend([0, len as u8, 0, 0]);
        }
        ip.extend(0..10u8);
        let at = f.len();
        f.extend(ip);
        fix6(&mut f[at..]);
        f
    }

    /// Fills in the TCP or UDP checksum of the IPv6 packet `ip` (no extension headers).
    fn fix6(ip: &mut [u8]) {
        let next = ip[6];
        let at = match next {
            6 => 16,
            17 => 6,
            _ => return,
        };
        let src: [u8; 16] = ip[8..24].try_into().unwrap();
        let dst: [u8; 16] = ip[24..40].try_into().unwrap();
        let l4 = &mut ip[40..];
        if l4.len() < at + 2 {
            return;
        }
        l4[at..at + 2].fill(0);
        let ph = wire::checksum::pseudo_header6(src.into(), dst.into(), next, l4.len() as u32);
        let mut c = !wire::checksum::fold(ph + wire::checksum::sum(l4));
        if c == 0 && next == 17 {
            c = 0xffff;
        }
        l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }

    struct Check {
        b: Balancer,
        now: Instant,
        link: LbFast,
        progs: Vec<Detached>,
        fast: usize,
        fast_balanced: u64,
        user_balanced: u64,
        /// Every port refuses frames redirected in XDP, and hands them to tcx.
        handoff: bool,
    }

    impl Check {
        /// Has every port refuse frames redirected in XDP, with the hand-off to tcx: the
        /// program then hands every frame it sends out to tcx, with the same bytes.
        fn hand_off(mut self) -> Check {
            self.link.fp.set_handoff(true);
            for p in 0..self.b.ports.len() as u32 {
                self.link.fp.set_egress(p, false);
            }
            self.link.publish(&self.b).unwrap();
            self.handoff = true;
            self
        }

        /// Two external ports (VLAN 10 on 10.1.0.1/24, VLAN 20 on 10.2.0.1/24), one
        /// internal port, three back-ends behind it; the default rules and `extra`.
        fn new(mode: dataplane::balancer::Mode, extra: Vec<Rule>) -> Check {
            let now = Instant::now();
            let port = |name: &str, mac, role, vlan, addr: [u8; 4]| LbPort {
                name: name.into(),
                mac: MacAddr(mac),
                role,
                vlan,
                addr: addr.into(),
                prefix_len: 24,
                // The router's IPv6 address on network A (frames to it: user space's).
                addrs6: if mac == EXT_A {
                    vec![("2001:db8:1::1".parse().unwrap(), 64)]
                } else {
                    Vec::new()
                },
                speed_mbps: 1000,
            };
            let ports = vec![
                port("ext-a", EXT_A, PortRole::External, 10, [10, 1, 0, 1]),
                port("ext-b", EXT_B, PortRole::External, 20, [10, 2, 0, 1]),
                port("int", INT, PortRole::Internal, 0, [0, 0, 0, 0]),
            ];
            let mut rules = dataplane::balancer::default_rules();
            rules.extend(extra);
            let cfg = BalancerConfig {
                mode,
                virtual_cp: Some((be(9), 2)),
                rules,
                ..Default::default()
            };
            let mut b = Balancer::new(ports, cfg, now);
            b.set_backends(&[(be(1), 2, 1), (be(2), 2, 2), (be(3), 2, 1)], true, now);
            Self::with(b, now)
        }

        fn with(b: Balancer, now: Instant) -> Check {
            let names: Vec<String> = b.ports.iter().map(|p| p.name.clone()).collect();
            let mut link = LbFast::on_devices(&names, Some("lo")).unwrap();
            link.publish(&b).unwrap();
            let progs = (0..b.ports.len() as u32)
                .map(|k| link.fp.detached(&LbFast::facts(&b, k)).unwrap())
                .collect();
            Check {
                b,
                now,
                link,
                progs,
                fast: 0,
                fast_balanced: 0,
                user_balanced: 0,
                handoff: false,
            }
        }

        /// Both paths on `frame` from `port`; panics where they disagree.
        fn frame(&mut self, port: u16, frame: &[u8]) {
            if frame.len() < 14 {
                return; // BPF_PROG_TEST_RUN refuses them
            }
            let (v, out) = self.progs[port as usize]
                .run(frame)
                .unwrap_or_else(|e| panic!("{e}: {frame:02x?}"));
            let mut p = Pkt::from_bytes(frame);
            p.meta.rx_port = port;
            // An XDP frame has lost its socket buffer's checksum state.
            p.meta.csum_unknown = true;
            let mut tx = TxQueues::new(self.b.ports.len());
            let before = self.b.counters.snapshot().events["balance_packets"];
            self.b.process(p, self.now, &mut tx);
            let balanced = self.b.counters.snapshot().events["balance_packets"] - before;
            self.user_balanced += balanced;
            let sent = tx.drain_all();
            let lo = io::netdev::ifindex("lo").unwrap() as u32;
            match v {
                Verdict::Forward | Verdict::HandOff(_) => {
                    assert_eq!(
                        v == Verdict::HandOff(lo),
                        self.handoff,
                        "{v:?}: {frame:02x?}"
                    );
                    self.fast += 1;
                    self.fast_balanced += balanced;
                    assert_eq!(
                        sent.len(),
                        1,
                        "fast path forwarded, user space sent {}: {frame:02x?}",
                        sent.len()
                    );
                    let (eport, ref p) = sent[0];
                    assert_eq!(p.data, out, "different bytes out: {frame:02x?}");
                    if balanced == 1 {
                        // To a back-end: the port that reaches it.
                        let e = self.b.table.entries.iter().find(|e| e.mac.0 == out[..6]);
                        assert_eq!(e.map(|e| e.port), Some(eport), "{frame:02x?}");
                    } else {
                        // Outward: our MAC on that port as the source.
                        assert_eq!(&out[6..12], &self.b.ports[eport as usize].mac.0);
                    }
                }
                Verdict::ToUserSpace => {
                    assert_eq!(out, frame, "changed a frame it left to user space");
                }
                Verdict::Drop if self.b.filters.load().any() => {
                    // Denied by a port's list: user space denies it too.
                    assert!(
                        sent.is_empty(),
                        "the fast path dropped, user space sent: {frame:02x?}"
                    );
                    self.fast += 1;
                }
                other => panic!("verdict {other:?} on {frame:02x?}"),
            }
            for (_, p) in sent {
                self.b.pool.put(p);
            }
        }

        /// The hand-made cases.
        fn cases(&mut self) -> Vec<(u16, Vec<u8>)> {
            let mut c = Vec::new();
            let ext = |dst, proto, ports| frame(EXT_A, None, proto, dst, ports);
            // Balanced, many flows.
            for i in 0..64u16 {
                c.push((0, ext([192, 0, 2, i as u8], 17, (1000 + i, 53))));
                c.push((1, frame(EXT_B, None, 6, [198, 51, 100, 7], (40000 + i, 80))));
            }
            c.push((0, ext([192, 0, 2, 1], 1, (0x0800, 0)))); // ICMP: no ports
            c.push((0, ext([192, 0, 2, 1], 47, (1, 2)))); // GRE
            c.push((0, ext([240, 0, 0, 1], 17, (1, 2)))); // class E: balanced
                                                          // Left to user space.
            c.push((0, ext([10, 1, 0, 1], 17, (1, 2)))); // to the router's address
            c.push((0, ext([224, 0, 0, 5], 89, (0, 0)))); // OSPF
            c.push((0, ext([192, 0, 2, 1], 89, (0, 0)))); // OSPF through: to_router only
            c.push((0, ext([10, 1, 0, 1], 6, (179, 40000)))); // BGP to us
            c.push((0, ext([192, 0, 2, 1], 6, (179, 40000)))); // BGP through: balanced
            c.push((0, ext([10, 1, 0, 1], 17, (520, 520)))); // RIP to us
            c.push((0, ext([224, 0, 0, 9], 17, (520, 520)))); // RIP to its group
            c.push((0, ext([10, 1, 0, 1], 6, (22, 50000)))); // the extra rule below
            c.push((0, ext([192, 0, 2, 1], 6, (50000, 22)))); // the extra rule
            c.push((0, ext([239, 1, 2, 3], 17, (1, 2)))); // multicast
            c.push((0, ext([255, 255, 255, 255], 17, (1, 2)))); // broadcast
            c.push((0, frame(EXT_B, None, 17, [192, 0, 2, 1], (1, 2)))); // not our MAC
            c.push((0, frame([0xff; 6], None, 17, [192, 0, 2, 1], (1, 2))));
            c.push((0, frame(EXT_A, Some(10), 17, [192, 0, 2, 1], (1, 2)))); // tagged
            let mut f = ext([192, 0, 2, 1], 17, (1, 2));
            f.extend([0; 6]); // link padding
            c.push((0, f));
            let mut f = ext([192, 0, 2, 1], 17, (1, 2));
            f[14 + 6] = 0x20; // more fragments
            fix(&mut f[14..]);
            c.push((0, f));
            let mut f = ext([192, 0, 2, 1], 17, (1, 2));
            f[14 + 7] = 1; // an offset
            fix(&mut f[14..]);
            c.push((0, f));
            let mut f = ext([192, 0, 2, 1], 6, (1, 2));
            // A TCP checksum left to offload: the pseudo-header sum.
            let ip = ipv4::Packet::new_checked(&f[14..]).unwrap();
            let ph = wire::checksum::pseudo_header(ip.src(), ip.dst(), 6, 18);
            let folded = wire::checksum::fold(ph);
            f[14 + 20 + 16..14 + 20 + 18].copy_from_slice(&folded.to_be_bytes());
            c.push((0, f));
            let mut arp = EXT_A.to_vec();
            arp.extend(HOST);
            arp.extend([0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
            arp.resize(60, 0);
            c.push((0, arp));
            // From inside.
            let int = |tag, dst, proto| frame(HOST, Some(tag), proto, dst, (80, 40000));
            for i in 0..16u8 {
                c.push((2, int(10, [10, 1, 0, i], 6)));
                c.push((2, int(20, [10, 2, 0, i], 17)));
            }
            c.push((2, int(0x2000 | 10, [10, 1, 0, 9], 6))); // priority bits
            c.push((2, int(30, [10, 1, 0, 9], 6))); // no external port has VLAN 30
            c.push((2, int(0, [10, 1, 0, 9], 6))); // VLAN 0
            c.push((2, frame(HOST, None, 6, [10, 1, 0, 9], (1, 2)))); // untagged
            let mut f = int(10, [10, 1, 0, 9], 6);
            f.truncate(f.len() - 3); // shorter than its IP total length
            c.push((2, f));
            let mut dist = HOST.to_vec();
            dist.extend(INT);
            dist.extend([0x88, 0xb5]);
            dist.resize(60, 0);
            c.push((2, dist));
            c.extend(Self::cases6());
            c
        }

        /// IPv6: the balanced and outward cases first ([`Self::FAST6`] of them), then
        /// what is left to user space.
        fn cases6() -> Vec<(u16, Vec<u8>)> {
            let mut c = Vec::new();
            let ext = |dst: &str, next, ports| frame6(EXT_A, None, next, dst, ports);
            for i in 0..16u16 {
                c.push((0, ext(&format!("2001:db8:99::{i}"), 17, (1000 + i, 53))));
                c.push((1, frame6(EXT_B, None, 6, "2001:db8:77::7", (40000 + i, 80))));
            }
            c.push((0, ext("2001:db8:99::1", 6, (179, 40000)))); // BGP through: balanced
            let int = |tag, dst: &str, next| frame6(HOST, Some(tag), next, dst, (80, 40000));
            for i in 0..8u8 {
                c.push((2, int(10, &format!("2001:db8:1::{i}a"), 6)));
                c.push((2, int(20, &format!("2001:db8:2::{i}b"), 17)));
            }
            assert_eq!(c.len(), Self::FAST6);
            // Left to user space.
            c.push((0, ext("2001:db8:1::1", 17, (1, 2)))); // to the router
            c.push((0, ext("fe80::200:ff:fe00:a01", 17, (1, 2)))); // its link-local one
            c.push((0, ext("fe80::99", 17, (1, 2)))); // link-local
            c.push((0, ext("ff02::5", 89, (0, 0)))); // OSPFv3
            c.push((0, ext("ff0e::1", 17, (1, 2)))); // multicast
            c.push((0, ext("2001:db8:1::1", 6, (179, 40000)))); // BGP to us
            c.push((0, ext("2001:db8:99::1", 58, (0x8000, 0)))); // ICMPv6 echo
            c.push((0, ext("2001:db8:99::1", 0, (0x1100, 0)))); // hop-by-hop options
            c.push((0, ext("2001:db8:99::1", 44, (0x1100, 0)))); // a fragment header
            c.push((0, frame6(EXT_A, Some(10), 17, "2001:db8:99::1", (1, 2)))); // tagged
            let mut f = ext("2001:db8:99::1", 17, (1, 2));
            f.extend([0; 6]); // link padding
            c.push((0, f));
            let mut f = ext("2001:db8:99::1", 6, (1, 2));
            // A TCP checksum left to offload: the pseudo-header sum.
            let ph = wire::checksum::pseudo_header6(
                "2001:db8:1::10".parse().unwrap(),
                "2001:db8:99::1".parse().unwrap(),
                6,
                30,
            );
            let folded = wire::checksum::fold(ph);
            f[14 + 40 + 16..14 + 40 + 18].copy_from_slice(&folded.to_be_bytes());
            c.push((0, f));
            c.push((2, int(30, "2001:db8:1::9", 6))); // no external port has VLAN 30
            c.push((2, int(10, "2001:db8:1::9", 58))); // ICMPv6 (neighbour discovery's)
            c
        }

        /// How many of [`Self::cases6`] the fast path takes.
        const FAST6: usize = 32 + 1 + 16;
    }

    /// A rule of the configuration: SSH to the router goes to the Virtual-CP.
    fn ssh() -> Rule {
        Rule {
            name: "ssh-to-cp".into(),
            from: PortRole::External,
            ethertype: Some(ethertype::IPV4),
            arp_op: None,
            protocol: Some(6),
            icmp6_type: None,
            port: Some(22),
            to_router: Some(true),
            action: Action::VirtualCp,
        }
    }

    fn agrees(mode: dataplane::balancer::Mode) {
        agrees_with(Check::new(mode, vec![ssh()]));
    }

    fn agrees_with(mut k: Check) {
        let mode = k.b.cfg.mode;
        let cases = k.cases();
        for (port, f) in &cases {
            k.frame(*port, f);
        }
        // Every class of the common case went the fast way.
        if mode == dataplane::balancer::Mode::RoundRobin {
            assert_eq!(k.fast_balanced, 0, "round robin is user space's");
        } else {
            assert!(k.fast_balanced >= 128 + 5, "{}", k.fast_balanced);
        }
        assert!(k.fast >= k.fast_balanced as usize + 33, "{}", k.fast);
        // Seeded mutations of every case (the same seed each run).
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let (port, f) = &cases[rnd() as usize % cases.len()];
            let mut f = f.clone();
            for _ in 0..1 + rnd() % 3 {
                let i = rnd() as usize % f.len();
                f[i] = rnd() as u8;
            }
            if rnd() % 2 == 0 {
                let o = if f.get(12) == Some(&0x81) { 18 } else { 14 };
                if f.len() > o {
                    fix(&mut f[o..]);
                }
            }
            if rnd() % 8 == 0 {
                f.truncate(rnd() as usize % f.len());
            }
            k.frame(*port, &f);
        }
        // What the fast path balanced reaches the back-ends' counts with the next sync.
        let before: u64 = k.b.table.entries.iter().map(|e| e.packets).sum();
        assert_eq!(before, k.user_balanced);
        k.link.sync(&mut k.b);
        let after: u64 = k.b.table.entries.iter().map(|e| e.packets).sum();
        assert_eq!(after - before, k.fast_balanced);
        let st = k.link.fp.stats();
        assert_eq!(st.iter().map(|s| s[0]).sum::<u64>(), k.fast as u64);
        let handed = if k.handoff { k.fast as u64 } else { 0 };
        assert_eq!(
            st.iter().map(|s| s[7]).sum::<u64>(),
            handed,
            "handed to tcx"
        );
    }

    /// The external ports' access lists in the fast path decide as user space's: denied
    /// frames dropped before balancing (and on the way out), permitted ones balanced, the
    /// rules' counts of both paths the frames each decided.
    #[test]
    fn the_lb_fast_path_filters_as_the_lb() {
        use dataplane::acl::{Acl, Action as A, Binding, FilterShare, Filters, Net, Rule as R};
        let mut k = Check::new(dataplane::balancer::Mode::Maglev, vec![]);
        let mut dns = R::any(A::Deny);
        dns.protocol = Some(17);
        dns.dst_port = Some((53, 53));
        let mut to66 = R::any(A::Deny);
        to66.dst = Some(Net::parse("10.2.0.66").unwrap());
        let lists = vec![
            Acl {
                name: "in".into(),
                default: A::Permit,
                rules: vec![dns],
            },
            Acl {
                name: "out".into(),
                default: A::Permit,
                rules: vec![to66],
            },
        ];
        let a = Binding {
            acl_in: Some(0),
            ..Default::default()
        };
        let b = Binding {
            acl_out: Some(1),
            ..Default::default()
        };
        let names = k.b.ports.iter().map(|p| p.name.clone()).collect();
        k.b.filters = FilterShare::new(Filters::new(
            lists,
            vec![a, b, Binding::default()],
            names,
            None,
        ));
        k.link.publish(&k.b).unwrap();
        let cases = [
            (
                0,
                frame(EXT_A, None, 17, [192, 0, 2, 1], (1000, 53)),
                "drop",
            ),
            (
                0,
                frame(EXT_A, None, 17, [192, 0, 2, 1], (1000, 54)),
                "fast",
            ),
            (
                1,
                frame(EXT_B, None, 17, [192, 0, 2, 1], (1000, 53)),
                "fast",
            ), // no list on B in
            (
                2,
                frame(HOST, Some(20), 17, [10, 2, 0, 66], (53, 1000)),
                "drop",
            ),
            (
                2,
                frame(HOST, Some(20), 17, [10, 2, 0, 67], (53, 1000)),
                "fast",
            ),
        ];
        for (port, f, what) in &cases {
            let before = (
                k.fast,
                k.b.counters.drops(dataplane::counters::Drop::AclDeny),
            );
            k.frame(*port, f);
            let denied = k.b.counters.drops(dataplane::counters::Drop::AclDeny) - before.1;
            let fast = k.fast - before.0;
            let got = match (fast, denied) {
                (1, 1) => "drop",
                (1, 0) => "fast",
                _ => "user",
            };
            assert_eq!(got, *what, "{f:02x?}");
        }
        let fl = k.b.filters.load();
        let (fast, ports) = LbFast::filter_counts(&k.link.fp, &fl);
        // Both paths ran every frame: each counted it.
        assert_eq!((fl.lists[0].counts[0].get().0, fast[0][0].0), (1, 1));
        assert_eq!((fl.lists[0].counts[1].get().0, fast[0][1].0), (1, 1));
        assert_eq!((fl.lists[1].counts[0].get().0, fast[1][0].0), (1, 1));
        assert_eq!((fl.lists[1].counts[1].get().0, fast[1][1].0), (1, 1));
        assert_eq!((ports[0][0].0, ports[1][1].0), (1, 1));
        assert_eq!(LbFast::filter_denied(&k.link.fp), 2);
    }

    /// Where no port takes frames redirected in XDP (veths whose peers run no NAPI), the
    /// LB balances and sends outward the same frames, the same bytes, through the
    /// hand-off to tcx.
    #[test]
    fn the_lb_fast_path_hands_to_tcx_what_it_sends() {
        agrees_with(Check::new(dataplane::balancer::Mode::Maglev, vec![ssh()]).hand_off());
        let mut k = Check::new(dataplane::balancer::Mode::Hash, vec![]).hand_off();
        for (port, f) in Check::cases6() {
            k.frame(port, &f);
        }
        assert_eq!(k.fast_balanced, 33);
    }

    /// IPv6's common case (TCP and UDP, balanced and outward) takes the fast path, and
    /// agrees with the LB byte for byte (the flow hash included: the same back-end).
    #[test]
    fn the_lb_fast_path_balances_ipv6() {
        let mut k = Check::new(dataplane::balancer::Mode::Hash, vec![]);
        let cases = Check::cases6();
        for (i, (port, f)) in cases.iter().enumerate() {
            let before = k.fast;
            k.frame(*port, f);
            let fast = k.fast - before == 1;
            assert_eq!(fast, i < Check::FAST6, "case {i}: {f:02x?}");
        }
        assert_eq!(k.fast_balanced, 33);
    }

    /// Past the deadline that an LB handing its fast path over keeps ahead
    /// ([`LbFastPath::beat`]), the programs balance nothing: a fast path whose LB is gone
    /// for good stops on its own; a new beat and it balances again.
    #[test]
    fn past_its_deadline_the_lb_fast_path_balances_nothing() {
        let mut k = Check::new(dataplane::balancer::Mode::Maglev, vec![]);
        let f = frame(EXT_A, None, 17, [192, 0, 2, 1], (1000, 53));
        k.frame(0, &f);
        assert_eq!(k.fast, 1, "not balanced at first");
        k.link.fp.beat(Duration::ZERO).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        k.frame(0, &f);
        assert_eq!(k.fast, 1, "balanced past its deadline");
        k.link.fp.beat(Duration::from_secs(60)).unwrap();
        k.frame(0, &f);
        assert_eq!(k.fast, 2, "not balanced after a beat");
    }

    #[test]
    fn the_lb_fast_path_agrees_with_the_lb() {
        agrees(dataplane::balancer::Mode::Maglev);
    }

    #[test]
    fn the_lb_fast_path_agrees_with_the_lb_in_hash_mode() {
        agrees(dataplane::balancer::Mode::Hash);
    }

    #[test]
    fn round_robin_is_left_to_user_space() {
        agrees(dataplane::balancer::Mode::RoundRobin);
    }

    /// The `balance` fuzz corpus (first byte: port and flags) through the fuzzers' LB: DIST
    /// frames among them change its state (it takes DIST unauthenticated), which reaches
    /// the fast path as the first worker's next sync would bring it.
    #[test]
    fn the_lb_fast_path_agrees_on_the_balance_corpus() {
        let (b, now) = dataplane::fuzzing::balancer();
        let mut k = Check::with(b, now);
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/balance");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let data = std::fs::read(e.unwrap().path()).unwrap();
            if let Some((&ctl, frame)) = data.split_first() {
                k.frame((ctl & 1) as u16, frame);
                k.link.sync(&mut k.b);
                n += 1;
            }
        }
        assert!(n > 20, "the balance corpus has {n} frames");
        assert!(k.fast > 0, "none of {n} went the fast way");
    }

    /// A port beyond the fast path's [`io::fastpath::lb::MAX_PORTS`] gets a program that
    /// leaves every frame to user space.
    #[test]
    fn a_port_beyond_the_fast_paths_reach_is_user_space() {
        let max = io::fastpath::lb::MAX_PORTS;
        let names: Vec<String> = (0..=max).map(|i| format!("p{i}")).collect();
        let link = LbFast::on_devices(&names, Some("lo")).unwrap();
        let facts = LbProgramFacts {
            port: max as u32,
            mac: EXT_A,
            rules: Vec::new(),
            rules6: Vec::new(),
            addrs6: Vec::new(),
        };
        let d = link.fp.detached(&facts).unwrap();
        let f = frame(EXT_A, None, 17, [192, 0, 2, 1], (1, 2));
        let (v, out) = d.run(&f).unwrap();
        assert_eq!(v, Verdict::ToUserSpace);
        assert_eq!(out, f);
    }

    /// The state follows the LB: a back-end that goes, a port that changes its VLAN id.
    #[test]
    fn the_lb_fast_path_follows_the_state() {
        let mut k = Check::new(dataplane::balancer::Mode::Maglev, Vec::new());
        let flows: Vec<Vec<u8>> = (0..200u16)
            .map(|i| frame(EXT_A, None, 17, [192, 0, 2, 1], (i, 53)))
            .collect();
        let to = |k: &mut Check| -> Vec<[u8; 6]> {
            flows
                .iter()
                .map(|f| {
                    let (v, out) = k.progs[0].run(f).unwrap();
                    assert_eq!(v, Verdict::Forward);
                    out[..6].try_into().unwrap()
                })
                .collect()
        };
        let first = to(&mut k);
        assert!(first.contains(&be(1).0));
        let now = k.now;
        k.b.set_backends(&[(be(1), 2, 0)], false, now);
        k.link.sync(&mut k.b);
        let second = to(&mut k);
        assert!(!second.contains(&be(1).0));
        // Maglev: flows of the other back-ends stay where they were.
        for (a, b) in first.iter().zip(&second) {
            if *a != be(1).0 {
                assert_eq!(a, b);
            }
        }
        for f in &flows {
            k.frame(0, f);
        }
        // Outward on VLAN 10, then on 11 once the controller says so.
        let out = frame(HOST, Some(10), 6, [10, 1, 0, 9], (80, 4000));
        assert_eq!(k.progs[2].run(&out).unwrap().0, Verdict::Forward);
        let m = wire::dist::Message::Ports {
            ports: vec![wire::dist::PortConfig {
                index: 0,
                role: PortRole::External,
                vlan: 11,
                addr: [10, 1, 0, 1].into(),
                prefix_len: 24,
            }],
        };
        k.b.apply(&m, be(9), now).unwrap();
        k.link.sync(&mut k.b);
        assert_eq!(k.progs[2].run(&out).unwrap().0, Verdict::ToUserSpace);
        let out11 = frame(HOST, Some(11), 6, [10, 1, 0, 9], (80, 4000));
        k.frame(2, &out11);
        k.frame(2, &out);
        let tagged = k.progs[0].run(&flows[0]).unwrap().1;
        assert_eq!(&tagged[12..16], &[0x81, 0, 0, 11]);
    }

    /// What the program costs per frame in the kernel (`BPF_PROG_TEST_RUN`'s time, the
    /// tenth percentile of 20,000 calls of one run each: the runs of a call share one copy of
    /// the frame, which a balanced frame's tag or an outward one's untagging changes):
    /// a balanced 60-byte UDP frame and one from inside sent outward. A measurement for
    /// comparing builds, not a check: `cargo test -p control lb_program_cost -- --ignored
    /// --nocapture`.
    #[test]
    #[ignore = "a measurement"]
    fn lb_program_cost_per_frame() {
        let k = Check::new(dataplane::balancer::Mode::Hash, vec![ssh()]);
        let median = |port: usize, f: &[u8]| {
            let mut v = None;
            let mut ns: Vec<u32> = (0..20_000)
                .map(|_| {
                    let (x, t) = k.progs[port].time(f, 1).unwrap();
                    v = Some(x);
                    t
                })
                .collect();
            ns.sort_unstable();
            // The tenth percentile: one run's time is mostly the timer's noise above it.
            (v, ns[ns.len() / 10])
        };
        let balanced = frame(EXT_A, None, 17, [192, 0, 2, 7], (1000, 53));
        let (v, ns) = median(0, &balanced);
        println!("cost LB balance IPv4 UDP 60 B: {v:?} {ns} ns");
        let out = frame(INT, Some(10), 17, [10, 1, 0, 10], (53, 1000));
        let (v, ns) = median(2, &out);
        println!("cost LB int-to-ext IPv4 UDP: {v:?} {ns} ns");
    }
}
