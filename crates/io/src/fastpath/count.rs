//! The cheapest receive a sink can have: an XDP program that counts the generator's frames
//! and drops them, with no socket and no copy (`tessera sink --count`).
//!
//! A frame counted is an Ethernet frame of IPv4 (no options) or IPv6 (no extension
//! header), no VLAN tag, carrying UDP whose payload starts with a test probe's data magic
//! (`wire::probe::DATA`); it is dropped in the hook. A generator's end markers
//! (`wire::probe::END`) are dropped and not counted. Everything else (ARP, neighbour
//! discovery, other UDP, other protocols) passes to the host's stack. Map: `sink_count`
//! (per CPU: frames, bytes).
//!
//! The program is C (`bpf/count.bpf.c`, compiled by clang from the build script, with
//! BTF), loaded and attached with aya.

use aya::maps::PerCpuArray;
use aya::programs::{Xdp, XdpFlags};
use std::io;

/// The program's object, as clang made it from `bpf/count.bpf.c`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/count.bpf.o"));

fn err(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

/// The program loaded into the kernel, with its map; attached nowhere yet.
fn loaded() -> io::Result<aya::Ebpf> {
    let mut ebpf = aya::Ebpf::load(OBJECT).map_err(|e| err("count object", e))?;
    program(&mut ebpf)?
        .load()
        .map_err(|e| err("load the counting program", e))?;
    Ok(ebpf)
}

fn program(ebpf: &mut aya::Ebpf) -> io::Result<&mut Xdp> {
    ebpf.program_mut("count")
        .ok_or_else(|| err("count object", "no program `count`"))?
        .try_into()
        .map_err(|e| err("count object", e))
}

/// Frames and bytes `ebpf`'s map counted so far (all CPUs).
fn counted(ebpf: &aya::Ebpf) -> io::Result<(u64, u64)> {
    let map = ebpf
        .map("sink_count")
        .ok_or_else(|| err("count object", "no map `sink_count`"))?;
    let counts: PerCpuArray<_, [u64; 2]> =
        PerCpuArray::try_from(map).map_err(|e| err("sink_count", e))?;
    let per_cpu = counts.get(&0, 0).map_err(|e| err("sink_count", e))?;
    Ok(per_cpu
        .iter()
        .fold((0, 0), |(f, b), c| (f + c[0], b + c[1])))
}

/// The counting program attached to an interface; detached when dropped.
pub struct CountSink {
    ebpf: aya::Ebpf,
    native: bool,
}

impl CountSink {
    /// Attaches the program to `ifname`'s XDP hook: the driver's (a veth's own), or the
    /// generic one where the driver has none.
    pub fn attach(ifname: &str) -> io::Result<CountSink> {
        let mut ebpf = loaded()?;
        let prog = program(&mut ebpf)?;
        let native = match prog.attach(ifname, XdpFlags::DRV_MODE) {
            Ok(_) => true,
            Err(_) => {
                prog.attach(ifname, XdpFlags::SKB_MODE)
                    .map_err(|e| err(&format!("{ifname}: XDP attach"), e))?;
                false
            }
        };
        Ok(CountSink { ebpf, native })
    }

    /// Frames and bytes counted so far (all CPUs; zeros if the map cannot be read).
    pub fn counts(&self) -> (u64, u64) {
        counted(&self.ebpf).unwrap_or_default()
    }

    /// Whether the program runs in the driver's hook (else the generic one).
    pub fn native(&self) -> bool {
        self.native
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Detached, Verdict};
    use super::*;

    fn frame(ethertype: u16, l3: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(l3);
        f
    }

    #[test]
    fn probes_are_counted_and_dropped_markers_dropped_the_rest_passes() {
        use std::os::fd::AsFd;
        let mut ebpf = loaded().unwrap();
        let d = Detached {
            prog: program(&mut ebpf)
                .unwrap()
                .fd()
                .unwrap()
                .as_fd()
                .try_clone_to_owned()
                .unwrap(),
            at: super::super::At::Xdp,
            _xsk: None,
        };
        // IPv4 (20 bytes of header) and IPv6 headers carrying UDP, then a UDP header and
        // an 18-byte payload starting with `magic`.
        let v4 = |proto: u8, magic: u16| {
            let mut p = vec![0u8; 20];
            p[0] = 0x45;
            p[9] = proto;
            p.extend_from_slice(&[0u8; 8]);
            p.extend_from_slice(&magic.to_be_bytes());
            p.extend_from_slice(&[0u8; 16]);
            frame(0x0800, &p)
        };
        let mut v6 = vec![0u8; 40];
        v6[0] = 0x60;
        v6[6] = 17;
        v6.extend_from_slice(&[0u8; 8]);
        v6.extend_from_slice(&0x7e55u16.to_be_bytes());
        v6.extend_from_slice(&[0u8; 16]);
        let mut options = v4(17, 0x7e55);
        options[14] = 0x46;
        let cases = [
            (v4(17, 0x7e55), Verdict::Drop),
            (frame(0x86dd, &v6), Verdict::Drop),
            // A generator's end marker: dropped, not counted.
            (v4(17, 0x7e5e), Verdict::Drop),
            // Other UDP, TCP, a header with options, ARP: to the host's stack.
            (v4(17, 0x1234), Verdict::ToUserSpace),
            (v4(6, 0x7e55), Verdict::ToUserSpace),
            (options, Verdict::ToUserSpace),
            (frame(0x0806, &[0u8; 28]), Verdict::ToUserSpace),
            // Too short for its headers and the magic: not read past its end.
            (v4(17, 0x7e55)[..43].to_vec(), Verdict::ToUserSpace),
            (frame(0x86dd, &v6[..49]), Verdict::ToUserSpace),
        ];
        for (f, want) in &cases {
            assert_eq!(d.run(f).unwrap().0, *want, "{f:02x?}");
        }
        let (frames, bytes) = counted(&ebpf).unwrap();
        assert_eq!(frames, 2);
        assert_eq!(bytes, (cases[0].0.len() + cases[1].0.len()) as u64);
    }
}
