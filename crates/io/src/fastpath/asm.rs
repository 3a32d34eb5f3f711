//! A small BPF assembler with labels, the opcodes and helper numbers the fast-path programs
//! use, and the building blocks they share (map lookups, counting, the deadline check).

use super::*;

/// A small assembler with labels for the program below.
pub(super) struct Asm {
    code: Vec<[u8; 8]>,
    /// (instruction index, label) of jumps to patch.
    fixups: Vec<(usize, String)>,
    labels: HashMap<String, usize>,
}

// Opcodes.
pub(super) const LDX_B: u8 = 0x71;
pub(super) const LDX_H: u8 = 0x69;
pub(super) const LDX_W: u8 = 0x61;
pub(super) const LDX_DW: u8 = 0x79;
pub(super) const STX_B: u8 = 0x73;
pub(super) const STX_H: u8 = 0x6b;
pub(super) const STX_W: u8 = 0x63;
pub(super) const STX_DW: u8 = 0x7b;
pub(super) const MOV_X: u8 = 0xbf;
pub(super) const MOV_K: u8 = 0xb7;
pub(super) const ADD_X: u8 = 0x0f;
pub(super) const ADD_K: u8 = 0x07;
pub(super) const SUB_X: u8 = 0x1f;
pub(super) const SUB_K: u8 = 0x17;
pub(super) const AND_K: u8 = 0x57;
pub(super) const OR_K: u8 = 0x47;
pub(super) const OR_X: u8 = 0x4f;
pub(super) const XOR_K: u8 = 0xa7;
pub(super) const LSH_K: u8 = 0x67;
pub(super) const RSH_K: u8 = 0x77;
pub(super) const RSH_X: u8 = 0x7f;
pub(super) const MUL_K: u8 = 0x27;
pub(super) const TO_BE: u8 = 0xdc;
pub(super) const JA: u8 = 0x05;
pub(super) const JEQ_K: u8 = 0x15;
pub(super) const JNE_K: u8 = 0x55;
pub(super) const JNE_X: u8 = 0x5d;
pub(super) const JSGE_K: u8 = 0x75;
pub(super) const JSLT_K: u8 = 0xc5;
pub(super) const LSH_X: u8 = 0x6f;
pub(super) const AND_X: u8 = 0x5f;
pub(super) const MUL_X: u8 = 0x2f;
pub(super) const JGT_X: u8 = 0x2d;
pub(super) const JGE_K: u8 = 0x35;
pub(super) const JLT_K: u8 = 0xa5;
pub(super) const JSET_K: u8 = 0x45;
pub(super) const JEQ32_K: u8 = 0x16;
pub(super) const JNE32_K: u8 = 0x56;
pub(super) const LD_IMM64: u8 = 0x18;
pub(super) const CALL: u8 = 0x85;
pub(super) const EXIT: u8 = 0x95;
pub(super) const MAP_LOOKUP: i32 = 1;
pub(super) const REDIRECT_MAP: i32 = 51;
pub(super) const REDIRECT: i32 = 23;
pub(super) const ADJUST_HEAD: i32 = 44;
pub(super) const ADJUST_META: i32 = 54;
pub(super) const KTIME_GET_NS: i32 = 5;
pub(super) const SKB_VLAN_PUSH: i32 = 18;
pub(super) const SKB_VLAN_POP: i32 = 19;
pub(super) const SKB_PULL_DATA: i32 = 39;

impl Asm {
    pub(super) fn new() -> Asm {
        Asm {
            code: Vec::new(),
            fixups: Vec::new(),
            labels: HashMap::new(),
        }
    }
    pub(super) fn i(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) -> &mut Self {
        self.code.push(insn(code, dst, src, off, imm));
        self
    }
    /// A conditional (or, with JA, unconditional) jump to `label`.
    pub(super) fn j(&mut self, code: u8, dst: u8, src: u8, imm: i32, label: &str) -> &mut Self {
        self.fixups.push((self.code.len(), label.to_string()));
        self.i(code, dst, src, 0, imm)
    }
    pub(super) fn map(&mut self, dst: u8, fd: i32) -> &mut Self {
        self.i(LD_IMM64, dst, BPF_PSEUDO_MAP_FD, 0, fd)
            .i(0, 0, 0, 0, 0)
    }
    /// `r = v`, a 64-bit constant.
    pub(super) fn imm64(&mut self, r: u8, v: u64) -> &mut Self {
        self.i(LD_IMM64, r, 0, 0, v as u32 as i32)
            .i(0, 0, 0, 0, (v >> 32) as u32 as i32)
    }
    pub(super) fn label(&mut self, l: &str) -> &mut Self {
        self.labels.insert(l.to_string(), self.code.len());
        self
    }
    /// `r0 = lookup(map, key)` with the 32-bit key in register `key` (written to the
    /// stack at -8); the map is register `map` (a table) or, with `map` 0, the map `fd`.
    /// A miss goes to `slow`.
    pub(super) fn lookup(&mut self, map: u8, fd: i32, key: u8) -> &mut Self {
        self.i(STX_W, 10, key, -8, 0)
            .i(MOV_X, 2, 10, 0, 0)
            .i(ADD_K, 2, 0, 0, -8);
        if map == 0 {
            self.map(1, fd);
        } else {
            self.i(MOV_X, 1, map, 0, 0);
        }
        self.i(CALL, 0, 0, 0, MAP_LOOKUP).j(JEQ_K, 0, 0, 0, "slow")
    }
    /// With the `ports` entry in r0: past its deadline (a word of 0: none), to `slow`; else
    /// on at `next` with r0 as it was (r6 scratch: the table is no longer needed here).
    pub(super) fn deadline(&mut self, next: &str) -> &mut Self {
        self.i(LDX_DW, 1, 0, 16, 0)
            .j(JEQ_K, 1, 0, 0, next)
            .i(STX_DW, 10, 1, -152, 0)
            .i(MOV_X, 6, 0, 0, 0)
            .i(CALL, 0, 0, 0, KTIME_GET_NS)
            .i(LDX_DW, 1, 10, -152, 0)
            .j(JGT_X, 0, 1, 0, "slow")
            .i(MOV_X, 0, 6, 0, 0)
            .label(next)
    }
    /// XDP: room for the hand-off's metadata in front of the frame ([`crate::handoff`]:
    /// `bpf_xdp_adjust_meta` on the context `ctx`), refused: to `slow` (the caller makes
    /// room before it touches the frame); then r7 and r8 the frame's bounds again, `len`
    /// bytes of it checked (else `slow`: cannot happen, the frame is as long as before).
    pub(super) fn handoff_room(&mut self, ctx: Ctx, len: i32) -> &mut Self {
        self.ctx_to_r1(ctx)
            .i(MOV_K, 2, 0, 0, -crate::handoff::META_LEN)
            .i(CALL, 0, 0, 0, ADJUST_META)
            .j(JNE_K, 0, 0, 0, "slow")
            .ctx_to_r1(ctx)
            .i(LDX_W, 7, 1, 0, 0)
            .i(LDX_W, 8, 1, 4, 0)
            .i(MOV_X, 1, 7, 0, 0)
            .i(ADD_K, 1, 0, 0, len)
            .j(JGT_X, 1, 8, 0, "slow")
    }
    /// XDP, the room made ([`Asm::handoff_room`]): the hand-off's metadata written (its
    /// mark, then the egress interface index, the low 32 bits of the stack word at
    /// `ifindex`), the frame counted as handed off on the port at -40 (on at label
    /// `counted`), and `XDP_PASS` to this port's tcx hook, which sends it. Where the room
    /// is gone (cannot happen), to `lost`.
    pub(super) fn handoff_pass(
        &mut self,
        ctx: Ctx,
        ifindex: i16,
        stats: i32,
        lost: &str,
        counted: &str,
    ) -> &mut Self {
        self.ctx_to_r1(ctx)
            .i(LDX_W, 2, 1, 8, 0) // data_meta
            .i(LDX_W, 3, 1, 0, 0) // data
            .i(MOV_X, 4, 2, 0, 0)
            .i(ADD_K, 4, 0, 0, crate::handoff::META_LEN)
            .j(JGT_X, 4, 3, 0, lost)
            .i(MOV_K, 4, 0, 0, crate::handoff::MAGIC as i32)
            .i(STX_W, 2, 4, 0, 0)
            .i(LDX_DW, 4, 10, ifindex, 0)
            .i(STX_W, 2, 4, 4, 0)
            .i(LDX_DW, 1, 10, -40, 0)
            .count(stats, 1, HANDED_OFF, counted)
            .i(MOV_K, 0, 0, 0, XDP_PASS)
            .i(EXIT, 0, 0, 0, 0)
    }
    fn ctx_to_r1(&mut self, ctx: Ctx) -> &mut Self {
        match ctx {
            Ctx::Stack(slot) => self.i(LDX_DW, 1, 10, slot, 0),
        }
    }
    /// `r1` = the 16-bit entry of the word at `r0` that the bits of the destination (r9)
    /// from `shift` name (two bits: which of the word's four entries).
    pub(super) fn entry(&mut self, shift: i32) -> &mut Self {
        self.i(LDX_DW, 1, 0, 0, 0).i(MOV_X, 2, 9, 0, 0);
        if shift > 0 {
            self.i(RSH_K, 2, 0, 0, shift);
        }
        self.i(AND_K, 2, 0, 0, 3)
            .i(LSH_K, 2, 0, 0, 4)
            .i(RSH_X, 1, 2, 0, 0)
            .i(AND_K, 1, 0, 0, 0xffff)
    }
    /// Adds one to the counter at byte `off` of the stats entry of the port in register
    /// `port` (written to the stack at -8), then goes on at `next`.
    pub(super) fn count(&mut self, stats: i32, port: u8, off: i16, next: &str) -> &mut Self {
        self.count_in_entry(stats, port, off, next).label(next)
    }
    /// [`Asm::count`] but for its label: the entry stays in r0 (the frame skipped to
    /// `next` if the port has none).
    pub(super) fn count_in_entry(
        &mut self,
        stats: i32,
        port: u8,
        off: i16,
        next: &str,
    ) -> &mut Self {
        self.i(STX_W, 10, port, -8, 0)
            .i(MOV_X, 2, 10, 0, 0)
            .i(ADD_K, 2, 0, 0, -8)
            .map(1, stats)
            .i(CALL, 0, 0, 0, MAP_LOOKUP)
            .j(JEQ_K, 0, 0, 0, next)
            .i(LDX_DW, 1, 0, off, 0)
            .i(ADD_K, 1, 0, 0, 1)
            .i(STX_DW, 0, 1, off, 0)
    }
    /// As [`Asm::count`], and adds the frame's length (`len`) to the counter at byte
    /// `bytes` of the same entry.
    pub(super) fn count_frame(
        &mut self,
        stats: i32,
        port: u8,
        off: i16,
        bytes: i16,
        len: FrameLen,
        next: &str,
    ) -> &mut Self {
        self.count_in_entry(stats, port, off, next);
        match len {
            // The frame's bounds, r8 - r7 (a difference of packet pointers, a number).
            FrameLen::Bounds => self.i(MOV_X, 1, 8, 0, 0).i(SUB_X, 1, 7, 0, 0),
            // The socket buffer's length, from its context at `slot` on the stack.
            FrameLen::Skb(slot) => self.i(LDX_DW, 1, 10, slot, 0).i(LDX_W, 1, 1, SKB_LEN, 0),
        };
        self.i(LDX_DW, 2, 0, bytes, 0)
            .i(ADD_X, 2, 1, 0, 0)
            .i(STX_DW, 0, 2, bytes, 0)
            .label(next)
    }
    /// Label `slow`: the frame counted as left to user space on port `me` and handed to
    /// the AF_XDP socket of its receive queue (at -32) in the socket map `xsk` (XDP).
    pub(super) fn slow_to_socket(&mut self, stats: i32, xsk: i32, me: i32) -> &mut Self {
        self.label("slow")
            .i(MOV_K, 1, 0, 0, me)
            .count(stats, 1, 8, "counted_slow")
            .i(LDX_DW, 2, 10, -32, 0)
            .map(1, xsk)
            .i(MOV_K, 3, 0, 0, XDP_PASS)
            .i(CALL, 0, 0, 0, REDIRECT_MAP)
            .i(EXIT, 0, 0, 0, 0)
    }

    /// Folds the 32-bit one's-complement sum in `r` to 16 bits (`t`: scratch).
    pub(super) fn fold(&mut self, r: u8, t: u8) -> &mut Self {
        for _ in 0..2 {
            self.i(MOV_X, t, r, 0, 0)
                .i(RSH_K, t, 0, 0, 16)
                .i(AND_K, r, 0, 0, 0xffff)
                .i(ADD_X, r, t, 0, 0);
        }
        self
    }
    pub(super) fn finish(mut self) -> Vec<u8> {
        for (at, l) in std::mem::take(&mut self.fixups) {
            let to = self.labels[&l] as i64;
            let off = (to - at as i64 - 1) as i16;
            self.code[at][2..4].copy_from_slice(&off.to_le_bytes());
        }
        self.code.concat()
    }
}

/// Where a program holds its context: spilled at a stack slot.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ctx {
    Stack(i16),
}

/// Where a program finds the length of the frame it counts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FrameLen {
    /// XDP: between the frame's start (r7) and end (r8).
    Bounds,
    /// tcx: the socket buffer's, its context spilled at this stack slot.
    Skb(i16),
}
