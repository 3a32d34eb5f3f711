//! The tables every element's config shares: `[metrics]`, `[io]` and `[dist]`, as written
//! and as the element runs with them.

use super::*;

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
    /// seconds. 0: it stops with the process. Forwarders (star members and back-ends too)
    /// and LBs on AF_XDP ports (not tcx); an LB's successor starts from its own config and
    /// publishes its own state, so only the links and the deadline are kept; a back-end's
    /// leaves the predecessor's programs running for three of its hello intervals, while
    /// the LBs learn of it.
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
