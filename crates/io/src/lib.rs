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
pub use xsk::XdpPort;

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
    open_with(name, backend, RxRing::Frames, None)
}

/// As [`open`], with the AF_PACKET receive ring `ring`, and the AF_XDP port's program made
/// by `program` (given the port's socket map) instead of the plain redirect: the fast
/// path's. AF_PACKET ports have none.
pub fn open_with(
    name: &str,
    backend: Backend,
    ring: RxRing,
    program: Option<xsk::ProgramFor>,
) -> std::io::Result<AnyPort> {
    let cfg = xsk::XskConfig::default();
    let mode = xsk::AttachMode::Auto;
    let packet = || {
        AfPacket::open(
            name,
            RingConfig {
                rx_ring: ring,
                ..Default::default()
            },
        )
        .map(AnyPort::Packet)
    };
    match backend {
        Backend::Packet => packet(),
        Backend::Xdp => XdpPort::open_with(name, cfg, mode, program).map(AnyPort::Xdp),
        Backend::Auto => match XdpPort::open_with(name, cfg, mode, program) {
            Ok(p) => Ok(AnyPort::Xdp(p)),
            Err(e) => {
                tracing::warn!(interface = name, reason = %e, "AF_XDP unavailable; using AF_PACKET");
                packet()
            }
        },
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
}
