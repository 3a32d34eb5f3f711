use super::*;
use fib::Prefix;
use wire::fpm::build;

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn frame(fpm: &mut FpmState, fib: &mut Fib, msgs: &[Vec<u8>]) {
    let f = build::frame(msgs);
    let (_, payload) = fpm::split_frame(&f).unwrap().unwrap();
    fpm.frame(fpm::messages(payload).unwrap(), fib);
}

/// zebra's IPv6 routes reach the same table: inline gateways, ECMP, next-hop objects;
/// link-local gateways on no TAP are left out, and a route with nothing else is
/// counted; those on a TAP carry its VLAN.
#[test]
fn fpm_ipv6_routes_reach_the_table() {
    let (mut s, mut fib) = (FpmState::default(), Fib::new(1, 100));
    let g = |x: &str| -> std::net::Ipv6Addr { x.parse().unwrap() };
    let p = |x: &str| -> fib::Prefix6 { x.parse().unwrap() };
    // zebra's first routes (sent again after the reconnection below).
    let first = vec![
        build::nexthop(true, 20, Some(g("2001:db8:2::9").into()), &[]),
        build::route6(true, g("2001:db8:99::"), 48, &[g("2001:db8:2::10")], None),
        build::route6(
            true,
            g("2001:db8:98::"),
            48,
            &[g("2001:db8:1::5"), g("fe80::5"), g("2001:db8:2::5")],
            None,
        ),
        build::route6(true, g("2001:db8:97::"), 64, &[], Some(20)),
        build::route6(true, g("2001:db8:96::"), 48, &[g("fe80::1")], None),
        build::route(true, ip("192.0.2.0"), 24, &[ip("10.2.0.3")], None),
    ];
    frame(&mut s, &mut fib, &first);
    assert_eq!(fib.counts(), (1, 3));
    assert_eq!(s.stats.skipped_ipv6, 1);
    let want = |a: &[&str]| -> Gateways { gateways(a.iter().map(|x| g(x))) };
    assert_eq!(
        fib.get(p("2001:db8:99::/48")),
        Some(&want(&["2001:db8:2::10"]))
    );
    assert_eq!(
        fib.get(p("2001:db8:98::/48")),
        Some(&want(&["2001:db8:1::5", "2001:db8:2::5"]))
    );
    assert_eq!(
        fib.get(p("2001:db8:97::/64")),
        Some(&want(&["2001:db8:2::9"]))
    );
    // Link-local gateways on the TAPs of VLANs 20 (ifindex 7) and 10 (ifindex 3, the
    // builder's next-hop objects' interface) go out with their VLAN written in them;
    // one on an interface that is no TAP is left out.
    s.set_scope(7, 20);
    s.set_scope(3, 10);
    frame(
        &mut s,
        &mut fib,
        &[
            build::route6_on(true, g("2001:db8:95::"), 48, &[(g("fe80::b1"), 7)]),
            build::route6_on(true, g("2001:db8:94::"), 48, &[(g("fe80::b1"), 999_999)]),
            build::nexthop(true, 21, Some(g("fe80::a1").into()), &[]),
            build::route6(true, g("2001:db8:93::"), 48, &[], Some(21)),
        ],
    );
    assert_eq!(s.stats.skipped_ipv6, 2);
    assert_eq!(
        fib.get(p("2001:db8:95::/48")),
        Some(&want(&["fe80:14::b1"]))
    );
    assert_eq!(fib.get(p("2001:db8:94::/48")), None);
    assert_eq!(fib.get(p("2001:db8:93::/48")), Some(&want(&["fe80:a::a1"])));
    // Across a reconnection the route through the object keeps its scoped gateway.
    s.connection();
    assert_eq!(
        s.resolve(&s.routes[&Net::V6(p("2001:db8:93::/48"))].clone()),
        Some(want(&["fe80:a::a1"]))
    );
    let (v4, v6) = fib.counts();
    frame(
        &mut s,
        &mut fib,
        &[
            build::route6(false, g("2001:db8:95::"), 48, &[], None),
            build::route6(false, g("2001:db8:93::"), 48, &[], None),
        ],
    );
    // Held until zebra's resend settles (its daemons may be relearning them) ...
    assert_eq!(fib.counts(), (v4, v6));
    assert_eq!(s.stats.deferred_removals, 2);
    // ... zebra resends the rest, and the sweep takes the two out.
    frame(&mut s, &mut fib, &first);
    s.sweep(&mut fib);
    assert_eq!(fib.counts(), (v4, v6 - 2));
    // Withdrawn (settled: at once).
    frame(
        &mut s,
        &mut fib,
        &[build::route6(false, g("2001:db8:99::"), 48, &[], None)],
    );
    assert_eq!(fib.counts(), (1, 2));
}

#[test]
fn fpm_routes_reach_the_table() {
    let (mut s, mut fib) = (FpmState::default(), Fib::new(1, 100));
    let p = |x: &str| -> Prefix { x.parse().unwrap() };
    // Next-hop objects, a group, and routes by id; a route inline; a connected one.
    frame(
        &mut s,
        &mut fib,
        &[
            build::nexthop(true, 6, Some(ip("10.1.0.2").into()), &[]),
            build::nexthop(true, 8, Some(ip("10.2.0.2").into()), &[]),
            build::nexthop(true, 7, None, &[6, 8]),
            build::route(true, ip("192.0.2.0"), 24, &[], Some(6)),
            build::route(true, ip("198.51.100.0"), 24, &[], Some(7)),
            build::route(true, ip("203.0.113.0"), 24, &[ip("10.2.0.3")], None),
            build::route(true, ip("10.1.0.0"), 24, &[], None),
        ],
    );
    assert_eq!(fib.len(), 3);
    assert_eq!(s.stats.skipped_no_gateway, 1);
    assert_eq!(fib.get(p("198.51.100.0/24")).unwrap().len(), 2);
    // A delete and a new route in one frame: one change, never a withdrawal.
    let v = fib.version();
    frame(
        &mut s,
        &mut fib,
        &[
            build::route(false, ip("192.0.2.0"), 24, &[], None),
            build::route(true, ip("192.0.2.0"), 24, &[ip("10.2.0.9")], None),
        ],
    );
    assert_eq!(fib.version(), v + 1);
    assert_eq!(&**fib.get(p("192.0.2.0/24")).unwrap(), &[ip("10.2.0.9")]);
    // A next-hop object changes: every route through it follows.
    frame(
        &mut s,
        &mut fib,
        &[build::nexthop(true, 8, Some(ip("10.2.0.7").into()), &[])],
    );
    assert_eq!(
        &**fib.get(p("198.51.100.0/24")).unwrap(),
        &[ip("10.1.0.2"), ip("10.2.0.7")]
    );
    // Deletes are keyed by prefix.
    frame(
        &mut s,
        &mut fib,
        &[build::route(false, ip("203.0.113.0"), 24, &[], None)],
    );
    assert!(fib.get(p("203.0.113.0/24")).is_none());
    // Reconnection: zebra resends one route only; the sweep removes the other.
    s.connection();
    assert_eq!(fib.len(), 2, "nothing is withdrawn on reconnection");
    // The new zebra gives old ids to other objects: routes held keep their gateways.
    let v = fib.version();
    frame(
        &mut s,
        &mut fib,
        &[
            build::nexthop(true, 7, None, &[]),
            build::nexthop(true, 8, Some(ip("10.1.0.99").into()), &[]),
        ],
    );
    assert_eq!(fib.version(), v, "stale routes do not follow reused ids");
    assert_eq!(fib.get(p("198.51.100.0/24")).unwrap().len(), 2);
    frame(
        &mut s,
        &mut fib,
        &[
            build::nexthop(true, 6, Some(ip("10.1.0.2").into()), &[]),
            build::route(true, ip("192.0.2.0"), 24, &[ip("10.2.0.9")], None),
        ],
    );
    s.sweep(&mut fib);
    assert_eq!(fib.len(), 1);
    // 198.51.100.0/24 and the connected 10.1.0.0/24 (never in the table) were not resent.
    assert_eq!(s.stats.swept, 2);
}

/// zebra adds a /24 at `net`, then deletes it: gone from the table at once.
fn added_then_deleted(s: &mut FpmState, fib: &mut Fib, net: &str) {
    frame(
        s,
        fib,
        &[build::route(true, ip(net), 24, &[ip("10.2.0.2")], None)],
    );
    frame(s, fib, &[build::route(false, ip(net), 24, &[], None)]);
    let p: Prefix = format!("{net}/24").parse().unwrap();
    assert!(fib.get(p).is_none());
}

/// While zebra resends after a reconnection, a delete or a route with no gateway yet (its
/// daemons relearning) of a route held before it leaves the table as it was; the route is
/// stale, and the sweep removes it only if zebra has not sent it again with a gateway. A
/// route first sent in that time is removed at once.
#[test]
fn removals_wait_for_the_resend_to_settle() {
    let (mut s, mut fib) = (FpmState::default(), Fib::new(1, 100));
    let p = |x: &str| -> Prefix { x.parse().unwrap() };
    frame(
        &mut s,
        &mut fib,
        &[
            build::route(true, ip("192.0.2.0"), 24, &[ip("10.2.0.2")], None),
            build::route(true, ip("198.51.100.0"), 24, &[ip("10.2.0.2")], None),
        ],
    );
    // Not a reconnection (nothing held before it): a delete applies at once.
    added_then_deleted(&mut s, &mut fib, "203.0.113.0");
    s.connection();
    let v = fib.version();
    frame(
        &mut s,
        &mut fib,
        &[
            build::route(false, ip("192.0.2.0"), 24, &[], None),
            build::route(true, ip("198.51.100.0"), 24, &[], None),
        ],
    );
    assert_eq!(fib.version(), v, "the table did not change");
    assert_eq!(s.stats.deferred_removals, 2);
    added_then_deleted(&mut s, &mut fib, "203.0.113.0");
    let v = fib.version();
    // 192.0.2.0/24 comes back with its gateway; 198.51.100.0/24 never does.
    frame(
        &mut s,
        &mut fib,
        &[build::route(
            true,
            ip("192.0.2.0"),
            24,
            &[ip("10.2.0.2")],
            None,
        )],
    );
    assert_eq!(fib.version(), v);
    s.sweep(&mut fib);
    assert!(fib.get(p("192.0.2.0/24")).is_some());
    assert!(fib.get(p("198.51.100.0/24")).is_none());
    // Settled again: removals apply at once.
    frame(
        &mut s,
        &mut fib,
        &[build::route(false, ip("192.0.2.0"), 24, &[], None)],
    );
    assert!(fib.get(p("192.0.2.0/24")).is_none());
}

#[test]
fn config_errors_name_line_and_key() {
    let path = Path::new("c.toml");
    let good = "[controller]\ninterface = \"vcp-int\"\n\n[fpm]\nlisten = \"127.0.0.1:2620\"\n\n[[route]]\nprefix = \"198.51.100.0/24\"\nvia = [\"10.2.0.2\", \"10.1.0.2\"]\n";
    let c = ControllerFile::parse(path, good).unwrap();
    assert_eq!(c.routes.len(), 1);
    assert_eq!(c.fpm_listen, Some("127.0.0.1:2620".parse().unwrap()));
    let e = ControllerFile::parse(path, &good.replace("127.0.0.1:2620", "nowhere")).unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (5, "fpm.listen"));
    let e = ControllerFile::parse(path, &good.replace("10.2.0.2", "10.2.0")).unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (9, "route[0].via"));
    let e = ControllerFile::parse(path, &good.replace("[fpm]", "[fpm]\nport = 1")).unwrap_err();
    assert_eq!(e.line, 5, "{e}");
    // An IPv6 route's link-local gateway names its external network.
    let six = |via: &str| {
        good.replace("198.51.100.0/24", "2001:db8:99::/48")
            .replace("[\"10.2.0.2\", \"10.1.0.2\"]", via)
    };
    let c = ControllerFile::parse(path, &six("[\"fe80::b1%vlan20\", \"2001:db8:2::9\"]")).unwrap();
    let want: Vec<std::net::IpAddr> = vec![
        "fe80:14::b1".parse().unwrap(),
        "2001:db8:2::9".parse().unwrap(),
    ];
    assert_eq!(c.routes[0].1.to_vec(), {
        let mut w = want.clone();
        w.sort();
        w
    });
    assert_eq!(
        ControllerFile::parse(path, &six("\"fe80::b1%20\""))
            .unwrap()
            .routes[0]
            .1
            .to_vec(),
        vec![want[0]]
    );
    for bad in [
        "\"fe80::b1\"",
        "\"fe80::b1%eth0\"",
        "\"fe80::b1%vlan5000\"",
        "\"2001:db8::1%vlan20\"",
    ] {
        let e = ControllerFile::parse(path, &six(bad)).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (9, "route[0].via"), "{bad}: {e}");
    }
    let e = ControllerFile::parse(path, &six("\"fe80::b1\"")).unwrap_err();
    assert!(e.to_string().contains("%vlan20"), "{e}");
    // Election and takeover keys.
    let ha = good.replace(
            "interface = \"vcp-int\"\n",
            "interface = \"vcp-int\"\npriority = 50\n\n[takeover]\nospf_router_id = \"10.255.0.1\"\non_active = [\"/bin/true\"]\n",
        );
    let c = ControllerFile::parse(path, &ha).unwrap();
    assert_eq!(c.priority, 50);
    assert_eq!(
        c.ospf_grace.map(|g| (g.router_id, g.grace_period_s)),
        Some((ip("10.255.0.1"), 120))
    );
    assert_eq!(c.on_active, vec!["/bin/true".to_string()]);
    assert_eq!(
        ControllerFile::parse(path, good).unwrap().priority,
        DEFAULT_PRIORITY
    );
    let e =
        ControllerFile::parse(path, &ha.replace("priority = 50", "priority = 300")).unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (3, "controller.priority"));
    let e = ControllerFile::parse(path, &ha.replace("\"10.255.0.1\"", "\"router\"")).unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (6, "takeover.ospf_router_id"));
    let e = ControllerFile::parse(path, &ha.replace("[\"/bin/true\"]", "[]")).unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (7, "takeover.on_active"));
}

proptest::proptest! {
    /// Arbitrary netlink bytes inside well-formed FPM frames: never a panic.
    #[test]
    fn fpm_reader_takes_any_payload(payloads in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200), 1..4)) {
        let mut stream = Vec::new();
        for p in &payloads {
            stream.extend_from_slice(&[1, 1]);
            stream.extend_from_slice(&((p.len() + 4) as u16).to_be_bytes());
            stream.extend_from_slice(p);
        }
        crate::fuzzing::fpm(&stream);
    }
}

/// With a key, the controller takes only sealed, fresh DIST: an unsealed or forged
/// hello adds no element and a replayed acknowledgement is not acted on.
#[test]
fn controller_drops_forged_and_replayed_dist() {
    use wire::dist::auth::{now_ns, seal, Guard, Key, Signer};
    let key = Key::new(1, &[3; 32]).unwrap();
    let now = Instant::now();
    let mut fib = Fib::new(1, 100);
    let mut c = Controller::new(
        MacAddr([2, 0, 0, 0, 0xc, 1]),
        Duration::from_millis(100),
        false,
        now,
    );
    c.guard = Guard::new(Some(key.clone()), 60_000_000_000);
    c.step(Role::Active, now, "the only controller");
    let r1 = MacAddr([2, 0, 0, 0, 1, 1]);
    let hello = |seq| {
        dist::Repr {
            seq,
            msg: dist::Message::Hello(dist::Hello {
                element: ElementKind::Forwarder,
                interval_ms: 100,
                rx_packets: 0,
                tx_packets: 0,
                dropped: 0,
                priority: 0,
                active: false,
                ports: Vec::new(),
                addrs6: Vec::new(),
                state: None,
            }),
        }
        .to_frame(r1, MacAddr::BROADCAST)
        .unwrap()
    };
    c.receive(&hello(1), &mut fib, now);
    let mut forged = hello(2);
    seal(&mut forged, &Key::new(1, &[4; 32]).unwrap(), now_ns()).unwrap();
    c.receive(&forged, &mut fib, now);
    assert!(c.elements.is_empty(), "nothing taken from a forger");
    assert_eq!((c.stats.dist_unauthenticated, c.stats.dist_forged), (1, 1));
    let signer = Signer::new(Some(key));
    let mut good = hello(3);
    signer.seal(&mut good, now_ns()).unwrap();
    c.receive(&good, &mut fib, now);
    assert!(c.elements.contains_key(&r1) && c.dist.peers.contains_key(&r1));
    let ack = |signer: &Signer| {
        let mut f = dist::Repr {
            seq: 4,
            msg: dist::Message::FibAck(dist::FibAck {
                epoch: 1,
                version: 0,
                snap_epoch: 0,
                snap_version: 0,
                parts: 0,
                routes: 0,
                unresolved: 0,
                digest: 0,
                incarnation: 0,
            }),
        }
        .to_frame(r1, c.mac)
        .unwrap();
        signer.seal(&mut f, now_ns()).unwrap();
        f
    };
    let a = ack(&signer);
    c.receive(&a, &mut fib, now);
    c.receive(&a, &mut fib, now);
    c.receive(&good, &mut fib, now);
    assert_eq!(c.stats.acks_received, 1);
    assert_eq!(c.stats.hellos_received, 1);
    assert_eq!(c.stats.dist_replayed, 2);
    // An old capture from before a restart of this controller: stale.
    let mut old = hello(5);
    seal(
        &mut old,
        &Key::new(1, &[3; 32]).unwrap(),
        now_ns() - 120_000_000_000,
    )
    .unwrap();
    c.guard = Guard::new(Some(Key::new(1, &[3; 32]).unwrap()), 60_000_000_000);
    c.receive(&old, &mut fib, now);
    assert_eq!(c.stats.dist_stale, 1);
}

/// `show elements` lists each port of an element with the IPv6 addresses its hello gave
/// for that port (a back-end's sub-interfaces, an LB's external ports).
#[test]
fn elements_show_the_ipv6_addresses_of_their_ports() {
    let now = Instant::now();
    let mut fib = Fib::new(1, 100);
    let mut c = Controller::new(
        MacAddr([2, 0, 0, 0, 0xc, 1]),
        Duration::from_millis(100),
        false,
        now,
    );
    let port = |vlan| dist::HelloPort {
        mac: MacAddr([2, 0, 0, 0, 1, 1]),
        addr: "10.1.0.1".parse().unwrap(),
        prefix_len: 24,
        role: dist::PortRole::External,
        vlan,
        speed_mbps: 0,
    };
    let f = dist::Repr {
        seq: 1,
        msg: dist::Message::Hello(dist::Hello {
            element: ElementKind::Forwarder,
            interval_ms: 100,
            rx_packets: 0,
            tx_packets: 0,
            dropped: 0,
            priority: 0,
            active: false,
            ports: vec![port(10), port(20)],
            addrs6: vec![dist::HelloAddr6 {
                port: 1,
                addr: "2001:db8:2::1".parse().unwrap(),
                prefix_len: 64,
            }],
            state: None,
        }),
    }
    .to_frame(MacAddr([2, 0, 0, 0, 1, 1]), MacAddr::BROADCAST)
    .unwrap();
    c.receive(&f, &mut fib, now);
    let v = c.show_elements(now);
    let ports = v[0]["ports"].as_array().unwrap();
    assert_eq!(ports[0]["addresses6"], json!([]), "{v}");
    assert_eq!(ports[1]["addresses6"], json!(["2001:db8:2::1/64"]), "{v}");
}

fn controller_hello(mac: MacAddr, priority: u8, active: bool) -> Vec<u8> {
    dist::Repr {
        seq: 1,
        msg: dist::Message::Hello(dist::Hello {
            element: ElementKind::Controller,
            interval_ms: 100,
            rx_packets: 0,
            tx_packets: 0,
            dropped: 0,
            priority,
            active,
            ports: Vec::new(),
            addrs6: Vec::new(),
            state: None,
        }),
    }
    .to_frame(mac, MacAddr::BROADCAST)
    .unwrap()
}

/// Frames of `out` addressed to `to` (or broadcast), for a controller to receive.
fn deliver(out: &[Vec<u8>], to: MacAddr, c: &mut Controller, fib: &mut Fib, now: Instant) {
    for f in out {
        let dst = MacAddr::from_slice(&f[0..6]);
        if dst == to || dst == MacAddr::BROADCAST {
            c.receive(f, fib, now);
        }
    }
}

/// The election of docs/dist.md: the higher priority is active after the listening
/// time, the other stands by and mirrors its table, takes over when it falls silent
/// (within three hello intervals) with a new epoch holding the same routes, and a
/// returning controller stands by rather than preempt.
#[test]
fn standby_mirrors_and_takes_over() {
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let (ma, mb) = (MacAddr([2, 0, 0, 0, 0xc, 1]), MacAddr([2, 0, 0, 0, 0xc, 2]));
    let mut a = Controller::new(ma, Duration::from_millis(100), false, t0);
    let mut b = Controller::new(mb, Duration::from_millis(100), false, t0);
    (a.priority, b.priority) = (200, 50);
    let mut fa = Fib::new(7, 1000);
    let mut fb = Fib::new(8, 1000);
    for i in 0..50u8 {
        fa.set(
            Prefix::new(Ipv4Addr::new(198, 18, i, 0), 24),
            Some(gateways(vec![ip("10.2.0.10")])),
        );
    }
    // Both listen, hearing each other; after three intervals the higher priority is
    // active and the other stands by.
    let mut t = 0;
    while t <= 2000 {
        let (mut oa, mut ob) = (Vec::new(), Vec::new());
        a.poll(&mut fa, ms(t), &mut oa);
        b.poll(&mut fb, ms(t), &mut ob);
        deliver(&oa, mb, &mut b, &mut fb, ms(t));
        deliver(&ob, ma, &mut a, &mut fa, ms(t));
        t += 10;
    }
    assert_eq!((a.role, b.role), (Role::Active, Role::Standby));
    assert!(a.role_since.duration_since(t0) >= Duration::from_millis(300));
    // The standby holds the active's table (its mirror), acknowledged as consistent.
    assert_eq!(b.mirror.len(), 50);
    assert_eq!(
        (b.mirror.epoch, b.mirror.version, b.mirror.digest()),
        (7, fa.version(), fa.digest())
    );
    let shown = a.show_fib(&fa, ms(t));
    let peer = &shown["backends"][0];
    assert_eq!(
        (peer["kind"].as_str(), peer["consistent"].as_bool()),
        (Some("controller"), Some(true)),
        "{shown}"
    );
    assert_eq!(
        b.stats.tap_out + b.stats.balance_messages_sent + b.stats.routes_messages_sent,
        0
    );
    // The active falls silent: the standby takes over within three hello intervals.
    let silent = t;
    let mut took = None;
    while t <= silent + 1000 {
        let mut ob = Vec::new();
        b.poll(&mut fb, ms(t), &mut ob);
        if b.role == Role::Active && took.is_none() {
            took = Some(t - silent);
        }
        t += 10;
        if b.takeover_pending {
            let mut fpm = FpmState::default();
            let resettle = AtomicBool::new(false);
            take_over(&mut b, &mut fpm, &mut fb, &resettle);
            assert!(resettle.load(Ordering::Relaxed));
            // Every mirrored route is stale until the routing suite resends it.
            assert_eq!(fpm.stats.stale, 50);
        }
    }
    let took = took.expect("no takeover");
    assert!(took <= 300, "took over after {took} ms");
    assert_eq!(b.stats.takeovers, 1);
    assert!(fb.epoch() > 7);
    assert_eq!((fb.len(), fb.digest()), (50, fa.digest()));
    // A returns: it hears an active controller and stands by (no preemption).
    let mut a2 = Controller::new(ma, Duration::from_millis(100), false, ms(t));
    a2.priority = 200;
    let start = t;
    while t <= start + 1000 {
        let (mut oa, mut ob) = (Vec::new(), Vec::new());
        a2.poll(&mut fa, ms(t), &mut oa);
        b.poll(&mut fb, ms(t), &mut ob);
        deliver(&oa, mb, &mut b, &mut fb, ms(t));
        deliver(&ob, ma, &mut a2, &mut fa, ms(t));
        t += 10;
    }
    assert_eq!((a2.role, b.role), (Role::Standby, Role::Active));
    assert_eq!(a2.mirror.digest(), fb.digest());
}

/// Two active controllers (a partition healed): the lower-ranked one stands down.
#[test]
fn lower_ranked_active_stands_down() {
    let now = Instant::now();
    let mut fib = Fib::new(1, 10);
    let (ma, mb) = (MacAddr([2, 0, 0, 0, 0xc, 1]), MacAddr([2, 0, 0, 0, 0xc, 2]));
    let mut b = Controller::new(mb, Duration::from_millis(100), false, now);
    b.step(Role::Active, now, "alone");
    // Same priority: the lower MAC ranks first.
    b.receive(&controller_hello(ma, DEFAULT_PRIORITY, true), &mut fib, now);
    b.poll(&mut fib, now, &mut Vec::new());
    assert_eq!((b.role, b.stats.stepdowns), (Role::Standby, 1));
    let mut a = Controller::new(ma, Duration::from_millis(100), false, now);
    a.step(Role::Active, now, "alone");
    a.receive(&controller_hello(mb, DEFAULT_PRIORITY, true), &mut fib, now);
    a.poll(&mut fib, now, &mut Vec::new());
    assert_eq!(a.role, Role::Active);
    // A standby with a higher priority does not preempt an active one.
    a.receive(&controller_hello(mb, 255, false), &mut fib, now);
    a.poll(&mut fib, now, &mut Vec::new());
    assert_eq!(a.role, Role::Active);
}

/// A (re)started controller sends no routes until zebra's first resend is in, or
/// until its deadline passes.
#[test]
fn distribution_waits_for_zebra() {
    let now = Instant::now();
    let mut fib = Fib::new(1, 100);
    fib.set(
        "10.9.0.0/16".parse::<Prefix>().unwrap(),
        Some(gateways(vec![ip("10.2.0.10")])),
    );
    let routes_sent = |c: &mut Controller, fib: &mut Fib, at: Instant| {
        let mut out = Vec::new();
        c.poll(fib, at, &mut out);
        out.iter()
            .filter(|f| f.len() > 15 && f[15] & 0x7f == dist::kind::ROUTES)
            .count()
    };
    for by_flag in [true, false] {
        let mut c = Controller::new(
            MacAddr([2, 0, 0, 0, 0xc, 1]),
            Duration::from_millis(100),
            false,
            now,
        );
        let synced = Arc::new(AtomicBool::new(false));
        c.hold = Some((synced.clone(), now + Duration::from_secs(15)));
        c.dist.add(MacAddr([2, 0, 0, 0, 1, 1]), now);
        assert_eq!(routes_sent(&mut c, &mut fib, now), 0);
        assert_eq!(
            routes_sent(&mut c, &mut fib, now + Duration::from_secs(5)),
            0
        );
        assert_eq!(c.show_fib(&fib, now)["distributing"], false);
        let at = if by_flag {
            synced.store(true, Ordering::Relaxed);
            now + Duration::from_secs(6)
        } else {
            now + Duration::from_secs(15)
        };
        assert!(routes_sent(&mut c, &mut fib, at) > 0, "by flag: {by_flag}");
        assert!(c.hold.is_none());
    }
}

fn stateful_hello(
    mac: MacAddr,
    kind: ElementKind,
    ports: Vec<dist::HelloPort>,
    st: dist::HelloState,
) -> Vec<u8> {
    dist::Repr {
        seq: 1,
        msg: dist::Message::Hello(dist::Hello {
            element: kind,
            interval_ms: 100,
            rx_packets: 0,
            tx_packets: 0,
            dropped: 0,
            priority: 0,
            active: false,
            ports,
            addrs6: Vec::new(),
            state: Some(st),
        }),
    }
    .to_frame(mac, MacAddr::BROADCAST)
    .unwrap()
}

/// The LBs' tables name only back-ends that hold a table of the controller: one that
/// restarted leaves them at its first hello and returns once its hellos say its table
/// is in. An LB that restarted gets its table at once, not at the next periodic
/// resend; so does one whose hello shows another table than the one sent.
#[test]
fn lb_tables_follow_back_end_and_lb_restarts() {
    let t0 = Instant::now();
    let mut fib = Fib::new(1, 100);
    let mac = MacAddr([2, 0, 0, 0, 0xc, 1]);
    let mut c = Controller::new(mac, Duration::from_millis(100), true, t0);
    c.step(Role::Active, t0, "the only controller");
    let (r1, lb) = (MacAddr([2, 0, 0, 0, 1, 1]), MacAddr([2, 0, 0, 0, 0xa, 1]));
    let backend = |inc, table| {
        let st = dist::HelloState {
            incarnation: inc,
            table,
            ..Default::default()
        };
        stateful_hello(r1, ElementKind::Forwarder, Vec::new(), st)
    };
    let lb_port = dist::HelloPort {
        mac: lb,
        addr: Ipv4Addr::UNSPECIFIED,
        prefix_len: 0,
        role: dist::PortRole::Internal,
        vlan: 0,
        speed_mbps: 0,
    };
    let lb_hello = |inc, digest| {
        let st = dist::HelloState {
            incarnation: inc,
            table: true,
            digest,
            ..Default::default()
        };
        stateful_hello(lb, ElementKind::Balancer, vec![lb_port], st)
    };
    let balances = |out: &[Vec<u8>]| -> Vec<Vec<MacAddr>> {
        out.iter()
            .filter_map(|f| match dist::Repr::parse(&f[14..]).ok()?.msg {
                dist::Message::Balance { entries, .. } => {
                    Some(entries.iter().map(|e| e.mac).collect())
                }
                _ => None,
            })
            .collect()
    };
    c.receive(&lb_hello(0x11, 0), &mut fib, t0);
    c.receive(&backend(0xa, true), &mut fib, t0);
    let mut out = Vec::new();
    c.poll(&mut fib, t0, &mut out);
    assert_eq!(balances(&out), vec![vec![r1]]);
    // r1 restarts: its new process's first hello takes it out of the LBs' table.
    let t = t0 + Duration::from_millis(100);
    c.receive(&backend(0xb, false), &mut fib, t);
    assert_eq!(c.stats.restarts_seen, 1);
    let mut out = Vec::new();
    c.poll(&mut fib, t, &mut out);
    assert_eq!(balances(&out), vec![vec![]]);
    // The whole table went to it at the same poll.
    assert!(out.iter().any(|f| MacAddr::from_slice(&f[0..6]) == r1
            && matches!(dist::Repr::parse(&f[14..]).unwrap().msg, dist::Message::Routes(ref b) if b.snapshot)));
    let t = t + Duration::from_millis(100);
    c.receive(&backend(0xb, true), &mut fib, t);
    let mut out = Vec::new();
    c.poll(&mut fib, t, &mut out);
    assert_eq!(balances(&out), vec![vec![r1]]);
    // The LB restarts: its table goes at once (not a second after the last).
    let t = t + Duration::from_millis(100);
    c.receive(&lb_hello(0x12, 0), &mut fib, t);
    assert_eq!(c.stats.lb_restarts_seen, 1);
    let mut out = Vec::new();
    c.poll(&mut fib, t, &mut out);
    assert_eq!(balances(&out), vec![vec![r1]]);
    let want = dist::balance_digest([(r1, 0, 1)], Some((mac, 0)));
    let lb_row = |c: &Controller, t| {
        c.show_elements(t)
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["kind"] == "balancer")
            .cloned()
            .unwrap()
    };
    // Its next hello shows the table sent: current. One that shows another, past the
    // time the table takes to arrive, brings it again.
    let t = t + Duration::from_millis(100);
    c.receive(&lb_hello(0x12, want), &mut fib, t);
    assert_eq!(lb_row(&c, t)["table_current"], true);
    let mut out = Vec::new();
    c.poll(&mut fib, t, &mut out);
    assert!(balances(&out).is_empty());
    let t = t + Duration::from_millis(250);
    c.receive(&backend(0xb, true), &mut fib, t);
    c.receive(&lb_hello(0x12, want ^ 1), &mut fib, t);
    assert_eq!(lb_row(&c, t)["table_current"], false);
    let mut out = Vec::new();
    c.poll(&mut fib, t, &mut out);
    assert_eq!(balances(&out), vec![vec![r1]]);
    assert_eq!(c.stats.lb_tables_resent, 1);
}

#[test]
fn lb_weights_follow_capacity() {
    assert_eq!(weight_for(10_000), 100);
    assert_eq!(weight_for(1_000), 10);
    assert_eq!(weight_for(0), 1);
}

/// `reload` on a controller: a route the file no longer gives is withdrawn and a new one
/// set; a route another source (a routing suite) holds for a prefix the file dropped
/// stays; a changed key outside the routes is refused by name, and a file that does not
/// load names its line and key: neither changes the table.
#[test]
fn a_reload_applies_the_config_routes_and_refuses_the_rest() {
    let dir = std::env::temp_dir().join(format!("tessera-vcp-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("c.toml");
    let route = |p: &str, via: &str| format!("\n[[route]]\nprefix = \"{p}\"\nvia = \"{via}\"\n");
    let head = "[controller]\ninterface = \"vcp-int\"\n";
    let first = format!(
        "{head}{}{}",
        route("198.51.100.0/24", "10.2.0.2"),
        route("203.0.113.0/24", "10.2.0.2")
    );
    std::fs::write(&path, &first).unwrap();
    let cfg = ControllerFile::load(&path).unwrap();
    let table = run::config_table(&cfg).unwrap();
    let mut fib = Fib::new(1, 1000);
    for (p, g) in &table {
        fib.set(*p, Some(g.clone()));
    }
    let net = |p: &str| Net::parse_strict(p).unwrap();
    // A routing suite now holds 203.0.113.0/24 through another gateway.
    let suite = gateways(["10.2.0.9".parse::<Ipv4Addr>().unwrap()]);
    fib.set(net("203.0.113.0/24"), Some(suite.clone()));
    let fib = Mutex::new(fib);
    let configured = Mutex::new((first, table, cfg.clone()));
    let ctl = Mutex::new(Controller::new(
        MacAddr([2, 0, 0, 0, 0xc, 1]),
        Duration::from_millis(100),
        true,
        Instant::now(),
    ));
    // The file drops both routes and gives a new one, and the router's filters.
    let filters = "\n[[acl]]\nname = \"in\"\n[[acl.rule]]\naction = \"deny\"\nprotocol = \"tcp\"\ndst_port = 22\n\n[[interface]]\nname = \"vlan10\"\nacl_in = \"in\"\n";
    let second = format!("{head}{}{filters}", route("192.0.2.0/24", "10.2.0.3"));
    std::fs::write(&path, &second).unwrap();
    let v = run::reload(&path, &configured, &fib, None, &ctl).unwrap();
    assert_eq!(
        (
            v["filters_changed"].as_bool(),
            v["filters_version"].as_u64()
        ),
        (Some(true), Some(2)),
        "{v}"
    );
    assert_eq!(ctl.lock().unwrap().filters.set.acls.len(), 1);
    // `config` shows what was reloaded: the new route, not the old ones.
    let shown = configured.lock().unwrap().2.shown();
    assert!(
        shown.contains("192.0.2.0/24") && !shown.contains("198.51.100.0/24"),
        "{shown}"
    );
    assert_eq!(
        (v["set"].as_u64(), v["withdrawn"].as_u64()),
        (Some(1), Some(1)),
        "{v}"
    );
    {
        let f = fib.lock().unwrap();
        assert!(f.get(net("198.51.100.0/24")).is_none());
        assert!(f.get(net("192.0.2.0/24")).is_some());
        assert_eq!(f.get(net("203.0.113.0/24")), Some(&suite));
    }
    let version = fib.lock().unwrap().version();
    std::fs::write(&path, second.replace("vcp-int", "vcp-eth1")).unwrap();
    let e = run::reload(&path, &configured, &fib, None, &ctl).unwrap_err();
    assert!(e.contains("controller.interface"), "{e}");
    std::fs::write(&path, second.replace("10.2.0.3", "10.2.0")).unwrap();
    let e = run::reload(&path, &configured, &fib, None, &ctl).unwrap_err();
    assert!(e.contains("c.toml:") && e.contains("route[0].via"), "{e}");
    // A bad list: refused with its line and key, the filters as they were.
    std::fs::write(&path, second.replace("dst_port = 22", "dst_port = 99999")).unwrap();
    let e = run::reload(&path, &configured, &fib, None, &ctl).unwrap_err();
    assert!(
        e.contains("c.toml:") && e.contains("acl[0].rule[0].dst_port"),
        "{e}"
    );
    assert_eq!(ctl.lock().unwrap().filters.version, 2);
    assert_eq!(fib.lock().unwrap().version(), version);
    assert_eq!(fib.lock().unwrap().len(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every controller config the project ships (and one with every section), shown and
/// loaded again, is the same config.
#[test]
fn a_controllers_shown_config_loads_to_the_same() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files: Vec<(std::path::PathBuf, String)> =
        ["labs/virtual-cp/vcp.toml", "labs/virtual-cp/vcp2.toml"]
            .iter()
            .map(|f| {
                let p = root.join(f);
                let t = std::fs::read_to_string(&p).unwrap();
                (p, t)
            })
            .collect();
    files.push((
        root.join("labs/virtual-cp/every.toml"),
        "routes_file = \"../single-router/routes.txt\"\nroutes_file_via = [\"10.2.0.2\"]\n\n[controller]\ninterface = \"vcp-int\"\npriority = 7\nterminate = false\n\n[fpm]\nlisten = \"127.0.0.1:2620\"\n\n[takeover]\nospf_router_id = \"10.255.0.1\"\non_active = [\"/bin/true\", \"up\"]\n\n[[route]]\nprefix = \"2001:db8:9::/48\"\nvia = \"fe80::1%vlan20\"\n\n[[route]]\nprefix = \"198.51.100.0/24\"\nvia = [\"10.2.0.2\", \"10.2.0.3\"]\n\n[flow_export]\ncollector = \"10.1.0.10:9995\"\nsampling = 10\n".into(),
    ));
    for (path, text) in files {
        let shown = crate::showconfig::assert_round_trip(
            &path,
            &text,
            ControllerFile::parse,
            ControllerFile::shown,
        );
        assert!(
            shown.contains("hello_interval_ms = ") && shown.contains("[io]"),
            "{shown}"
        );
    }
}

#[test]
fn a_bad_flow_export_is_refused_naming_line_and_key() {
    let path = std::path::Path::new("vcp.toml");
    let e = ControllerFile::parse(
        path,
        "[controller]\ninterface = \"vcp-int\"\n\n[flow_export]\ncollector = \"10.1.0.10:9995\"\nidle_timeout_s = 0\n",
    )
    .unwrap_err();
    assert_eq!(
        (e.line, e.key.as_str()),
        (6, "flow_export.idle_timeout_s"),
        "{e}"
    );
}
