//! The Axon's host ports: frames from hosts (ARP, neighbour discovery, DHCP, IPv4 and IPv6
//! unicast), the resolution of a host's target over the Axon network, and what the Axon
//! answers a host in its neighbours' name.

use super::*;

impl Axon {
    /// A frame from a host.
    pub(super) fn host_frame(&mut self, mut p: Pkt, input: usize, now: Instant) {
        let dst = MacAddr::from_slice(&p.data[0..6]);
        let src = MacAddr::from_slice(&p.data[6..12]);
        if is_group(&src) {
            self.counters.count(Drop::AxonBadSource);
            return self.pool.put(p);
        }
        let et = wire::ethernet::Frame::new_checked(&p.data[..]).map_or(0, |e| e.ethertype());
        if et == ethertype::ARP {
            return self.arp_from_host(p, input, now);
        }
        if et == ethertype::IPV4 {
            if let Ok(ip) = wire::ipv4::Packet::new_checked_header(&p.data[14..]) {
                let a = ip.src();
                if !a.is_unspecified() && !a.is_broadcast() && !a.is_multicast() {
                    self.learn(a.into(), src, input as u8, now);
                }
                if ip.protocol() == wire::ipv4::protocol::UDP && self.is_dhcp(&p.data[14..]) {
                    return self.dhcp(p, input, now);
                }
            }
        }
        if et == ethertype::IPV6 {
            if let Ok(ip) = wire::ipv6::Packet::new_checked(&p.data[14..]) {
                let a = ip.src();
                if !a.is_unspecified() && !a.is_multicast() {
                    self.learn(a.into(), src, input as u8, now);
                }
                // Neighbour discovery goes to the control plane, as ARP does.
                let t = ip.payload().first().copied();
                if ip.next_header() == wire::ipv6::next_header::ICMPV6
                    && matches!(
                        t,
                        Some(
                            wire::icmpv6::kind::NEIGHBOR_SOLICIT
                                | wire::icmpv6::kind::NEIGHBOR_ADVERT
                        )
                    )
                {
                    return self.nd_from_host(p, input, now);
                }
            }
        }
        if is_group(&dst) {
            self.counters.count(Drop::AxonBroadcast);
            return self.pool.put(p);
        }
        let masq = masq_of(&dst).filter(|(port, _)| *port as usize == input);
        let found = match masq {
            Some((_, i)) => self.masq[input].get(i as usize),
            None => self.cam[input].get(&dst),
        };
        let Some(r) = found else {
            self.counters.count(Drop::AxonNoRoute);
            return self.pool.put(p);
        };
        if masq.is_some() {
            // The host addressed the route's index: the far host expects its own MAC.
            p.data[0..6].copy_from_slice(&r.mac.0);
        }
        let Some(path) = r.path.as_ref() else {
            self.counters.count(Drop::AxonNoPath);
            return self.pool.put(p);
        };
        if r.axon == self.cfg.id {
            let out = r.port as usize;
            return self.enqueue(out, p, input);
        }
        let out = path[0] as usize;
        let Some(n) = self.neigh.get(out).copied().flatten() else {
            self.counters.count(Drop::AxonNoPath);
            return self.pool.put(p);
        };
        if (et == ethertype::IPV4 || et == ethertype::IPV6)
            && crate::buf::complete_offloaded_checksum(&mut p)
        {
            self.counters.event(Event::ChecksumFilled);
        }
        let mut c = self.pool.get();
        c.meta = p.meta;
        self.outer(&mut c.data, n.mac, out);
        if axon::append(&mut c.data, Kind::Data, &path[1..], &[input as u8]).is_none() {
            self.counters.count(Drop::AxonNoPath);
            self.pool.put(c);
            return self.pool.put(p);
        }
        c.data.extend_from_slice(&p.data);
        self.pool.put(p);
        if !self.is_axon_port(input) {
            if let Some((pacer, outs)) = self.pacers.get_mut(input).and_then(|x| x.as_mut()) {
                match pacer.enqueue(c, 0) {
                    Ok(()) => outs.push_back(out as u8),
                    Err(c) => {
                        self.counters.count(Drop::AxonPacedOut);
                        self.pool.put(c);
                    }
                }
                return;
            }
        }
        self.enqueue(out, c, input);
    }

    /// A UDP datagram to the DHCP server port.
    pub(super) fn is_dhcp(&self, ip: &[u8]) -> bool {
        let Ok(ip) = wire::ipv4::Packet::new_checked(ip) else {
            return false;
        };
        !ip.is_fragment()
            && wire::udp::Packet::new_checked(ip.payload())
                .is_ok_and(|u| u.dst_port() == wire::dhcp::SERVER_PORT)
    }

    /// The DHCP server: DISCOVER gets an OFFER from the pool (the host's lease, the
    /// address it asks for, or the first free one); REQUEST an ACK if this Axon can lease
    /// that address to that host, else a NAK; RELEASE and DECLINE end the lease.
    pub(super) fn dhcp(&mut self, p: Pkt, input: usize, now: Instant) {
        use wire::dhcp::{MsgType, Reply, Request};
        let req = wire::ipv4::Packet::new_checked(&p.data[14..])
            .ok()
            .and_then(|ip| {
                let u = wire::udp::Packet::new_checked(ip.payload()).ok()?;
                Request::parse(u.payload()).ok()
            });
        self.pool.put(p);
        let Some(r) = req else {
            self.counters.count(Drop::AxonDhcpMalformed);
            return;
        };
        let Some(cfg) = self.cfg.dhcp.clone() else {
            self.counters.count(Drop::AxonDhcpOff);
            return;
        };
        self.leases.retain(|_, l| l.until > now);
        let in_pool = |a: Ipv4Addr| (cfg.first..=cfg.last).contains(&a) && a != cfg.server;
        let taken_by_other = |leases: &HashMap<MacAddr, Lease>, a: Ipv4Addr| {
            leases.iter().any(|(m, l)| l.ip == a && *m != r.chaddr)
        };
        let (msg_type, yiaddr) = match r.msg_type {
            MsgType::Discover => {
                let mine = self.leases.get(&r.chaddr).map(|l| l.ip);
                let wanted = r
                    .requested
                    .filter(|a| in_pool(*a) && !taken_by_other(&self.leases, *a));
                let free = || {
                    let (a, b) = (u32::from(cfg.first), u32::from(cfg.last));
                    (a..=b).map(Ipv4Addr::from).find(|x| {
                        in_pool(*x)
                            && !self.leases.values().any(|l| l.ip == *x)
                            && !self.hosts.contains_key(&IpAddr::V4(*x))
                    })
                };
                let Some(ip) = mine.or(wanted).or_else(free) else {
                    self.counters.count(Drop::AxonDhcpPoolFull);
                    return;
                };
                let bound = self
                    .leases
                    .get(&r.chaddr)
                    .is_some_and(|l| l.bound && l.ip == ip);
                self.leases.insert(
                    r.chaddr,
                    Lease {
                        ip,
                        until: now + if bound { cfg.lease } else { OFFER_HOLD },
                        bound,
                    },
                );
                self.counters.event(Event::AxonDhcpOffers);
                (MsgType::Offer, ip)
            }
            MsgType::Request => {
                if r.server_id.is_some_and(|s| s != cfg.server) {
                    // The host took another server's offer.
                    if self.leases.get(&r.chaddr).is_some_and(|l| !l.bound) {
                        self.leases.remove(&r.chaddr);
                    }
                    self.counters.count(Drop::AxonDhcpIgnored);
                    return;
                }
                let asked = r.requested.unwrap_or(r.ciaddr);
                if in_pool(asked) && !taken_by_other(&self.leases, asked) {
                    self.leases.insert(
                        r.chaddr,
                        Lease {
                            ip: asked,
                            until: now + cfg.lease,
                            bound: true,
                        },
                    );
                    self.learn(asked.into(), r.chaddr, input as u8, now);
                    self.counters.event(Event::AxonDhcpAcks);
                    (MsgType::Ack, asked)
                } else {
                    self.counters.event(Event::AxonDhcpNaks);
                    (MsgType::Nak, Ipv4Addr::UNSPECIFIED)
                }
            }
            MsgType::Release | MsgType::Decline => {
                if self.leases.remove(&r.chaddr).is_none() {
                    self.counters.count(Drop::AxonDhcpIgnored);
                }
                return;
            }
            _ => {
                self.counters.count(Drop::AxonDhcpIgnored);
                return;
            }
        };
        let payload = Reply {
            msg_type,
            xid: r.xid,
            flags: r.flags,
            ciaddr: r.ciaddr,
            yiaddr,
            giaddr: r.giaddr,
            chaddr: r.chaddr,
            server_id: cfg.server,
            lease_s: cfg.lease.as_secs().min(u32::MAX as u64) as u32,
            subnet_mask: cfg.mask,
            router: cfg.router,
        }
        .to_vec();
        // To a host without an address yet (or that asked for broadcast): broadcast.
        let unicast =
            r.flags & 0x8000 == 0 && !r.ciaddr.is_unspecified() && msg_type != MsgType::Nak;
        let frame = wire::frame::UdpFrame {
            eth_dst: if unicast {
                r.chaddr
            } else {
                MacAddr::BROADCAST
            },
            eth_src: self.cfg.macs[input],
            src: cfg.server,
            dst: if unicast {
                r.ciaddr
            } else {
                Ipv4Addr::BROADCAST
            },
            src_port: wire::dhcp::SERVER_PORT,
            dst_port: wire::dhcp::CLIENT_PORT,
            ttl: 64,
            ident: 0,
            dont_frag: false,
            payload: &payload,
        }
        .to_vec();
        let mut c = self.pool.get();
        c.data.extend_from_slice(&frame);
        let cp = self.cfg.ports.len();
        self.enqueue(input, c, cp);
    }

    pub(super) fn outer(&self, buf: &mut Buf, dst: MacAddr, out: usize) {
        buf.extend_from_slice(&dst.0);
        buf.extend_from_slice(&self.cfg.macs[out].0);
        buf.extend_from_slice(&axon::ETHERTYPE.to_be_bytes());
    }

    pub(super) fn learn(&mut self, ip: IpAddr, mac: MacAddr, port: u8, now: Instant) {
        self.hosts.insert(
            ip,
            Host {
                mac,
                port,
                seen: now,
            },
        );
    }

    pub(super) fn arp_from_host(&mut self, p: Pkt, input: usize, now: Instant) {
        let rx_ns = p.meta.rx_ns;
        let parsed =
            wire::arp::Packet::new_checked(&p.data[14..]).map(|a| wire::arp::Repr::parse(&a));
        self.pool.put(p);
        let Ok(a) = parsed else {
            self.counters.count(Drop::ArpMalformed);
            return;
        };
        if is_group(&a.sender_mac) || a.sender_ip.is_unspecified() {
            self.counters.count(Drop::AxonArpIgnored);
            return;
        }
        self.learn(a.sender_ip.into(), a.sender_mac, input as u8, now);
        if a.operation == wire::arp::Operation::Reply {
            if a.target_ip.is_unspecified() && a.target_mac == self.cfg.macs[input] {
                // The answer to an ether-probe: the segment to this host, timed.
                let rx = if rx_ns != 0 { rx_ns } else { realtime_ns() };
                if let Some(s) = self.segments.get_mut(&a.sender_ip) {
                    if s.port as usize == input && s.sent_ns != 0 {
                        s.rtt_ns = Some(rx.saturating_sub(s.sent_ns));
                        s.at = now;
                        s.sent_ns = 0;
                    }
                }
                return;
            }
            // The target answers the ARP this Axon sent in a requester's name.
            match self.waiting.remove(&(a.sender_ip.into(), a.target_mac)) {
                Some(w) => {
                    self.target_answered(w, a.sender_ip.into(), a.sender_mac, input as u8, now)
                }
                None => self.counters.count(Drop::AxonArpIgnored),
            }
            return;
        }
        if a.target_ip == a.sender_ip {
            self.counters.count(Drop::AxonArpIgnored);
            return;
        }
        self.resolve(
            input,
            a.sender_mac,
            a.sender_ip.into(),
            a.target_ip.into(),
            now,
        );
    }

    /// A host's neighbour solicitation or advertisement, taken as its ARP would be: a
    /// solicitation asks for its target (one for duplicate address detection, from the
    /// unspecified address, is left unanswered, so that the address stays the host's); an
    /// advertisement answers the solicitation this Axon sent in a requester's name.
    pub(super) fn nd_from_host(&mut self, p: Pkt, input: usize, now: Instant) {
        use wire::icmpv6::Repr;
        let eth_dst = MacAddr::from_slice(&p.data[0..6]);
        let eth_src = MacAddr::from_slice(&p.data[6..12]);
        let parsed = (|| {
            let ip = wire::ipv6::Packet::new_checked(&p.data[14..]).ok()?;
            let (src, dst) = (ip.src(), ip.dst());
            let icmp = wire::icmpv6::Packet::new_checked(ip.payload()).ok()?;
            if ip.hop_limit() != 255 || !icmp.verify_checksum(src, dst) {
                return None;
            }
            match Repr::parse(&icmp).ok()? {
                Repr::NeighborSolicit { target, options } => {
                    Some((true, src, target, options.source_lladdr.unwrap_or(eth_src)))
                }
                Repr::NeighborAdvert {
                    target, options, ..
                } => Some((false, src, target, options.target_lladdr.unwrap_or(eth_src))),
                _ => None,
            }
        })();
        self.pool.put(p);
        let Some((solicit, src, target, mac)) = parsed else {
            self.counters.count(Drop::AxonNdMalformed);
            return;
        };
        if target.is_multicast() || is_group(&mac) {
            self.counters.count(Drop::AxonNdMalformed);
            return;
        }
        if !solicit {
            // The advertised address is the host's own.
            self.learn(target.into(), mac, input as u8, now);
            match self.waiting.remove(&(target.into(), eth_dst)) {
                Some(w) => self.target_answered(w, target.into(), mac, input as u8, now),
                None => self.counters.count(Drop::AxonArpIgnored),
            }
            return;
        }
        if src.is_unspecified() || src == target {
            self.counters.count(Drop::AxonArpIgnored);
            return;
        }
        self.learn(src.into(), mac, input as u8, now);
        self.resolve(input, mac, src.into(), target.into(), now);
    }

    /// A host on `input` (`mac`, `ip`) asks for `target` (by ARP or neighbour
    /// solicitation): answered at once where this port has a route to it, else asked of
    /// every Axon (Axon-ARP).
    pub(super) fn resolve(
        &mut self,
        input: usize,
        mac: MacAddr,
        ip: IpAddr,
        target: IpAddr,
        now: Instant,
    ) {
        if let Some(&shown) = self.by_ip[input].get(&target) {
            self.reply_to_host(input, mac, ip, shown, target);
            return;
        }
        if self
            .asked
            .get(&(input as u8, target))
            .is_some_and(|t| now.duration_since(*t) < ASK_EVERY)
        {
            return;
        }
        self.asked.insert((input as u8, target), now);
        let req = self.next_req;
        self.next_req = self.next_req.wrapping_add(1);
        let m = Msg::ArpRequest {
            origin: self.cfg.id,
            req,
            src_mac: mac,
            src_ip: ip,
            src_port: input as u8,
            target,
        };
        self.counters.event(Event::AxonArpRequests);
        let targets: Vec<(u32, Vec<u8>)> = self.paths();
        for (_, path) in targets {
            self.send_control(&path, &m);
        }
        // This Axon may have the target itself.
        self.message(m, vec![CONTROL], now);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn arp_to_host(
        &mut self,
        port: usize,
        op: wire::arp::Operation,
        eth_dst: MacAddr,
        sender_mac: MacAddr,
        sender_ip: Ipv4Addr,
        target_mac: MacAddr,
        target_ip: Ipv4Addr,
    ) {
        let mut c = self.pool.get();
        wire::arp::Repr {
            operation: op,
            sender_mac,
            sender_ip,
            target_mac,
            target_ip,
        }
        .append_frame(eth_dst, &mut c.data);
        let cp = self.cfg.ports.len();
        self.enqueue(port, c, cp);
    }

    /// Tells the host (`host_mac`, `host_ip`) on `port` that `ip` is at `mac`: an ARP
    /// reply, or a solicited neighbour advertisement.
    pub(super) fn reply_to_host(
        &mut self,
        port: usize,
        host_mac: MacAddr,
        host_ip: IpAddr,
        mac: MacAddr,
        ip: IpAddr,
    ) {
        self.counters.event(Event::AxonArpAnswered);
        match (host_ip, ip) {
            (IpAddr::V4(host_ip), IpAddr::V4(ip)) => self.arp_to_host(
                port,
                wire::arp::Operation::Reply,
                host_mac,
                mac,
                ip,
                host_mac,
                host_ip,
            ),
            (IpAddr::V6(host_ip), IpAddr::V6(ip)) => {
                self.na_to_host(port, host_mac, host_ip, ip, mac, true)
            }
            _ => {}
        }
    }

    /// A neighbour solicitation for `target` on host port `port`, in the name of
    /// `src_mac`/`src_ip`: to the target's MAC where it is known, else to its
    /// solicited-node group.
    pub(super) fn ns_to_host(
        &mut self,
        port: usize,
        dst: Option<MacAddr>,
        src_mac: MacAddr,
        src_ip: Ipv6Addr,
        target: Ipv6Addr,
    ) {
        let group = wire::ipv6::solicited_node(target);
        let (eth_dst, ip_dst) = match dst {
            Some(m) => (m, target),
            None => (wire::ipv6::multicast_mac(group), group),
        };
        let ns = wire::icmpv6::Repr::NeighborSolicit {
            target,
            options: wire::icmpv6::NdOptions {
                source_lladdr: Some(src_mac),
                ..Default::default()
            },
        };
        self.icmp6_to_host(port, eth_dst, src_mac, src_ip, ip_dst, &ns);
    }

    /// A neighbour advertisement to `dst_mac`/`dst_ip` on host port `port`: `target`
    /// is at `mac` (solicited or not; override set).
    pub(super) fn na_to_host(
        &mut self,
        port: usize,
        dst_mac: MacAddr,
        dst_ip: Ipv6Addr,
        target: Ipv6Addr,
        mac: MacAddr,
        solicited: bool,
    ) {
        let na = wire::icmpv6::Repr::NeighborAdvert {
            router: false,
            solicited,
            override_: true,
            target,
            options: wire::icmpv6::NdOptions {
                target_lladdr: Some(mac),
                ..Default::default()
            },
        };
        self.icmp6_to_host(port, dst_mac, mac, target, dst_ip, &na);
    }

    /// An ICMPv6 frame (hop limit 255, as neighbour discovery needs) out of host port
    /// `port`.
    pub(super) fn icmp6_to_host(
        &mut self,
        port: usize,
        eth_dst: MacAddr,
        eth_src: MacAddr,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        msg: &wire::icmpv6::Repr,
    ) {
        let mut c = self.pool.get();
        c.data.clear();
        c.data.extend_from_slice(&eth_dst.0);
        c.data.extend_from_slice(&eth_src.0);
        c.data.extend_from_slice(&ethertype::IPV6.to_be_bytes());
        c.data
            .resize(wire::ethernet::HEADER_LEN + 40 + msg.buffer_len(), 0);
        if wire::icmpv6::emit_packet(&mut c.data[14..], src, dst, 255, msg).is_err() {
            return self.pool.put(c);
        }
        let cp = self.cfg.ports.len();
        self.enqueue(port, c, cp);
    }
}
