//! What every element says to the controller over DIST: its hellos, its counters as
//! counters messages (when and under which name), and the authentication of what it sends
//! and receives.

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
