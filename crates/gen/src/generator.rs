//! `tessera gen`: constant-bit-rate UDP test traffic, over IPv4 or IPv6, out of one
//! interface.
//!
//! Frames are built once per flow as templates and written straight into the AF_PACKET
//! transmit ring. Over IPv4 the UDP checksum is zero, which IPv4 allows, so the per-packet
//! work is a copy and three header fields; IPv6 requires a UDP checksum (RFC 8200 8.1), so
//! each frame gets one, summed over the few bytes that change (the destination and the
//! probe: the rest of the payload is zero). The XDP generator cannot sum per frame and sends
//! IPv6 frames with a zero UDP checksum, which routers do not look at; the sink does not
//! check it either. Pacing: the generator computes how many packets are due since
//! the start at the target rate and sends that many, spinning between sends, so errors do
//! not accumulate; the gaps between the send timestamps it writes are reported.

use crate::rate::{self, Rate};
use crate::{now_ns, Stats};
use fib::{Prefix, Prefix6};
use serde_json::{json, Value};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use wire::probe::Probe;
use wire::{checksum, MacAddr};

/// Where packets go.
#[derive(Debug, Clone)]
pub enum Destinations {
    /// One destination; `flows` flows differ by UDP source port.
    One(IpAddr),
    /// Destinations drawn at random from these prefixes ("many flows"), one sequence.
    Prefixes(Vec<Prefix>),
    /// As `Prefixes`, over IPv6.
    Prefixes6(Vec<Prefix6>),
}

#[derive(Debug, Clone)]
pub struct GenConfig {
    pub iface: String,
    pub dst_mac: MacAddr,
    /// The source address; its family is the traffic's.
    pub src: IpAddr,
    pub dst: Destinations,
    pub flows: u16,
    /// First flow id (several generators at once use different ones).
    pub flow_base: u16,
    /// Frame size on the wire, FCS included: 64 to 1518.
    pub size: usize,
    pub rate: Rate,
    pub duration: Option<f64>,
    pub count: Option<u64>,
    pub dst_port: u16,
    pub seed: u64,
    /// Send with the XDP generator ([`io::xdp`]) instead of the AF_PACKET ring.
    pub xdp: bool,
    /// When no packet is due, sleep this many microseconds instead of spinning (0: spin).
    /// Packets then leave in small bursts (as many as fell due while asleep) but the rate
    /// stays exact, and the generator leaves the core to others: several generators, the
    /// device under test and a sink can share two cores.
    pub sleep_us: u64,
}

const MAX_BURST: usize = 256;
const L3: usize = 14;

/// Where a frame's fields lie, by family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    six: bool,
    dst_at: usize,
    /// The IPv4 header checksum (IPv4 only).
    csum_at: usize,
    udp_at: usize,
    probe_at: usize,
}

const V4: Layout = Layout {
    six: false,
    dst_at: L3 + 16,
    csum_at: L3 + 10,
    udp_at: L3 + 20,
    probe_at: L3 + 28,
};
const V6: Layout = Layout {
    six: true,
    dst_at: L3 + 24,
    csum_at: 0,
    udp_at: L3 + 40,
    probe_at: L3 + 48,
};

/// The smallest frame over IPv4 (Ethernet's minimum) and over IPv6 (Ethernet, IPv6 and
/// UDP headers, the probe and the FCS), FCS included.
pub const MIN_SIZE: usize = 64;
pub const MIN_SIZE6: usize = V6.probe_at + wire::probe::LEN + 4;

impl GenConfig {
    fn layout(&self) -> Layout {
        if self.src.is_ipv6() {
            V6
        } else {
            V4
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        let min = if self.src.is_ipv6() {
            MIN_SIZE6
        } else {
            MIN_SIZE
        };
        if !(min..=1518).contains(&self.size) {
            return Err(format!(
                "--size {}: frames are {min} to 1518 bytes (FCS included) over {}",
                self.size,
                if self.src.is_ipv6() { "IPv6" } else { "IPv4" }
            ));
        }
        let family_ok = match &self.dst {
            Destinations::One(d) => d.is_ipv6() == self.src.is_ipv6(),
            Destinations::Prefixes(_) => self.src.is_ipv4(),
            Destinations::Prefixes6(_) => self.src.is_ipv6(),
        };
        if !family_ok {
            return Err("--src and the destinations are of different families".into());
        }
        if self.xdp && self.sleep_us > 0 {
            return Err(
                "--sleep-us paces the AF_PACKET ring; the XDP generator is paced in the kernel"
                    .into(),
            );
        }
        if self.flows == 0 {
            return Err("--flows must be at least 1".into());
        }
        if self.duration.is_none() && self.count.is_none() {
            return Err("give --duration SECONDS or --count PACKETS".into());
        }
        let empty = match &self.dst {
            Destinations::One(_) => false,
            Destinations::Prefixes(p) => p.is_empty(),
            Destinations::Prefixes6(p) => p.is_empty(),
        };
        if empty {
            return Err(format!(
                "--dst-prefixes: no {} prefix in the file",
                if self.src.is_ipv6() { "IPv6" } else { "IPv4" }
            ));
        }
        Ok(())
    }

    /// The first destination.
    fn first_dst(&self) -> IpAddr {
        match &self.dst {
            Destinations::One(d) => *d,
            Destinations::Prefixes(p) => p[0].addr().into(),
            Destinations::Prefixes6(p) => p[0].addr().into(),
        }
    }
}

/// Builds the frame of flow `i` (without FCS: `size - 4` bytes).
pub(crate) fn template(cfg: &GenConfig, src_mac: MacAddr, i: u16, dst: IpAddr) -> Vec<u8> {
    let lay = cfg.layout();
    let payload_len = cfg.size - 4 - lay.probe_at;
    let src_port = 1024u16.wrapping_add(i);
    match (cfg.src, dst) {
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            let mut f = vec![0u8; cfg.size - 4];
            f[..6].copy_from_slice(&cfg.dst_mac.0);
            f[6..12].copy_from_slice(&src_mac.0);
            f[12..14].copy_from_slice(&wire::ethernet::ethertype::IPV6.to_be_bytes());
            let udp = wire::udp::Repr {
                src_port,
                dst_port: cfg.dst_port,
                payload_len,
            };
            let ip = wire::ipv6::Repr {
                src,
                dst,
                next_header: wire::ipv6::next_header::UDP,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
                payload_len: 8 + payload_len,
            };
            let (_, rest) = f.split_at_mut(L3);
            let emitted = ip.emit(rest).is_ok() && udp.emit6(&mut rest[40..], src, dst).is_ok();
            debug_assert!(emitted, "sized above");
            f
        }
        (src, dst) => {
            let v4 = |a: IpAddr| match a {
                IpAddr::V4(a) => a,
                IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
            };
            let payload = vec![0u8; payload_len];
            let mut f = wire::frame::UdpFrame {
                eth_dst: cfg.dst_mac,
                eth_src: src_mac,
                src: v4(src),
                dst: v4(dst),
                src_port,
                dst_port: cfg.dst_port,
                payload: &payload,
                ..Default::default()
            }
            .to_vec();
            f[lay.udp_at + 6..lay.udp_at + 8].fill(0); // UDP checksum: none
            f
        }
    }
}

/// The part of an IPv6 frame's UDP checksum that does not change per frame: the pseudo
/// header without its destination. The rest is summed per frame by [`fill_udp6`].
pub(crate) fn udp6_base(cfg: &GenConfig) -> u32 {
    match cfg.src {
        IpAddr::V6(src) => wire::checksum::pseudo_header6(
            src,
            Ipv6Addr::UNSPECIFIED,
            wire::ipv6::next_header::UDP,
            (cfg.size - 4 - V6.udp_at) as u32,
        ),
        IpAddr::V4(_) => 0,
    }
}

/// Sets the UDP checksum of an IPv6 frame whose payload past the probe is zero: `base`
/// plus the destination, the UDP header and the probe.
pub(crate) fn fill_udp6(f: &mut [u8], base: u32) {
    let (u, p) = (V6.udp_at, V6.probe_at);
    f[u + 6..u + 8].fill(0);
    let s = base
        + checksum::sum(&f[V6.dst_at..V6.dst_at + 16])
        + checksum::sum(&f[u..p + wire::probe::LEN]);
    let c = match !checksum::fold(s) {
        0 => 0xffff,
        c => c,
    };
    f[u + 6..u + 8].copy_from_slice(&c.to_be_bytes());
}

/// The frames of flows `0..cfg.flows` to `dst`.
fn flow_templates(cfg: &GenConfig, src_mac: MacAddr, dst: IpAddr) -> Vec<Vec<u8>> {
    (0..cfg.flows)
        .map(|i| template(cfg, src_mac, i, dst))
        .collect()
}

/// A destination for "many flows": a random prefix of `prefixes`, a random address in it
/// (xorshift on `rng`).
fn random_dst(rng: &mut u64, prefixes: &[Prefix]) -> u32 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    let p = prefixes[((*rng >> 32) as usize * prefixes.len()) >> 32];
    p.bits() | (*rng as u32 & !fib::mask(p.len()))
}

/// As [`random_dst`], over IPv6.
fn random_dst6(rng: &mut u64, prefixes: &[Prefix6]) -> u128 {
    let mut next = || {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        *rng
    };
    let pick = next();
    let p = prefixes[((pick >> 32) as usize * prefixes.len()) >> 32];
    let host = (next() as u128) << 64 | next() as u128;
    p.bits() | (host & !fib::v6::mask6(p.len()))
}

/// The transmit port on `iface` (a small receive ring: the generator receives nothing) and
/// the interface's MAC.
fn open_tx(iface: &str) -> Result<(io::AfPacket, MacAddr), String> {
    let port = io::AfPacket::open(
        iface,
        io::RingConfig {
            rx_blocks: 1,
            tx_frames: 4096,
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let mac = MacAddr(io::netdev::mac(iface).map_err(|e| e.to_string())?);
    Ok((port, mac))
}

/// End markers, three times each, carrying the per-flow totals.
fn end_markers(
    cfg: &GenConfig,
    port: &mut io::AfPacket,
    templates: &[Vec<u8>],
    seqs: &[u64],
) -> Result<(), String> {
    let (flow_base, lay, base) = (cfg.flow_base, cfg.layout(), udp6_base(cfg));
    let flows = templates.len();
    for _ in 0..3 {
        let mut f = 0;
        while f < flows {
            let k = port
                .send_fill(flows - f, |i, slot| {
                    let t = &templates[f + i];
                    slot[..t.len()].copy_from_slice(t);
                    let p = Probe {
                        end: true,
                        flow: flow_base.wrapping_add((f + i) as u16),
                        seq: seqs[f + i],
                        sent_ns: now_ns(),
                    };
                    let _ = p.emit(&mut slot[lay.probe_at..]);
                    if lay.six {
                        fill_udp6(&mut slot[..t.len()], base);
                    }
                    t.len()
                })
                .map_err(|e| e.to_string())?;
            f += k;
        }
    }
    Ok(())
}

/// Destinations the XDP program draws from: [`XDP_DESTS`] addresses drawn from `prefixes`
/// as the AF_PACKET path draws them per frame (a random prefix, a random address in it),
/// each with the IPv4 header checksum of `frame` carrying it.
fn xdp_dests(frame: &[u8], prefixes: &[Prefix], seed: u64) -> io::xdp::Dests {
    let mut rng = seed.max(1);
    let mut hdr = [0u8; 20];
    hdr.copy_from_slice(&frame[L3..L3 + 20]);
    let entries = (0..XDP_DESTS)
        .map(|_| {
            let dst = random_dst(&mut rng, prefixes).to_be_bytes();
            hdr[16..20].copy_from_slice(&dst);
            hdr[10..12].fill(0);
            let c = wire::checksum::checksum(&hdr).to_be_bytes();
            [dst[0], dst[1], dst[2], dst[3], c[0], c[1], 0, 0]
        })
        .collect();
    io::xdp::Dests {
        addr_at: V4.dst_at as u16,
        csum_at: Some(V4.csum_at as u16),
        entries,
    }
}

/// As [`xdp_dests`] over IPv6: the upper 64 bits of each destination (drawn as
/// [`random_dst6`] draws them; the lower 64 stay the template's, so a prefix longer than
/// /64 is reached only by chance).
fn xdp_dests6(dst_at: usize, prefixes: &[Prefix6], seed: u64) -> io::xdp::Dests {
    let mut rng = seed.max(1);
    let entries = (0..XDP_DESTS)
        .map(|_| {
            let d = random_dst6(&mut rng, prefixes).to_be_bytes();
            let mut e = [0u8; 8];
            e.copy_from_slice(&d[..8]);
            e
        })
        .collect();
    io::xdp::Dests {
        addr_at: dst_at as u16,
        csum_at: None,
        entries,
    }
}

/// The core the calling thread runs on.
fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu has no arguments and no preconditions.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}

/// Pins the calling thread (and the threads it starts afterwards) to core `cpu`.
fn pin(cpu: usize) -> bool {
    // SAFETY: set is a plain bit set, zeroed, then one bit set; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// How many destinations `--xdp --dst-prefixes` draws at the start (a power of two); the
/// program then picks one at random per frame.
pub const XDP_DESTS: usize = 1 << 18;

/// Sends until the count or duration is reached or `stop` is set; returns the summary.
pub fn run(cfg: &GenConfig, stop: &AtomicBool) -> Result<Value, String> {
    run_then(cfg, stop, &mut |_| {})
}

/// As [`run`]; `done` gets the summary as soon as it is final, while the socket and the
/// program are still open: what follows (the ring's last frames leaving, the socket's
/// close, which waits out RCU grace periods: 40 ms and more) need not delay whoever waits
/// for the summary (`tessera gen` prints it and closes its standard output there).
pub fn run_then(
    cfg: &GenConfig,
    stop: &AtomicBool,
    done: &mut dyn FnMut(&Value),
) -> Result<Value, String> {
    cfg.validate()?;
    if cfg.xdp {
        return run_xdp(cfg, stop, done);
    }
    let (mut port, src_mac) = open_tx(&cfg.iface)?;
    let (templates, prefixes, prefixes6) = match &cfg.dst {
        Destinations::One(d) => (flow_templates(cfg, src_mac, *d), &[][..], &[][..]),
        Destinations::Prefixes(p) => {
            let t = template(cfg, src_mac, 0, cfg.first_dst());
            (vec![t], &p[..], &[][..])
        }
        Destinations::Prefixes6(p) => {
            let t = template(cfg, src_mac, 0, cfg.first_dst());
            (vec![t], &[][..], &p[..])
        }
    };
    let (lay, base6) = (cfg.layout(), udp6_base(cfg));
    let (dst_at, csum_at) = (lay.dst_at, lay.csum_at);
    let flows = templates.len();
    let target = cfg.rate.pps(cfg.size);
    let interval = target.map(|p| 1e9 / p);
    let limit = cfg.count.unwrap_or(u64::MAX);
    let deadline = cfg.duration.map(|d| (d * 1e9) as u64);
    let mut seqs = vec![0u64; flows];
    let mut rng = cfg.seed.max(1);
    let mut gaps = Stats::default();
    let mut last_ts = 0u64;
    let mut sent = 0u64;
    let mut ring_full = 0u64;
    if cfg.sleep_us > 0 {
        // Sleeps as short as asked: the default timer slack (50 us) would stretch them.
        // SAFETY: PR_SET_TIMERSLACK takes one integer argument and changes only this thread.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64, 0u64, 0u64, 0u64) };
    }
    let start = now_ns();
    let mut next = 0usize;
    loop {
        let now = now_ns();
        let elapsed = now.saturating_sub(start);
        if stop.load(Ordering::Relaxed) || sent >= limit || deadline.is_some_and(|d| elapsed >= d) {
            break;
        }
        let due = match interval {
            Some(iv) => ((elapsed as f64 / iv) as u64 + 1).saturating_sub(sent),
            None => MAX_BURST as u64,
        }
        .min(MAX_BURST as u64)
        .min(limit - sent) as usize;
        if due == 0 {
            if cfg.sleep_us > 0 {
                std::thread::sleep(std::time::Duration::from_micros(cfg.sleep_us));
            } else {
                std::hint::spin_loop();
            }
            continue;
        }
        let n = port
            .send_fill(due, |_, slot| {
                let f = next;
                next = if next + 1 == flows { 0 } else { next + 1 };
                let t = &templates[f];
                slot[..t.len()].copy_from_slice(t);
                if !prefixes.is_empty() {
                    let dst = random_dst(&mut rng, prefixes);
                    let old = u32::from_be_bytes([
                        slot[dst_at],
                        slot[dst_at + 1],
                        slot[dst_at + 2],
                        slot[dst_at + 3],
                    ]);
                    slot[dst_at..dst_at + 4].copy_from_slice(&dst.to_be_bytes());
                    let c = checksum::update32(
                        u16::from_be_bytes([slot[csum_at], slot[csum_at + 1]]),
                        old,
                        dst,
                    );
                    slot[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
                } else if !prefixes6.is_empty() {
                    let dst = random_dst6(&mut rng, prefixes6);
                    slot[dst_at..dst_at + 16].copy_from_slice(&dst.to_be_bytes());
                }
                let ts = now_ns();
                let probe = Probe {
                    end: false,
                    flow: cfg.flow_base.wrapping_add(f as u16),
                    seq: seqs[f],
                    sent_ns: ts,
                };
                seqs[f] += 1;
                let _ = probe.emit(&mut slot[lay.probe_at..]);
                if lay.six {
                    fill_udp6(&mut slot[..t.len()], base6);
                }
                if last_ts != 0 {
                    gaps.add(ts.saturating_sub(last_ts) as f64);
                }
                last_ts = ts;
                t.len()
            })
            .map_err(|e| e.to_string())?;
        sent += n as u64;
        if n < due {
            ring_full += 1;
            std::hint::spin_loop();
        }
    }
    let secs = (last_ts.max(start) - start) as f64 / 1e9;
    end_markers(cfg, &mut port, &templates, &seqs)?;
    let achieved = if secs > 0.0 {
        (sent.saturating_sub(1)) as f64 / secs
    } else {
        0.0
    };
    let v = json!({
        "iface": cfg.iface,
        "sent": sent,
        "flows": flows,
        "frame_bytes": cfg.size,
        "target_pps": target,
        "achieved_pps": achieved.round(),
        "achieved_wire_bps": rate::wire_bps(achieved, cfg.size).round(),
        "duration_s": secs,
        "gap_ns": gaps.json(),
        "ring_full_events": ring_full,
        "per_flow_sent": seqs,
    });
    done(&v);
    // Let the kernel drain the ring before the socket closes.
    std::thread::sleep(std::time::Duration::from_millis(50));
    Ok(v)
}

/// The signal that cuts a worker's call short ([`Interrupt`]).
const INTERRUPT_SIGNAL: libc::c_int = libc::SIGURG;

/// Cuts the XDP generator's calls short: a signal with a handler that does nothing makes
/// the kernel end a `BPF_PROG_TEST_RUN` call under way (`EINTR`, which
/// [`io::xdp::XdpGen::run`] takes as the end of the call).
struct Interrupt;

extern "C" fn interrupt_noop(_: libc::c_int) {}

impl Interrupt {
    /// Installs the handler (SIGURG, ignored by default: nothing else of ours uses it).
    /// None where it cannot be installed: the calls then run to their end.
    fn install() -> Option<Interrupt> {
        // SAFETY: a zeroed sigaction with a handler that touches nothing, installed
        // for one signal; sigaction(2) reads it.
        let ok = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = interrupt_noop as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(INTERRUPT_SIGNAL, &sa, std::ptr::null_mut()) == 0
        };
        ok.then_some(Interrupt)
    }

    /// Signals each worker that has started and not ended until all have ended (a worker
    /// signalled just before it enters a call would otherwise run that call to its end).
    fn until_done(&self, workers: &[&WorkerThread]) {
        loop {
            let mut left = false;
            for w in workers {
                let tid = w.tid.load(Ordering::Acquire);
                if tid != 0 && !w.done.load(Ordering::Acquire) {
                    left = true;
                    // SAFETY: the thread has not been joined yet (the caller joins it
                    // after this returns), so its pthread_t is still valid.
                    unsafe { libc::pthread_kill(tid as libc::pthread_t, INTERRUPT_SIGNAL) };
                }
            }
            if !left {
                return;
            }
            std::thread::sleep(std::time::Duration::from_micros(500));
        }
    }
}

/// A worker thread of the XDP generator, as [`Interrupt`] sees it.
#[derive(Default)]
struct WorkerThread {
    tid: std::sync::atomic::AtomicU64,
    done: AtomicBool,
}

impl WorkerThread {
    fn started(&self) {
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() };
        self.tid.store(me as u64, Ordering::Release);
    }

    /// Marks the worker done when the returned guard drops (on every path out).
    fn on_exit(&self) -> impl Drop + '_ {
        struct Done<'a>(&'a AtomicBool);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
            }
        }
        Done(&self.done)
    }
}

/// The XDP generator: the kernel paces, numbers, stamps and sends each frame
/// ([`io::xdp`]); this loop only starts runs until the count or the duration is reached.
/// Gaps are not measured per frame here (`gap_ns` is null): the sink's interval rates show
/// the pacing. `tx_packets` is what the interface took; a veth whose peer cannot keep up
/// drops the rest (`device_dropped`): then the receiver, not the generator, is the limit.
/// The XDP generator's program for `cfg` (frames from `src_mac`), and the flows' frame
/// templates (for the end markers).
fn xdp_program(
    cfg: &GenConfig,
    src_mac: MacAddr,
) -> Result<(io::xdp::XdpGen, Vec<Vec<u8>>), String> {
    let (templates, dests) = match &cfg.dst {
        Destinations::One(dst) => (flow_templates(cfg, src_mac, *dst), None),
        Destinations::Prefixes(p) => {
            let t = template(cfg, src_mac, 0, cfg.first_dst());
            let d = xdp_dests(&t, p, cfg.seed);
            (vec![t], Some(d))
        }
        Destinations::Prefixes6(p) => {
            let t = template(cfg, src_mac, 0, cfg.first_dst());
            let d = xdp_dests6(cfg.layout().dst_at, p, cfg.seed);
            (vec![t], Some(d))
        }
    };
    let flows = templates.len() as u64;
    let lay = cfg.layout();
    let mut first = templates[0].clone();
    // The program rewrites the source port, the flow and the time without summing: over
    // IPv6 the frames carry no UDP checksum (zero).
    first[lay.udp_at + 6..lay.udp_at + 8].fill(0);
    let probe = Probe {
        end: false,
        flow: cfg.flow_base,
        seq: 0,
        sent_ns: 0,
    };
    let _ = probe.emit(&mut first[lay.probe_at..]);
    let at = io::xdp::Offsets {
        src_port: lay.udp_at as u16,
        flow: (lay.probe_at + 2) as u16,
        time: (lay.probe_at + 10) as u16,
    };
    let g = io::xdp::XdpGen::new(
        &cfg.iface,
        &first,
        flows as u16,
        cfg.flow_base,
        1024,
        at,
        dests,
    )
    .map_err(|e| format!("--xdp: {e}"))?;
    Ok((g, templates))
}

fn run_xdp(
    cfg: &GenConfig,
    stop: &AtomicBool,
    done: &mut dyn FnMut(&Value),
) -> Result<Value, String> {
    let (mut port, src_mac) = open_tx(&cfg.iface)?;
    let (mut g, templates) = xdp_program(cfg, src_mac)?;
    let flows = templates.len() as u64;
    let target = cfg.rate.pps(cfg.size);
    let limit = cfg.count.unwrap_or(u64::MAX);
    let duration_ns = cfg
        .duration
        .map(|d| (d * 1e9) as u64)
        .unwrap_or(u64::MAX / 2);
    let interval_ps = target.map(|r| (1e12 / r).round() as u64).unwrap_or(0);
    let tx0 = g.tx_packets();
    g.arm(limit, interval_ps, duration_ns)
        .map_err(|e| format!("--xdp: {e}"))?;
    // User space's reckoning runs from after the arming, so that its deadline never falls
    // before the program's: the calls under way are cut short at it, and a frame due
    // between an early cut and the program's deadline would be neither sent nor counted
    // skipped (a CI run numbered 59,999 of 60,000 so).
    let start = now_ns();
    // Each call is off the CPU for some 20 ms between two calls (the kernel sets up and
    // tears down its page pool), and nothing is sent then. Two threads on the same core
    // take turns: while one is between calls, the other runs the program. They share the
    // program's state safely because the kernel runs the program in batches with bottom
    // halves off, which no other task on the same core can interrupt; on two cores they
    // could, so this thread pins itself to its core and the workers inherit that; if it
    // cannot, one worker runs alone.
    let pinned = current_cpu().is_some_and(pin);
    let running = AtomicBool::new(true);
    // The program's deadline runs from its arming, a little before `start`: user space
    // keeps it running 2 ms past its own reckoning of the deadline (the program sends
    // nothing past its own), so that the last frames before that deadline are sent;
    // any that fall due after its last run are counted skipped (`XdpGen::finish`).
    let end_ns = duration_ns.saturating_add(2_000_000);
    // At the deadline the calls under way are cut short (a signal ends one at once): a
    // call's runs cost some 300 ns each where nothing is due on this machine kind, not
    // the few tens the sizes below assume, and a 0.3 s run took 0.85 s without this.
    let interrupt = Interrupt::install();
    let worker = |first: bool, me: &WorkerThread| -> Result<(), String> {
        me.started();
        let _done = me.on_exit();
        let mut first = first;
        while running.load(Ordering::Relaxed) {
            let elapsed = now_ns().saturating_sub(start);
            if elapsed >= end_ns {
                break;
            }
            // Runs of a few tens of ns, about half a second of them per call (a quarter
            // for the second thread's first call, so that the two threads' pauses fall
            // apart); shorter near the end. A signal ends a call early.
            let left_ms = end_ns.saturating_sub(elapsed) / 1_000_000;
            let per_call = if first { 2_500_000 } else { 10_000_000 };
            first = false;
            let runs = (left_ms.saturating_mul(10_000)).clamp(1 << 16, per_call) as u32;
            g.run(runs).map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    let (wa, wb) = (WorkerThread::default(), WorkerThread::default());
    std::thread::scope(|sc| -> Result<(), String> {
        let a = sc.spawn(|| worker(false, &wa));
        let b = pinned.then(|| sc.spawn(|| worker(true, &wb)));
        let r = loop {
            let done = g.numbered().map_err(|e| e.to_string());
            let elapsed = now_ns().saturating_sub(start);
            match done {
                Err(e) => break Err(e),
                Ok(d) if stop.load(Ordering::Relaxed) || d >= limit || elapsed >= end_ns => {
                    break Ok(())
                }
                Ok(_) => std::thread::sleep(std::time::Duration::from_millis(2)),
            }
        };
        // The calls under way end after their runs; the program sends nothing past the
        // count or the deadline.
        running.store(false, Ordering::Relaxed);
        if let Some(i) = &interrupt {
            i.until_done(&[&wa, &wb][..if b.is_some() { 2 } else { 1 }]);
        }
        let ra = a
            .join()
            .map_err(|_| "generator thread panicked".to_string())?;
        let rb = match b {
            Some(b) => b
                .join()
                .map_err(|_| "generator thread panicked".to_string())?,
            None => Ok(()),
        };
        r.and(ra).and(rb)
    })?;
    // Nothing more is sent after this.
    let (numbered, secs, skipped) = g.finish().map_err(|e| e.to_string())?;
    let seqs: Vec<u64> = (0..flows)
        .map(|i| numbered / flows + (i < numbered % flows) as u64)
        .collect();
    let tx = g.tx_packets().saturating_sub(tx0);
    if numbered > 0 && tx < numbered / 100 {
        return Err(format!(
            "--xdp: the kernel numbered {numbered} frames but {} counted {tx} sent; a veth \
             delivers XDP frames only if its peer has GRO on (ethtool -K PEER gro on) or an \
             XDP program",
            cfg.iface
        ));
    }
    end_markers(cfg, &mut port, &templates, &seqs)?;
    let achieved = if secs > 0.0 {
        numbered.saturating_sub(1) as f64 / secs
    } else {
        0.0
    };
    let v = json!({
        "iface": cfg.iface,
        "backend": "xdp",
        "sent": numbered,
        "tx_packets": tx,
        "device_dropped": numbered.saturating_sub(tx),
        "skipped": skipped,
        "flows": flows,
        "frame_bytes": cfg.size,
        "target_pps": target,
        "achieved_pps": achieved.round(),
        "achieved_wire_bps": rate::wire_bps(achieved, cfg.size).round(),
        "duration_s": secs,
        "gap_ns": null,
        "ring_full_events": 0,
        "per_flow_sent": seqs,
    });
    done(&v);
    std::thread::sleep(std::time::Duration::from_millis(50));
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_valid_frames_of_the_size_asked() {
        let cfg = GenConfig {
            iface: "x".into(),
            dst_mac: MacAddr([2, 0, 0, 0, 0, 9]),
            src: Ipv4Addr::new(10, 1, 0, 10).into(),
            dst: Destinations::One(Ipv4Addr::new(10, 3, 0, 10).into()),
            flows: 2,
            flow_base: 0,
            size: 64,
            rate: Rate::Pps(1000.0),
            duration: Some(1.0),
            count: None,
            dst_port: 1234,
            seed: 1,
            xdp: false,
            sleep_us: 0,
        };
        for size in [64, 576, 1470, 1518] {
            let t = template(
                &GenConfig {
                    size,
                    ..cfg.clone()
                },
                MacAddr([2, 0, 0, 0, 0, 1]),
                1,
                Ipv4Addr::new(10, 3, 0, 10).into(),
            );
            assert_eq!(t.len(), size - 4);
            let e = wire::ethernet::Frame::new_checked(&t[..]).unwrap();
            let p = wire::ipv4::Packet::new_checked(e.payload()).unwrap();
            assert!(p.verify_checksum());
            let u = wire::udp::Packet::new_checked(p.payload()).unwrap();
            assert_eq!((u.src_port(), u.dst_port(), u.checksum()), (1025, 1234, 0));
            assert!(u.payload().len() >= wire::probe::LEN);
        }
        assert!(GenConfig {
            size: 63,
            ..cfg.clone()
        }
        .validate()
        .is_err());
        assert!(GenConfig {
            duration: None,
            ..cfg.clone()
        }
        .validate()
        .is_err());
        // Over IPv6: 84 bytes at least, the UDP checksum right after each frame's
        // destination and probe are written, and families that do not mix.
        let src6: Ipv6Addr = "2001:db8:3::10".parse().unwrap();
        let six = GenConfig {
            src: src6.into(),
            dst: Destinations::Prefixes6(vec!["2001:db8:100::/40".parse().unwrap()]),
            size: MIN_SIZE6,
            ..cfg.clone()
        };
        assert_eq!(MIN_SIZE6, 84);
        six.validate().unwrap();
        let mut rng = 5u64;
        let prefixes = [fib::Prefix6::parse_strict("2001:db8:100::/40").unwrap()];
        for seq in 0..50 {
            let size = if seq % 2 == 0 { MIN_SIZE6 } else { 576 };
            let six = GenConfig {
                size,
                ..six.clone()
            };
            let t = template(&six, MacAddr([2, 0, 0, 0, 0, 1]), 0, six.first_dst());
            assert_eq!(t.len(), size - 4);
            let base = udp6_base(&six);
            let mut f = t.clone();
            let dst = random_dst6(&mut rng, &prefixes);
            f[V6.dst_at..V6.dst_at + 16].copy_from_slice(&dst.to_be_bytes());
            let probe = Probe {
                end: false,
                flow: 3,
                seq,
                sent_ns: 1_700_000_000_000_000_000 + seq * 977,
            };
            probe.emit(&mut f[V6.probe_at..]).unwrap();
            fill_udp6(&mut f, base);
            let e = wire::ethernet::Frame::new_checked(&f[..]).unwrap();
            let p = wire::ipv6::Packet::new_checked(e.payload()).unwrap();
            assert!(prefixes[0].contains(p.dst()));
            let u = p.upper().unwrap();
            assert!(p.verify_upper_checksum(&u), "seq {seq}");
            assert_eq!(Probe::parse(&p.payload()[8..]), Some(probe));
        }
        for bad in [
            GenConfig {
                size: 83,
                ..six.clone()
            },
            GenConfig {
                dst: Destinations::One(Ipv4Addr::new(10, 3, 0, 10).into()),
                ..six.clone()
            },
            GenConfig {
                dst: Destinations::Prefixes6(vec![]),
                ..six.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        // The XDP generator's IPv6 destinations: the upper halves of addresses in the
        // prefixes, spread over them.
        let prefixes: Vec<Prefix6> = ["2001:db8:100::/40", "2001:db8:7:8::/64"]
            .iter()
            .map(|p| p.parse().unwrap())
            .collect();
        let d = xdp_dests6(V6.dst_at, &prefixes, 5);
        assert_eq!((d.addr_at as usize, d.csum_at), (V6.dst_at, None));
        assert!(d.entries.len().is_power_of_two());
        let mut per = [0usize; 2];
        for e in &d.entries {
            let a = (u64::from_be_bytes(*e) as u128) << 64;
            let k = prefixes
                .iter()
                .position(|p| p.contains(a.into()))
                .unwrap_or_else(|| panic!("{e:?}"));
            per[k] += 1;
        }
        assert!(per.iter().all(|&n| n > d.entries.len() / 3), "{per:?}");
        assert!(GenConfig { xdp: true, ..six }.validate().is_ok());
    }
}
