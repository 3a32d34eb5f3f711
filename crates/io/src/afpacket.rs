//! AF_PACKET with memory-mapped rings, TPACKET_V2 or TPACKET_V3.
//!
//! Receive, [`RxRing::Frames`] (TPACKET_V2, what elements use): a ring of fixed-size
//! frame slots; the kernel hands each frame over as it arrives and wakes a sleeping
//! `poll` for it, so a frame waits no longer than the work on it. [`RxRing::Blocks`]
//! (TPACKET_V3, what the sink uses): the kernel fills blocks of variable-size frames and
//! hands a whole block over when it is full or `block_timeout_ms` has passed; a reader in
//! `poll` wakes per block, which costs fewer wake-ups at high rates and up to the block
//! timeout (rounded up to the kernel's timer tick, 4 ms at 250 Hz) of latency at low
//! rates. [`AfPacket::recv`] copies each frame into a pool buffer and gives the slot or
//! block back. Transmit: fixed-size frame slots; [`AfPacket::send`] fills free slots, marks
//! them for sending, and kicks the kernel once per batch with a zero-length `sendto`. A
//! full ring is a counted drop, never a wait.
//!
//! An element's port also keeps the kernel's own stack off what it receives
//! ([`AfPacket::keep_stack_off`]): a packet socket takes a copy of each frame and the frame
//! then goes on into the kernel, which on an element's interface has nothing to do with it
//! (no address, forwarding off: see `netdev::take_over`) but still runs its IPv4 input and
//! a route lookup before it drops it, on the core the element shares. A tcx ingress
//! program that drops every frame ends each one right after the packet sockets have had
//! it.
//!
//! The socket ignores outgoing frames (`PACKET_IGNORE_OUTGOING`), so it never receives
//! what it or the kernel sent, and bypasses the qdisc layer (`PACKET_QDISC_BYPASS`).
//! Frames whose checksum the sending kernel left to offload arrive marked
//! `TP_STATUS_CSUMNOTREADY`; that becomes `Meta::csum_partial`. A VLAN tag the kernel
//! took out of the frame (`TP_STATUS_VLAN_VALID`) is put back in.

use dataplane::buf::{Pkt, Pool, BUF_CAP};
use dataplane::port::{Port, PortInfo, TxResult};
use std::io;
use std::ptr;
use std::sync::atomic::{fence, AtomicU32, Ordering};

/// How the kernel hands received frames over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxRing {
    /// TPACKET_V2: frame by frame, a wake-up per frame when the reader sleeps. No added
    /// latency; the elements' choice.
    Frames,
    /// TPACKET_V3: block by block, a wake-up per block (full, or after `block_timeout_ms`).
    /// Fewer wake-ups at high rates; up to a timer tick of latency at low rates.
    Blocks,
}

/// Ring geometry.
#[derive(Debug, Clone, Copy)]
pub struct RingConfig {
    /// Receive block size in bytes (a power of two, at least one page, larger than a frame).
    pub rx_block_size: u32,
    /// Receive blocks; the receive ring is `rx_block_size * rx_blocks` bytes either way.
    pub rx_blocks: u32,
    /// Milliseconds after which the kernel hands over a partly filled receive block
    /// ([`RxRing::Blocks`] only).
    pub block_timeout_ms: u32,
    /// Transmit slots.
    pub tx_frames: u32,
    pub rx_ring: RxRing,
    /// Joins a fanout group that spreads the interface's frames over several sockets by a
    /// hash of each frame's flow (one socket per worker).
    pub fanout: Option<Fanout>,
    /// Receives only frames that carry this mark (a socket filter, attached before the
    /// socket is bound): with the fast path in the port's tcx program, the frames that
    /// program leaves to user space (see [`AfPacket::attach_fast_path`]).
    pub accept_mark: Option<u32>,
}

/// Which fanout group a socket joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fanout {
    /// A new group, under an id the kernel picks (read it with [`AfPacket::fanout_group`]).
    /// The kernel's ids come from one counter for the whole machine, starting at 0: a
    /// new group may well be group 0.
    New,
    /// The group of this id, in the socket's network namespace.
    Join(u16),
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            rx_block_size: 1 << 16,
            rx_blocks: 64,
            block_timeout_ms: 1,
            tx_frames: 1024,
            rx_ring: RxRing::Frames,
            fanout: None,
            accept_mark: None,
        }
    }
}

/// Offset of the frame data in a transmit slot: TPACKET_ALIGN(sizeof(tpacket3_hdr)) for
/// TPACKET_V3, TPACKET_ALIGN(sizeof(tpacket2_hdr)) for TPACKET_V2.
fn tx_data_off(v: RxRing) -> usize {
    match v {
        RxRing::Blocks => tpacket_align(std::mem::size_of::<libc::tpacket3_hdr>()),
        RxRing::Frames => tpacket_align(std::mem::size_of::<libc::tpacket2_hdr>()),
    }
}

/// Room before the MAC header in a TPACKET_V2 receive slot: the header with its
/// `sockaddr_ll` (52 bytes), padded so that the network header after at least 16 bytes of
/// link header is 16-byte aligned.
const RX2_MAC_ROOM: usize = 96;

const fn tpacket_align(x: usize) -> usize {
    (x + libc::TPACKET_ALIGNMENT - 1) & !(libc::TPACKET_ALIGNMENT - 1)
}

/// One interface's packet socket and rings.
pub struct AfPacket {
    name: String,
    fd: i32,
    map: *mut u8,
    map_len: usize,
    version: RxRing,
    rx_block_size: usize,
    rx_blocks: usize,
    /// TPACKET_V2: the receive slot size and count.
    rx_frame_size: usize,
    rx_frames: usize,
    rx_next: usize,
    tx_data_off: usize,
    tx_base: *mut u8,
    tx_frame_size: usize,
    tx_frames: usize,
    tx_next: usize,
    /// In a fanout group (one socket of several workers).
    fanout: bool,
    /// The tcx link of the port's ingress program ([`AfPacket::keep_stack_off`]'s or
    /// [`AfPacket::attach_fast_path`]'s), detached when the last holder drops it unless
    /// it is pinned for the element's next start ([`crate::pin`]).
    tcx: Option<std::sync::Arc<TcxLink>>,
    /// The interface's own receive drops, if this port reports them.
    device: Option<crate::netdev::DeviceDrops>,
    device_tx: Option<crate::netdev::DeviceDrops>,
    /// Why the element chose this backend for the port, where it chose ([`AfPacket::set_why`]).
    why: Option<String>,
    /// The XDP link of [`AfPacket::whole_frames`], detached when the port closes.
    whole: Option<std::os::fd::OwnedFd>,
    /// Its program, until it attaches (on a veth without the fast path only).
    whole_prog: Option<std::os::fd::OwnedFd>,
}

// SAFETY: the mapping is owned by this value and used only through &mut self.
unsafe impl Send for AfPacket {}

fn check(r: libc::c_int, what: &str, name: &str) -> io::Result<libc::c_int> {
    if r < 0 {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{name}: {what}: {e}")))
    } else {
        Ok(r)
    }
}

fn setsockopt<T>(fd: i32, level: i32, opt: i32, v: &T) -> libc::c_int {
    // SAFETY: v points to a live T of the given size.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as u32,
        )
    }
}

/// The kernel's number for a tcx ingress link: BPF_TCX_INGRESS.
pub(crate) const BPF_TCX_INGRESS: u32 = 46;

/// What a port's tcx ingress program does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tcx {
    /// Drops every frame after the packet sockets have had it.
    StackOff,
    /// The forwarder's fast path (`fastpath`).
    FastPath,
}

/// A port's tcx ingress link, and what runs in it.
pub struct TcxLink {
    link: std::os::fd::OwnedFd,
    what: Tcx,
    /// A predecessor's fast path still runs in the link ([`crate::pin::defer_takeover`]):
    /// this start's program, which takes its place at [`crate::pin::TakeOver::take_over`].
    pending: std::sync::Mutex<Option<std::os::fd::OwnedFd>>,
}

impl crate::pin::TakeOver for TcxLink {
    fn take_over(&self) -> io::Result<bool> {
        let prog = self.pending.lock().ok().and_then(|mut p| p.take());
        match prog {
            Some(prog) => crate::pin::link_update(&self.link, &prog).map(|()| true),
            None => Ok(false),
        }
    }
}

/// The drop that keeps the kernel's stack off a port, as clang made it from
/// `bpf/nostack.bpf.c`.
static NOSTACK: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/nostack.bpf.o"));

/// A tcx ingress link of `prog` on interface `ifindex`, after the programs there
/// (libbpf-rs has no tcx links: libbpf's `bpf_link_create`). The program leaves the hook
/// when the link closes.
pub(crate) fn tcx_ingress_link(
    prog: &std::os::fd::OwnedFd,
    ifindex: u32,
) -> io::Result<std::os::fd::OwnedFd> {
    crate::bpfsys::link_create(prog, ifindex, BPF_TCX_INGRESS, 0)
}

/// Has the packet socket `fd` take only frames whose mark is `mark` (`bpf/mark.bpf.c`, a
/// socket filter: the others are not copied).
fn accept_only_mark(fd: i32, mark: u32, name: &str) -> io::Result<()> {
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct MarkConfig {
        mark: u32,
    }
    let obj = crate::bpfobj::load(
        MARK,
        "the packet socket's filter",
        crate::bpfobj::Load {
            name: "mark",
            config: Some(crate::bpfobj::config_bytes(&MarkConfig { mark })),
            ..Default::default()
        },
    )?;
    // The socket keeps the program for as long as it is open.
    let prog = obj.prog("tessera_mark")?;
    check(
        setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_BPF,
            &std::os::fd::AsRawFd::as_raw_fd(&prog),
        ),
        "SO_ATTACH_BPF",
        name,
    )?;
    Ok(())
}

/// `bpf/mark.bpf.c`.
static MARK: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/mark.bpf.o"));

/// Binds the packet socket `fd` to interface `ifindex` for every protocol, and joins it to
/// its fanout group, if any.
fn bind(fd: i32, ifindex: i32, fanout: Option<Fanout>, name: &str) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain old data.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sll.sll_ifindex = ifindex;
    // SAFETY: sll is a valid sockaddr_ll of the size given.
    let r = unsafe {
        libc::bind(
            fd,
            &sll as *const _ as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    check(r, "bind", name)?;
    if let Some(group) = fanout {
        // Flow hash: the frames of one flow (5-tuple; addresses for fragments) always
        // reach the same socket, so a worker never reorders a flow.
        let arg = match group {
            // The id field must be 0 with UNIQUEID; the kernel picks the id.
            Fanout::New => libc::PACKET_FANOUT_HASH << 16 | libc::PACKET_FANOUT_FLAG_UNIQUEID << 16,
            Fanout::Join(id) => id as u32 | libc::PACKET_FANOUT_HASH << 16,
        };
        check(
            setsockopt(fd, libc::SOL_PACKET, libc::PACKET_FANOUT, &arg),
            "PACKET_FANOUT",
            name,
        )?;
    }
    Ok(())
}

impl AfPacket {
    /// This port reports its interface's own receive and transmit drops
    /// (`device_rx_dropped`, `device_tx_dropped`).
    pub fn report_device_drops(&mut self) {
        self.device = crate::netdev::DeviceDrops::rx(&self.name);
        self.device_tx = crate::netdev::DeviceDrops::tx(&self.name);
    }

    /// Keeps the kernel's own stack off the frames this interface receives, for as long
    /// as this port lives: a tcx ingress program (two instructions: drop) runs after the
    /// packet sockets, this one included, have taken their copies, and ends the frame
    /// there, so that the kernel spends no IPv4 input or route lookup on it. For an
    /// element's ports only (a host's packet socket, the sink's, must leave the stack its
    /// frames). Kernels before 6.6 have no tcx: the error says so and the port works
    /// without it.
    pub fn keep_stack_off(&mut self) -> io::Result<()> {
        let obj = crate::bpfobj::load(
            NOSTACK,
            "the stack's drop",
            crate::bpfobj::Load {
                name: "nostack",
                ..Default::default()
            },
        )?;
        self.tcx_ingress(obj.prog("tessera_nostack")?, Tcx::StackOff)?;
        if crate::netdev::driver(&self.name).is_ok_and(|d| d == "veth") {
            self.whole_prog = obj.prog("tessera_whole").ok();
        }
        Ok(())
    }

    /// On a veth, once a frame larger than the ring's slots arrived: `tessera_whole`
    /// (an XDP program that passes every frame on) in the port's driver hook, for as long
    /// as the port lives. While an XDP program runs on a veth, the kernel takes its peer's
    /// software segmentation (TSO, GSO) away, so that a peer with a new veth's offloads
    /// (a container's) sends frames no larger than the MTU, where it sent one socket
    /// buffer of many segments (up to 64 KB) that this socket's ring slots cannot take
    /// (dropped as `rx_oversize`: TCP from such a host stalls). Only then, because of the
    /// price: the veth then receives through NAPI and copies each frame once (the
    /// switch's 64-byte rate on AF_PACKET 0.74-0.84 Mpps with it, 0.89-0.91 without).
    /// Where it cannot attach (another program there; a peer MTU too large for XDP), the
    /// port works on without it, and a log line says so.
    fn whole_frames(&mut self, prog: std::os::fd::OwnedFd) {
        const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
        let made = crate::netdev::ifindex(&self.name).and_then(|ifindex| {
            crate::bpfsys::link_create(
                &prog,
                ifindex as u32,
                crate::xdp::BPF_XDP,
                XDP_FLAGS_DRV_MODE,
            )
        });
        match made {
            Ok(link) => {
                tracing::info!(interface = %self.name, "the veth's peer sent a buffer of many segments: an XDP program that passes every frame now runs on this AF_PACKET port, so that the peer sends frames no larger than the MTU");
                self.whole = Some(link);
            }
            Err(e) => {
                tracing::warn!(interface = %self.name, reason = %e, "the veth's peer sends buffers of many segments, which this AF_PACKET port drops (rx_oversize), and no XDP program could attach here to stop it");
            }
        }
    }

    /// Runs the forwarder's fast path (`prog`, loaded by `fastpath` for [`crate::xsk::Hook::Tc`])
    /// in this port's tcx ingress hook, for as long as the port lives. It forwards the
    /// frames it takes itself, before any socket, with their socket buffers (a checksum
    /// left to offload stays so); it marks every other frame and receives it again, and
    /// only then may this socket take it (open it with [`RingConfig::accept_mark`]); the
    /// marked frame then ends in the program, so the kernel's stack sees none of the
    /// port's frames.
    /// Says why the element runs this port on AF_PACKET (in its mode, `show interfaces`'
    /// `io_mode`).
    pub fn set_why(&mut self, why: String) {
        self.why = Some(why);
    }

    pub fn attach_fast_path(&mut self, prog: std::os::fd::OwnedFd) -> io::Result<()> {
        self.tcx_ingress(prog, Tcx::FastPath)
    }

    fn tcx_ingress(&mut self, prog: std::os::fd::OwnedFd, what: Tcx) -> io::Result<()> {
        let ifindex = crate::netdev::ifindex(&self.name)?;
        // A link the element's last start pinned (its fast path, still forwarding): this
        // program takes its place, at once or when the element says so; a start without
        // the fast path takes it too (and ends it).
        let fast = what == Tcx::FastPath;
        let keep = fast && crate::pin::enabled();
        let taken = crate::pin::take_pinned(
            ifindex as u32,
            &["link-tcx"],
            crate::pin::BPF_LINK_TYPE_TCX,
            &prog,
            fast,
            keep,
        );
        let (link, pending) = match taken {
            Some(t) => (t.link, t.deferred.then_some(prog)),
            None => {
                let link = tcx_ingress_link(&prog, ifindex as u32).map_err(|e| {
                    io::Error::new(e.kind(), format!("{}: tcx ingress link: {e}", self.name))
                })?;
                if keep {
                    crate::pin::pin_link(ifindex as u32, "link-tcx", &link);
                }
                (link, None)
            }
        };
        self.tcx = Some(std::sync::Arc::new(TcxLink {
            link,
            what,
            pending: std::sync::Mutex::new(pending),
        }));
        Ok(())
    }

    /// The port's tcx link where it runs the fast path, for a take-over the element
    /// deferred ([`crate::pin::defer_takeover`]).
    pub fn fast_path_link(&self) -> Option<std::sync::Arc<TcxLink>> {
        self.tcx.clone().filter(|t| t.what == Tcx::FastPath)
    }

    /// Opens a packet socket on `name` with rings sized for frames up to the interface MTU.
    pub fn open(name: &str, cfg: RingConfig) -> io::Result<AfPacket> {
        let ifindex = crate::netdev::ifindex(name)?;
        let mtu = crate::netdev::mtu(name)?;
        let max_frame = mtu + 14 + 4;
        if max_frame > BUF_CAP {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{name}: MTU {mtu} is above the largest supported ({})",
                    BUF_CAP - 18
                ),
            ));
        }
        // Protocol 0: receive nothing until the rings are ready and bind() names ETH_P_ALL.
        // SAFETY: plain socket(2).
        let fd = check(
            unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) },
            "socket",
            name,
        )?;
        let mut me = AfPacket {
            name: name.to_string(),
            fd,
            map: ptr::null_mut(),
            map_len: 0,
            version: cfg.rx_ring,
            rx_block_size: cfg.rx_block_size as usize,
            rx_blocks: cfg.rx_blocks as usize,
            rx_frame_size: 0,
            rx_frames: 0,
            rx_next: 0,
            tx_data_off: tx_data_off(cfg.rx_ring),
            tx_base: ptr::null_mut(),
            tx_frame_size: (max_frame + tx_data_off(cfg.rx_ring))
                .next_power_of_two()
                .max(2048),
            tx_frames: 0,
            tx_next: 0,
            fanout: cfg.fanout.is_some(),
            tcx: None,
            device: None,
            device_tx: None,
            why: None,
            whole: None,
            whole_prog: None,
        };
        check(
            setsockopt(
                fd,
                libc::SOL_PACKET,
                libc::PACKET_VERSION,
                &(match cfg.rx_ring {
                    RxRing::Frames => libc::tpacket_versions::TPACKET_V2,
                    RxRing::Blocks => libc::tpacket_versions::TPACKET_V3,
                } as libc::c_int),
            ),
            "PACKET_VERSION",
            name,
        )?;
        // Skip malformed transmit slots instead of stopping (must precede the rings).
        check(
            setsockopt(fd, libc::SOL_PACKET, libc::PACKET_LOSS, &1i32),
            "PACKET_LOSS",
            name,
        )?;
        let rc = match cfg.rx_ring {
            RxRing::Blocks => setsockopt(
                fd,
                libc::SOL_PACKET,
                libc::PACKET_RX_RING,
                &libc::tpacket_req3 {
                    tp_block_size: cfg.rx_block_size,
                    tp_block_nr: cfg.rx_blocks,
                    tp_frame_size: 2048,
                    tp_frame_nr: cfg.rx_block_size / 2048 * cfg.rx_blocks,
                    tp_retire_blk_tov: cfg.block_timeout_ms,
                    tp_sizeof_priv: 0,
                    tp_feature_req_word: 0,
                },
            ),
            RxRing::Frames => {
                // A slot holds the header, the kernel's alignment pad before the MAC header
                // (at most 16 bytes plus alignment) and the largest frame.
                let fs = (max_frame + RX2_MAC_ROOM).next_power_of_two().max(2048);
                let block = (cfg.rx_block_size as usize).max(fs);
                let blocks = (cfg.rx_block_size as usize * cfg.rx_blocks as usize / block).max(1);
                me.rx_block_size = block;
                me.rx_blocks = blocks;
                me.rx_frame_size = fs;
                me.rx_frames = block / fs * blocks;
                setsockopt(
                    fd,
                    libc::SOL_PACKET,
                    libc::PACKET_RX_RING,
                    &libc::tpacket_req {
                        tp_block_size: block as u32,
                        tp_block_nr: blocks as u32,
                        tp_frame_size: fs as u32,
                        tp_frame_nr: me.rx_frames as u32,
                    },
                )
            }
        };
        check(rc, "PACKET_RX_RING", name)?;
        let (tx_block, tx_blocks) = me.tx_ring(cfg.rx_ring, cfg.tx_frames)?;
        let rx_len = me.rx_block_size * me.rx_blocks;
        let tx_len = (tx_block * tx_blocks) as usize;
        // SAFETY: maps the rings just configured on fd; checked for MAP_FAILED.
        let map = unsafe {
            libc::mmap(
                ptr::null_mut(),
                rx_len + tx_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("{name}: mmap rings: {e}")));
        }
        me.map = map as *mut u8;
        me.map_len = rx_len + tx_len;
        // SAFETY: rx_len is within the mapping.
        me.tx_base = unsafe { me.map.add(rx_len) };
        // Never see our own (or the kernel's) transmitted frames; send without the qdisc.
        check(
            setsockopt(fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &1i32),
            "PACKET_IGNORE_OUTGOING",
            name,
        )?;
        check(
            setsockopt(fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &1i32),
            "PACKET_QDISC_BYPASS",
            name,
        )?;
        if let Some(mark) = cfg.accept_mark {
            accept_only_mark(fd, mark, name)?;
        }
        bind(fd, ifindex, cfg.fanout, name)?;
        Ok(me)
    }

    /// Sets up the transmit ring for `tx_frames` frames at least (its request in the
    /// version `rx_ring` names): its block size and count.
    fn tx_ring(&mut self, rx_ring: RxRing, tx_frames: u32) -> io::Result<(u32, u32)> {
        let tx_block = (self.tx_frame_size as u32).max(1 << 16);
        let per_block = tx_block / self.tx_frame_size as u32;
        let tx_blocks = tx_frames.div_ceil(per_block).max(1);
        // The V2 request is the first four fields of the V3 one; the kernel reads the
        // version's own size.
        let tx = libc::tpacket_req3 {
            tp_block_size: tx_block,
            tp_block_nr: tx_blocks,
            tp_frame_size: self.tx_frame_size as u32,
            tp_frame_nr: per_block * tx_blocks,
            tp_retire_blk_tov: 0,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        let rc = match rx_ring {
            RxRing::Blocks => setsockopt(self.fd, libc::SOL_PACKET, libc::PACKET_TX_RING, &tx),
            RxRing::Frames => setsockopt(
                self.fd,
                libc::SOL_PACKET,
                libc::PACKET_TX_RING,
                &libc::tpacket_req {
                    tp_block_size: tx.tp_block_size,
                    tp_block_nr: tx.tp_block_nr,
                    tp_frame_size: tx.tp_frame_size,
                    tp_frame_nr: tx.tp_frame_nr,
                },
            ),
        };
        check(rc, "PACKET_TX_RING", &self.name)?;
        self.tx_frames = (per_block * tx_blocks) as usize;
        Ok((tx_block, tx_blocks))
    }

    /// The fanout group this socket belongs to (see [`RingConfig::fanout`]).
    pub fn fanout_group(&self) -> io::Result<u16> {
        let mut v = 0u32;
        let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
        // SAFETY: v and len are valid for the sizes given.
        let r = unsafe {
            libc::getsockopt(
                self.fd,
                libc::SOL_PACKET,
                libc::PACKET_FANOUT,
                &mut v as *mut u32 as *mut libc::c_void,
                &mut len,
            )
        };
        check(r, "PACKET_FANOUT", &self.name)?;
        Ok(v as u16)
    }

    fn block(&self, i: usize) -> *mut libc::tpacket_block_desc {
        // SAFETY: i < rx_blocks, so the offset is within the receive ring.
        unsafe { self.map.add(i * self.rx_block_size) as *mut libc::tpacket_block_desc }
    }

    fn block_status(b: *mut libc::tpacket_block_desc) -> &'static AtomicU32 {
        // SAFETY: block_status is an aligned u32 in the shared mapping, written by the kernel
        // and by us; reading it through an atomic is how the ring protocol is meant to work.
        unsafe { AtomicU32::from_ptr(ptr::addr_of_mut!((*b).hdr.bh1.block_status)) }
    }

    fn tx_status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: i < tx_frames; tp_status is an aligned u32 in the slot header of the
        // ring's version.
        unsafe {
            let slot = self.tx_base.add(i * self.tx_frame_size);
            match self.version {
                RxRing::Blocks => AtomicU32::from_ptr(ptr::addr_of_mut!(
                    (*(slot as *mut libc::tpacket3_hdr)).tp_status
                )),
                RxRing::Frames => AtomicU32::from_ptr(ptr::addr_of_mut!(
                    (*(slot as *mut libc::tpacket2_hdr)).tp_status
                )),
            }
        }
    }

    /// Writes a frame length into transmit slot `i`'s header.
    ///
    /// # Safety
    /// `i < tx_frames` and the slot is ours (not marked for sending).
    unsafe fn tx_set_len(&self, i: usize, len: usize) {
        // SAFETY: the caller's promise; the header fields are within the slot.
        unsafe {
            let slot = self.tx_base.add(i * self.tx_frame_size);
            match self.version {
                RxRing::Blocks => {
                    let h = slot as *mut libc::tpacket3_hdr;
                    ptr::addr_of_mut!((*h).tp_len).write(len as u32);
                    ptr::addr_of_mut!((*h).tp_snaplen).write(len as u32);
                }
                RxRing::Frames => {
                    let h = slot as *mut libc::tpacket2_hdr;
                    ptr::addr_of_mut!((*h).tp_len).write(len as u32);
                    ptr::addr_of_mut!((*h).tp_snaplen).write(len as u32);
                }
            }
        }
    }

    /// Copies a received frame as the kernel described it (`data`: `snap` bytes of it, or
    /// `None` when it does not lie within its slot) into a pool buffer with its VLAN tag
    /// put back, and appends it to `out`; counts it in `oversize` instead when it does not
    /// fit or was truncated. Returns whether it was appended.
    ///
    /// # Safety
    /// `data`, if given, points to `snap` readable bytes.
    #[allow(clippy::too_many_arguments)]
    unsafe fn take_frame(
        pool: &mut Pool,
        out: &mut Vec<Pkt>,
        oversize: &mut u64,
        data: Option<*const u8>,
        snap: usize,
        len: usize,
        status: u32,
        (tci, tpid): (u16, u16),
        ns: u64,
    ) -> bool {
        // SAFETY: the caller's promise.
        match data.and_then(|d| unsafe { Self::frame_copy(pool, d, snap, len, status, tci, tpid) })
        {
            Some(mut p) => {
                p.meta.rx_ns = ns;
                out.push(p);
                true
            }
            None => {
                *oversize += 1;
                false
            }
        }
    }

    /// # Safety
    /// `data` points to `snap` readable bytes.
    unsafe fn frame_copy(
        pool: &mut Pool,
        data: *const u8,
        snap: usize,
        len: usize,
        status: u32,
        tci: u16,
        tpid: u16,
    ) -> Option<Pkt> {
        let vlan = status & libc::TP_STATUS_VLAN_VALID != 0;
        let extra = if vlan { 4 } else { 0 };
        if snap < len || snap + extra > BUF_CAP || snap < 12 {
            return None;
        }
        // SAFETY: the caller's promise.
        let data = unsafe { std::slice::from_raw_parts(data, snap) };
        let mut p = pool.get();
        if vlan {
            let tpid = if status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                tpid
            } else {
                0x8100
            };
            p.data.extend_from_slice(&data[..12]);
            p.data.extend_from_slice(&tpid.to_be_bytes());
            p.data.extend_from_slice(&tci.to_be_bytes());
            p.data.extend_from_slice(&data[12..]);
        } else {
            p.data.extend_from_slice(data);
        }
        p.meta.csum_partial = status & libc::TP_STATUS_CSUMNOTREADY != 0;
        Some(p)
    }

    /// TPACKET_V2 receive: frame by frame, each slot given back as soon as it is copied.
    fn recv_frames(
        &mut self,
        pool: &mut Pool,
        out: &mut Vec<Pkt>,
        max: usize,
        oversize: &mut u64,
    ) -> usize {
        let mut n = 0;
        while n < max {
            // SAFETY: rx_next < rx_frames, and slots are laid out back to back (the block
            // size is a multiple of the slot size), so the slot is within the receive ring.
            let slot = unsafe { self.map.add(self.rx_next * self.rx_frame_size) };
            let h = slot as *mut libc::tpacket2_hdr;
            // SAFETY: tp_status is an aligned u32 in the shared mapping, written by the
            // kernel and by us; reading it through an atomic is the ring protocol.
            let status = unsafe { AtomicU32::from_ptr(ptr::addr_of_mut!((*h).tp_status)) };
            let st = status.load(Ordering::Acquire);
            if st & libc::TP_STATUS_USER == 0 {
                break;
            }
            // SAFETY: the slot is ours until we store TP_STATUS_KERNEL; the MAC offset and
            // length are checked against the slot size before the frame is read.
            unsafe {
                let hdr = h.read();
                let mac = hdr.tp_mac as usize;
                let snap = hdr.tp_snaplen as usize;
                let fits = mac + snap <= self.rx_frame_size;
                if Self::take_frame(
                    pool,
                    out,
                    oversize,
                    fits.then(|| slot.add(mac) as *const u8),
                    snap,
                    hdr.tp_len as usize,
                    st,
                    (hdr.tp_vlan_tci, hdr.tp_vlan_tpid),
                    hdr.tp_sec as u64 * 1_000_000_000 + hdr.tp_nsec as u64,
                ) {
                    n += 1;
                }
            }
            status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.rx_next = (self.rx_next + 1) % self.rx_frames;
        }
        n
    }
}

impl AfPacket {
    /// Fills up to `n` free transmit slots in place: `fill(i, slot)` writes the i-th frame
    /// into `slot` and returns its length (0 skips it). Then asks the kernel to send them,
    /// once. Returns how many frames were queued; fewer than `n` when the ring is full.
    /// For generators, which build frames directly in the ring with no copy.
    pub fn send_fill(
        &mut self,
        n: usize,
        mut fill: impl FnMut(usize, &mut [u8]) -> usize,
    ) -> io::Result<usize> {
        let room = self.tx_frame_size - self.tx_data_off;
        let mut queued = 0;
        for i in 0..n {
            let slot_i = self.tx_next;
            let st = self.tx_status(slot_i).load(Ordering::Acquire);
            if st & (libc::TP_STATUS_SEND_REQUEST | libc::TP_STATUS_SENDING) != 0 {
                break;
            }
            // SAFETY: the slot is free (status checked above) and lies within the transmit
            // ring; `room` bytes follow its header.
            let len = unsafe {
                let slot = self.tx_base.add(slot_i * self.tx_frame_size);
                let data = std::slice::from_raw_parts_mut(slot.add(self.tx_data_off), room);
                let len = fill(i, data).min(room);
                self.tx_set_len(slot_i, len);
                len
            };
            if len == 0 {
                continue;
            }
            self.tx_status(slot_i)
                .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
            self.tx_next = (slot_i + 1) % self.tx_frames;
            queued += 1;
        }
        if queued > 0 {
            self.kick()?;
        }
        Ok(queued)
    }

    /// Asks the kernel to transmit the slots marked for sending.
    fn kick(&mut self) -> io::Result<()> {
        // SAFETY: zero-length send on our socket: asks the kernel to transmit the ring.
        let rc =
            unsafe { libc::sendto(self.fd, ptr::null(), 0, libc::MSG_DONTWAIT, ptr::null(), 0) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                // Frames stay marked and go with the next kick.
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => {}
                _ => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("{}: send: {e}", self.name),
                    ))
                }
            }
        }
        Ok(())
    }
}

impl Port for AfPacket {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv(
        &mut self,
        pool: &mut Pool,
        out: &mut Vec<Pkt>,
        max: usize,
        oversize: &mut u64,
    ) -> io::Result<usize> {
        if self.version == RxRing::Frames {
            let before = *oversize;
            let n = self.recv_frames(pool, out, max, oversize);
            if *oversize > before {
                if let Some(prog) = self.whole_prog.take() {
                    self.whole_frames(prog);
                }
            }
            return Ok(n);
        }
        let mut n = 0;
        // Whole blocks only: a block is given back to the kernel in one piece, so `max` is
        // reached at a block boundary and may be exceeded by up to one block's frames.
        while n < max {
            let b = self.block(self.rx_next);
            let status = Self::block_status(b);
            if status.load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                break;
            }
            // SAFETY: the block is ours until we store TP_STATUS_KERNEL; the kernel wrote
            // num_pkts frames starting at offset_to_first_pkt, each within the block, and
            // every offset below is checked against the block size before use.
            unsafe {
                let h1 = ptr::addr_of!((*b).hdr.bh1).read();
                let base = b as *const u8;
                let mut off = h1.offset_to_first_pkt as usize;
                for _ in 0..h1.num_pkts {
                    if off + std::mem::size_of::<libc::tpacket3_hdr>() > self.rx_block_size {
                        break;
                    }
                    let hdr = (base.add(off) as *const libc::tpacket3_hdr).read();
                    let mac = off + hdr.tp_mac as usize;
                    let snap = hdr.tp_snaplen as usize;
                    let fits = mac + snap <= self.rx_block_size;
                    if Self::take_frame(
                        pool,
                        out,
                        oversize,
                        fits.then(|| base.add(mac)),
                        snap,
                        hdr.tp_len as usize,
                        hdr.tp_status,
                        (hdr.hv1.tp_vlan_tci as u16, hdr.hv1.tp_vlan_tpid),
                        hdr.tp_sec as u64 * 1_000_000_000 + hdr.tp_nsec as u64,
                    ) {
                        n += 1;
                    }
                    if hdr.tp_next_offset == 0 {
                        break;
                    }
                    off += hdr.tp_next_offset as usize;
                }
            }
            fence(Ordering::Release);
            status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.rx_next = (self.rx_next + 1) % self.rx_blocks;
        }
        Ok(n)
    }

    fn send(&mut self, frames: &mut Vec<Pkt>, pool: &mut Pool) -> io::Result<TxResult> {
        let mut r = TxResult::default();
        let room = self.tx_frame_size - self.tx_data_off;
        for p in frames.drain(..) {
            let i = self.tx_next;
            let st = self.tx_status(i).load(Ordering::Acquire);
            if st & (libc::TP_STATUS_SEND_REQUEST | libc::TP_STATUS_SENDING) != 0
                || p.data.len() > room
            {
                r.ring_full += 1;
                pool.put(p);
                continue;
            }
            // SAFETY: slot i is free (status checked above) and lies within the transmit
            // ring; the frame fits the slot after its header.
            unsafe {
                let slot = self.tx_base.add(i * self.tx_frame_size);
                ptr::copy_nonoverlapping(p.data.as_ptr(), slot.add(self.tx_data_off), p.data.len());
                self.tx_set_len(i, p.data.len());
            }
            self.tx_status(i)
                .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
            self.tx_next = (i + 1) % self.tx_frames;
            r.sent += 1;
            r.sent_bytes += p.data.len();
            pool.put(p);
        }
        if r.sent > 0 {
            self.kick()?;
        }
        Ok(r)
    }

    fn poll_fd(&self) -> Option<i32> {
        Some(self.fd)
    }

    fn info(&self) -> PortInfo {
        PortInfo {
            backend: "packet",
            mode: format!(
                "{}{}{}{}",
                match self.version {
                    RxRing::Frames => "TPACKET_V2 frame ring",
                    RxRing::Blocks => "TPACKET_V3 block ring",
                },
                if self.fanout {
                    ", fanout by flow hash"
                } else {
                    ""
                },
                match self.tcx.as_ref().map(|t| t.what) {
                    Some(Tcx::StackOff) => ", kernel stack off (tcx)",
                    Some(Tcx::FastPath) => ", fast path (tcx)",
                    None => "",
                },
                self.why
                    .as_deref()
                    .map(|w| format!(", AF_PACKET because {w}"))
                    .unwrap_or_default()
            ),
        }
    }

    fn take_backend_drops(&mut self, count: &mut dyn FnMut(dataplane::Drop, u64)) {
        // PACKET_STATISTICS: frames received and dropped since the last call (the kernel
        // resets them on reading). Both versions' structures start with these two.
        let mut st = libc::tpacket_stats_v3 {
            tp_packets: 0,
            tp_drops: 0,
            tp_freeze_q_cnt: 0,
        };
        let mut len = std::mem::size_of_val(&st) as u32;
        // SAFETY: st is a live tpacket_stats_v3 of len bytes.
        let r = unsafe {
            libc::getsockopt(
                self.fd,
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                &mut st as *mut _ as *mut libc::c_void,
                &mut len,
            )
        };
        if r == 0 && st.tp_drops > 0 {
            count(dataplane::Drop::RxRingFull, st.tp_drops as u64);
        }
        if let Some(n) = self.device.as_mut().map(|d| d.take()).filter(|&n| n > 0) {
            count(dataplane::Drop::DeviceRxDropped, n);
        }
        if let Some(n) = self.device_tx.as_mut().map(|d| d.take()).filter(|&n| n > 0) {
            count(dataplane::Drop::DeviceTxDropped, n);
        }
    }
}

impl Drop for AfPacket {
    fn drop(&mut self) {
        // SAFETY: map/map_len came from mmap and fd from socket; both are released once.
        unsafe {
            if !self.map.is_null() {
                libc::munmap(self.map as *mut libc::c_void, self.map_len);
            }
            libc::close(self.fd);
        }
    }
}
