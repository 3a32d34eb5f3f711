//! The fast path and the user-space forwarder give the same verdict: whenever the
//! fast path forwards a frame, the forwarder forwards it out of the same port, byte for
//! byte; every other frame the fast path leaves untouched to user space. Checked over
//! hand-made cases (each a reason to leave the fast path), the `forward` fuzz corpus
//! and seeded random mutations, for the program of each hook (XDP and tcx). Needs root
//! (BPF), as CI runs it.
use super::*;
use dataplane::buf::{Pkt, TxQueues};
use io::fastpath::{At, Verdict, TO_USER_SPACE_MARK};
use std::net::Ipv6Addr;
use wire::{icmpv6, ipv4};

const MAC0: [u8; 6] = [2, 0, 0, 0, 0, 1];

/// A UDP frame from 10.1.0.10 to `dst`, to port 0's MAC, with a complete checksum.
fn udp(dst: [u8; 4], payload: usize) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend(MAC0);
    f.extend([2, 0, 0, 0, 1, 0, 0x08, 0x00]);
    let total = 20 + 8 + payload;
    let mut ip = vec![
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0x12,
        0x34,
        0x40,
        0,
        64,
        17,
        0,
        0,
        10,
        1,
        0,
        10,
    ];
    ip.extend(dst);
    f.extend(&ip);
    f.extend([
        0x30,
        0x39,
        0x04,
        0xd2,
        ((8 + payload) >> 8) as u8,
        (8 + payload) as u8,
        0,
        0,
    ]);
    f.extend((0..payload).map(|i| i as u8));
    fix(&mut f);
    f
}

/// Recomputes the IPv4 header and UDP checksums (when the frame still parses).
fn fix(f: &mut [u8]) {
    if let Ok(mut p) = ipv4::Packet::new_checked(&mut f[14..]) {
        p.fill_checksum();
        p.fill_transport_checksum();
    }
}

struct Check {
    f: Forwarder,
    now: std::time::Instant,
    progs: Vec<io::fastpath::Detached>,
    fl: ForwarderFast,
    fast: usize,
    /// Bytes of the frames the fast path forwarded, in and out, as sent to it and as
    /// it sent them.
    bytes: (u64, u64),
    at: At,
    /// Every port's device takes no frames redirected in XDP, and the ports' tcx hooks
    /// run the hand-off ([`Check::hand_off`]).
    handoff: bool,
    /// Frames the fast path dropped (its filters), which user space dropped too.
    dropped: usize,
}

impl Check {
    fn new(at: At) -> Check {
        let (mut f, now) = dataplane::fuzzing::forwarder();
        // A more specific route through port 0's neighbour, and one through a
        // next hop that never resolves.
        f.add_route(
            fib::Prefix::new([192, 0, 2, 0].into(), 24),
            [10, 1, 0, 10].into(),
        )
        .unwrap();
        f.add_route(
            fib::Prefix::new([198, 51, 100, 0].into(), 24),
            [10, 1, 0, 99].into(),
        )
        .unwrap();
        Self::with(f, now, at)
    }

    /// A back-end of a multistage router: one port, its untagged interface on
    /// 10.255.0.0/24 (the interconnection) and two sub-interfaces, VLAN 10 on
    /// 10.1.0.0/24 and VLAN 20 on 10.2.0.0/24 (the external networks); the default
    /// route through 10.2.0.2, 192.0.2.0/24 through 10.1.0.10.
    fn backend(at: At) -> Check {
        let now = Instant::now();
        let sub = |name, id, addr: [u8; 4]| Iface {
            vlan: Some(dataplane::forwarder::Vlan { parent: 0, id }),
            ..Iface::new(name, wire::MacAddr(MAC0), addr.into(), 24)
        };
        let ifaces = vec![
            Iface::new("int", wire::MacAddr(MAC0), [10, 255, 0, 11].into(), 24),
            sub("ext-a", 10, [10, 1, 0, 1]),
            sub("ext-b", 20, [10, 2, 0, 1]),
        ];
        let mut f = Forwarder::new(
            ifaces,
            dataplane::forwarder::ForwarderConfig::default(),
            now,
        );
        f.set_backend(0, std::time::Duration::from_millis(100), now);
        let learn = |f: &mut Forwarder, i: u16, a: [u8; 4], m: u8| {
            f.neighbours
                .learn(i, a.into(), wire::MacAddr([2, 0, 0, 0, m, 0]), now, true)
        };
        learn(&mut f, 1, [10, 1, 0, 10], 1);
        learn(&mut f, 2, [10, 2, 0, 2], 2);
        learn(&mut f, 0, [10, 255, 0, 50], 3);
        f.add_route(
            fib::Prefix::new([0, 0, 0, 0].into(), 0),
            [10, 2, 0, 2].into(),
        )
        .unwrap();
        f.add_route(
            fib::Prefix::new([192, 0, 2, 0].into(), 24),
            [10, 1, 0, 10].into(),
        )
        .unwrap();
        Self::with(f, now, at)
    }

    fn with(mut f: Forwarder, now: std::time::Instant, at: At) -> Check {
        let fl = ForwarderFast::on_devices(&f.ifaces, Some("lo")).unwrap();
        let t = f.take_routes().unwrap();
        fl.publish(&t).unwrap();
        fl.sync_routes6_now(&mut f);
        fl.sync_neighbours(&f);
        let progs = f
            .ifaces
            .iter()
            .filter(|i| i.vlan.is_none())
            .enumerate()
            .map(|(k, i)| {
                let facts = ForwarderFast::facts(&f, k as u32, i.mac.0);
                fl.fp.lock().unwrap().detached(&facts, at).unwrap()
            })
            .collect();
        Check {
            f,
            now,
            progs,
            fl,
            fast: 0,
            bytes: (0, 0),
            at,
            handoff: false,
            dropped: 0,
        }
    }

    /// Has every port refuse frames redirected in XDP, with the hand-off to tcx there:
    /// the XDP program then hands every frame it forwards to tcx, with the same bytes.
    fn hand_off(mut self) -> Check {
        let fp = self.fl.fp.lock().unwrap();
        fp.set_handoff(true).unwrap();
        for p in 0..self.fl.names.len() as u32 {
            fp.set_egress(p, false).unwrap();
        }
        drop(fp);
        self.handoff = self.at == At::Xdp;
        self
    }

    /// Both paths on `frame` from `port`; panics where they disagree.
    fn frame(&mut self, port: u16, frame: &[u8]) {
        if self.at == At::Tc && frame.len() <= 14 {
            // BPF_PROG_TEST_RUN makes no socket buffer without a byte after the
            // Ethernet header (the program leaves such frames to user space: shorter
            // than its 34 bytes of headers).
            return;
        }
        let prog = &self.progs[port as usize];
        let (v, out) = prog
            .run(frame)
            .unwrap_or_else(|e| panic!("{e}: {frame:02x?}"));
        let mut p = Pkt::from_bytes(frame);
        // An XDP frame has lost its socket buffer's checksum state; in tcx the socket
        // buffer keeps it (here: complete) and goes out with it.
        p.meta.csum_unknown = self.at == At::Xdp;
        let mut tx = TxQueues::new(self.f.ifaces.len());
        dataplane::element::process_batch(&mut self.f, &mut vec![p], port, self.now, &mut tx);
        let sent = tx.drain_all();
        let lo = io::netdev::ifindex("lo").unwrap() as u32;
        match v {
            Verdict::Forward | Verdict::HandOff(_) => {
                // Handed to tcx where (and only where) the egress takes no XDP frames.
                assert_eq!(
                    v == Verdict::HandOff(lo),
                    self.handoff,
                    "{v:?} with the hand-off {}: {frame:02x?}",
                    self.handoff
                );
                self.fast += 1;
                self.bytes.0 += frame.len() as u64;
                self.bytes.1 += out.len() as u64;
                assert_eq!(
                    sent.len(),
                    1,
                    "fast path forwarded, user space sent {}: {frame:02x?}",
                    sent.len()
                );
                let (eport, ref p) = sent[0];
                // In tcx a frame leaves a sub-interface with its tag in the socket buffer
                // (as a driver inserts it), which a test run does not show: user space's
                // bytes are compared without it. (multistage_lab's
                // `elements_with_the_fast_path` checks the tags on AF_PACKET ports.)
                let mut expect = p.data.to_vec();
                if self.at == At::Tc && expect.len() >= 18 && expect[12..14] == [0x81, 0] {
                    expect.drain(12..16);
                }
                assert_eq!(expect, out, "different bytes out: {frame:02x?}");
                assert_eq!(
                    &out[6..12],
                    &self.f.ifaces[eport as usize].mac.0,
                    "{frame:02x?}"
                );
            }
            Verdict::Drop if self.f.filter_share().load().any() => {
                // Denied, or failed a reverse-path check: user space drops it too, and
                // answers nothing (a rejected frame goes to user space).
                assert!(
                    sent.is_empty(),
                    "the fast path dropped, user space sent {}: {frame:02x?}",
                    sent.len()
                );
                self.dropped += 1;
            }
            Verdict::ToUserSpace => {
                assert_eq!(out, frame, "changed a frame it left to user space");
                if self.at == At::Tc {
                    // Back on its port, marked, for the socket: it ends there.
                    let (v, out) = prog.run_marked(frame, TO_USER_SPACE_MARK).unwrap();
                    assert_eq!(v, Verdict::Drop, "{frame:02x?}");
                    assert_eq!(out, frame);
                }
            }
            other => panic!("verdict {other:?} on {frame:02x?}"),
        }
        for (_, p) in sent {
            self.f.pool.put(p);
        }
        // What user space learned from the frame (an ARP sender, say) reaches the fast
        // path as the worker's next sync would bring it.
        self.fl.sync_neighbours(&self.f);
    }
}

/// A seeded xorshift generator, for mutations.
fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// An IPv6 frame from the host H (2001:db8:1::10 at 02:00:00:00:01:00) or `src` to
/// `dst` through port 0's MAC: an ICMPv6 message, or UDP with `udp_len` bytes and a
/// complete checksum.
fn frame6(src: &str, dst: &str, hops: u8, msg: Option<&icmpv6::Repr>, udp_len: usize) -> Vec<u8> {
    use wire::ethernet::{self, ethertype};
    use wire::{ipv6, udp};
    let (src, dst): (Ipv6Addr, Ipv6Addr) = (src.parse().unwrap(), dst.parse().unwrap());
    let (next, len) = match msg {
        Some(m) => (ipv6::next_header::ICMPV6, m.buffer_len()),
        None => (ipv6::next_header::UDP, 8 + udp_len),
    };
    let r = ipv6::Repr {
        src,
        dst,
        next_header: next,
        hop_limit: hops,
        traffic_class: 0,
        flow_label: 0,
        payload_len: len,
    };
    let mut f = vec![0u8; 14 + r.buffer_len()];
    ethernet::Repr {
        dst: wire::MacAddr(MAC0),
        src: wire::MacAddr([2, 0, 0, 0, 1, 0]),
        vlan: None,
        ethertype: ethertype::IPV6,
    }
    .emit(&mut f)
    .unwrap();
    r.emit(&mut f[14..]).unwrap();
    match msg {
        Some(m) => m.emit(&mut f[54..], src, dst).unwrap(),
        None => {
            udp::Repr {
                src_port: 5000,
                dst_port: 53,
                payload_len: udp_len,
            }
            .emit6(&mut f[54..], src, dst)
            .unwrap();
        }
    }
    f
}

/// The IPv6 fast path and the user-space forwarder agree: hand-made cases, then
/// seeded mutations of forwardable frames. The fuzzing forwarder: port 0 on
/// 2001:db8:1::1/64 with the default route through 2001:db8:1::2; here also
/// 2001:db8:100::/48 through 2001:db8:1::3, 2001:db8:200::/48 through a gateway that
/// never answers, and 2001:db8:300::/48 through both resolved gateways (ECMP).
#[test]
fn the_xdp_fast_path_agrees_on_ipv6() {
    agrees6(At::Xdp, false);
}

#[test]
fn the_xdp_fast_path_hands_ipv6_to_tcx_alike() {
    agrees6(At::Xdp, true);
}

#[test]
fn the_tcx_fast_path_agrees_on_ipv6() {
    agrees6(At::Tc, false);
}

fn agrees6(at: At, handoff: bool) {
    let (mut f, now) = dataplane::fuzzing::forwarder();
    let p6 = |s: &str| fib::Prefix6::parse_strict(s).unwrap();
    let a6 = |s: &str| -> Ipv6Addr { s.parse().unwrap() };
    f.add_route6(p6("2001:db8:100::/48"), &[a6("2001:db8:1::3")])
        .unwrap();
    f.add_route6(p6("2001:db8:200::/48"), &[a6("2001:db8:1::99")])
        .unwrap();
    // Prefixes past /64 are user space's (the fast path's table stops at bit 64), and
    // so is the rest of the /64 they are in; the /64s beside it are not.
    f.add_route6(p6("2001:db8:600::/64"), &[a6("2001:db8:1::3")])
        .unwrap();
    f.add_route6(p6("2001:db8:600::/80"), &[a6("2001:db8:1::2")])
        .unwrap();
    f.add_route6(
        p6("2001:db8:300::/48"),
        &[a6("2001:db8:1::2"), a6("2001:db8:1::3")],
    )
    .unwrap();
    let mut c = Check::with(f, now, at);
    if handoff {
        c = c.hand_off();
    }
    const H: &str = "2001:db8:1::10";
    // Resolve both gateways: a packet that needs each (user space solicits it), then
    // its advertisement (to the router's own address: user space's).
    for (gw, m) in [("2001:db8:1::2", 2u8), ("2001:db8:1::3", 3)] {
        let to = if m == 2 {
            "2001:db8:5::1"
        } else {
            "2001:db8:100::1"
        };
        c.frame(0, &frame6(H, to, 64, None, 20));
        let na = icmpv6::Repr::NeighborAdvert {
            router: true,
            solicited: true,
            override_: true,
            target: a6(gw),
            options: wire::icmpv6::NdOptions {
                target_lladdr: Some(wire::MacAddr([2, 0, 0, 0, m, 0])),
                ..Default::default()
            },
        };
        c.frame(0, &frame6(gw, "2001:db8:1::1", 255, Some(&na), 0));
    }
    let good = frame6(H, "2001:db8:100::7", 64, None, 18);
    let echo = icmpv6::Repr::EchoRequest {
        ident: 1,
        seq: 2,
        data: b"ping6",
    };
    for f in [
        good.clone(),
        frame6(H, "2001:db8:5::1", 64, None, 18), // the default route
        frame6(H, "2001:db8:100::8", 2, None, 1000),
        frame6(H, "2001:db8:100::9", 64, Some(&echo), 0),
        frame6(H, "2001:db8:1::2", 64, None, 18), // connected (a /64), resolved
        frame6(H, "2001:db8:600:1::1", 64, None, 18), // beside a /64 with a /80 in it
    ] {
        let before = c.fast;
        c.frame(0, &f);
        assert_eq!(c.fast, before + 1, "the fast path took none of {f:02x?}");
    }
    let mut cases = vec![
        frame6(H, "2001:db8:100::7", 1, None, 18), // hop limit: time exceeded
        frame6(H, "2001:db8:100::7", 0, None, 18),
        frame6(H, "2001:db8:200::1", 64, None, 18), // unresolved gateway
        frame6(H, "2001:db8:300::1", 64, None, 18), // ECMP
        frame6(H, "2001:db8:1::1", 64, None, 18),   // to the router
        frame6(H, "2001:db8:1::44", 64, None, 18),  // connected, unresolved
        frame6(H, "2001:db8:600::5", 64, None, 18), // past /64
        frame6(H, "2001:db8:600::1:0:0:1", 64, None, 18), // that /64, not the /80
        frame6(H, "fe80::1", 64, None, 18),         // link-local
        frame6(H, "ff02::1", 64, None, 18),         // multicast
        frame6(H, "ff0e::1", 64, None, 18),
        frame6(H, "::1", 64, None, 18),
        frame6("fe80::5", "2001:db8:100::7", 64, None, 18),
        frame6("::", "2001:db8:100::7", 64, None, 18),
        frame6("::1", "2001:db8:100::7", 64, None, 18),
        frame6("ff02::1", "2001:db8:100::7", 64, None, 18),
        frame6("2001:db8:1::1", "2001:db8:100::7", 64, None, 18), // from the router
        frame6(H, "2001:db8:100::7", 64, None, 1500),             // over the MTU
    ];
    let mut edit = |e: &dyn Fn(&mut Vec<u8>)| {
        let mut f = good.clone();
        e(&mut f);
        cases.push(f);
    };
    edit(&|f| f[0] = 0xff); // another MAC
    edit(&|f| f[14] = 0x40); // version 4
    edit(&|f| f.extend([0, 0, 0, 0])); // link padding
    edit(&|f| f.truncate(60)); // truncated
    edit(&|f| f[20] = 0); // hop-by-hop options
    edit(&|f| f[20] = 44); // a fragment header
    edit(&|f| f[20] = 6); // TCP, short: bounds
    edit(&|f| {
        // A partial checksum (left to offload): the pseudo-header sum only.
        let p = wire::ipv6::Packet::new_checked(&f[14..]).unwrap();
        let s = wire::checksum::pseudo_header6(p.src(), p.dst(), 17, 26);
        let v = wire::checksum::fold(s).to_be_bytes();
        f[60] = v[0];
        f[61] = v[1];
    });
    for f in &cases {
        c.frame(0, f);
    }
    // Route changes reach the fast path one by one: a new route is taken; once
    // 2001:db8:100::/48 is gone, its addresses follow the default route (through
    // the other gateway: other bytes out, which the check compares).
    c.f.add_route6(p6("2001:db8:400::/48"), &[a6("2001:db8:1::3")])
        .unwrap();
    assert!(c.f.remove_route6(p6("2001:db8:100::/48")));
    c.fl.sync_routes6_now(&mut c.f);
    for to in ["2001:db8:400::1", "2001:db8:100::7"] {
        let before = c.fast;
        c.frame(0, &frame6(H, to, 64, None, 18));
        assert_eq!(c.fast, before + 1, "{to}");
    }
    let fast = c.fast;
    let mut next = xorshift(0x2545_f491_4f6c_dd1d);
    for i in 0..20_000 {
        let mut f = if i % 2 == 0 {
            good.clone()
        } else {
            frame6(H, "2001:db8:5::3", 9, Some(&echo), 0)
        };
        for _ in 0..1 + next() % 3 {
            let at = (next() % 64) as usize;
            f[at] = next() as u8;
        }
        c.frame(0, &f);
    }
    eprintln!(
        "IPv6 fast path ({at:?}): forwarded {} of {} frames; user space the rest",
        c.fast,
        cases.len() + 20_004
    );
    assert!(
        c.fast - fast > 1000,
        "the fast path forwarded only {} mutated frames",
        c.fast - fast
    );
}

/// Past the deadline that an element handing its fast path over keeps ahead
/// ([`ForwarderFastPath::beat`]), the programs forward nothing: a fast path whose element is
/// gone for good stops on its own; a new beat and it forwards again.
#[test]
fn past_its_deadline_the_fast_path_forwards_nothing() {
    use std::time::Duration;
    for at in [At::Xdp, At::Tc] {
        let mut c = Check::new(at);
        let f = udp([192, 0, 2, 7], 18);
        let n = c.fast;
        c.frame(0, &f);
        assert_eq!(c.fast, n + 1, "{at:?}: not forwarded at first");
        c.fl.fp.lock().unwrap().beat(Duration::ZERO).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        c.frame(0, &f);
        assert_eq!(c.fast, n + 1, "{at:?}: forwarded past its deadline");
        c.fl.fp
            .lock()
            .unwrap()
            .beat(Duration::from_secs(60))
            .unwrap();
        c.frame(0, &f);
        assert_eq!(c.fast, n + 2, "{at:?}: not forwarded after a beat");
    }
}

#[test]
fn the_xdp_fast_path_agrees_with_the_forwarder() {
    agrees(At::Xdp, false);
}

/// Where the egress takes no frames redirected in XDP (a veth whose peer runs no NAPI),
/// the XDP program forwards the same frames, rewritten alike, through the hand-off to
/// tcx, and counts them as handed off on the egress port.
#[test]
fn the_xdp_fast_path_hands_to_tcx_what_it_forwards() {
    agrees(At::Xdp, true);
}

#[test]
fn the_tcx_fast_path_agrees_with_the_forwarder() {
    agrees(At::Tc, false);
}

/// A frame with an 802.1Q tag (`tci`) after the MACs.
fn tagged(f: &[u8], tci: u16) -> Vec<u8> {
    let mut t = f[..12].to_vec();
    t.extend([0x81, 0x00]);
    t.extend(tci.to_be_bytes());
    t.extend(&f[12..]);
    t
}

#[test]
fn the_xdp_fast_path_agrees_with_a_backend_on_its_vlans() {
    backend_vlans(Check::backend(At::Xdp));
}

/// As above, every egress handed to tcx: the tags go on and come off alike.
#[test]
fn the_xdp_fast_path_hands_a_backends_vlans_to_tcx_alike() {
    backend_vlans(Check::backend(At::Xdp).hand_off());
}

fn backend_vlans(mut c: Check) {
    // Forwarded by both: between the two VLANs either way, from a tag with priority
    // bits (out with priority 0, as user space tags), from the untagged interface out
    // of a VLAN and from a VLAN to the untagged interface.
    for (tci, dst) in [
        (Some(10), [8, 8, 8, 8]),
        (Some(20), [192, 0, 2, 7]),
        (Some(0xa00a), [8, 8, 4, 4]),
        (None, [8, 8, 8, 8]),
        (Some(10), [10, 255, 0, 50]),
        (None, [10, 255, 0, 50]),
        (Some(20), [10, 1, 0, 10]),
    ] {
        let f = udp(dst, 18);
        let f = match tci {
            Some(t) => tagged(&f, t),
            None => f,
        };
        let before = c.fast;
        c.frame(0, &f);
        assert_eq!(c.fast, before + 1, "the fast path took none of {f:02x?}");
    }
    // To user space, with its tag as it came: an unknown VLAN, VLAN 0, TTL 1, a
    // second tag, to the router, an unresolved next hop, truncated ones.
    let good = tagged(&udp([8, 8, 8, 8], 18), 10);
    let mut cases = vec![
        tagged(&udp([8, 8, 8, 8], 18), 30),
        tagged(&udp([8, 8, 8, 8], 18), 0),
        tagged(&tagged(&udp([8, 8, 8, 8], 18), 10), 10),
        tagged(&udp([10, 2, 0, 1], 18), 10),
        tagged(&udp([10, 2, 0, 77], 18), 10),
    ];
    let mut ttl1 = good.clone();
    ttl1[26] = 1;
    fix(&mut ttl1[4..]);
    cases.push(ttl1);
    for n in [14, 16, 17, 18, 20, 37, 41] {
        cases.push(good[..n].to_vec());
    }
    for f in &cases {
        let before = c.fast;
        c.frame(0, f);
        assert_eq!(c.fast, before, "the fast path took {f:02x?}");
    }
    // Seeded random mutations of tagged frames, header checksum fixed or not.
    let mut next = xorshift(0x2545_f491_4f6c_dd1d);
    let fast = c.fast;
    for i in 0..20_000 {
        let mut f = good.clone();
        for _ in 0..1 + next() % 3 {
            let at = (next() % 48) as usize;
            f[at] = next() as u8;
        }
        if i % 3 != 0 {
            if let Ok(mut p) = ipv4::Packet::new_checked(&mut f[18..]) {
                p.fill_checksum();
            }
        }
        c.frame(0, &f);
    }
    assert!(
        c.fast - fast > 1000,
        "forwarded {} mutated frames",
        c.fast - fast
    );
}

/// tcx serves a back-end's sub-interfaces too. A tagged frame reaches tcx with its tag
/// in the socket buffer (the kernel takes it out of the bytes first), which a test run
/// cannot give: here frames come in untagged and leave by a VLAN or not; a tag in the
/// bytes (which tcx never sees) is user space's. multistage_lab's
/// `elements_with_the_fast_path` on AF_PACKET ports runs tagged frames both ways.
#[test]
fn the_tcx_fast_path_serves_sub_interfaces() {
    let mut c = Check::backend(At::Tc);
    let before = c.fast;
    c.frame(0, &tagged(&udp([8, 8, 8, 8], 18), 10));
    assert_eq!(c.fast, before, "tcx forwarded a tag in the bytes");
    c.frame(0, &udp([8, 8, 8, 8], 18)); // untagged in, out of VLAN 20
    c.frame(0, &udp([192, 0, 2, 7], 18)); // out of VLAN 10
    c.frame(0, &udp([10, 255, 0, 50], 18)); // untagged to untagged
    assert_eq!(c.fast, before + 3, "tcx left a frame to user space");
}

fn agrees(at: At, handoff: bool) {
    let mut c = Check::new(at);
    if handoff {
        c = c.hand_off();
    }
    let good = udp([192, 0, 2, 7], 18);
    // Forwarded by both: through a gateway on port 1 (the default route), through one
    // on port 0, and larger frames.
    for f in [
        udp([8, 8, 8, 8], 18),
        good.clone(),
        udp([8, 8, 4, 4], 500),
        udp([192, 0, 2, 9], 1400),
    ] {
        let before = c.fast;
        c.frame(0, &f);
        assert_eq!(c.fast, before + 1, "the fast path took none of {f:02x?}");
    }
    c.frame(1, &udp([192, 0, 2, 7], 18)); // port 0's MAC, on port 1: user space
    let mut cases: Vec<Vec<u8>> = Vec::new();
    let mut edit = |e: &dyn Fn(&mut Vec<u8>), refix: bool| {
        let mut f = good.clone();
        e(&mut f);
        if refix {
            fix(&mut f);
        }
        cases.push(f);
    };
    edit(&|f| f[22] = 1, true); // TTL 1: time exceeded
    edit(&|f| f[22] = 0, true);
    edit(&|f| f[22] = 2, true);
    edit(&|f| f[24] ^= 1, false); // bad header checksum
    edit(&|f| f[20] = 0x20, true); // more fragments
    edit(&|f| f[21] = 1, true); // an offset
    edit(&|f| f[20] = 0x40, true); // DF only: forwarded
    edit(&|f| f[0] = 0xff, false); // another MAC
    edit(&|f| f[..6].fill(0xff), false); // broadcast
    edit(&|f| f[12] = 0x86, false); // not IPv4
    edit(&|f| f[14] = 0x46, true); // options
    edit(&|f| f[30..34].copy_from_slice(&[10, 1, 0, 1]), true); // to the router
    edit(&|f| f[30..34].copy_from_slice(&[10, 2, 0, 255]), true); // directed broadcast
    edit(&|f| f[30..34].copy_from_slice(&[224, 0, 0, 5]), true); // multicast
    edit(&|f| f[30..34].copy_from_slice(&[127, 0, 0, 1]), true); // martian
    edit(&|f| f[30..34].copy_from_slice(&[0, 1, 2, 3]), true);
    edit(&|f| f[30..34].copy_from_slice(&[198, 51, 100, 1]), true); // unresolved next hop
    edit(&|f| f[30..34].copy_from_slice(&[10, 1, 0, 10]), true); // connected, resolved
    edit(&|f| f[30..34].copy_from_slice(&[10, 1, 0, 11]), true); // connected, unresolved
    edit(&|f| f[26..30].copy_from_slice(&[10, 2, 0, 1]), true); // from the router
    edit(&|f| f[26..30].copy_from_slice(&[0, 0, 0, 1]), true); // martian source
    edit(&|f| f[26..30].copy_from_slice(&[255, 255, 255, 255]), true);
    edit(&|f| f.extend([0, 0, 0, 0]), false); // link padding
    edit(&|f| f.truncate(40), false); // truncated
    edit(
        &|f| {
            f[40] = 0;
            f[41] = 0;
        },
        false,
    ); // UDP without a checksum
    edit(
        &|f| {
            // A partial checksum (left to offload): the pseudo-header sum only.
            let p = ipv4::Packet::new_checked(&f[14..]).unwrap();
            let s = wire::checksum::pseudo_header(p.src(), p.dst(), 17, p.payload().len() as u16);
            let v = wire::checksum::fold(s).to_be_bytes();
            f[40] = v[0];
            f[41] = v[1];
        },
        false,
    );
    edit(&|f| f[23] = 6, false); // TCP, short: bounds
    let big = udp([8, 8, 8, 8], 1000); // over port 1's MTU of 576: fragmented in user space
    cases.push(big.clone());
    let mut df = big;
    df[20] = 0x40;
    fix(&mut df);
    cases.push(df);
    for f in &cases {
        c.frame(0, f);
    }
    // The forward fuzz corpus (first byte: port and flags).
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/forward");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let data = std::fs::read(e.unwrap().path()).unwrap();
        if let Some((&ctl, frame)) = data.split_first() {
            if frame.len() >= 14 {
                c.frame((ctl & 1) as u16, frame);
                n += 1;
            }
        }
    }
    assert!(n > 20, "the forward corpus has {n} frames");
    // Seeded random mutations of forwardable frames: one to three bytes of the headers
    // changed, with the header checksum recomputed or not.
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    for i in 0..20_000 {
        let mut f = if i % 2 == 0 {
            good.clone()
        } else {
            udp([8, 8, 8, 8], 30)
        };
        for _ in 0..1 + next() % 3 {
            let at = (next() % 44) as usize;
            f[at] = next() as u8;
        }
        if i % 3 != 0 {
            if let Ok(mut p) = ipv4::Packet::new_checked(&mut f[14..]) {
                p.fill_checksum();
            }
        }
        c.frame(0, &f);
    }
    eprintln!(
        "fast path ({at:?}): forwarded {} of {} frames; user space the rest",
        c.fast,
        4 + 1 + cases.len() + n + 20_000
    );
    assert!(
        c.fast > 1000,
        "the fast path forwarded only {} frames",
        c.fast
    );
    // Its counters: every frame it forwarded, in and out, frames and bytes.
    let st = c.fl.fp.lock().unwrap().stats();
    let sum = |k: usize| st.iter().map(|s| s[k]).sum::<u64>();
    assert_eq!((sum(0), sum(2)), (c.fast as u64, c.fast as u64), "{st:?}");
    assert_eq!((sum(3), sum(4)), c.bytes, "{st:?}");
    let handed = if c.handoff { c.fast as u64 } else { 0 };
    assert_eq!(sum(7), handed, "handed off: {st:?}");
}

/// A star member (docs/star.md): port 0 on 10.1.0.0/24 (MAC0), port 1 the internal one
/// (10.255.1.1, MAC 02:00:00:00:05:01); the other members' networks 10.3.0.0/24 (member
/// 3, its port 0) and 10.4.0.0/16 and the longer 10.4.7.0/24 (member 4, its ports 1 and
/// 2); 192.0.2.0/24 through 10.3.0.20, on member 3's network; host 10.1.0.10 resolved.
fn star(at: At) -> Check {
    star_member(at, false)
}

/// [`star`], with IPv6 too (`six`): port 0 also on 2001:db8:1::1/64 and
/// 2001:db8:a::1/64; the other members' networks 2001:db8:3::/48 (member 3, its port 0),
/// 2001:db8:4::/48 and the longer 2001:db8:4:7::/64 (member 4, its ports 1 and 2);
/// 2001:db8:c0::/48 through 2001:db8:3::20, on member 3's network.
fn star_member(at: At, six: bool) -> Check {
    let now = Instant::now();
    let own = wire::MacAddr([2, 0, 0, 0, 5, 1]);
    let ifaces = vec![
        Iface::new("ext", wire::MacAddr(MAC0), [10, 1, 0, 1].into(), 24),
        Iface::new("int", own, [10, 255, 1, 1].into(), 24),
    ];
    let mut f = Forwarder::new(
        ifaces,
        dataplane::forwarder::ForwarderConfig::default(),
        now,
    );
    let p = |s: &str| fib::Prefix::parse_strict(s).unwrap();
    f.set_star(
        1,
        &[
            (p("10.1.0.0/24"), own, 0),
            (p("10.3.0.0/24"), wire::MacAddr(STAR3), 0),
            (p("10.4.0.0/16"), wire::MacAddr(STAR4), 1),
            (p("10.4.7.0/24"), wire::MacAddr(STAR4), 2),
        ],
    );
    f.neighbours.learn(
        0,
        [10, 1, 0, 10].into(),
        wire::MacAddr([2, 0, 0, 0, 1, 0]),
        now,
        true,
    );
    f.add_route(p("192.0.2.0/24"), [10, 3, 0, 20].into())
        .unwrap();
    if six {
        let p6 = |s: &str| fib::Prefix6::parse_strict(s).unwrap();
        f.enable_ipv6(vec![
            vec![
                ("2001:db8:1::1".parse().unwrap(), 64),
                ("2001:db8:a::1".parse().unwrap(), 64),
            ],
            vec![],
        ]);
        f.set_star6(&[
            (p6("2001:db8:1::/64"), own, 0),
            (p6("2001:db8:3::/48"), wire::MacAddr(STAR3), 0),
            (p6("2001:db8:4::/48"), wire::MacAddr(STAR4), 1),
            (p6("2001:db8:4:7::/64"), wire::MacAddr(STAR4), 2),
        ]);
        f.replace_routes6(vec![(
            p6("2001:db8:c0::/48"),
            vec!["2001:db8:3::20".parse().unwrap()],
        )])
        .unwrap();
    }
    Check::with(f, now, at)
}

const STAR3: [u8; 6] = [2, 0, 0, 0, 5, 3];
const STAR4: [u8; 6] = [2, 0, 0, 0, 5, 4];

/// A star frame from another member to this one's internal port: header version 1, out
/// of `port` to `hop`, entered at 10.3.0.1; inside, UDP to 10.1.0.10 with TTL 63.
fn star_frame(port: u8, hop: [u8; 4]) -> Vec<u8> {
    let inner = udp([10, 1, 0, 10], 18);
    let mut f = vec![2, 0, 0, 0, 5, 1, 2, 0, 0, 0, 5, 3, 0x88, 0xb7];
    f.extend([1, port, 0, 0]);
    f.extend(hop);
    f.extend([10, 3, 0, 1]);
    f.extend(&inner[14..]);
    f[12 + 2 + 12 + 8] = 63;
    let mut ip = f[26..].to_vec();
    if let Ok(mut p) = ipv4::Packet::new_checked(&mut ip[..]) {
        p.fill_checksum();
    }
    f.truncate(26);
    f.extend(ip);
    f
}

#[test]
fn the_xdp_fast_path_agrees_with_a_star_member() {
    assert_eq!(io::fastpath::STAR_HEADER_LEN, wire::star::HEADER_LEN);
    assert_eq!(io::fastpath::STAR_VERSION, wire::star::VERSION);
    let mut c = star(At::Xdp);
    // Across the switch: to a host on member 3's network, through a gateway there, to
    // member 4's two networks (the longer prefix first), and a larger packet.
    for f in [
        udp([10, 3, 0, 10], 18),
        udp([192, 0, 2, 7], 18),
        udp([10, 4, 1, 1], 18),
        udp([10, 4, 7, 1], 18),
        udp([10, 3, 0, 10], 1400),
    ] {
        let before = c.fast;
        c.frame(0, &f);
        assert_eq!(c.fast, before + 1, "the fast path took none of {f:02x?}");
    }
    // Off the switch: out of port 0 (the forwarder's interface 0) to the resolved host.
    let good = star_frame(0, [10, 1, 0, 10]);
    let before = c.fast;
    c.frame(1, &good);
    assert_eq!(c.fast, before + 1, "the fast path took none of {good:02x?}");
    // User space's: time exceeded; a packet over the internal MTU less the header; a
    // network no member has; a next hop not resolved; a header naming the internal port,
    // a port the member lacks, the IPv6 version; options; link padding; a star frame on
    // the external port.
    let mut ttl = udp([10, 3, 0, 10], 18);
    ttl[22] = 1;
    fix(&mut ttl);
    c.frame(0, &ttl);
    c.frame(0, &udp([10, 3, 0, 10], 1480));
    c.frame(0, &udp([10, 9, 0, 1], 18));
    c.frame(1, &star_frame(0, [10, 1, 0, 11]));
    c.frame(1, &star_frame(1, [10, 1, 0, 10]));
    c.frame(1, &star_frame(7, [10, 1, 0, 10]));
    let mut v2 = good.clone();
    v2[14] = 2;
    c.frame(1, &v2);
    let mut padded = good.clone();
    padded.extend([0; 4]);
    c.frame(1, &padded);
    let mut wrong_port = good.clone();
    wrong_port[..6].copy_from_slice(&MAC0);
    c.frame(0, &wrong_port);
    assert_eq!(c.fast, 6, "{} frames by the fast path", c.fast);
    // Seeded mutations of both kinds of frame: every verdict as user space's.
    let mut rnd = xorshift(0x5eed_57a2);
    for (port, base) in [(0u16, udp([10, 4, 7, 1], 30)), (1, good)] {
        for _ in 0..400 {
            let mut f = base.clone();
            for _ in 0..1 + rnd() % 3 {
                let i = (rnd() as usize) % f.len();
                f[i] = rnd() as u8;
            }
            c.frame(port, &f);
        }
    }
}

/// The host `h` (at 02:00:00:00:01:00) on port 0 of a star member advertises itself to
/// the router (user space's): its neighbour is resolved from then on.
fn advertise_host6(c: &mut Check, h: &str) {
    let na = icmpv6::Repr::NeighborAdvert {
        router: false,
        solicited: true,
        override_: true,
        target: h.parse().unwrap(),
        options: wire::icmpv6::NdOptions {
            target_lladdr: Some(wire::MacAddr([2, 0, 0, 0, 1, 0])),
            ..Default::default()
        },
    };
    c.frame(0, &frame6(h, "2001:db8:1::1", 255, Some(&na), 0));
}

/// Where the egresses take no frames redirected in XDP, a star member's frames onto its
/// switch (the star header put on) and off it (taken off) leave through the hand-off to
/// tcx, the same bytes as user space sends. IPv6 alike.
#[test]
fn a_star_member_hands_frames_across_its_switch_to_tcx() {
    let mut c = star(At::Xdp).hand_off();
    for f in [udp([10, 3, 0, 10], 18), udp([10, 4, 7, 1], 18)] {
        c.frame(0, &f);
    }
    assert_eq!(c.fast, 2, "{} frames onto the switch handed off", c.fast);
    c.frame(1, &star_frame(0, [10, 1, 0, 10]));
    assert_eq!(c.fast, 3, "the star frame was not handed off");
    // IPv6: the host on port 0 resolved first (its advertisement, user space's).
    let mut c = star_member(At::Xdp, true).hand_off();
    const H: &str = "2001:db8:1::10";
    advertise_host6(&mut c, H);
    c.frame(1, &star_frame6(0, H));
    assert_eq!(c.fast, 1, "the IPv6 star frame was not handed off");
    c.frame(0, &frame6(H, "2001:db8:3::10", 64, None, 18));
    assert_eq!(
        c.fast, 2,
        "the IPv6 frame onto the switch was not handed off"
    );
}

/// An IPv6 star frame from member 3 to this one's internal port: header version 2, out of
/// `port` to `hop`, entered at 2001:db8:3::1; inside, UDP from 2001:db8:3::10 to
/// 2001:db8:1::10 with hop limit 63.
fn star_frame6(port: u8, hop: &str) -> Vec<u8> {
    let inner = frame6("2001:db8:3::10", "2001:db8:1::10", 63, None, 20);
    let mut f = vec![2, 0, 0, 0, 5, 1, 2, 0, 0, 0, 5, 3, 0x88, 0xb7];
    f.extend([2, port, 0, 0]);
    f.extend(hop.parse::<Ipv6Addr>().unwrap().octets());
    f.extend("2001:db8:3::1".parse::<Ipv6Addr>().unwrap().octets());
    f.extend(&inner[14..]);
    f
}

#[test]
fn the_xdp_fast_path_agrees_with_a_star_member_on_ipv6() {
    assert_eq!(io::fastpath::STAR_HEADER6_LEN, wire::star::HEADER6_LEN);
    assert_eq!(io::fastpath::STAR_VERSION6, wire::star::VERSION6);
    let mut c = star_member(At::Xdp, true);
    const H: &str = "2001:db8:1::10";
    // Across the switch: to a host on member 3's network, through a gateway there, to
    // member 4's two networks (the longer prefix first), a larger packet, and from a
    // source on the port's other network (the header names that network's address).
    for f in [
        frame6(H, "2001:db8:3::10", 64, None, 18),
        frame6(H, "2001:db8:c0::7", 64, None, 18),
        frame6(H, "2001:db8:4:1::1", 64, None, 18),
        frame6(H, "2001:db8:4:7::1", 64, None, 18),
        frame6(H, "2001:db8:3::10", 64, None, 1400),
        frame6("2001:db8:a::9", "2001:db8:3::10", 64, None, 18),
        frame6("2001:db8:77::9", "2001:db8:3::10", 64, None, 18),
    ] {
        let before = c.fast;
        c.frame(0, &f);
        assert_eq!(c.fast, before + 1, "the fast path took none of {f:02x?}");
    }
    // Off the switch: the host on port 0 is not resolved yet (user space solicits it),
    // then its advertisement, then the fast path sends it on.
    let good = star_frame6(0, H);
    c.frame(1, &good);
    advertise_host6(&mut c, H);
    let before = c.fast;
    c.frame(1, &good);
    assert_eq!(c.fast, before + 1, "the fast path took none of {good:02x?}");
    // User space's: hop limit; over the internal MTU less the header; a network no
    // member has; a next hop not resolved; a header naming the internal port, a port the
    // member lacks; an IPv4 packet behind version 2; link padding; a truncated frame.
    let fast = c.fast;
    c.frame(0, &frame6(H, "2001:db8:3::10", 1, None, 18));
    c.frame(0, &frame6(H, "2001:db8:3::10", 64, None, 1430));
    c.frame(0, &frame6(H, "2001:db8:9::1", 64, None, 18));
    c.frame(1, &star_frame6(0, "2001:db8:1::11"));
    c.frame(1, &star_frame6(1, H));
    c.frame(1, &star_frame6(7, H));
    let mut v4 = star_frame(0, [10, 1, 0, 10]);
    v4[14] = 2;
    c.frame(1, &v4);
    let mut padded = good.clone();
    padded.extend([0; 4]);
    c.frame(1, &padded);
    c.frame(1, &good[..good.len() - 1]);
    assert_eq!(
        c.fast, fast,
        "the fast path took a frame that is user space's"
    );
    // Seeded mutations of both kinds of frame: every verdict as user space's.
    let mut rnd = xorshift(0x5eed_57a6);
    for (port, base) in [
        (0u16, frame6(H, "2001:db8:4:7::1", 64, None, 30)),
        (1, good),
    ] {
        for _ in 0..600 {
            let mut f = base.clone();
            for _ in 0..1 + rnd() % 3 {
                let i = (rnd() as usize) % f.len().min(96);
                f[i] = rnd() as u8;
            }
            c.frame(port, &f);
        }
    }
    eprintln!("star IPv6 (XDP): {} frames by the fast path", c.fast);
}

#[test]
fn the_tcx_fast_path_leaves_the_star_to_user_space() {
    let mut c = star_member(At::Tc, true);
    c.frame(0, &udp([10, 3, 0, 10], 18));
    c.frame(1, &star_frame(0, [10, 1, 0, 10]));
    c.frame(0, &frame6("2001:db8:1::10", "2001:db8:3::10", 64, None, 18));
    c.frame(1, &star_frame6(0, "2001:db8:1::10"));
    assert_eq!(c.fast, 0);
    // Left to user space, not shed as frames the router answers are past the slow
    // path's limit: a limit of one frame a second lets none of the star's through to
    // `police`'s bucket.
    let mut facts = ForwarderFast::facts(&c.f, 0, MAC0);
    facts.slow_path_limit = 1;
    let prog = c.fl.fp.lock().unwrap().detached(&facts, At::Tc).unwrap();
    for _ in 0..5 {
        let (v, _) = prog.run(&udp([10, 3, 0, 10], 18)).unwrap();
        assert_eq!(v, Verdict::ToUserSpace);
    }
}

/// What the program costs per frame in the kernel (`BPF_PROG_TEST_RUN`'s time, the median
/// of 2,000 calls of 200 runs each): a forwarded 60-byte UDP frame in XDP and in tcx, a
/// forwarded IPv6 one in XDP, and an ARP request left to user space in XDP. The runs of a
/// call share one copy of the frame, so the next hops here have the port's own MAC (each
/// run's rewrite leaves the frame to the port) and the TTL and hop limit start at 255. A
/// measurement for comparing builds, not a check: `cargo test -p control program_cost --
/// --ignored --nocapture`.
#[test]
#[ignore = "a measurement"]
fn program_cost_per_frame() {
    let median = |prog: &io::fastpath::Detached, f: &[u8]| -> (Verdict, u32) {
        let mut v = Verdict::Drop;
        let mut ns: Vec<u32> = (0..2000)
            .map(|_| {
                let (x, t) = prog.time(f, 200).unwrap();
                v = x;
                t
            })
            .collect();
        ns.sort_unstable();
        (v, ns[ns.len() / 2])
    };
    let mut four = udp([203, 0, 113, 20], 18);
    four[22] = 255;
    fix(&mut four);
    let mut arp = vec![0xffu8; 6];
    arp.extend([2, 0, 0, 0, 1, 0, 0x08, 0x06]);
    arp.resize(60, 0);
    let a6 = |s: &str| -> Ipv6Addr { s.parse().unwrap() };
    for at in [At::Xdp, At::Tc] {
        let (mut f, now) = dataplane::fuzzing::forwarder();
        f.add_route(
            fib::Prefix::new([203, 0, 113, 0].into(), 24),
            [10, 1, 0, 20].into(),
        )
        .unwrap();
        f.neighbours
            .learn(0, [10, 1, 0, 20].into(), wire::MacAddr(MAC0), now, true);
        f.add_route6(
            fib::Prefix6::parse_strict("2001:db8:100::/48").unwrap(),
            &[a6("2001:db8:1::3")],
        )
        .unwrap();
        let mut c = Check::with(f, now, at);
        let (v, ns) = median(&c.progs[0], &four);
        println!("cost {at:?} IPv4 UDP 60 B: {v:?} {ns} ns");
        if at == At::Tc {
            continue;
        }
        let (v, ns) = median(&c.progs[0], &arp);
        println!("cost {at:?} ARP: {v:?} {ns} ns");
        c.frame(
            0,
            &frame6("2001:db8:1::10", "2001:db8:100::1", 64, None, 20),
        );
        let na = icmpv6::Repr::NeighborAdvert {
            router: true,
            solicited: true,
            override_: true,
            target: a6("2001:db8:1::3"),
            options: wire::icmpv6::NdOptions {
                target_lladdr: Some(wire::MacAddr(MAC0)),
                ..Default::default()
            },
        };
        c.frame(
            0,
            &frame6("2001:db8:1::3", "2001:db8:1::1", 255, Some(&na), 0),
        );
        let six = frame6("2001:db8:1::10", "2001:db8:100::7", 255, None, 18);
        let (v, ns) = median(&c.progs[0], &six);
        println!("cost {at:?} IPv6 UDP 80 B: {v:?} {ns} ns");
    }
}

mod filters;
mod flows;
