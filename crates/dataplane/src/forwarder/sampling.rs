//! The forwarder's flow sampling (docs/flows.md; crate::flows): packets that user space
//! forwards, or that its filters drop, sampled 1 in the interval per worker at ingress.

use super::*;
use crate::flows::{Sample, Sampler};

impl Forwarder {
    /// Samples this worker's packets with `s` from now on (`None`: not at all).
    pub fn set_sampler(&mut self, s: Option<Sampler>) {
        self.sampler = s;
    }

    /// Samples the packet `ip` (of `bytes` bytes with its Ethernet header, where its header
    /// says nothing) that came in by
    /// `ingress` and left by `egress` through `next_hop` (or not), with `status`, if the
    /// sampler picks it.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(super) fn sample(
        &mut self,
        ip: &[u8],
        v6: bool,
        ingress: u16,
        egress: Option<u16>,
        next_hop: Option<std::net::IpAddr>,
        bytes: usize,
        status: u8,
    ) {
        let Some(s) = self.sampler.as_mut() else {
            return;
        };
        let Some(interval) = s.pick() else { return };
        let key = if v6 {
            crate::acl::Key::of_ipv6(ip)
        } else {
            crate::acl::Key::of_ipv4(ip)
        };
        let Some(key) = key else { return };
        // The packet's length as its header says, with an Ethernet header (a frame the
        // kernel merged counts whole), as the fast path counts it.
        let said = if v6 {
            ip.get(4..6)
                .map(|b| 40 + u16::from_be_bytes([b[0], b[1]]) as usize)
        } else {
            ip.get(2..4)
                .map(|b| u16::from_be_bytes([b[0], b[1]]) as usize)
        };
        s.send(Sample {
            key,
            ingress,
            egress,
            next_hop,
            bytes: said.map_or(bytes, |n| n + ETH) as u32,
            status,
            interval,
        });
    }

    /// Samples the packet in `p` that did not leave (the router dropped it, `status` says
    /// why), if the sampler picks it.
    #[inline]
    pub(super) fn sample_dropped(&mut self, p: &Pkt, v6: bool, status: u8) {
        if self.sampler.is_some() {
            let (ip, at) = (&p.data[ETH..], p.meta.iface);
            self.sample(ip, v6, at, None, None, p.data.len(), status);
        }
    }

    /// Samples the packet in `p` that leaves by `egress` through `next_hop`, if the
    /// sampler picks it.
    #[inline]
    pub(super) fn sample_forwarded(
        &mut self,
        p: &Pkt,
        v6: bool,
        egress: u16,
        next_hop: std::net::IpAddr,
    ) {
        if self.sampler.is_some() {
            let (ip, at, fwd) = (&p.data[ETH..], p.meta.iface, wire::ipfix::status::FORWARDED);
            self.sample(ip, v6, at, Some(egress), Some(next_hop), p.data.len(), fwd);
        }
    }
}
