//! An XDP frame generator: the kernel sends test frames from an XDP program run in "live
//! frames" mode (`BPF_PROG_TEST_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES`), with no socket
//! buffer per frame on the sending side.
//!
//! The program (`bpf/gen.bpf.c`, loaded with libbpf: [`crate::bpfobj`]) paces in the kernel: each run reads the
//! clock and, if the next frame is due (and the count and deadline allow), takes the next
//! number from a one-entry array map and writes into the frame the flow (number modulo the
//! flow count), the per-flow sequence number, the UDP source port of the flow and the send
//! time (the kernel's monotonic clock plus the offset to CLOCK_REALTIME taken at load),
//! then redirects the frame out of the interface; a run with nothing due drops its frame,
//! which sends nothing. Due times advance by the interval from the start, so late frames
//! catch up and errors do not accumulate. One system call makes up to 2^32 runs.
//!
//! The frame leaves through the device's `ndo_xdp_xmit`. A veth delivers it only if its
//! peer runs NAPI: the peer has an XDP program, or GRO on (`ethtool -K PEER gro on`);
//! otherwise the kernel drops it. [`XdpGen::tx_packets`] reads the interface's counter so
//! the caller can tell.

use crate::bpfsys::{map_lookup, map_update};
use std::io;
use std::os::fd::OwnedFd;

pub(crate) const BPF_XDP: u32 = 37;
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

/// Where the fields the program writes sit in the frame (see `wire::probe`).
pub struct Offsets {
    /// The UDP source port (flow `i` uses `base_port + i`).
    pub src_port: u16,
    /// The probe's flow id, followed by its 48-bit sequence number.
    pub flow: u16,
    /// The probe's send time.
    pub time: u16,
}

/// Destinations the program picks from, one at random per frame (`bpf_get_prandom_u32`),
/// for traffic to many destinations. IPv4: the program writes the chosen address and the
/// header checksum that goes with it (both computed here, so the program does no checksum
/// arithmetic). IPv6: it writes the upper 64 bits of the destination (the lower ones stay
/// the template's; IPv6 has no header checksum, and the generator's IPv6 frames carry no
/// UDP checksum).
pub struct Dests {
    /// Where the IPv4 destination address, or the IPv6 one, sits in the frame.
    pub addr_at: u16,
    /// Where the IPv4 header checksum sits in the frame; `None` for IPv6.
    pub csum_at: Option<u16>,
    /// Each destination as the frame carries it (network order): IPv4, the address then
    /// the header checksum (six bytes, two of padding); IPv6, the address's upper 64 bits.
    /// A power of two of them, at least one.
    pub entries: Vec<[u8; 8]>,
}

/// How many intervals late a frame may be and still be sent (see [`XdpGen::arm`]).
pub const SLACK_FRAMES: u64 = 192;

/// The map value the program reads and writes.
///
/// | offset | field |
/// |---|---|
/// | 0 | frames numbered so far |
/// | 8 | when the next frame is due, picoseconds of the monotonic clock |
/// | 16 | frames to send at most |
/// | 24 | monotonic nanoseconds after which nothing is sent |
/// | 32 | picoseconds between frames (0: as fast as possible) |
/// | 40 | monotonic nanoseconds of the last frame sent |
/// | 48 | frames skipped because they were more than the slack late |
/// | 56 | slack, picoseconds (see [`XdpGen::arm`]) |
/// | 64 | the frame's first [`HEADER_LEN`] bytes (Ethernet, IPv4 and UDP headers) |
const VALUE_LEN: usize = 64 + 48;
/// Bytes of the frame the program writes again on every run. A frame's page goes back to
/// the kernel's pool once the receiver is done with it, and comes back to the program with
/// whatever the receiver left in it: a router that forwards in place (the Linux kernel
/// does) has rewritten the MAC addresses, the TTL and the checksum by then.
const HEADER_LEN: usize = 42;

pub(crate) fn clock_ns(c: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to write to.
    unsafe { libc::clock_gettime(c, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// The generator's program and maps, as clang made them from `bpf/gen.bpf.c`.
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/gen.bpf.o"));

/// The program's read-only global (`struct gen_config` of `bpf/gen.bpf.c`).
#[repr(C)]
#[derive(Clone, Copy)]
struct GenConfig {
    ifindex: u32,
    flows: u32,
    flow_base: u32,
    base_port: u32,
    at_src_port: u32,
    at_flow: u32,
    at_time: u32,
    need: u32,
    clock_offset: i64,
    dests: u32,
    dest_mask: u32,
    addr_at: u32,
    csum_at: u32,
}

/// Loads the generator program told `cfg`: the program, its state map and its
/// destinations' map (filled from `dests`).
fn load(cfg: &GenConfig, dests: Option<&Dests>) -> io::Result<(OwnedFd, OwnedFd, Option<OwnedFd>)> {
    let n = dests.map_or(1, |d| d.entries.len() as u32);
    let obj = crate::bpfobj::load(
        OBJECT,
        "the generator's program",
        crate::bpfobj::Load {
            name: "gen",
            config: Some(crate::bpfobj::config_bytes(cfg)),
            max_entries: &[("gen_dests", n)],
            ..Default::default()
        },
    )?;
    let dest_map = match dests {
        Some(d) => {
            let m = obj.map("gen_dests")?;
            for (k, value) in d.entries.iter().enumerate() {
                map_update(&m, &(k as u32), value)?;
            }
            Some(m)
        }
        None => None,
    };
    Ok((obj.prog("tessera_gen")?, obj.map("gen_state")?, dest_map))
}

/// A loaded generator program and its frame.
pub struct XdpGen {
    prog: OwnedFd,
    map: OwnedFd,
    /// The destinations' map (the program holds its own reference; kept for clarity).
    _dests: Option<OwnedFd>,
    frame: Vec<u8>,
    ctx: [u32; 6],
    iface: String,
    /// Monotonic nanoseconds of the last [`XdpGen::arm`].
    armed_ns: u64,
}

impl XdpGen {
    /// Loads the program for `frame` (a whole Ethernet frame of flow 0) out of `iface`.
    pub fn new(
        iface: &str,
        frame: &[u8],
        flows: u16,
        flow_base: u16,
        base_port: u16,
        at: Offsets,
        dests: Option<Dests>,
    ) -> io::Result<XdpGen> {
        let mut need = [at.src_port + 2, at.flow + 8, at.time + 8, HEADER_LEN as u16]
            .into_iter()
            .max()
            .unwrap_or(0) as usize;
        if let Some(d) = &dests {
            need = need.max(d.addr_at as usize + 8);
            if let Some(c) = d.csum_at {
                need = need.max(c as usize + 2);
            }
            if !d.entries.len().is_power_of_two() || d.entries.len() > 1 << 24 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "destinations: a power of two of them, at most 2^24",
                ));
            }
        }
        if frame.len() < need || flows == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frame too short for the probe, or no flows",
            ));
        }
        let ifindex = crate::netdev::ifindex(iface)? as u32;
        let offset = clock_ns(libc::CLOCK_REALTIME) - clock_ns(libc::CLOCK_MONOTONIC);
        let n = dests.as_ref().map_or(1, |d| d.entries.len() as u32);
        let cfg = GenConfig {
            ifindex,
            flows: flows.into(),
            flow_base: flow_base.into(),
            base_port: base_port.into(),
            at_src_port: at.src_port.into(),
            at_flow: at.flow.into(),
            at_time: at.time.into(),
            need: need as u32,
            clock_offset: offset,
            dests: dests.is_some().into(),
            dest_mask: n.next_power_of_two() - 1,
            addr_at: dests.as_ref().map_or(0, |d| d.addr_at.into()),
            csum_at: dests.as_ref().and_then(|d| d.csum_at).map_or(0, u32::from),
        };
        let (prog, map, dest_map) = load(&cfg, dests.as_ref())?;
        Ok(XdpGen {
            prog,
            map,
            _dests: dest_map,
            frame: frame.to_vec(),
            ctx: [0, frame.len() as u32, 0, ifindex, 0, 0],
            iface: iface.to_string(),
            armed_ns: 0,
        })
    }

    /// Arms the program: at most `count` frames, one every `interval_ps` picoseconds from
    /// now (0: as fast as possible), none after `duration_ns` from now. Resets the count.
    ///
    /// A frame runs late when the sending core does something else for a while (an
    /// interrupt, another task, the system call's own set-up). Up to [`SLACK_FRAMES`]
    /// intervals late, the due frames go out back to back and the rate catches up; later
    /// than that, the missed frames are skipped and counted ([`XdpGen::finish`]), so that
    /// the receiver never gets a burst longer than that at line speed. A veth takes a
    /// burst of at most 256 frames before it drops.
    pub fn arm(&mut self, count: u64, interval_ps: u64, duration_ns: u64) -> io::Result<()> {
        let now = clock_ns(libc::CLOCK_MONOTONIC) as u64;
        self.armed_ns = now;
        let mut value = [0u8; VALUE_LEN];
        for (k, v) in [
            0,
            now.saturating_mul(1000),
            count,
            now.saturating_add(duration_ns),
            interval_ps,
            now,
            0,
            interval_ps.saturating_mul(SLACK_FRAMES),
        ]
        .into_iter()
        .enumerate()
        {
            value[8 * k..8 * k + 8].copy_from_slice(&v.to_ne_bytes());
        }
        value[64..64 + HEADER_LEN].copy_from_slice(&self.frame[..HEADER_LEN]);
        map_update(&self.map, &0u32, &value)
    }

    /// Runs the program `runs` times (one system call). Each run sends one frame if one is
    /// due (see [`XdpGen::arm`]); the others cost a few tens of nanoseconds each.
    pub fn run(&self, runs: u32) -> io::Result<()> {
        if runs == 0 {
            return Ok(());
        }
        let ctx: Vec<u8> = self.ctx.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let run = crate::bpfsys::TestRun {
            data_in: &self.frame,
            ctx_in: Some(&ctx),
            repeat: runs,
            flags: BPF_F_TEST_XDP_LIVE_FRAMES,
            // The kernel's default batch (64).
            batch_size: 0,
            ..Default::default()
        };
        match crate::bpfsys::test_run(&self.prog, run) {
            Ok(_) => Ok(()),
            // A signal ends a run early; the caller decides whether to go on.
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(()),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("bpf test run (XDP live frames): {e}"),
            )),
        }
    }

    /// Frames the program has numbered (and sent) since [`XdpGen::arm`].
    pub fn numbered(&self) -> io::Result<u64> {
        Ok(self.value()?[0])
    }

    /// The program's map value, as [`VALUE_LEN`]'s table lays it out.
    fn value(&self) -> io::Result<[u64; VALUE_LEN / 8]> {
        let key = 0u32;
        let mut value = [0u64; VALUE_LEN / 8];
        map_lookup(&self.map, &key, &mut value)?;
        Ok(value)
    }

    /// Ends the run (nothing is sent after it; the caller has no [`XdpGen::run`] under
    /// way) and says what it did: (frames numbered, seconds from [`XdpGen::arm`] to the
    /// last frame sent, frames skipped). Skipped are the frames the program found more
    /// than the slack late, and the frames that fell due (by now, and by the deadline)
    /// after its last run: a program only counts a frame when it runs, and past the
    /// deadline it counts none, so frames due in the last gap between runs would be
    /// neither sent nor skipped (a CI run once numbered 59,999 of 60,000 so).
    pub fn finish(&mut self) -> io::Result<(u64, f64, u64)> {
        let v = self.value()?;
        let now_ps = (clock_ns(libc::CLOCK_MONOTONIC) as u64).saturating_mul(1000);
        let span = v[5].saturating_sub(self.armed_ns) as f64 / 1e9;
        self.arm(0, 0, 0)?;
        let (numbered, due_ps, count, deadline_ns, interval_ps) = (v[0], v[1], v[2], v[3], v[4]);
        let until_ps = now_ps.min(deadline_ns.saturating_mul(1000));
        let unrun = if interval_ps > 0 && due_ps <= until_ps {
            ((until_ps - due_ps) / interval_ps + 1).min(count.saturating_sub(numbered))
        } else {
            0
        };
        Ok((numbered, span, v[6] + unrun))
    }

    /// The interface's transmit counter (what the device accepted).
    pub fn tx_packets(&self) -> u64 {
        std::fs::read_to_string(format!(
            "/sys/class/net/{}/statistics/tx_packets",
            self.iface
        ))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
    }
}
