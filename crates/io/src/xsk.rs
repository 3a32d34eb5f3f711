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

use crate::xdp::{bpf, insn, u32s};
use dataplane::buf::{Buf, FrameStore, Pkt, Pool};
use dataplane::counters::Event;
use dataplane::port::{Port, PortInfo, TxResult};
use dataplane::Drop as Reason;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

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
const XDP_PASS: i32 = 2;

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
    /// Receive timestamps taken in the XDP hook ([`stamp_program`] writes the kernel's
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

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct RingOffset {
    producer: u64,
    consumer: u64,
    desc: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct MmapOffsets {
    rx: RingOffset,
    tx: RingOffset,
    fr: RingOffset,
    cr: RingOffset,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Statistics {
    rx_dropped: u64,
    rx_invalid_descs: u64,
    tx_invalid_descs: u64,
    rx_ring_full: u64,
    rx_fill_ring_empty_descs: u64,
    tx_ring_empty_descs: u64,
}

/// One of the four rings: a producer index, a consumer index, flags and `size` entries
/// of `T`, shared with the kernel.
struct Ring<T> {
    map: *mut u8,
    map_len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut T,
    mask: u32,
    /// Our copy of the index we own (producer of a ring we fill, consumer of one we drain).
    head: u32,
}

impl<T> Ring<T> {
    /// Maps a ring of `size` entries at page offset `pgoff` of socket `fd`.
    fn map(fd: i32, off: &RingOffset, size: u32, pgoff: i64, what: &str) -> io::Result<Ring<T>> {
        let len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        // SAFETY: maps the ring the kernel set up on fd; checked for MAP_FAILED.
        let map = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff,
            )
        };
        if map == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("mmap {what} ring: {e}")));
        }
        let m = map as *mut u8;
        // SAFETY: the offsets the kernel gave lie within the mapping.
        unsafe {
            let producer = m.add(off.producer as usize) as *const AtomicU32;
            let consumer = m.add(off.consumer as usize) as *const AtomicU32;
            Ok(Ring {
                map: m,
                map_len: len,
                producer,
                consumer,
                flags: m.add(off.flags as usize) as *const AtomicU32,
                desc: m.add(off.desc as usize) as *mut T,
                mask: size - 1,
                head: 0,
            })
        }
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: an aligned u32 in the live mapping, shared with the kernel.
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { &*self.consumer }
    }

    fn needs_wakeup(&self) -> bool {
        // SAFETY: as above.
        unsafe { &*self.flags }.load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }

    /// Entries ready to consume (a ring the kernel fills).
    fn ready(&self) -> u32 {
        self.producer()
            .load(Ordering::Acquire)
            .wrapping_sub(self.head)
    }

    /// Free entries (a ring we fill).
    fn free(&self) -> u32 {
        (self.mask + 1).wrapping_sub(
            self.head
                .wrapping_sub(self.consumer().load(Ordering::Acquire)),
        )
    }

    /// Entry `i` places past our index.
    fn at(&self, i: u32) -> *mut T {
        // SAFETY: the index is masked into the ring.
        unsafe {
            self.desc
                .add((self.head.wrapping_add(i) & self.mask) as usize)
        }
    }

    /// Publishes `n` entries we produced.
    fn produce(&mut self, n: u32) {
        self.head = self.head.wrapping_add(n);
        self.producer().store(self.head, Ordering::Release);
    }

    /// Gives back `n` entries we consumed.
    fn consume(&mut self, n: u32) {
        self.head = self.head.wrapping_add(n);
        self.consumer().store(self.head, Ordering::Release);
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // SAFETY: map/map_len came from mmap and are released once.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct Desc {
    addr: u64,
    len: u32,
    options: u32,
}

/// The frames of one UMEM: a mapping of [`FRAME`]-byte frames registered by the first
/// socket that binds with it and shared by the others (`XDP_SHARED_UMEM`: each has its own
/// fill and completion rings), so that a frame received by one socket leaves by another
/// without a copy. Frames are with the kernel (fill, RX, TX and completion rings), in a
/// packet buffer lent to the element ([`Buf::lend`]), or here, free.
pub struct Umem {
    mem: *mut u8,
    len: usize,
    free: Mutex<Vec<u64>>,
    /// How many `free` holds, as of its last change: read without the lock.
    free_len: AtomicUsize,
    /// Frames kept back from the fill rings for transmitting copies (frames built by the
    /// element, or from another UMEM): the transmit ring's size.
    reserve: usize,
    /// Received frames are lent to the element only while this many are free: the
    /// reserve, and a receive batch for each socket (what one `recv` takes from its RX
    /// ring before it refills its fill ring). Below it they are copied to the heap and
    /// their UMEM frames go back at once, so that frames the element holds (queued for a
    /// neighbour's resolution, say) never starve the fill rings.
    lend_floor: usize,
    /// The socket that registered the UMEM, while it is open: the others bind to it.
    registered: Mutex<Option<i32>>,
    /// Sockets bound with it.
    sockets: AtomicU32,
}

// SAFETY: the mapping lives as long as the Umem; a frame is used by one owner at a time
// (the kernel, one buffer, or the free list behind its lock).
unsafe impl Send for Umem {}
// SAFETY: as above; the shared state is behind locks and atomics.
unsafe impl Sync for Umem {}

impl Umem {
    /// A UMEM for `sockets` sockets of ring sizes `cfg`: twice the receive ring and the
    /// transmit ring in frames for each, as a socket of its own had.
    pub fn for_sockets(sockets: usize, cfg: &XskConfig) -> io::Result<Arc<Umem>> {
        let frames = sockets.max(1) * (2 * cfg.rx as usize + cfg.tx as usize);
        let len = frames * FRAME;
        // SAFETY: an anonymous private mapping; checked for MAP_FAILED.
        let mem = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if mem == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("mmap UMEM: {e}")));
        }
        Ok(Arc::new(Umem {
            mem: mem as *mut u8,
            len,
            free: Mutex::new((0..frames as u64).rev().map(|i| i * FRAME as u64).collect()),
            free_len: AtomicUsize::new(frames),
            reserve: cfg.tx as usize,
            lend_floor: cfg.tx as usize + sockets.max(1) * (cfg.rx as usize).min(RECV_BATCH),
            registered: Mutex::new(None),
            sockets: AtomicU32::new(0),
        }))
    }

    /// Runs `f` on the list of free frames, under its lock, and notes its new length.
    fn with_free<R>(&self, f: impl FnOnce(&mut Vec<u64>) -> R) -> R {
        // A panic while holding the lock leaves a plain Vec of addresses: still good.
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(&mut free);
        self.free_len.store(free.len(), Ordering::Relaxed);
        r
    }

    /// Frames free now in the UMEM's own list (not with the kernel, lent, or at hand in a
    /// socket's cache).
    pub fn free_frames(&self) -> usize {
        self.with_free(|f| f.len())
    }

    /// Frames in all.
    pub fn frames(&self) -> usize {
        self.len / FRAME
    }
}

impl FrameStore for Umem {
    fn release(&self, id: u64) {
        self.with_free(|f| f.push(id));
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: mem/len came from mmap and are released once, when no socket and no
        // buffer holds the UMEM any more.
        unsafe { libc::munmap(self.mem as *mut libc::c_void, self.len) };
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
            // struct xdp_umem_reg: addr, len, chunk_size, headroom, flags (24 bytes,
            // which every kernel with AF_XDP takes).
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
            sockopt(s, XDP_UMEM_REG, &reg, "XDP_UMEM_REG")?;
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
        let bind = |flags: u16| -> io::Result<()> {
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
            // SAFETY: a is a valid sockaddr_xdp of the size given.
            let r = unsafe {
                libc::bind(
                    s,
                    &a as *const SockaddrXdp as *const libc::sockaddr,
                    std::mem::size_of::<SockaddrXdp>() as u32,
                )
            };
            if r < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        };
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

/// The redirect program: the frame's receive queue indexes the XSKMAP; no socket there
/// means `XDP_PASS`.
fn redirect_program(map_fd: i32) -> Vec<u8> {
    const LDX_W: u8 = 0x61;
    const LD_IMM64: u8 = 0x18;
    const MOV_K: u8 = 0xb7;
    const CALL: u8 = 0x85;
    const EXIT: u8 = 0x95;
    const REDIRECT_MAP: i32 = 51;
    [
        insn(LDX_W, 2, 1, 16, 0), // r2 = ctx->rx_queue_index
        insn(LD_IMM64, 1, crate::xdp::BPF_PSEUDO_MAP_FD, 0, map_fd),
        insn(0, 0, 0, 0, 0),
        insn(MOV_K, 3, 0, 0, XDP_PASS), // default action
        insn(CALL, 0, 0, 0, REDIRECT_MAP),
        insn(EXIT, 0, 0, 0, 0),
    ]
    .concat()
}

/// A receiving program for measurement: IPv4 and IPv6 UDP frames get their receive time
/// (the kernel's monotonic clock) in 8 bytes of metadata and go to the queue's socket,
/// everything else (ARP, neighbour discovery) to the kernel's stack. A frame whose
/// metadata the kernel refuses goes to the socket unstamped.
pub fn stamp_program(map_fd: i32) -> Vec<u8> {
    use crate::xdp::insn;
    const LDX_B: u8 = 0x71;
    const LDX_H: u8 = 0x69;
    const LDX_W: u8 = 0x61;
    const STX_DW: u8 = 0x7b;
    const LD_IMM64: u8 = 0x18;
    const MOV_K: u8 = 0xb7;
    const MOV_X: u8 = 0xbf;
    const ADD_K: u8 = 0x07;
    const JEQ_K: u8 = 0x15;
    const JNE_K: u8 = 0x55;
    const JGT_X: u8 = 0x2d;
    const JA: u8 = 0x05;
    const CALL: u8 = 0x85;
    const EXIT: u8 = 0x95;
    const ADJUST_META: i32 = 54;
    const KTIME_GET_NS: i32 = 5;
    const REDIRECT_MAP: i32 = 51;
    // Offsets are counted in instructions after the jump; LD_IMM64 takes two.
    [
        insn(MOV_X, 6, 1, 0, 0),                                     // 0: r6 = ctx
        insn(LDX_W, 2, 6, 0, 0),                                     // 1: r2 = data
        insn(LDX_W, 3, 6, 4, 0),                                     // 2: r3 = data_end
        insn(MOV_X, 4, 2, 0, 0),                                     // 3
        insn(ADD_K, 4, 0, 0, 24),                                    // 4: r4 = data + 24
        insn(JGT_X, 4, 3, 24, 0),                                    // 5: short -> pass (30)
        insn(LDX_H, 4, 2, 12, 0), // 6: EtherType, as loaded (little-endian)
        insn(JEQ_K, 4, 0, 3, 0x0008), // 7: IPv4 -> 11
        insn(JNE_K, 4, 0, 21, 0xdd86u16 as i32), // 8: not IPv6 -> pass (30)
        insn(LDX_B, 5, 2, 20, 0), // 9: IPv6 next header
        insn(JA, 0, 0, 1, 0),     // 10 -> 12
        insn(LDX_B, 5, 2, 23, 0), // 11: IPv4 protocol
        insn(JNE_K, 5, 0, 17, 17), // 12: not UDP -> pass (30)
        insn(MOV_X, 1, 6, 0, 0),  // 13
        insn(MOV_K, 2, 0, 0, -8), // 14
        insn(CALL, 0, 0, 0, ADJUST_META), // 15
        insn(JNE_K, 0, 0, 7, 0),  // 16: refused -> redirect (24)
        insn(CALL, 0, 0, 0, KTIME_GET_NS), // 17
        insn(LDX_W, 2, 6, 0, 0),  // 18: r2 = data
        insn(LDX_W, 3, 6, 8, 0),  // 19: r3 = data_meta
        insn(MOV_X, 4, 3, 0, 0),  // 20
        insn(ADD_K, 4, 0, 0, 8),  // 21
        insn(JGT_X, 4, 2, 1, 0),  // 22: no room -> redirect (24)
        insn(STX_DW, 3, 0, 0, 0), // 23: *(u64 *)data_meta = now
        insn(LDX_W, 2, 6, 16, 0), // 24: r2 = rx_queue_index
        insn(LD_IMM64, 1, crate::xdp::BPF_PSEUDO_MAP_FD, 0, map_fd), // 25-26
        insn(0, 0, 0, 0, 0),
        insn(MOV_K, 3, 0, 0, XDP_PASS), // 27: no socket on the queue: to the stack
        insn(CALL, 0, 0, 0, REDIRECT_MAP), // 28
        insn(EXIT, 0, 0, 0, 0),         // 29
        insn(MOV_K, 0, 0, 0, XDP_PASS), // 30: pass
        insn(EXIT, 0, 0, 0, 0),         // 31
    ]
    .concat()
}

/// The redirect program attached to one interface, and its XSKMAP.
struct Attached {
    map: OwnedFd,
    /// The BPF link: the program leaves the interface when it closes.
    _link: OwnedFd,
    _prog: OwnedFd,
    native: bool,
    fast: bool,
}

/// How the XDP program is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// The driver's own XDP hook, falling back to the generic one when it has none.
    Auto,
    /// The generic (socket-buffer) hook only.
    Generic,
}

/// Where a port's own program runs, as its maker is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// The XDP hook of an AF_XDP port; frames it does not take go to the sockets of the
    /// XSKMAP with this descriptor.
    Xdp(i32),
    /// The tcx ingress hook of an AF_PACKET port; frames it does not take are marked
    /// [`crate::fastpath::TO_USER_SPACE_MARK`] and received again, for the port's socket.
    Tc,
}

/// A program other than the plain redirect (or, on AF_PACKET, the drop after the socket):
/// given the hook it runs in, its code.
pub type ProgramFor<'a> = &'a dyn Fn(Hook) -> Vec<u8>;

fn attach(
    ifindex: u32,
    queues: u32,
    mode: AttachMode,
    program: Option<ProgramFor>,
    stamp: bool,
) -> io::Result<Attached> {
    let map = crate::xdp::map_create(BPF_MAP_TYPE_XSKMAP, 4, 4, queues.max(1), 0, 0, "XSKMAP")?;
    let (code, name) = match program {
        Some(p) => (p(Hook::Xdp(map.as_raw_fd())), "tessera_fast"),
        None if stamp => (stamp_program(map.as_raw_fd()), "tessera_stamp"),
        None => (redirect_program(map.as_raw_fd()), "tessera_xsk"),
    };
    let prog = load_xdp(&code, name)?;
    // A link a previous incarnation of the element pinned (its fast path, still
    // forwarding): this program takes its place at once, in the same hook.
    let pinned = crate::pin::dir(ifindex, false).and_then(|d| {
        ["link-drv", "link-skb"].into_iter().find_map(|n| {
            let path = d.join(n);
            let link = crate::pin::get(&path).ok()?;
            Some((path, link, n == "link-drv"))
        })
    });
    let keep = program.is_some() && crate::pin::enabled();
    if let Some((path, link, native)) = pinned {
        match crate::pin::link_update(&link, &prog) {
            Ok(()) => {
                if !keep {
                    // Ours alone from now on: it leaves with this process.
                    let _ = std::fs::remove_file(&path);
                }
                return Ok(Attached {
                    map,
                    _link: link,
                    _prog: prog,
                    native,
                    fast: program.is_some(),
                });
            }
            Err(e) => {
                // (An interface replaced since: the link is defunct.) A link of our own.
                tracing::warn!(path = %path.display(), error = %e, "pinned XDP link not taken over");
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    let link = |flags: u32| {
        let mut attr = [0u64; 16];
        attr[0] = u32s(prog.as_raw_fd() as u32, ifindex);
        attr[1] = u32s(crate::xdp::BPF_XDP, flags);
        bpf(crate::xdp::BPF_LINK_CREATE, &mut attr)
    };
    let (fd, native) = match mode {
        AttachMode::Auto => match link(XDP_FLAGS_DRV_MODE) {
            Ok(fd) => (fd, true),
            Err(_) => (link(XDP_FLAGS_SKB_MODE)?, false),
        },
        AttachMode::Generic => (link(XDP_FLAGS_SKB_MODE)?, false),
    };
    // SAFETY: as above.
    let link = unsafe { OwnedFd::from_raw_fd(fd) };
    if keep {
        if let Some(d) = crate::pin::dir(ifindex, true) {
            let name = if native { "link-drv" } else { "link-skb" };
            if let Err(e) = crate::pin::pin(&link, &d.join(name)) {
                tracing::warn!(error = %e, "XDP link not pinned: the fast path stops with the element");
            }
        }
    }
    Ok(Attached {
        map,
        _link: link,
        _prog: prog,
        native,
        fast: program.is_some(),
    })
}

/// Loads an XDP program (attach type BPF_XDP); a verifier error comes with its log.
pub(crate) fn load_xdp(code: &[u8], name: &str) -> io::Result<OwnedFd> {
    load_program(
        crate::xdp::BPF_PROG_TYPE_XDP,
        crate::xdp::BPF_XDP,
        code,
        name,
    )
}

/// Loads a program of type `prog_type` for attach type `attach`; a verifier error comes
/// with its log.
pub(crate) fn load_program(
    prog_type: u32,
    attach: u32,
    code: &[u8],
    name: &str,
) -> io::Result<OwnedFd> {
    let license = b"GPL\0";
    let mut log = vec![0u8; 1 << 20];
    let mut attr = [0u64; 16];
    attr[0] = u32s(prog_type, (code.len() / 8) as u32);
    attr[1] = code.as_ptr() as u64;
    attr[2] = license.as_ptr() as u64;
    attr[3] = u32s(1, log.len() as u32);
    attr[4] = log.as_mut_ptr() as u64;
    let mut n = [0u8; 16];
    let b = name.as_bytes();
    n[..b.len().min(15)].copy_from_slice(&b[..b.len().min(15)]);
    attr[6] = u64::from_le_bytes(n[..8].try_into().unwrap_or_default());
    attr[7] = u64::from_le_bytes(n[8..].try_into().unwrap_or_default());
    attr[8] = u32s(0, attach);
    let prog = bpf(crate::xdp::BPF_PROG_LOAD, &mut attr).map_err(|e| {
        let text = String::from_utf8_lossy(&log);
        let text = text.trim_end_matches('\0').trim();
        // The end of the log says what the verifier refused.
        let tail: String = text
            .lines()
            .rev()
            .take(12)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        io::Error::new(e.kind(), format!("bpf prog load ({name}): {e}: {tail}"))
    })?;
    // SAFETY: the kernel just returned this descriptor to us.
    Ok(unsafe { OwnedFd::from_raw_fd(prog) })
}

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
}

/// The attachment, shared by the ports (one per worker) of one interface.
pub struct AttachedShared(Attached);

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

    /// A receiving port for measurement: [`stamp_program`] on `name` (IPv4 and IPv6 UDP
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
            crate::xdp::map_update(&shared.0.map, &q, &fd)
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
            // Receives on `port` until `n` frames are in `held` (or two seconds pass).
            let take = |port: &mut XdpPort, pool: &mut Pool, held: &mut Vec<Pkt>, n: usize| {
                let t = std::time::Instant::now();
                while held.len() < n && t.elapsed() < std::time::Duration::from_secs(2) {
                    let mut over = 0;
                    port.recv(pool, held, 64, &mut over).unwrap();
                    assert_eq!(over, 0);
                }
            };
            // Send 400 frames from `a` to `b` in batches of 16, holding all received.
            let mut held = Vec::new();
            for k in 0..25u32 {
                let mut batch: Vec<Pkt> = (0..16).map(|i| frame(k * 16 + i)).collect();
                let r = a.send(&mut batch, &mut pool).unwrap();
                assert_eq!(r.sent, 16);
                take(&mut b, &mut pool, &mut held, (k as usize + 1) * 16);
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
            assert_eq!(lent as u64 + copied_low, 400);
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
    fn redirect_program_is_six_slots() {
        let p = redirect_program(7);
        assert_eq!(p.len(), 6 * 8);
        // The map reference carries the pseudo-map-fd source register and the fd.
        assert_eq!(p[8], 0x18);
        assert_eq!(p[9] >> 4, crate::xdp::BPF_PSEUDO_MAP_FD);
        assert_eq!(i32::from_le_bytes(p[12..16].try_into().unwrap()), 7);
    }
}
