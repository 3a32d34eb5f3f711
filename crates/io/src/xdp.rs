//! An XDP frame generator: the kernel sends test frames from an XDP program run in "live
//! frames" mode (`BPF_PROG_TEST_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES`), with no socket
//! buffer per frame on the sending side.
//!
//! The program (assembled below, 77 instructions, 90 with [`Dests`]) paces in the kernel: each run reads the
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

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub(crate) const BPF_MAP_CREATE: i32 = 0;
const BPF_MAP_LOOKUP_ELEM: i32 = 1;
pub(crate) const BPF_MAP_UPDATE_ELEM: i32 = 2;
pub(crate) const BPF_PROG_LOAD: i32 = 5;
pub(crate) const BPF_LINK_CREATE: i32 = 28;
const BPF_PROG_TEST_RUN: i32 = 10;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
pub(crate) const BPF_PROG_TYPE_XDP: u32 = 6;
pub(crate) const BPF_XDP: u32 = 37;
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
pub(crate) const BPF_PSEUDO_MAP_FD: u8 = 1;

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

/// One eBPF instruction.
pub(crate) fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[0] = code;
    b[1] = (src << 4) | (dst & 0x0f);
    b[2..4].copy_from_slice(&off.to_le_bytes());
    b[4..8].copy_from_slice(&imm.to_le_bytes());
    b
}

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

/// The generator program. Each run: a frame not yet due, past the deadline or over the
/// count is dropped (not sent, not numbered); otherwise it is numbered, stamped and sent.
#[allow(clippy::too_many_arguments)]
fn program(
    map_fd: i32,
    ifindex: i32,
    flows: u16,
    flow_base: u16,
    base_port: u16,
    at: &Offsets,
    need: i32,
    clock_offset: i64,
    dests: Option<(i32, &Dests)>,
) -> Vec<[u8; 8]> {
    const MOV_X: u8 = 0xbf; // dst = src (64-bit)
    const MOV_K: u8 = 0xb7; // dst = imm
    const ADD_K: u8 = 0x07;
    const ADD_X: u8 = 0x0f;
    const SUB_X: u8 = 0x1f;
    const DIV_X: u8 = 0x3f;
    const JLE_X: u8 = 0xbd;
    const MUL_K: u8 = 0x27;
    const MUL_X: u8 = 0x2f;
    const OR_X: u8 = 0x4f;
    const LSH_K: u8 = 0x67;
    const DIV_K: u8 = 0x37;
    const MOD_K: u8 = 0x97;
    const AND_K: u8 = 0x57;
    const LDX_H: u8 = 0x69;
    const STX_W: u8 = 0x63;
    const TO_BE: u8 = 0xdc;
    const LDX_W: u8 = 0x61;
    const LDX_DW: u8 = 0x79;
    const STX_DW: u8 = 0x7b;
    const STX_H: u8 = 0x6b;
    const ST_W: u8 = 0x62;
    const LD_IMM64: u8 = 0x18;
    const JEQ_K: u8 = 0x15;
    const JGT_X: u8 = 0x2d;
    const JGE_X: u8 = 0x3d;
    const CALL: u8 = 0x85;
    const EXIT: u8 = 0x95;
    const MAP_LOOKUP: i32 = 1;
    const KTIME_GET_NS: i32 = 5;
    const REDIRECT: i32 = 23;
    const PRANDOM: i32 = 7;
    // (instruction, jumps to `drop`)
    let j = |code, dst, src| (insn(code, dst, src, 0, 0), true);
    let i = |code, dst, src, off, imm| (insn(code, dst, src, off, imm), false);
    let mut p: Vec<([u8; 8], bool)> = vec![
        i(LDX_W, 7, 1, 0, 0),  // r7 = data
        i(LDX_W, 8, 1, 4, 0),  // r8 = data_end
        i(ST_W, 10, 0, -4, 0), // key = 0
        i(MOV_X, 2, 10, 0, 0),
        i(ADD_K, 2, 0, 0, -4), // r2 = &key
        i(LD_IMM64, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),
        i(0, 0, 0, 0, 0),
        i(CALL, 0, 0, 0, MAP_LOOKUP),
        j(JEQ_K, 0, 0),       // no value: drop
        i(MOV_X, 6, 0, 0, 0), // r6 = &value
        i(CALL, 0, 0, 0, KTIME_GET_NS),
        i(MOV_X, 9, 0, 0, 0), // r9 = now (ns)
        i(LDX_DW, 1, 6, 24, 0),
        j(JGT_X, 9, 1), // past the deadline: drop
        i(MOV_X, 2, 9, 0, 0),
        i(MUL_K, 2, 0, 0, 1000), // r2 = now (ps)
        i(LDX_DW, 1, 6, 8, 0),   // r1 = next due (ps)
        j(JGT_X, 1, 2),          // not due yet: drop
        i(LDX_DW, 3, 6, 32, 0),  // r3 = interval (ps)
        i(MOV_X, 4, 2, 0, 0),
        i(SUB_X, 4, 1, 0, 0),   // r4 = how late (ps)
        i(LDX_DW, 5, 6, 56, 0), // r5 = slack (ps)
        i(JLE_X, 4, 5, 6, 0),   // late by more than the slack: the missed frames are
        i(DIV_X, 4, 3, 0, 0),   // skipped, not sent in a burst (r4 / 0 is 0 in eBPF)
        i(LDX_DW, 5, 6, 48, 0),
        i(ADD_X, 5, 4, 0, 0),
        i(STX_DW, 6, 5, 48, 0), // skipped += late / interval
        i(MUL_X, 4, 3, 0, 0),   // this frame stands for the last one due, and the
        i(ADD_X, 1, 4, 0, 0),   // schedule keeps its phase: sent + skipped is exactly
        i(ADD_X, 1, 3, 0, 0),   // the frames due by the deadline
        i(STX_DW, 6, 1, 8, 0),  // next due += interval
        i(LDX_DW, 1, 6, 0, 0),  // r1 = number of this frame
        i(LDX_DW, 2, 6, 16, 0),
        j(JGE_X, 1, 2), // count reached: drop
        i(MOV_X, 3, 1, 0, 0),
        i(ADD_K, 3, 0, 0, 1),
        i(STX_DW, 6, 3, 0, 0),  // numbered += 1
        i(STX_DW, 6, 9, 40, 0), // last sent = now
        i(MOV_X, 2, 7, 0, 0),
        i(ADD_K, 2, 0, 0, need),
        j(JGT_X, 2, 8), // frame too short: drop
    ];
    for k in 0..HEADER_LEN / 8 {
        let o = (8 * k) as i16;
        p.push(i(LDX_DW, 3, 6, 64 + o, 0));
        p.push(i(STX_DW, 7, 3, o, 0));
    }
    let o = (HEADER_LEN / 8 * 8) as i16;
    p.push(i(LDX_H, 3, 6, 64 + o, 0));
    p.push(i(STX_H, 7, 3, o, 0)); // the headers as they were built
    p.extend([
        i(MOV_X, 2, 1, 0, 0),
        i(MOD_K, 2, 0, 0, flows as i32), // r2 = flow index
        i(MOV_X, 3, 1, 0, 0),
        i(DIV_K, 3, 0, 0, flows as i32), // r3 = sequence in the flow
        i(MOV_X, 4, 2, 0, 0),
        i(ADD_K, 4, 0, 0, flow_base as i32),
        i(LSH_K, 4, 0, 0, 48),
        i(OR_X, 4, 3, 0, 0),
        i(TO_BE, 4, 0, 0, 64),
        i(STX_DW, 7, 4, at.flow as i16, 0), // flow id and sequence
        i(ADD_K, 2, 0, 0, base_port as i32),
        i(TO_BE, 2, 0, 0, 16),
        i(STX_H, 7, 2, at.src_port as i16, 0), // the flow's UDP source port
        i(LD_IMM64, 1, 0, 0, clock_offset as i32),
        i(0, 0, 0, 0, (clock_offset >> 32) as i32),
        i(ADD_X, 1, 9, 0, 0),
        i(TO_BE, 1, 0, 0, 64),
        i(STX_DW, 7, 1, at.time as i16, 0), // send time, CLOCK_REALTIME
    ]);
    if let Some((fd, d)) = dests {
        let mask = (d.entries.len() as u32).next_power_of_two() - 1;
        p.extend([
            i(CALL, 0, 0, 0, PRANDOM),
            i(AND_K, 0, 0, 0, mask as i32),
            i(STX_W, 10, 0, -8, 0), // key = random & mask
            i(MOV_X, 2, 10, 0, 0),
            i(ADD_K, 2, 0, 0, -8),
            i(LD_IMM64, 1, BPF_PSEUDO_MAP_FD, 0, fd),
            i(0, 0, 0, 0, 0),
            i(CALL, 0, 0, 0, MAP_LOOKUP),
            j(JEQ_K, 0, 0), // cannot happen (an array, key in range); the verifier asks
        ]);
        match d.csum_at {
            Some(csum_at) => p.extend([
                i(LDX_W, 1, 0, 0, 0),
                i(STX_W, 7, 1, d.addr_at as i16, 0), // destination address
                i(LDX_H, 1, 0, 4, 0),
                i(STX_H, 7, 1, csum_at as i16, 0), // its header checksum
            ]),
            None => p.extend([
                i(LDX_DW, 1, 0, 0, 0),
                i(STX_DW, 7, 1, d.addr_at as i16, 0), // the IPv6 destination's upper half
            ]),
        }
    }
    p.extend([
        i(MOV_K, 1, 0, 0, ifindex),
        i(MOV_K, 2, 0, 0, 0),
        i(CALL, 0, 0, 0, REDIRECT), // r0 = XDP_REDIRECT
        i(EXIT, 0, 0, 0, 0),
        // drop:
        i(MOV_K, 0, 0, 0, 1), // XDP_DROP
        i(EXIT, 0, 0, 0, 0),
    ]);
    let drop_at = (p.len() - 2) as i16;
    p.iter()
        .enumerate()
        .map(|(k, (b, jumps))| {
            let mut b = *b;
            if *jumps {
                b[2..4].copy_from_slice(&(drop_at - k as i16 - 1).to_le_bytes());
            }
            b
        })
        .collect()
}

pub(crate) fn bpf(cmd: i32, attr: &mut [u64; 16]) -> io::Result<i32> {
    // SAFETY: attr is a zero-padded 128-byte bpf_attr whose pointers (if any) point to
    // buffers the caller keeps alive for the duration of the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.as_mut_ptr() as *mut libc::c_void,
            std::mem::size_of_val(attr),
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as i32)
    }
}

pub(crate) fn u32s(a: u32, b: u32) -> u64 {
    a as u64 | (b as u64) << 32
}

pub(crate) fn clock_ns(c: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to write to.
    unsafe { libc::clock_gettime(c, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// An array map holding `d`'s entries, eight bytes each: the address, then the checksum.
fn dest_map(d: &Dests) -> io::Result<OwnedFd> {
    let mut attr = [0u64; 16];
    attr[0] = u32s(BPF_MAP_TYPE_ARRAY, 4);
    attr[1] = u32s(8, d.entries.len() as u32);
    let fd = bpf(BPF_MAP_CREATE, &mut attr)
        .map_err(|e| io::Error::new(e.kind(), format!("bpf map create (destinations): {e}")))?;
    // SAFETY: the kernel just returned this descriptor to us.
    let map = unsafe { OwnedFd::from_raw_fd(fd) };
    for (k, value) in d.entries.iter().enumerate() {
        let key = k as u32;
        let mut attr = [0u64; 16];
        attr[0] = u32s(fd as u32, 0);
        attr[1] = &key as *const u32 as u64;
        attr[2] = value.as_ptr() as u64;
        bpf(BPF_MAP_UPDATE_ELEM, &mut attr)?;
    }
    Ok(map)
}

/// Creates a BPF map; an error names it (`what`).
pub(crate) fn map_create(
    kind: u32,
    key: u32,
    value: u32,
    entries: u32,
    flags: u32,
    inner: i32,
    what: &str,
) -> io::Result<OwnedFd> {
    let mut attr = [0u64; 16];
    attr[0] = u32s(kind, key);
    attr[1] = u32s(value, entries);
    attr[2] = u32s(flags, inner as u32);
    let fd = bpf(BPF_MAP_CREATE, &mut attr)
        .map_err(|e| io::Error::new(e.kind(), format!("bpf map create ({what}): {e}")))?;
    // SAFETY: the kernel just returned this descriptor to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets `key` to `value` in `map`.
pub(crate) fn map_update<K, V>(map: &OwnedFd, key: &K, value: &V) -> io::Result<()> {
    let mut attr = [0u64; 16];
    attr[0] = u32s(map.as_raw_fd() as u32, 0);
    attr[1] = key as *const K as u64;
    attr[2] = value as *const V as u64;
    bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(|_| ())
}

/// Reads `key`'s value of `map` into `value`.
pub(crate) fn map_lookup<K, V>(map: &OwnedFd, key: &K, value: &mut V) -> io::Result<()> {
    let mut attr = [0u64; 16];
    attr[0] = u32s(map.as_raw_fd() as u32, 0);
    attr[1] = key as *const K as u64;
    attr[2] = value as *mut V as u64;
    bpf(BPF_MAP_LOOKUP_ELEM, &mut attr).map(|_| ())
}

/// The key of `map` after `key` (the first with None) into `next`; false past the last.
pub(crate) fn map_next_key<K>(map: &OwnedFd, key: Option<&K>, next: &mut K) -> bool {
    const BPF_MAP_GET_NEXT_KEY: i32 = 4;
    let mut attr = [0u64; 16];
    attr[0] = u32s(map.as_raw_fd() as u32, 0);
    attr[1] = key.map_or(0, |k| k as *const K as u64);
    attr[2] = next as *mut K as u64;
    bpf(BPF_MAP_GET_NEXT_KEY, &mut attr).is_ok()
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
        let ifindex = crate::netdev::ifindex(iface)?;
        let mut attr = [0u64; 16];
        attr[0] = u32s(BPF_MAP_TYPE_ARRAY, 4);
        attr[1] = u32s(VALUE_LEN as u32, 1);
        let map_fd = bpf(BPF_MAP_CREATE, &mut attr)
            .map_err(|e| io::Error::new(e.kind(), format!("bpf map create: {e}")))?;
        // SAFETY: the kernel just returned this descriptor to us.
        let map = unsafe { OwnedFd::from_raw_fd(map_fd) };
        let dest_map = match &dests {
            Some(d) => Some(dest_map(d)?),
            None => None,
        };
        let offset = clock_ns(libc::CLOCK_REALTIME) - clock_ns(libc::CLOCK_MONOTONIC);
        let code: Vec<u8> = program(
            map_fd,
            ifindex,
            flows,
            flow_base,
            base_port,
            &at,
            need as i32,
            offset,
            dest_map
                .as_ref()
                .zip(dests.as_ref())
                .map(|(m, d)| (m.as_raw_fd(), d)),
        )
        .concat();
        let license = b"GPL\0";
        let mut log = vec![0u8; 1 << 16];
        let mut attr = [0u64; 16];
        attr[0] = u32s(BPF_PROG_TYPE_XDP, (code.len() / 8) as u32);
        attr[1] = code.as_ptr() as u64;
        attr[2] = license.as_ptr() as u64;
        attr[3] = u32s(1, log.len() as u32);
        attr[4] = log.as_mut_ptr() as u64;
        // kern_version, prog_flags = 0; prog_name "tessera_gen"; prog_ifindex = 0;
        // expected_attach_type = BPF_XDP.
        let mut name = [0u8; 16];
        name[..11].copy_from_slice(b"tessera_gen");
        attr[6] = u64::from_le_bytes(name[..8].try_into().unwrap_or_default());
        attr[7] = u64::from_le_bytes(name[8..].try_into().unwrap_or_default());
        attr[8] = u32s(0, BPF_XDP);
        let prog_fd = bpf(BPF_PROG_LOAD, &mut attr).map_err(|e| {
            let text = String::from_utf8_lossy(&log);
            io::Error::new(
                e.kind(),
                format!("bpf prog load: {e}: {}", text.trim_end_matches('\0').trim()),
            )
        })?;
        // SAFETY: as above.
        let prog = unsafe { OwnedFd::from_raw_fd(prog_fd) };
        Ok(XdpGen {
            prog,
            map,
            _dests: dest_map,
            frame: frame.to_vec(),
            ctx: [0, frame.len() as u32, 0, ifindex as u32, 0, 0],
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
        let key = 0u32;
        let mut attr = [0u64; 16];
        attr[0] = u32s(self.map.as_raw_fd() as u32, 0);
        attr[1] = &key as *const u32 as u64;
        attr[2] = value.as_ptr() as u64;
        attr[3] = 0; // BPF_ANY
        bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(|_| ())
    }

    /// Runs the program `runs` times (one system call). Each run sends one frame if one is
    /// due (see [`XdpGen::arm`]); the others cost a few tens of nanoseconds each.
    pub fn run(&self, runs: u32) -> io::Result<()> {
        if runs == 0 {
            return Ok(());
        }
        let mut attr = [0u64; 16];
        attr[0] = u32s(self.prog.as_raw_fd() as u32, 0);
        attr[1] = u32s(self.frame.len() as u32, 0);
        attr[2] = self.frame.as_ptr() as u64;
        attr[3] = 0;
        attr[4] = u32s(runs, 0);
        attr[5] = u32s(std::mem::size_of_val(&self.ctx) as u32, 0);
        attr[6] = self.ctx.as_ptr() as u64;
        attr[7] = 0;
        attr[8] = u32s(BPF_F_TEST_XDP_LIVE_FRAMES, 0);
        attr[9] = 0; // batch_size: the kernel's default (64)
        match bpf(BPF_PROG_TEST_RUN, &mut attr) {
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
        let mut attr = [0u64; 16];
        attr[0] = u32s(self.map.as_raw_fd() as u32, 0);
        attr[1] = &key as *const u32 as u64;
        attr[2] = value.as_mut_ptr() as u64;
        bpf(BPF_MAP_LOOKUP_ELEM, &mut attr)?;
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
