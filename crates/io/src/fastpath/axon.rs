//! The Axon's fast path: a source-routed frame passing through, run in the XDP program of
//! each port, before any socket sees the frame.
//!
//! A frame takes it when it is an Axon frame (EtherType 0x88b6, untagged) of type data or
//! control whose header is well formed (`hlen` fits the hop counts, at most 32 hops, the
//! whole header inside the frame), whose forward path is not used up, and whose next
//! port (the nibble at `rev`) is an Axon link that takes fast-path frames: a port with a
//! neighbour Axon heard now, neither a capacity nor a delay (so no queue: nothing to
//! schedule), whose device takes frames redirected in XDP. The program then does what the
//! user-space Axon does with it (`dataplane::axon`): writes the input port in the
//! nibble's place, shifts the counts (`fwd` one less, `rev` one more), sets the outer MACs
//! (the neighbour's port, then this port's own) and sends it out of that port through a
//! device map. Everything else (hellos, probes, frames to this Axon's control plane or
//! out of a host port, plain frames from hosts, malformed headers) goes to the port's
//! AF_XDP socket and the user-space Axon, which stays the one source of truth.
//!
//! Where the next port's device takes no frames redirected in XDP, the frame, made the
//! same, leaves through the hand-off to tcx ([`crate::handoff`]).
//!
//! Maps: `axon ports` (per port, three words: the neighbour's port MAC as
//! [`super::mac_u64`] packs it, with bit 48 set while frames may leave here in the fast
//! path; then this port's own MAC; then `1 << 32 | ifindex` where they leave through the
//! hand-off, else 0), kept by the Axon's run loop from its neighbour table
//! ([`AxonFastPath::set_port`]); `tx ports` (a device map of the ports' interfaces);
//! `stats` (per CPU and port: frames the fast path took in, left to user space, sent out;
//! as the forwarder's).

use super::{
    detached_xdp, mac_u64, percpu_sum, stats_map, tx_map, Detached, BPF_MAP_TYPE_ARRAY, STATS,
};
use crate::bpfsys::{map_create, map_update};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Bit of an `axon ports` entry's first word: frames may leave by this port in the fast
/// path.
const ELIGIBLE: u64 = 1 << 48;
/// The last port number a nibble can name before the control plane's (0xf): an Axon has
/// at most 15 ports (`dataplane::axon::MAX_PORTS`).
const LAST_PORT: u32 = 14;

/// The maps of one Axon's fast path.
pub struct AxonFastPath {
    ports: OwnedFd,
    deadline: OwnedFd,
    tx: OwnedFd,
    stats: OwnedFd,
    macs: Vec<[u8; 6]>,
    /// The ports' interface indexes, in port order.
    ifindexes: Vec<u32>,
}

impl AxonFastPath {
    /// Creates the maps for the ports whose interfaces are `ifnames` and whose MACs are
    /// `macs`; no port takes fast-path frames yet (no neighbour is known).
    pub fn new(ifnames: &[String], macs: &[[u8; 6]]) -> io::Result<AxonFastPath> {
        let n = ifnames.len() as u32;
        let ports = map_create(BPF_MAP_TYPE_ARRAY, 4, 24, n.max(1), 0, 0, "axon ports")?;
        let tx = tx_map(ifnames)?;
        let stats = stats_map(n)?;
        let deadline = map_create(BPF_MAP_TYPE_ARRAY, 4, 8, 1, 0, 0, "axon deadline")?;
        let ifindexes = ifnames
            .iter()
            .map(|i| crate::netdev::ifindex(i).map(|x| x as u32))
            .collect::<io::Result<Vec<u32>>>()?;
        let fp = AxonFastPath {
            ports,
            deadline,
            tx,
            stats,
            macs: macs.to_vec(),
            ifindexes,
        };
        for p in 0..n {
            fp.set_port(p, None, false)?;
        }
        Ok(fp)
    }

    /// Port `port`'s entry: `to` the MAC of the neighbour Axon's port that frames leaving
    /// here in the fast path are sent to, or None: none leaves here in the fast path;
    /// `handoff`: they leave through the hand-off to tcx (its device takes no XDP frames).
    pub fn set_port(&self, port: u32, to: Option<[u8; 6]>, handoff: bool) -> io::Result<()> {
        let Some(mine) = self.macs.get(port as usize) else {
            return Ok(());
        };
        let first = to.map_or(0, |m| mac_u64(&m) | ELIGIBLE);
        let ifindex = self.ifindexes.get(port as usize).copied().unwrap_or(0);
        let third = if handoff && to.is_some() {
            1 << 32 | ifindex as u64
        } else {
            0
        };
        map_update(&self.ports, &port, &[first, mac_u64(mine), third])
    }

    /// Keeps the programs' deadline `grace` ahead of now: they forward for at most `grace`
    /// after the Axon is gone, unless a successor's programs take their links over.
    pub fn beat(&self, grace: std::time::Duration) -> io::Result<()> {
        let deadline = super::monotonic_ns() + grace.as_nanos() as u64;
        map_update(&self.deadline, &0u32, &deadline)
    }

    /// Pins what a successor reads (`axon ports`) in `dir` ([`crate::pin`]).
    pub fn pin(&self, dir: &std::path::Path) -> io::Result<()> {
        crate::pin::pin(&self.ports, &dir.join("axon-ports"))
    }

    /// The neighbours a predecessor's fast path sent to, pinned in `dir`
    /// ([`AxonFastPath::pin`]): (the port's own MAC, the neighbour port's MAC), for each
    /// port that took fast-path frames. Empty where there are none.
    pub fn pinned_neighbours(dir: &std::path::Path) -> Vec<([u8; 6], [u8; 6])> {
        let Ok(ports) = crate::pin::get(&dir.join("axon-ports")) else {
            return Vec::new();
        };
        let mac = |w: u64| {
            let b = w.to_le_bytes();
            [b[0], b[1], b[2], b[3], b[4], b[5]]
        };
        (0..=LAST_PORT)
            .filter_map(|p| {
                let mut words = [0u64; 3];
                crate::bpfsys::map_lookup(&ports, &p, &mut words).ok()?;
                (words[0] & ELIGIBLE != 0).then(|| (mac(words[1]), mac(words[0])))
            })
            .collect()
    }

    /// Per port, summed over CPUs: frames the fast path took in, left to user space, sent
    /// out.
    pub fn stats(&self) -> Vec<[u64; STATS]> {
        (0..self.macs.len() as u32)
            .map(|p| percpu_sum(&self.stats, p))
            .collect()
    }

    /// The XDP program of port `port`, loaded (`bpf/axon.bpf.c`, sharing the Axon's
    /// maps): the fast path, and every other frame to the AF_XDP socket of its receive
    /// queue in the socket map `xsk`.
    pub fn program(&self, port: u32, xsk: i32) -> io::Result<OwnedFd> {
        debug_assert!(
            port <= LAST_PORT,
            "an Axon port number is a nibble below 15"
        );
        // SAFETY: `xsk` is the port's socket map, open for the whole call (the caller's).
        let xsk = unsafe { BorrowedFd::borrow_raw(xsk) };
        let obj = crate::bpfobj::load(
            OBJECT,
            "the Axon's fast path",
            crate::bpfobj::Load {
                name: "axon",
                config: Some(crate::bpfobj::config_bytes(&AxonConfig { port })),
                reuse: &[
                    ("axon_ports", self.ports.as_fd()),
                    ("axon_deadline", self.deadline.as_fd()),
                    ("tx_ports", self.tx.as_fd()),
                    ("stats", self.stats.as_fd()),
                    ("xsks", xsk),
                ],
                ..Default::default()
            },
        )?;
        obj.prog("tessera_axon")
    }

    /// The program of a port, loaded (with an empty socket map) and not attached.
    pub fn detached(&self, port: u32) -> io::Result<Detached> {
        detached_xdp(|xsk| self.program(port, xsk))
    }
}

/// The Axon's fast path, as clang made it from `bpf/axon.bpf.c`.
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/axon.bpf.o"));

/// The program's read-only global (`struct axon_config` of `bpf/axon.bpf.c`).
#[repr(C)]
#[derive(Clone, Copy)]
struct AxonConfig {
    /// The port the program runs on.
    port: u32,
}

#[cfg(test)]
mod tests {
    use super::super::Verdict;
    use super::*;
    use crate::test_ns::Netns;

    /// Where the path starts in the frame (after the outer Ethernet header and the
    /// header's fixed part; `bpf/axon.bpf.c`'s PATH).
    const PATH: u8 = 18;

    const NEXT: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
    const MINE: [[u8; 6]; 3] = [[2, 0, 0, 0, 1, 0], [2, 0, 0, 0, 1, 1], [2, 0, 0, 0, 1, 2]];

    /// An Axon frame of `kind` with `path` nibbles (reverse first) of which `fwd` lie
    /// ahead, carrying a 60-byte host frame.
    fn frame(kind: u8, path: &[u8], fwd: u8) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 9, 9, 2, 0, 0, 0, 8, 8, 0x88, 0xb6];
        let hops = path.len();
        f.extend_from_slice(&[kind, (4 + hops.div_ceil(2)) as u8, fwd, (hops as u8) - fwd]);
        for pair in path.chunks(2) {
            f.push(pair[0] << 4 | pair.get(1).copied().unwrap_or(0));
        }
        f.extend(std::iter::repeat_n(0x55, 60));
        f
    }

    #[test]
    fn a_frame_passing_through_to_an_axon_link_takes_the_fast_path() {
        let ns = Netns::with_veth("axf");
        ns.run(|| {
            // Ports 0 (ua), 1 (ub) and 2 (ua again).
            let names = ["ua".to_string(), "ub".to_string(), "ua".to_string()];
            let fp = AxonFastPath::new(&names, &MINE).unwrap();
            let p0 = fp.detached(0).unwrap();
            // Came in on port 0 (recorded before as port 3, then port 5), out by port 1
            // next, then port 2.
            let f = frame(0, &[3, 5, 1, 2], 2);
            // No neighbour on port 1 yet: user space's.
            assert_eq!(p0.run(&f).unwrap().0, Verdict::ToUserSpace);
            fp.set_port(1, Some(NEXT), false).unwrap();
            let (v, out) = p0.run(&f).unwrap();
            assert_eq!(v, Verdict::Forward);
            // What the user-space Axon makes of it: the MACs, the input port recorded in
            // the next hop's place, one hop less ahead and one more behind.
            let mut want = f.clone();
            want[0..6].copy_from_slice(&NEXT);
            want[6..12].copy_from_slice(&MINE[1]);
            want[14..20].copy_from_slice(&[0, 6, 1, 3, 0x35, 0x02]);
            assert_eq!(out, want);
            // Port 1's device takes no XDP frames: the same frame through the hand-off to
            // tcx, for ub.
            fp.set_port(1, Some(NEXT), true).unwrap();
            let ub = crate::netdev::ifindex("ub").unwrap() as u32;
            assert_eq!(p0.run(&f).unwrap(), (Verdict::HandOff(ub), want.clone()));
            fp.set_port(1, Some(NEXT), false).unwrap();
            // An odd index: the low nibble.
            let f = frame(1, &[3, 1, 2], 2);
            let (v, out) = p0.run(&f).unwrap();
            assert_eq!(v, Verdict::Forward);
            assert_eq!(out[14..20], [1, 6, 1, 2, 0x30, 0x20]);
            // Left to user space: hellos and probes, the control plane's port, the port
            // it came in by, a port without a neighbour, a port the Axon does not have,
            // a used-up path, a header whose length does not fit its hops, a header
            // longer than the frame, a plain frame.
            assert_eq!(p0.run(&frame(3, &[1], 1)).unwrap().0, Verdict::ToUserSpace);
            assert_eq!(
                p0.run(&frame(2, &[1, 2], 2)).unwrap().0,
                Verdict::ToUserSpace
            );
            assert_eq!(p0.run(&frame(0, &[15], 1)).unwrap().0, Verdict::ToUserSpace);
            assert_eq!(
                p0.run(&frame(0, &[0, 1], 2)).unwrap().0,
                Verdict::ToUserSpace
            );
            assert_eq!(
                p0.run(&frame(0, &[2, 1], 2)).unwrap().0,
                Verdict::ToUserSpace
            );
            assert_eq!(
                p0.run(&frame(0, &[9, 1], 2)).unwrap().0,
                Verdict::ToUserSpace
            );
            assert_eq!(
                p0.run(&frame(0, &[1, 1], 0)).unwrap().0,
                Verdict::ToUserSpace
            );
            let mut bad = frame(0, &[1, 2], 2);
            bad[15] = 6;
            assert_eq!(p0.run(&bad).unwrap().0, Verdict::ToUserSpace);
            let mut long = vec![0u8; 14 + 4 + 15];
            long[..14].copy_from_slice(&frame(0, &[1], 1)[..14]);
            long[14..18].copy_from_slice(&[0, 20, 32, 0]);
            long[18] = 0x10;
            assert_eq!(p0.run(&long).unwrap().0, Verdict::ToUserSpace);
            let mut plain = frame(0, &[1, 2], 2);
            plain[12..14].copy_from_slice(&[0x08, 0x00]);
            assert_eq!(p0.run(&plain).unwrap().0, Verdict::ToUserSpace);
            // The longest path: 32 hops, the next one at index 31 (a low nibble 15 bytes
            // in).
            let mut path = vec![3u8; 31];
            path.push(1);
            let (v, out) = p0.run(&frame(0, &path, 1)).unwrap();
            assert_eq!(v, Verdict::Forward);
            assert_eq!(out[PATH as usize + 15], 0x30);
            // The neighbour gone: user space's again.
            fp.set_port(1, None, false).unwrap();
            assert_eq!(p0.run(&frame(0, &[1], 1)).unwrap().0, Verdict::ToUserSpace);
            let s = fp.stats();
            assert_eq!(s[0][0], 4, "{s:?}"); // in on port 0: the four forwarded
            assert_eq!(s[1][2], 4, "{s:?}"); // out on port 1
            assert_eq!(s[1][7], 1, "{s:?}"); // of them, through the hand-off
            assert_eq!(s[0][1], 12, "{s:?}"); // to user space
                                              // Handed over and past its deadline (the Axon gone, no successor): nothing
                                              // forwarded; a deadline ahead (the Axon running): forwarded again.
            fp.set_port(1, Some(NEXT), false).unwrap();
            let f = frame(0, &[3, 1, 2], 2);
            fp.beat(std::time::Duration::ZERO).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(1));
            assert_eq!(p0.run(&f).unwrap().0, Verdict::ToUserSpace);
            fp.beat(std::time::Duration::from_secs(60)).unwrap();
            assert_eq!(p0.run(&f).unwrap().0, Verdict::Forward);
        });
    }
}
