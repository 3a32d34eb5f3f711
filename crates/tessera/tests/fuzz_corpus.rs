//! Replays every fuzz target's corpus (fuzz/corpus/TARGET) through the same entry points the
//! fuzz targets call, so inputs that once found a bug keep being checked on stable Rust.

use std::path::Path;

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    assert!(!v.is_empty(), "empty corpus {}", dir.display());
    v.sort();
    v
}

#[test]
fn frame_corpus() {
    for d in corpus("frame") {
        wire::fuzzing::parse_frame(&d);
    }
}

#[test]
fn ipv6_corpus() {
    for d in corpus("ipv6") {
        wire::fuzzing::parse_ipv6(&d);
    }
}

#[test]
fn forward_corpus() {
    let (mut f, now) = dataplane::fuzzing::forwarder();
    for d in corpus("forward") {
        dataplane::fuzzing::forward(&mut f, now, &d);
    }
    assert!(
        f.counters.events(dataplane::Event::Forwarded) > 0,
        "the seeds include forwardable frames"
    );
    for e in [
        dataplane::Event::Forwarded6,
        dataplane::Event::Nd6AdvertsSent,
        dataplane::Event::Nd6Learned,
    ] {
        assert!(f.counters.events(e) > 0, "the seeds reach IPv6's {e:?}");
    }
}

#[test]
fn ipfix_corpus() {
    for d in corpus("ipfix") {
        wire::fuzzing::ipfix(&d);
    }
}

#[test]
fn config_corpus() {
    for d in corpus("config") {
        control::fuzzing::config(&d);
    }
}

#[test]
fn routes_corpus() {
    for d in corpus("routes") {
        control::fuzzing::routes(&d);
    }
}

#[test]
fn mrt_corpus() {
    for d in corpus("mrt") {
        control::fuzzing::mrt(&d);
    }
}

#[test]
fn dist_corpus() {
    let mut parsed = 0;
    for d in corpus("dist") {
        wire::fuzzing::parse_dist(&d);
        parsed += wire::dist::Repr::parse(&d).is_ok() as usize;
    }
    assert!(
        parsed >= 4,
        "the seeds include one valid message of each type"
    );
    // The named seed of a routes message with an IPv6 entry beside an IPv4 one.
    let d = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/dist/routes-ipv6-and-ipv4"),
    )
    .unwrap();
    let r = wire::dist::Repr::parse(&d).unwrap();
    let wire::dist::Message::Routes(b) = r.msg else {
        panic!("{r:?}")
    };
    assert!(
        b.routes[0].prefix.is_ipv4() && b.routes[1].prefix.is_ipv6(),
        "{b:?}"
    );
    // The named seeds of the flow export's messages.
    let seed = |name: &str| {
        let d = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../fuzz/corpus/dist/{name}")),
        )
        .unwrap();
        wire::dist::Repr::parse(&d).unwrap().msg
    };
    assert!(matches!(
        seed("flow-config"),
        wire::dist::Message::FlowConfig(c) if c.interval == 100
    ));
    let wire::dist::Message::FlowRecords(rs) = seed("flow-records") else {
        panic!("flow-records")
    };
    assert_eq!(
        rs.iter()
            .map(|r| (r.is_v6(), r.ingress, r.egress))
            .collect::<Vec<_>>(),
        [(false, 10, 20), (true, 20, 10)]
    );
}

#[test]
fn fpm_corpus() {
    let mut frames = 0;
    for d in corpus("fpm") {
        control::fuzzing::fpm(&d);
        frames += wire::fpm::split_frame(&d).is_ok_and(|f| f.is_some()) as usize;
    }
    assert!(frames >= 2, "the seeds include zebra's own frames");
    // The named seed of IPv6 routes (one through a link-local gateway beside a global one).
    let d = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/fpm/zebra-ipv6-routes"),
    )
    .unwrap();
    let (_, payload) = wire::fpm::split_frame(&d).unwrap().unwrap();
    let m = wire::fpm::messages(payload).unwrap();
    assert!(
        m.iter()
            .all(|m| matches!(m, wire::fpm::Message::Route(r) if r.dst.is_ipv6()))
            && m.len() == 2,
        "{m:?}"
    );
}

#[test]
fn balance_corpus() {
    let (mut b, now) = dataplane::fuzzing::balancer();
    for d in corpus("balance") {
        dataplane::fuzzing::balance(&mut b, now, &d);
    }
    assert!(
        b.counters.events(dataplane::Event::Balanced) > 0,
        "the seeds include balanced frames"
    ); // The IPv6 seeds reach neighbour discovery both ways.
    for e in [
        dataplane::Event::ExtNdAdvertsSent,
        dataplane::Event::IntNdOut,
    ] {
        assert!(b.counters.events(e) > 0, "{e:?}");
    }
}

/// The switch on the LB's corpus (frames behind a control byte): no panic, and frames
/// go out.
#[test]
fn switch_on_frames() {
    let (mut s, now) = dataplane::fuzzing::switch();
    for d in corpus("balance") {
        let mut d = d;
        if let Some(c) = d.first_mut() {
            *c |= 4;
        }
        dataplane::fuzzing::switch_frame(&mut s, now, &d);
    }
    assert!(
        s.counters.events(dataplane::Event::SwitchFlooded) > 0,
        "the seeds include frames the switch floods"
    );
}

/// The Axon on its whole corpus (frames behind a control byte): no panic. Then the
/// named seeds alone, in order, on a fresh Axon (entries the fuzzer adds change what
/// the state is when each seed arrives): a host learnt, an Axon-ARP reply that sets a
/// route up, an ARP request answered from it, flooded links, a DHCP DISCOVER and REQUEST;
/// then the IPv6 ones.
#[test]
fn axon_corpus() {
    let (mut a, now) = dataplane::fuzzing::axon();
    for d in corpus("axon") {
        dataplane::fuzzing::axon_frame(&mut a, now, &d);
    }
    let (mut a, now) = dataplane::fuzzing::axon();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/axon");
    for seed in [
        "ipv4-from-host",
        "axon-arp-reply",
        "arp-request",
        "links",
        "dhcp-discover",
        "dhcp-request",
    ] {
        let d = std::fs::read(dir.join(seed)).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        dataplane::fuzzing::axon_frame(&mut a, now, &d);
    }
    assert!(a.counters.events(dataplane::Event::AxonRouteSetups) > 0);
    assert!(a.counters.events(dataplane::Event::AxonArpAnswered) > 0);
    assert!(a.counters.events(dataplane::Event::AxonTopologyRuns) > 1);
    assert!(a.counters.events(dataplane::Event::AxonDhcpOffers) > 0);
    assert!(a.counters.events(dataplane::Event::AxonDhcpAcks) > 0);
    // The same over IPv6, on a fresh Axon: a host learnt from its IPv6 datagram, an
    // Axon-ARP reply of IPv6 addresses that sets a route up (the host told by a
    // neighbour advertisement), the host's neighbour solicitation answered from it.
    let (mut a, now) = dataplane::fuzzing::axon();
    for seed in ["ipv6-from-host", "axon-nd-reply", "nd-solicit"] {
        let d = std::fs::read(dir.join(seed)).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        dataplane::fuzzing::axon_frame(&mut a, now, &d);
    }
    assert_eq!(a.counters.events(dataplane::Event::AxonRouteSetups), 1);
    assert_eq!(a.counters.events(dataplane::Event::AxonArpAnswered), 2);
    assert_eq!(a.counters.drops(dataplane::Drop::AxonNdMalformed), 0);
}

#[test]
fn capture_corpus() {
    for d in corpus("capture") {
        dataplane::fuzzing::capture(&d);
    }
}

#[test]
fn star_corpus() {
    let (mut f, now) = dataplane::fuzzing::star_forwarder();
    for d in corpus("star") {
        dataplane::fuzzing::forward(&mut f, now, &d);
    }
    // The named seed of an IPv6 star frame, alone on a fresh member: taken.
    let (mut f, now) = dataplane::fuzzing::star_forwarder();
    let d = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/star/ipv6-star-frame"),
    )
    .unwrap();
    dataplane::fuzzing::forward(&mut f, now, &d);
    assert_eq!(
        f.counters.events(dataplane::counters::Event::StarReceived),
        1
    );
}

#[test]
fn reasm_corpus() {
    for d in corpus("reasm") {
        dataplane::fuzzing::reasm(&d);
    }
}

#[test]
fn acl_corpus() {
    for d in corpus("acl") {
        dataplane::fuzzing::acl(&d);
    }
}
