//! What a run loop needs from an element (a forwarder or an LB): a per-frame path, timers,
//! a buffer pool and counters.

use crate::buf::{Pkt, Pool, TxQueues};
use crate::counters::Counters;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A DIST hello of an element: its kind, hello interval, traffic totals (received, sent,
/// dropped: [`Counters::totals`], summed over the element's workers), ports and their
/// IPv6 addresses.
pub(crate) fn hello(
    element: wire::dist::ElementKind,
    interval: Duration,
    totals: (u64, u64, u64),
    ports: Vec<wire::dist::HelloPort>,
    addrs6: Vec<wire::dist::HelloAddr6>,
    state: Option<wire::dist::HelloState>,
) -> wire::dist::Message {
    let (rx_packets, tx_packets, dropped) = totals;
    wire::dist::Message::Hello(wire::dist::Hello {
        element,
        interval_ms: interval.as_millis().min(u16::MAX as u128) as u16,
        rx_packets,
        tx_packets,
        dropped,
        priority: 0,
        active: false,
        ports,
        addrs6,
        state,
    })
}

/// The IPv6 addresses of a hello: `per_port[i]` are port `i`'s, for the first 255 ports
/// and as many addresses as a hello holds.
pub(crate) fn hello_addrs6<I, A>(per_port: I) -> Vec<wire::dist::HelloAddr6>
where
    I: IntoIterator<Item = A>,
    A: IntoIterator<Item = (std::net::Ipv6Addr, u8)>,
{
    per_port
        .into_iter()
        .take(255)
        .enumerate()
        .flat_map(|(i, l)| {
            l.into_iter()
                .map(move |(addr, prefix_len)| wire::dist::HelloAddr6 {
                    port: i as u8,
                    addr,
                    prefix_len,
                })
        })
        .take(255)
        .collect()
}

/// How often an element reports its counters to the controller.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// The largest body of a counters message an element sends: an Ethernet payload of 1,500
/// bytes less the DIST header and an authentication trailer.
const MAX_REPORT_BODY: usize = 1500 - wire::dist::HEADER_LEN - wire::dist::auth::TRAILER_LEN;

/// When and under which name an element reports its counters over DIST (see
/// [`counter_reports`]). Without a name it reports nothing.
#[derive(Debug, Clone, Default)]
pub struct Reporter {
    pub name: Option<String>,
    next: Option<Instant>,
}

impl Reporter {
    /// The name to report under, if a report is due at `now` (then the next is due a
    /// [`REPORT_INTERVAL`] later).
    pub fn due(&mut self, now: Instant) -> Option<String> {
        let name = self.name.clone()?;
        if self.next.is_some_and(|n| now < n) {
            return None;
        }
        self.next = Some(now + REPORT_INTERVAL);
        Some(name)
    }
}

/// An element's counters as DIST counters messages: its ports (`external[i]`: port `i`
/// faces the outside), then every nonzero drop and event of its role, split so that each
/// message fits one frame with an authentication trailer. A name or counter that DIST
/// cannot carry (see `wire::dist`) is left out.
pub fn counter_reports(
    name: &str,
    counters: &Counters,
    external: &[bool],
) -> Vec<wire::dist::Message> {
    counter_reports_of(name, &counters.port_names, counters.snapshot(), external)
}

/// As [`counter_reports`], from a snapshot `s` (the sum of an element's workers) of
/// counters whose ports are `port_names`.
pub fn counter_reports_of(
    name: &str,
    port_names: &[String],
    s: crate::counters::Snapshot,
    external: &[bool],
) -> Vec<wire::dist::Message> {
    use wire::dist::{CounterReport, Message, PortCounts, MAX_NAME};
    let ok = |n: &str| {
        !n.is_empty() && n.len() <= MAX_NAME && n.bytes().all(|b| (0x21..0x7f).contains(&b))
    };
    if !ok(name) {
        return Vec::new();
    }
    let ports = port_names
        .iter()
        .enumerate()
        .filter(|(_, n)| ok(n))
        .filter_map(|(i, n)| {
            let p = s.interfaces.get(n)?;
            Some(PortCounts {
                name: n.clone(),
                external: external.get(i).copied().unwrap_or(false),
                rx_packets: p.rx_packets,
                rx_bytes: p.rx_bytes,
                tx_packets: p.tx_packets,
                tx_bytes: p.tx_bytes,
            })
        })
        .take(255)
        .collect();
    let fresh = |ports| CounterReport {
        element: name.to_string(),
        ports,
        drops: Vec::new(),
        events: Vec::new(),
    };
    let mut out = Vec::new();
    let mut cur = fresh(ports);
    let mut len = Message::Counters(cur.clone()).body_len_public();
    let counts = s
        .drops
        .into_iter()
        .map(|d| (true, d))
        .chain(s.events.into_iter().map(|e| (false, e)))
        .filter(|(_, (n, v))| *v > 0 && ok(n));
    for (drop, (n, v)) in counts {
        let add = 2 + n.len() + 8;
        if len + add > MAX_REPORT_BODY {
            out.push(Message::Counters(std::mem::replace(
                &mut cur,
                fresh(Vec::new()),
            )));
            len = Message::Counters(cur.clone()).body_len_public();
        }
        len += add;
        if drop {
            cur.drops.push((n, v));
        } else {
            cur.events.push((n, v));
        }
    }
    out.push(Message::Counters(cur));
    out
}

/// An element's DIST authentication: the receiving guard (its own) and the sending signer
/// (shared with the element's other threads that send DIST). Without a key both let
/// everything through (docs/dist.md, "Authentication").
#[derive(Debug)]
pub struct DistAuth {
    pub guard: wire::dist::auth::Guard,
    pub signer: Arc<wire::dist::auth::Signer>,
}

impl Default for DistAuth {
    fn default() -> Self {
        DistAuth {
            guard: wire::dist::auth::Guard::new(None, 0),
            signer: Arc::new(wire::dist::auth::Signer::new(None)),
        }
    }
}

impl DistAuth {
    /// Checks a received DIST frame (untagged, whole); the drop reason if it fails.
    pub fn check(&mut self, frame: &[u8]) -> Result<(), crate::counters::Drop> {
        use crate::counters::Drop;
        use wire::dist::auth::Reject;
        self.guard
            .check(frame, wire::dist::auth::now_ns())
            .map_err(|r| match r {
                Reject::Unauthenticated => Drop::DistUnauthenticated,
                Reject::Forged => Drop::DistForged,
                Reject::Replayed => Drop::DistReplayed,
                Reject::Stale => Drop::DistStale,
                Reject::Malformed => Drop::DistMalformed,
            })
    }

    /// Seals a DIST frame built by `to_frame` (a no-op without a key).
    pub fn seal(&self, frame: &mut Vec<u8>) {
        // A frame from `to_frame` always holds a whole message: sealing cannot fail.
        let _ = self.signer.seal(frame, wire::dist::auth::now_ns());
    }

    pub fn enabled(&self) -> bool {
        self.guard.enabled()
    }
}

pub trait Element {
    /// Runs one received frame (`meta.rx_port` set) through the element.
    fn process(&mut self, p: Pkt, now: Instant, tx: &mut TxQueues);
    /// Timers (ARP retries, hellos, timeouts).
    fn poll(&mut self, now: Instant, tx: &mut TxQueues);
    /// The longest the run loop may wait between [`Element::poll`] calls.
    fn poll_interval(&self) -> Duration;
    /// Called after every pass over the ports.
    fn end_batch(&mut self) {}
    /// Called after every pass over the ports, before the transmit queues go out: news
    /// from the element's sibling workers (see `Forwarder::connect_workers`). The default
    /// does nothing.
    fn sync(&mut self, _now: Instant, _tx: &mut TxQueues) {}
    /// A hint for a frame that [`Element::process`] will see soon (`near`: within a few
    /// frames; otherwise further ahead): an element that looks tables up starts loading
    /// what it will need. The default does nothing.
    fn prefetch(&mut self, _p: &Pkt, _near: bool) {}
    /// The element has frames due sooner than the run loop's idle wait (a switch's shaped
    /// queues): the loop polls again at once instead of sleeping. The default: never.
    fn busy(&self) -> bool {
        false
    }
    fn pool(&mut self) -> &mut Pool;
    fn counters(&self) -> &Arc<Counters>;
}

/// How many frames ahead [`process_batch`] gives the far and the near hint.
const FAR: usize = 8;
const NEAR: usize = 4;

/// Runs a received batch (every frame from port `rx_port`) through `e`, emptying `batch`.
/// Each frame gets its far hint [`FAR`] frames and its near hint [`NEAR`] frames before
/// it is processed ([`Element::prefetch`]), so that the cache misses of its lookups
/// overlap the work on the frames before it.
pub fn process_batch<E: Element>(
    e: &mut E,
    batch: &mut Vec<Pkt>,
    rx_port: u16,
    now: Instant,
    tx: &mut TxQueues,
) {
    for p in batch.iter().take(FAR) {
        e.prefetch(p, false);
    }
    for p in batch.iter().take(NEAR) {
        e.prefetch(p, true);
    }
    let mut it = batch.drain(..);
    while let Some(mut p) = it.next() {
        let rest = it.as_slice();
        if let Some(q) = rest.get(FAR - 1) {
            e.prefetch(q, false);
        }
        if let Some(q) = rest.get(NEAR - 1) {
            e.prefetch(q, true);
        }
        p.meta.rx_port = rx_port;
        e.process(p, now, tx);
    }
}

impl Element for crate::forwarder::Forwarder {
    fn process(&mut self, p: Pkt, now: Instant, tx: &mut TxQueues) {
        crate::forwarder::Forwarder::process(self, p, now, tx)
    }
    fn poll(&mut self, now: Instant, tx: &mut TxQueues) {
        crate::forwarder::Forwarder::poll(self, now, tx)
    }
    fn poll_interval(&self) -> Duration {
        crate::forwarder::Forwarder::poll_interval(self)
    }
    fn end_batch(&mut self) {
        crate::forwarder::Forwarder::end_batch(self)
    }
    fn sync(&mut self, now: Instant, tx: &mut TxQueues) {
        crate::forwarder::Forwarder::take_news(self, now, tx)
    }
    fn prefetch(&mut self, p: &Pkt, near: bool) {
        crate::forwarder::Forwarder::prefetch(self, p, near)
    }
    fn pool(&mut self) -> &mut Pool {
        &mut self.pool
    }
    fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }
}

impl Element for crate::switch::Switch {
    fn process(&mut self, p: Pkt, now: Instant, tx: &mut TxQueues) {
        crate::switch::Switch::process(self, p, now, tx)
    }
    fn poll(&mut self, now: Instant, tx: &mut TxQueues) {
        crate::switch::Switch::poll(self, now, tx)
    }
    fn poll_interval(&self) -> Duration {
        // Output queues are served at every pass of the run loop.
        Duration::ZERO
    }
    fn busy(&self) -> bool {
        crate::switch::Switch::busy(self)
    }
    fn pool(&mut self) -> &mut Pool {
        &mut self.pool
    }
    fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }
}

impl Element for crate::axon::Axon {
    fn process(&mut self, p: Pkt, now: Instant, tx: &mut TxQueues) {
        crate::axon::Axon::process(self, p, now, tx)
    }
    fn poll(&mut self, now: Instant, tx: &mut TxQueues) {
        crate::axon::Axon::poll(self, now, tx)
    }
    fn poll_interval(&self) -> Duration {
        // Hellos and the output queues are served at every pass of the run loop.
        Duration::ZERO
    }
    fn busy(&self) -> bool {
        crate::axon::Axon::busy(self)
    }
    fn pool(&mut self) -> &mut Pool {
        &mut self.pool
    }
    fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }
}

impl Element for crate::balancer::Balancer {
    fn process(&mut self, p: Pkt, now: Instant, tx: &mut TxQueues) {
        crate::balancer::Balancer::process(self, p, now, tx)
    }
    fn poll(&mut self, now: Instant, tx: &mut TxQueues) {
        crate::balancer::Balancer::poll(self, now, tx)
    }
    fn poll_interval(&self) -> Duration {
        // Back-end timeouts are checked this often: failover takes at most this longer.
        Duration::from_millis(10)
    }
    fn sync(&mut self, now: Instant, _tx: &mut TxQueues) {
        crate::balancer::Balancer::sync(self, now)
    }
    fn pool(&mut self) -> &mut Pool {
        &mut self.pool
    }
    fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what the run loop asks of it: ("far" | "near" | "process", frame id).
    struct Recorder {
        log: Vec<(&'static str, u8, u16)>,
        pool: Pool,
        counters: Arc<Counters>,
    }

    impl Element for Recorder {
        fn process(&mut self, p: Pkt, _: Instant, _: &mut TxQueues) {
            self.log.push(("process", p.data[0], p.meta.rx_port));
        }
        fn poll(&mut self, _: Instant, _: &mut TxQueues) {}
        fn poll_interval(&self) -> Duration {
            Duration::from_millis(10)
        }
        fn prefetch(&mut self, p: &Pkt, near: bool) {
            self.log
                .push((if near { "near" } else { "far" }, p.data[0], p.meta.rx_port));
        }
        fn pool(&mut self) -> &mut Pool {
            &mut self.pool
        }
        fn counters(&self) -> &Arc<Counters> {
            &self.counters
        }
    }

    #[test]
    fn every_frame_is_hinted_far_then_near_then_processed_in_order() {
        for n in [0u8, 1, 3, 4, 5, 8, 9, 20] {
            let mut e = Recorder {
                log: Vec::new(),
                pool: Pool::new(),
                counters: Arc::new(Counters::new(vec!["p".into()])),
            };
            let mut batch: Vec<Pkt> = (0..n)
                .map(|i| {
                    let mut p = Pkt::new();
                    p.data.push(i);
                    p
                })
                .collect();
            process_batch(&mut e, &mut batch, 3, Instant::now(), &mut TxQueues::new(1));
            assert!(batch.is_empty());
            let processed: Vec<u8> = e
                .log
                .iter()
                .filter(|l| l.0 == "process")
                .map(|l| l.1)
                .collect();
            assert_eq!(processed, (0..n).collect::<Vec<_>>(), "{n} frames");
            assert!(e.log.iter().filter(|l| l.0 == "process").all(|l| l.2 == 3));
            for i in 0..n {
                let at = |what: &str| {
                    let mut hits = e
                        .log
                        .iter()
                        .enumerate()
                        .filter(|l| l.1 .0 == what && l.1 .1 == i);
                    let first = hits
                        .next()
                        .unwrap_or_else(|| panic!("frame {i} of {n}: no {what}"));
                    assert!(hits.next().is_none(), "frame {i} of {n}: {what} twice");
                    first.0
                };
                let (far, near, done) = (at("far"), at("near"), at("process"));
                assert!(far < near && near < done, "frame {i} of {n}: {:?}", e.log);
                // Ahead of time: at least min(i, NEAR) other frames are processed between
                // a frame's near hint and its own processing.
                let between = e.log[near..done]
                    .iter()
                    .filter(|l| l.0 == "process")
                    .count();
                assert_eq!(between, (i as usize).min(NEAR), "frame {i} of {n}");
            }
        }
    }
}
