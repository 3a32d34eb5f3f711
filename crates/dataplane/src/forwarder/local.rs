//! What the forwarder answers itself: ARP (requests it sends, requests and replies it
//! receives), packets addressed to the router (echo requests), and ICMP errors with their
//! rate limit (RFC 1812 4.3.2.8).

use super::*;

impl Forwarder {
    pub(super) fn send_arp_request(&mut self, port: u16, target: Ipv4Addr, tx: &mut TxQueues) {
        let ifc = &self.ifaces[port as usize];
        let mut f = self.pool.get();
        f.data.resize(ETH + arp::PACKET_LEN, 0);
        let eth = ethernet::Repr {
            dst: MacAddr::BROADCAST,
            src: ifc.mac,
            vlan: None,
            ethertype: ethertype::ARP,
        };
        let a = arp::Repr {
            operation: arp::Operation::Request,
            sender_mac: ifc.mac,
            sender_ip: ifc.addr,
            target_mac: MacAddr::ZERO,
            target_ip: target,
        };
        if eth.emit(&mut f.data).is_ok() && a.emit(&mut f.data[ETH..]).is_ok() {
            self.counters.event(Event::ArpRequestsSent);
            self.output(port, f, tx);
        } else {
            self.pool.put(f);
        }
    }

    pub(super) fn arp_input(&mut self, mut p: Pkt, now: Instant, tx: &mut TxQueues) {
        let port = p.meta.iface;
        let Ok(a) = arp::Packet::new_checked(&p.data[ETH..]) else {
            return self.drop_pkt(p, Drop::ArpMalformed);
        };
        let r = arp::Repr::parse(&a);
        let ifc = &self.ifaces[port as usize];
        let (our_mac, our_ip) = (ifc.mac, ifc.addr);
        let for_us = ifc.v4() == Some(r.target_ip);
        let sender_ok = !r.sender_ip.is_unspecified()
            && !martian_source(r.sender_ip)
            && !self.is_local(r.sender_ip)
            && !r.sender_mac.is_multicast();
        if sender_ok && (for_us || self.neighbours.contains(port, r.sender_ip)) {
            let waiting = self
                .neighbours
                .learn(port, r.sender_ip, r.sender_mac, now, for_us);
            self.counters.event(Event::ArpLearned);
            if let Some(peers) = &self.peers {
                for t in &peers.to {
                    let _ = t.try_send((port, r.sender_ip.into(), r.sender_mac));
                }
            }
            for mut w in waiting {
                self.set_macs(&mut w, port, r.sender_mac);
                self.output(port, w, tx);
            }
        }
        if for_us && r.operation == arp::Operation::Request {
            let reply = arp::Repr {
                operation: arp::Operation::Reply,
                sender_mac: our_mac,
                sender_ip: our_ip,
                target_mac: r.sender_mac,
                target_ip: r.sender_ip,
            };
            let eth = ethernet::Repr {
                dst: r.sender_mac,
                src: our_mac,
                vlan: None,
                ethertype: ethertype::ARP,
            };
            p.data.truncate(ETH + arp::PACKET_LEN);
            if eth.emit(&mut p.data).is_ok() && reply.emit(&mut p.data[ETH..]).is_ok() {
                self.counters.event(Event::ArpRepliesSent);
                self.output(port, p, tx);
                return;
            }
        }
        if for_us || sender_ok && self.neighbours.contains(port, r.sender_ip) {
            self.pool.put(p);
        } else {
            self.drop_pkt(p, Drop::ArpNotForUs);
        }
    }

    /// Datagrams addressed to one of our addresses; fragments go to reassembly first.
    pub(super) fn ip4_local(&mut self, mut p: Pkt, now: Instant, tx: &mut TxQueues) {
        let in_port = p.meta.iface;
        let fragment = match ipv4::Packet::new_checked(&p.data[ETH..]) {
            Ok(ip) => ip.is_fragment(),
            Err(_) => return self.drop_pkt(p, Drop::Ip4Truncated),
        };
        if fragment {
            match self.reasm.add(&p.data[ETH..], now) {
                Outcome::Held => return self.pool.put(p),
                Outcome::Dropped(why, n) => {
                    self.counters.count_n(why, n);
                    return self.pool.put(p);
                }
                Outcome::Complete(d, _) => {
                    self.counters.event(Event::Reassembled);
                    p.data.truncate(ETH);
                    p.data.extend_from_slice(&d);
                }
            }
        }
        let Ok(ip) = ipv4::Packet::new_checked(&p.data[ETH..]) else {
            return self.drop_pkt(p, Drop::Ip4Truncated);
        };
        match ip.protocol() {
            protocol::ICMP => {
                let Ok(icmp) = icmp::Packet::new_checked(ip.payload()) else {
                    return self.drop_pkt(p, Drop::LocalIcmpOther);
                };
                if !icmp.verify_checksum() {
                    return self.drop_pkt(p, Drop::LocalIcmpBadChecksum);
                }
                if icmp.msg_type() != icmp::kind::ECHO_REQUEST || icmp.code() != 0 {
                    return self.drop_pkt(p, Drop::LocalIcmpOther);
                }
                let reply = icmp::Repr::EchoReply {
                    ident: icmp.echo_ident(),
                    seq: icmp.echo_seq(),
                    data: icmp.data(),
                };
                let (src, dst, tos) = (ip.dst(), ip.src(), ip.tos());
                let mut out = self.pool.get();
                let ok = build_ip(&mut out, src, dst, tos, self.ident, &reply);
                self.ident = self.ident.wrapping_add(1);
                self.pool.put(p);
                if ok {
                    out.meta.iface = in_port;
                    self.counters.event(Event::EchoReplies);
                    self.local_output(out, now, tx);
                } else {
                    self.pool.put(out);
                }
            }
            protocol::UDP => {
                let e = IcmpError::Unreachable(unreachable::PORT);
                self.icmp_error(&p.data[ETH..], false, in_port, e, now, tx);
                self.drop_pkt(p, Drop::LocalUdp)
            }
            protocol::TCP => self.drop_pkt(p, Drop::LocalTcp),
            _ => {
                let e = IcmpError::Unreachable(unreachable::PROTOCOL);
                self.icmp_error(&p.data[ETH..], false, in_port, e, now, tx);
                self.drop_pkt(p, Drop::LocalProtocol)
            }
        }
    }

    /// Routes a packet the router made (echo reply, ICMP error). `p` holds a reserved
    /// Ethernet header and a complete IPv4 packet.
    pub(super) fn local_output(&mut self, p: Pkt, now: Instant, tx: &mut TxQueues) {
        let Ok(ip) = ipv4::Packet::new_checked(&p.data[ETH..]) else {
            return self.drop_pkt(p, Drop::LocalNoRoute);
        };
        let (dst, total) = (ip.dst(), ip.total_len());
        let Some(nh) = self.next_hop(dst, &p.data[ETH..]) else {
            return self.drop_pkt(p, Drop::LocalNoRoute);
        };
        let mtu = self.out_mtu(nh.port);
        let hop = nh.via.unwrap_or(dst);
        if total > mtu {
            self.fragment_out(p, nh.port, hop, mtu, now, tx);
        } else {
            self.neighbour_output(p, nh.port, hop, now, tx);
        }
    }

    pub(super) fn take_icmp_token(&mut self, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.icmp_refill);
        self.icmp_refill = now;
        let cap = self.cfg.icmp_burst as f64;
        self.icmp_tokens =
            (self.icmp_tokens + dt.as_secs_f64() * self.cfg.icmp_errors_per_sec as f64).min(cap);
        if self.icmp_tokens >= 1.0 {
            self.icmp_tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// As [`Forwarder::icmp_error`], from `from` if given (the address where the packet
    /// entered a star router) instead of the receiving interface's.
    pub(super) fn icmp_error_from(
        &mut self,
        orig: &[u8],
        in_port: u16,
        from: Option<Ipv4Addr>,
        e: IcmpError,
        now: Instant,
        tx: &mut TxQueues,
    ) {
        self.icmp_from = from;
        self.icmp_error(orig, false, in_port, e, now, tx);
        self.icmp_from = None;
    }

    /// Sends an ICMP error about `orig` (an IPv4 packet as received) if RFC 1812 allows.
    pub(super) fn icmp_error(
        &mut self,
        orig: &[u8],
        l2_group: bool,
        in_port: u16,
        e: IcmpError,
        now: Instant,
        tx: &mut TxQueues,
    ) {
        let Ok(ip) = ipv4::Packet::new_checked(orig) else {
            return;
        };
        let (src, dst) = (ip.src(), ip.dst());
        let about_icmp_error = ip.protocol() == protocol::ICMP
            && ip.frag_offset() == 0
            && ip.payload().first().is_none_or(|t| !icmp::is_query(*t));
        if l2_group
            || ip.frag_offset() != 0
            || about_icmp_error
            || dst.is_broadcast()
            || dst.is_multicast()
            || self.is_directed_broadcast(dst)
            || martian_source(src)
            || self.is_local(src)
            || self.is_directed_broadcast(src)
        {
            self.counters.count(Drop::IcmpSuppressed);
            return;
        }
        // From the receiving interface's address, or (an IPv6-only interface) another
        // interface's (RFC 1812 4.3.2.4 allows any); a router with no IPv4 address sends none.
        let Some(from) = self.icmp_from.or_else(|| self.source_v4(in_port)) else {
            self.counters.count(Drop::IcmpSuppressed);
            return;
        };
        if !self.take_icmp_token(now) {
            self.counters.count(Drop::IcmpRateLimited);
            return;
        }
        // RFC 1812 4.3.2.3: quote as much as fits in a 576-byte datagram.
        let quote = &ip.packet()[..ip.total_len().min(576 - 20 - icmp::HEADER_LEN)];
        let msg = match e {
            IcmpError::TimeExceeded => icmp::Repr::TimeExceeded {
                code: 0,
                data: quote,
            },
            IcmpError::ReasmTimeExceeded => icmp::Repr::TimeExceeded {
                code: 1,
                data: quote,
            },
            IcmpError::Unreachable(code) => icmp::Repr::DstUnreachable {
                code,
                next_hop_mtu: 0,
                data: quote,
            },
            IcmpError::FragNeeded(mtu) => icmp::Repr::DstUnreachable {
                code: unreachable::FRAG_NEEDED,
                next_hop_mtu: mtu,
                data: quote,
            },
            IcmpError::ParamProblem(pointer) => icmp::Repr::ParamProblem {
                pointer,
                data: quote,
            },
        };
        let mut out = self.pool.get();
        let ok = build_ip(&mut out, from, src, 0xc0, self.ident, &msg);
        self.ident = self.ident.wrapping_add(1);
        if ok {
            out.meta.iface = in_port;
            self.counters.event(Event::IcmpErrorsSent);
            self.local_output(out, now, tx);
        } else {
            self.pool.put(out);
        }
    }
}
