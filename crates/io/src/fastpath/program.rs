//! The forwarder's fast-path program, as BPF instructions: IPv4 and IPv6 lookup, rewrite and
//! redirect in XDP or tcx, 802.1Q tags, the checksum-offload check, and the policing of what
//! goes to user space.

use super::*;

/// The fast-path program for `hook` on the port whose interface index is `me`. Registers:
/// r6 the context, then the table; r7 the frame's start, r8 the end of what the program
/// may read (XDP: the frame; tcx: the socket buffer's linear part); r9 the destination
/// (host order). Stack: -8 a 32-bit key, -16 a 64-bit key, -24 the total length, -32 the
/// receive queue (XDP) or the context (tcx), -40 the egress port, -48 the egress port's MAC
/// and MTU, -56 its interface index (tcx).
///
/// The two hooks differ in what they read from their contexts, in how a frame leaves
/// (XDP: the device map; tcx: `bpf_redirect` to the interface index) and how it goes to
/// user space (XDP: the socket map; tcx: marked and received again on its own port), and
/// in the TCP and UDP checksums: an XDP frame has lost its socket buffer, so one whose
/// checksum was left to offload must go to user space to be completed, where in tcx the
/// socket buffer keeps that state and takes it along.
pub(super) fn program(
    f: &ProgramFacts,
    hook: Hook,
    me: u32,
    [fib, neigh, ports, tx, stats, xsk, fib6, neigh6, hops6, police]: [i32; 10],
) -> Vec<u8> {
    let tc = hook == Hook::Tc;
    let len = if tc {
        FrameLen::Skb(-32)
    } else {
        FrameLen::Bounds
    };
    let mut a = Asm::new();
    let mac = mac_u64(&f.mac);
    // A star member's work, in XDP, where no port has sub-interfaces.
    let star = f
        .star
        .as_ref()
        .filter(|_| !tc && !f.tagged && f.vlans.is_empty());
    a.i(MOV_X, 6, 1, 0, 0);
    if tc {
        // A marked frame is one this program left to user space, back after the socket
        // took it: it ends here.
        a.i(LDX_W, 1, 6, SKB_MARK, 0)
            .j(JEQ32_K, 1, 0, TO_USER_SPACE_MARK as i32, "marked")
            .i(STX_DW, 10, 6, -32, 0)
            // A frame's 802.1Q tag is not in the bytes the program reads: the kernel takes
            // it out into the socket buffer before tcx (as drivers that strip tags do).
            .i(LDX_W, 1, 6, SKB_VLAN_PRESENT, 0);
        if f.vlans.is_empty() {
            // No sub-interfaces here: a tagged frame is user space's.
            a.j(JNE_K, 1, 0, 0, "slow");
        } else {
            // One of the port's VLAN ids (802.1Q): on as for an untagged frame; its tag
            // stays in the socket buffer until the frame leaves (below), or goes with it
            // to user space.
            a.i(MOV_K, 2, 0, 0, 0)
                .i(STX_DW, 10, 2, -64, 0) // untagged (so far)
                .j(JEQ_K, 1, 0, 0, "tc_untagged")
                .i(LDX_W, 1, 6, SKB_VLAN_PROTO, 0)
                .j(JNE_K, 1, 0, 0x0081, "slow") // 0x8100, as the socket buffer holds it
                .i(LDX_W, 9, 6, SKB_VLAN_TCI, 0)
                .i(MOV_X, 2, 9, 0, 0)
                .i(AND_K, 2, 0, 0, 0xfff);
            for &v in &f.vlans {
                a.j(JEQ_K, 2, 0, v as i32, "tc_our_vlan");
            }
            a.j(JA, 0, 0, 0, "slow")
                .label("tc_our_vlan")
                .i(OR_K, 9, 0, 0, 0x10000)
                .i(STX_DW, 10, 9, -64, 0) // tagged: 1 << 16 | the tag
                .label("tc_untagged");
        }
        // The headers in the socket buffer's linear part, where the program reads them: a
        // frame sent from a ring (AF_PACKET's, as a user-space LB sends) may have little
        // more than its Ethernet header there.
        a.i(LDX_W, 7, 6, SKB_DATA, 0)
            .i(LDX_W, 8, 6, SKB_DATA_END, 0)
            .i(MOV_X, 1, 7, 0, 0)
            .i(ADD_K, 1, 0, 0, 54)
            .j(JGT_X, 1, 8, 0, "tc_pull")
            .label("tc_linear");
    } else {
        a.i(LDX_W, 1, 6, 16, 0) // rx_queue_index
            .i(STX_DW, 10, 1, -32, 0)
            // The context, for bpf_xdp_adjust_head and the hand-off's metadata.
            .i(STX_DW, 10, 6, -72, 0);
        if f.tagged || !f.vlans.is_empty() || star.is_some() {
            a.i(MOV_K, 1, 0, 0, 0).i(STX_DW, 10, 1, -64, 0); // untagged (so far)
        }
        a.i(LDX_W, 7, 6, 0, 0) // data
            .i(LDX_W, 8, 6, 4, 0); // data_end
        if !f.vlans.is_empty() {
            // A frame tagged with one of the port's VLAN ids: its tag comes out (the MACs
            // move up four bytes, the frame starts four later), and the rest runs as for
            // an untagged frame; going to user space, it gets its tag back.
            a.i(MOV_X, 1, 7, 0, 0)
                .i(ADD_K, 1, 0, 0, 18)
                .j(JGT_X, 1, 8, 0, "slow")
                .i(LDX_H, 1, 7, 12, 0)
                .j(JNE_K, 1, 0, 0x0081, "untagged") // 0x8100, read little-endian
                .i(LDX_H, 9, 7, 14, 0) // the tag control information, as read
                .i(MOV_X, 2, 9, 0, 0)
                .i(TO_BE, 2, 0, 0, 16)
                .i(AND_K, 2, 0, 0, 0xfff);
            for &v in &f.vlans {
                a.j(JEQ_K, 2, 0, v as i32, "our_vlan");
            }
            a.j(JA, 0, 0, 0, "slow").label("our_vlan");
            // (Cannot fail: the frame has 18 bytes.)
            pop_tag(&mut a, false);
            a.i(OR_K, 9, 0, 0, 0x10000)
                .i(STX_DW, 10, 9, -64, 0) // tagged: 1 << 16 | the tag as read
                .i(LDX_W, 7, 6, 0, 0)
                .i(LDX_W, 8, 6, 4, 0)
                .label("untagged");
        }
    }
    a.i(MOV_X, 1, 7, 0, 0)
        .i(ADD_K, 1, 0, 0, 34)
        .j(JGT_X, 1, 8, 0, "slow") // shorter than Ethernet + IPv4 headers
        .i(LDX_W, 1, 7, 0, 0)
        .j(JNE32_K, 1, 0, mac as u32 as i32, "slow") // not to our MAC
        .i(LDX_H, 1, 7, 4, 0)
        .j(JNE32_K, 1, 0, (mac >> 32) as u16 as i32, "slow")
        .i(LDX_H, 1, 7, 12, 0);
    let six = f.ipv6;
    if six {
        a.j(JEQ_K, 1, 0, 0xdd86, "ipv6"); // 0x86dd, read little-endian
    }
    if star.is_some_and(|s| s.internal == f.port) {
        a.j(JEQ_K, 1, 0, 0xb788, "star_in"); // 0x88b7, read little-endian
    }
    a.j(JNE_K, 1, 0, 0x0008, "slow") // not IPv4 (0x0800, read little-endian)
        .i(LDX_B, 1, 7, 14, 0)
        .j(JNE_K, 1, 0, 0x45, "slow") // version 4, no options
        .i(LDX_H, 1, 7, 20, 0)
        .i(AND_K, 1, 0, 0, 0xff3f) // MF and offset (0x3fff, read little-endian)
        .j(JNE_K, 1, 0, 0, "slow") // a fragment
        .i(LDX_B, 1, 7, 22, 0)
        .j(JLT_K, 1, 0, 2, "police") // TTL would expire
        .i(LDX_H, 9, 7, 16, 0)
        .i(TO_BE, 9, 0, 0, 16); // total length
    if tc {
        a.i(LDX_W, 1, 6, SKB_LEN, 0);
    } else {
        a.i(MOV_X, 1, 8, 0, 0).i(SUB_X, 1, 7, 0, 0);
    }
    a.i(SUB_K, 1, 0, 0, 14)
        .j(JNE_X, 1, 9, 0, "slow") // link padding or truncated: user space trims or drops
        .i(STX_DW, 10, 9, -24, 0)
        .i(MOV_K, 1, 0, 0, 0);
    for off in (14..34).step_by(2) {
        a.i(LDX_H, 2, 7, off, 0).i(ADD_X, 1, 2, 0, 0);
    }
    a.fold(1, 2).j(JNE_K, 1, 0, 0xffff, "police"); // bad header checksum
    for off in [26i16, 30] {
        // 0/8, 127/8, multicast, class E, broadcast
        a.i(LDX_B, 1, 7, off, 0)
            .j(JEQ_K, 1, 0, 0, "police")
            .j(JEQ_K, 1, 0, 127, "police")
            .j(JGE_K, 1, 0, 224, "police");
        a.i(LDX_W, 1, 7, off, 0);
        for s in &f.special {
            let le = u32::from_le_bytes(s.octets());
            a.j(JEQ32_K, 1, 0, le as i32, "police"); // the router's own, a broadcast
        }
    }
    // A TCP or UDP checksum left to offload (the field holds the pseudo-header sum).
    if !tc {
        offload_check(&mut a);
    }
    a.label("lookup")
        .i(LDX_W, 9, 7, 30, 0)
        .i(TO_BE, 9, 0, 0, 32) // destination, host order
        .i(MOV_K, 1, 0, 0, 0)
        .lookup(0, fib, 1)
        .i(MOV_X, 6, 0, 0, 0) // r6 = the table
        .i(MOV_X, 1, 9, 0, 0)
        .i(RSH_K, 1, 0, 0, 10) // first-level word
        .lookup(6, 0, 1)
        .entry(8)
        .j(JSET_K, 1, 0, 0x8000, "group")
        .j(JA, 0, 0, 0, "hop")
        .label("group")
        .i(AND_K, 1, 0, 0, 0x7fff)
        .i(MUL_K, 1, 0, 0, 64)
        .i(ADD_K, 1, 0, 0, TBL8_BASE as i32)
        .i(MOV_X, 2, 9, 0, 0)
        .i(AND_K, 2, 0, 0, 0xff)
        .i(RSH_K, 2, 0, 0, 2)
        .i(ADD_X, 1, 2, 0, 0)
        .lookup(6, 0, 1)
        .entry(0)
        .j(JSET_K, 1, 0, 0x8000, "slow") // cannot happen (groups do not nest)
        .label("hop")
        .j(JEQ_K, 1, 0, NO_ROUTE as i32, "police") // no route: user space answers
        .i(ADD_K, 1, 0, 0, NH_BASE as i32)
        .lookup(6, 0, 1)
        .i(LDX_DW, 1, 0, 0, 0) // port << 32 | gateway, or slow
        .i(MOV_X, 2, 1, 0, 0)
        .i(RSH_K, 2, 0, 0, 63)
        .j(JNE_K, 2, 0, 0, "slow")
        .i(MOV_X, 2, 1, 0, 0)
        .i(RSH_K, 2, 0, 0, 32); // vlan << 16 | port
    if f.tagged {
        a.i(MOV_X, 3, 2, 0, 0)
            .i(AND_K, 3, 0, 0, 0xffff)
            .i(STX_DW, 10, 3, -40, 0) // egress port
            .i(MOV_X, 3, 2, 0, 0)
            .i(RSH_K, 3, 0, 0, 16)
            .i(STX_DW, 10, 3, -80, 0); // egress VLAN id (0: untagged)
    } else {
        a.i(STX_DW, 10, 2, -40, 0); // egress port (no VLAN ids in this table)
    }
    a.i(LSH_K, 1, 0, 0, 32)
        .i(RSH_K, 1, 0, 0, 32) // gateway
        .j(JNE_K, 1, 0, 0, "gw")
        .i(MOV_X, 1, 9, 0, 0) // connected: the destination
        .label("gw")
        .i(LSH_K, 2, 0, 0, 32)
        .i(OR_X, 2, 1, 0, 0)
        .i(STX_DW, 10, 2, -16, 0); // neighbour key
    if let Some(s) = &f.star {
        // Out of the internal port: across the star's switch (user space's in tcx and
        // where ports have sub-interfaces: never to the limit of `police`).
        let to = if star.is_some() { "star_out" } else { "slow" };
        a.i(LDX_DW, 1, 10, -40, 0)
            .j(JEQ_K, 1, 0, s.internal as i32, to);
    }
    a
        // The egress port: MAC and MTU.
        .i(LDX_DW, 1, 10, -40, 0)
        .lookup(0, ports, 1)
        .deadline("in_time")
        .i(LDX_DW, 1, 0, 8, 0)
        .i(STX_DW, 10, 1, -56, 0) // interface index
        .i(LDX_DW, 1, 0, 0, 0)
        .i(STX_DW, 10, 1, -48, 0)
        .i(RSH_K, 1, 0, 0, 48) // MTU
        .i(LDX_DW, 2, 10, -24, 0)
        .j(JGT_X, 2, 1, 0, "slow"); // larger than the egress MTU
    if !tc {
        handoff_room(&mut a, 34, "");
    }
    a
        // The neighbour.
        .i(MOV_X, 2, 10, 0, 0)
        .i(ADD_K, 2, 0, 0, -16)
        .map(1, neigh)
        .i(CALL, 0, 0, 0, MAP_LOOKUP)
        .j(JEQ_K, 0, 0, 0, "police"); // not resolved
                                      // Rewrite: MACs, TTL and checksum.
    rewrite_macs(&mut a);
    decrement_ttl(&mut a);
    a
        // Count: forwarded in here, out there.
        .label("counting")
        .i(MOV_K, 1, 0, 0, f.port as i32)
        .count_frame(stats, 1, 0, IN_BYTES, len, "out")
        .i(LDX_DW, 1, 10, -40, 0)
        .count_frame(stats, 1, 16, OUT_BYTES, len, "counted");
    if tc {
        // The frame leaves with the egress VLAN's tag in its socket buffer, as a driver
        // that inserts tags takes it: the tag it came with off, the egress one on
        // (priority 0, as user space tags).
        if !f.vlans.is_empty() {
            a.i(LDX_DW, 1, 10, -64, 0)
                .j(JEQ_K, 1, 0, 0, "tc_untagged_in")
                .i(LDX_DW, 1, 10, -32, 0)
                .i(CALL, 0, 0, 0, SKB_VLAN_POP)
                .j(JNE_K, 0, 0, 0, "tc_failed")
                .label("tc_untagged_in");
        }
        if f.tagged {
            a.i(LDX_DW, 3, 10, -80, 0)
                .j(JEQ_K, 3, 0, 0, "tc_untagged_out")
                .i(LDX_DW, 1, 10, -32, 0)
                .i(MOV_K, 2, 0, 0, 0x0081) // 0x8100, in network order
                .i(CALL, 0, 0, 0, SKB_VLAN_PUSH)
                .j(JNE_K, 0, 0, 0, "tc_failed")
                .label("tc_untagged_out");
        }
        a.i(LDX_DW, 1, 10, -56, 0)
            .i(MOV_K, 2, 0, 0, 0)
            .i(CALL, 0, 0, 0, REDIRECT);
    } else {
        if f.tagged {
            // Out of a sub-interface: the tag goes in (four bytes more at the front, the
            // MACs move down, then 0x8100 and the VLAN id, priority 0, as user space tags).
            a.i(LDX_DW, 1, 10, -80, 0).j(JEQ_K, 1, 0, 0, "send");
            push_tag(&mut a, -80, true);
        }
        a.label("send");
        handoff_send(&mut a, stats, "");
        a.i(LDX_DW, 2, 10, -40, 0)
            .map(1, tx)
            .i(MOV_K, 3, 0, 0, 0)
            .i(CALL, 0, 0, 0, REDIRECT_MAP);
    }
    a.i(EXIT, 0, 0, 0, 0);
    if let Some(s) = star {
        star_out(&mut a, f, s, [ports, tx, stats]);
        if s.internal == f.port {
            star_in(&mut a, f, s, [neigh, ports, tx, stats]);
        }
        if six {
            star_out6(&mut a, f, s, [ports, tx, stats]);
            if s.internal == f.port {
                star_in6(&mut a, f, s, [neigh6, ports, tx, stats]);
            }
        }
    }
    police_to_user_space(
        &mut a,
        f,
        police,
        stats,
        len,
        if tc { TCX_DROP } else { XDP_DROP as i32 },
    );
    // Everything else: to the port's socket.
    a.label("slow")
        .i(MOV_K, 1, 0, 0, f.port as i32)
        .count(stats, 1, 8, "xsk");
    if tc {
        a.i(LDX_DW, 1, 10, -32, 0)
            .i(MOV_K, 2, 0, 0, TO_USER_SPACE_MARK as i32)
            .i(STX_W, 1, 2, SKB_MARK, 0)
            .i(MOV_K, 1, 0, 0, me as i32)
            .i(MOV_K, 2, 0, 0, BPF_F_INGRESS)
            .i(CALL, 0, 0, 0, REDIRECT)
            .i(EXIT, 0, 0, 0, 0)
            .label("marked")
            .i(MOV_K, 0, 0, 0, TCX_DROP)
            .i(EXIT, 0, 0, 0, 0)
            // 54 bytes (Ethernet and IPv6 headers; the checks go to user space if the
            // frame is shorter and the pull fails) made linear, then the bounds again.
            .label("tc_pull")
            .i(MOV_X, 1, 6, 0, 0)
            .i(MOV_K, 2, 0, 0, 54)
            .i(CALL, 0, 0, 0, SKB_PULL_DATA)
            .i(LDX_W, 7, 6, SKB_DATA, 0)
            .i(LDX_W, 8, 6, SKB_DATA_END, 0)
            .j(JA, 0, 0, 0, "tc_linear");
        if !f.vlans.is_empty() || f.tagged {
            // What cannot happen but for want of memory (a tag refused): dropped.
            a.label("tc_failed")
                .i(MOV_K, 0, 0, 0, TCX_DROP)
                .i(EXIT, 0, 0, 0, 0);
        }
    } else {
        if !f.vlans.is_empty() {
            // A frame whose tag came out gets it back, as it arrived.
            a.i(LDX_DW, 1, 10, -64, 0).j(JEQ_K, 1, 0, 0, "to_socket");
            push_tag(&mut a, -64, false);
            a.label("to_socket");
        }
        a.i(LDX_DW, 2, 10, -32, 0)
            .map(1, xsk)
            .i(MOV_K, 3, 0, 0, XDP_PASS)
            .i(CALL, 0, 0, 0, REDIRECT_MAP)
            .i(EXIT, 0, 0, 0, 0);
        if f.tagged || !f.vlans.is_empty() || star.is_some() {
            // What cannot happen (a move of the frame's start refused).
            a.label("aborted").i(MOV_K, 0, 0, 0, 0).i(EXIT, 0, 0, 0, 0);
        }
    }
    if six {
        ipv6(&mut a, f, tc, [fib6, hops6, neigh6, ports]);
    }
    a.finish()
}

/// XDP, with the egress port's `ports` entry's interface index word at -56 and the
/// context at -72: where that port takes no frames redirected in XDP ([`PORT_HANDOFF`]),
/// room for the hand-off's metadata in front of the frame (refused: to `slow`, the frame
/// untouched yet), and r7 and r8 the frame's bounds again, `len` bytes of it checked. The
/// metadata is written at `send` ([`handoff_send`]), once the frame is ready to leave:
/// a frame that goes elsewhere before never carries the hand-off's mark.
pub(super) fn handoff_room(a: &mut Asm, len: i32, sfx: &str) {
    let done = format!("handoff_room_done{sfx}");
    a.i(LDX_DW, 1, 10, -56, 0)
        .i(RSH_K, 1, 0, 0, 32)
        .j(JEQ_K, 1, 0, 0, &done)
        .handoff_room(Ctx::Stack(-72), len)
        .label(&done);
}

/// XDP, at `send`: a frame bound out of a port that takes no frames redirected in XDP
/// (its interface index word at -56 carries [`PORT_HANDOFF`]) gets the hand-off's
/// metadata (its mark and the egress interface index), is counted as handed off on the
/// egress port (at -40), and goes to the tcx hook of the port it came in by (`XDP_PASS`),
/// which sends it out ([`crate::handoff`]); any other frame goes on, at `redirect{sfx}`
/// (`sfx` makes the labels the caller's own).
pub(super) fn handoff_send(a: &mut Asm, stats: i32, sfx: &str) {
    let l = |s: &str| format!("{s}{sfx}");
    a.i(LDX_DW, 1, 10, -56, 0)
        .i(RSH_K, 1, 0, 0, 32)
        .j(JEQ_K, 1, 0, 0, &l("redirect"))
        .handoff_pass(
            Ctx::Stack(-72),
            -56,
            stats,
            &l("handoff_lost"),
            &l("handed_off"),
        )
        // What cannot happen (the room made for the metadata gone): dropped.
        .label(&l("handoff_lost"))
        .i(MOV_K, 0, 0, 0, XDP_DROP as i32)
        .i(EXIT, 0, 0, 0, 0)
        .label(&l("redirect"));
}

/// The TTL decremented, with the RFC 1624 update of the header checksum the user-space
/// path uses.
pub(super) fn decrement_ttl(a: &mut Asm) {
    a.i(LDX_B, 1, 7, 22, 0)
        .i(SUB_K, 1, 0, 0, 1)
        .i(STX_B, 7, 1, 22, 0)
        // RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'); with m' = m - 0x100, ~m + m' = 0xfeff.
        .i(LDX_H, 1, 7, 24, 0)
        .i(TO_BE, 1, 0, 0, 16)
        .i(XOR_K, 1, 0, 0, 0xffff)
        .i(ADD_K, 1, 0, 0, 0xfeff)
        .fold(1, 2)
        .i(XOR_K, 1, 0, 0, 0xffff)
        .i(TO_BE, 1, 0, 0, 16)
        .i(STX_H, 7, 1, 24, 0);
}

/// `police`: where the frames that the router itself answers (see
/// [`ProgramFacts::slow_path_limit`]) go on their way to `slow`. Without a limit, that is
/// `slow` itself; with one, the port's token bucket (per CPU, in `police`) takes a frame's
/// worth of credit, in nanoseconds, and lets it on, or drops it with `drop` and counts it.
/// The credit grows with the time since the last frame, up to a tenth of a second's worth
/// of frames.
pub(super) fn police_to_user_space(
    a: &mut Asm,
    f: &ProgramFacts,
    police: i32,
    stats: i32,
    len: FrameLen,
    drop: i32,
) {
    if f.slow_path_limit == 0 {
        a.label("police");
        return;
    }
    let cost = 1_000_000_000u64 / f.slow_path_limit as u64;
    let burst = cost * (f.slow_path_limit as u64 / 10).max(1);
    a.label("police")
        .i(MOV_K, 1, 0, 0, f.port as i32)
        .lookup(0, police, 1)
        .i(MOV_X, 9, 0, 0, 0) // r9 = the bucket
        .i(CALL, 0, 0, 0, KTIME_GET_NS)
        .i(LDX_DW, 1, 9, 8, 0) // the last frame's time
        .i(STX_DW, 9, 0, 8, 0)
        .i(SUB_X, 0, 1, 0, 0)
        .i(LDX_DW, 3, 9, 0, 0)
        .i(ADD_X, 3, 0, 0, 0); // credit + the time since
    a.imm64(4, burst);
    a.j(JGT_X, 4, 3, 0, "under_burst")
        .i(MOV_X, 3, 4, 0, 0)
        .label("under_burst");
    a.imm64(4, cost);
    a.j(JGT_X, 4, 3, 0, "shed")
        .i(SUB_X, 3, 4, 0, 0)
        .i(STX_DW, 9, 3, 0, 0)
        .j(JA, 0, 0, 0, "slow")
        .label("shed")
        .i(STX_DW, 9, 3, 0, 0)
        .i(MOV_K, 1, 0, 0, f.port as i32)
        .count_frame(stats, 1, SHED, SHED_BYTES, len, "shed_counted")
        .i(MOV_K, 0, 0, 0, drop)
        .i(EXIT, 0, 0, 0, 0);
}

/// r0 = the hop (in `hops6`) of the IPv6 destination at r7 + 38, looked up in the table
/// of `fib6` as [`fib::Poptrie6::lookup_raw`] does: `dir`, the wide quarter and up to four
/// levels below (to bit 64: a connected /64 network), then the leaf; an address whose
/// prefix goes on past bit 64, or without a route, goes to `slow`. r6 holds the table, r9 the destination's first 64 bits; the
/// quarter and position at -136 and -144.
pub(super) fn route6(a: &mut Asm, fib6: i32, hops6: i32) {
    a.i(LDX_DW, 9, 7, 38, 0)
        .i(TO_BE, 9, 0, 0, 64)
        .i(MOV_K, 1, 0, 0, 0)
        .lookup(0, fib6, 1)
        .i(MOV_X, 6, 0, 0, 0) // r6 = the table
        .i(MOV_X, 1, 9, 0, 0)
        .i(RSH_K, 1, 0, 0, 48)
        .lookup(6, 0, 1)
        .i(LDX_DW, 1, 0, 0, 0) // dir's entry
        .j(JSET_K, 1, 0, fib::v6::DIR_LEAF as i32, "dir_leaf6")
        .i(MOV_X, 2, 9, 0, 0)
        .i(RSH_K, 2, 0, 0, 32)
        .i(AND_K, 2, 0, 0, 0xffff)
        .i(MOV_X, 3, 2, 0, 0)
        .i(RSH_K, 3, 0, 0, 6)
        .i(ADD_X, 1, 3, 0, 0)
        .i(STX_DW, 10, 1, -136, 0) // the wide node's quarter
        .i(AND_K, 2, 0, 0, 63)
        .i(STX_DW, 10, 2, -144, 0); // the position in it
    for step in 0..4 {
        quarter_at(a);
        a.j(JSGE_K, 3, 0, 0, "leaf6"); // a leaf: it stays in this quarter
        popcount(a, 3, 4, 5);
        a.i(LSH_K, 3, 0, 0, 2)
            .i(LDX_W, 4, 0, 16, 0) // base1
            .i(ADD_X, 3, 4, 0, 0)
            .i(SUB_K, 3, 0, 0, 4)
            .i(MOV_X, 2, 9, 0, 0)
            .i(RSH_K, 2, 0, 0, 24 - 8 * step)
            .i(AND_K, 2, 0, 0, 0xff)
            .i(MOV_X, 4, 2, 0, 0)
            .i(RSH_K, 4, 0, 0, 6)
            .i(ADD_X, 3, 4, 0, 0)
            .i(STX_DW, 10, 3, -136, 0)
            .i(AND_K, 2, 0, 0, 63)
            .i(STX_DW, 10, 2, -144, 0);
    }
    a.label("leaf6");
    quarter_at(a);
    a.j(JSLT_K, 3, 0, 0, "slow") // a child still: past /64, user space's
        .i(LDX_DW, 3, 0, 8, 0) // leafvec
        .i(LSH_X, 3, 4, 0, 0)
        .i(LDX_W, 2, 0, 20, 0) // base0
        .i(STX_DW, 10, 2, -136, 0);
    popcount(a, 3, 4, 5);
    a.i(LDX_DW, 2, 10, -136, 0)
        .i(ADD_X, 3, 2, 0, 0)
        .i(SUB_K, 3, 0, 0, 1)
        .i(STX_DW, 10, 3, -136, 0)
        // Where the leaves start: dir's first record, second word.
        .i(MOV_K, 1, 0, 0, 0)
        .lookup(6, 0, 1)
        .i(LDX_DW, 1, 0, 8, 0)
        .i(LDX_DW, 3, 10, -136, 0)
        .i(ADD_X, 1, 3, 0, 0)
        .lookup(6, 0, 1)
        .i(LDX_DW, 1, 0, 0, 0)
        .label("dir_leaf6")
        .i(AND_K, 1, 0, 0, 0xffff)
        .j(JEQ_K, 1, 0, fib::poptrie::NO_ROUTE as i32, "police") // no route: user space answers
        .lookup(0, hops6, 1);
}

/// r0 = the record of the quarter at -136 (in the table at r6), r4 = 63 - the position at
/// -144, r3 = the quarter's `vector` shifted left by r4: the position's bit on top, the
/// bits before it below.
pub(super) fn quarter_at(a: &mut Asm) {
    a.i(LDX_DW, 1, 10, -136, 0)
        .i(ADD_K, 1, 0, 0, 1 << fib::v6::DIR6_BITS)
        .lookup(6, 0, 1)
        .i(LDX_DW, 3, 0, 0, 0)
        .i(LDX_DW, 2, 10, -144, 0)
        .i(MOV_K, 4, 0, 0, 63)
        .i(SUB_X, 4, 2, 0, 0)
        .i(LSH_X, 3, 4, 0, 0);
}

/// `x` = the number of bits set in `x` (`t` and `k`: scratch), without a loop.
pub(super) fn popcount(a: &mut Asm, x: u8, t: u8, k: u8) {
    a.i(MOV_X, t, x, 0, 0).i(RSH_K, t, 0, 0, 1);
    a.imm64(k, 0x5555_5555_5555_5555);
    a.i(AND_X, t, k, 0, 0).i(SUB_X, x, t, 0, 0);
    a.i(MOV_X, t, x, 0, 0).i(RSH_K, t, 0, 0, 2);
    a.imm64(k, 0x3333_3333_3333_3333);
    a.i(AND_X, t, k, 0, 0)
        .i(AND_X, x, k, 0, 0)
        .i(ADD_X, x, t, 0, 0)
        .i(MOV_X, t, x, 0, 0)
        .i(RSH_K, t, 0, 0, 4)
        .i(ADD_X, x, t, 0, 0);
    a.imm64(k, 0x0f0f_0f0f_0f0f_0f0f);
    a.i(AND_X, x, k, 0, 0);
    a.imm64(k, 0x0101_0101_0101_0101);
    a.i(MUL_X, x, k, 0, 0).i(RSH_K, x, 0, 0, 56);
}

/// The egress MACs into the frame at r7: the neighbour's (the u64 at r0) and the egress
/// port's (at -48 on the stack).
pub(super) fn rewrite_macs(a: &mut Asm) {
    a.i(LDX_DW, 1, 0, 0, 0)
        .i(STX_W, 7, 1, 0, 0)
        .i(RSH_K, 1, 0, 0, 32)
        .i(STX_H, 7, 1, 4, 0)
        .i(LDX_DW, 1, 10, -48, 0)
        .i(STX_W, 7, 1, 6, 0)
        .i(RSH_K, 1, 0, 0, 32)
        .i(STX_H, 7, 1, 10, 0);
}

/// The IPv6 fast path (XDP), from label `ipv6` (an untagged frame to the port's MAC, with
/// 34 bytes checked) to `counting` (forwarded) or `slow`: an IPv6 packet of exactly the
/// frame's length, whose next header is TCP, UDP or ICMPv6 (no extension header: no
/// hop-by-hop options, no fragment), with a hop limit above 1, a source and a destination
/// that are neither multicast, link-local, in ::/8 nor the router's own, in XDP a TCP or
/// UDP checksum not left to offload, and a route in `fib6` out of a port whose MTU it
/// fits, to a resolved neighbour. The MACs are rewritten and the hop limit decremented
/// (IPv6 has no header checksum). Stack: -128 the neighbour key, -136 and -144 the
/// table walk's ([`route6`]); the egress port at -40 and VLAN id at -80, the packet's
/// length at -24, as the IPv4 path keeps them.
pub(super) fn ipv6(
    a: &mut Asm,
    f: &ProgramFacts,
    tc: bool,
    [fib6, hops6, neigh6, ports]: [i32; 4],
) {
    a.label("ipv6")
        .i(MOV_X, 1, 7, 0, 0)
        .i(ADD_K, 1, 0, 0, 54)
        .j(JGT_X, 1, 8, 0, "slow") // shorter than Ethernet + IPv6 headers
        .i(LDX_B, 1, 7, 14, 0)
        .i(AND_K, 1, 0, 0, 0xf0)
        .j(JNE_K, 1, 0, 0x60, "slow") // not version 6
        .i(LDX_H, 9, 7, 18, 0)
        .i(TO_BE, 9, 0, 0, 16); // payload length
    if tc {
        a.i(LDX_W, 1, 6, SKB_LEN, 0); // r6: the context still
    } else {
        a.i(MOV_X, 1, 8, 0, 0).i(SUB_X, 1, 7, 0, 0);
    }
    a.i(SUB_K, 1, 0, 0, 54)
        .j(JNE_X, 1, 9, 0, "slow") // link padding or truncated: user space trims or drops
        .i(ADD_K, 9, 0, 0, 40)
        .i(STX_DW, 10, 9, -24, 0) // the packet's length, for the MTU
        .i(LDX_B, 1, 7, 21, 0)
        .j(JLT_K, 1, 0, 2, "police"); // hop limit would expire
    for (which, off) in [("src", 22i16), ("dst", 38)] {
        let ok = format!("{which}6_scope");
        a.i(LDX_B, 1, 7, off, 0)
            .j(JEQ_K, 1, 0, 0, "slow") // ::/8: unspecified, loopback, mapped
            .j(JEQ_K, 1, 0, 0xff, "slow") // multicast
            .j(JNE_K, 1, 0, 0xfe, &ok)
            .i(LDX_B, 1, 7, off + 1, 0)
            .i(AND_K, 1, 0, 0, 0xc0)
            .j(JEQ_K, 1, 0, 0x80, "slow") // fe80::/10, link-local
            .label(&ok);
        for (k, s) in f.special6.iter().enumerate() {
            let other = format!("{which}6_not_{k}");
            for (w, word) in s.octets().chunks_exact(4).enumerate() {
                let le = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
                a.i(LDX_W, 1, 7, off + 4 * w as i16, 0)
                    .j(JNE32_K, 1, 0, le as i32, &other);
            }
            a.j(JA, 0, 0, 0, "police").label(&other); // one of the router's addresses
        }
    }
    // ICMPv6 on to the route; TCP and UDP too (in XDP, unless their checksum is left to
    // offload; in tcx the socket buffer keeps that state and takes it along); an extension
    // header, or another protocol, to user space.
    a.i(LDX_B, 3, 7, 20, 0).j(JEQ_K, 3, 0, 58, "lookup6");
    if tc {
        a.j(JEQ_K, 3, 0, 6, "lookup6")
            .j(JEQ_K, 3, 0, 17, "lookup6")
            .j(JA, 0, 0, 0, "slow");
    } else {
        offload_check_for(a, Family::V6, "lookup6", "slow");
    }
    a.label("lookup6");
    route6(a, fib6, hops6);
    a.i(LDX_W, 1, 0, 20, 0)
        .j(JSET_K, 1, 0, ROUTE6_SLOW as i32, "slow")
        .i(LDX_H, 2, 0, 16, 0)
        .i(STX_DW, 10, 2, -40, 0); // egress port
                                   // Across a star's switch: in XDP, where no port has sub-interfaces, from `egress6`
                                   // on to `star_out6`; elsewhere user space's (never to the limit of `police`).
    let star = f
        .star
        .as_ref()
        .filter(|_| !tc && !f.tagged && f.vlans.is_empty());
    if let (Some(s), None) = (&f.star, star) {
        a.j(JEQ_K, 2, 0, s.internal as i32, "slow");
    }
    a.i(LDX_H, 3, 0, 18, 0);
    if f.tagged {
        a.i(STX_DW, 10, 3, -80, 0); // egress VLAN id (0: untagged)
    } else {
        a.j(JNE_K, 3, 0, 0, "slow"); // (cannot happen: no VLAN ids in this table)
    }
    // The neighbour's key: vlan << 16 | port, then the gateway or the destination.
    a.i(LSH_K, 3, 0, 0, 16)
        .i(OR_X, 3, 2, 0, 0)
        .i(STX_W, 10, 3, -128, 0)
        .j(JSET_K, 1, 0, ROUTE6_CONNECTED as i32, "connected6");
    for w in 0..4i16 {
        a.i(LDX_W, 2, 0, 4 * w, 0).i(STX_W, 10, 2, -124 + 4 * w, 0);
    }
    a.j(JA, 0, 0, 0, "egress6").label("connected6");
    for w in 0..4i16 {
        a.i(LDX_W, 2, 7, 38 + 4 * w, 0)
            .i(STX_W, 10, 2, -124 + 4 * w, 0);
    }
    a.label("egress6");
    if let Some(s) = star {
        a.i(LDX_DW, 1, 10, -40, 0)
            .j(JEQ_K, 1, 0, s.internal as i32, "star_out6");
    }
    a
        // The egress port: MAC and MTU, interface index.
        .i(LDX_DW, 1, 10, -40, 0)
        .lookup(0, ports, 1)
        .deadline("in_time6")
        .i(LDX_DW, 1, 0, 8, 0)
        .i(STX_DW, 10, 1, -56, 0)
        .i(LDX_DW, 1, 0, 0, 0)
        .i(STX_DW, 10, 1, -48, 0)
        .i(RSH_K, 1, 0, 0, 48) // MTU
        .i(LDX_DW, 2, 10, -24, 0)
        .j(JGT_X, 2, 1, 0, "slow"); // larger than the egress MTU: packet too big
    if !tc {
        handoff_room(a, 54, "6");
    }
    a.i(MOV_X, 2, 10, 0, 0)
        .i(ADD_K, 2, 0, 0, -128)
        .map(1, neigh6)
        .i(CALL, 0, 0, 0, MAP_LOOKUP)
        .j(JEQ_K, 0, 0, 0, "police"); // not resolved
    rewrite_macs(a);
    a.i(LDX_B, 1, 7, 21, 0)
        .i(SUB_K, 1, 0, 0, 1)
        .i(STX_B, 7, 1, 21, 0)
        .j(JA, 0, 0, 0, "counting");
}

/// Takes the 802.1Q tag out of the frame at r7 (XDP, at least 18 bytes checked): the MACs
/// move up four bytes and the frame starts there (`bpf_xdp_adjust_head` on the context in
/// r6, or with `ctx_on_stack` at -72); a refusal goes to `aborted`. The caller reloads the
/// frame's bounds.
pub(super) fn pop_tag(a: &mut Asm, ctx_on_stack: bool) {
    for off in [8i16, 4, 0] {
        a.i(LDX_W, 1, 7, off, 0).i(STX_W, 7, 1, off + 4, 0);
    }
    if ctx_on_stack {
        a.i(LDX_DW, 1, 10, -72, 0);
    } else {
        a.i(MOV_X, 1, 6, 0, 0);
    }
    a.i(MOV_K, 2, 0, 0, 4)
        .i(CALL, 0, 0, 0, ADJUST_HEAD)
        .j(JNE_K, 0, 0, 0, "aborted");
}

/// After a move of the frame's start (XDP): r6 the context again (from -72), r7 and r8 the
/// frame's new bounds, at least `len` bytes of it checked (else `aborted`).
pub(super) fn reload_frame(a: &mut Asm, len: i32) {
    a.i(LDX_DW, 6, 10, -72, 0)
        .i(LDX_W, 7, 6, 0, 0)
        .i(LDX_W, 8, 6, 4, 0)
        .i(MOV_X, 1, 7, 0, 0)
        .i(ADD_K, 1, 0, 0, len)
        .j(JGT_X, 1, 8, 0, "aborted");
}

/// Puts an 802.1Q tag in front of the frame (XDP): four bytes more at its start
/// (`bpf_xdp_adjust_head` on the context at -72; r6, r7 and r8 then the context and the
/// frame's new bounds), the MACs moved down to them, 0x8100, and the tag control
/// information from the stack slot `tci` (its low 16 bits; byte-swapped first with `swap`,
/// for a VLAN id held in host order).
pub(super) fn push_tag(a: &mut Asm, tci: i16, swap: bool) {
    a.i(LDX_DW, 1, 10, -72, 0)
        .i(MOV_K, 2, 0, 0, -4)
        .i(CALL, 0, 0, 0, ADJUST_HEAD)
        .j(JNE_K, 0, 0, 0, "aborted");
    reload_frame(a, 18);
    for off in [0i16, 4, 8] {
        a.i(LDX_W, 1, 7, off + 4, 0).i(STX_W, 7, 1, off, 0);
    }
    a.i(MOV_K, 1, 0, 0, 0x0081)
        .i(STX_H, 7, 1, 12, 0)
        .i(LDX_DW, 1, 10, tci, 0);
    if swap {
        a.i(TO_BE, 1, 0, 0, 16);
    }
    a.i(STX_H, 7, 1, 14, 0);
}

/// Goes to `slow` when the frame is TCP or UDP with its checksum left to offload (the field
/// holds just the pseudo-header sum), else on at `lookup`. r9 holds the IP packet's length.
pub(super) fn offload_check(a: &mut Asm) {
    offload_check_for(a, Family::V4, "lookup", "lookup");
}

/// The IP header an offload check reads.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Family {
    V4,
    V6,
}

/// [`offload_check`] for `family` (IPv4 without options, or IPv6 without extension
/// headers): TCP or UDP with a checksum left to offload goes to `slow`, with a complete
/// one on at `next`; another protocol on at `other`.
pub(super) fn offload_check_for(a: &mut Asm, family: Family, next: &str, other: &str) {
    // Where the protocol, the transport header and the addresses are; the header's length.
    let (proto, l4, addrs, header, sfx) = match family {
        Family::V4 => (23i16, 34i16, 26i16..34, 20, ""),
        Family::V6 => (20, 54, 22..54, 40, "6"),
    };
    let l = |name: &str| format!("{name}{sfx}");
    a.i(LDX_B, 3, 7, proto, 0)
        .i(MOV_K, 4, 0, 0, 0)
        .j(JEQ_K, 3, 0, 6, &l("tcp"))
        .j(JEQ_K, 3, 0, 17, &l("udp"))
        .j(JA, 0, 0, 0, other)
        .label(&l("tcp"))
        .i(MOV_X, 1, 7, 0, 0)
        .i(ADD_K, 1, 0, 0, (l4 + 18) as i32)
        .j(JGT_X, 1, 8, 0, "slow")
        .i(LDX_H, 4, 7, l4 + 16, 0)
        .j(JA, 0, 0, 0, &l("pseudo"))
        .label(&l("udp"))
        .i(MOV_X, 1, 7, 0, 0)
        .i(ADD_K, 1, 0, 0, (l4 + 8) as i32)
        .j(JGT_X, 1, 8, 0, "slow")
        .i(LDX_H, 4, 7, l4 + 6, 0)
        .label(&l("pseudo"))
        // In the little-endian reading of the words: addresses, protocol << 8, and the
        // byte-swapped transport length.
        .i(MOV_X, 1, 3, 0, 0)
        .i(LSH_K, 1, 0, 0, 8);
    for off in addrs.step_by(2) {
        a.i(LDX_H, 2, 7, off, 0).i(ADD_X, 1, 2, 0, 0);
    }
    a.i(MOV_X, 2, 9, 0, 0)
        .i(SUB_K, 2, 0, 0, header)
        .i(TO_BE, 2, 0, 0, 16)
        .i(ADD_X, 1, 2, 0, 0)
        .fold(1, 2)
        .j(JNE_X, 1, 4, 0, next)
        .j(JA, 0, 0, 0, "slow");
}
