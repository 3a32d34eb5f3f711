use super::*;
use dataplane::forwarder::Iface;

fn pfx(s: &str) -> Prefix {
    s.parse().unwrap()
}

fn gw(d: u8) -> Gateways {
    gateways(vec![Ipv4Addr::new(10, 1, 0, d)])
}

fn table() -> RouteTable {
    let ifs = [
        Iface::new(
            "a",
            MacAddr([2, 0, 0, 0, 0, 1]),
            "10.1.0.1".parse().unwrap(),
            24,
        ),
        Iface::new(
            "b",
            MacAddr([2, 0, 0, 0, 0, 2]),
            "10.2.0.1".parse().unwrap(),
            24,
        ),
    ];
    RouteTable::new(&ifs).0
}

/// Runs a controller and `n` back-ends over a channel that drops, duplicates and
/// reorders messages (a seeded pseudo-random choice), until every back-end holds the
/// controller's table; returns the rounds it took.
fn converge(
    fib: &mut Fib,
    d: &mut Distributor,
    ws: &mut [(MacAddr, Writer, RouteTable)],
    seed: u64,
    lossy: bool,
) -> usize {
    let mut rng = seed;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let t0 = Instant::now();
    for round in 0..100_000 {
        let now = t0 + Duration::from_millis(round as u64 * 10);
        for (mac, w, _) in ws.iter() {
            if lossy && next() % 300 == 0 {
                d.remove(*mac); // a back-end missed its hellos, and is back
            }
            d.add(*mac, now);
            if next() % 4 == 0 || !lossy {
                d.on_ack(*mac, w.ack(), fib, now);
            }
        }
        if ws.iter().all(|(mac, w, _)| {
            d.peers[mac].at(fib.epoch(), fib.version()) && w.digest() == fib.digest()
        }) {
            return round;
        }
        let mut out = Vec::new();
        d.tick(fib, now, &mut out);
        if lossy && out.len() > 1 {
            let i = next() as usize % out.len();
            let j = next() as usize % out.len();
            out.swap(i, j);
        }
        for (mac, b) in out {
            // Every message, sealed, fits a 1500-byte MTU.
            let mut f = wire::dist::Repr {
                seq: 0,
                msg: wire::dist::Message::Routes(b.clone()),
            }
            .to_frame(mac, mac)
            .unwrap();
            let key = wire::dist::auth::Key::new(1, &[1; 16]).unwrap();
            wire::dist::auth::seal(&mut f, &key, 1).unwrap();
            assert!(f.len() <= 14 + 1500, "a sealed frame of {} bytes", f.len());
            if lossy && next() % 10 == 0 {
                continue; // lost
            }
            let copies = if lossy && next() % 10 == 0 { 2 } else { 1 };
            for _ in 0..copies {
                let (_, w, t) = ws.iter_mut().find(|(m, _, _)| *m == mac).unwrap();
                w.handle(MacAddr([2, 0, 0, 0, 0, 0xcc]), &b, t);
                // The back-end acknowledges after what it received.
                if !lossy || next() % 3 != 0 {
                    d.on_ack(mac, w.ack(), fib, now);
                }
            }
        }
    }
    panic!("no convergence");
}

/// IPv6 routes ride in the same table as IPv4 ones (one version sequence, one digest):
/// over a lossy channel each back-end ends with the controller's digest, and what it
/// handed to its IPv6 table, applied in order, is the controller's IPv6 routes through
/// gateways on its networks; the rest are held, counted unresolved or connected.
#[test]
fn ipv6_routes_converge_beside_ipv4_ones() {
    let p6 = |s: &str| -> Prefix6 { s.parse().unwrap() };
    let g6 = |s: &str| gateways([s.parse::<Ipv6Addr>().unwrap()]);
    let mut fib = Fib::new(9, 300);
    let mut d = Distributor::default();
    let nets6 = vec![p6("2001:db8:1::/64"), p6("2001:db8:2::/64")];
    let mut ws: Vec<_> = (1..=2)
        .map(|i| {
            (
                MacAddr([2, 0, 0, 0, 6, i]),
                Writer::with_nets6(nets6.clone(), vec![10, 20]),
                table(),
            )
        })
        .collect();
    for i in 0..400u128 {
        let p = Prefix6::new((0x2001_0db8_8000u128 << 80 | i << 80).into(), 48);
        let via = if i % 2 == 0 {
            "2001:db8:1::9"
        } else {
            "2001:db8:2::9"
        };
        fib.set(p, Some(g6(via)));
        fib.set(
            Prefix::new(Ipv4Addr::from(0xc000_0000 | (i as u32) << 8), 24),
            Some(gw(2)),
        );
    }
    // On no network.
    fib.set(p6("2001:db8:77::/48"), Some(g6("2001:db8:99::1")));
    // Link-local, on VLAN 20 (installed) and on VLAN 30 (not ours: held).
    fib.set(p6("2001:db8:66::/48"), Some(g6("fe80:14::b1")));
    fib.set(p6("2001:db8:65::/48"), Some(g6("fe80:1e::b1")));
    // Connected.
    fib.set(p6("2001:db8:2::/64"), Some(g6("2001:db8:1::9")));
    // ECMP over both networks.
    let ecmp = gateways(["2001:db8:2::5", "2001:db8:1::5"].map(|a| a.parse::<Ipv6Addr>().unwrap()));
    fib.set(p6("2001:db8:55::/48"), Some(ecmp.clone()));
    converge(&mut fib, &mut d, &mut ws, 11, true);
    // Withdraw some while they are up.
    for i in 0..100u128 {
        let p = Prefix6::new((0x2001_0db8_8000u128 << 80 | i << 80).into(), 48);
        fib.set(p, None);
    }
    converge(&mut fib, &mut d, &mut ws, 12, true);
    assert_eq!(fib.counts(), (400, 305));
    for (_, w, t) in &mut ws {
        assert_eq!(w.digest(), fib.digest());
        assert_eq!(w.counts(), (400, 305));
        assert_eq!(w.ack().unresolved, 2);
        let mut installed: HashMap<Prefix6, Vec<Ipv6Addr>> = HashMap::new();
        for (p, v) in w.take_routes6() {
            match v {
                Some(v) => installed.insert(p, v),
                None => installed.remove(&p),
            };
        }
        assert_eq!(
            installed.len(),
            302,
            "300 /48s, the ECMP one, the link-local one"
        );
        assert_eq!(
            installed[&p6("2001:db8:66::/48")],
            vec!["fe80:14::b1".parse::<Ipv6Addr>().unwrap()]
        );
        assert!(!installed.contains_key(&p6("2001:db8:65::/48")));
        assert_eq!(
            installed[&p6("2001:db8:55::/48")],
            vec![
                "2001:db8:1::5".parse::<Ipv6Addr>().unwrap(),
                "2001:db8:2::5".parse().unwrap()
            ]
        );
        assert!(!installed.contains_key(&p6("2001:db8:77::/48")));
        assert!(!installed.contains_key(&p6("2001:db8:2::/64")));
        // The IPv4 routes went to the route table, the IPv6 ones did not.
        assert_eq!(t.len(), 2 + 400);
    }
}

#[test]
fn back_ends_converge_over_a_lossy_channel() {
    let mut fib = Fib::new(7, 1000);
    let mut d = Distributor::default();
    let mut ws: Vec<_> = (1..=3)
        .map(|i| (MacAddr([2, 0, 0, 0, 1, i]), Writer::new(), table()))
        .collect();
    for i in 0..3000u32 {
        let p = Prefix::new(Ipv4Addr::from(0xc000_0000 | (i << 8)), 24);
        fib.set(p, Some(gw(2 + (i % 3) as u8)));
    }
    converge(&mut fib, &mut d, &mut ws, 1, true);
    for (_, w, t) in &ws {
        assert_eq!(w.len(), 3000);
        assert_eq!(t.len(), 3000 + 2);
        assert_eq!(w.version, fib.version());
    }
    // Changes after that go as deltas, withdrawals and replacements included.
    for i in 0..500u32 {
        let p = Prefix::new(Ipv4Addr::from(0xc000_0000 | (i << 8)), 24);
        if i % 2 == 0 {
            fib.set(p, None);
        } else {
            fib.set(
                p,
                Some(gateways(vec![
                    Ipv4Addr::new(10, 2, 0, 9),
                    Ipv4Addr::new(10, 1, 0, 9),
                ])),
            );
        }
    }
    converge(&mut fib, &mut d, &mut ws, 2, true);
    for (_, w, t) in &ws {
        assert_eq!(w.len(), 2750);
        assert_eq!(t.len(), 2750 + 2);
        // Replaced: ECMP over two gateways; withdrawn: gone.
        let trie = t.snapshot().0;
        let g = fib::Lpm::get(trie, pfx("192.0.1.0/24")).unwrap();
        assert_eq!(t.snapshot().1[g as usize].len(), 2);
        assert_eq!(fib::Lpm::get(trie, pfx("192.0.0.0/24")), None);
    }
    assert!(
        d.peers.values().any(|p| p.resends > 0),
        "the channel lost messages"
    );
}

/// A back-end restarted between two hellos: the new process holds nothing, and its
/// first hello names a new incarnation. Before that hello the controller's record
/// (the old process's acknowledgement) still reads consistent; from it on the peer
/// is not consistent, gets the whole table, and is consistent again only once the new
/// process acknowledged it. A late acknowledgement from the old process changes
/// nothing.
#[test]
fn a_restarted_back_end_gets_the_whole_table_and_is_not_consistent_before() {
    let mut fib = Fib::new(3, 100);
    let mut d = Distributor::default();
    let mac = MacAddr([2, 0, 0, 0, 1, 1]);
    let mut old = Writer::new();
    old.incarnation = 0xa;
    let mut ws = vec![(mac, old, table())];
    for i in 0..6u32 {
        fib.set(
            Prefix::new(Ipv4Addr::from(0xc633_6400 + (i << 8)), 24),
            Some(gw(2)),
        );
    }
    converge(&mut fib, &mut d, &mut ws, 1, false);
    let t0 = Instant::now();
    d.hello(mac, &ws[0].1.hello_state(), &mut fib, t0);
    assert!(d.peers[&mac].consistent(&fib));
    assert_eq!(d.peers[&mac].incarnation, 0xa);
    let stale_ack = ws[0].1.ack();
    // The restart: a new process, an empty table, a new incarnation.
    let mut new = Writer::new();
    new.incarnation = 0xb;
    let (mut w, mut t) = (new, table());
    assert!(
        d.hello(mac, &w.hello_state(), &mut fib, t0),
        "a new incarnation"
    );
    let p = &d.peers[&mac];
    assert!(!p.consistent(&fib) && p.restarts == 1 && p.incarnation == 0xb);
    // The old process's last acknowledgement arrives late: ignored.
    d.on_ack(mac, stale_ack, &mut fib, t0);
    assert!(!d.peers[&mac].consistent(&fib));
    assert_eq!(d.peers[&mac].acks_other_incarnation, 1);
    // The next tick sends the whole table; once applied and acknowledged, consistent.
    let mut out = Vec::new();
    d.tick(&mut fib, t0, &mut out);
    assert!(!out.is_empty() && out.iter().all(|(m, b)| *m == mac && b.snapshot));
    for (_, b) in &out {
        w.handle(MacAddr([2, 0, 0, 0, 0, 0xcc]), b, &mut t);
    }
    assert!(
        w.hello_state().table,
        "a whole table applied: the hellos say so"
    );
    d.on_ack(mac, w.ack(), &mut fib, t0);
    assert!(d.peers[&mac].consistent(&fib));
    assert_eq!((w.len(), w.digest()), (fib.len(), fib.digest()));
    assert_eq!(d.peers[&mac].snapshots, 2);
}

/// A back-end that lost its table behind the controller's back (the same process, the
/// same incarnation) is found from its next hello, whose state block names what it
/// holds, and gets the whole table at the next tick; so does one whose table drifted
/// at an older version the log still covers; a second loss right after a successful
/// repair is repaired at once too.
#[test]
fn a_table_lost_behind_the_controllers_back_is_repaired_from_one_hello() {
    let mut fib = Fib::new(3, 100);
    let mut d = Distributor::default();
    let mac = MacAddr([2, 0, 0, 0, 1, 1]);
    let mut w = Writer::new();
    w.incarnation = 0xa;
    let mut ws = vec![(mac, w, table())];
    fib.set(pfx("192.0.2.0/24"), Some(gw(2)));
    fib.set(pfx("198.51.100.0/24"), Some(gw(2)));
    converge(&mut fib, &mut d, &mut ws, 1, false);
    let now = Instant::now();
    for round in 0..2 {
        // The table is gone; the process (and its incarnation) is the same.
        let (_, w, t) = &mut ws[0];
        let held: Vec<Net> = w.routes().map(|(p, _)| *p).collect();
        w.install(held.into_iter().map(|p| (p, None)).collect(), Some(t));
        w.flush(t);
        assert!(
            d.peers[&mac].consistent(&fib),
            "the last acknowledgement still says so"
        );
        assert!(!d.hello(mac, &w.hello_state(), &mut fib, now));
        assert!(!d.peers[&mac].consistent(&fib));
        assert_eq!(d.peers[&mac].repairs, round + 1, "repaired at once");
        let mut out = Vec::new();
        d.tick(&mut fib, now, &mut out);
        assert!(!out.is_empty() && out.iter().all(|(_, b)| b.snapshot));
        for (_, b) in &out {
            w.handle(MacAddr([2, 0, 0, 0, 0, 0xcc]), b, t);
        }
        d.on_ack(mac, w.ack(), &mut fib, now);
        assert!(d.peers[&mac].consistent(&fib));
        assert_eq!(w.len(), 2);
    }
    // An acknowledgement of an older version whose digest is not what the table was
    // then: repaired too (the log keeps each version's digest and count).
    let v = fib.version();
    fib.set(pfx("203.0.113.0/24"), Some(gw(2)));
    let mut a = ws[0].1.ack();
    assert_eq!(a.version, v);
    assert_eq!(fib.state_at(v), Some((a.digest, a.routes)));
    a.digest ^= 1;
    d.on_ack(mac, a, &mut fib, now);
    assert_eq!(d.peers[&mac].repairs, 3);
}

#[test]
fn a_new_epoch_a_gap_and_drift_each_bring_a_snapshot() {
    let mut fib = Fib::new(1, 10);
    let mut d = Distributor::default();
    let mut ws = vec![(MacAddr([2, 0, 0, 0, 1, 1]), Writer::new(), table())];
    fib.set(pfx("192.0.2.0/24"), Some(gw(2)));
    converge(&mut fib, &mut d, &mut ws, 3, false);
    let mac = ws[0].0;
    assert_eq!(d.peers[&mac].snapshots, 1);
    // More changes than the log holds while the back-end is away: a snapshot again.
    d.remove(mac);
    for i in 0..20u32 {
        fib.set(
            Prefix::new(Ipv4Addr::from(0xc633_6400 + (i << 8)), 24),
            Some(gw(3)),
        );
    }
    converge(&mut fib, &mut d, &mut ws, 4, false);
    assert_eq!(
        d.peers[&mac].snapshots, 1,
        "a new peer record: its first snapshot"
    );
    assert_eq!(ws[0].1.len(), 21);
    // Drift: the back-end loses a route behind the protocol's back.
    let p = pfx("192.0.2.0/24");
    let (_, w, t) = &mut ws[0];
    w.install(vec![(p.into(), None)], Some(t));
    w.flush(t);
    assert_eq!(ws[0].1.len(), 20);
    converge(&mut fib, &mut d, &mut ws, 5, false);
    assert_eq!(d.peers[&mac].repairs, 1);
    assert_eq!(ws[0].1.len(), 21);
    // A new controller (epoch 2) with a different table: the back-end follows it.
    let mut fib2 = Fib::new(2, 10);
    fib2.set(pfx("203.0.113.0/24"), Some(gw(4)));
    let mut d2 = Distributor::default();
    converge(&mut fib2, &mut d2, &mut ws, 6, false);
    assert_eq!(ws[0].1.len(), 1);
    assert_eq!(ws[0].1.epoch, 2);
    assert_eq!(ws[0].2.len(), 3);
}

/// A snapshot taken while distribution was held (a back-end's acknowledgement of
/// another epoch, before the routing suite resent the table) goes out as the table
/// is when it is sent, not as it was: the back-end never holds the empty table.
#[test]
fn a_snapshot_not_begun_is_the_table_as_it_is_when_sent() {
    let mac = MacAddr([2, 0, 0, 0, 1, 1]);
    let t0 = Instant::now();
    // The back-end holds the last controller's table (epoch 1).
    let mut old = Fib::new(1, 10);
    old.set(pfx("192.0.2.0/24"), Some(gw(2)));
    let mut ws = vec![(mac, Writer::new(), table())];
    converge(&mut old, &mut Distributor::default(), &mut ws, 7, false);
    assert_eq!(ws[0].2.len(), 3);
    // A new controller (epoch 2), empty yet: the back-end's acknowledgement of epoch 1
    // makes a snapshot, which is not sent while distribution is held.
    let mut fib = Fib::new(2, 10);
    let mut d = Distributor::default();
    d.add(mac, t0);
    d.on_ack(mac, ws[0].1.ack(), &mut fib, t0);
    assert!(d.peers[&mac].snap.is_some());
    // The routing suite resends the table; distribution starts.
    fib.set(pfx("192.0.2.0/24"), Some(gw(2)));
    let mut out = Vec::new();
    d.tick(&mut fib, t0, &mut out);
    assert!(!out.is_empty());
    for (_, b) in &out {
        assert!(b.snapshot && b.version == fib.version(), "{b:?}");
        let (_, w, t) = &mut ws[0];
        w.accept(mac, b, t);
        w.flush(t);
        assert_eq!(t.len(), 3, "the back-end's table changed size");
    }
    assert_eq!(ws[0].1.epoch, 2);
}

#[test]
fn unresolved_and_connected_routes_are_held_not_installed() {
    let mut w = Writer::new();
    let mut t = table();
    let b = RouteBatch {
        epoch: 1,
        version: 3,
        base: 0,
        snapshot: true,
        last: true,
        routes: vec![
            entry(pfx("192.0.2.0/24"), Some(&gw(2))),
            entry(
                pfx("198.51.100.0/24"),
                Some(&gateways(vec![Ipv4Addr::new(10, 9, 0, 1)])),
            ),
            entry(pfx("10.2.0.0/24"), Some(&gw(3))),
        ],
    };
    assert!(w.handle(MacAddr::BROADCAST, &b, &mut t));
    let a = w.ack();
    assert_eq!((a.routes, a.unresolved, a.version, a.epoch), (3, 1, 3, 1));
    assert_eq!(t.len(), 3, "two connected routes and 192.0.2.0/24");
    assert_eq!(w.stats.connected_skipped, 1);
    // The same three in the controller's table give the same digest.
    let mut fib = Fib::new(1, 10);
    fib.set(pfx("192.0.2.0/24"), Some(gw(2)));
    fib.set(
        pfx("198.51.100.0/24"),
        Some(gateways(vec![Ipv4Addr::new(10, 9, 0, 1)])),
    );
    fib.set(pfx("10.2.0.0/24"), Some(gw(3)));
    assert_eq!(fib.digest(), a.digest);
    // A delta out of order is not applied.
    let late = RouteBatch {
        epoch: 1,
        version: 9,
        base: 5,
        snapshot: false,
        last: false,
        routes: vec![entry(pfx("192.0.2.0/24"), None)],
    };
    assert!(!w.handle(MacAddr::BROADCAST, &late, &mut t));
    assert_eq!((w.version, w.stats.out_of_order, t.len()), (3, 1, 3));
}
