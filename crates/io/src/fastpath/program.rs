//! The forwarder's fast-path program (`bpf/forward.bpf.c`) and what each port's copy is told
//! at load: [`ForwardConfig`], its read-only global, made from a port's [`ProgramFacts`].

use super::*;

/// The forwarder's fast path, as clang made it from `bpf/forward.bpf.c`.
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/forward.bpf.o"));

/// What one program takes at most (`forward.bpf.c`'s bounds of the same names): the
/// router's own and broadcast IPv4 addresses, its IPv6 ones, a star's other members
/// (per family), the ports a star header may name, a port's IPv6 networks for the star
/// header's ingress address.
pub const MAX_SPECIAL: usize = 512;
pub const MAX_SPECIAL6: usize = 128;
pub const MAX_MEMBERS: usize = 128;
pub const MAX_STAR_PORTS: usize = 256;
pub const MAX_INGRESS6: usize = 32;

/// `forward_config.flags`: next hops may carry a VLAN id; IPv6 on; a star member; whose
/// program does the star's work (XDP, no sub-interfaces); on the internal port.
const F_TAGGED: u32 = 1;
const F_IPV6: u32 = 2;
const F_STAR: u32 = 4;
const F_STAR_FAST: u32 = 8;
const F_STAR_IN: u32 = 16;

#[repr(C)]
#[derive(Clone, Copy)]
struct StarMember {
    net: u32,
    mask: u32,
    mac: u64,
    port: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct StarMember6 {
    net: [u8; 16],
    mask: [u8; 16],
    mac: u64,
    port: u32,
    pad: u32,
}

/// The program's read-only global (`struct forward_config` of `bpf/forward.bpf.c`, which
/// says what each field holds).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct ForwardConfig {
    mac: u64,
    police_cost: u64,
    police_burst: u64,
    port: u32,
    ifindex: u32,
    flags: u32,
    nspecial: u32,
    nspecial6: u32,
    star_internal: u32,
    star_ingress: u32,
    nmembers: u32,
    nmembers6: u32,
    nstar_ports: u32,
    ningress6: u32,
    nvlans: u32,
    vlans: [u64; 64],
    special_bits: [u64; 16],
    special: [u32; MAX_SPECIAL],
    special6: [[u8; 16]; MAX_SPECIAL6],
    members: [StarMember; MAX_MEMBERS],
    members6: [StarMember6; MAX_MEMBERS],
    star_ports: [[u32; 2]; MAX_STAR_PORTS],
    ingress6: [[[u8; 16]; 3]; MAX_INGRESS6],
    ingress6_else: [u8; 16],
}

/// An error for a list of `what` longer than a program takes.
fn too_many(port: u32, what: &str, n: usize, max: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("fast path of port {port}: {n} {what}, the program takes at most {max}"),
    )
}

fn check_len(f: &ProgramFacts, what: &str, n: usize, max: usize) -> io::Result<()> {
    if n > max {
        return Err(too_many(f.port, what, n, max));
    }
    Ok(())
}

/// Port `f`'s configuration for `hook`; `me`: its interface index.
pub(super) fn config(f: &ProgramFacts, hook: Hook, me: u32) -> io::Result<Box<ForwardConfig>> {
    let tc = hook == Hook::Tc;
    let mut c = Box::new(ForwardConfig {
        mac: mac_u64(&f.mac),
        police_cost: 0,
        police_burst: 0,
        port: f.port,
        ifindex: me,
        flags: 0,
        nspecial: 0,
        nspecial6: 0,
        star_internal: 0,
        star_ingress: 0,
        nmembers: 0,
        nmembers6: 0,
        nstar_ports: 0,
        ningress6: 0,
        nvlans: 0,
        vlans: [0; 64],
        special_bits: [0; 16],
        special: [0; MAX_SPECIAL],
        special6: [[0; 16]; MAX_SPECIAL6],
        members: [StarMember {
            net: 0,
            mask: 0,
            mac: 0,
            port: 0,
            pad: 0,
        }; MAX_MEMBERS],
        members6: [StarMember6 {
            net: [0; 16],
            mask: [0; 16],
            mac: 0,
            port: 0,
            pad: 0,
        }; MAX_MEMBERS],
        star_ports: [[0; 2]; MAX_STAR_PORTS],
        ingress6: [[[0; 16]; 3]; MAX_INGRESS6],
        ingress6_else: [0; 16],
    });
    if f.slow_path_limit > 0 {
        let cost = 1_000_000_000u64 / f.slow_path_limit as u64;
        c.police_cost = cost;
        c.police_burst = cost * (f.slow_path_limit as u64 / 10).max(1);
    }
    if f.tagged {
        c.flags |= F_TAGGED;
    }
    if f.ipv6 {
        c.flags |= F_IPV6;
    }
    check_len(f, "special IPv4 addresses", f.special.len(), MAX_SPECIAL)?;
    for (slot, a) in c.special.iter_mut().zip(&f.special) {
        // As the program reads it from the frame: the octets in order.
        *slot = u32::from_ne_bytes(a.octets());
        mark_special(&mut c.special_bits, *slot);
    }
    c.nspecial = f.special.len() as u32;
    check_len(f, "IPv6 addresses", f.special6.len(), MAX_SPECIAL6)?;
    for (slot, a) in c.special6.iter_mut().zip(&f.special6) {
        *slot = a.octets();
        let o = a.octets();
        mark_special(
            &mut c.special_bits,
            u32::from_ne_bytes([o[12], o[13], o[14], o[15]]),
        );
    }
    c.nspecial6 = f.special6.len() as u32;
    for &v in &f.vlans {
        let v = v & 0xfff;
        c.vlans[v as usize / 64] |= 1 << (v % 64);
    }
    c.nvlans = f.vlans.len() as u32;
    if let Some(s) = &f.star {
        c.flags |= F_STAR;
        c.star_internal = s.internal;
        // The star's work in the program: in XDP, where no port has sub-interfaces.
        if !tc && !f.tagged && f.vlans.is_empty() {
            c.flags |= F_STAR_FAST;
            if s.internal == f.port {
                c.flags |= F_STAR_IN;
            }
        }
        star_config(f, s, &mut c)?;
    }
    Ok(c)
}

/// Where an address's word (as the program reads it from the frame: an IPv4 address, an
/// IPv6 address's last four bytes) falls in `special_bits` (`forward.bpf.c`'s
/// `maybe_special`): the program looks through the list only for words whose bit is set.
fn special_hash(w: u32) -> u32 {
    (w ^ (w >> 16) ^ (w >> 8)) & 1023
}

fn mark_special(bits: &mut [u64; 16], w: u32) {
    let h = special_hash(w);
    bits[(h >> 6) as usize] |= 1 << (h & 63);
}

/// A star member's facts into `c`.
fn star_config(f: &ProgramFacts, s: &StarFacts, c: &mut ForwardConfig) -> io::Result<()> {
    c.star_ingress = s.ingress;
    check_len(f, "star members", s.members.len(), MAX_MEMBERS)?;
    for (slot, &(net, mask, mac, port)) in c.members.iter_mut().zip(&s.members) {
        *slot = StarMember {
            net,
            mask,
            mac: mac_u64(&mac),
            port: u32::from(port),
            pad: 0,
        };
    }
    c.nmembers = s.members.len() as u32;
    check_len(f, "IPv6 star members", s.members6.len(), MAX_MEMBERS)?;
    for (slot, &(net, mask, mac, port)) in c.members6.iter_mut().zip(&s.members6) {
        *slot = StarMember6 {
            net,
            mask,
            mac: mac_u64(&mac),
            port: u32::from(port),
            pad: 0,
        };
    }
    c.nmembers6 = s.members6.len() as u32;
    check_len(f, "star ports", s.ports.len(), MAX_STAR_PORTS)?;
    for (slot, &(iface, port)) in c.star_ports.iter_mut().zip(&s.ports) {
        *slot = [u32::from(iface), port];
    }
    c.nstar_ports = s.ports.len() as u32;
    check_len(f, "IPv6 ingress networks", s.ingress6.len(), MAX_INGRESS6)?;
    for (slot, &(net, mask, addr)) in c.ingress6.iter_mut().zip(&s.ingress6) {
        *slot = [net, mask, addr];
    }
    c.ningress6 = s.ingress6.len() as u32;
    c.ingress6_else = s.ingress6_else;
    Ok(())
}

/// Loads the program of one port for `hook` (`bpf/forward.bpf.c`), sharing the element's
/// `maps` (by the object's names) and, in XDP, the port's socket map `xsk`.
pub(super) fn load(
    c: &ForwardConfig,
    hook: Hook,
    maps: &[(&str, std::os::fd::BorrowedFd<'_>)],
) -> io::Result<OwnedFd> {
    let (prog, xsk) = match hook {
        Hook::Xdp(xsk) => ("tessera_fast", Some(xsk)),
        Hook::Tc => ("tessera_fast_tc", None),
    };
    // SAFETY: `xsk` is the port's socket map, open for the whole call (the caller's).
    let xsk = xsk.map(|x| unsafe { std::os::fd::BorrowedFd::borrow_raw(x) });
    let mut reuse = maps.to_vec();
    if let Some(x) = xsk {
        reuse.push(("xsks", x));
    }
    let obj = crate::bpfobj::load(
        OBJECT,
        "the forwarder's fast path",
        crate::bpfobj::Load {
            name: "forward",
            config: Some(crate::bpfobj::config_bytes(c)),
            reuse: &reuse,
            programs: &[prog],
            // The tcx program has no AF_XDP sockets.
            skip: if xsk.is_some() { &[] } else { &["xsks"] },
            ..Default::default()
        },
    )?;
    obj.prog(prog)
}
