//! The cheapest receive a sink can have: an XDP program that counts the generator's frames
//! and drops them, with no socket and no copy (`tessera sink --count`).
//!
//! A frame counted is an Ethernet frame of IPv4 (no options) or IPv6 (no extension
//! header), no VLAN tag, carrying UDP whose payload starts with a test probe's data magic
//! (`wire::probe::DATA`); it is dropped in the hook. A generator's end markers
//! (`wire::probe::END`) are dropped and not counted. Everything else (ARP, neighbour
//! discovery, other UDP, other protocols) passes to the host's stack. Map: `sink count`
//! (per CPU: frames, bytes).

use super::{percpu_sum, Asm, FrameLen, BPF_MAP_TYPE_PERCPU_ARRAY, XDP_PASS};
use super::{ADD_K, EXIT, JA, JEQ_K, JGT_X, JNE_K, LDX_B, LDX_H, LDX_W, MOV_K, MOV_X};
use crate::xdp::{bpf, map_create, u32s, BPF_LINK_CREATE, BPF_XDP};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// XDP_DROP.
const XDP_DROP: i32 = 1;
/// The XDP attach flags: the driver's hook, the generic one.
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;

/// A probe's first two bytes, as loaded (network order read little-endian): data, end.
const DATA_AS_LOADED: i32 = 0x557e;
const END_AS_LOADED: i32 = 0x5e7e;

/// The program, counting into the per-CPU array `stats` (one entry: frames, bytes).
pub(crate) fn count_program(stats: i32) -> Vec<u8> {
    let mut a = Asm::new();
    a.i(LDX_W, 7, 1, 0, 0)
        .i(LDX_W, 8, 1, 4, 0)
        // Ethernet, IPv4 and UDP headers and a probe's magic: 44 bytes.
        .i(MOV_X, 2, 7, 0, 0)
        .i(ADD_K, 2, 0, 0, 44)
        .j(JGT_X, 2, 8, 0, "pass")
        // The EtherType, as loaded.
        .i(LDX_H, 3, 7, 12, 0)
        .j(JEQ_K, 3, 0, 0x0008, "v4")
        .j(JEQ_K, 3, 0, 0xdd86, "v6")
        .j(JA, 0, 0, 0, "pass")
        .label("v4")
        // Version 4, header of 20 bytes; UDP.
        .i(LDX_B, 4, 7, 14, 0)
        .j(JNE_K, 4, 0, 0x45, "pass")
        .i(LDX_B, 4, 7, 23, 0)
        .j(JNE_K, 4, 0, 17, "pass")
        .i(LDX_H, 5, 7, 42, 0)
        .j(JA, 0, 0, 0, "probe")
        .label("v6")
        // Ethernet, IPv6 and UDP headers and the magic: 64 bytes; UDP right after IPv6.
        .i(MOV_X, 2, 7, 0, 0)
        .i(ADD_K, 2, 0, 0, 64)
        .j(JGT_X, 2, 8, 0, "pass")
        .i(LDX_B, 4, 7, 20, 0)
        .j(JNE_K, 4, 0, 17, "pass")
        .i(LDX_H, 5, 7, 62, 0)
        .label("probe")
        .j(JEQ_K, 5, 0, END_AS_LOADED, "drop")
        .j(JNE_K, 5, 0, DATA_AS_LOADED, "pass")
        .i(MOV_K, 1, 0, 0, 0)
        .count_frame(stats, 1, 0, 8, FrameLen::Bounds, "drop")
        .i(MOV_K, 0, 0, 0, XDP_DROP)
        .i(EXIT, 0, 0, 0, 0)
        .label("pass")
        .i(MOV_K, 0, 0, 0, XDP_PASS)
        .i(EXIT, 0, 0, 0, 0);
    a.finish()
}

/// The counting program attached to an interface; detached when dropped.
pub struct CountSink {
    stats: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
    native: bool,
}

impl CountSink {
    /// Attaches the program to `ifname`'s XDP hook: the driver's (a veth's own), or the
    /// generic one where the driver has none.
    pub fn attach(ifname: &str) -> io::Result<CountSink> {
        let ifindex = crate::netdev::ifindex(ifname)? as u32;
        let stats = stats()?;
        let prog = crate::xsk::load_xdp(&count_program(stats.as_raw_fd()), "tessera_count")?;
        let link = |flags: u32| {
            let mut attr = [0u64; 16];
            attr[0] = u32s(prog.as_raw_fd() as u32, ifindex);
            attr[1] = u32s(BPF_XDP, flags);
            bpf(BPF_LINK_CREATE, &mut attr)
        };
        let (fd, native) = match link(XDP_FLAGS_DRV_MODE) {
            Ok(fd) => (fd, true),
            Err(_) => (
                link(XDP_FLAGS_SKB_MODE)
                    .map_err(|e| io::Error::new(e.kind(), format!("{ifname}: XDP attach: {e}")))?,
                false,
            ),
        };
        Ok(CountSink {
            stats,
            _prog: prog,
            // SAFETY: a link descriptor the kernel just returned, owned from here on.
            _link: unsafe { OwnedFd::from_raw_fd(fd) },
            native,
        })
    }

    /// Frames and bytes counted so far (all CPUs).
    pub fn counts(&self) -> (u64, u64) {
        let [frames, bytes] = percpu_sum::<2>(&self.stats, 0);
        (frames, bytes)
    }

    /// Whether the program runs in the driver's hook (else the generic one).
    pub fn native(&self) -> bool {
        self.native
    }
}

fn stats() -> io::Result<OwnedFd> {
    map_create(BPF_MAP_TYPE_PERCPU_ARRAY, 4, 16, 1, 0, 0, "sink count")
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
        let stats = stats().unwrap();
        let d = Detached {
            prog: crate::xsk::load_xdp(&count_program(stats.as_raw_fd()), "tessera_count").unwrap(),
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
        let [frames, bytes] = percpu_sum::<2>(&stats, 0);
        assert_eq!(frames, 2);
        assert_eq!(bytes, (cases[0].0.len() + cases[1].0.len()) as u64);
    }
}
