//! Entry points shared by the fuzz targets and the tests that replay their corpora.
//!
//! Each function parses arbitrary bytes through every accessor a caller might use; the only
//! promise checked is "no panic", plus internal consistency asserts that would reveal a
//! parser bug.

use crate::{arp, axon, dhcp, dist, ethernet, icmp, icmpv6, ipv4, ipv6, tcp, udp};

/// Parses `data` as an Ethernet frame and every layer inside it.
pub fn parse_frame(data: &[u8]) {
    let Ok(f) = ethernet::Frame::new_checked(data) else {
        return;
    };
    let _ = (f.dst(), f.src(), f.vlan());
    match f.ethertype() {
        ethernet::ethertype::ARP => parse_arp(f.payload()),
        ethernet::ethertype::IPV4 => parse_ipv4(f.payload()),
        ethernet::ethertype::IPV6 => parse_ipv6(f.payload()),
        dist::ETHERTYPE if f.vlan().is_none() => {
            parse_dist(f.payload());
            check_dist_auth(data);
        }
        dist::ETHERTYPE => parse_dist(f.payload()),
        axon::ETHERTYPE => parse_axon(f.payload()),
        _ => {}
    }
}

/// Checks an untagged DIST frame's authentication; then seals whatever parses and checks
/// that it verifies exactly once.
pub fn check_dist_auth(data: &[u8]) {
    let key = dist::auth::Key::new(1, &[0x5a; 32]).expect("a long enough key");
    let _ = dist::auth::trailer(data);
    let _ = dist::auth::verify(data, &key);
    let mut g = dist::auth::Guard::new(Some(key.clone()), 60_000_000_000);
    let _ = g.check(data, 1 << 60);
    if data.len() >= 14 && dist::Repr::parse(&data[14..]).is_ok() {
        let mut f = data.to_vec();
        if dist::auth::seal(&mut f, &key, 1 << 60).is_ok() {
            assert_eq!(g.check(&f, 1 << 60), Ok(()), "a sealed frame verifies");
            assert_eq!(g.check(&f, 1 << 60), Err(dist::auth::Reject::Replayed));
        }
    }
}

pub fn parse_arp(data: &[u8]) {
    if let Ok(p) = arp::Packet::new_checked(data) {
        let r = arp::Repr::parse(&p);
        let mut b = [0u8; arp::PACKET_LEN];
        r.emit(&mut b).expect("emit into a full-size buffer");
        assert_eq!(
            arp::Repr::parse(&arp::Packet::new_checked(&b[..]).unwrap()),
            r
        );
    }
}

pub fn parse_ipv4(data: &[u8]) {
    let Ok(p) = ipv4::Packet::new_checked(data) else {
        return;
    };
    let _ = (
        p.verify_checksum(),
        p.check_options(),
        p.is_fragment(),
        p.frag_offset(),
    );
    assert!(p.payload().len() + p.header_len() == p.total_len());
    let (src, dst) = (p.src(), p.dst());
    match p.protocol() {
        ipv4::protocol::ICMP => {
            if let Ok(i) = icmp::Packet::new_checked(p.payload()) {
                let _ = i.verify_checksum();
                let r = icmp::Repr::parse(&i);
                let mut b = vec![0u8; r.buffer_len()];
                r.emit(&mut b).expect("emit into buffer_len bytes");
            }
        }
        ipv4::protocol::UDP => {
            if let Ok(u) = udp::Packet::new_checked(p.payload()) {
                let _ = (u.verify_checksum(src, dst), u.payload(), u.is_empty());
                if u.dst_port() == dhcp::SERVER_PORT {
                    parse_dhcp(u.payload());
                }
            }
        }
        ipv4::protocol::TCP => {
            if let Ok(t) = tcp::Packet::new_checked(p.payload()) {
                let _ = (t.verify_checksum(src, dst), t.payload(), t.seq(), t.ack());
            }
        }
        _ => {}
    }
    // The mutable path: in-place edits on a copy never panic either.
    let mut copy = data.to_vec();
    if let Ok(mut m) = ipv4::Packet::new_checked(&mut copy[..]) {
        if m.ttl() > 1 {
            m.decrement_ttl();
        }
        let _ = m.fill_transport_checksum();
    }
}

/// Parses `data` as an IPv6 packet: the extension-header walk, the upper-layer checksum,
/// and ICMPv6 (with ND options), UDP or TCP behind it; whatever ICMPv6 parses must emit and
/// parse back to itself.
pub fn parse_ipv6(data: &[u8]) {
    let Ok(p) = ipv6::Packet::new_checked(data) else {
        return;
    };
    let _ = (p.traffic_class(), p.flow_label(), p.hop_limit());
    assert_eq!(p.payload().len() + ipv6::HEADER_LEN, p.total_len());
    let r = ipv6::Repr::parse(&p);
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut b).expect("emit into buffer_len bytes");
    assert_eq!(&b[..ipv6::HEADER_LEN], &p.packet()[..ipv6::HEADER_LEN]);
    let Ok(u) = p.upper() else {
        return;
    };
    assert!(u.offset <= p.total_len() && u.extensions <= ipv6::MAX_EXTENSIONS);
    let _ = p.verify_upper_checksum(&u);
    let (src, dst) = (p.src(), p.dst());
    let upper = &p.packet()[u.offset..];
    match u.protocol {
        ipv6::next_header::ICMPV6 => {
            if let Ok(i) = icmpv6::Packet::new_checked(upper) {
                let _ = i.verify_checksum(src, dst);
                if let Ok(r) = icmpv6::Repr::parse(&i) {
                    let mut b = vec![0u8; r.buffer_len()];
                    r.emit(&mut b, src, dst)
                        .expect("emit into buffer_len bytes");
                    let q = icmpv6::Packet::new_checked(&b[..]).expect("emitted");
                    assert!(q.verify_checksum(src, dst));
                    assert_eq!(icmpv6::Repr::parse(&q), Ok(r));
                }
            }
        }
        ipv6::next_header::UDP => {
            if let Ok(d) = udp::Packet::new_checked(upper) {
                let _ = (d.verify_checksum6(src, dst), d.payload());
            }
        }
        ipv6::next_header::TCP => {
            if let Ok(t) = tcp::Packet::new_checked(upper) {
                let _ = (t.verify_checksum6(src, dst), t.payload(), t.seq());
            }
        }
        _ => {}
    }
    // The error rules and builder on whatever arrived: an error, if allowed, is a
    // well-formed IPv6 packet within the minimum MTU.
    for (i, kind) in [
        icmpv6::ErrorKind::TimeExceeded(0),
        icmpv6::ErrorKind::PacketTooBig(1280),
        icmpv6::ErrorKind::ParamProblem {
            code: icmpv6::param_problem::OPTION,
            pointer: data.first().copied().unwrap_or(0) as u32,
        },
    ]
    .into_iter()
    .enumerate()
    {
        if icmpv6::error_allowed(data, kind, i == 1).is_ok() {
            let e = icmpv6::build_error(data, kind, dst, 64).expect("a readable packet");
            assert!(e.len() <= ipv6::MIN_MTU);
            let q = ipv6::Packet::new_checked(&e[..]).expect("well-formed");
            let u = q.upper().expect("no extension headers");
            assert!(q.verify_upper_checksum(&u));
        }
    }
    let mut copy = data.to_vec();
    if let Ok(mut m) = ipv6::Packet::new_checked(&mut copy[..]) {
        let h = m.hop_limit();
        m.set_hop_limit(h.wrapping_sub(1));
        m.set_src(dst);
        let _ = m.payload_mut();
    }
}

/// Parses a DIST message; whatever parses must emit and parse back to itself.
pub fn parse_dist(data: &[u8]) {
    if let Ok(r) = dist::Repr::parse(data) {
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b).expect("a parsed message emits");
        assert_eq!(dist::Repr::parse(&b).expect("an emitted message parses"), r);
        // A filter chunk into a set being put together: whole, refused or waiting, never
        // a panic; a one-chunk set whose digest checks comes back as its text.
        if let dist::Message::Filters(c) = &r.msg {
            let mut inbox = dist::FilterInbox::default();
            let got = inbox.take(c);
            let whole = c.offset == 0
                && c.data.len() == c.total as usize
                && c.data.len() <= dist::FILTERS_CHUNK;
            if whole && dist::filters_digest(&c.data) == c.digest {
                assert_eq!(got, Ok(Some(c.data.clone())));
            }
        }
    }
}

/// An Axon header, the walk along its path, and the control message it may carry.
pub fn parse_axon(data: &[u8]) {
    let mut d = data.to_vec();
    if let Ok(mut h) = axon::Header::new_checked(&mut d[..]) {
        let (fwd, rev) = (h.forward(), h.reverse());
        assert_eq!(fwd.len(), h.fwd() as usize);
        assert_eq!(rev.len(), h.rev() as usize);
        if let Ok(m) = axon::Msg::parse(h.payload()) {
            let mut b = Vec::new();
            m.emit(&mut b);
            assert_eq!(
                axon::Msg::parse(&b),
                Ok(m),
                "a parsed message emits and parses back"
            );
        }
        while h.advance(3).is_some() {}
        assert_eq!(h.reverse().len(), fwd.len() + rev.len());
    }
}

/// A DHCP client message, and the reply a server would build for it.
pub fn parse_dhcp(data: &[u8]) {
    if let Ok(r) = dhcp::Request::parse(data) {
        let reply = dhcp::Reply {
            msg_type: dhcp::MsgType::Offer,
            xid: r.xid,
            flags: r.flags,
            ciaddr: r.ciaddr,
            yiaddr: r.requested.unwrap_or(r.ciaddr),
            giaddr: r.giaddr,
            chaddr: r.chaddr,
            server_id: r.server_id.unwrap_or(r.ciaddr),
            lease_s: 60,
            subnet_mask: r.ciaddr,
            router: None,
        }
        .to_vec();
        assert!(reply.len() >= 300);
    }
}

/// IPFIX: `data` decoded as a message (no panic); and read as flow records (a byte
/// stream cut into fields), encoded and decoded back, which must give the same records.
pub fn ipfix(data: &[u8]) {
    use crate::ipfix::{self, FlowRecord};
    use std::net::IpAddr;
    let _ = ipfix::decode(data, &mut ipfix::Templates::new());
    let mut b = data.iter().copied();
    let mut byte = || b.next();
    let mut records = Vec::new();
    while records.len() < 64 {
        let Some(kind) = byte() else { break };
        let mut take = |n: usize| -> Option<Vec<u8>> { (0..n).map(|_| byte()).collect() };
        let v6 = kind & 1 == 1;
        let addr = |b: Vec<u8>| -> IpAddr {
            if v6 {
                IpAddr::from(<[u8; 16]>::try_from(b).unwrap_or([0; 16]))
            } else {
                IpAddr::from(<[u8; 4]>::try_from(b).unwrap_or([0; 4]))
            }
        };
        let a = if v6 { 16 } else { 4 };
        let (Some(s), Some(d), Some(h), Some(x)) = (take(a), take(a), take(a), take(40)) else {
            break;
        };
        let u = |i: usize, n: usize| x[i..i + n].iter().fold(0u64, |v, b| v << 8 | *b as u64);
        records.push(FlowRecord {
            src: addr(s),
            dst: addr(d),
            next_hop: addr(h),
            protocol: x[0],
            src_port: u(1, 2) as u16,
            dst_port: u(3, 2) as u16,
            icmp_type_code: u(5, 2) as u16,
            tcp_flags: u(7, 2) as u16,
            ingress: u(9, 4) as u32,
            egress: u(13, 4) as u32,
            octets: u(17, 8),
            packets: u(25, 4),
            start_ms: u(29, 4),
            end_ms: u(33, 4),
            status: x[37],
            end_reason: x[38],
            sampling: x[39] as u32 + 1,
        });
    }
    let mut seq = 0;
    let mut known = ipfix::Templates::new();
    let mut back = Vec::new();
    for (m, n) in ipfix::messages(9, 0, &mut seq, true, &records) {
        let d = ipfix::decode(&m, &mut known).expect("an encoded message decodes");
        assert_eq!(d.records.len(), n);
        for (t, f) in &d.records {
            back.push(FlowRecord::from_fields(*t, f).expect("a record of ours"));
        }
    }
    assert_eq!(
        back, records,
        "encoded and decoded, the records are the same"
    );
}
