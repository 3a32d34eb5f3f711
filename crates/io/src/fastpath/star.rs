//! A star member's work in its ports' XDP programs (docs/star.md): packets for another
//! member's network leave by the internal port with the star header in front
//! (`star_out`, `star_out6`), star frames to this member lose it and leave by the port it
//! names (`star_in`, `star_in6`), IPv4 (header version 1) and IPv6 (version 2) alike, as
//! `dataplane::forwarder` does in user space.

use super::*;

/// A star member's packet for another member's network (XDP), from label `star_out`: the
/// egress port (-40) is the internal one, the neighbour key (-16) holds the next hop. The
/// member whose network holds the next hop (longest prefix first; none: user space), the
/// internal port's MTU less the header (too big: user space), then the TTL decremented
/// as for any forwarded packet, the star header (version 1: the member's port, the next
/// hop, this port's address) and an Ethernet header to the member's internal MAC in front,
/// out by the internal port. Stack: -88 the member's MAC, -96 its port.
pub(super) fn star_out(a: &mut Asm, f: &ProgramFacts, s: &StarFacts, [ports, tx, stats]: [i32; 3]) {
    a.label("star_out")
        .i(LDX_DW, 1, 10, -16, 0)
        .i(LSH_K, 1, 0, 0, 32)
        .i(RSH_K, 1, 0, 0, 32); // the next hop, host order
    for (i, (net, mask, _, _)) in s.members.iter().enumerate() {
        a.i(MOV_X, 2, 1, 0, 0).i(AND_K, 2, 0, 0, *mask as i32).j(
            JEQ32_K,
            2,
            0,
            *net as i32,
            &format!("star_member_{i}"),
        );
    }
    a.j(JA, 0, 0, 0, "slow");
    let members = s.members.iter().map(|(_, _, mac, port)| (mac, *port));
    member_targets(a, members, "star_member", "star_send");
    let header = STAR_HEADER_LEN as i32;
    a.label("star_send");
    internal_port(a, ports, s.internal, header, 34, "star_send_in_time");
    decrement_ttl(a);
    a.i(MOV_K, 1, 0, 0, f.port as i32)
        .count_frame(
            stats,
            1,
            0,
            IN_BYTES,
            FrameLen::Bounds,
            "star_out_counted_in",
        )
        // The header's and an Ethernet header's room at the front.
        .i(LDX_DW, 1, 10, -72, 0)
        .i(MOV_K, 2, 0, 0, -header)
        .i(CALL, 0, 0, 0, ADJUST_HEAD)
        .j(JNE_K, 0, 0, 0, "aborted");
    reload_frame(a, 14 + header);
    let ingress = u32::from_le_bytes(s.ingress.to_be_bytes());
    star_header_start(a, STAR_VERSION);
    a.i(LDX_DW, 1, 10, -16, 0)
        .i(TO_BE, 1, 0, 0, 32) // the next hop, network order
        .i(STX_W, 7, 1, 18, 0)
        .i(MOV_K, 1, 0, 0, ingress as i32)
        .i(STX_W, 7, 1, 22, 0);
    send_or_hand_off(a, stats, tx, "_star_out");
}

/// A star frame on the internal port (XDP), from label `star_in` (to the port's MAC, 34
/// bytes checked): version 1, a port of this forwarder other than the internal one, an
/// IPv4 packet without options of exactly the rest of the frame that fits that port's MTU,
/// and a resolved neighbour for the next hop the header names. The header comes off, the
/// MACs are the neighbour's and the port's, and the packet leaves by that port with no
/// lookup and no TTL decrement (the member where it entered did both). Anything else goes
/// to user space as it came. Stack: -88 the neighbour's MAC.
pub(super) fn star_in(
    a: &mut Asm,
    f: &ProgramFacts,
    s: &StarFacts,
    [neigh, ports, tx, stats]: [i32; 4],
) {
    let header = STAR_HEADER_LEN as i32;
    let ip = 14 + header as i16;
    a.label("star_in")
        .i(MOV_X, 1, 7, 0, 0)
        .i(ADD_K, 1, 0, 0, i32::from(ip) + 20)
        .j(JGT_X, 1, 8, 0, "slow")
        .i(LDX_B, 1, 7, 14, 0);
    if f.ipv6 {
        a.j(JEQ_K, 1, 0, i32::from(STAR_VERSION6), "star_in6");
    }
    a.j(JNE_K, 1, 0, i32::from(STAR_VERSION), "slow")
        .i(LDX_B, 1, 7, 15, 0); // the port, as the forwarder numbers its interfaces
    header_port(a, s, "star_port", "star_packet");
    a.label("star_packet")
        .i(LDX_B, 1, 7, ip, 0)
        .j(JNE_K, 1, 0, 0x45, "slow") // version 4, no options
        .i(LDX_H, 1, 7, ip + 2, 0)
        .i(TO_BE, 1, 0, 0, 16) // total length
        .i(MOV_X, 2, 8, 0, 0)
        .i(SUB_X, 2, 7, 0, 0)
        .i(SUB_K, 2, 0, 0, i32::from(ip))
        .j(JNE_X, 2, 1, 0, "slow") // padding or truncated: user space's
        .i(STX_DW, 10, 1, -24, 0)
        // The neighbour key: the port, then the next hop (host order).
        .i(LDX_W, 1, 7, 18, 0)
        .i(TO_BE, 1, 0, 0, 32)
        .i(LDX_DW, 2, 10, -40, 0)
        .i(LSH_K, 2, 0, 0, 32)
        .i(OR_X, 2, 1, 0, 0)
        .i(STX_DW, 10, 2, -16, 0)
        // The egress port: MAC and MTU.
        .i(LDX_DW, 1, 10, -40, 0)
        .lookup(0, ports, 1)
        .deadline("star_in_in_time")
        .i(LDX_DW, 1, 0, 8, 0)
        .i(STX_DW, 10, 1, -56, 0) // interface index and hand-off flag
        .i(LDX_DW, 1, 0, 0, 0)
        .i(STX_DW, 10, 1, -48, 0)
        .i(RSH_K, 1, 0, 0, 48)
        .i(LDX_DW, 2, 10, -24, 0)
        .j(JGT_X, 2, 1, 0, "slow"); // fragments or an ICMP error: user space's
    handoff_room(a, i32::from(ip) + 20, "_star_in");
    a.i(MOV_X, 2, 10, 0, 0)
        .i(ADD_K, 2, 0, 0, -16)
        .map(1, neigh)
        .i(CALL, 0, 0, 0, MAP_LOOKUP)
        .j(JEQ_K, 0, 0, 0, "slow") // not resolved: user space asks
        .i(LDX_DW, 1, 0, 0, 0)
        .i(STX_DW, 10, 1, -88, 0)
        .i(MOV_K, 1, 0, 0, f.port as i32)
        .count_frame(
            stats,
            1,
            0,
            IN_BYTES,
            FrameLen::Bounds,
            "star_in_counted_in",
        );
    // The star header off: the Ethernet header is written just before the packet, and
    // the frame starts there.
    ethernet_at(a, header as i16, 0x0008); // 0x0800, written little-endian
    a.i(LDX_DW, 1, 10, -72, 0)
        .i(MOV_K, 2, 0, 0, header)
        .i(CALL, 0, 0, 0, ADJUST_HEAD)
        .j(JNE_K, 0, 0, 0, "aborted");
    reload_frame(a, 14);
    send_or_hand_off(a, stats, tx, "_star_in");
}

/// A star member's IPv6 packet for another member's network (XDP), from label
/// `star_out6`: the egress port (-40) is the internal one, the neighbour key (-128) holds
/// the next hop (at -124, network order), the packet's length is at -24. The member whose
/// network holds the next hop (longest prefix first; none: user space), the internal
/// port's MTU less the header (too big: user space, which answers packet too big), then
/// the hop limit decremented, the star header (version 2: the member's port, the next
/// hop, the address of this port's interface that user space would answer from) and an
/// Ethernet header to the member's internal MAC in front, out by the internal port.
/// Stack: -88 the member's MAC, -96 its port, -176 the ingress address (16 bytes).
pub(super) fn star_out6(
    a: &mut Asm,
    f: &ProgramFacts,
    s: &StarFacts,
    [ports, tx, stats]: [i32; 3],
) {
    a.label("star_out6");
    for (i, (net, mask, _, _)) in s.members6.iter().enumerate() {
        let other = format!("star6_not_member_{i}");
        masked_match(a, 10, -124, net, mask, &other);
        a.j(JA, 0, 0, 0, &format!("star6_member_{i}")).label(&other);
    }
    a.j(JA, 0, 0, 0, "slow");
    let members = s.members6.iter().map(|(_, _, mac, port)| (mac, *port));
    member_targets(a, members, "star6_member", "star_send6");
    let header = STAR_HEADER6_LEN as i32;
    a.label("star_send6");
    internal_port(a, ports, s.internal, header, 54, "star_send6_in_time");
    // The ingress address: of this port's interface, the first whose prefix holds the
    // source, else the fallback (the frame's source at 22 is neither link-local nor
    // multicast here: those went to user space).
    for (k, (net, mask, addr)) in s.ingress6.iter().enumerate() {
        let other = format!("star6_not_source_{k}");
        masked_match(a, 7, 22, net, mask, &other);
        store_words(a, -176, addr);
        a.j(JA, 0, 0, 0, "star6_ingress").label(&other);
    }
    store_words(a, -176, &s.ingress6_else);
    a.label("star6_ingress")
        .i(LDX_B, 1, 7, 21, 0)
        .i(SUB_K, 1, 0, 0, 1)
        .i(STX_B, 7, 1, 21, 0) // the hop limit
        .i(MOV_K, 1, 0, 0, f.port as i32)
        .count_frame(
            stats,
            1,
            0,
            IN_BYTES,
            FrameLen::Bounds,
            "star_out6_counted_in",
        )
        // The header's room at the front.
        .i(LDX_DW, 1, 10, -72, 0)
        .i(MOV_K, 2, 0, 0, -header)
        .i(CALL, 0, 0, 0, ADJUST_HEAD)
        .j(JNE_K, 0, 0, 0, "aborted");
    reload_frame(a, 14 + header + 40);
    star_header_start(a, STAR_VERSION6);
    for w in 0..4i16 {
        a.i(LDX_W, 1, 10, -124 + 4 * w, 0)
            .i(STX_W, 7, 1, 18 + 4 * w, 0)
            .i(LDX_W, 1, 10, -176 + 4 * w, 0)
            .i(STX_W, 7, 1, 34 + 4 * w, 0);
    }
    send_or_hand_off(a, stats, tx, "_star_out6");
}

/// An IPv6 star frame on the internal port (XDP), from label `star_in6` (to the port's
/// MAC, version 2): a port of this forwarder other than the internal one, an IPv6 packet
/// of exactly the rest of the frame that fits that port's MTU, and a resolved neighbour
/// for the next hop the header names. The header comes off, the MACs are the neighbour's
/// and the port's, and the packet leaves by that port with no lookup and no hop-limit
/// decrement. Anything else goes to user space as it came. Stack: -128 the neighbour key,
/// -88 the neighbour's MAC.
pub(super) fn star_in6(
    a: &mut Asm,
    f: &ProgramFacts,
    s: &StarFacts,
    [neigh6, ports, tx, stats]: [i32; 4],
) {
    let header = STAR_HEADER6_LEN as i16;
    let ip = 14 + header;
    a.label("star_in6")
        .i(MOV_X, 1, 7, 0, 0)
        .i(ADD_K, 1, 0, 0, i32::from(ip) + 40)
        .j(JGT_X, 1, 8, 0, "slow")
        .i(LDX_B, 1, 7, 15, 0); // the port, as the forwarder numbers its interfaces
    header_port(a, s, "star6_port", "star_packet6");
    a.label("star_packet6")
        .i(LDX_B, 1, 7, ip, 0)
        .i(AND_K, 1, 0, 0, 0xf0)
        .j(JNE_K, 1, 0, 0x60, "slow") // not version 6
        .i(LDX_H, 1, 7, ip + 4, 0)
        .i(TO_BE, 1, 0, 0, 16)
        .i(ADD_K, 1, 0, 0, 40) // the packet's length
        .i(MOV_X, 2, 8, 0, 0)
        .i(SUB_X, 2, 7, 0, 0)
        .i(SUB_K, 2, 0, 0, i32::from(ip))
        .j(JNE_X, 2, 1, 0, "slow") // padding or truncated: user space's
        .i(STX_DW, 10, 1, -24, 0)
        // The neighbour key: the port (untagged), then the next hop.
        .i(LDX_DW, 2, 10, -40, 0)
        .i(STX_W, 10, 2, -128, 0);
    for w in 0..4i16 {
        a.i(LDX_W, 1, 7, 18 + 4 * w, 0)
            .i(STX_W, 10, 1, -124 + 4 * w, 0);
    }
    a
        // The egress port: MAC and MTU.
        .i(LDX_DW, 1, 10, -40, 0)
        .lookup(0, ports, 1)
        .deadline("star_in6_in_time")
        .i(LDX_DW, 1, 0, 8, 0)
        .i(STX_DW, 10, 1, -56, 0) // interface index and hand-off flag
        .i(LDX_DW, 1, 0, 0, 0)
        .i(STX_DW, 10, 1, -48, 0)
        .i(RSH_K, 1, 0, 0, 48)
        .i(LDX_DW, 2, 10, -24, 0)
        .j(JGT_X, 2, 1, 0, "slow"); // packet too big: user space's
    handoff_room(a, i32::from(ip) + 40, "_star_in6");
    a.i(MOV_X, 2, 10, 0, 0)
        .i(ADD_K, 2, 0, 0, -128)
        .map(1, neigh6)
        .i(CALL, 0, 0, 0, MAP_LOOKUP)
        .j(JEQ_K, 0, 0, 0, "slow") // not resolved: user space asks
        .i(LDX_DW, 1, 0, 0, 0)
        .i(STX_DW, 10, 1, -88, 0)
        .i(MOV_K, 1, 0, 0, f.port as i32)
        .count_frame(
            stats,
            1,
            0,
            IN_BYTES,
            FrameLen::Bounds,
            "star_in6_counted_in",
        );
    // The star header off: the Ethernet header is written just before the packet, and
    // the frame starts there.
    ethernet_at(a, header, 0xdd86); // 0x86dd, written little-endian
    a.i(LDX_DW, 1, 10, -72, 0)
        .i(MOV_K, 2, 0, 0, i32::from(header))
        .i(CALL, 0, 0, 0, ADJUST_HEAD)
        .j(JNE_K, 0, 0, 0, "aborted");
    reload_frame(a, 14);
    send_or_hand_off(a, stats, tx, "_star_in6");
}

/// Counts the frame out of the port at -40 and sends it there: through the hand-off to
/// tcx where that port takes no XDP frames (its word at -56, [`handoff_send`]), else
/// through the device map. `sfx` makes the labels the caller's own.
fn send_or_hand_off(a: &mut Asm, stats: i32, tx: i32, sfx: &str) {
    a.i(LDX_DW, 1, 10, -40, 0).count_frame(
        stats,
        1,
        16,
        OUT_BYTES,
        FrameLen::Bounds,
        &format!("counted_out{sfx}"),
    );
    handoff_send(a, stats, sfx);
    a.i(LDX_DW, 2, 10, -40, 0)
        .map(1, tx)
        .i(MOV_K, 3, 0, 0, 0)
        .i(CALL, 0, 0, 0, REDIRECT_MAP)
        .i(EXIT, 0, 0, 0, 0);
}

/// Labels `{prefix}_{i}`, one per member (its internal MAC and its port index on the
/// network): the MAC to -88, the port to -96, then on at `send`.
fn member_targets<'m>(
    a: &mut Asm,
    members: impl Iterator<Item = (&'m [u8; 6], u8)>,
    prefix: &str,
    send: &str,
) {
    for (i, (mac, port)) in members.enumerate() {
        a.label(&format!("{prefix}_{i}"))
            .imm64(3, mac_u64(mac))
            .i(STX_DW, 10, 3, -88, 0)
            .i(MOV_K, 3, 0, 0, i32::from(port))
            .i(STX_DW, 10, 3, -96, 0)
            .j(JA, 0, 0, 0, send);
    }
}

/// The internal port's MAC to -48; a packet (its length at -24) over that port's MTU less
/// a star header of `header` bytes goes to user space. Where the internal port takes no
/// XDP frames, room for the hand-off's metadata ([`handoff_room`]; the frame's bounds
/// again, `len` bytes of it checked), its interface index word at -56 either way.
fn internal_port(a: &mut Asm, ports: i32, internal: u32, header: i32, len: i32, in_time: &str) {
    a.i(MOV_K, 1, 0, 0, internal as i32)
        .lookup(0, ports, 1)
        .deadline(in_time)
        .i(LDX_DW, 1, 0, 8, 0)
        .i(STX_DW, 10, 1, -56, 0) // interface index and hand-off flag
        .i(LDX_DW, 1, 0, 0, 0)
        .i(STX_DW, 10, 1, -48, 0) // the internal port's MAC
        .i(RSH_K, 1, 0, 0, 48)
        .i(SUB_K, 1, 0, 0, header) // its MTU, less the header
        .i(LDX_DW, 2, 10, -24, 0)
        .j(JGT_X, 2, 1, 0, "slow");
    handoff_room(a, len, &format!("_{in_time}"));
}

/// An Ethernet header at byte `off` of the frame: to the MAC at -88, from the one at -48,
/// EtherType `ethertype` (as read little-endian).
fn ethernet_at(a: &mut Asm, off: i16, ethertype: i32) {
    a.i(LDX_DW, 1, 10, -88, 0)
        .i(STX_W, 7, 1, off, 0)
        .i(RSH_K, 1, 0, 0, 32)
        .i(STX_H, 7, 1, off + 4, 0)
        .i(LDX_DW, 1, 10, -48, 0)
        .i(STX_W, 7, 1, off + 6, 0)
        .i(RSH_K, 1, 0, 0, 32)
        .i(STX_H, 7, 1, off + 10, 0)
        .i(MOV_K, 1, 0, 0, ethertype)
        .i(STX_H, 7, 1, off + 12, 0);
}

/// At the frame's start: the Ethernet header to the member (-88, from -48, EtherType
/// 0x88b7), then the star header's first four bytes: `version`, the member's port (-96),
/// two reserved.
fn star_header_start(a: &mut Asm, version: u8) {
    ethernet_at(a, 0, 0xb788); // 0x88b7, written little-endian
    a.i(MOV_K, 1, 0, 0, i32::from(version))
        .i(STX_B, 7, 1, 14, 0)
        .i(LDX_DW, 1, 10, -96, 0)
        .i(STX_B, 7, 1, 15, 0)
        .i(MOV_K, 1, 0, 0, 0)
        .i(STX_H, 7, 1, 16, 0);
}

/// On the star header's port (in r1): the fast-path port of that untagged interface to
/// -40, labels `{prefix}_{i}`, then on at `next`; a port the member lacks (or the
/// internal one) goes to user space.
fn header_port(a: &mut Asm, s: &StarFacts, prefix: &str, next: &str) {
    for (i, (iface, _)) in s.ports.iter().enumerate() {
        a.j(JEQ_K, 1, 0, i32::from(*iface), &format!("{prefix}_{i}"));
    }
    a.j(JA, 0, 0, 0, "slow");
    for (i, (_, port)) in s.ports.iter().enumerate() {
        a.label(&format!("{prefix}_{i}"))
            .i(MOV_K, 2, 0, 0, *port as i32)
            .i(STX_DW, 10, 2, -40, 0)
            .j(JA, 0, 0, 0, next);
    }
}

/// Goes to `other` unless the 16 bytes at `base + off` (the frame at r7, or the stack at
/// r10), masked with `mask`, are `net` (both in network order); words the mask leaves
/// out are not read.
fn masked_match(a: &mut Asm, base: u8, off: i16, net: &[u8; 16], mask: &[u8; 16], other: &str) {
    for w in 0..4 {
        let m = u32::from_le_bytes(word(mask, w));
        if m == 0 {
            continue;
        }
        a.i(LDX_W, 1, base, off + 4 * w as i16, 0);
        if m != u32::MAX {
            a.i(AND_K, 1, 0, 0, m as i32);
        }
        a.j(
            JNE32_K,
            1,
            0,
            u32::from_le_bytes(word(net, w)) as i32,
            other,
        );
    }
}

/// Writes the 16 bytes of `v` to the stack at `off`.
fn store_words(a: &mut Asm, off: i16, v: &[u8; 16]) {
    for w in 0..4 {
        a.i(MOV_K, 1, 0, 0, u32::from_le_bytes(word(v, w)) as i32)
            .i(STX_W, 10, 1, off + 4 * w as i16, 0);
    }
}

fn word(v: &[u8; 16], w: usize) -> [u8; 4] {
    [v[4 * w], v[4 * w + 1], v[4 * w + 2], v[4 * w + 3]]
}
