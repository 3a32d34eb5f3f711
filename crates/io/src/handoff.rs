//! The fast path's hand-off from XDP to tcx, for egresses that cannot take frames
//! redirected in XDP.
//!
//! A device without `ndo_xdp_xmit` (a tun/tap, a bond, many virtual devices), or a veth
//! whose peer runs no NAPI (no XDP program and GRO off there, as on every container's
//! link), drops what an XDP program redirects to it (see [`crate::egress`]). It takes
//! socket buffers, though. So where a port's XDP fast path finds that the frame's egress
//! is such a device, it does the lookup, the TTL and the rewrite as always, then writes
//! eight bytes of metadata in front of the frame, [`MAGIC`] and the egress interface
//! index, and lets the kernel build the socket buffer (`XDP_PASS`). The program here, in
//! the same port's tcx ingress hook, finds that metadata, clears it, and sends the frame
//! out of the egress with `bpf_redirect`: nothing is looked up twice, and no socket or
//! copy to user space is involved. Every other frame passes on (`TCX_NEXT`) as if the
//! program were not there.
//!
//! The program has no maps and no state: a restart or an upgrade puts the new one in the
//! pinned link (`link-handoff`) in one step, and the old XDP program's hand-offs are
//! forwarded by the new one alike.

use crate::xdp::{bpf, insn, u32s};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The first four bytes of the metadata an XDP fast path writes in front of a frame it
/// hands to tcx (its second four: the egress interface index).
pub const MAGIC: u32 = 0x7e55_0002;
/// The metadata's length.
pub const META_LEN: i32 = 8;
/// `__sk_buff` offsets: data, data_meta.
const SKB_DATA: i16 = 76;
const SKB_DATA_META: i16 = 140;
/// `TCX_NEXT`: on to the next program, or the stack.
const TCX_NEXT: i32 = -1;
/// The pin name of the hand-off's link ([`crate::pin`]).
pub const PIN: &str = "link-handoff";

/// The tcx ingress program: a frame with the hand-off's metadata leaves by the interface
/// it names (the metadata cleared first, so that no later hook of any element takes it
/// for one of ours); any other goes on.
pub fn program() -> Vec<u8> {
    const LDX_W: u8 = 0x61;
    const STX_W: u8 = 0x63;
    const MOV_X: u8 = 0xbf;
    const MOV_K: u8 = 0xb7;
    const ADD_K: u8 = 0x07;
    const JGT_X: u8 = 0x2d;
    const JNE32_K: u8 = 0x56;
    const CALL: u8 = 0x85;
    const EXIT: u8 = 0x95;
    const REDIRECT: i32 = 23;
    // Jump offsets count instructions after the jump.
    [
        insn(LDX_W, 2, 1, SKB_DATA_META, 0),  // 0: r2 = data_meta
        insn(LDX_W, 3, 1, SKB_DATA, 0),       // 1: r3 = data
        insn(MOV_X, 4, 2, 0, 0),              // 2
        insn(ADD_K, 4, 0, 0, META_LEN),       // 3
        insn(JGT_X, 4, 3, 8, 0),              // 4: less metadata -> on (13)
        insn(LDX_W, 5, 2, 0, 0),              // 5
        insn(JNE32_K, 5, 0, 6, MAGIC as i32), // 6: not ours -> on (13)
        insn(LDX_W, 1, 2, 4, 0),              // 7: r1 = the egress interface index
        insn(MOV_K, 5, 0, 0, 0),              // 8
        insn(STX_W, 2, 5, 0, 0),              // 9: the mark cleared
        insn(MOV_K, 2, 0, 0, 0),              // 10: out of it, on its egress
        insn(CALL, 0, 0, 0, REDIRECT),        // 11
        insn(EXIT, 0, 0, 0, 0),               // 12
        insn(MOV_K, 0, 0, 0, TCX_NEXT),       // 13
        insn(EXIT, 0, 0, 0, 0),               // 14
    ]
    .concat()
}

/// Loads [`program`] for the tcx ingress hook.
pub fn load() -> io::Result<OwnedFd> {
    crate::xsk::load_program(
        crate::afpacket::BPF_PROG_TYPE_SCHED_CLS,
        crate::afpacket::BPF_TCX_INGRESS,
        &program(),
        "tessera_handoff",
    )
}

/// Runs the hand-off in interface `ifindex`'s tcx ingress hook: in the link a
/// predecessor pinned, if any, else in a new one, pinned where `keep` so that it outlives
/// this process as the XDP program's link does. The link.
pub fn attach(ifindex: u32, keep: bool) -> io::Result<OwnedFd> {
    let prog = load()?;
    if let Some(t) = crate::pin::take_pinned(
        ifindex,
        &[PIN],
        crate::pin::BPF_LINK_TYPE_TCX,
        &prog,
        false,
        keep,
    ) {
        return Ok(t.link);
    }
    let mut attr = [0u64; 16];
    attr[0] = u32s(prog.as_raw_fd() as u32, ifindex);
    attr[1] = u32s(crate::afpacket::BPF_TCX_INGRESS, 0);
    let fd = bpf(crate::xdp::BPF_LINK_CREATE, &mut attr)
        .map_err(|e| io::Error::new(e.kind(), format!("tcx ingress link (hand-off): {e}")))?;
    // SAFETY: the kernel just returned this descriptor to us.
    let link = unsafe { OwnedFd::from_raw_fd(fd) };
    if keep {
        crate::pin::pin_link(ifindex, PIN, &link);
    }
    Ok(link)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The program passes the verifier, and a frame without the hand-off's metadata goes
    /// on untouched (a test run gives no metadata). Needs root (BPF).
    #[test]
    fn the_hand_off_loads_and_passes_other_frames_on() {
        let prog = load().unwrap();
        let mut frame = vec![0xffu8; 6];
        frame.extend([2, 0, 0, 0, 0, 2, 0x08, 0x06]);
        frame.resize(60, 0);
        let mut out = vec![0u8; 256];
        let mut attr = [0u64; 16];
        attr[0] = u32s(prog.as_raw_fd() as u32, 0);
        attr[1] = u32s(frame.len() as u32, out.len() as u32);
        attr[2] = frame.as_ptr() as u64;
        attr[3] = out.as_mut_ptr() as u64;
        attr[4] = u32s(1, 0);
        bpf(10, &mut attr).unwrap();
        assert_eq!((attr[0] >> 32) as i32, TCX_NEXT);
        assert_eq!(&out[..frame.len()], &frame[..]);
    }
}
