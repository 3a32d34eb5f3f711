//! The Virtual-CP: `tessera controller`, the control plane of a multistage router.
//!
//! It owns one port on the interconnection and does four things there:
//! - **discovers** the elements from their DIST hellos (kind, ports, link speeds) and
//!   forgets one whose hellos stop for three of its intervals;
//! - **configures the LBs**: each live back-end with a weight proportional to its
//!   interconnection link's speed (its capacity), and itself as the Virtual-CP;
//! - **holds the authoritative FIB** ([`Fib`]): routes from the routing suite over FPM
//!   ([`FpmState`], fed by zebra's `dplane_fpm_nl`), from its config file, and from the
//!   control socket (`route-add`, `route-del`);
//! - **distributes** it to every back-end ([`Distributor`], docs/dist.md), and shows each
//!   back-end's version and digest (`tessera show fib`); and the router's filters to the
//!   LBs and back-ends ([`FilterDist`], `tessera show acl`).
//!
//! The FPM reader runs on its own thread and only writes the table, so it never waits for
//! a back-end; the port's thread sends what the back-ends are missing.
//!
//! ```toml
//! # routes_file = "table.mrt.gz"  # optional: a table loaded at start (see ControllerFile)
//! # routes_file_via = "10.2.0.2"   # every route of it through this gateway (or list)
//!
//! [controller]
//! interface = "vcp-int"        # the interconnection port
//! hello_interval_ms = 100      # this controller's hellos; element timeouts use theirs
//! priority = 100               # election: the highest of those starting together is
//!                              # active, the others stand by (docs/dist.md)
//! configure_lbs = true         # send balance and virtual-cp messages to the LBs
//! terminate = true             # a TAP per external network (from the LBs' hellos), with
//!                              # its VLAN's address and LB MAC, for the routing suite
//!
//! [fpm]                        # optional: take routes from a routing suite
//! listen = "127.0.0.1:2620"    # where zebra's dplane_fpm_nl connects
//! settle_ms = 15000            # after a (re)connection: quiet time that ends the resend
//!
//! [takeover]                   # optional: what a standby does when it takes over
//! ospf_router_id = "10.255.0.1"  # send a Grace-LSA (RFC 3623) as this OSPF router on
//!                              # every external network: neighbours keep their routes
//! ospf_area = "0.0.0.0"        # the area of those networks
//! ospf_grace_period_s = 120    # how long they help
//! on_active = ["/usr/local/bin/start-protocols"]  # run on becoming active (with
//!                              # TESSERA_TAKEOVER=1 on a takeover): starts the
//!                              # routing protocols of a controller that stood by
//! on_standby = ["/usr/local/bin/stop-protocols"]  # run on standing down from active
//!
//! [[route]]                    # optional static routes, like a forwarder's
//! prefix = "198.51.100.0/24"
//! via = "10.2.0.2"             # an IPv6 route's link-local gateway names its external
//!                              # network: via = "fe80::1%vlan20"
//!
//! [io]                         # as for every element
//! backend = "auto"
//!
//! [[acl]]                      # optional: the router's filters (docs/filters.md),
//! name = "edge-in"             # sent to the LBs (lists) and back-ends (urpf)
//! [[acl.rule]]
//! action = "deny"
//! protocol = "tcp"
//! dst_port = "22"
//!
//! [[interface]]                # one of the router's external interfaces, by the VLAN
//! name = "vlan10"              # of its network
//! acl_in = "edge-in"
//! urpf = "strict"
//! ```

use crate::config::{from_toml, line_of, read, ConfigError, IoConfig, RawIo};
use crate::distrib::{gateways, Distributor, Fib, Gateways, Net};
use dataplane::buf::{Pkt, Pool};
use dataplane::port::Port;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use toml::Spanned;
use wire::dist::{self, ElementKind};
use wire::fpm::{self, RouteVia};
use wire::MacAddr;

mod file;
pub use file::{ControllerFile, OspfGrace};

mod fpm_reader;
use fpm_reader::unix_secs;
pub use fpm_reader::{serve_fpm, take_over, FpmState, FpmStats, Shared, FPM_INITIAL_QUIET};

mod filters;
mod flows;
mod run;
mod show;
pub use filters::{FilterDist, FILTERS_RESEND};
pub use run::{run, Report};

/// Default `[fpm] settle_ms`. After zebra restarts, it reconnects to FPM and sends its
/// connected routes at once, but staticd's (and bgpd's) routes come back only when those
/// daemons have reconnected to zebra: 5.5 s later in the lab (FRR 8.4). A shorter quiet
/// time swept them in between, and the back-ends lost them for seconds.
pub const DEFAULT_SETTLE_MS: u64 = 15_000;

/// How long the distribution state of an element that fell silent is kept.
pub const DIST_GRACE: Duration = Duration::from_secs(10);

/// Default `[controller] priority`.
pub const DEFAULT_PRIORITY: u8 = 100;

/// Changes the controller keeps in its log (older back-ends get a snapshot).
pub const LOG_CAP: usize = 2_000_000;

/// An element the controller has heard from.
#[derive(Debug, Clone)]
pub struct ElementInfo {
    pub kind: ElementKind,
    pub ports: Vec<dist::HelloPort>,
    /// The IPv6 addresses its last hello listed, by port.
    pub addrs6: Vec<dist::HelloAddr6>,
    pub interval: Duration,
    pub last_seen: Instant,
    pub since: Instant,
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub dropped: u64,
    /// A controller's election priority and whether it says it is active.
    pub priority: u8,
    pub active: bool,
    /// The state block of its last hello: its incarnation and the table it holds.
    pub state: Option<dist::HelloState>,
}

impl ElementInfo {
    /// False for a back-end whose hellos say it holds no table of a controller yet (it
    /// started or restarted): the LBs give it no flows until it does.
    fn holds_table(&self) -> bool {
        self.state.is_none_or(|s| s.table)
    }

    /// The capacity a back-end advertises: the speed of its internal port (Mbit/s; 0 unknown).
    fn capacity_mbps(&self) -> u32 {
        self.ports
            .iter()
            .find(|p| p.role == dist::PortRole::Internal)
            .map_or(0, |p| p.speed_mbps)
    }
}

/// Weight of a back-end in the LBs' tables: its capacity in units of 100 Mbit/s (1 when
/// unknown), so back-ends of unequal capacity get proportional shares.
pub fn weight_for(capacity_mbps: u32) -> u16 {
    (capacity_mbps / 100).clamp(1, u16::MAX as u32) as u16
}

/// The controller's counters (one writer: its thread).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ControllerStats {
    pub dist_received: u64,
    /// Counter reports received from elements (and from unknown MACs: ignored).
    pub reports_received: u64,
    pub reports_unknown: u64,
    pub dist_malformed: u64,
    /// DIST frames dropped by authentication ([dist] key_file): without a valid seal under
    /// this key id, with a wrong tag, replayed, or older than max_age_s.
    pub dist_unauthenticated: u64,
    pub dist_forged: u64,
    pub dist_replayed: u64,
    pub dist_stale: u64,
    pub hellos_received: u64,
    pub acks_received: u64,
    /// Acknowledgements from a MAC that is no known back-end.
    pub acks_unknown: u64,
    pub routes_messages_sent: u64,
    pub balance_messages_sent: u64,
    /// Chunks of the router's filters sent to the LBs and back-ends.
    pub filter_messages_sent: u64,
    /// FLOW_CONFIG messages sent (the active controller, with `[flow_export]`).
    pub flow_configs_sent: u64,
    /// Flow records the back-ends sent, taken for export.
    pub flow_records_received: u64,
    /// Flow records not taken: from an unknown element, or while this controller stands
    /// by or exports nothing.
    pub flow_records_ignored: u64,
    pub hellos_sent: u64,
    /// Frames from the LBs (tagged with an external network's VLAN) written to its TAP.
    pub tap_in: u64,
    /// Frames the routing suite sent on a TAP, sent tagged to the LBs.
    pub tap_out: u64,
    /// TAP writes that failed, and TAPs that could not be created.
    pub tap_errors: u64,
    /// Frames for none of the above (untagged non-DIST, another station's unicast, or a
    /// VLAN with no TAP): ignored.
    pub other_frames: u64,
    pub tx_errors: u64,
    pub elements_up: u64,
    pub elements_down: u64,
    /// Routes messages received by a standby from the active controller (its mirror).
    pub mirror_messages: u64,
    /// Routes messages not from the active controller, or received while not standby.
    pub routes_ignored: u64,
    /// Frames the routing suite sent on a TAP while this controller stood by (dropped:
    /// only the active controller speaks for the router).
    pub tap_out_standby: u64,
    /// Times this controller became active, and stood down for a better active one.
    pub takeovers: u64,
    pub stepdowns: u64,
    /// Grace-LSAs sent on taking over ([takeover] ospf_router_id), one per network.
    pub grace_lsas_sent: u64,
    /// `[takeover] on_active` commands started, and those that could not start.
    pub on_active_runs: u64,
    pub on_active_failures: u64,
    /// Back-ends and standby controllers seen in a new incarnation (restarted): each got
    /// the whole table.
    pub restarts_seen: u64,
    /// LBs seen in a new incarnation (restarted): each got its table at once.
    pub lb_restarts_seen: u64,
    /// Balancing tables sent again because an LB's hello showed another table than the
    /// one sent.
    pub lb_tables_resent: u64,
}

/// A controller's part in the election (docs/dist.md, "Controller election").
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Just started: listens for three hello intervals before it may become active.
    Listening,
    /// Mirrors the active controller's table, ready to take over.
    Standby,
    /// Speaks for the router: configures the LBs, terminates the routing protocols,
    /// distributes the table.
    Active,
}

/// Election rank: higher priority wins, then the lower MAC.
fn outranks(a: (u8, MacAddr), b: (u8, MacAddr)) -> bool {
    a.0 > b.0 || (a.0 == b.0 && a.1 < b.1)
}

/// The TAP that stands for one external network of the router.
pub struct TapPort {
    pub tap: Arc<io::tap::Tap>,
    pub mac: MacAddr,
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
}

/// The controller's thread: owns the port, the elements and the distributor.
pub struct Controller {
    /// When the controller started (`synced_after_ms` counts from here).
    pub started: Instant,
    /// Protocol termination: a TAP per external network (by VLAN id), made from the LBs'
    /// hellos when `terminate` is set.
    pub terminate: bool,
    pub taps: BTreeMap<u16, TapPort>,
    tap_failed: std::collections::BTreeSet<u16>,
    tap_tx: std::sync::mpsc::Sender<(u16, Vec<u8>)>,
    tap_rx: std::sync::mpsc::Receiver<(u16, Vec<u8>)>,
    pub mac: MacAddr,
    pub hello_interval: Duration,
    pub configure_lbs: bool,
    pub elements: BTreeMap<MacAddr, ElementInfo>,
    /// The counters each element last reported (DIST counters messages), by MAC.
    pub reports: BTreeMap<MacAddr, Report>,
    pub dist: Distributor,
    pub stats: ControllerStats,
    /// Distribution waits, after a start, until this flag is set (zebra's first resend is
    /// in) or the instant passes: a controller that starts, or restarts, with a table
    /// still empty must not hand the back-ends a snapshot that would empty theirs. None:
    /// not holding.
    pub hold: Option<(Arc<AtomicBool>, Instant)>,
    /// DIST authentication (off without a key).
    pub guard: wire::dist::auth::Guard,
    pub signer: wire::dist::auth::Signer,
    /// Election ([controller] priority; docs/dist.md, "Controller election").
    pub priority: u8,
    pub role: Role,
    /// When the role last changed, and why.
    pub role_since: Instant,
    pub role_reason: &'static str,
    /// A standby's copy of the active controller's table (from its distribution).
    pub mirror: crate::distrib::Writer,
    /// Set when this controller has just become active from standby: the run loop
    /// builds the new epoch's table from the mirror ([`take_over`]), then clears it.
    pub takeover_pending: bool,
    /// Frames made while receiving (a standby's acknowledgements), sent at the next poll.
    out_pending: Vec<Vec<u8>>,
    /// Elements gone silent, since when: their distribution state is kept [`DIST_GRACE`].
    silent: HashMap<MacAddr, Instant>,
    /// Set by the run loop when it left frames in the receive ring: the election waits,
    /// so that a controller that fell behind does not take a queued hello for silence.
    pub backlog: bool,
    /// `[fpm] settle_ms` when routes come from a routing suite: how long a controller that
    /// takes over with nothing mirrored holds distribution.
    pub settle: Option<Duration>,
    /// `[takeover]`: the Grace-LSA to send on every external network on taking over, and
    /// when to send it again (once, in case the first was lost).
    pub ospf_grace: Option<OspfGrace>,
    grace_again: Option<Instant>,
    /// `[takeover] on_active` and `on_standby`.
    pub on_active: Vec<String>,
    pub on_standby: Vec<String>,
    seq: u32,
    next_hello: Instant,
    next_balance: Instant,
    balance_sent: Vec<(MacAddr, u16)>,
    /// This process's incarnation (its hellos and a standby's acknowledgements carry it).
    pub incarnation: u64,
    /// The digest of the balancing table last sent to each LB, and when.
    balance_digests: BTreeMap<MacAddr, (u64, Instant)>,
    /// The last incarnation heard from each LB, kept while it is silent too.
    lb_incarnations: BTreeMap<MacAddr, u64>,
    /// Back-ends being drained (`tessera drain`): out of the LBs' tables.
    pub drains: crate::drain::Drains,
    /// The router's filters and every element's state of them.
    pub filters: FilterDist,
    /// The router's flow export, where `[flow_export]` sets it up.
    pub flows: Option<flows::RouterFlows>,
}

impl Controller {
    pub fn new(
        mac: MacAddr,
        hello_interval: Duration,
        configure_lbs: bool,
        now: Instant,
    ) -> Controller {
        let (tap_tx, tap_rx) = std::sync::mpsc::channel();
        Controller {
            started: now,
            terminate: false,
            taps: BTreeMap::new(),
            tap_failed: Default::default(),
            tap_tx,
            tap_rx,
            mac,
            hello_interval,
            configure_lbs,
            elements: BTreeMap::new(),
            reports: BTreeMap::new(),
            dist: Distributor::default(),
            stats: ControllerStats::default(),
            hold: None,
            guard: wire::dist::auth::Guard::new(None, 0),
            signer: wire::dist::auth::Signer::new(None),
            priority: DEFAULT_PRIORITY,
            role: Role::Listening,
            role_since: now,
            role_reason: "started",
            mirror: crate::distrib::Writer::new(),
            takeover_pending: false,
            out_pending: Vec::new(),
            silent: HashMap::new(),
            backlog: false,
            settle: None,
            ospf_grace: None,
            grace_again: None,
            on_active: Vec::new(),
            on_standby: Vec::new(),
            seq: 0,
            next_hello: now,
            next_balance: now,
            balance_sent: Vec::new(),
            incarnation: 0,
            balance_digests: BTreeMap::new(),
            lb_incarnations: BTreeMap::new(),
            drains: Default::default(),
            filters: FilterDist::new(Default::default()),
            flows: None,
        }
        .with_incarnation(dist::new_incarnation())
    }

    /// Sets the incarnation this controller's hellos and acknowledgements carry.
    pub fn with_incarnation(mut self, incarnation: u64) -> Controller {
        self.incarnation = incarnation;
        self.mirror.incarnation = incarnation;
        self
    }

    /// Changes role.
    fn step(&mut self, to: Role, now: Instant, why: &'static str) {
        if self.role == to {
            return;
        }
        tracing::warn!(from = ?self.role, to = ?to, reason = why, "controller role changes");
        match to {
            Role::Active => {
                if self.role == Role::Standby {
                    self.stats.takeovers += 1;
                    if self.ospf_grace.is_some() {
                        self.send_grace();
                        self.grace_again = Some(now + Duration::from_millis(500));
                    }
                    self.takeover_pending = self.mirror.epoch != 0;
                    if !self.takeover_pending {
                        // Nothing mirrored: the table must come from the routing suite
                        // first, as after a start (the back-ends keep theirs meanwhile).
                        if let Some(settle) = self.settle {
                            self.hold = Some((Arc::new(AtomicBool::new(false)), now + settle));
                        }
                    }
                }
                // Every back-end, and every standby, gets this controller's table.
                let peers: Vec<MacAddr> = self
                    .elements
                    .iter()
                    .filter(|(_, e)| {
                        e.kind == ElementKind::Forwarder
                            || (e.kind == ElementKind::Controller && !e.active)
                    })
                    .map(|(m, _)| *m)
                    .collect();
                for m in peers {
                    self.dist.add(m, now);
                }
                self.run_hook(
                    &self.on_active.clone(),
                    self.role == Role::Standby,
                    "on_active",
                );
                // The LBs learn the new Virtual-CP at once.
                self.balance_sent.clear();
                self.next_balance = now;
                self.next_hello = now;
            }
            Role::Standby | Role::Listening => {
                if self.role == Role::Active {
                    self.stats.stepdowns += 1;
                    self.run_hook(&self.on_standby.clone(), false, "on_standby");
                }
                self.dist = Distributor::default();
                self.silent.clear();
                // The mirror stays as it was: the active controller goes on from there
                // with deltas (a new snapshot of a full table costs both sides seconds).
            }
        }
        self.role = to;
        self.role_since = now;
        self.role_reason = why;
    }

    /// Runs `[takeover] on_active` or `on_standby` (not waiting for it; its exit is
    /// logged).
    fn run_hook(&mut self, argv: &[String], takeover: bool, what: &'static str) {
        let Some((prog, args)) = argv.split_first() else {
            return;
        };
        let mut cmd = std::process::Command::new(prog);
        cmd.args(args).stdin(std::process::Stdio::null());
        if takeover {
            cmd.env("TESSERA_TAKEOVER", "1");
        }
        self.stats.on_active_runs += 1;
        match cmd.spawn() {
            Ok(mut child) => {
                let prog = prog.clone();
                let _ = std::thread::Builder::new()
                    .name("on-active".into())
                    .spawn(move || match child.wait() {
                        Ok(st) if st.success() => {
                            tracing::info!(%prog, hook = what, "command done")
                        }
                        Ok(st) => {
                            tracing::error!(%prog, hook = what, status = %st, "command failed")
                        }
                        Err(e) => tracing::error!(%prog, hook = what, error = %e, "command lost"),
                    });
            }
            Err(e) => {
                self.stats.on_active_failures += 1;
                tracing::error!(%prog, hook = what, error = %e, "command did not start");
            }
        }
    }

    /// Queues a Grace-LSA (RFC 3623, reason "switch to redundant control processor") as
    /// the router's OSPF process would send it on each external network: its neighbours
    /// keep the adjacency and their routes through the router while the routing suite of
    /// this controller takes the sessions over.
    fn send_grace(&mut self) {
        let Some(g) = self.ospf_grace else { return };
        // Above any Grace-LSA an earlier takeover left with the neighbours.
        let sequence = wire::ospf::INITIAL_SEQUENCE.wrapping_add(unix_secs() & 0x3fff_ffff);
        for (vlan, t) in &self.taps {
            let lsa = wire::ospf::Grace {
                router_id: g.router_id,
                area: g.area,
                interface_addr: t.addr,
                grace_period: g.grace_period_s,
                reason: wire::ospf::RestartReason::SwitchToRedundant,
                sequence,
            };
            // As the TAP's output goes: from our MAC, tagged, to the LBs.
            let mut f = lsa.frame(self.mac);
            wire::ethernet::push_vlan(&mut f, *vlan);
            self.out_pending.push(f);
            self.stats.grace_lsas_sent += 1;
        }
    }

    /// The election (docs/dist.md, "Controller election"): a listening controller
    /// stands by if an active one is there, and becomes active after three of its hello
    /// intervals if it outranks every other controller it hears; a standby takes over when
    /// the active one has been silent for 2.5 of its intervals and it outranks the other
    /// standbys; an active controller that hears a higher-ranked active one stands down.
    fn elect(&mut self, now: Instant) {
        let me = (self.priority, self.mac);
        let live: Vec<(MacAddr, u8, bool)> = self
            .elements
            .iter()
            .filter(|(_, e)| {
                e.kind == ElementKind::Controller
                    && now.duration_since(e.last_seen) <= e.interval * 5 / 2
            })
            .map(|(m, e)| (*m, e.priority, e.active))
            .collect();
        let active_other = live.iter().find(|c| c.2);
        let best = live.iter().all(|c| !outranks((c.1, c.0), me));
        match self.role {
            Role::Listening => {
                if active_other.is_some() {
                    self.step(Role::Standby, now, "an active controller is there");
                } else if now.duration_since(self.started) >= self.hello_interval * 3 {
                    if best {
                        self.step(
                            Role::Active,
                            now,
                            "no active controller; this one ranks first",
                        );
                    } else {
                        self.step(Role::Standby, now, "another controller ranks first");
                    }
                }
            }
            Role::Standby => {
                if active_other.is_none() && best && !self.backlog {
                    self.step(Role::Active, now, "the active controller fell silent");
                }
            }
            Role::Active => {
                if live.iter().any(|c| c.2 && outranks((c.1, c.0), me)) {
                    self.step(Role::Standby, now, "a higher-ranked controller is active");
                }
            }
        }
    }

    fn frame(&mut self, msg: dist::Message, dst: MacAddr) -> Option<Vec<u8>> {
        self.seq = self.seq.wrapping_add(1);
        let r = dist::Repr { seq: self.seq, msg };
        match r.to_frame(self.mac, dst) {
            Ok(mut f) => {
                let _ = self.signer.seal(&mut f, wire::dist::auth::now_ns());
                Some(f)
            }
            Err(e) => {
                tracing::error!(error = %e, "DIST message not built");
                None
            }
        }
    }

    /// Takes one received frame.
    pub fn receive(&mut self, frame: &[u8], fib: &mut Fib, now: Instant) {
        let Ok(eth) = wire::ethernet::Frame::new_checked(frame) else {
            self.stats.dist_malformed += 1;
            return;
        };
        if let Some(v) = eth.vlan() {
            return self.deliver_to_tap(v, frame);
        }
        if eth.ethertype() != dist::ETHERTYPE {
            self.stats.other_frames += 1;
            return;
        }
        let src = eth.src();
        if let Err(why) = self.guard.check(frame, wire::dist::auth::now_ns()) {
            use wire::dist::auth::Reject;
            tracing::debug!(from = %src, ?why, trailer = ?wire::dist::auth::trailer(frame), kind = frame.get(15).copied().unwrap_or(0), "DIST frame refused");
            let n = match why {
                Reject::Unauthenticated => &mut self.stats.dist_unauthenticated,
                Reject::Forged => &mut self.stats.dist_forged,
                Reject::Replayed => &mut self.stats.dist_replayed,
                Reject::Stale => &mut self.stats.dist_stale,
                Reject::Malformed => &mut self.stats.dist_malformed,
            };
            *n += 1;
            return;
        }
        let r = match dist::Repr::parse(eth.payload()) {
            Ok(r) => r,
            Err(_) => {
                self.stats.dist_malformed += 1;
                return;
            }
        };
        self.stats.dist_received += 1;
        match r.msg {
            dist::Message::Hello(h) => self.on_hello(src, h, fib, now),
            dist::Message::Routes(b) => {
                // The active controller's table, mirrored by a standby.
                let from_active = self
                    .elements
                    .get(&src)
                    .is_some_and(|e| e.kind == ElementKind::Controller && e.active);
                // A controller that is still listening mirrors too: one that restarted
                // holds the table by the time it stands by.
                if self.role == Role::Active || !from_active {
                    self.stats.routes_ignored += 1;
                    return;
                }
                self.stats.mirror_messages += 1;
                self.mirror.mirror(src, &b);
                let ack = self.mirror.ack();
                if let Some(f) = self.frame(dist::Message::FibAck(ack), src) {
                    self.out_pending.push(f);
                }
            }
            dist::Message::Counters(c) => {
                if !self.elements.contains_key(&src) {
                    self.stats.reports_unknown += 1;
                    return;
                }
                self.stats.reports_received += 1;
                let r = self.reports.entry(src).or_default();
                r.element = c.element;
                for p in c.ports {
                    r.ports.insert(p.name.clone(), p);
                }
                r.drops.extend(c.drops);
                r.events.extend(c.events);
                if self.drains.excludes(&src) {
                    let done = crate::drain::forwarded(&r.events);
                    let current = self.lbs_current();
                    self.drains.on_report(src, done, current, now);
                }
            }
            dist::Message::FiltersAck(a) => {
                let known = self.elements.contains_key(&src);
                self.filters.answer(src, a, known);
            }
            dist::Message::FlowRecords(rs) => self.flow_records(src, rs),
            dist::Message::FibAck(a) => {
                self.stats.acks_received += 1;
                if self.dist.peers.contains_key(&src) {
                    self.dist.on_ack(src, a, fib, now);
                } else {
                    self.stats.acks_unknown += 1;
                }
            }
            _ => {}
        }
    }

    /// A hello from element `src`: its record kept, and what the active controller does
    /// for it (distribution to a back-end or a standby, an LB's table when it appears,
    /// restarts or holds another; the TAPs of an LB's external ports).
    fn on_hello(&mut self, src: MacAddr, h: dist::Hello, fib: &mut Fib, now: Instant) {
        self.stats.hellos_received += 1;
        let stats = &mut self.stats;
        let mut appeared = false;
        let e = self.elements.entry(src).or_insert_with(|| {
            stats.elements_up += 1;
            appeared = true;
            tracing::info!(element = %src, kind = ?h.element, ports = h.ports.len(), incarnation = %h.state.map_or("none".into(), |s| format!("{:016x}", s.incarnation)), "element up");
            ElementInfo {
                kind: h.element,
                ports: Vec::new(),
                addrs6: Vec::new(),
                interval: Duration::ZERO,
                last_seen: now,
                since: now,
                rx_packets: 0,
                tx_packets: 0,
                dropped: 0,
                priority: 0,
                active: false,
                state: None,
            }
        });
        let before = e.state;
        e.kind = h.element;
        e.ports = h.ports;
        e.addrs6 = h.addrs6.clone();
        e.interval = Duration::from_millis(h.interval_ms.max(1) as u64);
        e.last_seen = now;
        self.silent.remove(&src);
        (e.rx_packets, e.tx_packets, e.dropped) = (h.rx_packets, h.tx_packets, h.dropped);
        (e.priority, e.active) = (h.priority, h.active);
        e.state = h.state;
        let lb_interval = e.interval;
        let kind = h.element;
        let ports = e.ports.clone();
        if appeared {
            // Whatever it acknowledged before its hellos stopped, it is not
            // consistent until it acknowledges again.
            self.dist.reappeared(src, now);
        }
        // The active controller distributes to the back-ends, and to the standby
        // controllers, which mirror the table (docs/dist.md, "Controller election").
        if self.role == Role::Active
            && (kind == ElementKind::Forwarder || (kind == ElementKind::Controller && !h.active))
        {
            self.dist.add(src, now);
            if let Some(st) = &h.state {
                if self.dist.hello(src, st, fib, now) {
                    self.stats.restarts_seen += 1;
                }
            }
        } else if kind == ElementKind::Controller && h.active {
            self.dist.remove(src);
        }
        if kind == ElementKind::Balancer && self.role == Role::Active {
            if appeared {
                // A new LB, or one back after its hellos stopped: its table now.
                self.next_balance = now;
            }
            if let Some(st) = h.state {
                let known = self.lb_incarnations.insert(src, st.incarnation);
                let restarted = known.is_some_and(|i| i != st.incarnation)
                    || before.is_some_and(|b| b.incarnation != st.incarnation);
                if restarted {
                    self.stats.lb_restarts_seen += 1;
                    tracing::warn!(element = %src, incarnation = %format!("{:016x}", st.incarnation), "LB restarted (a new incarnation): its table goes to it at once");
                    self.next_balance = now;
                } else if let Some((d, at)) = self.balance_digests.get(&src) {
                    // It holds another table than the one sent, and not for the
                    // time the last one takes to arrive.
                    if st.digest != *d && now.duration_since(*at) >= lb_interval * 2 {
                        self.stats.lb_tables_resent += 1;
                        tracing::warn!(element = %src, "LB's table differs from the one sent: sending it again");
                        self.next_balance = now;
                    }
                }
            }
        }
        if h.element == ElementKind::Balancer && self.terminate {
            self.make_taps(&ports, &h.addrs6);
        }
    }

    /// A TAP for each external port of an LB that has none yet: that port's VLAN, MAC
    /// and addresses (IPv4, and the IPv6 ones the hello lists for it), named `vlan<ID>`.
    fn make_taps(&mut self, ports: &[dist::HelloPort], addrs6: &[dist::HelloAddr6]) {
        for (i, p) in ports.iter().enumerate() {
            if p.role != dist::PortRole::External || p.vlan == 0 || self.taps.contains_key(&p.vlan)
            {
                continue;
            }
            let name = format!("vlan{}", p.vlan);
            let addr = (!p.addr.is_unspecified()).then_some((p.addr, p.prefix_len));
            match io::tap::Tap::create(&name, p.mac.0, addr, 1500) {
                Ok(tap) => {
                    tracing::info!(tap = %name, mac = %p.mac, address = %format!("{}/{}", p.addr, p.prefix_len), "external network presented");
                    // IPv6 routing protocols (OSPFv3, BGP over link-local addresses) speak
                    // from the TAP's link-local address, the port's (the TAP has its MAC),
                    // even where the namespace keeps IPv6 off by default.
                    // Its global addresses, for sessions to them (BGP over IPv6) and next hops
                    // on the network.
                    let mine6: Vec<_> = addrs6.iter().filter(|a| a.port as usize == i).collect();
                    match io::netdev::enable_ipv6(&name) {
                        Err(e) => {
                            tracing::warn!(tap = %name, error = %e, "IPv6 stays off on the TAP: no IPv6 routing protocol there");
                        }
                        Ok(()) => {
                            for a in mine6 {
                                if let Err(e) = tap.add_addr6(a.addr, a.prefix_len) {
                                    self.stats.tap_errors += 1;
                                    tracing::error!(tap = %name, error = %e, "an IPv6 address of the external network is missing on its TAP");
                                } else {
                                    tracing::info!(tap = %name, address = %format!("{}/{}", a.addr, a.prefix_len), "IPv6 address presented");
                                }
                            }
                        }
                    }
                    let tap = Arc::new(tap);
                    let (t, tx, vlan) = (tap.clone(), self.tap_tx.clone(), p.vlan);
                    let spawned = std::thread::Builder::new()
                        .name(name.clone())
                        .spawn(move || {
                            let mut buf = vec![0u8; 65536];
                            while let Ok(n) = t.read(&mut buf) {
                                if tx.send((vlan, buf[..n].to_vec())).is_err() {
                                    return;
                                }
                            }
                        });
                    if spawned.is_err() {
                        self.stats.tap_errors += 1;
                        continue;
                    }
                    self.taps.insert(
                        p.vlan,
                        TapPort {
                            tap,
                            mac: p.mac,
                            addr: p.addr,
                            prefix_len: p.prefix_len,
                        },
                    );
                }
                Err(e) => {
                    if self.tap_failed.insert(p.vlan) {
                        self.stats.tap_errors += 1;
                        tracing::error!(tap = %name, error = %e, "cannot present the external network; the routing suite will not see it");
                    }
                }
            }
        }
    }

    /// A frame from the interconnection tagged with `vlan`: to that network's TAP if it is
    /// for the router's control plane (to our MAC: the LBs' redirect; or broadcast and
    /// multicast, such as ARP replies the LBs share), untagged.
    fn deliver_to_tap(&mut self, vlan: u16, frame: &[u8]) {
        if self.role != Role::Active {
            self.stats.other_frames += 1;
            return;
        }
        let Some(t) = self.taps.get(&vlan) else {
            self.stats.other_frames += 1;
            return;
        };
        let dst = MacAddr::from_slice(&frame[0..6]);
        let group = dst.0[0] & 1 == 1;
        if dst != self.mac && !group && dst != t.mac {
            self.stats.other_frames += 1;
            return;
        }
        let mut f = frame.to_vec();
        wire::ethernet::pop_vlan(&mut f);
        if dst == self.mac {
            f[0..6].copy_from_slice(&t.mac.0);
        }
        match t.tap.write(&f) {
            Ok(_) => self.stats.tap_in += 1,
            Err(_) => self.stats.tap_errors += 1,
        }
    }

    /// Timers: element timeouts, hellos, LB tables, route messages. Frames to send go to `out`.
    pub fn poll(&mut self, fib: &mut Fib, now: Instant, out: &mut Vec<Vec<u8>>) {
        // What the routing suite sent: tagged with its network's VLAN, from our MAC, to the
        // LBs, which send it out of that network's port with their external MAC. A
        // standby's routing suite is not heard.
        while let Ok((vlan, mut f)) = self.tap_rx.try_recv() {
            if f.len() < 14 {
                continue;
            }
            if self.role != Role::Active {
                self.stats.tap_out_standby += 1;
                continue;
            }
            f[6..12].copy_from_slice(&self.mac.0);
            wire::ethernet::push_vlan(&mut f, vlan);
            self.stats.tap_out += 1;
            out.push(f);
        }
        // After the drain: what a standby's routing suite wrote before a takeover is gone
        // before the Grace-LSAs go out.
        self.elect(now);
        if self.grace_again.is_some_and(|t| now >= t) && self.role == Role::Active {
            self.grace_again = None;
            self.send_grace();
        }
        out.append(&mut self.out_pending);
        let gone: Vec<MacAddr> = self
            .elements
            .iter()
            .filter(|(_, e)| now.duration_since(e.last_seen) > e.interval * 3)
            .map(|(m, _)| *m)
            .collect();
        for m in gone {
            tracing::warn!(element = %m, "element down: no hello for three of its intervals");
            self.elements.remove(&m);
            // Its distribution state stays a while: an element that stalled for a moment
            // (applying a large snapshot, on a loaded machine) resumes with deltas instead
            // of a new snapshot, which would stall it again.
            self.silent.insert(m, now);
            self.stats.elements_down += 1;
            self.next_balance = now;
        }
        let forget: Vec<MacAddr> = self
            .silent
            .iter()
            .filter(|(_, t)| now.duration_since(**t) >= DIST_GRACE)
            .map(|(m, _)| *m)
            .collect();
        for m in forget {
            self.silent.remove(&m);
            self.dist.remove(m);
        }
        if now >= self.next_hello {
            self.next_hello = now + self.hello_interval;
            let hello = dist::Message::Hello(dist::Hello {
                element: ElementKind::Controller,
                interval_ms: self.hello_interval.as_millis().min(u16::MAX as u128) as u16,
                rx_packets: self.stats.dist_received,
                tx_packets: self.stats.routes_messages_sent + self.stats.hellos_sent,
                dropped: self.stats.dist_malformed,
                priority: self.priority,
                active: self.role == Role::Active,
                ports: Vec::new(),
                addrs6: Vec::new(),
                state: Some(if self.role == Role::Active {
                    dist::HelloState {
                        incarnation: self.incarnation,
                        table: true,
                        epoch: fib.epoch(),
                        version: fib.version(),
                        routes: fib.len() as u32,
                        digest: fib.digest(),
                    }
                } else {
                    self.mirror.hello_state()
                }),
            });
            if let Some(f) = self.frame(hello, MacAddr::BROADCAST) {
                self.stats.hellos_sent += 1;
                out.push(f);
            }
        }
        if self.role != Role::Active {
            return;
        }
        if self.configure_lbs {
            self.configure_balancers(now, out);
        }
        self.flows_tick(now, out);
        let mut chunks = Vec::new();
        self.filters.tick(&self.elements, now, &mut chunks);
        for (mac, c) in chunks {
            if let Some(f) = self.frame(dist::Message::Filters(c), mac) {
                self.stats.filter_messages_sent += 1;
                out.push(f);
            }
        }
        if self.takeover_pending {
            return;
        }
        if let Some((synced, until)) = &self.hold {
            let synced = synced.load(Ordering::Relaxed);
            if !synced && now < *until {
                return;
            }
            tracing::info!(
                routes = fib.len(),
                after_ms = now.duration_since(self.started).as_millis() as u64,
                reason = if synced {
                    "zebra's first resend is in"
                } else {
                    "settle_ms passed without it"
                },
                "distribution starts"
            );
            self.hold = None;
        }
        let mut msgs = Vec::new();
        self.dist.tick(fib, now, &mut msgs);
        for (mac, b) in msgs {
            if let Some(f) = self.frame(dist::Message::Routes(b), mac) {
                self.stats.routes_messages_sent += 1;
                out.push(f);
            }
        }
    }

    /// Whether every LB runs the balancing table last sent to it (its hello's digest).
    fn lbs_current(&self) -> bool {
        self.elements
            .iter()
            .filter(|(_, e)| e.kind == ElementKind::Balancer)
            .all(|(m, e)| {
                self.balance_digests
                    .get(m)
                    .zip(e.state)
                    .is_some_and(|((d, _), s)| *d == s.digest)
            })
    }

    /// The back-end `name` (its reported element name, or its MAC).
    pub fn backend_named(&self, name: &str) -> Result<MacAddr, String> {
        let found = self
            .elements
            .iter()
            .filter(|(_, e)| e.kind == ElementKind::Forwarder)
            .find(|(m, _)| {
                m.to_string() == name.to_ascii_lowercase()
                    || self.reports.get(*m).is_some_and(|r| r.element == name)
            });
        match found {
            Some((m, _)) => Ok(*m),
            None => Err(format!(
                "no back-end {name:?}: name one by the element name it reports ({}) or its MAC",
                self.elements
                    .iter()
                    .filter(|(_, e)| e.kind == ElementKind::Forwarder)
                    .map(|(m, _)| self
                        .reports
                        .get(m)
                        .map_or(m.to_string(), |r| r.element.clone()))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// `drain` and `undrain` (the control socket): starts or ends a back-end's drain;
    /// answers its state.
    pub fn drain_command(&mut self, cmd: &str, req: &Value, now: Instant) -> Result<Value, String> {
        let name = req["element"].as_str().ok_or("missing \"element\"")?;
        let mac = self.backend_named(name)?;
        match cmd {
            "drain" => {
                if !self.drains.excludes(&mac) {
                    self.drains.start(mac, now);
                    tracing::info!(element = name, %mac, "back-end draining: out of the LBs' tables");
                }
            }
            _ => {
                if self.drains.stop(mac) {
                    tracing::info!(element = name, %mac, "back-end undrained: back in the LBs' tables");
                }
            }
        }
        Ok(self.drains.json(&mac, name, now))
    }

    /// The back-ends and weights the LBs should have.
    fn wanted_balance(&self) -> Vec<(MacAddr, u16)> {
        self.elements
            .iter()
            .filter(|(m, _)| !self.drains.excludes(m))
            .filter(|(_, e)| e.kind == ElementKind::Forwarder && e.holds_table())
            .map(|(m, e)| (*m, weight_for(e.capacity_mbps())))
            .collect()
    }

    /// Sends each LB its balancing table and the Virtual-CP's MAC when the back-ends
    /// change, and again every second (the messages are idempotent).
    fn configure_balancers(&mut self, now: Instant, out: &mut Vec<Vec<u8>>) {
        let want = self.wanted_balance();
        if want == self.balance_sent && now < self.next_balance {
            return;
        }
        self.next_balance = now + Duration::from_secs(1);
        if want != self.balance_sent {
            tracing::info!(backends = want.len(), "LB tables: {:?}", want);
        }
        self.balance_sent = want.clone();
        let lbs: Vec<(MacAddr, u8)> = self
            .elements
            .iter()
            .filter(|(_, e)| e.kind == ElementKind::Balancer)
            .filter_map(|(m, e)| {
                let i = e
                    .ports
                    .iter()
                    .position(|p| p.role == dist::PortRole::Internal)?;
                Some((*m, i as u8))
            })
            .collect();
        for (lb, port) in lbs {
            let digest = dist::balance_digest(
                want.iter().map(|(m, w)| (*m, port, *w)),
                Some((self.mac, port)),
            );
            self.balance_digests.insert(lb, (digest, now));
            let entries = want
                .iter()
                .map(|(mac, weight)| dist::BalanceEntry {
                    mac: *mac,
                    port,
                    weight: *weight,
                })
                .collect();
            let msgs = [
                dist::Message::Balance {
                    flush: true,
                    entries,
                },
                dist::Message::VirtualCp {
                    mac: self.mac,
                    port,
                },
            ];
            for m in msgs {
                if let Some(f) = self.frame(m, lb) {
                    self.stats.balance_messages_sent += 1;
                    out.push(f);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
