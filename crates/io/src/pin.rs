//! Pinned BPF objects: what lets a port's fast path outlive its element, so that the next
//! start of that element (a restart, an upgrade to a new binary) takes the running program
//! over instead of detaching it, and no frame the fast path forwards is lost in between.
//!
//! Where: `$TESSERA_BPF_DIR` (default `/sys/fs/bpf/tessera`), which must be on a BPF
//! filesystem (systemd mounts one at `/sys/fs/bpf`; `tessera lab up` mounts one at
//! `/run/tessera/bpf`, as `ip netns exec` hides `/sys/fs/bpf`); elsewhere nothing is pinned.
//! Under it, per network namespace (by its inode) and interface (by its index):
//! `net<ino>/if<ifindex>/`, holding `link-drv` or `link-skb` (the XDP link of an AF_XDP
//! port, named by its attach mode) or `link-tcx` (the tcx ingress link of an AF_PACKET
//! port's fast path) and, in the first port's, the element's maps a successor reads
//! ([`crate::fastpath::ForwarderFastPath::pin`]).

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Whether links of fast-path programs made from now on are pinned ([`enable`]).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// From now on, the links (XDP or tcx) of ports opened with a fast-path program are pinned, so
/// that they outlive this process (an element that hands its fast path over to its next
/// start). Without it, links die with the process, as before.
pub fn enable(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Whether a port that finds a predecessor's pinned link leaves it running until the
/// element says it is ready ([`defer_takeover`]).
static DEFERRED: AtomicBool = AtomicBool::new(false);

/// From now on, a port opened with a fast-path program that finds a predecessor's pinned
/// link leaves the predecessor's program running in it (with the predecessor's state)
/// until the element calls [`TakeOver::take_over`] on the port, once its own
/// programs' maps hold its state: an element whose state comes from its own start (an
/// LB's table) takes over with no moment of empty maps. Without it, the new program
/// takes the link at once (a forwarder publishes its table before its ports open).
pub fn defer_takeover(on: bool) {
    DEFERRED.store(on, Ordering::Relaxed);
}

pub fn takeover_deferred() -> bool {
    DEFERRED.load(Ordering::Relaxed)
}

/// Where pins live: `$TESSERA_BPF_DIR`, or `/sys/fs/bpf/tessera`.
pub fn base() -> PathBuf {
    std::env::var_os("TESSERA_BPF_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/sys/fs/bpf/tessera"))
}

/// Whether `path` is on a BPF filesystem.
pub fn is_bpffs(path: &Path) -> bool {
    let Ok(c) = path_attr(path) else {
        return false;
    };
    // SAFETY: a zeroed statfs is a valid value of that plain C struct.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: statfs(2) on a NUL-terminated path into a struct we own.
    let r = unsafe { libc::statfs(c.as_ptr(), &mut s) };
    r == 0 && s.f_type as i64 == BPF_FS_MAGIC
}

/// Mounts a BPF filesystem at `dir` (created) unless one is there.
pub fn mount_bpffs(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    if is_bpffs(dir) {
        return Ok(());
    }
    let c = path_attr(dir)?;
    // SAFETY: mount(2) with NUL-terminated strings that outlive the call.
    let r = unsafe {
        libc::mount(
            c"bpf".as_ptr(),
            c.as_ptr(),
            c"bpf".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("mount bpf at {}: {e}", dir.display()),
        ));
    }
    Ok(())
}

/// The inode of this process's network namespace.
pub fn netns_inode() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/net").ok().map(|m| m.ino())
}

/// The directory of interface `ifindex`'s pins in this network namespace, if the base is
/// a BPF filesystem; `create` makes it where it is missing.
pub fn dir(ifindex: u32, create: bool) -> Option<PathBuf> {
    let base = base();
    if !is_bpffs(&base) {
        return None;
    }
    let d = base
        .join(format!("net{}", netns_inode()?))
        .join(format!("if{ifindex}"));
    if create {
        std::fs::create_dir_all(&d).ok()?;
    }
    d.is_dir().then_some(d)
}

/// `path` as the NUL-terminated string system calls take.
fn path_attr(path: &Path) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

/// Pins `fd` at `path`, replacing what was pinned there.
pub fn pin(fd: &OwnedFd, path: &Path) -> io::Result<()> {
    let _ = std::fs::remove_file(path);
    crate::bpfsys::obj_pin(fd, path)
        .map_err(|e| io::Error::new(e.kind(), format!("pin {}: {e}", path.display())))
}

/// The object pinned at `path`.
pub fn get(path: &Path) -> io::Result<OwnedFd> {
    crate::bpfsys::obj_get(path)
}

/// The kernel's link types (`enum bpf_link_type`) of the links pinned here.
pub const BPF_LINK_TYPE_XDP: u32 = 6;
pub const BPF_LINK_TYPE_TCX: u32 = 11;

/// The interface index a link of type `kind` (XDP or tcx) is attached to (0: none, a link
/// of another type or whose interface is gone), from the kernel's `bpf_link_info`.
pub fn link_ifindex(link: &OwnedFd, kind: u32) -> io::Result<u32> {
    // type, id, prog_id, then (at 16) the union: for XDP and tcx alike, the interface
    // index first.
    let mut info = [0u8; 64];
    crate::bpfsys::obj_info(link, &mut info)?;
    let word = |at: usize| u32::from_ne_bytes([info[at], info[at + 1], info[at + 2], info[at + 3]]);
    if word(0) != kind {
        return Ok(0);
    }
    Ok(word(16))
}

/// A predecessor's link found pinned for a port ([`take_pinned`]).
pub struct Taken {
    pub link: OwnedFd,
    /// The pin's name (of those asked for).
    pub name: &'static str,
    /// The predecessor's program still runs in it: this start's takes its place at the
    /// element's word ([`defer_takeover`]).
    pub deferred: bool,
}

/// The link a predecessor of this element pinned for interface `ifindex` under one of
/// `names` (a link of type `kind`), taken over for `prog`: `prog` runs in it from now on,
/// or, where `may_defer` and the element defers its take-over ([`defer_takeover`]) and the
/// link is live, the predecessor's program runs on until [`TakeOver::take_over`]. Either
/// way the link is this start's from now on: pinned again where `keep`, else its pin is
/// removed (it leaves with this process). None where nothing is pinned, or where the
/// pinned link could not take `prog` (a defunct link, its interface replaced: its pin is
/// removed and a warning logged; the caller makes a link of its own).
pub fn take_pinned(
    ifindex: u32,
    names: &[&'static str],
    kind: u32,
    prog: &OwnedFd,
    may_defer: bool,
    keep: bool,
) -> Option<Taken> {
    let d = dir(ifindex, false)?;
    let (path, link, name) = names.iter().find_map(|&n| {
        let path = d.join(n);
        let link = get(&path).ok()?;
        Some((path, link, n))
    })?;
    let live = link_ifindex(&link, kind).is_ok_and(|i| i == ifindex);
    let deferred = may_defer && takeover_deferred() && live;
    let taken = if deferred {
        Ok(())
    } else {
        link_update(&link, prog)
    };
    match taken {
        Ok(()) => {
            if !keep {
                let _ = std::fs::remove_file(&path);
            }
            Some(Taken {
                link,
                name,
                deferred,
            })
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "pinned link not taken over");
            let _ = std::fs::remove_file(&path);
            None
        }
    }
}

/// Pins a port's new `link` as `name` in interface `ifindex`'s directory, so that it
/// outlives this process; a warning where it cannot.
pub fn pin_link(ifindex: u32, name: &str, link: &OwnedFd) {
    if let Some(d) = dir(ifindex, true) {
        if let Err(e) = pin(link, &d.join(name)) {
            tracing::warn!(error = %e, "link not pinned: the fast path stops with the element");
        }
    }
}

/// Ends the links a predecessor of this element pinned for interface `ifindex` under
/// `names`: a port of the other kind now (a port the predecessor ran on AF_XDP that this
/// start runs on AF_PACKET, or the other way), whose program this start does not take
/// over. Called once the port's own program is attached, so that frames go from the
/// predecessor's program to this start's with none to neither; the pin held the link's
/// last reference, so it detaches as the pin goes. Returns the names it ended.
pub fn retire(ifindex: u32, names: &[&'static str]) -> Vec<&'static str> {
    let Some(d) = dir(ifindex, false) else {
        return Vec::new();
    };
    names
        .iter()
        .copied()
        .filter(|n| std::fs::remove_file(d.join(n)).is_ok())
        .collect()
}

/// A port whose link may still run a predecessor's program ([`defer_takeover`]).
pub trait TakeOver: Send + Sync {
    /// Puts this start's program in the link where a predecessor's still runs; nothing
    /// where this start's runs already. Whether it took over now.
    fn take_over(&self) -> io::Result<bool>;
}

/// Has `link` run `prog` from now on (atomically: every frame runs one or the other).
pub fn link_update(link: &OwnedFd, prog: &OwnedFd) -> io::Result<()> {
    crate::bpfsys::link_update(link, prog)
}

/// Removes the pins under `base` of every interface of the network namespace whose inode
/// is `ino` (a lab's namespace going down).
pub fn remove_netns(base: &Path, ino: u64) {
    let _ = std::fs::remove_dir_all(base.join(format!("net{ino}")));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_pinned_where_the_base_is_no_bpf_filesystem() {
        assert!(!is_bpffs(Path::new("/proc")));
        assert!(!is_bpffs(Path::new("/no/such/dir")));
    }
}
