//! State changes an operator cares about, one log line each: a port's link going down or
//! coming up, neighbours learned and lost (at most one line of each per interval, however
//! many changed), the table a back-end installed (the latest, at most once per interval).
//! The controller's and the LB's own changes (an element up or down, the role, a reload)
//! are logged where they happen; docs/operate.md lists them all.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::MacAddr;

/// How often the ports' links are looked at.
const LINK_POLL: Duration = Duration::from_millis(200);

/// The shortest time between two neighbour lines, and between two table lines.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// How many neighbours a line names (it counts them all).
const NAMED: usize = 8;

/// Watches the links of `ports` (interface names) until `stop` and logs each change:
/// `port down` (a warning) and `port up`. A port down at the start is logged as such; one
/// up is not. A port that cannot be read (removed) is logged once as down.
pub fn watch_links(ports: Vec<String>, stop: Arc<AtomicBool>) -> std::io::Result<()> {
    if ports.is_empty() {
        return Ok(());
    }
    std::thread::Builder::new()
        .name("links".into())
        .spawn(move || {
            let mut was: Vec<Option<bool>> = vec![None; ports.len()];
            while !stop.load(Ordering::Relaxed) {
                for (i, name) in ports.iter().enumerate() {
                    let (up, error) = match io::netdev::link_running(name) {
                        Ok(up) => (up, None),
                        Err(e) => (false, Some(e.to_string())),
                    };
                    if was[i] == Some(up) {
                        continue;
                    }
                    let first = was[i].is_none();
                    was[i] = Some(up);
                    match (up, first) {
                        (true, true) => {}
                        (true, false) => tracing::info!(port = %name, "port up"),
                        (false, _) => match &error {
                            None => tracing::warn!(port = %name, at_start = first, "port down"),
                            Some(e) => {
                                tracing::warn!(port = %name, at_start = first, error = %e, "port down")
                            }
                        },
                    }
                }
                std::thread::sleep(LINK_POLL);
            }
        })?;
    Ok(())
}

/// One neighbour as the log names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Neighbour {
    pub port: String,
    pub addr: IpAddr,
    pub mac: MacAddr,
}

/// Neighbours learned and lost since the last look, one line of each per [`INTERVAL`].
#[derive(Debug, Default)]
pub struct NeighbourLog {
    known: BTreeSet<Neighbour>,
    next: Option<Instant>,
}

impl NeighbourLog {
    /// Whether a look is due at `now` (then the next is due an [`INTERVAL`] later).
    pub fn due(&mut self, now: Instant) -> bool {
        if self.next.is_some_and(|n| now < n) {
            return false;
        }
        self.next = Some(now + INTERVAL);
        true
    }

    /// Compares the resolved neighbours `now` with the last look's and logs what changed:
    /// a line `neighbours learned` and a line `neighbours lost`, each naming the first few
    /// and counting all. Returns (learned, lost).
    pub fn observe(&mut self, now: impl IntoIterator<Item = Neighbour>) -> (usize, usize) {
        let now: BTreeSet<Neighbour> = now.into_iter().collect();
        let learned: Vec<&Neighbour> = now.difference(&self.known).collect();
        let lost: Vec<&Neighbour> = self.known.difference(&now).collect();
        let name = |v: &[&Neighbour]| {
            let mut s: Vec<String> = v
                .iter()
                .take(NAMED)
                .map(|n| format!("{} {} on {}", n.addr, n.mac, n.port))
                .collect();
            if v.len() > NAMED {
                s.push(format!("and {} more", v.len() - NAMED));
            }
            s.join(", ")
        };
        if !learned.is_empty() {
            tracing::info!(count = learned.len(), neighbours = %name(&learned), "neighbours learned");
        }
        if !lost.is_empty() {
            tracing::info!(count = lost.len(), neighbours = %name(&lost), "neighbours lost");
        }
        let counts = (learned.len(), lost.len());
        self.known = now;
        counts
    }
}

/// The table a back-end installed, logged at most once per [`INTERVAL`]: the latest
/// version when several came within one.
#[derive(Debug, Default)]
pub struct TableLog {
    logged: Option<(u32, u32)>,
    pending: Option<wire::dist::HelloState>,
    last: Option<Instant>,
}

impl TableLog {
    /// The table now installed (`state`, when it holds a controller's), at `now`; logs
    /// `FIB installed` if its epoch or version is new and the last line is an interval old
    /// (else at a later call).
    pub fn installed(&mut self, state: Option<wire::dist::HelloState>, now: Instant) -> bool {
        if let Some(s) = state.filter(|s| s.table) {
            if self.logged != Some((s.epoch, s.version)) {
                self.pending = Some(s);
            }
        }
        if self.last.is_some_and(|t| now.duration_since(t) < INTERVAL) {
            return false;
        }
        let Some(s) = self.pending.take() else {
            return false;
        };
        tracing::info!(
            epoch = s.epoch,
            version = s.version,
            routes = s.routes,
            "FIB installed"
        );
        self.logged = Some((s.epoch, s.version));
        self.last = Some(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(port: &str, addr: &str, last: u8) -> Neighbour {
        Neighbour {
            port: port.into(),
            addr: addr.parse().unwrap(),
            mac: MacAddr([2, 0, 0, 0, 0, last]),
        }
    }

    #[test]
    fn neighbours_are_counted_once_as_learned_and_once_as_lost() {
        let mut log = NeighbourLog::default();
        let t = Instant::now();
        assert!(log.due(t));
        assert!(!log.due(t + Duration::from_millis(500)));
        assert!(log.due(t + INTERVAL));
        let a = n("eth0", "10.0.0.2", 2);
        let b = n("eth1", "2001:db8::2", 3);
        assert_eq!(log.observe([a.clone(), b.clone()]), (2, 0));
        assert_eq!(log.observe([a.clone(), b.clone()]), (0, 0));
        // A new MAC for the same address: the old one lost, the new one learned.
        let a2 = n("eth0", "10.0.0.2", 9);
        assert_eq!(log.observe([a2, b]), (1, 1));
        assert_eq!(log.observe([]), (0, 2));
    }

    #[test]
    fn the_table_is_logged_at_most_once_per_interval_and_the_latest_wins() {
        let st = |version| wire::dist::HelloState {
            incarnation: 1,
            table: true,
            epoch: 7,
            version,
            routes: 10,
            digest: 0,
        };
        let mut log = TableLog::default();
        let t = Instant::now();
        assert!(log.installed(Some(st(1)), t));
        // The same table again: nothing.
        assert!(!log.installed(Some(st(1)), t + INTERVAL * 2));
        // Two versions within the interval: the second is logged once it has passed.
        let t2 = t + INTERVAL * 3;
        assert!(log.installed(Some(st(2)), t2));
        assert!(!log.installed(Some(st(3)), t2 + Duration::from_millis(100)));
        assert!(!log.installed(None, t2 + Duration::from_millis(900)));
        assert!(log.installed(None, t2 + INTERVAL));
        assert!(!log.installed(Some(st(3)), t2 + INTERVAL * 3));
        // No table from a controller yet (a back-end's start): nothing.
        let mut log = TableLog::default();
        let empty = wire::dist::HelloState {
            table: false,
            ..st(0)
        };
        assert!(!log.installed(Some(empty), t));
    }
}
