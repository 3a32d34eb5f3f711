//! The BPF programs of an AF_XDP port and their attachment: the redirect program that
//! hands frames to the sockets, the generator's timestamping one, XDP and tcx attachment
//! (through links, pinned where a restart takes them over), and program loading.

use super::*;

/// The redirect program: the frame's receive queue indexes the XSKMAP; no socket there
/// means `XDP_PASS`.
pub(super) fn redirect_program(map_fd: i32) -> Vec<u8> {
    const LDX_W: u8 = 0x61;
    const LD_IMM64: u8 = 0x18;
    const MOV_K: u8 = 0xb7;
    const CALL: u8 = 0x85;
    const EXIT: u8 = 0x95;
    const REDIRECT_MAP: i32 = 51;
    [
        insn(LDX_W, 2, 1, 16, 0), // r2 = ctx->rx_queue_index
        insn(LD_IMM64, 1, crate::xdp::BPF_PSEUDO_MAP_FD, 0, map_fd),
        insn(0, 0, 0, 0, 0),
        insn(MOV_K, 3, 0, 0, XDP_PASS), // default action
        insn(CALL, 0, 0, 0, REDIRECT_MAP),
        insn(EXIT, 0, 0, 0, 0),
    ]
    .concat()
}

/// A receiving program for measurement: IPv4 and IPv6 UDP frames get their receive time
/// (the kernel's monotonic clock) in 8 bytes of metadata and go to the queue's socket,
/// everything else (ARP, neighbour discovery) to the kernel's stack. A frame whose
/// metadata the kernel refuses goes to the socket unstamped.
pub fn stamp_program(map_fd: i32) -> Vec<u8> {
    use crate::xdp::insn;
    const LDX_B: u8 = 0x71;
    const LDX_H: u8 = 0x69;
    const LDX_W: u8 = 0x61;
    const STX_DW: u8 = 0x7b;
    const LD_IMM64: u8 = 0x18;
    const MOV_K: u8 = 0xb7;
    const MOV_X: u8 = 0xbf;
    const ADD_K: u8 = 0x07;
    const JEQ_K: u8 = 0x15;
    const JNE_K: u8 = 0x55;
    const JGT_X: u8 = 0x2d;
    const JA: u8 = 0x05;
    const CALL: u8 = 0x85;
    const EXIT: u8 = 0x95;
    const ADJUST_META: i32 = 54;
    const KTIME_GET_NS: i32 = 5;
    const REDIRECT_MAP: i32 = 51;
    // Offsets are counted in instructions after the jump; LD_IMM64 takes two.
    [
        insn(MOV_X, 6, 1, 0, 0),                                     // 0: r6 = ctx
        insn(LDX_W, 2, 6, 0, 0),                                     // 1: r2 = data
        insn(LDX_W, 3, 6, 4, 0),                                     // 2: r3 = data_end
        insn(MOV_X, 4, 2, 0, 0),                                     // 3
        insn(ADD_K, 4, 0, 0, 24),                                    // 4: r4 = data + 24
        insn(JGT_X, 4, 3, 24, 0),                                    // 5: short -> pass (30)
        insn(LDX_H, 4, 2, 12, 0), // 6: EtherType, as loaded (little-endian)
        insn(JEQ_K, 4, 0, 3, 0x0008), // 7: IPv4 -> 11
        insn(JNE_K, 4, 0, 21, 0xdd86u16 as i32), // 8: not IPv6 -> pass (30)
        insn(LDX_B, 5, 2, 20, 0), // 9: IPv6 next header
        insn(JA, 0, 0, 1, 0),     // 10 -> 12
        insn(LDX_B, 5, 2, 23, 0), // 11: IPv4 protocol
        insn(JNE_K, 5, 0, 17, 17), // 12: not UDP -> pass (30)
        insn(MOV_X, 1, 6, 0, 0),  // 13
        insn(MOV_K, 2, 0, 0, -8), // 14
        insn(CALL, 0, 0, 0, ADJUST_META), // 15
        insn(JNE_K, 0, 0, 7, 0),  // 16: refused -> redirect (24)
        insn(CALL, 0, 0, 0, KTIME_GET_NS), // 17
        insn(LDX_W, 2, 6, 0, 0),  // 18: r2 = data
        insn(LDX_W, 3, 6, 8, 0),  // 19: r3 = data_meta
        insn(MOV_X, 4, 3, 0, 0),  // 20
        insn(ADD_K, 4, 0, 0, 8),  // 21
        insn(JGT_X, 4, 2, 1, 0),  // 22: no room -> redirect (24)
        insn(STX_DW, 3, 0, 0, 0), // 23: *(u64 *)data_meta = now
        insn(LDX_W, 2, 6, 16, 0), // 24: r2 = rx_queue_index
        insn(LD_IMM64, 1, crate::xdp::BPF_PSEUDO_MAP_FD, 0, map_fd), // 25-26
        insn(0, 0, 0, 0, 0),
        insn(MOV_K, 3, 0, 0, XDP_PASS), // 27: no socket on the queue: to the stack
        insn(CALL, 0, 0, 0, REDIRECT_MAP), // 28
        insn(EXIT, 0, 0, 0, 0),         // 29
        insn(MOV_K, 0, 0, 0, XDP_PASS), // 30: pass
        insn(EXIT, 0, 0, 0, 0),         // 31
    ]
    .concat()
}

/// The redirect program attached to one interface, and its XSKMAP.
pub(super) struct Attached {
    pub(super) map: OwnedFd,
    /// The BPF link: the program leaves the interface when it closes.
    pub(super) _link: OwnedFd,
    pub(super) _prog: OwnedFd,
    pub(super) native: bool,
    pub(super) fast: bool,
    /// A predecessor's program still runs in the link ([`crate::pin::defer_takeover`]):
    /// `_prog` takes its place at [`crate::xsk::AttachedShared::take_over`].
    pub(super) pending: std::sync::atomic::AtomicBool,
    /// The tcx link of the fast path's hand-off ([`crate::handoff`]), where it attached.
    pub(super) handoff: Option<crate::handoff::Link>,
}

/// How the XDP program is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// The driver's own XDP hook, falling back to the generic one when it has none.
    Auto,
    /// The generic (socket-buffer) hook only.
    Generic,
}

/// Where a port's own program runs, as its maker is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// The XDP hook of an AF_XDP port; frames it does not take go to the sockets of the
    /// XSKMAP with this descriptor.
    Xdp(i32),
    /// The tcx ingress hook of an AF_PACKET port; frames it does not take are marked
    /// [`crate::fastpath::TO_USER_SPACE_MARK`] and received again, for the port's socket.
    Tc,
}

/// A program other than the plain redirect (or, on AF_PACKET, the drop after the socket):
/// given the hook it runs in, its code.
pub type ProgramFor<'a> = &'a dyn Fn(Hook) -> Vec<u8>;

pub(super) fn attach(
    ifindex: u32,
    queues: u32,
    mode: AttachMode,
    program: Option<ProgramFor>,
    stamp: bool,
) -> io::Result<Attached> {
    let map = crate::xdp::map_create(BPF_MAP_TYPE_XSKMAP, 4, 4, queues.max(1), 0, 0, "XSKMAP")?;
    let (code, name) = match program {
        Some(p) => (p(Hook::Xdp(map.as_raw_fd())), "tessera_fast"),
        None if stamp => (stamp_program(map.as_raw_fd()), "tessera_stamp"),
        None => (redirect_program(map.as_raw_fd()), "tessera_xsk"),
    };
    let prog = load_xdp(&code, name)?;
    // A link a previous incarnation of the element pinned (its fast path, still
    // forwarding): this program takes its place in the same hook, at once or, where the
    // element defers its take-over, once its state is published (a live link keeps the
    // predecessor's program, with its state, until then). Either way the link is ours
    // from now on (pinned again, or not, as `keep`).
    let keep = program.is_some() && crate::pin::enabled();
    let handoff = program.is_some().then(|| handoff(ifindex, keep)).flatten();
    if let Some(t) = crate::pin::take_pinned(
        ifindex,
        &["link-drv", "link-skb"],
        crate::pin::BPF_LINK_TYPE_XDP,
        &prog,
        program.is_some(),
        keep,
    ) {
        return Ok(Attached {
            map,
            _link: t.link,
            _prog: prog,
            native: t.name == "link-drv",
            fast: program.is_some(),
            pending: std::sync::atomic::AtomicBool::new(t.deferred),
            handoff,
        });
    }
    let link = |flags: u32| {
        let mut attr = [0u64; 16];
        attr[0] = u32s(prog.as_raw_fd() as u32, ifindex);
        attr[1] = u32s(crate::xdp::BPF_XDP, flags);
        bpf(crate::xdp::BPF_LINK_CREATE, &mut attr)
    };
    let (fd, native) = match mode {
        AttachMode::Auto => match link(XDP_FLAGS_DRV_MODE) {
            Ok(fd) => (fd, true),
            Err(_) => (link(XDP_FLAGS_SKB_MODE)?, false),
        },
        AttachMode::Generic => (link(XDP_FLAGS_SKB_MODE)?, false),
    };
    // SAFETY: as above.
    let link = unsafe { OwnedFd::from_raw_fd(fd) };
    if keep {
        let name = if native { "link-drv" } else { "link-skb" };
        crate::pin::pin_link(ifindex, name, &link);
    }
    Ok(Attached {
        map,
        _link: link,
        _prog: prog,
        native,
        fast: program.is_some(),
        pending: std::sync::atomic::AtomicBool::new(false),
        handoff,
    })
}

/// The hand-off of a fast path's frames to egresses that take no XDP frames
/// ([`crate::handoff`]) in interface `ifindex`'s tcx hook; where the kernel has no tcx
/// (before 6.6), none, and a log line says that such egresses are user space's.
fn handoff(ifindex: u32, keep: bool) -> Option<crate::handoff::Link> {
    match crate::handoff::attach(ifindex, keep) {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::warn!(ifindex, error = %e, "fast path: no hand-off to tcx; frames bound to devices that take no XDP frames go to user space");
            None
        }
    }
}

/// Loads an XDP program (attach type BPF_XDP); a verifier error comes with its log.
pub(crate) fn load_xdp(code: &[u8], name: &str) -> io::Result<OwnedFd> {
    load_program(
        crate::xdp::BPF_PROG_TYPE_XDP,
        crate::xdp::BPF_XDP,
        code,
        name,
    )
}

/// Loads a program of type `prog_type` for attach type `attach`; a verifier error comes
/// with its log.
pub(crate) fn load_program(
    prog_type: u32,
    attach: u32,
    code: &[u8],
    name: &str,
) -> io::Result<OwnedFd> {
    let license = b"GPL\0";
    let mut log = vec![0u8; 1 << 20];
    let mut attr = [0u64; 16];
    attr[0] = u32s(prog_type, (code.len() / 8) as u32);
    attr[1] = code.as_ptr() as u64;
    attr[2] = license.as_ptr() as u64;
    attr[3] = u32s(1, log.len() as u32);
    attr[4] = log.as_mut_ptr() as u64;
    let mut n = [0u8; 16];
    let b = name.as_bytes();
    n[..b.len().min(15)].copy_from_slice(&b[..b.len().min(15)]);
    attr[6] = u64::from_le_bytes(n[..8].try_into().unwrap_or_default());
    attr[7] = u64::from_le_bytes(n[8..].try_into().unwrap_or_default());
    attr[8] = u32s(0, attach);
    let prog = bpf(crate::xdp::BPF_PROG_LOAD, &mut attr).map_err(|e| {
        let text = String::from_utf8_lossy(&log);
        let text = text.trim_end_matches('\0').trim();
        // The end of the log says what the verifier refused.
        let tail: String = text
            .lines()
            .rev()
            .take(12)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        io::Error::new(e.kind(), format!("bpf prog load ({name}): {e}: {tail}"))
    })?;
    // SAFETY: the kernel just returned this descriptor to us.
    Ok(unsafe { OwnedFd::from_raw_fd(prog) })
}
