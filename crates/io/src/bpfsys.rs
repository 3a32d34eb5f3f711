//! The BPF system calls the crate makes beside the loader's objects ([`crate::bpfobj`]):
//! the maps an element creates and shares between its ports' programs, their reads and
//! writes, pins, links (XDP, tcx) and their hand-over, and test runs. Each goes through
//! libbpf's own wrapper of the call (`libbpf_sys`, the loader's library): no `bpf(2)`
//! attribute is packed here. Errors are the kernel's, as `io::Error`s.

use libbpf_rs::libbpf_sys as sys;
use std::ffi::{c_void, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// libbpf's result: a descriptor or 0, or the kernel's error (libbpf returns `-errno`).
fn check(r: i32) -> io::Result<i32> {
    if r < 0 {
        Err(io::Error::from_raw_os_error(-r))
    } else {
        Ok(r)
    }
}

/// A descriptor libbpf just returned, owned from now on.
fn owned(r: i32) -> io::Result<OwnedFd> {
    let fd = check(r)?;
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Creates a BPF map of type `kind` (`BPF_MAP_TYPE_*`) with `flags` and, for a map of
/// maps, the inner map `inner` (0: none); an error names it (`what`). `what` is its name
/// as bpftool shows it, in the characters the kernel takes (letters, digits, '_' and
/// '.'), 15 at most.
pub(crate) fn map_create(
    kind: u32,
    key: u32,
    value: u32,
    entries: u32,
    flags: u32,
    inner: i32,
    what: &str,
) -> io::Result<OwnedFd> {
    let name: String = what
        .chars()
        .take(15)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = CString::new(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let opts = sys::bpf_map_create_opts {
        sz: std::mem::size_of::<sys::bpf_map_create_opts>() as _,
        map_flags: flags,
        inner_map_fd: inner as u32,
        ..Default::default()
    };
    // SAFETY: a NUL-terminated name and options of their own size, both alive for the call.
    let r = unsafe { sys::bpf_map_create(kind, name.as_ptr(), key, value, entries, &opts) };
    owned(r).map_err(|e| io::Error::new(e.kind(), format!("bpf map create ({what}): {e}")))
}

/// Sets `key` to `value` in `map` (`K` and `V` of the map's key and value sizes).
pub(crate) fn map_update<K, V>(map: &OwnedFd, key: &K, value: &V) -> io::Result<()> {
    map_update_raw(map, key, value as *const V as *const u8)
}

/// Sets `key` to the value at `value` (of the map's value size; per CPU, one per possible
/// CPU) in `map`.
pub(crate) fn map_update_raw<K>(map: &OwnedFd, key: &K, value: *const u8) -> io::Result<()> {
    // SAFETY: key and value point to buffers of the map's key and value sizes (the
    // callers' types), alive for the call; the kernel copies them.
    let r = unsafe {
        sys::bpf_map_update_elem(
            map.as_raw_fd(),
            key as *const K as *const c_void,
            value as *const c_void,
            0,
        )
    };
    check(r).map(|_| ())
}

/// Reads `key`'s value of `map` into the buffer at `value` (of the map's value size; per
/// CPU, one per possible CPU).
pub(crate) fn map_lookup_raw<K>(map: &OwnedFd, key: &K, value: *mut u8) -> io::Result<()> {
    // SAFETY: key points to a key of the map's size and value to a buffer the caller
    // sized for the value, both alive for the call.
    let r = unsafe {
        sys::bpf_map_lookup_elem(
            map.as_raw_fd(),
            key as *const K as *const c_void,
            value as *mut c_void,
        )
    };
    check(r).map(|_| ())
}

/// Reads `key`'s value of `map` into `value`.
pub(crate) fn map_lookup<K, V>(map: &OwnedFd, key: &K, value: &mut V) -> io::Result<()> {
    map_lookup_raw(map, key, value as *mut V as *mut u8)
}

/// The key of `map` after `key` (the first with None) into `next`; false past the last.
pub(crate) fn map_next_key<K>(map: &OwnedFd, key: Option<&K>, next: &mut K) -> bool {
    let key = key.map_or(std::ptr::null(), |k| k as *const K as *const c_void);
    // SAFETY: key is null or a key of the map's size, next a buffer of that size, both
    // alive for the call.
    let r =
        unsafe { sys::bpf_map_get_next_key(map.as_raw_fd(), key, next as *mut K as *mut c_void) };
    r == 0
}

/// Removes `key` from `map`.
pub(crate) fn map_delete<K>(map: &OwnedFd, key: &K) -> io::Result<()> {
    // SAFETY: key points to a key of the map's size, alive for the call.
    let r = unsafe { sys::bpf_map_delete_elem(map.as_raw_fd(), key as *const K as *const c_void) };
    check(r).map(|_| ())
}

/// `path` as the NUL-terminated string libbpf takes.
fn c_path(path: &Path) -> io::Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

/// Pins `fd` (a map, a program or a link) at `path` on a BPF filesystem.
pub(crate) fn obj_pin(fd: &OwnedFd, path: &Path) -> io::Result<()> {
    let c = c_path(path)?;
    // SAFETY: a NUL-terminated path alive for the call.
    check(unsafe { sys::bpf_obj_pin(fd.as_raw_fd(), c.as_ptr()) }).map(|_| ())
}

/// The object pinned at `path`.
pub(crate) fn obj_get(path: &Path) -> io::Result<OwnedFd> {
    let c = c_path(path)?;
    // SAFETY: a NUL-terminated path alive for the call.
    owned(unsafe { sys::bpf_obj_get(c.as_ptr()) })
}

/// The kernel's description of `fd` (`struct bpf_link_info` and the like) into `info`;
/// the bytes it wrote.
pub(crate) fn obj_info(fd: &OwnedFd, info: &mut [u8]) -> io::Result<usize> {
    let mut len = info.len() as u32;
    // SAFETY: info is a buffer of len bytes, alive for the call.
    let r = unsafe {
        sys::bpf_obj_get_info_by_fd(fd.as_raw_fd(), info.as_mut_ptr() as *mut c_void, &mut len)
    };
    check(r).map(|_| len as usize)
}

/// A link of `prog` to `target` (an interface index for XDP and tcx) at `attach_type`
/// (`BPF_XDP`, `BPF_TCX_INGRESS`) with `flags` (XDP: the hook's mode; tcx: none, after
/// the programs there). The program leaves the hook when the link closes.
pub(crate) fn link_create(
    prog: &OwnedFd,
    target: u32,
    attach_type: u32,
    flags: u32,
) -> io::Result<OwnedFd> {
    let opts = sys::bpf_link_create_opts {
        sz: std::mem::size_of::<sys::bpf_link_create_opts>() as _,
        flags,
        ..Default::default()
    };
    // SAFETY: options of their own size, alive for the call.
    owned(unsafe { sys::bpf_link_create(prog.as_raw_fd(), target as i32, attach_type, &opts) })
}

/// Has `link` run `prog` from now on (atomically: every frame runs one or the other).
pub(crate) fn link_update(link: &OwnedFd, prog: &OwnedFd) -> io::Result<()> {
    // SAFETY: no options (null): libbpf takes that as none.
    let r = unsafe { sys::bpf_link_update(link.as_raw_fd(), prog.as_raw_fd(), std::ptr::null()) };
    check(r).map(|_| ())
}

/// One `BPF_PROG_TEST_RUN`: what goes in, and where what comes out goes.
#[derive(Default)]
pub(crate) struct TestRun<'a> {
    pub data_in: &'a [u8],
    pub data_out: Option<&'a mut [u8]>,
    pub ctx_in: Option<&'a [u8]>,
    pub ctx_out: Option<&'a mut [u8]>,
    /// Runs (0: one).
    pub repeat: u32,
    pub flags: u32,
    /// Frames per batch in XDP's live-frames mode (0: the kernel's default).
    pub batch_size: u32,
}

/// What a test run gave: the program's return value, its average time per run in
/// nanoseconds, and the bytes of data out.
pub(crate) struct TestRunOut {
    pub retval: u32,
    pub duration_ns: u32,
    pub data_size_out: usize,
}

/// Runs `prog` as `BPF_PROG_TEST_RUN` does with `t`.
pub(crate) fn test_run(prog: &OwnedFd, t: TestRun<'_>) -> io::Result<TestRunOut> {
    let (data_out, data_size_out) = match t.data_out {
        Some(b) => (b.as_mut_ptr() as *mut c_void, b.len() as u32),
        None => (std::ptr::null_mut(), 0),
    };
    let (ctx_in, ctx_size_in) = match t.ctx_in {
        Some(b) => (b.as_ptr() as *const c_void, b.len() as u32),
        None => (std::ptr::null(), 0),
    };
    let (ctx_out, ctx_size_out) = match t.ctx_out {
        Some(b) => (b.as_mut_ptr() as *mut c_void, b.len() as u32),
        None => (std::ptr::null_mut(), 0),
    };
    let mut opts = sys::bpf_test_run_opts {
        sz: std::mem::size_of::<sys::bpf_test_run_opts>() as _,
        data_in: t.data_in.as_ptr() as *const c_void,
        data_size_in: t.data_in.len() as u32,
        data_out,
        data_size_out,
        ctx_in,
        ctx_size_in,
        ctx_out,
        ctx_size_out,
        repeat: t.repeat as i32,
        flags: t.flags,
        batch_size: t.batch_size,
        ..Default::default()
    };
    // SAFETY: every pointer in opts is null or a buffer of the size given beside it,
    // borrowed from `t` for the call; the kernel writes no more than those sizes.
    let r = unsafe { sys::bpf_prog_test_run_opts(prog.as_raw_fd(), &mut opts) };
    check(r)?;
    Ok(TestRunOut {
        retval: opts.retval,
        duration_ns: opts.duration,
        data_size_out: opts.data_size_out as usize,
    })
}
