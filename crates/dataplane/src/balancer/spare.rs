//! A spare LB: two LBs serve one external network, one active, the other standby
//! (`[spare]`, docs/multistage.md "A spare LB").
//!
//! Both have the network's addresses and the same external MAC (the router's, on that
//! network); only the active one uses them. Each watches the other's hellos: the DIST
//! hellos every LB broadcasts on the interconnection, and those the active one also
//! broadcasts on the external link. The standby balances nothing, answers nothing and
//! sends nothing outside; it keeps its balancing table as the active one does (the same
//! back-ends' hellos, the same controller messages). When the active one's hellos stop on
//! both links for 2.5 of its intervals, the standby takes over: it announces the router's
//! addresses from the shared MAC (a gratuitous ARP, an unsolicited neighbour
//! advertisement per IPv6 address), so that the external network's switch learns where
//! the MAC is now, and asks every address of the port's IPv4 network for its MAC (at most
//! [`PROBE_MAX`]): the answers cross it into the interconnection with each host's MAC as
//! source, so that the interconnection learns where the hosts are now too.
//!
//! Who is active: at start both are standby; one that hears the other standby, and ranks
//! higher (priority, then internal MAC), becomes active; one that hears nothing from the
//! other for 2.5 intervals becomes active; of two active ones (after the links between
//! them came back, or a standby that took over while the active one restarted) the
//! lower-ranked steps down and the higher-ranked announces again, since the other's
//! takeover taught the switches to send the network's traffic to the other. A returning
//! LB finds the other active and stays standby: no second takeover.
//!
//! An active LB that stops says so as it goes: a last hello on both links with
//! `interval_ms` 0 ("gone now", docs/dist.md). The standby takes over at its next poll
//! instead of 2.5 intervals later (`spare_farewells` on the one that left; the standby
//! counts a takeover). An LB that knows nothing of it reads an interval of 1 ms and takes
//! over as soon. Where the LB hands its fast path over to its next start, it says it only
//! while it hears the other (and its runner then withdraws the hand-over: the next start
//! begins standby); with the other unheard, its programs forward on and the next start
//! resumes. A standby withdraws its hand-over too: its programs carried nothing, and a
//! next start that resumed would forward, and answer for the network, until it heard the
//! other.

use super::{Balancer, ETH};
use crate::buf::TxQueues;
use crate::counters::Event;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use wire::dist::{self, PortRole};
use wire::ethernet::{self, ethertype};
use wire::{arp, icmpv6, ipv6, MacAddr};

/// At most this many addresses of an external network are asked for their MAC at a
/// takeover (a /22's worth; a larger network's hosts are found as they send).
pub const PROBE_MAX: u32 = 1024;

/// The other LB is gone after this many of its hello intervals without a hello on either
/// link (as a back-end's timeout).
const DEAD_INTERVALS: f64 = 2.5;

/// `[spare]`: this LB and another serve the same external network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpareConfig {
    /// The other LB's internal MAC (its hellos carry it).
    pub peer: MacAddr,
    /// Higher is active, at start and when both are (then the higher internal MAC).
    pub priority: u8,
}

/// What the first worker knows of the pair.
#[derive(Debug, Clone)]
pub struct SpareState {
    pub cfg: SpareConfig,
    pub active: bool,
    /// When it became active or standby.
    pub since: Instant,
    pub started: Instant,
    /// The other LB's last hello, on either link, and what it said.
    pub peer_seen: Option<Instant>,
    pub peer_interval: Option<Duration>,
    pub peer_active: bool,
    pub peer_priority: u8,
    pub takeovers: u64,
    pub stepdowns: u64,
    /// This start took over the fast path of the LB's last start, still running (a
    /// restart within its grace): it forwards as that start did until it hears the other
    /// LB, whose hello says which of the two is active ([`Balancer::resume_spare`]).
    pub resuming: bool,
    /// Both are active, this one outranking the other, which stepped in while this one
    /// went unheard: its announcements taught the switches to send the network's traffic
    /// to it, and it stands down on this one's hello, so this one announces again (once
    /// per such overlap, at its next poll).
    pub reclaim: bool,
    /// The other LB was last heard active while this one was too.
    pub overlap: bool,
    /// The other LB's last hello said it is gone (a stop without a hand-over): it counts
    /// as gone now, until it is heard again.
    pub peer_left: bool,
    /// This LB's fast path is handed over to its next start (its programs forward on
    /// while it restarts): stopping, it sends its last hello only while it hears the
    /// other ([`Balancer::farewell`]).
    pub handed_over: bool,
    /// Set as it stops where the hand-over must be withdrawn (its runner removes the
    /// links' pins, so that the next start begins standby instead of resuming): it was
    /// standby (its programs carried nothing), or the other took the network at its last
    /// hello.
    pub withdraw_hand_over: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl SpareState {
    /// How long the other LB may go unheard before it counts as gone: 2.5 of its hello
    /// intervals (this LB's `own` until its first hello says).
    fn dead_after(&self, own: Duration) -> Duration {
        self.peer_interval.unwrap_or(own).mul_f64(DEAD_INTERVALS)
    }

    /// The other LB is not heard now: never heard, gone quiet for [`Self::dead_after`], or
    /// its last hello said it left.
    fn unheard(&self, now: Instant, own: Duration) -> bool {
        self.peer_left
            || self
                .peer_seen
                .is_none_or(|t| now.saturating_duration_since(t) > self.dead_after(own))
    }

    pub fn new(cfg: SpareConfig, now: Instant) -> SpareState {
        SpareState {
            cfg,
            active: false,
            since: now,
            started: now,
            peer_seen: None,
            peer_interval: None,
            peer_active: false,
            peer_priority: 0,
            takeovers: 0,
            stepdowns: 0,
            resuming: false,
            reclaim: false,
            overlap: false,
            peer_left: false,
            handed_over: false,
            withdraw_hand_over: Default::default(),
        }
    }
}

impl Balancer {
    /// This LB's internal MAC (its first internal port's), which ranks it against the
    /// other at equal priorities.
    fn own_mac(&self) -> MacAddr {
        self.ports
            .iter()
            .find(|p| p.role == PortRole::Internal)
            .map_or(MacAddr([0; 6]), |p| p.mac)
    }

    /// Whether a hello from `src` is the other LB's: a balancer's, sent from or naming its
    /// internal MAC.
    pub(super) fn is_peer_hello(&self, h: &dist::Hello, src: MacAddr) -> bool {
        let Some(s) = &self.spare else {
            return false;
        };
        h.element == dist::ElementKind::Balancer
            && (src == s.cfg.peer || h.ports.iter().any(|p| p.mac == s.cfg.peer))
    }

    /// A restart of this LB that took its predecessor's running fast path over (within
    /// `[io] restart_grace_s`): the predecessor may have been the active one, whose
    /// traffic the programs still carry. Rather than start standby (dropping that traffic
    /// until the other LB's next hello, or until the other LB, outranking it, took the
    /// network over), it forwards on, not counted active, until it hears the other LB:
    /// active there, this one stands by; standby there, this one is the active one, and
    /// announces the network's addresses again (the other may have taken over and stood
    /// down meanwhile, which a standby's hello does not say). Heard from for 2.5
    /// intervals by no one, it becomes active as at any start.
    pub fn resume_spare(&mut self, now: Instant) {
        let Some(s) = &mut self.spare else {
            return;
        };
        s.resuming = true;
        s.since = now;
        self.standby = false;
        self.changed();
    }

    /// The other LB's hello: it is alive; of two active ones the lower-ranked steps down.
    pub(super) fn peer_hello(&mut self, h: &dist::Hello, now: Instant) {
        let me = self.own_mac();
        let interval = self.cfg.hello_interval;
        let Some(s) = &mut self.spare else {
            return;
        };
        // Active, and the other heard again after it was gone (2.5 of its intervals), or
        // heard for the first time: while unheard it may have forwarded (a restart whose
        // fast path ran on) and taught the switches to send the network's traffic to it
        // again, undoing this one's announcements. Announce again (once per return).
        if h.interval_ms == 0 {
            // Its last hello: gone now (the standby takes over at its next poll).
            s.peer_left = true;
            s.peer_seen = Some(now);
            s.peer_active = false;
            return;
        }
        let returned = s.unheard(now, interval);
        s.peer_left = false;
        if s.active && returned {
            s.reclaim = true;
        }
        s.peer_seen = Some(now);
        s.peer_interval = Some(Duration::from_millis(h.interval_ms.max(1) as u64));
        s.peer_active = h.active;
        s.peer_priority = h.priority;
        if s.resuming {
            // The first word from the other LB since this restart settles the roles.
            s.resuming = false;
            s.active = !h.active;
            // Active: the other may have taken over while this LB restarted (gone 2.5
            // intervals) and stood down on its first hello since, its announcements having
            // taught the switches to send the network's traffic to it: announce again.
            s.reclaim = s.active;
            s.since = now;
            self.standby = h.active;
            self.changed();
            return;
        }
        let overlap = s.active && h.active;
        if overlap && !s.overlap && (h.priority, s.cfg.peer.0) < (s.cfg.priority, me.0) {
            s.reclaim = true;
        }
        s.overlap = overlap;
        if overlap && (h.priority, s.cfg.peer.0) > (s.cfg.priority, me.0) {
            s.active = false;
            s.overlap = false;
            s.reclaim = false;
            s.since = now;
            s.stepdowns += 1;
            self.counters.event(Event::SpareStepDowns);
            self.standby = true;
            self.changed();
        }
    }

    /// Timers of the pair (first worker): the standby takes over when the other LB is
    /// gone, or at start when it ranks higher and the other is standby too.
    pub(super) fn spare_poll(&mut self, now: Instant, tx: &mut TxQueues) {
        let me = self.own_mac();
        let interval = self.cfg.hello_interval;
        let Some(s) = &mut self.spare else {
            return;
        };
        if s.active {
            if std::mem::take(&mut s.reclaim) {
                self.counters.event(Event::SpareReclaims);
                self.announce(tx);
            }
            return;
        }
        let dead_after = s.dead_after(interval);
        let gone = s.peer_left
            || now.saturating_duration_since(s.peer_seen.unwrap_or(s.started)) > dead_after;
        let outranks = s.peer_seen.is_some()
            && !s.peer_active
            && (s.cfg.priority, me.0) > (s.peer_priority, s.cfg.peer.0);
        if !(gone || outranks) {
            return;
        }
        s.active = true;
        s.resuming = false;
        // (The announcement below is the one a reclaim would make.)
        s.reclaim = false;
        s.since = now;
        // Coming up at start, the other standby, is no takeover.
        let takeover = s.peer_seen.is_some() && gone;
        if takeover {
            s.takeovers += 1;
        }
        self.standby = false;
        self.changed();
        if takeover {
            self.counters.event(Event::SpareTakeovers);
        }
        self.announce(tx);
        // Its hellos go out now, saying active: an LB that was only slow to be heard (a
        // restart) learns of the takeover at once, and if it outranks this one, announces
        // again when this one stands down (see `peer_hello`), where this one might
        // otherwise stand down before its next hello and leave the switches it taught
        // sending the network's traffic here.
        self.next_hello = now;
    }

    /// Stopping: the active LB (or one resuming as active) of a pair tells the other it is
    /// gone, so that the other takes over at once: a hello with `interval_ms` 0 and not
    /// active, on the interconnection and out of the external ports from the shared MAC,
    /// where the other watches. Where its fast path is handed over to its next start, only
    /// while it hears the other (else the programs carry the traffic and the next start
    /// resumes). True when it said it.
    pub fn farewell(&mut self, now: Instant, tx: &mut TxQueues) -> bool {
        let interval = self.cfg.hello_interval;
        let Some(s) = &mut self.spare else {
            return false;
        };
        let heard = !s.unheard(now, interval);
        let active = s.active || s.resuming;
        if s.handed_over && (!active || heard) {
            s.withdraw_hand_over
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if !active || (s.handed_over && !heard) {
            return false;
        }
        let mut h = self.hello();
        if let dist::Message::Hello(m) = &mut h.msg {
            m.interval_ms = 0;
            m.active = false;
        }
        // (Out of the external ports as an active LB's hellos go.)
        self.send_hellos(&h, tx);
        self.counters.event(Event::SpareFarewells);
        let s = self.spare.as_mut().expect("a spare pair");
        s.active = false;
        s.resuming = false;
        self.standby = true;
        true
    }

    /// The active LB's addresses announced from the shared MAC on every external port,
    /// and every address of each port's IPv4 network asked for its MAC (see the module).
    fn announce(&mut self, tx: &mut TxQueues) {
        for (i, port) in self.ports.clone().iter().enumerate() {
            if port.role != PortRole::External {
                continue;
            }
            let i = i as u16;
            if !port.addr.is_unspecified() {
                // A gratuitous ARP: a request for our own address, from it.
                if let Some(p) = self.arp_request(port.mac, port.addr, port.addr) {
                    self.counters.event(Event::SpareAnnounced);
                    tx.push(i, p);
                }
                let net = u32::from(port.addr) & prefix_mask(port.prefix_len);
                let hosts = (!prefix_mask(port.prefix_len)).min(PROBE_MAX);
                for h in 1..hosts {
                    let target = Ipv4Addr::from(net | h);
                    if target == port.addr {
                        continue;
                    }
                    if let Some(p) = self.arp_request(port.mac, port.addr, target) {
                        self.counters.event(Event::SpareProbes);
                        tx.push(i, p);
                    }
                }
            }
            for &(a, _) in &port.addrs6 {
                let (to, to_mac, na) = icmpv6::answer_solicit(
                    std::net::Ipv6Addr::UNSPECIFIED,
                    None,
                    port.mac,
                    a,
                    port.mac,
                );
                let mut p = self.pool.get();
                p.data.resize(ETH + ipv6::HEADER_LEN + na.buffer_len(), 0);
                let eth = ethernet::Repr {
                    dst: to_mac,
                    src: port.mac,
                    vlan: None,
                    ethertype: ethertype::IPV6,
                };
                if eth.emit(&mut p.data).is_ok()
                    && icmpv6::emit_packet(&mut p.data[ETH..], a, to, 255, &na).is_ok()
                {
                    self.counters.event(Event::SpareAnnounced);
                    tx.push(i, p);
                }
            }
        }
    }

    /// A broadcast ARP request from `mac`/`from` for `target`.
    fn arp_request(
        &mut self,
        mac: MacAddr,
        from: Ipv4Addr,
        target: Ipv4Addr,
    ) -> Option<crate::buf::Pkt> {
        let mut p = self.pool.get();
        p.data.resize(ETH + arp::PACKET_LEN, 0);
        let eth = ethernet::Repr {
            dst: MacAddr::BROADCAST,
            src: mac,
            vlan: None,
            ethertype: ethertype::ARP,
        };
        let req = arp::Repr {
            operation: arp::Operation::Request,
            sender_mac: mac,
            sender_ip: from,
            target_mac: MacAddr([0; 6]),
            target_ip: target,
        };
        (eth.emit(&mut p.data).is_ok() && req.emit(&mut p.data[ETH..]).is_ok()).then_some(p)
    }
}

/// The network mask of a prefix length (0 to 32).
fn prefix_mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    }
}
