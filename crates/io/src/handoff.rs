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
//! The program is C (`bpf/handoff.bpf.c`, compiled by clang from the build script, with
//! BTF) and loaded with libbpf ([`crate::bpfobj`]); it has no maps and no state: a restart or an upgrade puts the
//! new one in the pinned link (`link-handoff`) in one step, and the old XDP program's
//! hand-offs are forwarded by the new one alike.

use std::io;
use std::os::fd::OwnedFd;

/// The first four bytes of the metadata an XDP fast path writes in front of a frame it
/// hands to tcx (its second four: the egress interface index). The C program's
/// `HANDOFF_MAGIC`.
pub const MAGIC: u32 = 0x7e55_0002;
/// The metadata's length.
pub const META_LEN: i32 = 8;
/// The pin name of the hand-off's link ([`crate::pin`]).
pub const PIN: &str = "link-handoff";

/// The program's object, as clang made it from `bpf/handoff.bpf.c`.
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/handoff.bpf.o"));

/// The hand-off loaded into the kernel, attached nowhere yet.
pub struct Program {
    prog: OwnedFd,
}

impl Program {
    /// Loads the program (the verifier's refusal comes here).
    pub fn load() -> io::Result<Program> {
        let obj = crate::bpfobj::load(
            OBJECT,
            "the hand-off",
            crate::bpfobj::Load {
                name: "handoff",
                ..Default::default()
            },
        )?;
        Ok(Program {
            prog: obj.prog("handoff")?,
        })
    }

    /// The loaded program's descriptor (for `BPF_PROG_TEST_RUN`).
    pub fn raw_fd(&self) -> i32 {
        std::os::fd::AsRawFd::as_raw_fd(&self.prog)
    }
}

/// A port's hand-off link: the program leaves the hook when it closes, unless pinned.
pub struct Link {
    _link: OwnedFd,
    _prog: OwnedFd,
}

/// Runs the hand-off in interface `ifindex`'s tcx ingress hook: in the link a
/// predecessor pinned, if any (its program replaced in one step), else in a new one,
/// pinned where `keep` so that it outlives this process as the XDP program's link does.
pub fn attach(ifindex: u32, keep: bool) -> io::Result<Link> {
    let p = Program::load()?;
    if let Some(t) = crate::pin::take_pinned(
        ifindex,
        &[PIN],
        crate::pin::BPF_LINK_TYPE_TCX,
        &p.prog,
        false,
        keep,
    ) {
        return Ok(Link {
            _link: t.link,
            _prog: p.prog,
        });
    }
    let link = crate::afpacket::tcx_ingress_link(&p.prog, ifindex)
        .map_err(|e| io::Error::new(e.kind(), format!("tcx ingress link (hand-off): {e}")))?;
    if keep {
        crate::pin::pin_link(ifindex, PIN, &link);
    }
    Ok(Link {
        _link: link,
        _prog: p.prog,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The program passes the verifier, and a frame without the hand-off's metadata goes
    /// on untouched (a test run gives no metadata). Needs root (BPF).
    #[test]
    fn the_hand_off_loads_and_passes_other_frames_on() {
        let prog = Program::load().unwrap();
        let mut frame = vec![0xffu8; 6];
        frame.extend([2, 0, 0, 0, 0, 2, 0x08, 0x06]);
        frame.resize(60, 0);
        let mut out = vec![0u8; 256];
        let r = crate::bpfsys::test_run(
            &prog.prog,
            crate::bpfsys::TestRun {
                data_in: &frame,
                data_out: Some(&mut out),
                ..Default::default()
            },
        )
        .unwrap();
        // TCX_NEXT: -1.
        assert_eq!(r.retval as i32, -1);
        assert_eq!(&out[..frame.len()], &frame[..]);
    }
}
