//! Flow sampling (docs/flows.md): a worker picks 1 in `interval` packets of each port it
//! receives, at random, and hands what the flow cache needs of each (its key, interfaces,
//! next hop, size and fate) to the exporter's thread through a bounded queue; a full
//! queue is a counted loss, never a wait.

use crate::acl::Key;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use wire::dist::FlowConfig;
use wire::MacAddr;

/// What the flow cache takes of a sampled packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub key: Key,
    /// The element's interface it came in by, and left by (`None`: it did not leave).
    pub ingress: u16,
    pub egress: Option<u16>,
    pub next_hop: Option<IpAddr>,
    /// The frame's bytes (the IP packet's and the Ethernet header's).
    pub bytes: u32,
    /// IPFIX `forwardingStatus` (wire::ipfix::status).
    pub status: u8,
    /// It was sampled 1 in this many.
    pub interval: u32,
}

/// The settings every worker's sampler reads (a reload changes them in place).
#[derive(Debug, Default)]
pub struct SamplerShare {
    /// 1 in this many packets; 0: sampling off.
    pub interval: AtomicU32,
    /// Samples lost to a full queue.
    pub lost: AtomicU64,
    /// Samples handed over.
    pub taken: AtomicU64,
}

/// One worker's sampler.
#[derive(Debug, Clone)]
pub struct Sampler {
    pub share: Arc<SamplerShare>,
    pub tx: SyncSender<Sample>,
    state: u64,
}

impl Sampler {
    pub fn new(share: Arc<SamplerShare>, tx: SyncSender<Sample>, seed: u64) -> Sampler {
        Sampler {
            share,
            tx,
            state: seed | 1,
        }
    }

    /// Whether to sample this packet: 1 in the interval, at random (xorshift64*).
    #[inline]
    pub fn pick(&mut self) -> Option<u32> {
        let n = self.share.interval.load(Relaxed);
        if n == 0 {
            return None;
        }
        if n == 1 {
            return Some(1);
        }
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        let r = self.state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32;
        r.is_multiple_of(n as u64).then_some(n)
    }

    /// Hands `s` over (a full queue: counted, dropped).
    pub fn send(&self, s: Sample) {
        match self.tx.try_send(s) {
            Ok(()) => self.share.taken.fetch_add(1, Relaxed),
            Err(_) => self.share.lost.fetch_add(1, Relaxed),
        };
    }
}

/// A back-end's flow export as the controller drives it (docs/flows.md, "In the
/// multistage router"): the controller's last FLOW_CONFIG, which the first worker writes
/// and the exporter's thread reads.
#[derive(Debug, Default)]
pub struct FlowRemote {
    /// Who sent it, what it says, when it came.
    pub heard: Mutex<Option<(MacAddr, FlowConfig, Instant)>>,
}

/// The first worker's side of it: where it writes what the controller says, and the
/// frames of ended flows the exporter's thread built, which it sends out of the internal
/// port.
#[derive(Debug)]
pub struct FlowRemoteLink {
    pub remote: Arc<FlowRemote>,
    pub frames: Receiver<Vec<u8>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_in_n_at_random() {
        let share = Arc::new(SamplerShare::default());
        let (tx, rx) = std::sync::mpsc::sync_channel(4);
        let mut s = Sampler::new(share.clone(), tx, 42);
        assert_eq!(s.pick(), None, "off");
        share.interval.store(100, Relaxed);
        let n = (0..100_000).filter(|_| s.pick().is_some()).count();
        assert!((800..1200).contains(&n), "{n} of 100,000 at 1 in 100");
        share.interval.store(1, Relaxed);
        assert!((0..10).all(|_| s.pick() == Some(1)));
        let k = Key::of_ipv4(&[
            0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ])
        .unwrap();
        let sample = Sample {
            key: k,
            ingress: 0,
            egress: Some(1),
            next_hop: None,
            bytes: 60,
            status: 0x40,
            interval: 1,
        };
        for _ in 0..6 {
            s.send(sample.clone());
        }
        assert_eq!(
            (share.taken.load(Relaxed), share.lost.load(Relaxed)),
            (4, 2)
        );
        assert_eq!(rx.try_iter().count(), 4);
    }
}
