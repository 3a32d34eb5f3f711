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
    detached_xdp, mac_u64, percpu_sum, stats_map, tx_map, Asm, Detached, FrameLen, ADD_K, ADD_X,
    AND_K, BPF_MAP_TYPE_ARRAY, CALL, EXIT, IN_BYTES, JA, JEQ_K, JGE_K, JGT_X, JNE_K, JNE_X, JSET_K,
    LDX_B, LDX_DW, LDX_H, LDX_W, MOV_K, MOV_X, OR_K, OUT_BYTES, REDIRECT_MAP, RSH_K, STATS, STX_B,
    STX_DW, STX_H, STX_W, SUB_X,
};
use crate::xdp::{map_create, map_update};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// The outer EtherType of Axon frames, as a 16-bit load of its two bytes reads it.
const ETHERTYPE_LOADED: i32 = 0xb688;
/// Bit of an `axon ports` entry's first word: frames may leave by this port in the fast
/// path.
const ELIGIBLE: u64 = 1 << 48;
/// Hops a header holds at most (`wire::axon::MAX_HOPS`).
const MAX_HOPS: i32 = 32;
/// Where the header's fields sit in the frame (after the outer Ethernet header).
const KIND: i16 = 14;
const HLEN: i16 = 15;
const FWD: i16 = 16;
const REV: i16 = 17;
const PATH: i16 = 18;
/// The last port number a nibble can name before the control plane's (0xf): an Axon has
/// at most 15 ports (`dataplane::axon::MAX_PORTS`).
const LAST_PORT: u32 = 14;

/// The maps of one Axon's fast path.
pub struct AxonFastPath {
    ports: OwnedFd,
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
        let ifindexes = ifnames
            .iter()
            .map(|i| crate::netdev::ifindex(i).map(|x| x as u32))
            .collect::<io::Result<Vec<u32>>>()?;
        let fp = AxonFastPath {
            ports,
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

    /// Per port, summed over CPUs: frames the fast path took in, left to user space, sent
    /// out.
    pub fn stats(&self) -> Vec<[u64; STATS]> {
        (0..self.macs.len() as u32)
            .map(|p| percpu_sum(&self.stats, p))
            .collect()
    }

    /// The XDP program of port `port`: the fast path, and every other frame to the AF_XDP
    /// socket of its receive queue in the socket map `xsk`.
    pub fn program(&self, port: u32, xsk: i32) -> io::Result<OwnedFd> {
        crate::xsk::load_xdp(&self.code(port, xsk), "tessera_axon")
    }

    /// [`AxonFastPath::program`]'s instructions.
    fn code(&self, port: u32, xsk: i32) -> Vec<u8> {
        program(
            port,
            [
                self.ports.as_raw_fd(),
                self.tx.as_raw_fd(),
                self.stats.as_raw_fd(),
                xsk,
            ],
        )
    }

    /// The program of a port, loaded (with an empty socket map) and not attached.
    pub fn detached(&self, port: u32) -> io::Result<Detached> {
        detached_xdp(|xsk| self.program(port, xsk))
    }
}

/// Stack: -8 a 32-bit key, -32 the receive queue, -40 the output port, -48 the output
/// port's nibble is the high one (0) or the low one (1), -56 the output port's hand-off
/// word, -64 its neighbour's MAC, -72 the context, -80 the path byte's offset in the
/// frame, -88 the output port's own MAC.
/// Registers: r6 the context; r7 and r8 the frame's bounds; r9 the path byte that holds
/// the next hop.
fn program(me: u32, [ports, tx, stats, xsk]: [i32; 4]) -> Vec<u8> {
    let mut a = Asm::new();
    a.i(MOV_X, 6, 1, 0, 0)
        .i(LDX_W, 1, 6, 16, 0) // rx_queue_index
        .i(STX_DW, 10, 1, -32, 0)
        .i(STX_DW, 10, 6, -72, 0)
        .i(LDX_W, 7, 6, 0, 0)
        .i(LDX_W, 8, 6, 4, 0);
    debug_assert!(me <= LAST_PORT, "an Axon port number is a nibble below 15");
    let me = (me & 0xf) as i32;
    // The outer header and the header's fixed part.
    a.i(MOV_X, 1, 7, 0, 0)
        .i(ADD_K, 1, 0, 0, i32::from(PATH))
        .j(JGT_X, 1, 8, 0, "slow")
        .i(LDX_H, 1, 7, 12, 0)
        .j(JNE_K, 1, 0, ETHERTYPE_LOADED, "slow")
        // Data (0) or control (1); hellos and probes are user space's.
        .i(LDX_B, 1, 7, KIND, 0)
        .j(JGE_K, 1, 0, 2, "slow")
        // A forward path not used up, at most 32 hops, and hlen = 4 + ceil(hops / 2).
        .i(LDX_B, 2, 7, FWD, 0)
        .j(JEQ_K, 2, 0, 0, "slow")
        .i(LDX_B, 3, 7, REV, 0)
        .i(STX_DW, 10, 3, -48, 0)
        .i(ADD_X, 2, 3, 0, 0)
        .j(JGE_K, 2, 0, MAX_HOPS + 1, "slow")
        .i(ADD_K, 2, 0, 0, 1)
        .i(RSH_K, 2, 0, 0, 1)
        .i(ADD_K, 2, 0, 0, 4)
        .i(LDX_B, 1, 7, HLEN, 0)
        .j(JNE_X, 1, 2, 0, "slow")
        // The whole header inside the frame.
        .i(MOV_X, 1, 7, 0, 0)
        .i(ADD_X, 1, 2, 0, 0)
        .i(ADD_K, 1, 0, 0, 14)
        .j(JGT_X, 1, 8, 0, "slow")
        // r9: the path byte of nibble `rev` (rev < 32: at most 15 bytes in).
        .i(LDX_DW, 3, 10, -48, 0)
        .i(MOV_X, 2, 3, 0, 0)
        .i(AND_K, 3, 0, 0, 1)
        .i(STX_DW, 10, 3, -48, 0)
        .i(RSH_K, 2, 0, 0, 1)
        .i(AND_K, 2, 0, 0, 15)
        .i(MOV_X, 9, 7, 0, 0)
        .i(ADD_X, 9, 2, 0, 0)
        .i(MOV_X, 1, 9, 0, 0)
        .i(ADD_K, 1, 0, 0, i32::from(PATH) + 1)
        .j(JGT_X, 1, 8, 0, "slow")
        // The next hop: the high nibble at an even index, the low one at an odd.
        .i(LDX_B, 1, 9, PATH, 0)
        .j(JSET_K, 3, 0, 1, "low")
        .i(RSH_K, 1, 0, 0, 4)
        .label("low")
        .i(AND_K, 1, 0, 0, 15)
        // The control plane's, or this very port: user space's.
        .j(JEQ_K, 1, 0, 15, "slow")
        .j(JEQ_K, 1, 0, me, "slow")
        .i(STX_DW, 10, 1, -40, 0)
        // An Axon link that takes fast-path frames (a port the program has no entry for
        // is a miss).
        .lookup(0, ports, 1)
        .i(LDX_DW, 1, 0, 0, 0)
        .i(MOV_X, 2, 1, 0, 0)
        .i(RSH_K, 2, 0, 0, 48)
        .j(JSET_K, 2, 0, 1, "eligible")
        .j(JA, 0, 0, 0, "slow")
        .label("eligible")
        .i(STX_DW, 10, 1, -64, 0)
        .i(LDX_DW, 2, 0, 8, 0)
        .i(STX_DW, 10, 2, -88, 0)
        .i(LDX_DW, 2, 0, 16, 0)
        .i(STX_DW, 10, 2, -56, 0)
        .j(JEQ_K, 2, 0, 0, "macs")
        // Out through the hand-off: room for its metadata first (refused: user space's,
        // the frame untouched yet), then the frame's bounds and the path byte again.
        .i(MOV_X, 2, 9, 0, 0)
        .i(SUB_X, 2, 7, 0, 0)
        .i(STX_DW, 10, 2, -80, 0)
        .handoff_room(super::Ctx::Reg(6), i32::from(PATH))
        .i(LDX_DW, 9, 10, -80, 0)
        .i(AND_K, 9, 0, 0, 15)
        .i(ADD_X, 9, 7, 0, 0)
        .i(MOV_X, 1, 9, 0, 0)
        .i(ADD_K, 1, 0, 0, i32::from(PATH) + 1)
        .j(JGT_X, 1, 8, 0, "slow")
        .label("macs")
        // The outer MACs: the neighbour's port, then this Axon's port.
        .i(LDX_DW, 1, 10, -64, 0)
        .i(STX_W, 7, 1, 0, 0)
        .i(RSH_K, 1, 0, 0, 32)
        .i(STX_H, 7, 1, 4, 0)
        .i(LDX_DW, 1, 10, -88, 0)
        .i(STX_W, 7, 1, 6, 0)
        .i(RSH_K, 1, 0, 0, 32)
        .i(STX_H, 7, 1, 10, 0)
        // This hop's input port in the next hop's place.
        .i(LDX_B, 1, 9, PATH, 0)
        .i(LDX_DW, 3, 10, -48, 0)
        .j(JSET_K, 3, 0, 1, "write_low")
        .i(AND_K, 1, 0, 0, 0x0f)
        .i(OR_K, 1, 0, 0, me << 4)
        .j(JA, 0, 0, 0, "written")
        .label("write_low")
        .i(AND_K, 1, 0, 0, 0xf0)
        .i(OR_K, 1, 0, 0, me)
        .label("written")
        .i(STX_B, 9, 1, PATH, 0)
        // One hop less ahead, one more behind.
        .i(LDX_B, 1, 7, FWD, 0)
        .i(ADD_K, 1, 0, 0, -1)
        .i(STX_B, 7, 1, FWD, 0)
        .i(LDX_B, 1, 7, REV, 0)
        .i(ADD_K, 1, 0, 0, 1)
        .i(STX_B, 7, 1, REV, 0)
        .i(MOV_K, 1, 0, 0, me)
        .count_frame(stats, 1, 0, IN_BYTES, FrameLen::Bounds, "counted_in")
        .i(LDX_DW, 1, 10, -40, 0)
        .count_frame(stats, 1, 16, OUT_BYTES, FrameLen::Bounds, "counted_out");
    super::program::handoff_send(&mut a, stats, "");
    a.i(LDX_DW, 2, 10, -40, 0)
        .map(1, tx)
        .i(MOV_K, 3, 0, 0, 0)
        .i(CALL, 0, 0, 0, REDIRECT_MAP)
        .i(EXIT, 0, 0, 0, 0);
    a.slow_to_socket(stats, xsk, me);
    a.finish()
}

#[cfg(test)]
mod tests {
    use super::super::Verdict;
    use super::*;
    use crate::test_ns::Netns;

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
        });
    }
}
