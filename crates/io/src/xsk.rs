//! AF_XDP ports: an XDP program on the interface hands every received frame to an AF_XDP
//! socket of its receive queue, and frames leave through the same sockets.
//!
//! Per interface: one program (assembled below, five instructions) that redirects each
//! frame to the socket of its receive queue through an XSKMAP (a frame of a queue without
//! a socket goes on to the kernel, `XDP_PASS`), attached through a BPF link, so that it
//! leaves with the process however the process ends. Per receive queue: one socket with
//! fill, completion, RX and TX rings, bound with `XDP_USE_NEED_WAKEUP`, on a [`Umem`]
//! (frames of [`FRAME`] bytes) that the sockets of one worker's ports share
//! (`XDP_SHARED_UMEM`) or that the port has alone. The rings are written here, not taken
//! from a crate: they are a few loads and stores on shared memory, and the hot path is
//! ours to see.
//!
//! Zero-copy is asked for first and copy mode taken when the driver refuses it (veth has
//! no zero-copy). In copy mode the kernel copies each received frame into the UMEM and
//! builds a socket buffer for each transmitted one inside `sendto`; the transmit path
//! kicks the kernel once per batch and again while it reports more to send.
//!
//! A received frame is lent to the element: its packet buffer ([`Pkt`]'s [`Buf`]) points
//! into the UMEM frame, which comes back to the UMEM's free frames when the buffer is
//! dropped, or from the completion ring after the frame left by a socket of the same UMEM
//! from where it lies (no copy in user space; none at all on a NIC in zero-copy mode).
//! Frames the element built, or from another UMEM, are copied into a free frame to be
//! sent. Frames are lent only while the UMEM has a receive batch free for each socket's
//! fill ring and a transmit ring's worth for copies; past that they are copied to the
//! heap and given back at once, so that frames the element holds never starve the rings.

use dataplane::buf::{Buf, FrameStore, Pkt, Pool};
use dataplane::counters::Event;
use dataplane::port::{Port, PortInfo, TxResult};
use dataplane::Drop as Reason;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

mod program;
mod ring;
pub(crate) use program::xdp_link;
use program::*;
pub use program::{xdp_only, AttachMode, Hook, ProgramFor};
pub use ring::Umem;
use ring::*;

const AF_XDP: i32 = 44;
const SOL_XDP: i32 = 283;
const XDP_MMAP_OFFSETS: i32 = 1;
const XDP_RX_RING: i32 = 2;
const XDP_TX_RING: i32 = 3;
const XDP_UMEM_REG: i32 = 4;
const XDP_UMEM_FILL_RING: i32 = 5;
const XDP_UMEM_COMPLETION_RING: i32 = 6;
const XDP_STATISTICS: i32 = 7;
const XDP_OPTIONS: i32 = 8;
const XDP_OPTIONS_ZEROCOPY: u32 = 1;
const XDP_SHARED_UMEM: u16 = 1 << 0;
const XDP_COPY: u16 = 1 << 1;
const XDP_ZEROCOPY: u16 = 1 << 2;
const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
const XDP_RING_NEED_WAKEUP: u32 = 1;
const XDP_PGOFF_RX_RING: i64 = 0;
const XDP_PGOFF_TX_RING: i64 = 0x8000_0000;
const XDP_UMEM_PGOFF_FILL_RING: i64 = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: i64 = 0x1_8000_0000;
/// Frames the kernel may build socket buffers for in one `sendto` (copy mode; kernels
/// from 6.17). Older kernels send 32 a call; the transmit path kicks again while the
/// kernel reports more.
const XDP_MAX_TX_SKB_BUDGET: i32 = 9;
pub(crate) const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// The most frames one socket's `recv` takes from its RX ring at once (an element's batch).
const RECV_BATCH: usize = 256;

/// Bytes of UMEM per frame. The kernel puts a received frame 256 bytes in (its XDP
/// headroom), so frames up to 3,840 bytes fit; larger MTUs use AF_PACKET.
pub const FRAME: usize = 4096;
/// The largest frame an AF_XDP port takes.
pub const MAX_FRAME: usize = FRAME - 256;

/// Ring sizes of one socket (each a power of two). The UMEM holds twice `rx` frames for
/// receiving (the fill ring full while the RX ring is full) and `tx` for sending.
#[derive(Debug, Clone, Copy)]
pub struct XskConfig {
    pub rx: u32,
    pub tx: u32,
    /// Take copy mode even where the driver offers zero-copy.
    pub force_copy: bool,
    /// Receive timestamps taken in the XDP hook (`xsk_stamp`, `bpf/xsk.bpf.c`, writes the kernel's
    /// clock into each frame's metadata): `recv` sets `rx_ns` (CLOCK_REALTIME) from them.
    /// Only with [`XdpPort::open_stamped`], whose program writes them.
    pub rx_stamp: bool,
}

impl Default for XskConfig {
    fn default() -> Self {
        XskConfig {
            rx: 2048,
            tx: 2048,
            force_copy: false,
            rx_stamp: false,
        }
    }
}

/// One AF_XDP socket on one receive queue, with its rings, on a UMEM it may share.
struct Socket {
    // Rings before the socket: unmapped first when dropped; the UMEM outlives both.
    fill: Ring<u64>,
    comp: Ring<u64>,
    rx: Ring<Desc>,
    tx: Ring<Desc>,
    fd: OwnedFd,
    umem: Arc<Umem>,
    /// Whether this socket registered the UMEM (the others bind to it).
    registers: bool,
    /// Whether it is bound (and counted in the UMEM's sockets).
    bound: bool,
    /// Whether received frames are lent to the element (a UMEM shared with other ports),
    /// or copied to the heap.
    lend: bool,
    /// Free frames at hand (taken from the UMEM's list in batches, given back above
    /// [`Socket::cache_max`]): the hot path takes no lock.
    cache: Vec<u64>,
    zero_copy: bool,
    /// The kernel's statistics when last read.
    stats: Statistics,
    /// CLOCK_REALTIME minus CLOCK_MONOTONIC when opened, where frames carry the XDP
    /// hook's monotonic receive time in their metadata ([`XskConfig::rx_stamp`]).
    stamp_offset: Option<i64>,
    /// Frames received without the stamp program's time (`rx_stamp` only).
    unstamped: u64,
    /// Frames received while the UMEM ran low, copied to the heap instead of lent (a
    /// socket that does not lend copies every frame, and counts none here).
    copied_low: u64,
    /// Frames sent from the UMEM frame they arrived in.
    tx_in_place: u64,
    /// Frames copied into a UMEM frame to be sent.
    tx_copied: u64,
}

fn sockopt<T>(fd: i32, opt: i32, v: &T, what: &str) -> io::Result<()> {
    // SAFETY: v points to a live T of the given size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            SOL_XDP,
            opt,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as u32,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{what}: {e}")))
    } else {
        Ok(())
    }
}

fn getsockopt<T: Default>(fd: i32, opt: i32) -> io::Result<T> {
    let mut v = T::default();
    let mut len = std::mem::size_of::<T>() as u32;
    // SAFETY: v is a live T of len bytes to write into.
    let r = unsafe {
        libc::getsockopt(
            fd,
            SOL_XDP,
            opt,
            &mut v as *mut T as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(v)
    }
}

/// Registers `umem` with the AF_XDP socket `s` (the first socket of a UMEM does; the
/// others bind to it).
fn register(s: i32, umem: &Umem) -> io::Result<()> {
    // struct xdp_umem_reg: addr, len, chunk_size, headroom, flags (24 bytes, which every
    // kernel with AF_XDP takes).
    #[repr(C)]
    struct UmemReg {
        addr: u64,
        len: u64,
        chunk_size: u32,
        headroom: u32,
        flags: u32,
        pad: u32,
    }
    let reg = UmemReg {
        addr: umem.mem as u64,
        len: umem.len as u64,
        chunk_size: FRAME as u32,
        headroom: 0,
        flags: 0,
        pad: 0,
    };
    sockopt(s, XDP_UMEM_REG, &reg, "XDP_UMEM_REG")
}

/// Binds the AF_XDP socket `s` to queue `queue` of interface `ifindex` with `flags` (and
/// to the UMEM of the socket `shared_with`, where it shares one). A queue whose last
/// socket just closed stays taken until the kernel's deferred release of that socket's
/// pool has run (a workqueue's, after the process ended): an element restarted at once
/// (`systemctl restart`, `lab upgrade`) may find it busy for a moment. Busy, the bind is
/// tried again for up to 2 s.
fn bind_xsk(
    s: i32,
    ifindex: u32,
    queue: u32,
    shared_with: Option<i32>,
    flags: u16,
) -> io::Result<()> {
    #[repr(C)]
    struct SockaddrXdp {
        family: u16,
        flags: u16,
        ifindex: u32,
        queue_id: u32,
        shared_umem_fd: u32,
    }
    let a = SockaddrXdp {
        family: AF_XDP as u16,
        flags,
        ifindex,
        queue_id: queue,
        shared_umem_fd: shared_with.unwrap_or(0) as u32,
    };
    let busy_until = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        // SAFETY: a is a valid sockaddr_xdp of the size given.
        let r = unsafe {
            libc::bind(
                s,
                &a as *const SockaddrXdp as *const libc::sockaddr,
                std::mem::size_of::<SockaddrXdp>() as u32,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) || std::time::Instant::now() >= busy_until {
            return Err(e);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

impl Socket {
    /// A socket on `umem`; with `lend`, received frames are lent to the element rather
    /// than copied to the heap.
    fn open(
        ifindex: u32,
        queue: u32,
        cfg: XskConfig,
        umem: Arc<Umem>,
        lend: bool,
    ) -> io::Result<Socket> {
        if !cfg.rx.is_power_of_two() || !cfg.tx.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "AF_XDP ring sizes must be powers of two",
            ));
        }
        // SAFETY: plain socket(2).
        let raw = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("AF_XDP socket: {e}")));
        }
        // SAFETY: the kernel just returned this descriptor to us.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = fd.as_raw_fd();
        // The registration lock is held until bind: one socket registers, the others
        // bind to it.
        let mut registered = umem.registered.lock().unwrap_or_else(|e| e.into_inner());
        let shared_with = *registered;
        if shared_with.is_none() {
            if umem.sockets.load(Ordering::Relaxed) > 0 {
                return Err(io::Error::other(
                    "the socket that registered this UMEM is closed: open the ports of a UMEM together",
                ));
            }
            register(s, &umem)?;
        }
        // Every socket has fill and completion rings of its own (a socket sharing the UMEM
        // on another queue or device must).
        sockopt(s, XDP_UMEM_FILL_RING, &cfg.rx, "XDP_UMEM_FILL_RING")?;
        sockopt(
            s,
            XDP_UMEM_COMPLETION_RING,
            &cfg.tx,
            "XDP_UMEM_COMPLETION_RING",
        )?;
        sockopt(s, XDP_RX_RING, &cfg.rx, "XDP_RX_RING")?;
        sockopt(s, XDP_TX_RING, &cfg.tx, "XDP_TX_RING")?;
        let off: MmapOffsets = getsockopt(s, XDP_MMAP_OFFSETS)
            .map_err(|e| io::Error::new(e.kind(), format!("XDP_MMAP_OFFSETS: {e}")))?;
        let fill = Ring::<u64>::map(s, &off.fr, cfg.rx, XDP_UMEM_PGOFF_FILL_RING, "fill")?;
        let comp = Ring::<u64>::map(
            s,
            &off.cr,
            cfg.tx,
            XDP_UMEM_PGOFF_COMPLETION_RING,
            "completion",
        )?;
        let rx = Ring::<Desc>::map(s, &off.rx, cfg.rx, XDP_PGOFF_RX_RING, "RX")?;
        let tx = Ring::<Desc>::map(s, &off.tx, cfg.tx, XDP_PGOFF_TX_RING, "TX")?;
        let mut me = Socket {
            fill,
            comp,
            rx,
            tx,
            fd,
            umem: umem.clone(),
            registers: shared_with.is_none(),
            bound: false,
            lend,
            cache: Vec::with_capacity(cfg.tx as usize + 4 * RECV_BATCH),
            zero_copy: false,
            stats: Statistics::default(),
            stamp_offset: cfg.rx_stamp.then(|| {
                crate::xdp::clock_ns(libc::CLOCK_REALTIME)
                    - crate::xdp::clock_ns(libc::CLOCK_MONOTONIC)
            }),
            unstamped: 0,
            copied_low: 0,
            tx_in_place: 0,
            tx_copied: 0,
        };
        // The receive frames go to the kernel (as many as the fill ring takes) before the
        // socket is bound.
        me.refill();
        // A bigger copy-mode transmit budget where the kernel has it; harmless otherwise.
        let _ = sockopt(s, XDP_MAX_TX_SKB_BUDGET, &(cfg.tx as i32), "budget");
        let bind = |flags: u16| bind_xsk(s, ifindex, queue, shared_with, flags);
        // A socket sharing the UMEM takes its mode (zero-copy or copy, need_wakeup) from
        // the socket that registered it: the kernel refuses any other flag with
        // XDP_SHARED_UMEM.
        let zc = if shared_with.is_some() {
            bind(XDP_SHARED_UMEM)
        } else if cfg.force_copy {
            Err(io::Error::from(io::ErrorKind::Unsupported))
        } else {
            bind(XDP_USE_NEED_WAKEUP | XDP_ZEROCOPY)
        };
        if let (Err(e), Some(_)) = (&zc, shared_with) {
            let e = io::Error::new(
                e.kind(),
                format!("bind queue {queue} to a shared UMEM: {e}"),
            );
            me.give_back_fill();
            return Err(e);
        }
        if zc.is_err() {
            if let Err(e) = bind(XDP_USE_NEED_WAKEUP | XDP_COPY) {
                // The frames on the fill ring go back: the socket never ran.
                me.give_back_fill();
                return Err(io::Error::new(e.kind(), format!("bind queue {queue}: {e}")));
            }
        }
        if shared_with.is_none() {
            *registered = Some(s);
        }
        umem.sockets.fetch_add(1, Ordering::Relaxed);
        me.bound = true;
        drop(registered);
        me.zero_copy = getsockopt::<u32>(s, XDP_OPTIONS)
            .map(|o| o & XDP_OPTIONS_ZEROCOPY != 0)
            .unwrap_or(false);
        Ok(me)
    }

    /// Takes back the frames put on the fill ring of a socket that was never bound.
    fn give_back_fill(&mut self) {
        let n = self
            .fill
            .head
            .wrapping_sub(self.fill.consumer().load(Ordering::Acquire));
        let back: Vec<u64> = (0..n)
            .map(|i| {
                // SAFETY: the n entries before our producer index are ours (the kernel
                // never consumed them: the socket is not bound).
                unsafe {
                    *self
                        .fill
                        .desc
                        .add((self.fill.head.wrapping_sub(n - i) & self.fill.mask) as usize)
                }
            })
            .chain(self.cache.drain(..))
            .collect();
        self.umem.with_free(|f| f.extend(back));
    }

    /// A receive batch of this socket: what one `recv` takes at most.
    fn batch(&self) -> usize {
        RECV_BATCH.min(self.rx.mask as usize + 1)
    }

    /// Frames the cache keeps before giving the rest back: two batches.
    fn cache_max(&self) -> usize {
        2 * self.batch()
    }

    /// Takes up to `want` frames from the UMEM's list into the cache, leaving `keep`.
    fn grab(&mut self, want: usize, keep: usize) {
        let cache = &mut self.cache;
        self.umem.with_free(|free| {
            let k = want.min(free.len().saturating_sub(keep));
            cache.extend(free.drain(free.len() - k..));
        });
    }

    /// Gives the UMEM back what the cache holds beyond [`Socket::cache_max`], down to
    /// half of it (frames that other sockets' fill rings need: those this one sent in
    /// place came from their receive rings).
    fn trim(&mut self) {
        let max = self.cache_max();
        if self.cache.len() > max {
            let cache = &mut self.cache;
            self.umem
                .with_free(|free| free.extend(cache.drain(max / 2..)));
        }
    }

    /// Takes the frames the kernel has finished sending into the cache.
    fn reap(&mut self) {
        let n = self.comp.ready();
        if n == 0 {
            return;
        }
        for i in 0..n {
            // SAFETY: i < ready entries, written by the kernel.
            self.cache
                .push(unsafe { *self.comp.at(i) } & !(FRAME as u64 - 1));
        }
        self.comp.consume(n);
    }

    fn kick(&self) -> io::Result<()> {
        // SAFETY: zero-length send on our socket: asks the kernel to transmit the TX ring.
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                ptr::null(),
                0,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                // More to send (copy mode sends a budget per call), or busy: the frames
                // stay on the ring and go with the next kick.
                Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS)
                | Some(libc::ENETDOWN) => {}
                _ => return Err(e),
            }
        }
        Ok(())
    }

    fn recv(&mut self, pool: &mut Pool, out: &mut Vec<Pkt>, max: u32, oversize: &mut u64) -> u32 {
        let n = self.rx.ready().min(max).min(RECV_BATCH as u32);
        if n == 0 {
            self.refill();
            if self.fill.needs_wakeup() {
                // SAFETY: a non-blocking zero-length receive: wakes the driver to refill.
                unsafe {
                    libc::recvfrom(
                        self.fd.as_raw_fd(),
                        ptr::null_mut(),
                        0,
                        libc::MSG_DONTWAIT,
                        ptr::null_mut(),
                        ptr::null_mut(),
                    )
                };
            }
            return 0;
        }
        // Lend the frames to the element while the UMEM has frames to spare; else copy.
        let lend = self.lend
            && self.umem.free_len.load(Ordering::Relaxed) + self.cache.len()
                >= self.umem.lend_floor;
        let mut got = 0;
        for i in 0..n {
            // SAFETY: i < ready entries, written by the kernel.
            let d = unsafe { *self.rx.at(i) };
            let len = d.len as usize;
            let chunk = d.addr & !(FRAME as u64 - 1);
            let head = (d.addr - chunk) as usize;
            if (chunk as usize) < self.umem.len
                && head + len <= FRAME
                && (14..=MAX_FRAME).contains(&len)
            {
                let rx_ns = match self.stamp_offset {
                    Some(off) => self.take_stamp(d.addr, off),
                    None => 0,
                };
                let p = if lend {
                    // SAFETY: the frame's chunk lies within the UMEM (checked above), the
                    // kernel gave it to us on the RX ring and nobody else uses it until
                    // it comes back to the free frames (the buffer's release, or the
                    // completion ring after a transmit); the buffer's store keeps the
                    // mapping alive.
                    let data = unsafe {
                        Buf::lend(
                            self.umem.clone(),
                            chunk,
                            NonNull::new_unchecked(self.umem.mem.add(chunk as usize)),
                            FRAME,
                            head,
                            len,
                        )
                    };
                    Pkt {
                        data,
                        meta: Default::default(),
                    }
                } else {
                    let mut p = pool.get();
                    // SAFETY: the frame lies within the UMEM (checked above) and is ours
                    // until it goes back to the free frames.
                    p.data.extend_from_slice(unsafe {
                        std::slice::from_raw_parts(self.umem.mem.add(d.addr as usize), len)
                    });
                    self.cache.push(chunk);
                    self.copied_low += self.lend as u64;
                    p
                };
                let mut p = p;
                // No socket-buffer flags reach an AF_XDP socket: a frame from a local
                // sender on a virtual link may carry a partial checksum.
                p.meta.csum_unknown = true;
                p.meta.rx_ns = rx_ns;
                out.push(p);
                got += 1;
            } else {
                *oversize += 1;
                if (chunk as usize) < self.umem.len {
                    self.cache.push(chunk);
                }
            }
        }
        self.rx.consume(n);
        self.refill();
        self.trim();
        got
    }

    /// The receive time the stamp program left in the 8 bytes of metadata before the
    /// frame at `addr` (CLOCK_REALTIME, ns), which it then clears: a frame without one
    /// (metadata refused, or not copied) gets the time it is read here.
    fn take_stamp(&mut self, addr: u64, offset: i64) -> u64 {
        let chunk = addr & !(FRAME as u64 - 1);
        let mut mono = 0u64;
        if addr >= chunk + 8 {
            // SAFETY: the 8 bytes lie within the frame's UMEM chunk, which is ours until
            // it goes back to the free frames.
            unsafe {
                let at = self.umem.mem.add(addr as usize - 8) as *mut u64;
                mono = ptr::read_unaligned(at);
                ptr::write_unaligned(at, 0);
            }
        }
        if mono == 0 {
            self.unstamped += 1;
            mono = crate::xdp::clock_ns(libc::CLOCK_MONOTONIC) as u64;
        }
        (mono as i64 + offset) as u64
    }

    /// Gives free frames to the kernel, as far as the fill ring has room: from the cache,
    /// topped up from the UMEM's list as far as it has frames beyond its transmit reserve.
    fn refill(&mut self) {
        let room = self.fill.free() as usize;
        if room == 0 {
            return;
        }
        if self.cache.len() < room {
            self.grab(
                room - self.cache.len() + self.batch() / 2,
                self.umem.reserve,
            );
        }
        let k = room.min(self.cache.len()) as u32;
        for i in 0..k {
            // SAFETY: i < free entries of the fill ring; the entry is ours before produce().
            unsafe { *self.fill.at(i) = self.cache.pop().unwrap_or_default() };
        }
        if k > 0 {
            self.fill.produce(k);
        }
    }

    fn send(
        &mut self,
        frames: &mut std::vec::Drain<'_, Pkt>,
        pool: &mut Pool,
        r: &mut TxResult,
    ) -> io::Result<()> {
        self.reap();
        let room = self.tx.free();
        let me = Arc::as_ptr(&self.umem) as *const ();
        let mut n = 0;
        for p in frames.by_ref() {
            if n == room || p.data.len() > MAX_FRAME {
                r.ring_full += 1;
                pool.put(p);
                continue;
            }
            let Pkt { data, meta } = p;
            let bytes = data.len();
            let desc = match data.take_lent(me) {
                // A frame of this UMEM leaves from where it is.
                Ok((chunk, head, len)) => {
                    self.tx_in_place += 1;
                    Desc {
                        addr: chunk + head as u64,
                        len: len as u32,
                        options: 0,
                    }
                }
                Err(data) => {
                    if self.cache.is_empty() {
                        self.grab(self.batch(), 0);
                    }
                    let Some(addr) = self.cache.pop() else {
                        r.ring_full += 1;
                        pool.put(Pkt { data, meta });
                        continue;
                    };
                    // SAFETY: addr is a free frame of the UMEM, FRAME bytes long, and
                    // the frame is at most MAX_FRAME bytes.
                    unsafe {
                        ptr::copy_nonoverlapping(
                            data.as_ptr(),
                            self.umem.mem.add(addr as usize),
                            bytes,
                        );
                    }
                    pool.put(Pkt { data, meta });
                    self.tx_copied += 1;
                    Desc {
                        addr,
                        len: bytes as u32,
                        options: 0,
                    }
                }
            };
            // SAFETY: n < room free entries of the TX ring; the entry is ours before
            // produce().
            unsafe { *self.tx.at(n) = desc };
            n += 1;
            r.sent += 1;
            r.sent_bytes += bytes;
        }
        self.trim();
        if n == 0 {
            return Ok(());
        }
        self.tx.produce(n);
        // Copy mode sends a budget of frames per call: kick until the kernel has taken
        // them all (a bounded number of times; what is left goes with the next batch).
        for _ in 0..16 {
            if !self.zero_copy || self.tx.needs_wakeup() {
                self.kick()?;
            }
            if self.tx.free() == self.tx.mask + 1 || self.zero_copy {
                break;
            }
        }
        Ok(())
    }

    fn statistics(&self) -> Statistics {
        getsockopt(self.fd.as_raw_fd(), XDP_STATISTICS).unwrap_or_default()
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        // Sockets opened later cannot bind to a closed one. (The frames this socket's
        // rings held stay with the kernel until the UMEM goes; those at hand go back to
        // the UMEM's list, for the sockets that stay.) A socket that never bound is
        // dropped in `open`, which holds the lock, and was never counted.
        if !self.bound {
            return;
        }
        let cache = &mut self.cache;
        self.umem.with_free(|free| free.append(cache));
        let mut registered = self
            .umem
            .registered
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if self.registers {
            *registered = None;
        }
        self.umem.sockets.fetch_sub(1, Ordering::Relaxed);
    }
}

// SAFETY: the mappings are owned by this value and used only through &mut self.
unsafe impl Send for Socket {}

/// The receive queues an interface has (sysfs), at least one.
pub fn rx_queues(name: &str) -> u32 {
    std::fs::read_dir(format!("/sys/class/net/{name}/queues"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count() as u32
        })
        .unwrap_or(1)
        .max(1)
}

/// An AF_XDP port: the redirect program on an interface and a socket on each of the
/// receive queues it serves.
pub struct XdpPort {
    name: String,
    sockets: Vec<Socket>,
    attached: std::sync::Arc<AttachedShared>,
    /// The socket the next receive starts at (round robin over queues).
    next: usize,
    /// The UMEM of its sockets, which other ports' sockets may share.
    umem: Arc<Umem>,
    /// Frames sent in place, sent copied, and received copied, when last reported.
    reported: [u64; 3],
    /// The interface's transmit drops, where this port reports them (the first worker's).
    device_tx: Option<crate::netdev::DeviceDrops>,
}

impl XdpPort {
    /// This port reports its interface's own transmit drops (`device_tx_dropped`): what
    /// the device could not send, the fast path's redirects to it included. (Not its
    /// receive drops: a veth counts in `rx_dropped` every frame its XDP program redirected
    /// and the socket could not take, which `rx_ring_full` and `xsk_rx_dropped` count.)
    pub fn report_device_drops(&mut self) {
        self.device_tx = crate::netdev::DeviceDrops::tx(&self.name);
    }
}

/// The attachment, shared by the ports (one per worker) of one interface.
pub struct AttachedShared(Attached);

impl AttachedShared {
    /// Loads the element's next program for this interface (`program`, given its XSKMAP),
    /// to [`AttachedShared::replace`] the running one with: the verifier's refusal comes
    /// here, before any port has changed.
    pub fn load(&self, program: ProgramFor) -> io::Result<OwnedFd> {
        if !self.0.fast {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this port runs the plain redirect, not an element's program",
            ));
        }
        program(Hook::Xdp(self.0.map.as_raw_fd()))
    }

    /// Whether the interface's tcx hook runs the fast path's hand-off
    /// ([`crate::handoff`]): frames its XDP program passes with the hand-off's metadata
    /// leave by their egress there.
    pub fn handoff(&self) -> bool {
        self.0.handoff.is_some()
    }

    /// Whether a predecessor's program still runs in the link, waiting for
    /// [`AttachedShared::take_over`].
    pub fn takeover_pending(&self) -> bool {
        self.0.pending.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Puts this element's first program in the link where a predecessor's still runs
    /// ([`crate::pin::defer_takeover`]); nothing where it runs already. Whether it took
    /// over now.
    pub fn take_over(&self) -> io::Result<bool> {
        if !self
            .0
            .pending
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            return Ok(false);
        }
        crate::pin::link_update(&self.0._link, &self.0._prog)?;
        Ok(true)
    }

    /// Puts `prog` (from [`AttachedShared::load`]) in the running program's place, in
    /// one step (the BPF link's update): every frame meets one program or the other, and
    /// the sockets stay. The link holds the program from then on.
    pub fn replace(&self, prog: &OwnedFd) -> io::Result<()> {
        crate::pin::link_update(&self.0._link, prog)
    }
}

impl crate::pin::TakeOver for AttachedShared {
    fn take_over(&self) -> io::Result<bool> {
        AttachedShared::take_over(self)
    }
}

impl XdpPort {
    /// Attaches `program` (given the XSKMAP; the fast path's), or else the plain
    /// redirect, to `name` and opens a socket on every receive queue, on `umem` (shared
    /// with other ports) or on a UMEM of the port's own.
    pub fn open_with(
        name: &str,
        cfg: XskConfig,
        mode: AttachMode,
        program: Option<ProgramFor>,
        umem: Option<Arc<Umem>>,
    ) -> io::Result<XdpPort> {
        let queues = rx_queues(name);
        let shared = std::sync::Arc::new(Self::attach(name, queues, mode, program)?);
        Self::open_queues(name, cfg, shared, &(0..queues).collect::<Vec<_>>(), umem)
    }

    /// A receiving port for measurement: `xsk_stamp` (`bpf/xsk.bpf.c`) on `name` (IPv4 and IPv6 UDP
    /// to the sockets, with their receive times; the rest to the kernel's stack) and a
    /// socket on every receive queue, whose frames carry `rx_ns`.
    pub fn open_stamped(name: &str, cfg: XskConfig) -> io::Result<XdpPort> {
        let queues = rx_queues(name);
        let ifindex = crate::netdev::ifindex(name)? as u32;
        let shared = std::sync::Arc::new(
            attach(ifindex, queues, AttachMode::Auto, None, true)
                .map(AttachedShared)
                .map_err(|e| io::Error::new(e.kind(), format!("{name}: XDP attach: {e}")))?,
        );
        let cfg = XskConfig {
            rx_stamp: true,
            ..cfg
        };
        Self::open_queues(name, cfg, shared, &(0..queues).collect::<Vec<_>>(), None)
    }

    /// The program on `name`, for ports that then open sockets on its queues
    /// ([`XdpPort::open_queues`]).
    pub fn attach(
        name: &str,
        queues: u32,
        mode: AttachMode,
        program: Option<ProgramFor>,
    ) -> io::Result<AttachedShared> {
        let mtu = crate::netdev::mtu(name)?;
        if mtu + 18 > MAX_FRAME {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{name}: MTU {mtu} is above what an AF_XDP frame holds ({})",
                    MAX_FRAME - 18
                ),
            ));
        }
        let ifindex = crate::netdev::ifindex(name)? as u32;
        attach(ifindex, queues, mode, program, false)
            .map(AttachedShared)
            .map_err(|e| io::Error::new(e.kind(), format!("{name}: XDP attach: {e}")))
    }

    /// Opens sockets on `queues` of `name`, whose program `shared` is, on `umem` (shared
    /// with the other ports of a worker, [`Umem::for_sockets`]) or on a UMEM of their own.
    pub fn open_queues(
        name: &str,
        cfg: XskConfig,
        shared: std::sync::Arc<AttachedShared>,
        queues: &[u32],
        umem: Option<Arc<Umem>>,
    ) -> io::Result<XdpPort> {
        let ifindex = crate::netdev::ifindex(name)? as u32;
        // Frames are lent to the element only where they may leave by another port
        // without a copy. On a UMEM of the port's own a frame would be copied on the way
        // out anyway, and a frame copied in at once costs less than one lent and released
        // (a first form that lent there: 0.89-1.12 us of user-space CPU per forwarded
        // 1,470-byte frame against 0.63-0.79 copying in, on veth;
        // results/forward-io/shared-umem).
        let lend = umem.is_some();
        let umem = match umem {
            Some(u) => u,
            None => Umem::for_sockets(queues.len(), &cfg)
                .map_err(|e| io::Error::new(e.kind(), format!("{name}: {e}")))?,
        };
        let mut sockets = Vec::with_capacity(queues.len());
        for &q in queues {
            let s = Socket::open(ifindex, q, cfg, umem.clone(), lend)
                .map_err(|e| io::Error::new(e.kind(), format!("{name}: AF_XDP queue {q}: {e}")))?;
            let fd = s.fd.as_raw_fd() as u32;
            crate::bpfsys::map_update(&shared.0.map, &q, &fd)
                .map_err(|e| io::Error::new(e.kind(), format!("{name}: XSKMAP queue {q}: {e}")))?;
            sockets.push(s);
        }
        Ok(XdpPort {
            name: name.to_string(),
            sockets,
            attached: shared,
            next: 0,
            umem,
            reported: [0; 3],
            device_tx: None,
        })
    }

    /// Frames received without a receive time from the stamp program (a port of
    /// [`XdpPort::open_stamped`]; they got the time they were read instead).
    pub fn unstamped(&self) -> u64 {
        self.sockets.iter().map(|s| s.unstamped).sum()
    }

    /// Whether every socket runs zero-copy.
    pub fn zero_copy(&self) -> bool {
        self.sockets.iter().all(|s| s.zero_copy)
    }

    /// The interface's attachment: its program, which [`AttachedShared::replace`]
    /// changes for every port of the interface.
    pub fn attachment(&self) -> Arc<AttachedShared> {
        self.attached.clone()
    }

    /// Whether the program runs in the driver's XDP hook (else the generic one).
    pub fn native(&self) -> bool {
        self.attached.0.native
    }

    /// The UMEM its sockets use.
    pub fn umem(&self) -> &Arc<Umem> {
        &self.umem
    }

    /// Free frames at hand in its sockets' caches.
    #[cfg(test)]
    fn cached(&self) -> usize {
        self.sockets.iter().map(|s| s.cache.len()).sum()
    }

    /// Frames sent in place (from the UMEM frame they arrived in), sent copied into a UMEM
    /// frame, and received while the UMEM ran low (copied to the heap).
    pub fn copies(&self) -> [u64; 3] {
        let sum = |f: fn(&Socket) -> u64| self.sockets.iter().map(f).sum();
        [
            sum(|s| s.tx_in_place),
            sum(|s| s.tx_copied),
            sum(|s| s.copied_low),
        ]
    }
}

impl Port for XdpPort {
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
        let k = self.sockets.len();
        let mut got = 0;
        for i in 0..k {
            if got >= max {
                break;
            }
            let s = &mut self.sockets[(self.next + i) % k];
            got += s.recv(pool, out, (max - got) as u32, oversize) as usize;
        }
        self.next = (self.next + 1) % k.max(1);
        Ok(got)
    }

    fn send(&mut self, frames: &mut Vec<Pkt>, pool: &mut Pool) -> io::Result<TxResult> {
        let mut r = TxResult::default();
        // Frames leave by the first socket: one transmit queue keeps their order.
        match self.sockets.first_mut() {
            Some(s) => s.send(&mut frames.drain(..), pool, &mut r)?,
            None => {
                r.ring_full = frames.len();
                for p in frames.drain(..) {
                    pool.put(p);
                }
            }
        }
        Ok(r)
    }

    fn poll_fd(&self) -> Option<i32> {
        self.sockets.first().map(|s| s.fd.as_raw_fd())
    }

    fn poll_fds(&self) -> Vec<i32> {
        self.sockets.iter().map(|s| s.fd.as_raw_fd()).collect()
    }

    fn info(&self) -> PortInfo {
        PortInfo {
            backend: "xdp",
            mode: format!(
                "{}, {} XDP, {} queue{}{}{}",
                if self.zero_copy() {
                    "zero-copy"
                } else {
                    "copy"
                },
                if self.native() { "native" } else { "generic" },
                self.sockets.len(),
                if self.sockets.len() == 1 { "" } else { "s" },
                match self.umem.sockets.load(Ordering::Relaxed) as usize {
                    n if n > self.sockets.len() => format!(", UMEM shared by {n} sockets"),
                    _ => String::new(),
                },
                if self.attached.0.fast {
                    ", fast path"
                } else {
                    ""
                }
            ),
        }
    }

    fn take_backend_events(&mut self, count: &mut dyn FnMut(Event, u64)) {
        let now = self.copies();
        let was = std::mem::replace(&mut self.reported, now);
        for (e, i) in [
            (Event::XskTxInPlace, 0),
            (Event::XskTxCopied, 1),
            (Event::XskRxCopied, 2),
        ] {
            if now[i] > was[i] {
                count(e, now[i] - was[i]);
            }
        }
    }

    fn take_backend_drops(&mut self, count: &mut dyn FnMut(Reason, u64)) {
        if let Some(n) = self.device_tx.as_mut().map(|d| d.take()).filter(|&n| n > 0) {
            count(Reason::DeviceTxDropped, n);
        }
        for s in &mut self.sockets {
            let now = s.statistics();
            let was = std::mem::replace(&mut s.stats, now);
            // rx_fill_ring_empty_descs is not added: the kernel counts those frames in
            // rx_dropped too.
            for (d, a, b) in [
                (Reason::XskRxDropped, now.rx_dropped, was.rx_dropped),
                (Reason::RxRingFull, now.rx_ring_full, was.rx_ring_full),
                (
                    Reason::XskInvalidDescs,
                    now.rx_invalid_descs + now.tx_invalid_descs,
                    was.rx_invalid_descs + was.tx_invalid_descs,
                ),
            ] {
                if a > b {
                    count(d, a - b);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_ns::Netns;

    /// Two ports on one UMEM: frames received on `b` are lent (no copy) and sent back out
    /// of `a` from where they are; while the element holds so many that the UMEM runs
    /// low, `b` copies what it receives instead and keeps receiving; and every frame comes
    /// back to the UMEM once its buffer is dropped or sent.
    #[test]
    fn a_shared_umem_lends_frames_and_gets_every_one_back() {
        let ns = Netns::with_veth("umem");
        ns.run(|| {
            let cfg = XskConfig {
                rx: 64,
                tx: 64,
                ..Default::default()
            };
            let umem = Umem::for_sockets(2, &cfg).unwrap();
            let open = |name: &str| {
                let at = Arc::new(XdpPort::attach(name, 1, AttachMode::Auto, None).unwrap());
                XdpPort::open_queues(name, cfg, at, &[0], Some(umem.clone())).unwrap()
            };
            let (mut a, mut b) = (open("ua"), open("ub"));
            assert!(
                b.info().mode.ends_with("UMEM shared by 2 sockets"),
                "{:?}",
                b.info()
            );
            let mut pool = Pool::new();
            let frame = |i: u32| {
                let mut f = vec![0xff; 12];
                f.extend_from_slice(&[0x88, 0xb5]);
                f.extend_from_slice(&i.to_be_bytes());
                f.resize(60, 0);
                Pkt::from_bytes(&f)
            };
            // Receives on `port` until `n` frames are in `held` (or two seconds pass); a
            // frame the kernel sent on the new veth (IPv6 neighbour discovery, say) is
            // dropped, which gives its buffer back, and counted in `copied_other` if it
            // was copied rather than lent.
            let take = |port: &mut XdpPort,
                        pool: &mut Pool,
                        held: &mut Vec<Pkt>,
                        n: usize,
                        copied_other: &mut u64| {
                let t = std::time::Instant::now();
                let ours = |p: &Pkt| p.data.get(12..14) == Some(&[0x88, 0xb5][..]);
                while held.len() < n && t.elapsed() < std::time::Duration::from_secs(2) {
                    let mut over = 0;
                    port.recv(pool, held, 64, &mut over).unwrap();
                    assert_eq!(over, 0);
                    *copied_other += held
                        .iter()
                        .filter(|p| !ours(p) && !p.data.is_lent())
                        .count() as u64;
                    held.retain(ours);
                }
            };
            // Send 400 frames from `a` to `b` in batches of 16, holding all received.
            let mut held = Vec::new();
            let mut copied_other = 0;
            for k in 0..25u32 {
                let mut batch: Vec<Pkt> = (0..16).map(|i| frame(k * 16 + i)).collect();
                let r = a.send(&mut batch, &mut pool).unwrap();
                assert_eq!(r.sent, 16);
                let n = (k as usize + 1) * 16;
                take(&mut b, &mut pool, &mut held, n, &mut copied_other);
            }
            assert_eq!(held.len(), 400, "every frame arrived");
            for (i, p) in held.iter().enumerate() {
                assert_eq!(p.data[14..18], (i as u32).to_be_bytes(), "in order, intact");
            }
            let lent = held.iter().filter(|p| p.data.is_lent()).count();
            let [_, copied_in, copied_low] = b.copies();
            assert_eq!(copied_in, 0);
            // 384 frames: 128 on the fill rings, some at hand in the sockets' caches;
            // lent while 192 were free (a batch of 64 for each socket and the 64 kept for
            // copies sent); the element held more than that, so the later frames were
            // copied and the rings never ran dry.
            assert!(
                lent >= 16 && copied_low >= 200,
                "{lent} lent, {copied_low} copied"
            );
            assert_eq!(lent as u64 + copied_low - copied_other, 400);
            // Send everything back out of `a` (the lent frames in place), then drop all.
            let [_, copied_before, _] = a.copies();
            assert_eq!(copied_before, 400, "the frames made here were copied in");
            let r = a.send(&mut held, &mut pool).unwrap();
            assert_eq!(r.sent, 400 - r.ring_full);
            let [in_place, copied_out, _] = a.copies();
            assert_eq!((in_place + copied_out - copied_before) as usize, r.sent);
            assert!(in_place > 0, "{in_place}");
            drop(held);
            // What `a` sent reaches `b`'s socket: receive and drop it, and reap `a`'s
            // completions, until the frames are all back.
            let mut rx = Vec::new();
            let t = std::time::Instant::now();
            loop {
                let mut over = 0;
                b.recv(&mut pool, &mut rx, 64, &mut over).unwrap();
                rx.clear();
                a.send(&mut Vec::new(), &mut pool).unwrap();
                // Every frame is free (in the UMEM's list or a socket's cache) but those
                // on the two fill rings (64 each).
                let free = umem.free_frames() + a.cached() + b.cached();
                if umem.frames() - free == 2 * 64 {
                    break;
                }
                assert!(
                    t.elapsed() < std::time::Duration::from_secs(2),
                    "{free} of {} frames free",
                    umem.frames()
                );
            }
        });
    }

    #[test]
    fn the_plain_programs_load_with_a_map_of_every_queue() {
        for stamp in [false, true] {
            let (map, prog) = program::load_plain(4, stamp).unwrap();
            assert!(map.as_raw_fd() >= 0 && prog.as_raw_fd() >= 0);
        }
    }
}
