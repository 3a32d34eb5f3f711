//! The data plane's fuzz entry point, shared by the fuzz target and the corpus replay test.

use crate::buf::{Pkt, TxQueues};
use crate::forwarder::{Forwarder, ForwarderConfig, Iface};
use std::time::{Duration, Instant};
use wire::MacAddr;

/// A small forwarder: two ports, a default route, one resolved neighbour per port; IPv6 on
/// port 0 (2001:db8:1::1/64, default route through 2001:db8:1::2, learned from the frames).
pub fn forwarder() -> (Forwarder, Instant) {
    let now = Instant::now();
    let ifaces = vec![
        Iface::new("f0", MacAddr([2, 0, 0, 0, 0, 1]), [10, 1, 0, 1].into(), 24),
        Iface {
            mtu: 576,
            ..Iface::new("f1", MacAddr([2, 0, 0, 0, 0, 2]), [10, 2, 0, 1].into(), 24)
        },
    ];
    let mut f = Forwarder::new(ifaces, ForwarderConfig::default(), now);
    let _ = f.add_route(
        fib::Prefix::new([0, 0, 0, 0].into(), 0),
        [10, 2, 0, 2].into(),
    );
    f.neighbours.learn(
        0,
        [10, 1, 0, 10].into(),
        MacAddr([2, 0, 0, 0, 1, 0]),
        now,
        true,
    );
    f.neighbours.learn(
        1,
        [10, 2, 0, 2].into(),
        MacAddr([2, 0, 0, 0, 2, 0]),
        now,
        true,
    );
    f.enable_ipv6(vec![vec![("2001:db8:1::1".parse().unwrap(), 64)], vec![]]);
    let _ = f.add_route6(
        fib::Prefix6::new(std::net::Ipv6Addr::UNSPECIFIED, 0),
        &["2001:db8:1::2".parse().unwrap()],
    );
    (f, now)
}

/// The fuzzing forwarder as a star member: port 1 is the star's internal port, behind
/// which 10.3.0.0/16 and 2001:db8:3::/48 are another forwarder's networks (its port 0);
/// star frames (IPv4 or IPv6) arrive on port 1 (the first byte's low bit set).
pub fn star_forwarder() -> (Forwarder, Instant) {
    let (mut f, now) = forwarder();
    let other = MacAddr([2, 0, 0, 0, 3, 1]);
    f.set_star(1, &[(fib::Prefix::new([10, 3, 0, 0].into(), 16), other, 0)]);
    f.set_star6(&[(
        fib::Prefix6::new("2001:db8:3::".parse().unwrap(), 48),
        other,
        0,
    )]);
    let _ = f.replace_routes6(vec![(
        fib::Prefix6::new(std::net::Ipv6Addr::UNSPECIFIED, 0),
        vec!["2001:db8:1::2".parse().unwrap()],
    )]);
    (f, now)
}

/// Feeds `data` to the forwarder: the first byte picks the port and flags, the rest is the
/// frame. Checks that every frame sent fits its port's MTU.
pub fn forward(f: &mut Forwarder, now: Instant, data: &[u8]) {
    let Some((&ctl, frame)) = data.split_first() else {
        return;
    };
    let mut p = Pkt::from_bytes(frame);
    p.meta.csum_partial = ctl & 2 != 0;
    let mut tx = TxQueues::new(f.ifaces.len());
    // As the run loop does, so that the lookup hints read the frame too.
    crate::element::process_batch(f, &mut vec![p], (ctl & 1) as u16, now, &mut tx);
    if ctl & 4 != 0 {
        f.poll(now + Duration::from_secs(5), &mut tx);
    }
    for (port, p) in tx.drain_all() {
        let mtu = f.ifaces[port as usize].mtu;
        assert!(
            p.data.len() <= mtu + 14,
            "frame of {} bytes out of a port with MTU {mtu}",
            p.data.len()
        );
        f.pool.put(p);
    }
}

/// The MAC of [`balancer`]'s external port.
pub const LB_EXT_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0xe0, 0]);

/// A small LB: an external port (10.1.0.1/24, VLAN 10, [`LB_EXT_MAC`]), an internal port,
/// three back-ends with weights 1:2:1 and a Virtual-CP; Maglev.
pub fn balancer() -> (crate::balancer::Balancer, Instant) {
    balancer_with(crate::balancer::Mode::Maglev)
}

/// [`balancer`] with another balancing mode (for benchmarks).
pub fn balancer_with(mode: crate::balancer::Mode) -> (crate::balancer::Balancer, Instant) {
    use crate::balancer::{Balancer, BalancerConfig, LbPort};
    use wire::dist::PortRole;
    let now = Instant::now();
    let port = |name: &str, i: u8, role, vlan, addr: [u8; 4], prefix_len| LbPort {
        name: name.into(),
        mac: MacAddr([2, 0, 0, 0, 0xe0, i]),
        role,
        vlan,
        addr: addr.into(),
        prefix_len,
        // External ports speak IPv6 too: 2001:db8:1::1.
        addrs6: if role == PortRole::External {
            vec![(std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1), 64)]
        } else {
            Vec::new()
        },
        speed_mbps: 0,
    };
    let ports = vec![
        port("ext", 0, PortRole::External, 10, [10, 1, 0, 1], 24),
        port("int", 1, PortRole::Internal, 0, [0; 4], 0),
    ];
    let cfg = BalancerConfig {
        mode,
        virtual_cp: Some((MacAddr([2, 0, 0, 0, 0xcc, 1]), 1)),
        ..Default::default()
    };
    let mut b = Balancer::new(ports, cfg, now);
    let be = |i| MacAddr([2, 0, 0, 0, 0xbe, i]);
    b.set_backends(&[(be(1), 1, 1), (be(2), 1, 2), (be(3), 1, 1)], false, now);
    (b, now)
}

/// Feeds `data` to the LB: the first byte picks the port (bit 0) and runs the timers
/// (bit 2), the rest is the frame. Checks that frames leave only by existing ports.
pub fn balance(b: &mut crate::balancer::Balancer, now: Instant, data: &[u8]) {
    let Some((&ctl, frame)) = data.split_first() else {
        return;
    };
    let mut p = Pkt::from_bytes(frame);
    p.meta.rx_port = (ctl & 1) as u16;
    let mut tx = TxQueues::new(b.ports.len());
    b.process(p, now, &mut tx);
    if ctl & 4 != 0 {
        b.poll(now + Duration::from_secs(5), &mut tx);
    }
    for (port, p) in tx.drain_all() {
        assert!((port as usize) < b.ports.len());
        b.pool.put(p);
    }
}

/// A fair switch of three ports, one of them shaped at 10 Mbit/s with a small buffer.
pub fn switch() -> (crate::switch::Switch, Instant) {
    use crate::switch::{Mode, PortConfig, Switch, SwitchConfig};
    let now = Instant::now();
    let port = |n: &str, capacity_bps| PortConfig {
        name: n.into(),
        capacity_bps,
        buffer_bytes: 16_384,
        delay: Duration::ZERO,
    };
    let cfg = SwitchConfig {
        ports: vec![
            port("p0", None),
            port("p1", None),
            port("p2", Some(10_000_000)),
        ],
        mode: Mode::Fair,
        ageing: Duration::from_secs(300),
    };
    let names = cfg.ports.iter().map(|p| p.name.clone()).collect();
    let counters = std::sync::Arc::new(crate::Counters::for_role(
        names,
        crate::counters::Scope::Switch,
    ));
    (Switch::new(cfg, counters, now), now)
}

/// Feeds `data` to the switch: the first byte picks the input port (its value modulo 3)
/// and runs the output queues (bit 2), the rest is the frame. Checks that frames leave
/// only by existing ports, never by the one they came in by.
pub fn switch_frame(s: &mut crate::switch::Switch, now: Instant, data: &[u8]) {
    let Some((&ctl, frame)) = data.split_first() else {
        return;
    };
    let mut p = Pkt::from_bytes(frame);
    p.meta.rx_port = (ctl % 3) as u16;
    p.meta.csum_unknown = true;
    let mut tx = TxQueues::new(3);
    s.process(p, now, &mut tx);
    if ctl & 4 != 0 {
        s.poll(now + Duration::from_millis(10), &mut tx);
    }
    for (port, p) in tx.drain_all() {
        assert!(port < 3);
        s.pool.put(p);
    }
}

/// An Axon (id 1) of four ports whose ports 2 and 3 lead to Axons 2 and 3 (their hellos
/// were heard), after a few rounds of its timers.
pub fn axon() -> (crate::axon::Axon, Instant) {
    use crate::axon::{Axon, AxonConfig};
    use crate::switch::PortConfig;
    let mut now = Instant::now();
    let cfg = AxonConfig {
        id: 1,
        ports: (0..4)
            .map(|i| PortConfig {
                name: format!("p{i}"),
                capacity_bps: (i == 3).then_some(10_000_000),
                buffer_bytes: 16_384,
                delay: Duration::ZERO,
            })
            .collect(),
        macs: (0..4).map(|i| wire::MacAddr([2, 0, 0, 0, 1, i])).collect(),
        hello: Duration::from_millis(20),
        dead: 3,
        cam_size: 8,
        dhcp: Some(crate::axon::DhcpConfig {
            server: std::net::Ipv4Addr::new(10, 0, 0, 250),
            first: std::net::Ipv4Addr::new(10, 0, 0, 100),
            last: std::net::Ipv4Addr::new(10, 0, 0, 101),
            mask: std::net::Ipv4Addr::new(255, 255, 255, 0),
            lease: Duration::from_secs(60),
            router: None,
        }),
        probe: Duration::from_millis(1),
        pace_hosts: true,
        spread: true,
    };
    let names = cfg.ports.iter().map(|p| p.name.clone()).collect();
    let counters = std::sync::Arc::new(crate::Counters::for_role(
        names,
        crate::counters::Scope::Axon,
    ));
    let mut a = Axon::new(cfg, counters, now);
    let mut tx = TxQueues::new(4);
    for (port, id) in [(2u8, 2u32), (3, 3)] {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[2, 0, 0, 0, id as u8, 0]);
        f.extend_from_slice(&wire::axon::ETHERTYPE.to_be_bytes());
        let r = wire::axon::Repr::new(wire::axon::Kind::Hello, &[]);
        let at = f.len();
        f.resize(at + r.len(), 0);
        let _ = r.emit(&mut f[at..]);
        wire::axon::Msg::Hello {
            id,
            port: 0,
            hold_ms: 0,
        }
        .emit(&mut f);
        let mut p = Pkt::from_bytes(&f);
        p.meta.rx_port = port as u16;
        a.process(p, now, &mut tx);
    }
    now += Duration::from_millis(5);
    a.poll(now, &mut tx);
    for (_, p) in tx.drain_all() {
        a.pool.put(p);
    }
    (a, now)
}

/// Feeds `data` to the Axon: the first byte picks the input port (its value modulo 4) and
/// runs the timers and queues (bit 2), the rest is the frame. Checks that frames leave
/// only by existing ports.
pub fn axon_frame(a: &mut crate::axon::Axon, now: Instant, data: &[u8]) {
    let Some((&ctl, frame)) = data.split_first() else {
        return;
    };
    let mut p = Pkt::from_bytes(frame);
    p.meta.rx_port = (ctl % 4) as u16;
    p.meta.csum_unknown = true;
    let mut tx = TxQueues::new(4);
    a.process(p, now, &mut tx);
    if ctl & 4 != 0 {
        a.poll(now + Duration::from_millis(10), &mut tx);
    }
    for (port, p) in tx.drain_all() {
        assert!(port < 4);
        a.pool.put(p);
    }
}

/// Capture filters on arbitrary bytes: the first byte is the number of 8-byte classic BPF
/// instructions that follow (code, jt, jf, k); a program [`crate::capture::check`] accepts
/// runs over the rest as a frame without panicking or looping. The same bytes are also
/// read as `tcpdump -ddd` text and as a capture batch.
pub fn capture(data: &[u8]) {
    use crate::capture::{check, parse_ddd, records, run, Insn};
    if let Some((&n, rest)) = data.split_first() {
        let n = (n as usize).min(rest.len() / 8);
        let prog: Vec<Insn> = rest[..n * 8]
            .chunks_exact(8)
            .map(|c| Insn {
                code: u16::from_be_bytes([c[0], c[1]]),
                jt: c[2],
                jf: c[3],
                k: u32::from_be_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect();
        if check(&prog).is_ok() {
            let _ = run(&prog, &rest[n * 8..]);
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(p) = parse_ddd(text) {
            let _ = run(&p, data);
        }
    }
    for r in records(data) {
        assert!(r.data.len() <= data.len());
    }
}

/// Reassembly on arbitrary fragments: `data` is split at each 0xff 0xfe pair into
/// packets (IPv6 where the first nibble is 6, else IPv4) given to one
/// [`crate::reasm::Reassembly`] (small limits, time moving by the first byte of each); no
/// panic, a datagram made is a valid packet of its family (IPv4: at most 65,535 bytes,
/// checksum right), an expired first fragment has offset 0, and the memory held never
/// passes the cap and is zero when nothing is pending.
pub fn reasm(data: &[u8]) {
    use crate::reasm::{Outcome, ReasmConfig, Reassembly};
    let cfg = ReasmConfig {
        max_datagrams: 4,
        max_bytes: 8192,
        timeout: Duration::from_secs(30),
    };
    let mut r = Reassembly::new(cfg);
    let mut now = Instant::now();
    let mut start = 0;
    let mut parts = Vec::new();
    for i in 0..data.len().saturating_sub(1) {
        if data[i] == 0xff && data[i + 1] == 0xfe {
            parts.push(&data[start..i]);
            start = i + 2;
        }
    }
    parts.push(&data[start.min(data.len())..]);
    for p in parts {
        now += Duration::from_secs(*p.first().unwrap_or(&0) as u64 / 16);
        let six = p.first().is_some_and(|b| b >> 4 == 6);
        match (six, if six { r.add6(p, now) } else { r.add(p, now) }) {
            (false, Outcome::Complete(d, _)) => {
                let ip = wire::ipv4::Packet::new_checked(&d[..]).expect("a valid datagram");
                assert!(ip.verify_checksum() && d.len() <= 65535 && !ip.is_fragment());
            }
            (true, Outcome::Complete(d, _)) => {
                let ip = wire::ipv6::Packet::new_checked(&d[..]).expect("a valid packet");
                assert_eq!(ip.total_len(), d.len());
            }
            _ => {}
        }
        assert!(r.bytes() <= cfg.max_bytes);
        for f in r.expire(now).1 {
            if f[0] >> 4 == 6 {
                let ip = wire::ipv6::Packet::new_checked(&f[..]).expect("a first fragment");
                let u = ip.upper().expect("walked before");
                assert_eq!(u.fragment.map(|f| f.offset), Some(0));
            } else {
                let ip = wire::ipv4::Packet::new_checked(&f[..]).expect("a first fragment");
                assert_eq!(ip.frag_offset(), 0);
            }
        }
        if r.is_empty() {
            assert_eq!(r.bytes(), 0);
        }
    }
}

/// Access lists on arbitrary input: `data` up to its first 0 byte is text, a rule a line
/// of `field=value` pairs separated by spaces (the fields of `[[acl.rule]]`: action,
/// protocol, src, dst, src_port, dst_port, icmp_type, icmp_code, tcp_flags, dscp,
/// fragment), each parsed as a config's would be; the bytes after it a packet, keyed as
/// IPv4 and as IPv6. No parser panics, the list's decision is the first rule that
/// matches, or its default, and the fast path's tuple-space search (`acl::tss`) decides
/// alike.
pub fn acl(data: &[u8]) {
    use crate::acl::*;
    let (text, packet) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let text = String::from_utf8_lossy(text);
    let mut rules = Vec::new();
    for line in text.lines() {
        let mut r = Rule::any(Action::Permit);
        let mut ok = true;
        for pair in line.split_whitespace() {
            let Some((k, v)) = pair.split_once('=') else {
                continue;
            };
            let small = |v: &str| v.parse::<u8>().map_err(|e| e.to_string());
            let set = match k {
                "action" => Action::parse(v).map(|a| r.action = a),
                "protocol" => parse_protocol(v).map(|p| r.protocol = Some(p)),
                "src" => Net::parse(v).map(|n| r.src = Some(n)),
                "dst" => Net::parse(v).map(|n| r.dst = Some(n)),
                "src_port" => parse_ports(v).map(|p| r.src_port = Some(p)),
                "dst_port" => parse_ports(v).map(|p| r.dst_port = Some(p)),
                "tcp_flags" => parse_tcp_flags(v).map(|f| r.tcp_flags = Some(f)),
                "icmp_type" => small(v).map(|t| r.icmp_type = Some(t)),
                "icmp_code" => small(v).map(|c| r.icmp_code = Some(c)),
                "dscp" => small(v).map(|d| r.dscp = Some(d)),
                "fragment" => v
                    .parse::<bool>()
                    .map(|f| r.fragment = Some(f))
                    .map_err(|e| e.to_string()),
                _ => Ok(()),
            };
            ok &= set.is_ok();
        }
        if ok && r.check().is_ok() {
            rules.push(r);
        }
    }
    let acl = Acl {
        name: "fuzz".into(),
        default: Action::Deny,
        rules,
    };
    let slots: Vec<u32> = (0..=acl.rules.len() as u32).collect();
    let tables = tss::Tables::compile(&[&acl], &[slots], 0);
    for k in [Key::of_ipv4(packet), Key::of_ipv6(packet)]
        .into_iter()
        .flatten()
    {
        let d = acl.decide(&k);
        if let Ok(t) = &tables {
            match (t.lookup(0, &tss::key_bytes(&k), 0), d.rule) {
                (Ok(h), Some(i)) => assert_eq!((h.prio as usize, h.action), (i, d.action)),
                (Err(a), None) => assert_eq!(a, d.action),
                (got, want) => panic!("tuples {got:?}, reference {want:?}"),
            }
        }
        match d.rule {
            Some(i) => {
                assert!(acl.rules[i].matches(&k));
                assert!(!acl.rules[..i].iter().any(|r| r.matches(&k)));
                assert_eq!(d.action, acl.rules[i].action);
            }
            None => {
                assert!(!acl.rules.iter().any(|r| r.matches(&k)));
                assert_eq!(d.action, Action::Deny);
            }
        }
    }
}
