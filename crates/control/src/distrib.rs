//! Route distribution from the controller to the back-ends (DIST types 5 and 6).
//!
//! - [`Fib`]: the controller's authoritative table and its change log. Every change gets
//!   the next *version*; a version names one state of the table within an *epoch* (a
//!   controller's lifetime).
//! - [`Distributor`]: the controller's side of the channel. For each back-end it sends
//!   ordered deltas (`base` -> `version`) from the log, or a snapshot of the whole table in
//!   parts when the back-end is new, in another epoch, behind the log, or holds a table whose
//!   digest differs from the controller's at the same version. At most [`WINDOW`] messages
//!   are unacknowledged; when no acknowledgement advances for the back-end's timeout
//!   ([`RTO`] at first, doubled after each timeout up to [`MAX_RTO`], and brought back down
//!   by a tenth at each acknowledgement that advances), it goes back to the
//!   last acknowledged point and sends again (go-back-N).
//! - [`Writer`]: the back-end's side. It applies each delta atomically through the route
//!   writer (one publication), only in order; collects snapshot parts in order and applies
//!   the whole snapshot as one publication (the difference to what it holds); and
//!   acknowledges its version, route count and digest.
//!
//! One table holds both address families: a version counts the changes of either, and
//! the digest covers both. A back-end installs IPv4 routes through its route table and
//! hands IPv6 ones to the worker that holds its IPv6 table ([`Writer::take_routes6`]).
//!
//! The protocol is specified in `docs/dist.md`.

use dataplane::routes::RouteTable;
use fib::{Prefix, Prefix6};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::dist::{self, FibAck, RouteBatch, RouteEntry};
use wire::MacAddr;

/// A route's prefix, of either family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Net {
    V4(Prefix),
    V6(Prefix6),
}

impl Net {
    /// The prefix from an address and length (host bits cleared).
    pub fn new(addr: IpAddr, len: u8) -> Net {
        match addr {
            IpAddr::V4(a) => Net::V4(Prefix::new(a, len)),
            IpAddr::V6(a) => Net::V6(Prefix6::new(a, len)),
        }
    }

    pub fn addr(&self) -> IpAddr {
        match self {
            Net::V4(p) => p.addr().into(),
            Net::V6(p) => p.addr().into(),
        }
    }

    #[expect(
        clippy::len_without_is_empty,
        reason = "the prefix length, not a collection size"
    )]
    pub fn len(&self) -> u8 {
        match self {
            Net::V4(p) => p.len(),
            Net::V6(p) => p.len(),
        }
    }

    /// The order of tables and snapshots: IPv4 first, then by address and length.
    pub fn sort_key(&self) -> (bool, u128, u8) {
        match self {
            Net::V4(p) => (false, u32::from(p.addr()) as u128, p.len()),
            Net::V6(p) => (true, p.bits(), p.len()),
        }
    }

    /// Parses an IPv4 or IPv6 prefix (host bits must be clear).
    pub fn parse_strict(s: &str) -> Result<Net, fib::PrefixError> {
        if s.contains(':') {
            Prefix6::parse_strict(s).map(Net::V6)
        } else {
            Prefix::parse_strict(s).map(Net::V4)
        }
    }
}

impl From<Prefix> for Net {
    fn from(p: Prefix) -> Net {
        Net::V4(p)
    }
}

impl From<Prefix6> for Net {
    fn from(p: Prefix6) -> Net {
        Net::V6(p)
    }
}

impl std::fmt::Display for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Net::V4(p) => p.fmt(f),
            Net::V6(p) => p.fmt(f),
        }
    }
}

/// Gateways of a route: sorted, without duplicates, at most [`dist::MAX_GATEWAYS`], of
/// the route's family.
pub type Gateways = Box<[IpAddr]>;

/// A whole table, sorted by [`Net::sort_key`], shared between the back-ends that receive it.
pub type Snapshot = Arc<Vec<(Net, Gateways)>>;

/// Unacknowledged routes messages per back-end.
pub const WINDOW: usize = 128;
/// Time without progress after which unacknowledged messages are sent again.
pub const RTO: Duration = Duration::from_millis(200);
/// The longest the timeout grows to after repeated timeouts (a slow back-end).
pub const MAX_RTO: Duration = Duration::from_millis(3200);
/// Bytes of route entries per message: a frame of 1500 bytes, less the DIST headers and
/// room for the authentication trailer (docs/dist.md).
pub const BODY_BUDGET: usize =
    1500 - dist::HEADER_LEN - dist::ROUTES_FIXED_LEN - dist::auth::TRAILER_LEN;
/// Shortest time between two digest repairs of one back-end.
pub const REPAIR_HOLDOFF: Duration = Duration::from_secs(5);

/// Normalises gateways: sorted, deduplicated, capped.
pub fn gateways<A: Into<IpAddr>>(v: impl IntoIterator<Item = A>) -> Gateways {
    let mut v: Vec<IpAddr> = v.into_iter().map(Into::into).collect();
    v.sort();
    v.dedup();
    v.truncate(dist::MAX_GATEWAYS);
    v.into_boxed_slice()
}

fn digest_of(p: Net, g: &[IpAddr]) -> u64 {
    dist::route_digest_any(p.addr(), p.len(), g)
}

fn v4s(g: &[IpAddr]) -> Option<Vec<Ipv4Addr>> {
    g.iter()
        .map(|a| match a {
            IpAddr::V4(a) => Some(*a),
            IpAddr::V6(_) => None,
        })
        .collect()
}

fn v6s(g: &[IpAddr]) -> Option<Vec<Ipv6Addr>> {
    g.iter()
        .map(|a| match a {
            IpAddr::V6(a) => Some(*a),
            IpAddr::V4(_) => None,
        })
        .collect()
}

/// The controller's authoritative table.
pub struct Fib {
    epoch: u32,
    version: u32,
    routes: HashMap<Net, Gateways>,
    digest: u64,
    /// Changes; `log[i]` made version `log_first + i`.
    log: VecDeque<(Net, Option<Gateways>)>,
    log_first: u32,
    log_cap: usize,
    /// The table's digest and route count after each change of `log` (the same index),
    /// and before the first: what a back-end at that version must hold.
    log_state: VecDeque<(u64, u32)>,
    log_base: (u64, u32),
    /// The latest snapshot taken, while it is current.
    snapshot: Option<(u32, Snapshot)>,
}

impl Fib {
    /// An empty table in `epoch`, keeping the last `log_cap` changes.
    pub fn new(epoch: u32, log_cap: usize) -> Fib {
        Fib {
            epoch,
            version: 0,
            routes: HashMap::new(),
            digest: 0,
            log: VecDeque::new(),
            log_first: 1,
            log_cap: log_cap.max(1),
            log_state: VecDeque::new(),
            log_base: (0, 0),
            snapshot: None,
        }
    }

    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn digest(&self) -> u64 {
        self.digest
    }

    pub fn len(&self) -> usize {
        self.routes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    pub fn get(&self, p: impl Into<Net>) -> Option<&Gateways> {
        self.routes.get(&p.into())
    }

    pub fn prefixes(&self) -> impl Iterator<Item = &Net> {
        self.routes.keys()
    }

    /// Routes of each family: (IPv4, IPv6).
    pub fn counts(&self) -> (usize, usize) {
        let six = self
            .routes
            .keys()
            .filter(|p| matches!(p, Net::V6(_)))
            .count();
        (self.routes.len() - six, six)
    }

    /// Sets (`Some`) or withdraws (`None`) a route. True if the table changed, which
    /// makes a new version. Gateways of the other family than the prefix's are left out.
    pub fn set(&mut self, p: impl Into<Net>, via: Option<Gateways>) -> bool {
        let p = p.into();
        let six = matches!(p, Net::V6(_));
        let via = via
            .map(|g| {
                if g.iter().all(|a| a.is_ipv6() == six) {
                    g
                } else {
                    g.iter().filter(|a| a.is_ipv6() == six).copied().collect()
                }
            })
            .filter(|g| !g.is_empty());
        let old = match &via {
            Some(g) => {
                if self.routes.get(&p) == Some(g) {
                    return false;
                }
                self.routes.insert(p, g.clone())
            }
            None => match self.routes.remove(&p) {
                Some(o) => Some(o),
                None => return false,
            },
        };
        if let Some(o) = &old {
            self.digest ^= digest_of(p, o);
        }
        if let Some(g) = &via {
            self.digest ^= digest_of(p, g);
        }
        self.version = self.version.wrapping_add(1);
        if self.log.len() == self.log_cap {
            self.log.pop_front();
            self.log_base = self.log_state.pop_front().unwrap_or(self.log_base);
            self.log_first = self.log_first.wrapping_add(1);
        }
        self.log.push_back((p, via));
        self.log_state
            .push_back((self.digest, self.routes.len() as u32));
        true
    }

    /// The digest and route count of the table at version `v` of this epoch, while the
    /// log reaches back to it: what a back-end that acknowledges `v` must hold.
    pub fn state_at(&self, v: u32) -> Option<(u64, u32)> {
        if v == self.version {
            return Some((self.digest, self.routes.len() as u32));
        }
        if v > self.version || v.wrapping_add(1) < self.log_first {
            return None;
        }
        if v.wrapping_add(1) == self.log_first {
            return Some(self.log_base);
        }
        self.log_state.get((v - self.log_first) as usize).copied()
    }

    /// The changes after version `v`, with the version each makes; `None` if the log no
    /// longer reaches back to `v` (or `v` is ahead of the table).
    fn changes_after(
        &self,
        v: u32,
    ) -> Option<impl Iterator<Item = (u32, &(Net, Option<Gateways>))>> {
        if v > self.version || v.wrapping_add(1) < self.log_first {
            return None;
        }
        let skip = (v + 1 - self.log_first) as usize;
        Some(
            self.log
                .iter()
                .enumerate()
                .skip(skip)
                .map(move |(i, c)| (self.log_first + i as u32, c)),
        )
    }

    /// The whole table at the current version, sorted (shared while it stays current).
    pub fn snapshot(&mut self) -> (u32, Snapshot) {
        if let Some((v, s)) = &self.snapshot {
            if *v == self.version {
                return (*v, s.clone());
            }
        }
        let mut all: Vec<(Net, Gateways)> =
            self.routes.iter().map(|(p, g)| (*p, g.clone())).collect();
        all.sort_unstable_by_key(|(p, _)| p.sort_key());
        let s = Arc::new(all);
        self.snapshot = Some((self.version, s.clone()));
        (self.version, s)
    }
}

fn entry(p: impl Into<Net>, via: Option<&Gateways>) -> RouteEntry {
    let p = p.into();
    RouteEntry {
        prefix: p.addr(),
        len: p.len(),
        via: via.map(|g| g.to_vec()).unwrap_or_default(),
    }
}

fn entry_len(p: Net, via: Option<&Gateways>) -> usize {
    let n = via.map_or(0, |g| g.len());
    match p {
        Net::V4(_) => dist::ROUTE_ENTRY_FIXED_LEN + 4 * n,
        Net::V6(_) => dist::ROUTE_ENTRY6_FIXED_LEN + 16 * n,
    }
}

/// A snapshot on its way to one back-end.
struct Snap {
    version: u32,
    routes: Snapshot,
    /// The first route of each part; a last element of `routes.len()`.
    starts: Vec<usize>,
    acked: u32,
    sent: u32,
}

impl Snap {
    fn new(version: u32, routes: Snapshot) -> Snap {
        let mut starts = vec![0];
        let mut bytes = 0;
        for (i, (p, g)) in routes.iter().enumerate() {
            let n = entry_len(*p, Some(g));
            if bytes + n > BODY_BUDGET {
                starts.push(i);
                bytes = 0;
            }
            bytes += n;
        }
        starts.push(routes.len());
        Snap {
            version,
            routes,
            starts,
            acked: 0,
            sent: 0,
        }
    }

    fn parts(&self) -> u32 {
        (self.starts.len() - 1) as u32
    }
}

/// What the controller knows of one back-end's table.
pub struct Peer {
    /// The last acknowledgement (None before the first).
    pub ack: Option<FibAck>,
    pub last_ack: Option<Instant>,
    /// Highest version sent as a delta (deltas mode).
    sent: u32,
    /// Versions that end the unacknowledged deltas, oldest first.
    inflight: VecDeque<u32>,
    /// The current timeout (see the module's documentation).
    pub rto: Duration,
    snap: Option<Snap>,
    last_progress: Instant,
    last_repair: Option<Instant>,
    pub messages_sent: u64,
    pub resends: u64,
    pub snapshots: u64,
    pub repairs: u64,
    /// When the back-end first acknowledged the current version (None while behind).
    pub synced_at: Option<Instant>,
    /// The incarnation of the process that holds the table (from its hellos and
    /// acknowledgements; 0 before the first that carries one).
    pub incarnation: u64,
    /// New incarnations seen (the element restarted): each got the whole table.
    pub restarts: u64,
    /// When it last acknowledged the current version with the controller's digest.
    pub acked_current_at: Option<Instant>,
    /// When it reappeared after its hellos stopped: until it acknowledges again it is
    /// not consistent, whatever it said before.
    pub reappeared: Option<Instant>,
    /// The last repair brought it back to the controller's table (the next mismatch is
    /// repaired at once; one that persists waits [`REPAIR_HOLDOFF`]).
    repaired_ok: bool,
    /// Acknowledgements from another incarnation than the one its hellos name.
    pub acks_other_incarnation: u64,
}

impl Peer {
    fn new(now: Instant) -> Peer {
        Peer {
            ack: None,
            last_ack: None,
            sent: 0,
            inflight: VecDeque::new(),
            rto: RTO,
            snap: None,
            last_progress: now,
            last_repair: None,
            messages_sent: 0,
            resends: 0,
            snapshots: 0,
            repairs: 0,
            synced_at: None,
            incarnation: 0,
            restarts: 0,
            acked_current_at: None,
            reappeared: None,
            repaired_ok: true,
            acks_other_incarnation: 0,
        }
    }

    /// True when the process that holds the table now acknowledged the controller's
    /// current version, route count and digest, after it last reappeared.
    pub fn consistent(&self, fib: &Fib) -> bool {
        self.at(fib.epoch(), fib.version())
            && self
                .ack
                .is_some_and(|a| a.digest == fib.digest() && a.routes as usize == fib.len())
            && match (self.reappeared, self.last_ack) {
                (Some(r), Some(a)) => a > r,
                (Some(_), None) => false,
                (None, _) => true,
            }
    }

    /// True when the back-end acknowledged version `v` of `epoch` with no snapshot under way.
    pub fn at(&self, epoch: u32, v: u32) -> bool {
        self.snap.is_none()
            && self
                .ack
                .is_some_and(|a| a.epoch == epoch && a.version == v && a.parts == 0)
    }

    /// "deltas", "snapshot" or "waiting" (no acknowledgement yet).
    pub fn mode(&self) -> &'static str {
        match (&self.ack, &self.snap) {
            (_, Some(_)) => "snapshot",
            (None, None) => "waiting",
            _ => "deltas",
        }
    }
}

/// The controller's side of route distribution: one [`Peer`] per back-end.
#[derive(Default)]
pub struct Distributor {
    pub peers: BTreeMap<MacAddr, Peer>,
}

impl Distributor {
    /// Starts tracking a back-end (a no-op if it is known). It gets a snapshot once it
    /// acknowledges (every back-end acknowledges periodically, even with nothing to say).
    pub fn add(&mut self, mac: MacAddr, now: Instant) {
        self.peers.entry(mac).or_insert_with(|| Peer::new(now));
    }

    pub fn remove(&mut self, mac: MacAddr) {
        self.peers.remove(&mac);
    }

    /// Takes an acknowledgement from `mac`.
    pub fn on_ack(&mut self, mac: MacAddr, a: FibAck, fib: &mut Fib, now: Instant) {
        let Some(p) = self.peers.get_mut(&mac) else {
            return;
        };
        if a.incarnation != 0 {
            if p.incarnation == 0 {
                p.incarnation = a.incarnation;
            } else if a.incarnation != p.incarnation {
                // Not the process its hellos name (a late one from before a restart, or
                // one from a new process whose first hello is still on its way, which
                // resets this peer): it says nothing of the table held now.
                p.acks_other_incarnation += 1;
                return;
            }
        }
        let progressed = p
            .ack
            .is_none_or(|o| (o.epoch, o.version, o.parts) != (a.epoch, a.version, a.parts));
        p.ack = Some(a);
        p.last_ack = Some(now);
        if progressed {
            p.last_progress = now;
            p.rto = p.rto.mul_f64(0.9).max(RTO);
        }
        match &mut p.snap {
            Some(s) => {
                if a.epoch == fib.epoch() && a.version == s.version && a.parts == 0 {
                    // Snapshot applied: deltas from its version on.
                    p.snap = None;
                    p.sent = a.version;
                    p.inflight.clear();
                } else if a.parts > 0
                    && (a.snap_epoch, a.snap_version) == (fib.epoch(), s.version)
                    && a.parts <= s.parts()
                {
                    // Progress through this snapshot (possibly less than believed, if
                    // the back-end restarted it): continue from what it holds.
                    s.acked = a.parts;
                    s.sent = s.sent.max(s.acked);
                }
            }
            None => {
                let in_epoch = a.epoch == fib.epoch();
                if !in_epoch || fib.changes_after(a.version).is_none() {
                    Self::start_snapshot(p, fib, now);
                } else if a.parts == 0 {
                    while p.inflight.front().is_some_and(|&v| v <= a.version) {
                        p.inflight.pop_front();
                    }
                    if a.version > p.sent {
                        p.sent = a.version;
                    }
                    if fib
                        .state_at(a.version)
                        .is_some_and(|(d, n)| d != a.digest || n != a.routes)
                    {
                        Self::repair(&mac, p, fib, now, a.routes, "acknowledgement");
                    }
                }
            }
        }
        if p.consistent(fib) {
            p.synced_at.get_or_insert(now);
            p.acked_current_at = Some(now);
            p.repaired_ok = true;
        } else {
            p.synced_at = None;
        }
    }

    /// Sends the whole table to a peer whose table differs from the controller's at the
    /// version it holds: at once, unless the last repair did not bring it back, in which
    /// case [`REPAIR_HOLDOFF`] after that one.
    fn repair(mac: &MacAddr, p: &mut Peer, fib: &mut Fib, now: Instant, routes: u32, seen: &str) {
        let due = p.repaired_ok
            || p.last_repair
                .is_none_or(|t| now.duration_since(t) >= REPAIR_HOLDOFF);
        if !due {
            return;
        }
        tracing::warn!(backend = %mac, routes, want = fib.len(), seen, "element's table differs from the controller's at its version: sending the whole table");
        p.last_repair = Some(now);
        p.repaired_ok = false;
        p.repairs += 1;
        p.synced_at = None;
        Self::start_snapshot(p, fib, now);
    }

    /// Takes the state block of a hello from `mac`. A new incarnation (the element
    /// restarted: its table is empty, whatever it acknowledged before) starts the peer
    /// afresh, so it gets the whole table; true then. Otherwise a table that differs from
    /// the controller's at the version the hello names is repaired (a back-end that lost
    /// its table behind the controller's back is found within one hello interval).
    pub fn hello(
        &mut self,
        mac: MacAddr,
        st: &dist::HelloState,
        fib: &mut Fib,
        now: Instant,
    ) -> bool {
        let Some(p) = self.peers.get_mut(&mac) else {
            return false;
        };
        if p.incarnation == 0 {
            p.incarnation = st.incarnation;
        }
        if st.incarnation != p.incarnation {
            tracing::warn!(element = %mac, was = %format!("{:016x}", p.incarnation), now = %format!("{:016x}", st.incarnation), "element restarted (a new incarnation): it gets the whole table, and is not consistent until it acknowledges it");
            let mut fresh = Peer::new(now);
            fresh.incarnation = st.incarnation;
            fresh.restarts = p.restarts + 1;
            fresh.messages_sent = p.messages_sent;
            fresh.resends = p.resends;
            fresh.snapshots = p.snapshots;
            fresh.repairs = p.repairs;
            fresh.acks_other_incarnation = p.acks_other_incarnation;
            *p = fresh;
            return true;
        }
        if p.snap.is_some() || p.ack.is_none() {
            return false;
        }
        let differs = if st.epoch == fib.epoch() {
            fib.state_at(st.version)
                .is_some_and(|(d, n)| d != st.digest || n != st.routes)
        } else {
            // It acknowledged this epoch and now holds another (or none).
            p.ack.is_some_and(|a| a.epoch == fib.epoch())
        };
        if differs {
            p.synced_at = None;
            Self::repair(&mac, p, fib, now, st.routes, "hello");
        }
        false
    }

    /// Marks a peer that reappeared (hellos again after it was taken for down).
    pub fn reappeared(&mut self, mac: MacAddr, now: Instant) {
        if let Some(p) = self.peers.get_mut(&mac) {
            p.reappeared = Some(now);
            p.synced_at = None;
        }
    }

    fn start_snapshot(p: &mut Peer, fib: &mut Fib, now: Instant) {
        let (v, routes) = fib.snapshot();
        p.snap = Some(Snap::new(v, routes));
        p.inflight.clear();
        p.snapshots += 1;
        p.last_progress = now;
    }

    /// Builds the messages due now, to `out` as (back-end, message).
    pub fn tick(&mut self, fib: &mut Fib, now: Instant, out: &mut Vec<(MacAddr, RouteBatch)>) {
        for (mac, p) in self.peers.iter_mut() {
            if p.ack.is_none() && p.snap.is_none() {
                // A new back-end: it gets the whole table, and learns our MAC from it.
                Self::start_snapshot(p, fib, now);
            }
            if p.snap
                .as_ref()
                .is_some_and(|s| s.sent == 0 && s.version != fib.version())
            {
                // Taken earlier and not begun (an acknowledgement of another epoch, while
                // a controller that had just started held distribution until its routing
                // suite resent the table): the table has moved on since, and a back-end
                // must get it as it is now. Sent as it was, an empty one, it emptied the
                // back-ends' tables until the deltas after it came (virtual_cp_lab's restarts'
                // controller restarts: 8-14 packets per stream).
                Self::start_snapshot(p, fib, now);
            }
            let stalled = now.duration_since(p.last_progress) >= p.rto;
            match &mut p.snap {
                Some(s) => {
                    if stalled && s.sent > s.acked {
                        s.sent = s.acked;
                        p.resends += 1;
                        p.rto = (p.rto * 2).min(MAX_RTO);
                        p.last_progress = now;
                    } else if stalled && s.acked == s.parts() {
                        // Every part acknowledged but the last's effect not seen: resend it.
                        s.sent = s.parts() - 1;
                        p.resends += 1;
                        p.rto = (p.rto * 2).min(MAX_RTO);
                        p.last_progress = now;
                    }
                    while s.sent < s.parts() && s.sent - s.acked < WINDOW as u32 {
                        let i = s.sent as usize;
                        let part = &s.routes[s.starts[i]..s.starts[i + 1]];
                        out.push((
                            *mac,
                            RouteBatch {
                                epoch: fib.epoch(),
                                version: s.version,
                                base: s.sent,
                                snapshot: true,
                                last: s.sent + 1 == s.parts(),
                                routes: part.iter().map(|(p, g)| entry(*p, Some(g))).collect(),
                            },
                        ));
                        s.sent += 1;
                        p.messages_sent += 1;
                    }
                }
                None => {
                    let acked = p.ack.map_or(0, |a| a.version);
                    if stalled && !p.inflight.is_empty() {
                        p.sent = acked;
                        p.inflight.clear();
                        p.resends += 1;
                        p.rto = (p.rto * 2).min(MAX_RTO);
                        p.last_progress = now;
                    }
                    if p.inflight.is_empty() && p.sent < acked {
                        p.sent = acked;
                    }
                    while p.sent < fib.version() && p.inflight.len() < WINDOW {
                        let Some(changes) = fib.changes_after(p.sent) else {
                            break;
                        };
                        let mut routes = Vec::new();
                        let mut bytes = 0;
                        let mut end = p.sent;
                        for (v, (pfx, via)) in changes {
                            let n = entry_len(*pfx, via.as_ref());
                            if bytes + n > BODY_BUDGET {
                                break;
                            }
                            bytes += n;
                            routes.push(entry(*pfx, via.as_ref()));
                            end = v;
                        }
                        out.push((
                            *mac,
                            RouteBatch {
                                epoch: fib.epoch(),
                                version: end,
                                base: p.sent,
                                snapshot: false,
                                last: false,
                                routes,
                            },
                        ));
                        p.inflight.push_back(end);
                        p.sent = end;
                        p.messages_sent += 1;
                    }
                }
            }
        }
    }
}

/// What a back-end's writer has done, for `show fib` on the back-end.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct WriterStats {
    pub deltas_applied: u64,
    pub snapshots_applied: u64,
    /// Messages that were not the next in order (duplicates, gaps): acknowledged, not applied.
    pub out_of_order: u64,
    /// Messages of another epoch than the one in force, outside a snapshot.
    pub other_epoch: u64,
    pub routes_changed: u64,
    /// Route table publications (messages taken together share one).
    pub publications: u64,
    /// Routes whose gateway is on none of the back-end's networks (held, not installed).
    pub unresolved: u64,
    /// Distributed routes for a connected network of the back-end (held, not installed).
    pub connected_skipped: u64,
}

/// Whether an IPv6 gateway is on one of a back-end's networks, or link-local on one of
/// its VLANs.
fn reaches6(nets6: &[Prefix6], vlans6: &[u16], g: Ipv6Addr) -> bool {
    match wire::ipv6::link_local_scope(g) {
        Some((_, vlan)) => vlans6.contains(&vlan),
        None => nets6.iter().any(|n| n.contains(g)),
    }
}

/// The back-end's side: applies the controller's messages to its route table.
pub struct Writer {
    pub epoch: u32,
    pub version: u32,
    /// The distributed routes held (what the digest covers).
    held: HashMap<Net, Gateways>,
    digest: u64,
    /// Routes held but not installed (gateway on none of our networks).
    unresolved: std::collections::HashSet<Net>,
    /// A snapshot being collected: epoch, version, routes so far, parts so far.
    staging: Option<(u32, u32, Vec<RouteEntry>, u32)>,
    pub controller: Option<MacAddr>,
    pub stats: WriterStats,
    /// IPv4 changes accepted, not yet published.
    pending: Vec<(Prefix, Option<Vec<Ipv4Addr>>)>,
    /// IPv6 changes accepted, for the worker that holds the IPv6 table.
    pending6: Vec<(Prefix6, Option<Vec<Ipv6Addr>>)>,
    /// The back-end's IPv6 networks: IPv6 routes through gateways on none of them are
    /// held, not installed (none: IPv6 is off).
    nets6: Vec<Prefix6>,
    /// The VLANs of its interfaces with IPv6: a link-local gateway (which names its VLAN,
    /// `wire::ipv6::link_local_scope`) on one of them is installed.
    vlans6: Vec<u16>,
    /// The incarnation of the process that holds this table (its acknowledgements and
    /// hellos carry it).
    pub incarnation: u64,
}

impl Default for Writer {
    fn default() -> Self {
        Writer::new()
    }
}

impl Writer {
    pub fn new() -> Writer {
        Writer {
            epoch: 0,
            version: 0,
            held: HashMap::new(),
            digest: 0,
            unresolved: Default::default(),
            staging: None,
            controller: None,
            stats: WriterStats::default(),
            pending: Vec::new(),
            pending6: Vec::new(),
            nets6: Vec::new(),
            vlans6: Vec::new(),
            incarnation: 0,
        }
    }

    /// What the hellos say of this table: the incarnation, whether a controller's whole
    /// table was applied (any epoch), and the version, route count and digest held.
    pub fn hello_state(&self) -> dist::HelloState {
        dist::HelloState {
            incarnation: self.incarnation,
            table: self.epoch != 0,
            epoch: self.epoch,
            version: self.version,
            routes: self.held.len() as u32,
            digest: self.digest,
        }
    }

    /// A back-end's writer, whose IPv6 networks are `nets6`, on the VLANs `vlans6`.
    pub fn with_nets6(nets6: Vec<Prefix6>, vlans6: Vec<u16>) -> Writer {
        Writer {
            nets6,
            vlans6,
            ..Writer::new()
        }
    }

    /// The IPv6 changes taken since the last call, in order, for the IPv6 table (one
    /// publication).
    pub fn take_routes6(&mut self) -> Vec<(Prefix6, Option<Vec<Ipv6Addr>>)> {
        std::mem::take(&mut self.pending6)
    }

    /// Routes held of each family: (IPv4, IPv6).
    pub fn counts(&self) -> (usize, usize) {
        let six = self.held.keys().filter(|p| matches!(p, Net::V6(_))).count();
        (self.held.len() - six, six)
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// What to acknowledge now.
    pub fn ack(&self) -> FibAck {
        FibAck {
            epoch: self.epoch,
            version: self.version,
            snap_epoch: self.staging.as_ref().map_or(0, |s| s.0),
            snap_version: self.staging.as_ref().map_or(0, |s| s.1),
            parts: self.staging.as_ref().map_or(0, |s| s.3),
            routes: self.held.len() as u32,
            unresolved: self.unresolved.len() as u32,
            digest: self.digest,
            incarnation: self.incarnation,
        }
    }

    /// Takes one message from `from` and applies it; true if `table` changed.
    pub fn handle(&mut self, from: MacAddr, b: &RouteBatch, table: &mut RouteTable) -> bool {
        self.accept(from, b, table);
        self.flush(table)
    }

    /// Takes one message from `from`: what it holds and its version change now; the route
    /// table changes at the next [`Writer::flush`]. Several messages accepted before one
    /// flush reach the table in one publication, each still whole.
    pub fn accept(&mut self, from: MacAddr, b: &RouteBatch, table: &RouteTable) -> bool {
        self.take(from, b, Some(table))
    }

    /// Takes one message without a route table: a standby controller's mirror of the
    /// active one's table (what it holds, its version and digest, nothing installed).
    /// True if it changed what is held.
    pub fn mirror(&mut self, from: MacAddr, b: &RouteBatch) -> bool {
        self.take(from, b, None)
    }

    /// The routes held.
    pub fn routes(&self) -> impl Iterator<Item = (&Net, &Gateways)> {
        self.held.iter()
    }

    fn take(&mut self, from: MacAddr, b: &RouteBatch, table: Option<&RouteTable>) -> bool {
        self.controller = Some(from);
        if b.snapshot {
            let fresh = b.base == 0;
            let next = self
                .staging
                .as_ref()
                .is_some_and(|s| (s.0, s.1, s.3) == (b.epoch, b.version, b.base));
            let same = self
                .staging
                .as_ref()
                .is_some_and(|s| (s.0, s.1) == (b.epoch, b.version) && s.3 > 0);
            if fresh && !same {
                self.staging = Some((b.epoch, b.version, Vec::new(), 0));
            } else if !next {
                self.stats.out_of_order += 1;
                return false;
            }
            let Some(s) = self.staging.as_mut() else {
                return false;
            };
            s.2.extend(b.routes.iter().cloned());
            s.3 += 1;
            if !b.last {
                return false;
            }
            let Some((epoch, version, routes, _)) = self.staging.take() else {
                return false;
            };
            let mut want: HashMap<Net, Gateways> = HashMap::with_capacity(routes.len());
            for r in routes {
                if !r.via.is_empty() {
                    want.insert(Net::new(r.prefix, r.len), gateways(r.via));
                }
            }
            let mut changes: Vec<(Net, Option<Gateways>)> = Vec::new();
            for (p, g) in &want {
                if self.held.get(p) != Some(g) {
                    changes.push((*p, Some(g.clone())));
                }
            }
            for p in self.held.keys() {
                if !want.contains_key(p) {
                    changes.push((*p, None));
                }
            }
            let changed = self.install(changes, table);
            self.epoch = epoch;
            self.version = version;
            self.stats.snapshots_applied += 1;
            return changed;
        }
        if b.epoch != self.epoch {
            self.stats.other_epoch += 1;
            return false;
        }
        if b.base != self.version || b.version <= b.base {
            self.stats.out_of_order += 1;
            return false;
        }
        let changes = b
            .routes
            .iter()
            .map(|r| {
                let p = Net::new(r.prefix, r.len);
                (
                    p,
                    (!r.via.is_empty()).then(|| gateways(r.via.iter().copied())),
                )
            })
            .collect();
        let changed = self.install(changes, table);
        self.version = b.version;
        self.staging = None;
        self.stats.deltas_applied += 1;
        changed
    }

    /// Applies changes (in order; a later change of a prefix wins) to what is held and,
    /// in one publication, to the route table.
    fn install(
        &mut self,
        changes: Vec<(Net, Option<Gateways>)>,
        table: Option<&RouteTable>,
    ) -> bool {
        let mut last: HashMap<Net, Option<Gateways>> = HashMap::with_capacity(changes.len());
        for (p, g) in changes {
            last.insert(p, g);
        }
        let mut to_table: Vec<(Net, Option<Gateways>)> = Vec::with_capacity(last.len());
        let mut any_mirror = false;
        for (p, g) in last {
            if let Some(o) = self.held.remove(&p) {
                self.digest ^= digest_of(p, &o);
            }
            let Some(table) = table else {
                // A mirror: held only.
                if let Some(g) = g {
                    self.digest ^= digest_of(p, &g);
                    self.held.insert(p, g);
                }
                any_mirror = true;
                continue;
            };
            let was_unresolved = self.unresolved.remove(&p);
            let connected = match p {
                Net::V4(q) => table.is_connected(q),
                Net::V6(q) => self.nets6.contains(&q),
            };
            // Installed if every gateway is on one of our networks.
            let (nets6, vlans6) = (&self.nets6, &self.vlans6);
            let install = |g: &Gateways| match p {
                Net::V4(_) => {
                    v4s(g).is_some_and(|v| v.iter().all(|v| table.port_for_gateway(*v).is_some()))
                }
                Net::V6(_) => v6s(g).is_some_and(|v| v.iter().all(|v| reaches6(nets6, vlans6, *v))),
            };
            match g {
                Some(g) => {
                    self.digest ^= digest_of(p, &g);
                    if connected {
                        self.stats.connected_skipped += 1;
                    } else if install(&g) {
                        to_table.push((p, Some(g.clone())));
                    } else {
                        self.stats.unresolved += 1;
                        self.unresolved.insert(p);
                        if !was_unresolved {
                            to_table.push((p, None));
                        }
                    }
                    self.held.insert(p, g);
                }
                None if !connected => to_table.push((p, None)),
                None => {}
            }
        }
        let any = !to_table.is_empty() || any_mirror;
        for (p, v) in to_table {
            match p {
                Net::V4(q) => self
                    .pending
                    .push((q, v.map(|v| v4s(&v).unwrap_or_default()))),
                Net::V6(q) => self
                    .pending6
                    .push((q, v.map(|v| v6s(&v).unwrap_or_default()))),
            }
        }
        any
    }

    /// Publishes what [`Writer::accept`] took, in one publication; true if the table changed.
    pub fn flush(&mut self, table: &mut RouteTable) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        let changes = std::mem::take(&mut self.pending);
        self.stats.routes_changed += changes.len() as u64;
        self.stats.publications += 1;
        match table.apply(changes) {
            Ok(_) => true,
            Err(e) => {
                // Cannot happen: every gateway was resolved above.
                tracing::error!(error = %e, "distributed routes not applied");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests;
