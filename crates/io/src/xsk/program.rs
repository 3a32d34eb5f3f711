//! The BPF programs of an AF_XDP port and their attachment: the redirect program that
//! hands frames to the sockets, the generator's timestamping one, XDP and tcx attachment
//! (through links, pinned where a restart takes them over), and program loading.

use super::*;

/// The programs of an AF_XDP port without an element's fast path, as clang made them from
/// `bpf/xsk.bpf.c`: `xsk_redirect` (every frame to its queue's socket; no socket there
/// means `XDP_PASS`) and `xsk_stamp` (IPv4 and IPv6 UDP frames to the sockets with their
/// receive times in 8 bytes of metadata; the rest to the kernel's stack), and their
/// XSKMAP `xsks`.
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/xsk.bpf.o"));

/// Loads `xsk_stamp` where `stamp`, else `xsk_redirect`, with an XSKMAP of `queues`
/// entries: the map and the program, to attach and fill as the element's own.
pub(super) fn load_plain(queues: u32, stamp: bool) -> io::Result<(OwnedFd, OwnedFd)> {
    let name = if stamp { "xsk_stamp" } else { "xsk_redirect" };
    let obj = crate::bpfobj::load(
        OBJECT,
        "the XSK programs",
        crate::bpfobj::Load {
            name: "xsk",
            max_entries: &[("xsks", queues.max(1))],
            programs: &[name],
            ..Default::default()
        },
    )?;
    Ok((obj.map("xsks")?, obj.prog(name)?))
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
/// given the hook it runs in, the program loaded.
pub type ProgramFor<'a> = &'a dyn Fn(Hook) -> io::Result<OwnedFd>;

/// What a [`ProgramFor`] answers for [`Hook::Tc`] where the element's fast path runs in
/// XDP only.
pub fn xdp_only() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "this element's fast path runs in XDP only",
    )
}

pub(super) fn attach(
    ifindex: u32,
    queues: u32,
    mode: AttachMode,
    program: Option<ProgramFor>,
    stamp: bool,
) -> io::Result<Attached> {
    // An element's fast path (its program made here, for a map of ours), or the plain
    // programs in C.
    let (map, prog) = match program {
        Some(p) => {
            let map = crate::bpfsys::map_create(
                BPF_MAP_TYPE_XSKMAP,
                4,
                4,
                queues.max(1),
                0,
                0,
                "XSKMAP",
            )?;
            let prog = p(Hook::Xdp(map.as_raw_fd()))?;
            (map, prog)
        }
        None => load_plain(queues, stamp)?,
    };
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
    let (link, native) = xdp_link(&prog, ifindex, mode)?;
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

/// An XDP link of `prog` on interface `ifindex`: in the driver's hook where `mode` allows
/// and the driver has one (true), else the generic one. The program leaves the interface
/// when the link closes.
pub(crate) fn xdp_link(
    prog: &OwnedFd,
    ifindex: u32,
    mode: AttachMode,
) -> io::Result<(OwnedFd, bool)> {
    let link = |flags: u32| crate::bpfsys::link_create(prog, ifindex, crate::xdp::BPF_XDP, flags);
    let (fd, native) = match mode {
        AttachMode::Auto => match link(XDP_FLAGS_DRV_MODE) {
            Ok(fd) => (fd, true),
            Err(_) => (link(XDP_FLAGS_SKB_MODE)?, false),
        },
        AttachMode::Generic => (link(XDP_FLAGS_SKB_MODE)?, false),
    };
    Ok((fd, native))
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
