//! Draining a back-end (`tessera drain`, `tessera undrain`): the controller leaves it out
//! of the LBs' balancing tables, so that they give it no more frames, while it stays up
//! and forwards whatever still reaches it; once every LB runs a table without it and the
//! back-end's own reports show it forwarded nothing between two of them, it is idle, and
//! stopping it loses nothing.
//!
//! Moving a drained back-end's flows to the others is safe as soon as the LBs switch
//! tables: every back-end holds the same forwarding table, and the router keeps no state
//! per flow; frames of a flow may be reordered once, at the switch.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Instant;
use wire::MacAddr;

/// The events whose sum is what a back-end forwarded (user space and fast path).
pub const FORWARDED: [&str; 3] = ["ip4_forwarded", "ip6_forwarded", "fast_path_forwarded"];

/// One back-end being drained.
#[derive(Debug, Clone)]
pub struct Drain {
    pub since: Instant,
    /// What it had forwarded at its last report while every LB ran a table without it.
    last: Option<u64>,
    /// Since when it has been idle (None: not yet).
    pub idle_since: Option<Instant>,
}

/// The back-ends being drained, by MAC.
#[derive(Debug, Clone, Default)]
pub struct Drains {
    pub by_mac: BTreeMap<MacAddr, Drain>,
}

impl Drains {
    /// Starts draining `mac` (again from the start if it was).
    pub fn start(&mut self, mac: MacAddr, now: Instant) {
        self.by_mac.insert(
            mac,
            Drain {
                since: now,
                last: None,
                idle_since: None,
            },
        );
    }

    /// Stops draining `mac`; whether it was.
    pub fn stop(&mut self, mac: MacAddr) -> bool {
        self.by_mac.remove(&mac).is_some()
    }

    /// Whether the LBs should leave `mac` out.
    pub fn excludes(&self, mac: &MacAddr) -> bool {
        self.by_mac.contains_key(mac)
    }

    /// A counters report of `mac`, which has forwarded `forwarded` frames in all; `lbs_current`:
    /// whether every LB runs the table the controller last sent it (without the drained
    /// back-ends). Idle once two reports in a row, both with the LBs current, show the
    /// same count.
    pub fn on_report(&mut self, mac: MacAddr, forwarded: u64, lbs_current: bool, now: Instant) {
        let Some(d) = self.by_mac.get_mut(&mac) else {
            return;
        };
        if !lbs_current {
            d.last = None;
            d.idle_since = None;
            return;
        }
        if d.last == Some(forwarded) {
            d.idle_since.get_or_insert(now);
        } else {
            d.idle_since = None;
        }
        d.last = Some(forwarded);
    }

    /// `draining` or `idle`, or None where `mac` is not drained.
    pub fn state(&self, mac: &MacAddr) -> Option<&'static str> {
        self.by_mac.get(mac).map(|d| {
            if d.idle_since.is_some() {
                "idle"
            } else {
                "draining"
            }
        })
    }

    /// How `tessera drain` and `show elements` report one.
    pub fn json(&self, mac: &MacAddr, element: &str, now: Instant) -> Value {
        match self.by_mac.get(mac) {
            Some(d) => json!({
                "mac": mac.to_string(), "element": element,
                "state": self.state(mac),
                "draining_ms": now.duration_since(d.since).as_millis() as u64,
                "idle_ms": d.idle_since.map(|i| now.duration_since(i).as_millis() as u64),
            }),
            None => json!({"mac": mac.to_string(), "element": element, "state": "in service"}),
        }
    }
}

/// What `report_events` say a back-end forwarded, in all.
pub fn forwarded(events: &BTreeMap<String, u64>) -> u64 {
    FORWARDED.iter().filter_map(|e| events.get(*e)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_after_two_quiet_reports_with_the_lbs_current() {
        let mac = MacAddr([2, 0, 0, 0, 0, 1]);
        let t = Instant::now();
        let mut d = Drains::default();
        d.start(mac, t);
        assert!(d.excludes(&mac));
        assert_eq!(d.state(&mac), Some("draining"));
        // The LBs not yet current: nothing counts.
        d.on_report(mac, 100, false, t);
        d.on_report(mac, 100, false, t);
        assert_eq!(d.state(&mac), Some("draining"));
        // Current, but still forwarding.
        d.on_report(mac, 100, true, t);
        d.on_report(mac, 150, true, t);
        assert_eq!(d.state(&mac), Some("draining"));
        // Quiet across two reports: idle.
        d.on_report(mac, 150, true, t);
        assert_eq!(d.state(&mac), Some("idle"));
        // Traffic again (an LB that lost its table): draining again.
        d.on_report(mac, 151, true, t);
        assert_eq!(d.state(&mac), Some("draining"));
        assert!(d.stop(mac));
        assert!(!d.excludes(&mac));
        assert_eq!(d.state(&mac), None);
        let mut e = BTreeMap::new();
        e.insert("ip4_forwarded".to_string(), 5);
        e.insert("fast_path_forwarded".to_string(), 7);
        e.insert("icmp_errors_sent".to_string(), 100);
        assert_eq!(forwarded(&e), 12);
    }
}
