//! The star router of labs/star.toml: four `tessera forwarder`s with `[star]`, each facing
//! its own network, joined by a Linux bridge; real hosts on each network see one router.

mod common;

use common::*;

const LAB: &str = "labs/star.toml";

fn counters_of(lab: &TestLab, e: &str) -> serde_json::Value {
    lab.counters(e)
}

#[test]
fn hosts_on_every_network_see_one_router() {
    let lab = TestLab::up(repo_path(LAB), &[]);
    // Between any two networks: one TTL decrement (the ingress forwarder's), both ways.
    for a in 1..=4 {
        for b in 1..=4 {
            if a == b {
                continue;
            }
            let p = lab.sh(
                &format!("h{a}"),
                &[
                    "ping",
                    "-c",
                    "2",
                    "-i",
                    "0.2",
                    "-W",
                    "2",
                    &format!("10.{b}.0.10"),
                ],
            );
            assert!(
                p.contains("2 received") && p.matches("ttl=63").count() == 2,
                "h{a} -> h{b}: {p}"
            );
        }
    }
    // Time exceeded from the router's address on the network the packet came from.
    for (a, b) in [(1, 3), (2, 4), (4, 1)] {
        let o = lab.exec(
            &format!("h{a}"),
            &[
                "ping",
                "-c",
                "1",
                "-t",
                "1",
                "-W",
                "2",
                &format!("10.{b}.0.10"),
            ],
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains(&format!("From 10.{a}.0.1 ")) && out.contains("Time to live exceeded"),
            "h{a} -> h{b}: {out}"
        );
    }
    // A host that does not answer ARP behind s3: host unreachable, from the address where
    // the packet entered (s1's), though s3 found it out.
    let o = lab.exec("h1", &["ping", "-c", "1", "-W", "6", "10.3.0.99"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("From 10.1.0.1 ") && out.contains("Destination Host Unreachable"),
        "{out}"
    );
    // The lookup happened once: s1 handed the packets across, s3 sent them on (in user
    // space or, with AF_XDP, in the fast path, on by default: then most of them).
    let (s1, s3) = (counters_of(&lab, "s1"), counters_of(&lab, "s3"));
    let fast = |c: &serde_json::Value| event_count(c, "fast_path_forwarded");
    assert!(event_count(&s1, "star_sent") + fast(&s1) >= 6, "{s1}");
    assert!(event_count(&s3, "star_received") + fast(&s3) >= 6, "{s3}");
    assert_eq!(drop_count(&s3, "star_malformed"), 0, "{s3}");
    if io_backend() != "packet" {
        assert!(fast(&s1) >= 6 && fast(&s3) >= 6, "{s1}\n{s3}");
    }
    // TCP between every pair of networks.
    for a in 1..=4 {
        for b in (a + 1)..=4 {
            let (client, server) = (format!("h{a}"), format!("h{b}"));
            lab.iperf3(&client, &server, &format!("10.{b}.0.10"), &["-t", "1"]);
        }
    }
}

/// Members restarted under a stream (the default config: the fast path, handed over to
/// the next start, `[io] restart_grace_s`): s1, where the packets enter and get the star
/// header, then s3, where it comes off; the stream loses nothing. (On AF_PACKET ports the
/// tcx fast path leaves the star's crossings to user space, so a stream across the star
/// stops while a member restarts; the member still hands its tcx link over, with what it
/// forwards between its own ports.)
///
/// The hosts are left as containers have them (`--hosts plain`: GRO off, no XDP), so the
/// last member's fast path sends the stream to its host through the hand-off to tcx,
/// whose pinned link a restart takes over as the XDP program's.
#[test]
fn members_restarted_under_a_stream_lose_nothing() {
    let lab = TestLab::up(repo_path(LAB), &["--hosts", "plain"]);
    if io_backend() == "packet" {
        lab.element("stop", "s1");
        lab.element("start", "s1");
        let log = lab.logs("s1");
        assert!(
            log.contains("taking over from this forwarder's last start"),
            "{log}"
        );
        return;
    }
    // s3 resolves h3, and the neighbour reaches its fast path.
    let p = lab.sh(
        "h1",
        &["ping", "-c", "2", "-i", "0.2", "-W", "2", "10.3.0.10"],
    );
    assert!(p.contains("2 received"), "{p}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mac = lab.mac("s1", "s1-ext");
    let (sent, got) = stream_across(&lab, ("h1", "10.1.0.10"), ("h3", "10.3.0.10", &mac), || {
        for m in ["s1", "s3"] {
            lab.element("stop", m);
            lab.element("start", m);
        }
    });
    assert!(sent > 50_000, "sent {sent}");
    assert_eq!(
        got,
        sent,
        "lost {} of {sent} across the restarts\n{}\n{}",
        sent.saturating_sub(got),
        lab.logs("s1"),
        lab.logs("s3")
    );
    for m in ["s1", "s3"] {
        let log = lab.logs(m);
        assert!(
            log.contains("taking over from this forwarder's last start"),
            "{log}"
        );
    }
    // The stream left s3 for h3 through the hand-off (counted since s3's restart).
    let c = counters_of(&lab, "s3");
    let handed = c["fast_path"]["interfaces"]["s3-ext"]["tx_handed_to_tcx"]
        .as_u64()
        .unwrap_or(0);
    assert!(handed > 10_000, "s3 handed {handed} frames to tcx: {c}");
}

/// A plain config (`--io auto`) on plain hosts keeps every port of a star member on
/// AF_XDP, where a forwarder would put a port to a plain host on AF_PACKET
/// (docs/forwarder.md, "Ports on AF_PACKET by choice"): the tcx fast path leaves frames
/// bound across the star's switch to user space, XDP carries them. Every crossing from h1
/// to h4 and back is the fast path's.
#[test]
fn star_members_keep_af_xdp_ports_on_plain_hosts() {
    let lab = TestLab::up(repo_path(LAB), &["--hosts", "plain", "--io", "auto"]);
    let p = lab.sh(
        "h1",
        &["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.4.0.10"],
    );
    assert!(p.contains("3 received"), "{p}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let user = |lab: &TestLab, e: &str| {
        counters_of(lab, e)["events"]["ip4_forwarded"]
            .as_u64()
            .unwrap()
    };
    let (u1, u4) = (user(&lab, "s1"), user(&lab, "s4"));
    let p = lab.sh(
        "h1",
        &[
            "ping",
            "-c",
            "100",
            "-i",
            "0.005",
            "-W",
            "2",
            "-q",
            "10.4.0.10",
        ],
    );
    assert!(p.contains("100 received"), "{p}");
    for e in ["s1", "s4"] {
        let v = lab.show_json("interfaces", e);
        for port in v.as_array().unwrap() {
            assert_eq!(port["backend"], "xdp", "{e}: {port}");
        }
    }
    assert_eq!(user(&lab, "s1"), u1, "{}", counters_of(&lab, "s1"));
    assert_eq!(user(&lab, "s4"), u4, "{}", counters_of(&lab, "s4"));
}
