//! An Axon's restart that hands its fast path over to its next start (docs/axon.md,
//! "Across a restart"): its last hellos ask the neighbours to hold it, and its next start
//! floods no links until it has heard them again; floods numbered from the clock.

use super::*;

impl Axon {
    /// This start took over a predecessor's fast path, whose neighbours were on `ports`:
    /// until it has heard each of them again (or `until`), it floods no links, so that
    /// the others keep the predecessor's (the same, once heard) and their paths through
    /// this Axon, which its fast path carries on meanwhile. At most half of `LINKS_AGE`
    /// from `now`: the others must have links from this start before they forget its
    /// predecessor's.
    pub fn settle(&mut self, ports: Vec<usize>, until: Instant, now: Instant) {
        self.settle = Some((ports, until.min(now + LINKS_AGE / 2)));
    }

    /// Whether this start still holds its links back ([`Axon::settle`]).
    pub(super) fn settling(&mut self, now: Instant) -> bool {
        let Some((ports, until)) = &self.settle else {
            return false;
        };
        let heard = ports
            .iter()
            .all(|&p| self.neigh.get(p).is_some_and(|n| n.is_some()));
        if heard || now >= *until {
            self.settle = None;
            return false;
        }
        true
    }

    /// The last hellos, as the Axon stops for a restart that hands its fast path over
    /// ([`Axon::farewell_hold`]): on every port at once (past the output queues), asking
    /// the neighbours to keep this Axon that long without hellos, so that their paths
    /// through it stand while its fast path forwards on and its next start comes up.
    pub fn farewell(&mut self, tx: &mut TxQueues) {
        let Some(hold) = self.farewell_hold else {
            return;
        };
        let hold_ms = hold.as_millis().min(u32::MAX.into()) as u32;
        for port in 0..self.cfg.ports.len() {
            let c = self.hello(port, hold_ms);
            tx.push(port as u16, c);
        }
    }
}

/// The first sequence number of this start's link floods: the wall clock in
/// milliseconds, so that a restarted Axon's floods come after its last start's (whose
/// numbers grew by one a flood, far slower) and the others take them at once.
pub(super) fn first_seq() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u32)
}
