//! Golden tests: {description, input frame, expected output or drop reason, counters}.

use super::*;
use wire::udp;

const R0: MacAddr = MacAddr([0x02, 0, 0, 0, 0xa0, 0]);
const R1: MacAddr = MacAddr([0x02, 0, 0, 0, 0xa1, 0]);
const H1: MacAddr = MacAddr([0x02, 0, 0, 0, 0x01, 0x10]);
const H2: MacAddr = MacAddr([0x02, 0, 0, 0, 0x02, 0x20]);

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

/// Ports: 0 = 10.1.0.1/24 (host 10.1.0.10 at H1), 1 = 10.2.0.1/24 MTU 1000 (host 10.2.0.20
/// at H2, gateway 10.2.0.2 for 10.3.0.0/16, also at H2).
fn router() -> (Forwarder, Instant) {
    let now = Instant::now();
    let ifaces = vec![
        Iface::new("r0", R0, ip("10.1.0.1"), 24),
        Iface {
            mtu: 1000,
            ..Iface::new("r1", R1, ip("10.2.0.1"), 24)
        },
    ];
    let mut f = Forwarder::new(ifaces, ForwarderConfig::default(), now);
    f.add_route(Prefix::parse_strict("10.3.0.0/16").unwrap(), ip("10.2.0.2"))
        .unwrap();
    f.neighbours.learn(0, ip("10.1.0.10"), H1, now, true);
    f.neighbours.learn(1, ip("10.2.0.20"), H2, now, true);
    f.neighbours.learn(1, ip("10.2.0.2"), H2, now, true);
    (f, now)
}

/// An ARP reply from `mac` at `sender` to the router's port 1 (10.2.0.1 at R1).
fn arp_reply_to_r1(mac: MacAddr, sender: Ipv4Addr) -> Vec<u8> {
    let mut rep = vec![0u8; ETH + 28];
    ethernet::Repr {
        dst: R1,
        src: mac,
        vlan: None,
        ethertype: ethertype::ARP,
    }
    .emit(&mut rep)
    .unwrap();
    arp::Repr {
        operation: arp::Operation::Reply,
        sender_mac: mac,
        sender_ip: sender,
        target_mac: R1,
        target_ip: ip("10.2.0.1"),
    }
    .emit(&mut rep[ETH..])
    .unwrap();
    rep
}

/// A broadcast ARP request from H1 at `sender` for `target`.
fn arp_request(sender: &str, target: &str) -> Vec<u8> {
    let mut req = vec![0u8; ETH + 28];
    ethernet::Repr {
        dst: MacAddr::BROADCAST,
        src: H1,
        vlan: None,
        ethertype: ethertype::ARP,
    }
    .emit(&mut req)
    .unwrap();
    arp::Repr {
        operation: arp::Operation::Request,
        sender_mac: H1,
        sender_ip: ip(sender),
        target_mac: MacAddr::ZERO,
        target_ip: ip(target),
    }
    .emit(&mut req[ETH..])
    .unwrap();
    req
}

struct Udp {
    dst_mac: MacAddr,
    src: &'static str,
    dst: &'static str,
    ttl: u8,
    df: bool,
    len: usize,
}

impl Default for Udp {
    fn default() -> Self {
        Udp {
            dst_mac: R0,
            src: "10.1.0.10",
            dst: "10.2.0.20",
            ttl: 64,
            df: false,
            len: 32,
        }
    }
}

fn udp_frame(u: Udp) -> Vec<u8> {
    let payload: Vec<u8> = (0..u.len).map(|i| i as u8).collect();
    wire::frame::UdpFrame {
        eth_dst: u.dst_mac,
        eth_src: H1,
        src: ip(u.src),
        dst: ip(u.dst),
        src_port: 5000,
        ttl: u.ttl,
        ident: 0x1234,
        dont_frag: u.df,
        payload: &payload,
        ..Default::default()
    }
    .to_vec()
}

fn run(f: &mut Forwarder, now: Instant, port: u16, frame: Vec<u8>) -> Vec<(u16, Vec<u8>)> {
    let mut tx = TxQueues::new(f.ifaces.len());
    let mut p = Pkt::from_bytes(&frame);
    p.meta.rx_port = port;
    f.process(p, now, &mut tx);
    tx.drain_all()
        .into_iter()
        .map(|(p, k)| (p, k.data.to_vec()))
        .collect()
}

fn ip_of(frame: &[u8]) -> ipv4::Packet<&[u8]> {
    ipv4::Packet::new_checked(&frame[ETH..]).unwrap()
}

/// The (type, code) of an ICMP frame, after checking both checksums.
fn icmp_of(frame: &[u8]) -> (u8, u8, Ipv4Addr, Ipv4Addr) {
    let p = ip_of(frame);
    assert!(p.verify_checksum());
    assert_eq!(p.protocol(), protocol::ICMP);
    let i = icmp::Packet::new_checked(p.payload()).unwrap();
    assert!(i.verify_checksum());
    (i.msg_type(), i.code(), p.src(), p.dst())
}

#[test]
fn forwards_with_ttl_decrement_and_new_macs() {
    let (mut f, now) = router();
    let out = run(&mut f, now, 0, udp_frame(Udp::default()));
    assert_eq!(out.len(), 1);
    let (port, fr) = &out[0];
    assert_eq!(*port, 1);
    let e = ethernet::Frame::new_checked(&fr[..]).unwrap();
    assert_eq!((e.dst(), e.src()), (H2, R1));
    let p = ip_of(fr);
    assert_eq!(p.ttl(), 63);
    assert!(p.verify_checksum());
    assert!(udp::Packet::new_checked(p.payload())
        .unwrap()
        .verify_checksum(p.src(), p.dst()));
    assert_eq!(f.counters.events(Event::Forwarded), 1);
}

#[test]
fn forwards_through_gateway() {
    let (mut f, now) = router();
    let out = run(
        &mut f,
        now,
        0,
        udp_frame(Udp {
            dst: "10.3.7.7",
            ..Default::default()
        }),
    );
    assert_eq!(out[0].0, 1);
    assert_eq!(
        ethernet::Frame::new_checked(&out[0].1[..]).unwrap().dst(),
        H2
    );
}

/// Frames that must be dropped, each with the one counter that must count it and nothing
/// sent.
#[test]
fn silent_drops() {
    let vlan = {
        let mut b = udp_frame(Udp::default());
        b.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
        b
    };
    let ipv6 = {
        let mut b = udp_frame(Udp::default());
        b[12..14].copy_from_slice(&[0x86, 0xdd]);
        b
    };
    let bad_csum = {
        let mut b = udp_frame(Udp::default());
        b[ETH + 10] ^= 0xff;
        b
    };
    let bad_version = {
        let mut b = udp_frame(Udp::default());
        b[ETH] = 0x65;
        b
    };
    let short_total = {
        let mut b = udp_frame(Udp::default());
        b.truncate(ETH + 30);
        b
    };
    #[rustfmt::skip]
    let cases: Vec<(&str, Vec<u8>, Drop)> = vec![
        ("runt frame", vec![0u8; 10], Drop::EthTruncated),
        ("other station's MAC", udp_frame(Udp { dst_mac: H2, ..Default::default() }), Drop::NotOurMac),
        ("802.1Q tag", vlan, Drop::VlanNotConfigured),
        ("IPv6", ipv6, Drop::EthertypeUnsupported),
        ("bad header checksum", bad_csum, Drop::Ip4BadChecksum),
        ("version 6 in an IPv4 frame", bad_version, Drop::Ip4BadVersion),
        ("total length past the frame", short_total, Drop::Ip4Truncated),
        ("link broadcast to a remote host", udp_frame(Udp { dst_mac: MacAddr::BROADCAST, ..Default::default() }), Drop::Ip4L2Multicast),
        ("IP multicast", udp_frame(Udp { dst: "239.1.1.1", ..Default::default() }), Drop::Ip4Multicast),
        ("limited broadcast", udp_frame(Udp { dst: "255.255.255.255", ..Default::default() }), Drop::Ip4Broadcast),
        ("directed broadcast", udp_frame(Udp { dst: "10.2.0.255", ..Default::default() }), Drop::Ip4Broadcast),
        ("loopback source", udp_frame(Udp { src: "127.0.0.1", ..Default::default() }), Drop::Ip4MartianSource),
        ("our own address as source", udp_frame(Udp { src: "10.2.0.1", ..Default::default() }), Drop::Ip4MartianSource),
        ("class E destination", udp_frame(Udp { dst: "240.0.0.1", ..Default::default() }), Drop::Ip4MartianDestination),
    ];
    for (what, frame, why) in cases {
        let (mut f, now) = router();
        let out = run(&mut f, now, 0, frame);
        assert!(out.is_empty(), "{what}: sent {out:?}");
        assert_eq!(f.counters.drops(why), 1, "{what}: {why:?} not counted");
        let total: u64 = Drop::ALL.iter().map(|d| f.counters.drops(*d)).sum();
        assert_eq!(total, 1, "{what}: counted more than one drop");
    }
}

#[test]
fn icmp_errors() {
    // (what, input, drop, expected ICMP type, code)
    let cases: Vec<(&str, Vec<u8>, Drop, u8, u8)> = vec![
        (
            "TTL 1",
            udp_frame(Udp {
                ttl: 1,
                ..Default::default()
            }),
            Drop::Ip4TtlExpired,
            11,
            0,
        ),
        (
            "no route",
            udp_frame(Udp {
                dst: "192.0.2.1",
                ..Default::default()
            }),
            Drop::Ip4NoRoute,
            3,
            0,
        ),
        (
            "DF over MTU",
            udp_frame(Udp {
                df: true,
                len: 1200,
                ..Default::default()
            }),
            Drop::Ip4FragNeeded,
            3,
            4,
        ),
        (
            "UDP to us",
            udp_frame(Udp {
                dst: "10.1.0.1",
                ..Default::default()
            }),
            Drop::LocalUdp,
            3,
            3,
        ),
    ];
    for (what, frame, why, t, c) in cases {
        let (mut f, now) = router();
        let orig_len = frame.len();
        let out = run(&mut f, now, 0, frame);
        assert_eq!(f.counters.drops(why), 1, "{what}");
        assert_eq!(out.len(), 1, "{what}");
        let (port, fr) = &out[0];
        assert_eq!(*port, 0, "{what}: goes back toward the source");
        assert_eq!(
            icmp_of(fr),
            (t, c, ip("10.1.0.1"), ip("10.1.0.10")),
            "{what}"
        );
        let ipp = ip_of(fr);
        let i = icmp::Packet::new_checked(ipp.payload()).unwrap();
        assert_eq!(
            i.data().len(),
            (orig_len - ETH).min(576 - 28),
            "{what}: quote length"
        );
        if t == 3 && c == 4 {
            assert_eq!(i.next_hop_mtu(), 1000);
        }
    }
}

#[test]
fn no_icmp_error_about_an_icmp_error_or_a_later_fragment() {
    let (mut f, now) = router();
    // A time-exceeded message arriving with TTL 1.
    let mut err = vec![0u8; ETH + 20 + 36];
    ethernet::Repr {
        dst: R0,
        src: H1,
        vlan: None,
        ethertype: ethertype::IPV4,
    }
    .emit(&mut err)
    .unwrap();
    ipv4::Repr {
        src: ip("10.1.0.10"),
        dst: ip("10.2.0.20"),
        protocol: protocol::ICMP,
        ttl: 1,
        tos: 0,
        ident: 9,
        dont_frag: false,
        more_frags: false,
        frag_offset: 0,
        payload_len: 36,
    }
    .emit(&mut err[ETH..])
    .unwrap();
    icmp::Repr::TimeExceeded {
        code: 0,
        data: &[0x45; 28],
    }
    .emit(&mut err[ETH + 20..])
    .unwrap();
    assert!(run(&mut f, now, 0, err).is_empty());
    // A non-first fragment with TTL 1.
    let mut frag = udp_frame(Udp {
        ttl: 1,
        ..Default::default()
    });
    let mut p = ipv4::Packet::new_checked(&mut frag[ETH..]).unwrap();
    p.set_frag(false, false, 64);
    p.fill_checksum();
    assert!(run(&mut f, now, 0, frag).is_empty());
    assert_eq!(f.counters.drops(Drop::IcmpSuppressed), 2);
    assert_eq!(f.counters.drops(Drop::Ip4TtlExpired), 2);
}

#[test]
fn icmp_errors_are_rate_limited() {
    let (mut f, now) = router();
    for _ in 0..60 {
        run(
            &mut f,
            now,
            0,
            udp_frame(Udp {
                ttl: 1,
                ..Default::default()
            }),
        );
    }
    assert_eq!(f.counters.events(Event::IcmpErrorsSent), 50);
    assert_eq!(f.counters.drops(Drop::IcmpRateLimited), 10);
    // A second later the bucket holds 50 again (100/s, capped at the burst).
    let later = now + Duration::from_secs(1);
    for _ in 0..60 {
        run(
            &mut f,
            later,
            0,
            udp_frame(Udp {
                ttl: 1,
                ..Default::default()
            }),
        );
    }
    assert_eq!(f.counters.events(Event::IcmpErrorsSent), 100);
}

#[test]
fn fragments_when_df_is_clear() {
    let (mut f, now) = router();
    let frame = udp_frame(Udp {
        len: 1400,
        ..Default::default()
    });
    let payload = frame[ETH + 20..].to_vec();
    let out = run(&mut f, now, 0, frame);
    assert_eq!(out.len(), 2);
    let mut data = vec![0u8; payload.len()];
    for (port, fr) in &out {
        assert_eq!(*port, 1);
        let p = ip_of(fr);
        assert!(p.total_len() <= 1000 && p.verify_checksum() && p.ttl() == 63);
        data[p.frag_offset()..p.frag_offset() + p.payload().len()].copy_from_slice(p.payload());
    }
    assert_eq!(data, payload);
    assert_eq!(f.counters.events(Event::FragmentsMade), 2);
}

#[test]
fn answers_arp_and_ping_for_its_addresses() {
    let (mut f, now) = router();
    let out = run(&mut f, now, 0, arp_request("10.1.0.77", "10.1.0.1"));
    assert_eq!(out.len(), 1);
    let a = arp::Packet::new_checked(&out[0].1[ETH..]).unwrap();
    assert_eq!(
        (a.operation(), a.sender_mac(), a.sender_ip(), a.target_mac()),
        (arp::Operation::Reply, R0, ip("10.1.0.1"), H1)
    );
    assert!(
        f.neighbours.contains(0, ip("10.1.0.77")),
        "the requester is learned"
    );

    // Ping the far interface's address from port 0: the reply comes back out of port 0.
    let mut ping = vec![0u8; ETH + 20 + 8 + 4];
    ethernet::Repr {
        dst: R0,
        src: H1,
        vlan: None,
        ethertype: ethertype::IPV4,
    }
    .emit(&mut ping)
    .unwrap();
    ipv4::Repr {
        src: ip("10.1.0.10"),
        dst: ip("10.2.0.1"),
        protocol: protocol::ICMP,
        ttl: 64,
        tos: 0,
        ident: 1,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
        payload_len: 12,
    }
    .emit(&mut ping[ETH..])
    .unwrap();
    icmp::Repr::EchoRequest {
        ident: 7,
        seq: 3,
        data: b"abcd",
    }
    .emit(&mut ping[ETH + 20..])
    .unwrap();
    let out = run(&mut f, now, 0, ping);
    assert_eq!(out.len(), 1);
    assert_eq!(icmp_of(&out[0].1), (0, 0, ip("10.2.0.1"), ip("10.1.0.10")));
    let p = ip_of(&out[0].1);
    let i = icmp::Packet::new_checked(p.payload()).unwrap();
    assert_eq!(
        (i.echo_ident(), i.echo_seq(), i.data()),
        (7, 3, &b"abcd"[..])
    );
}

/// Port 0 IPv6-only (no IPv4 address: 0.0.0.0 inside), port 1 10.2.0.1/24: an ARP probe
/// (target 0.0.0.0) on port 0 is not answered, no connected IPv4 route points at port 0,
/// and an IPv4 packet that arrives on port 0 with its TTL spent gets time exceeded from
/// port 1's address.
#[test]
fn an_ipv6_only_port_answers_no_arp_and_sources_icmp_from_another() {
    let now = Instant::now();
    let ifaces = vec![
        Iface::new("r0", R0, Ipv4Addr::UNSPECIFIED, 0),
        Iface::new("r1", R1, ip("10.2.0.1"), 24),
    ];
    let mut f = Forwarder::new(ifaces, ForwarderConfig::default(), now);
    assert_eq!(f.port_for_gateway(ip("10.1.0.10")), None);
    assert_eq!(f.port_for_gateway(ip("10.2.0.20")), Some(1));
    f.neighbours.learn(1, ip("10.2.0.20"), H2, now, true);
    for target in ["0.0.0.0", "10.2.0.1"] {
        assert!(
            run(&mut f, now, 0, arp_request("10.1.0.77", target)).is_empty(),
            "ARP for {target} on port 0"
        );
    }
    // IPv4 transit still works from the IPv6-only port (as it would on any port).
    let out = run(&mut f, now, 0, udp_frame(Udp::default()));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, 1);
    // TTL 1: time exceeded, from 10.2.0.1 (port 0 has no IPv4 address), back by the
    // route to 10.1.0.0/24 (through 10.2.0.20, port 1).
    f.add_route(
        Prefix::parse_strict("10.1.0.0/24").unwrap(),
        ip("10.2.0.20"),
    )
    .unwrap();
    let out = run(
        &mut f,
        now,
        0,
        udp_frame(Udp {
            ttl: 1,
            ..Udp::default()
        }),
    );
    assert_eq!(out.len(), 1, "{out:?}");
    let (t, _, src, dst) = icmp_of(&out[0].1);
    assert_eq!(
        (out[0].0, t, src, dst),
        (1, 11, ip("10.2.0.1"), ip("10.1.0.10"))
    );
}

#[test]
fn resolves_unknown_next_hop_then_sends_queued_packets() {
    let (mut f, now) = router();
    let out = run(
        &mut f,
        now,
        0,
        udp_frame(Udp {
            dst: "10.2.0.99",
            ..Default::default()
        }),
    );
    assert_eq!(out.len(), 1, "only the ARP request goes out");
    let a = arp::Packet::new_checked(&out[0].1[ETH..]).unwrap();
    assert_eq!(
        (out[0].0, a.operation(), a.target_ip(), a.sender_ip()),
        (1, arp::Operation::Request, ip("10.2.0.99"), ip("10.2.0.1"))
    );
    assert!(run(
        &mut f,
        now,
        0,
        udp_frame(Udp {
            dst: "10.2.0.99",
            ..Default::default()
        })
    )
    .is_empty());

    let mac = MacAddr([2, 0, 0, 0, 0, 0x99]);
    let rep = arp_reply_to_r1(mac, ip("10.2.0.99"));
    let out = run(&mut f, now, 1, rep);
    assert_eq!(out.len(), 2, "both queued packets leave");
    for (port, fr) in out {
        assert_eq!(
            (port, ethernet::Frame::new_checked(&fr[..]).unwrap().dst()),
            (1, mac)
        );
    }
}

/// Two workers: the one whose packet waits asks; the reply reaches the other, which hands
/// the neighbour over; the first sends its packet after taking the news, and each counts
/// only its own frames.
#[test]
fn a_sibling_worker_resolves_the_next_hop() {
    let (f, now) = router();
    let mut ws = vec![f];
    ws.push(ws[0].worker(now));
    Forwarder::connect_workers(&mut ws);
    let (a, b) = ws.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    let frame = udp_frame(Udp {
        dst: "10.2.0.99",
        ..Default::default()
    });
    let out = run(b, now, 0, frame);
    assert_eq!(out.len(), 1, "the ARP request: {out:?}");
    let mac = MacAddr([2, 0, 0, 0, 0, 0x99]);
    let rep = arp_reply_to_r1(mac, ip("10.2.0.99"));
    assert!(run(a, now, 1, rep).is_empty());
    assert!(a.neighbours.contains(1, ip("10.2.0.99")));
    let mut tx = TxQueues::new(b.ifaces.len());
    b.take_news(now, &mut tx);
    let out = tx.drain_all();
    assert_eq!(out.len(), 1, "the queued packet leaves: {out:?}");
    assert_eq!(
        (
            out[0].0,
            ethernet::Frame::new_checked(&out[0].1.data[..])
                .unwrap()
                .dst()
        ),
        (1, mac)
    );
    assert_eq!(
        (
            a.counters.events(Event::ArpLearned),
            b.counters.events(Event::ArpLearned)
        ),
        (1, 0)
    );
    assert_eq!(a.counters.ports[0].rx_packets.get(), 0);
    assert_eq!(b.counters.ports[0].rx_packets.get(), 1);
    // Together they send no more ICMP errors than one forwarder would.
    assert_eq!(
        a.cfg.icmp_burst + b.cfg.icmp_burst,
        ForwarderConfig::default().icmp_burst
    );
}

#[test]
fn unanswered_arp_gives_host_unreachable() {
    let (mut f, now) = router();
    run(
        &mut f,
        now,
        0,
        udp_frame(Udp {
            dst: "10.2.0.98",
            ..Default::default()
        }),
    );
    let mut tx = TxQueues::new(2);
    let mut requests = 1;
    for s in 1..=3 {
        f.poll(now + Duration::from_millis(1001 * s), &mut tx);
        for (port, fr) in tx.drain_all() {
            if port == 1 {
                requests += 1;
            } else {
                assert_eq!(icmp_of(&fr.data), (3, 1, ip("10.1.0.1"), ip("10.1.0.10")));
                assert_eq!(s, 3);
            }
        }
    }
    assert_eq!(requests, 3);
    assert_eq!(f.counters.drops(Drop::ArpFailed), 1);
    assert_eq!(f.counters.events(Event::IcmpErrorsSent), 1);
}

#[test]
fn fills_in_offloaded_checksums() {
    let (mut f, now) = router();
    let mut frame = udp_frame(Udp::default());
    // What a sender with checksum offload puts there: the pseudo-header sum only.
    let psum = wire::checksum::fold(wire::checksum::pseudo_header(
        ip("10.1.0.10"),
        ip("10.2.0.20"),
        17,
        40,
    ));
    frame[ETH + 26..ETH + 28].copy_from_slice(&psum.to_be_bytes());
    let mut p = Pkt::from_bytes(&frame);
    p.meta.csum_partial = true;
    let mut tx = TxQueues::new(2);
    f.process(p, now, &mut tx);
    let out = tx.drain_all();
    let ipp = ip_of(&out[0].1.data);
    assert!(udp::Packet::new_checked(ipp.payload())
        .unwrap()
        .verify_checksum(ipp.src(), ipp.dst()));
    assert_eq!(f.counters.events(Event::ChecksumFilled), 1);
}

#[test]
fn source_routed_packets_get_source_route_failed() {
    let (mut f, now) = router();
    let mut b = udp_frame(Udp::default());
    // Insert an LSRR option (type 131, len 7, pointer 4, one address) plus an END byte.
    b.splice(ETH + 20..ETH + 20, [131, 7, 4, 10, 2, 0, 20, 0]);
    b[ETH] = 0x47;
    let total = (b.len() - ETH) as u16;
    b[ETH + 2..ETH + 4].copy_from_slice(&total.to_be_bytes());
    ipv4::Packet::new_checked(&mut b[ETH..])
        .unwrap()
        .fill_checksum();
    let out = run(&mut f, now, 0, b);
    assert_eq!(f.counters.drops(Drop::Ip4SourceRoute), 1);
    assert_eq!(icmp_of(&out[0].1).0..=icmp_of(&out[0].1).1, 3..=5);
}

/// A back-end: one port on the interconnection (10.255.0.11/24) with sub-interfaces for
/// VLAN 10 (10.1.0.1/24) and VLAN 20 (10.2.0.1/24).
fn backend() -> (Forwarder, Instant) {
    let now = Instant::now();
    let sub = |name, id, addr| Iface {
        vlan: Some(Vlan { parent: 0, id }),
        ..Iface::new(name, R0, ip(addr), 24)
    };
    let ifaces = vec![
        Iface::new("int", R0, ip("10.255.0.11"), 24),
        sub("ext-a", 10, "10.1.0.1"),
        sub("ext-b", 20, "10.2.0.1"),
    ];
    let mut f = Forwarder::new(ifaces, ForwarderConfig::default(), now);
    f.set_backend(0, Duration::from_millis(100), now);
    f.neighbours.learn(2, ip("10.2.0.20"), H2, now, true);
    (f, now)
}

fn tagged(mut frame: Vec<u8>, vid: u16) -> Vec<u8> {
    assert!(ethernet::push_vlan(&mut frame, vid));
    frame
}

#[test]
fn backend_routes_between_vlan_sub_interfaces() {
    let (mut f, now) = backend();
    assert_eq!(f.port_count(), 1);
    assert_eq!(f.counters.port_names, vec!["int".to_string()]);
    let out = run(&mut f, now, 0, tagged(udp_frame(Udp::default()), 10));
    assert_eq!(out.len(), 1, "{:?}", f.counters.snapshot().drops);
    let (port, fr) = &out[0];
    assert_eq!(*port, 0);
    let e = ethernet::Frame::new_checked(&fr[..]).unwrap();
    assert_eq!((e.dst(), e.src(), e.vlan()), (H2, R0, Some(20)));
    let p = ipv4::Packet::new_checked(e.payload()).unwrap();
    assert_eq!(p.ttl(), 63);
    assert!(p.verify_checksum());
    // An unknown VLAN is dropped and counted; untagged data reaches the internal network.
    assert!(run(&mut f, now, 0, tagged(udp_frame(Udp::default()), 30)).is_empty());
    assert_eq!(f.counters.drops(Drop::VlanNotConfigured), 1);
    // TTL 1 from outside: time exceeded from the ingress sub-interface's address, on its VLAN.
    let out = run(
        &mut f,
        now,
        0,
        tagged(
            udp_frame(Udp {
                ttl: 1,
                src: "10.2.0.20",
                dst: "10.1.0.10",
                ..Default::default()
            }),
            20,
        ),
    );
    let e = ethernet::Frame::new_checked(&out[0].1[..]).unwrap();
    assert_eq!(e.vlan(), Some(20));
    let mut untag = out[0].1.clone();
    ethernet::pop_vlan(&mut untag);
    let (t, _, src, dst) = icmp_of(&untag);
    assert_eq!((t, src, dst), (11, ip("10.2.0.1"), ip("10.2.0.20")));
}

#[test]
fn backend_sends_hellos_and_takes_dist_only_on_its_internal_port() {
    let (mut f, now) = backend();
    let mut tx = TxQueues::new(1);
    f.poll(now, &mut tx);
    f.poll(now + Duration::from_millis(50), &mut tx);
    f.poll(now + Duration::from_millis(100), &mut tx);
    let sent = tx.drain_all();
    assert_eq!(sent.len(), 2, "one hello per interval");
    let (port, hello) = (&sent[0].0, sent[0].1.data.to_vec());
    assert_eq!(*port, 0);
    let e = ethernet::Frame::new_checked(&hello[..]).unwrap();
    assert_eq!(
        (e.ethertype(), e.vlan(), e.dst()),
        (wire::dist::ETHERTYPE, None, MacAddr::BROADCAST)
    );
    let r = wire::dist::Repr::parse(e.payload()).unwrap();
    let wire::dist::Message::Hello(h) = r.msg else {
        panic!("not a hello: {r:?}")
    };
    assert_eq!(h.interval_ms, 100);
    assert_eq!(h.ports.len(), 3);
    assert_eq!(h.ports[0].role, wire::dist::PortRole::Internal);
    assert_eq!((h.ports[1].vlan, h.ports[1].addr), (10, ip("10.1.0.1")));
    assert!(h.addrs6.is_empty(), "no IPv6: {:?}", h.addrs6);
    // DIST accepted untagged on the internal port, refused on a sub-interface (from outside).
    let mut d = hello.clone();
    assert_eq!(run(&mut f, now, 0, d.clone()), vec![]);
    assert_eq!(f.counters.events(Event::DistReceived), 1);
    ethernet::push_vlan(&mut d, 10);
    run(&mut f, now, 0, d);
    assert_eq!(f.counters.drops(Drop::DistNotInternal), 1);
    // An ordinary forwarder takes no DIST at all.
    let (mut r, now) = router();
    let mut h = hello.clone();
    h[0..6].copy_from_slice(&R0.0);
    run(&mut r, now, 0, h);
    assert_eq!(r.counters.drops(Drop::DistNotInternal), 1);
}

/// A back-end with IPv6 lists its sub-interfaces' global IPv6 addresses in its hellos,
/// by port (not the link-local ones every interface has).
#[test]
fn backend_hellos_list_its_ipv6_addresses() {
    let (mut f, now) = backend();
    let a: std::net::Ipv6Addr = "2001:db8:2::1".parse().unwrap();
    f.enable_ipv6(vec![vec![], vec![], vec![(a, 64)]]);
    let mut tx = TxQueues::new(1);
    f.poll(now, &mut tx);
    let sent = tx.drain_all();
    let e = ethernet::Frame::new_checked(&sent[0].1.data[..]).unwrap();
    let r = wire::dist::Repr::parse(e.payload()).unwrap();
    let wire::dist::Message::Hello(h) = r.msg else {
        panic!("not a hello: {r:?}")
    };
    assert_eq!(
        h.addrs6,
        vec![wire::dist::HelloAddr6 {
            port: 2,
            addr: a,
            prefix_len: 64,
        }]
    );
}

/// A back-end of two workers: the second hands the DIST frames it receives to the first,
/// which passes routes to the writer; only the first sends hellos, and they carry the
/// traffic of both.
#[test]
fn backend_workers_hand_dist_to_the_first() {
    let (f, now) = backend();
    let mut ws = vec![f];
    ws.push(ws[0].worker(now));
    Forwarder::connect_workers(&mut ws);
    let (to_writer, writer_rx) = std::sync::mpsc::sync_channel(8);
    let (_tx, from_writer) = std::sync::mpsc::channel();
    let (_tx6, routes6) = std::sync::mpsc::channel();
    ws[0].set_fib_link(FibLink {
        to_writer,
        from_writer,
        routes6,
        table: Default::default(),
    });
    let (a, b) = ws.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    let batch = wire::dist::RouteBatch {
        epoch: 1,
        version: 1,
        base: 0,
        snapshot: true,
        last: true,
        routes: Vec::new(),
    };
    let ctl = MacAddr([2, 0, 0, 0, 0, 0xc1]);
    let frame = wire::dist::Repr {
        seq: 1,
        msg: wire::dist::Message::Routes(batch.clone()),
    }
    .to_frame(ctl, R0)
    .unwrap();
    // The second worker takes a frame to forward (it asks for the next hop) and the routes
    // message.
    assert_eq!(
        run(b, now, 0, tagged(udp_frame(Udp::default()), 10)).len(),
        1
    );
    assert!(run(b, now, 0, frame.clone()).is_empty());
    assert_eq!(b.counters.events(Event::DistHandedToLead), 1);
    assert_eq!(b.counters.events(Event::DistReceived), 0);
    assert!(
        writer_rx.try_recv().is_err(),
        "not before the first takes it"
    );
    let mut tx = TxQueues::new(1);
    a.take_news(now, &mut tx);
    assert_eq!(writer_rx.try_recv().unwrap(), (ctl, batch));
    assert_eq!(a.counters.events(Event::DistRoutesReceived), 1);
    // Hellos: the first worker's, with both workers' frames; none from the second.
    b.poll(now, &mut tx);
    assert!(
        tx.drain_all().is_empty(),
        "the second worker sends no hello"
    );
    a.poll(now, &mut tx);
    let sent = tx.drain_all();
    assert_eq!(sent.len(), 1);
    let e = ethernet::Frame::new_checked(&sent[0].1.data[..]).unwrap();
    let wire::dist::Message::Hello(h) = wire::dist::Repr::parse(e.payload()).unwrap().msg else {
        panic!("not a hello")
    };
    assert_eq!(h.rx_packets, 2, "the second worker's two frames");
    assert_eq!(
        a.counters.totals().0,
        0,
        "the first received nothing itself"
    );
}

/// A star of two forwarders: A (10.1.0.0/24 on port 0) and B (10.2.0.0/24 on port 0),
/// internal ports 1. A looks the packet up, decrements the TTL and hands it to B with a
/// star header; B sends it out of the port the header names, to the neighbour it names,
/// without a lookup and without touching the TTL.
#[test]
fn star_members_look_up_once() {
    let now = Instant::now();
    let (ma, mb) = (MacAddr([2, 0, 0, 0, 5, 1]), MacAddr([2, 0, 0, 0, 5, 2]));
    let members = [
        (Prefix::parse_strict("10.1.0.0/24").unwrap(), ma, 0),
        (Prefix::parse_strict("10.2.0.0/24").unwrap(), mb, 0),
    ];
    let mk = |ext: &str, int: &str, mac| {
        let ifaces = vec![
            Iface::new("ext", R0, ip(ext), 24),
            Iface::new("int", mac, ip(int), 24),
        ];
        let mut f = Forwarder::new(ifaces, ForwarderConfig::default(), now);
        f.set_star(1, &members);
        f
    };
    let mut a = mk("10.1.0.1", "10.255.1.1", ma);
    let mut b = mk("10.2.0.1", "10.255.1.2", mb);
    b.neighbours.learn(0, ip("10.2.0.20"), H2, now, true);
    // The gateway of a route may be on another member's network.
    a.add_route(
        Prefix::parse_strict("198.51.100.0/24").unwrap(),
        ip("10.2.0.20"),
    )
    .unwrap();
    for dst in ["10.2.0.20", "198.51.100.7"] {
        let out = run(
            &mut a,
            now,
            0,
            udp_frame(Udp {
                dst,
                ..Default::default()
            }),
        );
        assert_eq!(out.len(), 1, "{dst}");
        let (port, f) = &out[0];
        let eth = ethernet::Frame::new_checked(&f[..]).unwrap();
        assert_eq!(
            (*port, eth.dst(), eth.src(), eth.ethertype()),
            (1, mb, ma, wire::star::ETHERTYPE)
        );
        let h = wire::star::Header::parse(&f[ETH..]).unwrap();
        assert_eq!(
            (h.port, h.next_hop, h.ingress),
            (0, ip("10.2.0.20"), ip("10.1.0.1"))
        );
        let inner = ipv4::Packet::new_checked(&f[ETH + wire::star::HEADER_LEN..]).unwrap();
        assert_eq!(inner.ttl(), 63);
        let out = run(&mut b, now, 1, f.clone());
        assert_eq!(out.len(), 1, "{dst}");
        let (port, f) = &out[0];
        let eth = ethernet::Frame::new_checked(&f[..]).unwrap();
        assert_eq!(
            (*port, eth.dst(), eth.ethertype()),
            (0, H2, ethertype::IPV4)
        );
        let p = ip_of(f);
        assert_eq!((p.ttl(), p.dst()), (63, ip(dst)));
        assert!(p.verify_checksum());
    }
    assert_eq!(
        b.counters.events(Event::Forwarded),
        0,
        "no second lookup at B"
    );
    assert_eq!(b.counters.events(Event::StarReceived), 2);
    // A star frame on an external port, or naming the internal port, is refused.
    let mut f = vec![0u8; ETH + wire::star::HEADER_LEN + 20];
    ethernet::Repr {
        dst: R0,
        src: ma,
        vlan: None,
        ethertype: wire::star::ETHERTYPE,
    }
    .emit(&mut f)
    .unwrap();
    assert!(run(&mut b, now, 0, f).is_empty());
    assert_eq!(b.counters.drops(Drop::StarNotInternal), 1);
}

/// `frame` (Ethernet + IPv4) with `opts` (a multiple of 4 bytes) added to its IP header.
fn with_ip_options(frame: &[u8], opts: &[u8]) -> Vec<u8> {
    let mut f = frame[..ETH + 20].to_vec();
    f.extend_from_slice(opts);
    f.extend_from_slice(&frame[ETH + 20..]);
    let total = u16::from_be_bytes([f[ETH + 2], f[ETH + 3]]) as usize + opts.len();
    f[ETH + 2..ETH + 4].copy_from_slice(&(total as u16).to_be_bytes());
    f[ETH] = 0x40 | ((20 + opts.len()) / 4) as u8;
    let mut p = ipv4::Packet::new_checked(&mut f[ETH..]).unwrap();
    p.fill_checksum();
    f
}

/// Record Route gets the address of the interface the packet leaves by (RFC 1812
/// 5.3.13.3), Timestamp the address and the time; the checksum is right after both and
/// the TTL decrement; a Timestamp whose overflow count overflows is a parameter problem.
#[test]
fn record_route_and_timestamp_are_filled_in() {
    let (mut f, now) = router();
    let opts = [
        7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0, // record route, room for two
        68, 12, 5, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, // timestamp with addresses, room for one
        0, // end
    ];
    let frame = with_ip_options(&udp_frame(Udp::default()), &opts);
    let out = run(&mut f, now, 0, frame);
    assert_eq!(out.len(), 1);
    let p = ip_of(&out[0].1);
    assert!(p.verify_checksum());
    assert_eq!(p.ttl(), 63);
    let o = p.options();
    assert_eq!(&o[..11], &[7, 11, 8, 10, 2, 0, 1, 0, 0, 0, 0]);
    assert_eq!(&o[11..19], &[68, 12, 13, 0x01, 10, 2, 0, 1]);
    assert_eq!(f.counters.events(Event::OptionsUpdated), 1);
    let frame = with_ip_options(&udp_frame(Udp::default()), &[68, 4, 5, 0xf0]);
    let out = run(&mut f, now, 0, frame);
    assert_eq!(out.len(), 1, "the parameter problem");
    assert_eq!(icmp_of(&out[0].1).0, icmp::kind::PARAM_PROBLEM);
    assert_eq!(f.counters.drops(Drop::Ip4BadOptions), 1);
}

/// An echo request to the router in two fragments (ping -s 2000): held, reassembled,
/// answered (the reply fragmented to the port's MTU); a fragment overlapping one held
/// drops its datagram; a datagram never completed is dropped when its time is up.
#[test]
fn fragments_to_the_router_are_reassembled() {
    let (mut f, now) = router();
    let data: Vec<u8> = (0..2000).map(|i| i as u8).collect();
    let icmp_len = icmp::HEADER_LEN + data.len();
    let mut whole = vec![0u8; 20 + icmp_len];
    ipv4::Repr {
        src: ip("10.1.0.10"),
        dst: ip("10.1.0.1"),
        protocol: protocol::ICMP,
        ttl: 64,
        tos: 0,
        ident: 0x4242,
        dont_frag: false,
        more_frags: false,
        frag_offset: 0,
        payload_len: icmp_len,
    }
    .emit(&mut whole)
    .unwrap();
    icmp::Repr::EchoRequest {
        ident: 9,
        seq: 1,
        data: &data,
    }
    .emit(&mut whole[20..])
    .unwrap();
    let mut frames = Vec::new();
    crate::frag::fragment(&whole, 1500, |h, d| {
        let mut fr = vec![0u8; ETH];
        ethernet::Repr {
            dst: R0,
            src: H1,
            vlan: None,
            ethertype: ethertype::IPV4,
        }
        .emit(&mut fr)
        .unwrap();
        fr.extend_from_slice(h);
        fr.extend_from_slice(d);
        frames.push(fr);
    })
    .unwrap();
    assert_eq!(frames.len(), 2);
    // Out of order, with a duplicate on the way.
    assert!(run(&mut f, now, 0, frames[1].clone()).is_empty());
    assert!(run(&mut f, now, 0, frames[1].clone()).is_empty());
    let out = run(&mut f, now, 0, frames[0].clone());
    assert_eq!(out.len(), 2, "the reply, in two fragments");
    let mut reply = Vec::new();
    for (port, fr) in &out {
        assert_eq!(*port, 0);
        let p = ip_of(fr);
        assert!(p.verify_checksum());
        assert_eq!((p.src(), p.dst()), (ip("10.1.0.1"), ip("10.1.0.10")));
        reply.extend_from_slice(p.payload());
    }
    let i = icmp::Packet::new_checked(&reply[..]).unwrap();
    assert!(i.verify_checksum());
    assert_eq!((i.msg_type(), i.echo_ident(), i.data()), (0, 9, &data[..]));
    assert_eq!(f.counters.events(Event::Reassembled), 1);
    assert_eq!(f.counters.drops(Drop::ReasmDuplicate), 1);
    // An overlapping fragment drops the datagram (both fragments counted).
    assert!(run(&mut f, now, 0, frames[0].clone()).is_empty());
    let mut over = frames[1].clone();
    let off = (1480 - 8) / 8; // 8 bytes into the first fragment's data
    over[ETH + 6..ETH + 8].copy_from_slice(&(off as u16).to_be_bytes());
    let mut p = ipv4::Packet::new_checked(&mut over[ETH..]).unwrap();
    p.fill_checksum();
    assert!(run(&mut f, now, 0, over).is_empty());
    assert_eq!(f.counters.drops(Drop::ReasmOverlap), 2);
    // Never completed: dropped after the timeout, and the sender told (time exceeded,
    // fragment reassembly, from the address it pinged).
    assert!(run(&mut f, now, 0, frames[0].clone()).is_empty());
    let mut tx = TxQueues::new(2);
    f.poll(now + Duration::from_secs(31), &mut tx);
    assert_eq!(f.counters.drops(Drop::ReasmTimeout), 1);
    let out: Vec<(u16, Vec<u8>)> = tx
        .drain_all()
        .into_iter()
        .map(|(port, p)| (port, p.data.to_vec()))
        // (An ARP probe for the host, whose entry is 30 s old, goes out too.)
        .filter(|(_, d)| {
            ethernet::Frame::new_checked(&d[..]).unwrap().ethertype() == ethertype::IPV4
        })
        .collect();
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(
        icmp_of(&out[0].1),
        (
            icmp::kind::TIME_EXCEEDED,
            1,
            ip("10.1.0.1"),
            ip("10.1.0.10")
        )
    );
}

mod ipv6_path {
    //! The IPv6 path: neighbour discovery both ways, forwarding with one hop-limit
    //! decrement, the ICMPv6 errors and echo.
    use super::*;
    use std::net::Ipv6Addr;
    use wire::icmpv6::{self, NdOptions};
    use wire::ipv6;

    fn a6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    /// Port 0: 2001:db8:1::1/64 (host 2001:db8:1::10 at H1); port 1: 2001:db8:2::1/64,
    /// MTU 1000 (host 2001:db8:2::20 at H2; gateway 2001:db8:2::2 for 2001:db8:3::/48).
    fn router6() -> (Forwarder, Instant) {
        let (mut f, now) = router();
        f.enable_ipv6(vec![
            vec![(a6("2001:db8:1::1"), 64)],
            vec![(a6("2001:db8:2::1"), 64)],
        ]);
        f.add_route6(
            fib::Prefix6::parse_strict("2001:db8:3::/48").unwrap(),
            &[a6("2001:db8:2::2")],
        )
        .unwrap();
        assert!(f
            .add_route6(
                fib::Prefix6::parse_strict("2001:db8:4::/48").unwrap(),
                &[a6("2001:db8:9::1")]
            )
            .is_err());
        (f, now)
    }

    /// The star router over IPv6: member A looks a packet up once (hop limit 63) and hands
    /// it across the switch with an IPv6 star header to member B, which faces the next hop
    /// (a host on its network, or the gateway of a route on it) and sends it on without a
    /// lookup, after resolving the neighbour; a packet too big for B's port gets packet too
    /// big from the address where it entered (A's).
    #[test]
    fn star_members_look_ipv6_up_once() {
        let now = Instant::now();
        let (ma, mb) = (MacAddr([2, 0, 0, 0, 5, 1]), MacAddr([2, 0, 0, 0, 5, 2]));
        let members6 = [
            (
                fib::Prefix6::parse_strict("2001:db8:1::/64").unwrap(),
                ma,
                0,
            ),
            (
                fib::Prefix6::parse_strict("2001:db8:2::/64").unwrap(),
                mb,
                0,
            ),
        ];
        let mk = |ext: &str, int: &str, mac, mtu: usize| {
            let mut e = Iface::new("ext", R0, ip("10.9.0.1"), 24);
            e.mtu = mtu;
            let ifaces = vec![e, Iface::new("int", mac, ip(int), 24)];
            let mut f = Forwarder::new(ifaces, ForwarderConfig::default(), now);
            f.set_star(1, &[]);
            f.enable_ipv6(vec![vec![(a6(ext), 64)], vec![]]);
            f.set_star6(&members6);
            f.replace_routes6(vec![]).unwrap();
            f
        };
        let mut a = mk("2001:db8:1::1", "10.255.1.1", ma, 1500);
        let mut b = mk("2001:db8:2::1", "10.255.1.2", mb, 1280);
        // A route through a gateway on B's network.
        a.add_route6(
            fib::Prefix6::parse_strict("2001:db8:77::/48").unwrap(),
            &[a6("2001:db8:2::20")],
        )
        .unwrap();
        for (dst, n) in [("2001:db8:2::20", 1), ("2001:db8:77::5", 2)] {
            let pkt = frame6(H1, R0, "2001:db8:1::10", dst, 64, None, 100);
            let out = run(&mut a, now, 0, pkt.clone());
            assert_eq!(out.len(), 1, "{dst}");
            let (port, f) = &out[0];
            let eth = ethernet::Frame::new_checked(&f[..]).unwrap();
            assert_eq!(
                (*port, eth.dst(), eth.src(), eth.ethertype()),
                (1, mb, ma, wire::star::ETHERTYPE)
            );
            let h = wire::star::Header6::parse(&f[ETH..]).unwrap();
            assert_eq!(
                (h.port, h.next_hop, h.ingress),
                (0, a6("2001:db8:2::20"), a6("2001:db8:1::1"))
            );
            let inner = &f[ETH + wire::star::HEADER6_LEN..];
            assert_eq!(inner[7], 63, "one decrement, at A");
            let out = run(&mut b, now, 1, f.clone());
            assert_eq!(out.len(), 1, "{dst}");
            if n == 1 {
                // B resolves the next hop first (the packet waits)...
                let (ip6, r) = icmp6(&out[0].1);
                assert_eq!(ip6.src(), a6("2001:db8:2::1"));
                assert!(
                    matches!(r, icmpv6::Repr::NeighborSolicit { target, .. } if target == a6("2001:db8:2::20"))
                );
                let na = na("2001:db8:2::20", H2);
                let out = run(
                    &mut b,
                    now,
                    0,
                    frame6(H2, R0, "2001:db8:2::20", "2001:db8:2::1", 255, Some(&na), 0),
                );
                assert_eq!(out.len(), 1);
                let (port, fwd) = &out[0];
                assert_eq!((*port, &fwd[..6]), (0, &H2.0[..]));
                assert_eq!(&fwd[ETH..], inner, "sent on as it came");
            } else {
                let (port, fwd) = &out[0];
                assert_eq!((*port, &fwd[..6]), (0, &H2.0[..]));
                assert_eq!(&fwd[ETH..], inner, "sent on as it came");
            }
        }
        assert_eq!(
            b.counters.events(Event::Forwarded6),
            0,
            "no second lookup at B"
        );
        assert_eq!(b.counters.events(Event::StarReceived), 2);
        assert_eq!(a.counters.events(Event::StarSent), 2);
        // Too big for B's port (1280): packet too big from A's address, sent back across.
        let big = frame6(H1, R0, "2001:db8:1::10", "2001:db8:2::20", 64, None, 1300);
        let out = run(&mut a, now, 0, big);
        let out = run(&mut b, now, 1, out[0].1.clone());
        assert_eq!(b.counters.drops(Drop::Ip6TooBig), 1);
        assert_eq!(out.len(), 1);
        let (port, f) = &out[0];
        assert_eq!(*port, 1, "back across the switch, to A");
        let h = wire::star::Header6::parse(&f[ETH..]).unwrap();
        assert_eq!(h.next_hop, a6("2001:db8:1::10"));
        let inner = ipv6::Packet::new_checked(&f[ETH + wire::star::HEADER6_LEN..]).unwrap();
        assert_eq!(inner.src(), a6("2001:db8:1::1"));
        assert_eq!(inner.next_header(), ipv6::next_header::ICMPV6);
        assert_eq!(inner.payload()[0], 2, "packet too big");
        // A malformed IPv6 star frame is counted.
        let mut f = vec![0u8; ETH + wire::star::HEADER6_LEN + 10];
        ethernet::Repr {
            dst: mb,
            src: ma,
            vlan: None,
            ethertype: wire::star::ETHERTYPE,
        }
        .emit(&mut f)
        .unwrap();
        f[ETH] = wire::star::VERSION6;
        assert!(run(&mut b, now, 1, f).is_empty());
        assert_eq!(b.counters.drops(Drop::StarMalformed), 1);
    }

    /// An Ethernet frame carrying an IPv6 packet with `next` and `upper`.
    fn frame6(
        src_mac: MacAddr,
        dst_mac: MacAddr,
        src: &str,
        dst: &str,
        hops: u8,
        msg: Option<&icmpv6::Repr>,
        udp_len: usize,
    ) -> Vec<u8> {
        let (next, len) = match msg {
            Some(m) => (ipv6::next_header::ICMPV6, m.buffer_len()),
            None => (ipv6::next_header::UDP, 8 + udp_len),
        };
        let r = ipv6::Repr {
            src: a6(src),
            dst: a6(dst),
            next_header: next,
            hop_limit: hops,
            traffic_class: 0,
            flow_label: 0,
            payload_len: len,
        };
        let mut f = vec![0u8; ETH + r.buffer_len()];
        ethernet::Repr {
            dst: dst_mac,
            src: src_mac,
            vlan: None,
            ethertype: ethertype::IPV6,
        }
        .emit(&mut f)
        .unwrap();
        r.emit(&mut f[ETH..]).unwrap();
        match msg {
            Some(m) => m.emit(&mut f[ETH + 40..], a6(src), a6(dst)).unwrap(),
            None => udp::Repr {
                src_port: 5000,
                dst_port: 53,
                payload_len: udp_len,
            }
            .emit6(&mut f[ETH + 40..], a6(src), a6(dst))
            .unwrap(),
        }
        f
    }

    fn ns(target: &str, from_mac: MacAddr) -> icmpv6::Repr<'static> {
        icmpv6::Repr::NeighborSolicit {
            target: a6(target),
            options: NdOptions {
                source_lladdr: Some(from_mac),
                ..NdOptions::default()
            },
        }
    }

    /// A solicited advertisement of `target` at `mac`.
    fn na(target: &str, mac: MacAddr) -> icmpv6::Repr<'static> {
        icmpv6::Repr::NeighborAdvert {
            router: false,
            solicited: true,
            override_: true,
            target: a6(target),
            options: NdOptions {
                target_lladdr: Some(mac),
                ..NdOptions::default()
            },
        }
    }

    /// The ICMPv6 message of an IPv6 frame, after checking its checksum.
    fn icmp6(frame: &[u8]) -> (ipv6::Packet<&[u8]>, icmpv6::Repr<'static>) {
        let e = ethernet::Frame::new_checked(frame).unwrap();
        assert_eq!(e.ethertype(), ethertype::IPV6);
        let p = ipv6::Packet::new_checked(&frame[ETH..]).unwrap();
        let u = p.upper().unwrap();
        assert_eq!(u.protocol, ipv6::next_header::ICMPV6);
        assert!(p.verify_upper_checksum(&u));
        // Leaked, so that the parsed message outlives this helper (tests only).
        let bytes: &'static [u8] = frame[ETH + u.offset..].to_vec().leak();
        let m: &'static icmpv6::Packet<&'static [u8]> =
            Box::leak(Box::new(icmpv6::Packet::new_checked(bytes).unwrap()));
        (p, icmpv6::Repr::parse(m).unwrap())
    }

    /// A back-end takes a route through a link-local next hop with its VLAN written in
    /// it (as the controller distributes OSPFv3's and BGP's): it solicits the neighbour on
    /// that VLAN's sub-interface, from its link-local address there, and forwards through
    /// it. A VLAN it does not have, or a link-local next hop with no VLAN, is skipped.
    #[test]
    fn a_link_local_next_hop_is_resolved_on_its_vlan() {
        let (mut f, now) = backend();
        f.enable_ipv6(vec![
            vec![],
            vec![(a6("2001:db8:1::1"), 64)],
            vec![(a6("2001:db8:2::1"), 64)],
        ]);
        let net = |s| fib::Prefix6::parse_strict(s).unwrap();
        let gw = ipv6::scoped_link_local(a6("fe80::b1"), 20);
        assert_eq!(
            f.apply_routes6(vec![
                (net("2001:db8:99::/48"), Some(vec![gw])),
                (
                    net("2001:db8:98::/48"),
                    Some(vec![ipv6::scoped_link_local(a6("fe80::b1"), 30)])
                ),
                (net("2001:db8:97::/48"), Some(vec![a6("fe80::b1")])),
            ]),
            (1, 2)
        );
        assert_eq!(
            f.route6(a6("2001:db8:99::1")),
            Some(Hop6 {
                iface: 2,
                via: Some(a6("fe80::b1"))
            })
        );
        assert_eq!(f.route6(a6("2001:db8:98::1")), None);
        // A packet from VLAN 10: held while the back-end solicits fe80::b1 on VLAN 20...
        let pkt = frame6(H1, R0, "2001:db8:1::10", "2001:db8:99::1", 64, None, 40);
        let out = run(&mut f, now, 0, tagged(pkt, 10));
        assert_eq!(out.len(), 1, "{:?}", f.counters.snapshot().drops);
        let mut solicit = out[0].1.clone();
        assert_eq!(
            ethernet::Frame::new_checked(&solicit[..]).unwrap().vlan(),
            Some(20)
        );
        ethernet::pop_vlan(&mut solicit);
        let (ip, r) = icmp6(&solicit);
        assert_eq!(
            (ip.src(), ip.dst()),
            (
                ipv6::link_local_of(R0),
                ipv6::solicited_node(a6("fe80::b1"))
            )
        );
        assert!(
            matches!(r, icmpv6::Repr::NeighborSolicit { target, .. } if target == a6("fe80::b1"))
        );
        // ...and sent on VLAN 20 to its MAC, hop limit 63, once it advertises.
        let ll = ipv6::link_local_of(R0).to_string();
        let advert = frame6(H2, R0, "fe80::b1", &ll, 255, Some(&na("fe80::b1", H2)), 0);
        let out = run(&mut f, now, 0, tagged(advert, 20));
        assert_eq!(out.len(), 1, "{:?}", f.counters.snapshot().drops);
        let e = ethernet::Frame::new_checked(&out[0].1[..]).unwrap();
        assert_eq!((e.dst(), e.vlan()), (H2, Some(20)));
        let mut fwd = out[0].1.clone();
        ethernet::pop_vlan(&mut fwd);
        let p = ipv6::Packet::new_checked(&fwd[ETH..]).unwrap();
        assert_eq!((p.dst(), p.hop_limit()), (a6("2001:db8:99::1"), 63));
    }

    #[test]
    fn neighbour_discovery_forwarding_and_errors() {
        let (mut f, now) = router6();
        // H1 asks for the router's address: an advertisement answers, and H1 is learned.
        let out = run(
            &mut f,
            now,
            0,
            frame6(
                H1,
                ipv6::multicast_mac(ipv6::solicited_node(a6("2001:db8:1::1"))),
                "2001:db8:1::10",
                "ff02::1:ff00:1",
                255,
                Some(&ns("2001:db8:1::1", H1)),
                0,
            ),
        );
        assert_eq!(out.len(), 1);
        assert_eq!(&out[0].1[..6], &H1.0);
        let (ip, r) = icmp6(&out[0].1);
        assert_eq!(
            (ip.src(), ip.dst(), ip.hop_limit()),
            (a6("2001:db8:1::1"), a6("2001:db8:1::10"), 255)
        );
        match r {
            icmpv6::Repr::NeighborAdvert {
                router,
                solicited,
                target,
                options,
                ..
            } => {
                assert!(router && solicited);
                assert_eq!(target, a6("2001:db8:1::1"));
                assert_eq!(options.target_lladdr, Some(R0));
            }
            r => panic!("{r:?}"),
        }
        // A solicitation with hop limit 254 is invalid.
        let bad = frame6(
            H1,
            R0,
            "2001:db8:1::10",
            "2001:db8:1::1",
            254,
            Some(&ns("2001:db8:1::1", H1)),
            0,
        );
        assert!(run(&mut f, now, 0, bad).is_empty());
        assert_eq!(f.counters.drops(Drop::Nd6Invalid), 1);

        // A packet to H2's network: held while the router solicits H2...
        let pkt = frame6(H1, R0, "2001:db8:1::10", "2001:db8:2::20", 64, None, 40);
        let out = run(&mut f, now, 0, pkt.clone());
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, 1);
        let (ip, r) = icmp6(&out[0].1);
        assert_eq!(ip.dst(), ipv6::solicited_node(a6("2001:db8:2::20")));
        assert_eq!(ip.src(), a6("2001:db8:2::1"));
        assert!(
            matches!(r, icmpv6::Repr::NeighborSolicit { target, .. } if target == a6("2001:db8:2::20"))
        );
        // ...and sent, hop limit 63, once H2 advertises.
        let na = na("2001:db8:2::20", H2);
        let out = run(
            &mut f,
            now,
            1,
            frame6(H2, R1, "2001:db8:2::20", "2001:db8:2::1", 255, Some(&na), 0),
        );
        assert_eq!(out.len(), 1);
        let (port, fwd) = &out[0];
        assert_eq!(*port, 1);
        assert_eq!((&fwd[..6], &fwd[6..12]), (&H2.0[..], &R1.0[..]));
        assert_eq!(fwd[ETH + 7], 63);
        assert_eq!(&fwd[ETH + 8..], &pkt[ETH + 8..], "nothing else changed");
        assert_eq!(f.counters.events(Event::Forwarded6), 1);
        // Now straight through; and through the gateway route once it is resolved.
        assert_eq!(run(&mut f, now, 0, pkt.clone()).len(), 1);
        assert_eq!(
            f.neighbours6(),
            vec![(0, a6("2001:db8:1::10"), H1), (1, a6("2001:db8:2::20"), H2)]
        );

        // Hop limit 1: time exceeded from the receiving interface's address.
        let out = run(
            &mut f,
            now,
            0,
            frame6(H1, R0, "2001:db8:1::10", "2001:db8:2::20", 1, None, 40),
        );
        assert_eq!(out.len(), 1);
        let (ip, r) = icmp6(&out[0].1);
        assert_eq!(
            (ip.src(), ip.dst()),
            (a6("2001:db8:1::1"), a6("2001:db8:1::10"))
        );
        assert!(matches!(r, icmpv6::Repr::TimeExceeded { code: 0, .. }));
        assert_eq!(f.counters.drops(Drop::Ip6HopLimitExceeded), 1);
        // No route.
        let out = run(
            &mut f,
            now,
            0,
            frame6(H1, R0, "2001:db8:1::10", "2001:db8:99::1", 64, None, 40),
        );
        assert!(matches!(
            icmp6(&out[0].1).1,
            icmpv6::Repr::DstUnreachable { code: 0, .. }
        ));
        // Too big for port 1 (MTU 1000): packet too big, never fragmented.
        let out = run(
            &mut f,
            now,
            0,
            frame6(H1, R0, "2001:db8:1::10", "2001:db8:2::20", 64, None, 1200),
        );
        assert!(matches!(
            icmp6(&out[0].1).1,
            icmpv6::Repr::PacketTooBig { mtu: 1000, .. }
        ));
        assert_eq!(f.counters.drops(Drop::Ip6TooBig), 1);
        // Link-local destinations stay on their link; link-local sources get "beyond scope".
        assert!(run(
            &mut f,
            now,
            0,
            frame6(H1, R0, "2001:db8:1::10", "fe80::20", 64, None, 40)
        )
        .is_empty());
        let out = run(
            &mut f,
            now,
            0,
            frame6(H1, R0, "fe80::10", "2001:db8:2::20", 64, None, 40),
        );
        assert!(out.iter().all(|o| o.0 == 0));
        assert_eq!(f.counters.drops(Drop::Ip6BeyondScope), 2);
        // Multicast is not forwarded.
        assert!(run(
            &mut f,
            now,
            0,
            frame6(H1, R0, "2001:db8:1::10", "ff0e::1", 64, None, 40)
        )
        .is_empty());
        assert_eq!(f.counters.drops(Drop::Ip6Multicast), 1);

        // Echo to the router's other address: answered from it.
        let echo = icmpv6::Repr::EchoRequest {
            ident: 7,
            seq: 1,
            data: b"ping6",
        };
        let out = run(
            &mut f,
            now,
            0,
            frame6(
                H1,
                R0,
                "2001:db8:1::10",
                "2001:db8:2::1",
                64,
                Some(&echo),
                0,
            ),
        );
        assert_eq!(out.len(), 1);
        let (ip, r) = icmp6(&out[0].1);
        assert_eq!(
            (ip.src(), ip.dst()),
            (a6("2001:db8:2::1"), a6("2001:db8:1::10"))
        );
        assert_eq!(
            r,
            icmpv6::Repr::EchoReply {
                ident: 7,
                seq: 1,
                data: b"ping6"
            }
        );
    }

    #[test]
    fn an_unanswered_next_hop_gives_address_unreachable() {
        let (mut f, now) = router6();
        // H1 is known (it solicited the router).
        run(
            &mut f,
            now,
            0,
            frame6(
                H1,
                R0,
                "2001:db8:1::10",
                "2001:db8:1::1",
                255,
                Some(&ns("2001:db8:1::1", H1)),
                0,
            ),
        );
        let out = run(
            &mut f,
            now,
            0,
            frame6(H1, R0, "2001:db8:1::10", "2001:db8:2::77", 64, None, 40),
        );
        assert_eq!(out.len(), 1, "a solicitation");
        let mut tx = TxQueues::new(2);
        let mut t = now;
        let mut solicits = 1;
        let mut errors = Vec::new();
        for _ in 0..5 {
            t += Duration::from_millis(1100);
            f.poll(t, &mut tx);
            for (_, p) in tx.drain_all() {
                match icmp6(&p.data).1 {
                    icmpv6::Repr::NeighborSolicit { .. } => solicits += 1,
                    icmpv6::Repr::DstUnreachable { code, .. } => errors.push(code),
                    r => panic!("{r:?}"),
                }
            }
        }
        assert_eq!(solicits, 3, "max_tries solicitations");
        assert_eq!(errors, vec![icmpv6::unreachable::ADDRESS]);
        assert_eq!(f.counters.drops(Drop::Nd6Failed), 1);
    }
    /// Fragments of `frame` (an IPv6 frame without extension headers), `mtu` bytes of IPv6
    /// each at most, as frames.
    fn fragments6(frame: &[u8], mtu: usize, ident: u32) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        crate::frag::fragment6(&frame[ETH..], mtu, ident, |h, d| {
            out.push([&frame[..ETH], h, d].concat())
        })
        .unwrap();
        out
    }

    #[test]
    fn fragments_to_the_router_are_reassembled_and_bad_ones_counted() {
        use crate::reasm::{Outcome, ReasmConfig, Reassembly};
        let (mut f, now) = router6();
        run(
            &mut f,
            now,
            0,
            frame6(
                H1,
                R0,
                "2001:db8:1::10",
                "2001:db8:1::1",
                255,
                Some(&ns("2001:db8:1::1", H1)),
                0,
            ),
        );
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 13) as u8).collect();
        let echo = icmpv6::Repr::EchoRequest {
            ident: 9,
            seq: 4,
            data: &data,
        };
        let big = frame6(
            H1,
            R0,
            "2001:db8:1::10",
            "2001:db8:1::1",
            64,
            Some(&echo),
            0,
        );
        // Out of order, the first one twice: the duplicate is dropped, the datagram kept,
        // and the reply (3,048 bytes) leaves in fragments that reassemble to it.
        let frags = fragments6(&big, 1280, 0xabcd);
        assert_eq!(frags.len(), 3);
        assert!(run(&mut f, now, 0, frags[2].clone()).is_empty());
        assert!(run(&mut f, now, 0, frags[0].clone()).is_empty());
        assert!(run(&mut f, now, 0, frags[0].clone()).is_empty());
        let out = run(&mut f, now, 0, frags[1].clone());
        assert_eq!(f.counters.drops(Drop::ReasmDuplicate), 1);
        assert_eq!(f.counters.events(Event::Reassembled6), 1);
        assert_eq!(out.len(), 3, "the reply in three fragments");
        let mut r = Reassembly::new(ReasmConfig::default());
        let mut reply = None;
        for (port, fr) in &out {
            assert_eq!((*port, &fr[..6]), (0, &H1.0[..]));
            assert!(fr.len() - ETH <= 1500);
            if let Outcome::Complete(d, 3) = r.add6(&fr[ETH..], now) {
                reply = Some([&fr[..ETH], &d[..]].concat());
            }
        }
        let reply = reply.expect("the reply's fragments reassemble");
        let (ip, m) = icmp6(&reply);
        assert_eq!(
            (ip.src(), ip.dst()),
            (a6("2001:db8:1::1"), a6("2001:db8:1::10"))
        );
        assert_eq!(
            m,
            icmpv6::Repr::EchoReply {
                ident: 9,
                seq: 4,
                data: &data
            }
        );
        assert_eq!(f.counters.events(Event::Fragmented6), 3);

        // Overlapping fragments (RFC 5722): the whole packet is dropped, nothing answers.
        let frags = fragments6(&big, 1280, 2);
        let mut over = frags[1].clone();
        // The second fragment claims to start 8 bytes early.
        let w = u16::from_be_bytes([over[ETH + 42], over[ETH + 43]]) - 8;
        over[ETH + 42..ETH + 44].copy_from_slice(&w.to_be_bytes());
        assert!(run(&mut f, now, 0, frags[0].clone()).is_empty());
        assert!(run(&mut f, now, 0, over).is_empty());
        assert!(run(&mut f, now, 0, frags[2].clone()).is_empty());
        assert_eq!(f.counters.drops(Drop::ReasmOverlap), 2);

        // A fragment with M set and a length not a multiple of 8: parameter problem
        // pointing at the payload length.
        let mut odd = fragments6(&big, 1280, 3)[0].clone();
        odd.truncate(odd.len() - 4);
        let pl = (odd.len() - ETH - 40) as u16;
        odd[ETH + 4..ETH + 6].copy_from_slice(&pl.to_be_bytes());
        let out = run(&mut f, now, 0, odd);
        assert_eq!(out.len(), 1);
        match icmp6(&out[0].1).1 {
            icmpv6::Repr::ParamProblem { code, pointer, .. } => {
                assert_eq!((code, pointer), (icmpv6::param_problem::HEADER_FIELD, 4))
            }
            r => panic!("{r:?}"),
        }
        assert_eq!(f.counters.drops(Drop::ReasmMalformed), 1);

        // Never completed: after the timeout, time exceeded (reassembly) from the address
        // it was sent to, quoting the first fragment; a datagram whose first fragment never
        // came is dropped silently.
        let frags = fragments6(&big, 1280, 4);
        assert!(run(&mut f, now, 0, frags[0].clone()).is_empty());
        assert!(run(&mut f, now, 0, fragments6(&big, 1280, 5)[1].clone()).is_empty());
        let mut tx = TxQueues::new(2);
        f.poll(now + Duration::from_secs(29), &mut tx);
        assert!(tx.drain_all().is_empty());
        // H1 solicits the router again (its entry would be stale by now).
        let later = now + Duration::from_secs(30);
        let ns1 = frame6(
            H1,
            R0,
            "2001:db8:1::10",
            "2001:db8:1::1",
            255,
            Some(&ns("2001:db8:1::1", H1)),
            0,
        );
        assert_eq!(run(&mut f, later, 0, ns1).len(), 1);
        f.poll(now + Duration::from_secs(31), &mut tx);
        let out = tx.drain_all();
        assert_eq!(out.len(), 1);
        let (ip, m) = icmp6(&out[0].1.data);
        assert_eq!(
            (ip.src(), ip.dst()),
            (a6("2001:db8:1::1"), a6("2001:db8:1::10"))
        );
        match m {
            icmpv6::Repr::TimeExceeded { code, data } => {
                assert_eq!(code, icmpv6::time_exceeded::REASSEMBLY);
                assert_eq!(data, &frags[0][ETH..ETH + data.len()]);
            }
            r => panic!("{r:?}"),
        }
        // Those two, and the overlapped packet's third fragment, which came after the
        // overlap had dropped the rest and began a datagram of its own.
        assert_eq!(f.counters.drops(Drop::ReasmTimeout), 3);
    }
    #[test]
    fn ecmp_routes_spread_flows_and_keep_each_on_one_gateway() {
        let (mut f, now) = router6();
        let gws = [a6("2001:db8:2::2"), a6("2001:db8:2::3")];
        let macs = [
            MacAddr([2, 0, 0, 0, 0x22, 2]),
            MacAddr([2, 0, 0, 0, 0x22, 3]),
        ];
        f.add_route6(fib::Prefix6::parse_strict("2001:db8:5::/48").unwrap(), &gws)
            .unwrap();
        assert_eq!(f.route6_group(a6("2001:db8:5::1")).unwrap().len(), 2);
        // Both gateways announce themselves.
        for (gw, mac) in gws.iter().zip(macs) {
            let na = icmpv6::Repr::NeighborAdvert {
                router: true,
                solicited: false,
                override_: true,
                target: *gw,
                options: NdOptions {
                    target_lladdr: Some(mac),
                    ..NdOptions::default()
                },
            };
            let fr = frame6(mac, R1, &gw.to_string(), "2001:db8:2::1", 255, Some(&na), 0);
            assert!(run(&mut f, now, 1, fr).is_empty());
        }
        let mut seen = std::collections::HashMap::new();
        for port in 0..64u16 {
            let mut fr = frame6(H1, R0, "2001:db8:1::10", "2001:db8:5::9", 64, None, 20);
            fr[ETH + 40..ETH + 42].copy_from_slice(&(10_000 + port).to_be_bytes());
            for _ in 0..2 {
                let out = run(&mut f, now, 0, fr.clone());
                assert_eq!(out.len(), 1);
                assert_eq!(out[0].0, 1);
                let mac = MacAddr::from_slice(&out[0].1[..6]);
                // A flow always takes the same gateway.
                assert_eq!(*seen.entry(port).or_insert(mac), mac, "port {port}");
            }
        }
        let per: Vec<usize> = macs
            .iter()
            .map(|m| seen.values().filter(|x| *x == m).count())
            .collect();
        assert!(per.iter().all(|&n| n >= 16), "{per:?}");
        // A gateway on no connected network makes no route.
        assert!(f
            .add_route6(
                fib::Prefix6::parse_strict("2001:db8:6::/48").unwrap(),
                &[gws[0], a6("2001:db8:9::1")]
            )
            .is_err());
    }
    #[test]
    fn router_advertisements_when_turned_on() {
        let (mut f, now) = router6();
        let rs = icmpv6::Repr::RouterSolicit {
            options: NdOptions {
                source_lladdr: Some(H1),
                ..NdOptions::default()
            },
        };
        let solicit = |f: &mut Forwarder, at: Instant, port: u16| {
            let fr = frame6(
                H1,
                ipv6::multicast_mac(a6("ff02::2")),
                "fe80::1",
                "ff02::2",
                255,
                Some(&rs),
                0,
            );
            run(f, at, port, fr)
        };
        // Off by default: solicitations are counted and unanswered.
        assert!(solicit(&mut f, now, 0).is_empty());
        assert_eq!(f.counters.drops(Drop::Nd6RouterSolicitRaOff), 1);
        f.set_router_advertisements(&[true, false], now);
        let mut tx = TxQueues::new(2);
        f.poll(now, &mut tx);
        let out = tx.drain_all();
        assert_eq!(out.len(), 1, "one advertisement, on port 0 only");
        assert_eq!(out[0].0, 0);
        let (ip, m) = icmp6(&out[0].1.data);
        assert_eq!(
            (ip.src(), ip.dst(), ip.hop_limit()),
            (ipv6::link_local_of(R0), a6("ff02::1"), 255)
        );
        match m {
            icmpv6::Repr::RouterAdvert {
                router_lifetime,
                options,
                ..
            } => {
                assert_eq!(router_lifetime, 1800);
                assert_eq!(options.source_lladdr, Some(R0));
                let p = options.prefix.unwrap();
                assert_eq!(
                    (p.prefix, p.len, p.on_link, p.autonomous),
                    (a6("2001:db8:1::"), 64, true, true)
                );
            }
            r => panic!("{r:?}"),
        }
        // A solicitation 1 s later waits until 3 s have passed since the last one.
        assert!(solicit(&mut f, now + Duration::from_secs(1), 0).is_empty());
        f.poll(now + Duration::from_secs(2), &mut tx);
        assert!(tx.drain_all().is_empty());
        f.poll(now + Duration::from_secs(3), &mut tx);
        assert_eq!(tx.drain_all().len(), 1);
        // Later ones are answered at once; port 1 still has them off.
        assert_eq!(solicit(&mut f, now + Duration::from_secs(10), 0).len(), 1);
        assert!(solicit(&mut f, now + Duration::from_secs(10), 1).is_empty());
        assert_eq!(f.counters.drops(Drop::Nd6RouterSolicitRaOff), 2);
        // Three sent: the next comes 200 s after the last (16 s apart before that).
        f.poll(now + Duration::from_secs(26), &mut tx);
        f.poll(now + Duration::from_secs(209), &mut tx);
        assert!(tx.drain_all().is_empty());
        f.poll(now + Duration::from_secs(210), &mut tx);
        assert_eq!(tx.drain_all().len(), 1);
        assert_eq!(f.counters.events(Event::Nd6RouterAdvertsSent), 4);
    }
    /// Workers: a sibling reads the first worker's IPv6 table and groups, and learns the
    /// neighbours it learns, so it forwards without soliciting again.
    #[test]
    fn a_sibling_worker_shares_routes_and_neighbours() {
        let (f0, now) = router6();
        let f1 = f0.worker(now);
        let mut w = vec![f0, f1];
        Forwarder::connect_workers(&mut w);
        let gws = [a6("2001:db8:2::2"), a6("2001:db8:2::3")];
        w[0].add_route6(fib::Prefix6::parse_strict("2001:db8:5::/48").unwrap(), &gws)
            .unwrap();
        assert_eq!(w[1].route6_group(a6("2001:db8:5::1")).unwrap().len(), 2);
        for (i, gw) in gws.iter().enumerate() {
            let na = icmpv6::Repr::NeighborAdvert {
                router: true,
                solicited: false,
                override_: true,
                target: *gw,
                options: NdOptions {
                    target_lladdr: Some(MacAddr([2, 0, 0, 0, 0x22, i as u8])),
                    ..NdOptions::default()
                },
            };
            let fr = frame6(H2, R1, &gw.to_string(), "2001:db8:2::1", 255, Some(&na), 0);
            assert!(run(&mut w[0], now, 1, fr).is_empty());
        }
        let mut tx = TxQueues::new(2);
        w[1].take_news(now, &mut tx);
        assert!(tx.drain_all().is_empty());
        // Worker 1 forwards at once, to one of the two gateways, without a solicitation.
        let fr = frame6(H1, R0, "2001:db8:1::10", "2001:db8:5::9", 64, None, 20);
        let out = run(&mut w[1], now, 0, fr);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, 1);
        assert_eq!(&out[0].1[..5], &[2, 0, 0, 0, 0x22]);
        assert_eq!(w[1].counters.events(Event::Nd6SolicitsSent), 0);
        assert_eq!(w[1].counters.events(Event::Forwarded6), 1);
        // Routes are the first worker's to change.
        assert!(w[1]
            .add_route6(
                fib::Prefix6::parse_strict("2001:db8:7::/48").unwrap(),
                &gws[..1]
            )
            .is_err());
    }
}

/// A route's gateway is resolved before traffic needs it: the first poll after a table is
/// published asks for each gateway the neighbour table lacks, once (retries as for any
/// request); answered, the first packet to it leaves at once, queued behind nothing.
#[test]
fn gateways_are_resolved_before_traffic_needs_them() {
    let (mut f, now) = router();
    f.add_route(Prefix::parse_strict("10.4.0.0/16").unwrap(), ip("10.2.0.3"))
        .unwrap();
    let mut tx = TxQueues::new(2);
    f.poll(now, &mut tx);
    let sent = tx.drain_all();
    assert_eq!(sent.len(), 1, "one request, for the one gateway not known");
    let (port, fr) = &sent[0];
    assert_eq!(*port, 1);
    assert_eq!(&fr.data[12..14], &[0x08, 0x06]);
    assert_eq!(&fr.data[ETH + 24..ETH + 28], &[10, 2, 0, 3]);
    f.poll(now + Duration::from_millis(50), &mut tx);
    assert!(
        tx.drain_all().is_empty(),
        "asked again before its retry time"
    );
    let out = run(&mut f, now, 1, arp_reply_to_r1(H2, ip("10.2.0.3")));
    assert!(out.is_empty());
    let out = run(
        &mut f,
        now,
        0,
        udp_frame(Udp {
            dst: "10.4.0.9",
            ..Default::default()
        }),
    );
    assert_eq!(out.len(), 1, "not forwarded at once: {out:?}");
    assert_eq!(f.counters.events(Event::ArpQueued), 0);
}

mod filters;

/// Flow sampling (docs/flows.md) at 1 in 1: what is forwarded says its egress and next
/// hop; what the router drops for a TTL or for want of a route says why, with no egress.
#[test]
fn samples_say_what_became_of_each_packet() {
    use crate::flows::{Sampler, SamplerShare};
    use std::sync::atomic::Ordering::Relaxed;
    let (mut f, now) = router();
    let share = std::sync::Arc::new(SamplerShare::default());
    share.interval.store(1, Relaxed);
    let (tx, rx) = std::sync::mpsc::sync_channel(16);
    f.set_sampler(Some(Sampler::new(share, tx, 3)));
    run(&mut f, now, 0, udp_frame(Udp::default()));
    run(
        &mut f,
        now,
        0,
        udp_frame(Udp {
            ttl: 1,
            ..Udp::default()
        }),
    );
    run(
        &mut f,
        now,
        0,
        udp_frame(Udp {
            dst: "192.0.2.1",
            ..Udp::default()
        }),
    );
    let got: Vec<_> = rx.try_iter().collect();
    assert_eq!(got.len(), 3, "{got:?}");
    let st = |s: &crate::flows::Sample| (s.status, s.egress, s.next_hop);
    assert_eq!(
        st(&got[0]),
        (
            wire::ipfix::status::FORWARDED,
            Some(1),
            Some(ip("10.2.0.20").into())
        )
    );
    assert_eq!(
        st(&got[1]),
        (wire::ipfix::status::DROPPED_BAD_TTL, None, None)
    );
    assert_eq!(
        st(&got[2]),
        (wire::ipfix::status::DROPPED_UNROUTABLE, None, None)
    );
    // The packet's bytes as its header says, with an Ethernet header.
    assert_eq!(got[0].bytes, 14 + 20 + 8 + 32);
    assert_eq!((got[0].ingress, got[0].key.ports), (0, Some((5000, 1234))));
}
