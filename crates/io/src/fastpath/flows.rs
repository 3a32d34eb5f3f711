//! The flow sampling maps of the forwarder's fast path (`bpf/forward.bpf.c`, "Flow
//! sampling"; docs/flows.md): `flow_cfg` (1 in how many frames; 0: off), the ring buffer
//! `flow_samples` the programs write samples to, and `flow_lost` (per CPU, samples the ring
//! had no room for). [`FlowMaps::read`] turns a sample's bytes into what it says.

use super::{percpu_sum, BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_PERCPU_ARRAY};
use crate::bpfsys::{map_create, map_update};
use libbpf_rs::{MapCore, MapHandle, MapType};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Bytes of the ring buffer: some 43,000 samples (100 ms of 430 kpps sampled 1 in 1).
pub const RING_BYTES: u32 = 4 << 20;
/// Bytes of one sample (struct flow_sample).
pub const SAMPLE_LEN: usize = 44 + 6 * 4 + 16 + 4;

/// The maps.
pub struct FlowMaps {
    cfg: OwnedFd,
    pub ring: MapHandle,
    lost: OwnedFd,
}

/// A sample as the program wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawSample {
    pub key: [u8; 44],
    pub in_port: u32,
    pub in_vlan: u16,
    /// `None`: dropped.
    pub out: Option<(u32, u16)>,
    pub len: u32,
    pub interval: u32,
    pub next_hop: [u8; 16],
    pub status: u8,
}

impl FlowMaps {
    pub fn new() -> io::Result<FlowMaps> {
        let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
            ..Default::default()
        };
        let ring = MapHandle::create(
            MapType::RingBuf,
            Some("flow_samples"),
            0,
            0,
            RING_BYTES,
            &opts,
        )
        .map_err(|e| io::Error::other(format!("flow_samples: {e}")))?;
        let m = FlowMaps {
            cfg: map_create(BPF_MAP_TYPE_ARRAY, 4, 8, 1, 0, 0, "flow_cfg")?,
            ring,
            lost: map_create(BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8, 1, 0, 0, "flow_lost")?,
        };
        m.set_interval(0)?;
        Ok(m)
    }

    /// The maps by the names the program gives them.
    pub fn fds(&self) -> [(&'static str, BorrowedFd<'_>); 3] {
        [
            ("flow_cfg", self.cfg.as_fd()),
            ("flow_samples", self.ring.as_fd()),
            ("flow_lost", self.lost.as_fd()),
        ]
    }

    /// Samples 1 in `n` frames from now on (0: none): the program samples where a random
    /// 32-bit number falls below 2^32 / `n`.
    pub fn set_interval(&self, n: u32) -> io::Result<()> {
        let below = match n {
            0 | 1 => 0,
            n => ((1u64 << 32) / u64::from(n)) as u32,
        };
        map_update(&self.cfg, &0u32, &[n, below])
    }

    /// Samples the ring had no room for, since the start.
    pub fn lost(&self) -> u64 {
        percpu_sum::<1>(&self.lost, 0)[0]
    }

    /// A sample's bytes read (None: not one of ours).
    pub fn read(b: &[u8]) -> Option<RawSample> {
        if b.len() < SAMPLE_LEN {
            return None;
        }
        let u32_at = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let out_port = u32_at(52);
        Some(RawSample {
            key: b[..44].try_into().ok()?,
            in_port: u32_at(44),
            in_vlan: u32_at(48) as u16,
            out: (out_port != u32::MAX).then(|| (out_port, u32_at(56) as u16)),
            len: u32_at(60),
            interval: u32_at(64),
            next_hop: b[68..84].try_into().ok()?,
            status: b[84],
        })
    }

    /// A reader of the ring: `each` gets every sample [`SampleReader::poll`] finds. It
    /// reads the ring by its descriptor, which these maps keep open.
    pub fn reader(&self, mut each: impl FnMut(RawSample) + 'static) -> io::Result<SampleReader> {
        let mut b = libbpf_rs::RingBufferBuilder::new();
        b.add(&self.ring as &dyn MapCore, move |bytes: &[u8]| {
            if let Some(s) = FlowMaps::read(bytes) {
                each(s);
            }
            0
        })
        .map_err(|e| io::Error::other(format!("flow samples: {e}")))?;
        let rb = b
            .build()
            .map_err(|e| io::Error::other(format!("flow samples: {e}")))?;
        Ok(SampleReader(rb))
    }
}

/// Reads the samples the programs wrote ([`FlowMaps::reader`]).
pub struct SampleReader(libbpf_rs::RingBuffer<'static>);

impl SampleReader {
    /// Hands every sample in the ring to the reader's function, without waiting.
    pub fn poll(&self) {
        let _ = self.0.consume();
    }
}
