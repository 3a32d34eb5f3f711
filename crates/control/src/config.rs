//! The forwarder's TOML configuration. Errors name the file, the line and the key.
//!
//! ```toml
//! routes_file = "routes.txt"   # optional; "PREFIX NEXTHOP [NEXTHOP...]" per line, relative to this file
//! # routes_file_via = "10.2.0.2"  # optional: all routes of routes_file through this gateway (or
//! #                               # list); routes_file may then be any table: text, MRT, gzip, bzip2
//!
//! [[interface]]
//! name = "r-eth0"
//! address = "10.1.0.1/24"
//! # mtu = 1500               # optional: IP MTU; default, the interface's own
//!
//! [[route]]
//! prefix = "10.3.0.0/16"
//! via = "10.2.0.2"             # or a list of gateways for ECMP: ["10.2.0.2", "10.2.0.3"]
//!
//! # The back-end role of a multistage router (optional): VLAN sub-interfaces mirror the
//! # external networks on the interconnection port, and hellos go out of it.
//! # [[interface]]
//! # name = "ext-a"             # a name for the sub-interface (not a kernel interface)
//! # parent = "r1-int"          # the interface whose port carries it
//! # vlan = 10                  # 802.1Q VLAN id, 1 to 4094
//! # address = "10.1.0.1/24"    # the router's address on that external network
//! # [backend]
//! # internal = "r1-int"        # the interconnection port: hellos out, DIST accepted here
//! # hello_interval_ms = 100
//!
//! [io]                         # optional
//! backend = "auto"             # "auto" (AF_XDP, else AF_PACKET with a log line saying why),
//!                              # "xdp" (AF_XDP or an error) or "packet" (AF_PACKET)
//! busy_poll = false            # true: never sleep when idle (a dedicated core at 100%)
//! fast_path = true             # forward the common case in the ports' own programs (XDP
//!                              # on AF_XDP ports, tcx on AF_PACKET ones); false: user space
//! slow_path_limit = 20000      # fast path: frames/s per port and CPU it hands user space
//!                              # for the router to answer; the excess is shed (0: no limit)
//! restart_grace_s = 5          # fast path: forwards on this long after the forwarder stops,
//!                              # for its next start to take it over (0: stops with it)
//! packet_ring = "frames"       # AF_PACKET: "frames" (a wake-up per frame) or "blocks"
//!                              # (per block or timer tick: throughput over latency)
//! # priority = 60              # workers at SCHED_FIFO 1-99, above the kernel's receive
//!                              # threads: no collapse at overload (dedicated cores only)
//! shared_umem = true           # AF_XDP: a worker's ports share one UMEM, so a frame leaves
//!                              # by another port without a copy (false: one per port)
//!
//! [dist]                       # optional; a back-end's DIST authentication (docs/dist.md)
//! key_file = "dist.key"        # the router's shared key (hex digits), relative to this file;
//!                              # without it DIST is unauthenticated and the back-end warns
//! max_age_s = 60               # messages sealed longer ago than this are dropped (0: no limit)
//!
//! [tuning]                     # optional
//! icmp_errors_per_sec = 100
//! icmp_burst = 50
//! neighbour = { reachable_secs = 30, retry_ms = 1000, max_tries = 3, queue_len = 64,
//!               max_entries = 16384, max_queued = 4096 }
//! ```

use dataplane::forwarder::ForwarderConfig;
use fib::Prefix;
use serde::Deserialize;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// A configuration error: where, which key, what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    pub line: usize,
    pub key: String,
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: ", self.file.display(), self.line)?;
        if !self.key.is_empty() {
            write!(f, "key `{}`: ", self.key)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    routes_file: Option<Spanned<String>>,
    routes_file_via: Option<Spanned<Via>>,
    #[serde(default)]
    interface: Vec<RawInterface>,
    #[serde(default)]
    route: Vec<RawRoute>,
    #[serde(default)]
    tuning: ForwarderConfig,
    backend: Option<RawBackend>,
    io: Option<RawIo>,
    dist: Option<RawDist>,
    metrics: Option<RawMetrics>,
    star: Option<RawStar>,
}

/// `[star]`: this forwarder is one of a star router's (docs/star.md).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStar {
    internal: Spanned<String>,
    #[serde(default)]
    member: Vec<RawStarMember>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStarMember {
    mac: Spanned<String>,
    #[serde(default)]
    networks: Vec<RawStarNetwork>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStarNetwork {
    prefix: Spanned<String>,
    port: Spanned<i64>,
}

/// The `[metrics]` table, common to every element.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMetrics {
    listen: Option<Spanned<String>>,
    element: Option<Spanned<String>>,
}

impl RawMetrics {
    /// Validates a `[metrics]` table of the file `path` whose text is `src`.
    pub(crate) fn check(
        path: &Path,
        src: &str,
        raw: Option<&RawMetrics>,
    ) -> Result<crate::metrics::MetricsConfig, ConfigError> {
        let mut c = crate::metrics::MetricsConfig::default();
        let Some(raw) = raw else { return Ok(c) };
        if let Some(l) = &raw.listen {
            c.listen = Some(l.get_ref().parse().map_err(|_| ConfigError {
                file: path.into(),
                line: line_of(src, l.span().start),
                key: "metrics.listen".into(),
                message: format!(
                    "{:?} is not ADDR:PORT (e.g. \"127.0.0.1:9100\" or \"[::]:9100\")",
                    l.get_ref()
                ),
            })?);
        }
        if let Some(e) = &raw.element {
            let v = e.get_ref();
            if v.is_empty() || v.len() > 64 || v.chars().any(|c| c.is_control()) {
                return Err(ConfigError {
                    file: path.into(),
                    line: line_of(src, e.span().start),
                    key: "metrics.element".into(),
                    message: "use 1 to 64 printable characters".into(),
                });
            }
            c.element = Some(v.clone());
        }
        Ok(c)
    }
}

/// The `[io]` table, common to every element.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawIo {
    backend: Option<Spanned<String>>,
    busy_poll: Option<bool>,
    fast_path: Option<bool>,
    slow_path_limit: Option<Spanned<i64>>,
    restart_grace_s: Option<Spanned<i64>>,
    packet_ring: Option<Spanned<String>>,
    priority: Option<Spanned<i64>>,
    workers: Option<Spanned<i64>>,
    shared_umem: Option<bool>,
    cpus: Option<Spanned<String>>,
}

/// The `[dist]` table, common to every element that speaks DIST.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDist {
    key_file: Option<Spanned<String>>,
    max_age_s: Option<Spanned<u64>>,
}

/// How an element authenticates DIST (`[dist]`; docs/dist.md, "Authentication").
#[derive(Clone)]
pub struct DistConfig {
    /// `key_file`: a file holding the shared key as hex digits (at least 32), relative to
    /// the config file. Without it DIST goes unauthenticated, and the element says so.
    pub key_file: Option<PathBuf>,
    /// The key read from `key_file`.
    key: Option<wire::dist::auth::Key>,
    /// `max_age_s` (default 60; 0 = no limit): a message whose counter is older than this
    /// by the receiver's clock is stale and dropped.
    pub max_age: std::time::Duration,
}

/// Equal when they name the same key file and age (the key is what the file holds).
impl PartialEq for DistConfig {
    fn eq(&self, o: &Self) -> bool {
        (&self.key_file, self.max_age, self.key.is_some())
            == (&o.key_file, o.max_age, o.key.is_some())
    }
}

impl Eq for DistConfig {}

impl std::fmt::Debug for DistConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistConfig")
            .field("key_file", &self.key_file)
            .field("max_age", &self.max_age)
            .finish_non_exhaustive()
    }
}

/// Writes a new random DIST key (32 bytes from the kernel's generator, as 64 hex digits)
/// to `path`, readable by its owner only.
pub fn write_new_dist_key(path: &Path) -> Result<(), String> {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let mut key = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut key))
        .map_err(|e| format!("/dev/urandom: {e}"))?;
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let _ = std::fs::remove_file(path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(format!("{hex}\n").as_bytes()))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// A DIST key from a file of hex digits (key id 1); the error names the file.
pub fn read_dist_key(p: &Path) -> Result<wire::dist::auth::Key, String> {
    let text =
        std::fs::read_to_string(p).map_err(|e| format!("{}: cannot read: {e}", p.display()))?;
    wire::dist::auth::Key::from_hex(1, &text).map_err(|e| format!("{}: {e}", p.display()))
}

/// The default of `[dist] max_age_s`.
pub const DEFAULT_DIST_MAX_AGE_S: u64 = 60;

impl Default for DistConfig {
    fn default() -> Self {
        DistConfig {
            key_file: None,
            key: None,
            max_age: std::time::Duration::from_secs(DEFAULT_DIST_MAX_AGE_S),
        }
    }
}

impl DistConfig {
    /// Validates a `[dist]` table of the file `path` whose text is `src`, reading the key.
    pub(crate) fn from_raw(
        path: &Path,
        src: &str,
        raw: Option<&RawDist>,
    ) -> Result<DistConfig, ConfigError> {
        let mut c = DistConfig::default();
        if let Some(m) = raw.and_then(|r| r.max_age_s.as_ref()) {
            c.max_age = std::time::Duration::from_secs(*m.get_ref());
        }
        if let Some(k) = raw.and_then(|r| r.key_file.as_ref()) {
            let p = Path::new(k.get_ref());
            let p = if p.is_absolute() {
                p.to_path_buf()
            } else {
                path.parent().unwrap_or(Path::new(".")).join(p)
            };
            c.set_key_file(&p).map_err(|message| ConfigError {
                file: path.into(),
                line: line_of(src, k.span().start),
                key: "dist.key_file".into(),
                message,
            })?;
        }
        Ok(c)
    }

    /// Reads the key from `p` (hex digits), replacing any key the config named.
    pub fn set_key_file(&mut self, p: &Path) -> Result<(), String> {
        self.key = Some(read_dist_key(p)?);
        self.key_file = Some(p.into());
        use std::os::unix::fs::PermissionsExt;
        if let Ok(m) = std::fs::metadata(p) {
            if m.permissions().mode() & 0o077 != 0 {
                tracing::warn!(
                    file = %p.display(),
                    "the DIST key file can be read by other users than its owner (chmod 600)"
                );
            }
        }
        Ok(())
    }

    /// The key, if one is configured.
    pub fn key(&self) -> Option<wire::dist::auth::Key> {
        self.key.clone()
    }

    /// The receiving side of authentication.
    pub fn guard(&self) -> wire::dist::auth::Guard {
        wire::dist::auth::Guard::new(self.key(), self.max_age.as_nanos() as u64)
    }

    /// The sending side of authentication.
    pub fn signer(&self) -> wire::dist::auth::Signer {
        wire::dist::auth::Signer::new(self.key())
    }

    /// Says loudly, once at start, that DIST is unauthenticated when there is no key.
    pub fn warn_if_open(&self, element: &str) {
        if self.key.is_none() {
            tracing::warn!(
                element,
                "DIST IS NOT AUTHENTICATED: no [dist] key_file. Anyone on the interconnection \
                 can configure this element and change its routes. Give every element the \
                 same key (docs/dist.md, \"Authentication\")."
            );
            eprintln!(
                "WARNING: {element}: DIST is not authenticated (no [dist] key_file); anyone on \
                 the interconnection can steer this element"
            );
        } else {
            tracing::info!(
                element,
                max_age_s = self.max_age.as_secs(),
                "DIST authenticated (HMAC-SHA-256)"
            );
        }
    }
}

/// How an element does packet I/O (`[io]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoConfig {
    /// `backend = "auto" | "xdp" | "packet"`; `auto` by default.
    pub backend: io::Backend,
    /// `busy_poll = true`: the worker never sleeps in `poll(2)` when its rings are empty;
    /// it checks them again at once. A frame then waits for no wake-up, at the cost of a
    /// whole core at 100% even when idle (for dedicated cores).
    pub busy_poll: bool,
    /// `fast_path = true` (the default): the element's common case runs in each port's own
    /// program: its XDP program on AF_XDP ports, its tcx ingress program on AF_PACKET ones
    /// (docs/forwarder.md, "The fast path"). `false`: every frame goes to user space. Where an element or a
    /// port cannot carry it, the default leaves it off and says why (`show interfaces`);
    /// `true` said outright is then an error.
    pub fast_path: bool,
    /// Whether `fast_path` was said (in the file or with `--fast-path`), not defaulted.
    pub fast_path_set: bool,
    /// `slow_path_limit = N` (frames per second, default 20,000; 0: no limit): how many
    /// frames per second the fast path of each port hands user space, per receiving CPU,
    /// for the router itself to answer (packets to the router, TTL or hop limit expiry, no
    /// route, a neighbour not resolved, martians); the excess is dropped in the program,
    /// before the copy, and counted (`slow_path_shed`), so that a flood of them costs the
    /// fast path little ([`io::fastpath::ProgramFacts::slow_path_limit`]). Frames user
    /// space forwards are never shed.
    pub slow_path_limit: u32,
    /// `restart_grace_s = N` (0 to 3600, default 5): a forwarder's XDP fast path outlives
    /// the process by up to N seconds (its programs and maps pinned in the BPF filesystem,
    /// `io::pin`), so that its next start (a restart, a new binary) takes it over with no
    /// frame of the fast path lost; if no start comes, it stops forwarding after N
    /// seconds. 0: it stops with the process. Standalone forwarders on AF_XDP ports only
    /// (not back-ends or star members, nor tcx).
    pub restart_grace_s: u64,
    /// `packet_ring = "frames" | "blocks"`: how AF_PACKET ports receive. `frames`
    /// (TPACKET_V2, the default) wakes the worker per frame: no added latency. `blocks`
    /// (TPACKET_V3) wakes it per block of frames or after a timer tick: fewer wake-ups,
    /// more throughput where many elements share few cores, and up to a tick (4 ms at
    /// 250 Hz) of latency per hop.
    pub packet_ring: io::RxRing,
    /// `workers = N` (1 to 64, default 1): worker threads, each owning one share of every
    /// port's receive queues (AF_XDP) or one socket of a flow-hash fanout group
    /// (AF_PACKET), with its own buffers, route reader and counters. Forwarders,
    /// back-ends and LBs (the first worker holds the DIST role).
    pub workers: usize,
    /// `priority = N` (1 to 99): the element's workers run at real-time priority
    /// SCHED_FIFO N, above the kernel threads that receive for them (a threaded NAPI's
    /// default, or `--rt-napi`'s 50 in the bench), so that at overload the kernel cannot
    /// take the core the worker needs to drain what it already received; the excess is
    /// then dropped at the device's own ring. A worker at 100% leaves its core to
    /// nothing else but the kernel's 5% reserve: for dedicated cores. Default none.
    pub priority: Option<u8>,
    /// `shared_umem = true` (the default): on AF_XDP, the sockets of a worker's ports share
    /// one UMEM, so a frame received on one port leaves by another from where it was
    /// received, without a copy in user space (none at all on NICs in zero-copy mode).
    /// `false`: each port has its own, and frames are copied in and out.
    pub shared_umem: bool,
    /// `cpus = "4-5"` (Linux's CPU-list notation): the CPUs this element runs on. The
    /// process is kept to them, worker `i` is pinned to the `i`-th (round robin), and the
    /// ports' receive work runs in NAPI threads of their own (threaded NAPI), pinned to the
    /// CPUs the workers leave free (or shared with them where there are none), so that the
    /// element's whole cost stays on its cores (`io::placement::plan`). Default none: the
    /// scheduler places everything, and receive work runs where the sender's runs.
    pub cpus: Option<io::placement::CpuList>,
}

impl Default for IoConfig {
    fn default() -> Self {
        IoConfig {
            backend: io::Backend::default(),
            busy_poll: false,
            fast_path: true,
            fast_path_set: false,
            slow_path_limit: io::fastpath::SLOW_PATH_LIMIT,
            restart_grace_s: 5,
            packet_ring: io::RxRing::Frames,
            workers: 1,
            priority: None,
            shared_umem: true,
            cpus: None,
        }
    }
}

impl IoConfig {
    /// Validates an `[io]` table of the file `path` whose text is `src`.
    pub(crate) fn from_raw(
        path: &Path,
        src: &str,
        raw: Option<&RawIo>,
    ) -> Result<IoConfig, ConfigError> {
        let mut c = IoConfig {
            busy_poll: raw.and_then(|r| r.busy_poll).unwrap_or(false),
            fast_path: raw.and_then(|r| r.fast_path).unwrap_or(true),
            fast_path_set: raw.and_then(|r| r.fast_path).is_some(),
            shared_umem: raw.and_then(|r| r.shared_umem).unwrap_or(true),
            ..Default::default()
        };
        if let Some(r) = raw.and_then(|r| r.packet_ring.as_ref()) {
            c.packet_ring = match r.get_ref().as_str() {
                "frames" => io::RxRing::Frames,
                "blocks" => io::RxRing::Blocks,
                other => {
                    return Err(ConfigError {
                        file: path.into(),
                        line: line_of(src, r.span().start),
                        key: "io.packet_ring".into(),
                        message: format!("{other:?} is not \"frames\" or \"blocks\""),
                    })
                }
            };
        }
        if let Some(l) = raw.and_then(|r| r.slow_path_limit.as_ref()) {
            if !(0..=100_000_000).contains(l.get_ref()) {
                return Err(ConfigError {
                    file: path.into(),
                    line: line_of(src, l.span().start),
                    key: "io.slow_path_limit".into(),
                    message: format!(
                        "{} is not a number of frames per second from 0 (no limit) to 100000000",
                        l.get_ref()
                    ),
                });
            }
            c.slow_path_limit = *l.get_ref() as u32;
        }
        if let Some(g) = raw.and_then(|r| r.restart_grace_s.as_ref()) {
            if !(0..=3600).contains(g.get_ref()) {
                return Err(ConfigError {
                    file: path.into(),
                    line: line_of(src, g.span().start),
                    key: "io.restart_grace_s".into(),
                    message: format!("{} is not a number of seconds from 0 to 3600", g.get_ref()),
                });
            }
            c.restart_grace_s = *g.get_ref() as u64;
        }
        if let Some(w) = raw.and_then(|r| r.workers.as_ref()) {
            if !(1..=64).contains(w.get_ref()) {
                return Err(ConfigError {
                    file: path.into(),
                    line: line_of(src, w.span().start),
                    key: "io.workers".into(),
                    message: format!("{} is not a number of workers from 1 to 64", w.get_ref()),
                });
            }
            c.workers = *w.get_ref() as usize;
        }
        if let Some(p) = raw.and_then(|r| r.priority.as_ref()) {
            if !(1..=99).contains(p.get_ref()) {
                return Err(ConfigError {
                    file: path.into(),
                    line: line_of(src, p.span().start),
                    key: "io.priority".into(),
                    message: format!("{} is not a SCHED_FIFO priority from 1 to 99", p.get_ref()),
                });
            }
            c.priority = Some(*p.get_ref() as u8);
        }
        if let Some(l) = raw.and_then(|r| r.cpus.as_ref()) {
            c.cpus = Some(
                io::placement::CpuList::parse(l.get_ref()).map_err(|m| ConfigError {
                    file: path.into(),
                    line: line_of(src, l.span().start),
                    key: "io.cpus".into(),
                    message: format!("{:?}: {m}", l.get_ref()),
                })?,
            );
        }
        if let Some(b) = raw.and_then(|r| r.backend.as_ref()) {
            c.backend = io::Backend::parse(b.get_ref()).ok_or_else(|| ConfigError {
                file: path.into(),
                line: line_of(src, b.span().start),
                key: "io.backend".into(),
                message: format!("{:?} is not \"auto\", \"xdp\" or \"packet\"", b.get_ref()),
            })?;
        }
        Ok(c)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBackend {
    internal: Spanned<String>,
    hello_interval_ms: Option<Spanned<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInterface {
    name: Spanned<String>,
    /// One prefix, or a list: one IPv4 and any IPv6 ones.
    address: Spanned<Via>,
    mtu: Option<Spanned<u32>>,
    parent: Option<Spanned<String>>,
    vlan: Option<Spanned<u16>>,
    /// Send IPv6 router advertisements on this interface (SLAAC for its hosts).
    router_advertisements: Option<Spanned<bool>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    prefix: Spanned<String>,
    via: Spanned<Via>,
}

/// One gateway, or a list of them (ECMP).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Via {
    One(String),
    Many(Vec<String>),
}

impl Via {
    /// The gateways of a controller's IPv6 route; at least one. A link-local gateway names
    /// the external network it is on, `fe80::1%vlan20` (or `fe80::1%20`), and is kept with
    /// that VLAN written in it (`wire::ipv6::scoped_link_local`), as the back-ends take it.
    pub(crate) fn addresses6_scoped(&self) -> Result<Vec<std::net::Ipv6Addr>, String> {
        let one = |t: &String| -> Result<std::net::Ipv6Addr, String> {
            let (a, zone) = match t.split_once('%') {
                Some((a, z)) => (a, Some(z)),
                None => (t.as_str(), None),
            };
            let a: std::net::Ipv6Addr = a
                .parse()
                .map_err(|_| format!("{t:?} is not an IPv6 address"))?;
            let ll = wire::ipv6::is_link_local(a);
            match zone {
                None if ll => Err(format!(
                    "{t:?} is link-local: name its network, as in \"{t}%vlan20\""
                )),
                None => Ok(a),
                Some(_) if !ll => Err(format!(
                    "{t:?}: only a link-local gateway names its network"
                )),
                Some(z) => match z.strip_prefix("vlan").unwrap_or(z).parse::<u16>() {
                    Ok(v) if (1..=4094).contains(&v) && a.segments()[1] == 0 => {
                        Ok(wire::ipv6::scoped_link_local(a, v))
                    }
                    _ => Err(format!(
                        "{t:?}: the network of a link-local gateway is vlan<ID> (1 to 4094) and its second group is 0"
                    )),
                },
            }
        };
        self.texts()?.into_iter().map(one).collect()
    }

    /// The gateways as written; at least one.
    fn texts(&self) -> Result<Vec<&String>, String> {
        let texts: Vec<&String> = match self {
            Via::One(v) => vec![v],
            Via::Many(v) => v.iter().collect(),
        };
        if texts.is_empty() {
            return Err("no gateway given".into());
        }
        Ok(texts)
    }

    /// The gateways as IPv4 addresses; at least one.
    pub(crate) fn addresses(&self) -> Result<Vec<Ipv4Addr>, String> {
        self.parsed("IPv4")
    }

    /// The gateways as addresses of one family (`what` names it in the error).
    fn parsed<A: std::str::FromStr>(&self, what: &str) -> Result<Vec<A>, String> {
        self.texts()?
            .into_iter()
            .map(|t| {
                t.parse()
                    .map_err(|_| format!("{t:?} is not an {what} address"))
            })
            .collect()
    }
}

/// One interface of the forwarder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceConfig {
    pub name: String,
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
    /// IPv6 addresses with their prefix lengths (the link-local one is derived from the
    /// MAC, not configured).
    pub addrs6: Vec<(std::net::Ipv6Addr, u8)>,
    pub mtu: Option<usize>,
    /// A VLAN sub-interface: (index of the parent interface, VLAN id).
    pub vlan: Option<(usize, u16)>,
    /// `router_advertisements`: IPv6 router advertisements on this interface.
    pub router_advertisements: bool,
}

/// `[star]`: the internal port on the star's switch, and every forwarder's networks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StarConfig {
    /// Index of the internal interface.
    pub internal: usize,
    /// (network, the forwarder's internal MAC, its port index on the network).
    pub members: Vec<(Prefix, wire::MacAddr, u8)>,
    /// The same for IPv6 networks (`networks` entries with an IPv6 prefix).
    pub members6: Vec<(fib::Prefix6, wire::MacAddr, u8)>,
}

/// The back-end role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendConfig {
    /// Index of the interconnection interface.
    pub internal: usize,
    pub hello_interval_ms: u64,
}

/// A static route, with the line it came from (for error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteConfig {
    pub prefix: Prefix,
    /// One gateway, or several for ECMP.
    pub via: Vec<Ipv4Addr>,
    pub line: usize,
}

/// A static IPv6 route, with the line it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route6Config {
    pub prefix: fib::Prefix6,
    /// One gateway, or several for ECMP.
    pub via: Vec<std::net::Ipv6Addr>,
    pub line: usize,
}

/// A parsed, validated forwarder configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwarderFile {
    pub path: PathBuf,
    pub interfaces: Vec<InterfaceConfig>,
    pub routes: Vec<RouteConfig>,
    /// Static IPv6 routes (`[[route]]` entries with an IPv6 prefix).
    pub routes6: Vec<Route6Config>,
    /// Resolved against the configuration file's directory.
    pub routes_file: Option<PathBuf>,
    /// When set, every route of `routes_file` goes through these gateways and the file may
    /// be any table format (text with or without next hops, MRT, compressed).
    pub routes_file_via: Vec<Ipv4Addr>,
    /// The IPv6 gateways among `routes_file_via`: the file's IPv6 routes go through them
    /// (and are skipped without any).
    pub routes_file_via6: Vec<std::net::Ipv6Addr>,
    pub tuning: ForwarderConfig,
    pub backend: Option<BackendConfig>,
    pub io: IoConfig,
    pub dist: DistConfig,
    /// `[metrics]`: the Prometheus endpoint and the element's name in it.
    pub metrics: crate::metrics::MetricsConfig,
    /// `[star]`: a member of a star router.
    pub star: Option<StarConfig>,
}

/// Line number (1-based) of byte offset `at` in `src`.
pub fn line_of(src: &str, at: usize) -> usize {
    src.as_bytes()[..at.min(src.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The key of a `key = value` line, if the line has one.
fn key_on_line(src: &str, line: usize) -> String {
    src.lines()
        .nth(line.saturating_sub(1))
        .and_then(|l| l.split_once('='))
        .map(|(k, _)| k.trim().to_string())
        .unwrap_or_default()
}

/// A configuration file's text; an error names the file.
pub(crate) fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: path.into(),
        line: 0,
        key: String::new(),
        message: format!("cannot read: {e}"),
    })
}

/// Deserializes TOML; a syntax or type error names the line and the key on it.
pub(crate) fn from_toml<T: serde::de::DeserializeOwned>(
    path: &Path,
    src: &str,
) -> Result<T, ConfigError> {
    toml::from_str(src).map_err(|e| {
        let at = e.span().map(|s| s.start).unwrap_or(0);
        let line = line_of(src, at);
        ConfigError {
            file: path.into(),
            line,
            key: key_on_line(src, line),
            message: e.message().to_string(),
        }
    })
}

/// The `routes_file` key: a path relative to the config file `path` (text `src`), which
/// must exist.
pub(crate) fn routes_file_path(
    path: &Path,
    src: &str,
    raw: Option<&Spanned<String>>,
) -> Result<Option<PathBuf>, ConfigError> {
    let Some(f) = raw else { return Ok(None) };
    let p = Path::new(f.get_ref());
    let p = if p.is_absolute() {
        p.to_path_buf()
    } else {
        path.parent().unwrap_or(Path::new(".")).join(p)
    };
    if !p.exists() {
        return Err(ConfigError {
            file: path.into(),
            line: line_of(src, f.span().start),
            key: "routes_file".into(),
            message: format!("{} does not exist", p.display()),
        });
    }
    Ok(Some(p))
}

/// Checks a Linux interface name.
pub(crate) fn check_ifname(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 15 || name.contains(['/', ' ']) {
        return Err(format!(
            "{name:?} is not a valid interface name (1 to 15 characters, no '/' or space)"
        ));
    }
    Ok(())
}

/// Parses `ADDRESS/LENGTH` (length 1 to 32).
pub(crate) fn cidr(s: &str) -> Result<(Ipv4Addr, u8), String> {
    let (a, l) = s
        .split_once('/')
        .ok_or("expected ADDRESS/LENGTH, like 10.1.0.1/24")?;
    let addr: Ipv4Addr = a
        .parse()
        .map_err(|_| format!("{a:?} is not an IPv4 address"))?;
    let len: u8 = l
        .parse()
        .ok()
        .filter(|l| (1..=32).contains(l))
        .ok_or_else(|| format!("prefix length {l:?} is not 1 to 32"))?;
    Ok((addr, len))
}

/// Parses `ADDRESS/LENGTH` for IPv6 (length 1 to 128); not a multicast or link-local
/// address (the link-local one comes from the MAC).
pub(crate) fn cidr6(s: &str) -> Result<(std::net::Ipv6Addr, u8), String> {
    let (a, l) = s
        .split_once('/')
        .ok_or("expected ADDRESS/LENGTH, like 2001:db8:1::1/64")?;
    let addr: std::net::Ipv6Addr = a
        .parse()
        .map_err(|_| format!("{a:?} is not an IPv6 address"))?;
    let len: u8 = l
        .parse()
        .ok()
        .filter(|l| (1..=128).contains(l))
        .ok_or_else(|| format!("prefix length {l:?} is not 1 to 128"))?;
    if addr.is_multicast() || wire::ipv6::is_link_local(addr) || addr.is_unspecified() {
        return Err(format!(
            "{addr} is not a unicast global address (the link-local address comes from the MAC)"
        ));
    }
    Ok((addr, len))
}

/// An IPv6 `[[route]]` (index `i`): its prefix, and one gateway on an interface's IPv6
/// network. Errors carry where and which key.
fn route6(
    src: &str,
    interfaces: &[InterfaceConfig],
    star6: &[fib::Prefix6],
    r: &RawRoute,
    i: usize,
) -> Result<Route6Config, (usize, String, String)> {
    let prefix = fib::Prefix6::parse_strict(r.prefix.get_ref()).map_err(|e| {
        (
            r.prefix.span().start,
            format!("route[{i}].prefix"),
            format!("{:?}: {e}", r.prefix.get_ref()),
        )
    })?;
    let (at, key) = (r.via.span().start, format!("route[{i}].via"));
    let texts: Vec<&String> = match r.via.get_ref() {
        Via::One(v) => vec![v],
        Via::Many(v) => v.iter().collect(),
    };
    let via = gateways6(&texts, interfaces, star6).map_err(|m| (at, key, m))?;
    Ok(Route6Config {
        prefix,
        via,
        line: line_of(src, r.prefix.span().start),
    })
}

/// IPv6 gateways (several: ECMP), each on an interface's IPv6 network (or, for a star
/// member, another member's, `star6`); at least one.
fn gateways6(
    texts: &[&String],
    interfaces: &[InterfaceConfig],
    star6: &[fib::Prefix6],
) -> Result<Vec<std::net::Ipv6Addr>, String> {
    if texts.is_empty() {
        return Err("no gateway given".into());
    }
    let mut out = Vec::with_capacity(texts.len());
    for t in texts {
        let a: std::net::Ipv6Addr = t
            .parse()
            .map_err(|_| format!("{t:?} is not an IPv6 address"))?;
        if !interfaces.iter().any(|x| {
            x.addrs6
                .iter()
                .any(|&(n, l)| fib::Prefix6::new(n, l).contains(a))
        }) && !star6.iter().any(|p| p.contains(a))
        {
            return Err(format!(
                "gateway {a} is on none of the interfaces' IPv6 networks"
            ));
        }
        out.push(a);
    }
    Ok(out)
}

impl ForwarderFile {
    pub fn load(path: &Path) -> Result<ForwarderFile, ConfigError> {
        Self::parse(path, &read(path)?)
    }

    pub fn parse(path: &Path, src: &str) -> Result<ForwarderFile, ConfigError> {
        let err = |at: usize, key: String, message: String| ConfigError {
            file: path.into(),
            line: line_of(src, at),
            key,
            message,
        };
        let raw: Raw = from_toml(path, src)?;
        let mut interfaces: Vec<InterfaceConfig> = Vec::new();
        for (i, r) in raw.interface.iter().enumerate() {
            let name = r.name.get_ref();
            check_ifname(name)
                .map_err(|m| err(r.name.span().start, format!("interface[{i}].name"), m))?;
            if interfaces.iter().any(|x| &x.name == name) {
                return Err(err(
                    r.name.span().start,
                    format!("interface[{i}].name"),
                    format!("interface {name} is listed twice"),
                ));
            }
            let key = format!("interface[{i}].address");
            let at = r.address.span().start;
            let texts: Vec<&String> = match r.address.get_ref() {
                Via::One(a) => vec![a],
                Via::Many(v) => v.iter().collect(),
            };
            let (mut v4, mut addrs6) = (Vec::new(), Vec::new());
            for t in texts {
                if t.contains(':') {
                    addrs6.push(cidr6(t).map_err(|m| err(at, key.clone(), m))?);
                } else {
                    v4.push(cidr(t).map_err(|m| err(at, key.clone(), m))?);
                }
            }
            let (addr, prefix_len) = match v4[..] {
                [one] => one,
                [] => {
                    return Err(err(
                        at,
                        key,
                        "an IPv4 address is needed (IPv6-only interfaces are not built yet)".into(),
                    ))
                }
                _ => return Err(err(at, key, "more than one IPv4 address".into())),
            };
            let router_advertisements = match &r.router_advertisements {
                Some(ra) if *ra.get_ref() && !addrs6.iter().any(|a| a.1 == 64) => {
                    return Err(err(
                        ra.span().start,
                        format!("interface[{i}].router_advertisements"),
                        "needs an IPv6 /64 in `address`: hosts configure themselves from /64s only (RFC 4862)".into(),
                    ))
                }
                Some(ra) => *ra.get_ref(),
                None => false,
            };
            let mtu = match &r.mtu {
                Some(m) if !(68..=9216).contains(m.get_ref()) => {
                    return Err(err(
                        m.span().start,
                        format!("interface[{i}].mtu"),
                        format!("{} is not 68 to 9216", m.get_ref()),
                    ))
                }
                Some(m) => Some(*m.get_ref() as usize),
                None => None,
            };
            let vlan = match (&r.parent, &r.vlan) {
                (None, None) => None,
                (Some(p), Some(v)) => {
                    let parent = interfaces
                        .iter()
                        .position(|x| &x.name == p.get_ref() && x.vlan.is_none())
                        .ok_or_else(|| {
                            err(
                                p.span().start,
                                format!("interface[{i}].parent"),
                                format!(
                                    "{:?} is not an untagged interface listed above",
                                    p.get_ref()
                                ),
                            )
                        })?;
                    let id = *v.get_ref();
                    if !(1..=4094).contains(&id) {
                        return Err(err(
                            v.span().start,
                            format!("interface[{i}].vlan"),
                            format!("{id} is not 1 to 4094"),
                        ));
                    }
                    if interfaces.iter().any(|x| x.vlan == Some((parent, id))) {
                        return Err(err(
                            v.span().start,
                            format!("interface[{i}].vlan"),
                            format!("VLAN {id} is already on {}", p.get_ref()),
                        ));
                    }
                    Some((parent, id))
                }
                (Some(p), None) => {
                    return Err(err(
                        p.span().start,
                        format!("interface[{i}].parent"),
                        "a sub-interface needs `vlan` too".into(),
                    ))
                }
                (None, Some(v)) => {
                    return Err(err(
                        v.span().start,
                        format!("interface[{i}].vlan"),
                        "a sub-interface needs `parent` too".into(),
                    ))
                }
            };
            interfaces.push(InterfaceConfig {
                name: name.clone(),
                addr,
                prefix_len,
                addrs6,
                mtu,
                vlan,
                router_advertisements,
            });
        }
        if interfaces.is_empty() {
            return Err(err(
                0,
                "interface".into(),
                "no [[interface]] given; a forwarder needs at least one".into(),
            ));
        }
        // A star member reaches the other members' networks too (checked below).
        let star_nets: Vec<Prefix> = raw
            .star
            .iter()
            .flat_map(|s| s.member.iter())
            .flat_map(|m| m.networks.iter())
            .filter_map(|n| Prefix::parse_strict(n.prefix.get_ref()).ok())
            .collect();
        let star_nets6: Vec<fib::Prefix6> = raw
            .star
            .iter()
            .flat_map(|s| s.member.iter())
            .flat_map(|m| m.networks.iter())
            .filter_map(|n| fib::Prefix6::parse_strict(n.prefix.get_ref()).ok())
            .collect();
        let gateways = |v: &Spanned<Via>, key: String| -> Result<Vec<Ipv4Addr>, ConfigError> {
            let texts: Vec<&String> = match v.get_ref() {
                Via::One(v) => vec![v],
                Via::Many(v) => v.iter().collect(),
            };
            if texts.is_empty() {
                return Err(err(v.span().start, key, "no gateway given".into()));
            }
            let mut out = Vec::new();
            for t in texts {
                let a: Ipv4Addr = t.parse().map_err(|_| {
                    err(
                        v.span().start,
                        key.clone(),
                        format!("{t:?} is not an IPv4 address"),
                    )
                })?;
                if !interfaces
                    .iter()
                    .any(|x| Prefix::new(x.addr, x.prefix_len).contains(a))
                    && !star_nets.iter().any(|p| p.contains(a))
                {
                    return Err(err(
                        v.span().start,
                        key,
                        format!("gateway {a} is on none of the interfaces' networks"),
                    ));
                }
                out.push(a);
            }
            Ok(out)
        };
        let mut routes = Vec::new();
        let mut routes6 = Vec::new();
        for (i, r) in raw.route.iter().enumerate() {
            if r.prefix.get_ref().contains(':') {
                routes6.push(
                    route6(src, &interfaces, &star_nets6, r, i)
                        .map_err(|(at, key, m)| err(at, key, m))?,
                );
                continue;
            }
            let prefix = Prefix::parse_strict(r.prefix.get_ref()).map_err(|e| {
                err(
                    r.prefix.span().start,
                    format!("route[{i}].prefix"),
                    format!("{:?}: {e}", r.prefix.get_ref()),
                )
            })?;
            let via = gateways(&r.via, format!("route[{i}].via"))?;
            routes.push(RouteConfig {
                prefix,
                via,
                line: line_of(src, r.prefix.span().start),
            });
        }
        let routes_file = routes_file_path(path, src, raw.routes_file.as_ref())?;
        let mut routes_file_via6 = Vec::new();
        let routes_file_via = match &raw.routes_file_via {
            Some(v) if raw.routes_file.is_none() => {
                return Err(err(
                    v.span().start,
                    "routes_file_via".into(),
                    "set without routes_file".into(),
                ))
            }
            Some(v) => {
                // IPv6 gateways apart; the rest are IPv4 ones.
                let key = "routes_file_via".to_string();
                let (six, four): (Vec<&String>, Vec<&String>) = match v.get_ref() {
                    Via::One(t) => vec![t],
                    Via::Many(t) => t.iter().collect(),
                }
                .into_iter()
                .partition(|t| t.contains(':'));
                if !six.is_empty() {
                    routes_file_via6 = gateways6(&six, &interfaces, &star_nets6)
                        .map_err(|m| err(v.span().start, key.clone(), m))?;
                }
                if four.is_empty() {
                    Vec::new()
                } else {
                    let four =
                        Spanned::new(v.span(), Via::Many(four.into_iter().cloned().collect()));
                    gateways(&four, key)?
                }
            }
            None => Vec::new(),
        };
        let backend = match &raw.backend {
            None => None,
            Some(b) => {
                let internal = interfaces
                    .iter()
                    .position(|x| &x.name == b.internal.get_ref() && x.vlan.is_none())
                    .ok_or_else(|| {
                        err(
                            b.internal.span().start,
                            "backend.internal".into(),
                            format!(
                                "{:?} is not an untagged interface of this forwarder",
                                b.internal.get_ref()
                            ),
                        )
                    })?;
                let hello_interval_ms = match &b.hello_interval_ms {
                    Some(h) if !(10..=60_000).contains(h.get_ref()) => {
                        return Err(err(
                            h.span().start,
                            "backend.hello_interval_ms".into(),
                            format!("{} is not 10 to 60000", h.get_ref()),
                        ))
                    }
                    Some(h) => *h.get_ref(),
                    None => 100,
                };
                Some(BackendConfig {
                    internal,
                    hello_interval_ms,
                })
            }
        };
        let star = match &raw.star {
            None => None,
            Some(s) => {
                let internal = interfaces
                    .iter()
                    .position(|x| &x.name == s.internal.get_ref() && x.vlan.is_none())
                    .ok_or_else(|| {
                        err(
                            s.internal.span().start,
                            "star.internal".into(),
                            format!(
                                "{:?} is not an untagged interface of this forwarder",
                                s.internal.get_ref()
                            ),
                        )
                    })?;
                if backend.is_some() {
                    return Err(err(
                        s.internal.span().start,
                        "star".into(),
                        "a forwarder is a star member or a back-end, not both".into(),
                    ));
                }
                let mut members = Vec::new();
                let mut members6 = Vec::new();
                for (i, m) in s.member.iter().enumerate() {
                    let mac: wire::MacAddr = m.mac.get_ref().parse().map_err(|_| {
                        err(
                            m.mac.span().start,
                            format!("star.member[{i}].mac"),
                            format!("{:?} is not a MAC address", m.mac.get_ref()),
                        )
                    })?;
                    for (j, n) in m.networks.iter().enumerate() {
                        let port = *n.port.get_ref();
                        if !(0..=254).contains(&port) {
                            return Err(err(
                                n.port.span().start,
                                format!("star.member[{i}].networks[{j}].port"),
                                format!("{port} is not a port index (0 to 254)"),
                            ));
                        }
                        let key = format!("star.member[{i}].networks[{j}].prefix");
                        let at = n.prefix.span().start;
                        let text = n.prefix.get_ref();
                        if text.contains(':') {
                            let p = fib::Prefix6::parse_strict(text)
                                .map_err(|e| err(at, key, format!("{text:?}: {e}")))?;
                            members6.push((p, mac, port as u8));
                        } else {
                            let p = Prefix::parse_strict(text)
                                .map_err(|e| err(at, key, format!("{text:?}: {e}")))?;
                            members.push((p, mac, port as u8));
                        }
                    }
                }
                Some(StarConfig {
                    internal,
                    members,
                    members6,
                })
            }
        };
        Ok(ForwarderFile {
            star,
            path: path.into(),
            interfaces,
            routes,
            routes6,
            routes_file,
            routes_file_via,
            routes_file_via6,
            tuning: raw.tuning,
            backend,
            io: IoConfig::from_raw(path, src, raw.io.as_ref())?,
            dist: DistConfig::from_raw(path, src, raw.dist.as_ref())?,
            metrics: RawMetrics::check(path, src, raw.metrics.as_ref())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
[[interface]]
name = "r-eth0"
address = "10.1.0.1/24"

[[interface]]
name = "r-eth1"
address = "10.2.0.1/24"

[[route]]
prefix = "10.3.0.0/16"
via = "10.2.0.2"
"#;

    fn parse(s: &str) -> Result<ForwarderFile, ConfigError> {
        ForwarderFile::parse(Path::new("r.toml"), s)
    }

    #[test]
    fn the_documented_example_parses() {
        let c = parse(EXAMPLE).unwrap();
        assert_eq!(c.interfaces.len(), 2);
        assert_eq!(c.interfaces[1].addr, Ipv4Addr::new(10, 2, 0, 1));
        assert_eq!(c.routes[0].prefix.to_string(), "10.3.0.0/16");
        assert_eq!(c.routes[0].via, vec![Ipv4Addr::new(10, 2, 0, 2)]);
        let ecmp =
            parse(&EXAMPLE.replace("via = \"10.2.0.2\"", "via = [\"10.2.0.2\", \"10.2.0.3\"]"))
                .unwrap();
        assert_eq!(ecmp.routes[0].via.len(), 2);
        assert_eq!(c.routes[0].line, 11);
        assert_eq!(c.tuning, ForwarderConfig::default());
        assert_eq!(c.io, IoConfig::default());
        let io = parse(&format!(
            "{EXAMPLE}\n[io]\nbackend = \"packet\"\nbusy_poll = true\n"
        ))
        .unwrap()
        .io;
        assert_eq!((io.backend, io.busy_poll), (io::Backend::Packet, true));
        assert_eq!(io.packet_ring, io::RxRing::Frames);
        let io = parse(&format!("{EXAMPLE}\n[io]\npacket_ring = \"blocks\"\n"))
            .unwrap()
            .io;
        assert_eq!((io.packet_ring, io.workers), (io::RxRing::Blocks, 1));
        assert!(io.shared_umem);
        assert_eq!(io.slow_path_limit, io::fastpath::SLOW_PATH_LIMIT);
        let io = parse(&format!("{EXAMPLE}\n[io]\nslow_path_limit = 0\n"))
            .unwrap()
            .io;
        assert_eq!(io.slow_path_limit, 0);
        let io = parse(&format!("{EXAMPLE}\n[io]\nshared_umem = false\n"))
            .unwrap()
            .io;
        assert!(!io.shared_umem);
        let io = parse(&format!("{EXAMPLE}\n[io]\nworkers = 2\n"))
            .unwrap()
            .io;
        assert_eq!(io.workers, 2);
        assert_eq!(io.priority, None);
        let io = parse(&format!("{EXAMPLE}\n[io]\npriority = 60\n"))
            .unwrap()
            .io;
        assert_eq!(io.priority, Some(60));
        let io = parse(&format!("{EXAMPLE}\n[io]\ncpus = \"4-5,7\"\n"))
            .unwrap()
            .io;
        assert_eq!(io.cpus.map(|c| c.cpus()), Some(vec![4, 5, 7]));
        let m = parse(&format!(
            "{EXAMPLE}\n[metrics]\nlisten = \"127.0.0.1:9100\"\nelement = \"r1\"\n"
        ))
        .unwrap()
        .metrics;
        assert_eq!(m.listen, Some("127.0.0.1:9100".parse().unwrap()));
        assert_eq!(m.element.as_deref(), Some("r1"));
    }

    /// `address` takes a list with IPv6 prefixes; `[[route]]` takes IPv6 prefixes through
    /// a gateway on one of them.
    #[test]
    fn ipv6_addresses_and_routes() {
        let src = EXAMPLE
            .replace("\"10.2.0.1/24\"", "[\"10.2.0.1/24\", \"2001:db8:2::1/64\"]")
            .replace("prefix = \"10.3.0.0/16\"", "prefix = \"2001:db8:3::/48\"")
            .replace("via = \"10.2.0.2\"", "via = \"2001:db8:2::2\"");
        let c = parse(&src).unwrap();
        assert_eq!(c.interfaces[1].addr, Ipv4Addr::new(10, 2, 0, 1));
        assert_eq!(
            c.interfaces[1].addrs6,
            vec![("2001:db8:2::1".parse().unwrap(), 64)]
        );
        assert!(c.interfaces[0].addrs6.is_empty());
        assert_eq!(c.routes6.len(), 1);
        assert_eq!(c.routes6[0].prefix.to_string(), "2001:db8:3::/48");
        assert_eq!(
            c.routes6[0].via,
            ["2001:db8:2::2".parse::<std::net::Ipv6Addr>().unwrap()]
        );
        assert_eq!(c.routes6[0].line, 11);
    }

    /// Each bad file gives an error with the right line and key.
    #[test]
    fn errors_name_line_and_key() {
        let cases = [
            (
                EXAMPLE.replace("10.2.0.1/24", "10.2.0.1/33"),
                8,
                "interface[1].address",
                "prefix length",
            ),
            (
                EXAMPLE.replace("10.2.0.1/24", "10.2.0.300/24"),
                8,
                "interface[1].address",
                "not an IPv4",
            ),
            (
                EXAMPLE.replace("10.3.0.0/16", "10.3.0.1/16"),
                11,
                "route[0].prefix",
                "host bits",
            ),
            (
                EXAMPLE.replace("\"10.2.0.1/24\"", "[\"10.2.0.1/24\", \"2001:db8::1/129\"]"),
                8,
                "interface[1].address",
                "not 1 to 128",
            ),
            (
                EXAMPLE.replace("\"10.2.0.1/24\"", "[\"10.2.0.1/24\", \"fe80::1/64\"]"),
                8,
                "interface[1].address",
                "link-local address comes from the MAC",
            ),
            (
                EXAMPLE.replace("\"10.2.0.1/24\"", "[\"2001:db8::1/64\"]"),
                8,
                "interface[1].address",
                "an IPv4 address is needed",
            ),
            (
                EXAMPLE.replace("\"10.2.0.1/24\"", "[\"10.2.0.1/24\", \"10.9.0.1/24\"]"),
                8,
                "interface[1].address",
                "more than one IPv4",
            ),
            (
                EXAMPLE.replace("prefix = \"10.3.0.0/16\"", "prefix = \"2001:db8:3::/48\""),
                12,
                "route[0].via",
                "not an IPv6 address",
            ),
            (
                EXAMPLE
                    .replace("\"10.2.0.1/24\"", "[\"10.2.0.1/24\", \"2001:db8:2::1/64\"]")
                    .replace("prefix = \"10.3.0.0/16\"", "prefix = \"2001:db8:3::/48\"")
                    .replace("via = \"10.2.0.2\"", "via = \"2001:db8:9::2\""),
                12,
                "route[0].via",
                "none of the interfaces' IPv6 networks",
            ),
            (
                EXAMPLE.replace("via = \"10.2.0.2\"", "via = \"192.0.2.1\""),
                12,
                "route[0].via",
                "none of the interfaces",
            ),
            (
                EXAMPLE.replace("address = \"10.1.0.1/24\"", "adress = \"10.1.0.1/24\""),
                4,
                "adress",
                "unknown field",
            ),
            (
                EXAMPLE.replace("name = \"r-eth1\"", "name = 5"),
                7,
                "name",
                "invalid type",
            ),
            (
                EXAMPLE.replace("name = \"r-eth1\"", "name = \"r-eth0\""),
                7,
                "interface[1].name",
                "twice",
            ),
            (
                format!("{EXAMPLE}\n[tuning]\nicmp_burst = \"x\"\n"),
                15,
                "icmp_burst",
                "invalid type",
            ),
            (
                format!("{EXAMPLE}\n[io]\nbackend = \"dpdk\"\n"),
                15,
                "io.backend",
                "is not \"auto\", \"xdp\" or \"packet\"",
            ),
            (
                format!("{EXAMPLE}\n[io]\nbusy_poll = 1\n"),
                15,
                "busy_poll",
                "invalid type",
            ),
            (
                format!("{EXAMPLE}\n[io]\nslow_path_limit = -1\n"),
                15,
                "io.slow_path_limit",
                "frames per second",
            ),
            (
                format!("{EXAMPLE}\n[io]\nshared_umem = \"yes\"\n"),
                15,
                "shared_umem",
                "invalid type",
            ),
            (
                format!("{EXAMPLE}\n[io]\npacket_ring = \"v3\"\n"),
                15,
                "io.packet_ring",
                "is not \"frames\" or \"blocks\"",
            ),
            (
                format!("{EXAMPLE}\n[io]\nworkers = 0\n"),
                15,
                "io.workers",
                "from 1 to 64",
            ),
            (
                format!("{EXAMPLE}\n[io]\npriority = 100\n"),
                15,
                "io.priority",
                "from 1 to 99",
            ),
            (
                format!("{EXAMPLE}\n[io]\npriority = 0\n"),
                15,
                "io.priority",
                "from 1 to 99",
            ),
            (
                format!("{EXAMPLE}\n[io]\ncpus = \"5-4\"\n"),
                15,
                "io.cpus",
                "from the lower CPU to the higher",
            ),
            (
                format!("{EXAMPLE}\n[io]\ncpus = \"x\"\n"),
                15,
                "io.cpus",
                "not a CPU number",
            ),
            (
                format!("{EXAMPLE}\n[star]\ninternal = \"nope\"\n"),
                15,
                "star.internal",
                "is not an untagged interface",
            ),
            (
                format!("{EXAMPLE}\n[star]\ninternal = \"r-eth0\"\n[[star.member]]\nmac = \"02:00:00:00:05:01\"\nnetworks = [{{ prefix = \"10.1.0.0/24\", port = 300 }}]\n"),
                18,
                "star.member[0].networks[0].port",
                "is not a port index",
            ),
            (
                format!("{EXAMPLE}\n[star]\ninternal = \"r-eth0\"\n[[star.member]]\nmac = \"02:00:00:00:05:01\"\nnetworks = [{{ prefix = \"fd00:1::/64\", port = 255 }}]\n"),
                18,
                "star.member[0].networks[0].port",
                "is not a port index",
            ),
            (
                format!("{EXAMPLE}\n[star]\ninternal = \"r-eth0\"\n[[star.member]]\nmac = \"02:00:00:00:05:01\"\nnetworks = [{{ prefix = \"fd00:1::1/64\", port = 1 }}]\n"),
                18,
                "star.member[0].networks[0].prefix",
                "host bits",
            ),
            (
                format!("{EXAMPLE}\n[metrics]\nlisten = \"9100\"\n"),
                15,
                "metrics.listen",
                "is not ADDR:PORT",
            ),
            (
                format!("{EXAMPLE}\n[io]\nworker = 2\n"),
                15,
                "worker",
                "unknown field",
            ),
        ];
        for (src, line, key, msg) in cases {
            let e = parse(&src).unwrap_err();
            assert_eq!((e.line, e.key.as_str()), (line, key), "{e}");
            assert!(e.message.contains(msg), "{e}");
            assert!(
                e.to_string()
                    .starts_with(&format!("r.toml:{line}: key `{key}`")),
                "{e}"
            );
        }
        assert!(parse("").unwrap_err().message.contains("no [[interface]]"));
    }

    const BACKEND: &str = r#"
[[interface]]
name = "r1-int"
address = "10.255.0.11/24"

[[interface]]
name = "ext-a"
parent = "r1-int"
vlan = 10
address = "10.1.0.1/24"

[backend]
internal = "r1-int"
hello_interval_ms = 200
"#;

    /// `[dist]`: a key file relative to the config file; errors name the line and key.
    #[test]
    fn dist_key_file() {
        let dir = std::env::temp_dir().join(format!("tessera-dist-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("r.toml");
        std::fs::write(dir.join("good.key"), format!("{}\n", "a1".repeat(32))).unwrap();
        std::fs::write(dir.join("short.key"), "a1a1a1").unwrap();
        let at = |tail: &str| ForwarderFile::parse(&cfg, &format!("{EXAMPLE}\n[dist]\n{tail}"));
        let c = at("key_file = \"good.key\"\nmax_age_s = 5\n").unwrap();
        assert!(c.dist.key().is_some());
        assert_eq!(c.dist.max_age, std::time::Duration::from_secs(5));
        assert!(
            !format!("{:?}", c.dist).contains("a1a1"),
            "Debug hides the key"
        );
        assert!(parse(EXAMPLE).unwrap().dist.key().is_none());
        let line = EXAMPLE.lines().count() + 3;
        for (tail, want) in [
            ("key_file = \"nope.key\"", "cannot read"),
            ("key_file = \"short.key\"", "at least 16 bytes"),
        ] {
            let e = at(tail).unwrap_err();
            assert_eq!((e.line, e.key.as_str()), (line, "dist.key_file"), "{e}");
            assert!(e.message.contains(want), "{e}");
        }
        let e = at("key = \"00\"").unwrap_err();
        assert!(e.message.contains("unknown field"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn backend_sub_interfaces() {
        let c = parse(BACKEND).unwrap();
        assert_eq!(c.interfaces[1].vlan, Some((0, 10)));
        assert_eq!(
            c.backend,
            Some(BackendConfig {
                internal: 0,
                hello_interval_ms: 200
            })
        );
        let cases = [
            (
                BACKEND.replace("vlan = 10", "vlan = 4095"),
                9,
                "interface[1].vlan",
                "not 1 to 4094",
            ),
            (
                BACKEND.replace("parent = \"r1-int\"", "parent = \"nope\""),
                8,
                "interface[1].parent",
                "not an untagged interface",
            ),
            (
                BACKEND.replace("vlan = 10\n", ""),
                8,
                "interface[1].parent",
                "needs `vlan`",
            ),
            (
                BACKEND.replace("internal = \"r1-int\"", "internal = \"ext-a\""),
                13,
                "backend.internal",
                "not an untagged",
            ),
            (
                BACKEND.replace("= 200", "= 5"),
                14,
                "backend.hello_interval_ms",
                "not 10 to",
            ),
        ];
        for (src, line, key, msg) in cases {
            let e = parse(&src).unwrap_err();
            assert_eq!((e.line, e.key.as_str()), (line, key), "{e}");
            assert!(e.message.contains(msg), "{e}");
        }
    }
}
