//! Golden tests of the LB: one per classifier rule and module, DIST, failover, ordering.

use super::*;
use wire::frame::UdpFrame;

const EXT: MacAddr = MacAddr([2, 0, 0, 0, 0xe0, 1]);
const INT: MacAddr = MacAddr([2, 0, 0, 0, 0xe1, 1]);
const HOST: MacAddr = MacAddr([2, 0, 0, 0, 0x10, 1]);
const CP: MacAddr = MacAddr([2, 0, 0, 0, 0xcc, 1]);

fn be(i: u8) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0xbe, i])
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

/// Port 0: external, 10.1.0.1/24, VLAN 10. Port 1: internal. Back-ends 1, 2, 3 with weights
/// 1:2:1.
fn lb(mode: Mode) -> (Balancer, Instant) {
    let now = Instant::now();
    let ports = vec![
        LbPort {
            name: "ext".into(),
            mac: EXT,
            role: PortRole::External,
            vlan: 10,
            addr: ip("10.1.0.1"),
            prefix_len: 24,
            addrs6: vec![("2001:db8:1::1".parse().unwrap(), 64)],
            speed_mbps: 0,
        },
        LbPort {
            name: "int".into(),
            mac: INT,
            role: PortRole::Internal,
            vlan: 0,
            addr: Ipv4Addr::UNSPECIFIED,
            prefix_len: 0,
            addrs6: Vec::new(),
            speed_mbps: 0,
        },
    ];
    let cfg = BalancerConfig {
        mode,
        virtual_cp: Some((CP, 1)),
        ..Default::default()
    };
    let mut b = Balancer::new(ports, cfg, now);
    b.set_backends(&[(be(1), 1, 1), (be(2), 1, 2), (be(3), 1, 1)], false, now);
    (b, now)
}

fn run(b: &mut Balancer, now: Instant, port: u16, frame: Vec<u8>) -> Vec<(u16, Vec<u8>)> {
    let mut tx = TxQueues::new(b.ports.len());
    let mut p = Pkt::from_bytes(&frame);
    p.meta.rx_port = port;
    b.process(p, now, &mut tx);
    frames(&mut tx)
}

fn udp(src_port: u16, dst_port: u16) -> Vec<u8> {
    UdpFrame {
        eth_dst: EXT,
        eth_src: HOST,
        src: ip("10.1.0.10"),
        dst: ip("10.2.0.10"),
        src_port,
        dst_port,
        ttl: 64,
        payload: &[0; 18],
        ..Default::default()
    }
    .to_vec()
}

fn arp_frame(op: arp::Operation, dst: MacAddr, sender: (MacAddr, &str), target: &str) -> Vec<u8> {
    let mut f = vec![0; ETH + arp::PACKET_LEN];
    ethernet::Repr {
        dst,
        src: sender.0,
        vlan: None,
        ethertype: ethertype::ARP,
    }
    .emit(&mut f)
    .unwrap();
    arp::Repr {
        operation: op,
        sender_mac: sender.0,
        sender_ip: ip(sender.1),
        target_mac: if op == arp::Operation::Reply {
            dst
        } else {
            MacAddr::ZERO
        },
        target_ip: ip(target),
    }
    .emit(&mut f[ETH..])
    .unwrap();
    f
}

fn tag(mut f: Vec<u8>, vid: u16) -> Vec<u8> {
    ethernet::push_vlan(&mut f, vid);
    f
}

fn eth(f: &[u8]) -> ethernet::Frame<&[u8]> {
    ethernet::Frame::new_checked(f).unwrap()
}

#[test]
fn rules_are_ordered_most_specific_first() {
    let rules = order_rules(default_rules());
    let spec: Vec<usize> = rules.iter().map(|r| r.specificity()).collect();
    assert!(spec.windows(2).all(|w| w[0] >= w[1]), "{spec:?}");
    // A catch-all listed first still loses to a more specific rule.
    let mut rs = vec![Rule {
        name: "all-ext".into(),
        from: PortRole::External,
        ethertype: None,
        arp_op: None,
        protocol: None,
        icmp6_type: None,
        port: None,
        to_router: None,
        action: Action::Drop,
    }];
    rs.extend(default_rules());
    let (mut b, now) = lb(Mode::Maglev);
    b.cfg.rules = order_rules(rs);
    assert_eq!(run(&mut b, now, 0, udp(5000, 80)).len(), 1);
    // ... and catches what nothing else does (LLDP here).
    let mut lldp = udp(5000, 80);
    lldp[12..14].copy_from_slice(&[0x88, 0xcc]);
    assert!(run(&mut b, now, 0, lldp).is_empty());
    assert_eq!(b.counters.drops(Drop::ClassifyNoRule), 1);
}

#[test]
fn balance_sends_data_to_a_backend_tagged_with_the_port_vlan() {
    let (mut b, now) = lb(Mode::Maglev);
    let f = udp(5000, 80);
    let out = run(&mut b, now, 0, f.clone());
    assert_eq!(out.len(), 1);
    let (port, o) = &out[0];
    assert_eq!(*port, 1);
    let e = eth(o);
    assert!([be(1), be(2), be(3)].contains(&e.dst()));
    assert_eq!(
        (e.src(), e.vlan(), e.ethertype()),
        (HOST, Some(10), ethertype::IPV4)
    );
    // The IP packet is untouched: the back-end decrements the TTL, once per trip.
    assert_eq!(e.payload(), &f[ETH..]);
    assert_eq!(b.counters.events(Event::Balanced), 1);
    // Unicast to another MAC, broadcast IP data: dropped and counted.
    let mut other = f.clone();
    other[0..6].copy_from_slice(&be(9).0);
    assert!(run(&mut b, now, 0, other).is_empty());
    assert_eq!(b.counters.drops(Drop::NotOurMac), 1);
    let mut bc = f;
    bc[0..6].copy_from_slice(&MacAddr::BROADCAST.0);
    assert!(run(&mut b, now, 0, bc).is_empty());
    assert_eq!(b.counters.drops(Drop::BalanceIp4Broadcast), 1);
    // Tagged frames from outside.
    assert!(run(&mut b, now, 0, tag(udp(5000, 80), 10)).is_empty());
    assert_eq!(b.counters.drops(Drop::VlanNotConfigured), 1);
    // No live back-end.
    b.set_backends(&[], true, now);
    assert!(run(&mut b, now, 0, udp(1, 2)).is_empty());
    assert_eq!(b.counters.drops(Drop::BalanceNoBackend), 1);
}

#[test]
fn external_arp_answers_for_the_router_address_only() {
    let (mut b, now) = lb(Mode::Maglev);
    let req = arp_frame(
        arp::Operation::Request,
        MacAddr::BROADCAST,
        (HOST, "10.1.0.10"),
        "10.1.0.1",
    );
    let out = run(&mut b, now, 0, req);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, 0);
    let r = arp::Repr::parse(&arp::Packet::new_checked(&out[0].1[ETH..]).unwrap());
    assert_eq!(r.operation, arp::Operation::Reply);
    assert_eq!(
        (r.sender_mac, r.sender_ip, r.target_mac),
        (EXT, ip("10.1.0.1"), HOST)
    );
    let other = arp_frame(
        arp::Operation::Request,
        MacAddr::BROADCAST,
        (HOST, "10.1.0.10"),
        "10.1.0.77",
    );
    assert!(run(&mut b, now, 0, other).is_empty());
    assert_eq!(b.counters.drops(Drop::ExtArpNotForUs), 1);
}

#[test]
fn internal_arp_both_ways() {
    let (mut b, now) = lb(Mode::Maglev);
    // A back-end's request (tagged VLAN 10) leaves untagged with our external MAC.
    let req = tag(
        arp_frame(
            arp::Operation::Request,
            MacAddr::BROADCAST,
            (be(2), "10.1.0.1"),
            "10.1.0.10",
        ),
        10,
    );
    let out = run(&mut b, now, 1, req);
    assert_eq!(out.len(), 1);
    let (port, o) = &out[0];
    assert_eq!(*port, 0);
    let e = eth(o);
    assert_eq!((e.src(), e.vlan()), (EXT, None));
    let r = arp::Repr::parse(&arp::Packet::new_checked(e.payload()).unwrap());
    assert_eq!(
        (r.sender_mac, r.sender_ip, r.target_ip),
        (EXT, ip("10.1.0.1"), ip("10.1.0.10"))
    );
    // The host's reply goes to every back-end: broadcast, tagged, on the internal port.
    let rep = arp_frame(arp::Operation::Reply, EXT, (HOST, "10.1.0.10"), "10.1.0.1");
    let out = run(&mut b, now, 0, rep);
    assert_eq!(out.len(), 1);
    let e = eth(&out[0].1);
    assert_eq!(
        (out[0].0, e.dst(), e.vlan()),
        (1, MacAddr::BROADCAST, Some(10))
    );
    assert_eq!(b.counters.events(Event::IntArpRepliesIn), 1);
    // A reply for someone else is not ours to spread.
    let rep = arp_frame(arp::Operation::Reply, EXT, (HOST, "10.1.0.10"), "10.1.0.99");
    assert!(run(&mut b, now, 0, rep).is_empty());
    assert_eq!(b.counters.drops(Drop::IntArpNotForUs), 1);
}

#[test]
fn int_to_ext_by_vlan() {
    let (mut b, now) = lb(Mode::Maglev);
    let mut f = udp(80, 5000);
    f[0..6].copy_from_slice(&HOST.0);
    f[6..12].copy_from_slice(&be(1).0);
    let out = run(&mut b, now, 1, tag(f.clone(), 10));
    assert_eq!(out.len(), 1);
    let e = eth(&out[0].1);
    assert_eq!((out[0].0, e.dst(), e.src(), e.vlan()), (0, HOST, EXT, None));
    assert_eq!(e.payload(), &f[ETH..]);
    // Another LB's VLAN, or untagged: not ours.
    assert!(run(&mut b, now, 1, tag(f.clone(), 20)).is_empty());
    assert!(run(&mut b, now, 1, f).is_empty());
    assert_eq!(b.counters.drops(Drop::ClassifyVlanUnknown), 2);
}

/// A UDP frame from the host to `dst`.
fn udp_to(dst: &str, src_port: u16, dst_port: u16) -> Vec<u8> {
    let mut f = udp(src_port, dst_port);
    f[ETH + 16..ETH + 20].copy_from_slice(&ip(dst).octets());
    f
}

#[test]
fn routing_protocols_go_to_the_virtual_cp() {
    let (mut b, now) = lb(Mode::Maglev);
    let mut ospf = udp_to("224.0.0.5", 0, 0);
    ospf[ETH + 9] = 89; // protocol OSPF; the classifier does not check the IP checksum
    ospf[0..6].copy_from_slice(&[1, 0, 0x5e, 0, 0, 5]);
    for (f, name) in [
        (ospf, "ospf"),
        (udp_to("224.0.0.9", 520, 520), "rip"),
        (udp_to("10.1.0.1", 40000, 161), "snmp"),
    ] {
        let out = run(&mut b, now, 0, f);
        assert_eq!(out.len(), 1, "{name}");
        let e = eth(&out[0].1);
        assert_eq!((out[0].0, e.dst(), e.vlan()), (1, CP, Some(10)), "{name}");
    }
    let mut bgp = udp_to("10.1.0.1", 179, 50000);
    bgp[ETH + 9] = protocol::TCP;
    assert_eq!(eth(&run(&mut b, now, 0, bgp.clone())[0].1).dst(), CP);
    assert_eq!(b.counters.events(Event::VcpRedirected), 4);
    // BGP or SNMP between outside hosts that crosses the router is data: balanced.
    let mut transit = bgp;
    transit[ETH + 16..ETH + 20].copy_from_slice(&ip("10.2.0.10").octets());
    let out = run(&mut b, now, 0, transit);
    assert!([be(1), be(2), be(3)].contains(&eth(&out[0].1).dst()));
    let out = run(&mut b, now, 0, udp(40000, 161));
    assert!([be(1), be(2), be(3)].contains(&eth(&out[0].1).dst()));
    assert_eq!(b.counters.events(Event::VcpRedirected), 4);
    b.cfg.virtual_cp = None;
    assert!(run(&mut b, now, 0, udp_to("10.1.0.1", 520, 520)).is_empty());
    assert_eq!(b.counters.drops(Drop::VcpUnknown), 1);
}

fn dist_frame(msg: dist::Message, src: MacAddr) -> Vec<u8> {
    dist::Repr { seq: 1, msg }
        .to_frame(src, MacAddr::BROADCAST)
        .unwrap()
}

/// A hello of an element of `kind` from `mac`, every 100 ms, with no ports.
fn hello_of(kind: dist::ElementKind, mac: MacAddr, priority: u8, active: bool) -> Vec<u8> {
    dist_frame(
        dist::Message::Hello(dist::Hello {
            element: kind,
            interval_ms: 100,
            rx_packets: 0,
            tx_packets: 0,
            dropped: 0,
            priority,
            active,
            ports: vec![],
            addrs6: vec![],
            state: None,
        }),
        mac,
    )
}

fn hello_from(mac: MacAddr) -> Vec<u8> {
    hello_of(dist::ElementKind::Forwarder, mac, 0, false)
}

/// The LB's hello lists the router's IPv6 addresses on its external ports, with their
/// prefix lengths, by port (the Virtual-CP gives them to its TAPs).
#[test]
fn hellos_carry_the_routers_ipv6_addresses() {
    let (mut b, _) = lb(Mode::Maglev);
    let r = b.hello();
    let f = r.to_frame(b.ports[1].mac, MacAddr::BROADCAST).unwrap();
    let Ok(dist::Repr {
        msg: dist::Message::Hello(h),
        ..
    }) = dist::Repr::parse(&f[14..])
    else {
        panic!("not a hello: {r:?}");
    };
    assert_eq!(
        h.addrs6,
        vec![dist::HelloAddr6 {
            port: 0,
            addr: "2001:db8:1::1".parse().unwrap(),
            prefix_len: 64,
        }]
    );
    assert_eq!(h.ports[0].role, PortRole::External);
}

#[test]
fn dist_is_accepted_inside_and_refused_from_outside() {
    let (mut b, now) = lb(Mode::Maglev);
    let flush = dist_frame(
        dist::Message::Balance {
            flush: true,
            entries: vec![dist::BalanceEntry {
                mac: be(7),
                port: 1,
                weight: 1,
            }],
        },
        be(9),
    );
    // Spoofed from an external port: dropped, counted, the table unchanged.
    let mut spoof = flush.clone();
    spoof[0..6].copy_from_slice(&EXT.0);
    assert!(run(&mut b, now, 0, spoof).is_empty());
    assert_eq!(b.counters.drops(Drop::DistNotInternal), 1);
    assert_eq!(b.table.entries.len(), 3);
    // From inside: applied.
    assert!(run(&mut b, now, 1, flush).is_empty());
    assert_eq!(b.counters.events(Event::DistBalanceApplied), 1);
    assert_eq!(b.table.entries.len(), 1);
    assert_eq!(eth(&run(&mut b, now, 0, udp(1, 2))[0].1).dst(), be(7));
    // A message naming an external port as the back-end's port is rejected.
    let bad = dist_frame(dist::Message::VirtualCp { mac: CP, port: 0 }, be(9));
    run(&mut b, now, 1, bad);
    assert_eq!(b.counters.drops(Drop::DistRejected), 1);
    assert!(matches!(b.log.last(), Some((_, LogEvent::Rejected { .. }))));
    // Malformed and other-version messages.
    let mut m = hello_from(be(1));
    m[ETH + 2] = 0xff;
    run(&mut b, now, 1, m);
    let mut v = hello_from(be(1));
    v[ETH] = 9;
    run(&mut b, now, 1, v);
    assert_eq!(b.counters.drops(Drop::DistMalformed), 1);
    assert_eq!(b.counters.drops(Drop::DistBadVersion), 1);
    // Port configuration: port 0 moves to VLAN 30.
    let ports = dist_frame(
        dist::Message::Ports {
            ports: vec![dist::PortConfig {
                index: 0,
                role: PortRole::External,
                vlan: 30,
                addr: ip("10.1.0.1"),
                prefix_len: 24,
            }],
        },
        be(9),
    );
    run(&mut b, now, 1, ports);
    assert_eq!(b.ports[0].vlan, 30);
    let mut f = udp(80, 5000);
    f[0..6].copy_from_slice(&HOST.0);
    assert_eq!(run(&mut b, now, 1, tag(f, 30)).len(), 1);
}

/// The time between the LB's table and its first frame (its ports opening) is not
/// counted against the back-ends: their clocks start when the LB does.
#[test]
fn backends_get_a_full_timeout_from_the_lbs_start() {
    let (mut b, t0) = lb(Mode::Maglev);
    let mut tx = TxQueues::new(2);
    let ms = Duration::from_millis;
    let start = t0 + ms(400);
    b.start_clocks(start);
    b.poll(start + ms(200), &mut tx);
    assert_eq!(b.table.live(), 3);
    assert_eq!(b.counters.events(Event::BackendDown), 0);
    // Nor does a spare wait for its peer from before its start.
    let (mut sp, t1) = spare_lb(100);
    sp.start_clocks(t1 + ms(400));
    sp.poll(t1 + ms(600), &mut tx);
    assert!(sp.standby && !sp.spare.as_ref().unwrap().active);
    sp.poll(t1 + ms(700), &mut tx);
    assert!(
        !sp.standby,
        "heard by no one for 2.5 intervals from its start"
    );
    // Without it, the same poll takes them all down.
    let (mut c, t0) = lb(Mode::Maglev);
    c.poll(t0 + ms(600), &mut tx);
    assert_eq!(c.counters.events(Event::BackendDown), 3);
}

#[test]
fn backends_leave_without_hellos_and_return_with_them() {
    let (mut b, t0) = lb(Mode::Maglev);
    let mut tx = TxQueues::new(2);
    let ms = Duration::from_millis;
    // Hellos from 1 and 3 only; 2 never speaks.
    for k in 0..10 {
        let now = t0 + ms(100 * k);
        run(&mut b, now, 1, hello_from(be(1)));
        run(&mut b, now, 1, hello_from(be(3)));
        b.poll(now, &mut tx);
    }
    assert_eq!(b.table.live(), 2);
    assert!(!b.table.entries[1].live);
    assert_eq!(b.counters.events(Event::BackendDown), 1);
    let down_at = b
        .log
        .iter()
        .find(|(_, e)| *e == LogEvent::Down(be(2)))
        .map(|(t, _)| *t)
        .unwrap();
    // Down at the first check after 2.5 intervals (250 ms): within three intervals.
    assert_eq!(down_at - t0, ms(300));
    for k in 0..1000 {
        let o = run(&mut b, t0 + ms(1000), 0, udp(k, 80));
        assert_ne!(eth(&o[0].1).dst(), be(2));
    }
    run(&mut b, t0 + ms(1000), 1, hello_from(be(2)));
    assert_eq!(b.table.live(), 3);
    assert_eq!(b.counters.events(Event::BackendUp), 1);
    // The LB's own hellos went out of the internal port, once per interval.
    let sent = tx.drain_all();
    assert_eq!(sent.len(), 10);
    let h = dist::Repr::parse(eth(&sent[0].1.data).payload()).unwrap();
    assert!(matches!(
        h.msg,
        dist::Message::Hello(dist::Hello {
            element: dist::ElementKind::Balancer,
            ..
        })
    ));
    assert_eq!(b.counters.events(Event::DistHellosSent), 10);
}

fn hello_with(
    mac: MacAddr,
    kind: dist::ElementKind,
    active: bool,
    st: Option<dist::HelloState>,
) -> Vec<u8> {
    dist_frame(
        dist::Message::Hello(dist::Hello {
            element: kind,
            interval_ms: 100,
            rx_packets: 0,
            tx_packets: 0,
            dropped: 0,
            priority: 0,
            active,
            ports: vec![],
            addrs6: vec![],
            state: st,
        }),
        mac,
    )
}

/// Under a controller (its active hello heard), a back-end whose hellos say it holds no
/// table of the controller (it started or restarted) gets no flows until they say it
/// does; a flush of the table that names it again keeps that. Without a controller
/// (a lab of static back-ends) such hellos keep a back-end live as before.
#[test]
fn backends_that_hold_no_table_get_no_flows_under_a_controller() {
    let (mut b, now) = lb(Mode::Maglev);
    let st = |incarnation, table| {
        Some(dist::HelloState {
            incarnation,
            table,
            ..Default::default()
        })
    };
    let fwd = dist::ElementKind::Forwarder;
    run(&mut b, now, 1, hello_with(be(2), fwd, false, st(7, false)));
    assert_eq!(b.table.live(), 3, "no controller: hellos alone count");
    let vcp = MacAddr([2, 0, 0, 0, 0xc, 1]);
    run(
        &mut b,
        now,
        1,
        hello_with(vcp, dist::ElementKind::Controller, true, None),
    );
    assert_eq!(b.controller, Some(vcp));
    // r2 restarted: its new process holds no table yet.
    run(&mut b, now, 1, hello_with(be(2), fwd, false, st(8, false)));
    assert_eq!(b.table.live(), 2);
    assert!(b.table.entries[1].waiting && b.table.entries[1].incarnation == 8);
    assert_eq!(b.counters.events(Event::BackendWaiting), 1);
    for k in 0..1000 {
        let o = run(&mut b, now, 0, udp(k, 80));
        assert_ne!(
            eth(&o[0].1).dst(),
            be(2),
            "a flow to a back-end with no table"
        );
    }
    // The controller's next table names it again: it stays out.
    let entries = (1..=3)
        .map(|i| dist::BalanceEntry {
            mac: be(i),
            port: 1,
            weight: 1,
        })
        .collect();
    let bal = dist_frame(
        dist::Message::Balance {
            flush: true,
            entries,
        },
        vcp,
    );
    run(&mut b, now, 1, bal);
    assert_eq!(b.table.live(), 2);
    assert!(b.balanced && b.hello_state().table);
    // Its table is in: flows again.
    run(&mut b, now, 1, hello_with(be(2), fwd, false, st(8, true)));
    assert_eq!(b.table.live(), 3);
    assert_eq!(b.counters.events(Event::BackendWaiting), 1);
    assert!((0..1000).any(|k| eth(&run(&mut b, now, 0, udp(k, 80))[0].1).dst() == be(2)));
    // The LB's hellos carry its incarnation and its table's digest.
    let h = b.hello_state();
    assert_eq!((h.incarnation, h.routes), (b.incarnation, 3));
    assert_eq!(h.digest, b.table_digest());
}

/// Packets of many flows go through the LB to three back-ends with different delays
/// (1, 3 and 2 rounds) and meet again at the egress: with hashing no flow is reordered;
/// per-packet round robin reorders.
#[test]
fn hashing_never_reorders_a_flow() {
    let modes = [
        (Mode::Maglev, false),
        (Mode::Hash, false),
        (Mode::RoundRobin, true),
    ];
    for (mode, expect_reorder) in modes {
        let (mut b, now) = lb(mode);
        let delay = |m: MacAddr| [0, 1, 3, 2][m.0[5] as usize];
        // (departure round, arrival order, flow, sequence number in the flow)
        let mut out: Vec<(usize, usize, usize, u32)> = Vec::new();
        let mut seq = vec![0u32; 64];
        for round in 0..2000 {
            for k in 0..9 {
                // Three packets of each of three flows per round, from 63 flows in turn.
                let flow = (round / 16 * 3 + k % 3) % 63;
                let o = run(&mut b, now, 0, udp(10_000 + flow as u16, 80));
                let d = delay(eth(&o[0].1).dst());
                out.push((round + d, out.len(), flow, seq[flow]));
                seq[flow] += 1;
            }
        }
        out.sort();
        let mut last = vec![None::<u32>; 64];
        let mut reordered = 0;
        for (_, _, f, s) in out {
            if last[f].is_some_and(|l| s < l) {
                reordered += 1;
            }
            last[f] = Some(s);
        }
        assert_eq!(
            reordered > 0,
            expect_reorder,
            "{mode:?}: {reordered} reordered"
        );
    }
}

mod ipv6_path {
    //! IPv6 through the LB: neighbour discovery handled as ARP is, data balanced.
    use super::*;
    use wire::icmpv6::{NdOptions, Packet as Icmp6, Repr as Nd};

    fn a6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    /// An IPv6 frame (tagged with `vlan` if any) carrying `msg`, or UDP 5000 -> 80.
    fn frame6(
        src_mac: MacAddr,
        dst_mac: MacAddr,
        vlan: Option<u16>,
        src: &str,
        dst: &str,
        msg: Option<&Nd>,
    ) -> Vec<u8> {
        let len = msg.map_or(8 + 18, |m| m.buffer_len());
        let mut f = vec![0u8; ETH + 40 + len];
        ethernet::Repr {
            dst: dst_mac,
            src: src_mac,
            vlan: None,
            ethertype: ethertype::IPV6,
        }
        .emit(&mut f)
        .unwrap();
        match msg {
            Some(m) => icmpv6::emit_packet(&mut f[ETH..], a6(src), a6(dst), 255, m).unwrap(),
            None => {
                ipv6::Repr {
                    src: a6(src),
                    dst: a6(dst),
                    next_header: ipv6::next_header::UDP,
                    hop_limit: 64,
                    traffic_class: 0,
                    flow_label: 0,
                    payload_len: len,
                }
                .emit(&mut f[ETH..])
                .unwrap();
                wire::udp::Repr {
                    src_port: 5000,
                    dst_port: 80,
                    payload_len: 18,
                }
                .emit6(&mut f[ETH + 40..], a6(src), a6(dst))
                .unwrap();
            }
        }
        if let Some(v) = vlan {
            ethernet::push_vlan(&mut f, v);
        }
        f
    }

    /// The ND message of an untagged IPv6 frame, checksum checked.
    fn nd_of(f: &[u8]) -> (ipv6::Packet<&[u8]>, Nd<'static>) {
        let p = ipv6::Packet::new_checked(&f[ETH..]).unwrap();
        let u = p.upper().unwrap();
        assert!(p.verify_upper_checksum(&u));
        let bytes: &'static [u8] = f[ETH + u.offset..].to_vec().leak();
        let m: &'static Icmp6<&'static [u8]> =
            Box::leak(Box::new(Icmp6::new_checked(bytes).unwrap()));
        (p, Nd::parse(m).unwrap())
    }

    fn ns(target: &str, mac: MacAddr) -> Nd<'static> {
        Nd::NeighborSolicit {
            target: a6(target),
            options: NdOptions {
                source_lladdr: Some(mac),
                ..NdOptions::default()
            },
        }
    }

    #[test]
    fn solicitations_for_the_router_are_answered_by_the_lb() {
        let (mut b, now) = lb(Mode::Maglev);
        let group = ipv6::multicast_mac(ipv6::solicited_node(a6("2001:db8:1::1")));
        let f = frame6(
            HOST,
            group,
            None,
            "2001:db8:1::10",
            "ff02::1:ff00:1",
            Some(&ns("2001:db8:1::1", HOST)),
        );
        let out = run(&mut b, now, 0, f);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].0, eth(&out[0].1).dst()), (0, HOST));
        let (ip, m) = nd_of(&out[0].1);
        assert_eq!(
            (ip.src(), ip.dst()),
            (a6("2001:db8:1::1"), a6("2001:db8:1::10"))
        );
        match m {
            Nd::NeighborAdvert {
                router,
                solicited,
                target,
                options,
                ..
            } => {
                assert!(router && solicited);
                assert_eq!(
                    (target, options.target_lladdr),
                    (a6("2001:db8:1::1"), Some(EXT))
                );
            }
            m => panic!("{m:?}"),
        }
        assert_eq!(b.counters.events(Event::ExtNdAdvertsSent), 1);
        // The port's link-local address too; another address is not ours.
        let ll = ipv6::link_local_of(EXT).to_string();
        let f = frame6(HOST, EXT, None, "2001:db8:1::10", &ll, Some(&ns(&ll, HOST)));
        assert_eq!(run(&mut b, now, 0, f).len(), 1);
        let f = frame6(
            HOST,
            EXT,
            None,
            "2001:db8:1::10",
            "2001:db8:1::9",
            Some(&ns("2001:db8:1::9", HOST)),
        );
        assert!(run(&mut b, now, 0, f).is_empty());
        assert_eq!(b.counters.drops(Drop::ExtNdNotForUs), 1);
        // Router solicitations: the LB sends no advertisements.
        let rs = Nd::RouterSolicit {
            options: NdOptions::default(),
        };
        let f = frame6(
            HOST,
            ipv6::multicast_mac(a6("ff02::2")),
            None,
            "fe80::10",
            "ff02::2",
            Some(&rs),
        );
        assert!(run(&mut b, now, 0, f).is_empty());
    }

    #[test]
    fn routing_protocols_over_ipv6_go_to_the_virtual_cp() {
        let (mut b, now) = lb(Mode::Maglev);
        let ll = ipv6::link_local_of(EXT).to_string();
        // OSPFv3 to AllSPFRouters and to the router's link-local address (the TAP's, which
        // has the port's MAC); BGP to the router's global address.
        let with = |dst: &str, next: u8, port: Option<u16>| {
            let mut f = frame6(HOST, EXT, None, "fe80::10", dst, None);
            f[ETH + 6] = next;
            if let Some(p) = port {
                f[ETH + 40 + 2..ETH + 40 + 4].copy_from_slice(&p.to_be_bytes());
            }
            f
        };
        for (f, name) in [
            (with("ff02::5", 89, None), "ospf6 hello"),
            (with(&ll, 89, None), "ospf6 to the router"),
            (with("ff02::9", 17, Some(521)), "ripng"),
            (with("2001:db8:1::1", 6, Some(179)), "bgp6"),
        ] {
            let out = run(&mut b, now, 0, f);
            assert_eq!(out.len(), 1, "{name}");
            let e = eth(&out[0].1);
            assert_eq!((out[0].0, e.dst(), e.vlan()), (1, CP, Some(10)), "{name}");
        }
        assert_eq!(b.counters.events(Event::VcpRedirected), 4);
        // BGP over IPv6 between outside hosts that crosses the router is data: balanced.
        let out = run(&mut b, now, 0, with("2001:db8:2::10", 6, Some(179)));
        assert!([be(1), be(2), be(3)].contains(&eth(&out[0].1).dst()));
        assert_eq!(b.counters.events(Event::VcpRedirected), 4);
    }

    #[test]
    fn data_is_balanced_and_nd_crosses_as_arp_does() {
        let (mut b, now) = lb(Mode::Maglev);
        // Data: to one back-end, tagged, the same for the whole flow.
        let f = frame6(HOST, EXT, None, "2001:db8:1::10", "2001:db8:2::10", None);
        let out = run(&mut b, now, 0, f.clone());
        assert_eq!(out.len(), 1);
        let first = eth(&out[0].1).dst();
        assert!([be(1), be(2), be(3)].contains(&first));
        assert_eq!(eth(&out[0].1).vlan(), Some(10));
        for _ in 0..3 {
            assert_eq!(eth(&run(&mut b, now, 0, f.clone())[0].1).dst(), first);
        }
        // Multicast data is not balanced.
        let m = frame6(
            HOST,
            MacAddr([0x33, 0x33, 0, 0, 0, 1]),
            None,
            "2001:db8:1::10",
            "ff0e::1",
            None,
        );
        assert!(run(&mut b, now, 0, m).is_empty());
        assert_eq!(b.counters.drops(Drop::BalanceIp6Multicast), 1);
        // A back-end's solicitation goes out untagged with the LB's MAC, in the frame and
        // in its option (hosts must learn the router at the LB).
        let group = ipv6::multicast_mac(ipv6::solicited_node(a6("2001:db8:1::10")));
        let f = frame6(
            be(2),
            group,
            Some(10),
            "2001:db8:1::1",
            "ff02::1:ff00:10",
            Some(&ns("2001:db8:1::10", be(2))),
        );
        let out = run(&mut b, now, 1, f);
        assert_eq!(out.len(), 1);
        assert_eq!(
            (out[0].0, eth(&out[0].1).src(), eth(&out[0].1).vlan()),
            (0, EXT, None)
        );
        match nd_of(&out[0].1).1 {
            Nd::NeighborSolicit { options, .. } => assert_eq!(options.source_lladdr, Some(EXT)),
            m => panic!("{m:?}"),
        }
        assert_eq!(b.counters.events(Event::IntNdOut), 1);
        // The host's answer goes to every back-end, tagged.
        let na = Nd::NeighborAdvert {
            router: false,
            solicited: true,
            override_: true,
            target: a6("2001:db8:1::10"),
            options: NdOptions {
                target_lladdr: Some(HOST),
                ..NdOptions::default()
            },
        };
        let f = frame6(
            HOST,
            EXT,
            None,
            "2001:db8:1::10",
            "2001:db8:1::1",
            Some(&na),
        );
        let out = run(&mut b, now, 0, f);
        assert_eq!(out.len(), 1, "one internal port");
        assert_eq!(
            (eth(&out[0].1).dst(), eth(&out[0].1).vlan()),
            (MacAddr::BROADCAST, Some(10))
        );
        assert_eq!(b.counters.events(Event::IntNdAdvertsIn), 1);
    }
}

/// Two workers: a back-end's hellos reach the second, which hands them to the first; the
/// first runs the timeouts and publishes its table, which the second balances with after
/// its next pass; packet counts per back-end and the hellos' totals add up both.
#[test]
fn workers_share_one_state_held_by_the_first() {
    let (b, t0) = lb(Mode::Maglev);
    let mut ws = vec![b];
    ws.push(ws[0].worker(t0));
    Balancer::connect_workers(&mut ws);
    let (a, rest) = ws.split_at_mut(1);
    let (a, w) = (&mut a[0], &mut rest[0]);
    let mut tx = TxQueues::new(2);
    let ms = Duration::from_millis;
    // Only back-end 1 speaks, and only to the second worker.
    for k in 0..10 {
        let now = t0 + ms(100 * k);
        assert!(run(w, now, 1, hello_from(be(1))).is_empty());
        w.sync(now);
        a.sync(now);
        a.poll(now, &mut tx);
        w.poll(now, &mut tx);
        w.sync(now);
    }
    assert_eq!(w.counters.events(Event::DistHandedToLead), 10);
    assert_eq!(w.counters.events(Event::DistHellosReceived), 0);
    assert_eq!(a.counters.events(Event::DistHellosReceived), 10);
    assert_eq!(a.counters.events(Event::BackendDown), 2);
    assert_eq!(w.counters.events(Event::BackendDown), 0);
    assert_eq!((a.table.live(), w.table.live()), (1, 1));
    // The second worker balances every flow to the one live back-end, as the first does.
    for k in 0..100 {
        let o = run(w, t0 + ms(1000), 0, udp(k, 80));
        assert_eq!(eth(&o[0].1).dst(), be(1));
    }
    // Its packet counts reach the first at its next timer pass.
    w.poll(t0 + ms(1000), &mut tx);
    a.sync(t0 + ms(1000));
    let e = a.table.entries.iter().find(|e| e.mac == be(1)).unwrap();
    assert_eq!(e.packets, 100);
    assert!(w.table.entries.iter().all(|e| e.packets == 0));
    // Only the first sends hellos (one per interval), carrying both workers' frames.
    assert_eq!(tx.drain_all().len(), 10);
    a.poll(t0 + ms(2000), &mut tx);
    let sent = tx.drain_all();
    let h = dist::Repr::parse(eth(&sent[0].1.data).payload()).unwrap();
    let dist::Message::Hello(h) = h.msg else {
        panic!("not a hello: {h:?}")
    };
    assert_eq!(
        h.rx_packets, 110,
        "10 hellos and 100 frames, all on the second worker"
    );
    assert_eq!(a.counters.events(Event::DistHellosSent), 11);
    assert_eq!(w.counters.events(Event::DistHellosSent), 0);
}

const PEER: MacAddr = MacAddr([2, 0, 0, 0, 0xe1, 2]);

/// The other LB's hello, from its internal MAC: its priority, and whether it is active.
fn peer_hello(priority: u8, active: bool) -> Vec<u8> {
    hello_of(dist::ElementKind::Balancer, PEER, priority, active)
}

/// What `tx` holds, as bytes per port.
fn frames(tx: &mut TxQueues) -> Vec<(u16, Vec<u8>)> {
    tx.drain_all()
        .into_iter()
        .map(|(p, k)| (p, k.data.to_vec()))
        .collect()
}

/// `lb` with `[spare]`: the other LB is PEER, this one of `priority`.
fn spare_lb(priority: u8) -> (Balancer, Instant) {
    let (b, now) = lb(Mode::Maglev);
    let mut cfg = b.cfg.clone();
    cfg.spare = Some(SpareConfig {
        peer: PEER,
        priority,
    });
    let mut s = Balancer::new(b.ports.clone(), cfg, now);
    s.set_backends(&[(be(1), 1, 1), (be(2), 1, 2), (be(3), 1, 1)], false, now);
    (s, now)
}

/// The ports the DIST hellos among `tx`'s frames leave by (the frames taken).
fn hello_ports(tx: &mut TxQueues) -> Vec<u16> {
    frames(tx)
        .iter()
        .filter(|(_, f)| eth(f).ethertype() == dist::ETHERTYPE)
        .map(|(p, _)| *p)
        .collect()
}

/// A spare pair: both start standby; the higher-ranked one that hears the other standby
/// becomes active, at once and without takeover; the standby drops what reaches it and
/// answers nothing; it takes over 2.5 of the active one's intervals after its last hello,
/// announcing the router's addresses from the shared MAC and asking every other address
/// of the network for its MAC; of two active ones the lower-ranked steps down.
#[test]
fn a_spare_pair_has_one_active_lb() {
    let ms = Duration::from_millis;
    // The higher one: standby until it hears the other, standby too.
    let (mut hi, t0) = spare_lb(200);
    let mut tx = TxQueues::new(2);
    assert!(hi.standby);
    assert!(
        run(&mut hi, t0, 0, udp(1, 80)).is_empty(),
        "a standby balances nothing"
    );
    let who_has = arp_frame(
        arp::Operation::Request,
        MacAddr::BROADCAST,
        (HOST, "10.1.0.10"),
        "10.1.0.1",
    );
    assert!(
        run(&mut hi, t0, 0, who_has.clone()).is_empty(),
        "a standby answers no ARP"
    );
    assert_eq!(hi.counters.drops(Drop::LbStandby), 2);
    run(&mut hi, t0, 1, peer_hello(100, false));
    hi.poll(t0, &mut tx);
    assert!(!hi.standby && hi.spare.as_ref().unwrap().active);
    assert_eq!(hi.spare.as_ref().unwrap().takeovers, 0);
    assert_eq!(hi.counters.events(Event::SpareTakeovers), 0);
    let o = frames(&mut tx);
    // Its gratuitous ARP and unsolicited NA, and 253 requests for 10.1.0.0/24's other
    // addresses (the hellos out of both ports come after).
    let arps: Vec<_> = o
        .iter()
        .filter(|(p, f)| *p == 0 && eth(f).ethertype() == ethertype::ARP)
        .map(|(_, f)| arp::Repr::parse(&arp::Packet::new_checked(&f[ETH..]).unwrap()))
        .collect();
    assert_eq!(arps.len(), 254);
    assert_eq!(
        (arps[0].sender_ip, arps[0].target_ip),
        (ip("10.1.0.1"), ip("10.1.0.1"))
    );
    assert!(arps
        .iter()
        .all(|a| a.sender_mac == EXT && a.sender_ip == ip("10.1.0.1")));
    assert_eq!(arps[1].target_ip, ip("10.1.0.2"));
    assert_eq!(arps[253].target_ip, ip("10.1.0.254"));
    assert!(o
        .iter()
        .any(|(p, f)| *p == 0 && eth(f).ethertype() == ethertype::IPV6));
    // Active: it balances, answers ARP, and its hellos go out of the external port too.
    assert_eq!(run(&mut hi, t0, 0, udp(1, 80)).len(), 1);
    assert_eq!(run(&mut hi, t0, 0, who_has.clone()).len(), 1);
    hi.poll(t0 + ms(200), &mut tx);
    let hellos = hello_ports(&mut tx);
    assert!(hellos.contains(&0) && hellos.contains(&1), "{hellos:?}");
    // Of two active ones, the lower-ranked steps down; the higher stays.
    run(&mut hi, t0 + ms(300), 1, peer_hello(100, true));
    assert!(!hi.standby);
    // ... and, since the other's takeover taught the switches to send the network's
    // traffic to it, announces the addresses again, once per such overlap.
    let announced = |lb: &Balancer| lb.counters.events(Event::SpareAnnounced);
    let before = announced(&hi);
    hi.poll(t0 + ms(310), &mut tx);
    let arps = frames(&mut tx)
        .iter()
        .filter(|(p, f)| *p == 0 && eth(f).ethertype() == ethertype::ARP)
        .count();
    assert_eq!(hi.counters.events(Event::SpareReclaims), 1);
    assert!(announced(&hi) > before && arps > 250, "{arps}");
    run(&mut hi, t0 + ms(320), 1, peer_hello(100, true));
    hi.poll(t0 + ms(330), &mut tx);
    assert_eq!(hi.counters.events(Event::SpareReclaims), 1);
    // The other stood down; should it step in again later, so would this one's answer.
    run(&mut hi, t0 + ms(340), 1, peer_hello(100, false));
    run(&mut hi, t0 + ms(350), 1, peer_hello(100, true));
    hi.poll(t0 + ms(360), &mut tx);
    assert_eq!(hi.counters.events(Event::SpareReclaims), 2);
    frames(&mut tx);
    let (mut lo, t1) = spare_lb(100);
    run(&mut lo, t1, 1, peer_hello(200, false));
    lo.poll(t1, &mut tx);
    assert!(
        lo.standby,
        "the lower-ranked waits while the other is heard"
    );
    lo.spare.as_mut().unwrap().active = true;
    lo.standby = false;
    run(&mut lo, t1, 1, peer_hello(200, true));
    assert!(lo.standby);
    assert_eq!(lo.spare.as_ref().unwrap().stepdowns, 1);
    // The active one falls silent: 2.5 intervals after its last hello, the standby takes
    // over (checked at each poll, every 10 ms here: its own hellos, every 100 ms from the
    // first poll, are not due at the poll that takes over).
    run(&mut lo, t1 + ms(100), 1, peer_hello(200, true));
    let mut at = None;
    for k in 2..60 {
        let now = t1 + ms(10 * k);
        frames(&mut tx);
        lo.poll(now, &mut tx);
        if !lo.standby {
            at = Some(now - t1);
            break;
        }
    }
    // Its hellos, saying active, leave at the takeover itself (on both links).
    let hellos = hello_ports(&mut tx);
    assert!(hellos.contains(&0) && hellos.contains(&1), "{hellos:?}");
    assert_eq!(
        at,
        Some(ms(360)),
        "250 ms after the last hello, at the next poll"
    );
    assert_eq!(lo.spare.as_ref().unwrap().takeovers, 1);
    assert_eq!(lo.counters.events(Event::SpareTakeovers), 1);
    assert!(lo.counters.events(Event::SpareProbes) >= 253);
    // The other heard again (a restart whose fast path may have forwarded meanwhile, and
    // taught the switches where it is): this one, active, announces again, once.
    let probes = lo.counters.events(Event::SpareProbes);
    run(&mut lo, t1 + ms(500), 1, peer_hello(200, false));
    lo.poll(t1 + ms(510), &mut tx);
    run(&mut lo, t1 + ms(520), 1, peer_hello(200, false));
    lo.poll(t1 + ms(530), &mut tx);
    assert!(!lo.standby);
    assert_eq!(lo.counters.events(Event::SpareReclaims), 1);
    assert_eq!(lo.counters.events(Event::SpareProbes), 2 * probes);
    frames(&mut tx);
    // Hellos of anything but the other LB change nothing of the pair.
    let (mut s, t2) = spare_lb(100);
    run(&mut s, t2, 1, hello_from(be(1)));
    s.poll(t2, &mut tx);
    assert!(s.standby);
}

/// A member of a spare pair restarted within its grace (its last start's fast path taken
/// over) forwards on until it hears the other LB: standby there, this one is the active
/// one, announcing again (the other may have taken over and stood down meanwhile) with no
/// takeover counted; active there (it took over while
/// this one restarted), this one stands by. Heard from by no one for 2.5 intervals, it
/// becomes active as at any start.
#[test]
fn a_restarted_spare_resumes_until_it_hears_the_other() {
    let ms = Duration::from_millis;
    let mut tx = TxQueues::new(2);
    // The active one restarted: the other is still standby.
    let (mut a, t0) = spare_lb(100);
    a.resume_spare(t0);
    assert!(!a.standby);
    assert_eq!(
        run(&mut a, t0, 0, udp(1, 80)).len(),
        1,
        "it forwards while resuming"
    );
    a.poll(t0 + ms(50), &mut tx);
    assert!(!a.standby && !a.spare.as_ref().unwrap().active);
    frames(&mut tx);
    run(&mut a, t0 + ms(60), 1, peer_hello(200, false));
    let s = a.spare.as_ref().unwrap();
    assert!(s.active && !s.resuming && !a.standby, "{s:?}");
    a.poll(t0 + ms(70), &mut tx);
    let o = frames(&mut tx);
    assert!(
        o.iter()
            .any(|(p, f)| *p == 0 && eth(f).ethertype() == ethertype::ARP),
        "announced again: a standby's hello does not say whether it stepped in meanwhile"
    );
    assert_eq!(a.counters.events(Event::SpareTakeovers), 0);
    assert_eq!(a.counters.events(Event::SpareReclaims), 1);
    // The other took over meanwhile: this one stands by.
    let (mut b, t1) = spare_lb(200);
    b.resume_spare(t1);
    run(&mut b, t1 + ms(10), 1, peer_hello(100, true));
    assert!(b.standby && !b.spare.as_ref().unwrap().active);
    assert!(run(&mut b, t1 + ms(20), 0, udp(1, 80)).is_empty());
    // No one heard: active after 2.5 intervals, announcing (the other may be gone for good).
    let (mut c, t2) = spare_lb(100);
    c.resume_spare(t2);
    c.poll(t2 + ms(200), &mut tx);
    assert!(!c.spare.as_ref().unwrap().active);
    c.poll(t2 + ms(300), &mut tx);
    assert!(c.spare.as_ref().unwrap().active && !c.standby);
    assert!(frames(&mut tx)
        .iter()
        .any(|(_, f)| eth(f).ethertype() == ethertype::ARP));
}

/// An active LB that stops with nothing forwarding for its next start says so: a last
/// hello with interval 0, not active, out of both ports; the standby that hears it takes
/// over at its next poll, not 2.5 intervals later. Where the fast path is handed over
/// (`farewell` false) it says nothing: its programs forward on.
#[test]
fn a_stopping_active_lb_hands_the_network_over_at_once() {
    let ms = Duration::from_millis;
    let (mut a, t0) = spare_lb(200);
    let mut tx = TxQueues::new(2);
    run(&mut a, t0, 1, peer_hello(100, false));
    a.poll(t0, &mut tx);
    assert!(!a.standby);
    frames(&mut tx);
    assert!(a.farewell(t0, &mut tx));
    let last: Vec<(u16, dist::Hello)> = frames(&mut tx)
        .iter()
        .filter(|(_, f)| eth(f).ethertype() == dist::ETHERTYPE)
        .filter_map(
            |(p, f)| match dist::Repr::parse(eth(f).payload()).ok()?.msg {
                dist::Message::Hello(h) => Some((*p, h)),
                _ => None,
            },
        )
        .collect();
    let ports: Vec<u16> = last.iter().map(|(p, _)| *p).collect();
    assert!(ports.contains(&0) && ports.contains(&1), "{ports:?}");
    assert!(last.iter().all(|(_, h)| h.interval_ms == 0 && !h.active));
    assert_eq!(a.counters.events(Event::SpareFarewells), 1);
    assert!(a.standby && !a.spare.as_ref().unwrap().active);
    // Said once: a second call (a stopped LB is not active) sends nothing.
    assert!(!a.farewell(t0, &mut tx));
    assert!(frames(&mut tx).is_empty());

    // The standby: the other's last hello, then its next poll takes over.
    let (mut b, t1) = spare_lb(100);
    run(&mut b, t1, 1, peer_hello(200, true));
    b.poll(t1, &mut tx);
    assert!(b.standby);
    let bye = dist_frame(
        dist::Message::Hello(dist::Hello {
            element: dist::ElementKind::Balancer,
            interval_ms: 0,
            rx_packets: 0,
            tx_packets: 0,
            dropped: 0,
            priority: 200,
            active: false,
            ports: vec![],
            addrs6: vec![],
            state: None,
        }),
        PEER,
    );
    let at = t1 + ms(20);
    run(&mut b, at, 1, bye);
    b.poll(at + ms(10), &mut tx);
    assert!(!b.standby && b.spare.as_ref().unwrap().active);
    assert_eq!(b.counters.events(Event::SpareTakeovers), 1);
    assert!(b.counters.events(Event::SpareAnnounced) > 0);
    // Heard again (its next start, standby): no second takeover; it stays active.
    run(&mut b, at + ms(500), 1, peer_hello(200, false));
    b.poll(at + ms(510), &mut tx);
    assert!(!b.standby);
    assert_eq!(b.counters.events(Event::SpareTakeovers), 1);

    // Its fast path handed over to its next start: it says it while it hears the other
    // (which takes the network now, the next start beginning standby), not once the other
    // is unheard (its programs carry the traffic, the next start resumes).
    for (after, says) in [(ms(100), true), (ms(300), false)] {
        let (mut c, t2) = spare_lb(200);
        run(&mut c, t2, 1, peer_hello(100, false));
        c.poll(t2, &mut tx);
        frames(&mut tx);
        c.spare.as_mut().unwrap().handed_over = true;
        let withdrawn = c.spare.as_ref().unwrap().withdraw_hand_over.clone();
        assert_eq!(c.farewell(t2 + after, &mut tx), says, "{after:?}");
        assert_eq!(frames(&mut tx).is_empty(), !says);
        assert_eq!(c.standby, says);
        assert_eq!(withdrawn.load(std::sync::atomic::Ordering::Relaxed), says);
    }
    // A standby withdraws its hand-over (its programs carried nothing) and says nothing.
    let (mut d, t3) = spare_lb(100);
    run(&mut d, t3, 1, peer_hello(200, true));
    d.poll(t3, &mut tx);
    frames(&mut tx);
    assert!(d.standby);
    d.spare.as_mut().unwrap().handed_over = true;
    assert!(!d.farewell(t3 + ms(50), &mut tx));
    assert!(frames(&mut tx).is_empty());
    assert!(d
        .spare
        .as_ref()
        .unwrap()
        .withdraw_hand_over
        .load(std::sync::atomic::Ordering::Relaxed));
}

/// The external port's `acl_in` runs before balancing (a denied frame never reaches a
/// back-end), its `acl_out` on what leaves by it; counted per rule and port.
#[test]
fn access_lists_filter_before_balancing_and_on_the_way_out() {
    use crate::acl::{Acl, Action as A, Binding, FilterShare, Filters, Net, Rule as R};
    let (mut b, now) = lb(Mode::Maglev);
    let mut deny = R::any(A::Deny);
    deny.protocol = Some(17);
    deny.dst_port = Some((80, 80));
    let mut out = R::any(A::Deny);
    out.dst = Some(Net::parse("10.1.0.66").unwrap());
    let lists = vec![
        Acl {
            name: "in".into(),
            default: A::Permit,
            rules: vec![deny],
        },
        Acl {
            name: "out".into(),
            default: A::Permit,
            rules: vec![out],
        },
    ];
    let bind = Binding {
        acl_in: Some(0),
        acl_out: Some(1),
        ..Default::default()
    };
    let f = Filters::new(
        lists,
        vec![bind, Binding::default()],
        vec!["ext".into(), "int".into()],
        None,
    );
    b.filters = FilterShare::new(f);
    assert!(run(&mut b, now, 0, udp(5000, 80)).is_empty());
    assert_eq!(b.counters.drops(Drop::AclDeny), 1);
    assert_eq!(run(&mut b, now, 0, udp(5000, 81)).len(), 1);
    // Int-to-ext: out of VLAN 10's port, to 10.1.0.66 denied, to 10.1.0.10 not.
    let from_inside = |dst: &str| {
        let f = UdpFrame {
            eth_dst: HOST,
            eth_src: be(1),
            src: ip("10.2.0.10"),
            dst: ip(dst),
            src_port: 80,
            dst_port: 5000,
            ttl: 63,
            payload: &[0; 18],
            ..Default::default()
        }
        .to_vec();
        tag(f, 10)
    };
    assert!(run(&mut b, now, 1, from_inside("10.1.0.66")).is_empty());
    assert_eq!(run(&mut b, now, 1, from_inside("10.1.0.10")).len(), 1);
    let fl = b.filters.load();
    assert_eq!(fl.lists[0].counts[0].get().0, 1);
    assert_eq!(fl.lists[1].counts[0].get().0, 1);
    assert_eq!(
        (fl.drops[0].acl_in.get().0, fl.drops[0].acl_out.get().0),
        (1, 1)
    );
    assert_eq!(b.counters.drops(Drop::AclDeny), 2);
}
