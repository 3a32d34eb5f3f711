//! The fast path's programs loaded but attached nowhere, and `BPF_PROG_TEST_RUN` on them:
//! what the golden tests compare with user space.

use super::*;

/// Which hook a [`Detached`] program is made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    Xdp,
    Tc,
}

/// A fast-path program loaded but attached nowhere (XDP: with an empty socket map): for
/// checking its verdicts with `BPF_PROG_TEST_RUN` ([`Detached::run`]).
pub struct Detached {
    pub(super) prog: OwnedFd,
    pub(super) at: At,
    pub(super) _xsk: Option<OwnedFd>,
}

/// What the program did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Forwarded it (redirected out of a port).
    Forward,
    /// Left it to user space (XDP: to the socket map, empty here; tcx: marked and
    /// received again).
    ToUserSpace,
    /// Dropped it (tcx: a marked frame, back for the socket; either hook: shed over the
    /// slow path's limit).
    Drop,
    /// Handed it, ready to leave, to the tcx hook of its port, for the interface with this
    /// index (XDP: passed with the hand-off's metadata, [`crate::handoff`]).
    HandOff(u32),
    /// Anything else: the program's return value.
    Other(u32),
}

impl ForwarderFastPath {
    /// The program of a port for the hook `at`, loaded and not attached.
    pub fn detached(&self, f: &ProgramFacts, at: At) -> io::Result<Detached> {
        Ok(match at {
            At::Xdp => detached_xdp(|xsk| self.program(f, Hook::Xdp(xsk)))?,
            At::Tc => Detached {
                prog: self.program(f, Hook::Tc)?,
                at,
                _xsk: None,
            },
        })
    }
}

impl Detached {
    /// Runs the program once on `frame` (in the tcx hook, as a frame with mark `mark`):
    /// its verdict and the frame as the program left it.
    pub fn run_marked(&self, frame: &[u8], mark: u32) -> io::Result<(Verdict, Vec<u8>)> {
        self.run_timed(frame, mark, 1).map(|(v, out, _)| (v, out))
    }

    /// The program's average time per run on `frame` (in the kernel, nanoseconds, as
    /// `BPF_PROG_TEST_RUN` times it) over `repeat` runs, and its last verdict: what a
    /// program costs per frame. The runs share one copy of the frame, which the program
    /// may change as it goes (a forwarder's TTL, an LB's tag): keep `repeat` below what
    /// that allows.
    pub fn time(&self, frame: &[u8], repeat: u32) -> io::Result<(Verdict, u32)> {
        self.run_timed(frame, 0, repeat).map(|(v, _, ns)| (v, ns))
    }

    fn run_timed(
        &self,
        frame: &[u8],
        mark: u32,
        repeat: u32,
    ) -> io::Result<(Verdict, Vec<u8>, u32)> {
        let mut out = vec![0u8; frame.len() + 256];
        let mut ctx_in = [0u8; SKB_SIZE];
        let m = SKB_MARK as usize;
        ctx_in[m..m + 4].copy_from_slice(&mark.to_ne_bytes());
        let mut ctx_out = [0u8; SKB_SIZE];
        let ctx_len = match self.at {
            At::Tc => SKB_SIZE,
            At::Xdp => {
                // xdp_md: data 0, data_end the frame's length; out, its `data` is the
                // length of the metadata the program left, which the data out starts with.
                ctx_in[..4].fill(0);
                ctx_in[4..8].copy_from_slice(&(frame.len() as u32).to_ne_bytes());
                XDP_MD_SIZE
            }
        };
        let r = crate::bpfsys::test_run(
            &self.prog,
            crate::bpfsys::TestRun {
                data_in: frame,
                data_out: Some(&mut out),
                ctx_in: Some(&ctx_in[..ctx_len]),
                ctx_out: Some(&mut ctx_out[..ctx_len]),
                repeat: repeat.max(1),
                ..Default::default()
            },
        )
        .map_err(|e| io::Error::new(e.kind(), format!("bpf test run: {e}")))?;
        let (retval, duration, size) = (r.retval, r.duration_ns, r.data_size_out);
        out.truncate(size.min(out.len()));
        let word = |b: &[u8], i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let meta = match self.at {
            At::Xdp => (word(&ctx_out, 0) as usize).min(out.len()),
            At::Tc => 0,
        };
        let handed = (meta >= 8 && word(&out, 0) == crate::handoff::MAGIC).then(|| word(&out, 4));
        out.drain(..meta);
        let marked =
            u32::from_ne_bytes([ctx_out[m], ctx_out[m + 1], ctx_out[m + 2], ctx_out[m + 3]])
                == TO_USER_SPACE_MARK;
        let v = match (self.at, retval) {
            (At::Xdp, r) if r == XDP_PASS as u32 && handed.is_some() => {
                Verdict::HandOff(handed.unwrap_or_default())
            }
            (At::Xdp, XDP_REDIRECT) => Verdict::Forward,
            (At::Xdp, r) if r == XDP_PASS as u32 => Verdict::ToUserSpace,
            (At::Xdp, XDP_DROP) => Verdict::Drop,
            (At::Tc, TCX_REDIRECT) if marked => Verdict::ToUserSpace,
            (At::Tc, TCX_REDIRECT) => Verdict::Forward,
            (At::Tc, r) if r == TCX_DROP as u32 => Verdict::Drop,
            (_, r) => Verdict::Other(r),
        };
        Ok((v, out, duration))
    }

    /// As [`Detached::run_marked`], for a frame as it arrives (no mark).
    pub fn run(&self, frame: &[u8]) -> io::Result<(Verdict, Vec<u8>)> {
        self.run_marked(frame, 0)
    }
}
