//! What a run loop needs from an element (a forwarder or an LB): a per-frame path, timers,
//! a buffer pool and counters.

use crate::buf::{Pkt, Pool, TxQueues};
use crate::counters::Counters;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::report::{counter_reports, counter_reports_of, DistAuth, Reporter, REPORT_INTERVAL};

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
    /// The run loop is ending (the element stops): what it sends as it goes, sent before
    /// the ports close (first worker only). The default sends nothing.
    fn leave(&mut self, _now: Instant, _tx: &mut TxQueues) {}
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
    fn leave(&mut self, _now: Instant, tx: &mut TxQueues) {
        crate::axon::Axon::farewell(self, tx)
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
    fn leave(&mut self, now: Instant, tx: &mut TxQueues) {
        crate::balancer::Balancer::farewell(self, now, tx);
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
