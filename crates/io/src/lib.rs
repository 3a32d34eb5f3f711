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
pub mod bpfobj;
mod bpfsys;
pub mod egress;
pub mod fastpath;
mod genl;
pub mod handoff;
pub mod netdev;
pub mod pin;
pub mod placement;
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
        return make(xsk::Hook::Tc)
            .and_then(|prog| p.attach_fast_path(prog))
            .map_err(|e| {
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
        // The first socket makes the group, the others join it by its id (which may be
        // 0: the kernel's ids start there after each boot).
        let mut group = afpacket::Fanout::New;
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
            if group == afpacket::Fanout::New {
                group = afpacket::Fanout::Join(p.fanout_group()?);
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
    /// An AF_XDP port's attachment (its interface's program), None on AF_PACKET.
    pub fn attachment(&self) -> Option<std::sync::Arc<xsk::AttachedShared>> {
        match self {
            AnyPort::Xdp(p) => Some(p.attachment()),
            AnyPort::Packet(_) => None,
        }
    }

    /// The port's link where it runs the element's fast path (XDP or tcx), for a
    /// take-over the element deferred ([`pin::defer_takeover`]).
    pub fn fast_path_link(&self) -> Option<std::sync::Arc<dyn pin::TakeOver>> {
        match self {
            AnyPort::Xdp(p) => Some(p.attachment()),
            AnyPort::Packet(p) => p
                .fast_path_link()
                .map(|t| t as std::sync::Arc<dyn pin::TakeOver>),
        }
    }

    /// This port reports its interface's own drops: one port per interface should. On
    /// transmit (`device_tx_dropped`) on both backends: on a veth, the frames its peer's
    /// ring could not take, those the fast path redirected to it included. On receive
    /// (`device_rx_dropped`) AF_PACKET ports only: an XDP program's redirects that the
    /// socket could not take count in a veth's `rx_dropped` too (measured: every one of
    /// them), and those are `rx_ring_full` and `xsk_rx_dropped` already.
    pub fn report_device_drops(&mut self) {
        match self {
            AnyPort::Packet(p) => p.report_device_drops(),
            AnyPort::Xdp(p) => p.report_device_drops(),
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

/// What the tests of this crate share.
#[cfg(test)]
pub(crate) mod test_ns {
    use std::io;
    use std::os::fd::AsRawFd;

    /// A network namespace of the test's own with a veth pair `a`/`b` in it, removed when
    /// dropped (on failure too).
    pub(crate) struct Netns(pub(crate) String);

    impl Netns {
        pub(crate) fn with_veth(tag: &str) -> Netns {
            let ns = Netns(format!("tio-{tag}-{}", std::process::id()));
            let ip = |args: &[&str]| {
                let o = std::process::Command::new("ip")
                    .args(args)
                    .output()
                    .unwrap();
                assert!(o.status.success(), "ip {args:?}: {o:?}");
            };
            ip(&["netns", "add", &ns.0]);
            ip(&[
                "-n", &ns.0, "link", "add", "ua", "type", "veth", "peer", "name", "ub",
            ]);
            ip(&["-n", &ns.0, "link", "set", "ua", "up"]);
            ip(&["-n", &ns.0, "link", "set", "ub", "up"]);
            ns
        }

        /// Runs `f` on a thread inside the namespace.
        pub(crate) fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
            let path = format!("/var/run/netns/{}", self.0);
            std::thread::scope(|s| {
                s.spawn(|| {
                    let fd = std::fs::File::open(&path).unwrap();
                    // SAFETY: setns on this thread alone, with a namespace file we opened.
                    let r = unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) };
                    assert_eq!(r, 0, "setns: {}", io::Error::last_os_error());
                    f()
                })
                .join()
                .unwrap()
            })
        }
    }

    impl Drop for Netns {
        fn drop(&mut self) {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", &self.0])
                .output();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_ns::Netns;

    /// Sends 64 frames of 64 flows from `ub` and returns the flow numbers of those that
    /// `ports` (on `ua`) received in half a second, sorted.
    fn flows_received(ports: &mut [AnyPort]) -> Vec<u8> {
        let mut peer = AfPacket::open("ub", RingConfig::default()).unwrap();
        let mut pool = Pool::new();
        let mut out: Vec<Pkt> = (0..64u8)
            .map(|i| {
                let mut f = vec![0xff; 6];
                f.extend_from_slice(&[2, 0, 0, 0, 0, i, 0x08, 0x00]);
                f.extend_from_slice(&[0x45, 0, 0, 46, 0, 0, 0, 0, 64, 17, 0, 0]);
                f.extend_from_slice(&[10, 0, 0, i, 10, 0, 1, 1]);
                f.extend_from_slice(&[0x10, i, 0x20, 0x00, 0, 26, 0, 0]);
                f.resize(64, 0);
                Pkt::from_bytes(&f)
            })
            .collect();
        let r = peer.send(&mut out, &mut pool).unwrap();
        assert_eq!(r.sent, 64);
        let mut got = Vec::new();
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(500) {
            for p in ports.iter_mut() {
                let mut over = 0;
                p.recv(&mut pool, &mut got, 64, &mut over).unwrap();
            }
        }
        // Ours only (the peer's own stack sends IPv6 neighbour discovery too).
        let mut seen: Vec<u8> = got
            .iter()
            .filter(|p| p.data[6..11] == [2, 0, 0, 0, 0] && p.data[12..14] == [8, 0])
            .map(|p| p.data[11])
            .collect();
        seen.sort_unstable();
        seen
    }

    fn group_of(p: &AnyPort) -> u16 {
        match p {
            AnyPort::Packet(p) => p.fanout_group().unwrap(),
            _ => panic!("not AF_PACKET"),
        }
    }

    /// The workers' AF_PACKET sockets of a port form one fanout group, so each frame
    /// reaches one worker, even when that group is group 0. The kernel names new groups
    /// from one counter for the whole machine, from 0 after a boot, so the first group on
    /// a fresh machine is group 0; the opening took 0 for "make a new group", so the second
    /// worker made a group of its own and both received every frame (a fresh CI machine's
    /// lab test saw every echo twice). The counter cannot be set from here (moving it round
    /// costs a socket close each, milliseconds apiece), so: group 0 is one group for
    /// the sockets that join it, and the workers' sockets all join the group the first made.
    #[test]
    fn the_workers_packet_sockets_make_one_group_even_group_0() {
        let ns = Netns::with_veth("fanout");
        ns.run(|| {
            let zero = |_| {
                AnyPort::Packet(
                    AfPacket::open(
                        "ua",
                        RingConfig {
                            fanout: Some(afpacket::Fanout::Join(0)),
                            ..Default::default()
                        },
                    )
                    .unwrap(),
                )
            };
            let mut ports: Vec<AnyPort> = (0..2).map(zero).collect();
            assert_eq!(ports.iter().map(group_of).collect::<Vec<_>>(), [0, 0]);
            assert_eq!(flows_received(&mut ports), (0..64).collect::<Vec<u8>>());
            drop(ports);
            let mut ports = open_workers("ua", Backend::Packet, RxRing::Frames, None, 2, None)
                .expect("two AF_PACKET workers");
            let groups: Vec<u16> = ports.iter().map(group_of).collect();
            assert_eq!(groups[0], groups[1], "one group");
            assert_eq!(
                flows_received(&mut ports),
                (0..64).collect::<Vec<u8>>(),
                "each frame once"
            );
        })
    }
}
