use super::*;
use crate::counters::Scope;

fn axon(id: u32, ports: usize, now: Instant) -> Axon {
    let cfg = AxonConfig {
        id,
        ports: (0..ports)
            .map(|i| PortConfig {
                name: format!("a{id}p{i}"),
                capacity_bps: None,
                buffer_bytes: 1 << 20,
                delay: Duration::ZERO,
            })
            .collect(),
        macs: (0..ports)
            .map(|i| MacAddr([2, 0xa, 0, 0, id as u8, i as u8]))
            .collect(),
        hello: Duration::from_millis(20),
        dead: 3,
        cam_size: 16,
        dhcp: None,
        probe: Duration::from_millis(100),
        pace_hosts: false,
        spread: true,
    };
    let names = cfg.ports.iter().map(|p| p.name.clone()).collect();
    Axon::new(cfg, Arc::new(Counters::for_role(names, Scope::Axon)), now)
}

/// Axons joined by links (axon, port) <-> (axon, port), hosts on other ports; frames
/// move between them as the wires would.
struct Net {
    axons: Vec<Axon>,
    wires: Vec<((usize, u16), (usize, u16))>,
    /// What left towards hosts: (axon, port, frame).
    to_hosts: Vec<(usize, u16, Vec<u8>)>,
    now: Instant,
}

impl Net {
    fn step(&mut self) {
        self.now += Duration::from_millis(5);
        for _ in 0..20 {
            let mut moved = false;
            for i in 0..self.axons.len() {
                let mut tx = TxQueues::new(self.axons[i].cfg.ports.len());
                self.axons[i].poll(self.now, &mut tx);
                for (port, p) in tx.drain_all() {
                    moved = true;
                    let peer = self.wires.iter().find_map(|&(a, b)| {
                        if a == (i, port) {
                            Some(b)
                        } else if b == (i, port) {
                            Some(a)
                        } else {
                            None
                        }
                    });
                    match peer {
                        Some((j, q)) => {
                            let mut p = p;
                            p.meta.rx_port = q;
                            let mut tx2 = TxQueues::new(0);
                            self.axons[j].process(p, self.now, &mut tx2);
                        }
                        None => self.to_hosts.push((i, port, p.data.to_vec())),
                    }
                }
            }
            if !moved {
                break;
            }
        }
    }

    /// Host `h` (MAC 02::h, 10.0.0.h) on port 2 of Axon `a` asks by ARP for host `t`
    /// on port 2 of Axon `b`, which answers the ARP its Axon asks in h's name.
    fn resolve(&mut self, a: usize, h: u8, b: usize, t: u8) {
        let (hm, tm) = (MacAddr([2, 0, 0, 0, 0, h]), MacAddr([2, 0, 0, 0, 0, t]));
        let (hi, ti) = ([10, 0, 0, h], [10, 0, 0, t]);
        let req = arp(wire::arp::Operation::Request, hm, hi, MacAddr::ZERO, ti);
        self.host_sends(a, 2, req);
        self.step();
        self.host_sends(b, 2, arp(wire::arp::Operation::Reply, tm, ti, hm, hi));
        self.step();
    }

    fn host_sends(&mut self, axon: usize, port: u16, frame: Vec<u8>) {
        let mut p = Pkt::new();
        p.data = frame.into();
        p.meta.rx_port = port;
        let mut tx = TxQueues::new(0);
        self.axons[axon].process(p, self.now, &mut tx);
    }
}

fn arp(
    op: wire::arp::Operation,
    smac: MacAddr,
    sip: [u8; 4],
    tmac: MacAddr,
    tip: [u8; 4],
) -> Vec<u8> {
    let dst = if op == wire::arp::Operation::Request {
        MacAddr::BROADCAST
    } else {
        tmac
    };
    let mut f = Vec::new();
    wire::arp::Repr {
        operation: op,
        sender_mac: smac,
        sender_ip: sip.into(),
        target_mac: tmac,
        target_ip: tip.into(),
    }
    .append_frame(dst, &mut f);
    f
}

/// An ND frame (`repr`) from `smac`/`src` to `dmac`/`dst`, at `hop` hops.
fn nd(
    dmac: MacAddr,
    smac: MacAddr,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop: u8,
    repr: &wire::icmpv6::Repr,
) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 40 + repr.buffer_len()];
    f[0..6].copy_from_slice(&dmac.0);
    f[6..12].copy_from_slice(&smac.0);
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    wire::icmpv6::emit_packet(&mut f[14..], src, dst, hop, repr).unwrap();
    f
}

/// What an ND frame says: (Ethernet destination, IPv6 source and destination, type,
/// target, source or target link-layer address, solicited), its hop limit 255 and
/// checksum checked.
#[allow(clippy::type_complexity)]
fn nd_of(
    f: &[u8],
) -> Option<(
    MacAddr,
    Ipv6Addr,
    Ipv6Addr,
    u8,
    Ipv6Addr,
    Option<MacAddr>,
    bool,
)> {
    use wire::icmpv6::Repr;
    if f[12..14] != [0x86, 0xdd] {
        return None;
    }
    let ip = wire::ipv6::Packet::new_checked(&f[14..]).ok()?;
    let icmp = wire::icmpv6::Packet::new_checked(ip.payload()).ok()?;
    assert_eq!(ip.hop_limit(), 255);
    assert!(icmp.verify_checksum(ip.src(), ip.dst()));
    let (t, target, ll, sol) = match Repr::parse(&icmp).ok()? {
        Repr::NeighborSolicit { target, options } => (135, target, options.source_lladdr, false),
        Repr::NeighborAdvert {
            target,
            options,
            solicited,
            ..
        } => (136, target, options.target_lladdr, solicited),
        _ => return None,
    };
    Some((
        MacAddr::from_slice(&f[0..6]),
        ip.src(),
        ip.dst(),
        t,
        target,
        ll,
        sol,
    ))
}

fn ring() -> Net {
    let now = Instant::now();
    // Three Axons in a ring on ports 0 and 1; a host on port 2 of each.
    Net {
        axons: (1..=3).map(|id| axon(id, 3, now)).collect(),
        wires: vec![((0, 0), (1, 1)), ((1, 0), (2, 1)), ((2, 0), (0, 1))],
        to_hosts: Vec::new(),
        now,
    }
}

/// Neighbour discovery is Axon-ARP over IPv6: h1's solicitation for h3 reaches
/// h3's Axon, which solicits h3 in h1's name (to its solicited-node group, h3 not yet
/// known there); h3's advertisement installs the routes on both sides and h1 is
/// answered by its own Axon. Duplicate address detection is left unanswered, a
/// solicitation that fails RFC 4861's checks is counted, a later solicitation (the
/// host's reachability check) is answered at once, and data flows.
#[test]
fn hosts_find_each_other_by_neighbour_discovery() {
    use wire::icmpv6::{NdOptions, Repr};
    let mut n = ring();
    for _ in 0..10 {
        n.step();
    }
    let h1 = MacAddr([2, 0, 0, 0, 0, 1]);
    let h3 = MacAddr([2, 0, 0, 0, 0, 3]);
    let a1: Ipv6Addr = "2001:db8::1".parse().unwrap();
    let a3: Ipv6Addr = "2001:db8::3".parse().unwrap();
    let group = wire::ipv6::solicited_node(a3);
    let ns = |ll: Option<MacAddr>| Repr::NeighborSolicit {
        target: a3,
        options: NdOptions {
            source_lladdr: ll,
            ..NdOptions::default()
        },
    };
    let gmac = wire::ipv6::multicast_mac(group);
    // Duplicate address detection (from ::) and a solicitation at hop limit 64: no
    // answer, each counted.
    n.to_hosts.clear();
    n.host_sends(
        0,
        2,
        nd(gmac, h1, Ipv6Addr::UNSPECIFIED, group, 255, &ns(None)),
    );
    n.host_sends(0, 2, nd(gmac, h1, a1, group, 64, &ns(Some(h1))));
    n.step();
    assert!(n.to_hosts.iter().all(|(_, _, f)| nd_of(f).is_none()));
    assert_eq!(n.axons[0].counters.drops(Drop::AxonArpIgnored), 1);
    assert_eq!(n.axons[0].counters.drops(Drop::AxonNdMalformed), 1);
    // The real one.
    n.host_sends(0, 2, nd(gmac, h1, a1, group, 255, &ns(Some(h1))));
    n.step();
    let asks: Vec<_> = n
        .to_hosts
        .iter()
        .filter(|(a, p, _)| *a == 2 && *p == 2)
        .filter_map(|(_, _, f)| nd_of(f))
        .collect();
    assert_eq!(asks, vec![(gmac, a1, group, 135, a3, Some(h1), false)]);
    n.to_hosts.clear();
    let na = Repr::NeighborAdvert {
        router: false,
        solicited: true,
        override_: true,
        target: a3,
        options: NdOptions {
            target_lladdr: Some(h3),
            ..NdOptions::default()
        },
    };
    n.host_sends(2, 2, nd(h1, h3, a3, a1, 255, &na));
    n.step();
    let answers: Vec<_> = n
        .to_hosts
        .iter()
        .filter(|(a, p, _)| *a == 0 && *p == 2)
        .filter_map(|(_, _, f)| nd_of(f))
        .collect();
    assert_eq!(answers, vec![(h1, a3, a1, 136, a3, Some(h3), true)]);
    assert_eq!(n.axons[0].routes().len(), 1);
    assert_eq!(n.axons[2].routes().len(), 1);
    assert_eq!(n.axons[0].routes()[0].1.ip, IpAddr::V6(a3));
    assert_eq!(n.axons[2].routes()[0].1.ip, IpAddr::V6(a1));
    // h1 checks h3 is still there (a unicast solicitation): answered by axon 1 alone.
    n.to_hosts.clear();
    n.host_sends(0, 2, nd(h3, h1, a1, a3, 255, &ns(Some(h1))));
    n.step();
    let all: Vec<_> = n
        .to_hosts
        .iter()
        .filter(|(_, _, f)| nd_of(f).is_some())
        .collect();
    assert_eq!(all.len(), 1);
    assert_eq!((all[0].0, all[0].1), (0, 2));
    // Data: an IPv6 frame from h1 reaches h3 unchanged.
    let data = nd(
        h3,
        h1,
        a1,
        a3,
        64,
        &Repr::EchoRequest {
            ident: 1,
            seq: 1,
            data: b"x",
        },
    );
    n.to_hosts.clear();
    n.host_sends(0, 2, data.clone());
    n.step();
    assert!(n
        .to_hosts
        .iter()
        .any(|(a, p, f)| *a == 2 && *p == 2 && *f == data));
}

#[test]
fn a_ring_finds_its_topology_and_sets_routes_up_by_axon_arp() {
    let mut n = ring();
    for _ in 0..10 {
        n.step();
    }
    for a in &n.axons {
        assert_eq!(a.neighbours().len(), 2, "axon {}", a.cfg.id);
        assert_eq!(a.paths().len(), 2, "axon {}: {:?}", a.cfg.id, a.paths());
        assert!(a.paths().iter().all(|(_, p)| p.len() == 1));
    }
    // Host h1 (on axon 1) asks for h3 (on axon 3).
    let h1 = MacAddr([2, 0, 0, 0, 0, 1]);
    let h3 = MacAddr([2, 0, 0, 0, 0, 3]);
    n.to_hosts.clear();
    n.host_sends(
        0,
        2,
        arp(
            wire::arp::Operation::Request,
            h1,
            [10, 0, 0, 1],
            MacAddr::ZERO,
            [10, 0, 0, 3],
        ),
    );
    n.step();
    // Axon 3 asks its host port in h1's name (hellos aside).
    let asks: Vec<_> = n
        .to_hosts
        .iter()
        .filter(|(a, p, f)| *a == 2 && *p == 2 && f[12..14] == [0x08, 0x06])
        .collect();
    assert_eq!(asks.len(), 1, "{:?}", n.to_hosts.len());
    let ask = wire::arp::Repr::parse(&wire::arp::Packet::new_checked(&asks[0].2[14..]).unwrap());
    assert_eq!(
        (ask.sender_mac, ask.target_ip),
        (h1, Ipv4Addr::new(10, 0, 0, 3))
    );
    n.to_hosts.clear();
    n.host_sends(
        2,
        2,
        arp(
            wire::arp::Operation::Reply,
            h3,
            [10, 0, 0, 3],
            h1,
            [10, 0, 0, 1],
        ),
    );
    n.step();
    // h1 gets its answer from axon 1.
    let replies: Vec<_> = n
        .to_hosts
        .iter()
        .filter(|(a, p, f)| *a == 0 && *p == 2 && f[12..14] == [0x08, 0x06])
        .collect();
    assert_eq!(replies.len(), 1);
    let r = wire::arp::Repr::parse(&wire::arp::Packet::new_checked(&replies[0].2[14..]).unwrap());
    assert_eq!(
        (r.sender_mac, r.sender_ip),
        (h3, Ipv4Addr::new(10, 0, 0, 3))
    );
    assert_eq!(n.axons[0].routes().len(), 1);
    assert_eq!(n.axons[2].routes().len(), 1);
    // Data both ways, unchanged at the far end.
    let mut data = vec![0u8; 60];
    data[0..6].copy_from_slice(&h3.0);
    data[6..12].copy_from_slice(&h1.0);
    data[12..14].copy_from_slice(&[0x88, 0x88]);
    data[20] = 0x5a;
    n.to_hosts.clear();
    n.host_sends(0, 2, data.clone());
    n.step();
    let got: Vec<_> = n
        .to_hosts
        .iter()
        .filter(|(_, _, f)| f[12..14] == [0x88, 0x88])
        .collect();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].0, got[0].1), (2, 2));
    assert_eq!(got[0].2, data);
    // Cut the direct link 1-3: the route moves to the way round by 2.
    n.wires.retain(|w| *w != ((2, 0), (0, 1)));
    for _ in 0..30 {
        n.step();
    }
    let r = &n.axons[0].routes()[0].1;
    assert_eq!(r.path.as_ref().map(|p| p.len()), Some(3), "{r:?}");
    n.to_hosts.clear();
    n.host_sends(0, 2, data.clone());
    n.step();
    let got: Vec<_> = n
        .to_hosts
        .iter()
        .filter(|(_, _, f)| f[12..14] == [0x88, 0x88])
        .collect();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].2, data);
    // No route, no frame: a host reaches only what it resolved.
    let mut other = data.clone();
    other[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
    n.host_sends(0, 2, other);
    assert_eq!(n.axons[0].counters.drops(Drop::AxonNoRoute), 1);
}

#[test]
fn beyond_a_full_route_memory_hosts_get_masqueraded_macs() {
    let mut n = ring();
    n.axons[0].cfg.cam_size = 1;
    for _ in 0..10 {
        n.step();
    }
    let h1 = MacAddr([2, 0, 0, 0, 0, 1]);
    // Two hosts behind port 2 of axon 3; h1 resolves both.
    let mut given = Vec::new();
    for t in [3u8, 4] {
        n.to_hosts.clear();
        n.resolve(0, 1, 2, t);
        let r = n
            .to_hosts
            .iter()
            .filter(|(a, p, f)| *a == 0 && *p == 2 && f[12..14] == [0x08, 0x06])
            .map(|(_, _, f)| {
                wire::arp::Repr::parse(&wire::arp::Packet::new_checked(&f[14..]).unwrap())
            })
            .find(|r| r.operation == wire::arp::Operation::Reply)
            .unwrap();
        given.push(r.sender_mac);
    }
    assert_eq!(given[0], MacAddr([2, 0, 0, 0, 0, 3]));
    assert_eq!(given[1], masq_mac(2, 0));
    assert_eq!(masq_of(&given[1]), Some((2, 0)));
    assert_eq!(n.axons[0].counters.events(Event::AxonRouteMasqueraded), 1);
    // A frame to the masqueraded MAC reaches h4 addressed to h4's own MAC.
    let mut data = vec![0u8; 60];
    data[0..6].copy_from_slice(&given[1].0);
    data[6..12].copy_from_slice(&h1.0);
    data[12..14].copy_from_slice(&[0x88, 0x88]);
    n.to_hosts.clear();
    n.host_sends(0, 2, data);
    n.step();
    let got: Vec<_> = n
        .to_hosts
        .iter()
        .filter(|(_, _, f)| f[12..14] == [0x88, 0x88])
        .collect();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].0, got[0].1), (2, 2));
    assert_eq!(&got[0].2[0..6], &[2, 0, 0, 0, 0, 4]);
    // Another port's index is no route.
    let mut stray = vec![0u8; 60];
    stray[0..6].copy_from_slice(&masq_mac(1, 0).0);
    stray[6..12].copy_from_slice(&h1.0);
    n.host_sends(0, 2, stray);
    assert_eq!(n.axons[0].counters.drops(Drop::AxonNoRoute), 1);
}

#[test]
fn probes_go_round_trip_and_collect_every_hop() {
    let mut n = ring();
    for _ in 0..40 {
        n.step();
    }
    let probes = n.axons[0].probes();
    assert_eq!(probes.len(), 2, "{probes:?}");
    for (far, r) in probes {
        let ids: Vec<u32> = r.records.iter().map(|x| x.axon).collect();
        assert_eq!(ids, vec![1, far, 1], "{r:?}");
        for (i, x) in r.records.iter().enumerate() {
            assert!(x.in_ns > 0, "{r:?}");
            if i + 1 < r.records.len() {
                assert!(x.out_ns >= x.in_ns, "{r:?}");
                assert!(r.records[i + 1].in_ns >= x.out_ns, "{r:?}");
            }
        }
    }
}

#[test]
fn a_paced_host_port_holds_frames_back_and_loses_none() {
    let now = Instant::now();
    let mut paced = axon(1, 3, now);
    paced.cfg.ports[2].capacity_bps = Some(10_000_000);
    paced.cfg.pace_hosts = true;
    let paced = Axon::new(paced.cfg.clone(), paced.counters.clone(), now);
    let mut n = Net {
        axons: vec![paced, axon(2, 3, now), axon(3, 3, now)],
        wires: vec![((0, 0), (1, 1)), ((1, 0), (2, 1)), ((2, 0), (0, 1))],
        to_hosts: Vec::new(),
        now,
    };
    for _ in 0..10 {
        n.step();
    }
    let h1 = MacAddr([2, 0, 0, 0, 0, 1]);
    let h3 = MacAddr([2, 0, 0, 0, 0, 3]);
    n.resolve(0, 1, 2, 3);
    n.step();
    // 20 frames of 1000 bytes at once: at 10 Mbit/s each takes 0.83 ms of the wire with
    // its Axon headers; one leaves per 5 ms step of this harness, none is lost.
    let mut data = vec![0u8; 1000];
    data[0..6].copy_from_slice(&h3.0);
    data[6..12].copy_from_slice(&h1.0);
    data[12..14].copy_from_slice(&[0x88, 0x88]);
    n.to_hosts.clear();
    for _ in 0..20 {
        n.host_sends(0, 2, data.clone());
    }
    n.step();
    let count = |n: &Net| {
        n.to_hosts
            .iter()
            .filter(|(_, _, f)| f[12..14] == [0x88, 0x88])
            .count()
    };
    assert!(count(&n) < 5, "{} frames passed at once", count(&n));
    for _ in 0..40 {
        n.step();
    }
    assert_eq!(count(&n), 20);
    assert_eq!(n.axons[0].counters.drops(Drop::AxonPacedOut), 0);
}

#[test]
fn routes_spread_over_equal_paths_in_a_ring_of_four() {
    let now = Instant::now();
    // 1 - 2 - 3 - 4 - 1 on ports 0 and 1; hosts on port 2. From Axon 1, Axon 3 is two
    // hops away either way round.
    let mut n = Net {
        axons: (1..=4).map(|id| axon(id, 3, now)).collect(),
        wires: vec![
            ((0, 0), (1, 1)),
            ((1, 0), (2, 1)),
            ((2, 0), (3, 1)),
            ((3, 0), (0, 1)),
        ],
        to_hosts: Vec::new(),
        now,
    };
    for _ in 0..20 {
        n.step();
    }
    assert_eq!(n.axons[0].paths().len(), 3);
    for t in 10..26u8 {
        n.resolve(0, 1, 2, t);
    }
    let routes = n.axons[0].routes();
    assert_eq!(routes.len(), 16);
    let first: std::collections::BTreeSet<u8> = routes
        .iter()
        .map(|(_, r, _)| r.path.as_ref().unwrap()[0])
        .collect();
    assert_eq!(first.len(), 2, "{routes:?}");
    assert!(routes
        .iter()
        .all(|(_, r, _)| r.path.as_ref().unwrap().len() == 3));
    // Data to every one of them arrives, by whichever way.
    n.to_hosts.clear();
    for t in 10..26u8 {
        let mut data = vec![0u8; 60];
        data[0..6].copy_from_slice(&[2, 0, 0, 0, 0, t]);
        data[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        data[12..14].copy_from_slice(&[0x88, 0x88]);
        n.host_sends(0, 2, data);
    }
    n.step();
    let got = n
        .to_hosts
        .iter()
        .filter(|(a, p, f)| *a == 2 && *p == 2 && f[12..14] == [0x88, 0x88])
        .count();
    assert_eq!(got, 16);
}

/// A reload's ports: capacities change in place; other names, or (with pace_hosts) a
/// capacity set or removed, are refused and change nothing.
#[test]
fn a_reload_reshapes_ports_and_refuses_what_needs_a_restart() {
    let now = Instant::now();
    let mut a = axon(1, 3, now);
    let mut ports = a.cfg.ports.clone();
    ports[1].capacity_bps = Some(10_000_000);
    a.reconfigure_ports(ports.clone()).unwrap();
    assert_eq!(a.cfg.ports[1].capacity_bps, Some(10_000_000));
    let mut renamed = ports.clone();
    renamed[0].name = "other".into();
    assert!(a
        .reconfigure_ports(renamed)
        .unwrap_err()
        .starts_with("port:"));
    a.cfg.pace_hosts = true;
    let mut unshaped = ports.clone();
    unshaped[1].capacity_bps = None;
    let e = a.reconfigure_ports(unshaped).unwrap_err();
    assert!(e.starts_with("port[1].capacity_bps"), "{e}");
    assert_eq!(a.cfg.ports, ports);
}

/// An Axon that stops for a restart says so in its last hellos (its fast path forwards on
/// meanwhile): its neighbour keeps it past the dead intervals as long as it asked, and
/// no longer.
#[test]
fn a_restarting_neighbour_is_held_as_long_as_it_asked() {
    let now = Instant::now();
    let mut net = Net {
        axons: vec![axon(1, 2, now), axon(2, 2, now)],
        wires: vec![((0, 0), (1, 0))],
        to_hosts: Vec::new(),
        now,
    };
    for _ in 0..10 {
        net.step();
    }
    assert!(net.axons[0].neighbour_mac(0).is_some());
    net.axons[1].farewell_hold = Some(Duration::from_millis(500));
    let mut tx = TxQueues::new(2);
    net.axons[1].farewell(&mut tx);
    let (mut t, a) = (net.now, &mut net.axons[0]);
    for (port, mut p) in tx.drain_all() {
        if port == 0 {
            p.meta.rx_port = 0;
            a.process(p, t, &mut TxQueues::new(0));
        }
    }
    // Silence from Axon 2: held past three hello intervals (60 ms), gone past 500 ms.
    for _ in 0..20 {
        t += Duration::from_millis(20);
        a.poll(t, &mut TxQueues::new(2));
    }
    assert!(a.neighbour_mac(0).is_some(), "held 400 ms");
    for _ in 0..10 {
        t += Duration::from_millis(20);
        a.poll(t, &mut TxQueues::new(2));
    }
    assert!(a.neighbour_mac(0).is_none(), "still held after 600 ms");
}
