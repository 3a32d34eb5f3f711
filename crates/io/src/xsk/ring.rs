//! The shared memory of AF_XDP: the UMEM that holds the frames, and the four rings (fill,
//! completion, receive, transmit) through which the kernel and this process pass them.

use super::*;

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct RingOffset {
    pub(super) producer: u64,
    pub(super) consumer: u64,
    pub(super) desc: u64,
    pub(super) flags: u64,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct MmapOffsets {
    pub(super) rx: RingOffset,
    pub(super) tx: RingOffset,
    pub(super) fr: RingOffset,
    pub(super) cr: RingOffset,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Statistics {
    pub(super) rx_dropped: u64,
    pub(super) rx_invalid_descs: u64,
    pub(super) tx_invalid_descs: u64,
    pub(super) rx_ring_full: u64,
    pub(super) rx_fill_ring_empty_descs: u64,
    pub(super) tx_ring_empty_descs: u64,
}

/// One of the four rings: a producer index, a consumer index, flags and `size` entries
/// of `T`, shared with the kernel.
pub(super) struct Ring<T> {
    pub(super) map: *mut u8,
    pub(super) map_len: usize,
    pub(super) producer: *const AtomicU32,
    pub(super) consumer: *const AtomicU32,
    pub(super) flags: *const AtomicU32,
    pub(super) desc: *mut T,
    pub(super) mask: u32,
    /// Our copy of the index we own (producer of a ring we fill, consumer of one we drain).
    pub(super) head: u32,
}

impl<T> Ring<T> {
    /// Maps a ring of `size` entries at page offset `pgoff` of socket `fd`.
    pub(super) fn map(
        fd: i32,
        off: &RingOffset,
        size: u32,
        pgoff: i64,
        what: &str,
    ) -> io::Result<Ring<T>> {
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

    pub(super) fn producer(&self) -> &AtomicU32 {
        // SAFETY: an aligned u32 in the live mapping, shared with the kernel.
        unsafe { &*self.producer }
    }

    pub(super) fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { &*self.consumer }
    }

    pub(super) fn needs_wakeup(&self) -> bool {
        // SAFETY: as above.
        unsafe { &*self.flags }.load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }

    /// Entries ready to consume (a ring the kernel fills).
    pub(super) fn ready(&self) -> u32 {
        self.producer()
            .load(Ordering::Acquire)
            .wrapping_sub(self.head)
    }

    /// Free entries (a ring we fill).
    pub(super) fn free(&self) -> u32 {
        (self.mask + 1).wrapping_sub(
            self.head
                .wrapping_sub(self.consumer().load(Ordering::Acquire)),
        )
    }

    /// Entry `i` places past our index.
    pub(super) fn at(&self, i: u32) -> *mut T {
        // SAFETY: the index is masked into the ring.
        unsafe {
            self.desc
                .add((self.head.wrapping_add(i) & self.mask) as usize)
        }
    }

    /// Publishes `n` entries we produced.
    pub(super) fn produce(&mut self, n: u32) {
        self.head = self.head.wrapping_add(n);
        self.producer().store(self.head, Ordering::Release);
    }

    /// Gives back `n` entries we consumed.
    pub(super) fn consume(&mut self, n: u32) {
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
pub(super) struct Desc {
    pub(super) addr: u64,
    pub(super) len: u32,
    pub(super) options: u32,
}

/// The frames of one UMEM: a mapping of [`FRAME`]-byte frames registered by the first
/// socket that binds with it and shared by the others (`XDP_SHARED_UMEM`: each has its own
/// fill and completion rings), so that a frame received by one socket leaves by another
/// without a copy. Frames are with the kernel (fill, RX, TX and completion rings), in a
/// packet buffer lent to the element ([`Buf::lend`]), or here, free.
pub struct Umem {
    pub(super) mem: *mut u8,
    pub(super) len: usize,
    pub(super) free: Mutex<Vec<u64>>,
    /// How many `free` holds, as of its last change: read without the lock.
    pub(super) free_len: AtomicUsize,
    /// Frames kept back from the fill rings for transmitting copies (frames built by the
    /// element, or from another UMEM): the transmit ring's size.
    pub(super) reserve: usize,
    /// Received frames are lent to the element only while this many are free: the
    /// reserve, and a receive batch for each socket (what one `recv` takes from its RX
    /// ring before it refills its fill ring). Below it they are copied to the heap and
    /// their UMEM frames go back at once, so that frames the element holds (queued for a
    /// neighbour's resolution, say) never starve the fill rings.
    pub(super) lend_floor: usize,
    /// The socket that registered the UMEM, while it is open: the others bind to it.
    pub(super) registered: Mutex<Option<i32>>,
    /// Sockets bound with it.
    pub(super) sockets: AtomicU32,
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
    pub(super) fn with_free<R>(&self, f: impl FnOnce(&mut Vec<u64>) -> R) -> R {
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
