//! Packet buffers, their metadata, and the pool they are recycled through.

/// The largest frame a buffer holds: a 9216-byte jumbo payload plus an Ethernet header and
/// one 802.1Q tag.
pub const BUF_CAP: usize = 9216 + 18;

/// Per-packet metadata, named (no opaque slots). Which node writes and reads each field is
/// documented on the field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Meta {
    /// Index of the port the frame arrived on. Written by the port; read by every node.
    pub rx_port: u16,
    /// Index of the logical interface (the port's untagged one or a VLAN sub-interface) the
    /// frame arrived on. Written by eth-input, which also removes the tag; read by the nodes
    /// after it.
    pub iface: u16,
    /// The sender left the TCP/UDP checksum to offload: only the pseudo-header sum is in
    /// the checksum field. Written by the port; ip4-forward fills the checksum in.
    pub csum_partial: bool,
    /// The port cannot tell whether the sender left the TCP/UDP checksum to offload (an
    /// AF_XDP port: no socket-buffer flags reach it). Written by the port; ip4-forward and
    /// the LB then fill in the checksum of a frame whose field holds just the
    /// pseudo-header sum (`transport_checksum_looks_partial`).
    pub csum_unknown: bool,
    /// The address ICMP errors about this packet come from, when not the address of the
    /// interface it arrived on: written by star-input (the address where the packet
    /// entered the star router); read by the forwarder's ICMP errors.
    pub error_src: Option<std::net::Ipv4Addr>,
    /// Receive time in nanoseconds of CLOCK_REALTIME, from the kernel when the port has it
    /// (AF_PACKET), else 0. Written by the port; read by the sink.
    pub rx_ns: u64,
}

pub use pktbuf::{Buf, FrameStore, Splice};

/// One frame: its bytes (`data.len()` is the frame length; in a heap buffer of its own or
/// in a port's UMEM frame, see [`Buf`]) and metadata.
#[derive(Debug, Clone)]
pub struct Pkt {
    pub data: Buf,
    pub meta: Meta,
}

impl Pkt {
    pub fn new() -> Pkt {
        Pkt {
            data: Buf::with_capacity(BUF_CAP),
            meta: Meta::default(),
        }
    }

    /// A packet holding a copy of `frame`, with default metadata.
    pub fn from_bytes(frame: &[u8]) -> Pkt {
        let mut p = Pkt::new();
        p.data.extend_from_slice(frame);
        p
    }
}

impl Default for Pkt {
    fn default() -> Self {
        Pkt::new()
    }
}

/// Fills in the TCP/UDP checksum of an IPv4 or IPv6 frame (untagged, the IP header at byte 14)
/// whose sender left it to offload (`meta.csum_partial`, or `csum_unknown` and a field
/// that holds just the pseudo-header sum): past an element that forwards the frame as it
/// is, nobody knows it is missing. True if it filled one in.
pub fn complete_offloaded_checksum(p: &mut Pkt) -> bool {
    if !(p.meta.csum_partial || p.meta.csum_unknown) {
        return false;
    }
    let partial = p.meta.csum_partial;
    let six = p.data.get(12..14) == Some(&[0x86, 0xdd][..]);
    let l3 = p.data.get_mut(14..).unwrap_or_default();
    if six {
        return match wire::ipv6::Packet::new_checked(l3) {
            Ok(mut ip) => {
                (partial || ip.transport_checksum_looks_partial()) && ip.fill_transport_checksum()
            }
            Err(_) => false,
        };
    }
    match wire::ipv4::Packet::new_checked(l3) {
        Ok(mut ip) => {
            (partial || ip.transport_checksum_looks_partial()) && ip.fill_transport_checksum()
        }
        Err(_) => false,
    }
}

/// Buffers a pool keeps for reuse; more than this are freed (40 MB at most).
pub const MAX_FREE: usize = 4096;

/// A free list of buffers. `get` reuses a buffer or allocates one; steady-state forwarding
/// allocates nothing because every buffer returns here after transmit or drop.
#[derive(Debug, Default)]
pub struct Pool {
    free: Vec<Pkt>,
}

impl Pool {
    pub fn new() -> Pool {
        Pool::default()
    }

    /// A buffer, empty, with default metadata.
    #[inline]
    pub fn get(&mut self) -> Pkt {
        match self.free.pop() {
            Some(mut p) => {
                p.data.clear();
                p.meta = Meta::default();
                p
            }
            None => Pkt::new(),
        }
    }

    #[inline]
    pub fn put(&mut self, p: Pkt) {
        // Keep at most MAX_FREE heap buffers of the standard size; others are freed, and
        // a frame lent by a port goes back to the port's UMEM.
        if self.free.len() < MAX_FREE && !p.data.is_lent() && p.data.capacity() <= BUF_CAP * 2 {
            self.free.push(p);
        }
    }
}

/// Frames waiting for transmit, one queue per egress port.
#[derive(Debug, Default)]
pub struct TxQueues {
    pub queues: Vec<Vec<Pkt>>,
}

impl TxQueues {
    pub fn new(ports: usize) -> TxQueues {
        TxQueues {
            queues: (0..ports).map(|_| Vec::with_capacity(256)).collect(),
        }
    }

    #[inline]
    pub fn push(&mut self, port: u16, p: Pkt) {
        self.queues[port as usize].push(p);
    }

    pub fn is_empty(&self) -> bool {
        self.queues.iter().all(|q| q.is_empty())
    }

    /// All queued frames, as (port, frame), draining the queues. For tests.
    pub fn drain_all(&mut self) -> Vec<(u16, Pkt)> {
        let mut v = Vec::new();
        for (i, q) in self.queues.iter_mut().enumerate() {
            v.extend(q.drain(..).map(|p| (i as u16, p)));
        }
        v
    }
}
