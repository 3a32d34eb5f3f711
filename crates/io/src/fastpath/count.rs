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
//! BTF), loaded with libbpf ([`crate::bpfobj`]).

use std::io;
use std::os::fd::OwnedFd;

/// The program's object, as clang made it from `bpf/count.bpf.c`.
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/count.bpf.o"));

/// The program loaded into the kernel, with its map; attached nowhere yet.
fn loaded() -> io::Result<(OwnedFd, OwnedFd)> {
    let obj = crate::bpfobj::load(
        OBJECT,
        "the counting program",
        crate::bpfobj::Load {
            name: "count",
            ..Default::default()
        },
    )?;
    Ok((obj.prog("count")?, obj.map("sink_count")?))
}

/// Frames and bytes the map `sink_count` counted so far (all CPUs).
fn counted(map: &OwnedFd) -> io::Result<(u64, u64)> {
    let [frames, bytes] = super::percpu_sum::<2>(map, 0);
    Ok((frames, bytes))
}

/// The counting program attached to an interface; detached when dropped.
pub struct CountSink {
    _link: OwnedFd,
    _prog: OwnedFd,
    map: OwnedFd,
    native: bool,
}

impl CountSink {
    /// Attaches the program to `ifname`'s XDP hook: the driver's (a veth's own), or the
    /// generic one where the driver has none.
    pub fn attach(ifname: &str) -> io::Result<CountSink> {
        let (prog, map) = loaded()?;
        let ifindex = crate::netdev::ifindex(ifname)? as u32;
        let (link, native) = crate::xsk::xdp_link(&prog, ifindex, crate::xsk::AttachMode::Auto)
            .map_err(|e| io::Error::new(e.kind(), format!("{ifname}: XDP attach: {e}")))?;
        Ok(CountSink {
            _link: link,
            _prog: prog,
            map,
            native,
        })
    }

    /// Frames and bytes counted so far (all CPUs; zeros if the map cannot be read).
    pub fn counts(&self) -> (u64, u64) {
        counted(&self.map).unwrap_or_default()
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
        let (prog, map) = loaded().unwrap();
        let d = Detached {
            prog,
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
        let (frames, bytes) = counted(&map).unwrap();
        assert_eq!(frames, 2);
        assert_eq!(bytes, (cases[0].0.len() + cases[1].0.len()) as u64);
    }
}
