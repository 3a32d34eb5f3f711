//! Packet capture: copies of the frames an element receives and sends, for `tessera
//! capture`, at a bounded cost to forwarding.
//!
//! The worker copies each frame that passes the capture's port choice and filter (a
//! classic BPF program, compiled from tcpdump's syntax by libpcap, through `tcpdump
//! -ddd`) into a batch, and sends the batch as one datagram to the capturing process's
//! socket once per pass over the ports. The send never blocks: when the reader falls
//! behind, the batch is dropped and counted, and forwarding goes on. A capture ends when
//! its count is reached, when it is stopped, or when its reader has gone.
//!
//! Batch format (all integers big-endian), repeated: receive or send time (u64
//! nanoseconds of CLOCK_REALTIME), port index (u16), direction (u8: 0 received, 1 sent),
//! reserved (u8), captured length (u32), original length (u32), then the captured bytes.

use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;

/// Bytes of a record header in a batch.
pub const RECORD_HEADER: usize = 20;
/// The largest batch sent as one datagram.
pub const MAX_BATCH: usize = 60 * 1024;
/// Frames captured longer than this are cut (the original length is kept).
pub const SNAPLEN: usize = 9234;

/// Direction of a captured frame.
pub const RECEIVED: u8 = 0;
pub const SENT: u8 = 1;

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

impl Insn {
    /// An instruction from its four fields (code, jt, jf, k), if each is in its range.
    pub fn from_fields(f: &[u64]) -> Option<Insn> {
        match *f {
            [code, jt, jf, k] if code <= 0xffff && jt <= 0xff && jf <= 0xff && k <= 0xffff_ffff => {
                Some(Insn {
                    code: code as u16,
                    jt: jt as u8,
                    jf: jf as u8,
                    k: k as u32,
                })
            }
            _ => None,
        }
    }
}

/// Why a program was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadProgram(pub String);

impl std::fmt::Display for BadProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parses `tcpdump -ddd` output: the instruction count, then one "code jt jf k" line each.
pub fn parse_ddd(text: &str) -> Result<Vec<Insn>, BadProgram> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let n: usize = lines
        .next()
        .and_then(|l| l.parse().ok())
        .ok_or_else(|| BadProgram("no instruction count".into()))?;
    let mut prog = Vec::with_capacity(n.min(4096));
    for (i, l) in lines.enumerate() {
        let f: Vec<u64> = l
            .split_whitespace()
            .map(|x| x.parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|_| BadProgram(format!("instruction {i}: {l:?} is not four numbers")))?;
        match Insn::from_fields(&f) {
            Some(ins) => prog.push(ins),
            None => {
                return Err(BadProgram(format!(
                    "instruction {i}: {l:?} is not code jt jf k"
                )))
            }
        }
    }
    if prog.len() != n {
        return Err(BadProgram(format!(
            "{} instructions where the count says {n}",
            prog.len()
        )));
    }
    check(&prog)?;
    Ok(prog)
}

/// The most instructions a program may have (the kernel's limit for classic BPF).
pub const MAX_INSNS: usize = 4096;

/// Checks a program as the kernel does for classic BPF: every jump lands inside it, it
/// ends with a return, scratch memory indices are below 16, and no constant division by
/// zero. A program that passes cannot loop (jumps only go forward) and cannot index out of
/// its scratch memory.
pub fn check(prog: &[Insn]) -> Result<(), BadProgram> {
    if prog.is_empty() || prog.len() > MAX_INSNS {
        return Err(BadProgram(format!(
            "{} instructions: a program has 1 to {MAX_INSNS}",
            prog.len()
        )));
    }
    for (i, ins) in prog.iter().enumerate() {
        let class = ins.code & 0x07;
        let bad = |why: &str| Err(BadProgram(format!("instruction {i} ({ins:?}): {why}")));
        match class {
            0x00 | 0x01 => {
                // LD, LDX: mode MEM reads scratch k.
                if ins.code & 0xe0 == 0x60 && ins.k >= 16 {
                    return bad("scratch index above 15");
                }
            }
            0x02 | 0x03 => {
                if ins.k >= 16 {
                    return bad("scratch index above 15");
                }
            }
            0x04 => {
                let op = ins.code & 0xf0;
                if (op == 0x30 || op == 0x90) && ins.code & 0x08 == 0 && ins.k == 0 {
                    return bad("division by the constant 0");
                }
            }
            0x05 => {
                let op = ins.code & 0xf0;
                let far = |off: usize| i + 1 + off < prog.len();
                let ok = if op == 0x00 {
                    far(ins.k as usize)
                } else {
                    far(ins.jt as usize) && far(ins.jf as usize)
                };
                if !ok {
                    return bad("jumps past the end");
                }
            }
            0x06 | 0x07 => {}
            _ => unreachable!("class is three bits"),
        }
    }
    if prog[prog.len() - 1].code & 0x07 != 0x06 {
        return Err(BadProgram("the last instruction is not a return".into()));
    }
    Ok(())
}

fn load(pkt: &[u8], at: u64, size: u16) -> Option<u32> {
    let at = usize::try_from(at).ok()?;
    match size {
        0x00 => pkt
            .get(at..at.checked_add(4)?)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        0x08 => pkt
            .get(at..at.checked_add(2)?)
            .map(|b| u16::from_be_bytes([b[0], b[1]]) as u32),
        0x10 => pkt.get(at).map(|&b| b as u32),
        _ => None,
    }
}

/// Runs a checked program (see [`check`]) over a frame: the number of bytes to keep, 0 to
/// refuse. A load outside the frame refuses it, as the kernel's interpreter does.
pub fn run(prog: &[Insn], pkt: &[u8]) -> u32 {
    let (mut a, mut x) = (0u32, 0u32);
    let mut mem = [0u32; 16];
    let mut pc = 0usize;
    while let Some(ins) = prog.get(pc) {
        pc += 1;
        let k = ins.k;
        match ins.code & 0x07 {
            0x00 => {
                let size = ins.code & 0x18;
                a = match ins.code & 0xe0 {
                    0x00 => k, // IMM
                    0x20 => match load(pkt, k as u64, size) {
                        // ABS
                        Some(v) => v,
                        None => return 0,
                    },
                    0x40 => match load(pkt, x as u64 + k as u64, size) {
                        // IND
                        Some(v) => v,
                        None => return 0,
                    },
                    0x60 => mem[(k & 15) as usize],
                    0x80 => pkt.len() as u32, // LEN
                    _ => return 0,
                };
            }
            0x01 => {
                x = match ins.code & 0xe0 {
                    0x00 => k,
                    0x60 => mem[(k & 15) as usize],
                    0x80 => pkt.len() as u32,
                    0xa0 => match pkt.get(k as usize) {
                        // MSH: 4 * (low nibble of the byte), an IPv4 header length.
                        Some(&b) => ((b & 0x0f) as u32) * 4,
                        None => return 0,
                    },
                    _ => return 0,
                };
            }
            0x02 => mem[(k & 15) as usize] = a,
            0x03 => mem[(k & 15) as usize] = x,
            0x04 => {
                let v = if ins.code & 0x08 != 0 { x } else { k };
                a = match ins.code & 0xf0 {
                    0x00 => a.wrapping_add(v),
                    0x10 => a.wrapping_sub(v),
                    0x20 => a.wrapping_mul(v),
                    0x30 => match a.checked_div(v) {
                        Some(q) => q,
                        None => return 0,
                    },
                    0x40 => a | v,
                    0x50 => a & v,
                    0x60 => a.checked_shl(v).unwrap_or(0),
                    0x70 => a.checked_shr(v).unwrap_or(0),
                    0x80 => a.wrapping_neg(),
                    0x90 => match a.checked_rem(v) {
                        Some(r) => r,
                        None => return 0,
                    },
                    0xa0 => a ^ v,
                    _ => return 0,
                };
            }
            0x05 => {
                let v = if ins.code & 0x08 != 0 { x } else { k };
                let taken = match ins.code & 0xf0 {
                    0x00 => {
                        pc += k as usize;
                        continue;
                    }
                    0x10 => a == v,
                    0x20 => a > v,
                    0x30 => a >= v,
                    0x40 => a & v != 0,
                    _ => return 0,
                };
                pc += if taken { ins.jt } else { ins.jf } as usize;
            }
            0x06 => {
                return match ins.code & 0x18 {
                    0x10 => a,
                    _ => k,
                }
            }
            _ => {
                // MISC: TAX, TXA.
                if ins.code & 0xf8 == 0 {
                    x = a;
                } else {
                    a = x;
                }
            }
        }
    }
    0
}

/// A capture under way in a worker.
pub struct Capture {
    sock: UnixDatagram,
    dest: PathBuf,
    /// Only this port (None: every port).
    pub port: Option<u16>,
    pub filter: Option<Vec<Insn>>,
    /// Frames still to capture (None: no limit).
    pub remaining: Option<u64>,
    buf: Vec<u8>,
    /// Frames captured, and frames lost because the reader fell behind.
    pub captured: u64,
    pub dropped: u64,
    /// The reader has gone (or the count is reached): end the capture.
    pub done: bool,
}

impl Capture {
    /// A capture that sends its batches to the datagram socket at `dest`.
    pub fn new(
        dest: PathBuf,
        port: Option<u16>,
        filter: Option<Vec<Insn>>,
        count: Option<u64>,
    ) -> std::io::Result<Capture> {
        let sock = UnixDatagram::unbound()?;
        sock.set_nonblocking(true)?;
        Ok(Capture {
            sock,
            dest,
            port,
            filter,
            remaining: count,
            buf: Vec::with_capacity(MAX_BATCH),
            captured: 0,
            dropped: 0,
            done: false,
        })
    }

    /// Offers one frame; copies it into the batch if it is one the capture wants.
    #[inline]
    pub fn offer(&mut self, port: u16, dir: u8, ts_ns: u64, frame: &[u8]) {
        if self.done || self.port.is_some_and(|p| p != port) {
            return;
        }
        let keep = match &self.filter {
            Some(f) => (run(f, frame) as usize).min(frame.len()),
            None => frame.len(),
        }
        .min(SNAPLEN);
        if keep == 0 {
            return;
        }
        if self.buf.len() + RECORD_HEADER + keep > MAX_BATCH {
            self.flush();
        }
        self.buf.extend_from_slice(&ts_ns.to_be_bytes());
        self.buf.extend_from_slice(&port.to_be_bytes());
        self.buf.extend_from_slice(&[dir, 0]);
        self.buf.extend_from_slice(&(keep as u32).to_be_bytes());
        self.buf
            .extend_from_slice(&(frame.len() as u32).to_be_bytes());
        self.buf.extend_from_slice(&frame[..keep]);
        self.captured += 1;
        if let Some(r) = &mut self.remaining {
            *r -= 1;
            if *r == 0 {
                self.flush();
                self.done = true;
            }
        }
    }

    /// The reader's socket is gone (its process ended without stopping the capture).
    pub fn reader_gone(&self) -> bool {
        !self.dest.exists()
    }

    /// Sends the batch, if any. A reader that has gone ends the capture; a full socket
    /// drops the batch (counted).
    pub fn flush(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        match self.sock.send_to(&self.buf, &self.dest) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                self.dropped += count_records(&self.buf);
            }
            Err(_) => self.done = true,
        }
        self.buf.clear();
    }
}

/// Records in a batch.
pub fn count_records(b: &[u8]) -> u64 {
    records(b).count() as u64
}

/// One captured frame as a batch holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    pub ts_ns: u64,
    pub port: u16,
    pub dir: u8,
    pub orig_len: u32,
    pub data: &'a [u8],
}

/// The records of a batch; stops at the first malformed one.
pub fn records(b: &[u8]) -> impl Iterator<Item = Record<'_>> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let h = b.get(at..at + RECORD_HEADER)?;
        let len = u32::from_be_bytes([h[12], h[13], h[14], h[15]]) as usize;
        let data = b.get(at + RECORD_HEADER..at + RECORD_HEADER + len)?;
        at += RECORD_HEADER + len;
        Some(Record {
            ts_ns: u64::from_be_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]),
            port: u16::from_be_bytes([h[8], h[9]]),
            dir: h[10],
            orig_len: u32::from_be_bytes([h[16], h[17], h[18], h[19]]),
            data,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tcpdump -ddd -y EN10MB 'udp port 53'` (libpcap 1.10).
    const UDP53: &str = "20\n40 0 0 12\n21 0 6 34525\n48 0 0 20\n21 0 15 17\n40 0 0 54\n21 12 0 53\n40 0 0 56\n21 10 11 53\n21 0 10 2048\n48 0 0 23\n21 0 8 17\n40 0 0 20\n69 6 0 8191\n177 0 0 14\n72 0 0 14\n21 2 0 53\n72 0 0 16\n21 0 1 53\n6 0 0 262144\n6 0 0 0\n";

    fn udp(dst_port: u16) -> Vec<u8> {
        wire::frame::UdpFrame {
            dst_port,
            payload: b"abc",
            ..Default::default()
        }
        .to_vec()
    }

    #[test]
    fn tcpdump_programs_run_as_the_kernel_would() {
        let p = parse_ddd(UDP53).unwrap();
        assert_eq!(p.len(), 20);
        assert_eq!(run(&p, &udp(53)), 262144);
        assert_eq!(run(&p, &udp(54)), 0);
        // Cut short: a load past the end refuses the frame.
        assert_eq!(run(&p, &udp(53)[..20]), 0);
        assert_eq!(run(&p, &[]), 0);
    }

    #[test]
    fn bad_programs_are_refused() {
        assert!(parse_ddd("").is_err());
        assert!(parse_ddd("2\n6 0 0 1\n").is_err(), "count");
        assert!(parse_ddd("1\n21 5 5 1\n").is_err(), "jump past the end");
        assert!(parse_ddd("1\n40 0 0 12\n").is_err(), "no return");
        assert!(parse_ddd("2\n2 0 0 16\n6 0 0 1\n").is_err(), "scratch");
        assert!(
            parse_ddd("2\n52 0 0 0\n6 0 0 1\n").is_err(),
            "division by 0"
        );
        assert!(parse_ddd("1\n6 0 0 x\n").is_err());
        assert_eq!(parse_ddd("1\n6 0 0 65535\n").unwrap()[0].k, 65535);
    }

    #[test]
    fn batches_reach_the_reader_and_end_at_the_count() {
        let dir = std::env::temp_dir().join(format!("tessera-capture-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let reader = UnixDatagram::bind(&dir).unwrap();
        let prog = parse_ddd(UDP53).unwrap();
        let mut c = Capture::new(dir.clone(), Some(1), Some(prog), Some(2)).unwrap();
        c.offer(0, RECEIVED, 1, &udp(53)); // another port
        c.offer(1, RECEIVED, 2, &udp(54)); // filtered out
        c.offer(1, RECEIVED, 3, &udp(53));
        c.flush();
        c.offer(1, SENT, 4, &udp(53));
        c.offer(1, SENT, 5, &udp(53)); // past the count
        assert!(c.done);
        let mut b = vec![0u8; MAX_BATCH];
        let n = reader.recv(&mut b).unwrap();
        let r: Vec<_> = records(&b[..n]).collect();
        assert_eq!(
            (r.len(), r[0].ts_ns, r[0].port, r[0].dir),
            (1, 3, 1, RECEIVED)
        );
        assert_eq!(r[0].data, &udp(53)[..]);
        let n = reader.recv(&mut b).unwrap();
        let r: Vec<_> = records(&b[..n]).collect();
        assert_eq!((r.len(), r[0].ts_ns, r[0].dir), (1, 4, SENT));
        assert_eq!(c.captured, 2);
        drop(reader);
        let _ = std::fs::remove_file(&dir);
        // The reader has gone: the next batch ends the capture.
        let mut c = Capture::new(dir.clone(), None, None, None).unwrap();
        c.offer(0, RECEIVED, 1, &udp(53));
        c.flush();
        assert!(c.done);
    }
}
