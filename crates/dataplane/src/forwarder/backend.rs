//! A back-end's side of DIST: frames from the interconnection, hellos with the table it
//! holds, the route writer's acknowledgements, and the gateways resolved before traffic needs
//! them.

use super::*;

impl Forwarder {
    /// DIST frames: accepted (and counted) on the internal port of a back-end only. A
    /// back-end needs nothing from them yet; the LBs and the Virtual-CP act on them.
    pub(super) fn dist_input(&mut self, p: Pkt, untagged: bool) {
        let internal = self.backend.as_ref().map(|b| b.internal);
        if !untagged || internal != Some(p.meta.iface) {
            return self.drop_pkt(p, Drop::DistNotInternal);
        }
        if let Some(to_lead) = &self.dist_share.to_lead {
            // The first worker checks and acts on every DIST frame (one replay window
            // per sender, one route writer).
            return match to_lead.try_send(p) {
                Ok(()) => self.counters.event(Event::DistHandedToLead),
                Err(
                    std::sync::mpsc::TrySendError::Full(p)
                    | std::sync::mpsc::TrySendError::Disconnected(p),
                ) => self.drop_pkt(p, Drop::DistQueueFull),
            };
        }
        if let Err(d) = self.dist_auth.check(&p.data) {
            return self.drop_pkt(p, d);
        }
        match wire::dist::Repr::parse(&p.data[ETH..]) {
            Ok(wire::dist::Repr {
                msg: wire::dist::Message::Routes(b),
                ..
            }) => {
                let src = MacAddr::from_slice(&p.data[6..12]);
                self.pool.put(p);
                let Some(link) = &self.fib_link else {
                    return self.counters.count(Drop::DistNoRouteWriter);
                };
                match link.to_writer.try_send((src, b)) {
                    Ok(()) => {
                        self.counters.event(Event::DistReceived);
                        self.counters.event(Event::DistRoutesReceived);
                    }
                    Err(_) => self.counters.count(Drop::DistQueueFull),
                }
            }
            Ok(wire::dist::Repr {
                msg: wire::dist::Message::Filters(c),
                ..
            }) => {
                use crate::acl::remote::Taken;
                let src = MacAddr::from_slice(&p.data[6..12]);
                self.pool.put(p);
                self.counters.event(Event::DistReceived);
                match self.filter_input.take(src, &c) {
                    Taken::Waiting => {}
                    Taken::Handed => self.counters.event(Event::DistFilterSets),
                    Taken::Answer(a) => self.filter_answers.push((src, a)),
                    Taken::Refused(_) => self.counters.count(Drop::DistFiltersRefused),
                }
            }
            Ok(wire::dist::Repr {
                msg: wire::dist::Message::FlowConfig(c),
                ..
            }) => {
                let src = MacAddr::from_slice(&p.data[6..12]);
                self.pool.put(p);
                self.counters.event(Event::DistReceived);
                if let Some(l) = &self.flow_remote {
                    if let Ok(mut h) = l.remote.heard.lock() {
                        *h = Some((src, c, Instant::now()));
                        self.counters.event(Event::DistFlowConfigs);
                    }
                }
            }
            Ok(_) => {
                self.counters.event(Event::DistReceived);
                self.pool.put(p);
            }
            Err(wire::dist::Error::BadVersion(_)) => self.drop_pkt(p, Drop::DistBadVersion),
            Err(_) => self.drop_pkt(p, Drop::DistMalformed),
        }
    }

    /// The global IPv6 addresses of the listed interfaces (the first 255), for a hello:
    /// the Virtual-CP shows them with the element's ports (the router's addresses reach
    /// its TAPs from the LBs' hellos).
    pub(super) fn hello_addrs6(&self) -> Vec<wire::dist::HelloAddr6> {
        let Some(six) = self.six.as_ref() else {
            return Vec::new();
        };
        crate::report::hello_addrs6(six.addrs.iter().map(|l| {
            l.iter()
                .copied()
                .filter(|(a, _)| !wire::ipv6::is_link_local(*a))
        }))
    }

    /// The counters of this forwarder: of every worker, summed, on a back-end's first.
    pub(super) fn group_counters(&self) -> crate::counters::Snapshot {
        crate::counters::Snapshot::sum(&self.dist_share.group)
            .unwrap_or_else(|| self.counters.snapshot())
    }

    /// Sends a hello if one is due.
    pub(super) fn send_hello(&mut self, now: Instant, tx: &mut TxQueues) {
        let Some(b) = self.backend.as_mut() else {
            return;
        };
        if !b.lead || now < b.next {
            return;
        }
        b.next = now + b.interval;
        b.seq = b.seq.wrapping_add(1);
        // The route writer's table as it is now (the last one seen if the writer holds
        // the lock this moment).
        if let Some(t) = self.fib_link.as_ref().and_then(|l| l.table.try_lock().ok()) {
            b.state = wire::dist::HelloState {
                incarnation: b.state.incarnation,
                ..*t
            };
        }
        let (internal, seq, interval, state) = (b.internal, b.seq, b.interval, b.state);
        let ports = self
            .ifaces
            .iter()
            .enumerate()
            .map(|(i, ifc)| wire::dist::HelloPort {
                mac: ifc.mac,
                addr: ifc.addr,
                prefix_len: ifc.prefix_len,
                role: if i as u16 == internal {
                    wire::dist::PortRole::Internal
                } else {
                    wire::dist::PortRole::External
                },
                vlan: ifc.vlan.map(|v| v.id).unwrap_or(0),
                speed_mbps: ifc.speed_mbps,
            })
            .take(255)
            .collect();
        let hello = wire::dist::Repr {
            seq,
            msg: crate::report::hello(
                wire::dist::ElementKind::Forwarder,
                interval,
                self.group_counters().totals(),
                ports,
                self.hello_addrs6(),
                Some(state),
            ),
        };
        let Some(ifc) = self.ifaces.get(internal as usize) else {
            return;
        };
        let ifc_mac = ifc.mac;
        if let Ok(mut frame) = hello.to_frame(ifc.mac, MacAddr::BROADCAST) {
            self.dist_auth.seal(&mut frame);
            let mut p = self.pool.get();
            p.data.extend_from_slice(&frame);
            self.counters.event(Event::DistHellosSent);
            self.output(internal, p, tx);
        }
        if let Some(name) = self.report.due(now) {
            // A back-end's ports all face the inside of the router.
            let (names, sum) = (&self.counters.port_names, self.group_counters());
            for m in crate::report::counter_reports_of(&name, names, sum, &[]) {
                let seq = match self.backend.as_mut() {
                    Some(b) => {
                        b.seq = b.seq.wrapping_add(1);
                        b.seq
                    }
                    None => return,
                };
                let r = wire::dist::Repr { seq, msg: m };
                if let Ok(mut frame) = r.to_frame(ifc_mac, MacAddr::BROADCAST) {
                    self.dist_auth.seal(&mut frame);
                    let mut p = self.pool.get();
                    p.data.extend_from_slice(&frame);
                    self.counters.event(Event::DistReportsSent);
                    self.output(internal, p, tx);
                }
            }
        }
    }

    /// Sends the ended flows the exporter's thread put in frames (for the controller) out
    /// of the internal port.
    fn send_flow_records(&mut self, tx: &mut TxQueues) {
        let (Some(l), Some(b)) = (&self.flow_remote, &self.backend) else {
            return;
        };
        let internal = b.internal;
        let frames: Vec<Vec<u8>> = l.frames.try_iter().take(64).collect();
        for frame in frames {
            let mut p = self.pool.get();
            p.data.extend_from_slice(&frame);
            self.counters.event(Event::DistFlowRecordsSent);
            self.output(internal, p, tx);
        }
    }

    /// Sends the answers to the controller's filter sets out of the internal port.
    fn send_filter_answers(&mut self, tx: &mut TxQueues) {
        let mut answers = std::mem::take(&mut self.filter_answers);
        answers.extend(self.filter_input.answers());
        for (to, mut a) in answers {
            let Some(b) = self.backend.as_mut() else {
                return;
            };
            b.seq = b.seq.wrapping_add(1);
            a.incarnation = b.state.incarnation;
            let (internal, seq) = (b.internal, b.seq);
            let Some(mac) = self.ifaces.get(internal as usize).map(|i| i.mac) else {
                return;
            };
            let r = wire::dist::Repr {
                seq,
                msg: wire::dist::Message::FiltersAck(a),
            };
            if let Ok(mut frame) = r.to_frame(mac, to) {
                self.dist_auth.seal(&mut frame);
                let mut p = self.pool.get();
                p.data.extend_from_slice(&frame);
                self.counters.event(Event::DistFilterAnswers);
                self.output(internal, p, tx);
            }
        }
    }

    /// Sends what the route writer answered (acknowledgements) and the answers to filter
    /// sets out of the internal port.
    pub(super) fn send_writer_frames(&mut self, tx: &mut TxQueues) {
        self.send_filter_answers(tx);
        self.send_flow_records(tx);
        let (Some(link), Some(b)) = (&self.fib_link, &self.backend) else {
            return;
        };
        let internal = b.internal;
        let mut six = Vec::new();
        while let Ok(changes) = link.routes6.try_recv() {
            six.extend(changes);
        }
        while let Ok(frame) = link.from_writer.try_recv() {
            let mut p = self.pool.get();
            p.data.extend_from_slice(&frame);
            self.output(internal, p, tx);
        }
        if !six.is_empty() {
            let (n, skipped) = self.apply_routes6(six);
            self.counters.event_n(Event::DistRoutes6Applied, n as u64);
            self.counters
                .event_n(Event::DistRoutes6Skipped, skipped as u64);
        }
    }

    /// Starts resolving every gateway of the table's next hops that the neighbour table
    /// does not know yet, once per table published: a gateway is then resolved before
    /// traffic needs it, and a burst to it (the flows an LB moves to a back-end that was
    /// drained, a table's first use after a restart) waits for no ARP round trip with only
    /// `queue_len` packets held. Bounded per call; the rest at the next.
    pub(super) fn resolve_gateways(&mut self, now: Instant, tx: &mut TxQueues) {
        let held = self.snap.is_some();
        self.resolve_gateways_of_snapshot(now, tx);
        if !held {
            // As a batch's end does: the route writer may reuse what it published.
            self.snap = None;
        }
    }

    pub(super) fn resolve_gateways_of_snapshot(&mut self, now: Instant, tx: &mut TxQueues) {
        self.load_snapshot();
        let Some((_, groups)) = &self.snap else {
            return;
        };
        let id = Arc::as_ptr(groups) as usize;
        if id == self.gateways_resolved {
            return;
        }
        let mut want: Vec<(u16, Ipv4Addr)> = groups
            .iter()
            .flat_map(|g| g.iter())
            .filter_map(|h| h.via.map(|gw| (h.port, gw)))
            .collect();
        want.sort_unstable();
        want.dedup();
        const MOST: usize = 256;
        let mut sent = 0;
        for (port, gw) in want {
            if sent == MOST {
                return; // the rest at the next poll (this table not marked done)
            }
            if self.neighbours.resolve(port, gw, now) {
                self.send_arp_request(port, gw, tx);
                sent += 1;
            }
        }
        self.gateways_resolved = id;
    }
}
