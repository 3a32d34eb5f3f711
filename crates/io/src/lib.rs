//! Packet I/O on real interfaces, and the interface helpers an element needs.
//!
//! Two backends implement [`dataplane::port::Port`]: [`afpacket::AfPacket`] (one packet
//! socket per interface with memory-mapped rings) and [`xsk::XdpPort`] (an XDP program that
//! hands every frame to AF_XDP sockets, one per receive queue). [`open`] picks one as
//! the element's `[io] backend` asks. [`netdev`] reads and sets interface properties and
//! keeps the kernel's own IP stack off the interfaces an element owns. [`xdp`] is the
//! traffic generator's XDP program.
//!
//! This crate and `lab` are the only ones with `unsafe` and system calls.

pub mod afpacket;
pub mod fastpath;
pub mod netdev;
pub mod tap;
pub mod xdp;
pub mod xsk;

pub use afpacket::{AfPacket, RingConfig, RxRing};
pub use xsk::{XdpPort, XskConfig};

use dataplane::buf::{Pkt, Pool};
use dataplane::port::{Port, PortInfo, TxResult};

/// Which packet I/O an element uses (`[io] backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// AF_XDP where the program attaches and the sockets bind; AF_PACKET otherwise, with a
    /// log line that says why.
    #[default]
    Auto,
    /// AF_XDP or an error.
    Xdp,
    /// AF_PACKET.
    Packet,
}

impl Backend {
    pub fn parse(s: &str) -> Option<Backend> {
        match s {
            "auto" => Some(Backend::Auto),
            "xdp" => Some(Backend::Xdp),
            "packet" => Some(Backend::Packet),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Xdp => "xdp",
            Backend::Packet => "packet",
        }
    }
}

/// A port of either backend.
pub enum AnyPort {
    Packet(AfPacket),
    Xdp(XdpPort),
}

/// Opens `name` on `backend`. With [`Backend::Auto`], an AF_XDP failure falls back to
/// AF_PACKET and is logged with its reason.
pub fn open(name: &str, backend: Backend) -> std::io::Result<AnyPort> {
    open_with(name, backend, RxRing::Frames, None, None)
}

/// The UMEMs an element's AF_XDP ports share, one per worker: a frame a worker receives on
/// one port leaves by another without a copy in user space (and without any on NICs in
/// zero-copy mode). Sized before the ports open for the sockets each worker will have
/// (twice the receive ring and the transmit ring in frames for each, as a socket of its
/// own had); each is mapped when its worker's first AF_XDP socket opens, so an element
/// on AF_PACKET maps none.
pub struct Umems {
    sockets: Vec<usize>,
    made: Vec<Option<std::sync::Arc<xsk::Umem>>>,
}

impl Umems {
    /// For the ports on `interfaces` of an element with `workers` workers (each worker
    /// has one socket per receive queue it owns, as [`open_workers`] shares them out).
    pub fn new(interfaces: &[&str], workers: usize) -> Umems {
        let workers = workers.max(1);
        let mut sockets = vec![0; workers];
        for name in interfaces {
            let queues = xsk::rx_queues(name) as usize;
            if workers == 1 {
                sockets[0] += queues;
            } else {
                for q in 0..queues {
                    sockets[q % workers] += 1;
                }
            }
        }
        Umems {
            made: vec![None; workers],
            sockets,
        }
    }

    /// Worker `w`'s UMEM, mapped on first use.
    fn of(&mut self, w: usize) -> std::io::Result<std::sync::Arc<xsk::Umem>> {
        if let Some(u) = self.made.get(w).and_then(|u| u.clone()) {
            return Ok(u);
        }
        let n = self.sockets.get(w).copied().unwrap_or(1);
        let u = xsk::Umem::for_sockets(n, &xsk::XskConfig::default())?;
        if let Some(slot) = self.made.get_mut(w) {
            *slot = Some(u.clone());
        }
        Ok(u)
    }
}

/// As [`open`], with the AF_PACKET receive ring `ring`, and the port's program made by
/// `program` (the fast path's) instead of the plain redirect (AF_XDP) or the drop after
/// the socket (AF_PACKET, whose socket then takes only what the program leaves to it).
/// With `umems`, an AF_XDP port's sockets use the element's shared UMEM (its one worker's).
pub fn open_with(
    name: &str,
    backend: Backend,
    ring: RxRing,
    program: Option<xsk::ProgramFor>,
    umems: Option<&mut Umems>,
) -> std::io::Result<AnyPort> {
    let mut p = open_one(name, backend, ring, program, umems)?;
    p.report_device_drops();
    Ok(p)
}

fn open_one(
    name: &str,
    backend: Backend,
    ring: RxRing,
    program: Option<xsk::ProgramFor>,
    umems: Option<&mut Umems>,
) -> std::io::Result<AnyPort> {
    let cfg = xsk::XskConfig::default();
    let mode = xsk::AttachMode::Auto;
    let xdp = |umems: Option<&mut Umems>| -> std::io::Result<XdpPort> {
        let umem = umems.map(|u| u.of(0)).transpose()?;
        XdpPort::open_with(name, cfg, mode, program, umem)
    };
    let packet = || {
        let mut p = AfPacket::open(
            name,
            RingConfig {
                rx_ring: ring,
                accept_mark: program.map(|_| fastpath::TO_USER_SPACE_MARK),
                ..Default::default()
            },
        )?;
        packet_program(&mut p, program)?;
        Ok(AnyPort::Packet(p))
    };
    match backend {
        Backend::Packet => packet(),
        Backend::Xdp => xdp(umems).map(AnyPort::Xdp),
        Backend::Auto => match xdp(umems) {
            Ok(p) => Ok(AnyPort::Xdp(p)),
            Err(e) => {
                tracing::warn!(interface = name, reason = %e, "AF_XDP unavailable; using AF_PACKET");
                packet()
            }
        },
    }
}

/// An element's AF_PACKET port's tcx program: `program`'s (the fast path), which must
/// attach, or else the drop that keeps the kernel's stack off the port
/// ([`AfPacket::keep_stack_off`]); where the kernel cannot, the port works on and a log
/// line says why.
fn packet_program(p: &mut AfPacket, program: Option<xsk::ProgramFor>) -> std::io::Result<()> {
    if let Some(make) = program {
        return p.attach_fast_path(&make(xsk::Hook::Tc)).map_err(|e| {
            std::io::Error::new(e.kind(), format!("{}: fast path (tcx): {e}", p.name()))
        });
    }
    if let Err(e) = p.keep_stack_off() {
        tracing::warn!(interface = p.name(), reason = %e, "the kernel's stack still takes this port's frames");
    }
    Ok(())
}

/// The ports of `name` for `workers` workers, one each: on AF_XDP, worker `w` gets the
/// sockets of the receive queues `q` with `q % workers == w` (so the interface needs at
/// least as many queues as there are workers); on AF_PACKET, one socket each in a fanout
/// group that spreads frames by a hash of their flow. With [`Backend::Auto`], an AF_XDP
/// failure falls back to AF_PACKET for every worker and is logged with its reason. With
/// `umems`, worker `w`'s sockets use the element's UMEM of worker `w`.
pub fn open_workers(
    name: &str,
    backend: Backend,
    ring: RxRing,
    program: Option<xsk::ProgramFor>,
    workers: usize,
    mut umems: Option<&mut Umems>,
) -> std::io::Result<Vec<AnyPort>> {
    if workers <= 1 {
        return open_with(name, backend, ring, program, umems).map(|p| vec![p]);
    }
    let packet = || -> std::io::Result<Vec<AnyPort>> {
        let mut ports = Vec::with_capacity(workers);
        let mut group = 0;
        for _ in 0..workers {
            let mut p = AfPacket::open(
                name,
                RingConfig {
                    rx_ring: ring,
                    fanout: Some(group),
                    accept_mark: program.map(|_| fastpath::TO_USER_SPACE_MARK),
                    ..Default::default()
                },
            )?;
            if group == 0 {
                group = p.fanout_group()?;
                packet_program(&mut p, program)?;
            }
            ports.push(AnyPort::Packet(p));
        }
        Ok(ports)
    };
    let mut xdp = || -> std::io::Result<Vec<AnyPort>> {
        let queues = xsk::rx_queues(name);
        if (queues as usize) < workers {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{name} has {queues} receive queue(s); AF_XDP with [io] workers = {workers} needs at least {workers} (in a lab, `queues = {workers}` on its link)"
                ),
            ));
        }
        let shared = std::sync::Arc::new(XdpPort::attach(
            name,
            queues,
            xsk::AttachMode::Auto,
            program,
        )?);
        (0..workers)
            .map(|w| {
                let mine: Vec<u32> = (0..queues).filter(|q| *q as usize % workers == w).collect();
                let umem = umems.as_deref_mut().map(|u| u.of(w)).transpose()?;
                XdpPort::open_queues(name, xsk::XskConfig::default(), shared.clone(), &mine, umem)
                    .map(AnyPort::Xdp)
            })
            .collect()
    };
    let mut ports = match backend {
        Backend::Packet => packet(),
        Backend::Xdp => xdp(),
        Backend::Auto => match xdp() {
            Ok(p) => Ok(p),
            Err(e) => {
                tracing::warn!(interface = name, reason = %e, "AF_XDP unavailable; using AF_PACKET");
                packet()
            }
        },
    }?;
    // The first worker counts the interface's own drops, once for all.
    if let Some(p) = ports.first_mut() {
        p.report_device_drops();
    }
    Ok(ports)
}

impl AnyPort {
    /// This port reports its interface's own receive drops (`device_rx_dropped`): one port
    /// per interface should. AF_PACKET ports only: an XDP program's redirects that the
    /// socket could not take count in a veth's `rx_dropped` too (measured: every one of
    /// them), and those are `rx_ring_full` and `xsk_rx_dropped` already.
    pub fn report_device_drops(&mut self) {
        match self {
            AnyPort::Packet(p) => p.report_device_drops(),
            AnyPort::Xdp(_) => {}
        }
    }
}

impl Port for AnyPort {
    fn name(&self) -> &str {
        match self {
            AnyPort::Packet(p) => p.name(),
            AnyPort::Xdp(p) => p.name(),
        }
    }

    #[inline]
    fn recv(
        &mut self,
        pool: &mut Pool,
        out: &mut Vec<Pkt>,
        max: usize,
        oversize: &mut u64,
    ) -> std::io::Result<usize> {
        match self {
            AnyPort::Packet(p) => p.recv(pool, out, max, oversize),
            AnyPort::Xdp(p) => p.recv(pool, out, max, oversize),
        }
    }

    #[inline]
    fn send(&mut self, frames: &mut Vec<Pkt>, pool: &mut Pool) -> std::io::Result<TxResult> {
        match self {
            AnyPort::Packet(p) => p.send(frames, pool),
            AnyPort::Xdp(p) => p.send(frames, pool),
        }
    }

    fn poll_fd(&self) -> Option<i32> {
        match self {
            AnyPort::Packet(p) => p.poll_fd(),
            AnyPort::Xdp(p) => p.poll_fd(),
        }
    }

    fn poll_fds(&self) -> Vec<i32> {
        match self {
            AnyPort::Packet(p) => p.poll_fds(),
            AnyPort::Xdp(p) => p.poll_fds(),
        }
    }

    fn info(&self) -> PortInfo {
        match self {
            AnyPort::Packet(p) => p.info(),
            AnyPort::Xdp(p) => p.info(),
        }
    }

    fn take_backend_drops(&mut self, count: &mut dyn FnMut(dataplane::Drop, u64)) {
        match self {
            AnyPort::Packet(p) => p.take_backend_drops(count),
            AnyPort::Xdp(p) => p.take_backend_drops(count),
        }
    }

    fn take_backend_events(&mut self, count: &mut dyn FnMut(dataplane::counters::Event, u64)) {
        match self {
            AnyPort::Packet(_) => {}
            AnyPort::Xdp(p) => p.take_backend_events(count),
        }
    }
}
