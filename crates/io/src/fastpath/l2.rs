//! The switch's fast path: the learning switch's common case run in the XDP program of
//! each port, before any socket sees the frame.
//!
//! A frame takes it when its source MAC is a unicast one the switch has learned on this
//! very port (so learning and moves stay user space's), its destination MAC is a unicast
//! one learned on another port, and that port has neither a capacity, nor a delay (so no
//! queue: nothing to schedule); an untagged IPv4 frame must moreover be a plain packet
//! (no options, not a fragment, of exactly the frame's length) whose TCP or UDP checksum is
//! not left to offload, since user space completes those. It leaves by the destination's
//! port through a device map, unchanged. Everything else (broadcast, multicast, unknown
//! destinations to flood, unknown or moved sources, shaped or delayed ports) goes to the
//! port's AF_XDP socket and the user-space switch, which stays the one source of truth.
//!
//! Maps: `switch macs` (a hash of the MAC, as [`super::mac_u64`] packs it, to its port),
//! kept by the switch's run loop from its table ([`SwitchFastPath::sync`]); `switch
//! ports` (per port: bit 0, frames may leave here in the fast path; bit 1, they leave
//! through the hand-off to tcx, [`crate::handoff`]; the port's interface index in the
//! high 32 bits); `switch deadline` (one word: the time, `bpf_ktime_get_ns`, after which
//! the programs take no frame; 0: none); `tx ports` (a device
//! map of the ports' interfaces); `stats` (per CPU and port: frames the fast path took in,
//! left to user space, sent out; as the forwarder's).
//!
//! Handed over across a restart ([`SwitchFastPath::pin`], [`SwitchFastPath::beat`]): the
//! links are pinned as the ports open, `switch macs` and `switch ports` are pinned beside
//! them for the successor, which takes the learned addresses over
//! ([`SwitchFastPath::pinned_macs`]) before its own programs replace these.

use super::{
    detached_xdp, mac_u64, map_delete, percpu_sum, stats_map, tx_map, Detached, BPF_MAP_TYPE_ARRAY,
    BPF_MAP_TYPE_HASH, STATS,
};
use crate::bpfsys::{map_create, map_update};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Learned MACs the fast path holds (the user-space table's limit).
pub const MAX_MACS: u32 = 65_536;

/// The maps of one switch's fast path.
pub struct SwitchFastPath {
    macs: OwnedFd,
    ports: OwnedFd,
    tx: OwnedFd,
    stats: OwnedFd,
    deadline: OwnedFd,
    nports: u32,
    /// What `macs` holds now.
    published: HashMap<u64, u32>,
    /// The ports' interface indexes, in port order.
    ifindexes: Vec<u32>,
}

/// A `switch ports` word's flags: frames may leave by the port in the fast path; they
/// leave through the hand-off to tcx.
const ELIGIBLE: u64 = 1;
const HANDOFF: u64 = 2;

impl SwitchFastPath {
    /// Creates the maps for the ports whose interfaces are `ifnames`; `eligible[i]`: frames
    /// may leave by port i in the fast path (no capacity, no delay). No MAC is known yet.
    pub fn new(ifnames: &[String], eligible: &[bool]) -> io::Result<SwitchFastPath> {
        let n = ifnames.len() as u32;
        let macs = map_create(BPF_MAP_TYPE_HASH, 8, 4, MAX_MACS, 0, 0, "switch macs")?;
        let ports = map_create(BPF_MAP_TYPE_ARRAY, 4, 8, n.max(1), 0, 0, "switch ports")?;
        let tx = tx_map(ifnames)?;
        let stats = stats_map(n)?;
        let deadline = map_create(BPF_MAP_TYPE_ARRAY, 4, 8, 1, 0, 0, "switch deadline")?;
        let ifindexes = ifnames
            .iter()
            .map(|i| crate::netdev::ifindex(i).map(|x| x as u32))
            .collect::<io::Result<Vec<u32>>>()?;
        let fp = SwitchFastPath {
            macs,
            ports,
            tx,
            stats,
            deadline,
            nports: n,
            published: HashMap::new(),
            ifindexes,
        };
        for i in 0..n {
            let e = eligible.get(i as usize).copied().unwrap_or(false);
            fp.set_port(i, e.then_some(super::EgressMode::Xdp))?;
        }
        Ok(fp)
    }

    /// Keeps the programs' deadline `grace` ahead of now: they forward for at most `grace`
    /// after the switch is gone, unless a successor's programs take their links over.
    pub fn beat(&self, grace: std::time::Duration) -> io::Result<()> {
        let deadline = super::monotonic_ns() + grace.as_nanos() as u64;
        map_update(&self.deadline, &0u32, &deadline)
    }

    /// Pins what a successor reads (`switch macs`, `switch ports`) in `dir` ([`crate::pin`]).
    pub fn pin(&self, dir: &std::path::Path) -> io::Result<()> {
        crate::pin::pin(&self.ports, &dir.join("switch-ports"))?;
        crate::pin::pin(&self.macs, &dir.join("switch-macs"))
    }

    /// The addresses a predecessor's fast path held, pinned in `dir` ([`SwitchFastPath::pin`]):
    /// (MAC, the interface index of its port). Empty where there are none.
    pub fn pinned_macs(dir: &std::path::Path) -> Vec<([u8; 6], u32)> {
        let (Ok(ports), Ok(macs)) = (
            crate::pin::get(&dir.join("switch-ports")),
            crate::pin::get(&dir.join("switch-macs")),
        ) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut key: Option<u64> = None;
        let mut next = 0u64;
        while crate::bpfsys::map_next_key(&macs, key.as_ref(), &mut next) {
            key = Some(next);
            let (mut port, mut word) = (0u32, 0u64);
            if crate::bpfsys::map_lookup(&macs, &next, &mut port).is_err()
                || crate::bpfsys::map_lookup(&ports, &port, &mut word).is_err()
                || word >> 32 == 0
            {
                continue;
            }
            let m = next.to_le_bytes();
            out.push(([m[0], m[1], m[2], m[3], m[4], m[5]], (word >> 32) as u32));
        }
        out
    }

    /// How frames leave by port `port` in the fast path (its `switch ports` word): not at
    /// all (`None`), redirected in XDP, or through the hand-off to tcx. The word carries
    /// the port's interface index in every case (a successor maps ports by it).
    pub fn set_port(&self, port: u32, egress: Option<super::EgressMode>) -> io::Result<()> {
        if port >= self.nports {
            return Ok(());
        }
        let ifindex = u64::from(self.ifindexes.get(port as usize).copied().unwrap_or(0)) << 32;
        let flags = match egress {
            Some(super::EgressMode::Xdp) => ELIGIBLE,
            Some(super::EgressMode::Tcx) => ELIGIBLE | HANDOFF,
            _ => 0,
        };
        map_update(&self.ports, &port, &(flags | ifindex))
    }

    /// Brings `switch macs` in step with the switch's table (MAC, port): new and moved
    /// entries written, forgotten ones removed. Returns (written, removed).
    pub fn sync(&mut self, table: &[([u8; 6], u16)]) -> io::Result<(usize, usize)> {
        let now: HashMap<u64, u32> = table
            .iter()
            .filter(|(_, p)| u32::from(*p) < self.nports)
            .take(MAX_MACS as usize)
            .map(|(m, p)| (mac_u64(m), u32::from(*p)))
            .collect();
        let (mut written, mut removed) = (0, 0);
        for (m, p) in &now {
            if self.published.get(m) != Some(p) {
                map_update(&self.macs, m, p)?;
                written += 1;
            }
        }
        let gone: Vec<u64> = self
            .published
            .keys()
            .filter(|m| !now.contains_key(m))
            .copied()
            .collect();
        for m in gone {
            // Already gone is as good.
            let _ = map_delete(&self.macs, &m);
            removed += 1;
        }
        self.published = now;
        Ok((written, removed))
    }

    /// Per port, summed over CPUs: frames the fast path took in, left to user space, sent
    /// out.
    pub fn stats(&self) -> Vec<[u64; STATS]> {
        (0..self.nports)
            .map(|p| percpu_sum(&self.stats, p))
            .collect()
    }

    /// The XDP program of port `port`, loaded (`bpf/l2.bpf.c`, sharing the switch's
    /// maps): the fast path, and every other frame to the AF_XDP socket of its receive
    /// queue in the socket map `xsk`.
    pub fn program(&self, port: u32, xsk: i32) -> io::Result<OwnedFd> {
        // SAFETY: `xsk` is the port's socket map, open for the whole call (the caller's).
        let xsk = unsafe { BorrowedFd::borrow_raw(xsk) };
        let obj = crate::bpfobj::load(
            OBJECT,
            "the switch's fast path",
            crate::bpfobj::Load {
                name: "l2",
                config: Some(crate::bpfobj::config_bytes(&L2Config { port })),
                reuse: &[
                    ("switch_macs", self.macs.as_fd()),
                    ("switch_ports", self.ports.as_fd()),
                    ("switch_deadline", self.deadline.as_fd()),
                    ("tx_ports", self.tx.as_fd()),
                    ("stats", self.stats.as_fd()),
                    ("xsks", xsk),
                ],
                ..Default::default()
            },
        )?;
        obj.prog("tessera_l2")
    }

    /// The program of a port, loaded (with an empty socket map) and not attached.
    pub fn detached(&self, port: u32) -> io::Result<Detached> {
        detached_xdp(|xsk| self.program(port, xsk))
    }
}

/// The switch's fast path, as clang made it from `bpf/l2.bpf.c`.
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/l2.bpf.o"));

/// The program's read-only global (`struct l2_config` of `bpf/l2.bpf.c`).
#[repr(C)]
#[derive(Clone, Copy)]
struct L2Config {
    /// The port the program runs on.
    port: u32,
}

#[cfg(test)]
mod tests {
    use super::super::Verdict;
    use super::*;
    use crate::test_ns::Netns;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
    const C: [u8; 6] = [2, 0, 0, 0, 0, 0xc];

    /// An untagged IPv4 UDP frame from `src` to `dst`; `partial`: its checksum left to
    /// offload (the pseudo-header sum alone).
    fn udp(dst: [u8; 6], src: [u8; 6], partial: bool) -> Vec<u8> {
        let mut f = dst.to_vec();
        f.extend_from_slice(&src);
        f.extend_from_slice(&[0x08, 0x00]);
        let ip = [
            0x45, 0, 0, 46, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        f.extend_from_slice(&ip);
        f.extend_from_slice(&[0x30, 0x39, 0x04, 0xd2, 0, 26, 0, 0]);
        f.resize(60, 0x55);
        // The pseudo-header sum: addresses, protocol and UDP length, folded.
        let mut s: u32 = 0x0a00 + 0x0001 + 0x0a00 + 0x0002 + 17 + 26;
        s = (s & 0xffff) + (s >> 16);
        let csum = if partial { s as u16 } else { 0x1234 };
        f[40..42].copy_from_slice(&csum.to_be_bytes());
        f
    }

    #[test]
    fn known_unicast_between_unshaped_ports_takes_the_fast_path() {
        let ns = Netns::with_veth("l2");
        ns.run(|| {
            // Ports 0 (ua) and 1 (ub) take fast-path frames; port 2 (ua again, shaped) not.
            let names = ["ua".to_string(), "ub".to_string(), "ua".to_string()];
            let mut fp = SwitchFastPath::new(&names, &[true, true, false]).unwrap();
            let p0 = fp.detached(0).unwrap();
            // Nothing learned: everything is user space's.
            assert_eq!(p0.run(&udp(B, A, false)).unwrap().0, Verdict::ToUserSpace);
            assert_eq!(fp.sync(&[(A, 0), (B, 1), (C, 2)]).unwrap(), (3, 0));
            assert_eq!(p0.run(&udp(B, A, false)).unwrap().0, Verdict::Forward);
            // Not an IPv4 frame: no checksum to look at.
            let mut arp = udp(B, A, false);
            arp[12..14].copy_from_slice(&[0x08, 0x06]);
            assert_eq!(p0.run(&arp).unwrap().0, Verdict::Forward);
            // Left to user space: a checksum left to offload, the broadcast, an unknown
            // destination, a source learned elsewhere, the same port, a shaped port, an
            // IPv4 packet with options.
            assert_eq!(p0.run(&udp(B, A, true)).unwrap().0, Verdict::ToUserSpace);
            assert_eq!(
                p0.run(&udp([0xff; 6], A, false)).unwrap().0,
                Verdict::ToUserSpace
            );
            assert_eq!(
                p0.run(&udp([2, 0, 0, 0, 0, 0xd], A, false)).unwrap().0,
                Verdict::ToUserSpace
            );
            assert_eq!(p0.run(&udp(A, B, false)).unwrap().0, Verdict::ToUserSpace);
            let p1 = fp.detached(1).unwrap();
            assert_eq!(p1.run(&udp(A, B, false)).unwrap().0, Verdict::Forward);
            assert_eq!(p1.run(&udp(C, B, false)).unwrap().0, Verdict::ToUserSpace);
            let mut opts = udp(B, A, false);
            opts[14] = 0x46;
            assert_eq!(p0.run(&opts).unwrap().0, Verdict::ToUserSpace);
            // A MAC that moves or is forgotten leaves the map.
            assert_eq!(fp.sync(&[(A, 1), (B, 1)]).unwrap(), (1, 1));
            assert_eq!(p0.run(&udp(B, A, false)).unwrap().0, Verdict::ToUserSpace);
            let s = fp.stats();
            assert_eq!(s[0][0], 2, "{s:?}"); // in on port 0: the two forwarded frames
            assert_eq!(s[1][2], 2, "{s:?}"); // out on port 1
            assert_eq!(s[1][0], 1, "{s:?}");
            // Handed over and past its deadline (the switch gone, no successor): nothing
            // forwarded; a deadline ahead (the switch running): forwarded again.
            fp.sync(&[(A, 0), (B, 1)]).unwrap();
            let ok = udp(A, B, false);
            assert_eq!(p1.run(&ok).unwrap().0, Verdict::Forward);
            fp.beat(std::time::Duration::ZERO).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(1));
            assert_eq!(p1.run(&ok).unwrap().0, Verdict::ToUserSpace);
            fp.beat(std::time::Duration::from_secs(60)).unwrap();
            assert_eq!(p1.run(&ok).unwrap().0, Verdict::Forward);
        });
    }

    /// To a port whose device takes no XDP frames, the same frames leave unchanged through
    /// the hand-off to tcx (the port's interface index in the metadata), counted; a port
    /// taken out of the fast path gets none.
    #[test]
    fn a_port_that_takes_no_xdp_frames_gets_them_through_tcx() {
        let ns = Netns::with_veth("l2h");
        ns.run(|| {
            let names = ["ua".to_string(), "ub".to_string()];
            let mut fp = SwitchFastPath::new(&names, &[true, true]).unwrap();
            let ub = crate::netdev::ifindex("ub").unwrap() as u32;
            fp.sync(&[(A, 0), (B, 1)]).unwrap();
            fp.set_port(1, Some(crate::fastpath::EgressMode::Tcx))
                .unwrap();
            let p0 = fp.detached(0).unwrap();
            let f = udp(B, A, false);
            assert_eq!(p0.run(&f).unwrap(), (Verdict::HandOff(ub), f.clone()));
            fp.set_port(1, None).unwrap();
            assert_eq!(p0.run(&f).unwrap().0, Verdict::ToUserSpace);
            fp.set_port(1, Some(crate::fastpath::EgressMode::Xdp))
                .unwrap();
            assert_eq!(p0.run(&f).unwrap().0, Verdict::Forward);
            let s = fp.stats();
            assert_eq!((s[0][0], s[1][2], s[1][7]), (2, 2, 1), "{s:?}");
        });
    }
}
