//! The BPF programs written in C (`crates/io/bpf/*.bpf.c`, one file per program, compiled
//! by clang from the build script with BTF) and their loading, with libbpf through
//! libbpf-rs.
//!
//! Why libbpf: an element loads its program once per port, each told its port's facts in
//! a read-only global (`.rodata`, frozen, so the verifier treats its fields as constants),
//! and every port's program shares the element's maps, which the element creates, fills
//! and pins for its next start. libbpf reuses a map given as a descriptor
//! (`bpf_map__reuse_fd`); aya, used here before, shares maps between loads only through a
//! pin on a BPF filesystem, which a port cannot count on (pinning is optional, and
//! `ip netns exec` hides `/sys/fs/bpf`).
//!
//! What libbpf-rs 0.27's types do not cover goes through libbpf's own C wrappers of the
//! calls (`libbpf_sys`, in [`crate::bpfsys`]; no `bpf(2)` attribute is packed here): tcx
//! links (`afpacket`, `handoff`), the XDP links' hand-over between an element and its
//! next start (`pin`), the test runs of the fast paths' golden tests
//! (`fastpath::detached`) and of the XDP generator (`xdp`), and the maps an element
//! creates and shares between its ports' programs, read and written on the hot paths
//! without allocation (`bpfsys::map_update` and friends). What is ours alone: the AF_XDP
//! rings (`xsk`).

use libbpf_rs::MapCore;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

fn err(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

/// libbpf's own messages go to our log (warnings and worse), once.
fn log_libbpf() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Warn, |level, msg| {
            let msg = msg.trim_end();
            match level {
                libbpf_rs::PrintLevel::Warn => tracing::warn!(target: "libbpf", "{msg}"),
                _ => tracing::debug!(target: "libbpf", "{msg}"),
            }
        })));
    });
}

/// What a load is given beside the object.
#[derive(Default)]
pub struct Load<'a> {
    /// The object's name (its source file's, `l2` for `l2.bpf.c`): `bpftool map show`
    /// names the read-only global's map after it (`l2.rodata`).
    pub name: &'a str,
    /// The program's read-only global: its `.rodata` section's bytes (a C struct of the
    /// object's, as `#[repr(C)]` Rust lays it out); it must be the whole section.
    pub config: Option<&'a [u8]>,
    /// Maps of the object that are the element's own, by name: the program uses these
    /// instead of creating its own (their types and sizes must match the object's).
    pub reuse: &'a [(&'a str, BorrowedFd<'a>)],
    /// Maps whose number of entries is set here, by name.
    pub max_entries: &'a [(&'a str, u32)],
    /// The programs to load, by name (none named: every program of the object).
    pub programs: &'a [&'a str],
    /// Maps not to create, by name: those only programs left unloaded use (say, a tcx
    /// program's object's AF_XDP socket map).
    pub skip: &'a [&'a str],
}

/// An object loaded: its programs and the maps it created (those not reused) live as long
/// as it does, or as a descriptor taken from it does.
pub struct Loaded {
    obj: libbpf_rs::Object,
    what: &'static str,
}

impl Loaded {
    /// A descriptor of program `name` (the program lives as long as one does).
    pub fn prog(&self, name: &str) -> io::Result<OwnedFd> {
        self.obj
            .progs()
            .find(|p| p.name() == name)
            .ok_or_else(|| err(self.what, format!("no program `{name}`")))?
            .as_fd()
            .try_clone_to_owned()
    }

    /// A descriptor of map `name`.
    pub fn map(&self, name: &str) -> io::Result<OwnedFd> {
        self.obj
            .maps()
            .find(|m| m.name() == name)
            .ok_or_else(|| err(self.what, format!("no map `{name}`")))?
            .as_fd()
            .try_clone_to_owned()
    }
}

/// Loads `object` (`what` names it in errors; a verifier's refusal comes with the end of
/// its log, through libbpf's messages).
pub fn load(object: &[u8], what: &'static str, with: Load) -> io::Result<Loaded> {
    log_libbpf();
    // libelf reads the object in place: eight-byte aligned, as an ELF file's headers are.
    let mut aligned = vec![0u64; object.len().div_ceil(8)];
    // SAFETY: the Vec holds at least object.len() bytes; u64 has no invalid bit patterns.
    let bytes =
        unsafe { std::slice::from_raw_parts_mut(aligned.as_mut_ptr().cast::<u8>(), object.len()) };
    bytes.copy_from_slice(object);
    let mut builder = libbpf_rs::ObjectBuilder::default();
    if !with.name.is_empty() {
        builder.name(with.name).map_err(|e| err(what, e))?;
    }
    let mut open = builder.open_memory(bytes).map_err(|e| err(what, e))?;
    let mut found = 0;
    for mut m in open.maps_mut() {
        let name = m.name().to_string_lossy().into_owned();
        if name.ends_with(".rodata") {
            if let Some(config) = with.config {
                let init = m
                    .initial_value_mut()
                    .ok_or_else(|| err(what, "no initial value for .rodata"))?;
                if init.len() != config.len() {
                    return Err(err(
                        what,
                        format!(
                            "the program's configuration is {} bytes, its .rodata {}",
                            config.len(),
                            init.len()
                        ),
                    ));
                }
                init.copy_from_slice(config);
                found += 1;
            }
            continue;
        }
        if with.skip.contains(&name.as_str()) {
            m.set_autocreate(false)
                .map_err(|e| err(what, format!("map `{name}`: {e}")))?;
            continue;
        }
        if let Some((_, fd)) = with.reuse.iter().find(|(n, _)| *n == name) {
            m.reuse_fd(*fd)
                .map_err(|e| err(what, format!("map `{name}`: {e}")))?;
            found += 1;
        }
        if let Some((_, n)) = with.max_entries.iter().find(|(n, _)| *n == name) {
            m.set_max_entries(*n)
                .map_err(|e| err(what, format!("map `{name}`: {e}")))?;
        }
    }
    if !with.programs.is_empty() {
        for mut p in open.progs_mut() {
            let name = p.name().to_string_lossy().into_owned();
            p.set_autoload(with.programs.contains(&name.as_str()));
        }
    }
    let wanted = with.reuse.len() + usize::from(with.config.is_some());
    if found != wanted {
        return Err(err(
            what,
            format!("{found} of the {wanted} maps given (reused, or .rodata) are the object's"),
        ));
    }
    let obj = open.load().map_err(|e| err(what, e))?;
    Ok(Loaded { obj, what })
}

/// The bytes of a `#[repr(C)]` configuration, as [`Load::config`] takes them.
pub fn config_bytes<T: Copy>(c: &T) -> &[u8] {
    // SAFETY: a T is size_of::<T>() readable bytes. The configurations are u32 and u64
    // fields in an order that leaves no padding (none uninitialized is read).
    unsafe { std::slice::from_raw_parts((c as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}
