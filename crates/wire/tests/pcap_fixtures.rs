//! Parses frames captured from real Linux hosts (see fixtures/README.md) and checks every
//! field the data plane relies on.

use pcap_file::pcap::PcapReader;
use std::net::Ipv4Addr;
use wire::{arp, checksum, ethernet, icmp, ipv4, tcp, udp};

fn frames(name: &str) -> Vec<Vec<u8>> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let f = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut r = PcapReader::new(f).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.unwrap().data.into_owned());
    }
    out
}

#[derive(Default, Debug)]
struct Seen {
    arp_request: usize,
    arp_reply: usize,
    echo: usize,
    time_exceeded: usize,
    net_unreachable: usize,
    fragments: usize,
    tcp_rx: usize,
    tcp_tx_partial: usize,
    udp_rx: usize,
}

/// Checks every frame captured on the host at `me`, and counts what kinds were seen.
fn check(name: &str, me: Ipv4Addr) -> Seen {
    let mut s = Seen::default();
    for (i, f) in frames(name).iter().enumerate() {
        let e =
            ethernet::Frame::new_checked(&f[..]).unwrap_or_else(|err| panic!("{name} #{i}: {err}"));
        assert_eq!(e.vlan(), None);
        match e.ethertype() {
            ethernet::ethertype::ARP => {
                let a = arp::Packet::new_checked(e.payload()).unwrap();
                match a.operation() {
                    arp::Operation::Request => s.arp_request += 1,
                    arp::Operation::Reply => {
                        s.arp_reply += 1;
                        assert_eq!(
                            a.sender_mac(),
                            e.src(),
                            "{name} #{i}: reply sender is the frame's source"
                        );
                    }
                }
            }
            ethernet::ethertype::IPV4 => {
                let p = ipv4::Packet::new_checked(e.payload()).unwrap();
                assert!(p.verify_checksum(), "{name} #{i}: IP header checksum");
                assert_eq!(p.check_options(), Ok(false));
                let received = p.dst() == me;
                if p.is_fragment() {
                    s.fragments += 1;
                    continue;
                }
                match p.protocol() {
                    ipv4::protocol::ICMP => {
                        let m = icmp::Packet::new_checked(p.payload()).unwrap();
                        assert!(m.verify_checksum(), "{name} #{i}: ICMP checksum");
                        match (m.msg_type(), m.code()) {
                            (0 | 8, 0) => s.echo += 1,
                            (11, 0) => {
                                s.time_exceeded += 1;
                                assert_eq!(p.src(), Ipv4Addr::new(10, 1, 0, 1));
                                let quoted = ipv4::Packet::new_checked(m.data()).unwrap();
                                assert_eq!(
                                    quoted.ttl(),
                                    1,
                                    "the quote is the datagram as it arrived"
                                );
                            }
                            (3, 0) => s.net_unreachable += 1,
                            other => panic!("{name} #{i}: unexpected ICMP {other:?}"),
                        }
                    }
                    ipv4::protocol::TCP => {
                        let t = tcp::Packet::new_checked(p.payload()).unwrap();
                        assert!(t.src_port() == 5201 || t.dst_port() == 5201);
                        if received {
                            assert!(
                                t.verify_checksum(p.src(), p.dst()),
                                "{name} #{i}: TCP checksum"
                            );
                            s.tcp_rx += 1;
                        } else {
                            // Sent: left to offload (the field holds the folded pseudo-header
                            // sum), or complete (resets the kernel builds itself).
                            let ps = checksum::pseudo_header(
                                p.src(),
                                p.dst(),
                                6,
                                p.payload().len() as u16,
                            );
                            if t.checksum() == checksum::fold(ps) {
                                s.tcp_tx_partial += 1;
                            } else {
                                assert!(
                                    t.verify_checksum(p.src(), p.dst()),
                                    "{name} #{i}: TCP checksum neither partial nor valid"
                                );
                            }
                        }
                    }
                    ipv4::protocol::UDP => {
                        let u = udp::Packet::new_checked(p.payload()).unwrap();
                        assert_eq!(u.len(), p.payload().len());
                        if received {
                            assert!(
                                u.verify_checksum(p.src(), p.dst()),
                                "{name} #{i}: UDP checksum"
                            );
                            s.udp_rx += 1;
                        }
                    }
                    other => panic!("{name} #{i}: protocol {other}"),
                }
            }
            other => panic!("{name} #{i}: ethertype {other:#06x}"),
        }
    }
    s
}

#[test]
fn frames_captured_on_the_source_host() {
    let s = check("src1-through-router.pcap", Ipv4Addr::new(10, 1, 0, 10));
    assert!(s.arp_request >= 1 && s.arp_reply >= 1, "{s:?}");
    assert!(
        s.echo >= 4 && s.time_exceeded == 1 && s.net_unreachable == 1,
        "{s:?}"
    );
    assert_eq!(s.fragments, 6, "{s:?}");
    assert!(
        s.tcp_rx > 10 && s.tcp_tx_partial > 10 && s.udp_rx >= 1,
        "{s:?}"
    );
}

#[test]
fn frames_captured_on_the_sink_host() {
    let s = check("sink1-through-router.pcap", Ipv4Addr::new(10, 3, 0, 10));
    assert!(s.echo == 2 && s.fragments == 6, "{s:?}");
    assert!(s.tcp_rx > 10 && s.udp_rx > 10, "{s:?}");
}

#[test]
fn every_captured_frame_survives_the_fuzz_entry_point() {
    for name in [
        "src1-through-router.pcap",
        "sink1-through-router.pcap",
        "ipv6-two-hosts.pcap",
    ] {
        for f in frames(name) {
            wire::fuzzing::parse_frame(&f);
            for cut in [0, 1, 13, 14, 20, 33, 34, 41, 54] {
                wire::fuzzing::parse_frame(&f[..cut.min(f.len())]);
            }
        }
    }
}

/// Every IPv6 frame of two real hosts (fixtures/README.md) parses: the extension-header
/// walk reaches the upper layer, every upper-layer checksum of an unfragmented packet
/// verifies, and ICMPv6 and ND messages parse to what they are and emit to the same bytes.
#[test]
fn ipv6_frames_of_real_hosts() {
    use std::collections::BTreeMap;
    use wire::{icmpv6, ipv6};
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, f) in frames("ipv6-two-hosts.pcap").iter().enumerate() {
        let e = ethernet::Frame::new_checked(&f[..]).unwrap();
        assert_eq!(e.ethertype(), ethernet::ethertype::IPV6, "#{i}");
        let p = ipv6::Packet::new_checked(e.payload()).unwrap_or_else(|err| panic!("#{i}: {err}"));
        let u = p.upper().unwrap_or_else(|err| panic!("#{i}: {err}"));
        if u.hop_by_hop {
            *seen.entry("hop-by-hop").or_default() += 1;
        }
        if let Some(fr) = u.fragment {
            *seen.entry("fragment").or_default() += 1;
            if fr.offset > 0 {
                continue; // no upper-layer header here
            }
        } else {
            assert!(p.verify_upper_checksum(&u), "#{i}: upper-layer checksum");
        }
        let upper = &p.packet()[u.offset..];
        match u.protocol {
            ipv6::next_header::ICMPV6 => {
                let m = icmpv6::Packet::new_checked(upper).unwrap();
                let r = icmpv6::Repr::parse(&m).unwrap_or_else(|err| panic!("#{i}: {err}"));
                let kind = match r {
                    icmpv6::Repr::EchoRequest { .. } => "echo request",
                    icmpv6::Repr::EchoReply { .. } => "echo reply",
                    icmpv6::Repr::NeighborSolicit { target, options } => {
                        assert!(options.source_lladdr.is_some(), "#{i}");
                        assert_eq!(p.dst(), ipv6::solicited_node(target), "#{i}");
                        "neighbor solicitation"
                    }
                    icmpv6::Repr::NeighborAdvert {
                        solicited,
                        target,
                        options,
                        ..
                    } => {
                        assert!(solicited && options.target_lladdr.is_some(), "#{i}");
                        assert_eq!(target, p.src(), "#{i}");
                        "neighbor advertisement"
                    }
                    icmpv6::Repr::RouterSolicit { .. } => {
                        assert_eq!(p.hop_limit(), 255, "#{i}");
                        "router solicitation"
                    }
                    _ => "other icmpv6",
                };
                *seen.entry(kind).or_default() += 1;
                if u.fragment.is_none() && !matches!(r, icmpv6::Repr::Other { .. }) {
                    let mut b = vec![0u8; r.buffer_len()];
                    r.emit(&mut b, p.src(), p.dst()).unwrap();
                    assert_eq!(&b[..], upper, "#{i}: emits the captured bytes");
                }
            }
            ipv6::next_header::UDP => {
                let d = udp::Packet::new_checked(upper).unwrap();
                assert!(d.verify_checksum6(p.src(), p.dst()), "#{i}");
                *seen.entry("udp").or_default() += 1;
            }
            ipv6::next_header::TCP => {
                let t = tcp::Packet::new_checked(upper).unwrap();
                assert!(t.verify_checksum6(p.src(), p.dst()), "#{i}");
                *seen.entry("tcp").or_default() += 1;
            }
            other => panic!("#{i}: upper layer {other}"),
        }
    }
    for kind in [
        "echo request",
        "echo reply",
        "neighbor solicitation",
        "neighbor advertisement",
        "router solicitation",
        "hop-by-hop",
        "fragment",
        "udp",
        "tcp",
    ] {
        assert!(
            seen.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} in {seen:?}"
        );
    }
}
