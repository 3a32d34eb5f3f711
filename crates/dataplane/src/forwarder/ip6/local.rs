//! IPv6 packets the forwarder answers itself: neighbour discovery (solicitations it sends,
//! solicitations and advertisements it receives), echo, and ICMPv6 errors.

use super::*;

impl Forwarder {
    /// Packets addressed to the router: neighbour discovery and echo; fragments go to
    /// reassembly first.
    pub(in crate::forwarder) fn ip6_local(&mut self, mut p: Pkt, now: Instant, tx: &mut TxQueues) {
        let fragment = match ipv6::Packet::new_checked(&p.data[ETH..]).map(|ip| ip.upper()) {
            Ok(Ok(u)) => u.fragment,
            _ => return self.drop_pkt(p, Drop::Ip6Malformed),
        };
        if let Some(f) = fragment {
            match self.reassemble6(p, f, now, tx) {
                Some(whole) => p = whole,
                None => return,
            }
        }
        let in_if = p.meta.iface;
        let frame_src = MacAddr::from_slice(&p.data[6..12]);
        let Ok(ip) = ipv6::Packet::new_checked(&p.data[ETH..]) else {
            return self.drop_pkt(p, Drop::Ip6Malformed);
        };
        let (src, dst, hops) = (ip.src(), ip.dst(), ip.hop_limit());
        let Ok(u) = ip.upper() else {
            return self.drop_pkt(p, Drop::Ip6Malformed);
        };
        if u.fragment.is_some() {
            // A fragment header inside a reassembled packet.
            return self.drop_pkt(p, Drop::ReasmMalformed);
        }
        if u.protocol != next_header::ICMPV6 {
            return self.drop_pkt(p, Drop::Ip6LocalOther);
        }
        if !ip.verify_upper_checksum(&u) {
            return self.drop_pkt(p, Drop::LocalIcmpBadChecksum);
        }
        let Ok(m) = icmpv6::Packet::new_checked(&ip.packet()[u.offset..]) else {
            return self.drop_pkt(p, Drop::Ip6Malformed);
        };
        let Ok(r) = icmpv6::Repr::parse(&m) else {
            return self.drop_pkt(p, Drop::Nd6Invalid);
        };
        match r {
            icmpv6::Repr::NeighborSolicit { target, options } => {
                // RFC 4861 7.1.1: hop limit 255, a target that is not multicast, and no
                // source link-layer option from the unspecified address.
                let unspecified = src.is_unspecified();
                if hops != 255
                    || target.is_multicast()
                    || (unspecified && options.source_lladdr.is_some())
                {
                    return self.drop_pkt(p, Drop::Nd6Invalid);
                }
                let ours = self.six.as_ref().is_some_and(|s| s.is_ours(in_if, target));
                if !unspecified {
                    if let Some(mac) = options.source_lladdr {
                        self.learn6(in_if, src, mac, ours, true, now, tx);
                    }
                }
                if !ours {
                    return self.drop_pkt(p, Drop::Nd6NotForUs);
                }
                let mac = self.ifaces[in_if as usize].mac;
                let (to, to_mac, na) =
                    icmpv6::answer_solicit(src, options.source_lladdr, frame_src, target, mac);
                self.pool.put(p);
                self.send6(in_if, target, to, to_mac, 255, &na, tx);
                self.counters.event(Event::Nd6AdvertsSent);
            }
            icmpv6::Repr::NeighborAdvert {
                solicited,
                target,
                options,
                ..
            } => {
                // RFC 4861 7.1.2: hop limit 255, a unicast target, and a multicast
                // destination only for an unsolicited advertisement.
                if hops != 255 || target.is_multicast() || (solicited && dst.is_multicast()) {
                    return self.drop_pkt(p, Drop::Nd6Invalid);
                }
                let mac = options.target_lladdr.unwrap_or(frame_src);
                self.pool.put(p);
                self.learn6(in_if, target, mac, true, true, now, tx);
            }
            icmpv6::Repr::EchoRequest { ident, seq, data } if !dst.is_multicast() => {
                let data = data.to_vec();
                let reply = icmpv6::Repr::EchoReply {
                    ident,
                    seq,
                    data: &data,
                };
                self.pool.put(p);
                self.counters.event(Event::EchoReplies);
                self.local_output6(in_if, dst, src, &reply, now, tx);
            }
            icmpv6::Repr::RouterSolicit { options } => {
                // RFC 4861 6.1.1: hop limit 255, and no source link-layer option from the
                // unspecified address.
                if hops != 255 || (src.is_unspecified() && options.source_lladdr.is_some()) {
                    return self.drop_pkt(p, Drop::Nd6Invalid);
                }
                let Some(r) = self.six.as_mut().and_then(|s| s.ra.get_mut(in_if as usize)) else {
                    return self.drop_pkt(p, Drop::Nd6RouterSolicitRaOff);
                };
                if !r.on {
                    return self.drop_pkt(p, Drop::Nd6RouterSolicitRaOff);
                }
                self.pool.put(p);
                // Now, or as soon as the last multicast advertisement is 3 s old.
                let at = r.last.map_or(now, |l| (l + RA_MIN_DELAY).max(now));
                r.next = Some(r.next.map_or(at, |n| n.min(at)));
                if at <= now {
                    self.send_ra(in_if, now, tx);
                }
            }
            _ => self.drop_pkt(p, Drop::Ip6LocalOther),
        }
    }

    /// Learns `ip` at `mac` on `iface`: an entry being resolved is resolved and its queue
    /// sent; an unknown one is created only if `create`. With `share`, sibling workers
    /// learn it too.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::forwarder) fn learn6(
        &mut self,
        iface: u16,
        ip: Ipv6Addr,
        mac: MacAddr,
        create: bool,
        share: bool,
        now: Instant,
        tx: &mut TxQueues,
    ) {
        let reachable = Duration::from_secs(self.cfg.neighbour.reachable_secs);
        let max_entries = self.cfg.neighbour.max_entries;
        let Some(six) = self.six.as_mut() else {
            return;
        };
        let full = six.neighbours.len() >= max_entries;
        let queue = match six.neighbours.get_mut(&(iface, ip)) {
            Some(n) => {
                n.mac = Some(mac);
                n.deadline = now + reachable;
                n.tries = 0;
                std::mem::take(&mut n.queue)
            }
            None if create && !full => {
                six.neighbours.insert(
                    (iface, ip),
                    Neighbour6 {
                        mac: Some(mac),
                        deadline: now + reachable,
                        tries: 0,
                        queue: Vec::new(),
                    },
                );
                Vec::new()
            }
            None => return,
        };
        six.queued -= queue.len();
        self.counters.event(Event::Nd6Learned);
        if let (true, Some(peers)) = (share, &self.peers) {
            for t in &peers.to {
                let _ = t.try_send((iface, ip.into(), mac));
            }
        }
        for mut q in queue {
            self.set_macs6(&mut q, iface, mac);
            self.output(iface, q, tx);
        }
    }

    pub(in crate::forwarder) fn set_macs6(&self, p: &mut Pkt, iface: u16, dst: MacAddr) {
        self.set_macs_of(p, iface, dst, ethertype::IPV6);
    }

    /// Sends `p` (a reserved Ethernet header and an IPv6 packet) to `hop` on `iface`,
    /// resolving it first if need be.
    pub(in crate::forwarder) fn neighbour_output6(
        &mut self,
        mut p: Pkt,
        iface: u16,
        hop: Ipv6Addr,
        now: Instant,
        tx: &mut TxQueues,
    ) {
        let n = self.cfg.neighbour;
        let Some(six) = self.six.as_mut() else {
            return self.drop_pkt(p, Drop::EthertypeUnsupported);
        };
        if let Some(m) = six.star_member(iface, hop) {
            return self.star_output6(p, m, hop, tx);
        }
        let (full, queued) = (six.neighbours.len() >= n.max_entries, six.queued);
        match six.neighbours.get_mut(&(iface, hop)) {
            Some(e) if e.mac.is_some() && now < e.deadline => {
                let mac = e.mac.unwrap_or(MacAddr::ZERO);
                self.set_macs6(&mut p, iface, mac);
                self.output(iface, p, tx);
            }
            Some(e) if e.mac.is_some() => {
                // Stale: resolve again, holding this packet.
                e.mac = None;
                e.tries = 1;
                e.deadline = now + Duration::from_millis(n.retry_ms);
                e.queue.push(p);
                six.queued += 1;
                self.send_ns(iface, hop, tx);
            }
            Some(e) => {
                if e.queue.len() >= n.queue_len || queued >= n.max_queued {
                    return self.drop_pkt(p, Drop::Nd6QueueFull);
                }
                e.queue.push(p);
                six.queued += 1;
            }
            None if full => self.drop_pkt(p, Drop::Nd6TableFull),
            None => {
                six.neighbours.insert(
                    (iface, hop),
                    Neighbour6 {
                        mac: None,
                        deadline: now + Duration::from_millis(n.retry_ms),
                        tries: 1,
                        queue: vec![p],
                    },
                );
                six.queued += 1;
                self.send_ns(iface, hop, tx);
            }
        }
    }

    /// Sends a neighbor solicitation for `target` out of `iface`.
    pub(in crate::forwarder) fn send_ns(
        &mut self,
        iface: u16,
        target: Ipv6Addr,
        tx: &mut TxQueues,
    ) {
        let Some(six) = self.six.as_ref() else {
            return;
        };
        let src = six.source_for(iface, target);
        let group = ipv6::solicited_node(target);
        let ns = icmpv6::Repr::NeighborSolicit {
            target,
            options: NdOptions {
                source_lladdr: Some(self.ifaces[iface as usize].mac),
                ..NdOptions::default()
            },
        };
        self.send6(iface, src, group, ipv6::multicast_mac(group), 255, &ns, tx);
        self.counters.event(Event::Nd6SolicitsSent);
    }

    /// Builds an IPv6 packet carrying `msg` and sends it out of `iface` to `mac`.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::forwarder) fn send6(
        &mut self,
        iface: u16,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        mac: MacAddr,
        hop_limit: u8,
        msg: &icmpv6::Repr,
        tx: &mut TxQueues,
    ) {
        let mut f = self.pool.get();
        if !build_ip6(&mut f, src, dst, hop_limit, msg) {
            return self.pool.put(f);
        }
        self.set_macs6(&mut f, iface, mac);
        self.output(iface, f, tx);
    }

    /// Sends a message the router made from `src` to `dst`, routed (a link-local `dst` is
    /// on `in_if`).
    pub(in crate::forwarder) fn local_output6(
        &mut self,
        in_if: u16,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        msg: &icmpv6::Repr,
        now: Instant,
        tx: &mut TxQueues,
    ) {
        let hop = if is_link_local(dst) {
            Some(Hop6 {
                iface: in_if,
                via: None,
            })
        } else {
            self.route6(dst)
        };
        let Some(hop) = hop else {
            return self.counters.count(Drop::LocalNoRoute);
        };
        let mut f = self.pool.get();
        if !build_ip6(&mut f, src, dst, 64, msg) {
            return self.pool.put(f);
        }
        let (mtu, via) = (self.out_mtu6(hop.iface), hop.via.unwrap_or(dst));
        if f.data.len() - ETH <= mtu {
            return self.neighbour_output6(f, hop.iface, via, now, tx);
        }
        // Larger than the link (an echo reply to a large request): the router is this
        // packet's source, and a source fragments (RFC 8200 4.5).
        let Some(six) = self.six.as_mut() else {
            return self.pool.put(f);
        };
        let ident = six.frag_ident;
        six.frag_ident = six.frag_ident.wrapping_add(1);
        let mut parts = Vec::new();
        let pool = &mut self.pool;
        let r = crate::frag::fragment6(&f.data[ETH..], mtu, ident, |h, d| {
            let mut q = pool.get();
            q.data.resize(ETH, 0);
            q.data.extend_from_slice(h);
            q.data.extend_from_slice(d);
            parts.push(q);
        });
        if r.is_err() {
            // Only on a link below IPv6's minimum MTU, which the configuration refuses.
            for q in parts {
                self.pool.put(q);
            }
            return self.drop_pkt(f, Drop::Ip6TooBig);
        }
        self.pool.put(f);
        for q in parts {
            self.counters.event(Event::Fragmented6);
            self.neighbour_output6(q, hop.iface, via, now, tx);
        }
    }

    /// Sends an ICMPv6 error about `orig` (an IPv6 packet as received on `in_if`) if RFC
    /// 4443 allows it and the rate limit has a token.
    pub(in crate::forwarder) fn icmp6_error(
        &mut self,
        orig: &[u8],
        in_if: u16,
        e: ErrorKind,
        now: Instant,
        tx: &mut TxQueues,
    ) {
        self.icmp6_error_from(orig, in_if, None, e, now, tx)
    }

    /// As [`Forwarder::icmp6_error`], from `from` if given (a star member's error about a
    /// packet that entered the router elsewhere comes from that address).
    pub(in crate::forwarder) fn icmp6_error_from(
        &mut self,
        orig: &[u8],
        in_if: u16,
        from: Option<Ipv6Addr>,
        e: ErrorKind,
        now: Instant,
        tx: &mut TxQueues,
    ) {
        if icmpv6::error_allowed(orig, e, false).is_err() {
            return self.counters.count(Drop::IcmpSuppressed);
        }
        if !self.take_icmp_token(now) {
            return self.counters.count(Drop::IcmpRateLimited);
        }
        let Ok(ip) = ipv6::Packet::new_checked(orig) else {
            return;
        };
        let (to, dst) = (ip.src(), ip.dst());
        // RFC 4443 2.2: about a packet sent to one of our unicast addresses, from that
        // address; otherwise from the interface's address that suits the destination.
        let Some(src) = self.six.as_ref().map(|s| {
            if let Some(f) = from {
                f
            } else if s.is_ours(in_if, dst) || s.is_ours_anywhere(dst) {
                dst
            } else {
                s.source_for(in_if, to)
            }
        }) else {
            return;
        };
        let Some(pkt) = icmpv6::build_error(orig, e, src, 64) else {
            return;
        };
        let Ok(q) = ipv6::Packet::new_checked(&pkt[..]) else {
            return;
        };
        let Ok(m) = icmpv6::Packet::new_checked(q.payload()) else {
            return;
        };
        let Ok(msg) = icmpv6::Repr::parse(&m) else {
            return;
        };
        self.counters.event(Event::IcmpErrorsSent);
        self.local_output6(in_if, src, to, &msg, now, tx);
    }
}
